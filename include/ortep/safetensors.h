/*
 * safetensors.h: Hugging Face safetensors files, opened by mmap and
 * validated in full before any tensor is handed out:
 *
 *   - the 8-byte header length lies within the file;
 *   - the header is a JSON object (parsed with cJSON) whose every entry has a
 *     known dtype name, a shape of non-negative integers and two data offsets;
 *   - offsets are in range, ordered, consistent with dtype x shape, and no two
 *     tensors overlap; names are unique.
 *
 * A malformed file is an ORTEP_E_FORMAT error naming the tensor and the
 * problem, never a crash or an out-of-bounds read. Tensor data pointers point
 * into the mapping and stay valid until ortep_safetensors_close.
 */
#ifndef ORTEP_SAFETENSORS_H
#define ORTEP_SAFETENSORS_H

#include "ortep/dtype.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_safetensors ortep_safetensors;

typedef struct ortep_safetensors_entry {
  const char *name;
  ortep_dtype dtype;
  ortep_shape shape;
  const void *data; /* inside the mapping (or the caller's bytes) */
  size_t size;      /* bytes */
} ortep_safetensors_entry;

/* Maps and validates the file at path. */
ORTEP_API ortep_status ortep_safetensors_open(const char *path, ortep_safetensors **out);
/* Validates bytes the caller owns (and keeps alive while *out lives). */
ORTEP_API ortep_status ortep_safetensors_parse(const void *bytes, size_t len, ortep_safetensors **out);
ORTEP_API void ortep_safetensors_close(ortep_safetensors *st);

ORTEP_API size_t ortep_safetensors_count(const ortep_safetensors *st);
ORTEP_API const ortep_safetensors_entry *ortep_safetensors_at(const ortep_safetensors *st, size_t i);
/* NULL when absent. */
ORTEP_API const ortep_safetensors_entry *ortep_safetensors_find(const ortep_safetensors *st, const char *name);

/* Writes n tensors (name, dtype, shape, data, size) to path, in order, with
 * the header padded to 8 bytes. Writes to path.tmp and renames, so a failed
 * write never leaves a truncated file under path. */
ORTEP_API ortep_status ortep_safetensors_write(const char *path, const ortep_safetensors_entry *entries, size_t n);

/* The same, with each tensor's bytes produced on demand (entries[].data is
 * ignored): produce fills scratch (entries[index].size bytes) and returns
 * ORTEP_OK. Only one tensor is in memory at a time. */
typedef ortep_status (*ortep_safetensors_producer)(void *user, size_t index, void *scratch);
ORTEP_API ortep_status ortep_safetensors_write_stream(const char *path, const ortep_safetensors_entry *entries,
                                                      size_t n, ortep_safetensors_producer produce, void *user);

ORTEP_END_DECLS

#endif
