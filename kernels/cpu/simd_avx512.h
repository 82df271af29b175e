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
 * No machine this code was developed on has AVX-512, so tests/simd_emulated.c
 * compiles this same file against SIMDe's AVX-512 emulation and checks it,
 * bitwise, against a scalar model of the order above (and the portable loops
 * within rounding). The includer provides <immintrin.h> (or SIMDe's),
 * <math.h>, cpu_bf16, ortep_f16_to_f32 and avx2_hsum (simd_avx2.h), and may
 * define ORTEP_SIMD_AVX512 (the target attribute).
 */
#ifndef ORTEP_KERNELS_CPU_SIMD_AVX512_H
#define ORTEP_KERNELS_CPU_SIMD_AVX512_H

#ifndef ORTEP_SIMD_AVX512
#define ORTEP_SIMD_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#endif

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

#define ORTEP_DOT_AVX512(type, T)                                                                             \
  ORTEP_SIMD_AVX512 static float dot_##type##_avx512(const float *x, const T *w, size_t k) {                  \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                               \
    size_t t = 0;                                                                                             \
    for (; t + 64 <= k; t += 64) {                                                                            \
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t), avx512_load_##type(w + t), a0);                            \
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 16), avx512_load_##type(w + t + 16), a1);                  \
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 32), avx512_load_##type(w + t + 32), a2);                  \
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t + 48), avx512_load_##type(w + t + 48), a3);                  \
    }                                                                                                         \
    for (; t + 16 <= k; t += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + t), avx512_load_##type(w + t), a0); \
    float s = avx512_hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));                       \
    for (; t < k; t++) s = fmaf(x[t], simd_one_##type(w[t]), s);                                              \
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

/* One head's decode attention over n cache rows `row` elements apart (the
 * includer runs the softmax between the two): scores sc[s] = dot(q, k_s) *
 * scale, bitwise dot_*_avx512 of each row; values out = sum over s of
 * (p[s] / denom) v_s, each column accumulated by FMA in the order of s from
 * zero, so bitwise axpy_avx512 of each row into a zeroed out, with 64
 * columns at a time kept in registers across the rows instead of stored and
 * reloaded per row. */
#define ORTEP_HEAD_AVX512(type, T)                                                                               \
  ORTEP_SIMD_AVX512 static void head_scores_##type##_avx512(const float *q, const T *k, size_t row, size_t n,    \
                                                            size_t hd, float scale, float *sc) {                 \
    for (size_t s = 0; s < n; s++) sc[s] = dot_##type##_avx512(q, k + s * row, hd) * scale;                      \
  }                                                                                                              \
  ORTEP_SIMD_AVX512 static void head_values_##type##_avx512(const float *p, float denom, const T *v, size_t row, \
                                                            size_t n, size_t hd, float *out) {                   \
    size_t c = 0;                                                                                                \
    for (; c + 64 <= hd; c += 64) {                                                                              \
      __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;                                                \
      for (size_t s = 0; s < n; s++) {                                                                           \
        __m512 a = _mm512_set1_ps(p[s] / denom);                                                                 \
        const T *x = v + s * row + c;                                                                            \
        o0 = _mm512_fmadd_ps(a, avx512_load_##type(x), o0);                                                      \
        o1 = _mm512_fmadd_ps(a, avx512_load_##type(x + 16), o1);                                                 \
        o2 = _mm512_fmadd_ps(a, avx512_load_##type(x + 32), o2);                                                 \
        o3 = _mm512_fmadd_ps(a, avx512_load_##type(x + 48), o3);                                                 \
      }                                                                                                          \
      _mm512_storeu_ps(out + c, o0), _mm512_storeu_ps(out + c + 16, o1);                                         \
      _mm512_storeu_ps(out + c + 32, o2), _mm512_storeu_ps(out + c + 48, o3);                                    \
    }                                                                                                            \
    for (; c + 16 <= hd; c += 16) {                                                                              \
      __m512 o0 = _mm512_setzero_ps();                                                                           \
      for (size_t s = 0; s < n; s++)                                                                             \
        o0 = _mm512_fmadd_ps(_mm512_set1_ps(p[s] / denom), avx512_load_##type(v + s * row + c), o0);             \
      _mm512_storeu_ps(out + c, o0);                                                                             \
    }                                                                                                            \
    for (; c < hd; c++) {                                                                                        \
      float y = 0.0f;                                                                                            \
      for (size_t s = 0; s < n; s++) y = fmaf(p[s] / denom, simd_one_##type(v[s * row + c]), y);                 \
      out[c] = y;                                                                                                \
    }                                                                                                            \
  }
ORTEP_HEAD_AVX512(f32, float)
ORTEP_HEAD_AVX512(bf16, uint16_t)
ORTEP_HEAD_AVX512(f16, uint16_t)

#endif
