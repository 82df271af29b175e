/*
 * dtype.h: element types, shapes, the half-precision conversions the kernels
 * use for f16 / bf16 weights (computed in f32), and the block-quantized
 * weight types q8_0 and q4_0, bit for bit as GGUF stores them:
 *
 *   q8_0: blocks of 32 values, 34 bytes: f16 scale d, then 32 int8 q;
 *         x[i] = d * q[i].
 *   q4_0: blocks of 32 values, 18 bytes: f16 scale d, then 16 bytes whose
 *         low nibbles are q[0..15] and high nibbles q[16..31];
 *         x[i] = d * (q[i] - 8).
 *
 * A block type's elements come in blocks along the innermost dimension, so a
 * tensor of one has that dimension a multiple of the block.
 */
#ifndef ORTEP_DTYPE_H
#define ORTEP_DTYPE_H

#include "ortep/status.h"

ORTEP_BEGIN_DECLS

/* XX(NAME, lower-case name, bytes per block, elements per block: 1 for a
 * scalar type) */
#define ORTEP_DTYPE_MAP(XX) \
  XX(F32, "f32", 4, 1)      \
  XX(F16, "f16", 2, 1)      \
  XX(BF16, "bf16", 2, 1)    \
  XX(I32, "i32", 4, 1)      \
  XX(I64, "i64", 8, 1)      \
  XX(U8, "u8", 1, 1)        \
  XX(BOOL, "bool", 1, 1)    \
  XX(Q8_0, "q8_0", 34, 32)  \
  XX(Q4_0, "q4_0", 18, 32)

typedef enum ortep_dtype {
#define ORTEP__DTYPE_ENUM(name, str, size, block) ORTEP_DTYPE_##name,
  ORTEP_DTYPE_MAP(ORTEP__DTYPE_ENUM)
#undef ORTEP__DTYPE_ENUM
      ORTEP_DTYPE_COUNT
} ortep_dtype;

/* Bytes per block of ortep_dtype_block(dtype) elements: bytes per element
 * for a scalar type, 34 for q8_0 (0 for an unknown value). */
ORTEP_API size_t ortep_dtype_size(ortep_dtype dtype);
/* Elements per block: 1 for a scalar type, 32 for q8_0 and q4_0 (0 for an
 * unknown value). */
ORTEP_API size_t ortep_dtype_block(ortep_dtype dtype);
/* The alignment the data of a dtype needs: its size for a scalar type, 2
 * (the f16 scale) for a block type. */
ORTEP_API size_t ortep_dtype_align(ortep_dtype dtype);
/* Whether a dtype is block-quantized (q8_0, q4_0). */
ORTEP_API bool ortep_dtype_is_quantized(ortep_dtype dtype);
/* "f32", "bf16" ... ("unknown" for an unknown value). */
ORTEP_API const char *ortep_dtype_name(ortep_dtype dtype);
/* Parses "f32", "float32", "F32" ...; ORTEP_E_INVALID_ARGUMENT listing the known names. */
ORTEP_API ortep_status ortep_dtype_parse(const char *name, ortep_dtype *out);
/* Whether a dtype is floating point (f32, f16, bf16). */
ORTEP_API bool ortep_dtype_is_float(ortep_dtype dtype);

#define ORTEP_MAX_RANK 8

/* A shape: rank <= ORTEP_MAX_RANK; a dimension of -1 is not static. */
typedef struct ortep_shape {
  uint32_t rank;
  int64_t dims[ORTEP_MAX_RANK];
} ortep_shape;

/* Builds a shape; refuses a rank over 8 or a dimension below -1. */
ORTEP_API ortep_status ortep_shape_make(const int64_t *dims, size_t rank, ortep_shape *out);
/* True when every dimension is >= 0. */
ORTEP_API bool ortep_shape_is_static(const ortep_shape *shape);
ORTEP_API bool ortep_shape_equal(const ortep_shape *a, const ortep_shape *b);
/* The element count, with overflow checked (ORTEP_E_INVALID_ARGUMENT for a
 * non-static shape or an overflow). The empty shape (rank 0) has 1 element. */
ORTEP_API ortep_status ortep_shape_numel(const ortep_shape *shape, size_t *out);
/* The byte size of shape x dtype, with overflow checked; for a block type the
 * innermost dimension must be a multiple of the block (refused otherwise). */
ORTEP_API ortep_status ortep_shape_bytes(const ortep_shape *shape, ortep_dtype dtype, size_t *out);
/* "[1, 896]" into buf; returns buf. */
ORTEP_API char *ortep_shape_format(const ortep_shape *shape, char *buf, size_t len);

/* IEEE half and bfloat16 <-> f32 (round to nearest even; NaN stays NaN). */
ORTEP_API float ortep_f16_to_f32(uint16_t h);
ORTEP_API uint16_t ortep_f32_to_f16(float f);
ORTEP_API float ortep_bf16_to_f32(uint16_t b);
ORTEP_API uint16_t ortep_f32_to_bf16(float f);

/* n values (a multiple of 32) into q8_0 or q4_0 blocks at out, rounded as
 * llama.cpp's reference quantizers (quantize_row_q8_0_ref / _q4_0_ref) round,
 * so a checkpoint quantized here equals llama.cpp's conversion of it byte
 * for byte: q8_0 d = max|x| / 127, q = roundf(x / d); q4_0 d = m / -8 with
 * m the value of largest magnitude, q = min(15, trunc(x / d + 8.5)). Like
 * llama.cpp's, it takes any value: a NaN or an infinity, or a block whose
 * scale overflows f16, gives blocks that decode to zeros or infinities (a
 * model's weights are checked before they are quantized, docs/models.md). */
ORTEP_API ortep_status ortep_quantize(ortep_dtype dtype, const float *x, size_t n, void *out);
/* n values (a multiple of 32) of q8_0 or q4_0 blocks back to f32. */
ORTEP_API ortep_status ortep_dequantize(ortep_dtype dtype, const void *blocks, size_t n, float *out);

ORTEP_END_DECLS

#endif
