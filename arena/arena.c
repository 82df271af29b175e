/*
 * arena.c: bump carving over chunks from a backing allocator.
 *
 * Chunks form an array; chunk `cur` is being carved at `offset`, chunks
 * before it are spent, chunks after it are empty and kept for reuse. So a
 * mark is just (cur, offset, used) and rewinding is three stores: no chunk is
 * released until trim or destroy, and a decode loop that resets its scratch
 * arena every step never calls the backing allocator after the first step.
 * Because the chunks after `cur` are all empty, their order is free: growth
 * first looks for an empty chunk big enough and swaps it in next.
 *
 * A planned arena is the same object with exactly one chunk, sized by the
 * memory planner, that never grows; tensors sit at fixed offsets in it.
 */
#include <string.h>

#include "internal.h"

/* AddressSanitizer: released arena ranges are poisoned and carving
 * unpoisons, so a use of an arena block after its rewind or reset is a report
 * rather than a silent write into someone else's tensor. Host arenas only
 * (device memory is not the sanitizer's), and never planned ones, whose
 * tensors live at fixed offsets for the arena's whole life. */
#if defined(__SANITIZE_ADDRESS__)
#define ORTEP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ORTEP_ASAN 1
#endif
#endif
#if defined(ORTEP_ASAN)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(a, p, n)                                            \
  do {                                                                   \
    if ((a)->host && !(a)->planned) ASAN_POISON_MEMORY_REGION((p), (n)); \
  } while (0)
#define ARENA_UNPOISON(a, p, n)                                            \
  do {                                                                     \
    if ((a)->host && !(a)->planned) ASAN_UNPOISON_MEMORY_REGION((p), (n)); \
  } while (0)
#else
#define ARENA_POISON(a, p, n)   ((void)0)
#define ARENA_UNPOISON(a, p, n) ((void)0)
#endif

typedef struct chunk {
  unsigned char *base;
  size_t size;
  size_t align;
} chunk;

struct ortep_arena {
  ortep_allocator *backing;
  bool planned;
  bool host; /* host code may fill it (debug fill/poison) */
  size_t chunk_bytes, chunk_align, max_bytes;
  chunk *chunks;
  size_t nchunks, chunks_cap;
  size_t cur, offset;
  /* Bytes spent in chunks before cur (their tails included); used is
   * spent + offset, derived rather than stored so a carve updates one field
   * on its dependency chain. */
  size_t spent;
  size_t high_water, reserved;
  uint64_t carves;
};

#define DEFAULT_CHUNK_BYTES ((size_t)1 << 20)
#define DEFAULT_CHUNK_ALIGN ((size_t)256)

static void debug_fill(const ortep_arena *a, unsigned char *p, size_t n, int byte) {
#if defined(ORTEP_DEBUG)
  if (a->host && n) memset(p, byte, n);
#else
  (void)a, (void)p, (void)n, (void)byte;
#endif
}

static ortep_status arena_new(ortep_allocator *backing, ortep_arena **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_arena_create: out is NULL");
  *out = NULL;
  if (!backing)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_arena_create: backing allocator is NULL; pass one such as ortep_host_allocator_create's");
  ortep_arena *a = ortep__calloc(1, sizeof *a);
  if (!a) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_arena_create: no memory for the arena object");
  a->backing = backing;
  a->host = ortep__allocator_is_host(backing);
  *out = a;
  return ORTEP_OK;
}

/* Take a chunk of `size` bytes from the backing allocator and insert it at
 * index `at` (which must be > cur or the array must be empty). On failure
 * nothing observable changes. */
static ortep_status add_chunk(ortep_arena *a, size_t size, size_t align, size_t at) {
  if (a->max_bytes && (size > a->max_bytes || a->reserved > a->max_bytes - size)) {
    char b1[32], b2[32], b3[32];
    return ortep__fail(ORTEP_E_BUDGET_EXCEEDED,
                       "arena: growing by %s would reserve more than its max_bytes %s (%s reserved); raise "
                       "ortep_arena_options.max_bytes or reset the arena more often",
                       ortep__format_bytes(size, b1, sizeof b1), ortep__format_bytes(a->max_bytes, b2, sizeof b2),
                       ortep__format_bytes(a->reserved, b3, sizeof b3));
  }
  if (!ORTEP__GROW(a->chunks, a->chunks_cap, a->nchunks + 1))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "arena: no memory to track another chunk");
  void *p;
  ortep_status st = ortep_allocator_allocate(a->backing, size, align, &p);
  if (st != ORTEP_OK) return ortep__wrap(st, "arena: growing by %zu bytes", size);
  memmove(&a->chunks[at + 1], &a->chunks[at], (a->nchunks - at) * sizeof *a->chunks);
  a->chunks[at] = (chunk){p, size, align};
  a->nchunks++;
  a->reserved += size;
  debug_fill(a, p, size, ORTEP_ARENA_DEBUG_FILL_NEW);
  ARENA_POISON(a, p, size); /* nothing is carved from it yet */
  return ORTEP_OK;
}

ortep_status ortep_arena_create(ortep_allocator *backing, const ortep_arena_options *opts, ortep_arena **out) {
  ortep_arena_options o = opts ? *opts : (ortep_arena_options){0};
  if (o.chunk_align && !ortep__is_pow2(o.chunk_align))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_arena_create: chunk_align %zu is not a power of two; use e.g. 256 or 0 for the default",
                       o.chunk_align);
  ortep_status st = arena_new(backing, out);
  if (st != ORTEP_OK) return st;
  (*out)->chunk_bytes = o.chunk_bytes ? o.chunk_bytes : DEFAULT_CHUNK_BYTES;
  (*out)->chunk_align = o.chunk_align ? o.chunk_align : DEFAULT_CHUNK_ALIGN;
  (*out)->max_bytes = o.max_bytes;
  return ORTEP_OK;
}

ortep_status ortep_arena_create_planned(ortep_allocator *backing, size_t bytes, size_t align, ortep_arena **out) {
  ortep_status st = ortep_allocation_request_check("ortep_arena_create_planned", bytes, align);
  if (st != ORTEP_OK) {
    if (out) *out = NULL;
    return st;
  }
  st = arena_new(backing, out);
  if (st != ORTEP_OK) return st;
  ortep_arena *a = *out;
  a->planned = true;
  a->chunk_bytes = bytes;
  a->chunk_align = align;
  st = add_chunk(a, bytes, align, 0);
  if (st != ORTEP_OK) {
    ortep_arena_destroy(a);
    *out = NULL;
    return ortep__wrap(st, "ortep_arena_create_planned");
  }
  return ORTEP_OK;
}

void ortep_arena_destroy(ortep_arena *a) {
  if (!a) return;
  for (size_t i = 0; i < a->nchunks; i++) {
    ARENA_UNPOISON(a, a->chunks[i].base, a->chunks[i].size); /* back to its owner as it came */
    ortep_allocator_deallocate(a->backing, a->chunks[i].base, a->chunks[i].size, a->chunks[i].align);
  }
  ortep__free(a->chunks);
  ortep__free(a);
}

/* Bytes of padding that align chunk c's address at off up to align. */
static size_t pad_for(const chunk *c, size_t off, size_t align) {
  uintptr_t addr = (uintptr_t)c->base + off;
  return (size_t)((align - (addr & (align - 1))) & (align - 1));
}

static bool fits(const chunk *c, size_t off, size_t bytes, size_t align, size_t *pad) {
  if (off > c->size) return false;
  *pad = pad_for(c, off, align);
  return *pad <= c->size - off && bytes <= c->size - off - *pad;
}

static inline void carve(ortep_arena *a, size_t pad, size_t bytes, void **out) {
  /* fits() just said so: on the ~3 ns fast path a Release check would cost
   * a tenth of it, so this one is Debug-only */
  ortep__assert_expensive(a->offset + pad + bytes <= a->chunks[a->cur].size);
  *out = a->chunks[a->cur].base + a->offset + pad;
  ARENA_UNPOISON(a, *out, bytes);
  a->offset += pad + bytes;
  size_t used = a->spent + a->offset;
  ortep__assert_expensive(used <= a->reserved); /* spent counts only whole chunks before cur */
  if (used > a->high_water) a->high_water = used;
  a->carves++;
}

ortep_status ortep_arena_alloc(ortep_arena *a, size_t bytes, size_t align, void **out) {
  if (!a || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_arena_alloc: %s is NULL", a ? "out" : "arena");
  /* The fast path: a valid request that fits the current chunk. Anything
   * else (bad request, growth) takes the slow path below. */
  size_t pad;
  if (ortep__is_pow2(align) && bytes <= SIZE_MAX / 2 && a->nchunks &&
      fits(&a->chunks[a->cur], a->offset, bytes, align, &pad)) {
    carve(a, pad, bytes, out);
    return ORTEP_OK;
  }
  *out = NULL;
  ortep_status st = ortep_allocation_request_check("ortep_arena_alloc", bytes, align);
  if (st != ORTEP_OK) return st;
  if (a->planned) {
    char b1[32], b2[32];
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "planned arena: %zu bytes (align %zu) do not fit: %s of %s used; a planned arena never "
                       "grows, so plan it with every tensor it must hold",
                       bytes, align, ortep__format_bytes(a->spent + a->offset, b1, sizeof b1),
                       ortep__format_bytes(a->chunks[0].size, b2, sizeof b2));
  }
  /* Move on: the first empty chunk after cur that fits, else a new one. */
  size_t next = a->nchunks ? a->cur + 1 : 0;
  for (size_t j = next; j < a->nchunks; j++) {
    if (fits(&a->chunks[j], 0, bytes, align, &pad)) {
      chunk t = a->chunks[j];
      a->chunks[j] = a->chunks[next];
      a->chunks[next] = t;
      goto advance;
    }
  }
  {
    size_t calign = align > a->chunk_align ? align : a->chunk_align;
    size_t size = a->chunk_bytes;
    if (bytes > size) {
      if (!ortep__align_up(bytes, a->chunk_align, &size))
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_arena_alloc: %zu bytes overflows", bytes);
    }
    st = add_chunk(a, size, calign, next);
    if (st != ORTEP_OK) return st;
  }
advance:
  /* The unused tail of the chunk we leave counts as used until a rewind. */
  if (next > 0) a->spent += a->chunks[a->cur].size;
  a->cur = next;
  a->offset = 0;
  fits(&a->chunks[a->cur], 0, bytes, align, &pad);
  carve(a, pad, bytes, out);
  return ORTEP_OK;
}

ortep_status ortep_arena_at(ortep_arena *a, size_t offset, size_t bytes, void **out) {
  if (!a || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_arena_at: %s is NULL", a ? "out" : "arena");
  *out = NULL;
  if (!a->planned)
    return ortep__fail(ORTEP_E_STATE,
                       "ortep_arena_at: the arena is not planned; fixed offsets need ortep_arena_create_planned");
  size_t cap = a->chunks[0].size;
  if (offset > cap || bytes > cap - offset)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "ortep_arena_at: range [%zu, %zu + %zu) lies outside the planned block of %zu bytes; "
                       "re-plan with this tensor included",
                       offset, offset, bytes, cap);
  *out = a->chunks[0].base + offset;
  return ORTEP_OK;
}

void *ortep_arena_base(const ortep_arena *a) { return (a && a->planned) ? a->chunks[0].base : NULL; }
size_t ortep_arena_capacity(const ortep_arena *a) { return a ? a->reserved : 0; }

ortep_arena_mark ortep_arena_get_mark(const ortep_arena *a) {
  return a ? (ortep_arena_mark){a->cur, a->offset, a->spent + a->offset} : (ortep_arena_mark){0, 0, 0};
}

/* Everything carved from (chunk_index, offset) up to the current position
 * is released: filled with the freed pattern in debug builds, poisoned for
 * AddressSanitizer. */
static void poison_from(ortep_arena *a, size_t chunk_index, size_t offset) {
#if defined(ORTEP_DEBUG) || defined(ORTEP_ASAN)
  if (!a->host || a->nchunks == 0) return;
  for (size_t i = chunk_index; i <= a->cur && i < a->nchunks; i++) {
    size_t from = i == chunk_index ? offset : 0;
    size_t to = i == a->cur ? a->offset : a->chunks[i].size;
    if (to > from) {
      ARENA_UNPOISON(a, a->chunks[i].base + from, to - from); /* alignment padding in it was never carved */
      debug_fill(a, a->chunks[i].base + from, to - from, ORTEP_ARENA_DEBUG_FILL_FREED);
      ARENA_POISON(a, a->chunks[i].base + from, to - from);
    }
  }
#else
  (void)a, (void)chunk_index, (void)offset;
#endif
}

ortep_status ortep_arena_rewind(ortep_arena *a, ortep_arena_mark m) {
  if (!a) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_arena_rewind: arena is NULL");
  bool ahead = m.chunk > a->cur || (m.chunk == a->cur && m.offset > a->offset) || m.used > a->spent + a->offset;
  bool bad = (a->nchunks == 0 && (m.chunk || m.offset || m.used)) ||
             (a->nchunks && (m.chunk >= a->nchunks || m.offset > a->chunks[m.chunk].size || m.used < m.offset));
  if (ahead || bad)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_arena_rewind: mark (chunk %zu, offset %zu) is %s the arena's position (chunk %zu, "
                       "offset %zu); rewind only to a mark taken earlier from this arena and not already rewound past",
                       m.chunk, m.offset, ahead ? "ahead of" : "not valid for", a->cur, a->offset);
  poison_from(a, m.chunk, m.offset);
  a->cur = m.chunk;
  a->offset = m.offset;
  a->spent = m.used - m.offset;
  ortep__assert(a->nchunks == 0 || a->offset <= a->chunks[a->cur].size);
  return ORTEP_OK;
}

void ortep_arena_reset(ortep_arena *a) {
  if (!a) return;
  poison_from(a, 0, 0);
  a->cur = 0;
  a->offset = 0;
  a->spent = 0;
}

size_t ortep_arena_trim(ortep_arena *a) {
  if (!a || a->planned) return 0;
  size_t keep = (a->spent + a->offset == 0) ? 0 : a->cur + 1;
  size_t released = 0;
  for (size_t i = keep; i < a->nchunks; i++) {
    ARENA_UNPOISON(a, a->chunks[i].base, a->chunks[i].size);
    ortep_allocator_deallocate(a->backing, a->chunks[i].base, a->chunks[i].size, a->chunks[i].align);
    released += a->chunks[i].size;
  }
  a->reserved -= released;
  a->nchunks = keep;
  if (keep == 0) a->cur = a->offset = 0;
  return released;
}

void ortep_arena_get_stats(const ortep_arena *a, ortep_arena_stats *out) {
  if (!out) return;
  if (!a) {
    *out = (ortep_arena_stats){0};
    return;
  }
  *out = (ortep_arena_stats){a->reserved, a->spent + a->offset, a->high_water, a->nchunks, a->carves};
}
