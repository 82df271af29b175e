/*
 * allocator.c: dispatch for the allocator contract (allocator.h). Every entry
 * point validates the request once, here, so implementations see only
 * well-formed calls, and optional vtable entries left NULL get the contract's
 * defaults: release forwards to deallocate_with_unmapped, which forwards to
 * deallocate; an eager allocator reports no capability and no on-demand
 * commits.
 */
#include "internal.h"

ortep_status ortep_allocator_allocate(ortep_allocator *a, size_t bytes, size_t align, void **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_allocate: out is NULL");
  *out = NULL;
  if (!a || !a->vtable || !a->vtable->allocate)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_allocator_allocate: the allocator is NULL or has no allocate entry");
  ortep_status st = ortep_allocation_request_check(a->vtable->name ? a->vtable->name : "allocator", bytes, align);
  if (st != ORTEP_OK) return st;
  return a->vtable->allocate(a, bytes, align, out);
}

void ortep_allocator_deallocate(ortep_allocator *a, void *ptr, size_t bytes, size_t align) {
  if (!a || !ptr) return;
  a->vtable->deallocate(a, ptr, bytes, align);
}

uint64_t ortep_allocator_deallocate_with_unmapped(ortep_allocator *a, void *ptr, size_t bytes, size_t align) {
  if (!a || !ptr) return 0;
  if (a->vtable->deallocate_with_unmapped) return a->vtable->deallocate_with_unmapped(a, ptr, bytes, align);
  a->vtable->deallocate(a, ptr, bytes, align);
  return 0;
}

ortep_release_outcome ortep_allocator_release(ortep_allocator *a, void *ptr, size_t bytes, size_t align) {
  if (!a || !ptr) {
    ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_release: %s is NULL; nothing was released",
                a ? "the pointer" : "the allocator");
    return (ortep_release_outcome){ORTEP_RELEASE_FAILED, bytes, 0, 0};
  }
  if (a->vtable->release) return a->vtable->release(a, ptr, bytes, align);
  uint64_t unmapped = ortep_allocator_deallocate_with_unmapped(a, ptr, bytes, align);
  return (ortep_release_outcome){ORTEP_RELEASE_COMPLETE, bytes, unmapped, 0};
}

ortep_device_key ortep_allocator_device(const ortep_allocator *a) { return a->vtable->device(a); }

const char *ortep_allocator_name(const ortep_allocator *a) {
  return a && a->vtable && a->vtable->name ? a->vtable->name : "allocator";
}

bool ortep_allocator_commits_on_demand(const ortep_allocator *a) {
  return a->vtable->commits_on_demand ? a->vtable->commits_on_demand(a) : false;
}

const ortep_virtual_backing *ortep_allocator_virtual_backing(ortep_allocator *a) {
  return a->vtable->virtual_backing ? a->vtable->virtual_backing(a) : NULL;
}

const ortep_shared_mapping *ortep_allocator_shared_mapping(ortep_allocator *a) {
  return a->vtable->shared_mapping ? a->vtable->shared_mapping(a) : NULL;
}

ortep_status ortep_allocator_get_stats(const ortep_allocator *a, ortep_mem_stats *out) {
  if (!a || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_get_stats: NULL argument");
  if (!a->vtable->stats)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "allocator '%s' keeps no counters", ortep_allocator_name(a));
  return a->vtable->stats(a, out);
}

void ortep_allocator_destroy(ortep_allocator *a) {
  if (a && a->vtable->destroy) a->vtable->destroy(a);
}
