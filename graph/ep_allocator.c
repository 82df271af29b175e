/*
 * ep_allocator.c: the allocator contract over an EP. The executor plans
 * memory per EP and asks the memory layer for a planned arena; this adapter
 * is how that arena's one block comes from the EP (host memory on the CPU,
 * the cudaMallocAsync pool on a GPU).
 */
#include <string.h>

#include "internal.h"

typedef struct ep_allocator {
  ortep_allocator base;
  ortep_ep *ep;
} ep_allocator;

static ortep_status epa_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  ortep_buffer b;
  ortep_status st = ortep_ep_allocate(((ep_allocator *)self)->ep, bytes, align, &b);
  if (st == ORTEP_OK) *out = ortep_buffer_release(&b);
  return st;
}

static void epa_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  ortep_ep *ep = ((ep_allocator *)self)->ep;
  ortep_buffer b = {ptr, bytes, align, ortep_ep_device(ep), ORTEP_BUFFER_OWNED};
  ortep_ep_deallocate(ep, &b);
}

static ortep_device_key epa_device(const ortep_allocator *self) {
  ortep_device d = ortep_ep_device(((const ep_allocator *)self)->ep);
  return (ortep_device_key){ortep_device_tier(d), d.index};
}

static void epa_destroy(ortep_allocator *self) { ortep__free(self); }

static const ortep_allocator_vtable epa_vtable = {
    .name = "ep", .allocate = epa_allocate, .deallocate = epa_deallocate, .device = epa_device, .destroy = epa_destroy};

ortep_status ortep__ep_allocator_create(ortep_ep *ep, ortep_allocator **out) {
  ep_allocator *a = ortep__calloc(1, sizeof *a);
  if (!a) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "session: no memory for an EP allocator");
  a->base.vtable = &epa_vtable;
  a->ep = ep;
  *out = &a->base;
  return ORTEP_OK;
}
