/*
 * cuda_pool.c: device memory from a cudaMemPool of ortep's own, stream-ordered.
 *
 * The pool is created for this allocator (cudaMemPoolCreate), not borrowed
 * from the device's default pool: raising the default pool's release
 * threshold or trimming it would change the memory behaviour of every other
 * library in the process that allocates stream-ordered. Its release threshold
 * is "never", so memory freed back to it is retained rather than returned to
 * the driver, and a decode loop that frees and allocates the same sizes never
 * pays cudaMalloc again; destroying the allocator destroys the pool.
 * Allocations are cudaMallocFromPoolAsync on the owning stream; frees are
 * cudaFreeAsync. An allocation while the stream is capturing is refused: a
 * captured graph must not allocate (carve from the arena before capture).
 * The governor's DEVICE tier is charged before and refunded after. Built
 * into the CUDA module (kernels/cuda/module.h), never into the core.
 */
#include <cuda_runtime_api.h>

#include "internal.h"

typedef struct cuda_pool {
  ortep_allocator base;
  int device;
  cudaStream_t stream;
  cudaMemPool_t pool;
  ortep_governor *governor;
  ortep__counters counters;
} cuda_pool;

static ortep_status pool_allocate(ortep_allocator *self, size_t bytes, size_t align, void **out) {
  cuda_pool *p = (cuda_pool *)self;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(p->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone)
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE,
                       "cuda pool: allocation of %zu bytes while a stream capture is open; carve from the arena "
                       "before capture",
                       bytes);
  if (align > 256)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "cuda pool: alignment %zu exceeds the 256 bytes pool allocations guarantee; carve an aligned "
                       "region from an arena instead",
                       align);
  if (p->governor) {
    ortep_status st = ortep_governor_charge(p->governor, ORTEP_TIER_DEVICE, bytes);
    if (st != ORTEP_OK) return st;
  }
  void *ptr = NULL;
  cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes ? bytes : 1, p->pool, p->stream);
  if (e != cudaSuccess) {
    if (p->governor) ortep_governor_refund(p->governor, ORTEP_TIER_DEVICE, bytes);
    char b[32];
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda pool on device %d: %s (%zu bytes) refused: %s", p->device,
                       ortep__format_bytes(bytes, b, sizeof b), bytes, cudaGetErrorString(e));
  }
  ortep__counters_add(&p->counters, bytes);
  *out = ptr;
  return ORTEP_OK;
}

static void pool_deallocate(ortep_allocator *self, void *ptr, size_t bytes, size_t align) {
  cuda_pool *p = (cuda_pool *)self;
  cudaFreeAsync(ptr, p->stream);
  ortep__counters_sub(&p->counters, bytes);
  if (p->governor) ortep_governor_refund(p->governor, ORTEP_TIER_DEVICE, bytes);
}

static ortep_device_key pool_device(const ortep_allocator *self) {
  return ortep_device_key_device((uint32_t)((const cuda_pool *)self)->device);
}

static ortep_status pool_stats(const ortep_allocator *self, ortep_mem_stats *out) {
  ortep__counters_read(&((const cuda_pool *)self)->counters, out);
  return ORTEP_OK;
}

static void pool_destroy(ortep_allocator *self) {
  cuda_pool *p = (cuda_pool *)self;
  cudaStreamSynchronize(p->stream); /* pending frees land before the pool goes */
  cudaMemPoolDestroy(p->pool);
  ortep__free(p);
}

static const ortep_allocator_vtable pool_vtable = {
    .name = "cuda_pool",
    .allocate = pool_allocate,
    .deallocate = pool_deallocate,
    .device = pool_device,
    .stats = pool_stats,
    .destroy = pool_destroy,
};

ortep_status ortep__cuda_pool_create(int device, void *stream, ortep_governor *governor, ortep_allocator **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cuda_pool_allocator_create: out is NULL");
  *out = NULL;
  cuda_pool *p = ortep__calloc(1, sizeof *p);
  if (!p) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cuda pool: no memory for the allocator object");
  struct cudaMemPoolProps props = {0};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool;
  cudaError_t e = cudaMemPoolCreate(&pool, &props);
  if (e != cudaSuccess) {
    ortep__free(p);
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "cuda pool: cannot create a memory pool on device %d: %s (%s)", device,
                       cudaGetErrorString(e), cudaGetErrorName(e));
  }
  uint64_t keep = UINT64_MAX; /* retain freed memory in the pool */
  e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    ortep__free(p);
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "cuda pool: cannot set the release threshold: %s", cudaGetErrorString(e));
  }
  p->base.vtable = &pool_vtable;
  p->device = device;
  p->stream = (cudaStream_t)stream;
  p->pool = pool;
  p->governor = governor;
  *out = &p->base;
  return ORTEP_OK;
}
