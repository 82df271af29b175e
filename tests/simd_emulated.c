/*
 * simd_emulated.c: the CPU EP's SIMD dot products (kernels/cpu/simd_avx2.h,
 * simd_avx512.h) compiled here for test_simd_emulated, the AVX-512 ones
 * against SIMDe's portable implementation of the AVX-512 intrinsics, so that
 * they run (and are checked) on a machine without AVX-512.
 *
 * This file is compiled with -mavx2 -mfma -mf16c: SIMDe then builds every
 * 512-bit operation from two native 256-bit ones, and a 512-bit FMA from two
 * native FMAs, so each lane sees the same IEEE operations as on AVX-512
 * hardware. The two intrinsics this SIMDe release lacks are defined below the
 * same way (each lane converted exactly), and one it has without its native
 * alias is aliased.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

#include "../kernels/cpu/ops.h"
#include "simd_emulated.h"

/* SIMDe has it without the native alias (and GCC's own is a macro without -O) */
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)
#ifndef _mm512_cvtph_ps
static inline simde__m512 emulated_cvtph_ps(simde__m256i h) {
  simde__m512 r = simde_mm512_castps256_ps512(simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(h)));
  return simde_mm512_insertf32x8(r, simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(h, 1)), 1);
}
#define _mm512_cvtph_ps(h) emulated_cvtph_ps(h)
#endif
#ifndef _mm512_cvtepu16_epi32
static inline simde__m512i emulated_cvtepu16_epi32(simde__m256i h) {
  simde__m512i r = simde_mm512_castsi256_si512(simde_mm256_cvtepu16_epi32(simde_mm256_castsi256_si128(h)));
  return simde_mm512_inserti64x4(r, simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(h, 1)), 1);
}
#define _mm512_cvtepu16_epi32(h) emulated_cvtepu16_epi32(h)
#endif

#define ORTEP_SIMD_AVX2   /* the whole file is compiled for AVX2 */
#define ORTEP_SIMD_AVX512 /* emulated */
#include "../kernels/cpu/simd_avx2.h"
#include "../kernels/cpu/simd_avx512.h"

const simd_kernels simd_emulated_avx2 = {dot_f32_avx2,
                                         dot_bf16_avx2,
                                         dot_f16_avx2,
                                         axpy_avx2,
                                         widen_avx2,
                                         8,
                                         head_scores_f32_avx2,
                                         head_scores_bf16_avx2,
                                         head_scores_f16_avx2,
                                         head_values_f32_avx2,
                                         head_values_bf16_avx2,
                                         head_values_f16_avx2};
const simd_kernels simd_emulated_avx512 = {dot_f32_avx512,
                                           dot_bf16_avx512,
                                           dot_f16_avx512,
                                           axpy_avx512,
                                           widen_avx512,
                                           16,
                                           head_scores_f32_avx512,
                                           head_scores_bf16_avx512,
                                           head_scores_f16_avx512,
                                           head_values_f32_avx512,
                                           head_values_bf16_avx512,
                                           head_values_f16_avx512};
const simd_blocked_kernels simd_emulated_blocked = {avx2_x4_bf16, dot4_bf16_avx2, dot4_f16_avx2};
