/*
 * ops.c: the CPU op kernels (ops.h). One row (decode) runs through the SIMD
 * dot products chosen at start-up (AVX-512F, AVX2 or portable loops: below),
 * more rows (prefill) through single-threaded OpenBLAS sgemm on blocks of
 * weights, 16-bit ones widened to f32 first; f32 accumulation throughout.
 * Every loop runs in a fixed order, so a kernel gives bitwise the same result
 * each time it runs on the same inputs: replay equals eager.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/opset.h" /* the blocked layout */
#include "isa.h"
#include "ops.h"
#include "simd.h"

static void blocked_row_f32(cpu_weights w, size_t r, size_t k, float *dst);

/* --- e^x (ops.h) ------------------------------------------------------------------ */
#define EXP_LO  (-87.3f) /* e^x a normal float, and 2^n below fits the exponent field */
#define EXP_HI  88.3f
#define EXP_L2E 1.44269504088896341f
#define EXP_C1  0.693359375f /* ln 2 in two parts: n * C1 is exact */
#define EXP_C2  (-2.12194440e-4f)
#define EXP_P0  1.9875691500e-4f
#define EXP_P1  1.3981999507e-3f
#define EXP_P2  8.3334519073e-3f
#define EXP_P3  4.1665795894e-2f
#define EXP_P4  1.6666665459e-1f
#define EXP_P5  5.0000001201e-1f

static float exp1(float x) {
  if (x != x) return x; /* NaN stays NaN */
  x = x < EXP_LO ? EXP_LO : x > EXP_HI ? EXP_HI : x;
  float f = x * EXP_L2E + 0.5f, n = (float)(int32_t)f;
  n = n > f ? n - 1.0f : n; /* floor */
  x = x - n * EXP_C1;
  x = x - n * EXP_C2;
  float z = x * x, p = EXP_P0;
  p = p * x + EXP_P1, p = p * x + EXP_P2, p = p * x + EXP_P3, p = p * x + EXP_P4, p = p * x + EXP_P5;
  p = p * z + x + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* The same operations as exp1, four lanes. */
static __m128 exp4(__m128 x) {
  const __m128 lo = _mm_set1_ps(EXP_LO), one = _mm_set1_ps(1.0f);
  __m128 nan = _mm_cmpunord_ps(x, x);
  x = _mm_min_ps(_mm_max_ps(x, lo), _mm_set1_ps(EXP_HI));
  x = _mm_or_ps(_mm_andnot_ps(nan, x), _mm_and_ps(nan, lo));
  __m128 f = _mm_add_ps(_mm_mul_ps(x, _mm_set1_ps(EXP_L2E)), _mm_set1_ps(0.5f));
  __m128 n = _mm_cvtepi32_ps(_mm_cvttps_epi32(f));
  n = _mm_sub_ps(n, _mm_and_ps(_mm_cmpgt_ps(n, f), one));
  x = _mm_sub_ps(x, _mm_mul_ps(n, _mm_set1_ps(EXP_C1)));
  x = _mm_sub_ps(x, _mm_mul_ps(n, _mm_set1_ps(EXP_C2)));
  __m128 z = _mm_mul_ps(x, x), p = _mm_set1_ps(EXP_P0);
  p = _mm_add_ps(_mm_mul_ps(p, x), _mm_set1_ps(EXP_P1));
  p = _mm_add_ps(_mm_mul_ps(p, x), _mm_set1_ps(EXP_P2));
  p = _mm_add_ps(_mm_mul_ps(p, x), _mm_set1_ps(EXP_P3));
  p = _mm_add_ps(_mm_mul_ps(p, x), _mm_set1_ps(EXP_P4));
  p = _mm_add_ps(_mm_mul_ps(p, x), _mm_set1_ps(EXP_P5));
  p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, z), x), one);
  __m128i bits = _mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(n), _mm_set1_epi32(127)), 23);
  p = _mm_mul_ps(p, _mm_castsi128_ps(bits));
  return _mm_or_ps(_mm_andnot_ps(nan, p), _mm_and_ps(nan, _mm_set1_ps(NAN))); /* NaN stays NaN */
}
#endif

/* The softmax's first half over x[0, n), in place: x = e^(x - max x); returns
 * the sum. The max ignores NaN (as a scalar compare does) and the sum runs
 * in four lanes combined in one order, so a row's result is the same
 * wherever it runs. */
static float exp_shifted(float *x, size_t n) {
  float mx = -INFINITY, sum = 0.0f;
  size_t i = 0;
#if defined(__SSE2__)
  __m128 m4 = _mm_set1_ps(-INFINITY), s4 = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) m4 = _mm_max_ps(_mm_loadu_ps(x + i), m4); /* a NaN in x: m4 kept */
  float l[4];
  _mm_storeu_ps(l, m4);
  for (int q = 0; q < 4; q++) mx = l[q] > mx ? l[q] : mx;
  for (size_t t = i; t < n; t++) mx = x[t] > mx ? x[t] : mx;
  __m128 m = _mm_set1_ps(mx);
  for (size_t t = 0; t + 4 <= n; t += 4) _mm_storeu_ps(x + t, _mm_sub_ps(_mm_loadu_ps(x + t), m));
  for (size_t t = i; t < n; t++) x[t] -= mx;
  ortep__cpu_exp(x, x, n);
  for (size_t t = 0; t + 4 <= n; t += 4) s4 = _mm_add_ps(s4, _mm_loadu_ps(x + t));
  _mm_storeu_ps(l, s4);
  sum = (l[0] + l[1]) + (l[2] + l[3]);
#else
  for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  for (size_t t = 0; t < n; t++) x[t] -= mx;
  ortep__cpu_exp(x, x, n);
  i = 0;
#endif
  for (size_t t = i; t < n; t++) sum += x[t];
  return sum;
}

static void exp_sse(const float *x, float *y, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, exp4(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; i++) y[i] = exp1(x[i]);
}

/* The widest form the CPU has, chosen with the dot products (pick_dots):
 * AVX2 and AVX-512 run exp4's operations on 8 and 16 lanes (ISO C: nothing
 * is contracted into an FMA), so every form gives bitwise the same values. */
static void (*exp_impl)(const float *, float *, size_t) = exp_sse;
/* ortep__cpu_argmax_range's loop: the scalar rule, or AVX-512's or AVX2's (below) */
static void argmax_scalar(const float *x32, const uint16_t *x16, size_t i, size_t end, size_t *best, float *value,
                          bool *bad);
static void (*argmax_impl)(const float *, const uint16_t *, size_t, size_t, size_t *, float *, bool *) = argmax_scalar;
#if defined(__x86_64__)
static void argmax_avx512(const float *x32, const uint16_t *x16, size_t begin, size_t end, size_t *best, float *value,
                          bool *bad);
static void argmax_avx2(const float *x32, const uint16_t *x16, size_t begin, size_t end, size_t *best, float *value,
                        bool *bad);
#endif

__attribute__((noinline)) void ortep__cpu_exp(const float *x, float *y, size_t n) { exp_impl(x, y, n); }

/* SiLU(g) x u with g and u already biased, n at a time (the exponentials in one call). */
static void silu_mul_n(const float *g, const float *u, float *y, size_t n) {
  float e[64];
  for (size_t i0 = 0; i0 < n; i0 += 64) {
    size_t m = n - i0 < 64 ? n - i0 : 64;
    for (size_t i = 0; i < m; i++) e[i] = -g[i0 + i];
    ortep__cpu_exp(e, e, m);
    for (size_t i = 0; i < m; i++) y[i0 + i] = g[i0 + i] / (1.0f + e[i]) * u[i0 + i];
  }
}

void ortep__cpu_gather(cpu_weights table, bool blocked, size_t rows, size_t h, const void *index, bool index64,
                       size_t n, float *out, uint32_t *error_word) {
  for (size_t i = 0; i < n; i++) {
    int64_t r = index64 ? ((const int64_t *)index)[i] : ((const int32_t *)index)[i];
    float *dst = out + i * h;
    if (r < 0 || (uint64_t)r >= rows) {
      cpu_latch(error_word, ORTEP_ERROR_GATHER_INDEX);
      memset(dst, 0, h * sizeof *dst);
      continue;
    }
    size_t base = (size_t)r * h;
    if (ortep_dtype_is_quantized(table.dtype))
      ortep__cpu_quant_row_f32(table.dtype, table.data, blocked, (size_t)r, h, dst);
    else if (blocked)
      blocked_row_f32(table, (size_t)r, h, dst);
    else if (table.dtype == ORTEP_DTYPE_F32)
      memcpy(dst, (const float *)table.data + base, h * sizeof *dst);
    else
      for (size_t j = 0; j < h; j++) dst[j] = cpu_w(table, base + j);
  }
}

/* A dot product in eight lanes, summed in a fixed order: the compiler can
 * vectorise it (the lanes make the reassociation explicit) and the result
 * is the same bits every time. */
static float dot8(const float *x, const float *w, size_t k) {
  float l[8] = {0};
  size_t t = 0;
  for (; t + 8 <= k; t += 8)
    for (size_t j = 0; j < 8; j++) l[j] += x[t + j] * w[t + j];
  for (; t < k; t++) l[t & 7] += x[t] * w[t];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static float dot8_bf16(const float *x, const uint16_t *w, size_t k) {
  float l[8] = {0};
  size_t t = 0;
  for (; t + 8 <= k; t += 8)
    for (size_t j = 0; j < 8; j++) l[j] += x[t + j] * cpu_bf16(w[t + j]);
  for (; t < k; t++) l[t & 7] += x[t] * cpu_bf16(w[t]);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* dst = the 16-bit floats src as f32 (bf16, or f16 when f16). */
static void widen_portable(const uint16_t *src, bool f16, float *dst, size_t n) {
  if (f16)
    for (size_t i = 0; i < n; i++) dst[i] = ortep_f16_to_f32(src[i]);
  else
    for (size_t i = 0; i < n; i++) dst[i] = cpu_bf16(src[i]);
}

/* y += a x, n floats (attention's weighted sum of V rows). */
static void axpy_portable(float a, const float *x, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float dot8_f16(const float *x, const uint16_t *w, size_t k) {
  float l[8] = {0};
  size_t t = 0;
  for (; t + 8 <= k; t += 8)
    for (size_t j = 0; j < 8; j++) l[j] += x[t + j] * ortep_f16_to_f32(w[t + j]);
  for (; t < k; t++) l[t & 7] += x[t] * ortep_f16_to_f32(w[t]);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Four rows of a blocked weight (ops.h), each summed exactly as dot8 sums a
 * row-major one: lane c % 8 of column c, columns in order. So with the
 * portable loops a blocked weight gives bitwise the row-major results. */
#define DOT4_PORTABLE(name, WIDEN)                                                                      \
  static void name(const float *x, const uint16_t *w, size_t k, float *y) {                             \
    float l[4][8] = {{0}};                                                                              \
    for (size_t t = 0; t < k; t += 16, w += 64)                                                         \
      for (size_t r = 0; r < 4; r++)                                                                    \
        for (size_t h = 0; h < 16; h += 8)                                                              \
          for (size_t j = 0; j < 8; j++) l[r][j] += x[t + h + j] * WIDEN(w[r * 16 + h + j]);            \
    for (size_t r = 0; r < 4; r++)                                                                      \
      y[r] = ((l[r][0] + l[r][1]) + (l[r][2] + l[r][3])) + ((l[r][4] + l[r][5]) + (l[r][6] + l[r][7])); \
  }
DOT4_PORTABLE(dot4_bf16_portable, cpu_bf16)
DOT4_PORTABLE(dot4_f16_portable, ortep_f16_to_f32)
static const float *x4_as_is(const float *x, size_t k, float *xp) {
  (void)k, (void)xp;
  return x;
}

/* --- SIMD dot products -------------------------------------------------------
 * x86-64: AVX-512F (simd_avx512.h) or AVX2 + FMA + F16C (simd_avx2.h),
 * the widest the CPU and the OS support (isa.h), chosen once per process (and
 * ORTEP_CPU_SIMD=avx512|avx2|portable asks for one: pick_dots). Within one
 * process the choice never changes, so results do not depend on the thread
 * count; the variants differ from each other and from the portable loops
 * above only by float rounding (a different summation order). */
#if defined(__x86_64__)
#include "simd_avx2.h"
#include "simd_avx512.h"
#include "simd_rows.h"
#endif
#ifndef ORTEP_F32_ROWS
#define ORTEP_F32_ROWS         6 /* the row counts of simd_rows.h's kernels, which only x86-64 has */
#define ORTEP_BF16_ROWS        8
#define ORTEP_ATTN_MAX_HD      128
#define ORTEP_ATTN_PV_ROWS(hd) 8
#endif
/* the most rows one store_quads call takes */
#define STORE_ROWS (ORTEP_BF16_ROWS > ORTEP_F32_ROWS ? ORTEP_BF16_ROWS : ORTEP_F32_ROWS)

typedef struct dot_set {
  float (*f32)(const float *, const float *, size_t);
  float (*bf16)(const float *, const uint16_t *, size_t);
  float (*f16)(const float *, const uint16_t *, size_t);
  void (*axpy)(float, const float *, float *, size_t);
  void (*widen)(const uint16_t *, bool, float *, size_t);
  /* blocked weights: x as the bf16 kernel reads it (xp: k floats), and four rows at once */
  const float *(*x4_bf16)(const float *x, size_t k, float *xp);
  void (*dot4_bf16)(const float *, const uint16_t *, size_t, float *);
  void (*dot4_f16)(const float *, const uint16_t *, size_t, float *);
  /* two rows of x at once, each bitwise as dot4 gives it (a batch's rows) */
  void (*dot4x2_bf16)(const float *, const float *, const uint16_t *, size_t, float *, float *);
  void (*dot4x2_f16)(const float *, const float *, const uint16_t *, size_t, float *, float *);
  /* many rows of bf16-rounded x against a bf16 quad (simd_rows.h); NULL where the CPU lacks AVX512-BF16 */
  void (*to_bf16)(const float *, size_t, uint16_t *);
  void (*bf16_rows)(const uint16_t *, size_t, size_t, const uint16_t *, size_t, float *);
  /* up to ORTEP_F32_ROWS rows of x against a quad, bitwise dot4_* per row (simd_rows.h); NULL: dot4 / dot4x2 */
  void (*rows_bf16)(const float *, size_t, size_t, const uint16_t *, size_t, float *);
  void (*rows_f16)(const float *, size_t, size_t, const uint16_t *, size_t, float *);
  /* a chunk's attention in bf16 products (simd_rows.h); NULL with bf16_rows */
  void (*attn_scores)(const uint16_t *, size_t, size_t, const uint16_t *, size_t, size_t, float, float *, size_t);
  void (*attn_values)(const uint16_t *, size_t, size_t, const uint16_t *, size_t, size_t, const float *, float *,
                      size_t);
  /* decode attention for `heads` query heads sharing one KV head, over a cache of f32/f16/bf16 rows: the
   * scores (head h's at sc + h stride), bitwise the dot above per row; after the softmax, each head's weights
   * p divided by its denom in place, then its values, bitwise axpy per (widened) row into a zeroed out
   * (simd_*.h head_*) */
  void (*head_scores)(const float *q, size_t heads, const void *k, ortep_dtype dt, size_t row, size_t n, size_t hd,
                      float scale, float *sc, size_t stride);
  void (*head_values)(float *p, size_t stride, const float *denom, size_t heads, const void *v, ortep_dtype dt,
                      size_t row, size_t n, size_t hd, float *out);
  const char *name;
} dot_set;

static void dot4x2_bf16_portable(const float *x0, const float *x1, const uint16_t *w, size_t k, float *y0, float *y1) {
  dot4_bf16_portable(x0, w, k, y0), dot4_bf16_portable(x1, w, k, y1);
}
static void dot4x2_f16_portable(const float *x0, const float *x1, const uint16_t *w, size_t k, float *y0, float *y1) {
  dot4_f16_portable(x0, w, k, y0), dot4_f16_portable(x1, w, k, y1);
}
/* the portable heads: the set's dot and axpy row by row */
static void head_scores_portable(const float *q, size_t heads, const void *k, ortep_dtype dt, size_t row, size_t n,
                                 size_t hd, float scale, float *sc, size_t stride) {
  for (size_t h = 0; h < heads; h++)
    for (size_t s = 0; s < n; s++) {
      const void *r = (const char *)k + s * row * ortep_dtype_size(dt);
      const float *qh = q + h * hd;
      sc[h * stride + s] = (dt == ORTEP_DTYPE_F32   ? dot8(qh, r, hd)
                            : dt == ORTEP_DTYPE_F16 ? dot8_f16(qh, r, hd)
                                                    : dot8_bf16(qh, r, hd)) *
                           scale;
    }
}
static void head_values_portable(float *p, size_t stride, const float *denom, size_t heads, const void *v,
                                 ortep_dtype dt, size_t row, size_t n, size_t hd, float *out) {
  for (size_t h = 0; h < heads; h++) {
    float *ph = p + h * stride, *oh = out + h * hd;
    for (size_t s = 0; s < n; s++) ph[s] /= denom[h];
    memset(oh, 0, hd * sizeof *oh);
    for (size_t s = 0; s < n; s++)
      for (size_t c = 0; c < hd; c++) {
        size_t at = s * row + c;
        float x = dt == ORTEP_DTYPE_F32   ? ((const float *)v)[at]
                  : dt == ORTEP_DTYPE_F16 ? ortep_f16_to_f32(((const uint16_t *)v)[at])
                                          : cpu_bf16(((const uint16_t *)v)[at]);
        oh[c] += ph[s] * x; /* axpy_portable's rounding */
      }
  }
}
static dot_set dots = {.f32 = dot8,
                       .bf16 = dot8_bf16,
                       .f16 = dot8_f16,
                       .axpy = axpy_portable,
                       .widen = widen_portable,
                       .x4_bf16 = x4_as_is,
                       .dot4_bf16 = dot4_bf16_portable,
                       .dot4_f16 = dot4_f16_portable,
                       .dot4x2_bf16 = dot4x2_bf16_portable,
                       .dot4x2_f16 = dot4x2_f16_portable,
                       .head_scores = head_scores_portable,
                       .head_values = head_values_portable,
                       .name = "portable"};
static pthread_once_t dots_once = PTHREAD_ONCE_INIT;
static char dots_error[256];     /* why ORTEP_CPU_SIMD could not be honoured; "" when it was */
static ortep_status dots_status; /* INVALID_ARGUMENT: not a name; NOT_SUPPORTED: a set this CPU lacks */

#if defined(__x86_64__)
ORTEP_SIMD_AVX2 static void exp_avx2(const float *x, float *y, size_t n) {
  const __m256 lo = _mm256_set1_ps(EXP_LO), one = _mm256_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i), nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), _mm256_set1_ps(EXP_HI));
    v = _mm256_blendv_ps(v, lo, nan);
    __m256 f = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(EXP_L2E)), _mm256_set1_ps(0.5f));
    __m256 m = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(f));
    m = _mm256_sub_ps(m, _mm256_and_ps(_mm256_cmp_ps(m, f, _CMP_GT_OQ), one));
    v = _mm256_sub_ps(v, _mm256_mul_ps(m, _mm256_set1_ps(EXP_C1)));
    v = _mm256_sub_ps(v, _mm256_mul_ps(m, _mm256_set1_ps(EXP_C2)));
    __m256 z = _mm256_mul_ps(v, v), p = _mm256_set1_ps(EXP_P0);
    p = _mm256_add_ps(_mm256_mul_ps(p, v), _mm256_set1_ps(EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, v), _mm256_set1_ps(EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, v), _mm256_set1_ps(EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, v), _mm256_set1_ps(EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, v), _mm256_set1_ps(EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), v), one);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(m), _mm256_set1_epi32(127)), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(p, _mm256_set1_ps(NAN), nan));
  }
  exp_sse(x + i, y + i, n - i);
}

ORTEP_SIMD_AVX512 static void exp_avx512(const float *x, float *y, size_t n) {
  const __m512 lo = _mm512_set1_ps(EXP_LO), one = _mm512_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), _mm512_set1_ps(EXP_HI));
    v = _mm512_mask_blend_ps(nan, v, lo);
    __m512 f = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(EXP_L2E)), _mm512_set1_ps(0.5f));
    __m512 m = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(f));
    m = _mm512_mask_sub_ps(m, _mm512_cmp_ps_mask(m, f, _CMP_GT_OQ), m, one);
    v = _mm512_sub_ps(v, _mm512_mul_ps(m, _mm512_set1_ps(EXP_C1)));
    v = _mm512_sub_ps(v, _mm512_mul_ps(m, _mm512_set1_ps(EXP_C2)));
    __m512 z = _mm512_mul_ps(v, v), p = _mm512_set1_ps(EXP_P0);
    p = _mm512_add_ps(_mm512_mul_ps(p, v), _mm512_set1_ps(EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, v), _mm512_set1_ps(EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, v), _mm512_set1_ps(EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, v), _mm512_set1_ps(EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, v), _mm512_set1_ps(EXP_P5));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), v), one);
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(m), _mm512_set1_epi32(127)), 23);
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    _mm512_storeu_ps(y + i, _mm512_mask_blend_ps(nan, p, _mm512_set1_ps(NAN)));
  }
  exp_sse(x + i, y + i, n - i);
}

/* simd_*.h's head kernels for the cache's dtype */
#define ORTEP_HEAD_SET(isa, ISA)                                                                                 \
  ORTEP_SIMD_##ISA static void head_scores_##isa(const float *q, size_t heads, const void *k, ortep_dtype dt,    \
                                                 size_t row, size_t n, size_t hd, float scale, float *sc,        \
                                                 size_t stride) {                                                \
    if (dt == ORTEP_DTYPE_F32)                                                                                   \
      head_scores_f32_##isa(q, heads, k, row, n, hd, scale, sc, stride);                                         \
    else if (dt == ORTEP_DTYPE_F16)                                                                              \
      head_scores_f16_##isa(q, heads, k, row, n, hd, scale, sc, stride);                                         \
    else                                                                                                         \
      head_scores_bf16_##isa(q, heads, k, row, n, hd, scale, sc, stride);                                        \
  }                                                                                                              \
  ORTEP_SIMD_##ISA static void head_values_##isa(float *p, size_t stride, const float *denom, size_t heads,      \
                                                 const void *v, ortep_dtype dt, size_t row, size_t n, size_t hd, \
                                                 float *out) {                                                   \
    if (dt == ORTEP_DTYPE_F32)                                                                                   \
      head_values_f32_##isa(p, stride, denom, heads, v, row, n, hd, out);                                        \
    else if (dt == ORTEP_DTYPE_F16)                                                                              \
      head_values_f16_##isa(p, stride, denom, heads, v, row, n, hd, out);                                        \
    else                                                                                                         \
      head_values_bf16_##isa(p, stride, denom, heads, v, row, n, hd, out);                                       \
  }
ORTEP_HEAD_SET(avx2, AVX2)
ORTEP_HEAD_SET(avx512, AVX512)

/* the many-row and attention kernels stay NULL here: set with bf16_rows where the CPU has AVX512-BF16 */
static const dot_set avx2_set = {.f32 = dot_f32_avx2,
                                 .bf16 = dot_bf16_avx2,
                                 .f16 = dot_f16_avx2,
                                 .axpy = axpy_avx2,
                                 .widen = widen_avx2,
                                 .x4_bf16 = avx2_x4_bf16,
                                 .dot4_bf16 = dot4_bf16_avx2,
                                 .dot4_f16 = dot4_f16_avx2,
                                 .dot4x2_bf16 = dot4x2_bf16_avx2,
                                 .dot4x2_f16 = dot4x2_f16_avx2,
                                 .head_scores = head_scores_avx2,
                                 .head_values = head_values_avx2,
                                 .name = "avx2"};
/* the blocked four-row kernels are the AVX2 ones (no AVX-512 variant yet);
 * their two-row forms use AVX-512VL's 32 registers when it is there */
static const dot_set avx512_set = {.f32 = dot_f32_avx512,
                                   .bf16 = dot_bf16_avx512,
                                   .f16 = dot_f16_avx512,
                                   .axpy = axpy_avx512,
                                   .widen = widen_avx512,
                                   .x4_bf16 = avx2_x4_bf16,
                                   .dot4_bf16 = dot4_bf16_avx2,
                                   .dot4_f16 = dot4_f16_avx2,
                                   .dot4x2_bf16 = dot4x2_bf16_avx2,
                                   .dot4x2_f16 = dot4x2_f16_avx2,
                                   .head_scores = head_scores_avx512,
                                   .head_values = head_values_avx512,
                                   .name = "avx512"};
#endif

/* The widest set the machine supports (isa.h), or the one ORTEP_CPU_SIMD
 * names ("auto" or unset: the widest). A name that is unknown, or a set this
 * CPU lacks, leaves the portable loops in place and records why in dots_error
 * (and dots_status: ORTEP_E_INVALID_ARGUMENT for a name that is not a set,
 * ORTEP_E_NOT_SUPPORTED for a set this CPU or its OS lacks, or that
 * ORTEP_CPU_HIDE hides);
 * the CPU EP refuses to initialise, and to make a kernel, with that message
 * (ortep__cpu_simd_check), so no kernel runs on a set that was not asked for;
 * and since every kernel is made after that check, the kernels themselves
 * read `dots` with no check of their own. */
static void pick_dots(void) {
  const char *want = getenv("ORTEP_CPU_SIMD");
  if (want && !*want) want = NULL;
  const unsigned isa = ortep__cpu_isa();
  const bool avx512 = isa & ORTEP_ISA_AVX512F, avx2 = isa & ORTEP_ISA_AVX2;
  const bool bw_vl = (isa & ORTEP_ISA_AVX512BW) && (isa & ORTEP_ISA_AVX512VL);
  const char *have = avx512 ? "avx512, avx2 and portable" : avx2 ? "avx2 and portable" : "portable only";
  if (want && strcmp(want, "auto") && strcmp(want, "avx512") && strcmp(want, "avx2") && strcmp(want, "portable")) {
    snprintf(dots_error, sizeof dots_error,
             "ORTEP_CPU_SIMD='%.32s' is not a set of dot products: use auto, avx512, avx2 or portable (this CPU: %s)",
             want, have);
    dots_status = ORTEP_E_INVALID_ARGUMENT;
    return;
  }
  if (want && ((!strcmp(want, "avx512") && !avx512) || (!strcmp(want, "avx2") && !avx2))) {
    const char *hide = getenv("ORTEP_CPU_HIDE");
    char hidden[80] = "";
    if (hide && *hide) snprintf(hidden, sizeof hidden, ", or ORTEP_CPU_HIDE='%.40s' hides it", hide);
    snprintf(dots_error, sizeof dots_error,
             "ORTEP_CPU_SIMD=%s: this CPU (or its OS) does not support it%s; it supports %s; unset ORTEP_CPU_SIMD to "
             "use the widest",
             want, hidden, have);
    dots_status = ORTEP_E_NOT_SUPPORTED;
    return;
  }
  if (want && !strcmp(want, "portable")) return;
#if defined(__x86_64__)
  if (avx512 && (!want || strcmp(want, "avx2"))) {
    dots = avx512_set;
    exp_impl = exp_avx512;
    argmax_impl = argmax_avx512;
    if (isa & ORTEP_ISA_AVX512VL) dots.dot4x2_bf16 = dot4x2_bf16_avx2vl, dots.dot4x2_f16 = dot4x2_f16_avx2vl;
    if (bw_vl) dots.rows_bf16 = rows_bf16_avx512, dots.rows_f16 = rows_f16_avx512;
    if (bw_vl && (isa & ORTEP_ISA_AVX512BF16)) {
      dots.to_bf16 = to_bf16_avx512, dots.bf16_rows = bf16_rows_avx512;
      dots.attn_scores = attn_scores_avx512, dots.attn_values = attn_values_avx512;
    }
  } else if (avx2) {
    dots = avx2_set;
    exp_impl = exp_avx2;
    argmax_impl = argmax_avx2;
  }
#else
  (void)bw_vl;
#endif
}

const char *ortep__cpu_simd_name(void) {
  pthread_once(&dots_once, pick_dots);
  return dots.name;
}

ortep_status ortep__cpu_simd_check(void) {
  ortep_status st = ortep__cpu_isa_check();
  if (st != ORTEP_OK) return st;
  pthread_once(&dots_once, pick_dots);
  if (dots_error[0]) return ortep__fail(dots_status, "cpu_ep: %s", dots_error);
  return ORTEP_OK;
}

/* --- the BLAS's kernel set (cpu_ep.h) ------------------------------------------------ */
/* OpenBLAS (cblas.h declares both on Debian; repeated for other headers) */
char *openblas_get_corename(void);
char *openblas_get_config(void);

const char *ortep_cpu_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

/* A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model when it is loaded,
 * and one older than the CPU (0.3.21, Debian 12's, on a family 6 model 207
 * Xeon) takes its SSE3 "Prescott" set, several times slower there than the
 * set the CPU runs (docs/build.md). The set to name is the
 * widest this CPU and its OS run (isa.h; none in the emulated test build,
 * whose sets are not the CPU's); OpenBLAS 0.3.21 knows all three by these
 * names. */
const char *ortep_cpu_blas_suggested_core(void) {
  const char *core = openblas_get_corename(), *config = openblas_get_config();
  if (getenv("OPENBLAS_CORETYPE") || !core || strcasecmp(core, "Prescott") || !config ||
      !strstr(config, "DYNAMIC_ARCH"))
    return NULL;
  const unsigned isa = ortep__cpu_isa(), bw_vl = ORTEP_ISA_AVX512F | ORTEP_ISA_AVX512BW | ORTEP_ISA_AVX512VL;
  if (ortep__cpu_isa_emulated()) return NULL;
  if ((isa & bw_vl) == bw_vl) return isa & ORTEP_ISA_AVX512BF16 ? "Cooperlake" : "SkylakeX";
  if (isa & ORTEP_ISA_AVX2) return "Haswell";
  return NULL;
}

/* Row j of a [n, k] weight times x. */
static inline float dot_row(const float *x, cpu_weights w, size_t j, size_t k) {
  if (w.dtype == ORTEP_DTYPE_BF16) return dots.bf16(x, (const uint16_t *)w.data + j * k, k);
  if (w.dtype == ORTEP_DTYPE_F16) return dots.f16(x, (const uint16_t *)w.data + j * k, k);
  return dots.f32(x, (const float *)w.data + j * k, k);
}

size_t ortep__cpu_linear_items(size_t m, size_t groups, const size_t *n, bool gate_up) {
  size_t rows = 0;
  for (size_t g = 0; g < (gate_up ? 1 : groups); g++) rows += n[g];
  return m * rows;
}

void ortep__cpu_linear(const float *x, size_t m, size_t k, size_t groups, const cpu_weights *w, const cpu_weights *b,
                       const size_t *n, bool gate_up, bool rows_inner, const float *res, float *const *y, size_t begin,
                       size_t end) {
  size_t per_row = ortep__cpu_linear_items(1, groups, n, gate_up);
  for (size_t item = begin; item < end; item++) {
    /* rows_inner: an item's rows follow each other, so one weight row serves them all from the cache */
    size_t r = rows_inner ? item % m : item / per_row, j = rows_inner ? item / m : item % per_row;
    const float *xr = x + r * k;
    if (gate_up) {
      float g = dot_row(xr, w[0], j, k) + (b[0].data ? cpu_w(b[0], j) : 0.0f);
      float u = dot_row(xr, w[1], j, k) + (b[1].data ? cpu_w(b[1], j) : 0.0f);
      silu_mul_n(&g, &u, &y[0][r * n[0] + j], 1);
      continue;
    }
    size_t g = 0;
    while (j >= n[g]) j -= n[g++];
    float v = dot_row(xr, w[g], j, k) + (b[g].data ? cpu_w(b[g], j) : 0.0f);
    y[g][r * n[g] + j] = res ? v + res[r * n[g] + j] : v;
  }
}

/* Four outputs of a blocked weight (item = a group of four output rows, in
 * the order ortep__cpu_linear numbers single ones). */
static inline void dot4_rows(const float *x, const float *xb, cpu_weights w, size_t j, size_t k, float *v) {
  const uint16_t *wj = (const uint16_t *)w.data + j * k;
  if (w.dtype == ORTEP_DTYPE_BF16)
    dots.dot4_bf16(xb, wj, k, v);
  else
    dots.dot4_f16(x, wj, k, v);
}

/* Rows xr and the next (k floats further) against the same quad. */
static inline void dot4x2_rows(const float *x, const float *xb, size_t k, cpu_weights w, size_t j, float *v0,
                               float *v1) {
  const uint16_t *wj = (const uint16_t *)w.data + j * k;
  if (w.dtype == ORTEP_DTYPE_BF16)
    dots.dot4x2_bf16(xb, xb + k, wj, k, v0, v1);
  else
    dots.dot4x2_f16(x, x + k, wj, k, v0, v1);
}

const float *ortep__cpu_blocked_x(const float *x, size_t k, float *xp) { return dots.x4_bf16(x, k, xp); }

/* Rows r0 .. r0 + nr - 1 of outputs j .. j + 3 of group g from their sums
 * (v[4r + i]; gate_up: u the up projection's): bias, SiLU(gate) * up,
 * residual. */
static void store_quads(const float *v, const float *u, size_t r0, size_t nr, size_t j, size_t g, bool gate_up,
                        const cpu_weights *b, const size_t *n, const float *res, float *const *y) {
  float b0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, b1[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* 0: no bias, as v + 0 was */
  const cpu_weights *bw = &b[gate_up ? 0 : g];
  for (size_t i = 0; i < 4; i++) {
    if (bw->data) b0[i] = cpu_w(*bw, j + i);
    if (gate_up && b[1].data) b1[i] = cpu_w(b[1], j + i);
  }
  ortep__assert(nr <= STORE_ROWS);
#if defined(__SSE2__) /* a row's four outputs in one register: the operations of the loops below */
  __m128 bb0 = _mm_loadu_ps(b0), bb1 = _mm_loadu_ps(b1);
  if (gate_up) {
    float e[4 * STORE_ROWS];
    for (size_t r = 0; r < nr; r++)
      _mm_storeu_ps(e + 4 * r, _mm_xor_ps(_mm_set1_ps(-0.0f), _mm_add_ps(_mm_loadu_ps(v + 4 * r), bb0)));
    ortep__cpu_exp(e, e, 4 * nr);
    for (size_t r = 0; r < nr; r++) {
      __m128 gv = _mm_add_ps(_mm_loadu_ps(v + 4 * r), bb0), uv = _mm_add_ps(_mm_loadu_ps(u + 4 * r), bb1);
      __m128 sv = _mm_mul_ps(_mm_div_ps(gv, _mm_add_ps(_mm_set1_ps(1.0f), _mm_loadu_ps(e + 4 * r))), uv);
      _mm_storeu_ps(&y[0][(r0 + r) * n[0] + j], sv);
    }
    return;
  }
  for (size_t r = 0; r < nr; r++) {
    float *at = &y[g][(r0 + r) * n[g] + j];
    __m128 o = _mm_add_ps(_mm_loadu_ps(v + 4 * r), bb0);
    _mm_storeu_ps(at, res ? _mm_add_ps(o, _mm_loadu_ps(res + (at - y[g]))) : o);
  }
#else
  if (gate_up) {
    float gv[4 * STORE_ROWS], uv[4 * STORE_ROWS], sv[4 * STORE_ROWS];
    for (size_t i = 0; i < 4 * nr; i++) gv[i] = v[i] + b0[i & 3], uv[i] = u[i] + b1[i & 3];
    silu_mul_n(gv, uv, sv, 4 * nr);
    for (size_t r = 0; r < nr; r++) memcpy(&y[0][(r0 + r) * n[0] + j], sv + 4 * r, 4 * sizeof *sv);
    return;
  }
  for (size_t r = 0; r < nr; r++)
    for (size_t i = 0; i < 4; i++) {
      size_t at = (r0 + r) * n[g] + j + i;
      float o = v[4 * r + i] + b0[i];
      y[g][at] = res ? o + res[at] : o;
    }
#endif
}

/* One quad of a 16-bit blocked weight, rows r0 .. r0 + nr - 1 (simd_rows.h). */
static void quad_rows(const float *x, const float *xb, size_t k, size_t r0, size_t nr, cpu_weights w, size_t j,
                      float *v) {
  bool bf16 = w.dtype == ORTEP_DTYPE_BF16;
  (bf16 ? dots.rows_bf16 : dots.rows_f16)((bf16 ? xb : x) + r0 * k, k, nr, (const uint16_t *)w.data + j * k, k, v);
}

/* A gate_up node's quads GATE_RUN at a time: every row's gate and up sums
 * of the run, then SiLU(gate) x up over the run's outputs in one call (the
 * exponentials of four values at a time cost a visible share of a step). The
 * operations of store_quads', so the same bits. */
#define GATE_RUN 16
static void gate_up_rows(const float *x, const float *xb, size_t rows, size_t k, const cpu_weights *w,
                         const cpu_weights *b, const size_t *n, float *const *y, size_t begin, size_t end) {
  float v[4 * ORTEP_F32_ROWS], vu[4 * ORTEP_F32_ROWS], g[ORTEP_F32_ROWS][4 * GATE_RUN], u[ORTEP_F32_ROWS][4 * GATE_RUN];
  for (size_t i0 = begin; i0 < end; i0 += GATE_RUN) {
    size_t nq = end - i0 < GATE_RUN ? end - i0 : GATE_RUN, j0 = i0 * 4;
    for (size_t r0 = 0; r0 < rows; r0 += ORTEP_F32_ROWS) { /* the run's weights hot in the cache after the first rows */
      size_t nr = rows - r0 < ORTEP_F32_ROWS ? rows - r0 : ORTEP_F32_ROWS;
      for (size_t q = 0; q < nq; q++) {
        size_t j = j0 + 4 * q;
        quad_rows(x, xb, k, r0, nr, w[0], j, v);
        quad_rows(x, xb, k, r0, nr, w[1], j, vu);
        for (size_t i = 0; i < 4; i++) {
          float b0 = b[0].data ? cpu_w(b[0], j + i) : 0.0f, b1 = b[1].data ? cpu_w(b[1], j + i) : 0.0f;
          for (size_t r = 0; r < nr; r++) g[r][4 * q + i] = v[4 * r + i] + b0, u[r][4 * q + i] = vu[4 * r + i] + b1;
        }
      }
      for (size_t r = 0; r < nr; r++) silu_mul_n(g[r], u[r], &y[0][(r0 + r) * n[0] + j0], 4 * nq);
    }
  }
}

/* Every row against each quad, ORTEP_F32_ROWS at a time (simd_rows.h). */
static void linear_blocked_rows(const float *x, const float *xb, size_t rows, size_t k, const cpu_weights *w,
                                const cpu_weights *b, const size_t *n, bool gate_up, const float *res, float *const *y,
                                size_t begin, size_t end) {
  if (gate_up) {
    gate_up_rows(x, xb, rows, k, w, b, n, y, begin, end);
    return;
  }
  float v[4 * ORTEP_F32_ROWS];
  for (size_t item = begin; item < end; item++) {
    size_t j = item * 4, g = 0;
    while (j >= n[g]) j -= n[g++];
    for (size_t r0 = 0; r0 < rows; r0 += ORTEP_F32_ROWS) {
      size_t nr = rows - r0 < ORTEP_F32_ROWS ? rows - r0 : ORTEP_F32_ROWS;
      quad_rows(x, xb, k, r0, nr, w[g], j, v);
      store_quads(v, NULL, r0, nr, j, g, false, b, n, res, y);
    }
  }
}

void ortep__cpu_linear_blocked(const float *x, const float *xb, size_t rows, size_t k, size_t groups,
                               const cpu_weights *w, const cpu_weights *b, const size_t *n, bool gate_up,
                               const float *res, float *const *y, size_t begin, size_t end) {
  if (dots.rows_bf16) {
    linear_blocked_rows(x, xb, rows, k, w, b, n, gate_up, res, y, begin, end);
    return;
  }
  for (size_t item = begin; item < end; item++) {
    size_t j0 = item * 4, g = 0, j = j0;
    if (!gate_up)
      while (j >= n[g]) j -= n[g++];
    for (size_t row = 0; row < rows;) { /* the quad's weights hot in the cache after the first rows */
      const float *xr = x + row * k, *xbr = xb + row * k;
      float v[8], u[8];
      if (row + 1 < rows) { /* two rows sharing each widened weight, each as it would be alone */
        dot4x2_rows(xr, xbr, k, w[g], j, v, v + 4);
        if (gate_up) dot4x2_rows(xr, xbr, k, w[1], j, u, u + 4);
        store_quads(v, u, row, 2, j, g, gate_up, b, n, res, y);
        row += 2;
        continue;
      }
      dot4_rows(xr, xbr, w[g], j, k, v);
      if (gate_up) dot4_rows(xr, xbr, w[1], j, k, u);
      store_quads(v, u, row, 1, j, g, gate_up, b, n, res, y);
      row++;
    }
  }
}

/* --- Linear over many rows of bf16 weights on AVX512-BF16 -------------------
 * x rounded to bf16 once per node (ortep__cpu_to_bf16), then per quad of
 * outputs ORTEP_BF16_ROWS rows at a time through vdpbf16ps (simd_rows.h):
 * the weights are read once per quad from memory and from the cache for the
 * next rows, never widened. A row's result depends on that row alone. */
bool ortep__cpu_bf16_rows(void) { return dots.bf16_rows != NULL; }

void ortep__cpu_to_bf16(const float *x, size_t n, uint16_t *dst) { dots.to_bf16(x, n, dst); }

/* A long reduction (k above BF16_KBLOCK, e.g. the down projection's 4864)
 * runs in blocks of columns, the block loop outside the quads: the chunk's
 * rows of one block (256 x 1024 bf16, 512 KiB) stay in L2 while every quad
 * of the range passes over them, where whole rows (2.4 MiB) would stream
 * from L3 for each quad. The partial sums wait in y; the last block adds
 * them and runs the epilogue. Sums of one output in the same order for any
 * thread count and any neighbours (a row's result is that row's alone). A
 * gate_up node (two sums per output) keeps whole rows. */
#define BF16_KBLOCK 1024

static void bf16_quads(const uint16_t *x16, size_t rows, size_t k, size_t k0, size_t kn, const cpu_weights *w,
                       const cpu_weights *b, const size_t *n, bool gate_up, const float *res, float *const *y,
                       size_t begin, size_t end) {
  float v[4 * ORTEP_BF16_ROWS], u[4 * ORTEP_BF16_ROWS];
  bool first = k0 == 0, last = k0 + kn == k;
  for (size_t item = begin; item < end; item++) {
    size_t j = item * 4, g = 0;
    if (!gate_up)
      while (j >= n[g]) j -= n[g++];
    const uint16_t *wq = (const uint16_t *)w[g].data + j * k + k0 * ORTEP__LINEAR_ROWS;
    for (size_t r0 = 0; r0 < rows; r0 += ORTEP_BF16_ROWS) {
      size_t nr = rows - r0 < ORTEP_BF16_ROWS ? rows - r0 : ORTEP_BF16_ROWS;
      dots.bf16_rows(x16 + r0 * k + k0, k, nr, wq, kn, v);
      if (gate_up) dots.bf16_rows(x16 + r0 * k, k, nr, (const uint16_t *)w[1].data + j * k, k, u);
      for (size_t r = 0; !first && r < nr; r++) /* the blocks before this one */
        for (size_t i = 0; i < 4; i++) v[4 * r + i] += y[g][(r0 + r) * n[g] + j + i];
      if (last) {
        store_quads(v, u, r0, nr, j, g, gate_up, b, n, res, y);
        continue;
      }
      for (size_t r = 0; r < nr; r++) memcpy(&y[g][(r0 + r) * n[g] + j], v + 4 * r, 4 * sizeof *v);
    }
  }
}

void ortep__cpu_linear_bf16(const uint16_t *x16, size_t rows, size_t k, size_t groups, const cpu_weights *w,
                            const cpu_weights *b, const size_t *n, bool gate_up, const float *res, float *const *y,
                            size_t begin, size_t end) {
  (void)groups;
  size_t kb = gate_up || k <= BF16_KBLOCK ? k : BF16_KBLOCK;
  for (size_t k0 = 0; k0 < k; k0 += kb)
    bf16_quads(x16, rows, k, k0, k - k0 < kb ? k - k0 : kb, w, b, n, gate_up, res, y, begin, end);
}

/* --- Linear over many rows (prefill): blocks through sgemm -------------------
 * The output columns (weight rows) of every group are cut into blocks of
 * LINEAR_BLOCK; one block is one item: its weight rows, widened to f32 in the
 * worker's scratch when they are 16-bit, times all M rows of x in one
 * single-threaded sgemm. The cut does not depend on the thread count, and a
 * block is computed whole by one worker with the same arguments, so the
 * result is bitwise the same for any number of threads. */
#define LINEAR_BLOCK 128 /* output columns (weight rows) per item */
#define ROW_BLOCK \
  256 /* rows of x per item: a chunk of up to 256 rows is one block (splitting rows re-packs the weights per block, which cost more than the better balance gave); larger chunks keep the up-projection scratch bounded */

/* The column blocks of a group of n outputs: about LINEAR_BLOCK wide, an even
 * number of them when more than one (896 outputs: 8 of 112, not 7 of 128 and
 * one worker idle for the last), each a multiple of 8 wide. Shape only: the
 * same cut for any thread count. */
static size_t blocks_of(size_t n) {
  size_t c = (n + LINEAR_BLOCK - 1) / LINEAR_BLOCK;
  return c > 1 ? (c + 1) / 2 * 2 : c;
}
static size_t block_width(size_t n) {
  size_t c = blocks_of(n), w = (n + c - 1) / c;
  return (w + 7) / 8 * 8;
}
static size_t row_blocks(size_t m) { return (m + ROW_BLOCK - 1) / ROW_BLOCK; }

size_t ortep__cpu_linear_blocks(size_t m, size_t groups, const size_t *n, bool gate_up) {
  size_t b = 0;
  for (size_t g = 0; g < (gate_up ? 1 : groups); g++) b += blocks_of(n[g]);
  return b * row_blocks(m);
}

size_t ortep__cpu_linear_scratch(size_t k, bool quant) {
  size_t extra = quant ? ROW_BLOCK * k * sizeof(float) + ortep__cpu_qx_bytes(k) : 0;
  return (2 * (LINEAR_BLOCK + 8) * k + ROW_BLOCK * (LINEAR_BLOCK + 8)) * sizeof(float) + extra;
}

/* Row r of a 16-bit blocked weight [., k] as f32: its 16-column pieces lie
 * 64 values apart in the run of its group of four rows. */
static void blocked_row_f32(cpu_weights w, size_t r, size_t k, float *dst) {
  const uint16_t *src = (const uint16_t *)w.data + (r & ~(size_t)3) * k + (r & 3) * 16;
  for (size_t t = 0; t < k; t += 16) dots.widen(src + t * 4, w.dtype == ORTEP_DTYPE_F16, dst + t, 16);
}

/* Rows [j0, j0 + nb) of w as f32 row-major: in place for f32, else widened
 * into dst; a blocked weight's rows are gathered back out of their blocks. */
static const float *rows_f32(cpu_weights w, bool blocked, size_t j0, size_t nb, size_t k, float *dst) {
  if (w.dtype == ORTEP_DTYPE_F32) return (const float *)w.data + j0 * k;
  if (ortep_dtype_is_quantized(w.dtype))
    for (size_t r = 0; r < nb; r++) ortep__cpu_quant_row_f32(w.dtype, w.data, blocked, j0 + r, k, dst + r * k);
  else if (!blocked)
    dots.widen((const uint16_t *)w.data + j0 * k, w.dtype == ORTEP_DTYPE_F16, dst, nb * k);
  else
    for (size_t r = 0; r < nb; r++) blocked_row_f32(w, j0 + r, k, dst + r * k);
  return dst;
}

/* y (row stride ldy) = x[m, k] wb[nb, k]^T */
static void block_gemm(const float *x, size_t m, size_t k, const float *wb, size_t nb, float *y, size_t ldy) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nb, (int)k, 1.0f, x, (int)k, wb, (int)k, 0.0f, y,
              (int)ldy);
}

void ortep__cpu_linear_gemm(const float *x, size_t m, size_t k, size_t groups, const cpu_weights *w,
                            const cpu_weights *b, const size_t *n, bool gate_up, bool blocked, const float *res,
                            float *const *y, size_t begin, size_t end, float *scratch) {
  /* item = column block x row blocks + row block: a worker's consecutive
   * items share a column block, whose weights it widens once */
  size_t rbs = row_blocks(m), cached = SIZE_MAX, xcached = SIZE_MAX;
  float *wbuf0 = scratch, *wbuf1 = scratch + (LINEAR_BLOCK + 8) * k, *up = scratch + 2 * (LINEAR_BLOCK + 8) * k;
  /* q8_0 / q4_0 weights: the rows of x as decode's kernels see them (q8
   * blocks, dequantized), so a chunk computes what token by token does up to
   * the order of the sums */
  bool quant = ortep_dtype_is_quantized(w[0].dtype);
  float *xdq = up + ROW_BLOCK * (LINEAR_BLOCK + 8);
  ortep__cpu_qx qx;
  if (quant) ortep__cpu_qx_init(xdq + ROW_BLOCK * k, k, &qx);
  const float *w0 = NULL, *w1 = NULL;
  for (size_t item = begin; item < end; item++) {
    size_t cb = item / rbs, rb = item % rbs, g = 0, blk = cb;
    while (!gate_up && blk >= blocks_of(n[g])) blk -= blocks_of(n[g++]);
    size_t bw = block_width(n[g]), j0 = blk * bw, ld = n[g];
    if (j0 >= n[g]) continue; /* rounding the width up left this block empty */
    size_t nb = n[g] - j0 < bw ? n[g] - j0 : bw;
    if (cb != cached) {
      w0 = rows_f32(w[g], blocked, j0, nb, k, wbuf0);
      if (gate_up) w1 = rows_f32(w[1], blocked, j0, nb, k, wbuf1);
      cached = cb;
    }
    size_t r0 = rb * ROW_BLOCK, mr = m - r0 < ROW_BLOCK ? m - r0 : ROW_BLOCK;
    const float *xr = x + r0 * k;
    if (quant) {
      if (xcached != rb)
        for (size_t r = 0; r < mr; r++) {
          ortep__cpu_quantize_x(xr + r * k, k, &qx);
          for (size_t i = 0; i < k; i++) xdq[r * k + i] = qx.d[i / 32] * (float)qx.q[i];
        }
      xcached = rb;
      xr = xdq;
    }
    float *yg = y[g] + r0 * ld + j0;
    block_gemm(xr, mr, k, w0, nb, yg, ld);
    if (gate_up) {
      block_gemm(xr, mr, k, w1, nb, up, nb);
      for (size_t r = 0; r < mr; r++) {
        for (size_t j = 0; j < nb; j++) {
          yg[r * ld + j] += b[0].data ? cpu_w(b[0], j0 + j) : 0.0f;
          up[r * nb + j] += b[1].data ? cpu_w(b[1], j0 + j) : 0.0f;
        }
        silu_mul_n(yg + r * ld, up + r * nb, yg + r * ld, nb);
      }
      continue;
    }
    if (!b[g].data && !res) continue;
    const float *rr = res ? res + r0 * ld + j0 : NULL;
    for (size_t r = 0; r < mr; r++)
      for (size_t j = 0; j < nb; j++)
        yg[r * ld + j] += (b[g].data ? cpu_w(b[g], j0 + j) : 0.0f) + (rr ? rr[r * ld + j] : 0.0f);
  }
}

void ortep__cpu_gemm(const float *a, cpu_weights b, bool trans_b, const float *c_f32, cpu_weights c, size_t c_rows,
                     float alpha, float beta, size_t m, size_t k, size_t n, float *y) {
  bool has_c = c.data != NULL || c_f32 != NULL;
  if (has_c && beta != 0.0f) {
    for (size_t i = 0; i < m; i++) {
      size_t row = c_rows == 1 ? 0 : i;
      for (size_t j = 0; j < n; j++) y[i * n + j] = c_f32 ? c_f32[row * n + j] : cpu_w(c, row * n + j);
    }
  }
  float bet = has_c ? beta : 0.0f;
  /* Decode: one row times a [N, K] weight, memory-bound. Our own loop, not
   * BLAS: OpenBLAS's threads cost more than they give at this size (and
   * keep spinning after use), and the summation order here is fixed. */
  if (m == 1 && trans_b && (b.dtype == ORTEP_DTYPE_F32 || b.dtype == ORTEP_DTYPE_BF16)) {
    for (size_t j = 0; j < n; j++) {
      float d = b.dtype == ORTEP_DTYPE_F32 ? dot8(a, (const float *)b.data + j * k, k)
                                           : dot8_bf16(a, (const uint16_t *)b.data + j * k, k);
      y[j] = alpha * d + (bet != 0.0f ? bet * y[j] : 0.0f);
    }
    return;
  }
  if (b.dtype == ORTEP_DTYPE_F32) {
    const float *bw = b.data;
    int M = (int)m, N = (int)n, K = (int)k;
    if (m == 1) {
      if (trans_b)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, bw, K, a, 1, bet, y, 1);
      else
        cblas_sgemv(CblasRowMajor, CblasTrans, K, N, alpha, bw, N, a, 1, bet, y, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, a, K, bw,
                  trans_b ? K : N, bet, y, N);
    }
    return;
  }
  for (size_t i = 0; i < m; i++) {
    const float *ar = a + i * k;
    float *yr = y + i * n;
    if (trans_b) {
      for (size_t j = 0; j < n; j++) {
        float acc = 0.0f;
        size_t base = j * k;
        for (size_t t = 0; t < k; t++) acc += ar[t] * cpu_w(b, base + t);
        yr[j] = alpha * acc + bet * (bet != 0.0f ? yr[j] : 0.0f);
      }
    } else {
      /* b is [K, N]: accumulate row by row so b is read contiguously. */
      if (bet == 0.0f)
        memset(yr, 0, n * sizeof *yr);
      else
        for (size_t j = 0; j < n; j++) yr[j] *= bet;
      for (size_t t = 0; t < k; t++) {
        float av = alpha * ar[t];
        size_t base = t * n;
        for (size_t j = 0; j < n; j++) yr[j] += av * cpu_w(b, base + j);
      }
    }
  }
}

void ortep__cpu_add(const float *a, cpu_weights b, size_t nb, size_t n, float *y) {
  if (b.dtype == ORTEP_DTYPE_F32) {
    const float *bf = b.data;
    for (size_t i = 0; i < n; i++) y[i] = a[i] + bf[i % nb];
  } else {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + cpu_w(b, i % nb);
  }
}

void ortep__cpu_mul(const float *a, cpu_weights b, size_t nb, size_t n, float *y) {
  if (b.dtype == ORTEP_DTYPE_F32) {
    const float *bf = b.data;
    for (size_t i = 0; i < n; i++) y[i] = a[i] * bf[i % nb];
  } else {
    for (size_t i = 0; i < n; i++) y[i] = a[i] * cpu_w(b, i % nb);
  }
}

void ortep__cpu_sigmoid(const float *x, size_t n, float *y) {
  for (size_t i = 0; i < n; i++) y[i] = -x[i];
  ortep__cpu_exp(y, y, n);
  for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + y[i]);
}

void ortep__cpu_silu_mul(const float *gate, const float *up, size_t n, float *y) { silu_mul_n(gate, up, y, n); }

/* y = v * scale with v (0..h) widened from scale's dtype, the dtype's test
 * out of the loop. */
static void scale_by(const float *v, float inv, cpu_weights scale, size_t h, float *y) {
  if (scale.dtype == ORTEP_DTYPE_BF16) {
    const uint16_t *w = scale.data;
    for (size_t j = 0; j < h; j++) y[j] = v[j] * inv * cpu_bf16(w[j]);
  } else if (scale.dtype == ORTEP_DTYPE_F16) {
    for (size_t j = 0; j < h; j++) y[j] = v[j] * inv * cpu_w(scale, j);
  } else {
    const float *w = scale.data;
    for (size_t j = 0; j < h; j++) y[j] = v[j] * inv * w[j];
  }
}

/* The sum of squares in NORM_LANES lanes (lane l: the elements j = l mod
 * NORM_LANES in order), the lanes added pairwise (l + l + 8, then + 4, + 2,
 * + 1): a fixed order, which the compiler can run as vector adds, instead of
 * one chain of h dependent adds. */
#define NORM_LANES 16
void ortep__cpu_rmsnorm(const float *x, const float *skip, cpu_weights bias, bool has_bias, cpu_weights scale,
                        size_t rows, size_t h, float eps, float *y, float *sum) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * h, *sr = skip ? skip + r * h : NULL;
    float *yr = y + r * h, *v = sum ? sum + r * h : yr; /* x (+ skip + bias), then scaled in place */
    if (sr || has_bias) {
      for (size_t j = 0; j < h; j++) v[j] = xr[j] + (sr ? sr[j] : 0.0f) + (has_bias ? cpu_w(bias, j) : 0.0f);
    } else if (v != xr) {
      memmove(v, xr, h * sizeof *v);
    }
    float lane[NORM_LANES] = {0};
    size_t j = 0;
    for (; j + NORM_LANES <= h; j += NORM_LANES)
      for (size_t l = 0; l < NORM_LANES; l++) lane[l] += v[j + l] * v[j + l];
    for (size_t l = 0; j < h; j++, l++) lane[l] += v[j] * v[j];
    for (size_t w = NORM_LANES / 2; w; w /= 2)
      for (size_t l = 0; l < w; l++) lane[l] += lane[l + w];
    float inv = 1.0f / sqrtf(lane[0] / (float)h + eps);
    scale_by(v, inv, scale, h, yr);
  }
}

#define ROPE_HALF_MAX 256 /* rot_dim / 2 of every model seen is <= 128 */
void ortep__cpu_rotary(const float *x, const void *pos, bool pos64, size_t tokens, size_t heads, size_t head_dim,
                       size_t rot_dim, bool interleaved, cpu_weights cos_cache, cpu_weights sin_cache, size_t max_pos,
                       float *y, uint32_t *error_word) {
  size_t half = rot_dim / 2, row = heads * head_dim;
  for (size_t t = 0; t < tokens; t++) {
    int64_t p = pos64 ? ((const int64_t *)pos)[t] : ((const int32_t *)pos)[t];
    const float *xt = x + t * row;
    float *yt = y + t * row;
    if (p < 0 || (uint64_t)p >= max_pos) {
      cpu_latch(error_word, ORTEP_ERROR_ROTARY_POSITION);
      if (yt != xt) memcpy(yt, xt, row * sizeof *yt);
      continue;
    }
    size_t cbase = (size_t)p * half;
    /* the position's cos and sin as f32 once for all heads, each head's
     * halves then in loops the compiler vectorizes */
    float cs[2 * ROPE_HALF_MAX];
    const float *c = cs, *sn = cs + ROPE_HALF_MAX;
    if (cos_cache.dtype == ORTEP_DTYPE_F32 && sin_cache.dtype == ORTEP_DTYPE_F32) {
      c = (const float *)cos_cache.data + cbase, sn = (const float *)sin_cache.data + cbase;
    } else if (half <= ROPE_HALF_MAX) {
      for (size_t i = 0; i < half; i++) cs[i] = cpu_w(cos_cache, cbase + i);
      for (size_t i = 0; i < half; i++) cs[ROPE_HALF_MAX + i] = cpu_w(sin_cache, cbase + i);
    } else {
      c = NULL; /* wider than the buffer: element by element */
    }
    for (size_t hd = 0; hd < heads; hd++) {
      const float *xh = xt + hd * head_dim;
      float *yh = yt + hd * head_dim;
      if (c && !interleaved) {
        for (size_t i = 0; i < half; i++) {
          float x1 = xh[i], x2 = xh[i + half];
          yh[i] = x1 * c[i] - x2 * sn[i];
          yh[i + half] = x2 * c[i] + x1 * sn[i];
        }
      } else {
        for (size_t i = 0; i < half; i++) {
          float ci = c ? c[i] : cpu_w(cos_cache, cbase + i), si = c ? sn[i] : cpu_w(sin_cache, cbase + i);
          size_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          float x1 = xh[i1], x2 = xh[i2];
          yh[i1] = x1 * ci - x2 * si;
          yh[i2] = x2 * ci + x1 * si;
        }
      }
      for (size_t i = rot_dim; i < head_dim; i++) yh[i] = xh[i];
    }
  }
}

/* n values of row into a cache row of dt. */
static void kv_store(void *cache, size_t at, const float *row, size_t n, ortep_dtype dt) {
  if (dt == ORTEP_DTYPE_F32) {
    memcpy((float *)cache + at, row, n * sizeof *row);
    return;
  }
  uint16_t *d = (uint16_t *)cache + at;
  for (size_t i = 0; i < n; i++) d[i] = dt == ORTEP_DTYPE_F16 ? ortep_f32_to_f16(row[i]) : ortep_f32_to_bf16(row[i]);
}

/* A cache row as f32: the row itself, or widened into tmp. */
static const float *row_f32(const void *cache, size_t at, size_t n, ortep_dtype dt, float *tmp) {
  if (dt == ORTEP_DTYPE_F32) return (const float *)cache + at;
  dots.widen((const uint16_t *)cache + at, dt == ORTEP_DTYPE_F16, tmp, n);
  return tmp;
}

void ortep__cpu_gqa_write_kv(const float *k, const float *v, ortep__kv_cache c, const int32_t *pos, size_t tokens,
                             size_t heads, size_t kv_heads, size_t head_dim, size_t capacity, float *out,
                             uint32_t *error_word) {
  for (size_t t = 0; t < tokens; t++) {
    int32_t p = pos[t], slot = c.slots ? c.slots[t] : 0;
    if (slot < 0) { /* a padding row of a batch */
      memset(out + t * heads * head_dim, 0, heads * head_dim * sizeof *out);
      continue;
    }
    if (p < 0 || (size_t)p >= capacity || (c.slots && (size_t)slot >= c.n_slots)) {
      cpu_latch(error_word, ORTEP_ERROR_KV_SLOT);
      memset(out + t * heads * head_dim, 0, heads * head_dim * sizeof *out);
      continue;
    }
    /* position-major: the token's heads are one row of kv_heads x head_dim */
    size_t n = kv_heads * head_dim, at = ((size_t)slot * capacity + (size_t)p) * n;
    kv_store(c.k, at, k + t * n, n, c.dt);
    kv_store(c.v, at, v + t * n, n, c.dt);
  }
}

size_t ortep__cpu_gqa_per_item(size_t tokens, size_t heads, size_t kv_heads, size_t threads) {
  size_t group = heads / kv_heads, rows = tokens * kv_heads;        /* rows: (token, KV head) pairs */
  size_t parts = rows >= threads ? 1 : (threads + rows - 1) / rows; /* items wanted per pair */
  return parts >= group ? 1 : (group + parts - 1) / parts;
}

size_t ortep__cpu_gqa_items(size_t tokens, size_t heads, size_t kv_heads, size_t per) {
  size_t group = heads / kv_heads;
  return tokens * kv_heads * ((group + per - 1) / per);
}

void ortep__cpu_gqa_heads(const float *q, ortep__kv_cache c, const int32_t *pos, size_t heads, size_t kv_heads,
                          size_t head_dim, size_t capacity, size_t per, float scale, float *sc, float *out, size_t i0,
                          size_t i1) {
  size_t group = heads / kv_heads, row = kv_heads * head_dim; /* position-major caches */
  size_t blocks = (group + per - 1) / per;
  float *denom = sc + per * capacity;
  for (size_t item = i0; item < i1; item++) {
    size_t t = item / (kv_heads * blocks), g = item / blocks % kv_heads, b = item % blocks;
    size_t h = g * group + b * per, hn = group - b * per < per ? group - b * per : per;
    int32_t p = pos[t], sq = c.slots ? c.slots[t] : 0;
    if (p < 0 || (size_t)p >= capacity || sq < 0 || (c.slots && (size_t)sq >= c.n_slots))
      continue; /* zeroed (and latched) by write_kv */
    size_t slot = (size_t)p, base = (size_t)sq * capacity * row + g * head_dim;
    size_t at = base * ortep_dtype_size(c.dt), at_q = (t * heads + h) * head_dim;
    dots.head_scores(q + at_q, hn, (const char *)c.k + at, c.dt, row, slot + 1, head_dim, scale, sc, capacity);
    for (size_t i = 0; i < hn; i++) denom[i] = exp_shifted(sc + i * capacity, slot + 1);
    dots.head_values(sc, capacity, denom, hn, (const char *)c.v + at, c.dt, row, slot + 1, head_dim, out + at_q);
  }
}

bool ortep__cpu_gqa_chunk_ok(const int32_t *pos, size_t tokens, size_t capacity) {
  if (tokens < 2 || pos[0] < 0) return false;
  for (size_t t = 0; t < tokens; t++)
    if (pos[t] != pos[0] + (int32_t)t) return false;
  return (size_t)pos[tokens - 1] < capacity;
}

#define ATTN_ROWS 64 /* a chunk's tokens per block of causal attention */

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

bool ortep__cpu_attn_bf16(size_t head_dim) {
  pthread_once(&dots_once, pick_dots);
  return dots.attn_scores && head_dim % 16 == 0 && head_dim <= ORTEP_ATTN_MAX_HD;
}

/* gqa_chunk_bf16's scratch, in floats: the packed keys and values, the
 * block's queries and probabilities (bf16), its scores and 1 / sums (f32). */
static size_t bf16_attn_floats(size_t head_dim, size_t capacity) {
  size_t c16 = up16(capacity), halves = 2 * c16 * head_dim + ATTN_ROWS * head_dim + ATTN_ROWS * c16;
  return (halves + 1) / 2 + ATTN_ROWS * c16 + ATTN_ROWS;
}

size_t ortep__cpu_gqa_scratch(size_t tokens, size_t heads, size_t kv_heads, size_t head_dim, size_t capacity,
                              ortep_dtype dt, bool bf16) {
  size_t group = heads / kv_heads, per_token = group * (capacity + 1),
         chunk = tokens * capacity + (dt == ORTEP_DTYPE_F32 ? 0 : 2 * capacity * head_dim);
  if (bf16 && tokens > 1) {
    size_t b = bf16_attn_floats(head_dim, capacity);
    chunk = chunk > b ? chunk : b;
  }
  return per_token > chunk ? per_token : chunk;
}

/* Row `at` of a cache as bf16: a bf16 cache's as stored, else rounded as
 * kv_store rounds into a bf16 cache (so f32 caches give the bits bf16
 * caches hold). */
static const uint16_t *bf16_row(const void *cache, size_t at, size_t hd, ortep_dtype dt, uint16_t *tmp) {
  if (dt == ORTEP_DTYPE_BF16) return (const uint16_t *)cache + at;
  for (size_t i = 0; i < hd; i++)
    tmp[i] = ortep_f32_to_bf16(dt == ORTEP_DTYPE_F32 ? ((const float *)cache)[at + i]
                                                     : ortep_f16_to_f32(((const uint16_t *)cache)[at + i]));
  return tmp;
}

/* Positions [0, span) of KV head g as attn_scores reads keys ([blocks of 16
 * keys][hd / 2][16][2]) and as attn_values reads values ([span / 2][hd][2]),
 * zeros up to a multiple of 16 positions; tmp: 2 x hd. */
static void pack_head(ortep__kv_cache c, size_t kv_row, size_t g, size_t hd, size_t span, uint16_t *kt, uint16_t *vp,
                      uint16_t *tmp) {
  for (size_t s = 0; s < up16(span); s++) {
    uint16_t *kd = kt + s / 16 * 16 * hd + s % 16 * 2, *vd = vp + s / 2 * 2 * hd + s % 2;
    size_t at = s * kv_row + g * hd;
    const uint16_t *k = s < span ? bf16_row(c.k, at, hd, c.dt, tmp) : NULL,
                   *v = s < span ? bf16_row(c.v, at, hd, c.dt, tmp + hd) : NULL;
    for (size_t i = 0; i < hd; i++) {
      kd[i / 2 * 32 + i % 2] = k ? k[i] : 0;
      vd[2 * i] = v ? v[i] : 0;
    }
  }
}

/* ortep__cpu_gqa_chunk_heads in bf16 products (ops.h). */
static void gqa_chunk_bf16(const float *q, ortep__kv_cache c, size_t p0, size_t tokens, size_t heads, size_t kv_heads,
                           size_t hd, size_t capacity, float scale, float *scratch, float *out, size_t h0, size_t h1) {
  size_t group = heads / kv_heads, span = p0 + tokens, row = heads * hd, kv_row = kv_heads * hd, c16 = up16(capacity);
  uint16_t *kt = (uint16_t *)scratch, *vp = kt + c16 * hd, *qb = vp + c16 * hd, *pb = qb + ATTN_ROWS * hd;
  float *sc = scratch + bf16_attn_floats(hd, capacity) - ATTN_ROWS * c16 - ATTN_ROWS, *inv = sc + ATTN_ROWS * c16;
  size_t packed = SIZE_MAX, pv_rows = ORTEP_ATTN_PV_ROWS(hd);
  for (size_t h = h0; h < h1; h++) {
    size_t g = h / group;
    if (g != packed) pack_head(c, kv_row, g, hd, span, kt, vp, qb), packed = g; /* qb is free until the queries */
    for (size_t t0 = 0; t0 < tokens; t0 += ATTN_ROWS) {
      size_t nt = tokens - t0 < ATTN_ROWS ? tokens - t0 : ATTN_ROWS, ld = up16(p0 + t0 + nt);
      for (size_t t = 0; t < nt; t++) dots.to_bf16(q + (t0 + t) * row + h * hd, hd, qb + t * hd);
      /* rows r0.. reach the keys up to their last row's position */
      for (size_t r0 = 0; r0 < nt; r0 += 8) {
        size_t nr = nt - r0 < 8 ? nt - r0 : 8, reach = p0 + t0 + r0 + nr;
        dots.attn_scores(qb + r0 * hd, hd, nr, kt, (reach + 15) / 16, hd, scale, sc + r0 * ld, ld);
      }
      for (size_t t = 0; t < nt; t++) { /* token t0 + t sees positions 0..p0 + t0 + t */
        float *s = sc + t * ld;
        uint16_t *pr = pb + t * ld;
        size_t last = p0 + t0 + t;
        inv[t] = 1.0f / exp_shifted(s, last + 1);
        dots.to_bf16(s, last + 1, pr);
        memset(pr + last + 1, 0, (ld - last - 1) * sizeof *pr);
      }
      for (size_t r0 = 0; r0 < nt; r0 += pv_rows) {
        size_t nr = nt - r0 < pv_rows ? nt - r0 : pv_rows, reach = p0 + t0 + r0 + nr;
        dots.attn_values(pb + r0 * ld, ld, nr, vp, (reach + 1) / 2, hd, inv + r0, out + (t0 + r0) * row + h * hd, row);
      }
    }
  }
}

void ortep__cpu_gqa_chunk_heads(const float *q, ortep__kv_cache c, const int32_t *pos, size_t tokens, size_t heads,
                                size_t kv_heads, size_t head_dim, size_t capacity, float scale, bool bf16,
                                float *scores, float *out, size_t h0, size_t h1) {
  if (bf16) {
    gqa_chunk_bf16(q, c, (size_t)pos[0], tokens, heads, kv_heads, head_dim, capacity, scale, scores, out, h0, h1);
    return;
  }
  size_t group = heads / kv_heads, p0 = (size_t)pos[0], span = p0 + tokens, row = heads * head_dim;
  size_t kv_row = kv_heads * head_dim; /* position-major caches: position s of head g at s * kv_row + g * head_dim */
  float *kw = scores + tokens * capacity, *vw = kw + capacity * head_dim;
  for (size_t h = h0; h < h1; h++) {
    size_t g = h / group, ld = kv_row;
    const float *kc, *vc;
    if (c.dt == ORTEP_DTYPE_F32) {
      kc = (const float *)c.k + g * head_dim, vc = (const float *)c.v + g * head_dim;
    } else { /* the head's rows of the span, widened once per head */
      for (size_t s = 0; s < span; s++) {
        row_f32(c.k, s * kv_row + g * head_dim, head_dim, c.dt, kw + s * head_dim);
        row_f32(c.v, s * kv_row + g * head_dim, head_dim, c.dt, vw + s * head_dim);
      }
      kc = kw, vc = vw, ld = head_dim;
    }
    /* Causal, in blocks of ATTN_ROWS tokens: a block's scores reach only
     * up to its last token's position, so the masked corner of the chunk
     * is mostly not computed (a quarter to three eighths of the work). */
    for (size_t t0 = 0; t0 < tokens; t0 += ATTN_ROWS) {
      size_t nt = tokens - t0 < ATTN_ROWS ? tokens - t0 : ATTN_ROWS, sb = p0 + t0 + nt; /* the block's span */
      /* scores[t, s] = q_t . k_s */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nt, (int)sb, (int)head_dim, scale,
                  q + t0 * row + h * head_dim, (int)row, kc, (int)ld, 0.0f, scores, (int)sb);
      for (size_t t = 0; t < nt; t++) { /* token t0 + t sees positions 0..p0 + t0 + t */
        float *sc = scores + t * sb;
        size_t last = p0 + t0 + t;
        float inv = 1.0f / exp_shifted(sc, last + 1);
        for (size_t s2 = 0; s2 <= last; s2++) sc[s2] *= inv;
        for (size_t s2 = last + 1; s2 < sb; s2++) sc[s2] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nt, (int)head_dim, (int)sb, 1.0f, scores, (int)sb, vc,
                  (int)ld, 0.0f, out + t0 * row + h * head_dim, (int)row);
    }
  }
}

void ortep__cpu_softmax(const float *x, size_t rows, size_t n, float *y) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    memmove(yr, xr, n * sizeof *yr);
    float s = exp_shifted(yr, n);
    for (size_t i = 0; i < n; i++) yr[i] /= s;
  }
}

/* The argmax rule (ortep__cpu_argmax_range) over [i, end) carried on from
 * a best index bi (end: none yet) and value bv. */
static void argmax_scalar(const float *x32, const uint16_t *x16, size_t i, size_t end, size_t *best, float *value,
                          bool *bad) {
  size_t bi = *best;
  float bv = *value;
  bool nf = *bad;
  for (; i < end; i++) {
    float v = x32 ? x32[i] : ortep_f16_to_f32(x16[i]);
    if (!isfinite(v)) {
      nf = true;
      continue;
    }
    if (bi == end || v > bv) bi = i, bv = v;
  }
  *best = bi, *value = bv, *bad = nf;
}

#if defined(__x86_64__)
/* The lanes of a SIMD scan (value lv[l] first seen at index li[l], -1: no
 * finite value) combined: the largest value, the smallest index among the
 * lanes holding it. */
static void argmax_lanes(const float *lv, const int32_t *li, int lanes, const float *x32, const uint16_t *x16,
                         size_t begin, size_t *best, float *value) {
  int first = -1;
  for (int l = 0; l < lanes; l++)
    if (li[l] >= 0 && (first < 0 || lv[l] > lv[first] || (lv[l] == lv[first] && li[l] < li[first]))) first = l;
  if (first >= 0) *best = begin + (size_t)li[first], *value = x32 ? x32[*best] : ortep_f16_to_f32(x16[*best]);
}

/* The same rule 16 (8) values at a time: each lane keeps the first of its
 * largest finite values (strictly larger replaces) and its index; then the
 * largest over the lanes, and among the lanes holding it the smallest
 * index, which is the first maximum of the range (argmax_lanes); the tail
 * goes on by the scalar rule. The set is picked with the EP's dot products
 * (pick_dots, at initialise); before that the scalar rule runs. The same token and flag as argmax_scalar, for any input
 * (test_ep's argmax case checks them against each other). */
ORTEP_SIMD_AVX512 static void argmax_avx512(const float *x32, const uint16_t *x16, size_t begin, size_t end,
                                            size_t *best, float *value, bool *bad) {
  size_t i = begin;
  if (end - begin >= 16 && end - begin <= INT32_MAX) {
    const __m512 inf = _mm512_set1_ps(INFINITY);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    __m512 bv = _mm512_set1_ps(-INFINITY);
    __m512i bi = _mm512_set1_epi32(-1), idx = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __mmask16 nonfinite = 0;
    for (; i + 16 <= end; i += 16, idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16))) {
      __m512 v = x32 ? _mm512_loadu_ps(x32 + i) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x16 + i)));
      __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), absmask));
      __mmask16 fin = _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ); /* NaN and +-Inf: not finite */
      nonfinite |= (__mmask16)~fin;
      __mmask16 gt = _mm512_mask_cmp_ps_mask(fin, v, bv, _CMP_GT_OQ);
      bv = _mm512_mask_mov_ps(bv, gt, v), bi = _mm512_mask_mov_epi32(bi, gt, idx);
    }
    *bad = *bad || nonfinite;
    float lv[16];
    int32_t li[16];
    _mm512_storeu_ps(lv, bv), _mm512_storeu_si512(li, bi);
    argmax_lanes(lv, li, 16, x32, x16, begin, best, value);
  }
  argmax_scalar(x32, x16, i, end, best, value, bad);
}

/* argmax_avx512 at 8 lanes, the masks as compare results and blends. */
ORTEP_SIMD_AVX2 static void argmax_avx2(const float *x32, const uint16_t *x16, size_t begin, size_t end, size_t *best,
                                        float *value, bool *bad) {
  size_t i = begin;
  if (end - begin >= 8 && end - begin <= INT32_MAX) {
    const __m256 inf = _mm256_set1_ps(INFINITY), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 bv = _mm256_set1_ps(-INFINITY), nonfinite = _mm256_setzero_ps();
    __m256i bi = _mm256_set1_epi32(-1), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; i + 8 <= end; i += 8, idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8))) {
      __m256 v = x32 ? _mm256_loadu_ps(x32 + i) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x16 + i)));
      __m256 fin = _mm256_cmp_ps(_mm256_and_ps(v, absmask), inf, _CMP_LT_OQ); /* NaN and +-Inf: not finite */
      nonfinite = _mm256_or_ps(nonfinite, _mm256_andnot_ps(fin, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
      __m256 gt = _mm256_and_ps(_mm256_cmp_ps(v, bv, _CMP_GT_OQ), fin);
      bv = _mm256_blendv_ps(bv, v, gt);
      bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(idx), gt));
    }
    *bad = *bad || _mm256_movemask_ps(nonfinite);
    float lv[8];
    int32_t li[8];
    _mm256_storeu_ps(lv, bv), _mm256_storeu_si256((__m256i *)li, bi);
    argmax_lanes(lv, li, 8, x32, x16, begin, best, value);
  }
  argmax_scalar(x32, x16, i, end, best, value, bad);
}
#endif

/* The first maximum among the finite values of [begin, end). Any NaN or
 * infinity sets *bad (the caller latches ARGMAX_NOT_FINITE: logits like that
 * mean the model produced garbage; the step fails and the token is never
 * emitted). *best is end when no value is finite. */
void ortep__cpu_argmax_range(const float *x32, const uint16_t *x16, size_t begin, size_t end, size_t *best,
                             float *value, bool *bad) {
  *best = end, *value = 0, *bad = false;
  argmax_impl(x32, x16, begin, end, best, value, bad);
}

static uint32_t argmax_finite(const float *x32, const uint16_t *x16, size_t n, uint32_t *error_word) {
  size_t best;
  float v;
  bool bad;
  ortep__cpu_argmax_range(x32, x16, 0, n, &best, &v, &bad);
  if (bad) cpu_latch(error_word, ORTEP_ERROR_ARGMAX_NOT_FINITE);
  return best == n ? 0 : (uint32_t)best;
}

uint32_t ortep__cpu_argmax_f32(const float *x, size_t n, uint32_t *error_word) {
  return argmax_finite(x, NULL, n, error_word);
}

uint32_t ortep__cpu_argmax_f16(const uint16_t *x, size_t n, uint32_t *error_word) {
  return argmax_finite(NULL, x, n, error_word);
}

/* --- sampling (kernels/sampling.h defines it for every EP) ------------------- */
static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The k-th largest of v[0..n) (1 <= k <= n), reordering v: quickselect
 * with a three-way partition (greater | equal | less than the pivot), O(n) on
 * average; ties make no difference to the value. */
static float kth_largest(float *v, size_t n, size_t k) {
  size_t lo = 0, hi = n, want = k - 1;
  while (hi - lo > 1) {
    float pivot = v[lo + (hi - lo) / 2], t;
    size_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      if (v[i] > pivot)
        t = v[lt], v[lt++] = v[i], v[i++] = t;
      else if (v[i] < pivot)
        t = v[--gt], v[gt] = v[i], v[i] = t;
      else
        i++;
    }
    if (want < lt)
      hi = lt;
    else if (want < gt)
      return pivot;
    else
      lo = gt;
  }
  return v[lo];
}

uint32_t ortep__cpu_sample(const float *x32, const uint16_t *x16, size_t n, const ortep__sample_params *p,
                           const int32_t *history, void *scratch, uint32_t *error_word) {
  double *zd = scratch;
  float *z = (float *)(zd + n), *tmp = (float *)zd; /* p, and (once zd is spent) a float of room per logit */
  for (size_t i = 0; i < n; i++) {
    float v = x32 ? x32[i] : ortep_f16_to_f32(x16[i]);
    if (!isfinite(v)) {
      cpu_latch(error_word, ORTEP_ERROR_ARGMAX_NOT_FINITE);
      return 0;
    }
    zd[i] = v;
  }
  if (p->repetition_penalty != 1.0f && history)
    for (uint32_t h = 0; h < p->n_history; h++) {
      int32_t id = history[h];
      if (id >= 0 && (size_t)id < n)
        zd[id] = ortep__penalise(x32 ? x32[id] : ortep_f16_to_f32(x16[id]), (double)p->repetition_penalty);
    }
  double mx = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    zd[i] = zd[i] / (double)p->temperature;
    mx = zd[i] > mx ? zd[i] : mx;
  }
  for (size_t i = 0; i < n; i++) z[i] = (float)exp(zd[i] - mx);
  float zk = -INFINITY;
  if (p->top_k > 0 && p->top_k < n) {
    memcpy(tmp, z, n * sizeof *tmp);
    zk = kth_largest(tmp, n, p->top_k);
  }
  for (size_t i = 0; i < n; i++) {
    float q = z[i] >= zk ? z[i] : 0.0f;
    z[i] = q >= p->min_p ? q : 0.0f; /* min-p against the largest, whose q is 1 */
  }
  float mass = 0.0f;
  for (size_t i = 0; i < n; i++) mass += z[i];
  if (p->top_p < 1.0f) {
    /* Only values >= t0 = (1 - top_p) mass / n can be in the nucleus: all
     * those below add up to less than (1 - top_p) of the mass, so the values
     * above already reach top_p. Sorting just those is exact, and with a
     * language model's few likely tokens, short. */
    float t0 = (1.0f - p->top_p) * mass / (float)n;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (z[i] > 0.0f && z[i] >= t0) tmp[m++] = z[i];
    qsort(tmp, m, sizeof *tmp, cmp_desc);
    float want = p->top_p * mass, cum = 0.0f, t = 0.0f;
    for (size_t j = 0; j < m; j++) {
      cum += tmp[j];
      t = tmp[j];
      if (cum >= want) break;
    }
    mass = 0.0f;
    for (size_t i = 0; i < n; i++) {
      if (z[i] < t) z[i] = 0.0f;
      mass += z[i];
    }
  }
  if (!(mass > 0.0f) || !isfinite(mass)) { /* cannot happen (sampling.h); guarded all the same */
    cpu_latch(error_word, ORTEP_ERROR_SAMPLE_NOT_FINITE);
    return 0;
  }
  float target = ortep__sample_uniform(p) * mass, cum = 0.0f;
  size_t last = 0;
  for (size_t i = 0; i < n; i++) {
    if (z[i] <= 0.0f) continue;
    cum += z[i];
    last = i;
    if (cum > target) return (uint32_t)i;
  }
  return (uint32_t)last; /* rounding left the target at the very end */
}

/* ortep:SelectToken (opset.c): the step's tokens into the history, then the
 * draw at the last position + 1, argmax or sampled as the parameters say. A
 * position outside the history is skipped (RoPE and attention latched it). */
void ortep__cpu_select_history(const int32_t *tokens, const int32_t *positions, size_t t, int32_t *history,
                               size_t cap) {
  for (size_t i = 0; i < t; i++)
    if (positions[i] >= 0 && (size_t)positions[i] < cap) history[positions[i]] = tokens[i];
}

uint32_t ortep__cpu_select(const float *logits, size_t n, const int32_t *tokens, const int32_t *positions, size_t t,
                           const ortep__sample_params *params, int32_t *history, size_t cap, void *scratch,
                           uint32_t *error_word) {
  ortep__cpu_select_history(tokens, positions, t, history, cap);
  if (params->temperature == 0.0f) return argmax_finite(logits, NULL, n, error_word);
  ortep__sample_params p = *params;
  int64_t draw = (int64_t)positions[t - 1] + 1;
  p.position = draw > 0 ? (uint32_t)draw : 0;
  p.n_history = draw <= 0 ? 0 : (size_t)draw < cap ? (uint32_t)draw : (uint32_t)cap;
  return ortep__cpu_sample(logits, NULL, n, &p, history, scratch, error_word);
}

/* --- the blocked layout of 16-bit weights (kernels/opset.h) ---------------------- */
void ortep__cpu_to_blocked(const uint16_t *src, size_t n, size_t k, uint16_t *dst) {
  const size_t R = ORTEP__LINEAR_ROWS, C = ORTEP__LINEAR_COLS;
  for (size_t q = 0; q < n; q += R, src += R * k, dst += R * k)
    for (size_t b = 0; b < k; b += C)
      for (size_t r = 0; r < R; r++) memcpy(dst + b * R + r * C, src + r * k + b, C * sizeof *dst);
}

void ortep__cpu_to_blocked_in_place(uint16_t *w, size_t n, size_t k, uint16_t *rows) {
  for (size_t q = 0; q < n; q += ORTEP__LINEAR_ROWS, w += ORTEP__LINEAR_ROWS * k) {
    memcpy(rows, w, ORTEP__LINEAR_ROWS * k * sizeof *w);
    ortep__cpu_to_blocked(rows, ORTEP__LINEAR_ROWS, k, w);
  }
}
