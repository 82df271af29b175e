/*
 * cuda_vmm.c: GPU memory with the seeds' lazy virtual backing and shared
 * physical mappings, over the CUDA virtual memory management API (the
 * driver's cuMem* calls), built into the CUDA module (kernels/cuda/module.h).
 * The host twin is virtual_allocator.c; the two keep the same books.
 *
 * A reservation is cuMemAddressReserve'd address space. Committing maps one
 * physical handle per granule (cuMemCreate of the device's minimum
 * granularity, cuMemMap, cuMemSetAccess read-write), zeroes it, and charges
 * the governor's DEVICE tier; decommitting unmaps and releases the granule's
 * handle. Mapping per granule lets any granule go back on its own
 * (cuMemUnmap must cover whole mappings). A shared prefix is one handle
 * holding a copy of the bytes, mapped granule by granule (offsets into the
 * handle) read-only at any granule of any reservation (its first granules,
 * or all of them), as many times as asked; released when the handle and
 * every mapping are gone. Which prefix each shared granule maps is kept as
 * the host twin keeps it (internal.h: ortep__prefix_range).
 *
 * Written and compiled on a machine without a GPU; see docs/api.md for what
 * has run on one.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

enum { G_RESERVED = 0, G_PRIVATE = 1, G_SHARED = 2 };

struct ortep_shared_prefix {
  CUmemGenericAllocationHandle handle;
  size_t len, span;
  size_t refs, mappings;
  const struct vmm_allocator *owner;
};

typedef struct vregion {
  CUdeviceptr base;
  size_t bytes, span;
  uint8_t *state;                       /* G_* per granule */
  CUmemGenericAllocationHandle *handle; /* per private granule */
  size_t private_granules, shared_granules;
  ortep__prefix_range *maps; /* which prefix each shared granule maps */
  struct vregion *next;
} vregion;

typedef struct vmm_allocator {
  ortep_allocator base;
  ortep_virtual_backing vb;
  int device;
  size_t gran;
  CUmemAllocationProp prop;
  ortep_governor *governor;
  pthread_mutex_t lock;
  vregion *regions;
  ortep__counters counters;
} vmm_allocator;

/* The driver's entry points, found through the runtime
 * (cudaGetDriverEntryPointByVersion) rather than linked: the module then
 * needs no libcuda.so at load time, as before. */
static struct {
  __typeof__(&cuGetErrorName) GetErrorName;
  __typeof__(&cuGetErrorString) GetErrorString;
  __typeof__(&cuMemSetAccess) MemSetAccess;
  __typeof__(&cuMemAddressReserve) MemAddressReserve;
  __typeof__(&cuMemUnmap) MemUnmap;
  __typeof__(&cuMemRelease) MemRelease;
  __typeof__(&cuMemCreate) MemCreate;
  __typeof__(&cuMemMap) MemMap;
  __typeof__(&cuMemAddressFree) MemAddressFree;
  __typeof__(&cuDeviceGet) DeviceGet;
  __typeof__(&cuDeviceGetAttribute) DeviceGetAttribute;
  __typeof__(&cuMemGetAllocationGranularity) MemGetAllocationGranularity;
} D;
static pthread_once_t d_once = PTHREAD_ONCE_INIT;
static bool d_ok;
static void load_driver(void) {
  bool ok = true;
#define GET(name)                                                                                                      \
  ok =                                                                                                                 \
      ok &&                                                                                                            \
      cudaGetDriverEntryPointByVersion("cu" #name, (void **)&D.name, 12000, cudaEnableDefault, NULL) == cudaSuccess && \
      D.name
  GET(GetErrorName);
  GET(GetErrorString);
  GET(MemSetAccess);
  GET(MemAddressReserve);
  GET(MemUnmap);
  GET(MemRelease);
  GET(MemCreate);
  GET(MemMap);
  GET(MemAddressFree);
  GET(DeviceGet);
  GET(DeviceGetAttribute);
  GET(MemGetAllocationGranularity);
#undef GET
  d_ok = ok;
}

static ortep_status rt_fail(cudaError_t e, const char *what, size_t bytes) {
  char b[32];
  return ortep__fail(e == cudaErrorMemoryAllocation ? ORTEP_E_OUT_OF_MEMORY : ORTEP_E_DEVICE_ERROR,
                     "cuda virtual allocator: %s (%s) failed: %s", what, ortep__format_bytes(bytes, b, sizeof b),
                     cudaGetErrorString(e));
}

static ortep_status cu_fail(CUresult r, const char *what, size_t bytes) {
  const char *name = NULL, *msg = NULL;
  D.GetErrorName(r, &name);
  D.GetErrorString(r, &msg);
  char b[32];
  return ortep__fail(r == CUDA_ERROR_OUT_OF_MEMORY ? ORTEP_E_OUT_OF_MEMORY : ORTEP_E_DEVICE_ERROR,
                     "cuda virtual allocator: %s (%s) failed: %s (%s)", what, ortep__format_bytes(bytes, b, sizeof b),
                     msg ? msg : "?", name ? name : "?");
}

static ortep_status charge(vmm_allocator *v, uint64_t bytes) {
  return v->governor && bytes ? ortep_governor_charge(v->governor, ORTEP_TIER_DEVICE, bytes) : ORTEP_OK;
}
static void refund(vmm_allocator *v, uint64_t bytes) {
  if (v->governor && bytes) ortep_governor_refund(v->governor, ORTEP_TIER_DEVICE, bytes);
}

static vregion *find(vmm_allocator *v, const void *base) {
  for (vregion *r = v->regions; r; r = r->next)
    if ((void *)(uintptr_t)r->base == base) return r;
  return NULL;
}

static ortep_status lookup(vmm_allocator *v, const void *base, const char *call, vregion **out) {
  if ((*out = find(v, base))) return ORTEP_OK;
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda virtual allocator: %s: %p is not a reservation of this allocator",
                     call, base);
}

static ortep_status set_access(vmm_allocator *v, CUdeviceptr at, size_t bytes, bool writable) {
  CUmemAccessDesc d = {0};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = v->device;
  d.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  CUresult r = D.MemSetAccess(at, bytes, &d, 1);
  return r == CUDA_SUCCESS ? ORTEP_OK : cu_fail(r, "cuMemSetAccess", bytes);
}

static ortep_status reserve_locked(vmm_allocator *v, size_t bytes, size_t align, vregion **out) {
  size_t span = bytes ? (bytes + v->gran - 1) / v->gran * v->gran : v->gran;
  if (span < bytes) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda virtual allocator: %zu bytes overflow", bytes);
  size_t n = span / v->gran;
  vregion *r = ortep__calloc(1, sizeof *r);
  uint8_t *state = ortep__calloc(n, 1);
  CUmemGenericAllocationHandle *h = ortep__calloc(n, sizeof *h);
  if (!r || !state || !h) {
    ortep__free(r), ortep__free(state), ortep__free(h);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda virtual allocator: no memory for a reservation's granule map");
  }
  CUdeviceptr base = 0;
  CUresult e = D.MemAddressReserve(&base, span, align > v->gran ? align : 0, 0, 0);
  if (e != CUDA_SUCCESS) {
    ortep__free(r), ortep__free(state), ortep__free(h);
    return cu_fail(e, "cuMemAddressReserve", span);
  }
  *r = (vregion){.base = base, .bytes = bytes, .span = span, .state = state, .handle = h, .next = v->regions};
  v->regions = r;
  *out = r;
  return ORTEP_OK;
}

static void unmap_granule(vmm_allocator *v, vregion *r, size_t g) {
  D.MemUnmap(r->base + g * v->gran, v->gran);
  if (r->state[g] == G_PRIVATE) D.MemRelease(r->handle[g]);
  r->handle[g] = 0;
  r->state[g] = G_RESERVED;
}

static void prefix_unref(vmm_allocator *v, ortep_shared_prefix *p, uint64_t *released) {
  if (--p->refs) return;
  D.MemRelease(p->handle);
  refund(v, p->span);
  ortep__counters_sub(&v->counters, p->span);
  if (released) *released += p->span;
  ortep__free(p);
}

/* One granule: a handle, mapped read-write and zeroed. */
static ortep_status commit_granule(vmm_allocator *v, vregion *r, size_t g) {
  CUdeviceptr at = r->base + g * v->gran;
  CUmemGenericAllocationHandle h;
  CUresult e = D.MemCreate(&h, v->gran, &v->prop, 0);
  if (e != CUDA_SUCCESS) return cu_fail(e, "cuMemCreate", v->gran);
  if ((e = D.MemMap(at, v->gran, 0, h, 0)) != CUDA_SUCCESS) {
    D.MemRelease(h);
    return cu_fail(e, "cuMemMap", v->gran);
  }
  ortep_status st = set_access(v, at, v->gran, true);
  cudaError_t ce = st == ORTEP_OK ? cudaMemset((void *)(uintptr_t)at, 0, v->gran) : cudaSuccess;
  if (ce != cudaSuccess) st = rt_fail(ce, "zeroing a committed granule", v->gran);
  if (st != ORTEP_OK) {
    D.MemUnmap(at, v->gran);
    D.MemRelease(h);
    return st;
  }
  r->handle[g] = h;
  r->state[g] = G_PRIVATE;
  return ORTEP_OK;
}

static ortep_status commit_locked(vmm_allocator *v, vregion *r, size_t g0, size_t g1, uint64_t *newly) {
  size_t add = 0;
  for (size_t g = g0; g < g1; g++) {
    if (r->state[g] == G_SHARED)
      return ortep__fail(ORTEP_E_STATE,
                         "cuda virtual allocator: granule %zu of the range holds a shared read-only prefix; decommit "
                         "it before committing private memory there",
                         g);
    add += r->state[g] == G_RESERVED;
  }
  ortep_status st = charge(v, (uint64_t)add * v->gran);
  if (st != ORTEP_OK) return st;
  uint8_t *was = ortep__malloc(g1 - g0 ? g1 - g0 : 1);
  if (!was) {
    refund(v, (uint64_t)add * v->gran);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda virtual allocator: no memory to commit");
  }
  memcpy(was, r->state + g0, g1 - g0);
  for (size_t g = g0; g < g1 && st == ORTEP_OK; g++)
    if (r->state[g] == G_RESERVED) st = commit_granule(v, r, g);
  if (st != ORTEP_OK) { /* undo this call's granules: nothing changed */
    for (size_t g = g0; g < g1; g++)
      if (was[g - g0] == G_RESERVED && r->state[g] == G_PRIVATE) unmap_granule(v, r, g);
    refund(v, (uint64_t)add * v->gran);
  } else {
    r->private_granules += add;
    if (add) ortep__counters_add(&v->counters, (uint64_t)add * v->gran);
    if (add) cudaDeviceSynchronize(); /* the zeroing is done before anything reads the granules */
    *newly = (uint64_t)add * v->gran;
  }
  ortep__free(was);
  return st;
}

static void decommit_locked(vmm_allocator *v, vregion *r, size_t g0, size_t g1, uint64_t *released) {
  size_t priv = 0, shared = 0;
  for (size_t g = g0; g < g1; g++) {
    if (r->state[g] == G_RESERVED) continue;
    priv += r->state[g] == G_PRIVATE;
    ortep_shared_prefix *gone = NULL;
    if (r->state[g] == G_SHARED) shared++, gone = ortep__prefix_range_drop(&r->maps, g);
    unmap_granule(v, r, g);
    if (gone) prefix_unref(v, gone, released);
  }
  r->private_granules -= priv;
  r->shared_granules -= shared;
  if (priv) {
    refund(v, (uint64_t)priv * v->gran);
    ortep__counters_sub(&v->counters, (uint64_t)priv * v->gran);
    *released += (uint64_t)priv * v->gran;
  }
}

static void granule_span(const vmm_allocator *v, const ortep_commit_range *c, size_t *g0, size_t *g1) {
  *g0 = c->offset / v->gran;
  *g1 = (c->offset + c->bytes + v->gran - 1) / v->gran;
}

/* --- the vtable ------------------------------------------------------------------ */
static ortep_status vmm_reserve(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  vregion *r;
  pthread_mutex_lock(&v->lock);
  ortep_status st = reserve_locked(v, bytes, align, &r);
  pthread_mutex_unlock(&v->lock);
  if (st == ORTEP_OK) *out = (void *)(uintptr_t)r->base;
  return st;
}

/* A commit or decommit of the granules the range touches, under the lock. */
static ortep_status vmm_range(ortep_allocator *self, const ortep_commit_range *c, uint64_t *bytes, bool commit) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  size_t g0, g1;
  granule_span(v, c, &g0, &g1);
  pthread_mutex_lock(&v->lock);
  vregion *r;
  ortep_status st = lookup(v, c->ptr, commit ? "commit" : "decommit", &r);
  if (st == ORTEP_OK && commit) st = commit_locked(v, r, g0, g1, bytes);
  if (st == ORTEP_OK && !commit) decommit_locked(v, r, g0, g1, bytes);
  pthread_mutex_unlock(&v->lock);
  return st;
}
static ortep_status vmm_commit(ortep_allocator *self, const ortep_commit_range *c, uint64_t *newly) {
  return vmm_range(self, c, newly, true);
}
static ortep_status vmm_decommit(ortep_allocator *self, const ortep_commit_range *c, uint64_t *released) {
  return vmm_range(self, c, released, false);
}

static void drop_region(vmm_allocator *v, vregion *r) {
  vregion **at = &v->regions;
  while (*at != r) at = &(*at)->next;
  *at = r->next;
  D.MemAddressFree(r->base, r->span);
  ortep__free(r->state), ortep__free(r->handle), ortep__free(r);
}

static ortep_status vmm_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  vregion *r;
  uint64_t newly = 0;
  pthread_mutex_lock(&v->lock);
  ortep_status st = reserve_locked(v, bytes, align, &r);
  if (st == ORTEP_OK && (st = commit_locked(v, r, 0, r->span / v->gran, &newly)) != ORTEP_OK) drop_region(v, r);
  pthread_mutex_unlock(&v->lock);
  if (st == ORTEP_OK) *out = (void *)(uintptr_t)r->base;
  return st;
}

static ortep_release_outcome vmm_release(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  pthread_mutex_lock(&v->lock);
  vregion *r = find(v, ptr);
  if (!r) {
    pthread_mutex_unlock(&v->lock);
    ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda virtual allocator: release of %p, which it did not hand out", ptr);
    return (ortep_release_outcome){ORTEP_RELEASE_FAILED, bytes, 0, 0};
  }
  cudaDeviceSynchronize(); /* no kernel may still read what goes away */
  uint64_t mapped = (uint64_t)(r->private_granules + r->shared_granules) * v->gran, released = 0;
  decommit_locked(v, r, 0, r->span / v->gran, &released);
  drop_region(v, r);
  pthread_mutex_unlock(&v->lock);
  return (ortep_release_outcome){ORTEP_RELEASE_COMPLETE, bytes, mapped, 0};
}

static void vmm_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  (void)vmm_release(self, ptr, bytes, align);
}

static ortep_status vmm_create_prefix(ortep_allocator *self, const void *bytes, size_t len, ortep_shared_prefix **out) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  size_t span = (len + v->gran - 1) / v->gran * v->gran;
  ortep_status st = charge(v, span);
  if (st != ORTEP_OK) return st;
  ortep_shared_prefix *p = ortep__calloc(1, sizeof *p);
  if (!p) {
    refund(v, span);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda virtual allocator: no memory for a prefix handle");
  }
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr tmp = 0;
  CUresult e = D.MemCreate(&h, span, &v->prop, 0);
  if (e != CUDA_SUCCESS) {
    h = 0;
    st = cu_fail(e, "cuMemCreate (a shared prefix)", span);
  } else if ((e = D.MemAddressReserve(&tmp, span, 0, 0, 0)) != CUDA_SUCCESS) {
    st = cu_fail(e, "cuMemAddressReserve (a shared prefix)", span);
  } else if ((e = D.MemMap(tmp, span, 0, h, 0)) != CUDA_SUCCESS) {
    st = cu_fail(e, "cuMemMap (a shared prefix)", span);
  } else {
    /* the copy goes through a temporary read-write mapping, unmapped after */
    st = set_access(v, tmp, span, true);
    cudaError_t ce =
        st == ORTEP_OK ? cudaMemcpy((void *)(uintptr_t)tmp, bytes, len, cudaMemcpyDeviceToDevice) : cudaSuccess;
    if (ce != cudaSuccess) st = rt_fail(ce, "copying a shared prefix", len);
    D.MemUnmap(tmp, span);
  }
  if (tmp) D.MemAddressFree(tmp, span);
  if (st != ORTEP_OK) {
    if (h) D.MemRelease(h);
    ortep__free(p);
    refund(v, span);
    return st;
  }
  *p = (ortep_shared_prefix){.handle = h, .len = len, .span = span, .refs = 1, .owner = v};
  ortep__counters_add(&v->counters, span);
  *out = p;
  return ORTEP_OK;
}

static ortep_status vmm_map_prefix(ortep_allocator *self, ortep_shared_prefix *p, void *allocation,
                                   size_t allocation_bytes, size_t offset, size_t bytes,
                                   ortep_shared_commit_info *out) {
  vmm_allocator *v = (vmm_allocator *)self;
  cudaSetDevice(v->device); /* the calling thread may have another current */
  if (p->owner != v)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda virtual allocator: the prefix belongs to another allocator");
  size_t n = bytes ? (bytes + v->gran - 1) / v->gran : p->span / v->gran, g0 = offset / v->gran;
  if (n * v->gran > p->span)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "cuda virtual allocator: %zu bytes of a prefix that holds %zu were asked to be mapped", bytes,
                       p->len);
  ortep__prefix_range *m = ortep__calloc(1, sizeof *m);
  if (!m) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda virtual allocator: no memory for a prefix mapping");
  pthread_mutex_lock(&v->lock);
  vregion *r;
  ortep_status st = lookup(v, allocation, "map_prefix", &r);
  if (st == ORTEP_OK && (allocation_bytes != r->bytes || g0 + n > r->span / v->gran))
    st = ortep__fail(ORTEP_E_OUT_OF_RANGE,
                     "cuda virtual allocator: %zu bytes of a prefix at offset %zu do not fit a reservation of %zu "
                     "bytes (or the size given, %zu, is not the reservation's)",
                     n * v->gran, offset, r->bytes, allocation_bytes);
  if (st == ORTEP_OK) {
    uint64_t released = 0;
    p->refs++;               /* the new range's, held first: these very granules may be its last mapping so far */
    cudaDeviceSynchronize(); /* what the granules held may still be read */
    decommit_locked(v, r, g0, g0 + n, &released);
    for (size_t i = 0; i < n && st == ORTEP_OK; i++) {
      CUdeviceptr at = r->base + (g0 + i) * v->gran;
      CUresult e = D.MemMap(at, v->gran, i * v->gran, p->handle, 0);
      if (e != CUDA_SUCCESS) {
        st = cu_fail(e, "cuMemMap (a shared prefix)", v->gran);
        break;
      }
      st = set_access(v, at, v->gran, false);
      r->state[g0 + i] = G_SHARED; /* mapped: unmapped by the undo below if need be */
    }
    if (st != ORTEP_OK) {
      for (size_t g = g0; g < g0 + n; g++)
        if (r->state[g] == G_SHARED) unmap_granule(v, r, g);
      out->released_bytes = released;
      prefix_unref(v, p, NULL);
    } else {
      r->shared_granules += n;
      *m = (ortep__prefix_range){p, g0, n, n, r->maps};
      r->maps = m, m = NULL;
      *out = (ortep_shared_commit_info){p->mappings++ ? 0 : p->span, n * v->gran, released, n};
    }
  }
  pthread_mutex_unlock(&v->lock);
  ortep__free(m);
  return st;
}

static void vmm_destroy_prefix(ortep_allocator *self, ortep_shared_prefix *p) {
  vmm_allocator *v = (vmm_allocator *)self;
  pthread_mutex_lock(&v->lock);
  prefix_unref(v, p, NULL);
  pthread_mutex_unlock(&v->lock);
}

static const ortep_shared_mapping vmm_sm = {vmm_create_prefix, vmm_map_prefix, vmm_destroy_prefix};
static const ortep_shared_mapping *vmm_get_sm(ortep_allocator *self) { return &vmm_sm; }
static const ortep_virtual_backing *vmm_get_vb(ortep_allocator *self) { return &((vmm_allocator *)self)->vb; }
static ortep_device_key vmm_device(const ortep_allocator *self) {
  return ortep_device_key_device((uint32_t)((const vmm_allocator *)self)->device);
}
static bool vmm_commits_on_demand(const ortep_allocator *self) { return ((const vmm_allocator *)self)->governor; }
static ortep_status vmm_stats(const ortep_allocator *self, ortep_mem_stats *out) {
  ortep__counters_read(&((const vmm_allocator *)self)->counters, out);
  return ORTEP_OK;
}
static void vmm_destroy(ortep_allocator *self) {
  vmm_allocator *v = (vmm_allocator *)self;
  pthread_mutex_destroy(&v->lock);
  ortep__free(v);
}

static const ortep_allocator_vtable vmm_vtable = {
    .name = "cuda_virtual",
    .allocate = vmm_allocate,
    .deallocate = vmm_deallocate,
    .device = vmm_device,
    .release = vmm_release,
    .commits_on_demand = vmm_commits_on_demand,
    .virtual_backing = vmm_get_vb,
    .shared_mapping = vmm_get_sm,
    .stats = vmm_stats,
    .destroy = vmm_destroy,
};

ortep_status ortep__cuda_vmm_create(int device, ortep_governor *governor, ortep_allocator **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cuda_virtual_allocator_create: out is NULL");
  *out = NULL;
  /* the runtime's primary context, which the CUDA EP's streams use too */
  cudaError_t ce = cudaSetDevice(device);
  if (ce == cudaSuccess) ce = cudaFree(0);
  if (ce != cudaSuccess)
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "cuda virtual allocator: device %d: %s", device, cudaGetErrorString(ce));
  pthread_once(&d_once, load_driver);
  if (!d_ok)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "cuda virtual allocator: the driver lacks the virtual memory API (cuMemCreate, cuMemMap, ...)");
  CUdevice dev;
  int vmm = 0;
  CUresult e = D.DeviceGet(&dev, device);
  if (e == CUDA_SUCCESS) e = D.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  if (e != CUDA_SUCCESS) return cu_fail(e, "querying the device", 0);
  if (!vmm)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "cuda virtual allocator: device %d has no virtual memory management (cuMemCreate/cuMemMap)",
                       device);
  vmm_allocator *v = ortep__calloc(1, sizeof *v);
  if (!v) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda virtual allocator: no memory for the allocator");
  v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  v->prop.location.id = device;
  if ((e = D.MemGetAllocationGranularity(&v->gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS) {
    ortep__free(v);
    return cu_fail(e, "cuMemGetAllocationGranularity", 0);
  }
  v->base.vtable = &vmm_vtable;
  v->device = device;
  v->governor = governor;
  v->vb = (ortep_virtual_backing){v->gran, vmm_reserve, vmm_commit, vmm_decommit};
  pthread_mutex_init(&v->lock, NULL);
  *out = &v->base;
  return ORTEP_OK;
}
