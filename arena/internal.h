/*
 * internal.h: what the memory layer's files share: the lock-free counters
 * used by the governor (per tier) and by each allocator (per allocator).
 */
#ifndef ORTEP_ARENA_INTERNAL_H
#define ORTEP_ARENA_INTERNAL_H

#include <stdatomic.h>

#include "runtime/internal.h"
/* the memory layer's public headers; nothing of kernels/ or graph/ */
#include "ortep/allocator.h"
#include "ortep/arena.h"
#include "ortep/governor.h"
#include "ortep/planner.h"
#include "ortep/slab.h"

typedef struct ortep__counters {
  _Atomic uint64_t current;
  _Atomic uint64_t peak;
  _Atomic uint64_t allocated;
  _Atomic uint64_t freed;
  _Atomic uint64_t allocations;
  _Atomic uint64_t frees;
} ortep__counters;

static inline void ortep__counters_raise_peak(ortep__counters *c, uint64_t now) {
  uint64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (now > peak &&
         !atomic_compare_exchange_weak_explicit(&c->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {}
}

/* Record an allocation whose bytes are already added to current (the
 * governor adds them with a budget check first). */
static inline void ortep__counters_note_alloc(ortep__counters *c, uint64_t bytes, uint64_t now) {
  ortep__counters_raise_peak(c, now);
  atomic_fetch_add_explicit(&c->allocated, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->allocations, 1, memory_order_relaxed);
}

static inline void ortep__counters_add(ortep__counters *c, uint64_t bytes) {
  uint64_t now = atomic_fetch_add_explicit(&c->current, bytes, memory_order_relaxed) + bytes;
  ortep__counters_note_alloc(c, bytes, now);
}

static inline void ortep__counters_sub(ortep__counters *c, uint64_t bytes) {
  atomic_fetch_sub_explicit(&c->current, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->freed, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->frees, 1, memory_order_relaxed);
}

static inline void ortep__counters_read(const ortep__counters *c, ortep_mem_stats *out) {
  out->current_bytes = atomic_load_explicit(&c->current, memory_order_relaxed);
  out->peak_bytes = atomic_load_explicit(&c->peak, memory_order_relaxed);
  out->allocated_bytes = atomic_load_explicit(&c->allocated, memory_order_relaxed);
  out->freed_bytes = atomic_load_explicit(&c->freed, memory_order_relaxed);
  out->allocations = atomic_load_explicit(&c->allocations, memory_order_relaxed);
  out->frees = atomic_load_explicit(&c->frees, memory_order_relaxed);
}

/* Which shared prefix each shared granule of a reservation maps, kept the
 * same way by the host and the CUDA virtual allocators
 * (virtual_allocator.c, cuda_vmm.c): one range per map_prefix call, newest
 * first. A shared granule belongs to the newest range holding it: a newer
 * mapping first gave back whatever the granules it covers held. */
typedef struct ortep__prefix_range {
  ortep_shared_prefix *prefix;
  size_t first, n; /* granules [first, first + n) of the reservation, from the prefix's first n */
  size_t live;     /* of them, those still mapped to it */
  struct ortep__prefix_range *next;
} ortep__prefix_range;

/* Shared granule g is unmapped: its range loses it. Returns the range's
 * prefix when g was the last granule it held (the range is gone; the
 * caller drops the range's reference), NULL otherwise. */
static inline ortep_shared_prefix *ortep__prefix_range_drop(ortep__prefix_range **head, size_t g) {
  for (ortep__prefix_range **at = head; *at; at = &(*at)->next) {
    ortep__prefix_range *m = *at;
    if (g < m->first || g - m->first >= m->n) continue;
    if (--m->live) return NULL;
    ortep_shared_prefix *p = m->prefix;
    *at = m->next;
    ortep__free(m);
    return p;
  }
  ortep__assert_fail("every shared granule is in a prefix range", __FILE__, __LINE__); /* a broken invariant */
}

/* Whether host code may read and write what this allocator hands out. */
static inline bool ortep__allocator_is_host(const ortep_allocator *a) {
  return ortep_allocator_device(a).tier == ORTEP_TIER_HOST;
}

/* The CUDA device pool (cuda_pool.c), built into the CUDA EP module only
 * (kernels/cuda/module.h). */
ortep_status ortep__cuda_pool_create(int device, void *stream, ortep_governor *governor, ortep_allocator **out);

#endif
