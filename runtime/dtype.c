/*
 * dtype.c: element types, shapes with overflow-checked sizes, and f16 /
 * bf16 conversions (bit manipulation, round to nearest even).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

size_t ortep_dtype_size(ortep_dtype d) {
  switch (d) {
#define SZ(name, str, size, block) \
  case ORTEP_DTYPE_##name: return size;
    ORTEP_DTYPE_MAP(SZ)
#undef SZ
    default: return 0;
  }
}

size_t ortep_dtype_block(ortep_dtype d) {
  switch (d) {
#define BL(name, str, size, block) \
  case ORTEP_DTYPE_##name: return block;
    ORTEP_DTYPE_MAP(BL)
#undef BL
    default: return 0;
  }
}

bool ortep_dtype_is_quantized(ortep_dtype d) { return ortep_dtype_block(d) > 1; }

size_t ortep_dtype_align(ortep_dtype d) { return ortep_dtype_is_quantized(d) ? 2 : ortep_dtype_size(d); }

const char *ortep_dtype_name(ortep_dtype d) {
  switch (d) {
#define NM(name, str, size, block) \
  case ORTEP_DTYPE_##name: return str;
    ORTEP_DTYPE_MAP(NM)
#undef NM
    default: return "unknown";
  }
}

ortep_status ortep_dtype_parse(const char *name, ortep_dtype *out) {
  static const struct {
    const char *alias;
    ortep_dtype d;
  } aliases[] = {{"float32", ORTEP_DTYPE_F32}, {"float", ORTEP_DTYPE_F32},     {"float16", ORTEP_DTYPE_F16},
                 {"half", ORTEP_DTYPE_F16},    {"bfloat16", ORTEP_DTYPE_BF16}, {"int32", ORTEP_DTYPE_I32},
                 {"int64", ORTEP_DTYPE_I64},   {"uint8", ORTEP_DTYPE_U8}};
  if (!name || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_dtype_parse: NULL argument");
  for (int d = 0; d < ORTEP_DTYPE_COUNT; d++)
    if (strcasecmp(name, ortep_dtype_name((ortep_dtype)d)) == 0) return *out = (ortep_dtype)d, ORTEP_OK;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcasecmp(name, aliases[i].alias) == 0) return *out = aliases[i].d, ORTEP_OK;
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                     "unknown dtype '%s'; known: f32, f16, bf16, i32, i64, u8, bool, q8_0, q4_0", name);
}

bool ortep_dtype_is_float(ortep_dtype d) {
  return d == ORTEP_DTYPE_F32 || d == ORTEP_DTYPE_F16 || d == ORTEP_DTYPE_BF16;
}

ortep_status ortep_shape_make(const int64_t *dims, size_t rank, ortep_shape *out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_shape_make: out is NULL");
  memset(out, 0, sizeof *out);
  if (rank > ORTEP_MAX_RANK)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "shape of rank %zu: ranks up to %d are supported", rank,
                       ORTEP_MAX_RANK);
  if (rank && !dims) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_shape_make: dims is NULL for rank %zu", rank);
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < -1)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "shape dimension %zu is %lld: dimensions are >= 0, or -1 for a dimension not known statically",
                         i, (long long)dims[i]);
    out->dims[i] = dims[i];
  }
  out->rank = (uint32_t)rank;
  return ORTEP_OK;
}

bool ortep_shape_is_static(const ortep_shape *s) {
  for (uint32_t i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

bool ortep_shape_equal(const ortep_shape *a, const ortep_shape *b) {
  if (a->rank != b->rank) return false;
  for (uint32_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

char *ortep_shape_format(const ortep_shape *s, char *buf, size_t len) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "[");
  for (uint32_t i = 0; s && i < s->rank; i++)
    n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
  snprintf(buf + n, n < len ? len - n : 0, "]");
  return buf;
}

ortep_status ortep_shape_numel(const ortep_shape *s, size_t *out) {
  if (!s || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_shape_numel: NULL argument");
  size_t n = 1;
  for (uint32_t i = 0; i < s->rank; i++) {
    char b[160];
    if (s->dims[i] < 0)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "shape %s is not static: its element count is unknown",
                         ortep_shape_format(s, b, sizeof b));
    size_t d = (size_t)s->dims[i];
    if (d && n > SIZE_MAX / d)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "shape %s: the element count overflows size_t",
                         ortep_shape_format(s, b, sizeof b));
    n *= d;
  }
  *out = n;
  return ORTEP_OK;
}

ortep_status ortep_shape_bytes(const ortep_shape *s, ortep_dtype dtype, size_t *out) {
  size_t n, es = ortep_dtype_size(dtype), block = ortep_dtype_block(dtype);
  if (!es) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "unknown dtype value %d", (int)dtype);
  ortep_status st = ortep_shape_numel(s, &n);
  if (st != ORTEP_OK) return st;
  if (block > 1) {
    char b[160];
    if (!s->rank || s->dims[s->rank - 1] % (int64_t)block)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "shape %s of %s: %s stores blocks of %zu along the innermost dimension, so it must be a "
                         "multiple of %zu",
                         ortep_shape_format(s, b, sizeof b), ortep_dtype_name(dtype), ortep_dtype_name(dtype), block,
                         block);
    n /= block; /* blocks */
  }
  if (n > SIZE_MAX / es) {
    char b[160];
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "shape %s of %s: the byte size overflows size_t",
                       ortep_shape_format(s, b, sizeof b), ortep_dtype_name(dtype));
  }
  *out = n * es;
  return ORTEP_OK;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float ortep_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t ortep_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t exp = (u >> 23) & 0xff;
  uint32_t man = u & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
  return (uint16_t)half;
}

float ortep_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t ortep_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* --- q8_0 / q4_0 (dtype.h) ----------------------------------------------------
 * The reference quantizers, in llama.cpp's order of operations: the scale is
 * computed in f32 and stored as f16 (round to nearest even), the values
 * divided by the unrounded scale. */
#define QK 32

static ortep_status check_blocks(const char *what, ortep_dtype d, const void *a, const void *b, size_t n) {
  if (!a || !b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: NULL argument", what);
  if (d != ORTEP_DTYPE_Q8_0 && d != ORTEP_DTYPE_Q4_0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: %s is not a block-quantized dtype; use q8_0 or q4_0", what,
                       ortep_dtype_name(d));
  if (n % QK)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: %zu values; %s takes whole blocks of %d", what, n,
                       ortep_dtype_name(d), QK);
  return ORTEP_OK;
}

static void put_f16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8); }
static uint16_t get_f16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* The largest |x[j]| of a block, NaN skipped (as fmaxf skips it): eight
 * lanes side by side, then the lanes, so the compiler vectorizes it (the
 * maximum is exact in any order). */
static inline float block_amax(const float *x) {
  float m[8] = {0};
  for (int j = 0; j < QK; j += 8)
    for (int l = 0; l < 8; l++) {
      float a = fabsf(x[j + l]);
      m[l] = a > m[l] ? a : m[l];
    }
  float amax = 0.0f;
  for (int l = 0; l < 8; l++) amax = m[l] > amax ? m[l] : amax;
  return amax;
}

/* (int8_t)roundf(v), the reference quantizer's byte, without a library call
 * per value (roundf is one on x86-64 without SSE4.1: it made q8_0
 * quantization several times slower than q4_0's, seconds at every open of a
 * 0.5B model on the GPU). Rounds half away from zero exactly as roundf: for
 * |v| < 2^31, i = trunc(|v|) and |v| - i is exact. The byte is the low 8 bits
 * of the rounded value (what the float-to-int8 conversion gives on x86-64:
 * only scales far outside a finite block's reach exceed 127); a NaN or a
 * magnitude past 2^31, where that conversion is undefined, gives 0, the byte
 * x86-64 produced for them (its magnitude taken as 0 before the conversion,
 * which is then always defined). Selects, no branches, so the compiler
 * vectorizes it (the halves of random data would mispredict). */
static inline uint8_t round_q8(float v) {
  float a = fabsf(v);
  a = a < 2147483648.0f ? a : 0.0f; /* a NaN too */
  int32_t i = (int32_t)a;
  i += a - (float)i >= 0.5f;
  return (uint8_t)(v < 0.0f ? -i : i);
}

static void quantize_q8_0(const float *x, uint8_t *y) {
  const float amax = block_amax(x), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, ortep_f32_to_f16(d));
  for (int j = 0; j < QK; j++) y[2 + j] = round_q8(x[j] * id);
}

/* (int8_t)v, the reference quantizer's q4_0 byte before its cap at 15: the
 * low 8 bits of v truncated (what the conversion gives on x86-64); a NaN or
 * a magnitude past 2^31, where C leaves it undefined, gives 0, the low byte
 * of x86-64's 0x80000000 (a NaN or infinite x, or a block so small that
 * 1 / d overflows, reaches there). */
static inline int8_t trunc_q4(float v) {
  v = v >= -2147483648.0f && v < 2147483648.0f ? v : 0.0f; /* then always defined: vectorizes */
  return (int8_t)(uint8_t)(uint32_t)(int32_t)v;
}

/* q4_0's scale comes from the block's value of largest magnitude, the first
 * one where several tie (the reference's strict comparison), 0 when every
 * |x| is 0 or NaN. */
static void quantize_q4_0(const float *x, uint8_t *y) {
  const float amax = block_amax(x);
  float max = 0.0f;
  for (int j = 0; amax != 0.0f && j < QK; j++)
    if (fabsf(x[j]) == amax) {
      max = x[j];
      break;
    }
  const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, ortep_f32_to_f16(d));
  for (int j = 0; j < QK / 2; j++) {
    int8_t a = trunc_q4(x[j] * id + 8.5f), b = trunc_q4(x[j + QK / 2] * id + 8.5f);
    uint8_t lo = (uint8_t)(a < 15 ? a : 15), hi = (uint8_t)(b < 15 ? b : 15);
    y[2 + j] = (uint8_t)(lo | hi << 4);
  }
}

ortep_status ortep_quantize(ortep_dtype dtype, const float *x, size_t n, void *out) {
  ortep_status st = check_blocks("ortep_quantize", dtype, x, out, n);
  if (st != ORTEP_OK) return st;
  uint8_t *y = out;
  size_t bytes = ortep_dtype_size(dtype);
  for (size_t b = 0; b < n / QK; b++, y += bytes)
    (dtype == ORTEP_DTYPE_Q8_0 ? quantize_q8_0 : quantize_q4_0)(x + b * QK, y);
  return ORTEP_OK;
}

ortep_status ortep__quantize_from(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out) {
  if (from == ORTEP_DTYPE_F32) return ortep_quantize(to, x, n, out);
  if (from != ORTEP_DTYPE_F16 && from != ORTEP_DTYPE_BF16)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "quantizing %s values: only f32, f16 and bf16 are",
                       ortep_dtype_name(from));
  ortep_status st = check_blocks("ortep__quantize_from", to, x, out, n);
  const uint16_t *h = x;
  uint8_t *y = out;
  float block[QK];
  for (size_t b = 0; st == ORTEP_OK && b < n / QK; b++, y += ortep_dtype_size(to)) {
    for (size_t j = 0; j < QK; j++)
      block[j] = from == ORTEP_DTYPE_F16 ? ortep_f16_to_f32(h[b * QK + j]) : ortep_bf16_to_f32(h[b * QK + j]);
    (to == ORTEP_DTYPE_Q8_0 ? quantize_q8_0 : quantize_q4_0)(block, y);
  }
  return st;
}

/* The bits of the largest finite f32 whose block scale, x / 127 (q8_0) or
 * x / 8 (q4_0) rounded to f16 as the quantizers round it, stays finite: by
 * bisection over the bit patterns, which order positive floats. */
static uint32_t scale_limit_bits(ortep_dtype to) {
  uint32_t lo = 0, hi = 0x7f7fffffu;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo + 1) / 2;
    float x, d;
    memcpy(&x, &mid, sizeof x);
    d = to == ORTEP_DTYPE_Q8_0 ? x / 127.0f : x / 8.0f;
    if (isinf(ortep_f16_to_f32(ortep_f32_to_f16(d))))
      hi = mid - 1;
    else
      lo = mid;
  }
  return lo;
}

/* The first of n values whose magnitude's bits exceed max (a NaN or an
 * infinity exceeds every finite magnitude), or n: in runs of 4096 whose
 * check vectorizes, then the run that holds it. */
#define FIRST_ABOVE(T, mask)                                               \
  static size_t first_above_##T(const T *x, size_t n, T max) {             \
    for (size_t i0 = 0; i0 < n; i0 += 4096) {                              \
      size_t m = n - i0 < 4096 ? n - i0 : 4096;                            \
      unsigned any = 0;                                                    \
      for (size_t i = 0; i < m; i++) any |= (T)(x[i0 + i] & (mask)) > max; \
      if (any)                                                             \
        for (size_t i = 0; i < m; i++)                                     \
          if ((T)(x[i0 + i] & (mask)) > max) return i0 + i;                \
    }                                                                      \
    return n;                                                              \
  }
FIRST_ABOVE(uint32_t, 0x7fffffffu)
FIRST_ABOVE(uint16_t, 0x7fffu)
#undef FIRST_ABOVE

ortep_status ortep__quantize_check(const char *name, ortep_dtype to, ortep_dtype from, const void *x, size_t n,
                                   size_t k) {
  const uint32_t limit = scale_limit_bits(to);
  size_t i = from == ORTEP_DTYPE_F32    ? first_above_uint32_t(x, n, limit)
             : from == ORTEP_DTYPE_BF16 ? first_above_uint16_t(x, n, (uint16_t)(limit >> 16))
                                        : first_above_uint16_t(x, n, 0x7bff); /* f16: every finite value fits */
  if (i == n) return ORTEP_OK;
  float v = from == ORTEP_DTYPE_F32    ? ((const float *)x)[i]
            : from == ORTEP_DTYPE_BF16 ? ortep_bf16_to_f32(((const uint16_t *)x)[i])
                                       : ortep_f16_to_f32(((const uint16_t *)x)[i]);
  if (!isfinite(v))
    return ortep__fail(ORTEP_E_FORMAT,
                       "'%s' cannot be quantized to %s: row %zu, column %zu is %g; a weight must be finite (the "
                       "checkpoint is damaged)",
                       name, ortep_dtype_name(to), i / k, i % k, v);
  float max;
  memcpy(&max, &limit, sizeof max);
  return ortep__fail(ORTEP_E_FORMAT,
                     "'%s' cannot be quantized to %s: row %zu, column %zu is %g, past the largest magnitude whose "
                     "block scale fits %s's f16 scale (%g); keep the weights unquantized (ortep.weights_dtype) or "
                     "check the checkpoint",
                     name, ortep_dtype_name(to), i / k, i % k, v, ortep_dtype_name(to), max);
}

ortep_status ortep_dequantize(ortep_dtype dtype, const void *blocks, size_t n, float *out) {
  ortep_status st = check_blocks("ortep_dequantize", dtype, blocks, out, n);
  if (st != ORTEP_OK) return st;
  const uint8_t *y = blocks;
  size_t bytes = ortep_dtype_size(dtype);
  for (size_t b = 0; b < n / QK; b++, y += bytes) {
    float d = ortep_f16_to_f32(get_f16(y)), *o = out + b * QK;
    for (int j = 0; j < QK; j++)
      o[j] = dtype == ORTEP_DTYPE_Q8_0 ? d * (float)(int8_t)y[2 + j]
                                       : d * (float)((j < QK / 2 ? y[2 + j] & 15 : y[2 + j - QK / 2] >> 4) - 8);
  }
  return ORTEP_OK;
}
