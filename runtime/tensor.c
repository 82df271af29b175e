/*
 * tensor.c: tensors as views of reference-counted storage (tensor.h).
 *
 * The storage holds the EP buffer and an atomic reference count; each tensor
 * handle (the original and every view) holds one reference, and the last
 * release hands the buffer back to its EP, exactly once. A lazy storage is
 * allocated whole by the first ensure_allocated or copyin on any of its views.
 */
#include <stdatomic.h>
#include <string.h>

#include "internal.h"
#include "ortep/tensor.h"

#define STORAGE_ALIGN 64

typedef struct storage {
  _Atomic uint32_t refs;
  uint64_t id;
  ortep_ep *ep;
  ortep_buffer buf; /* zeroed until allocated */
  size_t size;
  bool allocated;
} storage;

struct ortep_tensor {
  storage *st;
  ortep_dtype dtype;
  ortep_shape shape;
  size_t offset, size;
};

static _Atomic uint64_t next_storage_id = 1;

static ortep_status new_tensor(storage *st, ortep_dtype dtype, const ortep_shape *shape, size_t offset, size_t size,
                               ortep_tensor **out) {
  ortep_tensor *t = ortep__malloc(sizeof *t);
  if (!t) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tensor: no memory for the handle");
  *t = (ortep_tensor){st, dtype, *shape, offset, size};
  atomic_fetch_add(&st->refs, 1);
  *out = t;
  return ORTEP_OK;
}

static ortep_status describe(ortep_dtype dtype, const ortep_shape *shape, size_t *bytes) {
  if (!shape) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "tensor: shape is NULL");
  if (shape->rank > ORTEP_MAX_RANK)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "tensor of rank %u: ranks up to %d are supported", shape->rank,
                       ORTEP_MAX_RANK);
  return ortep_shape_bytes(shape, dtype, bytes);
}

static ortep_status new_storage(ortep_ep *ep, size_t size, storage **out) {
  storage *st = ortep__calloc(1, sizeof *st);
  if (st == ORTEP_OK) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tensor: no memory for the storage record");
  st->id = atomic_fetch_add(&next_storage_id, 1);
  st->ep = ep;
  st->size = size;
  *out = st;
  return ORTEP_OK;
}

ortep_status ortep_tensor_create(ortep_ep *ep, ortep_dtype dtype, const ortep_shape *shape, bool lazy,
                                 ortep_tensor **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_create: out is NULL");
  *out = NULL;
  if (!ep)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_create: the EP is NULL; storage comes from an EP");
  size_t bytes;
  ortep_status s = describe(dtype, shape, &bytes);
  if (s != ORTEP_OK) return s;
  storage *st = NULL;
  if ((s = new_storage(ep, bytes, &st)) != ORTEP_OK) return s;
  if ((s = new_tensor(st, dtype, shape, 0, bytes, out)) != ORTEP_OK) {
    ortep__free(st);
    return s;
  }
  if (!lazy && (s = ortep_tensor_ensure_allocated(*out)) != ORTEP_OK) {
    ortep_tensor_release(*out);
    *out = NULL;
    return s;
  }
  return ORTEP_OK;
}

ortep_status ortep_tensor_from_borrowed(ortep_ep *ep, ortep_dtype dtype, const ortep_shape *shape,
                                        const ortep_buffer *buffer, ortep_tensor **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_from_borrowed: out is NULL");
  *out = NULL;
  if (!ep || !buffer)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_from_borrowed: EP and buffer are required");
  if (!ortep_buffer_is_borrowed(buffer))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_tensor_from_borrowed: the buffer is OWNED; wrap foreign memory with "
                       "ortep_buffer_wrap_borrowed (a tensor over an owned buffer would free it)");
  if (!ortep_device_equal(buffer->device, ortep_ep_device(ep))) {
    char a[32], b[32];
    return ortep__fail(ORTEP_E_WRONG_DEVICE, "ortep_tensor_from_borrowed: buffer on %s, EP '%s' on %s",
                       ortep_device_format(buffer->device, a, sizeof a), ortep_ep_name(ep),
                       ortep_device_format(ortep_ep_device(ep), b, sizeof b));
  }
  size_t bytes;
  ortep_status s = describe(dtype, shape, &bytes);
  if (s != ORTEP_OK) return s;
  if (bytes > buffer->size) {
    char b[160];
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_tensor_from_borrowed: %s %s needs %zu bytes, the buffer has %zu",
                       ortep_dtype_name(dtype), ortep_shape_format(shape, b, sizeof b), bytes, buffer->size);
  }
  storage *st = NULL;
  if ((s = new_storage(ep, buffer->size, &st)) != ORTEP_OK) return s;
  st->buf = *buffer;
  st->allocated = true;
  if ((s = new_tensor(st, dtype, shape, 0, bytes, out)) != ORTEP_OK) {
    ortep__free(st);
    return s;
  }
  return ORTEP_OK;
}

static ortep_status view_checked(const ortep_tensor *t, size_t offset, size_t size, ortep_dtype dtype,
                                 const ortep_shape *shape, ortep_tensor **out) {
  if (offset > t->size || size > t->size - offset)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "tensor view [%zu, %zu + %zu) lies outside the %zu-byte tensor it views; keep offset + size "
                       "<= %zu",
                       offset, offset, size, t->size, t->size);
  return new_tensor(t->st, dtype, shape, t->offset + offset, size, out);
}

ortep_status ortep_tensor_view(const ortep_tensor *t, size_t offset, size_t size, ortep_tensor **out) {
  if (!t || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_view: NULL argument");
  *out = NULL;
  size_t es = ortep_dtype_size(t->dtype);
  if (offset % es || size % es)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "tensor view at %zu of %zu bytes: both must be multiples of the %s %s size (%zu)", offset, size,
                       ortep_dtype_name(t->dtype), ortep_dtype_is_quantized(t->dtype) ? "block" : "element", es);
  ortep_shape s = {1, {(int64_t)(size / es * ortep_dtype_block(t->dtype))}};
  return view_checked(t, offset, size, t->dtype, &s, out);
}

ortep_status ortep_tensor_view_as(const ortep_tensor *t, size_t offset, ortep_dtype dtype, const ortep_shape *shape,
                                  ortep_tensor **out) {
  if (!t || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_view_as: NULL argument");
  *out = NULL;
  size_t bytes;
  ortep_status s = describe(dtype, shape, &bytes);
  if (s != ORTEP_OK) return s;
  return view_checked(t, offset, bytes, dtype, shape, out);
}

void ortep_tensor_release(ortep_tensor *t) {
  if (!t) return;
  storage *st = t->st;
  ortep__free(t);
  if (atomic_fetch_sub(&st->refs, 1) != 1) return;
  if (st->allocated) ortep_ep_deallocate(st->ep, &st->buf); /* borrowed: a no-op free */
  ortep__free(st);
}

ortep_status ortep_tensor_ensure_allocated(ortep_tensor *t) {
  if (!t) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_ensure_allocated: tensor is NULL");
  storage *st = t->st;
  if (st->allocated) return ORTEP_OK;
  ortep_status s = ortep_ep_allocate(st->ep, st->size, STORAGE_ALIGN, &st->buf);
  if (s != ORTEP_OK) return ortep__wrap(s, "allocating a %zu-byte tensor on %s", st->size, ortep_ep_name(st->ep));
  st->allocated = true;
  return ORTEP_OK;
}

bool ortep_tensor_is_allocated(const ortep_tensor *t) { return t && t->st->allocated; }
ortep_dtype ortep_tensor_dtype(const ortep_tensor *t) { return t->dtype; }
const ortep_shape *ortep_tensor_shape(const ortep_tensor *t) { return &t->shape; }
size_t ortep_tensor_numel(const ortep_tensor *t) {
  return t->size / ortep_dtype_size(t->dtype) * ortep_dtype_block(t->dtype);
}
size_t ortep_tensor_size(const ortep_tensor *t) { return t->size; }
size_t ortep_tensor_offset(const ortep_tensor *t) { return t->offset; }
uint64_t ortep_tensor_storage_id(const ortep_tensor *t) { return t->st->id; }
ortep_ep *ortep_tensor_ep(const ortep_tensor *t) { return t->st->ep; }
bool ortep_tensor_is_borrowed(const ortep_tensor *t) { return ortep_buffer_is_borrowed(&t->st->buf); }

void *ortep_tensor_data_ptr(const ortep_tensor *t) {
  return t && t->st->allocated ? (unsigned char *)t->st->buf.ptr + t->offset : NULL;
}

static ortep_status host_check(const ortep_tensor *t, const char *fn) {
  if (!t) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: tensor is NULL", fn);
  if (!t->st->allocated)
    return ortep__fail(ORTEP_E_NOT_ALLOCATED,
                       "%s: the tensor's storage is not allocated yet; call "
                       "ortep_tensor_ensure_allocated or ortep_tensor_copyin first",
                       fn);
  ortep_device d = ortep_ep_device(t->st->ep);
  if (!ortep_device_is_host_accessible(d)) {
    char b[32];
    return ortep__fail(ORTEP_E_NOT_HOST_ACCESSIBLE,
                       "%s: the tensor lives on %s, which the host cannot read directly; use ortep_tensor_copyout", fn,
                       ortep_device_format(d, b, sizeof b));
  }
  return ORTEP_OK;
}

static ortep_status type_check(const ortep_tensor *t, ortep_dtype want, const char *fn) {
  if (t->dtype != want)
    return ortep__fail(ORTEP_E_TYPE_MISMATCH, "%s: the tensor holds %s, not the %s asked for", fn,
                       ortep_dtype_name(t->dtype), ortep_dtype_name(want));
  return ORTEP_OK;
}

static ortep_status writable_check(const ortep_tensor *t, const char *fn) {
  if (t->st->buf.owner == ORTEP_BUFFER_BORROWED)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: the tensor borrows read-only memory (e.g. mmap'd weights); it cannot be written", fn);
  return ORTEP_OK;
}

ortep_status ortep_tensor_host_bytes(const ortep_tensor *t, const void **data, size_t *len) {
  ortep_status s = host_check(t, "ortep_tensor_host_bytes");
  if (s != ORTEP_OK) return s;
  *data = ortep_tensor_data_ptr(t);
  *len = t->size;
  return ORTEP_OK;
}

ortep_status ortep_tensor_host_bytes_mut(ortep_tensor *t, void **data, size_t *len) {
  ortep_status s = host_check(t, "ortep_tensor_host_bytes_mut");
  if (s == ORTEP_OK) s = writable_check(t, "ortep_tensor_host_bytes_mut");
  if (s != ORTEP_OK) return s;
  *data = ortep_tensor_data_ptr(t);
  *len = t->size;
  return ORTEP_OK;
}

ortep_status ortep_tensor_host_data(const ortep_tensor *t, ortep_dtype dtype, const void **data) {
  ortep_status s = host_check(t, "ortep_tensor_host_data");
  if (s == ORTEP_OK) s = type_check(t, dtype, "ortep_tensor_host_data");
  if (s != ORTEP_OK) return s;
  *data = ortep_tensor_data_ptr(t);
  return ORTEP_OK;
}

ortep_status ortep_tensor_host_data_mut(ortep_tensor *t, ortep_dtype dtype, void **data) {
  ortep_status s = host_check(t, "ortep_tensor_host_data_mut");
  if (s == ORTEP_OK) s = type_check(t, dtype, "ortep_tensor_host_data_mut");
  if (s == ORTEP_OK) s = writable_check(t, "ortep_tensor_host_data_mut");
  if (s != ORTEP_OK) return s;
  *data = ortep_tensor_data_ptr(t);
  return ORTEP_OK;
}

ortep_status ortep_tensor_item(const ortep_tensor *t, ortep_dtype dtype, void *out) {
  ortep_status s = host_check(t, "ortep_tensor_item");
  if (s != ORTEP_OK) return s;
  size_t n = ortep_tensor_numel(t);
  if (n != 1)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_tensor_item: item needs exactly one element; this tensor has %zu (use "
                       "ortep_tensor_host_data for more)",
                       n);
  if ((s = type_check(t, dtype, "ortep_tensor_item")) != ORTEP_OK) return s;
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_item: out is NULL");
  memcpy(out, ortep_tensor_data_ptr(t), t->size);
  return ORTEP_OK;
}

ortep_status ortep_tensor_copyin(ortep_tensor *t, const void *src, size_t len) {
  if (!t || (len && !src)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_copyin: NULL argument");
  if (len != t->size)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_tensor_copyin: %zu bytes given for a %zu-byte tensor; sizes "
                       "must match",
                       len, t->size);
  ortep_status s = ortep_tensor_ensure_allocated(t);
  if (s == ORTEP_OK) s = writable_check(t, "ortep_tensor_copyin");
  if (s != ORTEP_OK) return s;
  return ortep_ep_copy_from_host_at(t->st->ep, src, len, &t->st->buf, t->offset);
}

ortep_status ortep_tensor_copyout(const ortep_tensor *t, void *dst, size_t len) {
  if (!t || (len && !dst)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_copyout: NULL argument");
  if (!t->st->allocated)
    return ortep__fail(ORTEP_E_NOT_ALLOCATED, "ortep_tensor_copyout: the tensor's storage is not allocated yet");
  if (len != t->size)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_tensor_copyout: a %zu-byte destination for a %zu-byte tensor; sizes must match", len,
                       t->size);
  return ortep_ep_copy_to_host_at(t->st->ep, &t->st->buf, t->offset, dst, len);
}

/* A buffer naming exactly a tensor's view, with its storage's ownership kind
 * (never freed: it is a temporary for a copy). */
static ortep_buffer view_buffer(const ortep_tensor *t) {
  ortep_buffer b = t->st->buf;
  b.ptr = (unsigned char *)b.ptr + t->offset;
  b.size = t->size;
  b.align = 1;
  return b;
}

ortep_status ortep_tensor_copy_from(ortep_tensor *dst, const ortep_tensor *src) {
  if (!dst || !src) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_copy_from: NULL argument");
  if (dst->size != src->size)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_copy_from: %zu bytes into %zu bytes; sizes must match",
                       src->size, dst->size);
  if (!src->st->allocated)
    return ortep__fail(ORTEP_E_NOT_ALLOCATED, "ortep_tensor_copy_from: the source is not allocated");
  ortep_status s = ortep_tensor_ensure_allocated(dst);
  if (s == ORTEP_OK) s = writable_check(dst, "ortep_tensor_copy_from");
  if (s != ORTEP_OK) return s;
  ortep_buffer sb = view_buffer(src), db = view_buffer(dst);
  ortep_ep *se = src->st->ep, *de = dst->st->ep;
  if (se == de) return ortep_ep_copy(de, &sb, &db, src->size);
  if (ortep_device_is_host_accessible(ortep_ep_device(se))) return ortep_ep_copy_from_host(de, sb.ptr, sb.size, &db);
  if (ortep_device_is_host_accessible(ortep_ep_device(de))) return ortep_ep_copy_to_host(se, &sb, db.ptr, db.size);
  /* device to another device: stage through host memory */
  void *tmp = ortep__malloc(src->size);
  if (!tmp)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_tensor_copy_from: no host memory to stage %zu bytes", src->size);
  s = ortep_ep_copy_to_host(se, &sb, tmp, sb.size);
  if (s == ORTEP_OK) s = ortep_ep_copy_from_host(de, tmp, db.size, &db);
  ortep__free(tmp);
  return s;
}

ortep_status ortep_tensor_synchronize(const ortep_tensor *t) {
  if (!t) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tensor_synchronize: tensor is NULL");
  return ortep_ep_sync(t->st->ep);
}
