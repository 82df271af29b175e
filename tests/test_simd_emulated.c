/*
 * test_simd_emulated.c: the CPU EP's AVX2 and AVX-512 dot products, checked
 * bitwise against a scalar model of the order they are documented to sum in
 * (kernels/cpu/simd_avx2.h, simd_avx512.h), for every length class (whole
 * iterations, the narrower loop, the scalar tail) and unaligned data; the
 * widening of all 65,536 f16 and bf16 values; and axpy. The AVX-512 code runs
 * on SIMDe's emulation (simd_emulated.c), so this checks it on machines
 * without AVX-512; and where the CPU has the sets, the instructions the
 * emulation writes itself (kernels/cpu/simd.h) against the hardware's, bit
 * for bit. Needs AVX2, FMA and F16C to run: exits 77 without them.
 */
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "simd_emulated.h"
#include "testutil.h"

static float bf16_value(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The documented order: 4 accumulators of `lanes` lanes over whole blocks of
 * 4 x lanes, then `lanes` at a time into the first, the accumulators summed
 * (a0 + a1) + (a2 + a3) lane by lane, 16 lanes folded to 8 (lane l + lane
 * l + 8), the 8 summed ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then
 * the remaining products added by fmaf in order. */
static float model_dot(const float *x, const float *w, size_t k, size_t lanes) {
  float a[4][16] = {{0}};
  size_t t = 0;
  for (; t + 4 * lanes <= k; t += 4 * lanes)
    for (size_t q = 0; q < 4; q++)
      for (size_t l = 0; l < lanes; l++) a[q][l] = fmaf(x[t + q * lanes + l], w[t + q * lanes + l], a[q][l]);
  for (; t + lanes <= k; t += lanes)
    for (size_t l = 0; l < lanes; l++) a[0][l] = fmaf(x[t + l], w[t + l], a[0][l]);
  float v[16];
  for (size_t l = 0; l < lanes; l++) v[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
  if (lanes == 16)
    for (size_t l = 0; l < 8; l++) v[l] = v[l] + v[l + 8];
  float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  for (; t < k; t++) s = fmaf(x[t], w[t], s);
  return s;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Lengths around every loop boundary of both widths, and real ones. */
static const size_t lengths[] = {0,  1,  7,  8,  9,  15, 16,  17,  31,  32,  33,  47,   48,
                                 63, 64, 65, 79, 80, 95, 127, 128, 129, 200, 896, 1000, 4864};
#define MAX_K 4864

static void check_dots(const simd_kernels *kern, const char *name) {
  test_rng r = test_rng_new(test_seed());
  float *x = malloc((MAX_K + 1) * sizeof *x), *wf = malloc((MAX_K + 1) * sizeof *wf);
  float *wide = malloc((MAX_K + 1) * sizeof *wide);
  uint16_t *wb = malloc((MAX_K + 1) * sizeof *wb), *wh = malloc((MAX_K + 1) * sizeof *wh);
  ck_assert(x && wf && wide && wb && wh);
  for (size_t i = 0; i <= MAX_K; i++) {
    x[i] = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 4.0 - 2.0);
    wf[i] = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 2.0 - 1.0);
    uint32_t bits;
    memcpy(&bits, &wf[i], 4);
    wb[i] = (uint16_t)(bits >> 16);
    wh[i] = ortep_f32_to_f16(wf[i]);
  }
  for (size_t off = 0; off < 2; off++) /* malloc's alignment, then 4 bytes off it */
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
      size_t k = lengths[li];
      const float *xs = x + off;
      float got = kern->dot_f32(xs, wf + off, k), want = model_dot(xs, wf + off, k, kern->lanes);
      ck_assert_msg(same_bits(got, want), "%s f32 dot, k %zu, offset %zu: %a, the model gives %a", name, k, off, got,
                    want);
      for (size_t i = 0; i < k; i++) wide[i] = bf16_value(wb[off + i]);
      got = kern->dot_bf16(xs, wb + off, k), want = model_dot(xs, wide, k, kern->lanes);
      ck_assert_msg(same_bits(got, want), "%s bf16 dot, k %zu, offset %zu: %a, the model gives %a", name, k, off, got,
                    want);
      for (size_t i = 0; i < k; i++) wide[i] = ortep_f16_to_f32(wh[off + i]);
      got = kern->dot_f16(xs, wh + off, k), want = model_dot(xs, wide, k, kern->lanes);
      ck_assert_msg(same_bits(got, want), "%s f16 dot, k %zu, offset %zu: %a, the model gives %a", name, k, off, got,
                    want);
      /* and near the exact value: the order is a rounding difference only */
      double exact = 0, mag = 0;
      for (size_t i = 0; i < k; i++) exact += (double)xs[i] * wide[i], mag += fabs((double)xs[i] * wide[i]);
      ck_assert_msg(fabs(got - exact) <= 1e-5 * mag + 1e-30, "%s f16 dot, k %zu: %g vs %g", name, k, got, exact);
    }
  free(x), free(wf), free(wide), free(wb), free(wh);
}

START_TEST(avx2_dots_sum_in_the_documented_order) { check_dots(&simd_emulated_avx2, "avx2"); }
END_TEST
START_TEST(avx512_dots_sum_in_the_documented_order) { check_dots(&simd_emulated_avx512, "avx512"); }
END_TEST

/* The four-row kernels over a blocked weight ([k/16][4][16] for four rows),
 * against the documented order (simd_avx2.h): per row two 8-lane
 * accumulators lo and hi over the 16-column blocks in order, lane l of lo
 * summing column lo_col(l) of each block and of hi hi_col(l), then
 * avx2_hsum(lo + hi). f16: lo_col(l) = l, hi_col(l) = 8 + l; bf16 (the
 * zero-interleave widening, per 128-bit half): lo_col = 0-3, 8-11, hi_col =
 * 4-7, 12-15. */
static float model_dot4(const float *x, const float *w_rows, size_t k, bool bf16) {
  float lo[8] = {0}, hi[8] = {0};
  for (size_t t = 0; t < k; t += 16)
    for (size_t l = 0; l < 8; l++) {
      size_t cl = bf16 ? (l < 4 ? l : l + 4) : l, ch = bf16 ? (l < 4 ? l + 4 : l + 8) : 8 + l;
      lo[l] = fmaf(x[t + cl], w_rows[t + cl], lo[l]);
      hi[l] = fmaf(x[t + ch], w_rows[t + ch], hi[l]);
    }
  float v[8];
  for (size_t l = 0; l < 8; l++) v[l] = lo[l] + hi[l];
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

START_TEST(blocked_four_row_dots_sum_in_the_documented_order) {
  enum { KMAX = 4864 };
  test_rng r = test_rng_new(test_seed() + 2);
  float *x = malloc(KMAX * sizeof *x), *xp = malloc(KMAX * sizeof *xp), *wide = malloc(4 * KMAX * sizeof *wide);
  uint16_t *rows = malloc(4 * KMAX * sizeof *rows), *blk = malloc(4 * KMAX * sizeof *blk);
  ck_assert(x && xp && wide && rows && blk);
  static const size_t ks[] = {16, 32, 48, 64, 896, 4864};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      size_t k = ks[ki];
      for (size_t i = 0; i < k; i++) x[i] = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 4.0 - 2.0);
      for (size_t i = 0; i < 4 * k; i++) {
        float v = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 2.0 - 1.0);
        rows[i] = bf16 ? ortep_f32_to_bf16(v) : ortep_f32_to_f16(v);
        wide[i] = bf16 ? bf16_value(rows[i]) : ortep_f16_to_f32(rows[i]);
      }
      for (size_t q = 0; q < 4; q++) /* row q's 16 columns of block b at b * 64 + q * 16 */
        for (size_t t = 0; t < k; t += 16) memcpy(blk + t * 4 + q * 16, rows + q * k + t, 16 * sizeof *blk);
      float y[4];
      if (bf16)
        simd_emulated_blocked.dot4_bf16(simd_emulated_blocked.x4_bf16(x, k, xp), blk, k, y);
      else
        simd_emulated_blocked.dot4_f16(x, blk, k, y);
      for (size_t q = 0; q < 4; q++) {
        float want = model_dot4(x, wide + q * k, k, bf16);
        ck_assert_msg(same_bits(y[q], want), "%s dot4 k %zu row %zu: %a, want %a", bf16 ? "bf16" : "f16", k, q, y[q],
                      want);
        double exact = 0, mag = 0;
        for (size_t i = 0; i < k; i++) {
          double p = (double)x[i] * wide[q * k + i];
          exact += p, mag += fabs(p);
        }
        ck_assert_msg(fabs(y[q] - exact) <= 1e-5 * mag + 1e-30, "dot4 k %zu: %g vs %g", k, y[q], exact);
      }
    }
  free(x), free(xp), free(wide), free(rows), free(blk);
}
END_TEST

/* Every 16-bit pattern widens to the exact value (NaNs stay NaN). */
static void check_widen(const simd_kernels *kern, const char *name) {
  enum { N = 65536 + 3 }; /* not a multiple of either width: the tail runs too */
  uint16_t *src = malloc(N * sizeof *src);
  float *dst = malloc(N * sizeof *dst);
  ck_assert(src && dst);
  for (size_t i = 0; i < N; i++) src[i] = (uint16_t)i;
  for (int f16 = 0; f16 < 2; f16++) {
    kern->widen(src, f16, dst, N);
    for (size_t i = 0; i < N; i++) {
      float want = f16 ? ortep_f16_to_f32(src[i]) : bf16_value(src[i]);
      ck_assert_msg(isnan(want) ? isnan(dst[i]) : same_bits(dst[i], want), "%s widen %s 0x%04zx: %a, want %a", name,
                    f16 ? "f16" : "bf16", i & 0xffff, dst[i], want);
    }
  }
  free(src), free(dst);
}
START_TEST(avx2_widens_every_value_exactly) { check_widen(&simd_emulated_avx2, "avx2"); }
END_TEST
START_TEST(avx512_widens_every_value_exactly) { check_widen(&simd_emulated_avx512, "avx512"); }
END_TEST

static void check_axpy(const simd_kernels *kern, const char *name) {
  test_rng r = test_rng_new(test_seed() + 1);
  float x[101], y[101], want[101];
  for (size_t n = 0; n <= 100; n += 3) {
    for (size_t i = 0; i < n; i++) {
      x[i] = (float)test_rng_range(&r, 0, 2000) / 1000.0f - 1.0f;
      y[i] = (float)test_rng_range(&r, 0, 2000) / 997.0f;
      want[i] = fmaf(0.375f, x[i], y[i]);
    }
    kern->axpy(0.375f, x, y, n);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(same_bits(y[i], want[i]), "%s axpy n %zu [%zu]: %a, want %a", name, n, i, y[i], want[i]);
  }
}
START_TEST(axpy_is_one_fma_per_element) {
  check_axpy(&simd_emulated_avx2, "avx2");
  check_axpy(&simd_emulated_avx512, "avx512");
}
END_TEST

/* Decode attention for query heads sharing a KV head (simd_*.h head_*): each
 * head's scores bitwise the set's dot of each cache row times the scale, its
 * values bitwise the set's axpy of each (widened) row, weighted p / denom,
 * into a zeroed out, in the order of the rows; for 1 to 7 heads at once
 * (the kernels' blocks of four, two and one), head sizes with and without a
 * tail of either width, row counts around the sixteen and eight rows whose
 * lanes are summed together and the tiles of 64 rows (ORTEP_HEAD_TILE), rows apart by more than a head (the caches
 * are position-major), and every cache dtype; and the values near the
 * exact weighted sum. */
static void check_heads(const simd_kernels *kern, const char *name) {
  enum { NMAX = 150, HMAX = 136, ROW = 2 * HMAX + 3, GMAX = 7, STRIDE = NMAX + 3 };
  test_rng r = test_rng_new(test_seed() + 3);
  float *q = malloc(GMAX * HMAX * sizeof *q), *kf = malloc(NMAX * ROW * sizeof *kf),
        *wide = malloc(NMAX * ROW * sizeof *wide);
  uint16_t *kb = malloc(NMAX * ROW * sizeof *kb), *kh = malloc(NMAX * ROW * sizeof *kh);
  float sc[GMAX * STRIDE], p0[GMAX * STRIDE], p[GMAX * STRIDE], out[GMAX * HMAX], want[HMAX], denom[GMAX];
  ck_assert(q && kf && wide && kb && kh);
  for (size_t i = 0; i < GMAX * HMAX; i++)
    q[i] = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 2.0 - 1.0);
  for (size_t i = 0; i < NMAX * ROW; i++) {
    float v = (float)((double)test_rng_next(&r) / 18446744073709551616.0 * 4.0 - 2.0);
    kb[i] = ortep_f32_to_bf16(v), kh[i] = ortep_f32_to_f16(v), kf[i] = v;
  }
  for (size_t i = 0; i < GMAX * STRIDE; i++) p0[i] = (float)((double)test_rng_next(&r) / 18446744073709551616.0);
  for (size_t h = 0; h < GMAX; h++) denom[h] = 3.0f + (float)h / 7.0f;
  static const size_t hds[] = {8, 24, 64, 80, 96, 128, 136}, ns[] = {1, 7, 16, 17, 33, 64, 65, 129, NMAX},
                      gs[] = {1, 3, 7};
  const float scale = 0.125f;
  for (int dt = 0; dt < 3; dt++) { /* f32, bf16, f16 */
    const char *dn = dt == 0 ? "f32" : dt == 1 ? "bf16" : "f16";
    for (size_t i = 0; i < NMAX * ROW; i++)
      wide[i] = dt == 0 ? kf[i] : dt == 1 ? bf16_value(kb[i]) : ortep_f16_to_f32(kh[i]);
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
      for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
          size_t hd = hds[hi], n = ns[ni], g = gs[gi];
          if (dt == 0) kern->head_scores_f32(q, g, kf, ROW, n, hd, scale, sc, STRIDE);
          if (dt == 1) kern->head_scores_bf16(q, g, kb, ROW, n, hd, scale, sc, STRIDE);
          if (dt == 2) kern->head_scores_f16(q, g, kh, ROW, n, hd, scale, sc, STRIDE);
          for (size_t h = 0; h < g; h++)
            for (size_t s = 0; s < n; s++) {
              const float *qh = q + h * hd;
              float w = (dt == 0   ? kern->dot_f32(qh, kf + s * ROW, hd)
                         : dt == 1 ? kern->dot_bf16(qh, kb + s * ROW, hd)
                                   : kern->dot_f16(qh, kh + s * ROW, hd)) *
                        scale;
              ck_assert_msg(same_bits(sc[h * STRIDE + s], w),
                            "%s %s head scores hd %zu n %zu heads %zu: head %zu row %zu: %a, the dot gives %a", name,
                            dn, hd, n, g, h, s, sc[h * STRIDE + s], w);
            }
          memcpy(p, p0, sizeof p);
          if (dt == 0) kern->head_values_f32(p, STRIDE, denom, g, kf, ROW, n, hd, out);
          if (dt == 1) kern->head_values_bf16(p, STRIDE, denom, g, kb, ROW, n, hd, out);
          if (dt == 2) kern->head_values_f16(p, STRIDE, denom, g, kh, ROW, n, hd, out);
          for (size_t h = 0; h < g; h++) {
            memset(want, 0, sizeof want);
            for (size_t s = 0; s < n; s++) {
              float a = p0[h * STRIDE + s] / denom[h];
              ck_assert_msg(same_bits(p[h * STRIDE + s], a), "%s %s head %zu weight %zu: %a, p / denom is %a", name, dn,
                            h, s, p[h * STRIDE + s], a);
              kern->axpy(a, wide + s * ROW, want, hd);
            }
            for (size_t c = 0; c < hd; c++) {
              float o = out[h * hd + c];
              ck_assert_msg(same_bits(o, want[c]),
                            "%s %s head values hd %zu n %zu heads %zu: head %zu column %zu: %a, axpy gives %a", name,
                            dn, hd, n, g, h, c, o, want[c]);
              double exact = 0, mag = 0;
              for (size_t s = 0; s < n; s++)
                exact += (double)p0[h * STRIDE + s] / denom[h] * wide[s * ROW + c], mag += fabs(wide[s * ROW + c]);
              ck_assert_msg(fabs(o - exact) <= 1e-6 * mag + 1e-30, "%s %s head values hd %zu: %g vs %g", name, dn, hd,
                            o, exact);
            }
          }
        }
  }
  free(q), free(kf), free(wide), free(kb), free(kh);
}
START_TEST(avx2_head_attention_is_the_dots_and_axpys) { check_heads(&simd_emulated_avx2, "avx2"); }
END_TEST
START_TEST(avx512_head_attention_is_the_dots_and_axpys) { check_heads(&simd_emulated_avx512, "avx512"); }
END_TEST

/* --- the emulated instructions against the hardware's ---------------------------- */
#if defined(__x86_64__)
/* a float of any class: normal, denormal or zero, infinity or NaN, near 1, or past 2^31 */
static uint32_t any_float_bits(test_rng *r) {
  uint32_t u = (uint32_t)test_rng_next(r);
  switch (test_rng_range(r, 0, 5)) {
    case 0: return u & 0x807fffffu;
    case 1: return u | 0x7f800000u;
    case 2: return (u & 0x80ffffffu) | 0x00800000u;
    case 3: return (u & 0x807fffffu) | (uint32_t)test_rng_range(r, 120, 134) << 23;
    case 4: return (u & 0x807fffffu) | (uint32_t)test_rng_range(r, 150, 160) << 23;
    default: return u;
  }
}
static uint16_t any_bf16(test_rng *r) { return (uint16_t)(any_float_bits(r) >> 16); }
static bool same_bits_or_nans(float a, float b) { return !memcmp(&a, &b, 4) || (a != a && b != b); }

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void native_bf16(const float *x, uint16_t *h,
                                                                                        float *acc, const uint16_t *a,
                                                                                        const uint16_t *b) {
  _mm256_storeu_si256((__m256i *)h, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)));
  __m512bh va, vb;
  memcpy(&va, a, sizeof va), memcpy(&vb, b, sizeof vb);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), va, vb));
}
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void native_vnni(int32_t *acc, const uint8_t *u,
                                                                               const int8_t *s) {
  _mm512_storeu_si512(acc, _mm512_dpbusd_epi32(_mm512_loadu_si512(acc), _mm512_loadu_si512(u), _mm512_loadu_si512(s)));
}
__attribute__((target("avx512f"))) static float native_convert(const float *x, int32_t *trunc, float *back,
                                                               int8_t *low) {
  __m512i t = _mm512_cvttps_epi32(_mm512_loadu_ps(x));
  _mm512_storeu_si512(trunc, t);
  _mm512_storeu_ps(back, _mm512_cvtepi32_ps(t));
  _mm_storeu_si128((__m128i *)low, _mm512_cvtepi32_epi8(t));
  return _mm512_reduce_max_ps(_mm512_loadu_ps(x));
}
#endif

START_TEST(emulated_instructions_match_the_hardware) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool f = __builtin_cpu_supports("avx512f"), bw = f && __builtin_cpu_supports("avx512bw");
  const bool bf16 = bw && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  const bool vnni = bw && __builtin_cpu_supports("avx512vnni");
  if (!bf16 || !vnni)
    printf(
        "simd_emulated: this CPU lacks %s%s%s: the emulation of %s is checked only through the kernels' scalar "
        "models here\n",
        !f ? "AVX-512F" : "", f && !bf16 ? "AVX512-BF16 " : "", f && !vnni ? "AVX512-VNNI" : "",
        !f ? "every AVX-512 instruction" : "those sets' instructions");
  test_rng r = test_rng_new(test_seed());
  for (int it = 0; it < 20000; it++) {
    float x[16], acc[16], acc2[16];
    uint16_t a[32], b[32], h[16], h2[16];
    for (int i = 0; i < 16; i++) {
      uint32_t u = any_float_bits(&r), v = any_float_bits(&r) & 0x8fffffffu; /* finite sums mostly */
      memcpy(x + i, &u, 4), memcpy(acc + i, &v, 4);
    }
    for (int i = 0; i < 32; i++) a[i] = any_bf16(&r), b[i] = any_bf16(&r);
    memcpy(acc2, acc, sizeof acc);
    if (f) {
      int32_t t[16], t2[16];
      float back[16], back2[16];
      int8_t low[16], low2[16];
      float m = native_convert(x, t, back, low);
      simd_emulated_convert(x, t2, back2, low2);
      ck_assert_msg(!memcmp(t, t2, sizeof t) && !memcmp(back, back2, sizeof back) && !memcmp(low, low2, sizeof low),
                    "vcvttps2dq / vcvtdq2ps / vpmovdb differ at iteration %d", it);
      float m2 = simd_emulated_reduce_max(x);
      ck_assert_msg(same_bits_or_nans(m, m2), "reduce_max: %a, emulated %a (iteration %d)", m, m2, it);
    }
    if (bf16) {
      native_bf16(x, h, acc, a, b);
      simd_emulated_cvtneps_pbh(x, h2);
      simd_emulated_dpbf16(acc2, a, b);
      for (int i = 0; i < 16; i++) {
        ck_assert_msg(h[i] == h2[i], "vcvtneps2bf16 of %a: %04x, emulated %04x", x[i], h[i], h2[i]);
        ck_assert_msg(same_bits_or_nans(acc[i], acc2[i]), "vdpbf16ps lane %d: %a, emulated %a", i, acc[i], acc2[i]);
      }
    }
    if (vnni) {
      int32_t s[16], s2[16];
      uint8_t u[64];
      int8_t v[64];
      for (int i = 0; i < 16; i++) s[i] = s2[i] = (int32_t)test_rng_next(&r);
      for (int i = 0; i < 64; i++) u[i] = (uint8_t)test_rng_next(&r), v[i] = (int8_t)test_rng_next(&r);
      native_vnni(s, u, v);
      simd_emulated_dpbusd(s2, u, v);
      ck_assert_msg(!memcmp(s, s2, sizeof s), "vpdpbusd differs at iteration %d", it);
    }
  }
#endif
}
END_TEST

int main(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    printf("skipped: this CPU lacks AVX2/FMA, which the emulated kernels are compiled for\n");
    return 77;
  }
#endif
  Suite *s = suite_create("simd_emulated");
  TCase *tc = tcase_create("kernels");
  tcase_add_test(tc, avx2_dots_sum_in_the_documented_order);
  tcase_add_test(tc, avx512_dots_sum_in_the_documented_order);
  tcase_add_test(tc, avx2_widens_every_value_exactly);
  tcase_add_test(tc, avx512_widens_every_value_exactly);
  tcase_add_test(tc, axpy_is_one_fma_per_element);
  tcase_add_test(tc, blocked_four_row_dots_sum_in_the_documented_order);
  tcase_add_test(tc, avx2_head_attention_is_the_dots_and_axpys);
  tcase_add_test(tc, avx512_head_attention_is_the_dots_and_axpys);
  tcase_add_test(tc, emulated_instructions_match_the_hardware);
  suite_add_tcase(s, tc);
  return test_run(s);
}
