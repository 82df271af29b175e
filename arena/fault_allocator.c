/*
 * fault_allocator.c: a wrapper that fails allocations on request, so tests
 * can run the SQLite-style OOM loop (fail the 1st, 2nd, ... allocation of an
 * operation until it succeeds) through the same allocator interface users
 * plug in. Everything else forwards to the inner allocator unchanged,
 * including its capabilities, so the wrapper is transparent to its users.
 */
#include "internal.h"

typedef struct fault_allocator {
  ortep_allocator base;
  ortep_allocator *inner;
  _Atomic uint64_t calls;
  _Atomic uint64_t failures;
  _Atomic uint64_t fail_at; /* 0: disarmed */
  _Atomic bool persistent;
  ortep__counters counters;
  ortep_virtual_backing vb; /* the inner's granularity, this wrapper's entries */
} fault_allocator;

static const ortep_allocator_vtable fault_vtable;

/* Counts a call that takes memory (allocate, reserve, commit, a prefix) and
 * says whether the armed failure is due. */
static bool inject(fault_allocator *f, uint64_t *call) {
  *call = atomic_fetch_add(&f->calls, 1) + 1;
  uint64_t at = atomic_load(&f->fail_at);
  if (at == 0 || !(*call == at || (*call > at && atomic_load(&f->persistent)))) return false;
  atomic_fetch_add(&f->failures, 1);
  return true;
}

static ortep_status injected(uint64_t call, const char *what, size_t bytes) {
  return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "fault allocator: injected failure of call #%llu (%s, %zu bytes)",
                     (unsigned long long)call, what, bytes);
}

static ortep_status fault_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call;
  if (inject(f, &call))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "fault allocator: injected failure of allocation #%llu (%zu bytes, align %zu)",
                       (unsigned long long)call, bytes, align);
  ortep_status st = ortep_allocator_allocate(f->inner, bytes, align, out);
  if (st == ORTEP_OK) ortep__counters_add(&f->counters, bytes);
  return st;
}

static void fault_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  fault_allocator *f = (fault_allocator *)self;
  ortep__counters_sub(&f->counters, bytes);
  ortep_allocator_deallocate(f->inner, ptr, bytes, align);
}

static ortep_release_outcome fault_release(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  fault_allocator *f = (fault_allocator *)self;
  ortep_release_outcome o = ortep_allocator_release(f->inner, ptr, bytes, align);
  if (o.kind != ORTEP_RELEASE_FAILED) ortep__counters_sub(&f->counters, bytes);
  return o;
}

static ortep_device_key fault_device(const ortep_allocator *self) {
  return ortep_allocator_device(((const fault_allocator *)self)->inner);
}
static bool fault_commits(const ortep_allocator *self) {
  return ortep_allocator_commits_on_demand(((const fault_allocator *)self)->inner);
}
/* The capabilities: the inner allocator's, through its dispatchers, with
 * failures injected into the calls that take memory. */
static ortep_status fault_reserve(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call;
  if (inject(f, &call)) return injected(call, "reserve", bytes);
  return ortep_allocator_reserve(f->inner, bytes, align, out);
}
static ortep_status fault_commit(ortep_allocator *self, const ortep_commit_range *r, uint64_t *newly) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call;
  if (inject(f, &call)) return injected(call, "commit", r->bytes);
  return ortep_allocator_commit(f->inner, r, newly);
}
static ortep_status fault_decommit(ortep_allocator *self, const ortep_commit_range *r, uint64_t *released) {
  return ortep_allocator_decommit(((fault_allocator *)self)->inner, r, released);
}
static ortep_status fault_create_prefix(ortep_allocator *self, const void *bytes, size_t len,
                                        ortep_shared_prefix **out) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call;
  if (inject(f, &call)) return injected(call, "a shared prefix", len);
  return ortep_allocator_create_prefix(f->inner, bytes, len, out);
}
static ortep_status fault_map_prefix(ortep_allocator *self, ortep_shared_prefix *p, void *allocation,
                                     size_t allocation_bytes, size_t offset, size_t bytes,
                                     ortep_shared_commit_info *out) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call;
  if (inject(f, &call)) return injected(call, "mapping a shared prefix", allocation_bytes);
  return ortep_allocator_map_prefix_at(f->inner, p, allocation, allocation_bytes, offset, bytes, out);
}
static void fault_destroy_prefix(ortep_allocator *self, ortep_shared_prefix *p) {
  ortep_allocator_destroy_prefix(((fault_allocator *)self)->inner, p);
}
static const ortep_shared_mapping fault_sm_table = {fault_create_prefix, fault_map_prefix, fault_destroy_prefix};

static const ortep_virtual_backing *fault_vb(ortep_allocator *self) {
  fault_allocator *f = (fault_allocator *)self;
  return ortep_allocator_has_virtual_backing(f->inner) ? &f->vb : NULL;
}
static const ortep_shared_mapping *fault_sm(ortep_allocator *self) {
  return ortep_allocator_has_shared_mapping(((fault_allocator *)self)->inner) ? &fault_sm_table : NULL;
}
static ortep_status fault_stats(const ortep_allocator *self, ortep_mem_stats *out) {
  ortep__counters_read(&((const fault_allocator *)self)->counters, out);
  return ORTEP_OK;
}
static void fault_destroy(ortep_allocator *self) { ortep__free(self); }

static const ortep_allocator_vtable fault_vtable = {
    .name = "fault",
    .allocate = fault_allocate,
    .deallocate = fault_deallocate,
    .device = fault_device,
    .release = fault_release,
    .commits_on_demand = fault_commits,
    .virtual_backing = fault_vb,
    .shared_mapping = fault_sm,
    .stats = fault_stats,
    .destroy = fault_destroy,
};

ortep_status ortep_fault_allocator_create(ortep_allocator *inner, ortep_allocator **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_fault_allocator_create: out is NULL");
  *out = NULL;
  if (!inner)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_fault_allocator_create: inner allocator is NULL; wrap a real allocator such as "
                       "ortep_host_allocator_create's");
  fault_allocator *f = ortep__calloc(1, sizeof *f);
  if (!f) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_fault_allocator_create: no memory for the wrapper");
  f->base.vtable = &fault_vtable;
  f->inner = inner;
  f->vb = (ortep_virtual_backing){ortep_allocator_granularity(inner), fault_reserve, fault_commit, fault_decommit};
  *out = &f->base;
  return ORTEP_OK;
}

static fault_allocator *as_fault(const ortep_allocator *a) {
  return (a && a->vtable == &fault_vtable) ? (fault_allocator *)(uintptr_t)a : NULL;
}

void ortep_fault_allocator_arm(ortep_allocator *a, uint64_t nth, bool persistent) {
  fault_allocator *f = as_fault(a);
  if (!f) return;
  atomic_store(&f->persistent, persistent);
  atomic_store(&f->calls, 0);
  atomic_store(&f->fail_at, nth);
}

uint64_t ortep_fault_allocator_calls(const ortep_allocator *a) {
  fault_allocator *f = as_fault(a);
  return f ? atomic_load(&f->calls) : 0;
}

uint64_t ortep_fault_allocator_failures(const ortep_allocator *a) {
  fault_allocator *f = as_fault(a);
  return f ? atomic_load(&f->failures) : 0;
}
