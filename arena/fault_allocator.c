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
} fault_allocator;

static const ortep_allocator_vtable fault_vtable;

static ortep_status fault_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  fault_allocator *f = (fault_allocator *)self;
  uint64_t call = atomic_fetch_add(&f->calls, 1) + 1;
  uint64_t at = atomic_load(&f->fail_at);
  if (at != 0 && (call == at || (call > at && atomic_load(&f->persistent)))) {
    atomic_fetch_add(&f->failures, 1);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "fault allocator: injected failure of allocation #%llu (%zu bytes, align %zu)",
                       (unsigned long long)call, bytes, align);
  }
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
static const ortep_virtual_backing *fault_vb(ortep_allocator *self) {
  return ortep_allocator_virtual_backing(((fault_allocator *)self)->inner);
}
static const ortep_shared_mapping *fault_sm(ortep_allocator *self) {
  return ortep_allocator_shared_mapping(((fault_allocator *)self)->inner);
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
