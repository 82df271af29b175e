/*
 * simd_rows.h: the CPU EP's products over many rows of x for 16-bit weights
 * in the blocked layout, on AVX-512 (ops.c picks them when CPUID says so and
 * the SIMD set is avx512): bf16 x bf16 on AVX512-BF16 for a prefill chunk
 * (first half), f32 activations bitwise as one row gives them for a batch's
 * rows and for one row (second half, AVX512BW).
 *
 * First half: bf16 products.
 * vdpbf16ps multiplies bf16 by bf16 pairwise and adds both products into an
 * f32 lane, so the rows of x are rounded to bf16 first (vcvtneps2bf16,
 * round to nearest even), once per node; the weights are read as they are
 * stored, nothing is widened. That rounding is why one row (decode) keeps
 * the f32-activation dot products of simd_avx2.h / simd_avx512.h, and only
 * a node over many rows (a prefill chunk, a batch of sequences) runs here:
 * its results differ from the one-row path by the activations' rounding
 * (docs/batch.md states the tolerance the tests hold it to).
 *
 * One quad of weight rows (ops.h: [N/4, K/16, 4, 16]) against R rows of x:
 * per 16 columns the quad is two 512-bit loads (rows 0-1 and rows 2-3, 16
 * values each), the row's 16 bf16 values are broadcast to both halves of a
 * register, and two vdpbf16ps add 32 products each into the row's two
 * accumulators; lanes 0-7 of the first hold weight row 0's pairs of
 * columns, lanes 8-15 row 1's. Every row's accumulators take the same
 * instructions in the same order whatever R is and whichever rows are
 * beside it, so a row's result depends on that row alone (bitwise), and
 * the four sums are avx2_hsum of each 8-lane half.
 *
 * The includer provides simd.h and avx2_hsum (simd_avx2.h).
 */
#ifndef ORTEP_KERNELS_CPU_SIMD_ROWS_H
#define ORTEP_KERNELS_CPU_SIMD_ROWS_H

/* The most rows one call takes: 16 accumulators, two weight registers and x. */
#define ORTEP_BF16_ROWS 8
/* how many 16-column blocks (128 bytes of a quad) ahead the weights are prefetched */
#define BF16_PREFETCH 32

/* dst[i] = x[i] rounded to bf16 (nearest even), n values. */
ORTEP_SIMD_BF16 static void to_bf16_avx512(const float *x, size_t n, uint16_t *dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(dst + i, m, v);
  }
}

ORTEP_SIMD_BF16 static inline float bf16_half_sum(__m512 v, int hi) {
  return avx2_hsum(hi ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v));
}

/* y[4r + i] = x row r (stride ldx) . weight row i of the quad w, r < R. */
ORTEP_SIMD_BF16 __attribute__((always_inline)) static inline void bf16_quad_rows(const uint16_t *x, size_t ldx,
                                                                                 const uint16_t *w, size_t k, float *y,
                                                                                 const size_t R) {
  __m512 a[ORTEP_BF16_ROWS], b[ORTEP_BF16_ROWS];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++) a[r] = b[r] = _mm512_setzero_ps();
  for (size_t t = 0; t < k; t += 16, w += 64) {
    _mm_prefetch((const char *)(w + 64 * BF16_PREFETCH), _MM_HINT_T0);
    _mm_prefetch((const char *)(w + 64 * BF16_PREFETCH + 32), _MM_HINT_T0);
    __m512bh w01 = (__m512bh)_mm512_loadu_si512(w), w23 = (__m512bh)_mm512_loadu_si512(w + 32);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; r++) {
      __m512bh xx = (__m512bh)_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + r * ldx + t)));
      a[r] = _mm512_dpbf16_ps(a[r], w01, xx);
      b[r] = _mm512_dpbf16_ps(b[r], w23, xx);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++) {
    y[4 * r + 0] = bf16_half_sum(a[r], 0), y[4 * r + 1] = bf16_half_sum(a[r], 1);
    y[4 * r + 2] = bf16_half_sum(b[r], 0), y[4 * r + 3] = bf16_half_sum(b[r], 1);
  }
}

/* rows (1 .. ORTEP_BF16_ROWS) rows of bf16 x against one quad; k a multiple of 16. */
ORTEP_SIMD_BF16 static void bf16_rows_avx512(const uint16_t *x, size_t ldx, size_t rows, const uint16_t *w, size_t k,
                                             float *y) {
  switch (rows) {
    case 1: bf16_quad_rows(x, ldx, w, k, y, 1); break;
    case 2: bf16_quad_rows(x, ldx, w, k, y, 2); break;
    case 3: bf16_quad_rows(x, ldx, w, k, y, 3); break;
    case 4: bf16_quad_rows(x, ldx, w, k, y, 4); break;
    case 5: bf16_quad_rows(x, ldx, w, k, y, 5); break;
    case 6: bf16_quad_rows(x, ldx, w, k, y, 6); break;
    case 7: bf16_quad_rows(x, ldx, w, k, y, 7); break;
    default: bf16_quad_rows(x, ldx, w, k, y, 8); break;
  }
}

/* --- Attention over a chunk in bf16 products --------------------------------
 * A prefill chunk's causal attention with bf16 products (ops.c rounds the
 * chunk's queries and its probabilities to bf16, and packs the head's keys
 * and values, rounded to bf16 where the cache is not bf16 already):
 *
 * Scores: the keys packed 16 to a block, transposed by pairs of elements
 * ([hd/2][16][2]: lane j holds key j's elements 2i and 2i + 1), so one
 * vdpbf16ps adds a pair of products into each of 16 keys' sums and a query
 * row's pair is one broadcast 32-bit value; no horizontal sums. Up to 8
 * rows against 2 blocks (32 keys) a tile: 16 accumulators.
 *
 * Values: P (rows of bf16 probabilities, unnormalised) times V packed by
 * pairs of positions ([span/2][hd][2]: lane j of register c holds element
 * 16c + j of positions 2i and 2i + 1), so a row's pair of probabilities is
 * one broadcast and each of hd/16 registers of the output row takes one
 * vdpbf16ps per pair of positions; the rows are scaled by 1 / their sum
 * when stored. Up to ORTEP_ATTN_PV_ROWS(hd) rows a tile, 16 accumulators.
 *
 * A row's sums take the same instructions in the same order whatever rows
 * are beside it, so a row's result is that row's alone (bitwise). */
#define ORTEP_ATTN_MAX_HD      128
#define ORTEP_ATTN_PV_ROWS(hd) ((hd) >= 32 ? 256 / (hd) : 8)

ORTEP_SIMD_BF16 static inline __m512bh bf16_pair(const uint16_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return (__m512bh)_mm512_set1_epi32(v);
}

ORTEP_SIMD_BF16 __attribute__((always_inline)) static inline void attn_qk_tile(const uint16_t *q, size_t ldq,
                                                                               const uint16_t *kt, size_t hd,
                                                                               float scale, float *s, size_t lds,
                                                                               const size_t R, const size_t NB) {
  __m512 a[8][2];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (size_t i = 0; i < hd / 2; i++) {
    __m512bh k0 = (__m512bh)_mm512_loadu_si512(kt + 32 * i), k1 = k0;
    if (NB > 1) k1 = (__m512bh)_mm512_loadu_si512(kt + 16 * hd + 32 * i);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; r++) {
      __m512bh x = bf16_pair(q + r * ldq + 2 * i);
      a[r][0] = _mm512_dpbf16_ps(a[r][0], k0, x);
      if (NB > 1) a[r][1] = _mm512_dpbf16_ps(a[r][1], k1, x);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++) {
    _mm512_storeu_ps(s + r * lds, _mm512_mul_ps(a[r][0], sc));
    if (NB > 1) _mm512_storeu_ps(s + r * lds + 16, _mm512_mul_ps(a[r][1], sc));
  }
}

/* s[r][16 b + j] = scale * (q row r . key 16 b + j), r < rows (<= 8), b < blocks. */
ORTEP_SIMD_BF16 static void attn_scores_avx512(const uint16_t *q, size_t ldq, size_t rows, const uint16_t *kt,
                                               size_t blocks, size_t hd, float scale, float *s, size_t lds) {
  for (size_t b = 0; b < blocks; b += 2) {
    const uint16_t *kb = kt + b * 16 * hd;
    float *sb = s + 16 * b;
    bool two = blocks - b >= 2;
#define QK_CASE(R)                                        \
  case R:                                                 \
    if (two)                                              \
      attn_qk_tile(q, ldq, kb, hd, scale, sb, lds, R, 2); \
    else                                                  \
      attn_qk_tile(q, ldq, kb, hd, scale, sb, lds, R, 1); \
    break;
    switch (rows) { QK_CASE(1) QK_CASE(2) QK_CASE(3) QK_CASE(4) QK_CASE(5) QK_CASE(6) QK_CASE(7) default : QK_CASE(8) }
#undef QK_CASE
  }
}

ORTEP_SIMD_BF16 __attribute__((always_inline)) static inline void attn_pv_tile(const uint16_t *p, size_t ldp,
                                                                               const uint16_t *vp, size_t pairs,
                                                                               const float *inv, float *o, size_t ldo,
                                                                               const size_t R, const size_t NJ) {
  __m512 a[8][8];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++)
#pragma GCC unroll 8
    for (size_t c = 0; c < NJ; c++) a[r][c] = _mm512_setzero_ps();
  for (size_t i = 0; i < pairs; i++, vp += 32 * NJ) {
    __m512bh v[8];
#pragma GCC unroll 8
    for (size_t c = 0; c < NJ; c++) v[c] = (__m512bh)_mm512_loadu_si512(vp + 32 * c);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; r++) {
      __m512bh x = bf16_pair(p + r * ldp + 2 * i);
#pragma GCC unroll 8
      for (size_t c = 0; c < NJ; c++) a[r][c] = _mm512_dpbf16_ps(a[r][c], v[c], x);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; r++) {
    __m512 f = _mm512_set1_ps(inv[r]);
#pragma GCC unroll 8
    for (size_t c = 0; c < NJ; c++) _mm512_storeu_ps(o + r * ldo + 16 * c, _mm512_mul_ps(a[r][c], f));
  }
}

/* o[r][d] = inv[r] * sum over positions s < 2 pairs of p[r][s] v[s][d], r <
 * rows (<= ORTEP_ATTN_PV_ROWS(hd)); hd a multiple of 16, at most
 * ORTEP_ATTN_MAX_HD. */
ORTEP_SIMD_BF16 static void attn_values_avx512(const uint16_t *p, size_t ldp, size_t rows, const uint16_t *vp,
                                               size_t pairs, size_t hd, const float *inv, float *o, size_t ldo) {
#define PV_CASE(R, NJ)                                   \
  case R:                                                \
    attn_pv_tile(p, ldp, vp, pairs, inv, o, ldo, R, NJ); \
    break;
#define PV_ROWS8(NJ)                                                                                                   \
  switch (rows) {                                                                                                      \
    PV_CASE(1, NJ)                                                                                                     \
    PV_CASE(2, NJ) PV_CASE(3, NJ) PV_CASE(4, NJ) PV_CASE(5, NJ) PV_CASE(6, NJ) PV_CASE(7, NJ) default : PV_CASE(8, NJ) \
  }
  switch (hd / 16) {
    case 1: PV_ROWS8(1) break;
    case 2: PV_ROWS8(2) break;
    case 3:
      switch (rows) { PV_CASE(1, 3) PV_CASE(2, 3) PV_CASE(3, 3) PV_CASE(4, 3) default : PV_CASE(5, 3) }
      break;
    case 4:
      switch (rows) { PV_CASE(1, 4) PV_CASE(2, 4) PV_CASE(3, 4) default : PV_CASE(4, 4) }
      break;
    case 5:
      switch (rows) { PV_CASE(1, 5) PV_CASE(2, 5) default : PV_CASE(3, 5) }
      break;
    case 6:
      switch (rows) { PV_CASE(1, 6) default : PV_CASE(2, 6) }
      break;
    case 7:
      switch (rows) { PV_CASE(1, 7) default : PV_CASE(2, 7) }
      break;
    default:
      switch (rows) { PV_CASE(1, 8) default : PV_CASE(2, 8) }
      break;
  }
#undef PV_ROWS8
#undef PV_CASE
}

/* --- Many rows with f32 activations: bitwise dot4_*_avx2 per row ----------
 * The AVX2 four-row kernels (simd_avx2.h) keep two 8-lane accumulators per
 * weight row, lo and hi; here one 16-lane register holds both (lanes 0-7
 * lo, 8-15 hi), so every lane takes exactly the FMAs, in the order, of the
 * AVX2 kernel, and a row's result is avx2_hsum(lo + hi) as there: bitwise
 * dot4_bf16_avx2 / dot4_f16_avx2 for every row. The weights are widened
 * once per 16 columns for up to ORTEP_F32_ROWS rows (bf16: one vpermw
 * from memory puts each value in the high half of its lane, in the AVX2
 * kernel's lane order; f16: vcvtph2ps), and the quad ahead is prefetched. */
#define ORTEP_F32_ROWS 6
/* bf16 lanes as the AVX2 kernel's unpacklo / unpackhi order them: lo lanes
 * columns 0-3, 8-11, hi lanes 4-7, 12-15; odd words only (the even ones
 * zeroed by the mask), rows 0 and 1 of a 512-bit load */
#define BF16_LANE(c) 0, (c)
#define BF16_LANES(o)                                                                                               \
  BF16_LANE(o + 0), BF16_LANE(o + 1), BF16_LANE(o + 2), BF16_LANE(o + 3), BF16_LANE(o + 8), BF16_LANE(o + 9),       \
      BF16_LANE(o + 10), BF16_LANE(o + 11), BF16_LANE(o + 4), BF16_LANE(o + 5), BF16_LANE(o + 6), BF16_LANE(o + 7), \
      BF16_LANE(o + 12), BF16_LANE(o + 13), BF16_LANE(o + 14), BF16_LANE(o + 15)

ORTEP_SIMD_BW __attribute__((always_inline)) static inline void f32_quad_rows(const float *x, size_t ldx,
                                                                              const uint16_t *w, size_t k, float *y,
                                                                              const size_t R, const bool f16) {
  static const short lanes0[32] = {BF16_LANES(0)}, lanes1[32] = {BF16_LANES(16)};
  const __m512i i0 = _mm512_loadu_si512(lanes0), i1 = _mm512_loadu_si512(lanes1);
  __m512 a[ORTEP_F32_ROWS][4];
#pragma GCC unroll 6
  for (size_t r = 0; r < R; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
  for (size_t t = 0; t < k; t += 16, w += 64) {
    /* the next quad, at this column: a quad ahead of the stream (a batch's later passes over this quad
     * find the next one there already; a fixed 4 KiB ahead measured slower at 8 and 16 rows) */
    _mm_prefetch((const char *)(w + 4 * k), _MM_HINT_T0);
    _mm_prefetch((const char *)(w + 4 * k + 32), _MM_HINT_T0);
    __m512 v[4];
    if (f16) {
      for (int i = 0; i < 4; i++) v[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 16 * i)));
    } else {
      __m512i p = _mm512_loadu_si512(w), q = _mm512_loadu_si512(w + 32);
      v[0] = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, i0, p));
      v[1] = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, i1, p));
      v[2] = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, i0, q));
      v[3] = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, i1, q));
    }
#pragma GCC unroll 6
    for (size_t r = 0; r < R; r++) {
      __m512 xr = _mm512_loadu_ps(x + r * ldx + t);
      for (int i = 0; i < 4; i++) a[r][i] = _mm512_fmadd_ps(xr, v[i], a[r][i]);
    }
  }
#pragma GCC unroll 6
  for (size_t r = 0; r < R; r++)
    for (size_t i = 0; i < 4; i++)
      y[4 * r + i] = avx2_hsum(_mm256_add_ps(_mm512_castps512_ps256(a[r][i]),
                                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[r][i]), 1))));
}
#undef BF16_LANE
#undef BF16_LANES

/* rows (1 .. ORTEP_F32_ROWS) rows of x (bf16: permuted as avx2_x4_bf16 gives
 * it; f16: as is) against one quad of 16-bit weights; k a multiple of 16. */
#define ORTEP_F32_ROWS_FN(name, F16)                                                                               \
  ORTEP_SIMD_BW static void name(const float *x, size_t ldx, size_t rows, const uint16_t *w, size_t k, float *y) { \
    switch (rows) {                                                                                                \
      case 1: f32_quad_rows(x, ldx, w, k, y, 1, F16); break;                                                       \
      case 2: f32_quad_rows(x, ldx, w, k, y, 2, F16); break;                                                       \
      case 3: f32_quad_rows(x, ldx, w, k, y, 3, F16); break;                                                       \
      case 4: f32_quad_rows(x, ldx, w, k, y, 4, F16); break;                                                       \
      case 5: f32_quad_rows(x, ldx, w, k, y, 5, F16); break;                                                       \
      default: f32_quad_rows(x, ldx, w, k, y, 6, F16); break;                                                      \
    }                                                                                                              \
  }
ORTEP_F32_ROWS_FN(rows_bf16_avx512, false)
ORTEP_F32_ROWS_FN(rows_f16_avx512, true)

#endif
