/*
 * buffer.c: the device buffer handle. Construction validates what the contract
 * leaves to debug assertions (non-null, power-of-two alignment) and reports
 * it as a status: nothing in C stops a caller from handing over a bad pointer,
 * so the handle's rules are checked where they can be.
 */
#include <string.h>

#include "internal.h"

static ortep_status make(void *ptr, ortep_device device, size_t size, size_t align, ortep_buffer_owner owner,
                         const char *who, ortep_buffer *out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: out is NULL; pass the address of an ortep_buffer", who);
  memset(out, 0, sizeof *out);
  if (!ptr)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: the pointer is NULL; a buffer must name real memory (allocate it first)", who);
  if (!ortep__is_pow2(align))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: alignment %zu is not a power of two; use 1, 2, 4, ... (e.g. 64)",
                       who, align);
  if (((uintptr_t)ptr & (align - 1)) != 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: pointer %p is not aligned to the stated %zu bytes", who, ptr,
                       align);
  *out = (ortep_buffer){ptr, size, align, device, owner};
  return ORTEP_OK;
}

ortep_status ortep_buffer_wrap_owned(void *ptr, ortep_device device, size_t size, size_t align, ortep_buffer *out) {
  return make(ptr, device, size, align, ORTEP_BUFFER_OWNED, "ortep_buffer_wrap_owned", out);
}

ortep_status ortep_buffer_wrap_borrowed(const void *ptr, ortep_device device, size_t size, size_t align,
                                        ortep_buffer *out) {
  /* The const is kept by ortep_buffer_data_mut refusing to hand out this pointer. */
  return make((void *)(uintptr_t)ptr, device, size, align, ORTEP_BUFFER_BORROWED, "ortep_buffer_wrap_borrowed", out);
}

ortep_status ortep_buffer_wrap_borrowed_mut(void *ptr, ortep_device device, size_t size, size_t align,
                                            ortep_buffer *out) {
  return make(ptr, device, size, align, ORTEP_BUFFER_BORROWED_MUT, "ortep_buffer_wrap_borrowed_mut", out);
}

bool ortep_buffer_is_borrowed(const ortep_buffer *b) { return b && b->owner != ORTEP_BUFFER_OWNED; }
ortep_device ortep_buffer_device(const ortep_buffer *b) { return b ? b->device : ortep_device_cpu(); }
size_t ortep_buffer_size(const ortep_buffer *b) { return b ? b->size : 0; }
bool ortep_buffer_is_empty(const ortep_buffer *b) { return !b || b->size == 0; }
size_t ortep_buffer_alignment(const ortep_buffer *b) { return b ? b->align : 0; }
const void *ortep_buffer_data(const ortep_buffer *b) { return b ? b->ptr : NULL; }

void *ortep_buffer_data_mut(ortep_buffer *b) {
  if (!b || b->owner == ORTEP_BUFFER_BORROWED) return NULL;
  return b->ptr;
}

void *ortep_buffer_release(ortep_buffer *b) {
  if (!b) return NULL;
  void *p = b->ptr;
  memset(b, 0, sizeof *b);
  return p;
}

/* Every allocation request, from any layer, is validated by this one rule. */
ortep_status ortep_allocation_request_check(const char *who, size_t bytes, size_t align) {
  if (!ortep__is_pow2(align))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: alignment %zu for a %zu-byte request is not a power of two; the alignment must be a "
                       "power of two (1, 2, 4, ..., e.g. 64)",
                       who, align, bytes);
  size_t rounded;
  if (!ortep__align_up(bytes ? bytes : 1, align, &rounded))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: %zu bytes aligned to %zu overflows the address space; the rounded size must fit in "
                       "size_t",
                       who, bytes, align);
  return ORTEP_OK;
}
