/*
 * opset.h: the op set every EP implements, with one definition of what each
 * op accepts. ortep__op_check validates a node with its input shapes and
 * dtypes for a named EP: it fills a refusal reason that says what is accepted
 * and how to fix the model, or the kernel parameters the EP needs. The CPU
 * and CUDA EPs both use it, so their supports_op answers and semantics cannot
 * drift apart.
 */
#ifndef ORTEP_KERNELS_OPSET_H
#define ORTEP_KERNELS_OPSET_H

#include "runtime/internal.h"

typedef enum ortep__op_kind {
  ORTEP__OP_GATHER,
  ORTEP__OP_GEMM,
  ORTEP__OP_ADD,
  ORTEP__OP_MUL,
  ORTEP__OP_SIGMOID,
  ORTEP__OP_SILUMUL,
  ORTEP__OP_RMSNORM,
  ORTEP__OP_ROTARY,
  ORTEP__OP_GQA,
  ORTEP__OP_SOFTMAX,
  ORTEP__OP_ARGMAX,
  ORTEP__OP_NOOP,
  ORTEP__OP_LINEAR,
  ORTEP__OP_SELECT,
  ORTEP__OP_FEED,
} ortep__op_kind;

#define ORTEP__LINEAR_GROUPS 3
/* ortep:Linear's weights come [N, K] (the Hugging Face layout) or, 16-bit
 * and on the CPU EP only, blocked: [N/4, K/16, 4, 16], element [q, b, r, c]
 * = W[4q + r, 16b + c]. Four consecutive rows' 16-column pieces lie one
 * after another, so a kernel computing four outputs at once streams one run
 * of memory instead of four (llm/model.c repacks into it; the CUDA EP
 * refuses it). All of a node's weights are in one layout; ortep:Embedding
 * looks tokens up in a table stored so (a tied embedding). */
#define ORTEP__LINEAR_ROWS 4
#define ORTEP__LINEAR_COLS 16
/* q8_0 / q4_0 weights (dtype.h) come [N, K] in GGUF's blocks (K a multiple
 * of 32), or, on the CPU EP only, blocked: shape [N/16, K/32, 16, 32], the
 * bytes of each tile of sixteen rows 16t..16t+15 (the same bytes the rows
 * take [N, K]) rearranged so that one 64-byte load holds four quants of
 * each of the sixteen rows (an integer dot product's lane per row), one
 * stream, as runs of ORTEP__QUANT_RUN blocks (the last run holds what is
 * left), each run
 *   its blocks' groups of 16 f16 scales (d of rows 16t, .., 16t+15), then
 *   its blocks' groups of quants, each of 64-byte groups whose byte 4r + j
 *   is row r's: q8_0: 8 groups, group g holding q[4g + j] ^ 0x80 (an
 *   unsigned byte q + 128); q4_0: 4 groups, group g holding GGUF's byte
 *   4g + j of the row's block (q[4g + j] in its low nibble, q[16 + 4g + j]
 *   in its high nibble, each q 0..15, x = d (q - 8)).
 * ortep__cpu_quant_block (kernels/cpu/ops.h) converts. */
#define ORTEP__QUANT_COLS 32
#define ORTEP__QUANT_ROWS 16
#define ORTEP__QUANT_RUN  8
/* The rows of a blocked weight's tile: 16 for q8_0 / q4_0, else 4. */
static inline size_t ortep__blocked_rows(ortep_dtype dt) {
  return ortep_dtype_is_quantized(dt) ? ORTEP__QUANT_ROWS : ORTEP__LINEAR_ROWS;
}

typedef struct ortep__op_params {
  ortep__op_kind kind;
  union {
    struct {
      size_t rows, h, n;
      ortep_dtype tdt;
      bool idx64, blocked;
    } gather; /* blocked: ortep:Embedding's */
    struct {
      size_t m, k, n, c_rows;
      ortep_dtype bdt, cdt;
      bool trans_b, has_c;
      float alpha, beta;
    } gemm;
    struct {
      size_t n, nb;
      ortep_dtype bdt;
    } bin;
    struct {
      size_t n;
    } un;
    struct {
      size_t rows, h;
      float eps;
      ortep_dtype sdt, bdt;
      bool skip, has_bias, has_sum;
    } norm;
    struct {
      size_t tokens, heads, hd, rot, max_pos;
      bool inter, pos64;
      ortep_dtype cdt;
    } rot;
    struct {
      size_t tokens, heads, kv, hd, cap;
      size_t slots; /* slots=1: the caches' slots, input 6 the slot map; 0: one sequence */
      float scale;
      ortep_dtype kvdt;   /* the caches': f32, f16 or bf16 */
      bool bf16_products; /* bf16_products=1: a chunk may round Q, K, V and P to bf16 (whatever the caches') */
    } gqa;
    struct {
      size_t rows, n;
    } sm;
    /* ortep:SelectToken: the vocabulary, the step's tokens, the history's capacity */
    struct {
      size_t n, tokens, cap;
      size_t rows, slots; /* slots=1: the slots and the logits' rows; 0 and 1 for one sequence */
    } sel;
    /* ortep:FeedToken (kernels/feed.h): the stop mask's ids, the launch's most steps */
    struct {
      size_t vocab, kmax;
    } feed;
    /* ortep:Linear: y_g = x W_g^T (+ b_g) for up to 3 groups sharing x; or
     * gate_up: y_0 = SiLU(x W_0^T + b_0) * (x W_1^T + b_1); residual adds an
     * f32 value to y_0 (a single group). blocked: every W_g is in the
     * blocked layout (above). */
    struct {
      size_t m, k, groups, n[ORTEP__LINEAR_GROUPS];
      ortep_dtype wdt[ORTEP__LINEAR_GROUPS], bdt[ORTEP__LINEAR_GROUPS];
      bool bias[ORTEP__LINEAR_GROUPS], residual, gate_up, blocked;
      bool exact_rows;   /* each row of y computed as M = 1 computes it (a batch of sequences) */
      ortep_dtype quant; /* every W_g's block type (q8_0 / q4_0), or ORTEP_DTYPE_COUNT for float weights */
    } lin;
  } p;
} ortep__op_params;

/* True when ep_name can run node; params (may be NULL) receives the kernel's
 * parameters. On false, match->reason says why and what is accepted. */
bool ortep__op_check(const char *ep_name, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                     const ortep_dtype *dtypes, size_t n, ortep_kernel_match *match, ortep__op_params *params);

#endif
