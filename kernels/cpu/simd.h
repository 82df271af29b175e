/*
 * simd.h: the x86 intrinsics the CPU EP's kernels are written in, and the
 * target attributes that let one file hold kernels for several instruction
 * sets (the kernels run only where isa.h says the CPU has their set).
 *
 * With ORTEP_SIMD_EMULATED (the emulated test build: the kernel files
 * compiled a second time with -mavx2 -mfma -mf16c, tests/CMakeLists.txt)
 * the intrinsics are SIMDe's (libsimde-dev) instead, so the AVX-512, BF16
 * and VNNI kernels run, and are checked, on a CPU without them: SIMDe builds
 * each 512-bit operation from native 256-bit ones, lane by lane the same
 * IEEE operations. The target attributes are then empty (an AVX-512 target
 * would let the compiler emit AVX-512 instructions). Below are the
 * intrinsics this SIMDe release lacks, vdpbf16ps, whose SIMDe version adds
 * a lane's two products in the other order, and vpdpbusd, whose SIMDe
 * version overflows a signed int where the instruction wraps, each written
 * as the instruction's definition in Intel's manual (test_simd_emulated
 * checks them against the hardware where the CPU has the set).
 */
#ifndef ORTEP_KERNELS_CPU_SIMD_H
#define ORTEP_KERNELS_CPU_SIMD_H

#if defined(__x86_64__)
#if !defined(ORTEP_SIMD_EMULATED)
#include <immintrin.h>

#define ORTEP_TARGET(sets) __attribute__((target(sets)))
#define ORTEP_SIMD_AVX2    ORTEP_TARGET("avx2,fma,f16c")
#define ORTEP_SIMD_AVX512  ORTEP_TARGET("avx512f,avx2,fma,f16c")
#define ORTEP_SIMD_AVX2_VL ORTEP_TARGET("avx512f,avx512vl,avx2,fma,f16c")
#define ORTEP_SIMD_BW      ORTEP_TARGET("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#define ORTEP_SIMD_BF16    ORTEP_TARGET("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")
#define ORTEP_SIMD_VNNI    ORTEP_TARGET("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#else
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "ORTEP_SIMD_EMULATED: compile with -mavx2 -mfma -mf16c"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>

#define ORTEP_TARGET(sets) __attribute__((target(sets)))
#define ORTEP_SIMD_AVX2    ORTEP_TARGET("avx2,fma,f16c")
#define ORTEP_SIMD_AVX512
#define ORTEP_SIMD_AVX2_VL
#define ORTEP_SIMD_BW
#define ORTEP_SIMD_BF16
#define ORTEP_SIMD_VNNI

/* 512 bits as two native 256-bit halves and back */
static inline __m256 emu_lo_ps(simde__m512 a) { return simde_mm512_castps512_ps256(a); }
static inline __m256 emu_hi_ps(simde__m512 a) {
  return simde_mm256_castpd_ps(simde_mm512_extractf64x4_pd(simde_mm512_castps_pd(a), 1));
}
static inline simde__m512 emu_join_ps(__m256 lo, __m256 hi) {
  return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(lo), hi, 1);
}
static inline __m256i emu_lo_si(simde__m512i a) { return simde_mm512_castsi512_si256(a); }
static inline __m256i emu_hi_si(simde__m512i a) { return simde_mm512_extracti64x4_epi64(a, 1); }
static inline simde__m512i emu_join_si(__m256i lo, __m256i hi) {
  return simde_mm512_inserti64x4(simde_mm512_castsi256_si512(lo), hi, 1);
}

/* SIMDe has it without the native alias (and GCC's own is a macro without -O) */
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)

static inline simde__m512 emu_cvtph_ps(__m256i h) {
  return emu_join_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(h) emu_cvtph_ps(h)

static inline simde__m512i emu_cvtepu16_epi32(__m256i h) {
  return emu_join_si(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)),
                     _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)));
}
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(h) emu_cvtepu16_epi32(h)

static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
  return emu_join_ps(_mm256_cvtepi32_ps(emu_lo_si(a)), _mm256_cvtepi32_ps(emu_hi_si(a)));
}
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) emu_cvtepi32_ps(a)

static inline simde__m512i emu_cvttps_epi32(simde__m512 a) {
  return emu_join_si(_mm256_cvttps_epi32(emu_lo_ps(a)), _mm256_cvttps_epi32(emu_hi_ps(a)));
}
#undef _mm512_cvttps_epi32
#define _mm512_cvttps_epi32(a) emu_cvttps_epi32(a)

/* vpmovdb: each lane's low byte */
static inline __m128i emu_cvtepi32_epi8(simde__m512i a) {
  int32_t v[16];
  uint8_t b[16];
  memcpy(v, &a, sizeof v);
  for (int i = 0; i < 16; i++) b[i] = (uint8_t)v[i];
  return _mm_loadu_si128((const __m128i *)b);
}
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8(a) emu_cvtepi32_epi8(a)

static inline float emu_cvtss_f32(simde__m512 a) { return _mm_cvtss_f32(simde_mm512_castps512_ps128(a)); }
#undef _mm512_cvtss_f32
#define _mm512_cvtss_f32(a) emu_cvtss_f32(a)

#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask(k, a, b, imm) ((simde__mmask16)((k)&simde_mm512_cmp_ps_mask(a, b, imm)))

/* the masked lanes only are read (the others may lie past the end of memory), the rest zero */
static inline simde__m512 emu_maskz_loadu_ps(simde__mmask16 k, const void *p) {
  float v[16] = {0};
  for (int i = 0; i < 16; i++)
    if (k & (1u << i)) memcpy(v + i, (const char *)p + 4 * i, 4);
  return simde_mm512_loadu_ps(v);
}
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) emu_maskz_loadu_ps(k, p)

static inline void emu_mask_storeu_epi16(void *p, simde__mmask16 k, __m256i a) {
  uint16_t v[16];
  memcpy(v, &a, sizeof v);
  for (int i = 0; i < 16; i++)
    if (k & (1u << i)) memcpy((char *)p + 2 * i, v + i, 2);
}
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16(p, k, a) emu_mask_storeu_epi16(p, k, a)

/* the only rounding the kernels ask for is the default one (nearest even) */
#undef _mm512_add_round_ps
#define _mm512_add_round_ps(a, b, r) \
  ((void)sizeof(char[(r) == (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) ? 1 : -1]), simde_mm512_add_ps(a, b))

/* GCC's order: the halves, then the quarters, then pairs */
static inline float emu_reduce_max_ps(simde__m512 a) {
  __m256 t = _mm256_max_ps(emu_hi_ps(a), emu_lo_ps(a));
  __m128 q = _mm_max_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  q = _mm_max_ps(q, _mm_shuffle_ps(q, q, 0x4e));
  q = _mm_max_ps(q, _mm_shuffle_ps(q, q, 0xb1));
  return _mm_cvtss_f32(q);
}
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(a) emu_reduce_max_ps(a)

/* vcvtneps2bf16 and vdpbf16ps read denormals as zero, flush denormal results
 * to zero and round to nearest even whatever MXCSR says */
static inline float emu_daz(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  memcpy(&x, &u, 4);
  return x;
}
static inline uint16_t emu_bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u); /* zero or denormal: signed zero */
  if ((u & 0x7f800000u) == 0x7f800000u)                               /* infinity, or NaN made quiet */
    return (uint16_t)((u >> 16) | ((u & 0x007fffffu) ? 0x0040u : 0u));
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline __m256i emu_cvtneps_pbh(simde__m512 a) {
  float v[16];
  uint16_t h[16];
  memcpy(v, &a, sizeof v);
  for (int i = 0; i < 16; i++) h[i] = emu_bf16_of(v[i]);
  return _mm256_loadu_si256((const __m256i *)h);
}
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh(a) emu_cvtneps_pbh(a)

/* lane j += b[2j+1] c[2j+1], then += b[2j] c[2j] (the odd pair first), each a
 * fused multiply-add, the result flushed to zero when denormal */
static inline simde__m512 emu_dpbf16_ps(simde__m512 acc, simde__m512bh b, simde__m512bh c) {
  float s[16];
  uint16_t x[32], y[32];
  memcpy(s, &acc, sizeof s), memcpy(x, &b, sizeof x), memcpy(y, &c, sizeof y);
  for (int j = 0; j < 16; j++) {
    float r = emu_daz(s[j]);
    for (int i = 1; i >= 0; i--) {
      uint32_t ux = (uint32_t)x[2 * j + i] << 16, uy = (uint32_t)y[2 * j + i] << 16;
      float fx, fy;
      memcpy(&fx, &ux, 4), memcpy(&fy, &uy, 4);
      r = emu_daz(fmaf(emu_daz(fx), emu_daz(fy), r)); /* the product is exact: one rounding */
    }
    s[j] = r;
  }
  return simde_mm512_loadu_ps(s);
}
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(acc, b, c) emu_dpbf16_ps(acc, b, c)

/* lane j += the four products of unsigned bytes of u and signed bytes of s,
 * wrapping as the instruction does (SIMDe's adds signed ints, undefined
 * where the hardware wraps) */
static inline simde__m512i emu_dpbusd_epi32(simde__m512i acc, simde__m512i u, simde__m512i s) {
  uint32_t a[16];
  uint8_t x[64];
  int8_t y[64];
  memcpy(a, &acc, sizeof a), memcpy(x, &u, sizeof x), memcpy(y, &s, sizeof y);
  for (int j = 0; j < 16; j++) {
    int32_t sum = 0;
    for (int i = 0; i < 4; i++) sum += (int32_t)x[4 * j + i] * y[4 * j + i];
    a[j] += (uint32_t)sum;
  }
  return simde_mm512_loadu_si512(a);
}
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32(acc, u, s) emu_dpbusd_epi32(acc, u, s)
#endif
#endif

#endif
