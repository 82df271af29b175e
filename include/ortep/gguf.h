/*
 * gguf.h: GGUF files (ggml's model format, versions 2 and 3), opened by mmap
 * and validated in full before anything is handed out:
 *
 *   - the magic, the version, and counts that fit the file;
 *   - every metadata key (a non-empty string, unique) and value: the 13
 *     value types, string lengths and array counts inside the file, no array
 *     of arrays; general.alignment (when present) a u32 power of two;
 *   - every tensor: a unique non-empty name, 1 to 4 dimensions of at least 1
 *     (listed innermost first, as ggml does), a GGML type whose block size
 *     ortep knows, an innermost dimension that is whole blocks, an element
 *     count within 2^40, an offset aligned to the file's alignment, and data
 *     inside the file without overlapping another tensor's.
 *
 * A malformed file is an ORTEP_E_FORMAT error naming the key or tensor and
 * the problem. The tensors' shapes are given outermost first, like every
 * other ortep shape ([N, K] for a weight whose rows are K long), their dtype
 * the ortep one when ortep has it (F32, F16, BF16, Q8_0, Q4_0; I8..I64 and
 * F64 as ORTEP_DTYPE_COUNT too) and ORTEP_DTYPE_COUNT otherwise, with the
 * GGML type kept to name it (e.g. Q4_K). Pointers point into the mapping
 * and stay valid until ortep_gguf_close.
 */
#ifndef ORTEP_GGUF_H
#define ORTEP_GGUF_H

#include "ortep/dtype.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_gguf ortep_gguf;

/* The metadata value types, numbered as GGUF numbers them. */
typedef enum ortep_gguf_type {
  ORTEP_GGUF_U8 = 0,
  ORTEP_GGUF_I8 = 1,
  ORTEP_GGUF_U16 = 2,
  ORTEP_GGUF_I16 = 3,
  ORTEP_GGUF_U32 = 4,
  ORTEP_GGUF_I32 = 5,
  ORTEP_GGUF_F32 = 6,
  ORTEP_GGUF_BOOL = 7,
  ORTEP_GGUF_STRING = 8,
  ORTEP_GGUF_ARRAY = 9,
  ORTEP_GGUF_U64 = 10,
  ORTEP_GGUF_I64 = 11,
  ORTEP_GGUF_F64 = 12,
} ortep_gguf_type;

/* GGML tensor types ortep names (ggml.h's numbering). */
enum {
  ORTEP_GGML_F32 = 0,
  ORTEP_GGML_F16 = 1,
  ORTEP_GGML_Q4_0 = 2,
  ORTEP_GGML_Q8_0 = 8,
  ORTEP_GGML_BF16 = 30,
};

/* One metadata entry. Scalars are in `u` (unsigned and bool), `i` (signed)
 * or `f` (f32 / f64), strings in str / len (not NUL-terminated); an array
 * has its element type and count, and its elements at `data` (numbers:
 * little-endian, packed; strings: read them with ortep_gguf_array_string). */
typedef struct ortep_gguf_kv {
  const char *key; /* NUL-terminated copy */
  ortep_gguf_type type, elem_type;
  uint64_t count; /* array elements */
  uint64_t u;
  int64_t i;
  double f;
  const char *str;
  size_t len;
  const void *data;
} ortep_gguf_kv;

typedef struct ortep_gguf_tensor {
  const char *name;   /* NUL-terminated copy */
  uint32_t ggml_type; /* as in the file */
  ortep_dtype dtype;  /* ORTEP_DTYPE_COUNT when ortep has no such dtype */
  ortep_shape shape;  /* outermost first: the file's dimensions reversed */
  const void *data;
  size_t size;
} ortep_gguf_tensor;

/* Maps and validates the file at path. */
ORTEP_API ortep_status ortep_gguf_open(const char *path, ortep_gguf **out);
/* Validates bytes the caller owns (and keeps alive while *out lives). */
ORTEP_API ortep_status ortep_gguf_parse(const void *bytes, size_t len, ortep_gguf **out);
ORTEP_API void ortep_gguf_close(ortep_gguf *g);

ORTEP_API uint32_t ortep_gguf_version(const ortep_gguf *g);
ORTEP_API size_t ortep_gguf_kv_count(const ortep_gguf *g);
ORTEP_API const ortep_gguf_kv *ortep_gguf_kv_at(const ortep_gguf *g, size_t i);
/* NULL when absent. */
ORTEP_API const ortep_gguf_kv *ortep_gguf_find_kv(const ortep_gguf *g, const char *key);
/* Element i of a string array (ORTEP_E_OUT_OF_RANGE past its count,
 * ORTEP_E_INVALID_ARGUMENT for another kind of entry). */
ORTEP_API ortep_status ortep_gguf_array_string(const ortep_gguf *g, const ortep_gguf_kv *kv, uint64_t i,
                                               const char **str, size_t *len);
ORTEP_API size_t ortep_gguf_tensor_count(const ortep_gguf *g);
ORTEP_API const ortep_gguf_tensor *ortep_gguf_tensor_at(const ortep_gguf *g, size_t i);
ORTEP_API const ortep_gguf_tensor *ortep_gguf_find_tensor(const ortep_gguf *g, const char *name);
/* "Q4_K", "F32" ...; "type N" for a number ggml does not define. */
ORTEP_API const char *ortep_gguf_type_name(uint32_t ggml_type);

/* A GGUF v3 writer (the tests' and the synthetic presets' files): metadata
 * and tensors are added in order and written by ortep_gguf_writer_write
 * (to path.tmp, then renamed). Tensor shapes are given outermost first;
 * data is copied when added. */
typedef struct ortep_gguf_writer ortep_gguf_writer;
ORTEP_API ortep_status ortep_gguf_writer_create(ortep_gguf_writer **out);
ORTEP_API void ortep_gguf_writer_destroy(ortep_gguf_writer *w);
ORTEP_API ortep_status ortep_gguf_writer_add_u32(ortep_gguf_writer *w, const char *key, uint32_t v);
ORTEP_API ortep_status ortep_gguf_writer_add_f32(ortep_gguf_writer *w, const char *key, float v);
ORTEP_API ortep_status ortep_gguf_writer_add_bool(ortep_gguf_writer *w, const char *key, bool v);
ORTEP_API ortep_status ortep_gguf_writer_add_string(ortep_gguf_writer *w, const char *key, const char *v);
/* An array of n elements of a numeric type (packed little-endian values). */
ORTEP_API ortep_status ortep_gguf_writer_add_array(ortep_gguf_writer *w, const char *key, ortep_gguf_type elem,
                                                   const void *values, size_t n);
ORTEP_API ortep_status ortep_gguf_writer_add_strings(ortep_gguf_writer *w, const char *key, const char *const *v,
                                                     size_t n);
ORTEP_API ortep_status ortep_gguf_writer_add_tensor(ortep_gguf_writer *w, const char *name, uint32_t ggml_type,
                                                    const ortep_shape *shape, const void *data, size_t size);
ORTEP_API ortep_status ortep_gguf_writer_write(ortep_gguf_writer *w, const char *path);

ORTEP_END_DECLS

#endif
