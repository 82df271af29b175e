/*
 * allocator.c: dispatch for the allocator contract (allocator.h). Every entry
 * point validates the request once, here, so implementations see only
 * well-formed calls, and optional vtable entries left NULL get the contract's
 * defaults: release forwards to deallocate; an eager allocator reports no capability and no on-demand
 * commits.
 */
#include <string.h>

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

ortep_release_outcome ortep_allocator_release(ortep_allocator *a, void *ptr, size_t bytes, size_t align) {
  if (!a || !ptr) {
    ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_release: %s is NULL; nothing was released",
                a ? "the pointer" : "the allocator");
    return (ortep_release_outcome){ORTEP_RELEASE_FAILED, bytes, 0, 0};
  }
  if (a->vtable->release) return a->vtable->release(a, ptr, bytes, align);
  a->vtable->deallocate(a, ptr, bytes, align);
  return (ortep_release_outcome){ORTEP_RELEASE_COMPLETE, bytes, 0, 0};
}

ortep_device_key ortep_allocator_device(const ortep_allocator *a) { return a->vtable->device(a); }

const char *ortep_allocator_name(const ortep_allocator *a) {
  return a && a->vtable && a->vtable->name ? a->vtable->name : "allocator";
}

bool ortep_allocator_commits_on_demand(const ortep_allocator *a) {
  return a->vtable->commits_on_demand ? a->vtable->commits_on_demand(a) : false;
}

static const ortep_virtual_backing *vb_of(ortep_allocator *a) {
  return a && a->vtable->virtual_backing ? a->vtable->virtual_backing(a) : NULL;
}
static const ortep_shared_mapping *sm_of(ortep_allocator *a) {
  return a && a->vtable->shared_mapping ? a->vtable->shared_mapping(a) : NULL;
}

bool ortep_allocator_has_virtual_backing(ortep_allocator *a) { return vb_of(a) != NULL; }
bool ortep_allocator_has_shared_mapping(ortep_allocator *a) { return sm_of(a) != NULL; }
size_t ortep_allocator_granularity(ortep_allocator *a) {
  const ortep_virtual_backing *vb = vb_of(a);
  return vb ? vb->granularity : 0;
}

static ortep_status no_capability(const char *call, ortep_allocator *a, const char *what) {
  if (!a) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: the allocator is NULL", call);
  return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                     "%s: allocator '%s' has no %s; the host and CUDA virtual allocators have it (allocator.h)", call,
                     ortep_allocator_name(a), what);
}

ortep_status ortep_allocator_reserve(ortep_allocator *a, size_t bytes, size_t align, void **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_reserve: out is NULL");
  *out = NULL;
  const ortep_virtual_backing *vb = vb_of(a);
  if (!vb) return no_capability("ortep_allocator_reserve", a, "virtual backing");
  ortep_status st = ortep_allocation_request_check(ortep_allocator_name(a), bytes, align);
  if (st != ORTEP_OK) return st;
  return vb->reserve(a, bytes, align, out);
}

/* A range must lie inside its reservation: offset + bytes <= allocation_bytes
 * without overflow. */
static ortep_status check_range(const char *call, const ortep_commit_range *r, uint64_t *out) {
  if (!r || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: the range or the result is NULL", call);
  *out = 0;
  if (!r->ptr) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: the range's reservation pointer is NULL", call);
  if (r->offset > r->allocation_bytes || r->bytes > r->allocation_bytes - r->offset)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "%s: the range [%zu, %zu + %zu) does not lie inside its reservation of %zu bytes", call,
                       r->offset, r->offset, r->bytes, r->allocation_bytes);
  return ORTEP_OK;
}

/* commit and decommit: the range checked, an empty one a no-op. */
static ortep_status range_call(const char *call, ortep_allocator *a, const ortep_commit_range *range, uint64_t *bytes,
                               bool commit) {
  ortep_status st = check_range(call, range, bytes);
  if (st != ORTEP_OK) return st;
  const ortep_virtual_backing *vb = vb_of(a);
  if (!vb) return no_capability(call, a, "virtual backing");
  if (!range->bytes) return ORTEP_OK;
  return commit ? vb->commit(a, range, bytes) : vb->decommit(a, range, bytes);
}

ortep_status ortep_allocator_commit(ortep_allocator *a, const ortep_commit_range *range, uint64_t *newly_owned) {
  return range_call("ortep_allocator_commit", a, range, newly_owned, true);
}

ortep_status ortep_allocator_decommit(ortep_allocator *a, const ortep_commit_range *range, uint64_t *released) {
  return range_call("ortep_allocator_decommit", a, range, released, false);
}

ortep_status ortep_allocator_create_prefix(ortep_allocator *a, const void *bytes, size_t len,
                                           ortep_shared_prefix **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_create_prefix: out is NULL");
  *out = NULL;
  const ortep_shared_mapping *sm = sm_of(a);
  if (!sm) return no_capability("ortep_allocator_create_prefix", a, "shared mappings");
  if (!bytes || !len)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_allocator_create_prefix: a prefix needs bytes to hold (got %s, %zu bytes)",
                       bytes ? "a pointer" : "NULL", len);
  return sm->create_prefix(a, bytes, len, out);
}

ortep_status ortep_allocator_map_prefix_at(ortep_allocator *a, ortep_shared_prefix *prefix, void *allocation,
                                           size_t allocation_bytes, size_t offset, size_t bytes,
                                           ortep_shared_commit_info *out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_map_prefix: out is NULL");
  *out = (ortep_shared_commit_info){0};
  const ortep_shared_mapping *sm = sm_of(a);
  if (!sm) return no_capability("ortep_allocator_map_prefix", a, "shared mappings");
  if (!prefix || !allocation)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_allocator_map_prefix: the %s is NULL",
                       prefix ? "allocation" : "prefix");
  size_t gran = ortep_allocator_granularity(a);
  if (gran && offset % gran)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_allocator_map_prefix_at: offset %zu is not a whole number of the %s allocator's "
                       "granules (%zu bytes)",
                       offset, ortep_allocator_name(a), gran);
  if (offset > allocation_bytes || bytes > allocation_bytes - offset)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "ortep_allocator_map_prefix_at: %zu bytes at offset %zu lie outside a reservation of %zu bytes",
                       bytes, offset, allocation_bytes);
  return sm->map_prefix(a, prefix, allocation, allocation_bytes, offset, bytes, out);
}

ortep_status ortep_allocator_map_prefix(ortep_allocator *a, ortep_shared_prefix *prefix, void *allocation,
                                        size_t allocation_bytes, ortep_shared_commit_info *out) {
  return ortep_allocator_map_prefix_at(a, prefix, allocation, allocation_bytes, 0, 0, out);
}

void ortep_allocator_destroy_prefix(ortep_allocator *a, ortep_shared_prefix *prefix) {
  const ortep_shared_mapping *sm = sm_of(a);
  if (sm && prefix) sm->destroy_prefix(a, prefix);
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
