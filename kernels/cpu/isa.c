/*
 * isa.c: what the CPU has (isa.h), from CPUID and XGETBV read directly
 * (compilers disagree on which feature names __builtin_cpu_supports knows),
 * less what ORTEP_CPU_HIDE hides; once per process.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const struct {
  const char *name;
  unsigned bits; /* the set and those that need it */
} hideable[] = {
    {"avx2", ~0u},
    {"avx512", ~(unsigned)ORTEP_ISA_AVX2},
    {"avx512f", ~(unsigned)ORTEP_ISA_AVX2},
    {"avx512bw", ORTEP_ISA_AVX512BW},
    {"avx512vl", ORTEP_ISA_AVX512VL},
    {"avx512bf16", ORTEP_ISA_AVX512BF16},
    {"avx512vnni", ORTEP_ISA_AVX512VNNI},
};

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static unsigned isa;
static char isa_error[200]; /* why ORTEP_CPU_HIDE was refused; "" when it was not */

#if defined(__x86_64__) && !defined(ORTEP_SIMD_EMULATED)
static unsigned xcr0(void) {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return lo;
}

static unsigned cpuid_isa(void) {
  unsigned a, b, c, d, r = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c) || (xcr0() & 6u) != 6u) return 0; /* XMM and YMM state enabled */
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  unsigned subleaves = a;
  if (b & (1u << 5)) r |= ORTEP_ISA_AVX2;
  /* XMM, YMM, opmask, ZMM0-15 upper halves and ZMM16-31 state enabled */
  if ((b & (1u << 16)) && (xcr0() & 0xe6u) == 0xe6u) r |= ORTEP_ISA_AVX512F;
  if (b & (1u << 30)) r |= ORTEP_ISA_AVX512BW;
  if (b & (1u << 31)) r |= ORTEP_ISA_AVX512VL;
  if (c & (1u << 11)) r |= ORTEP_ISA_AVX512VNNI;
  if (subleaves >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    if (a & (1u << 5)) r |= ORTEP_ISA_AVX512BF16;
  }
  return r;
}
#endif

/* The CPU's sets: CPUID's, or in the emulated test build all of them. */
static unsigned detected(void) {
#if defined(ORTEP_SIMD_EMULATED)
  return ORTEP_ISA_AVX2 | ORTEP_ISA_AVX512F | ORTEP_ISA_AVX512BW | ORTEP_ISA_AVX512VL | ORTEP_ISA_AVX512BF16 |
         ORTEP_ISA_AVX512VNNI;
#elif defined(__x86_64__)
  return cpuid_isa();
#else
  return 0;
#endif
}

/* ORTEP_CPU_HIDE's sets as bits; false (isa_error says why) for a name that is not one. */
static bool hidden(const char *list, unsigned *out) {
  *out = 0;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    size_t i = 0;
    while (i < sizeof hideable / sizeof *hideable &&
           !(strlen(hideable[i].name) == n && !strncmp(hideable[i].name, p, n)))
      i++;
    if (n && i == sizeof hideable / sizeof *hideable) {
      snprintf(isa_error, sizeof isa_error,
               "ORTEP_CPU_HIDE='%.32s': '%.*s' is not an instruction set; use a comma-separated list of avx2, avx512, "
               "avx512f, avx512bw, avx512vl, avx512bf16 and avx512vnni",
               list, (int)(n < 20 ? n : 20), p);
      return false;
    }
    if (n) *out |= hideable[i].bits;
    p += n + (p[n] == ',');
  }
  return true;
}

static void detect(void) {
  const char *list = getenv("ORTEP_CPU_HIDE");
  unsigned hide = 0;
  if (list && !hidden(list, &hide)) return; /* isa stays 0 and the check fails */
  unsigned r = detected() & ~hide;
  if (!(r & ORTEP_ISA_AVX2)) r = 0;                  /* the AVX-512 kernels use AVX2's too */
  if (!(r & ORTEP_ISA_AVX512F)) r &= ORTEP_ISA_AVX2; /* and every AVX-512 extension needs AVX-512F */
  isa = r;
}

unsigned ortep__cpu_isa(void) {
  pthread_once(&isa_once, detect);
  return isa;
}

ortep_status ortep__cpu_isa_check(void) {
  pthread_once(&isa_once, detect);
  if (isa_error[0]) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cpu_ep: %s", isa_error);
  return ORTEP_OK;
}

bool ortep__cpu_is_intel(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* "Genu" "ineI" "ntel" */
#else
  return false;
#endif
}

bool ortep__cpu_isa_emulated(void) {
#if defined(ORTEP_SIMD_EMULATED)
  return true;
#else
  return false;
#endif
}
