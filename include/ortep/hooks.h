/*
 * hooks.h: the library's own small-object allocations (object headers, lists,
 * messages) go through four replaceable functions, like libuv's
 * uv_replace_allocator. They default to mimalloc (or the system allocator in
 * an ORTEP_SYSTEM_ALLOCATOR build). Tests install a failing hook to prove
 * every such allocation can fail cleanly. Tensor and arena memory does not go
 * through here: it comes from an ortep_allocator.
 */
#ifndef ORTEP_HOOKS_H
#define ORTEP_HOOKS_H

#include "ortep/status.h"

ORTEP_BEGIN_DECLS

typedef void *(*ortep_malloc_fn)(size_t size);
typedef void *(*ortep_calloc_fn)(size_t count, size_t size);
typedef void *(*ortep_realloc_fn)(void *ptr, size_t size);
typedef void (*ortep_free_fn)(void *ptr);

/* Replace all four together, before any ortep object exists or after all are
 * gone (memory from one set must be freed by the same set). All four must be
 * non-NULL; ortep_restore_allocator goes back to the defaults. */
ORTEP_API ortep_status ortep_replace_allocator(ortep_malloc_fn m, ortep_calloc_fn c, ortep_realloc_fn r,
                                               ortep_free_fn f);
ORTEP_API void ortep_restore_allocator(void);

ORTEP_END_DECLS

#endif
