/*
 * cuda_ep.h: the CUDA execution provider ("cuda_ep"), built when the CUDA
 * Toolkit is found; every call exists in every build and returns
 * ORTEP_E_NOT_SUPPORTED (with the reason) in a build without CUDA.
 *
 * Memory: activations and the cuBLAS workspace come from a cudaMemPool
 * (ortep_cuda_pool_allocator_create) on the EP's own stream and are carved
 * before any capture; a decoder's KV caches from the CUDA virtual allocator
 * (allocator.h: reserved whole, committed as positions are held); pinned host memory stages small copies,
 * including the 8-byte per-step (token, error word) result. Kernels: the same
 * op set and semantics as the CPU EP (kernels/opset.c), f16/bf16 weights with
 * f32 accumulation; matrix products through cuBLAS (cublasGemmEx) on the
 * pre-carved workspace. Device graphs: each segment is captured with
 * cudaStreamBeginCapture (thread-local mode) and instantiated; replay
 * launches the executable graphs in order. The error word is a device u32
 * the kernels atomicOr into.
 *
 * Options: cuda.device_id = N (default 0), cuda.workspace_bytes (default 32M),
 * cuda.pdl = auto (default: programmatic dependent launch where the device
 * and the build allow it, ortep_cuda_device_info.programmatic_launch) or off.
 */
#ifndef ORTEP_CUDA_EP_H
#define ORTEP_CUDA_EP_H

#include "ortep/ep.h"
#include "ortep/governor.h"

ORTEP_BEGIN_DECLS

/* Creates the CUDA EP (uninitialised); governor may be NULL. Initialising it
 * fails with ORTEP_E_NO_DEVICE, carrying the CUDA error string, when no
 * device or driver is present. */
ORTEP_API ortep_status ortep_cuda_ep_create(ortep_governor *governor, ortep_ep **out);
/* Whether a CUDA device is usable now; when not, why (into why, may be NULL). */
ORTEP_API bool ortep_cuda_available(char *why, size_t len);

/* What a benchmark report says about a GPU. */
typedef struct ortep_cuda_device_info {
  char name[256];
  uint64_t memory_bytes;
  int multiprocessors;
  int compute_major, compute_minor;
  int driver_version, runtime_version; /* as CUDA encodes them: 13000 = 13.0 */
  bool conditional_nodes;              /* device loops (K tokens per launch): CUDA 12.4 runtime and driver */
  bool programmatic_launch;            /* kernels launched to overlap the one before (compute 9.0, sm_90 build) */
} ortep_cuda_device_info;
/* Describes device `device`; ORTEP_E_NO_DEVICE when there is none (or no
 * driver), ORTEP_E_NOT_SUPPORTED in a build without CUDA. */
ORTEP_API ortep_status ortep_cuda_device_info_get(int device, ortep_cuda_device_info *out);

ORTEP_END_DECLS

#endif
