/*
 * kernels.c: the CPU EP's kernels. What each op accepts lives in
 * ../opset.c, shared with every EP; this file turns its parameters into
 * calls of the plain CPU op functions (ops.c).
 */
#include <stdio.h>
#include <string.h>

#include "kernels/feed.h"
#include "kernels/opset.h"
#include "internal.h"

typedef struct cpu_kernel {
  ortep_kernel base;
  char name[64];
  ortep__op_params op;
  ortep__cpu_pool *pool; /* the EP's workers (NULL: run inline) */
  float *xperm;          /* a blocked bf16 Linear over rows alone: x as its kernel reads it (k floats a row) */
  void *xq_mem;          /* a q8_0 / q4_0 Linear over rows alone: x quantized (ortep__cpu_qx_bytes a row) */
  ortep__cpu_qx *xq;     /* the quantized rows in xq_mem */
  void *sample_scratch;  /* ortep:SelectToken: the sampler's, made with the kernel, never during a step */
  bool bf16_rows;        /* a Linear of bf16 blocked weights over rows rounded to bf16 (simd_rows.h) */
  bool quant_rows;       /* a Linear of q8_0 / q4_0 blocked weights over rows quantized in the pool's shared area */
  bool bf16_attn;        /* GroupQueryAttention: a chunk's products in bf16 (simd_rows.h) */
  size_t gqa_per;        /* GroupQueryAttention: query heads per item (ortep__cpu_gqa_per_item) */
} cpu_kernel;

/* ortep:Linear over the pool: every output row is one item, computed whole
 * by one worker. */
typedef struct linear_job {
  const __typeof__(((ortep__op_params *)0)->p.lin) *p;
  const float *x, *res;
  const float *xb;         /* blocked weights: x as the bf16 kernel reads it */
  const ortep__cpu_qx *xq; /* q8_0 / q4_0 weights: x quantized */
  const uint16_t *x16;     /* bf16 rows: x rounded to bf16 */
  cpu_weights w[ORTEP__LINEAR_GROUPS], b[ORTEP__LINEAR_GROUPS];
  float *y[ORTEP__LINEAR_GROUPS];
  ortep__cpu_pool *pool;
} linear_job;
/* GroupQueryAttention over the pool: every (token, KV head, block of `per`
 * of its query heads) is one item, with its rows of scores in the running
 * worker's scratch. */
typedef struct gqa_job {
  const __typeof__(((ortep__op_params *)0)->p.gqa) *g;
  const float *q;
  ortep__kv_cache cache;
  const int32_t *pos;
  float *out;
  ortep__cpu_pool *pool;
  bool bf16;  /* a chunk in bf16 products */
  size_t per; /* query heads per item (ortep__cpu_gqa_per_item) */
} gqa_job;
static void gqa_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const gqa_job *j = ctx;
  ortep__cpu_gqa_heads(j->q, j->cache, j->pos, j->g->heads, j->g->kv, j->g->hd, j->g->cap, j->per, j->g->scale,
                       ortep__cpu_pool_scratch(j->pool, worker), j->out, begin, end);
}

static void gqa_chunk_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const gqa_job *j = ctx;
  ortep__cpu_gqa_chunk_heads(j->q, j->cache, j->pos, j->g->tokens, j->g->heads, j->g->kv, j->g->hd, j->g->cap,
                             j->g->scale, j->bf16, ortep__cpu_pool_scratch(j->pool, worker), j->out, begin, end);
}

static void linear_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  ortep__cpu_linear(j->x, j->p->m, j->p->k, j->p->groups, j->w, j->b, j->p->n, j->p->gate_up, j->p->exact_rows, j->res,
                    j->y, begin, end);
}
static void linear_quant_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  ortep__cpu_linear_quant(j->xq, j->p->m, j->p->k, j->p->groups, j->w, j->b, j->p->n, j->p->gate_up, j->p->blocked,
                          j->res, j->y, begin, end);
}
static void quantize_rows_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  (void)worker;
  for (size_t r = begin; r < end; r++) ortep__cpu_quantize_x(j->x + r * j->p->k, j->p->k, &j->xq[r]);
}
static void linear_bf16_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  ortep__cpu_linear_bf16(j->x16, j->p->m, j->p->k, j->p->groups, j->w, j->b, j->p->n, j->p->gate_up, j->res, j->y,
                         begin, end);
}
static void linear_blocked_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  ortep__cpu_linear_blocked(j->x, j->xb, j->p->m, j->p->k, j->p->groups, j->w, j->b, j->p->n, j->p->gate_up, j->res,
                            j->y, begin, end);
}

/* RMSNorm and RoPE over the pool: rows (tokens) are the items, each computed
 * whole by one worker; a decode step's single row stays on the caller. */
typedef struct rows_job {
  const ortep__op_params *op;
  const void *const *in;
  void *const *out;
  size_t n_out;
  uint32_t *ew;
} rows_job;
static cpu_weights W(const void *p, ortep_dtype d);
static void rmsnorm_task(void *ctx, size_t worker, size_t r0, size_t r1) {
  const rows_job *j = ctx;
  const __typeof__(j->op->p.norm) *p = &j->op->p.norm;
  size_t si = p->skip ? 2 : 1, at = r0 * p->h;
  float *sum = p->has_sum && j->n_out > 3 ? (float *)j->out[3] + at : NULL;
  ortep__cpu_rmsnorm((const float *)j->in[0] + at, p->skip ? (const float *)j->in[1] + at : NULL,
                     W(p->has_bias ? j->in[3] : NULL, p->bdt), p->has_bias, W(j->in[si], p->sdt), r1 - r0, p->h, p->eps,
                     (float *)j->out[0] + at, sum);
}
static void rotary_task(void *ctx, size_t worker, size_t t0, size_t t1) {
  const rows_job *j = ctx;
  const __typeof__(j->op->p.rot) *r = &j->op->p.rot;
  size_t at = t0 * r->heads * r->hd;
  const void *pos = (const char *)j->in[1] + t0 * (r->pos64 ? 8 : 4);
  ortep__cpu_rotary((const float *)j->in[0] + at, pos, r->pos64, t1 - t0, r->heads, r->hd, r->rot, r->inter,
                    W(j->in[2], r->cdt), W(j->in[3], r->cdt), r->max_pos, (float *)j->out[0] + at, j->ew);
}

/* M > 1 (a prefill chunk): blocks of output columns through sgemm. */
static void linear_gemm_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const linear_job *j = ctx;
  ortep__cpu_linear_gemm(j->x, j->p->m, j->p->k, j->p->groups, j->w, j->b, j->p->n, j->p->gate_up, j->p->blocked,
                         j->res, j->y, begin, end, ortep__cpu_pool_scratch(j->pool, worker));
}

void ortep__cpu_supports(const ortep_node *node, int64_t opset, const ortep_shape *shapes, const ortep_dtype *dtypes,
                         size_t n, ortep_kernel_match *out) {
  if (ortep__op_check(CPU_EP_NAME, node, opset, shapes, dtypes, n, out, NULL)) out->cost = CPU_OP_COST;
}

/* --- running ----------------------------------------------------------------- */
static cpu_weights W(const void *p, ortep_dtype d) { return (cpu_weights){p, d}; }

/* GroupQueryAttention: the chunk's K/V into the caches, then every (token,
 * head) or every head (a chunk whose rows the same worker can share) on the
 * pool. */
static void run_gqa(cpu_kernel *k, const void *const *in, void *const *out, uint32_t *ew) {
  const __typeof__(k->op.p.gqa) *g = &k->op.p.gqa;
  ortep__kv_cache cache = {(void *)(uintptr_t)in[3], (void *)(uintptr_t)in[4], g->kvdt, NULL, 0};
  const int32_t *pos = in[5];
  if (g->slots) { /* a batch: a chunk of one slot's tokens attends within that slot's caches */
    const int32_t *slots = in[6];
    bool one = slots[0] >= 0 && (size_t)slots[0] < g->slots;
    for (size_t t = 1; one && t < g->tokens; t++) one = slots[t] == slots[0];
    if (one && g->tokens > 1) {
      size_t off = (size_t)slots[0] * g->cap * g->kv * g->hd * ortep_dtype_size(g->kvdt);
      cache.k = (char *)cache.k + off, cache.v = (char *)cache.v + off;
    } else {
      cache.slots = slots, cache.n_slots = g->slots;
    }
  }
  ortep__cpu_gqa_write_kv(in[1], in[2], cache, pos, g->tokens, g->heads, g->kv, g->hd, g->cap, out[0], ew);
  gqa_job j = {g, in[0], cache, pos, out[0], k->pool, k->bf16_attn, k->gqa_per};
  int32_t last = pos[g->tokens - 1]; /* the longest row: the work estimate only */
  size_t span = last >= 0 && (size_t)last < g->cap ? (size_t)last + 1 : g->cap;
  if (!cache.slots && ortep__cpu_gqa_chunk_ok(pos, g->tokens, g->cap))
    ortep__cpu_pool_for(k->pool, g->heads, g->tokens * span * g->hd * 4, gqa_chunk_task, &j);
  else
    ortep__cpu_pool_for(k->pool, ortep__cpu_gqa_items(g->tokens, g->heads, g->kv, j.per), j.per * span * g->hd * 2,
                        gqa_task, &j);
}

/* The pool's shared area of a quant_rows Linear: the m rows' ortep__cpu_qx,
 * then each row's quantized x, 64-byte aligned. */
static size_t quant_row_bytes(size_t k) { return (ortep__cpu_qx_bytes(k) + 63) / 64 * 64; }
static size_t quant_rows_head(size_t m) { return (m * sizeof(ortep__cpu_qx) + 63) / 64 * 64; }

/* A q8_0 / q4_0 Linear's items on the pool (tiles of outputs when blocked,
 * else outputs) for its `outputs` outputs, and in *work each one's work (an
 * integer multiply-add counted a quarter) over m rows of `per` values. */
static size_t quant_items(size_t outputs, bool blocked, size_t per, size_t m, size_t *work) {
  size_t rows = blocked ? ORTEP__QUANT_ROWS : 1;
  *work = rows * per * m / 4;
  return outputs / rows;
}

/* ortep:Linear: M > 1 through sgemm blocks (or, bf16_rows, bf16 products
 * per quad; quant_rows, each row's integer dot products), one blocked or
 * row-major row (or rows each alone: exact_rows) through the dot products,
 * on the pool. */
static void run_linear(cpu_kernel *k, const void *const *in, void *const *out) {
  const __typeof__(k->op.p.lin) *p = &k->op.p.lin;
  bool alone = p->m == 1 || p->exact_rows; /* rows computed as one row alone */
  linear_job j = {p,     in[0], p->residual ? in[7] : NULL, in[0],  k->xq, NULL,
                  {{0}}, {{0}}, {out[0], NULL, NULL},       k->pool};
  for (size_t g = 0; g < p->groups; g++) {
    j.w[g] = W(in[1 + 2 * g], p->wdt[g]);
    j.b[g] = W(p->bias[g] ? in[2 + 2 * g] : NULL, p->bdt[g]);
    if (!p->gate_up) j.y[g] = out[g];
  }
  size_t per = p->gate_up ? 2 * p->k : p->k;
  if (k->quant_rows) { /* the rows quantized into the pool's shared area, then the tiles on the pool */
    ortep__cpu_qx *xq = ortep__cpu_pool_shared(k->pool);
    char *mem = (char *)xq + quant_rows_head(p->m);
    for (size_t r = 0; r < p->m; r++) ortep__cpu_qx_init(mem + r * quant_row_bytes(p->k), p->k, &xq[r]);
    j.xq = xq;
    ortep__cpu_pool_for(k->pool, p->m, p->k, quantize_rows_task, &j);
    size_t work, items = quant_items(ortep__cpu_linear_items(1, p->groups, p->n, p->gate_up), true, per, p->m, &work);
    ortep__cpu_pool_for(k->pool, items, work, linear_quant_task, &j);
    return;
  }
  if (k->bf16_rows) { /* x rounded to bf16 once, into the pool's shared area, then the quads on the pool */
    uint16_t *x16 = ortep__cpu_pool_shared(k->pool);
    ortep__cpu_to_bf16(in[0], p->m * p->k, x16);
    j.x16 = x16;
    ortep__cpu_pool_for(k->pool, ortep__cpu_linear_items(1, p->groups, p->n, p->gate_up) / 4,
                        (p->gate_up ? 8u : 4u) * p->k * p->m, linear_bf16_task, &j);
    return;
  }
  /* x permuted for the bf16 blocked kernel once per run, not per item */
  if (k->xperm && p->m == 1) {
    j.xb = ortep__cpu_blocked_x(in[0], p->k, k->xperm);
  } else if (k->xperm) {
    for (size_t r = 0; r < p->m; r++) { /* the portable kernels read x as it is: a copy, then */
      const float *xr = (const float *)in[0] + r * p->k, *pr = ortep__cpu_blocked_x(xr, p->k, k->xperm + r * p->k);
      if (pr != k->xperm + r * p->k) memcpy(k->xperm + r * p->k, pr, p->k * sizeof *pr);
    }
    j.xb = k->xperm;
  }
  if (alone && k->xq_mem) {
    /* x quantized once per run, then integer dot products (quant.c) */
    for (size_t r = 0; r < p->m; r++) ortep__cpu_quantize_x((const float *)in[0] + r * p->k, p->k, &k->xq[r]);
    size_t work,
        items = quant_items(ortep__cpu_linear_items(1, p->groups, p->n, p->gate_up), p->blocked, per, p->m, &work);
    ortep__cpu_pool_for(k->pool, items, work, linear_quant_task, &j);
  } else if (!alone)
    ortep__cpu_pool_for(k->pool, ortep__cpu_linear_blocks(p->m, p->groups, p->n, p->gate_up),
                        per * 128 * (p->m < 256 ? p->m : 256), linear_gemm_task, &j);
  else if (p->blocked)
    ortep__cpu_pool_for(k->pool, ortep__cpu_linear_items(1, p->groups, p->n, p->gate_up) / 4, 4 * per * p->m,
                        linear_blocked_task, &j);
  else
    ortep__cpu_pool_for(k->pool, ortep__cpu_linear_items(p->m, p->groups, p->n, p->gate_up), per, linear_task, &j);
}

/* Argmax over the workers: range t of the vocabulary to worker t, then the
 * ranges combined in order with the same rule (strictly larger wins), so the
 * first maximum wins for any thread count. */
#define ARGMAX_PARTS 64
typedef struct argmax_job {
  const float *x32;
  const uint16_t *x16;
  size_t n, parts;
  size_t best[ARGMAX_PARTS];
  float value[ARGMAX_PARTS];
  bool bad[ARGMAX_PARTS];
} argmax_job;
static void argmax_task(void *ctx, size_t worker, size_t begin, size_t end) {
  argmax_job *j = ctx;
  for (size_t part = begin; part < end; part++)
    ortep__cpu_argmax_range(j->x32, j->x16, j->n * part / j->parts, j->n * (part + 1) / j->parts, &j->best[part],
                            &j->value[part], &j->bad[part]);
}

uint32_t ortep__cpu_pool_argmax(ortep__cpu_pool *pool, const float *x32, const uint16_t *x16, size_t n, bool *bad) {
  size_t threads = pool ? ortep__cpu_pool_threads(pool) : 1;
  argmax_job j = {x32, x16, n, threads < ARGMAX_PARTS ? threads : ARGMAX_PARTS, {0}, {0}, {0}};
  ortep__cpu_pool_for(pool, j.parts, n / j.parts + 1, argmax_task, &j);
  size_t token = n;
  float best = 0;
  *bad = false;
  for (size_t part = 0; part < j.parts; part++) {
    *bad = *bad || j.bad[part];
    size_t end = n * (part + 1) / j.parts;
    if (j.best[part] != end && (token == n || j.value[part] > best)) token = j.best[part], best = j.value[part];
  }
  return token == n ? 0u : (uint32_t)token;
}

/* ortep:SelectToken: the token and the step's error word, read together.
 * The greedy draw (temperature 0) is the argmax over the workers, as the
 * sampler's own argmax would give it (the first maximum among the finite
 * values; a NaN or infinity latches ARGMAX_NOT_FINITE). */
/* A batch (slots=1): every token into its slot's history, then one draw per
 * logits row from its slot's parameters and history. A row's word is what
 * its own checks found (its tokens outside the vocabulary, its positions
 * outside the caches: what the embedding, RoPE and attention latched for
 * it; a non-finite logit in its draw) and whatever other bits the EP's word
 * holds, which no row can be told apart by; the EP's word gets the row's
 * bits too. So one sequence's bad input fails that sequence alone. */
static void run_select_slots(cpu_kernel *k, const void *const *in, void *const *out, uint32_t *ew) {
  const __typeof__(k->op.p.sel) *p = &k->op.p.sel;
  const int32_t *tok = in[1], *pos = in[2], *slots = in[5], *params = in[3];
  int32_t *hist = (int32_t *)(uintptr_t)in[4], *res = out[0];
  const uint32_t own = ORTEP_ERROR_ARGMAX_NOT_FINITE | ORTEP_ERROR_SAMPLE_NOT_FINITE | ORTEP_ERROR_GATHER_INDEX |
                       ORTEP_ERROR_ROTARY_POSITION | ORTEP_ERROR_KV_SLOT;
  for (size_t t = 0; t < p->tokens; t++)
    if (slots[t] >= 0 && (size_t)slots[t] < p->slots)
      ortep__cpu_select_history(&tok[t], &pos[t], 1, hist + (size_t)slots[t] * p->cap, p->cap);
  for (size_t r = 0; r < p->rows; r++) {
    size_t t = p->rows == 1 ? p->tokens - 1 : r;
    int32_t slot = slots[t], token = 0;
    uint32_t local = 0;
    if (slot < 0) { /* a padding row */
      res[2 * r] = res[2 * r + 1] = 0;
      continue;
    }
    for (size_t u = p->rows == 1 ? 0 : t; u <= t; u++) { /* the row's tokens: one, or a chunk's */
      if (tok[u] < 0 || (size_t)tok[u] >= p->n) local |= ORTEP_ERROR_GATHER_INDEX;
      if (pos[u] < 0 || (size_t)pos[u] >= p->cap) local |= ORTEP_ERROR_KV_SLOT | ORTEP_ERROR_ROTARY_POSITION;
    }
    if ((size_t)slot >= p->slots) local |= ORTEP_ERROR_KV_SLOT;
    if (!local) {
      ortep__sample_params sp;
      memcpy(&sp, params + (size_t)slot * (sizeof sp / sizeof *params), sizeof sp);
      const float *logits = (const float *)in[0] + r * p->n;
      int32_t *h = hist + (size_t)slot * p->cap;
      if (sp.temperature == 0.0f) {
        bool bad;
        token = (int32_t)ortep__cpu_pool_argmax(k->pool, logits, NULL, p->n, &bad);
        if (bad) local = ORTEP_ERROR_ARGMAX_NOT_FINITE;
      } else {
        token =
            (int32_t)ortep__cpu_select(logits, p->n, &tok[t], &pos[t], 1, &sp, h, p->cap, k->sample_scratch, &local);
      }
    }
    if (local) cpu_latch(ew, local);
    res[2 * r] = token;
    res[2 * r + 1] = (int32_t)(local | (__atomic_load_n(ew, __ATOMIC_RELAXED) & ~own));
  }
}

static void run_select(cpu_kernel *k, const void *const *in, void *const *out, uint32_t *ew) {
  const __typeof__(k->op.p.sel) *p = &k->op.p.sel;
  if (p->slots) {
    run_select_slots(k, in, out, ew);
    return;
  }
  ortep__sample_params sp;
  memcpy(&sp, in[3], sizeof sp);
  int32_t token;
  if (sp.temperature == 0.0f) {
    bool bad;
    ortep__cpu_select_history(in[1], in[2], p->tokens, (int32_t *)(uintptr_t)in[4], p->cap);
    token = (int32_t)ortep__cpu_pool_argmax(k->pool, in[0], NULL, p->n, &bad);
    if (bad) cpu_latch(ew, ORTEP_ERROR_ARGMAX_NOT_FINITE);
  } else {
    token = (int32_t)ortep__cpu_select(in[0], p->n, in[1], in[2], p->tokens, &sp, (int32_t *)(uintptr_t)in[4], p->cap,
                                       k->sample_scratch, ew);
  }
  ((int32_t *)out[0])[0] = token;
  ((int32_t *)out[0])[1] = (int32_t)__atomic_load_n(ew, __ATOMIC_RELAXED); /* the step's word, read with its token */
}

static ortep_status cpu_run(ortep_kernel *self, const ortep_kernel_io *io) {
  cpu_kernel *k = (cpu_kernel *)self;
  const void *const *in = io->inputs;
  void *const *out = io->outputs;
  uint32_t *ew = io->error_word;
  switch (k->op.kind) {
    case ORTEP__OP_GATHER:
      ortep__cpu_gather(W(in[0], k->op.p.gather.tdt), k->op.p.gather.blocked, k->op.p.gather.rows, k->op.p.gather.h,
                        in[1], k->op.p.gather.idx64, k->op.p.gather.n, out[0], ew);
      break;
    case ORTEP__OP_GEMM: {
      __typeof__(k->op.p.gemm) *g = &k->op.p.gemm;
      const void *cp = g->has_c && io->n_inputs > 2 ? in[2] : NULL;
      ortep__cpu_gemm(in[0], W(in[1], g->bdt), g->trans_b, NULL, W(cp, g->cdt), g->c_rows, g->alpha, g->beta, g->m,
                      g->k, g->n, out[0]);
      break;
    }
    case ORTEP__OP_ADD: ortep__cpu_add(in[0], W(in[1], k->op.p.bin.bdt), k->op.p.bin.nb, k->op.p.bin.n, out[0]); break;
    case ORTEP__OP_MUL: ortep__cpu_mul(in[0], W(in[1], k->op.p.bin.bdt), k->op.p.bin.nb, k->op.p.bin.n, out[0]); break;
    case ORTEP__OP_SIGMOID: ortep__cpu_sigmoid(in[0], k->op.p.un.n, out[0]); break;
    case ORTEP__OP_SILUMUL: ortep__cpu_silu_mul(in[0], in[1], k->op.p.un.n, out[0]); break;
    case ORTEP__OP_RMSNORM: {
      rows_job j = {&k->op, in, out, io->n_outputs, ew};
      ortep__cpu_pool_for(k->pool, k->op.p.norm.rows, 3 * k->op.p.norm.h, rmsnorm_task, &j);
      break;
    }
    case ORTEP__OP_ROTARY: {
      rows_job j = {&k->op, in, out, io->n_outputs, ew};
      ortep__cpu_pool_for(k->pool, k->op.p.rot.tokens, 2 * k->op.p.rot.heads * k->op.p.rot.hd, rotary_task, &j);
      break;
    }
    case ORTEP__OP_GQA: run_gqa(k, in, out, ew); break;
    case ORTEP__OP_SOFTMAX: ortep__cpu_softmax(in[0], k->op.p.sm.rows, k->op.p.sm.n, out[0]); break;
    case ORTEP__OP_ARGMAX:
      for (size_t r = 0; r < k->op.p.sm.rows; r++)
        ((int64_t *)out[0])[r] = ortep__cpu_argmax_f32((const float *)in[0] + r * k->op.p.sm.n, k->op.p.sm.n, ew);
      break;
    case ORTEP__OP_LINEAR: run_linear(k, in, out); break;
    case ORTEP__OP_SELECT: run_select(k, in, out, ew); break;
    case ORTEP__OP_FEED:
      ((int32_t *)out[0])[0] =
          ortep__feed_token(in[0], (int32_t *)(uintptr_t)in[1], (int32_t *)(uintptr_t)in[2], in[3],
                            (int64_t)k->op.p.feed.vocab, (int32_t *)(uintptr_t)in[4], (int64_t)k->op.p.feed.kmax);
      break;
    case ORTEP__OP_NOOP: break;
  }
  return ORTEP_OK;
}

/* Recording validates what a replay will dereference. */
static ortep_status cpu_record(ortep_kernel *self, const ortep_kernel_io *io) {
  cpu_kernel *k = (cpu_kernel *)self;
  for (size_t i = 0; i < io->n_outputs; i++)
    if (i == 0 && !io->outputs[i])
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: recording with no output 0 bound", k->name);
  if (io->n_inputs && !io->inputs[0])
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: recording with no input 0 bound", k->name);
  return ORTEP_OK;
}

static void cpu_destroy(ortep_kernel *self) {
  cpu_kernel *k = (cpu_kernel *)self;
  ortep__free(k->xperm);
  ortep__free(k->xq_mem);
  ortep__free(k->xq);
  ortep__free(k->sample_scratch);
  ortep__free(k);
}

static const ortep_kernel_vtable cpu_kernel_vtable = {cpu_run, cpu_destroy, cpu_record};

/* Which path a kernel takes (the op is checked): a prefill chunk's Linear
 * over bf16 or quantized blocked weights, a chunk's attention in bf16, the
 * attention's work split. */
static void choose_paths(cpu_kernel *k, const ortep__cpu_pool *pool, bool bf16_products) {
  /* a prefill chunk's Linear of bf16 blocked weights, where cpu.products
   * allows: x rounded to bf16 in the pool's shared area (simd_rows.h) */
  const __typeof__(k->op.p.lin) *lin = &k->op.p.lin;
  if (k->op.kind == ORTEP__OP_LINEAR && lin->m > 1 && !lin->exact_rows && lin->blocked &&
      lin->quant == ORTEP_DTYPE_COUNT && bf16_products) {
    k->bf16_rows = true;
    for (size_t g = 0; g < lin->groups; g++) k->bf16_rows = k->bf16_rows && lin->wdt[g] == ORTEP_DTYPE_BF16;
  }
  /* a prefill chunk's Linear of q8_0 / q4_0 blocked weights: its rows
   * quantized into the pool's shared area, each row's dot products decode's
   * (so a chunk computes bitwise what token by token does), a run of tiles
   * read once for all the rows (quant.c) */
  if (k->op.kind == ORTEP__OP_LINEAR && lin->m > 1 && !lin->exact_rows && lin->blocked &&
      lin->quant != ORTEP_DTYPE_COUNT)
    k->quant_rows = true;
  /* a prefill chunk's attention over bf16 caches likewise (the keys and
   * values read as stored, the queries and probabilities rounded), and over
   * f32 or f16 caches where the node allows it (bf16_products=1: the
   * decoder's bf16 models), the keys and values rounded as a bf16 cache
   * would hold them */
  if (k->op.kind == ORTEP__OP_GQA && k->op.p.gqa.tokens > 1 &&
      (k->op.p.gqa.kvdt == ORTEP_DTYPE_BF16 || k->op.p.gqa.bf16_products) && bf16_products)
    k->bf16_attn = ortep__cpu_attn_bf16(k->op.p.gqa.hd);
  if (k->op.kind == ORTEP__OP_GQA)
    k->gqa_per =
        ortep__cpu_gqa_per_item(k->op.p.gqa.tokens, k->op.p.gqa.heads, k->op.p.gqa.kv, ortep__cpu_pool_threads(pool));
}

/* The pool's shared area and per-worker scratch the kernel's path needs,
 * reserved now (never while a step runs): a chunk's rows in bf16 or
 * quantized, a row of attention scores, a block of widened weights for a
 * prefill GEMM. */
static ortep_status reserve_scratch(const cpu_kernel *k, ortep__cpu_pool *pool) {
  const __typeof__(k->op.p.lin) *lin = &k->op.p.lin;
  ortep_status st = ORTEP_OK;
  if (k->bf16_rows) st = ortep__cpu_pool_reserve_shared(pool, lin->m * lin->k * sizeof(uint16_t));
  if (st == ORTEP_OK && k->quant_rows)
    st = ortep__cpu_pool_reserve_shared(pool, quant_rows_head(lin->m) + lin->m * quant_row_bytes(lin->k));
  size_t scratch = 0;
  if (k->op.kind == ORTEP__OP_GQA)
    scratch = ortep__cpu_gqa_scratch(k->op.p.gqa.tokens, k->op.p.gqa.heads, k->op.p.gqa.kv, k->op.p.gqa.hd,
                                     k->op.p.gqa.cap, k->op.p.gqa.kvdt, k->bf16_attn) *
              sizeof(float);
  if (k->op.kind == ORTEP__OP_LINEAR && lin->m > 1 && !lin->exact_rows && !k->bf16_rows && !k->quant_rows)
    scratch = ortep__cpu_linear_scratch(lin->k, lin->quant != ORTEP_DTYPE_COUNT);
  if (st == ORTEP_OK && scratch) st = ortep__cpu_pool_reserve(pool, scratch);
  return st;
}

/* The kernel's own buffers: x as a blocked bf16 Linear over one row reads
 * it, x quantized for a quantized one, the sampler's scratch. */
static ortep_status own_buffers(cpu_kernel *k) {
  const __typeof__(k->op.p.lin) *lin = &k->op.p.lin;
  bool bf16 = false, alone = k->op.kind == ORTEP__OP_LINEAR && (lin->m == 1 || lin->exact_rows);
  if (alone && lin->blocked)
    for (size_t g = 0; g < lin->groups; g++) bf16 = bf16 || lin->wdt[g] == ORTEP_DTYPE_BF16;
  if (bf16 && !(k->xperm = ortep__malloc(lin->m * lin->k * sizeof *k->xperm)))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a kernel's %zu x %zu activations", CPU_EP_NAME, lin->m,
                       lin->k);
  if (alone && lin->quant != ORTEP_DTYPE_COUNT) {
    size_t per = (ortep__cpu_qx_bytes(lin->k) + 63) / 64 * 64;
    k->xq = ortep__calloc(lin->m, sizeof *k->xq);
    k->xq_mem = ortep__malloc(lin->m * per);
    if (!k->xq || !k->xq_mem)
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a kernel's %zu x %zu quantized activations",
                         CPU_EP_NAME, lin->m, lin->k);
    for (size_t r = 0; r < lin->m; r++) ortep__cpu_qx_init((char *)k->xq_mem + r * per, lin->k, &k->xq[r]);
  }
  if (k->op.kind == ORTEP__OP_SELECT &&
      !(k->sample_scratch = ortep__malloc(ORTEP__SAMPLE_SCRATCH_BYTES(k->op.p.sel.n))))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for the sampler's scratch (%zu logits)", CPU_EP_NAME,
                       k->op.p.sel.n);
  return ORTEP_OK;
}

ortep_status ortep__cpu_make_kernel(const ortep_node *node, const ortep_shape *shapes, const ortep_dtype *dtypes,
                                    size_t n, int64_t opset, ortep__cpu_pool *pool, bool bf16_products,
                                    ortep_kernel **out) {
  /* the dot products are chosen once, here, before any kernel can run */
  ortep_status st = ortep__cpu_simd_check();
  if (st != ORTEP_OK) return st;
  cpu_kernel *k = ortep__calloc(1, sizeof *k);
  if (!k) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a kernel", CPU_EP_NAME);
  ortep_kernel_match m;
  if (!ortep__op_check(CPU_EP_NAME, node, opset, shapes, dtypes, n, &m, &k->op)) {
    ortep__free(k);
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s", m.reason);
  }
  choose_paths(k, pool, bf16_products);
  if ((st = reserve_scratch(k, pool)) != ORTEP_OK || (st = own_buffers(k)) != ORTEP_OK) {
    cpu_destroy(&k->base);
    return st;
  }
  k->pool = pool;
  snprintf(k->name, sizeof k->name, "cpu.%s", ortep_node_op_type(node));
  k->base = (ortep_kernel){&cpu_kernel_vtable, k->name, true};
  *out = &k->base;
  return ORTEP_OK;
}
