/*
 * simd_emulated.c: the CPU EP's SIMD dot products (kernels/cpu/simd_avx2.h,
 * simd_avx512.h) compiled here for test_simd_emulated, the AVX-512 ones
 * against SIMDe's implementation of the AVX-512 intrinsics
 * (kernels/cpu/simd.h with ORTEP_SIMD_EMULATED), so that they run (and are
 * checked) on a machine without AVX-512.
 *
 * This file is compiled with -mavx2 -mfma -mf16c: SIMDe then builds every
 * 512-bit operation from two native 256-bit ones, and a 512-bit FMA from two
 * native FMAs, so each lane sees the same IEEE operations as on AVX-512
 * hardware.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define ORTEP_SIMD_EMULATED
#include "kernels/cpu/simd.h"
#include "kernels/cpu/ops.h"
#include "simd_emulated.h"

#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_avx512.h"

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

/* The instructions simd.h writes itself or whose SIMDe version it replaces, one vector each. */
void simd_emulated_cvtneps_pbh(const float *x, uint16_t *out) {
  _mm256_storeu_si256((__m256i *)out, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)));
}
void simd_emulated_dpbf16(float *acc, const uint16_t *a, const uint16_t *b) {
  __m512bh va, vb;
  memcpy(&va, a, sizeof va), memcpy(&vb, b, sizeof vb);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), va, vb));
}
void simd_emulated_dpbusd(int32_t *acc, const uint8_t *u, const int8_t *s) {
  __m512i r = _mm512_dpbusd_epi32(_mm512_loadu_si512(acc), _mm512_loadu_si512(u), _mm512_loadu_si512(s));
  _mm512_storeu_si512(acc, r);
}
void simd_emulated_convert(const float *x, int32_t *trunc, float *back, int8_t *low) {
  __m512i t = _mm512_cvttps_epi32(_mm512_loadu_ps(x));
  _mm512_storeu_si512(trunc, t);
  _mm512_storeu_ps(back, _mm512_cvtepi32_ps(t));
  _mm_storeu_si128((__m128i *)low, _mm512_cvtepi32_epi8(t));
}
float simd_emulated_reduce_max(const float *x) { return _mm512_reduce_max_ps(_mm512_loadu_ps(x)); }
