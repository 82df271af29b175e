/*
 * kernels.cu: the CUDA op kernels (ops.h). Same semantics as the CPU EP's
 * kernels (kernels/cpu/ops.c), f32 accumulation. Launch shapes favour decode
 * (one token): rows of a block each, warp reductions via shuffles.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/feed.h"
#include "kernels/sampling.h"
#include "ops.h"

/* ortep_dtype values (dtype.h): keep in step (ep.c checks them). */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_Q8_0 = 7, DT_Q4_0 = 8 };
/* error_word.h bits */
enum {
  BIT_GATHER = 1u,
  BIT_ROTARY = 2u,
  BIT_KV = 4u,
  BIT_ARGMAX = 8u,  /* a logit was NaN or infinite */
  BIT_SAMPLE = 16u, /* the sampler's distribution was not finite (error_word.h) */
};

__device__ __forceinline__ float ld(const void *p, int dt, size_t i) {
  if (dt == DT_F16) return __half2float(((const __half *)p)[i]);
  if (dt == DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  return ((const float *)p)[i];
}

/* Warp- and block-wide reductions (blockDim.x a multiple of 32, <= 1024;
 * every thread gets the result), one definition for each type and operation:
 * Op is Sum or Max. */
struct Sum {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return a + b;
  }
  template <typename T>
  __device__ static T identity() {
    return T(0);
  }
};
struct Max {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return fmax(a, b); /* NaN-ignoring, as fmaxf */
  }
  template <typename T>
  __device__ static T identity() {
    return T(-INFINITY);
  }
};
template <typename Op, typename T>
__device__ __forceinline__ T warp_reduce(T v) {
  for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename Op, typename T>
__device__ T block_reduce(T v) {
  __shared__ T part[32];
  v = warp_reduce<Op>(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T t = (threadIdx.x < (blockDim.x >> 5)) ? part[threadIdx.x] : Op::template identity<T>();
  if (warp == 0) t = warp_reduce<Op>(t);
  if (threadIdx.x == 0) part[0] = t;
  __syncthreads();
  return part[0];
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<Sum>(v); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce<Max>(v); }
__device__ float block_sum(float v) { return block_reduce<Sum>(v); }
__device__ float block_max(float v) { return block_reduce<Max>(v); }
__device__ double block_max_d(double v) { return block_reduce<Max>(v); } /* the sampler's largest z */

static unsigned blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
/* Peek, not Get: reading the launch status must not clear (and so hide from
 * its owner) an error some other code left pending. */
static int launched(void) { return (int)cudaPeekAtLastError(); }

/* --- programmatic dependent launch (compute 9.0) ------------------------------------
 * With it (the EPs' vote: ortep__cu_pdl_vote), every kernel is launched with
 * programmatic stream serialization, so it may start while the kernel
 * before it finishes; each kernel's first act is pdl_begin: wait for the
 * grid before it to complete with its writes visible (griddepcontrol.wait:
 * a no-op when not launched so), then let the next one launch and reach its
 * own wait. A kernel thus reads nothing early, and the launch latency and
 * block scheduling of the next overlap this one's tail. Captured into the
 * graphs as programmatic edges. Written and compiled without a GPU: never
 * run yet. */
static int g_pdl_yes, g_pdl_no;
extern "C" void ortep__cu_pdl_vote(int usable) { usable ? ++g_pdl_yes : ++g_pdl_no; }
extern "C" int ortep__cu_pdl(void) { return g_pdl_yes > 0 && g_pdl_no == 0; }

__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

template <typename... P, typename... A>
static void launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, A... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = 0, cfg.stream = stream;
  cfg.attrs = attr, cfg.numAttrs = ortep__cu_pdl() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...); /* its status: launched() */
}

/* --- q8_0 / q4_0 (dtype.h) ------------------------------------------------------
 * GGUF's blocks of 32 values: an f16 scale d, then 32 int8 (q8_0: x = d q)
 * or 16 bytes of nibbles (q4_0: byte i holds value i in its low nibble and
 * value i + 16 in its high one, x = d (q - 8)), rows [N, K] of K / 32 blocks
 * of 34 / 18 bytes. A block is only 2-byte aligned: it is read 16 bits at a
 * time. Decode computes what the CPU EP computes (kernels/cpu/quant.c): x
 * quantized to q8 blocks once per node (d = max|x| / 127, q = x / d
 * rounded to even, a NaN to -128), integer dot products per block, the
 * products' sums times d_w d_x accumulated in f32 (in another order than the
 * CPU's lanes: within float rounding of it). Written and compiled without a
 * GPU: never run yet (docs/api.md). */
#define QK 32
__device__ __forceinline__ size_t q_bytes(int dt) { return dt == DT_Q8_0 ? 34 : 18; }

/* Value i of a row-major q8_0 / q4_0 tensor. */
__device__ __forceinline__ float ld_q(const void *p, int dt, size_t i) {
  const unsigned char *b = (const unsigned char *)p + (i / QK) * q_bytes(dt);
  float d = __half2float(*(const __half *)b);
  size_t w = i % QK;
  if (dt == DT_Q8_0) return d * (float)(signed char)b[2 + w];
  unsigned c = b[2 + (w & 15)];
  return d * (float)((int)(w < 16 ? c & 15u : c >> 4) - 8);
}

/* Four bytes at a 2-byte aligned address. */
__device__ __forceinline__ int ld_i32_2(const unsigned char *p) {
  const unsigned short *h = (const unsigned short *)p;
  return (int)((unsigned)h[0] | ((unsigned)h[1] << 16));
}

/* The 32 products of a weight block with x's block (xq 4-byte aligned), summed in integers. */
__device__ __forceinline__ int q_block_dot(const unsigned char *blk, int dt, const signed char *xq) {
  const int *xi = (const int *)xq;
  int s = 0;
  if (dt == DT_Q8_0) {
#pragma unroll
    for (int t = 0; t < 8; t++) s = __dp4a(ld_i32_2(blk + 2 + 4 * t), xi[t], s);
    return s;
  }
  int sx = 0;
#pragma unroll
  for (int t = 0; t < 4; t++) {
    int packed = ld_i32_2(blk + 2 + 4 * t); /* values 4t..4t+3 (low nibbles) and 16 + 4t.. (high) */
    s = __dp4a(packed & 0x0f0f0f0f, xi[t], s);
    s = __dp4a((packed >> 4) & 0x0f0f0f0f, xi[4 + t], s);
  }
#pragma unroll
  for (int t = 0; t < 8; t++) sx = __dp4a(0x01010101, xi[t], sx);
  return s - 8 * sx; /* the nibbles are q + 8 */
}

/* One warp's dot product of row r's quantized x with weight row j: lanes stride over blocks. */
__device__ __forceinline__ float warp_dot_q(const signed char *xq, const float *xd, const void *w, int dt, size_t j,
                                            size_t k, unsigned lane) {
  size_t nb = k / QK;
  const unsigned char *row = (const unsigned char *)w + j * nb * q_bytes(dt);
  float acc = 0.0f;
  for (size_t b = lane; b < nb; b += 32) {
    const unsigned char *blk = row + b * q_bytes(dt);
    acc += __half2float(*(const __half *)blk) * xd[b] * (float)q_block_dot(blk, dt, xq + b * QK);
  }
  return warp_sum(acc);
}

/* x [rows, k] into q8 blocks, one warp per block of 32: lane i holds value i. */
__global__ void k_quantize_x(const float *x, size_t n_blocks, signed char *q, float *d) {
  pdl_begin();
  size_t b = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  unsigned lane = threadIdx.x & 31;
  if (b >= n_blocks) return; /* a whole warp leaves together */
  float v = x[b * QK + lane];
  float amax = warp_max(fabsf(v)), dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
  float r = rintf(v * id); /* half to even, as the CPU's */
  q[b * QK + lane] = (signed char)(r >= 127.0f ? 127 : r >= -128.0f ? (int)r : -128);
  if (lane == 0) d[b] = dd;
}

__global__ void k_gather(const void *table, int tdt, size_t rows, size_t h, const void *index, int idx64, size_t n,
                         float *out, uint32_t *err) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n * h) return;
  size_t row = i / h, j = i % h;
  long long r = idx64 ? ((const long long *)index)[row] : ((const int *)index)[row];
  if (r < 0 || (unsigned long long)r >= rows) {
    if (j == 0) atomicOr(err, BIT_GATHER);
    out[i] = 0.0f;
    return;
  }
  out[i] = tdt == DT_Q8_0 || tdt == DT_Q4_0 ? ld_q(table, tdt, (size_t)r * h + j) : ld(table, tdt, (size_t)r * h + j);
}

extern "C" int ortep__cu_gather(const void *table, int tdt, size_t rows, size_t h, const void *index, int idx64,
                                size_t n, float *out, uint32_t *err, void *stream) {
  if (!n || !h) return 0;
  launch(k_gather, dim3(blocks(n * h, 256)), dim3(256), (cudaStream_t)stream, table, tdt, rows, h, index, idx64, n, out,
         err);
  return launched();
}

__global__ void k_convert(const float *x, void *dst, int dt, size_t n) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (dt == DT_F16)
    ((__half *)dst)[i] = __float2half_rn(x[i]);
  else
    ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
}

extern "C" int ortep__cu_convert(const float *x, void *dst, int dt, size_t n, void *stream) {
  if (!n) return 0;
  launch(k_convert, dim3(blocks(n, 256)), dim3(256), (cudaStream_t)stream, x, dst, dt, n);
  return launched();
}

/* n values of a row-major q8_0 / q4_0 tensor widened to f32 (exact: d x q
 * fits an f32), for a prefill chunk's SGEMM. */
__global__ void k_dequantize(const void *w, int dt, size_t n, float *out) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = ld_q(w, dt, i);
}

extern "C" int ortep__cu_dequantize(const void *w, int dt, size_t n, float *out, void *stream) {
  if (!n) return 0;
  launch(k_dequantize, dim3(blocks(n, 256)), dim3(256), (cudaStream_t)stream, w, dt, n, out);
  return launched();
}

__global__ void k_fill_bias(const void *c, int cdt, size_t c_rows, size_t m, size_t n, float *y) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= m * n) return;
  size_t row = c_rows == 1 ? 0 : i / n;
  y[i] = ld(c, cdt, row * n + i % n);
}

extern "C" int ortep__cu_fill_bias(const void *c, int cdt, size_t c_rows, size_t m, size_t n, float *y, void *stream) {
  if (!m || !n) return 0;
  launch(k_fill_bias, dim3(blocks(m * n, 256)), dim3(256), (cudaStream_t)stream, c, cdt, c_rows, m, n, y);
  return launched();
}

/* --- GEMV: one row of activations times a weight matrix (decode, M = 1) -----------
 * The function the CPU EP computes: f32 activations (never rounded), 16-bit
 * weights widened to f32, f32 accumulation. W is [N, K] (trans_b, the
 * Hugging Face Linear layout): one warp per output, lanes stride over K with
 * 16-byte loads of W, then a shuffle reduction. W [K, N]: one thread per
 * output column, coalesced across the warp. y = alpha * x W + beta * c. */
__device__ __forceinline__ float w16(unsigned short u, int dt) {
  return dt == DT_BF16 ? __uint_as_float((unsigned)u << 16) : __half2float(__ushort_as_half(u));
}

__device__ __forceinline__ float gemv_epilogue(float acc, float alpha, const void *c, int cdt, size_t c_rows,
                                               float beta, size_t r, size_t n, size_t j) {
  float v = alpha * acc;
  if (c && beta != 0.0f) v += beta * ld(c, cdt, (c_rows == 1 ? 0 : r) * n + j);
  return v;
}

/* One warp's dot product of x (f32) with row j of a [*, k] weight. vec: both
 * rows 16-byte aligned and k a multiple of 8, so 16-byte loads are safe.
 * Unrolled so that each lane has several loads in flight: a long row (the
 * MLP's down projection, K = 4864) would otherwise wait out the memory
 * latency once per iteration. */
__device__ __forceinline__ float warp_dot(const float *xr, const void *w, int wdt, size_t j, size_t k, int vec,
                                          unsigned lane) {
  float acc = 0.0f;
  if (wdt == DT_F32) {
    const float *wr = (const float *)w + j * k;
    if (vec) {
#pragma unroll 4
      for (size_t i = lane * 4; i < k; i += 128) {
        float4 a = *(const float4 *)(xr + i), b = *(const float4 *)(wr + i);
        acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
      }
    } else {
      for (size_t i = lane; i < k; i += 32) acc += xr[i] * wr[i];
    }
  } else {
    const unsigned short *wr = (const unsigned short *)w + j * k;
    if (vec) {
#pragma unroll 4
      for (size_t i = lane * 8; i < k; i += 256) {
        uint4 b = *(const uint4 *)(wr + i);
        float4 a0 = *(const float4 *)(xr + i), a1 = *(const float4 *)(xr + i + 4);
        acc += a0.x * w16((unsigned short)(b.x & 0xffff), wdt) + a0.y * w16((unsigned short)(b.x >> 16), wdt) +
               a0.z * w16((unsigned short)(b.y & 0xffff), wdt) + a0.w * w16((unsigned short)(b.y >> 16), wdt) +
               a1.x * w16((unsigned short)(b.z & 0xffff), wdt) + a1.y * w16((unsigned short)(b.z >> 16), wdt) +
               a1.z * w16((unsigned short)(b.w & 0xffff), wdt) + a1.w * w16((unsigned short)(b.w >> 16), wdt);
      }
    } else {
      for (size_t i = lane; i < k; i += 32) acc += xr[i] * w16(wr[i], wdt);
    }
  }
  return warp_sum(acc);
}

static int vec_ok(const float *x, const void *w, int wdt, size_t k) {
  return k % (wdt == DT_F32 ? 4 : 8) == 0 && ((uintptr_t)x | (uintptr_t)w) % 16 == 0;
}

__global__ void k_gemv_nk(const float *x, const void *w, int wdt, size_t k, size_t n, int vec, float alpha,
                          const void *c, int cdt, size_t c_rows, float beta, float *y) {
  pdl_begin();
  unsigned lane = threadIdx.x & 31;
  size_t j = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5), r = blockIdx.y;
  if (j >= n) return;
  float acc = warp_dot(x + r * k, w, wdt, j, k, vec, lane);
  if (lane == 0) y[r * n + j] = gemv_epilogue(acc, alpha, c, cdt, c_rows, beta, r, n, j);
}

struct linear_vec {
  int v[3];
};

/* Rows of all groups laid end to end: blockIdx.x * warps + warp picks one. */
/* A weight row of any kind against row r of x (a.xq / a.xd: x quantized, for q8_0 / q4_0 weights). */
__device__ __forceinline__ float linear_dot(const ortep__cu_linear_args &a, const float *xr, size_t r, size_t g,
                                            size_t j, int vec, unsigned lane) {
  int dt = a.wdt[g];
  if (dt == DT_Q8_0 || dt == DT_Q4_0)
    return warp_dot_q(a.xq + r * a.k, a.xd + r * (a.k / QK), a.w[g], dt, j, a.k, lane);
  return warp_dot(xr, a.w[g], dt, j, a.k, vec, lane);
}

__global__ void k_linear(ortep__cu_linear_args a, linear_vec vec) {
  pdl_begin();
  unsigned lane = threadIdx.x & 31;
  size_t j = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5), r = blockIdx.y;
  const float *xr = a.x + r * a.k;
  if (a.gate_up) {
    if (j >= a.n[0]) return;
    float g = linear_dot(a, xr, r, 0, j, vec.v[0], lane);
    float u = linear_dot(a, xr, r, 1, j, vec.v[1], lane);
    if (lane == 0) {
      if (a.b[0]) g += ld(a.b[0], a.bdt[0], j);
      if (a.b[1]) u += ld(a.b[1], a.bdt[1], j);
      a.y[0][r * a.n[0] + j] = g / (1.0f + expf(-g)) * u;
    }
    return;
  }
  size_t g = 0;
  while (g < a.groups && j >= a.n[g]) j -= a.n[g++];
  if (g >= a.groups) return;
  float v = linear_dot(a, xr, r, g, j, vec.v[g], lane);
  if (lane == 0) {
    if (a.b[g]) v += ld(a.b[g], a.bdt[g], j);
    if (a.res) v += a.res[r * a.n[g] + j];
    a.y[g][r * a.n[g] + j] = v;
  }
}

extern "C" int ortep__cu_linear(const ortep__cu_linear_args *a, void *stream) {
  size_t rows = a->gate_up ? a->n[0] : 0;
  linear_vec vec = {{0, 0, 0}};
  bool quant = false;
  for (size_t g = 0; g < a->groups; g++) {
    if (!a->gate_up) rows += a->n[g];
    vec.v[g] = vec_ok(a->x, a->w[g], a->wdt[g], a->k);
    quant = quant || a->wdt[g] == DT_Q8_0 || a->wdt[g] == DT_Q4_0;
  }
  if (!rows || !a->m) return 0;
  const unsigned warps = 4;
  if (quant) { /* x into q8 blocks once, for every output row */
    size_t nb = a->m * (a->k / QK);
    launch(k_quantize_x, dim3(blocks(nb, 8)), dim3(8 * 32), (cudaStream_t)stream, a->x, nb, a->xq, a->xd);
    int rc = launched();
    if (rc) return rc;
  }
  launch(k_linear, dim3(dim3(blocks(rows, warps), (unsigned)a->m)), dim3(warps * 32), (cudaStream_t)stream, *a, vec);
  return launched();
}

__global__ void k_gemv_kn(const float *x, const void *w, int wdt, size_t k, size_t n, float alpha, const void *c,
                          int cdt, size_t c_rows, float beta, float *y) {
  pdl_begin();
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n) return;
  const float *xr = x + r * k;
  float acc = 0.0f;
  for (size_t i = 0; i < k; i++) acc += xr[i] * ld(w, wdt, i * n + j);
  y[r * n + j] = gemv_epilogue(acc, alpha, c, cdt, c_rows, beta, r, n, j);
}

extern "C" int ortep__cu_gemv(const float *x, const void *w, int wdt, int trans_b, size_t m, size_t k, size_t n,
                              float alpha, const void *c, int cdt, size_t c_rows, float beta, float *y, void *stream) {
  if (!m || !n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (trans_b) {
    /* 16-byte loads need 16-byte aligned rows of both x (f32) and W */
    int vec = vec_ok(x, w, wdt, k);
    const unsigned warps = 4;
    launch(k_gemv_nk, dim3(dim3(blocks(n, warps), (unsigned)m)), dim3(warps * 32), s, x, w, wdt, k, n, vec, alpha, c,
           cdt, c_rows, beta, y);
  } else {
    launch(k_gemv_kn, dim3(dim3(blocks(n, 128), (unsigned)m)), dim3(128), s, x, w, wdt, k, n, alpha, c, cdt, c_rows,
           beta, y);
  }
  return launched();
}

__global__ void k_binary(int mul, const float *a, const void *b, int bdt, size_t nb, size_t n, float *y) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float bv = ld(b, bdt, i % nb);
  y[i] = mul ? a[i] * bv : a[i] + bv;
}

extern "C" int ortep__cu_binary(int mul, const float *a, const void *b, int bdt, size_t nb, size_t n, float *y,
                                void *stream) {
  if (!n) return 0;
  launch(k_binary, dim3(blocks(n, 256)), dim3(256), (cudaStream_t)stream, mul, a, b, bdt, nb, n, y);
  return launched();
}

__global__ void k_sigmoid(const float *x, size_t n, float *y) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

extern "C" int ortep__cu_sigmoid(const float *x, size_t n, float *y, void *stream) {
  if (!n) return 0;
  launch(k_sigmoid, dim3(blocks(n, 256)), dim3(256), (cudaStream_t)stream, x, n, y);
  return launched();
}

__global__ void k_silu_mul(const float *g, const float *u, size_t n, float *y) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

extern "C" int ortep__cu_silu_mul(const float *g, const float *u, size_t n, float *y, void *stream) {
  if (!n) return 0;
  launch(k_silu_mul, dim3(blocks(n, 256)), dim3(256), (cudaStream_t)stream, g, u, n, y);
  return launched();
}

/* One block per row. */
__global__ void k_rmsnorm(const float *x, const float *skip, const void *bias, int bdt, const void *scale, int sdt,
                          size_t h, float eps, float *y, float *sum) {
  pdl_begin();
  size_t r = blockIdx.x;
  const float *xr = x + r * h;
  float ss = 0.0f;
  for (size_t j = threadIdx.x; j < h; j += blockDim.x) {
    float v = xr[j] + (skip ? skip[r * h + j] : 0.0f) + (bias ? ld(bias, bdt, j) : 0.0f);
    if (sum) sum[r * h + j] = v;
    ss += v * v;
  }
  float inv = rsqrtf(block_sum(ss) / (float)h + eps);
  for (size_t j = threadIdx.x; j < h; j += blockDim.x) {
    float v = xr[j] + (skip ? skip[r * h + j] : 0.0f) + (bias ? ld(bias, bdt, j) : 0.0f);
    y[r * h + j] = v * inv * ld(scale, sdt, j);
  }
}

extern "C" int ortep__cu_rmsnorm(const float *x, const float *skip, const void *bias, int bdt, const void *scale,
                                 int sdt, size_t rows, size_t h, float eps, float *y, float *sum, void *stream) {
  if (!rows) return 0;
  launch(k_rmsnorm, dim3((unsigned)rows), dim3(256), (cudaStream_t)stream, x, skip, bias, bdt, scale, sdt, h, eps, y,
         sum);
  return launched();
}

/* One thread per (token, head, pair); dims past rot pass through. */
__global__ void k_rotary(const float *x, const void *pos, int pos64, size_t tokens, size_t heads, size_t hd, size_t rot,
                         int inter, const void *cosc, const void *sinc, int cdt, size_t max_pos, float *y,
                         uint32_t *err) {
  pdl_begin();
  size_t half = rot / 2, per_head = hd - half; /* threads per head: half pairs + (hd - rot) copies */
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= tokens * heads * per_head) return;
  size_t t = i / (heads * per_head), rem = i % (heads * per_head), hh = rem / per_head, j = rem % per_head;
  long long p = pos64 ? ((const long long *)pos)[t] : ((const int *)pos)[t];
  const float *xh = x + (t * heads + hh) * hd;
  float *yh = y + (t * heads + hh) * hd;
  if (p < 0 || (unsigned long long)p >= max_pos) {
    if (hh == 0 && j == 0) atomicOr(err, BIT_ROTARY);
    if (j < half) {
      size_t i1 = inter ? 2 * j : j, i2 = inter ? 2 * j + 1 : j + half;
      yh[i1] = xh[i1], yh[i2] = xh[i2];
    } else {
      yh[rot + (j - half)] = xh[rot + (j - half)];
    }
    return;
  }
  if (j < half) {
    float c = ld(cosc, cdt, (size_t)p * half + j), s = ld(sinc, cdt, (size_t)p * half + j);
    size_t i1 = inter ? 2 * j : j, i2 = inter ? 2 * j + 1 : j + half;
    float x1 = xh[i1], x2 = xh[i2];
    yh[i1] = x1 * c - x2 * s;
    yh[i2] = x2 * c + x1 * s;
  } else {
    yh[rot + (j - half)] = xh[rot + (j - half)];
  }
}

extern "C" int ortep__cu_rotary(const float *x, const void *pos, int pos64, size_t tokens, size_t heads, size_t hd,
                                size_t rot, int inter, const void *cosc, const void *sinc, int cdt, size_t max_pos,
                                float *y, uint32_t *err, void *stream) {
  size_t n = tokens * heads * (hd - rot / 2);
  if (!n) return 0;
  launch(k_rotary, dim3(blocks(n, 128)), dim3(128), (cudaStream_t)stream, x, pos, pos64, tokens, heads, hd, rot, inter,
         cosc, sinc, cdt, max_pos, y, err);
  return launched();
}

/* Writes every token's K and V at its position pos[t] (one thread per
 * element of tokens x kv x hd). */
__global__ void k_kv_write(const float *k, const float *v, float *kc, float *vc, const int32_t *pos, size_t tokens,
                           size_t kv, size_t hd, size_t cap, uint32_t *err) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= tokens * kv * hd) return;
  size_t t = i / (kv * hd), e = i % (kv * hd);
  int p = pos[t];
  if (p < 0 || (size_t)p >= cap) {
    if (e == 0) atomicOr(err, BIT_KV);
    return;
  }
  size_t g = e / hd, d = e % hd, at = ((size_t)p * kv + g) * hd + d; /* position-major caches */
  kc[at] = k[i];
  vc[at] = v[i];
}

/* One block of GQA_THREADS per (query head, token): scores over 0..pos[t]
 * (causal within a prefill chunk: later tokens sit at later positions), softmax,
 * weighted V. Each warp scores its own positions with the lanes splitting
 * head_dim (coalesced K rows, a shuffle sum); the weighted sum over V is
 * split over GQA_THREADS / hd groups of positions, each thread keeping one
 * dimension, and the groups' partial sums are added in a fixed order. Every
 * load of a loop is independent of the previous one, so they overlap instead
 * of each waiting out the memory latency. */
#define GQA_THREADS 256
__global__ void k_gqa(const float *q, const float *kc, const float *vc, const int32_t *pos, size_t heads, size_t kv,
                      size_t hd, size_t cap, float scale, float *scores, float *out) {
  pdl_begin();
  __shared__ float part[GQA_THREADS];
  size_t h = blockIdx.x, g = h / (heads / kv), t = blockIdx.y, item = t * heads + h;
  int p = pos[t];
  float *oh = out + item * hd;
  if (p < 0 || (size_t)p >= cap) {
    for (size_t d = threadIdx.x; d < hd; d += blockDim.x) oh[d] = 0.0f;
    return;
  }
  /* position-major caches: position t of head g at t * kv * hd + g * hd */
  const float *qh = q + item * hd, *K = kc + g * hd, *V = vc + g * hd;
  size_t row = kv * hd;
  float *sc = scores + item * cap;
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int t = (int)warp; t <= p; t += (int)warps) {
    float d = 0.0f;
    for (size_t i = lane; i < hd; i += 32) d += qh[i] * K[(size_t)t * row + i];
    d = warp_sum(d);
    if (lane == 0) sc[t] = d * scale;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int t = (int)threadIdx.x; t <= p; t += (int)blockDim.x) mx = fmaxf(mx, sc[t]);
  mx = block_max(mx);
  float den = 0.0f;
  for (int t = (int)threadIdx.x; t <= p; t += (int)blockDim.x) den += (sc[t] = expf(sc[t] - mx));
  den = block_sum(den); /* its barriers also order the score writes before the reads below */
  if (hd <= blockDim.x) {
    unsigned groups = blockDim.x / (unsigned)hd, tg = threadIdx.x / (unsigned)hd;
    size_t d = threadIdx.x % hd;
    float acc = 0.0f;
    if (tg < groups) {
#pragma unroll 4
      for (int t = (int)tg; t <= p; t += (int)groups) acc += sc[t] * V[(size_t)t * row + d];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < hd) {
      float sum = 0.0f;
      for (unsigned k = 0; k < groups; k++) sum += part[k * hd + threadIdx.x];
      oh[threadIdx.x] = sum / den;
    }
  } else {
    for (size_t d = threadIdx.x; d < hd; d += blockDim.x) {
      float acc = 0.0f;
#pragma unroll 4
      for (int t = 0; t <= p; t++) acc += sc[t] * V[(size_t)t * row + d];
      oh[d] = acc / den;
    }
  }
}

extern "C" int ortep__cu_gqa(const float *q, const float *k, const float *v, float *kc, float *vc, const int32_t *pos,
                             size_t tokens, size_t heads, size_t kv, size_t hd, size_t cap, float scale, float *scores,
                             float *out, uint32_t *err, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  launch(k_kv_write, dim3(blocks(tokens * kv * hd, 128)), dim3(128), s, k, v, kc, vc, pos, tokens, kv, hd, cap, err);
  int st = launched();
  if (st) return st;
  launch(k_gqa, dim3(dim3((unsigned)heads, (unsigned)tokens)), dim3(GQA_THREADS), s, q, kc, vc, pos, heads, kv, hd, cap,
         scale, scores, out);
  return launched();
}

__global__ void k_softmax(const float *x, size_t n, float *y) {
  pdl_begin();
  const float *xr = x + blockIdx.x * n;
  float *yr = y + blockIdx.x * n;
  float mx = -INFINITY;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, xr[i]);
  mx = block_max(mx);
  float s = 0.0f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (yr[i] = expf(xr[i] - mx));
  s = block_sum(s);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] /= s;
}

extern "C" int ortep__cu_softmax(const float *x, size_t rows, size_t n, float *y, void *stream) {
  if (!rows) return 0;
  launch(k_softmax, dim3((unsigned)rows), dim3(256), (cudaStream_t)stream, x, n, y);
  return launched();
}

/* First maximum, NaN skipped: (value, index) pairs reduced with "larger
 * value, or equal value and smaller index" wins. */
struct best {
  float v;
  unsigned long long i;
};
__device__ __forceinline__ best pick(best a, best b) {
  bool a_ok = a.i != ~0ull, b_ok = b.i != ~0ull;
  if (!a_ok) return b;
  if (!b_ok) return a;
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}
__device__ best block_best(best mine) {
  __shared__ float sv[32];
  __shared__ unsigned long long si[32];
  for (int o = 16; o > 0; o >>= 1) {
    best other = {__shfl_xor_sync(0xffffffffu, mine.v, o), __shfl_xor_sync(0xffffffffu, mine.i, o)};
    mine = pick(mine, other);
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = mine.v, si[warp] = mine.i;
  __syncthreads();
  if (warp == 0) {
    best t = threadIdx.x < (blockDim.x >> 5) ? best{sv[threadIdx.x], si[threadIdx.x]} : best{0.0f, ~0ull};
    for (int o = 16; o > 0; o >>= 1) {
      best other = {__shfl_xor_sync(0xffffffffu, t.v, o), __shfl_xor_sync(0xffffffffu, t.i, o)};
      t = pick(t, other);
    }
    mine = t;
  }
  return mine; /* valid in thread 0 */
}

/* The first maximum among the finite values; *bad is set when any value is
 * NaN or infinite (the caller latches the error-word bit: such logits mean
 * the model produced garbage, and no token of it may be emitted). */
__device__ best scan(const void *x, size_t n, int f16, bool *bad) {
  best b = {0.0f, ~0ull};
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = f16 ? __half2float(((const __half *)x)[i]) : ((const float *)x)[i];
    if (!isfinite(v)) {
      *bad = true;
      continue;
    }
    b = pick(b, best{v, i});
  }
  return b;
}

__global__ void k_argmax_rows(const float *x, size_t n, long long *out, uint32_t *err) {
  pdl_begin();
  bool bad = false;
  best b = block_best(scan(x + blockIdx.x * n, n, 0, &bad));
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    if (bad) atomicOr(err, BIT_ARGMAX);
    out[blockIdx.x] = b.i == ~0ull ? 0 : (long long)b.i;
  }
}

extern "C" int ortep__cu_argmax_rows(const float *x, size_t rows, size_t n, int64_t *out, uint32_t *err, void *stream) {
  if (!rows) return 0;
  launch(k_argmax_rows, dim3((unsigned)rows), dim3(1024), (cudaStream_t)stream, x, n, (long long *)out, err);
  return launched();
}

/* Device argmax in two passes: ARGMAX_BLOCKS blocks at most each reduce a
 * slice to (value, index, any non-finite), then one block reduces those and
 * writes (token, error word). The same "larger value, or equal value and
 * smaller index" rule at both levels keeps the first maximum. */
struct argmax_part {
  float v;
  unsigned bad;
  unsigned long long i;
};

__global__ void k_argmax_partial(const void *logits, int f16, size_t n, size_t chunk, argmax_part *parts) {
  pdl_begin();
  size_t lo = blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  bool bad = false;
  best b = {0.0f, ~0ull};
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float v = f16 ? __half2float(((const __half *)logits)[i]) : ((const float *)logits)[i];
    if (!isfinite(v)) {
      bad = true;
      continue;
    }
    b = pick(b, best{v, i});
  }
  b = block_best(b);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) parts[blockIdx.x] = argmax_part{b.v, bad ? 1u : 0u, b.i};
}

__global__ void k_argmax_final(const argmax_part *parts, unsigned nparts, uint32_t *result, uint32_t *err) {
  pdl_begin();
  best b = {0.0f, ~0ull};
  bool bad = false;
  for (unsigned k = threadIdx.x; k < nparts; k += blockDim.x) {
    b = pick(b, best{parts[k].v, parts[k].i});
    bad = bad || parts[k].bad;
  }
  b = block_best(b);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    if (bad) atomicOr(err, BIT_ARGMAX);
    result[0] = b.i == ~0ull ? 0u : (uint32_t)b.i;
    result[1] = *(volatile uint32_t *)err; /* the latched word, read with the token */
  }
}

extern "C" size_t ortep__cu_argmax_scratch_bytes(void) { return ORTEP__CU_ARGMAX_BLOCKS * sizeof(argmax_part); }

extern "C" int ortep__cu_device_argmax(const void *logits, int f16, size_t n, void *scratch, uint32_t *result,
                                       uint32_t *err, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  size_t chunk = 4096; /* four values per thread of a 1024-thread block */
  size_t blocks_needed = (n + chunk - 1) / chunk;
  if (blocks_needed > ORTEP__CU_ARGMAX_BLOCKS) {
    blocks_needed = ORTEP__CU_ARGMAX_BLOCKS;
    chunk = (n + blocks_needed - 1) / blocks_needed;
  }
  if (!blocks_needed) blocks_needed = 1;
  launch(k_argmax_partial, dim3((unsigned)blocks_needed), dim3(1024), s, logits, f16, n, chunk, (argmax_part *)scratch);
  int st = launched();
  if (st) return st;
  launch(k_argmax_final, dim3(1), dim3(256), s, (const argmax_part *)scratch, (unsigned)blocks_needed, result, err);
  return launched();
}

__global__ void k_noop(void) { pdl_begin(); }

extern "C" int ortep__cu_noop(void *stream) {
  launch(k_noop, dim3(1), dim3(1), (cudaStream_t)stream);
  return launched();
}

/* --- sampling (kernels/sampling.h defines it for every EP) -------------------
 * One block of SAMPLE_THREADS over the vocabulary: the thresholds of top-k
 * and top-p are found by bisection over the order-preserving integer keys of
 * the values (32 counting or summing passes each), so no sort is needed; the
 * draw walks the kept mass in id order, each thread over a contiguous range
 * after a scan of the ranges' sums. Never run on a GPU so far. */
#define SAMPLE_THREADS 1024
__device__ float z_load(const void *x, int f16, size_t i) {
  return f16 ? __half2float(((const __half *)x)[i]) : ((const float *)x)[i];
}
/* A step that cannot draw: thread 0 latches bit and writes (0, word). */
__device__ void sample_fail(uint32_t bit, uint32_t *result, uint32_t *err) {
  if (threadIdx.x == 0) {
    atomicOr(err, bit);
    result[0] = 0;
    result[1] = *err;
  }
}

/* The largest key t (ortep__float_key) such that the values of z at or
 * above it, counted (weigh 0) or summed (weigh 1), reach want: top-k's and
 * top-p's cut. Every thread of the block calls it. */
__device__ uint32_t largest_key(const float *z, size_t n, int weigh, float want) {
  uint32_t lo = 0, hi = 0xFFFFFFFFu;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2 + 1;
    float m = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
      m += ortep__float_key(z[i]) >= mid ? (weigh ? z[i] : 1.0f) : 0.0f;
    if (block_sum(m) >= want)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The draw over z (mass > 0): contiguous ranges, their sums scanned, then
 * one range walked by thread 0, which writes (token, word). */
__device__ void sample_draw(const float *z, size_t n, float mass, const ortep__sample_params *p, float *range_sum,
                            uint32_t *result, const uint32_t *err) {
  size_t per = (n + blockDim.x - 1) / blockDim.x, b = threadIdx.x * per, e = b + per < n ? b + per : n;
  float own = 0.0f;
  for (size_t i = b; i < e; i++) own += z[i];
  range_sum[threadIdx.x] = own;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float target = ortep__sample_uniform(p) * mass, cum = 0.0f;
  unsigned r = 0, last_r = 0;
  for (; r < blockDim.x; r++) {
    if (range_sum[r] > 0.0f) last_r = r;
    if (cum + range_sum[r] > target && range_sum[r] > 0.0f) break;
    cum += range_sum[r];
  }
  if (r == blockDim.x) r = last_r, cum -= range_sum[last_r];
  size_t rb = r * per, re = rb + per < n ? rb + per : n, pick = rb, last = rb;
  for (size_t i = rb; i < re; i++) {
    if (z[i] <= 0.0f) continue;
    last = i;
    cum += z[i];
    if (cum > target) {
      pick = i;
      break;
    }
    pick = last;
  }
  result[0] = (uint32_t)pick;
  result[1] = *err;
}

/* The sampler in one block of SAMPLE_THREADS (every thread calls it), with
 * its parameters p already in registers; result[0..1] = (token, word). */
__device__ void sample_block(const void *logits, int f16, size_t n, const ortep__sample_params p,
                             const int32_t *history, void *scratch, uint32_t *result, uint32_t *err) {
  __shared__ float range_sum[SAMPLE_THREADS];
  double *zd = (double *)scratch; /* steps 2-3 in double (kernels/sampling.h) */
  float *z = (float *)(zd + n);   /* p from step 4 on */
  float bad = 0.0f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = z_load(logits, f16, i);
    if (!isfinite(v)) bad = 1.0f;
    zd[i] = v;
  }
  if (block_max(bad) > 0.0f) return sample_fail(BIT_ARGMAX, result, err); /* its barriers order the writes above */
  if (p.repetition_penalty != 1.0f && history)
    for (uint32_t h = threadIdx.x; h < p.n_history; h += blockDim.x) {
      int32_t id = history[h];
      if (id >= 0 && (size_t)id < n)
        zd[id] = ortep__penalise((double)z_load(logits, f16, (size_t)id), (double)p.repetition_penalty);
    }
  __syncthreads();
  double mxd = -INFINITY;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    zd[i] = zd[i] / (double)p.temperature;
    mxd = fmax(mxd, zd[i]);
  }
  mxd = block_max_d(mxd);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) z[i] = (float)exp(zd[i] - mxd);
  __syncthreads();
  /* top-k: the largest key with at least k values at or above it */
  float zk = p.top_k > 0 && p.top_k < n ? ortep__key_float(largest_key(z, n, 0, (float)p.top_k)) : -INFINITY;
  float mass = 0.0f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    float q = z[i] >= zk ? z[i] : 0.0f;
    z[i] = q >= p.min_p ? q : 0.0f;
    mass += z[i];
  }
  mass = block_sum(mass);
  if (p.top_p < 1.0f) { /* the largest t whose mass at or above it reaches top_p x mass */
    float t = ortep__key_float(largest_key(z, n, 1, p.top_p * mass));
    mass = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      if (z[i] < t) z[i] = 0.0f;
      mass += z[i];
    }
    mass = block_sum(mass);
  }
  if (!(mass > 0.0f) || !isfinite(mass)) return sample_fail(BIT_SAMPLE, result, err); /* cannot happen (sampling.h) */
  sample_draw(z, n, mass, &p, range_sum, result, err);
}

__global__ void k_sample(const void *logits, int f16, size_t n, const ortep__sample_params *pp, const int32_t *history,
                         void *scratch, uint32_t *result, uint32_t *err) {
  pdl_begin();
  sample_block(logits, f16, n, *pp, history, scratch, result, err);
}

/* ortep:SelectToken (kernels/opset.c) in one block: the step's tokens into
 * the history, then the argmax (temperature 0) or the sampler at the last
 * position + 1. Capturable: everything it reads is device memory, so a
 * replay sees new parameters without a re-capture. Never run on a GPU so
 * far. */
__global__ void k_select(const float *logits, size_t n, const int32_t *tokens, const int32_t *positions, size_t t,
                         const ortep__sample_params *pp, int32_t *history, size_t cap, void *scratch, uint32_t *result,
                         uint32_t *err) {
  pdl_begin();
  for (size_t i = threadIdx.x; i < t; i += blockDim.x)
    if (positions[i] >= 0 && (size_t)positions[i] < cap) history[positions[i]] = tokens[i];
  __syncthreads();
  ortep__sample_params p = *pp;
  if (p.temperature == 0.0f) {
    bool bad = false;
    best b = block_best(scan(logits, n, 0, &bad));
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) {
      if (bad) atomicOr(err, BIT_ARGMAX);
      result[0] = b.i == ~0ull ? 0u : (uint32_t)b.i;
      result[1] = *(volatile uint32_t *)err;
    }
    return;
  }
  long long draw = (long long)positions[t - 1] + 1;
  p.position = draw > 0 ? (uint32_t)draw : 0u;
  p.n_history = draw <= 0 ? 0u : (size_t)draw < cap ? (uint32_t)draw : (uint32_t)cap;
  sample_block(logits, 0, n, p, history, scratch, result, err);
}

extern "C" int ortep__cu_select(const float *logits, size_t n, const int32_t *tokens, const int32_t *positions,
                                size_t t, const void *params, int32_t *history, size_t cap, void *scratch, void *result,
                                uint32_t *err, void *stream) {
  launch(k_select, dim3(1), dim3(SAMPLE_THREADS), (cudaStream_t)stream, logits, n, tokens, positions, t,
         (const ortep__sample_params *)params, history, cap, scratch, (uint32_t *)result, err);
  return launched();
}

extern "C" int ortep__cu_sample(const void *logits, int f16, size_t n, const void *params, const int32_t *history,
                                void *scratch, void *result, uint32_t *err, void *stream) {
  launch(k_sample, dim3(1), dim3(SAMPLE_THREADS), (cudaStream_t)stream, logits, f16, n,
         (const ortep__sample_params *)params, history, scratch, (uint32_t *)result, err);
  return launched();
}

/* --- K tokens per launch (kernels/feed.h, ops.h) --------------------------------
 * Written and compiled without a GPU: never run yet (docs/api.md). */
__global__ void k_feed(const int32_t *result, int32_t *token, int32_t *position, const uint8_t *stop, int64_t vocab,
                       int32_t *state, int64_t kmax, int32_t *go) {
  pdl_begin();
  *go = ortep__feed_token(result, token, position, stop, vocab, state, kmax);
}

extern "C" int ortep__cu_feed(const int32_t *result, int32_t *token, int32_t *position, const uint8_t *stop,
                              size_t vocab, int32_t *state, size_t kmax, int32_t *go, void *stream) {
  launch(k_feed, dim3(1), dim3(1), (cudaStream_t)stream, result, token, position, stop, (int64_t)vocab, state,
         (int64_t)kmax, go);
  return launched();
}

extern "C" void ortep__cu_loop_release(ortep__cu_loop *l) {
  if (l->exec) cudaGraphExecDestroy((cudaGraphExec_t)l->exec);
  *l = ortep__cu_loop{};
}

#if CUDART_VERSION >= 12040
/* The body's last node: one more iteration ran; go on while the segment's
 * flag says so and the bound allows. */
__global__ void k_loop_next(cudaGraphConditionalHandle h, const int32_t *flag, uint32_t *counter) {
  uint32_t ran = ++counter[0];
  cudaGraphSetConditional(h, *flag != 0 && ran < counter[1] ? 1u : 0u);
}

extern "C" int ortep__cu_loops_built(void) { return 1; }

static cudaError_t add_while(cudaGraph_t g, cudaGraphNode_t after, cudaGraphConditionalHandle h, cudaGraphNode_t *node,
                             cudaGraph_t *body) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = cudaGraphCondTypeWhile;
  p.conditional.size = 1;
#if CUDART_VERSION >= 13000
  cudaError_t r = cudaGraphAddNode(node, g, &after, NULL, 1, &p);
#else
  cudaError_t r = cudaGraphAddNode(node, g, &after, 1, &p);
#endif
  if (r == cudaSuccess) *body = p.conditional.phGraph_out[0];
  return r;
}

extern "C" int ortep__cu_loop_create(void *segment, const int32_t *flag, uint32_t *counter, ortep__cu_loop *l) {
  *l = ortep__cu_loop{};
  cudaGraph_t g = NULL, body = NULL;
  cudaGraphConditionalHandle h;
  cudaGraphNode_t reset, loop, child, next;
  cudaError_t r = cudaGraphCreate(&g, 0);
  /* the condition starts at 1 at every launch: the body runs at least once */
  if (r == cudaSuccess) r = cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault);
  cudaMemsetParams ms = {};
  ms.dst = counter, ms.value = 0, ms.elementSize = sizeof(uint32_t), ms.width = 1, ms.height = 1;
  if (r == cudaSuccess) r = cudaGraphAddMemsetNode(&reset, g, NULL, 0, &ms);
  if (r == cudaSuccess) r = add_while(g, reset, h, &loop, &body);
  if (r == cudaSuccess) r = cudaGraphAddChildGraphNode(&child, body, NULL, 0, (cudaGraph_t)segment);
  void *args[] = {&h, &flag, &counter};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)k_loop_next, kp.gridDim = dim3(1), kp.blockDim = dim3(1), kp.kernelParams = args;
  if (r == cudaSuccess) r = cudaGraphAddKernelNode(&next, body, &child, 1, &kp);
  cudaGraphExec_t exec = NULL;
  if (r == cudaSuccess) r = cudaGraphInstantiate(&exec, g, 0);
  if (g) cudaGraphDestroy(g);
  if (r != cudaSuccess) return (int)r;
  l->exec = exec, l->flag = flag, l->counter = counter;
  return 0;
}

extern "C" int ortep__cu_loop_launch(ortep__cu_loop *l, size_t max_iterations, void *stream) {
  uint32_t bound = max_iterations > UINT32_MAX ? UINT32_MAX : (uint32_t)max_iterations;
  if (bound != l->bound) { /* pageable source: staged before the call returns */
    cudaError_t r = cudaMemcpyAsync(l->counter + 1, &bound, sizeof bound, cudaMemcpyHostToDevice, (cudaStream_t)stream);
    if (r != cudaSuccess) return (int)r;
    l->bound = bound;
  }
  return (int)cudaGraphLaunch((cudaGraphExec_t)l->exec, (cudaStream_t)stream);
}
#else
extern "C" int ortep__cu_loops_built(void) { return 0; }
extern "C" int ortep__cu_loop_create(void *segment, const int32_t *flag, uint32_t *counter, ortep__cu_loop *l) {
  (void)segment, (void)flag, (void)counter;
  *l = ortep__cu_loop{};
  return (int)cudaErrorNotSupported;
}
extern "C" int ortep__cu_loop_launch(ortep__cu_loop *l, size_t max_iterations, void *stream) {
  (void)l, (void)max_iterations, (void)stream;
  return (int)cudaErrorNotSupported;
}
#endif

/* --- a chunk's Linear epilogue (ops.h), after its GEMMs on tensor cores ------------
 * Written and compiled without a GPU: never run yet. */
__global__ void k_linear_epilogue(ortep__cu_linear_epilogue_args a, size_t total) {
  pdl_begin();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= total) return;
  if (a.gate_up) {
    size_t j = i % a.n[0];
    float g = a.y[0][i] + (a.b[0] ? ld(a.b[0], a.bdt[0], j) : 0.0f);
    float u = a.up[i] + (a.b[1] ? ld(a.b[1], a.bdt[1], j) : 0.0f);
    a.y[0][i] = g / (1.0f + expf(-g)) * u;
    return;
  }
  size_t g = 0, at = i;
  while (g + 1 < a.groups && at >= a.m * a.n[g]) at -= a.m * a.n[g++];
  size_t j = at % a.n[g];
  float v = a.y[g][at] + (a.b[g] ? ld(a.b[g], a.bdt[g], j) : 0.0f);
  if (a.res && g == 0) v += a.res[at];
  a.y[g][at] = v;
}

extern "C" int ortep__cu_linear_epilogue(const ortep__cu_linear_epilogue_args *a, void *stream) {
  size_t total = 0;
  for (size_t g = 0; g < (a->gate_up ? 1 : a->groups); g++) total += a->m * a->n[g];
  bool work = a->gate_up || a->res;
  for (size_t g = 0; g < a->groups; g++) work = work || a->b[g];
  if (!total || !work) return 0; /* the GEMMs wrote y as it is */
  launch(k_linear_epilogue, dim3(blocks(total, 256)), dim3(256), (cudaStream_t)stream, *a, total);
  return launched();
}

/* The PTX version the module's kernels were built for (90: sm_90), so PDL is
 * voted for only when the kernels hold the wait that makes it safe. */
extern "C" int ortep__cu_built_for(void) {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, k_noop) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.ptxVersion;
}
