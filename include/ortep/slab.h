/*
 * slab.h: fixed-size object caches (Bonwick-style). A cache hands out objects
 * of one size and alignment from pages taken from a backing allocator, with
 * O(1) alloc and free. The free list lives outside the objects, so a cache can
 * manage device memory (e.g. KV-cache blocks) it never dereferences. Pages are
 * kept until ortep_slab_shrink or destroy. Thread-safe.
 *
 * Debug builds check every free: a pointer that is not an object of this
 * cache (foreign, misaligned) gives ORTEP_E_INVALID_POINTER, and freeing an
 * object twice gives ORTEP_E_INVALID_POINTER naming the double free. Release
 * builds skip the checks on the hot path.
 */
#ifndef ORTEP_SLAB_H
#define ORTEP_SLAB_H

#include "ortep/allocator.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_slab ortep_slab;

typedef struct ortep_slab_stats {
  size_t object_size; /* the stride between objects (size rounded up to align) */
  size_t pages;
  size_t page_bytes; /* bytes per page */
  size_t capacity;   /* objects the pages hold */
  size_t live;       /* objects handed out now */
  size_t peak_live;
  uint64_t allocs;
  uint64_t frees;
} ortep_slab_stats;

/* object_size > 0; align a power of two; objects_per_page > 0 (0 -> enough
 * for a 64 KiB page, at least 1). backing must outlive the cache. */
ORTEP_API ortep_status ortep_slab_create(ortep_allocator *backing, size_t object_size, size_t align,
                                         size_t objects_per_page, ortep_slab **out);
/* Releases every page. Live objects become invalid. NULL is a no-op. */
ORTEP_API void ortep_slab_destroy(ortep_slab *slab);

ORTEP_API ortep_status ortep_slab_alloc(ortep_slab *slab, void **out);
ORTEP_API ortep_status ortep_slab_free(ortep_slab *slab, void *object);
/* Releases pages with no live object. Returns the pages released. */
ORTEP_API size_t ortep_slab_shrink(ortep_slab *slab);

ORTEP_API void ortep_slab_get_stats(ortep_slab *slab, ortep_slab_stats *out);

ORTEP_END_DECLS

#endif
