/*
 * ep.c: the CUDA execution provider (cuda_ep.h).
 *
 * Everything a step needs is made at initialize or at kernel creation: the
 * stream, the cuBLAS handle and its workspace, the device error word, a
 * pinned staging buffer, the attention scratch (one for all kernels), each
 * GEMM's conversion scratch; the sampler's scratch at its first call (a
 * warm-up, outside any capture). Kernel launches go to the
 * EP's stream; while a capture is open they are recorded into the stream's
 * graph instead of running. A segment is one cudaGraphExec_t.
 *
 * Built into libortep_cuda.so, the module the core loads on demand
 * (module.h); the device suite (tests/test_cuda_device.c) and
 * bench/device-check.sh exercise it on a machine with a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/internal.h"
#include "kernels/opset.h"
#include "kernels/sampling.h"
#include "module.h"
#include "ops.h"
#include "ortep/cuda_ep.h"

#define CUDA_EP_NAME  "cuda_ep"
#define CUDA_OP_COST  10 /* preferred over the CPU EP's 100 */
#define STAGING_BYTES ((size_t)1 << 20)
#define DOWN_BYTES    ((size_t)64 << 10)
#define UP_BYTES      (STAGING_BYTES - DOWN_BYTES)

typedef struct cuda_ep {
  ortep_ep base;
  ortep_governor *governor;
  bool initialized;
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  ortep_allocator *pool;
  void *workspace;
  size_t workspace_bytes;
  uint32_t *err;        /* device */
  void *argmax_scratch; /* device: the argmax's per-block partial results */
  /* Device scratch shared by the kernels that need a large one for the
   * length of one launch sequence: attention's scores, and a quantized
   * chunk Linear's weights widened to f32 (they run one after another on
   * the one stream). Grown when a kernel is created, never during a step. A
   * grown-out buffer may still be named by a captured graph, so it is kept
   * until the EP releases everything. */
  void *shared;
  size_t shared_bytes;
  void *sample_scratch; /* the sampler's ORTEP__SAMPLE_SCRATCH_BYTES(vocabulary), from its first call */
  size_t sample_bytes;
  void **old_shared;
  size_t *old_shared_bytes;
  size_t n_old_shared, old_shared_cap, old_bytes_cap;
  void *staging; /* pinned host: [0, DOWN_BYTES) downloads, the rest upload slices */
  size_t staged; /* upload bytes staged since the last stream sync */
  uint64_t allocations, frees, fences;
  bool capturing;
  cudaGraphExec_t *segments;
  /* Executables of an earlier capture, kept after a reset only as targets
   * for cudaGraphExecUpdate when segment i is captured again: never
   * launched, so the buffers they name may have moved. */
  cudaGraphExec_t *retired;
  size_t n_segments, n_retired, segments_cap, retired_cap;
  /* Per live segment: its graph, kept for a device loop built from it on
   * first use (replay_segment_while: the graph inside a WHILE node). */
  cudaGraph_t *graphs;
  ortep__cu_loop *loops;
  size_t graphs_cap, loops_cap;
  uint32_t *loop_counter; /* device: the running loop's iterations and bound (ops.h) */
  bool loops_ok;          /* runtime and driver have conditional nodes (CUDA 12.4) */
  bool pdl_off;           /* cuda.pdl = off */
  size_t kernel_nodes;    /* kernel nodes of the live segments' graphs */
  uint64_t instantiations, updates;
} cuda_ep;

/* kernels.cu's dtype codes */
_Static_assert(ORTEP_DTYPE_F32 == 0 && ORTEP_DTYPE_F16 == 1 && ORTEP_DTYPE_BF16 == 2 && ORTEP_DTYPE_Q8_0 == 7 &&
                   ORTEP_DTYPE_Q4_0 == 8,
               "kernels.cu's DT_* must follow ortep_dtype");

static cuda_ep *self_of(ortep_ep *ep) { return (cuda_ep *)ep; }
static const cuda_ep *cself_of(const ortep_ep *ep) { return (const cuda_ep *)ep; }

static ortep_status cuda_fail(cudaError_t e, const char *what) {
  return ortep__fail(
      e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? ORTEP_E_NO_DEVICE : ORTEP_E_DEVICE_ERROR,
      "%s: %s: %s (%s)", CUDA_EP_NAME, what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CU(call, what)                                 \
  do {                                                 \
    cudaError_t e_ = (call);                           \
    if (e_ != cudaSuccess) return cuda_fail(e_, what); \
  } while (0)

static bool conditional_nodes(void);
static bool pdl_usable(int device);

bool ortep__cuda_available(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return true;
  if (why && len)
    snprintf(why, len, "no CUDA device: %s", e == cudaSuccess ? "the driver reports 0 devices" : cudaGetErrorString(e));
  cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
  return false;
}

ortep_status ortep__cuda_device_info(int device, ortep_cuda_device_info *out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cuda_device_info_get: out is NULL");
  memset(out, 0, sizeof *out);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || device < 0 || device >= n) {
    if (e != cudaSuccess) cudaGetLastError();
    return ortep__fail(ORTEP_E_NO_DEVICE, "%s: no CUDA device %d (%d present%s%s)", CUDA_EP_NAME, device, n,
                       e != cudaSuccess ? ": " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
  }
  struct cudaDeviceProp p;
  CU(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->memory_bytes = p.totalGlobalMem;
  out->multiprocessors = p.multiProcessorCount;
  out->compute_major = p.major, out->compute_minor = p.minor;
  CU(cudaDriverGetVersion(&out->driver_version), "cudaDriverGetVersion");
  CU(cudaRuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion");
  out->conditional_nodes = conditional_nodes();
  out->programmatic_launch = pdl_usable(device);
  return ORTEP_OK;
}

static ortep_status need_init(const cuda_ep *e, const char *what) {
  if (!e->initialized)
    return ortep__fail(ORTEP_E_STATE, "%s: %s before ortep_ep_initialize; initialise the EP first", CUDA_EP_NAME, what);
  return ORTEP_OK;
}

static void release_all(cuda_ep *e);
static void init_loops(cuda_ep *e);

/* The EP's options: cuda.device_id, cuda.workspace_bytes, cuda.pdl. */
static ortep_status cuda_options(const ortep_config *config, long *dev, long *ws, bool *pdl_off) {
  *dev = 0, *ws = 32l << 20, *pdl_off = false;
  const char *v = ortep_config_get(config, "cuda.device_id");
  if (v) {
    char *end;
    *dev = strtol(v, &end, 10);
    if (*end || end == v || *dev < 0 || *dev > 1024)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda.device_id = '%s': use a device index (0, 1, ...)", v);
  }
  if ((v = ortep_config_get(config, "cuda.workspace_bytes"))) {
    char *end;
    *ws = strtol(v, &end, 10);
    if (*end || end == v || *ws < 0)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda.workspace_bytes = '%s': use a byte count", v);
  }
  const char *pdl = ortep_config_get(config, "cuda.pdl");
  if (pdl && strcmp(pdl, "auto") && strcmp(pdl, "off"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cuda.pdl = '%s': use auto (the default) or off", pdl);
  *pdl_off = pdl && !strcmp(pdl, "off");
  return ORTEP_OK;
}

static ortep_status cuda_initialize(ortep_ep *ep, const ortep_config *config) {
  cuda_ep *e = self_of(ep);
  static const char *const known[] = {"cuda.device_id", "cuda.workspace_bytes", "cuda.pdl"};
  ortep_status st = ortep_config_check_namespace(config, "cuda", known, 3);
  if (st != ORTEP_OK) return st;
  if (e->initialized) return ORTEP_OK;
  long dev, ws;
  bool pdl_off;
  if ((st = cuda_options(config, &dev, &ws, &pdl_off)) != ORTEP_OK) return st;
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    return ortep__fail(ORTEP_E_NO_DEVICE, "%s: no usable CUDA device or driver: %s (%s); use the CPU EP", CUDA_EP_NAME,
                       cudaGetErrorString(ce), cudaGetErrorName(ce));
  }
  if (dev >= count)
    return ortep__fail(ORTEP_E_NO_DEVICE, "%s: cuda.device_id %ld but %d device(s) present", CUDA_EP_NAME, dev, count);
  e->pdl_off = pdl_off;
  e->device = (int)dev;
  e->base.device = ortep_device_cuda((uint32_t)dev);
  CU(cudaSetDevice(e->device), "cudaSetDevice");
  CU(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if ((st = ortep__cuda_pool_create(e->device, e->stream, e->governor, &e->pool)) != ORTEP_OK) {
    release_all(e);
    return st;
  }
  if (cublasCreate(&e->blas) != CUBLAS_STATUS_SUCCESS) {
    release_all(e);
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasCreate failed", CUDA_EP_NAME);
  }
  cublasStatus_t bs = cublasSetStream(e->blas, e->stream);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    release_all(e);
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasSetStream failed (status %d)", CUDA_EP_NAME, (int)bs);
  }
  e->workspace_bytes = (size_t)ws;
  if (ws && (st = ortep_allocator_allocate(e->pool, e->workspace_bytes, 256, &e->workspace)) != ORTEP_OK) {
    release_all(e);
    return ortep__wrap(st, "%s: the cuBLAS workspace", CUDA_EP_NAME);
  }
  if (ws && (bs = cublasSetWorkspace(e->blas, e->workspace, e->workspace_bytes)) != CUBLAS_STATUS_SUCCESS) {
    release_all(e);
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasSetWorkspace of %zu bytes failed (status %d)", CUDA_EP_NAME,
                       e->workspace_bytes, (int)bs);
  }
  void *errp = NULL;
  if ((st = ortep_allocator_allocate(e->pool, 256, 256, &errp)) != ORTEP_OK) {
    release_all(e);
    return ortep__wrap(st, "%s: the error word", CUDA_EP_NAME);
  }
  e->err = errp;
  if ((st = ortep_allocator_allocate(e->pool, ortep__cu_argmax_scratch_bytes(), 256, &e->argmax_scratch)) != ORTEP_OK) {
    release_all(e);
    return ortep__wrap(st, "%s: the argmax scratch", CUDA_EP_NAME);
  }
  cudaError_t r = cudaMemsetAsync(e->err, 0, sizeof *e->err, e->stream);
  if (r == cudaSuccess) r = cudaHostAlloc(&e->staging, STAGING_BYTES, cudaHostAllocDefault);
  if (r == cudaSuccess) r = cudaStreamSynchronize(e->stream);
  if (r != cudaSuccess) {
    release_all(e);
    return cuda_fail(r, "initialising");
  }
  init_loops(e);
  e->initialized = true;
  return ORTEP_OK;
}

/* The live segments' graphs and device loops. */
static void drop_loops(cuda_ep *e) {
  for (size_t i = 0; i < e->n_segments; i++) {
    ortep__cu_loop_release(&e->loops[i]);
    cudaGraphDestroy(e->graphs[i]);
    e->graphs[i] = NULL;
  }
}

static void free_segments(cuda_ep *e) {
  drop_loops(e);
  for (size_t i = 0; i < e->n_segments; i++) cudaGraphExecDestroy(e->segments[i]);
  for (size_t i = 0; i < e->n_retired; i++)
    if (e->retired[i]) cudaGraphExecDestroy(e->retired[i]);
  e->n_segments = e->n_retired = 0;
}

static void release_all(cuda_ep *e) {
  if (e->stream) cudaStreamSynchronize(e->stream);
  free_segments(e);
  if (e->shared) ortep_allocator_deallocate(e->pool, e->shared, e->shared_bytes, 256);
  if (e->sample_scratch) ortep_allocator_deallocate(e->pool, e->sample_scratch, e->sample_bytes, 256);
  e->sample_scratch = NULL, e->sample_bytes = 0;
  for (size_t i = 0; i < e->n_old_shared; i++)
    ortep_allocator_deallocate(e->pool, e->old_shared[i], e->old_shared_bytes[i], 256);
  e->shared = NULL, e->shared_bytes = 0, e->n_old_shared = 0;
  if (e->err) ortep_allocator_deallocate(e->pool, e->err, 256, 256);
  if (e->loop_counter) ortep_allocator_deallocate(e->pool, e->loop_counter, 256, 256);
  e->loop_counter = NULL;
  if (e->argmax_scratch) ortep_allocator_deallocate(e->pool, e->argmax_scratch, ortep__cu_argmax_scratch_bytes(), 256);
  if (e->workspace) ortep_allocator_deallocate(e->pool, e->workspace, e->workspace_bytes, 256);
  if (e->blas) cublasDestroy(e->blas);
  if (e->staging) cudaFreeHost(e->staging);
  ortep_allocator_destroy(e->pool);
  if (e->stream) cudaStreamDestroy(e->stream);
  e->err = NULL, e->argmax_scratch = NULL, e->workspace = NULL, e->blas = NULL, e->staging = NULL, e->pool = NULL,
  e->stream = NULL;
  e->initialized = false;
}

static ortep_status cuda_shutdown(ortep_ep *ep) {
  release_all(self_of(ep));
  return ORTEP_OK;
}

static void cuda_destroy(ortep_ep *ep) {
  release_all(self_of(ep));
  ortep__free(self_of(ep)->old_shared);
  ortep__free(self_of(ep)->old_shared_bytes);
  ortep__free(self_of(ep)->segments);
  ortep__free(self_of(ep)->retired);
  ortep__free(self_of(ep)->graphs);
  ortep__free(self_of(ep)->loops);
  ortep__free(ep);
}

static ortep_ep_capabilities cuda_caps(const ortep_ep *ep) {
  return (ortep_ep_capabilities){true, true, false, cself_of(ep)->loops_ok};
}

/* Device loops need conditional WHILE nodes: CUDA 12.4 in the runtime this
 * module was built and runs with, and in the driver. Older ones get the
 * session's host loop instead (session.h), which gives the same results.
 * Programmatic dependent launch needs compute 9.0 and kernels built for it
 * (their wait makes it safe); the EP votes (ops.h). */
static bool conditional_nodes(void) {
  int rt = 0, drv = 0;
  bool ok = ortep__cu_loops_built() && cudaRuntimeGetVersion(&rt) == cudaSuccess &&
            cudaDriverGetVersion(&drv) == cudaSuccess && rt >= 12040 && drv >= 12040;
  cudaGetLastError();
  return ok;
}
static bool pdl_usable(int device) {
  int major = 0;
  bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9 &&
            ortep__cu_built_for() >= 90;
  cudaGetLastError();
  return ok;
}
static void init_loops(cuda_ep *e) {
  e->loops_ok = conditional_nodes();
  ortep__cu_pdl_vote(!e->pdl_off && pdl_usable(e->device));
}

/* What the shared op check accepts and this EP's kernels do not (yet). */
static bool cuda_refuses(const ortep__op_params *p, ortep_kernel_match *out) {
  if (p->kind != ORTEP__OP_GQA || p->p.gqa.kvdt == ORTEP_DTYPE_F32) return false;
  out->supported = false;
  snprintf(out->reason, sizeof out->reason,
           "%s: 16-bit KV caches are the CPU EP's only; use f32 caches (ortep.kv_dtype = f32) on the GPU",
           CUDA_EP_NAME);
  return true;
}

static void cuda_supports(const ortep_ep *ep, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                          const ortep_dtype *dtypes, size_t n, ortep_kernel_match *out) {
  ortep__op_params p;
  if (ortep__op_check(CUDA_EP_NAME, node, opset, shapes, dtypes, n, out, &p) && !cuda_refuses(&p, out))
    out->cost = CUDA_OP_COST;
}

/* --- kernels --------------------------------------------------------------------- */
typedef struct cuda_kernel {
  ortep_kernel base;
  char name[64];
  ortep__op_params op;
  cuda_ep *ep;
  void *scratch; /* the 16-bit copy of a GEMM input, or the sampler's (attention uses the EP's shared scratch) */
  size_t scratch_bytes;
} cuda_kernel;

static ortep_status launched(const cuda_kernel *k, int rc) {
  if (rc == 0) return ORTEP_OK;
  return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: launching %s failed: %s", CUDA_EP_NAME, k->name,
                     cudaGetErrorString((cudaError_t)rc));
}

static cudaDataType_t cuda_type(ortep_dtype d) {
  return d == ORTEP_DTYPE_F16 ? CUDA_R_16F : d == ORTEP_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Decode (M = 1) runs our GEMV: f32 activations times widened weights, the
 * same function the CPU EP computes, in one launch with the bias. Wider
 * products go through cublasGemmEx, Y[M, N] = alpha * X[M, K] W(^T) + beta *
 * bias, row-major (column-major: Y^T = op(W) X^T); for 16-bit weights X is
 * rounded to the weights' type first, so tensor cores run it (a tolerance the
 * prefill tests state). */
static ortep_status run_gemm(cuda_kernel *k, const void *const *in, void *const *out, size_t n_in) {
  __typeof__(k->op.p.gemm) *g = &k->op.p.gemm;
  cuda_ep *e = k->ep;
  const void *c = g->has_c && n_in > 2 ? in[2] : NULL;
  if (g->m == 1)
    return launched(k, ortep__cu_gemv(in[0], in[1], (int)g->bdt, g->trans_b, g->m, g->k, g->n, g->alpha, c, (int)g->cdt,
                                      g->c_rows, g->beta, out[0], e->stream));
  const void *x = in[0];
  int rc;
  if (g->bdt != ORTEP_DTYPE_F32) {
    if ((rc = ortep__cu_convert(in[0], k->scratch, (int)g->bdt, g->m * g->k, e->stream))) return launched(k, rc);
    x = k->scratch;
  }
  float beta = 0.0f;
  if (c && g->beta != 0.0f) {
    if ((rc = ortep__cu_fill_bias(c, (int)g->cdt, g->c_rows, g->m, g->n, out[0], e->stream))) return launched(k, rc);
    beta = g->beta;
  }
  float alpha = g->alpha;
  cublasStatus_t s =
      cublasGemmEx(e->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k,
                   &alpha, in[1], cuda_type(g->bdt), g->trans_b ? (int)g->k : (int)g->n, x, cuda_type(g->bdt),
                   (int)g->k, &beta, out[0], CUDA_R_32F, (int)g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasGemmEx for %s failed (status %d)", CUDA_EP_NAME, k->name,
                       (int)s);
  return ORTEP_OK;
}

/* A prefill chunk's Linear over bf16 weights on tensor cores: x rounded to
 * bf16 once (the rounding the CPU EP's chunk products make), one
 * cublasGemmEx per weight (f32 accumulation, y [m, n] = x W^T), then the
 * epilogue: biases, SiLU(gate) x up, the residual. Scratch: x in bf16, then
 * the up projection's [m, n] for gate_up. f16 weights (x rounded to f16 could
 * overflow) and one row keep the GEMV. Never run on a GPU yet. */
static bool linear_on_tensor_cores(const __typeof__(((ortep__op_params *)0)->p.lin) *p) {
  if (p->m < 2 || p->quant != ORTEP_DTYPE_COUNT || p->blocked) return false;
  for (size_t g = 0; g < p->groups; g++)
    if (p->wdt[g] != ORTEP_DTYPE_BF16) return false;
  return true;
}
static size_t linear_gemm_scratch(const __typeof__(((ortep__op_params *)0)->p.lin) *p) {
  return (p->m * p->k * 2 + 255) / 256 * 256 + (p->gate_up ? p->m * p->n[0] * sizeof(float) : 0);
}

/* A prefill chunk's Linear over q8_0 / q4_0 weights: each weight widened to
 * f32 in the EP's shared scratch (exact), then one cublasSgemm (f32 x, f32
 * accumulation) and the same epilogue as above: the CPU EP's function for a
 * chunk (its blocks widened into a worker's scratch for sgemm), up to the
 * order of the sums. One row keeps the dp4a GEMV of quantized x. Scratch:
 * the up projection's [m, n] for gate_up. Written without a GPU, never run
 * yet. */
static bool linear_dequantized(const __typeof__(((ortep__op_params *)0)->p.lin) *p) {
  return p->m >= 2 && p->quant != ORTEP_DTYPE_COUNT && !p->blocked;
}
static size_t linear_dequantized_shared(const __typeof__(((ortep__op_params *)0)->p.lin) *p) {
  size_t most = 0;
  for (size_t g = 0; g < p->groups; g++) most = p->n[g] * p->k > most ? p->n[g] * p->k : most;
  return most * sizeof(float);
}

static ortep_status linear_epilogue(cuda_kernel *k, const void *const *in, void *const *out, float *up) {
  const __typeof__(k->op.p.lin) *p = &k->op.p.lin;
  ortep__cu_linear_epilogue_args a = {
      .m = p->m, .groups = p->groups, .gate_up = p->gate_up, .up = up, .res = p->residual ? in[7] : NULL};
  for (size_t g = 0; g < p->groups; g++) {
    a.n[g] = p->n[g], a.y[g] = p->gate_up ? (g ? NULL : out[0]) : out[g];
    a.b[g] = p->bias[g] ? in[2 + 2 * g] : NULL, a.bdt[g] = (int)p->bdt[g];
  }
  return launched(k, ortep__cu_linear_epilogue(&a, k->ep->stream));
}

static ortep_status run_linear_dequantized(cuda_kernel *k, const void *const *in, void *const *out) {
  const __typeof__(k->op.p.lin) *p = &k->op.p.lin;
  cuda_ep *e = k->ep;
  float *w = e->shared, *up = p->gate_up ? (float *)k->scratch : NULL;
  const float one = 1.0f, zero = 0.0f;
  for (size_t g = 0; g < p->groups; g++) {
    int rc = ortep__cu_dequantize(in[1 + 2 * g], (int)p->wdt[g], p->n[g] * p->k, w, e->stream);
    if (rc) return launched(k, rc);
    float *y = p->gate_up && g == 1 ? up : (float *)out[p->gate_up ? 0 : g];
    cublasStatus_t s = cublasSgemm(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->n[g], (int)p->m, (int)p->k, &one, w,
                                   (int)p->k, (const float *)in[0], (int)p->k, &zero, y, (int)p->n[g]);
    if (s != CUBLAS_STATUS_SUCCESS)
      return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasSgemm for %s failed (status %d)", CUDA_EP_NAME, k->name,
                         (int)s);
  }
  return linear_epilogue(k, in, out, up);
}

static ortep_status run_linear_gemm(cuda_kernel *k, const void *const *in, void *const *out) {
  const __typeof__(k->op.p.lin) *p = &k->op.p.lin;
  cuda_ep *e = k->ep;
  void *x16 = k->scratch;
  float *up = p->gate_up ? (float *)((char *)k->scratch + (p->m * p->k * 2 + 255) / 256 * 256) : NULL;
  int rc = ortep__cu_convert(in[0], x16, ORTEP_DTYPE_BF16, p->m * p->k, e->stream);
  if (rc) return launched(k, rc);
  const float one = 1.0f, zero = 0.0f;
  for (size_t g = 0; g < p->groups; g++) {
    float *y = p->gate_up && g == 1 ? up : (float *)out[p->gate_up ? 0 : g];
    cublasStatus_t s = cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->n[g], (int)p->m, (int)p->k, &one,
                                    in[1 + 2 * g], CUDA_R_16BF, (int)p->k, x16, CUDA_R_16BF, (int)p->k, &zero, y,
                                    CUDA_R_32F, (int)p->n[g], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      return ortep__fail(ORTEP_E_DEVICE_ERROR, "%s: cublasGemmEx for %s failed (status %d)", CUDA_EP_NAME, k->name,
                         (int)s);
  }
  return linear_epilogue(k, in, out, up);
}

static ortep_status cuda_run(ortep_kernel *self, const ortep_kernel_io *io) {
  cuda_kernel *k = (cuda_kernel *)self;
  const void *const *in = io->inputs;
  void *const *out = io->outputs;
  uint32_t *err = k->ep->err;
  void *s = k->ep->stream;
  const ortep__op_params *o = &k->op;
  int rc = 0;
  switch (o->kind) {
    case ORTEP__OP_GATHER:
      rc = ortep__cu_gather(in[0], (int)o->p.gather.tdt, o->p.gather.rows, o->p.gather.h, in[1], o->p.gather.idx64,
                            o->p.gather.n, out[0], err, s);
      break;
    case ORTEP__OP_GEMM: return run_gemm(k, in, out, io->n_inputs);
    case ORTEP__OP_ADD:
    case ORTEP__OP_MUL:
      rc = ortep__cu_binary(o->kind == ORTEP__OP_MUL, in[0], in[1], (int)o->p.bin.bdt, o->p.bin.nb, o->p.bin.n, out[0],
                            s);
      break;
    case ORTEP__OP_SIGMOID: rc = ortep__cu_sigmoid(in[0], o->p.un.n, out[0], s); break;
    case ORTEP__OP_SILUMUL: rc = ortep__cu_silu_mul(in[0], in[1], o->p.un.n, out[0], s); break;
    case ORTEP__OP_RMSNORM: {
      size_t si = o->p.norm.skip ? 2 : 1;
      rc = ortep__cu_rmsnorm(in[0], o->p.norm.skip ? in[1] : NULL, o->p.norm.has_bias ? in[3] : NULL,
                             (int)o->p.norm.bdt, in[si], (int)o->p.norm.sdt, o->p.norm.rows, o->p.norm.h, o->p.norm.eps,
                             out[0], o->p.norm.has_sum && io->n_outputs > 3 ? out[3] : NULL, s);
      break;
    }
    case ORTEP__OP_ROTARY:
      rc = ortep__cu_rotary(in[0], in[1], o->p.rot.pos64, o->p.rot.tokens, o->p.rot.heads, o->p.rot.hd, o->p.rot.rot,
                            o->p.rot.inter, in[2], in[3], (int)o->p.rot.cdt, o->p.rot.max_pos, out[0], err, s);
      break;
    case ORTEP__OP_GQA:
      rc = ortep__cu_gqa(in[0], in[1], in[2], (float *)(uintptr_t)in[3], (float *)(uintptr_t)in[4], in[5],
                         o->p.gqa.tokens, o->p.gqa.heads, o->p.gqa.kv, o->p.gqa.hd, o->p.gqa.cap, o->p.gqa.scale,
                         k->ep->shared, out[0], err, s);
      break;
    case ORTEP__OP_SOFTMAX: rc = ortep__cu_softmax(in[0], o->p.sm.rows, o->p.sm.n, out[0], s); break;
    case ORTEP__OP_ARGMAX: rc = ortep__cu_argmax_rows(in[0], o->p.sm.rows, o->p.sm.n, out[0], err, s); break;
    case ORTEP__OP_LINEAR: {
      const __typeof__(o->p.lin) *p = &o->p.lin;
      if (linear_on_tensor_cores(p)) return run_linear_gemm(k, in, out);
      if (linear_dequantized(p)) return run_linear_dequantized(k, in, out);
      ortep__cu_linear_args a = {.x = in[0],
                                 .res = p->residual ? in[7] : NULL,
                                 .m = p->m,
                                 .k = p->k,
                                 .groups = p->groups,
                                 .gate_up = p->gate_up,
                                 .xq = k->scratch,
                                 .xd = k->scratch ? (float *)((char *)k->scratch + p->m * p->k) : NULL};
      for (size_t g = 0; g < p->groups; g++) {
        a.n[g] = p->n[g], a.w[g] = in[1 + 2 * g], a.wdt[g] = (int)p->wdt[g];
        a.b[g] = p->bias[g] ? in[2 + 2 * g] : NULL, a.bdt[g] = (int)p->bdt[g];
        a.y[g] = p->gate_up ? (g ? NULL : out[0]) : out[g];
      }
      rc = ortep__cu_linear(&a, s);
      break;
    }
    case ORTEP__OP_SELECT:
      rc = ortep__cu_select(in[0], o->p.sel.n, in[1], in[2], o->p.sel.tokens, in[3], (int32_t *)(uintptr_t)in[4],
                            o->p.sel.cap, k->scratch, out[0], err, s);
      break;
    case ORTEP__OP_FEED:
      rc = ortep__cu_feed(in[0], (int32_t *)(uintptr_t)in[1], (int32_t *)(uintptr_t)in[2], in[3], o->p.feed.vocab,
                          (int32_t *)(uintptr_t)in[4], o->p.feed.kmax, out[0], s);
      break;
    case ORTEP__OP_NOOP: rc = ortep__cu_noop(s); break;
  }
  return launched(k, rc);
}

static void cuda_kernel_destroy(ortep_kernel *self) {
  cuda_kernel *k = (cuda_kernel *)self;
  if (k->scratch) ortep_allocator_deallocate(k->ep->pool, k->scratch, k->scratch_bytes, 256);
  ortep__free(k);
}

static const ortep_kernel_vtable cuda_kernel_vtable = {cuda_run, cuda_kernel_destroy, NULL};

/* At least bytes of the EP's shared scratch (see cuda_ep.shared). */
static ortep_status reserve_shared(cuda_ep *e, size_t bytes) {
  if (bytes <= e->shared_bytes) return ORTEP_OK;
  if (e->shared) {
    if (!ORTEP__GROW(e->old_shared, e->old_shared_cap, e->n_old_shared + 1) ||
        !ORTEP__GROW(e->old_shared_bytes, e->old_bytes_cap, e->n_old_shared + 1))
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to grow the shared scratch", CUDA_EP_NAME);
  }
  void *p;
  ortep_status st = ortep_allocator_allocate(e->pool, bytes, 256, &p);
  if (st != ORTEP_OK) return ortep__wrap(st, "%s: %zu bytes of shared scratch", CUDA_EP_NAME, bytes);
  if (e->shared) {
    e->old_shared[e->n_old_shared] = e->shared;
    e->old_shared_bytes[e->n_old_shared++] = e->shared_bytes;
  }
  e->shared = p, e->shared_bytes = bytes;
  return ORTEP_OK;
}

static ortep_status cuda_get_kernel(ortep_ep *ep, const ortep_node *node, const ortep_shape *shapes,
                                    const ortep_dtype *dtypes, size_t n, int64_t opset, ortep_kernel **out) {
  cuda_ep *e = self_of(ep);
  ortep_status st = need_init(e, "get_kernel");
  if (st != ORTEP_OK) return st;
  cuda_kernel *k = ortep__calloc(1, sizeof *k);
  if (!k) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a kernel", CUDA_EP_NAME);
  ortep_kernel_match m;
  if (!ortep__op_check(CUDA_EP_NAME, node, opset, shapes, dtypes, n, &m, &k->op) || cuda_refuses(&k->op, &m)) {
    ortep__free(k);
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s", m.reason);
  }
  k->ep = e;
  snprintf(k->name, sizeof k->name, "cuda.%s", ortep_node_op_type(node));
  /* Scratch is carved now, never during a capture. */
  if (k->op.kind == ORTEP__OP_GQA &&
      (st = reserve_shared(e, k->op.p.gqa.tokens * k->op.p.gqa.heads * k->op.p.gqa.cap * sizeof(float))) != ORTEP_OK) {
    ortep__free(k);
    return st;
  }
  if (k->op.kind == ORTEP__OP_GEMM && k->op.p.gemm.bdt != ORTEP_DTYPE_F32 && k->op.p.gemm.m > 1)
    k->scratch_bytes = k->op.p.gemm.m * k->op.p.gemm.k * 2;
  if (k->op.kind == ORTEP__OP_SELECT) k->scratch_bytes = ORTEP__SAMPLE_SCRATCH_BYTES(k->op.p.sel.n);
  if (k->op.kind == ORTEP__OP_LINEAR && k->op.p.lin.quant != ORTEP_DTYPE_COUNT) /* x quantized, per node */
    k->scratch_bytes = ortep__cu_linear_scratch(k->op.p.lin.m, k->op.p.lin.k);
  if (k->op.kind == ORTEP__OP_LINEAR && linear_dequantized(&k->op.p.lin)) { /* the up projection; weights shared */
    k->scratch_bytes = k->op.p.lin.gate_up ? k->op.p.lin.m * k->op.p.lin.n[0] * sizeof(float) : 0;
    if ((st = reserve_shared(e, linear_dequantized_shared(&k->op.p.lin))) != ORTEP_OK) {
      ortep__free(k);
      return st;
    }
  }
  if (k->op.kind == ORTEP__OP_LINEAR && linear_on_tensor_cores(&k->op.p.lin)) /* x in bf16, the up projection */
    k->scratch_bytes = linear_gemm_scratch(&k->op.p.lin);
  if (k->scratch_bytes && (st = ortep_allocator_allocate(e->pool, k->scratch_bytes, 256, &k->scratch)) != ORTEP_OK) {
    ortep__free(k);
    return ortep__wrap(st, "%s: scratch for %s", CUDA_EP_NAME, ortep_node_name(node));
  }
  k->base = (ortep_kernel){&cuda_kernel_vtable, k->name, true};
  *out = &k->base;
  return ORTEP_OK;
}

/* --- preparing initializers: q8_0 / q4_0 asked for by the graph ---------------------
 * A float weight [N, K] (K a multiple of 32) that every use reads as an
 * ortep:Linear weight or an ortep:Embedding table, and that the graph asks to
 * store as q8_0 / q4_0 (ortep.weights_dtype), is quantized on the host with
 * ortep_quantize's rounding (the bytes the CPU EP and llama.cpp make) and
 * uploaded: only the blocks live on the GPU. Anything else is left as it is.
 * Written and compiled without a GPU: never run yet. */
static bool quantizable(const ortep_initializer *in) {
  if (in->prefer != ORTEP_DTYPE_Q8_0 && in->prefer != ORTEP_DTYPE_Q4_0) return false;
  if ((in->dtype != ORTEP_DTYPE_F32 && in->dtype != ORTEP_DTYPE_F16 && in->dtype != ORTEP_DTYPE_BF16) ||
      in->shape.rank != 2 || in->shape.dims[1] % 32 || !in->n_uses)
    return false;
  for (size_t i = 0; i < in->n_uses; i++) {
    const char *op = ortep_node_op_type(in->uses[i].node);
    size_t at = in->uses[i].input;
    if (!(!strcmp(op, "Linear") && (at == 1 || at == 3 || at == 5)) && !(!strcmp(op, "Embedding") && at == 0))
      return false;
  }
  return true;
}

static ortep_status cuda_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out);
static ortep_status cuda_deallocate(ortep_ep *ep, ortep_buffer *b);
static ortep_status cuda_from_host(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst);

static ortep_status cuda_prepare(ortep_ep *ep, const ortep_initializer *in, ortep_dtype *dtype, ortep_shape *shape,
                                 ortep_buffer *out) {
  if (!quantizable(in)) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s keeps '%s' as it is", CUDA_EP_NAME, in->name);
  bool q8 = in->prefer == ORTEP_DTYPE_Q8_0; /* blocks of 32 values: 34 and 18 bytes (dtype.h) */
  size_t n = (size_t)in->shape.dims[0] * (size_t)in->shape.dims[1], bytes = n / 32 * (q8 ? 34 : 18);
  void *host = ortep__malloc(bytes);
  if (!host) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to quantize '%s'", CUDA_EP_NAME, in->name);
  ortep_status st = ortep__quantize_from(in->dtype, in->data, n, in->prefer, host);
  if (st == ORTEP_OK) st = cuda_allocate(ep, bytes, 256, out);
  if (st == ORTEP_OK && (st = cuda_from_host(ep, host, bytes, out)) != ORTEP_OK) cuda_deallocate(ep, out);
  ortep__free(host);
  if (st != ORTEP_OK) return ortep__wrap(st, "%s: quantizing '%s' to %s", CUDA_EP_NAME, in->name, q8 ? "q8_0" : "q4_0");
  *dtype = in->prefer;
  (void)shape; /* [N, K] as it came in (init->shape): the blocks of each row follow each other */
  return ORTEP_OK;
}

/* --- memory and copies -------------------------------------------------------------- */
static ortep_status cuda_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out) {
  cuda_ep *e = self_of(ep);
  ortep_status st = need_init(e, "allocate");
  if (st != ORTEP_OK) return st;
  void *p;
  if ((st = ortep_allocator_allocate(e->pool, size, align, &p)) != ORTEP_OK) return st;
  e->allocations++;
  return ortep_buffer_wrap_owned(p, ep->device, size, align, out);
}

static ortep_status cuda_deallocate(ortep_ep *ep, ortep_buffer *b) {
  cuda_ep *e = self_of(ep);
  ortep_allocator_deallocate(e->pool, b->ptr, b->size, b->align);
  e->frees++;
  return ORTEP_OK;
}

static enum cudaMemcpyKind kind_of(const ortep_buffer *src, const ortep_buffer *dst) {
  bool sh = ortep_device_is_host_accessible(src->device), dh = ortep_device_is_host_accessible(dst->device);
  return sh && dh ? cudaMemcpyHostToHost
         : sh     ? cudaMemcpyHostToDevice
         : dh     ? cudaMemcpyDeviceToHost
                  : cudaMemcpyDeviceToDevice;
}

static ortep_status cuda_copy(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size) {
  cuda_ep *e = self_of(ep);
  CU(cudaMemcpyAsync(dst->ptr, src->ptr, size, kind_of(src, dst), e->stream), "copy");
  CU(cudaStreamSynchronize(e->stream), "copy");
  e->staged = 0;
  return ORTEP_OK;
}

static ortep_status cuda_copy_async(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size,
                                    ortep_fence *out) {
  cuda_ep *e = self_of(ep);
  cudaEvent_t ev;
  CU(cudaMemcpyAsync(dst->ptr, src->ptr, size, kind_of(src, dst), e->stream), "async copy");
  CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "async copy fence");
  CU(cudaEventRecord(ev, e->stream), "async copy fence");
  *out = (ortep_fence){++e->fences, ev};
  return ORTEP_OK;
}

static ortep_status cuda_fence_wait(ortep_ep *ep, ortep_fence *f) {
  if (!f->event) return ORTEP_OK;
  cudaError_t r = cudaEventSynchronize((cudaEvent_t)f->event);
  cudaEventDestroy((cudaEvent_t)f->event);
  f->event = NULL;
  return r == cudaSuccess ? ORTEP_OK : cuda_fail(r, "fence wait");
}

static ortep_status cuda_sync(ortep_ep *ep) {
  CU(cudaStreamSynchronize(self_of(ep)->stream), "sync");
  self_of(ep)->staged = 0;
  return ORTEP_OK;
}

/* Host -> device. Small uploads (a step's token id and position) are copied
 * into a fresh slice of pinned staging and enqueued without a sync: the
 * caller's bytes are captured at once and the copy is ordered before every
 * later launch on the stream. Slices are reclaimed at the next stream sync,
 * so a decode step keeps its one sync (the 8-byte read). */
/* Host copies: the dispatcher (runtime/ep.c) has checked the arguments, the
 * device and the range. */
static ortep_status cuda_from_host_at(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst, size_t offset) {
  cuda_ep *e = self_of(ep);
  if (!len) return ORTEP_OK;
  char *d = (char *)dst->ptr + offset;
  if (len > UP_BYTES) { /* large: straight from the caller's memory, synchronously */
    CU(cudaMemcpyAsync(d, src, len, cudaMemcpyHostToDevice, e->stream), "host upload");
    CU(cudaStreamSynchronize(e->stream), "host upload");
    e->staged = 0;
    return ORTEP_OK;
  }
  size_t slot = (len + 63) & ~(size_t)63;
  if (e->staged + slot > UP_BYTES) { /* staging full: wait until its copies are done */
    CU(cudaStreamSynchronize(e->stream), "host upload");
    e->staged = 0;
  }
  char *stage = (char *)e->staging + DOWN_BYTES + e->staged;
  memcpy(stage, src, len);
  CU(cudaMemcpyAsync(d, stage, len, cudaMemcpyHostToDevice, e->stream), "host upload");
  e->staged += slot;
  return ORTEP_OK;
}

static ortep_status cuda_from_host(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst) {
  return cuda_from_host_at(ep, src, len, dst, 0);
}

static ortep_status cuda_to_host_at(ortep_ep *ep, const ortep_buffer *src, size_t offset, void *dst, size_t len) {
  cuda_ep *e = self_of(ep);
  if (!len) return ORTEP_OK;
  const char *s = (const char *)src->ptr + offset;
  if (len <= DOWN_BYTES) {
    CU(cudaMemcpyAsync(e->staging, s, len, cudaMemcpyDeviceToHost, e->stream), "host download");
    CU(cudaStreamSynchronize(e->stream), "host download"); /* the one sync per decoded token */
    memcpy(dst, e->staging, len);
  } else {
    CU(cudaMemcpyAsync(dst, s, len, cudaMemcpyDeviceToHost, e->stream), "host download");
    CU(cudaStreamSynchronize(e->stream), "host download");
  }
  e->staged = 0; /* the stream is idle: every upload slice is free again */
  return ORTEP_OK;
}

static ortep_status cuda_to_host(ortep_ep *ep, const ortep_buffer *src, void *dst, size_t len) {
  return cuda_to_host_at(ep, src, 0, dst, len);
}

static ortep_status cuda_argmax(ortep_ep *ep, const void *logits, size_t n, ortep_dtype dtype, ortep_buffer *result) {
  cuda_ep *e = self_of(ep);
  int rc =
      ortep__cu_device_argmax(logits, dtype == ORTEP_DTYPE_F16, n, e->argmax_scratch, result->ptr, e->err, e->stream);
  return rc ? cuda_fail((cudaError_t)rc, "device argmax") : ORTEP_OK;
}

/* The sampler (kernels/sampling.h): one block; its scratch (a double and a
 * float per logit) is carved at the first call and reused. Never run on a
 * GPU so far. */
static ortep_status cuda_sample(ortep_ep *ep, const void *logits, size_t n, ortep_dtype dtype, const void *params,
                                const int32_t *history, ortep_buffer *result) {
  cuda_ep *e = self_of(ep);
  if (e->capturing)
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE, "%s: sampling is not recorded into a device graph", CUDA_EP_NAME);
  if (n > SIZE_MAX / 16) return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: %zu logits", CUDA_EP_NAME, n);
  if (e->sample_bytes < ORTEP__SAMPLE_SCRATCH_BYTES(n)) {
    void *p;
    ortep_status st = ortep_allocator_allocate(e->pool, ORTEP__SAMPLE_SCRATCH_BYTES(n), 256, &p);
    if (st != ORTEP_OK) return ortep__wrap(st, "%s: the sampler's scratch", CUDA_EP_NAME);
    if (e->sample_scratch) ortep_allocator_deallocate(e->pool, e->sample_scratch, e->sample_bytes, 256);
    e->sample_scratch = p, e->sample_bytes = ORTEP__SAMPLE_SCRATCH_BYTES(n);
  }
  int rc = ortep__cu_sample(logits, dtype == ORTEP_DTYPE_F16, n, params, history, e->sample_scratch, result->ptr,
                            e->err, e->stream);
  return rc ? cuda_fail((cudaError_t)rc, "device sampling") : ORTEP_OK;
}

/* --- device graphs ---------------------------------------------------------------- */
static ortep_status cuda_begin(ortep_ep *ep) {
  cuda_ep *e = self_of(ep);
  ortep_status st = need_init(e, "begin_capture");
  if (st != ORTEP_OK) return st;
  CU(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  e->capturing = true;
  return ORTEP_OK;
}

/* Kernel nodes of a captured graph (what a replay launches); at capture
 * time, never per step. */
static cudaError_t count_kernel_nodes(cudaGraph_t graph, size_t *kernels) {
  size_t n = 0;
  cudaError_t r = cudaGraphGetNodes(graph, NULL, &n);
  if (r != cudaSuccess || !n) return r;
  cudaGraphNode_t *nodes = ortep__malloc(n * sizeof *nodes);
  if (!nodes) return cudaErrorMemoryAllocation;
  r = cudaGraphGetNodes(graph, nodes, &n);
  for (size_t i = 0; r == cudaSuccess && i < n; i++) {
    enum cudaGraphNodeType t;
    if ((r = cudaGraphNodeGetType(nodes[i], &t)) == cudaSuccess && t == cudaGraphNodeTypeKernel) ++*kernels;
  }
  ortep__free(nodes);
  return r;
}

static ortep_status cuda_end(ortep_ep *ep) {
  cuda_ep *e = self_of(ep);
  cudaGraph_t graph = NULL;
  cudaError_t r = cudaStreamEndCapture(e->stream, &graph);
  e->capturing = false;
  if (r != cudaSuccess) return cuda_fail(r, "cudaStreamEndCapture");
  size_t had = e->retired_cap;
  if (!ORTEP__GROW(e->segments, e->segments_cap, e->n_segments + 1) ||
      !ORTEP__GROW(e->retired, e->retired_cap, e->n_segments + 1) ||
      !ORTEP__GROW(e->graphs, e->graphs_cap, e->n_segments + 1) ||
      !ORTEP__GROW(e->loops, e->loops_cap, e->n_segments + 1)) {
    cudaGraphDestroy(graph);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to install a segment", CUDA_EP_NAME);
  }
  for (size_t i = had; i < e->retired_cap; i++) e->retired[i] = NULL;
  size_t at = e->n_segments;
  size_t kernels = 0;
  if ((r = count_kernel_nodes(graph, &kernels)) != cudaSuccess) {
    cudaGraphDestroy(graph);
    return cuda_fail(r, "cudaGraphGetNodes");
  }
  cudaGraphExec_t exec = NULL;
  if (at < e->n_retired && e->retired[at]) {
    /* the same segment captured again: patch the old executable in place */
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(e->retired[at], graph, &info) == cudaSuccess) {
      exec = e->retired[at];
      e->updates++;
    } else {
      cudaGetLastError();
      cudaGraphExecDestroy(e->retired[at]);
    }
    e->retired[at] = NULL;
  }
  if (!exec) {
    r = cudaGraphInstantiate(&exec, graph, 0);
    if (r != cudaSuccess) {
      cudaGraphDestroy(graph);
      return cuda_fail(r, "cudaGraphInstantiate");
    }
    e->instantiations++;
  }
  e->graphs[at] = graph, e->loops[at] = (ortep__cu_loop){0}; /* kept for a device loop (drop_loops) */
  e->segments[e->n_segments++] = exec;
  e->kernel_nodes += kernels;
  return ORTEP_OK;
}

static ortep_status cuda_abort(ortep_ep *ep) {
  cuda_ep *e = self_of(ep);
  if (!e->capturing) return ORTEP_OK;
  cudaGraph_t graph = NULL;
  cudaStreamEndCapture(e->stream, &graph); /* ends it even when invalidated */
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  e->capturing = false;
  return ORTEP_OK;
}

/* The dispatcher checked the capture state and the index (runtime/ep.c). */
static ortep_status cuda_replay_segment(ortep_ep *ep, size_t i) {
  cuda_ep *e = self_of(ep);
  CU(cudaGraphLaunch(e->segments[i], e->stream), "cudaGraphLaunch");
  return ORTEP_OK;
}

/* The segment inside a WHILE node, built on its first loop (ops.h:
 * ortep__cu_loop_create) and launched as one graph: no host round trip
 * between iterations. Never run on a GPU yet (docs/api.md). */
static ortep_status cuda_replay_segment_while(ortep_ep *ep, size_t i, const int32_t *flag, size_t max) {
  cuda_ep *e = self_of(ep);
  if (!e->loops_ok)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "%s: device loops need CUDA 12.4 conditional nodes in the runtime and the driver", CUDA_EP_NAME);
  if (!e->loop_counter) {
    ortep_status st = ortep_allocator_allocate(e->pool, 256, 256, (void **)&e->loop_counter);
    if (st != ORTEP_OK) return ortep__wrap(st, "%s: the device loop's counter", CUDA_EP_NAME);
  }
  ortep__cu_loop *l = &e->loops[i];
  if (l->exec && l->flag != flag) ortep__cu_loop_release(l);
  int rc = l->exec ? 0 : ortep__cu_loop_create(e->graphs[i], flag, e->loop_counter, l);
  if (rc) { /* this driver will not take the loop: no device loops from now on, the session loops itself */
    cudaGetLastError();
    e->loops_ok = false;
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "%s: building a device loop (a conditional WHILE node around the segment): %s", CUDA_EP_NAME,
                       cudaGetErrorString((cudaError_t)rc));
  }
  CU((cudaError_t)ortep__cu_loop_launch(l, max, e->stream), "launching a device loop");
  return ORTEP_OK;
}

static ortep_status cuda_replay(ortep_ep *ep) {
  cuda_ep *e = self_of(ep);
  if (!e->n_segments)
    return ortep__fail(ORTEP_E_STATE, "%s: replay with no captured graph; capture first", CUDA_EP_NAME);
  for (size_t i = 0; i < e->n_segments; i++) {
    ortep_status st = cuda_replay_segment(ep, i);
    if (st != ORTEP_OK) return st;
  }
  return ORTEP_OK;
}

static ortep_status cuda_reset(ortep_ep *ep, bool *had) {
  cuda_ep *e = self_of(ep);
  *had = e->n_segments > 0;
  if (e->stream) cudaStreamSynchronize(e->stream); /* no replay still reads a buffer about to move */
  drop_loops(e);
  /* Retire the executables (never launched again) for a later update. */
  for (size_t i = 0; i < e->n_segments; i++) {
    if (i < e->n_retired && e->retired[i]) cudaGraphExecDestroy(e->retired[i]);
    e->retired[i] = e->segments[i];
  }
  if (e->n_segments > e->n_retired) e->n_retired = e->n_segments;
  e->n_segments = 0;
  e->kernel_nodes = 0;
  return ORTEP_OK;
}

static void cuda_graph_counts(const ortep_ep *ep, uint64_t *inst, uint64_t *upd) {
  *inst = cself_of(ep)->instantiations;
  *upd = cself_of(ep)->updates;
}

static size_t cuda_segment_count(const ortep_ep *ep) { return cself_of(ep)->n_segments; }
static size_t cuda_graph_kernel_nodes(const ortep_ep *ep) { return cself_of(ep)->kernel_nodes; }
static bool cuda_capture_active(const ortep_ep *ep) { return cself_of(ep)->capturing; }

static ortep_status cuda_check_error(ortep_ep *ep, uint32_t *bits) {
  ortep_buffer b = {self_of(ep)->err, sizeof(uint32_t), 4, ep->device, ORTEP_BUFFER_BORROWED};
  return cuda_to_host(ep, &b, bits, sizeof *bits);
}
static ortep_status cuda_reset_error(ortep_ep *ep) {
  CU(cudaMemsetAsync(self_of(ep)->err, 0, sizeof(uint32_t), self_of(ep)->stream), "resetting the error word");
  CU(cudaStreamSynchronize(self_of(ep)->stream), "resetting the error word");
  return ORTEP_OK;
}
static uint32_t *cuda_error_ptr(ortep_ep *ep) { return self_of(ep)->err; }
static bool cuda_counts(const ortep_ep *ep, uint64_t *a, uint64_t *f) {
  if (a) *a = cself_of(ep)->allocations;
  if (f) *f = cself_of(ep)->frees;
  return true;
}

static const ortep_ep_vtable cuda_vtable = {
    .name = CUDA_EP_NAME,
    .initialize = cuda_initialize,
    .shutdown = cuda_shutdown,
    .destroy = cuda_destroy,
    .supports_op = cuda_supports,
    .get_kernel = cuda_get_kernel,
    .allocate = cuda_allocate,
    .deallocate = cuda_deallocate,
    .copy = cuda_copy,
    .copy_async = cuda_copy_async,
    .fence_wait = cuda_fence_wait,
    .sync = cuda_sync,
    .capabilities = cuda_caps,
    .copy_from_host = cuda_from_host,
    .copy_from_host_at = cuda_from_host_at,
    .copy_to_host = cuda_to_host,
    .copy_to_host_at = cuda_to_host_at,
    .device_argmax = cuda_argmax,
    .device_sample = cuda_sample,
    .begin_capture = cuda_begin,
    .end_capture = cuda_end,
    .abort_capture = cuda_abort,
    .replay = cuda_replay,
    .replay_segment = cuda_replay_segment,
    .replay_segment_while = cuda_replay_segment_while,
    .prepare_initializer = cuda_prepare,
    .reset_graph = cuda_reset,
    .segment_count = cuda_segment_count,
    .capture_active = cuda_capture_active,
    .check_error_word = cuda_check_error,
    .reset_error_word = cuda_reset_error,
    .error_word_ptr = cuda_error_ptr,
    .allocation_counts = cuda_counts,
    .graph_counts = cuda_graph_counts,
    .graph_kernel_nodes = cuda_graph_kernel_nodes,
};

ortep_status ortep__cuda_ep_create(ortep_governor *governor, ortep_ep **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cuda_ep_create: out is NULL");
  *out = NULL;
  cuda_ep *e = ortep__calloc(1, sizeof *e);
  if (!e) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_cuda_ep_create: no memory for the EP");
  e->base = (ortep_ep){&cuda_vtable, ortep_device_cuda(0), 0};
  e->governor = governor;
  *out = &e->base;
  return ORTEP_OK;
}
