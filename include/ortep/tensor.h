/*
 * tensor.h: tensors. A tensor is a dtype, a shape, and a view
 * (byte offset, byte size) of a storage owned by an EP. Storage may be
 * allocated lazily (on ensure_allocated or first copyin) or at once. Views
 * share their storage and its id (used for dependency tracking); the storage
 * is reference-counted, so views keep it alive and the last release returns
 * the memory to its EP exactly once.
 *
 * Host access (bytes or typed) works only on host-accessible devices;
 * elsewhere it fails with ORTEP_E_NOT_HOST_ACCESSIBLE: use
 * ortep_tensor_copyout. Typed access checks the dtype (ORTEP_E_TYPE_MISMATCH
 * naming both). A tensor handle is not thread-safe; the storage's reference
 * count is.
 */
#ifndef ORTEP_TENSOR_H
#define ORTEP_TENSOR_H

#include "ortep/ep.h"

ORTEP_BEGIN_DECLS

/* A tensor whose storage will come from ep (which must outlive it).
 * lazy = false allocates now. */
ORTEP_API ortep_status ortep_tensor_create(ortep_ep *ep, ortep_dtype dtype, const ortep_shape *shape, bool lazy,
                                           ortep_tensor **out);
/* A tensor over memory someone else owns (e.g. mmap'd weights): buffer must be
 * BORROWED or BORROWED_MUT, on ep's device, and at least shape x dtype bytes.
 * Releasing the tensor never frees it. */
ORTEP_API ortep_status ortep_tensor_from_borrowed(ortep_ep *ep, ortep_dtype dtype, const ortep_shape *shape,
                                                  const ortep_buffer *buffer, ortep_tensor **out);
/* A 1-D view of size bytes at offset bytes into t (relative to t's own view),
 * of t's dtype: both must be multiples of the element size and inside t. */
ORTEP_API ortep_status ortep_tensor_view(const ortep_tensor *t, size_t offset, size_t size, ortep_tensor **out);
/* A view with its own dtype and shape at offset bytes into t. */
ORTEP_API ortep_status ortep_tensor_view_as(const ortep_tensor *t, size_t offset, ortep_dtype dtype,
                                            const ortep_shape *shape, ortep_tensor **out);
/* Drops this handle; the storage goes back to its EP with the last one. */
ORTEP_API void ortep_tensor_release(ortep_tensor *t);

ORTEP_API ortep_status ortep_tensor_ensure_allocated(ortep_tensor *t);
ORTEP_API bool ortep_tensor_is_allocated(const ortep_tensor *t);

ORTEP_API ortep_dtype ortep_tensor_dtype(const ortep_tensor *t);
ORTEP_API const ortep_shape *ortep_tensor_shape(const ortep_tensor *t);
ORTEP_API size_t ortep_tensor_numel(const ortep_tensor *t);
ORTEP_API size_t ortep_tensor_size(const ortep_tensor *t);   /* bytes of this view */
ORTEP_API size_t ortep_tensor_offset(const ortep_tensor *t); /* bytes into the storage */
/* The storage's id: equal for a tensor and all its views, unique otherwise. */
ORTEP_API uint64_t ortep_tensor_storage_id(const ortep_tensor *t);
ORTEP_API ortep_ep *ortep_tensor_ep(const ortep_tensor *t);
ORTEP_API bool ortep_tensor_is_borrowed(const ortep_tensor *t);

/* The device address of this view's first byte (for kernels); NULL when not
 * allocated. Dereference only on host-accessible devices. */
ORTEP_API void *ortep_tensor_data_ptr(const ortep_tensor *t);

/* Host access (host-accessible devices only). Writable access to a tensor over
 * read-only borrowed memory is refused. */
ORTEP_API ortep_status ortep_tensor_host_bytes(const ortep_tensor *t, const void **data, size_t *len);
ORTEP_API ortep_status ortep_tensor_host_bytes_mut(ortep_tensor *t, void **data, size_t *len);
/* Typed access: dtype must be the tensor's. */
ORTEP_API ortep_status ortep_tensor_host_data(const ortep_tensor *t, ortep_dtype dtype, const void **data);
ORTEP_API ortep_status ortep_tensor_host_data_mut(ortep_tensor *t, ortep_dtype dtype, void **data);
/* The single element of a one-element tensor, as dtype (which must match),
 * into out (ortep_dtype_size(dtype) bytes). */
ORTEP_API ortep_status ortep_tensor_item(const ortep_tensor *t, ortep_dtype dtype, void *out);

/* Copies through the owning EP. copyin allocates a lazy tensor first; len
 * must equal the view's size. copy_from needs equal sizes. */
ORTEP_API ortep_status ortep_tensor_copyin(ortep_tensor *t, const void *src, size_t len);
ORTEP_API ortep_status ortep_tensor_copyout(const ortep_tensor *t, void *dst, size_t len);
ORTEP_API ortep_status ortep_tensor_copy_from(ortep_tensor *dst, const ortep_tensor *src);
ORTEP_API ortep_status ortep_tensor_synchronize(const ortep_tensor *t);

ORTEP_END_DECLS

#endif
