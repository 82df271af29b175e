/*
 * quant.c: the CPU EP's kernels for q8_0 / q4_0 weights (dtype.h): the
 * blocked layout of kernels/opset.h and back, rows dequantized for lookups
 * and prefill, and the decode (M = 1) Linear as integer dot products.
 *
 * A decode step quantizes x once per node into blocks of 32 int8 with an f32
 * scale each (round half to even, |q| <= 127). A weight row's dot with it is
 * then defined as eight lanes: lane j of block b holds the exact integer
 * L = sum of x_q * w_q over elements 32b + 4j .. 32b + 4j + 3 (w_q: the int8
 * of q8_0, q - 8 of q4_0), and acc_j = fmaf(d_w * d_x, L, acc_j) block after
 * block; the lanes are summed ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 +
 * a7)). That is the order every variant below computes (the integers are
 * exact however they are formed: VNNI vpdpbusd, AVX2 maddubs/madd, a C
 * loop), so results are bitwise the same for the portable loop, AVX2 and
 * AVX-512 VNNI, and for any thread count.
 *
 * The unsigned x signed byte products the instructions take: q4_0's nibbles
 * q (0..15) times x_q, with -8 x (the lane's sum of x_q) added; q8_0's
 * stored q ^ 0x80 = q + 128 times x_q, with -128 x the lane's sum added
 * (VNNI), or q's magnitude times x_q with q's sign (AVX2 maddubs, whose 16-bit
 * pairs must not saturate).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/opset.h"
#include "ops.h"

#define QK 32

static uint16_t f16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* --- the blocked layout ------------------------------------------------------ */
/* A quad's blocks come in runs of QRUN (kernels/opset.h): the run's scales,
 * then its quants, so a kernel reads the quad as one stream (all scales
 * ahead of all quants, the 0.5B down projection, k = 4864, took 51 us of a
 * q4_0 step instead of 47.5 by a per-node timer in a local build; one
 * thread over cold copies of it read 26-28 GB/s instead of 28-32). */
#define QRUN ORTEP__QUANT_RUN

/* The run of a quad (nb blocks of bb bytes a row) starting at block g0, a
 * multiple of QRUN: its block count, its scales (8 bytes a block) at *sc and
 * its quants (4 x bb - 8 bytes a block) at *qs. */
static inline size_t quad_run(const uint8_t *quad, size_t nb, size_t bb, size_t g0, const uint8_t **sc,
                              const uint8_t **qs) {
  size_t m = nb - g0 < QRUN ? nb - g0 : QRUN;
  *sc = quad + g0 * 4 * bb, *qs = *sc + m * 8;
  return m;
}

/* Block b of a quad: its four scales (returned) and its quants (*qs). */
static inline const uint8_t *quad_scales_at(const uint8_t *quad, size_t nb, size_t bb, size_t b, const uint8_t **qs) {
  size_t i = b % QRUN;
  const uint8_t *sc;
  quad_run(quad, nb, bb, b - i, &sc, qs);
  *qs += i * (4 * bb - 8);
  return sc + i * 8;
}

/* One quad of rows (4 x k values) from GGUF's row-major blocks src into the
 * blocked layout at dst (the same number of bytes; not overlapping). */
static void block_quad(ortep_dtype dt, const uint8_t *src, size_t k, uint8_t *dst) {
  size_t nb = k / QK, bb = ortep_dtype_size(dt), rowb = nb * bb;
  for (size_t b = 0; b < nb; b++) {
    const uint8_t *qs_c;
    uint8_t *scales = (uint8_t *)quad_scales_at(dst, nb, bb, b, &qs_c), *qs = (uint8_t *)qs_c;
    for (size_t r = 0; r < 4; r++) memcpy(scales + r * 2, src + r * rowb + b * bb, 2);
    if (dt == ORTEP_DTYPE_Q8_0) {
      for (size_t r = 0; r < 4; r++)
        for (size_t i = 0; i < QK; i++) qs[r * 32 + i] = src[r * rowb + b * bb + 2 + i] ^ 0x80;
    } else { /* rows 2h and 2h + 1 in the low and high nibbles of group h */
      for (size_t h = 0; h < 2; h++) {
        const uint8_t *lo = src + 2 * h * rowb + b * bb + 2, *hi = lo + rowb;
        uint8_t *g = qs + h * 32;
        for (size_t i = 0; i < QK / 2; i++) {
          g[i] = (uint8_t)((lo[i] & 15) | (hi[i] & 15) << 4);
          g[i + QK / 2] = (uint8_t)((lo[i] >> 4) | (hi[i] & 0xf0));
        }
      }
    }
  }
}

void ortep__cpu_quant_block(ortep_dtype dt, const void *src, size_t n, size_t k, void *dst) {
  size_t quad = 4 * (k / QK) * ortep_dtype_size(dt);
  for (size_t q = 0; q < n / 4; q++) block_quad(dt, (const uint8_t *)src + q * quad, k, (uint8_t *)dst + q * quad);
}

void ortep__cpu_quant_block_in_place(ortep_dtype dt, void *w, size_t n, size_t k, void *quad_tmp) {
  size_t quad = 4 * (k / QK) * ortep_dtype_size(dt);
  for (size_t q = 0; q < n / 4; q++) {
    uint8_t *p = (uint8_t *)w + q * quad;
    memcpy(quad_tmp, p, quad);
    block_quad(dt, quad_tmp, k, p);
  }
}

size_t ortep__cpu_quant_quad_bytes(ortep_dtype dt, size_t k) { return 4 * (k / QK) * ortep_dtype_size(dt); }

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
  const uint8_t *qs, *scales = quad_scales_at((const uint8_t *)w + (r / 4) * 4 * nb * bb, nb, bb, b, &qs);
  size_t rr = r & 3;
  for (size_t i = 0; i < QK; i++)
    q[i] = dt == ORTEP_DTYPE_Q8_0 ? (int8_t)(qs[rr * 32 + i] ^ 0x80)
                                  : (int8_t)(((rr & 1 ? qs[(rr / 2) * 32 + i] >> 4 : qs[(rr / 2) * 32 + i] & 15)) - 8);
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
size_t ortep__cpu_qx_bytes(size_t k) { return k + k / QK * sizeof(float) + 2 * (k / 4) * sizeof(int32_t) + 64; }

void ortep__cpu_qx_init(void *mem, size_t k, ortep__cpu_qx *qx) {
  uintptr_t p = ((uintptr_t)mem + 31) & ~(uintptr_t)31;
  qx->q = (int8_t *)p;
  qx->bias4 = (int32_t *)(p + k);
  qx->bias8 = qx->bias4 + k / 4;
  qx->d = (float *)(qx->bias8 + k / 4);
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
    for (size_t i = 0; i < QK; i++) {
      /* finite x gives |v| <= 127; NaN (a NaN or infinite x) goes to -128 as
       * vcvtps2dq + saturating packs take it, with no undefined conversion */
      float v = round_even(xb[i] * id);
      qx->q[b * QK + i] = (int8_t)(v >= 127.0f ? 127 : v >= -128.0f ? (int)v : -128);
    }
    for (size_t j = 0; j < 8; j++) {
      const int8_t *l = qx->q + b * QK + 4 * j;
      int32_t s = l[0] + l[1] + l[2] + l[3];
      qx->bias4[b * 8 + j] = -8 * s;
      qx->bias8[b * 8 + j] = -128 * s;
    }
  }
}

/* --- the dot products ------------------------------------------------------------ */
static inline float lanes_sum(const float *a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Portable: the definition above, one row at a time (any layout). */
static float dot_portable(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, const ortep__cpu_qx *x) {
  float acc[8] = {0};
  int8_t q[QK];
  for (size_t b = 0; b < k / QK; b++) {
    float s = unpack(dt, w, blocked, r, b, k, q) * x->d[b];
    const int8_t *xq = x->q + b * QK;
    for (size_t j = 0; j < 8; j++) {
      int32_t l = 0;
      for (size_t t = 0; t < 4; t++) l += (int32_t)xq[4 * j + t] * q[4 * j + t];
      acc[j] = fmaf(s, (float)l, acc[j]);
    }
  }
  return lanes_sum(acc);
}

static void dot4_portable(ortep_dtype dt, const void *w, size_t quad, size_t k, const ortep__cpu_qx *x, float *v) {
  for (size_t r = 0; r < 4; r++) v[r] = dot_portable(dt, w, true, 4 * quad + r, k, x);
}

typedef void (*dot4_fn)(ortep_dtype, const void *, size_t, size_t, const ortep__cpu_qx *, float *);
/* Quad `quad` of weights wa and of wb against one x: va, vb as dot4 gives them. */
typedef void (*dot4_pair_fn)(ortep_dtype, const void *, const void *, size_t, size_t, const ortep__cpu_qx *, float *,
                             float *);
/* Up to QROWS rows of x (x[0 .. rows)) against one quad: v[4 r + i] is row
 * r's output i, bitwise what dot4 gives that row alone. */
#define QROWS 4
typedef void (*dot4_rows_fn)(ortep_dtype, const void *, size_t, size_t, const ortep__cpu_qx *, size_t, float *);
typedef void (*quantize_fn)(const float *, size_t, const ortep__cpu_qx *);

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* AVX-512 BW and VNNI (CPUID leaf 7); the OS's ZMM state was checked by
 * ops.c before it chose the avx512 set. */
static bool have_vnni(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & (1u << 30)) && (c & (1u << 11));
}

/* How far ahead of the block being read its run is prefetched, where a
 * kernel prefetches: AVX2's dot4 (with ORTEP_CPU_SIMD=avx2 a q8_0 gate_up
 * took 167-212 us with it, 220-271 without; other nodes even), the VNNI
 * pair of a gate_up node, and the VNNI kernel that reads one quad at a time
 * on an Intel CPU (vnni_prefetches). On the AMD EPYC build VM that kernel leaves it to
 * the hardware: prefetching there made a q8_0 step's down projection
 * 109 -> 134 us and its lm_head 2.8 -> 3.1 ms, where the pair's two streams
 * gained (gate_up 205-287 -> 190-270 us; per-node timer, 3 rounds; 8 KiB
 * no better). On Intel (Xeon, family 6 model 207, 2 cores of a VM) the same
 * kernel with the prefetch took a 0.5B q4_0 step's qkv 40.0 -> 28.6 us, o
 * 30.9 -> 22.1, down 149 -> 113 and the q8_0 lm_head 6.8 -> 5.1 ms (the
 * Linear nodes alone over 24 copies each, prefetch on and off in alternate
 * passes of one process, 10 passes each; 2 KiB ahead gained a little less,
 * 8 KiB the same). */
#define PREFETCH         4096
#define ORTEP_QUANT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ORTEP_QUANT_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))

ORTEP_QUANT_AVX2 static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

/* quantize_x_portable's operations, eight lanes at a time: the maximum is
 * exact, d and 1 / d the same IEEE divisions, vcvtps2dq rounds half to even
 * as round_even does (the default MXCSR), and the lane sums are exact: the
 * same bytes. */
ORTEP_QUANT_AVX2 static void quantize_x_avx2(const float *x, size_t k, const ortep__cpu_qx *qx) {
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
    _mm256_storeu_si256((__m256i *)(qx->bias4 + b * 8),
                        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), lanes), 3));
    _mm256_storeu_si256((__m256i *)(qx->bias8 + b * 8),
                        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), lanes), 7));
  }
}

/* The lines a block's worth of bytes from `ahead` covers (4 x 34 or 4 x 18
 * bytes), prefetched: a kernel that prefetches keeps PREFETCH bytes ahead
 * of the block it reads. The builtin, with no target of its own: an
 * _mm_prefetch in a target("avx2") function inlined into the AVX-512 ones
 * was compiled to nothing there (GCC 12). */
static inline __attribute__((always_inline)) void prefetch_block(const char *ahead, bool q8) {
  __builtin_prefetch(ahead, 0, 3);
  __builtin_prefetch(ahead + 64, 0, 3);
  if (q8) __builtin_prefetch(ahead + 128, 0, 3);
}

/* d_w of the quad's four rows (the block's four f16 at s4) times d_x */
ORTEP_QUANT_AVX2 static inline __m128 quad_scales(const uint8_t *s4, float dx) {
  return _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)s4)), _mm_set1_ps(dx));
}

/* AVX2: each row in its own 8-lane accumulator. */
ORTEP_QUANT_AVX2 static void dot4_avx2(ortep_dtype dt, const void *w, size_t quad, size_t k, const ortep__cpu_qx *x,
                                       float *v) {
  size_t nb = k / QK, bb = ortep_dtype_size(dt);
  const uint8_t *q0 = (const uint8_t *)w + quad * 4 * nb * bb;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80), low = _mm256_set1_epi8(15);
  const char *ahead = (const char *)q0 + PREFETCH; /* as dot4_vnni_of's */
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = quad_run(q0, nb, bb, g0, &sc, &qr);
    for (size_t i = 0; i < m; i++, ahead += 4 * bb) {
      size_t b = g0 + i;
      prefetch_block(ahead, dt == ORTEP_DTYPE_Q8_0);
      __m256i xq = _mm256_loadu_si256((const __m256i *)(x->q + b * QK));
      __m128 s4 = quad_scales(sc + i * 8, x->d[b]);
      __m256 s = _mm256_castps128_ps256(s4);
      __m256i l0, l1, l2, l3;
      if (dt == ORTEP_DTYPE_Q8_0) {
        const __m256i *g = (const __m256i *)(qr + i * 128);
#define Q8_LANES(i)                                                                             \
  __extension__({                                                                               \
    __m256i q = _mm256_xor_si256(_mm256_loadu_si256(g + i), flip);                              \
    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xq, q)), ones); \
  })
        l0 = Q8_LANES(0), l1 = Q8_LANES(1), l2 = Q8_LANES(2), l3 = Q8_LANES(3);
#undef Q8_LANES
      } else {
        const __m256i *g = (const __m256i *)(qr + i * 64);
        __m256i bias = _mm256_loadu_si256((const __m256i *)(x->bias4 + b * 8));
        __m256i p0 = _mm256_loadu_si256(g), p1 = _mm256_loadu_si256(g + 1);
#define Q4_LANES(nib) _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(nib, xq), ones), bias)
        l0 = Q4_LANES(_mm256_and_si256(p0, low));
        l1 = Q4_LANES(_mm256_and_si256(_mm256_srli_epi16(p0, 4), low));
        l2 = Q4_LANES(_mm256_and_si256(p1, low));
        l3 = Q4_LANES(_mm256_and_si256(_mm256_srli_epi16(p1, 4), low));
#undef Q4_LANES
      }
      a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(0)), _mm256_cvtepi32_ps(l0), a0);
      a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(1)), _mm256_cvtepi32_ps(l1), a1);
      a2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(2)), _mm256_cvtepi32_ps(l2), a2);
      a3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(3)), _mm256_cvtepi32_ps(l3), a3);
    }
  }
  v[0] = hsum8(a0), v[1] = hsum8(a1), v[2] = hsum8(a2), v[3] = hsum8(a3);
}

ORTEP_QUANT_VNNI static inline __m256 high8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* The weight row whose scale each lane of the first (or second) accumulator
 * takes: q8_0 rows (0, 1) and (2, 3) per register; q4_0 (0, 2) and (1, 3)
 * (low and high nibbles). */
ORTEP_QUANT_VNNI static inline __m512i scale_lanes(bool q8, bool second) {
  if (q8)
    return second ? _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2)
                  : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return second ? _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1)
                : _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
}
/* The quad's four outputs from the two accumulators (lanes summed in the
 * defined order), in row order. */
ORTEP_QUANT_VNNI static inline void quad_out(bool q8, __m512 a01, __m512 a23, float *v) {
  float r[4] = {hsum8(_mm512_castps512_ps256(a01)), hsum8(high8(a01)), hsum8(_mm512_castps512_ps256(a23)),
                hsum8(high8(a23))};
  if (q8)
    v[0] = r[0], v[1] = r[1], v[2] = r[2], v[3] = r[3];
  else
    v[0] = r[0], v[2] = r[1], v[1] = r[2], v[3] = r[3];
}

/* AVX-512 VNNI: two rows per 16-lane accumulator (lanes 0-7 and 8-15), x
 * broadcast into both halves, vpdpbusd starting from the lane biases. */
/* Block b of one quad (position i of its run: scales at sc, quants at qr)
 * into the quad's two accumulators, given x's block broadcast (xq), its
 * lane biases (bs) and d_x: the one definition of a block's step, which
 * every decode kernel below repeats per quad. */
ORTEP_QUANT_VNNI static inline __attribute__((always_inline)) void vnni_block(bool q8, const uint8_t *sc,
                                                                              const uint8_t *qr, size_t i, __m512i xq,
                                                                              __m512i bs, float dx, __m512 *a01,
                                                                              __m512 *a23) {
  const __m512i ia = scale_lanes(q8, false), ib = scale_lanes(q8, true);
  const __m512i low = _mm512_set1_epi8(15);
  __m512 s = _mm512_castps128_ps512(quad_scales(sc + i * 8, dx));
  __m512i l01, l23;
  if (q8) {
    const __m512i *g = (const __m512i *)(qr + i * 128);
    l01 = _mm512_dpbusd_epi32(bs, _mm512_loadu_si512(g), xq);
    l23 = _mm512_dpbusd_epi32(bs, _mm512_loadu_si512(g + 1), xq);
  } else {
    __m512i p = _mm512_loadu_si512((const __m512i *)(qr + i * 64));
    l01 = _mm512_dpbusd_epi32(bs, _mm512_and_si512(p, low), xq);
    l23 = _mm512_dpbusd_epi32(bs, _mm512_and_si512(_mm512_srli_epi16(p, 4), low), xq);
  }
  *a01 = _mm512_fmadd_ps(_mm512_permutexvar_ps(ia, s), _mm512_cvtepi32_ps(l01), *a01);
  *a23 = _mm512_fmadd_ps(_mm512_permutexvar_ps(ib, s), _mm512_cvtepi32_ps(l23), *a23);
}

/* x's block b broadcast into both halves, and its lane biases. */
ORTEP_QUANT_VNNI static inline __attribute__((always_inline)) __m512i vnni_x(const ortep__cpu_qx *x, size_t b, bool q8,
                                                                             __m512i *bs) {
  const int32_t *bias = q8 ? x->bias8 : x->bias4;
  *bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(bias + b * 8)));
  return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->q + b * QK)));
}

ORTEP_QUANT_VNNI static inline __attribute__((always_inline)) void dot4_vnni_of(bool q8, bool prefetch, const void *w,
                                                                                size_t quad, size_t k,
                                                                                const ortep__cpu_qx *x, float *v) {
  size_t nb = k / QK, bb = q8 ? 34 : 18; /* the block's bytes: f16 d, then 32 or 16 bytes */
  const uint8_t *q0 = (const uint8_t *)w + quad * 4 * nb * bb;
  __m512 a01 = _mm512_setzero_ps(), a23 = a01;
  /* the quad's bytes are one stream (runs of scales, then quants) followed
   * by the next quad's: the hardware's prefetchers follow it, and with
   * `prefetch` the kernel keeps PREFETCH bytes ahead of the block it reads
   * (past the quad's end: the next quad's, which a thread's share reads next) */
  const char *ahead = (const char *)q0 + PREFETCH;
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = quad_run(q0, nb, bb, g0, &sc, &qr);
    for (size_t i = 0; i < m; i++, ahead += 4 * bb) {
      if (prefetch) prefetch_block(ahead, q8);
      __m512i bs, xq = vnni_x(x, g0 + i, q8, &bs);
      vnni_block(q8, sc, qr, i, xq, bs, x->d[g0 + i], &a01, &a23);
    }
  }
  quad_out(q8, a01, a23, v);
}
/* One loop per type (the type's test and sizes out of the loop), without
 * and with the prefetch: the same operations, so the same results. */
ORTEP_QUANT_VNNI static void dot4_vnni(ortep_dtype dt, const void *w, size_t quad, size_t k, const ortep__cpu_qx *x,
                                       float *v) {
  if (dt == ORTEP_DTYPE_Q8_0)
    dot4_vnni_of(true, false, w, quad, k, x, v);
  else
    dot4_vnni_of(false, false, w, quad, k, x, v);
}
ORTEP_QUANT_VNNI static void dot4_vnni_prefetch(ortep_dtype dt, const void *w, size_t quad, size_t k,
                                                const ortep__cpu_qx *x, float *v) {
  if (dt == ORTEP_DTYPE_Q8_0)
    dot4_vnni_of(true, true, w, quad, k, x, v);
  else
    dot4_vnni_of(false, true, w, quad, k, x, v);
}

/* Whether the VNNI kernel that reads one quad at a time prefetches
 * (PREFETCH): on Intel CPUs (CPUID vendor GenuineIntel), where it was
 * measured faster, not elsewhere (AMD, where it was measured slower). */
static bool vnni_prefetches(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* "Genu" "ineI" "ntel" */
}

/* Quad `quad` of two weights of one shape side by side (a gate_up node's
 * gate and up), each with its own accumulators through dot4_vnni_of's
 * vnni_block, so bitwise its results; x's block loaded once for both. Block by block, not one quad after the other: a gate_up step's
 * Linear by a per-node timer took 172-219 us instead of 232-290 (q8_0,
 * 0.5B, 2 threads) and 94-98 instead of 95-102 (q4_0). Pairing a plain
 * node's quads that way was slower (neighbours: up to half the rate; the
 * two halves of a thread's share: down 96 -> 110 us): one stream there is
 * better than two. Each of the two streams is prefetched PREFETCH ahead
 * (gate_up a further 4-8% faster). */
ORTEP_QUANT_VNNI static inline __attribute__((always_inline)) void dot4_vnni_pair_of(bool q8, const uint8_t *qa,
                                                                                     const uint8_t *qb, size_t k,
                                                                                     const ortep__cpu_qx *x, float *va,
                                                                                     float *vb) {
  size_t nb = k / QK, bb = q8 ? 34 : 18;
  __m512 a01 = _mm512_setzero_ps(), a23 = a01, b01 = a01, b23 = a01;
  const char *ahead_a = (const char *)qa + PREFETCH, *ahead_b = (const char *)qb + PREFETCH;
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sca, *qra, *scb, *qrb;
    size_t m = quad_run(qa, nb, bb, g0, &sca, &qra);
    quad_run(qb, nb, bb, g0, &scb, &qrb);
    for (size_t i = 0; i < m; i++, ahead_a += 4 * bb, ahead_b += 4 * bb) {
      prefetch_block(ahead_a, q8);
      prefetch_block(ahead_b, q8);
      __m512i bs, xq = vnni_x(x, g0 + i, q8, &bs);
      vnni_block(q8, sca, qra, i, xq, bs, x->d[g0 + i], &a01, &a23);
      vnni_block(q8, scb, qrb, i, xq, bs, x->d[g0 + i], &b01, &b23);
    }
  }
  quad_out(q8, a01, a23, va);
  quad_out(q8, b01, b23, vb);
}
ORTEP_QUANT_VNNI static void dot4_vnni_pair(ortep_dtype dt, const void *wa, const void *wb, size_t quad, size_t k,
                                            const ortep__cpu_qx *x, float *va, float *vb) {
  size_t at = quad * ortep__cpu_quant_quad_bytes(dt, k);
  if (dt == ORTEP_DTYPE_Q8_0)
    dot4_vnni_pair_of(true, (const uint8_t *)wa + at, (const uint8_t *)wb + at, k, x, va, vb);
  else
    dot4_vnni_pair_of(false, (const uint8_t *)wa + at, (const uint8_t *)wb + at, k, x, va, vb);
}

/* dot4_vnni_of for R rows of x at once (a prefill chunk's): each block's
 * weights loaded (and q4_0's nibbles split) once for the R rows, each row
 * with its own two accumulators, so R chains of FMAs run side by side where
 * one row waits on its previous block's FMA. Per row every operation is
 * dot4_vnni_of's, in its order: bitwise its result. */
ORTEP_QUANT_VNNI static inline __attribute__((always_inline)) void dot4_vnni_rows_of(bool q8, size_t R, const void *w,
                                                                                     size_t quad, size_t k,
                                                                                     const ortep__cpu_qx *x, float *v) {
  size_t nb = k / QK, bb = q8 ? 34 : 18;
  const uint8_t *q0 = (const uint8_t *)w + quad * 4 * nb * bb;
  __m512 a01[QROWS], a23[QROWS];
  for (size_t r = 0; r < R; r++) a01[r] = _mm512_setzero_ps(), a23[r] = a01[r];
  const __m512i ia = scale_lanes(q8, false), ib = scale_lanes(q8, true);
  const __m512i low = _mm512_set1_epi8(15);
  for (size_t g0 = 0; g0 < nb; g0 += QRUN) {
    const uint8_t *sc, *qr;
    size_t m = quad_run(q0, nb, bb, g0, &sc, &qr);
    for (size_t i = 0; i < m; i++) {
      size_t b = g0 + i;
      __m512i w01, w23;
      if (q8) {
        w01 = _mm512_loadu_si512((const __m512i *)(qr + i * 128));
        w23 = _mm512_loadu_si512((const __m512i *)(qr + i * 128) + 1);
      } else {
        __m512i p = _mm512_loadu_si512((const __m512i *)(qr + i * 64));
        w01 = _mm512_and_si512(p, low), w23 = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
      }
      /* the four d_w where each accumulator's lanes take them; times a row's
       * d_x below, lane by lane the products dot4_vnni_of permutes */
      __m512 ws = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(sc + i * 8))));
      __m512 wa = _mm512_permutexvar_ps(ia, ws), wb = _mm512_permutexvar_ps(ib, ws);
      for (size_t r = 0; r < R; r++) {
        const int32_t *bias = q8 ? x[r].bias8 : x[r].bias4;
        __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[r].q + b * QK)));
        __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(bias + b * 8)));
        __m512 dx = _mm512_set1_ps(x[r].d[b]);
        __m512i l01 = _mm512_dpbusd_epi32(bs, w01, xq), l23 = _mm512_dpbusd_epi32(bs, w23, xq);
        a01[r] = _mm512_fmadd_ps(_mm512_mul_ps(wa, dx), _mm512_cvtepi32_ps(l01), a01[r]);
        a23[r] = _mm512_fmadd_ps(_mm512_mul_ps(wb, dx), _mm512_cvtepi32_ps(l23), a23[r]);
      }
    }
  }
  for (size_t r = 0; r < R; r++) quad_out(q8, a01[r], a23[r], v + 4 * r);
}
/* One loop per type and row count (both constants inside it). */
#define VNNI_ROWS(q8, x, v)                                     \
  switch (rows) {                                               \
    case 1: dot4_vnni_rows_of(q8, 1, w, quad, k, x, v); break;  \
    case 2: dot4_vnni_rows_of(q8, 2, w, quad, k, x, v); break;  \
    case 3: dot4_vnni_rows_of(q8, 3, w, quad, k, x, v); break;  \
    default: dot4_vnni_rows_of(q8, 4, w, quad, k, x, v); break; \
  }
ORTEP_QUANT_VNNI static void dot4_vnni_rows(ortep_dtype dt, const void *w, size_t quad, size_t k,
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
/* AVX-512F alone (the avx512 set of ops.c), whether or not the CPU has VNNI */
#define ORTEP_QUANT_AVX512 __attribute__((target("avx512f,avx2,f16c")))
/* Sixteen values of a row widened to f32 (f16 and bf16 exactly, as
 * ortep_f16_to_f32 / ortep_bf16_to_f32 do). */
ORTEP_QUANT_AVX512 static inline __m512 widen16(ortep_dtype from, const void *p) {
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
ORTEP_QUANT_AVX512 static void quantize_row_avx512(ortep_dtype to, ortep_dtype from, const void *src, size_t k,
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
static dot4_fn dot4;
static dot4_rows_fn dot4_rows;
static dot4_pair_fn dot4_pair;
static quantize_fn quantize_x;
static const char *dot4_name;

/* The other sets' rows: dot4 once per row. */
static void dot4_each_row(ortep_dtype dt, const void *w, size_t quad, size_t k, const ortep__cpu_qx *x, size_t rows,
                          float *v) {
  for (size_t r = 0; r < rows; r++) dot4(dt, w, quad, k, &x[r], v + 4 * r);
}

/* The other sets' pairs: dot4 once per quad. */
static void dot4_each_quad(ortep_dtype dt, const void *wa, const void *wb, size_t quad, size_t k,
                           const ortep__cpu_qx *x, float *va, float *vb) {
  dot4(dt, wa, quad, k, x, va);
  dot4(dt, wb, quad, k, x, vb);
}

static dot4_fn pick(const char **name, quantize_fn *quantize, dot4_rows_fn *rows, dot4_pair_fn *pair) {
  const char *set = ortep__cpu_simd_name();
  *quantize = quantize_x_portable;
  *rows = dot4_each_row;
  *pair = dot4_each_quad;
#if defined(__x86_64__)
  if (strcmp(set, "portable")) *quantize = quantize_x_avx2;
  if (!strcmp(set, "avx512") && have_vnni())
    return *rows = dot4_vnni_rows, *pair = dot4_vnni_pair,
           vnni_prefetches() ? (*name = "avx512-vnni+prefetch", dot4_vnni_prefetch)
                             : (*name = "avx512-vnni", dot4_vnni);
  if (strcmp(set, "portable")) return *name = "avx2", dot4_avx2;
#endif
  (void)set;
  return *name = "portable", dot4_portable;
}

static quantize_row_fn quantize_row;
static pthread_once_t dot4_once = PTHREAD_ONCE_INIT;
static void pick_once(void) {
  dot4 = pick(&dot4_name, &quantize_x, &dot4_rows, &dot4_pair);
  quantize_row = quantize_row_portable;
#if defined(__x86_64__)
  if (!strcmp(ortep__cpu_simd_name(), "avx512")) quantize_row = quantize_row_avx512;
#endif
}

void ortep__cpu_quantize_row(ortep_dtype to, ortep_dtype from, const void *src, size_t k, void *dst, float *tmp) {
  pthread_once(&dot4_once, pick_once);
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
  pthread_once(&dot4_once, pick_once);
  quantize_x(x, k, qx);
}

const char *ortep__cpu_quant_simd_name(void) {
  pthread_once(&dot4_once, pick_once);
  return dot4_name;
}

float ortep__cpu_quant_dot(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, const ortep__cpu_qx *x) {
  pthread_once(&dot4_once, pick_once);
  if (!blocked) return dot_portable(dt, w, false, r, k, x);
  float v[4];
  dot4(dt, w, r / 4, k, x, v);
  return v[r & 3];
}

/* --- ortep:Linear, rows of x each as one row alone (ops.h) -------------------- */
/* Items (quads of outputs, or single outputs when row-major) are taken
 * QUANT_RUN at a time: the rows of x run over a run's weights QROWS at a
 * time (hot in the cache after the first group; dot4_rows), and a gate_up
 * node's SiLU(gate) x up is applied to the run's outputs in one call per
 * row, not four at a time (the exponentials of four values cost ~6% of a
 * q4_0 decode step). The epilogue is elementwise, so the outputs are those
 * of one item and one row at a time. */
#define QUANT_RUN 16

/* v[4 r + i]: output i of item j's quad (i = 0 only when row-major) for row
 * r of x[0 .. rows). */
static void quant_dots(const cpu_weights *w, bool blocked, size_t j, size_t k, const ortep__cpu_qx *x, size_t rows,
                       float *v) {
  if (blocked && rows == 1)
    dot4(w->dtype, w->data, j / 4, k, x, v); /* decode's */
  else if (blocked)
    dot4_rows(w->dtype, w->data, j / 4, k, x, rows, v);
  else
    for (size_t r = 0; r < rows; r++) v[4 * r] = dot_portable(w->dtype, w->data, false, j, k, &x[r]);
}

void ortep__cpu_linear_quant(const ortep__cpu_qx *x, size_t rows, size_t k, size_t groups, const cpu_weights *w,
                             const cpu_weights *b, const size_t *n, bool gate_up, bool blocked, const float *res,
                             float *const *y, size_t begin, size_t end) {
  pthread_once(&dot4_once, pick_once);
  (void)groups;
  size_t step = blocked ? 4 : 1;
  for (size_t i0 = begin; i0 < end; i0 += QUANT_RUN) {
    size_t i1 = end - i0 < QUANT_RUN ? end : i0 + QUANT_RUN;
    for (size_t row0 = 0; row0 < rows; row0 += QROWS) {
      const ortep__cpu_qx *xr = &x[row0];
      size_t R = rows - row0 < QROWS ? rows - row0 : QROWS;
      float t[4 * QROWS], tu[4 * QROWS];
      if (gate_up) {
        float v[QROWS][4 * QUANT_RUN], u[QROWS][4 * QUANT_RUN];
        size_t j0 = i0 * step, outs = (i1 - i0) * step;
        bool pair = blocked && R == 1 && w[0].dtype == w[1].dtype; /* decode's gate and up side by side */
        for (size_t item = i0; item < i1; item++) {
          size_t at = (item - i0) * step;
          if (pair) {
            dot4_pair(w[0].dtype, w[0].data, w[1].data, item, k, xr, t, tu);
          } else {
            quant_dots(&w[0], blocked, item * step, k, xr, R, t);
            quant_dots(&w[1], blocked, item * step, k, xr, R, tu);
          }
          for (size_t r = 0; r < R; r++)
            for (size_t i = 0; i < step; i++) v[r][at + i] = t[4 * r + i], u[r][at + i] = tu[4 * r + i];
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
            float o = t[4 * r + i] + (b[g].data ? cpu_w(b[g], j + i) : 0.0f);
            size_t at = (row0 + r) * n[g] + j + i;
            y[g][at] = res ? o + res[at] : o;
          }
      }
    }
  }
}
