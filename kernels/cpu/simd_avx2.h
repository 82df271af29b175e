/*
 * simd_avx2.h: the CPU EP's dot products for x86-64 with AVX2, FMA and F16C
 * (ops.c picks them when CPUID says so).
 *
 * 32 products per iteration in four 8-lane FMA accumulators (their loads
 * overlap), 16-bit weights widened in registers (bf16: a shift into the high
 * half; f16: vcvtph2ps), f32 accumulation; then 8 at a time into the first
 * accumulator, the accumulators summed (a0 + a1) + (a2 + a3), the lanes in a
 * fixed order, and the last k % 8 products added by fmaf one by one. Every
 * step is a fixed sequence of IEEE operations, so a result is the same bits
 * on any machine that runs this code, and tests/simd_emulated.c checks it
 * against a scalar model of exactly that order.
 *
 * The includer provides simd.h (the intrinsics and target attributes),
 * <math.h>, <string.h>, cpu_bf16 and ortep_f16_to_f32.
 */
#ifndef ORTEP_KERNELS_CPU_SIMD_AVX2_H
#define ORTEP_KERNELS_CPU_SIMD_AVX2_H

/* lanes 0..7 summed as ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) */
ORTEP_SIMD_AVX2 static inline float avx2_hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                 /* 4 lanes */
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        /* 2 */
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55)); /* 1 */
  return _mm_cvtss_f32(s);
}
ORTEP_SIMD_AVX2 static inline __m256 avx2_load_f32(const float *w) { return _mm256_loadu_ps(w); }
ORTEP_SIMD_AVX2 static inline __m256 avx2_load_bf16(const uint16_t *w) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
ORTEP_SIMD_AVX2 static inline __m256 avx2_load_f16(const uint16_t *w) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
}
static inline float simd_one_f32(float w) { return w; }
static inline float simd_one_bf16(uint16_t w) { return cpu_bf16(w); }
static inline float simd_one_f16(uint16_t w) { return ortep_f16_to_f32(w); }

/* The dot's products of x[0, k - k % 8) before the lanes are summed: 32 at a
 * time into four accumulators, then 8 at a time into the first, the four
 * added (a0 + a1) + (a2 + a3). */
#define ORTEP_DOT_AVX2(type, T)                                                                           \
  ORTEP_SIMD_AVX2 static inline __m256 lanes_##type##_avx2(const float *x, const T *w, size_t k) {        \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                           \
    size_t t = 0;                                                                                         \
    for (; t + 32 <= k; t += 32) {                                                                        \
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + t), avx2_load_##type(w + t), a0);                          \
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + t + 8), avx2_load_##type(w + t + 8), a1);                  \
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + t + 16), avx2_load_##type(w + t + 16), a2);                \
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + t + 24), avx2_load_##type(w + t + 24), a3);                \
    }                                                                                                     \
    for (; t + 8 <= k; t += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + t), avx2_load_##type(w + t), a0); \
    return _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));                                   \
  }                                                                                                       \
  ORTEP_SIMD_AVX2 static float dot_##type##_avx2(const float *x, const T *w, size_t k) {                  \
    float s = avx2_hsum(lanes_##type##_avx2(x, w, k));                                                    \
    for (size_t t = k - k % 8; t < k; t++) s = fmaf(x[t], simd_one_##type(w[t]), s);                      \
    return s;                                                                                             \
  }
ORTEP_DOT_AVX2(f32, float)
ORTEP_DOT_AVX2(bf16, uint16_t)
ORTEP_DOT_AVX2(f16, uint16_t)

/* avx2_hsum of each of v[0..8), lane s of the result v[s]'s: the same
 * additions in the same order, for eight vectors at once (simd_avx512.h's
 * avx512_hsum16 at 8 lanes). */
ORTEP_SIMD_AVX2 static inline __m256 avx2_hsum8(const __m256 *v) {
  __m256 l1[4], l2[2];
  for (int i = 0; i < 4; i++) /* lo + hi: half c holds v[2 i + c]'s four */
    l1[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                          _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  for (int i = 0; i < 2; i++) /* (0 + 2, 1 + 3): half c holds v[4 i + c]'s two, then v[4 i + 2 + c]'s */
    l2[i] = _mm256_add_ps(_mm256_shuffle_ps(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm256_shuffle_ps(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  /* 0 + 1: lane 4 c + j holds v[2 j + c]'s sum; put in order */
  __m256 r = _mm256_add_ps(_mm256_shuffle_ps(l2[0], l2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm256_shuffle_ps(l2[0], l2[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* A head's cache rows are taken ORTEP_HEAD_TILE at a time for all the query
 * heads that share it (64 rows of 64 f32: 16 KiB, in L1 for the next head)
 * rather than all rows for one head after the other, which reread them from
 * L2 or memory once a long context no longer fits. */
#define ORTEP_HEAD_TILE 64

/* Decode attention for heads sharing one KV head, as simd_avx512.h's head_*
 * at 8 lanes: the scores bitwise dot_*_avx2 per row (eight rows' lanes summed
 * at once where hd is a multiple of 8), the values bitwise axpy_avx2 per row
 * into a zeroed out, each row of v loaded once for two heads, whose 32
 * columns at a time stay in registers; rows a tile at a time. */
#define ORTEP_HEAD_AVX2(type, T)                                                                                       \
  ORTEP_SIMD_AVX2 static void head_scores_##type##_avx2(const float *q, size_t heads, const T *k, size_t row,          \
                                                        size_t n, size_t hd, float scale, float *sc, size_t stride) {  \
    for (size_t s0 = 0; s0 < n; s0 += ORTEP_HEAD_TILE) {                                                               \
      size_t s1 = n - s0 < ORTEP_HEAD_TILE ? n : s0 + ORTEP_HEAD_TILE;                                                 \
      for (size_t h = 0; h < heads; h++) {                                                                             \
        const float *qh = q + h * hd;                                                                                  \
        float *sh = sc + h * stride;                                                                                   \
        size_t s = s0;                                                                                                 \
        if (hd % 8 == 0)                                                                                               \
          for (; s + 8 <= s1; s += 8) {                                                                                \
            __m256 v[8];                                                                                               \
            _Pragma("GCC unroll 8") for (size_t j = 0; j < 8; j++) v[j] =                                              \
                lanes_##type##_avx2(qh, k + (s + j) * row, hd);                                                        \
            _mm256_storeu_ps(sh + s, _mm256_mul_ps(avx2_hsum8(v), _mm256_set1_ps(scale)));                             \
          }                                                                                                            \
        for (; s < s1; s++) sh[s] = dot_##type##_avx2(qh, k + s * row, hd) * scale;                                    \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  /* HN heads' values over rows [s0, s1) from their weights p into out (heads hd \
   * apart), carried on from what out holds unless s0 is 0 */                                     \
  ORTEP_SIMD_AVX2 static inline __attribute__((always_inline)) void head_values_##type##_avx2_of(                      \
      size_t HN, const float *p, size_t stride, const T *v, size_t row, size_t s0, size_t s1, size_t hd, float *out) { \
    size_t c = 0;                                                                                                      \
    for (; c + 32 <= hd; c += 32) {                                                                                    \
      __m256 o[2][4];                                                                                                  \
      for (size_t h = 0; h < HN; h++)                                                                                  \
        for (int i = 0; i < 4; i++) o[h][i] = s0 ? _mm256_loadu_ps(out + h * hd + c + 8 * i) : _mm256_setzero_ps();    \
      for (size_t s = s0; s < s1; s++) {                                                                               \
        const T *x = v + s * row + c;                                                                                  \
        __m256 x0 = avx2_load_##type(x), x1 = avx2_load_##type(x + 8);                                                 \
        __m256 x2 = avx2_load_##type(x + 2 * 8), x3 = avx2_load_##type(x + 3 * 8);                                     \
        for (size_t h = 0; h < HN; h++) {                                                                              \
          __m256 a = _mm256_set1_ps(p[h * stride + s]);                                                                \
          o[h][0] = _mm256_fmadd_ps(a, x0, o[h][0]), o[h][1] = _mm256_fmadd_ps(a, x1, o[h][1]);                        \
          o[h][2] = _mm256_fmadd_ps(a, x2, o[h][2]), o[h][3] = _mm256_fmadd_ps(a, x3, o[h][3]);                        \
        }                                                                                                              \
      }                                                                                                                \
      for (size_t h = 0; h < HN; h++)                                                                                  \
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(out + h * hd + c + 8 * i, o[h][i]);                               \
    }                                                                                                                  \
    for (size_t h = 0; h < HN; h++) {                                                                                  \
      const float *ph = p + h * stride;                                                                                \
      float *oh = out + h * hd;                                                                                        \
      size_t t = c;                                                                                                    \
      for (; t + 8 <= hd; t += 8) {                                                                                    \
        __m256 o0 = s0 ? _mm256_loadu_ps(oh + t) : _mm256_setzero_ps();                                                \
        for (size_t s = s0; s < s1; s++)                                                                               \
          o0 = _mm256_fmadd_ps(_mm256_set1_ps(ph[s]), avx2_load_##type(v + s * row + t), o0);                          \
        _mm256_storeu_ps(oh + t, o0);                                                                                  \
      }                                                                                                                \
      for (; t < hd; t++) {                                                                                            \
        float y = s0 ? oh[t] : 0.0f;                                                                                   \
        for (size_t s = s0; s < s1; s++) y = fmaf(ph[s], simd_one_##type(v[s * row + t]), y);                          \
        oh[t] = y;                                                                                                     \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  ORTEP_SIMD_AVX2 static void head_values_##type##_avx2(float *p, size_t stride, const float *denom, size_t heads,     \
                                                        const T *v, size_t row, size_t n, size_t hd, float *out) {     \
    for (size_t h = 0; h < heads; h++) {                                                                               \
      float *ph = p + h * stride;                                                                                      \
      __m256 d = _mm256_set1_ps(denom[h]);                                                                             \
      size_t s = 0;                                                                                                    \
      for (; s + 8 <= n; s += 8) _mm256_storeu_ps(ph + s, _mm256_div_ps(_mm256_loadu_ps(ph + s), d));                  \
      for (; s < n; s++) ph[s] /= denom[h];                                                                            \
    }                                                                                                                  \
    if (!n) memset(out, 0, heads *hd * sizeof *out);                                                                   \
    for (size_t s0 = 0; s0 < n; s0 += ORTEP_HEAD_TILE) {                                                               \
      size_t s1 = n - s0 < ORTEP_HEAD_TILE ? n : s0 + ORTEP_HEAD_TILE, h = 0;                                          \
      for (; h + 2 <= heads; h += 2)                                                                                   \
        head_values_##type##_avx2_of(2, p + h * stride, stride, v, row, s0, s1, hd, out + h * hd);                     \
      if (h < heads) head_values_##type##_avx2_of(1, p + h * stride, stride, v, row, s0, s1, hd, out + h * hd);        \
    }                                                                                                                  \
  }
ORTEP_HEAD_AVX2(f32, float)
ORTEP_HEAD_AVX2(bf16, uint16_t)
ORTEP_HEAD_AVX2(f16, uint16_t)

/* --- four rows of a blocked weight (ops.h: [N/4, K/16, 4, 16]) at once -----
 * Each 16-column block holds the four rows' 16 values one after another, so
 * the four dot products stream one run of memory and share each load of x.
 * Per row two 8-lane accumulators, lo and hi, over the blocks in order; the
 * row's result is avx2_hsum(lo + hi). Which columns a lane sums differs by
 * dtype:
 *   f16: vcvtph2ps widens 8 values in place: lo lane l sums columns 16b + l,
 *        hi lane l columns 16b + 8 + l (x read as is);
 *   bf16: interleaving with zero (vpunpcklwd/hwd) widens without a shift but
 *        per 128-bit half: lo lane l sums columns 16b + l for l < 4 and
 *        16b + l + 4 for l >= 4, hi the other eight (16b + 4 + l, l < 4;
 *        16b + 8 + l, l >= 4); x must come permuted to match (avx2_x4_bf16).
 * k is a multiple of 16. tests/simd_emulated.c checks both orders bitwise. */
ORTEP_SIMD_AVX2 static const float *avx2_x4_bf16(const float *x, size_t k, float *xp) {
  for (size_t t = 0; t < k; t += 16) {
    __m256 a = _mm256_loadu_ps(x + t), b = _mm256_loadu_ps(x + t + 8);
    _mm256_storeu_ps(xp + t, _mm256_permute2f128_ps(a, b, 0x20));     /* 0-3, 8-11 */
    _mm256_storeu_ps(xp + t + 8, _mm256_permute2f128_ps(a, b, 0x31)); /* 4-7, 12-15 */
  }
  return xp;
}
#define ORTEP_DOT4_AVX2(type, WLO, WHI)                                                                   \
  ORTEP_SIMD_AVX2 static void dot4_##type##_avx2(const float *x, const uint16_t *w, size_t k, float *y) { \
    __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0, h3 = l0;       \
    __m256i z = _mm256_setzero_si256();                                                                   \
    (void)z;                                                                                              \
    for (size_t t = 0; t < k; t += 16, w += 64) {                                                         \
      __m256 xl = _mm256_loadu_ps(x + t), xh = _mm256_loadu_ps(x + t + 8);                                \
      l0 = _mm256_fmadd_ps(xl, WLO(w), l0);                                                               \
      h0 = _mm256_fmadd_ps(xh, WHI(w), h0);                                                               \
      l1 = _mm256_fmadd_ps(xl, WLO(w + 16), l1);                                                          \
      h1 = _mm256_fmadd_ps(xh, WHI(w + 16), h1);                                                          \
      l2 = _mm256_fmadd_ps(xl, WLO(w + 32), l2);                                                          \
      h2 = _mm256_fmadd_ps(xh, WHI(w + 32), h2);                                                          \
      l3 = _mm256_fmadd_ps(xl, WLO(w + 48), l3);                                                          \
      h3 = _mm256_fmadd_ps(xh, WHI(w + 48), h3);                                                          \
    }                                                                                                     \
    y[0] = avx2_hsum(_mm256_add_ps(l0, h0));                                                              \
    y[1] = avx2_hsum(_mm256_add_ps(l1, h1));                                                              \
    y[2] = avx2_hsum(_mm256_add_ps(l2, h2));                                                              \
    y[3] = avx2_hsum(_mm256_add_ps(l3, h3));                                                              \
  }
/* Two rows of x against the same four weight rows: every accumulator of
 * each row takes exactly the FMAs, in the order, of ORTEP_DOT4_AVX2 (so the
 * results are bitwise its), but each widened weight serves both rows. 16
 * accumulators: without AVX-512VL's 32 registers some spill. */
#define ORTEP_DOT4X2_AVX2(name, TARGET, WLO, WHI)                                                                \
  TARGET static void name(const float *x0, const float *x1, const uint16_t *w, size_t k, float *y0, float *y1) { \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;              \
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0, d0 = a0, d1 = a0, d2 = a0, d3 = a0;                               \
    __m256i z = _mm256_setzero_si256();                                                                          \
    (void)z;                                                                                                     \
    for (size_t t = 0; t < k; t += 16, w += 64) {                                                                \
      __m256 w0 = WLO(w), w1 = WLO(w + 16), w2 = WLO(w + 32), w3 = WLO(w + 48);                                  \
      __m256 p = _mm256_loadu_ps(x0 + t), q = _mm256_loadu_ps(x1 + t);                                           \
      a0 = _mm256_fmadd_ps(p, w0, a0), a1 = _mm256_fmadd_ps(p, w1, a1);                                          \
      a2 = _mm256_fmadd_ps(p, w2, a2), a3 = _mm256_fmadd_ps(p, w3, a3);                                          \
      c0 = _mm256_fmadd_ps(q, w0, c0), c1 = _mm256_fmadd_ps(q, w1, c1);                                          \
      c2 = _mm256_fmadd_ps(q, w2, c2), c3 = _mm256_fmadd_ps(q, w3, c3);                                          \
      w0 = WHI(w), w1 = WHI(w + 16), w2 = WHI(w + 32), w3 = WHI(w + 48);                                         \
      p = _mm256_loadu_ps(x0 + t + 8), q = _mm256_loadu_ps(x1 + t + 8);                                          \
      b0 = _mm256_fmadd_ps(p, w0, b0), b1 = _mm256_fmadd_ps(p, w1, b1);                                          \
      b2 = _mm256_fmadd_ps(p, w2, b2), b3 = _mm256_fmadd_ps(p, w3, b3);                                          \
      d0 = _mm256_fmadd_ps(q, w0, d0), d1 = _mm256_fmadd_ps(q, w1, d1);                                          \
      d2 = _mm256_fmadd_ps(q, w2, d2), d3 = _mm256_fmadd_ps(q, w3, d3);                                          \
    }                                                                                                            \
    y0[0] = avx2_hsum(_mm256_add_ps(a0, b0)), y0[1] = avx2_hsum(_mm256_add_ps(a1, b1));                          \
    y0[2] = avx2_hsum(_mm256_add_ps(a2, b2)), y0[3] = avx2_hsum(_mm256_add_ps(a3, b3));                          \
    y1[0] = avx2_hsum(_mm256_add_ps(c0, d0)), y1[1] = avx2_hsum(_mm256_add_ps(c1, d1));                          \
    y1[2] = avx2_hsum(_mm256_add_ps(c2, d2)), y1[3] = avx2_hsum(_mm256_add_ps(c3, d3));                          \
  }
#define AVX2_BF16_LO(p) _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, _mm256_loadu_si256((const __m256i *)(p))))
#define AVX2_BF16_HI(p) _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, _mm256_loadu_si256((const __m256i *)(p))))
#define AVX2_F16_LO(p)  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define AVX2_F16_HI(p)  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((p) + 8)))
ORTEP_DOT4_AVX2(bf16, AVX2_BF16_LO, AVX2_BF16_HI)
ORTEP_DOT4_AVX2(f16, AVX2_F16_LO, AVX2_F16_HI)
ORTEP_DOT4X2_AVX2(dot4x2_bf16_avx2, ORTEP_SIMD_AVX2, AVX2_BF16_LO, AVX2_BF16_HI)
ORTEP_DOT4X2_AVX2(dot4x2_f16_avx2, ORTEP_SIMD_AVX2, AVX2_F16_LO, AVX2_F16_HI)
ORTEP_DOT4X2_AVX2(dot4x2_bf16_avx2vl, ORTEP_SIMD_AVX2_VL, AVX2_BF16_LO, AVX2_BF16_HI)
ORTEP_DOT4X2_AVX2(dot4x2_f16_avx2vl, ORTEP_SIMD_AVX2_VL, AVX2_F16_LO, AVX2_F16_HI)
#undef AVX2_BF16_LO
#undef AVX2_BF16_HI
#undef AVX2_F16_LO
#undef AVX2_F16_HI

/* dst = src widened to f32 (f16 when f16, else bf16), 8 at a time. */
ORTEP_SIMD_AVX2 static void widen_avx2(const uint16_t *src, bool f16, float *dst, size_t n) {
  size_t i = 0;
  if (f16)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2_load_f16(src + i));
  else
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2_load_bf16(src + i));
  for (; i < n; i++) dst[i] = f16 ? ortep_f16_to_f32(src[i]) : cpu_bf16(src[i]);
}

/* y = fma(a, x, y) element by element. */
ORTEP_SIMD_AVX2 static void axpy_avx2(float a, const float *x, float *y, size_t n) {
  __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

#endif
