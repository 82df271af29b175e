/* simd_emulated.h: the SIMD kernels compiled by simd_emulated.c. */
#ifndef ORTEP_TESTS_SIMD_EMULATED_H
#define ORTEP_TESTS_SIMD_EMULATED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct simd_kernels {
  float (*dot_f32)(const float *x, const float *w, size_t k);
  float (*dot_bf16)(const float *x, const uint16_t *w, size_t k);
  float (*dot_f16)(const float *x, const uint16_t *w, size_t k);
  void (*axpy)(float a, const float *x, float *y, size_t n);
  void (*widen)(const uint16_t *src, bool f16, float *dst, size_t n);
  size_t lanes; /* per accumulator: 8 (AVX2) or 16 (AVX-512) */
  /* decode attention for `heads` query heads (q + h hd) over n rows `row` elements apart: scores at
   * sc + h stride; values from weights p + h stride (divided by denom[h] in place) into out + h hd */
  void (*head_scores_f32)(const float *q, size_t heads, const float *k, size_t row, size_t n, size_t hd, float scale,
                          float *sc, size_t stride);
  void (*head_scores_bf16)(const float *q, size_t heads, const uint16_t *k, size_t row, size_t n, size_t hd,
                           float scale, float *sc, size_t stride);
  void (*head_scores_f16)(const float *q, size_t heads, const uint16_t *k, size_t row, size_t n, size_t hd, float scale,
                          float *sc, size_t stride);
  void (*head_values_f32)(float *p, size_t stride, const float *denom, size_t heads, const float *v, size_t row,
                          size_t n, size_t hd, float *out);
  void (*head_values_bf16)(float *p, size_t stride, const float *denom, size_t heads, const uint16_t *v, size_t row,
                           size_t n, size_t hd, float *out);
  void (*head_values_f16)(float *p, size_t stride, const float *denom, size_t heads, const uint16_t *v, size_t row,
                          size_t n, size_t hd, float *out);
} simd_kernels;

extern const simd_kernels simd_emulated_avx2, simd_emulated_avx512;

/* The four-row kernels over blocked weights (simd_avx2.h). */
typedef struct simd_blocked_kernels {
  const float *(*x4_bf16)(const float *x, size_t k, float *xp);
  void (*dot4_bf16)(const float *x, const uint16_t *w, size_t k, float *y);
  void (*dot4_f16)(const float *x, const uint16_t *w, size_t k, float *y);
} simd_blocked_kernels;

extern const simd_blocked_kernels simd_emulated_blocked;

/* Single instructions as the emulation (kernels/cpu/simd.h) computes them, one 512-bit vector each
 * (checked against the hardware where the CPU has the set):
 * vcvtneps2bf16, vdpbf16ps, vpdpbusd, then vcvttps2dq and from it
 * vcvtdq2ps and vpmovdb, and the maximum of 16 floats. */
void simd_emulated_cvtneps_pbh(const float *x, uint16_t *out);
void simd_emulated_dpbf16(float *acc, const uint16_t *a, const uint16_t *b);
void simd_emulated_dpbusd(int32_t *acc, const uint8_t *u, const int8_t *s);
void simd_emulated_convert(const float *x, int32_t *trunc, float *back, int8_t *low);
float simd_emulated_reduce_max(const float *x);

#endif
