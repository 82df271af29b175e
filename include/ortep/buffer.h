/*
 * buffer.h: the device buffer handle. A value naming one
 * region of memory on one device: base pointer, size, alignment, device, and
 * who owns it.
 *
 *   OWNED         the EP (or allocator) that made it frees it exactly once;
 *                 it is produced by an allocate and consumed by a deallocate.
 *   BORROWED      a read-only alias of memory owned elsewhere (an mmap'd
 *                 weight file): zero-copy, never freed through this handle,
 *                 and it hands out no writable pointer.
 *   BORROWED_MUT  an exclusive writable alias of memory owned elsewhere (a
 *                 caller's output binding): never freed through this handle.
 *
 * The handle has no destructor: dropping an OWNED buffer without passing it
 * to its deallocate leaks, but it can never double-free. Handles are plain
 * values, so one may be moved to another thread and freed there. Treat the
 * fields as private: use the accessors.
 */
#ifndef ORTEP_BUFFER_H
#define ORTEP_BUFFER_H

#include "ortep/device.h"
#include "ortep/status.h"

ORTEP_BEGIN_DECLS

typedef enum ortep_buffer_owner {
  ORTEP_BUFFER_OWNED = 0,
  ORTEP_BUFFER_BORROWED = 1,
  ORTEP_BUFFER_BORROWED_MUT = 2,
} ortep_buffer_owner;

typedef struct ortep_buffer {
  void *ptr;
  size_t size;
  size_t align;
  ortep_device device;
  ortep_buffer_owner owner;
} ortep_buffer;

/* Wrap an allocation this caller owns (the owning EP, usually). ptr must be
 * non-null, at least size bytes, aligned to align (a power of two). On
 * failure *out is zeroed and the status says which requirement failed. */
ORTEP_API ortep_status ortep_buffer_wrap_owned(void *ptr, ortep_device device, size_t size, size_t align,
                                               ortep_buffer *out);
/* Wrap foreign read-only memory (e.g. an mmap) that outlives the handle. */
ORTEP_API ortep_status ortep_buffer_wrap_borrowed(const void *ptr, ortep_device device, size_t size, size_t align,
                                                  ortep_buffer *out);
/* Wrap foreign writable memory this caller has exclusive use of. A null
 * pointer is refused (ORTEP_E_INVALID_ARGUMENT). */
ORTEP_API ortep_status ortep_buffer_wrap_borrowed_mut(void *ptr, ortep_device device, size_t size, size_t align,
                                                      ortep_buffer *out);

/* True for BORROWED and BORROWED_MUT: such a handle must never be freed. */
ORTEP_API bool ortep_buffer_is_borrowed(const ortep_buffer *buffer);
ORTEP_API ortep_device ortep_buffer_device(const ortep_buffer *buffer);
ORTEP_API size_t ortep_buffer_size(const ortep_buffer *buffer);
ORTEP_API bool ortep_buffer_is_empty(const ortep_buffer *buffer);
ORTEP_API size_t ortep_buffer_alignment(const ortep_buffer *buffer);
/* The base address. Dereferencing it is valid only on host-accessible
 * devices (ortep_device_is_host_accessible). */
ORTEP_API const void *ortep_buffer_data(const ortep_buffer *buffer);
/* A writable base address: NULL for a read-only BORROWED handle. */
ORTEP_API void *ortep_buffer_data_mut(ortep_buffer *buffer);
/* Consume the handle: returns its pointer and zeroes *buffer. For an OWNED
 * buffer the caller takes over the single-free obligation; a borrowed pointer
 * must not be freed (check ortep_buffer_is_borrowed first). */
ORTEP_API void *ortep_buffer_release(ortep_buffer *buffer);

/* Validates an allocation request (bytes, align) the way every allocator and
 * EP does before allocating: align a power of two, the rounded size within
 * size_t. ORTEP_E_INVALID_ARGUMENT names `who` and what was wrong. */
ORTEP_API ortep_status ortep_allocation_request_check(const char *who, size_t bytes, size_t align);

ORTEP_END_DECLS

#endif
