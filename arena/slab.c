/*
 * slab.c: fixed-size object caches.
 *
 * Objects are never written by the cache: the free list is an external stack
 * of pointers, so the same cache can hand out device memory it cannot touch.
 * alloc pops and free pushes (O(1)); the stack's capacity always covers
 * every object of every page, so a push can never fail. A page is added only
 * when the stack is empty, and everything it needs (page record, stack
 * room, the page itself) is reserved before anything is changed, so a failed
 * growth leaves the cache exactly as it was.
 *
 * Pages are kept sorted by address, which debug builds use to check each free
 * (binary search for the page, stride check, a live bit per object); release
 * builds do not look. shrink is rare and may be slow: it counts free objects
 * per page by searching.
 */
#include <pthread.h>
#include <string.h>

#include "internal.h"

typedef struct page {
  unsigned char *base;
  uint64_t *live; /* one bit per object; maintained in debug builds */
} page;

struct ortep_slab {
  ortep_allocator *backing;
  pthread_mutex_t lock;
  size_t stride, align, per_page, page_bytes;
  page *pages;
  size_t npages, pages_cap;
  void **stack;
  size_t top, stack_cap;
  size_t live, peak_live;
  uint64_t allocs, frees;
};

static size_t bitmap_words(size_t n) { return (n + 63) / 64; }

ortep_status ortep_slab_create(ortep_allocator *backing, size_t object_size, size_t align, size_t per_page,
                               ortep_slab **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_slab_create: out is NULL");
  *out = NULL;
  if (!backing) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_slab_create: backing allocator is NULL");
  if (object_size == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_slab_create: object_size is 0; a cache needs objects of at least 1 byte");
  if (!ortep__is_pow2(align))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_slab_create: alignment %zu is not a power of two; use 1, 2, 4, ... (e.g. 16)", align);
  size_t stride;
  if (!ortep__align_up(object_size, align, &stride))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_slab_create: object_size %zu overflows at alignment %zu",
                       object_size, align);
  if (per_page == 0) per_page = stride >= 65536 ? 1 : 65536 / stride;
  if (stride > SIZE_MAX / per_page)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_slab_create: %zu objects of %zu bytes per page overflows; use fewer objects per page",
                       per_page, stride);
  ortep_slab *s = ortep__calloc(1, sizeof *s);
  if (!s) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_slab_create: no memory for the cache object");
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    ortep__free(s);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_slab_create: could not initialise the cache's lock");
  }
  s->backing = backing;
  s->stride = stride;
  s->align = align;
  s->per_page = per_page;
  s->page_bytes = stride * per_page;
  *out = s;
  return ORTEP_OK;
}

static void release_page(ortep_slab *s, page *p) {
  ortep_allocator_deallocate(s->backing, p->base, s->page_bytes, s->align);
  ortep__free(p->live);
}

void ortep_slab_destroy(ortep_slab *s) {
  if (!s) return;
  for (size_t i = 0; i < s->npages; i++) release_page(s, &s->pages[i]);
  ortep__free(s->pages);
  ortep__free(s->stack);
  pthread_mutex_destroy(&s->lock);
  ortep__free(s);
}

/* Index of the page holding p, or npages when none does. */
static size_t find_page(const ortep_slab *s, const void *p) {
  size_t lo = 0, hi = s->npages;
  uintptr_t x = (uintptr_t)p;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    uintptr_t b = (uintptr_t)s->pages[mid].base;
    if (x < b)
      hi = mid;
    else if (x >= b + s->page_bytes)
      lo = mid + 1;
    else
      return mid;
  }
  return s->npages;
}

static ortep_status grow(ortep_slab *s) {
  /* Reserve every resource first; commit only when all are in hand. */
  if (!ORTEP__GROW(s->pages, s->pages_cap, s->npages + 1))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "slab: no memory to track another page");
  if (!ORTEP__GROW(s->stack, s->stack_cap, (s->npages + 1) * s->per_page))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "slab: no memory for the free list of another page");
  uint64_t *live = ortep__calloc(bitmap_words(s->per_page), sizeof *live);
  if (!live) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "slab: no memory for a page's live bits");
  void *base;
  ortep_status st = ortep_allocator_allocate(s->backing, s->page_bytes, s->align, &base);
  if (st != ORTEP_OK) {
    ortep__free(live);
    return ortep__wrap(st, "slab: adding a page of %zu objects of %zu bytes", s->per_page, s->stride);
  }
  size_t at = s->npages;
  while (at > 0 && (uintptr_t)s->pages[at - 1].base > (uintptr_t)base) at--;
  memmove(&s->pages[at + 1], &s->pages[at], (s->npages - at) * sizeof *s->pages);
  s->pages[at] = (page){base, live};
  s->npages++;
  /* Push in reverse so the lowest address is handed out first. */
  for (size_t i = s->per_page; i-- > 0;) s->stack[s->top++] = (unsigned char *)base + i * s->stride;
  return ORTEP_OK;
}

ortep_status ortep_slab_alloc(ortep_slab *s, void **out) {
  if (!s || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_slab_alloc: %s is NULL", s ? "out" : "slab");
  pthread_mutex_lock(&s->lock);
  if (s->top == 0) {
    ortep_status st = grow(s);
    if (st != ORTEP_OK) {
      pthread_mutex_unlock(&s->lock);
      *out = NULL;
      return st;
    }
  }
  void *p = s->stack[--s->top];
#if defined(ORTEP_DEBUG)
  page *pg = &s->pages[find_page(s, p)];
  size_t idx = (size_t)((unsigned char *)p - pg->base) / s->stride;
  pg->live[idx / 64] |= (uint64_t)1 << (idx % 64);
#endif
  s->live++;
  if (s->live > s->peak_live) s->peak_live = s->live;
  s->allocs++;
  pthread_mutex_unlock(&s->lock);
  *out = p;
  return ORTEP_OK;
}

ortep_status ortep_slab_free(ortep_slab *s, void *p) {
  if (!s || !p) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_slab_free: %s is NULL", s ? "object" : "slab");
  pthread_mutex_lock(&s->lock);
#if defined(ORTEP_DEBUG)
  size_t pi = find_page(s, p);
  if (pi == s->npages || (size_t)((unsigned char *)p - s->pages[pi].base) % s->stride != 0) {
    pthread_mutex_unlock(&s->lock);
    return ortep__fail(ORTEP_E_INVALID_POINTER,
                       "ortep_slab_free: %p is not an object of this slab (objects of %zu bytes in %zu pages%s); "
                       "free it to the cache or allocator that produced it",
                       p, s->stride, s->npages, pi == s->npages ? "" : ", and it is not at an object boundary");
  }
  page *pg = &s->pages[pi];
  size_t idx = (size_t)((unsigned char *)p - pg->base) / s->stride;
  uint64_t bit = (uint64_t)1 << (idx % 64);
  if (!(pg->live[idx / 64] & bit)) {
    pthread_mutex_unlock(&s->lock);
    return ortep__fail(ORTEP_E_INVALID_POINTER,
                       "ortep_slab_free: double free of object %p (object %zu of its page); it was already freed", p,
                       idx);
  }
  pg->live[idx / 64] &= ~bit;
#endif
  if (s->live == 0 || s->top == s->stack_cap) {
    pthread_mutex_unlock(&s->lock);
    return ortep__fail(ORTEP_E_INVALID_POINTER,
                       "ortep_slab_free: more frees than allocations (%p); an object was freed twice or does not "
                       "belong to this slab",
                       p);
  }
  s->stack[s->top++] = p;
  s->live--;
  s->frees++;
  pthread_mutex_unlock(&s->lock);
  return ORTEP_OK;
}

size_t ortep_slab_shrink(ortep_slab *s) {
  if (!s) return 0;
  pthread_mutex_lock(&s->lock);
  size_t *free_in = ortep__calloc(s->npages ? s->npages : 1, sizeof *free_in);
  if (!free_in) {
    pthread_mutex_unlock(&s->lock);
    return 0; /* shrinking is an optimisation: without memory, keep the pages */
  }
  for (size_t i = 0; i < s->top; i++) free_in[find_page(s, s->stack[i])]++;
  /* Drop the free-list entries of empty pages, then the pages themselves. */
  size_t w = 0;
  for (size_t i = 0; i < s->top; i++)
    if (free_in[find_page(s, s->stack[i])] != s->per_page) s->stack[w++] = s->stack[i];
  s->top = w;
  size_t released = 0, kept = 0;
  for (size_t i = 0; i < s->npages; i++) {
    if (free_in[i] == s->per_page) {
      release_page(s, &s->pages[i]);
      released++;
    } else {
      s->pages[kept++] = s->pages[i];
    }
  }
  s->npages = kept;
  ortep__free(free_in);
  pthread_mutex_unlock(&s->lock);
  return released;
}

void ortep_slab_get_stats(ortep_slab *s, ortep_slab_stats *out) {
  if (!out) return;
  if (!s) {
    *out = (ortep_slab_stats){0};
    return;
  }
  pthread_mutex_lock(&s->lock);
  *out = (ortep_slab_stats){s->stride, s->npages,    s->page_bytes, s->npages * s->per_page,
                            s->live,   s->peak_live, s->allocs,     s->frees};
  pthread_mutex_unlock(&s->lock);
}
