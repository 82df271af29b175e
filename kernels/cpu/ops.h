/*
 * ops.h: the CPU op kernels as plain functions on pointers and sizes. They
 * know nothing of EPs, tensors or graphs (kernels/cpu/ep.c wraps them).
 * Activations are f32; weights ("w" arguments) may be f32, f16 or bf16 and
 * are widened to f32 as they are read. Index checks OR a bit of the error
 * word (error_word.h) and skip the access, leaving a defined output.
 */
#ifndef ORTEP_KERNELS_CPU_OPS_H
#define ORTEP_KERNELS_CPU_OPS_H

#include "runtime/internal.h"
#include "kernels/sampling.h"

/* A weight operand: data of one float dtype (or, where a kernel says so, of
 * q8_0 / q4_0). */
typedef struct cpu_weights {
  const void *data;
  ortep_dtype dtype;
} cpu_weights;

static inline float cpu_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

static inline float cpu_w(cpu_weights w, size_t i) {
  switch (w.dtype) {
    case ORTEP_DTYPE_F16: return ortep_f16_to_f32(((const uint16_t *)w.data)[i]);
    case ORTEP_DTYPE_BF16: return cpu_bf16(((const uint16_t *)w.data)[i]);
    default: return ((const float *)w.data)[i];
  }
}

static inline void cpu_latch(uint32_t *error_word, uint32_t bit) {
  if (error_word) __atomic_fetch_or(error_word, bit, __ATOMIC_RELAXED);
}

/* out[n, h] = table[index[n], h]; index i32 or i64; blocked: a 16-bit table
 * in the blocked layout (ortep__cpu_linear_blocked). */
void ortep__cpu_gather(cpu_weights table, bool blocked, size_t rows, size_t h, const void *index, bool index64,
                       size_t n, float *out, uint32_t *error_word);
/* y[M, N] = a[M, K] @ b[K, N] (trans_b: b is [N, K]) * alpha + beta * c[N]
 * (c may be NULL; c_rows = 1 broadcasts a bias, M a full matrix). */
void ortep__cpu_gemm(const float *a, cpu_weights b, bool trans_b, const float *c_f32, cpu_weights c, size_t c_rows,
                     float alpha, float beta, size_t m, size_t k, size_t n, float *y);
/* y[i] = a[i] + b[i % nb] (add) or a[i] * b[i % nb] (mul). */
/* ortep:Linear (opset.h): groups of y_g[m, n_g] = x[m, k] W_g^T + b_g, W_g
 * [n_g, k]; gate_up: y_0 = SiLU(x W_0^T + b_0) * (x W_1^T + b_1); res (may
 * be NULL) is added to y_0. Each output is one dot product in a fixed order. */
void ortep__cpu_linear(const float *x, size_t m, size_t k, size_t groups, const cpu_weights *w, const cpu_weights *b,
                       const size_t *n, bool gate_up, bool rows_inner, const float *res, float *const *y, size_t begin,
                       size_t end);
/* The outputs ortep__cpu_linear computes, indexed row by row (rows_inner:
 * output by output, the rows of each together): items [begin, end) of them
 * can go to different threads. */
size_t ortep__cpu_linear_items(size_t m, size_t groups, const size_t *n, bool gate_up);
/* ortep:Linear for M > 1 (a prefill chunk): the same outputs through sgemm,
 * in blocks of output columns x blocks of rows that are the items [begin,
 * end) (see ops.c);
 * scratch: ortep__cpu_linear_scratch(k, quant) bytes of the running worker
 * (quant: q8_0 / q4_0 weights, whose x rows are quantized as decode's are,
 * into the scratch). The
 * sums run in BLAS's order, not dot_row's: within float rounding of the
 * row-by-row path, bitwise the same for any thread count. */
size_t ortep__cpu_linear_blocks(size_t m, size_t groups, const size_t *n, bool gate_up);
size_t ortep__cpu_linear_scratch(size_t k, bool quant);
/* blocked: every W_g is 16-bit in the blocked layout (below). */
void ortep__cpu_linear_gemm(const float *x, size_t m, size_t k, size_t groups, const cpu_weights *w,
                            const cpu_weights *b, const size_t *n, bool gate_up, bool blocked, const float *res,
                            float *const *y, size_t begin, size_t end, float *scratch);
/* ortep:Linear for one row of x over weights in the blocked layout
 * (opset.h: W_g [N_g/4, K/16, 4, 16], bf16 or f16, K a multiple of 16): item
 * i is outputs 4i .. 4i + 3, numbered as ortep__cpu_linear numbers single
 * ones (ortep__cpu_linear_items / 4 of them). Each output is still one
 * worker's dot product in a fixed order, but not dot_row's: four rows share
 * every load of x and stream as one (the order is in simd_avx2.h; the
 * portable loops keep dot_row's, bitwise). xb: x as the bf16 kernel reads
 * it (ortep__cpu_blocked_x; x itself when no weight is bf16). */
void ortep__cpu_linear_blocked(const float *x, const float *xb, size_t rows, size_t k, size_t groups,
                               const cpu_weights *w, const cpu_weights *b, const size_t *n, bool gate_up,
                               const float *res, float *const *y, size_t begin, size_t end);
/* Whether this process multiplies many rows of bf16 x by blocked bf16
 * weights with AVX512-BF16 (the avx512 set on a CPU that has it). */
bool ortep__cpu_bf16_rows(void);
/* dst = x rounded to bf16 (nearest even); only when ortep__cpu_bf16_rows(). */
void ortep__cpu_to_bf16(const float *x, size_t n, uint16_t *dst);
/* ortep:Linear over rows of x already rounded to bf16 (x16 [rows, k]) and
 * bf16 weights in the blocked layout, through vdpbf16ps (simd_rows.h); items
 * as ortep__cpu_linear_blocked's (quads of outputs, every row). A row's
 * result depends on that row alone, bitwise, for any rows beside it and any
 * thread count; it differs from the f32-activation path by x's rounding. */
void ortep__cpu_linear_bf16(const uint16_t *x16, size_t rows, size_t k, size_t groups, const cpu_weights *w,
                            const cpu_weights *b, const size_t *n, bool gate_up, const float *res, float *const *y,
                            size_t begin, size_t end);
/* x[k] as the bf16 blocked kernel reads it: permuted into xp (k floats)
 * where the SIMD set needs it, else x itself. Once per node run, not per
 * item. */
const float *ortep__cpu_blocked_x(const float *x, size_t k, float *xp);
/* Which dot products this process uses: "avx512", "avx2" or "portable"
 * (the name ORTEP_CPU_SIMD takes). */
const char *ortep__cpu_simd_name(void);
/* Fails, saying why, when ORTEP_CPU_SIMD names no set or one this CPU lacks. */
ortep_status ortep__cpu_simd_check(void);
/* Argmax over [begin, end) (see ops.c); the EP splits a vocabulary into
 * ranges and combines them in order, so the first maximum still wins. */
void ortep__cpu_argmax_range(const float *x32, const uint16_t *x16, size_t begin, size_t end, size_t *best,
                             float *value, bool *bad);
void ortep__cpu_add(const float *a, cpu_weights b, size_t nb, size_t n, float *y);
void ortep__cpu_mul(const float *a, cpu_weights b, size_t nb, size_t n, float *y);
/* y[i] = e^x[i], i < n (y may be x): every CPU kernel's exponential (SiLU,
 * sigmoid, softmax, attention), Cephes' expf: x clamped to [-87.3, 88.3],
 * x = n ln 2 + r, a degree-5 polynomial for e^r, 2^n in the exponent bits;
 * within 2 ulp of e^x there. Four lanes at a time in SSE2 registers on
 * x86-64, the same operations one lane at a time elsewhere and for the
 * tail, and out of line in a file built for the baseline instruction set,
 * so no caller's FMA contracts it: every lane of every caller gets bitwise
 * the same value for the same x. A NaN comes back as a number (the clamp);
 * every caller keeps the NaN in its other operand. */
void ortep__cpu_exp(const float *x, float *y, size_t n);
void ortep__cpu_sigmoid(const float *x, size_t n, float *y);
/* y = silu(gate) * up */
void ortep__cpu_silu_mul(const float *gate, const float *up, size_t n, float *y);
/* RMSNorm over rows of h: y = x / sqrt(mean(x^2) + eps) * scale. With skip:
 * x = input + skip (+ bias), and sum (if non-NULL) receives x. */
void ortep__cpu_rmsnorm(const float *x, const float *skip, cpu_weights bias, bool has_bias, cpu_weights scale,
                        size_t rows, size_t h, float eps, float *y, float *sum);
/* Rotary embedding over tokens x [tokens, heads, head_dim] at positions (i32
 * or i64, one per token) with cos/sin caches [max_pos, rot_dim / 2]. */
void ortep__cpu_rotary(const float *x, const void *pos, bool pos64, size_t tokens, size_t heads, size_t head_dim,
                       size_t rot_dim, bool interleaved, cpu_weights cos_cache, cpu_weights sin_cache, size_t max_pos,
                       float *y, uint32_t *error_word);
/* GroupQueryAttention for `tokens` tokens at positions pos[t] (one for a
 * decode step, a chunk for prefill), in two parts so the heads can run on
 * different workers: write_kv stores every token's K and V at its
 * position (a position outside the cache latches KV_SLOT and zeroes that
 * token's output); the heads then attend over positions 0..pos[t]: causal
 * within a chunk, since a token's later neighbours sit at later positions. */
typedef struct ortep__kv_cache {
  void *k, *v;    /* position-major [capacity, kv_heads, head_dim] (with slots: [slots, capacity, ...]) */
  ortep_dtype dt; /* f32, or f16 / bf16 (stored rounded, attended in f32) */
  /* a batch: token t's sequence is slot slots[t] of n_slots (< 0: a padding
   * row, zeros out, nothing written; >= n_slots latches KV_SLOT); NULL: one */
  const int32_t *slots;
  size_t n_slots;
} ortep__kv_cache;
void ortep__cpu_gqa_write_kv(const float *k, const float *v, ortep__kv_cache cache, const int32_t *pos, size_t tokens,
                             size_t heads, size_t kv_heads, size_t head_dim, size_t capacity, float *out,
                             uint32_t *error_word);
/* Items [i0, i1) of a step's tokens x kv_heads x blocks of `per` of the
 * KV head's query heads (the last block of a group may be shorter): an
 * item's heads read each key and value row once between them (simd_*.h
 * head_*), and each head's result is the same bits whatever `per` is, so
 * `per` can follow the thread count (ortep__cpu_gqa_per_item: whole groups
 * while tokens x kv_heads items feed every thread, smaller blocks where they
 * would not). scores: per x (capacity + 1) floats. */
size_t ortep__cpu_gqa_per_item(size_t tokens, size_t heads, size_t kv_heads, size_t threads);
size_t ortep__cpu_gqa_items(size_t tokens, size_t heads, size_t kv_heads, size_t per);
void ortep__cpu_gqa_heads(const float *q, ortep__kv_cache cache, const int32_t *pos, size_t heads, size_t kv_heads,
                          size_t head_dim, size_t capacity, size_t per, float scale, float *scores, float *out,
                          size_t i0, size_t i1);
/* A prefill chunk at consecutive positions inside the cache (the common
 * case) runs per head through two sgemms instead: scores = Q K^T over
 * positions 0..pos[0] + tokens - 1 into `scores` (tokens x that many floats
 * of the running worker), the causal softmax row by row, out = P V. Heads
 * [h0, h1). Within float rounding of the per-token path; bitwise the same
 * for any thread count (a head is one worker's, with the same arguments). */
bool ortep__cpu_gqa_chunk_ok(const int32_t *pos, size_t tokens, size_t capacity);
/* With 16-bit caches the head's K and V rows of the span are widened into
 * the scratch after the scores (2 x span x head_dim floats more).
 * bf16 (the kernel sets it for bf16 caches where ortep__cpu_attn_bf16
 * allows it and cpu.products does): bf16 products instead (simd_rows.h):
 * the chunk's queries and its probabilities rounded to bf16, the head's
 * keys and values packed as bf16 (rounded, were the cache f32 or f16) once
 * per KV head a worker meets, scores
 * and P V through vdpbf16ps in tiles of a few rows that reach only as far
 * as their last row's position. A row's result is that row's alone and the
 * same for any thread count; it differs from the f32 path by the rounding. */
void ortep__cpu_gqa_chunk_heads(const float *q, ortep__kv_cache cache, const int32_t *pos, size_t tokens, size_t heads,
                                size_t kv_heads, size_t head_dim, size_t capacity, float scale, bool bf16,
                                float *scores, float *out, size_t h0, size_t h1);
/* Whether a chunk's attention can take bf16 products here: the CPU has
 * AVX512-BF16 (the dot products chosen allow it) and head_dim is a multiple
 * of 16 up to 128. */
bool ortep__cpu_attn_bf16(size_t head_dim);
/* The per-worker scratch floats attention needs (the larger of the paths). */
size_t ortep__cpu_gqa_scratch(size_t tokens, size_t heads, size_t kv_heads, size_t head_dim, size_t capacity,
                              ortep_dtype cache_dtype, bool bf16);
/* The sampler (kernels/sampling.h) over n logits (f32 x32 or f16 x16):
 * returns the token; scratch: ORTEP__SAMPLE_SCRATCH_BYTES(n), 8-aligned. */
uint32_t ortep__cpu_sample(const float *x32, const uint16_t *x16, size_t n, const ortep__sample_params *p,
                           const int32_t *history, void *scratch, uint32_t *error_word);
/* ortep:SelectToken's first part: the step's tokens into the history at
 * their positions (a position outside [0, cap) is skipped). */
void ortep__cpu_select_history(const int32_t *tokens, const int32_t *positions, size_t t, int32_t *history, size_t cap);
/* ortep:SelectToken (opset.c) over n f32 logits; scratch as the sampler's. */
uint32_t ortep__cpu_select(const float *logits, size_t n, const int32_t *tokens, const int32_t *positions, size_t t,
                           const ortep__sample_params *params, int32_t *history, size_t cap, void *scratch,
                           uint32_t *error_word);
/* Row-major 16-bit [n, k] src into the blocked layout [n/4, k/16, 4, 16] at
 * dst (not overlapping; n % 4 == 0, k % 16 == 0); the same in place, four
 * rows at a time through rows (4 k values). */
void ortep__cpu_to_blocked(const uint16_t *src, size_t n, size_t k, uint16_t *dst);
void ortep__cpu_to_blocked_in_place(uint16_t *w, size_t n, size_t k, uint16_t *rows);
/* q8_0 / q4_0 weights (quant.c). The blocked layout (kernels/opset.h) from
 * GGUF's row-major blocks of [n, k] (n % 16 == 0, k % 32 == 0): into dst, or
 * in place one tile of 16 rows at a time through tile_tmp
 * (ortep__cpu_quant_tile_bytes). */
void ortep__cpu_quant_block(ortep_dtype dt, const void *src, size_t n, size_t k, void *dst);
void ortep__cpu_quant_block_in_place(ortep_dtype dt, void *w, size_t n, size_t k, void *tile_tmp);
size_t ortep__cpu_quant_tile_bytes(ortep_dtype dt, size_t k);
/* A row of k float values (f32, f16 or bf16; k a multiple of 32) quantized
 * to q8_0 / q4_0 as ortep_quantize rounds them, bit for bit (AVX-512F where
 * the SIMD set is avx512, else widened and ortep_quantize), into GGUF's
 * row-major blocks at dst. dst may be src itself: each block is written
 * after it is read, no further on than it began. tmp: k floats. */
void ortep__cpu_quantize_row(ortep_dtype to, ortep_dtype from, const void *src, size_t k, void *dst, float *tmp);
/* ortep__quantize_from (runtime/internal.h) through that row quantizer, the
 * same bytes and the same refusals: n values (whole blocks) from f32, f16
 * or bf16 into row-major q8_0 / q4_0 blocks, on the calling thread. What
 * the CUDA EP's module quantizes with on the host (cuda_module.c). */
ortep_status ortep__cpu_quantize_values(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out);
/* Row r of a q8_0 / q4_0 weight [., k] (row-major or blocked) as f32. */
void ortep__cpu_quant_row_f32(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, float *dst);
/* x[k] quantized for the integer dot products: 32-value blocks of int8 q
 * with an f32 scale d each, and per block -8 and -128 times the sum of its
 * q (the offsets of q4_0's and of q8_0's unsigned operands). */
typedef struct ortep__cpu_qx {
  int8_t *q;
  float *d;
  int32_t *bias4, *bias8;
} ortep__cpu_qx;
size_t ortep__cpu_qx_bytes(size_t k);
void ortep__cpu_qx_init(void *mem, size_t k, ortep__cpu_qx *qx);
void ortep__cpu_quantize_x(const float *x, size_t k, const ortep__cpu_qx *qx);
/* Row r of w times the quantized x, in the order quant.c defines (bitwise
 * the same for every SIMD variant). */
float ortep__cpu_quant_dot(ortep_dtype dt, const void *w, bool blocked, size_t r, size_t k, const ortep__cpu_qx *x);
/* ortep:Linear with q8_0 / q4_0 weights over `rows` rows of x, each
 * quantized (x[row]) and computed as that row alone: items are tiles of 16
 * outputs when blocked, else single outputs; an item runs every row against
 * its weight rows. */
void ortep__cpu_linear_quant(const ortep__cpu_qx *x, size_t rows, size_t k, size_t groups, const cpu_weights *w,
                             const cpu_weights *b, const size_t *n, bool gate_up, bool blocked, const float *res,
                             float *const *y, size_t begin, size_t end);
/* "avx512-vnni", "avx2" or "portable": the integer dot products in use. */
const char *ortep__cpu_quant_simd_name(void);

/* Softmax over rows of n. */
void ortep__cpu_softmax(const float *x, size_t rows, size_t n, float *y);
/* Index of the first maximum of x[n] skipping NaN; 0 (and the bit) when all are NaN. */
uint32_t ortep__cpu_argmax_f32(const float *x, size_t n, uint32_t *error_word);
uint32_t ortep__cpu_argmax_f16(const uint16_t *x, size_t n, uint32_t *error_word);

#endif
