/*
 * simd_avx512.h: the CPU EP's dot products for x86-64 with AVX-512F (ops.c
 * picks them when CPUID and XGETBV say the CPU and the OS support it).
 *
 * The AVX2 scheme (simd_avx2.h) at twice the width: 64 products per
 * iteration in four 16-lane FMA accumulators, 16-bit weights widened in
 * registers (bf16: vpmovzxwd and a shift; f16: vcvtph2ps zmm), then 16 at a
 * time into the first accumulator, the accumulators summed (a0 + a1) +
 * (a2 + a3), the two 8-lane halves added and summed as in simd_avx2.h, and
 * the last k % 16 products added by fmaf one by one.
 *
 * AVX512-BF16's vdpbf16ps is deliberately not used for one row: it
 * multiplies bf16 by bf16, so the f32 activations would be rounded to bf16
 * first, a different (less precise) result from the f32-activation
 * semantics that the portable loops, the AVX2 path and the CUDA EP share;
 * and widening bf16 is a shift, which costs nothing at the memory bound
 * decode runs at. Only a prefill chunk, compute-bound, uses it
 * (simd_rows.h, cpu.products).
 *
 * tests/simd_emulated.c compiles this same file against SIMDe's AVX-512
 * emulation (simd.h) and checks it, bitwise, against a scalar model of the
 * order above (and the portable loops within rounding), on any x86-64 CPU.
 * The includer provides simd.h, <math.h>, cpu_bf16, ortep_f16_to_f32 and
 * avx2_hsum (simd_avx2.h).
 */
#ifndef ORTEP_KERNELS_CPU_SIMD_AVX512_H
#define ORTEP_KERNELS_CPU_SIMD_AVX512_H

ORTEP_SIMD_AVX512 static inline float avx512_hsum(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return avx2_hsum(_mm256_add_ps(lo, hi));
}
ORTEP_SIMD_AVX512 static inline __m512 avx512_load_f32(const float *w) { return _mm512_loadu_ps(w); }
ORTEP_SIMD_AVX512 static inline __m512 avx512_load_bf16(const uint16_t *w) {
  __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
ORTEP_SIMD_AVX512 static inline __m512 avx512_load_f16(const uint16_t *w) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
}

/* The dot's products of x[0, k - k % 16) before the lanes are summed: 64 at
 * a time into four accumulators, then 16 at a time into the first, the four
 * added (a0 + a1) + (a2 + a3). */
#define ORTEP_DOT_AVX512(type, T)                                                                             \
  ORTEP_SIMD_AVX512 static inline __m512 lanes_##type##_avx512(const float *x, const T *w, size_t k) {        \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                               \
    size_t t = 0;                                                                                             \
    for (; t + 64 <= k; t += 64) {                                                                            \
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t), avx512_load_##type(w + t), a0);                            \
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 16), avx512_load_##type(w + t + 16), a1);                  \
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 32), avx512_load_##type(w + t + 32), a2);                  \
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 48), avx512_load_##type(w + t + 48), a3);                  \
    }                                                                                                         \
    for (; t + 16 <= k; t += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t), avx512_load_##type(w + t), a0); \
    return _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));                                       \
  }                                                                                                           \
  ORTEP_SIMD_AVX512 static float dot_##type##_avx512(const float *x, const T *w, size_t k) {                  \
    float s = avx512_hsum(lanes_##type##_avx512(x, w, k));                                                    \
    for (size_t t = k - k % 16; t < k; t++) s = fmaf(x[t], simd_one_##type(w[t]), s);                         \
    return s;                                                                                                 \
  }
ORTEP_DOT_AVX512(f32, float)
ORTEP_DOT_AVX512(bf16, uint16_t)
ORTEP_DOT_AVX512(f16, uint16_t)

ORTEP_SIMD_AVX512 static void widen_avx512(const uint16_t *src, bool f16, float *dst, size_t n) {
  size_t i = 0;
  if (f16)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, avx512_load_f16(src + i));
  else
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, avx512_load_bf16(src + i));
  for (; i < n; i++) dst[i] = f16 ? ortep_f16_to_f32(src[i]) : cpu_bf16(src[i]);
}

ORTEP_SIMD_AVX512 static void axpy_avx512(float a, const float *x, float *y, size_t n) {
  __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* avx512_hsum of each of v[0..16), lane s of the result v[s]'s: the same
 * additions in the same order (each level adds the lower half of a lane
 * group to its upper half, first operand first), done for sixteen vectors
 * by shuffling pairs of them into the operands of one add. */
ORTEP_SIMD_AVX512 static inline __m512 avx512_hsum16(const __m512 *v) {
  __m512 l1[8], l2[4], l3[2];
  for (int i = 0; i < 8; i++) /* v[j] + v[j + 8]: lanes [A h8, B h8] */
    l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; i++) /* h8[j] + h8[j + 4]: 128-bit lane c holds v[4 i + c]'s four */
    l2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; i++) /* (0 + 2, 1 + 3): lane c holds v[8 i + c]'s two, then v[8 i + 4 + c]'s */
    l3[i] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  /* 0 + 1: lane 4 c + j holds v[4 j + c]'s sum; transposed back */
  __m512 r = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), r);
}

/* Decode attention for `heads` query heads (q + h hd) that share one KV head
 * (n cache rows `row` elements apart; the includer runs the softmax between
 * the two). Scores sc[h stride + s] = dot(q_h, k_s) * scale, bitwise
 * dot_*_avx512 of each row, sixteen rows' lanes summed at once
 * (avx512_hsum16) where hd is a multiple of 16. Values: p[h stride + s] is
 * first divided by denom[h] in place, then out_h = sum over s of p_h[s] v_s,
 * each column accumulated by FMA in the order of s from zero, so bitwise
 * axpy_avx512 of each row into a zeroed out; each row of v is loaded once for
 * up to four heads, whose 64 columns at a time stay in registers (sixteen
 * independent FMA chains where one head has four). Both take the rows
 * ORTEP_HEAD_TILE at a time for all the heads (simd_avx2.h), the values
 * storing their sums between tiles and carrying on from them: the same
 * operations in the same order, faster than one head at a time with a
 * per-row dot (the figures: docs/api.md). */
#define ORTEP_HEAD_AVX512(type, T)                                                                                     \
  ORTEP_SIMD_AVX512 static void head_scores_##type##_avx512(const float *q, size_t heads, const T *k, size_t row,      \
                                                            size_t n, size_t hd, float scale, float *sc,               \
                                                            size_t stride) {                                           \
    for (size_t s0 = 0; s0 < n; s0 += ORTEP_HEAD_TILE) {                                                               \
      size_t s1 = n - s0 < ORTEP_HEAD_TILE ? n : s0 + ORTEP_HEAD_TILE;                                                 \
      for (size_t h = 0; h < heads; h++) {                                                                             \
        const float *qh = q + h * hd;                                                                                  \
        float *sh = sc + h * stride;                                                                                   \
        size_t s = s0;                                                                                                 \
        if (hd % 16 == 0)                                                                                              \
          for (; s + 16 <= s1; s += 16) {                                                                              \
            __m512 v[16];                                                                                              \
            _Pragma("GCC unroll 16") for (size_t j = 0; j < 16; j++) v[j] =                                            \
                lanes_##type##_avx512(qh, k + (s + j) * row, hd);                                                      \
            _mm512_storeu_ps(sh + s, _mm512_mul_ps(avx512_hsum16(v), _mm512_set1_ps(scale)));                          \
          }                                                                                                            \
        for (; s < s1; s++) sh[s] = dot_##type##_avx512(qh, k + s * row, hd) * scale;                                  \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  /* HN heads' values over rows [s0, s1) from their weights p into out (heads hd \
   * apart), carried on from what out holds unless s0 is 0 */                                     \
  ORTEP_SIMD_AVX512 static inline __attribute__((always_inline)) void head_values_##type##_avx512_of(                  \
      size_t HN, const float *p, size_t stride, const T *v, size_t row, size_t s0, size_t s1, size_t hd, float *out) { \
    size_t c = 0;                                                                                                      \
    for (; c + 64 <= hd; c += 64) {                                                                                    \
      __m512 o[4][4];                                                                                                  \
      for (size_t h = 0; h < HN; h++)                                                                                  \
        for (int i = 0; i < 4; i++) o[h][i] = s0 ? _mm512_loadu_ps(out + h * hd + c + 16 * i) : _mm512_setzero_ps();   \
      for (size_t s = s0; s < s1; s++) {                                                                               \
        const T *x = v + s * row + c;                                                                                  \
        __m512 x0 = avx512_load_##type(x), x1 = avx512_load_##type(x + 16);                                            \
        __m512 x2 = avx512_load_##type(x + 2 * 16), x3 = avx512_load_##type(x + 3 * 16);                               \
        for (size_t h = 0; h < HN; h++) {                                                                              \
          __m512 a = _mm512_set1_ps(p[h * stride + s]);                                                                \
          o[h][0] = _mm512_fmadd_ps(a, x0, o[h][0]), o[h][1] = _mm512_fmadd_ps(a, x1, o[h][1]);                        \
          o[h][2] = _mm512_fmadd_ps(a, x2, o[h][2]), o[h][3] = _mm512_fmadd_ps(a, x3, o[h][3]);                        \
        }                                                                                                              \
      }                                                                                                                \
      for (size_t h = 0; h < HN; h++)                                                                                  \
        for (int i = 0; i < 4; i++) _mm512_storeu_ps(out + h * hd + c + 16 * i, o[h][i]);                              \
    }                                                                                                                  \
    for (size_t h = 0; h < HN; h++) {                                                                                  \
      const float *ph = p + h * stride;                                                                                \
      float *oh = out + h * hd;                                                                                        \
      size_t t = c;                                                                                                    \
      for (; t + 16 <= hd; t += 16) {                                                                                  \
        __m512 o0 = s0 ? _mm512_loadu_ps(oh + t) : _mm512_setzero_ps();                                                \
        for (size_t s = s0; s < s1; s++)                                                                               \
          o0 = _mm512_fmadd_ps(_mm512_set1_ps(ph[s]), avx512_load_##type(v + s * row + t), o0);                        \
        _mm512_storeu_ps(oh + t, o0);                                                                                  \
      }                                                                                                                \
      for (; t < hd; t++) {                                                                                            \
        float y = s0 ? oh[t] : 0.0f;                                                                                   \
        for (size_t s = s0; s < s1; s++) y = fmaf(ph[s], simd_one_##type(v[s * row + t]), y);                          \
        oh[t] = y;                                                                                                     \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  ORTEP_SIMD_AVX512 static void head_values_##type##_avx512(float *p, size_t stride, const float *denom, size_t heads, \
                                                            const T *v, size_t row, size_t n, size_t hd, float *out) { \
    for (size_t h = 0; h < heads; h++) {                                                                               \
      float *ph = p + h * stride;                                                                                      \
      __m512 d = _mm512_set1_ps(denom[h]);                                                                             \
      size_t s = 0;                                                                                                    \
      for (; s + 16 <= n; s += 16) _mm512_storeu_ps(ph + s, _mm512_div_ps(_mm512_loadu_ps(ph + s), d));                \
      for (; s < n; s++) ph[s] /= denom[h];                                                                            \
    }                                                                                                                  \
    if (!n) memset(out, 0, heads *hd * sizeof *out);                                                                   \
    for (size_t s0 = 0; s0 < n; s0 += ORTEP_HEAD_TILE) {                                                               \
      size_t s1 = n - s0 < ORTEP_HEAD_TILE ? n : s0 + ORTEP_HEAD_TILE, h = 0;                                          \
      for (; h + 4 <= heads; h += 4)                                                                                   \
        head_values_##type##_avx512_of(4, p + h * stride, stride, v, row, s0, s1, hd, out + h * hd);                   \
      if (heads - h >= 2)                                                                                              \
        head_values_##type##_avx512_of(2, p + h * stride, stride, v, row, s0, s1, hd, out + h * hd), h += 2;           \
      if (heads - h == 1) head_values_##type##_avx512_of(1, p + h * stride, stride, v, row, s0, s1, hd, out + h * hd); \
    }                                                                                                                  \
  }
ORTEP_HEAD_AVX512(f32, float)
ORTEP_HEAD_AVX512(bf16, uint16_t)
ORTEP_HEAD_AVX512(f16, uint16_t)

#endif
