/*
 * opset.c: what each op of the set accepts (opset.h). One check function per
 * op validates a node with its input shapes and dtypes and, when it accepts,
 * fills the kernel's parameters. supports_op runs the check and keeps only
 * the verdict; get_kernel runs the same check and keeps the parameters, so
 * the two can never disagree. Every refusal says what is accepted and how to
 * fix the model.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "feed.h"
#include "opset.h"

typedef struct ctx {
  const char *ep;
  const ortep_node *node;
  const ortep_shape *shapes;
  const ortep_dtype *dtypes;
  size_t n;
  int64_t opset;
  ortep_kernel_match *match;
  ortep__op_params *k;
} ctx;

static bool refuse(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool refuse(ctx *c, const char *fmt, ...) {
  int w = snprintf(c->match->reason, sizeof c->match->reason, "%s cannot run %s '%s': ", c->ep,
                   ortep_node_op_type(c->node), ortep_node_name(c->node));
  va_list ap;
  va_start(ap, fmt);
  if (w > 0 && (size_t)w < sizeof c->match->reason)
    vsnprintf(c->match->reason + w, sizeof c->match->reason - (size_t)w, fmt, ap);
  va_end(ap);
  c->match->supported = false;
  return false;
}

static bool present(const ctx *c, size_t i) {
  const char *name = ortep_node_input(c->node, i);
  return i < c->n && name && *name;
}
static bool out_present(const ctx *c, size_t i) {
  const char *name = ortep_node_output(c->node, i);
  return name && *name;
}
static size_t numel(const ortep_shape *s) {
  size_t n = 1;
  for (uint32_t i = 0; i < s->rank; i++) n *= (size_t)s->dims[i];
  return n;
}
static size_t last_dim(const ortep_shape *s) { return s->rank ? (size_t)s->dims[s->rank - 1] : 1; }
static bool is_w(ortep_dtype d) { return ortep_dtype_is_float(d); }
static const char *dn(ortep_dtype d) { return ortep_dtype_name(d); }

/* Shared preamble: input count in [lo, hi], static shapes, f32 activation at
 * input 0. */
static bool common(ctx *c, size_t lo, size_t hi, bool f32_first) {
  if (c->n < lo || c->n > hi)
    return refuse(c, "it takes %zu to %zu inputs, got %zu; check the node's inputs", lo, hi, c->n);
  for (size_t i = 0; i < c->n; i++) {
    if (!present(c, i)) continue;
    if (!ortep_shape_is_static(&c->shapes[i])) {
      char b[160];
      return refuse(c,
                    "input %zu has shape %s, which is not static; kernels are specialised to static shapes, so fix "
                    "the dimension in the model (e.g. batch 1, one token per step)",
                    i, ortep_shape_format(&c->shapes[i], b, sizeof b));
    }
  }
  if (f32_first && c->dtypes[0] != ORTEP_DTYPE_F32)
    return refuse(c, "input 0 must be f32 (activations are computed in f32), got %s; insert a Cast to f32",
                  dn(c->dtypes[0]));
  return true;
}

/* Gather: an embedding lookup (axis 0 of a 2-D table [rows, hidden]), or
 * rows of an activation [1, ..., rows, hidden] on axis rank - 2 (every dim
 * before it 1): e.g. the last position of a prefill chunk. */
static bool check_gather(ctx *c) {
  if (!common(c, 2, 2, false)) return false;
  const ortep_shape *d = &c->shapes[0];
  int64_t axis = ortep_node_attr_int_or(c->node, "axis", 0);
  if (axis < 0) axis += d->rank;
  bool lead_ones = d->rank >= 2;
  for (uint32_t i = 0; lead_ones && i + 2 < d->rank; i++) lead_ones = d->dims[i] == 1;
  if (!lead_ones || axis != (int64_t)d->rank - 2)
    return refuse(c,
                  "it gathers rows: axis 0 of a 2-D table [rows, hidden], or axis rank-2 of [1, ..., rows, hidden]; "
                  "got axis %lld of a rank-%u input",
                  (long long)ortep_node_attr_int_or(c->node, "axis", 0), d->rank);
  if (!is_w(c->dtypes[0])) return refuse(c, "data must be f32/f16/bf16; got %s", dn(c->dtypes[0]));
  if (c->dtypes[1] != ORTEP_DTYPE_I32 && c->dtypes[1] != ORTEP_DTYPE_I64)
    return refuse(c, "indices must be i32 or i64, got %s", dn(c->dtypes[1]));
  if (c->k) {
    c->k->kind = ORTEP__OP_GATHER;
    c->k->p.gather.rows = (size_t)d->dims[d->rank - 2];
    c->k->p.gather.h = (size_t)d->dims[d->rank - 1];
    c->k->p.gather.n = numel(&c->shapes[1]);
    c->k->p.gather.tdt = c->dtypes[0];
    c->k->p.gather.idx64 = c->dtypes[1] == ORTEP_DTYPE_I64;
    c->k->p.gather.blocked = false;
  }
  return true;
}

/* The CPU EP's blocked layout (opset.h) is its own: any other EP refuses a
 * blocked input, saying how to get one it takes. */
static bool blocked_refused(ctx *c, const char *what) {
  if (!strcmp(c->ep, "cpu_ep")) return false;
  return !refuse(c,
                 "%s is in the CPU EP's blocked layout [N/4, K/16, 4, 16]; %s takes [N, K]: open the model with "
                 "row-major weights (ortep.weights_layout = row_major)",
                 what, c->ep);
}

/* q8_0 / q4_0 weights run on the CPU and CUDA EPs (the CUDA EP's kernels
 * have not run on a GPU yet). */
static bool quant_refused(ctx *c, const char *what) {
  if (!strcmp(c->ep, "cpu_ep") || !strcmp(c->ep, "cuda_ep")) return false;
  return !refuse(c,
                 "%s is block-quantized (q8_0/q4_0); %s has no kernels for them yet: run the step on the CPU EP "
                 "(ep \"cpu\"), or open the model with its weights as stored",
                 what, c->ep);
}

/* A batch of sequences (slot maps, rows computed as one row alone) runs on
 * the CPU EP only, for now. */
static bool batch_refused(ctx *c, const char *what) {
  if (!strcmp(c->ep, "cpu_ep")) return false;
  return !refuse(c, "%s: batched decoding runs on the CPU EP only for now (%s has no kernels for it): use ep \"cpu\"",
                 what, c->ep);
}

/* ortep:Embedding: the token lookup out[n, H] = table[ids[n], :] over a
 * table [V, H] of f32/f16/bf16, or a 16-bit blocked one [V/4, H/16, 4, 16]
 * (a tied embedding, blocked for the lm_head that reads it too). It runs
 * the Gather kernel: an id outside [0, V) latches GATHER_INDEX and zeroes
 * its row. */
static bool check_embedding(ctx *c) {
  if (!common(c, 2, 2, false)) return false;
  const ortep_shape *d = &c->shapes[0];
  bool blocked = d->rank == 4, quant = ortep_dtype_is_quantized(c->dtypes[0]);
  size_t cols = quant ? ORTEP__QUANT_COLS : ORTEP__LINEAR_COLS;
  if (quant && quant_refused(c, "the table")) return false;
  if (blocked && blocked_refused(c, "the table")) return false;
  if (blocked ? (!quant && c->dtypes[0] != ORTEP_DTYPE_BF16 && c->dtypes[0] != ORTEP_DTYPE_F16) ||
                    d->dims[2] != (int64_t)ortep__blocked_rows(c->dtypes[0]) || d->dims[3] != (int64_t)cols
              : d->rank != 2 || !(is_w(c->dtypes[0]) || quant) || (quant && d->dims[1] % ORTEP__QUANT_COLS))
    return refuse(c,
                  "the table must be f32/f16/bf16/q8_0/q4_0 [V, H] (q8_0/q4_0: H a multiple of 32), or blocked "
                  "bf16/f16 [V/4, H/16, 4, 16] or q8_0/q4_0 [V/16, H/32, 16, 32]; got %s of rank %u",
                  dn(c->dtypes[0]), d->rank);
  if (c->dtypes[1] != ORTEP_DTYPE_I32 && c->dtypes[1] != ORTEP_DTYPE_I64)
    return refuse(c, "ids must be i32 or i64, got %s", dn(c->dtypes[1]));
  if (c->k) {
    c->k->kind = ORTEP__OP_GATHER;
    c->k->p.gather.rows = (size_t)d->dims[0] * (blocked ? ortep__blocked_rows(c->dtypes[0]) : 1);
    c->k->p.gather.h = (size_t)d->dims[1] * (blocked ? cols : 1);
    c->k->p.gather.n = numel(&c->shapes[1]);
    c->k->p.gather.tdt = c->dtypes[0];
    c->k->p.gather.idx64 = c->dtypes[1] == ORTEP_DTYPE_I64;
    c->k->p.gather.blocked = blocked;
  }
  return true;
}

static bool check_matmul(ctx *c) {
  if (!common(c, 2, 2, true)) return false;
  if (c->shapes[0].rank < 1 || c->shapes[1].rank != 2 || !is_w(c->dtypes[1]))
    return refuse(c,
                  "it takes A f32 [..., K] and a 2-D f32/f16/bf16 weight B [K, N]; got A of rank %u, B %s of rank %u",
                  c->shapes[0].rank, dn(c->dtypes[1]), c->shapes[1].rank);
  size_t k = last_dim(&c->shapes[0]);
  if ((size_t)c->shapes[1].dims[0] != k)
    return refuse(c, "A's last dimension %zu differs from B's first %lld", k, (long long)c->shapes[1].dims[0]);
  if (c->k) {
    c->k->kind = ORTEP__OP_GEMM;
    c->k->p.gemm = (__typeof__(c->k->p.gemm)){.m = k ? numel(&c->shapes[0]) / k : 0,
                                              .k = k,
                                              .n = (size_t)c->shapes[1].dims[1],
                                              .bdt = c->dtypes[1],
                                              .alpha = 1.0f,
                                              .beta = 0.0f};
  }
  return true;
}

/* com.microsoft FusedMatMul: alpha * A [..., K] x B, B 2-D [K, N] or, with
 * transB=1, [N, K] (the Hugging Face Linear layout, read in place). */
static bool check_fused_matmul(ctx *c) {
  if (!common(c, 2, 2, true)) return false;
  if (ortep_node_attr_int_or(c->node, "transA", 0) || ortep_node_attr_int_or(c->node, "transBatchA", 0) ||
      ortep_node_attr_int_or(c->node, "transBatchB", 0))
    return refuse(c, "transA and the batch transposes are not supported; only transB");
  bool tb = ortep_node_attr_int_or(c->node, "transB", 0) != 0;
  if (c->shapes[0].rank < 1 || c->shapes[1].rank != 2 || !is_w(c->dtypes[1]))
    return refuse(c, "it takes A f32 [..., K] and a 2-D f32/f16/bf16 weight B ([K, N], or [N, K] with transB=1)");
  size_t k = last_dim(&c->shapes[0]);
  size_t bk = (size_t)c->shapes[1].dims[tb ? 1 : 0], n = (size_t)c->shapes[1].dims[tb ? 0 : 1];
  if (bk != k) return refuse(c, "A's last dimension %zu differs from B's K %zu (transB=%d)", k, bk, tb);
  if (c->k) {
    c->k->kind = ORTEP__OP_GEMM;
    c->k->p.gemm = (__typeof__(c->k->p.gemm)){.m = k ? numel(&c->shapes[0]) / k : 0,
                                              .k = k,
                                              .n = n,
                                              .bdt = c->dtypes[1],
                                              .trans_b = tb,
                                              .alpha = ortep_node_attr_float_or(c->node, "alpha", 1.0f)};
  }
  return true;
}

static bool check_gemm(ctx *c) {
  if (!common(c, 2, 3, true)) return false;
  if (ortep_node_attr_int_or(c->node, "transA", 0) != 0)
    return refuse(c, "transA=1 is not supported; transpose A in the model or use transB");
  bool tb = ortep_node_attr_int_or(c->node, "transB", 0) != 0;
  if (c->shapes[0].rank != 2 || c->shapes[1].rank != 2 || !is_w(c->dtypes[1]))
    return refuse(c, "it takes A f32 [M, K] and B f32/f16/bf16 [K, N] (or [N, K] with transB=1); got ranks %u and %u",
                  c->shapes[0].rank, c->shapes[1].rank);
  size_t m = (size_t)c->shapes[0].dims[0], k = (size_t)c->shapes[0].dims[1];
  size_t bk = (size_t)c->shapes[1].dims[tb ? 1 : 0], n = (size_t)c->shapes[1].dims[tb ? 0 : 1];
  if (bk != k) return refuse(c, "A [%zu, %zu] and B do not agree on K (B gives %zu with transB=%d)", m, k, bk, tb);
  size_t c_rows = 1;
  bool has_c = present(c, 2);
  if (has_c) {
    size_t cn = numel(&c->shapes[2]);
    if (!is_w(c->dtypes[2]) || (cn != n && cn != m * n))
      return refuse(c, "C must be f32/f16/bf16 with N=%zu elements (a bias) or M x N=%zu; got %s with %zu", n, m * n,
                    dn(c->dtypes[2]), cn);
    c_rows = cn == n ? 1 : m;
  }
  if (c->k) {
    c->k->kind = ORTEP__OP_GEMM;
    c->k->p.gemm = (__typeof__(c->k->p.gemm)){.m = m,
                                              .k = k,
                                              .n = n,
                                              .c_rows = c_rows,
                                              .bdt = c->dtypes[1],
                                              .cdt = has_c ? c->dtypes[2] : ORTEP_DTYPE_F32,
                                              .trans_b = tb,
                                              .has_c = has_c,
                                              .alpha = ortep_node_attr_float_or(c->node, "alpha", 1.0f),
                                              .beta = ortep_node_attr_float_or(c->node, "beta", 1.0f)};
  }
  return true;
}

static bool check_binary(ctx *c, ortep__op_kind kd) {
  if (!common(c, 2, 2, true)) return false;
  if (!is_w(c->dtypes[1])) return refuse(c, "B must be f32, f16 or bf16, got %s", dn(c->dtypes[1]));
  const ortep_shape *a = &c->shapes[0], *b = &c->shapes[1];
  size_t nb = numel(b);
  bool suffix = b->rank <= a->rank;
  for (uint32_t i = 0; suffix && i < b->rank; i++) suffix = b->dims[b->rank - 1 - i] == a->dims[a->rank - 1 - i];
  /* leading 1s in B are a suffix too */
  if (!suffix && nb == numel(a)) suffix = true;
  if (!suffix && nb != 1) {
    char sa[160], sb[160];
    return refuse(c,
                  "B %s must equal A %s, match A's trailing dimensions (a bias), or hold one element; put the "
                  "larger operand first",
                  ortep_shape_format(b, sb, sizeof sb), ortep_shape_format(a, sa, sizeof sa));
  }
  if (c->k) {
    c->k->kind = kd;
    c->k->p.bin.n = numel(a);
    c->k->p.bin.nb = nb ? nb : 1;
    c->k->p.bin.bdt = c->dtypes[1];
  }
  return true;
}

static bool check_unary(ctx *c, ortep__op_kind kd) {
  if (!common(c, 1, 1, true)) return false;
  if (c->k) c->k->kind = kd, c->k->p.un.n = numel(&c->shapes[0]);
  return true;
}

static bool check_silumul(ctx *c) {
  if (!common(c, 2, 2, true)) return false;
  if (c->dtypes[1] != ORTEP_DTYPE_F32 || !ortep_shape_equal(&c->shapes[0], &c->shapes[1]))
    return refuse(c, "gate and up must be f32 of the same shape");
  if (c->k) c->k->kind = ORTEP__OP_SILUMUL, c->k->p.un.n = numel(&c->shapes[0]);
  return true;
}

static bool check_rmsnorm(ctx *c, bool skip) {
  size_t scale_i = skip ? 2 : 1;
  if (!common(c, skip ? 3 : 2, skip ? 4 : 2, true)) return false;
  int64_t axis = ortep_node_attr_int_or(c->node, "axis", -1);
  const ortep_shape *x = &c->shapes[0];
  if (x->rank < 1 || (axis != -1 && axis != (int64_t)x->rank - 1))
    return refuse(c, "normalisation runs over the last axis only (axis -1); got axis %lld", (long long)axis);
  size_t h = last_dim(x);
  if (skip && (c->dtypes[1] != ORTEP_DTYPE_F32 || !ortep_shape_equal(x, &c->shapes[1])))
    return refuse(c, "skip must be f32 of the input's shape");
  if (!is_w(c->dtypes[scale_i]) || numel(&c->shapes[scale_i]) != h)
    return refuse(c, "the scale (gamma) must be f32/f16/bf16 with %zu elements (the last dimension)", h);
  bool has_bias = skip && present(c, 3);
  if (has_bias && (!is_w(c->dtypes[3]) || numel(&c->shapes[3]) != h))
    return refuse(c, "the bias must be f32/f16/bf16 with %zu elements", h);
  if (skip && (out_present(c, 1) || out_present(c, 2)))
    return refuse(c, "outputs 1 (mean) and 2 (inv_std_var) are not produced; leave them empty");
  if (!skip && ortep_node_output_count(c->node) > 1 && out_present(c, 1))
    return refuse(c, "only output 0 is produced; leave the inv_std_var output empty");
  if (c->k) {
    c->k->kind = ORTEP__OP_RMSNORM;
    c->k->p.norm = (__typeof__(c->k->p.norm)){.rows = h ? numel(x) / h : 0,
                                              .h = h,
                                              .eps = ortep_node_attr_float_or(c->node, "epsilon", 1e-5f),
                                              .sdt = c->dtypes[scale_i],
                                              .bdt = has_bias ? c->dtypes[3] : ORTEP_DTYPE_F32,
                                              .skip = skip,
                                              .has_bias = has_bias,
                                              .has_sum = skip && out_present(c, 3)};
  }
  return true;
}

static bool check_rotary(ctx *c) {
  if (!common(c, 4, 4, true)) return false;
  const ortep_shape *x = &c->shapes[0];
  if (x->rank != 3) return refuse(c, "input must be [batch, seq, heads x head_dim] (rank 3), got rank %u", x->rank);
  int64_t heads;
  if (ortep_node_attr_int(c->node, "num_heads", &heads) != ORTEP_OK || heads <= 0)
    return refuse(c, "the num_heads attribute (> 0) is required for a rank-3 input");
  size_t hidden = (size_t)x->dims[2];
  if (hidden % (size_t)heads)
    return refuse(c, "hidden %zu is not a multiple of num_heads %lld", hidden, (long long)heads);
  size_t hd = hidden / (size_t)heads;
  int64_t rot = ortep_node_attr_int_or(c->node, "rotary_embedding_dim", 0);
  size_t rd = rot > 0 ? (size_t)rot : hd;
  if (rd > hd || rd % 2) return refuse(c, "rotary_embedding_dim %zu must be even and <= head_dim %zu", rd, hd);
  size_t tokens = (size_t)x->dims[0] * (size_t)x->dims[1];
  if ((c->dtypes[1] != ORTEP_DTYPE_I32 && c->dtypes[1] != ORTEP_DTYPE_I64) || numel(&c->shapes[1]) != tokens)
    return refuse(c, "position_ids must be i32/i64 with one position per token (%zu); got %s with %zu", tokens,
                  dn(c->dtypes[1]), numel(&c->shapes[1]));
  for (int i = 2; i < 4; i++)
    if (!is_w(c->dtypes[i]) || c->shapes[i].rank != 2 || (size_t)c->shapes[i].dims[1] != rd / 2)
      return refuse(c, "%s_cache must be f32/f16/bf16 [max_positions, %zu]", i == 2 ? "cos" : "sin", rd / 2);
  if (!ortep_shape_equal(&c->shapes[2], &c->shapes[3]) || c->dtypes[2] != c->dtypes[3])
    return refuse(c, "cos_cache and sin_cache must have the same shape and dtype");
  if (c->k) {
    c->k->kind = ORTEP__OP_ROTARY;
    c->k->p.rot = (__typeof__(c->k->p.rot)){.tokens = tokens,
                                            .heads = (size_t)heads,
                                            .hd = hd,
                                            .rot = rd,
                                            .max_pos = (size_t)c->shapes[2].dims[0],
                                            .inter = ortep_node_attr_int_or(c->node, "interleaved", 0) != 0,
                                            .pos64 = c->dtypes[1] == ORTEP_DTYPE_I64,
                                            .cdt = c->dtypes[2]};
  }
  return true;
}

static bool check_gqa(ctx *c) {
  if (!common(c, 6, 7, true)) return false;
  int64_t heads, kv;
  if (ortep_node_attr_int(c->node, "num_heads", &heads) != ORTEP_OK ||
      ortep_node_attr_int(c->node, "kv_num_heads", &kv) != ORTEP_OK || heads <= 0 || kv <= 0 || heads % kv)
    return refuse(c,
                  "the attributes num_heads and kv_num_heads (> 0, num_heads a multiple of kv_num_heads) are required");
  if (ortep_node_attr_int_or(c->node, "do_rotary", 0))
    return refuse(c, "do_rotary=1 is not supported; apply RotaryEmbedding nodes to q and k before attention");
  const ortep_shape *q = &c->shapes[0];
  if (q->rank != 3 || q->dims[0] != 1 || q->dims[1] < 1)
    return refuse(c,
                  "query must be [1, tokens, num_heads x head_dim]: batch 1, one token (decode) or a chunk of "
                  "consecutive tokens (prefill)");
  size_t tokens = (size_t)q->dims[1];
  size_t hd = (size_t)q->dims[2] / (size_t)heads;
  if (hd * (size_t)heads != (size_t)q->dims[2]) return refuse(c, "query width is not a multiple of num_heads");
  for (int i = 1; i < 3; i++)
    if (c->dtypes[i] != ORTEP_DTYPE_F32 || numel(&c->shapes[i]) != tokens * (size_t)kv * hd)
      return refuse(c, "%s must be f32 [1, %zu, kv_num_heads x head_dim = %zu] (the query's tokens)",
                    i == 1 ? "key" : "value", tokens, (size_t)kv * hd);
  /* ortep's extension: slots=1 makes the caches [slots, capacity, kv, hd],
   * one sequence per slot, and input 6 the slot of each token (i32 [T]; < 0:
   * a padding row, which touches no cache and gives zeros) */
  bool slotted = ortep_node_attr_int_or(c->node, "slots", 0) != 0;
  if (slotted && batch_refused(c, "slots=1")) return false;
  size_t cap = 0, nslots = 0;
  for (int i = 3; i < 5; i++) {
    const ortep_shape *s = &c->shapes[i];
    /* position-major (BSNH): one position's heads side by side, so the
     * positions written so far are one prefix of the cache's memory */
    bool r3 = !slotted && s->rank == 3 && (size_t)s->dims[1] == (size_t)kv && (size_t)s->dims[2] == hd;
    bool r4 = s->rank == 4 && (slotted || s->dims[0] == 1) && (size_t)s->dims[2] == (size_t)kv &&
              (size_t)s->dims[3] == hd && s->dims[0] >= 1;
    bool fp = c->dtypes[i] == ORTEP_DTYPE_F32 || c->dtypes[i] == ORTEP_DTYPE_F16 || c->dtypes[i] == ORTEP_DTYPE_BF16;
    if (!fp || !(r3 || r4))
      return refuse(c,
                    slotted ? "%s must be the f32, f16 or bf16 KV caches of every slot [slots, capacity, kv_num_heads, "
                              "head_dim] (slots=1)"
                            : "%s must be the f32, f16 or bf16 KV cache [capacity, kv_num_heads, head_dim] (or [1, "
                              "capacity, kv, head_dim]): position-major, not ONNX Runtime's [batch, kv, capacity, "
                              "head_dim]",
                    i == 3 ? "past_key" : "past_value");
    cap = (size_t)s->dims[r3 ? 0 : 1];
    nslots = slotted ? (size_t)s->dims[0] : 0;
  }
  if (slotted && (c->n < 7 || !present(c, 6) || c->dtypes[6] != ORTEP_DTYPE_I32 || numel(&c->shapes[6]) != tokens))
    return refuse(c, "slots=1 needs input 6, the slot map: %zu i32, the slot of each token (-1: a padding row)",
                  tokens);
  if (!ortep_shape_equal(&c->shapes[3], &c->shapes[4]) || c->dtypes[3] != c->dtypes[4])
    return refuse(c, "past_key and past_value must have the same shape and dtype");
  if (c->dtypes[5] != ORTEP_DTYPE_I32 || numel(&c->shapes[5]) != tokens)
    return refuse(c,
                  "seqlens_k must be %zu i32: the position of each token (the number of tokens before it), one per "
                  "query token",
                  tokens);
  if (ortep_node_output_count(c->node) > 1 && (out_present(c, 1) || out_present(c, 2)))
    return refuse(c, "present_key/present_value are not produced: the caches are updated in place; leave them empty");
  /* ortep's extension: bf16_products=1 lets a prefill chunk's products
   * round Q, K, V and P to bf16 where the EP multiplies in bf16, whatever
   * the caches' dtype (the decoder sets it where the chunk's projections
   * already round their activations so: bf16 weights); an EP that does not
   * ignores it */
  if (c->k) {
    float scale = ortep_node_attr_float_or(c->node, "scale", 0.0f);
    c->k->kind = ORTEP__OP_GQA;
    c->k->p.gqa = (__typeof__(c->k->p.gqa)){.tokens = tokens,
                                            .heads = (size_t)heads,
                                            .kv = (size_t)kv,
                                            .hd = hd,
                                            .cap = cap,
                                            .slots = nslots,
                                            .scale = scale != 0.0f ? scale : 1.0f / sqrtf((float)hd),
                                            .kvdt = c->dtypes[3],
                                            .bf16_products = ortep_node_attr_int_or(c->node, "bf16_products", 0) != 0};
  }
  return true;
}

static bool check_last_axis(ctx *c, ortep__op_kind kd, int64_t default_axis) {
  if (!common(c, 1, 1, true)) return false;
  const ortep_shape *x = &c->shapes[0];
  int64_t axis = ortep_node_attr_int_or(c->node, "axis", default_axis);
  if (axis < 0) axis += x->rank;
  if (x->rank == 0 || axis != (int64_t)x->rank - 1)
    return refuse(c, "only the last axis is supported (axis -1%s); got axis %lld of a rank-%u input",
                  kd == ORTEP__OP_SOFTMAX && c->opset < 13 ? ", which needs opset >= 13 or an explicit axis" : "",
                  (long long)ortep_node_attr_int_or(c->node, "axis", default_axis), x->rank);
  if (kd == ORTEP__OP_ARGMAX && ortep_node_attr_int_or(c->node, "select_last_index", 0))
    return refuse(c, "select_last_index=1 is not supported: the first maximum wins");
  if (c->k) c->k->kind = kd, c->k->p.sm.n = last_dim(x), c->k->p.sm.rows = numel(x) / (last_dim(x) ? last_dim(x) : 1);
  return true;
}

/* ortep:Noop does nothing: it exists to measure dispatch and replay overhead. */
/* ortep:Linear, the Hugging Face Linear in one pass over x: inputs
 * [x, W0, b0, W1, b1, W2, b2, residual] (W1, W2, biases and residual
 * optional: empty names), outputs [y0, y1, y2], W_g [N_g, K] read in place
 * (f32/f16/bf16), y_g = x W_g^T + b_g. So q/k/v are one node, the residual
 * add rides on the down projection, and with gate_up=1 the MLP's gate and
 * up projections and SiLU(gate) * up are one node with one output. */
static bool check_linear(ctx *c) {
  if (!common(c, 2, 8, true)) return false;
  bool gate_up = ortep_node_attr_int_or(c->node, "gate_up", 0) != 0;
  size_t k = last_dim(&c->shapes[0]), groups = 0, m = k ? numel(&c->shapes[0]) / k : 0;
  __typeof__(c->k->p.lin) p = {.m = m, .k = k, .quant = ORTEP_DTYPE_COUNT};
  for (size_t g = 0; g < ORTEP__LINEAR_GROUPS; g++) {
    size_t wi = 1 + 2 * g, bi = wi + 1;
    if (!present(c, wi)) {
      if (present(c, bi)) return refuse(c, "bias %zu is given without weight %zu", g, g);
      continue;
    }
    if (g != groups) return refuse(c, "weight %zu is given without weight %zu; fill the groups in order", g, groups);
    const ortep_shape *ws = &c->shapes[wi];
    bool blocked = ws->rank == 4, quant = ortep_dtype_is_quantized(c->dtypes[wi]);
    size_t cols = quant ? ORTEP__QUANT_COLS : ORTEP__LINEAR_COLS;
    char what[32];
    snprintf(what, sizeof what, "weight %zu", g);
    if (quant && quant_refused(c, what)) return false;
    if (blocked) {
      if (blocked_refused(c, what)) return false;
      if ((!quant && c->dtypes[wi] != ORTEP_DTYPE_BF16 && c->dtypes[wi] != ORTEP_DTYPE_F16) ||
          ws->dims[2] != (int64_t)ortep__blocked_rows(c->dtypes[wi]) || ws->dims[3] != (int64_t)cols ||
          (size_t)ws->dims[1] * cols != k)
        return refuse(c,
                      "a blocked weight %zu must be bf16/f16 [N/4, %zu, 4, 16] or q8_0/q4_0 [N/16, %zu, 16, 32] (K = "
                      "%zu); got %s of shape [%lld, %lld, %lld, %lld]",
                      g, k / ORTEP__LINEAR_COLS, k / ORTEP__QUANT_COLS, k, dn(c->dtypes[wi]), (long long)ws->dims[0],
                      (long long)ws->dims[1], (long long)ws->dims[2], (long long)ws->dims[3]);
    } else if (ws->rank != 2 || !(is_w(c->dtypes[wi]) || quant) || (size_t)ws->dims[1] != k ||
               (quant && k % ORTEP__QUANT_COLS)) {
      return refuse(c,
                    "weight %zu must be f32/f16/bf16/q8_0/q4_0 [N, %zu] (the Hugging Face Linear layout; q8_0/q4_0: K "
                    "a multiple of 32); got %s of rank %u",
                    g, k, dn(c->dtypes[wi]), ws->rank);
    }
    if (g && blocked != p.blocked)
      return refuse(c, "weight %zu is %s but weight 0 is %s; a node's weights must share one layout", g,
                    blocked ? "blocked" : "[N, K]", p.blocked ? "blocked" : "[N, K]");
    ortep_dtype qd = quant ? c->dtypes[wi] : ORTEP_DTYPE_COUNT;
    if (g && qd != p.quant)
      return refuse(c, "weight %zu is %s but weight 0 is %s; a node's weights are all float or all of one block type",
                    g, dn(c->dtypes[wi]), dn(p.wdt[0]));
    p.quant = qd;
    p.blocked = blocked;
    p.n[g] = (size_t)ws->dims[0] * (blocked ? ortep__blocked_rows(c->dtypes[wi]) : 1);
    p.wdt[g] = c->dtypes[wi];
    if (present(c, bi)) {
      if (!is_w(c->dtypes[bi]) || numel(&c->shapes[bi]) != p.n[g])
        return refuse(c, "bias %zu must be f32/f16/bf16 with %zu elements", g, p.n[g]);
      p.bias[g] = true, p.bdt[g] = c->dtypes[bi];
    }
    if (!out_present(c, gate_up ? 0 : g)) return refuse(c, "output %zu is missing", g);
    groups++;
  }
  if (!groups) return refuse(c, "it needs at least weight 0 (input 1)");
  if (gate_up && (groups != 2 || p.n[0] != p.n[1]))
    return refuse(c, "gate_up=1 takes exactly two weights of the same N (gate and up); got %zu", groups);
  if (present(c, 7)) {
    if (groups != 1 || c->dtypes[7] != ORTEP_DTYPE_F32 || numel(&c->shapes[7]) != m * p.n[0])
      return refuse(c, "the residual (input 7) must be f32 with M x N = %zu elements and needs a single weight",
                    m * p.n[0]);
    p.residual = true;
  }
  p.groups = groups;
  p.gate_up = gate_up;
  /* exact_rows=1: every row of y bitwise what that row alone (M = 1) gives,
   * so a sequence's logits in a batch do not depend on its neighbours */
  p.exact_rows = ortep_node_attr_int_or(c->node, "exact_rows", 0) != 0;
  if (p.exact_rows && batch_refused(c, "exact_rows=1")) return false;
  if (c->k) c->k->kind = ORTEP__OP_LINEAR, c->k->p.lin = p;
  return true;
}

/* ortep:SelectToken, the last node of a step: inputs [logits f32 [..., V],
 * token_ids i32 [1, T], positions i32 [1, T], params i32 [9] (the sampler's
 * parameter block, kernels/sampling.h), history i32 [capacity]], output
 * result i32 [2]. It writes the step's tokens into the history at their
 * positions, then draws the token at the last position + 1: the argmax when
 * params' temperature is 0, else the sampler (its counter that position, its
 * history every token before it); result = (token, the EP's error word as
 * it stands after the step). The one thing the host reads per step. */
/* With slots=1 (ortep's batch extension) input 5 is the slot map (i32 [T]),
 * params [slots, 9] and the history [slots, capacity] hold one block and
 * one history per slot, and the logits have a row per token (every token
 * its own sequence: a batched decode step) or one row (all tokens one
 * slot's: a prefill chunk); result [rows, 2], one (token, word) per row,
 * the word the EP's ORed with what this row's own checks found (a padding
 * row, slot < 0: (0, 0) and nothing written). */
static bool check_select(ctx *c) {
  bool slotted = ortep_node_attr_int_or(c->node, "slots", 0) != 0;
  if (slotted && batch_refused(c, "slots=1")) return false;
  if (!common(c, slotted ? 6 : 5, slotted ? 6 : 5, true)) return false;
  size_t v = last_dim(&c->shapes[0]), t = numel(&c->shapes[1]), rows = v ? numel(&c->shapes[0]) / v : 0;
  if (v == 0 || (slotted ? rows != 1 && rows != t : rows != 1))
    return refuse(c,
                  slotted ? "the logits must be [..., rows, V] of f32, a row per token or one row; got %zu values"
                          : "the logits must be one row [..., V] of f32 (the last position's); got %zu values",
                  numel(&c->shapes[0]));
  if (c->dtypes[1] != ORTEP_DTYPE_I32 || c->dtypes[2] != ORTEP_DTYPE_I32 || t == 0 || numel(&c->shapes[2]) != t)
    return refuse(c, "token_ids and positions must be i32 with one entry per token of the step");
  size_t nslots = 1;
  if (slotted) {
    if (c->dtypes[5] != ORTEP_DTYPE_I32 || numel(&c->shapes[5]) != t)
      return refuse(c, "slots=1 needs input 5, the slot map: %zu i32 (-1: a padding row)", t);
    nslots = c->shapes[3].rank == 2 ? (size_t)c->shapes[3].dims[0] : 0;
  }
  if (c->dtypes[3] != ORTEP_DTYPE_I32 || !nslots || numel(&c->shapes[3]) != 9 * nslots)
    return refuse(c, slotted ? "params must be [slots, 9] i32: the sampler's block per slot (kernels/sampling.h)"
                             : "params must be the sampler's block of 9 i32 words (kernels/sampling.h)");
  if (c->dtypes[4] != ORTEP_DTYPE_I32 || numel(&c->shapes[4]) == 0 || numel(&c->shapes[4]) % nslots)
    return refuse(c, slotted ? "the history must be i32 [slots, capacity]: one token id per position of each slot"
                             : "the history must be i32 [capacity]: one token id per position");
  if (c->k) {
    c->k->kind = ORTEP__OP_SELECT;
    c->k->p.sel.n = v, c->k->p.sel.tokens = t, c->k->p.sel.cap = numel(&c->shapes[4]) / nslots;
    c->k->p.sel.rows = rows, c->k->p.sel.slots = slotted ? nslots : 0;
  }
  return true;
}

/* ortep:FeedToken, after SelectToken in a decode step (kernels/feed.h):
 * inputs [result i32 [2], token_ids i32 [1], positions i32 [1], stop mask
 * u8 [V], loop state i32 [ORTEP__FEED_HEADER + kmax]], output the loop
 * flag i32 [1]. It writes its token and position inputs and the state in
 * place, as SelectToken writes the history: all three persist between
 * steps (graph inputs), so a step repeated on the device feeds itself. */
static bool check_feed(ctx *c) {
  if (!common(c, 5, 5, false)) return false;
  if (c->dtypes[0] != ORTEP_DTYPE_I32 || numel(&c->shapes[0]) != 2)
    return refuse(c, "input 0 must be SelectToken's result: 2 i32 (token, error word)");
  if (c->dtypes[1] != ORTEP_DTYPE_I32 || numel(&c->shapes[1]) != 1 || c->dtypes[2] != ORTEP_DTYPE_I32 ||
      numel(&c->shapes[2]) != 1)
    return refuse(c, "token_ids and positions must be one i32 each: a decode step of one token");
  if (c->dtypes[3] != ORTEP_DTYPE_U8 || numel(&c->shapes[3]) == 0)
    return refuse(c, "input 3 must be the stop mask: u8, one byte per id of the vocabulary");
  size_t words = numel(&c->shapes[4]);
  if (c->dtypes[4] != ORTEP_DTYPE_I32 || words <= ORTEP__FEED_HEADER || words > ORTEP__FEED_HEADER + ORTEP__FEED_MAX)
    return refuse(c, "input 4 must be the loop state: i32 [%d + K], K in [1, %d] (kernels/feed.h)", ORTEP__FEED_HEADER,
                  ORTEP__FEED_MAX);
  if (!out_present(c, 0)) return refuse(c, "output 0, the loop flag (i32 [1]), is missing");
  if (c->k) {
    c->k->kind = ORTEP__OP_FEED;
    c->k->p.feed.vocab = numel(&c->shapes[3]), c->k->p.feed.kmax = words - ORTEP__FEED_HEADER;
  }
  return true;
}

static bool check_noop(ctx *c) {
  if (!common(c, 0, 64, false)) return false;
  if (c->k) c->k->kind = ORTEP__OP_NOOP;
  return true;
}

static const char supported_list[] =
    "Gather, MatMul, Gemm, Add, Mul, Sigmoid, Softmax, ArgMax, SimplifiedLayerNormalization, ortep:SiLUMul, "
    "com.microsoft:FusedMatMul, com.microsoft:SkipSimplifiedLayerNormalization, com.microsoft:RotaryEmbedding, "
    "com.microsoft:GroupQueryAttention, ortep:Linear, ortep:Embedding, ortep:SelectToken, ortep:FeedToken, "
    "ortep:Noop";

static bool check(ctx *c) {
  const char *op = ortep_node_op_type(c->node), *dom = ortep_node_domain(c->node);
  bool onnx = !*dom || strcmp(dom, "ai.onnx") == 0;
  bool ms = strcmp(dom, ORTEP_DOMAIN_MS) == 0;
  bool own = strcmp(dom, ORTEP_DOMAIN_ORTEP) == 0;
  if (onnx && !strcmp(op, "Gather")) return check_gather(c);
  if (onnx && !strcmp(op, "MatMul")) return check_matmul(c);
  if (onnx && !strcmp(op, "Gemm")) return check_gemm(c);
  if (onnx && !strcmp(op, "Add")) return check_binary(c, ORTEP__OP_ADD);
  if (onnx && !strcmp(op, "Mul")) return check_binary(c, ORTEP__OP_MUL);
  if (onnx && !strcmp(op, "Sigmoid")) return check_unary(c, ORTEP__OP_SIGMOID);
  if (onnx && !strcmp(op, "Softmax"))
    return check_last_axis(c, ORTEP__OP_SOFTMAX, c->opset >= 13 || c->opset == 0 ? -1 : 1);
  if (onnx && !strcmp(op, "ArgMax")) return check_last_axis(c, ORTEP__OP_ARGMAX, 0);
  if ((onnx || ms) && !strcmp(op, "SimplifiedLayerNormalization")) return check_rmsnorm(c, false);
  if (ms && !strcmp(op, "SkipSimplifiedLayerNormalization")) return check_rmsnorm(c, true);
  if (ms && !strcmp(op, "RotaryEmbedding")) return check_rotary(c);
  if (ms && !strcmp(op, "FusedMatMul")) return check_fused_matmul(c);
  if (ms && !strcmp(op, "GroupQueryAttention")) return check_gqa(c);
  if (own && !strcmp(op, "SiLUMul")) return check_silumul(c);
  if (own && !strcmp(op, "Noop")) return check_noop(c);
  if (own && !strcmp(op, "Linear")) return check_linear(c);
  if (own && !strcmp(op, "Embedding")) return check_embedding(c);
  if (own && !strcmp(op, "SelectToken")) return check_select(c);
  if (own && !strcmp(op, "FeedToken")) return check_feed(c);
  return refuse(c,
                "the op %s%s%s is not implemented; %s supports %s. Rewrite the model with these ops or "
                "register an EP that has it",
                *dom ? dom : "", *dom ? ":" : "", op, c->ep, supported_list);
}

bool ortep__op_check(const char *ep_name, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                     const ortep_dtype *dtypes, size_t n, ortep_kernel_match *match, ortep__op_params *params) {
  ortep_kernel_match scratch;
  ortep_kernel_match *m = match ? match : &scratch;
  m->reason[0] = '\0';
  ctx c = {ep_name, node, shapes, dtypes, n, opset, m, params};
  if (!check(&c)) return false;
  m->supported = true;
  return true;
}
