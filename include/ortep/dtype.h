/*
 * dtype.h: element types, shapes, and the half-precision conversions the
 * kernels use for f16 / bf16 weights (computed in f32).
 */
#ifndef ORTEP_DTYPE_H
#define ORTEP_DTYPE_H

#include "ortep/status.h"

ORTEP_BEGIN_DECLS

/* XX(NAME, lower-case name, size in bytes) */
#define ORTEP_DTYPE_MAP(XX) \
  XX(F32, "f32", 4)         \
  XX(F16, "f16", 2)         \
  XX(BF16, "bf16", 2)       \
  XX(I32, "i32", 4)         \
  XX(I64, "i64", 8)         \
  XX(U8, "u8", 1)           \
  XX(BOOL, "bool", 1)

typedef enum ortep_dtype {
#define ORTEP__DTYPE_ENUM(name, str, size) ORTEP_DTYPE_##name,
  ORTEP_DTYPE_MAP(ORTEP__DTYPE_ENUM)
#undef ORTEP__DTYPE_ENUM
      ORTEP_DTYPE_COUNT
} ortep_dtype;

/* Bytes per element (0 for an unknown value). */
ORTEP_API size_t ortep_dtype_size(ortep_dtype dtype);
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
/* The byte size of shape x dtype, with overflow checked. */
ORTEP_API ortep_status ortep_shape_bytes(const ortep_shape *shape, ortep_dtype dtype, size_t *out);
/* "[1, 896]" into buf; returns buf. */
ORTEP_API char *ortep_shape_format(const ortep_shape *shape, char *buf, size_t len);

/* IEEE half and bfloat16 <-> f32 (round to nearest even; NaN stays NaN). */
ORTEP_API float ortep_f16_to_f32(uint16_t h);
ORTEP_API uint16_t ortep_f32_to_f16(float f);
ORTEP_API float ortep_bf16_to_f32(uint16_t b);
ORTEP_API uint16_t ortep_f32_to_bf16(float f);

ORTEP_END_DECLS

#endif
