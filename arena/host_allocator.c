/*
 * host_allocator.c: host memory from mimalloc, or from the system allocator
 * in an ORTEP_SYSTEM_ALLOCATOR build (so ASan and Valgrind see each block;
 * Debian's libmimalloc replaces malloc process-wide when linked, which is why
 * that build does not link it at all). The governor is charged before the
 * allocation is made and refunded if it fails, so a refusal never leaves a
 * charge behind.
 *
 * Large blocks (weights read into memory, planned arenas, KV caches) are
 * advised onto transparent huge pages: a decode step streams every weight
 * once, and with 4 KiB pages each 4 KiB costs a TLB miss, a page walk (a
 * nested one in a VM) and a restart of the hardware prefetcher (what huge
 * pages gain: docs/api.md, the CPU EP).
 */
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "internal.h"

#if !ORTEP_SYSTEM_ALLOCATOR
#include <mimalloc.h>
#endif

typedef struct host_allocator {
  ortep_allocator base;
  ortep_governor *governor;
  ortep__counters counters;
} host_allocator;

static void *raw_alloc(size_t bytes, size_t align) {
#if !ORTEP_SYSTEM_ALLOCATOR
  void *p = mi_malloc_aligned(bytes, align);
  /* mimalloc 2.0.9 (Debian bookworm) can return a misaligned block when the
   * size is a small multiple of the alignment (microsoft/mimalloc#700: a fast
   * path checks MI_SMALL_SIZE_MAX where it meant MI_SMALL_WSIZE_MAX; e.g.
   * 512 bytes at 256). A size that is not such a multiple takes the correct
   * path, so retry with one byte more. */
  if (p && ((uintptr_t)p & (align - 1)) != 0) {
    mi_free(p);
    p = mi_malloc_aligned(bytes + 1, align);
    if (p && ((uintptr_t)p & (align - 1)) != 0) {
      mi_free(p);
      p = NULL;
    }
  }
  return p;
#else
  void *p = NULL;
  if (align < sizeof(void *)) align = sizeof(void *);
  return posix_memalign(&p, align, bytes) == 0 ? p : NULL;
#endif
}

/* MADV_HUGEPAGE over the 2 MiB-aligned interior of [p, p + bytes): only
 * memory that is wholly this block's, so a neighbour's advice is untouched.
 * Advice only: a kernel without THP, or with it set to "never", refuses or
 * ignores it and the block stays on small pages. */
#define HUGE_PAGE ((uintptr_t)2 << 20)
static void advise_huge(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), hi = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

static void raw_free(void *p) {
#if !ORTEP_SYSTEM_ALLOCATOR
  mi_free(p);
#else
  free(p);
#endif
}

static ortep_status host_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  host_allocator *h = (host_allocator *)self;
  /* Zero bytes still yields a distinct usable pointer (one byte is taken),
   * but nothing is charged for it: its size is zero to the caller. */
  if (h->governor) {
    ortep_status st = ortep_governor_charge(h->governor, ORTEP_TIER_HOST, bytes);
    if (st != ORTEP_OK) return st;
  }
  void *p = raw_alloc(bytes ? bytes : 1, align);
  if (!p) {
    if (h->governor) ortep_governor_refund(h->governor, ORTEP_TIER_HOST, bytes);
    char b[32];
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "host allocator: %s (%zu bytes, align %zu) refused by %s although the governor granted it; "
                       "the process is out of address space or the host is out of memory — lower the request or "
                       "set ortep.host.budget_bytes below the machine's free memory",
                       ortep__format_bytes(bytes, b, sizeof b), bytes, align,
                       ORTEP_SYSTEM_ALLOCATOR ? "the system allocator" : "mimalloc");
  }
  advise_huge(p, bytes);
  ortep__counters_add(&h->counters, bytes);
  *out = p;
  return ORTEP_OK;
}

static void host_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  host_allocator *h = (host_allocator *)self;
  raw_free(ptr);
  ortep__counters_sub(&h->counters, bytes);
  if (h->governor) ortep_governor_refund(h->governor, ORTEP_TIER_HOST, bytes);
}

static ortep_device_key host_device(const ortep_allocator *self) { return ortep_device_key_host(); }

static ortep_status host_stats(const ortep_allocator *self, ortep_mem_stats *out) {
  ortep__counters_read(&((const host_allocator *)self)->counters, out);
  return ORTEP_OK;
}

static void host_destroy(ortep_allocator *self) { ortep__free(self); }

static const ortep_allocator_vtable host_vtable = {
    .name = "host",
    .allocate = host_allocate,
    .deallocate = host_deallocate,
    .device = host_device,
    .stats = host_stats,
    .destroy = host_destroy,
};

ortep_status ortep_host_allocator_create(ortep_governor *governor, ortep_allocator **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_host_allocator_create: out is NULL");
  *out = NULL;
  host_allocator *h = ortep__calloc(1, sizeof *h);
  if (!h)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "ortep_host_allocator_create: no memory for the allocator object (%zu bytes)", sizeof *h);
  h->base.vtable = &host_vtable;
  h->governor = governor;
  *out = &h->base;
  return ORTEP_OK;
}
