/*
 * quant.c: the CPU EP's kernels for q8_0 / q4_0 weights (dtype.h): the
 * blocked layout of kernels/opset.h and back, rows dequantized for lookups
 * and prefill, and the Linear as integer dot products.
 *
 * A decode step quantizes x once per node into blocks of 32 int8 with an f32
 * scale each (round half to even, |q| <= 127). A weight row's dot with it is
 * then defined block by block: L = the exact integer sum of x_q * w_q over
 * the block's 32 elements (w_q: the int8 of q8_0, q - 8 of q4_0), and
 * acc = fmaf(d_w * d_x, L, acc), one accumulator, block after block. That
 * is the order every variant below computes (the integers are exact however
 * they are formed: VNNI vpdpbusd, AVX2 maddubs/madd, a C loop), so results
 * are bitwise the same for the portable loop, AVX2 and AVX-512 VNNI, and for
 * any thread count.
 *
 * The blocked layout puts sixteen rows side by side, four bytes of each in
 * one 64-byte group (kernels/opset.h): a vector instruction's 32-bit lane r
 * sums row r's products with x's four values at that place (broadcast to
 * every lane), so a block of sixteen rows takes eight vpdpbusd, then one
 * conversion and one FMA for all sixteen: half the arithmetic per weight of
 * four rows of eight lanes each, which held q4_0 below the read bound.
 *
 * The unsigned x signed byte products the instructions take: q4_0's nibbles
 * q (0..15) times x_q, with -8 x (the block's sum of x_q) added; q8_0's
 * stored q ^ 0x80 = q + 128 times x_q, with -128 x the block's sum added
 * (VNNI), or q's magnitude times x_q with q's sign (AVX2 maddubs, whose 16-bit
 * pairs must not saturate).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/opset.h"
#include "isa.h"
#include "ops.h"
#include "simd.h"

#define QK 32
#define TR ORTEP__QUANT_ROWS /* a tile's rows */

static uint16_t f16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Four quantized values of x as the one 32-bit value a lane broadcasts. */
static inline int32_t x4_at(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* --- the blocked layout ------------------------------------------------------ */
/* A tile's blocks come in runs of QRUN (kernels/opset.h): the run's scales,
 * then its quants, so a kernel reads the tile as one stream (all scales
 * ahead of all quants read measurably slower). */
#define QRUN ORTEP__QUANT_RUN

/* The run of a tile (nb blocks of bb bytes a row) starting at block g0, a
 * multiple of QRUN: its block count, its scales (2 TR bytes a block) at *sc
 * and its quants (TR bb - 2 TR bytes a block) at *qs. */
static inline size_t tile_run(const uint8_t *tile, size_t nb, size_t bb, size_t g0, const uint8_t **sc,
                              const uint8_t **qs) {
  size_t m = nb - g0 < QRUN ? nb - g0 : QRUN;
  *sc = tile + g0 * TR * bb, *qs = *sc + m * 2 * TR;
  return m;
}

/* Block b of a tile: its sixteen scales (returned) and its quants (*qs). */
static inline const uint8_t *tile_scales_at(const uint8_t *tile, size_t nb, size_t bb, size_t b, const uint8_t **qs) {
  size_t i = b % QRUN;
  const uint8_t *sc;
  tile_run(tile, nb, bb, b - i, &sc, qs);
  *qs += i * (TR * bb - 2 * TR);
  return sc + i * 2 * TR;
}

/* One tile of rows (TR x k values) from GGUF's row-major blocks src into the
 * blocked layout at dst (the same number of bytes; not overlapping). */
static void block_tile(ortep_dtype dt, const uint8_t *src, size_t k, uint8_t *dst) {
  size_t nb = k / QK, bb = ortep_dtype_size(dt), rowb = nb * bb;
  for (size_t b = 0; b < nb; b++) {
    const uint8_t *qs_c;
    uint8_t *scales = (uint8_t *)tile_scales_at(dst, nb, bb, b, &qs_c), *qs = (uint8_t *)qs_c;
    for (size_t r = 0; r < TR; r++) {
      const uint8_t *blk = src + r * rowb + b * bb;
      memcpy(scales + r * 2, blk, 2);
      for (size_t g = 0; g < (bb - 2) / 4; g++) /* q8_0: 8 groups of q ^ 0x80; q4_0: 4 of GGUF's bytes */
        for (size_t j = 0; j < 4; j++)
          qs[g * 64 + 4 * r + j] = dt == ORTEP_DTYPE_Q8_0 ? blk[2 + 4 * g + j] ^ 0x80 : blk[2 + 4 * g + j];
    }
  }
}

void ortep__cpu_quant_block(ortep_dtype dt, const void *src, size_t n, size_t k, void *dst) {
  size_t tile = ortep__cpu_quant_tile_bytes(dt, k);
  for (size_t t = 0; t < n / TR; t++) block_tile(dt, (const uint8_t *)src + t * tile, k, (uint8_t *)dst + t * tile);
}

void ortep__cpu_quant_block_in_place(ortep_dtype dt, void *w, size_t n, size_t k, void *tile_tmp) {
  size_t tile = ortep__cpu_quant_tile_bytes(dt, k);
  for (size_t t = 0; t < n / TR; t++) {
    uint8_t *p = (uint8_t *)w + t * tile;
    memcpy(tile_tmp, p, tile);
    block_tile(dt, tile_tmp, k, p);
  }
}

size_t ortep__cpu_quant_tile_bytes(ortep_dtype dt, size_t k) { return TR * (k / QK) * ortep_dtype_size(dt); }

/* Row r's scale and its 32 signed quants of block b. */
static float unpack(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t b, size_t k, int8_t *q) {
  size_t nb = k / QK, bb = ortep_dtype_size(dt);
  if (!blocked) {
    const uint8_t *blk = (const uint8_t *)w + (r * nb + b) * bb;
    for (size_t i = 0; i < QK; i++)
      q[i] =
          dt == ORTEP_DTYPE_Q8_0 ? (int8_t)blk[2 + i] : (int8_t)((i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8);
    return ortep_f16_to_f32(f16_at(blk));
  }
  const uint8_t *qs, *scales = tile_scales_at((const uint8_t *)w + (r / TR) * TR * nb * bb, nb, bb, b, &qs);
  size_t rr = r % TR;
  for (size_t g = 0; g < (bb - 2) / 4; g++)
    for (size_t j = 0; j < 4; j++) {
      uint8_t v = qs[g * 64 + 4 * rr + j];
      if (dt == ORTEP_DTYPE_Q8_0) {
        q[4 * g + j] = (int8_t)(v ^ 0x80);
      } else {
        q[4 * g + j] = (int8_t)((v & 15) - 8);
        q[16 + 4 * g + j] = (int8_t)((v >> 4) - 8);
      }
    }
  return ortep_f16_to_f32(f16_at(scales + rr * 2));
}

void ortep__cpu_quant_row_f32(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, float *dst) {
  int8_t q[QK];
  for (size_t b = 0; b < k / QK; b++) {
    float d = unpack(dt, w, blocked, r, b, k, q);
    for (size_t i = 0; i < QK; i++) dst[b * QK + i] = d * (float)q[i];
  }
}

/* --- activations --------------------------------------------------------------- */
size_t ortep__cpu_qx_bytes(size_t k) { return k + 3 * (k / QK) * sizeof(int32_t) + 64; }

void ortep__cpu_qx_init(void *mem, size_t k, ortep__cpu_qx *qx) {
  uintptr_t p = ((uintptr_t)mem + 31) & ~(uintptr_t)31;
  qx->q = (int8_t *)p;
  qx->bias4 = (int32_t *)(p + k);
  qx->bias8 = qx->bias4 + k / QK;
  qx->d = (float *)(qx->bias8 + k / QK);
}

/* round half to even without a library call (|v| < 2^22) */
static inline float round_even(float v) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: the sum's last bit is the units */
  return (v + magic) - magic;
}

static void quantize_x_portable(const float *x, size_t k, const ortep__cpu_qx *qx) {
  for (size_t b = 0; b < k / QK; b++) {
    const float *xb = x + b * QK;
    float amax = 0.0f;
    for (size_t i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    qx->d[b] = d;
    int32_t s = 0;
    for (size_t i = 0; i < QK; i++) {
      /* finite x gives |v| <= 127; NaN (a NaN or infinite x) goes to -128 as
       * vcvtps2dq + saturating packs take it, with no undefined conversion */
      float v = round_even(xb[i] * id);
      qx->q[b * QK + i] = (int8_t)(v >= 127.0f ? 127 : v >= -128.0f ? (int)v : -128);
      s += qx->q[b * QK + i];
    }
    qx->bias4[b] = -8 * s;
    qx->bias8[b] = -128 * s;
  }
}

/* --- the dot products ------------------------------------------------------------ */
/* Portable: the definition above, one row at a time (any layout). */
static float dot_portable(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, const ortep__cpu_qx *x) {
  float acc = 0.0f;
  int8_t q[QK];
  for (size_t b = 0; b < k / QK; b++) {
    float s = unpack(dt, w, blocked, r, b, k, q) * x->d[b];
    const int8_t *xq = x->q + b * QK;
    int32_t l = 0;
    for (size_t i = 0; i < QK; i++) l += (int32_t)xq[i] * q[i];
    acc = fmaf(s, (float)l, acc);
  }
  return acc;
}

static void dot16_portable(ortep_dtype dt, const void *w, size_t tile, size_t k, const ortep__cpu_qx *x, float *v) {
  for (size_t r = 0; r < TR; r++) v[r] = dot_portable(dt, w, true, TR * tile + r, k, x);
}

/* Tile `tile` of w against one x: v[r] is row TR tile + r's output. */
typedef void (*dot16_fn)(ortep_dtype, const void *, size_t, size_t, const ortep__cpu_qx *, float *);
/* Tile `tile` of weights wa and of wb against one x: va, vb as dot16 gives them. */
typedef void (*dot16_pair_fn)(ortep_dtype, const void *, const void *, size_t, size_t, const ortep__cpu_qx *, float *,
                              float *);
/* Up to QROWS rows of x (x[0 .. rows)) against one tile: v[TR r + i] is row
 * r's output i, bitwise what dot16 gives that row alone. */
#define QROWS 4
typedef void (*dot16_rows_fn)(ortep_dtype, const void *, size_t, size_t, const ortep__cpu_qx *, size_t, float *);
typedef void (*quantize_fn)(const float *, size_t, const ortep__cpu_qx *);

#if defined(__x86_64__)

/* How far ahead of the block being read its run is prefetched, where a
 * kernel prefetches: AVX2's dot16, the VNNI pair of a gate_up node (two
 * streams, which the hardware prefetcher follows less well), and the VNNI
 * kernel that reads one tile at a time on an Intel CPU (vnni_prefetches),
 * where each was measured faster with it; an AMD CPU's prefetcher keeps up
 * with the single stream alone, and prefetching there was slower (the
 * figures, by node: docs/api.md, "Quantized weights"). Less ahead gained less; more, no
 * more. */
#define PREFETCH 4096

/* quantize_x_portable's operations, eight lanes at a time: the maximum is
 * exact, d and 1 / d the same IEEE divisions, vcvtps2dq rounds half to even
 * as round_even does (the default MXCSR), and the block's sum is exact: the
 * same bytes. */
ORTEP_SIMD_AVX2 static void quantize_x_avx2(const float *x, size_t k, const ortep__cpu_qx *qx) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t b = 0; b < k / QK; b++) {
    const float *xb = x + b * QK;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8), v2 = _mm256_loadu_ps(xb + 16),
           v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 0x55));
    float amax = _mm_cvtss_f32(h), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    qx->d[b] = d;
    __m256 s = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, s)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, s));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, s)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, s));
    /* packs work within 128-bit halves: the permute puts the 32 bytes back in order */
    __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    q = _mm256_permutevar8x32_epi32(q, order);
    _mm256_storeu_si256((__m256i *)(qx->q + b * QK), q);
    __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    int32_t sum = _mm_cvtsi128_si32(t);
    qx->bias4[b] = -8 * sum;
    qx->bias8[b] = -128 * sum;
  }
}

/* The lines of a tile's block from `ahead` (TR bb bytes: 288 for q4_0, 544
 * for q8_0), prefetched: a kernel that prefetches keeps PREFETCH bytes
 * ahead of the block it reads. The builtin, with no target of its own: an
 * _mm_prefetch in a target("avx2") function inlined into the AVX-512 ones
 * was compiled to nothing there (GCC 12). */
static inline __attribute__((always_inline)) void prefetch_block(const char *ahead, bool q8) {
  for (size_t o = 0; o < (q8 ? 34u : 18u) * TR; o += 64) __builtin_prefetch(ahead + o, 0, 3);
}

/* x's run of blocks from block g (its QRUN blocks' quants, scales and the
 * bias the type reads; past the row's nb blocks, its first run, which the
 * next tile reads first) prefetched into L1, a run ahead of its use, by the
 * kernels of one row of x. Each reads all of x once per tile, and between
 * two reads of one x block the tile's other blocks stream through L1: from
 * a row of ~3,500 values a q4_0 tile (16 rows of 32 KiB and more) outgrows
 * a 32 KiB L1, x's lines were gone by the next tile, and the kernel waited
 * on L2 for them: the long rows streamed slower than the short ones until
 * x was prefetched. Not in the kernel of R rows (a prefill chunk's), where
 * R times the prefetches made a prefill slower. */
static inline __attribute__((always_inline)) void prefetch_x_run(const ortep__cpu_qx *x, size_t g, size_t nb, bool q8) {
  if (g >= nb) g = 0;
  for (size_t o = 0; o < QRUN * QK; o += 64) __builtin_prefetch(x->q + g * QK + o, 0, 3);
  __builtin_prefetch(x->d + g, 0, 3);
  __builtin_prefetch((q8 ? x->bias8 : x->bias4) + g, 0, 3);
}

/* AVX2: rows 0-7 and 8-15 of the tile in two 8-lane accumulators, each
 * block's integer sums as maddubs / madd lane by lane. */
ORTEP_SIMD_AVX2 static void dot16_avx2(ortep_dtype dt, const void *w, size_t tile, size_t k, const ortep__cpu_qx *x,
                                       float *v) {
  size_t nb = k / QK, bb = ortep_dtype_size(dt);
  bool q8 = dt == ORTEP_DTYPE_Q8_0;
  const uint8_t *t0 = (const uint8_t *)w + tile * TR * nb * bb;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80), low = _mm256_set1_epi8(15);
  const char *ahead = (const char *)t0 + PREFETCH; /* as dot16_vnni_of's */
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = tile_run(t0, nb, bb, g0, &sc, &qr);
    prefetch_x_run(x, g0 + QRUN, nb, q8);
    for (size_t i = 0; i < m; i++, ahead += TR * bb) {
      size_t b = g0 + i;
      prefetch_block(ahead, q8);
      const uint8_t *qv = qr + i * (TR * bb - 2 * TR);
      const int8_t *xq = x->q + b * QK;
      __m256i c0, c1;
      if (q8) {
        c0 = c1 = _mm256_setzero_si256();
        for (size_t g = 0; g < 8; g++) {
          __m256i xb = _mm256_set1_epi32(x4_at(xq + 4 * g));
          __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qv + 64 * g)), flip);
          __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qv + 64 * g + 32)), flip);
          c0 = _mm256_add_epi32(
              c0, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(xb, w0)), ones));
          c1 = _mm256_add_epi32(
              c1, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w1), _mm256_sign_epi8(xb, w1)), ones));
        }
      } else {
        c0 = c1 = _mm256_set1_epi32(x->bias4[b]);
        for (size_t g = 0; g < 4; g++) {
          __m256i xl = _mm256_set1_epi32(x4_at(xq + 4 * g)), xh = _mm256_set1_epi32(x4_at(xq + 16 + 4 * g));
          __m256i p0 = _mm256_loadu_si256((const __m256i *)(qv + 64 * g));
          __m256i p1 = _mm256_loadu_si256((const __m256i *)(qv + 64 * g + 32));
#define Q4_SUM(p, xs) _mm256_madd_epi16(_mm256_maddubs_epi16(p, xs), ones)
          c0 = _mm256_add_epi32(c0, _mm256_add_epi32(Q4_SUM(_mm256_and_si256(p0, low), xl),
                                                     Q4_SUM(_mm256_and_si256(_mm256_srli_epi16(p0, 4), low), xh)));
          c1 = _mm256_add_epi32(c1, _mm256_add_epi32(Q4_SUM(_mm256_and_si256(p1, low), xl),
                                                     Q4_SUM(_mm256_and_si256(_mm256_srli_epi16(p1, 4), low), xh)));
#undef Q4_SUM
        }
      }
      const __m256 dx = _mm256_set1_ps(x->d[b]);
      __m256 s0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + i * 2 * TR))), dx);
      __m256 s1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + i * 2 * TR + 16))), dx);
      a0 = _mm256_fmadd_ps(s0, _mm256_cvtepi32_ps(c0), a0);
      a1 = _mm256_fmadd_ps(s1, _mm256_cvtepi32_ps(c1), a1);
    }
  }
  _mm256_storeu_ps(v, a0);
  _mm256_storeu_ps(v + 8, a1);
}

/* AVX-512 VNNI: the tile's sixteen rows in one 16-lane accumulator. */
/* A block's quants as eight vectors whose lane r holds row r's four
 * unsigned bytes at x's group g (values 4g .. 4g + 3): q8_0's groups as
 * stored, q4_0's low nibbles (groups 0-3) and high nibbles (4-7). */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) void vnni_weights(bool q8, const uint8_t *qv,
                                                                               __m512i *wv) {
  if (q8) {
    for (size_t g = 0; g < 8; g++) wv[g] = _mm512_loadu_si512((const void *)(qv + 64 * g));
    return;
  }
  const __m512i low = _mm512_set1_epi8(15);
  for (size_t g = 0; g < 4; g++) {
    __m512i p = _mm512_loadu_si512((const void *)(qv + 64 * g));
    wv[g] = _mm512_and_si512(p, low);
    wv[g + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
  }
}
/* The block's exact integer sums L of the sixteen rows against x's block at
 * xq, starting from its bias (two chains of vpdpbusd, added). */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) __m512i vnni_sums(const __m512i *wv, const int8_t *xq,
                                                                               int32_t bias) {
  __m512i c0 = _mm512_set1_epi32(bias), c1 = _mm512_setzero_si512();
  for (size_t g = 0; g < 8; g += 2) {
    c0 = _mm512_dpbusd_epi32(c0, wv[g], _mm512_set1_epi32(x4_at(xq + 4 * g)));
    c1 = _mm512_dpbusd_epi32(c1, wv[g + 1], _mm512_set1_epi32(x4_at(xq + 4 * g + 4)));
  }
  return _mm512_add_epi32(c0, c1);
}
/* The sixteen d_w of a block (f16 at s16) as f32 */
ORTEP_SIMD_VNNI static inline __m512 vnni_scales(const uint8_t *s16) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)s16));
}
/* One row of x's block b against a block's weights wv and scales ws, into
 * acc: the one definition of a block's step that every VNNI kernel below
 * takes (sums, d_w * d_x, one FMA), so they give the same bits. */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) __m512 vnni_row_step(bool q8, const __m512i *wv, __m512 ws,
                                                                                  const ortep__cpu_qx *x, size_t b,
                                                                                  __m512 acc) {
  __m512i l = vnni_sums(wv, x->q + b * QK, q8 ? x->bias8[b] : x->bias4[b]);
  return _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(x->d[b])), _mm512_cvtepi32_ps(l), acc);
}
/* Block i of a tile's run (scales at sc, quants at qr), x's block b, into acc. */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) __m512 vnni_tile_block(bool q8, const uint8_t *sc,
                                                                                    const uint8_t *qr, size_t i,
                                                                                    const ortep__cpu_qx *x, size_t b,
                                                                                    __m512 acc) {
  __m512i wv[8];
  vnni_weights(q8, qr + i * (TR * (q8 ? 34u : 18u) - 2 * TR), wv);
  return vnni_row_step(q8, wv, vnni_scales(sc + i * 2 * TR), x, b, acc);
}

ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) void dot16_vnni_of(bool q8, bool prefetch, const void *w,
                                                                                size_t tile, size_t k,
                                                                                const ortep__cpu_qx *x, float *v) {
  size_t nb = k / QK, bb = q8 ? 34 : 18; /* the block's bytes: f16 d, then 32 or 16 bytes */
  const uint8_t *t0 = (const uint8_t *)w + tile * TR * nb * bb;
  __m512 acc = _mm512_setzero_ps();
  /* the tile's bytes are one stream (runs of scales, then quants) followed
   * by the next tile's: the hardware's prefetchers follow it, and with
   * `prefetch` the kernel keeps PREFETCH bytes ahead of the block it reads
   * (past the tile's end: the next tile's, which a thread's share reads next) */
  const char *ahead = (const char *)t0 + PREFETCH;
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = tile_run(t0, nb, bb, g0, &sc, &qr);
    prefetch_x_run(x, g0 + QRUN, nb, q8);
    for (size_t i = 0; i < m; i++, ahead += TR * bb) {
      if (prefetch) prefetch_block(ahead, q8);
      acc = vnni_tile_block(q8, sc, qr, i, x, g0 + i, acc);
    }
  }
  _mm512_storeu_ps(v, acc);
}
/* One loop per type (the type's test and sizes out of the loop), without
 * and with the prefetch: the same operations, so the same results. */
ORTEP_SIMD_VNNI static void dot16_vnni(ortep_dtype dt, const void *w, size_t tile, size_t k, const ortep__cpu_qx *x,
                                       float *v) {
  if (dt == ORTEP_DTYPE_Q8_0)
    dot16_vnni_of(true, false, w, tile, k, x, v);
  else
    dot16_vnni_of(false, false, w, tile, k, x, v);
}
ORTEP_SIMD_VNNI static void dot16_vnni_prefetch(ortep_dtype dt, const void *w, size_t tile, size_t k,
                                                const ortep__cpu_qx *x, float *v) {
  if (dt == ORTEP_DTYPE_Q8_0)
    dot16_vnni_of(true, true, w, tile, k, x, v);
  else
    dot16_vnni_of(false, true, w, tile, k, x, v);
}

/* Whether the VNNI kernels of one row of x (one tile at a time, and the
 * gate_up pair) prefetch their weights (PREFETCH ahead): on Intel CPUs
 * (CPUID vendor GenuineIntel), where it was measured faster, not elsewhere
 * (AMD, where whole steps with it were measured slower). */
static bool vnni_prefetches(void) { return ortep__cpu_is_intel(); }

/* Tile `tile` of two weights of one shape side by side (a gate_up node's
 * gate and up), each with its own accumulator through vnni_tile_block, as
 * dot16_vnni_of, so bitwise its results (x's block read once). Block by
 * block, not one tile after the other (x's block is read once for both,
 * which was measurably faster). With `prefetch` (vnni_prefetches) each of
 * the two streams is prefetched PREFETCH ahead. */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) void dot16_vnni_pair_of(bool q8, bool prefetch,
                                                                                     const uint8_t *ta,
                                                                                     const uint8_t *tb, size_t k,
                                                                                     const ortep__cpu_qx *x, float *va,
                                                                                     float *vb) {
  size_t nb = k / QK, bb = q8 ? 34 : 18;
  __m512 acc_a = _mm512_setzero_ps(), acc_b = acc_a;
  const char *ahead_a = (const char *)ta + PREFETCH, *ahead_b = (const char *)tb + PREFETCH;
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sca, *qra, *scb, *qrb;
    size_t m = tile_run(ta, nb, bb, g0, &sca, &qra);
    tile_run(tb, nb, bb, g0, &scb, &qrb);
    prefetch_x_run(x, g0 + QRUN, nb, q8);
    for (size_t i = 0; i < m; i++, ahead_a += TR * bb, ahead_b += TR * bb) {
      if (prefetch) {
        prefetch_block(ahead_a, q8);
        prefetch_block(ahead_b, q8);
      }
      acc_a = vnni_tile_block(q8, sca, qra, i, x, g0 + i, acc_a);
      acc_b = vnni_tile_block(q8, scb, qrb, i, x, g0 + i, acc_b);
    }
  }
  _mm512_storeu_ps(va, acc_a);
  _mm512_storeu_ps(vb, acc_b);
}
/* One loop per type, without and with the prefetch (as dot16_vnni's). */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) void dot16_vnni_pair_dt(bool prefetch, ortep_dtype dt,
                                                                                     const void *wa, const void *wb,
                                                                                     size_t tile, size_t k,
                                                                                     const ortep__cpu_qx *x, float *va,
                                                                                     float *vb) {
  size_t at = tile * ortep__cpu_quant_tile_bytes(dt, k);
  if (dt == ORTEP_DTYPE_Q8_0)
    dot16_vnni_pair_of(true, prefetch, (const uint8_t *)wa + at, (const uint8_t *)wb + at, k, x, va, vb);
  else
    dot16_vnni_pair_of(false, prefetch, (const uint8_t *)wa + at, (const uint8_t *)wb + at, k, x, va, vb);
}
ORTEP_SIMD_VNNI static void dot16_vnni_pair(ortep_dtype dt, const void *wa, const void *wb, size_t tile, size_t k,
                                            const ortep__cpu_qx *x, float *va, float *vb) {
  dot16_vnni_pair_dt(false, dt, wa, wb, tile, k, x, va, vb);
}
ORTEP_SIMD_VNNI static void dot16_vnni_pair_prefetch(ortep_dtype dt, const void *wa, const void *wb, size_t tile,
                                                     size_t k, const ortep__cpu_qx *x, float *va, float *vb) {
  dot16_vnni_pair_dt(true, dt, wa, wb, tile, k, x, va, vb);
}

/* dot16_vnni_of for R rows of x at once (a prefill chunk's): each block's
 * weights loaded (and q4_0's nibbles split) and its scales widened once for
 * the R rows, each row with its own accumulator, so R chains of FMAs run
 * side by side. Per row every operation is dot16_vnni_of's, in its order:
 * bitwise its result. */
ORTEP_SIMD_VNNI static inline __attribute__((always_inline)) void dot16_vnni_rows_of(bool q8, size_t R, const void *w,
                                                                                     size_t tile, size_t k,
                                                                                     const ortep__cpu_qx *x, float *v) {
  size_t nb = k / QK, bb = q8 ? 34 : 18;
  const uint8_t *t0 = (const uint8_t *)w + tile * TR * nb * bb;
  __m512 acc[QROWS];
  for (size_t r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = tile_run(t0, nb, bb, g0, &sc, &qr);
    for (size_t i = 0; i < m; i++) {
      size_t b = g0 + i;
      __m512i wv[8];
      vnni_weights(q8, qr + i * (TR * bb - 2 * TR), wv);
      __m512 ws = vnni_scales(sc + i * 2 * TR);
      for (size_t r = 0; r < R; r++) acc[r] = vnni_row_step(q8, wv, ws, &x[r], b, acc[r]);
    }
  }
  for (size_t r = 0; r < R; r++) _mm512_storeu_ps(v + TR * r, acc[r]);
}
/* One loop per type and row count (both constants inside it). */
#define VNNI_ROWS(q8, x, v)                                      \
  switch (rows) {                                                \
    case 1: dot16_vnni_rows_of(q8, 1, w, tile, k, x, v); break;  \
    case 2: dot16_vnni_rows_of(q8, 2, w, tile, k, x, v); break;  \
    case 3: dot16_vnni_rows_of(q8, 3, w, tile, k, x, v); break;  \
    default: dot16_vnni_rows_of(q8, 4, w, tile, k, x, v); break; \
  }
ORTEP_SIMD_VNNI static void dot16_vnni_rows(ortep_dtype dt, const void *w, size_t tile, size_t k,
                                            const ortep__cpu_qx *x, size_t rows, float *v) {
  if (dt == ORTEP_DTYPE_Q8_0) {
    VNNI_ROWS(true, x, v)
  } else {
    VNNI_ROWS(false, x, v)
  }
}
#undef VNNI_ROWS
#endif

/* --- weights quantized at open ------------------------------------------------ */
/* One row of k float values into row-major q8_0 / q4_0 blocks: widened,
 * then ortep_quantize, the reference (runtime/dtype.c). */
static void widen_row(ortep_dtype dt, const void *src, size_t k, float *out) {
  for (size_t j = 0; j < k; j++)
    out[j] = dt == ORTEP_DTYPE_F32    ? ((const float *)src)[j]
             : dt == ORTEP_DTYPE_BF16 ? ortep_bf16_to_f32(((const uint16_t *)src)[j])
                                      : ortep_f16_to_f32(((const uint16_t *)src)[j]);
}
static void quantize_row_portable(ortep_dtype to, ortep_dtype from, const void *src, size_t k, void *dst, float *tmp) {
  widen_row(from, src, k, tmp);
  ortep_quantize(to, tmp, k, dst); /* whole blocks: cannot fail */
}
typedef void (*quantize_row_fn)(ortep_dtype, ortep_dtype, const void *, size_t, void *, float *);

#if defined(__x86_64__)
/* Sixteen values of a row widened to f32 (f16 and bf16 exactly, as
 * ortep_f16_to_f32 / ortep_bf16_to_f32 do). */
ORTEP_SIMD_AVX512 static inline __m512 widen16(ortep_dtype from, const void *p) {
  if (from == ORTEP_DTYPE_F32) return _mm512_loadu_ps(p);
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  if (from == ORTEP_DTYPE_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The reference quantizers' operations sixteen values at a time, each one
 * the same IEEE operation on the same operands (the scale and its inverse
 * in scalar code as there; no fused multiply-add: q4_0's x * id + 8.5 is a
 * rounded multiply, then a rounded add), so the same bytes:
 * - max|x| skipping NaN: vmaxps returns its second operand when either is
 *   NaN, so max(|x|, m) keeps m; the largest value is exact in any order;
 * - q8_0's round half away from zero: round_q8's steps (|v| past 2^31 or NaN
 *   taken as 0, truncate, add 1 where the remainder is >= 0.5, negate where
 *   v < 0), the byte the low 8 bits (vpmovdb truncates);
 * - q4_0's first value of largest magnitude: the lowest lane where |x| equals
 *   the maximum; its quants trunc(x * id + 8.5) as the low byte of vcvttps2dq
 *   (0 for a NaN, as the reference's conversion gives), min with 15 as signed
 *   bytes. */
ORTEP_SIMD_AVX512 static void quantize_row_avx512(ortep_dtype to, ortep_dtype from, const void *src, size_t k,
                                                  void *dst, float *tmp) {
  (void)tmp;
  const size_t in = ortep_dtype_size(from) * QK, out = ortep_dtype_size(to);
  const __m512 zero = _mm512_setzero_ps();
  for (size_t b = 0; b < k / QK; b++) {
    const char *p = (const char *)src + b * in;
    uint8_t *y = (uint8_t *)dst + b * out;
    __m512 x0 = widen16(from, p), x1 = widen16(from, p + in / 2);
    __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a1, _mm512_max_ps(a0, zero)));
    if (to == ORTEP_DTYPE_Q8_0) {
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint16_t h = ortep_f32_to_f16(d);
      memcpy(y, &h, 2);
      const __m512 vid = _mm512_set1_ps(id), big = _mm512_set1_ps(2147483648.0f), half = _mm512_set1_ps(0.5f);
      for (int s = 0; s < 2; s++) {
        __m512 v = _mm512_mul_ps(s ? x1 : x0, vid), a = _mm512_abs_ps(v);
        a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, big, _CMP_LT_OQ), a);
        __m512i i = _mm512_cvttps_epi32(a);
        __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, _mm512_cvtepi32_ps(i)), half, _CMP_GE_OQ);
        i = _mm512_mask_add_epi32(i, up, i, _mm512_set1_epi32(1));
        i = _mm512_mask_sub_epi32(i, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), _mm512_setzero_si512(), i);
        _mm_storeu_si128((__m128i *)(y + 2 + 16 * s), _mm512_cvtepi32_epi8(i));
      }
    } else {
      float max = 0.0f;
      if (amax != 0.0f) {
        __m512 vm = _mm512_set1_ps(amax);
        uint32_t at =
            (uint32_t)_mm512_cmp_ps_mask(a0, vm, _CMP_EQ_OQ) | (uint32_t)_mm512_cmp_ps_mask(a1, vm, _CMP_EQ_OQ) << 16;
        unsigned j = (unsigned)__builtin_ctz(at);
        max = _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32((int)(j & 15)), j < 16 ? x0 : x1));
      }
      const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint16_t h = ortep_f32_to_f16(d);
      memcpy(y, &h, 2);
      const __m512 vid = _mm512_set1_ps(id), off = _mm512_set1_ps(8.5f);
      const __m128i fifteen = _mm_set1_epi8(15), high = _mm_set1_epi8((char)0xf0);
      __m128i q[2];
      for (int s = 0; s < 2; s++) {
        __m512 t =
            _mm512_add_round_ps(_mm512_mul_ps(s ? x1 : x0, vid), off, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[s] = _mm_min_epi8(_mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)), fifteen);
      }
      _mm_storeu_si128((__m128i *)(y + 2), _mm_or_si128(q[0], _mm_and_si128(_mm_slli_epi16(q[1], 4), high)));
    }
  }
}
#endif

/* The variant ORTEP_CPU_SIMD's set allows (ops.c chose the set): AVX-512
 * with VNNI and BW when the set is avx512 and the CPU has them, else AVX2
 * when the set is avx2 or avx512, else the portable loop. */
static dot16_fn dot16;
static dot16_rows_fn dot16_rows;
static dot16_pair_fn dot16_pair;
static quantize_fn quantize_x;
static const char *dot16_name;

/* The other sets' rows: dot16 once per row. */
static void dot16_each_row(ortep_dtype dt, const void *w, size_t tile, size_t k, const ortep__cpu_qx *x, size_t rows,
                           float *v) {
  for (size_t r = 0; r < rows; r++) dot16(dt, w, tile, k, &x[r], v + TR * r);
}

/* The other sets' pairs: dot16 once per tile. */
static void dot16_each_tile(ortep_dtype dt, const void *wa, const void *wb, size_t tile, size_t k,
                            const ortep__cpu_qx *x, float *va, float *vb) {
  dot16(dt, wa, tile, k, x, va);
  dot16(dt, wb, tile, k, x, vb);
}

static dot16_fn pick(const char **name, quantize_fn *quantize, dot16_rows_fn *rows, dot16_pair_fn *pair) {
  const char *set = ortep__cpu_simd_name();
  *quantize = quantize_x_portable;
  *rows = dot16_each_row;
  *pair = dot16_each_tile;
#if defined(__x86_64__)
  if (strcmp(set, "portable")) *quantize = quantize_x_avx2;
  const unsigned vnni = ORTEP_ISA_AVX512BW | ORTEP_ISA_AVX512VNNI;
  if (!strcmp(set, "avx512") && (ortep__cpu_isa() & vnni) == vnni) {
    *rows = dot16_vnni_rows;
    if (vnni_prefetches()) return *pair = dot16_vnni_pair_prefetch, *name = "avx512-vnni+prefetch", dot16_vnni_prefetch;
    return *pair = dot16_vnni_pair, *name = "avx512-vnni", dot16_vnni;
  }
  if (strcmp(set, "portable")) return *name = "avx2", dot16_avx2;
#endif
  (void)set;
  return *name = "portable", dot16_portable;
}

static quantize_row_fn quantize_row;
static pthread_once_t dot16_once = PTHREAD_ONCE_INIT;
static void pick_once(void) {
  dot16 = pick(&dot16_name, &quantize_x, &dot16_rows, &dot16_pair);
  quantize_row = quantize_row_portable;
#if defined(__x86_64__)
  if (!strcmp(ortep__cpu_simd_name(), "avx512")) quantize_row = quantize_row_avx512;
#endif
}

void ortep__cpu_quantize_row(ortep_dtype to, ortep_dtype from, const void *src, size_t k, void *dst, float *tmp) {
  pthread_once(&dot16_once, pick_once);
  quantize_row(to, from, src, k, dst, tmp);
}

ortep_status ortep__cpu_quantize_values(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out) {
  enum { PIECE = 4096 }; /* values a call: a multiple of 32 */
  if (!x || !out || !ortep_dtype_is_quantized(to) || n % QK ||
      (from != ORTEP_DTYPE_F32 && from != ORTEP_DTYPE_F16 && from != ORTEP_DTYPE_BF16))
    return ortep__quantize_from(from, x, n, to, out); /* its checks and messages */
  float tmp[PIECE];
  size_t es = ortep_dtype_size(from), bb = ortep_dtype_size(to);
  for (size_t i = 0; i < n; i += PIECE)
    ortep__cpu_quantize_row(to, from, (const char *)x + i * es, n - i < PIECE ? n - i : PIECE,
                            (char *)out + i / QK * bb, tmp);
  return ORTEP_OK;
}

void ortep__cpu_quantize_x(const float *x, size_t k, const ortep__cpu_qx *qx) {
  pthread_once(&dot16_once, pick_once);
  quantize_x(x, k, qx);
}

const char *ortep__cpu_quant_simd_name(void) {
  pthread_once(&dot16_once, pick_once);
  return dot16_name;
}

float ortep__cpu_quant_dot(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, const ortep__cpu_qx *x) {
  pthread_once(&dot16_once, pick_once);
  if (!blocked) return dot_portable(dt, w, false, r, k, x);
  float v[TR];
  dot16(dt, w, r / TR, k, x, v);
  return v[r % TR];
}

/* --- ortep:Linear, rows of x each as one row alone (ops.h) -------------------- */
/* Items (tiles of outputs, or single outputs when row-major) are taken a
 * run at a time (64 outputs: QUANT_RUN tiles, or QUANT_RUN_ROWS outputs):
 * the rows of x run over a run's weights QROWS at a time (hot in the cache
 * after the first group; dot16_rows), and a gate_up node's SiLU(gate) x up
 * is applied to the run's outputs in one call per row, not a few at a time
 * (the exponentials of four values at a time cost a visible share of a
 * step). The
 * epilogue is elementwise, so the outputs are those of one item and one
 * row at a time. */
#define QUANT_RUN      4
#define QUANT_RUN_ROWS 16
#define RUN_OUTS       (QUANT_RUN * TR)

/* v[TR r + i]: output i of item j's tile (i = 0 only when row-major) for
 * row r of x[0 .. rows). */
static void quant_dots(const cpu_weights *w, bool blocked, size_t j, size_t k, const ortep__cpu_qx *x, size_t rows,
                       float *v) {
  if (blocked && rows == 1)
    dot16(w->dtype, w->data, j / TR, k, x, v); /* decode's */
  else if (blocked)
    dot16_rows(w->dtype, w->data, j / TR, k, x, rows, v);
  else
    for (size_t r = 0; r < rows; r++) v[TR * r] = dot_portable(w->dtype, w->data, false, j, k, &x[r]);
}

void ortep__cpu_linear_quant(const ortep__cpu_qx *x, size_t rows, size_t k, size_t groups, const cpu_weights *w,
                             const cpu_weights *b, const size_t *n, bool gate_up, bool blocked, const float *res,
                             float *const *y, size_t begin, size_t end) {
  pthread_once(&dot16_once, pick_once);
  (void)groups;
  size_t step = blocked ? TR : 1, run = blocked ? QUANT_RUN : QUANT_RUN_ROWS;
  for (size_t i0 = begin; i0 < end; i0 += run) {
    size_t i1 = end - i0 < run ? end : i0 + run;
    for (size_t row0 = 0; row0 < rows; row0 += QROWS) {
      const ortep__cpu_qx *xr = &x[row0];
      size_t R = rows - row0 < QROWS ? rows - row0 : QROWS;
      float t[TR * QROWS], tu[TR * QROWS];
      if (gate_up) {
        float v[QROWS][RUN_OUTS], u[QROWS][RUN_OUTS];
        size_t j0 = i0 * step, outs = (i1 - i0) * step;
        bool pair = blocked && R == 1 && w[0].dtype == w[1].dtype; /* decode's gate and up side by side */
        for (size_t item = i0; item < i1; item++) {
          size_t at = (item - i0) * step;
          if (pair) {
            dot16_pair(w[0].dtype, w[0].data, w[1].data, item, k, xr, t, tu);
          } else {
            quant_dots(&w[0], blocked, item * step, k, xr, R, t);
            quant_dots(&w[1], blocked, item * step, k, xr, R, tu);
          }
          for (size_t r = 0; r < R; r++)
            for (size_t i = 0; i < step; i++) v[r][at + i] = t[TR * r + i], u[r][at + i] = tu[TR * r + i];
        }
        for (size_t r = 0; r < R; r++) {
          for (size_t i = 0; i < outs; i++) {
            v[r][i] += b[0].data ? cpu_w(b[0], j0 + i) : 0.0f;
            u[r][i] += b[1].data ? cpu_w(b[1], j0 + i) : 0.0f;
          }
          ortep__cpu_silu_mul(v[r], u[r], outs, &y[0][(row0 + r) * n[0] + j0]);
        }
        continue;
      }
      for (size_t item = i0; item < i1; item++) {
        size_t g = 0, j = item * step;
        while (j >= n[g]) j -= n[g++];
        quant_dots(&w[g], blocked, j, k, xr, R, t);
        for (size_t r = 0; r < R; r++)
          for (size_t i = 0; i < step; i++) {
            float o = t[TR * r + i] + (b[g].data ? cpu_w(b[g], j + i) : 0.0f);
            size_t at = (row0 + r) * n[g] + j + i;
            y[g][at] = res ? o + res[at] : o;
          }
      }
    }
  }
}
