/*
 * virtual_allocator.c: host memory straight from the OS, with the seeds'
 * lazy virtual backing and shared physical mappings (allocator.h).
 *
 * A reservation is PROT_NONE, MAP_NORESERVE address space: it costs no
 * memory and is charged nothing. Committing a range maps populated private
 * anonymous pages over it (MAP_FIXED: the address never changes, so a
 * captured graph that points into it stays valid) and charges the governor
 * for the pages it adds; decommitting maps PROT_NONE over the pages again,
 * which hands them back to the OS, and refunds them. A shared prefix is a
 * memfd holding a copy of the bytes, charged once when created and mapped
 * read-only MAP_SHARED | MAP_FIXED at any page of any reservation (its
 * first pages, or all of them), as many times as asked; its memory goes
 * back when the handle and the last mapping are gone.
 *
 * Every reservation keeps one byte of state per page (reserved, private,
 * shared) and the ranges of its shared pages (internal.h), so a commit
 * reports exactly the bytes it added and a decommit exactly the bytes it
 * gave back, whatever overlaps with earlier calls. A
 * failed call changes nothing: pages are charged before they are mapped and
 * a partial mapping is undone. One mutex serialises the bookkeeping.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "internal.h"

#if defined(__linux__) && defined(MFD_CLOEXEC)

enum {
  PAGE_RESERVED = 0,
  PAGE_PRIVATE = 1,
  PAGE_SHARED = 2,
  PAGE_NEW = 3 /* private, mapped by the call in progress */
};

struct ortep_shared_prefix {
  int fd;
  size_t len, span; /* the bytes held, and the whole pages that hold them */
  size_t refs;      /* the handle (until destroy_prefix) plus one per range mapping it */
  size_t mappings;  /* mappings ever made: the first owns the bytes */
  const struct vm_allocator *owner;
};

typedef struct region {
  char *base;
  size_t bytes, span; /* asked for, and the whole pages reserved */
  uint8_t *page;      /* PAGE_* per page */
  size_t private_pages, shared_pages;
  ortep__prefix_range *maps; /* which prefix each shared page maps */
  struct region *next;
} region;

typedef struct vm_allocator {
  ortep_allocator base;
  ortep_governor *governor;
  size_t page;
  pthread_mutex_t lock;
  region *regions;
  ortep__counters counters;
} vm_allocator;

static const ortep_allocator_vtable vm_vtable;

static ortep_status os_error(const char *what, size_t bytes, int err) {
  char b[32];
  return ortep__fail(err == ENOMEM ? ORTEP_E_OUT_OF_MEMORY : ORTEP_E_INTERNAL,
                     "host virtual allocator: %s of %s (%zu bytes) failed: %s", what,
                     ortep__format_bytes(bytes, b, sizeof b), bytes, strerror(err));
}

static ortep_status charge(vm_allocator *v, uint64_t bytes) {
  return v->governor && bytes ? ortep_governor_charge(v->governor, ORTEP_TIER_HOST, bytes) : ORTEP_OK;
}
static void refund(vm_allocator *v, uint64_t bytes) {
  if (v->governor && bytes) ortep_governor_refund(v->governor, ORTEP_TIER_HOST, bytes);
}

static region *find(vm_allocator *v, const void *base) {
  for (region *r = v->regions; r; r = r->next)
    if (r->base == base) return r;
  return NULL;
}

/* Address space for bytes at align (at least a page): reserved with room to
 * align, the slack unmapped again. */
static ortep_status reserve_locked(vm_allocator *v, size_t bytes, size_t align, region **out) {
  size_t span = bytes ? (bytes + v->page - 1) / v->page * v->page : v->page;
  if (span < bytes) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "host virtual allocator: %zu bytes overflow", bytes);
  size_t slack = align > v->page ? align - v->page : 0;
  region *r = ortep__calloc(1, sizeof *r);
  uint8_t *pages = ortep__calloc(span / v->page, 1);
  if (!r || !pages) {
    ortep__free(r), ortep__free(pages);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "host virtual allocator: no memory for a reservation's page map");
  }
  char *raw = mmap(NULL, span + slack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    int err = errno;
    ortep__free(r), ortep__free(pages);
    return os_error("reserving address space", span + slack, err);
  }
  char *base = (char *)(((uintptr_t)raw + (align > v->page ? align : v->page) - 1) &
                        ~(uintptr_t)((align > v->page ? align : v->page) - 1));
  if (base > raw) munmap(raw, (size_t)(base - raw));
  if (raw + span + slack > base + span) munmap(base + span, (size_t)(raw + span + slack - (base + span)));
  *r = (region){.base = base, .bytes = bytes, .span = span, .page = pages, .next = v->regions};
  v->regions = r;
  *out = r;
  return ORTEP_OK;
}

/* Maps pages [p0, p1) of r PROT_NONE again (private ones back to the OS). */
static void unmap_pages(vm_allocator *v, region *r, size_t p0, size_t p1) {
  if (p1 <= p0) return;
  void *at = mmap(r->base + p0 * v->page, (p1 - p0) * v->page, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  ortep__assert(at != MAP_FAILED); /* replacing a mapping of our own range with a smaller one */
  (void)at;
}

static void prefix_unref(vm_allocator *v, ortep_shared_prefix *p, uint64_t *released) {
  if (--p->refs) return;
  close(p->fd);
  refund(v, p->span);
  ortep__counters_sub(&v->counters, p->span);
  if (released) *released += p->span;
  ortep__free(p);
}

/* The pages of [offset, offset + bytes): whole pages, widened. */
static void page_span(const vm_allocator *v, const ortep_commit_range *c, size_t *p0, size_t *p1) {
  *p0 = c->offset / v->page;
  *p1 = (c->offset + c->bytes + v->page - 1) / v->page;
}

static ortep_status commit_locked(vm_allocator *v, region *r, size_t p0, size_t p1, uint64_t *newly) {
  size_t add = 0;
  for (size_t p = p0; p < p1; p++) {
    if (r->page[p] == PAGE_SHARED)
      return ortep__fail(ORTEP_E_STATE,
                         "host virtual allocator: page %zu of the range holds a shared read-only prefix; decommit it "
                         "before committing private memory there",
                         p);
    add += r->page[p] == PAGE_RESERVED;
  }
  ortep_status st = charge(v, (uint64_t)add * v->page);
  if (st != ORTEP_OK) return st;
  for (size_t p = p0; p < p1;) {
    if (r->page[p] != PAGE_RESERVED) {
      p++;
      continue;
    }
    size_t q = p;
    while (q < p1 && r->page[q] == PAGE_RESERVED) q++;
    void *at = mmap(r->base + p * v->page, (q - p) * v->page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_POPULATE, -1, 0);
    if (at == MAP_FAILED) {
      int err = errno;
      for (size_t u = p0; u < p; u++) /* undo this call's runs: nothing changed */
        if (r->page[u] == PAGE_NEW) unmap_pages(v, r, u, u + 1), r->page[u] = PAGE_RESERVED;
      refund(v, (uint64_t)add * v->page);
      return os_error("committing pages", (q - p) * v->page, err);
    }
    for (; p < q; p++) r->page[p] = PAGE_NEW; /* new in this call */
  }
  for (size_t p = p0; p < p1; p++)
    if (r->page[p] == PAGE_NEW) r->page[p] = PAGE_PRIVATE;
  r->private_pages += add;
  if (add) ortep__counters_add(&v->counters, (uint64_t)add * v->page);
  *newly = (uint64_t)add * v->page;
  return ORTEP_OK;
}

/* Gives back pages [p0, p1): private pages are refunded, shared ones drop
 * the prefix when none of its pages is mapped any more. */
static void decommit_locked(vm_allocator *v, region *r, size_t p0, size_t p1, uint64_t *released) {
  size_t priv = 0, shared = 0;
  for (size_t p = p0; p < p1; p++) {
    priv += r->page[p] == PAGE_PRIVATE;
    shared += r->page[p] == PAGE_SHARED;
  }
  if (!priv && !shared) return;
  unmap_pages(v, r, p0, p1);
  for (size_t p = p0; shared && p < p1; p++) {
    ortep_shared_prefix *gone = r->page[p] == PAGE_SHARED ? ortep__prefix_range_drop(&r->maps, p) : NULL;
    if (gone) prefix_unref(v, gone, released);
  }
  memset(r->page + p0, PAGE_RESERVED, p1 - p0);
  r->private_pages -= priv;
  r->shared_pages -= shared;
  if (priv) {
    refund(v, (uint64_t)priv * v->page);
    ortep__counters_sub(&v->counters, (uint64_t)priv * v->page);
    *released += (uint64_t)priv * v->page;
  }
}

/* --- the vtable ------------------------------------------------------------------ */
static ortep_status vm_reserve(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  vm_allocator *v = (vm_allocator *)self;
  region *r;
  pthread_mutex_lock(&v->lock);
  ortep_status st = reserve_locked(v, bytes, align, &r);
  pthread_mutex_unlock(&v->lock);
  if (st == ORTEP_OK) *out = r->base;
  return st;
}

static ortep_status lookup(vm_allocator *v, const void *base, const char *call, region **out) {
  if ((*out = find(v, base))) return ORTEP_OK;
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "host virtual allocator: %s: %p is not a reservation of this allocator",
                     call, base);
}

/* A commit or decommit of the pages the range touches, under the lock. */
static ortep_status vm_range(ortep_allocator *self, const ortep_commit_range *c, uint64_t *bytes, bool commit) {
  vm_allocator *v = (vm_allocator *)self;
  region *r;
  size_t p0, p1;
  page_span(v, c, &p0, &p1);
  pthread_mutex_lock(&v->lock);
  ortep_status st = lookup(v, c->ptr, commit ? "commit" : "decommit", &r);
  if (st == ORTEP_OK && commit) st = commit_locked(v, r, p0, p1, bytes);
  if (st == ORTEP_OK && !commit) decommit_locked(v, r, p0, p1, bytes);
  pthread_mutex_unlock(&v->lock);
  return st;
}
static ortep_status vm_commit(ortep_allocator *self, const ortep_commit_range *c, uint64_t *newly) {
  return vm_range(self, c, newly, true);
}
static ortep_status vm_decommit(ortep_allocator *self, const ortep_commit_range *c, uint64_t *released) {
  return vm_range(self, c, released, false);
}

static ortep_status vm_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  vm_allocator *v = (vm_allocator *)self;
  region *r;
  uint64_t newly = 0;
  pthread_mutex_lock(&v->lock);
  ortep_status st = reserve_locked(v, bytes, align, &r);
  if (st == ORTEP_OK && (st = commit_locked(v, r, 0, r->span / v->page, &newly)) != ORTEP_OK) {
    v->regions = r->next; /* just pushed: undo the reservation */
    munmap(r->base, r->span);
    ortep__free(r->page), ortep__free(r);
  }
  pthread_mutex_unlock(&v->lock);
  if (st == ORTEP_OK) *out = r->base;
  return st;
}

static ortep_release_outcome vm_release(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  vm_allocator *v = (vm_allocator *)self;
  pthread_mutex_lock(&v->lock);
  region **at = &v->regions;
  while (*at && (*at)->base != ptr) at = &(*at)->next;
  region *r = *at;
  if (!r) {
    pthread_mutex_unlock(&v->lock);
    ortep__fail(ORTEP_E_INVALID_ARGUMENT, "host virtual allocator: release of %p, which it did not hand out", ptr);
    return (ortep_release_outcome){ORTEP_RELEASE_FAILED, bytes, 0, 0};
  }
  uint64_t mapped = (uint64_t)(r->private_pages + r->shared_pages) * v->page, released = 0;
  decommit_locked(v, r, 0, r->span / v->page, &released);
  munmap(r->base, r->span);
  *at = r->next;
  pthread_mutex_unlock(&v->lock);
  ortep__free(r->page), ortep__free(r);
  return (ortep_release_outcome){ORTEP_RELEASE_COMPLETE, bytes, mapped, 0};
}

static void vm_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  (void)vm_release(self, ptr, bytes, align);
}

static ortep_status vm_create_prefix(ortep_allocator *self, const void *bytes, size_t len, ortep_shared_prefix **out) {
  vm_allocator *v = (vm_allocator *)self;
  size_t span = (len + v->page - 1) / v->page * v->page;
  ortep_status st = charge(v, span);
  if (st != ORTEP_OK) return st;
  ortep_shared_prefix *p = ortep__calloc(1, sizeof *p);
  int fd = memfd_create("ortep-shared-prefix", MFD_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  if (!err && ftruncate(fd, (off_t)span) != 0) err = errno;
  void *m = err ? MAP_FAILED : mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (!err && m == MAP_FAILED) err = errno;
  if (!p || err) {
    if (m != MAP_FAILED) munmap(m, span);
    if (fd >= 0) close(fd);
    ortep__free(p);
    refund(v, span);
    return p ? os_error("creating a shared prefix (memfd)", span, err)
             : ortep__fail(ORTEP_E_OUT_OF_MEMORY, "host virtual allocator: no memory for a prefix handle");
  }
  memcpy(m, bytes, len);
  munmap(m, span);
  *p = (ortep_shared_prefix){.fd = fd, .len = len, .span = span, .refs = 1, .owner = v};
  ortep__counters_add(&v->counters, span);
  *out = p;
  return ORTEP_OK;
}

static ortep_status vm_map_prefix(ortep_allocator *self, ortep_shared_prefix *p, void *allocation,
                                  size_t allocation_bytes, size_t offset, size_t bytes, ortep_shared_commit_info *out) {
  vm_allocator *v = (vm_allocator *)self;
  if (p->owner != v)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "host virtual allocator: the prefix belongs to another allocator");
  size_t n = bytes ? (bytes + v->page - 1) / v->page : p->span / v->page, g0 = offset / v->page;
  if (n * v->page > p->span)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "host virtual allocator: %zu bytes of a prefix that holds %zu were asked to be mapped", bytes,
                       p->len);
  ortep__prefix_range *m = ortep__calloc(1, sizeof *m);
  if (!m) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "host virtual allocator: no memory for a prefix mapping");
  pthread_mutex_lock(&v->lock);
  region *r;
  ortep_status st = lookup(v, allocation, "map_prefix", &r);
  if (st == ORTEP_OK && (allocation_bytes != r->bytes || g0 + n > r->span / v->page))
    st = ortep__fail(ORTEP_E_OUT_OF_RANGE,
                     "host virtual allocator: %zu bytes of a prefix at offset %zu do not fit a reservation of %zu "
                     "bytes (or the size given, %zu, is not the reservation's)",
                     n * v->page, offset, r->bytes, allocation_bytes);
  if (st == ORTEP_OK) {
    uint64_t released = 0;
    p->refs++; /* the new range's, held first: these very pages may be its last mapping so far */
    decommit_locked(v, r, g0, g0 + n, &released); /* what the pages held (private, or a prefix) makes way */
    void *at = mmap(r->base + g0 * v->page, n * v->page, PROT_READ, MAP_SHARED | MAP_FIXED, p->fd, 0);
    if (at == MAP_FAILED) {
      st = os_error("mapping a shared prefix", n * v->page, errno);
      unmap_pages(v, r, g0, g0 + n); /* its old contents were given back: say so */
      out->released_bytes = released;
      prefix_unref(v, p, NULL);
    } else {
      memset(r->page + g0, PAGE_SHARED, n);
      r->shared_pages += n;
      *m = (ortep__prefix_range){p, g0, n, n, r->maps};
      r->maps = m, m = NULL;
      *out = (ortep_shared_commit_info){p->mappings++ ? 0 : p->span, n * v->page, released, n};
    }
  }
  pthread_mutex_unlock(&v->lock);
  ortep__free(m);
  return st;
}

static void vm_destroy_prefix(ortep_allocator *self, ortep_shared_prefix *p) {
  vm_allocator *v = (vm_allocator *)self;
  pthread_mutex_lock(&v->lock);
  prefix_unref(v, p, NULL);
  pthread_mutex_unlock(&v->lock);
}

static const ortep_virtual_backing *vm_vb(ortep_allocator *self);
static const ortep_shared_mapping vm_sm = {vm_create_prefix, vm_map_prefix, vm_destroy_prefix};
static const ortep_shared_mapping *vm_get_sm(ortep_allocator *self) { return &vm_sm; }

static ortep_device_key vm_device(const ortep_allocator *self) { return ortep_device_key_host(); }
static bool vm_commits_on_demand(const ortep_allocator *self) { return ((const vm_allocator *)self)->governor; }
static ortep_status vm_stats(const ortep_allocator *self, ortep_mem_stats *out) {
  ortep__counters_read(&((const vm_allocator *)self)->counters, out);
  return ORTEP_OK;
}
static void vm_destroy(ortep_allocator *self) {
  vm_allocator *v = (vm_allocator *)self;
  pthread_mutex_destroy(&v->lock);
  ortep__free(v);
}

static const ortep_allocator_vtable vm_vtable = {
    .name = "host_virtual",
    .allocate = vm_allocate,
    .deallocate = vm_deallocate,
    .device = vm_device,
    .release = vm_release,
    .commits_on_demand = vm_commits_on_demand,
    .virtual_backing = vm_vb,
    .shared_mapping = vm_get_sm,
    .stats = vm_stats,
    .destroy = vm_destroy,
};

/* The granularity is the page size, known at creation: one table per
 * allocator, inside it. */
typedef struct vm_with_table {
  vm_allocator v;
  ortep_virtual_backing vb;
} vm_with_table;
static const ortep_virtual_backing *vm_vb(ortep_allocator *self) { return &((vm_with_table *)self)->vb; }

ortep_status ortep_host_virtual_allocator_create(ortep_governor *governor, ortep_allocator **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_host_virtual_allocator_create: out is NULL");
  *out = NULL;
  vm_with_table *t = ortep__calloc(1, sizeof *t);
  if (!t) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_host_virtual_allocator_create: no memory for the allocator");
  long page = sysconf(_SC_PAGESIZE);
  t->v.base.vtable = &vm_vtable;
  t->v.governor = governor;
  t->v.page = page > 0 ? (size_t)page : 4096;
  pthread_mutex_init(&t->v.lock, NULL);
  t->vb = (ortep_virtual_backing){t->v.page, vm_reserve, vm_commit, vm_decommit};
  *out = &t->v.base;
  return ORTEP_OK;
}

#else /* not Linux */

ortep_status ortep_host_virtual_allocator_create(ortep_governor *governor, ortep_allocator **out) {
  (void)governor;
  if (out) *out = NULL;
  return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                     "the host virtual allocator needs Linux (mmap MAP_NORESERVE and memfd_create); use "
                     "ortep_host_allocator_create");
}

#endif
