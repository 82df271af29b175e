/*
 * isa.h: the x86-64 instruction sets the CPU EP's kernels may use, read once
 * per process from CPUID and XGETBV (isa.c). The one place the kernels learn
 * what the CPU has: ops.c picks its set of dot products from it, quant.c its
 * integer kernels.
 *
 * ORTEP_CPU_HIDE (a comma-separated list of the names below) treats sets as
 * absent, as if CPUID did not report them: ORTEP_CPU_HIDE=avx512 makes an
 * AVX-512 machine run every kernel as an AVX2-only one does (CI checks the
 * AVX2-only paths that way), avx512bf16,avx512vnni as an AVX-512 CPU without
 * those extensions does. Hiding a set hides the sets that need it (avx2: all;
 * avx512f: every avx512*).
 *
 * In the emulated test build (ORTEP_SIMD_EMULATED, simd.h) the CPU has every
 * set: SIMDe implements the ones the hardware lacks.
 */
#ifndef ORTEP_KERNELS_CPU_ISA_H
#define ORTEP_KERNELS_CPU_ISA_H

#include <stdbool.h>

#include "ortep/status.h"

enum {
  ORTEP_ISA_AVX2 = 1u << 0,    /* with FMA and F16C, the YMM state saved by the OS */
  ORTEP_ISA_AVX512F = 1u << 1, /* the opmask and ZMM state saved by the OS too */
  ORTEP_ISA_AVX512BW = 1u << 2,
  ORTEP_ISA_AVX512VL = 1u << 3,
  ORTEP_ISA_AVX512BF16 = 1u << 4,
  ORTEP_ISA_AVX512VNNI = 1u << 5,
};

/* The sets this process may use (ORTEP_ISA_* bits): the CPU's, less
 * ORTEP_CPU_HIDE's; 0 off x86-64 and when ORTEP_CPU_HIDE is refused. */
unsigned ortep__cpu_isa(void);
/* Fails, saying why, when ORTEP_CPU_HIDE names something that is not a set. */
ortep_status ortep__cpu_isa_check(void);
/* Whether the CPU's vendor is Intel (some kernels prefetch only there). */
bool ortep__cpu_is_intel(void);
/* Whether the AVX-512 sets are SIMDe's emulation (the emulated test build). */
bool ortep__cpu_isa_emulated(void);

#endif
