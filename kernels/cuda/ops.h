/*
 * ops.h: the CUDA op kernels' C entry points (kernels.cu). Each launches on
 * the given stream and returns the launch status as an int (cudaError_t);
 * nothing here allocates or synchronises, so every launch can be captured
 * into a CUDA Graph. Weights are f32, f16 or bf16 (dtype as ortep_dtype),
 * activations f32, accumulation f32; index checks OR the error-word bits of
 * error_word.h and skip the access, leaving a defined output.
 */
#ifndef ORTEP_KERNELS_CUDA_OPS_H
#define ORTEP_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int ortep__cu_gather(const void *table, int tdt, size_t rows, size_t h, const void *index, int idx64, size_t n,
                     float *out, uint32_t *err, void *stream);
/* x (f32, n) -> dst in dtype dt (f16 or bf16), for 16-bit cuBLAS inputs */
int ortep__cu_convert(const float *x, void *dst, int dt, size_t n, void *stream);
/* n values (whole blocks) of q8_0 / q4_0 w widened to f32 out */
int ortep__cu_dequantize(const void *w, int dt, size_t n, float *out, void *stream);
/* y[m, n] = alpha * x[m, k] W + beta * c, W [n, k] when trans_b else [k, n],
 * dtype wdt; f32 activations and accumulation (the CPU EP's arithmetic).
 * For decode (m = 1); c (dtype cdt, c_rows 1 or m) may be NULL. */
int ortep__cu_gemv(const float *x, const void *w, int wdt, int trans_b, size_t m, size_t k, size_t n, float alpha,
                   const void *c, int cdt, size_t c_rows, float beta, float *y, void *stream);
/* ortep:Linear (kernels/opset.h) in one launch: a warp per output row of
 * every group; gate_up computes both dots of a row and writes SiLU(g) * u;
 * res (may be NULL) is added to group 0. Same arithmetic as the GEMV; for
 * q8_0 / q4_0 weights a launch first quantizes x (kernels.cu). */
typedef struct ortep__cu_linear_args {
  const float *x;
  const float *res;
  size_t m, k, groups, n[3];
  const void *w[3], *b[3];
  int wdt[3], bdt[3];
  float *y[3];
  int gate_up;
  /* q8_0 / q4_0 weights: x quantized into m * k int8 and m * k / 32 scales
   * (device scratch, 4-byte aligned; ortep__cu_linear_scratch bytes) */
  signed char *xq;
  float *xd;
} ortep__cu_linear_args;
/* The scratch a Linear of quantized weights over m rows of k needs. */
static inline size_t ortep__cu_linear_scratch(size_t m, size_t k) { return m * k + m * (k / 32) * sizeof(float); }
int ortep__cu_linear(const ortep__cu_linear_args *a, void *stream);
/* After a chunk's GEMMs (ep.c: a Linear on tensor cores): y_g [m, n_g] +=
 * b_g; gate_up: y_0 = SiLU(y_0 + b_0) x (up + b_1); res (may be NULL) added
 * to group 0. */
typedef struct ortep__cu_linear_epilogue_args {
  size_t m, groups, n[3];
  float *y[3];
  const void *b[3];
  int bdt[3];
  const float *up, *res;
  int gate_up;
} ortep__cu_linear_epilogue_args;
int ortep__cu_linear_epilogue(const ortep__cu_linear_epilogue_args *a, void *stream);
/* y[i] = broadcast c over rows (c dtype cdt, c_rows 1 or m) */
int ortep__cu_fill_bias(const void *c, int cdt, size_t c_rows, size_t m, size_t n, float *y, void *stream);
int ortep__cu_binary(int mul, const float *a, const void *b, int bdt, size_t nb, size_t n, float *y, void *stream);
int ortep__cu_sigmoid(const float *x, size_t n, float *y, void *stream);
int ortep__cu_silu_mul(const float *g, const float *u, size_t n, float *y, void *stream);
int ortep__cu_rmsnorm(const float *x, const float *skip, const void *bias, int bdt, const void *scale, int sdt,
                      size_t rows, size_t h, float eps, float *y, float *sum, void *stream);
int ortep__cu_rotary(const float *x, const void *pos, int pos64, size_t tokens, size_t heads, size_t hd, size_t rot,
                     int inter, const void *cosc, const void *sinc, int cdt, size_t max_pos, float *y, uint32_t *err,
                     void *stream);
/* tokens at positions pos[tokens] (one for decode, a chunk for prefill);
 * scores: tokens x heads x capacity floats of device scratch */
int ortep__cu_gqa(const float *q, const float *k, const float *v, float *kc, float *vc, const int32_t *pos,
                  size_t tokens, size_t heads, size_t kv, size_t hd, size_t cap, float scale, float *scores, float *out,
                  uint32_t *err, void *stream);
/* The sampler (kernels/sampling.h) in one block: result[0] the token,
 * result[1] *err; scratch: n floats of device memory. */
int ortep__cu_sample(const void *logits, int f16, size_t n, const void *params, const int32_t *history, void *scratch,
                     void *result, uint32_t *err, void *stream);
/* ortep:SelectToken (kernels/opset.c): history writes, then argmax or the
 * sampler; scratch ORTEP__SAMPLE_SCRATCH_BYTES(n); result[0..1] = (token,
 * word). */
int ortep__cu_select(const float *logits, size_t n, const int32_t *tokens, const int32_t *positions, size_t t,
                     const void *params, int32_t *history, size_t cap, void *scratch, void *result, uint32_t *err,
                     void *stream);
int ortep__cu_softmax(const float *x, size_t rows, size_t n, float *y, void *stream);
int ortep__cu_argmax_rows(const float *x, size_t rows, size_t n, int64_t *out, uint32_t *err, void *stream);
/* result[0] = the first maximum among the finite logits, result[1] = *err
 * (ORed with the non-finite bit when any logit is NaN or infinite); two
 * launches over scratch of ortep__cu_argmax_scratch_bytes() device bytes. */
#define ORTEP__CU_ARGMAX_BLOCKS 256
size_t ortep__cu_argmax_scratch_bytes(void);
int ortep__cu_device_argmax(const void *logits, int f16, size_t n, void *scratch, uint32_t *result, uint32_t *err,
                            void *stream);
int ortep__cu_noop(void *stream);
/* Programmatic dependent launch (kernels.cu): each initialised EP votes
 * whether its device can use it (compute 9.0, kernels built for sm_90, not
 * cuda.pdl = off); launches use it while every vote said yes. */
void ortep__cu_pdl_vote(int usable);
int ortep__cu_pdl(void);
int ortep__cu_built_for(void);
/* ortep:FeedToken (kernels/feed.h), one thread: *go = the loop flag. */
int ortep__cu_feed(const int32_t *result, int32_t *token, int32_t *position, const uint8_t *stop, size_t vocab,
                   int32_t *state, size_t kmax, int32_t *go, void *stream);

/* A device loop: a graph that zeroes counter[0], then runs a WHILE node
 * whose body is a copy of `segment` (a cudaGraph_t) followed by one thread
 * that counts the iteration and keeps the condition set while *flag is
 * non-zero and fewer than counter[1] iterations ran (the bound, written by
 * a launch when it changes). Conditional nodes need CUDA 12.4: built with
 * an older toolkit, ortep__cu_loops_built() is 0 and create fails. */
typedef struct ortep__cu_loop {
  void *exec; /* the cudaGraphExec_t; NULL: not built */
  const int32_t *flag;
  uint32_t *counter;
  uint32_t bound; /* what counter[1] holds (0: not written yet) */
} ortep__cu_loop;
int ortep__cu_loops_built(void);
/* Fills *loop (exec NULL on failure). */
int ortep__cu_loop_create(void *segment, const int32_t *flag, uint32_t *counter, ortep__cu_loop *loop);
int ortep__cu_loop_launch(ortep__cu_loop *loop, size_t max_iterations, void *stream);
/* Destroys what create built; *loop is zeroed (a zeroed loop: no-op). */
void ortep__cu_loop_release(ortep__cu_loop *loop);

#ifdef __cplusplus
}
#endif

#endif
