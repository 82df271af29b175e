/*
 * cpu_ep.h: the CPU execution provider ("cpu_ep"). Always built.
 *
 * Memory comes from the host allocator (mimalloc) charged to an optional
 * governor; fences are signalled at once; device graphs are recorded plans
 * (capture records each kernel with its bound pointers, replay runs them
 * with no lookup, shape check or allocation); argmax and the error word live
 * in host memory.
 *
 * Ops (f32 compute; f16 / bf16 accepted for weights, outputs f32):
 *   Gather                            embedding lookup, axis 0, i32/i64 indices
 *   MatMul                            A [..., K] x B [K, N] (B 2-D)
 *   Gemm                              A [M, K] x B ([N, K] with transB=1), + C, alpha, beta
 *   com.microsoft:FusedMatMul         alpha x A [..., K] x B ([N, K] with transB=1)
 *   Add, Mul                          B equal, a trailing-dims suffix of A, or one element
 *   Sigmoid, Softmax (last axis), ArgMax (last axis, i64 out)
 *   ortep:SiLUMul                     silu(gate) * up
 *   ortep:Noop                        does nothing (measures dispatch and replay overhead)
 *   SimplifiedLayerNormalization      RMSNorm over the last axis
 *   com.microsoft:SkipSimplifiedLayerNormalization
 *   com.microsoft:RotaryEmbedding     [B, S, heads x head_dim], positions from a tensor
 *   com.microsoft:GroupQueryAttention one token or a chunk of consecutive tokens, KV caches updated in place
 *   ortep:Linear                      the Hugging Face Linear, up to three weights in one pass
 *
 * Options (ortep_ep_initialize): cpu.threads = N, the worker threads the EP
 * runs Linear rows (or, for a prefill chunk, blocks of output columns through
 * single-threaded sgemm), attention heads, RMSNorm and RoPE rows and the
 * argmax on (default: every CPU the process may run on). Results are bitwise
 * the same for any N; OpenBLAS's own threading is kept at one.
 *
 * Dot products (the decode projections and attention) use the widest SIMD set
 * the CPU and OS support: "avx512" (AVX-512F), "avx2" (AVX2 + FMA + F16C) or
 * "portable" loops, chosen once per process. The environment variable
 * ORTEP_CPU_SIMD = auto | avx512 | avx2 | portable asks for one (to compare
 * them, or to rule one out); ortep_ep_initialize fails, naming the sets this
 * CPU has, with ORTEP_E_INVALID_ARGUMENT when it names no set and with
 * ORTEP_E_NOT_SUPPORTED when it names one the CPU (or its OS) lacks. The sets agree within float rounding
 * (they sum in different orders); within one process results do not change.
 */
#ifndef ORTEP_CPU_EP_H
#define ORTEP_CPU_EP_H

#include "ortep/ep.h"
#include "ortep/governor.h"

ORTEP_BEGIN_DECLS

/* Creates the CPU EP (uninitialised). governor may be NULL; it must outlive
 * the EP. Initialise with ortep_ep_initialize before use. */
ORTEP_API ortep_status ortep_cpu_ep_create(ortep_governor *governor, ortep_ep **out);
/* The same over a caller's host allocator (e.g. a fault-injecting wrapper
 * around ortep_host_allocator_create's), which must outlive the EP and is
 * not destroyed by it; charging a governor is that allocator's business. */
ORTEP_API ortep_status ortep_cpu_ep_create_with_allocator(ortep_allocator *backing, ortep_ep **out);

/* The worker threads an initialised CPU EP runs its nodes on (cpu.threads;
 * by default every CPU the process may run on); 0 for another EP. */
ORTEP_API size_t ortep_cpu_ep_threads(const ortep_ep *ep);
/* The SIMD set an initialised CPU EP's kernels use: "avx512", "avx2" or
 * "portable"; NULL for another EP or an uninitialised one. */
ORTEP_API const char *ortep_cpu_ep_simd(const ortep_ep *ep);
/* Whether an initialised CPU EP multiplies many rows (a prefill chunk) by
 * bf16 weights in its blocked layout with AVX512-BF16's vdpbf16ps: the rows
 * rounded to bf16 (nearest even) first, the weights read as stored (the
 * avx512 set on a CPU that has AVX512-BF16; docs/batch.md). One row, and a
 * batch's rows computed alone, keep f32 activations. false for another EP. */
ORTEP_API bool ortep_cpu_ep_bf16_products(const ortep_ep *ep);

/* The kernel set of the BLAS (OpenBLAS) that multiplies f32 prefill chunks
 * and attention blocks: openblas_get_corename(), e.g. "SkylakeX", "Haswell",
 * "Zen"; "unknown" if it does not say. */
ORTEP_API const char *ortep_cpu_blas_core(void);
/* What to set OPENBLAS_CORETYPE to when that is wrong for this CPU: a
 * DYNAMIC_ARCH OpenBLAS that does not know the CPU model (e.g. 0.3.21 on
 * recent Xeons) falls back to its SSE3 "Prescott" kernels, ~4x slower than
 * its AVX-512 ones there. "Cooperlake" (AVX-512 with BF16), "SkylakeX"
 * (AVX-512) or "Haswell" (AVX2) when OpenBLAS runs "Prescott" on a CPU and
 * OS with those; NULL when its choice stands, when OPENBLAS_CORETYPE is
 * already set, or when the OpenBLAS is not a DYNAMIC_ARCH build. OpenBLAS
 * reads the variable once, when it is loaded, so a program that wants it
 * sets it and starts again (ortep and ortep-bench do: docs/build.md). */
ORTEP_API const char *ortep_cpu_blas_suggested_core(void);

ORTEP_END_DECLS

#endif
