/*
 * arena.h: carving memory for tensors from big blocks.
 *
 * A bump arena takes chunks from a backing allocator and carves aligned
 * regions from them; mark / rewind / reset give the memory back in bulk
 * (per-step scratch) while keeping the chunks, so a steady-state step makes
 * no call to the backing allocator. A *planned* arena is one block of a size
 * the memory planner computed, in which every tensor lives at a fixed offset:
 * addresses never change between steps, so a captured device graph stays
 * valid.
 *
 * Debug builds (ortep_debug_checks_enabled) fill newly obtained host memory
 * with 0xAA and rewound or reset host memory with 0x55, so reads of
 * uninitialised or released bytes show at once. Device memory is never
 * touched from the host. An arena is not thread-safe: use one per thread or
 * lock around it.
 */
#ifndef ORTEP_ARENA_H
#define ORTEP_ARENA_H

#include "ortep/allocator.h"

ORTEP_BEGIN_DECLS

#define ORTEP_ARENA_DEBUG_FILL_NEW   0xAA
#define ORTEP_ARENA_DEBUG_FILL_FREED 0x55

typedef struct ortep_arena ortep_arena;

typedef struct ortep_arena_options {
  size_t chunk_bytes; /* default chunk size; 0 -> 1 MiB. Larger requests get a chunk of their own size. */
  size_t chunk_align; /* alignment of each chunk; 0 -> 256 */
  size_t max_bytes;   /* cap on reserved bytes; 0 -> no cap */
} ortep_arena_options;

typedef struct ortep_arena_stats {
  size_t reserved;   /* bytes held from the backing allocator */
  size_t used;       /* bytes carved now, alignment padding included */
  size_t high_water; /* the most ever used at once */
  size_t chunks;     /* chunks held */
  uint64_t carves;   /* successful carves since creation */
} ortep_arena_stats;

/* A position to rewind to. */
typedef struct ortep_arena_mark {
  size_t chunk;
  size_t offset;
  size_t used;
} ortep_arena_mark;

/* A growing bump arena over backing (which must outlive it). opts may be NULL. */
ORTEP_API ortep_status ortep_arena_create(ortep_allocator *backing, const ortep_arena_options *opts, ortep_arena **out);
/* A planned arena: one block of exactly bytes (aligned to align) taken now. It
 * never grows; carve from it with ortep_arena_at, or bump-carve. */
ORTEP_API ortep_status ortep_arena_create_planned(ortep_allocator *backing, size_t bytes, size_t align,
                                                  ortep_arena **out);
/* Releases every chunk to the backing allocator and frees the arena. NULL is a no-op. */
ORTEP_API void ortep_arena_destroy(ortep_arena *arena);

/* Carve bytes aligned to align (a power of two). Grows by a chunk when the
 * current one is full (bump arenas only). On failure nothing changes. */
ORTEP_API ortep_status ortep_arena_alloc(ortep_arena *arena, size_t bytes, size_t align, void **out);
/* The address of [offset, offset + bytes) in a planned arena's block. */
ORTEP_API ortep_status ortep_arena_at(ortep_arena *arena, size_t offset, size_t bytes, void **out);
/* A planned arena's block (NULL for a bump arena) and its size. */
ORTEP_API void *ortep_arena_base(const ortep_arena *arena);
ORTEP_API size_t ortep_arena_capacity(const ortep_arena *arena);

ORTEP_API ortep_arena_mark ortep_arena_get_mark(const ortep_arena *arena);
/* Give back everything carved after mark. A mark from after the current
 * position (or from another arena's history) is refused. */
ORTEP_API ortep_status ortep_arena_rewind(ortep_arena *arena, ortep_arena_mark mark);
/* Give back everything carved; chunks are kept for reuse. */
ORTEP_API void ortep_arena_reset(ortep_arena *arena);
/* Release chunks that hold nothing carved. Returns the bytes released. */
ORTEP_API size_t ortep_arena_trim(ortep_arena *arena);

ORTEP_API void ortep_arena_get_stats(const ortep_arena *arena, ortep_arena_stats *out);

ORTEP_END_DECLS

#endif
