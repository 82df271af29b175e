/*
 * llama.c: the step graph of a LLaMA / Qwen2 model over T tokens: token ids
 * and positions in, logits of the last token out, built from the EPs' op
 * set. T = 1 is the decode step; T > 1 a prefill chunk, whose projections
 * are M = T matrix products, whose attention writes the chunk's K/V and
 * attends causally, and whose final norm and lm_head run on the last row
 * only (a Gather of that row). Weights are initializers borrowing the mapped safetensors bytes
 * (zero-copy); the rotary cos/sin tables are computed here; the KV caches
 * are graph inputs, so the executor gives them fixed places in the EP's
 * planned arena that persist from step to step.
 *
 *   h = Embedding(embed, token_id)             (ortep:Embedding: row-major or blocked)
 *   per layer l (9 nodes):
 *     x   = RMSNorm(h)                         (input_layernorm)
 *     q,k,v = x W^T (+ bias)                   (one ortep:Linear, three weights)
 *     q,k = RotaryEmbedding(q|k, position)
 *     a   = GroupQueryAttention(q, k, v, cache_k[l], cache_v[l], position)
 *     o   = a Wo^T                             (ortep:Linear)
 *     y, h' = SkipRMSNorm(o, h)                (post_attention_layernorm; h' = o + h)
 *     g   = SiLU(y Wg^T) * (y Wu^T)            (one ortep:Linear, gate_up=1)
 *     h   = g Wd^T + h'                        (ortep:Linear with the residual)
 *   logits = RMSNorm(h) Wlm^T                  (lm_head, or embed when tied)
 *   result = SelectToken(logits, token_id, position, sample.params, sample.history)
 *   go = FeedToken(result, token_id, position, loop.stop_mask, loop.state)   (the decode step only)
 *
 * The last node selects the next token on the EP that holds the logits
 * (ortep:SelectToken: argmax, or the sampler when the parameters ask), and
 * writes the step's tokens into the token history the sampler's repetition
 * penalty reads; its 8-byte result (token, error word) is what the host
 * reads per step. The parameters and the history are graph inputs like the
 * KV caches: persistent, shared by every graph of the session.
 *
 * Fusing the projections that share an input into one node reads the
 * activation once and costs one launch instead of up to six (on the GPU,
 * where launches bound a small model's step).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "kernels/feed.h"
#include "llama.h"
#include "ortep/tensor.h"

typedef struct builder {
  ortep_graph *g;
  const ortep_model *m;
  ortep_ep *host;
  int64_t tokens;
  ortep_status st;
  ortep_dtype prefer; /* for the weights weight() adds: a block type, or ORTEP_DTYPE_COUNT */
  bool exact_rows;    /* a batched decode step: every Linear computes each row as it would alone */
} builder;

static void value(builder *b, const char *name, int64_t d0, int64_t d1, int64_t d2) {
  if (b->st != ORTEP_OK) return;
  if (d1 == 1) d1 = b->tokens; /* every activation has a row per token */
  ortep_shape s = {3, {d0, d1, d2}};
  b->st = ortep_graph_add_value(b->g, name, ORTEP_DTYPE_F32, &s);
}

/* An initializer over the mapped weight (copied only when misaligned). */
static void weight(builder *b, const char *name) {
  if (b->st || ortep_graph_initializer(b->g, name)) return;
  const ortep_safetensors_entry *e = ortep_model_tensor(b->m, name);
  if (!e) {
    b->st = ortep__fail(ORTEP_E_FORMAT, "model: tensor '%s' is missing", name);
    return;
  }
  ortep_tensor *t = NULL;
  size_t es = ortep_dtype_align(e->dtype);
  if ((uintptr_t)e->data % es == 0) {
    ortep_buffer buf;
    /* a private copy (ortep.weights = read) is the model's to give: an EP may
     * prepare it in place; mapped file pages are read-only */
    b->st =
        ortep__model_weights_private(b->m)
            ? ortep_buffer_wrap_borrowed_mut((void *)(uintptr_t)e->data, ortep_ep_device(b->host), e->size, es, &buf)
            : ortep_buffer_wrap_borrowed(e->data, ortep_ep_device(b->host), e->size, es, &buf);
    if (b->st == ORTEP_OK) b->st = ortep_tensor_from_borrowed(b->host, e->dtype, &e->shape, &buf, &t);
  } else {
    b->st = ortep_tensor_create(b->host, e->dtype, &e->shape, false, &t);
    if (b->st == ORTEP_OK) b->st = ortep_tensor_copyin(t, e->data, e->size);
  }
  if (b->st == ORTEP_OK)
    b->st = ortep_graph_add_initializer(b->g, name, t);
  else
    ortep_tensor_release(t);
  /* a weight stored quantized (a GGUF's) stays as it is */
  if (b->st == ORTEP_OK && b->prefer != ORTEP_DTYPE_COUNT && ortep_dtype_is_float(e->dtype))
    b->st = ortep_graph_prefer_initializer_dtype(b->g, name, b->prefer);
}

static ortep_node_id node(builder *b, const char *op, const char *domain, const char *name, const char *const *in,
                          size_t nin, const char *const *out, size_t nout) {
  ortep_node_id id = 0;
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_node(b->g, op, domain, name, in, nin, out, nout, &id);
  return id;
}

static void attr_i(builder *b, ortep_node_id id, const char *k, int64_t v) {
  if (b->st == ORTEP_OK) b->st = ortep_graph_set_attr_int(b->g, id, k, v);
}
static void attr_f(builder *b, ortep_node_id id, const char *k, float v) {
  if (b->st == ORTEP_OK) b->st = ortep_graph_set_attr_float(b->g, id, k, v);
}

/* The Hugging Face Linear as ortep:Linear (kernels/opset.h): outs[g] =
 * in W[g]^T (+ bias[g]) for every weight given, in one node; gate_up makes it
 * SiLU(in W0^T) * (in W1^T) into outs[0]; residual (may be NULL) is added. */
static void linear(builder *b, const char *name, const char *in, const char *const *w, const char *const *bias,
                   size_t groups, const char *const *outs, const int64_t *width, bool gate_up, const char *residual) {
  const char *ins[8] = {in, "", "", "", "", "", "", residual ? residual : ""};
  for (size_t g = 0; g < groups; g++) {
    weight(b, w[g]);
    ins[1 + 2 * g] = w[g];
    if (bias && bias[g]) {
      weight(b, bias[g]);
      ins[2 + 2 * g] = bias[g];
    }
  }
  size_t nout = gate_up ? 1 : groups;
  for (size_t g = 0; g < nout; g++) value(b, outs[g], 1, 1, width[g]);
  ortep_node_id id = node(b, "Linear", ORTEP_DOMAIN_ORTEP, name, ins, residual ? 8 : 1 + 2 * groups, outs, nout);
  if (gate_up) attr_i(b, id, "gate_up", 1);
  if (b->exact_rows) attr_i(b, id, "exact_rows", 1);
}

ortep_status ortep__llama_rope_tables(const ortep_model *m, ortep_ep *host, size_t rows, ortep_tensor *out[2]) {
  const ortep_model_config *c = ortep_model_get_config(m);
  ortep_shape s = {2, {(int64_t)rows, (int64_t)(c->head_dim / 2)}};
  out[0] = out[1] = NULL;
  ortep_status st = ortep_tensor_create(host, ORTEP_DTYPE_F32, &s, false, &out[0]);
  if (st == ORTEP_OK) st = ortep_tensor_create(host, ORTEP_DTYPE_F32, &s, false, &out[1]);
  if (st != ORTEP_OK) {
    ortep_tensor_release(out[0]), ortep_tensor_release(out[1]);
    out[0] = out[1] = NULL;
    return ortep__wrap(st, "the rotary tables (%zu positions)", rows);
  }
  return ORTEP_OK;
}

ortep_status ortep__llama_rope_fill(const ortep_model *m, ortep_tensor *const rope[2], size_t from, size_t to) {
  const ortep_model_config *c = ortep_model_get_config(m);
  size_t half = (size_t)c->head_dim / 2;
  float *cd = (float *)ortep_tensor_data_ptr(rope[0]), *sd = (float *)ortep_tensor_data_ptr(rope[1]);
  double *inv = ortep__malloc((half ? half : 1) * sizeof *inv);
  if (!inv) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the rotary frequencies (%zu bytes)", half * 8);
  for (size_t i = 0; i < half; i++) inv[i] = pow(c->rope_theta, -2.0 * (double)i / (double)c->head_dim);
  for (size_t p = from; p < to; p++)
    for (size_t i = 0; i < half; i++) {
      double a = (double)p * inv[i];
      cd[p * half + i] = (float)cos(a);
      sd[p * half + i] = (float)sin(a);
    }
  ortep__free(inv);
  return ORTEP_OK;
}

/* The tables as this graph's initializers: views, so every graph of the
 * decoder (and its forks) binds the same bytes once. */
static void rope_tables(builder *b, ortep_tensor *const rope[2]) {
  static const char *const names[2] = {"rope.cos", "rope.sin"};
  for (int i = 0; i < 2 && b->st == ORTEP_OK; i++) {
    ortep_tensor *v = NULL;
    b->st = ortep_tensor_view_as(rope[i], 0, ORTEP_DTYPE_F32, ortep_tensor_shape(rope[i]), &v);
    if (b->st == ORTEP_OK) b->st = ortep_graph_add_initializer(b->g, names[i], v);
  }
}

void ortep__llama_names_of(const ortep__llama_step *step, ortep__llama_names *n) {
  const char *pre = step->each_row_a_sequence ? "batch." : "";
  size_t t = step->tokens;
  if (t == 1 && !step->each_row_a_sequence) {
    snprintf(n->tokens, sizeof n->tokens, "%s", ORTEP_INPUT_TOKEN);
    snprintf(n->positions, sizeof n->positions, "%s", ORTEP_INPUT_POSITION);
  } else {
    snprintf(n->tokens, sizeof n->tokens, "%s%s.%zu", pre, ORTEP_INPUT_TOKEN, t);
    snprintf(n->positions, sizeof n->positions, "%s%s.%zu", pre, ORTEP_INPUT_POSITION, t);
  }
  if (step->slots)
    snprintf(n->slots, sizeof n->slots, "%sslot.%zu", pre, t);
  else
    n->slots[0] = '\0';
  if (step->each_row_a_sequence) { /* logits and a result per row: the graph's own */
    snprintf(n->logits, sizeof n->logits, "batch.%s.%zu", ORTEP_OUTPUT_LOGITS, t);
    snprintf(n->result, sizeof n->result, "batch.%s.%zu", ORTEP_OUTPUT_RESULT, t);
  } else {
    snprintf(n->logits, sizeof n->logits, "%s", ORTEP_OUTPUT_LOGITS);
    snprintf(n->result, sizeof n->result, "%s", ORTEP_OUTPUT_RESULT);
  }
}

/* The i32 initializer [1] = T - 1: which row of the chunk the lm_head reads. */
static void last_row_index(builder *b) {
  if (b->st != ORTEP_OK) return;
  ortep_shape s = {1, {1}};
  ortep_tensor *t = NULL;
  int32_t last = (int32_t)(b->tokens - 1);
  b->st = ortep_tensor_create(b->host, ORTEP_DTYPE_I32, &s, false, &t);
  if (b->st == ORTEP_OK) b->st = ortep_tensor_copyin(t, &last, sizeof last);
  if (b->st == ORTEP_OK)
    b->st = ortep_graph_add_initializer(b->g, "last_row", t);
  else
    ortep_tensor_release(t);
}

/* The last node: the token drawn from the logits (ortep:SelectToken), with
 * the sampler's parameters and the token history as persistent inputs and
 * the 8-byte result as an output. */
/* With slots (a batch): the parameters and the history are one per slot,
 * and the result a (token, word) pair per logits row (rows). */
static void select_token(builder *b, const char *logits, const char *tokens, const char *positions, size_t max_seq,
                         const char *slot_map, size_t slots, size_t rows, const char *result) {
  ortep_shape params = {1, {ORTEP__SAMPLE_PARAM_WORDS}}, hist = {1, {(int64_t)max_seq}}, res = {1, {2}};
  if (slots) {
    params = (ortep_shape){2, {(int64_t)slots, ORTEP__SAMPLE_PARAM_WORDS}};
    hist = (ortep_shape){2, {(int64_t)slots, (int64_t)max_seq}};
    res = (ortep_shape){2, {(int64_t)rows, 2}};
  }
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, ORTEP_INPUT_SAMPLE_PARAMS, ORTEP_DTYPE_I32, &params);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, ORTEP_INPUT_HISTORY, ORTEP_DTYPE_I32, &hist);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_value(b->g, result, ORTEP_DTYPE_I32, &res);
  ortep_node_id id =
      node(b, "SelectToken", ORTEP_DOMAIN_ORTEP, "select_token",
           (const char *[]){logits, tokens, positions, ORTEP_INPUT_SAMPLE_PARAMS, ORTEP_INPUT_HISTORY, slot_map},
           slots ? 6 : 5, (const char *[]){result}, 1);
  if (slots) attr_i(b, id, "slots", 1);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_output(b->g, result);
}

/* A decoder's decode step ends with ortep:FeedToken (kernels/feed.h), so
 * the session can repeat it on the device for K tokens a launch: the stop
 * mask and the loop state are persistent inputs, the loop flag an output.
 * Idle (its state unarmed), it changes nothing: a plain step. */
static void feed_token(builder *b, const char *result, const char *tokens, const char *positions, int64_t vocab) {
  ortep_shape mask = {1, {vocab}}, state = {1, {ORTEP__FEED_HEADER + ORTEP__FEED_MAX}}, flag = {1, {1}};
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, ORTEP_INPUT_STOP_MASK, ORTEP_DTYPE_U8, &mask);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, ORTEP_INPUT_LOOP, ORTEP_DTYPE_I32, &state);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_value(b->g, ORTEP_OUTPUT_LOOP_GO, ORTEP_DTYPE_I32, &flag);
  node(b, "FeedToken", ORTEP_DOMAIN_ORTEP, "feed_token",
       (const char *[]){result, tokens, positions, ORTEP_INPUT_STOP_MASK, ORTEP_INPUT_LOOP}, 5,
       (const char *[]){ORTEP_OUTPUT_LOOP_GO}, 1);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_output(b->g, ORTEP_OUTPUT_LOOP_GO);
}

ortep_status ortep__llama_build_redraw(const ortep_model *m, size_t max_seq, size_t slots, ortep_graph **out) {
  const ortep_model_config *c = ortep_model_get_config(m);
  builder b = {NULL, m, NULL, 1, ORTEP_OK, ORTEP_DTYPE_COUNT, false};
  *out = NULL;
  if ((b.st = ortep_graph_create(&b.g)) != ORTEP_OK) return b.st;
  ortep_graph_set_opset(b.g, ORTEP_DOMAIN_ORTEP, 1);
  ortep_shape one = {2, {1, 1}}, logits = {3, {1, 1, c->vocab_size}};
  b.st = ortep_graph_add_input(b.g, ORTEP_OUTPUT_LOGITS, ORTEP_DTYPE_F32, &logits);
  if (b.st == ORTEP_OK) b.st = ortep_graph_add_input(b.g, ORTEP_REDRAW_TOKEN, ORTEP_DTYPE_I32, &one);
  if (b.st == ORTEP_OK) b.st = ortep_graph_add_input(b.g, ORTEP_REDRAW_POSITION, ORTEP_DTYPE_I32, &one);
  ortep_shape slot = {1, {1}};
  if (b.st == ORTEP_OK && slots) b.st = ortep_graph_add_input(b.g, ORTEP_REDRAW_SLOT, ORTEP_DTYPE_I32, &slot);
  select_token(&b, ORTEP_OUTPUT_LOGITS, ORTEP_REDRAW_TOKEN, ORTEP_REDRAW_POSITION, max_seq, ORTEP_REDRAW_SLOT, slots, 1,
               ORTEP_OUTPUT_RESULT);
  if (b.st != ORTEP_OK) {
    ortep_graph_destroy(b.g);
    return ortep__wrap(b.st, "building the graph that draws the pending token again");
  }
  *out = b.g;
  return ORTEP_OK;
}

/* The KV caches are the graph's values, so the builder names them
 * (decode.h documents the names for users of the session). */
const char *ortep_decoder_kv_name(size_t layer, bool value, char *buf, size_t len) {
  if (buf && len) snprintf(buf, len, "%s.%zu", value ? "past_value" : "past_key", layer);
  return buf;
}

/* What every layer of a step reads: the step's inputs by name, the caches'
 * shape and dtype, the weights' dtypes. */
typedef struct layer_io {
  const char *pos_in, *slot_in;
  size_t slots;
  ortep_shape cache;
  const ortep__llama_dtypes *dt;
} layer_io;

/* Layer l: h (its input's name) becomes the layer's output's. */
static void add_layer(builder *b, int64_t l, const layer_io *io, char h[64]) {
  const ortep_model_config *c = ortep_model_get_config(b->m);
  int64_t H = c->hidden_size, I = c->intermediate_size, NH = c->num_attention_heads, KV = c->num_key_value_heads;
  int64_t HD = c->head_dim;
  float eps = (float)c->rms_norm_eps;
  const ortep__llama_dtypes *dt = io->dt;
  char n[11][96], w[12][128], nm[9][96];
#define NAME(i, fmt) snprintf(n[i], sizeof n[i], "layers.%lld." fmt, (long long)l)
#define W(i, fmt)    snprintf(w[i], sizeof w[i], "model.layers.%lld." fmt, (long long)l)
#define NODE(i, fmt) snprintf(nm[i], sizeof nm[i], "layers.%lld." fmt, (long long)l)
  NAME(0, "x"), NAME(1, "q"), NAME(2, "k"), NAME(3, "v"), NAME(4, "q_rot"), NAME(5, "k_rot");
  NAME(6, "attn"), NAME(7, "o"), NAME(8, "y"), NAME(9, "h_mid"), NAME(10, "mlp");
  W(0, "input_layernorm.weight"), W(1, "self_attn.q_proj.weight"), W(2, "self_attn.k_proj.weight");
  W(3, "self_attn.v_proj.weight"), W(4, "self_attn.o_proj.weight"), W(5, "post_attention_layernorm.weight");
  W(6, "mlp.gate_proj.weight"), W(7, "mlp.up_proj.weight"), W(8, "mlp.down_proj.weight");
  W(9, "self_attn.q_proj.bias"), W(10, "self_attn.k_proj.bias"), W(11, "self_attn.v_proj.bias");
  NODE(0, "input_norm"), NODE(1, "qkv_proj"), NODE(2, "q_rotary"), NODE(3, "k_rotary"), NODE(4, "attention");
  NODE(5, "o_proj"), NODE(6, "post_norm"), NODE(7, "gate_up_proj"), NODE(8, "down_proj");
#undef NAME
#undef W
#undef NODE
  char ck[64], cv[64], hn[64];
  ortep_decoder_kv_name((size_t)l, false, ck, sizeof ck);
  ortep_decoder_kv_name((size_t)l, true, cv, sizeof cv);
  snprintf(hn, sizeof hn, "h.%lld", (long long)l + 1);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, ck, dt->kv, &io->cache);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_input(b->g, cv, dt->kv, &io->cache);
  bool bias = c->attention_bias;
  value(b, n[0], 1, 1, H);
  weight(b, w[0]);
  ortep_node_id id =
      node(b, "SimplifiedLayerNormalization", "", nm[0], (const char *[]){h, w[0]}, 2, (const char *[]){n[0]}, 1);
  attr_f(b, id, "epsilon", eps);
  if (b->st == ORTEP_OK && bias) /* the biases first: only the projections' weights are quantized */
    weight(b, w[9]), weight(b, w[10]), weight(b, w[11]);
  b->prefer = dt->projections;
  linear(b, nm[1], n[0], (const char *[]){w[1], w[2], w[3]}, bias ? (const char *[]){w[9], w[10], w[11]} : NULL, 3,
         (const char *[]){n[1], n[2], n[3]}, (int64_t[]){NH * HD, KV * HD, KV * HD}, false, NULL);
  for (int r = 0; r < 2; r++) {
    value(b, n[4 + r], 1, 1, (r ? KV : NH) * HD);
    id = node(b, "RotaryEmbedding", ORTEP_DOMAIN_MS, nm[2 + r],
              (const char *[]){n[1 + r], io->pos_in, "rope.cos", "rope.sin"}, 4, (const char *[]){n[4 + r]}, 1);
    attr_i(b, id, "num_heads", r ? KV : NH);
    if (c->rope_interleaved) attr_i(b, id, "interleaved", 1); /* a llama GGUF's q/k row order */
  }
  value(b, n[6], 1, 1, NH * HD);
  id = node(b, "GroupQueryAttention", ORTEP_DOMAIN_MS, nm[4],
            (const char *[]){n[4], n[5], n[3], ck, cv, io->pos_in, io->slot_in}, io->slots ? 7 : 6,
            (const char *[]){n[6]}, 1);
  if (io->slots) attr_i(b, id, "slots", 1);
  attr_i(b, id, "num_heads", NH);
  attr_i(b, id, "kv_num_heads", KV);
  /* where a chunk's projections round their activations to bf16 (bf16
   * weights, as stored), its attention may too, whatever the caches' dtype */
  const ortep_safetensors_entry *wo = ortep_model_tensor(b->m, w[4]);
  if (dt->projections == ORTEP_DTYPE_COUNT && wo && wo->dtype == ORTEP_DTYPE_BF16) attr_i(b, id, "bf16_products", 1);
  linear(b, nm[5], n[6], (const char *[]){w[4]}, NULL, 1, (const char *[]){n[7]}, (int64_t[]){H}, false, NULL);
  b->prefer = ORTEP_DTYPE_COUNT;
  value(b, n[8], 1, 1, H);
  value(b, n[9], 1, 1, H);
  weight(b, w[5]);
  id = node(b, "SkipSimplifiedLayerNormalization", ORTEP_DOMAIN_MS, nm[6], (const char *[]){n[7], h, w[5]}, 3,
            (const char *[]){n[8], "", "", n[9]}, 4);
  attr_f(b, id, "epsilon", eps);
  b->prefer = dt->projections;
  linear(b, nm[7], n[8], (const char *[]){w[6], w[7]}, NULL, 2, (const char *[]){n[10]}, (int64_t[]){I}, true, NULL);
  linear(b, nm[8], n[10], (const char *[]){w[8]}, NULL, 1, (const char *[]){hn}, (int64_t[]){H}, false, n[9]);
  b->prefer = ORTEP_DTYPE_COUNT;
  snprintf(h, 64, "%s", hn);
}

/* After the layers (h: the last one's output): the last position's row
 * (a chunk's), the final norm, the lm_head, the token's selection and, for
 * a single sequence's decode step, the feed of the next step. */
static void add_head(builder *b, const ortep__llama_step *step, const ortep__llama_names *io, size_t max_seq,
                     const ortep__llama_dtypes *dt, char h[64]) {
  const ortep_model_config *c = ortep_model_get_config(b->m);
  size_t tokens = step->tokens, slots = step->slots;
  bool seq_rows = slots && step->each_row_a_sequence;
  int64_t H = c->hidden_size, V = c->vocab_size;
  if (tokens > 1 && !seq_rows) { /* the logits of the last position only */
    last_row_index(b);
    b->tokens = 1;
    value(b, "h.last", 1, 1, H);
    ortep_node_id g =
        node(b, "Gather", "", "last_row", (const char *[]){h, "last_row"}, 2, (const char *[]){"h.last"}, 1);
    attr_i(b, g, "axis", 1);
    snprintf(h, 64, "h.last");
  }
  value(b, "final", 1, 1, H);
  weight(b, "model.norm.weight");
  ortep_node_id id = node(b, "SimplifiedLayerNormalization", "", "final_norm", (const char *[]){h, "model.norm.weight"},
                          2, (const char *[]){"final"}, 1);
  attr_f(b, id, "epsilon", (float)c->rms_norm_eps);
  b->prefer = dt->embedding; /* a tied table was added (and asked for) above */
  linear(b, "lm_head", "final",
         (const char *[]){c->tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"}, NULL, 1,
         (const char *[]){io->logits}, (int64_t[]){V}, false, NULL);
  b->prefer = ORTEP_DTYPE_COUNT;
  select_token(b, io->logits, io->tokens, io->positions, max_seq, io->slots, slots, seq_rows ? tokens : 1, io->result);
  if (tokens == 1 && !slots) feed_token(b, io->result, io->tokens, io->positions, V);
  if (b->st == ORTEP_OK) b->st = ortep_graph_add_output(b->g, io->logits);
}

ortep_status ortep__llama_build(const ortep_model *m, ortep_ep *host, size_t max_seq, const ortep__llama_step *step,
                                const ortep__llama_dtypes *dt, ortep_tensor *const rope[2], ortep_graph **out) {
  const ortep_model_config *c = ortep_model_get_config(m);
  size_t tokens = step->tokens, slots = step->slots;
  bool seq_rows = slots && step->each_row_a_sequence; /* every row its own sequence: logits for all */
  *out = NULL;
  if (tokens < 1 || (!seq_rows && tokens > max_seq) || (seq_rows && tokens > slots))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "a step of %zu tokens: use 1 to %s (%zu)", tokens,
                       seq_rows ? "the slots" : "max_seq_len", seq_rows ? slots : max_seq);
  builder b = {NULL, m, host, (int64_t)tokens, ORTEP_OK, ORTEP_DTYPE_COUNT, seq_rows};
  if ((b.st = ortep_graph_create(&b.g)) != ORTEP_OK) return b.st;
  int64_t KV = c->num_key_value_heads, HD = c->head_dim, S = (int64_t)max_seq;
  ortep_graph_set_opset(b.g, "", 17);
  ortep_graph_set_opset(b.g, ORTEP_DOMAIN_MS, 1);
  ortep_graph_set_opset(b.g, ORTEP_DOMAIN_ORTEP, 1);
  ortep__llama_names nm_io;
  ortep__llama_names_of(step, &nm_io);
  layer_io io = {nm_io.positions, nm_io.slots, slots, {3, {S, KV, HD}}, dt};
  if (slots) io.cache = (ortep_shape){4, {(int64_t)slots, S, KV, HD}};
  ortep_shape ids = {2, {1, (int64_t)tokens}}, smap = {1, {(int64_t)tokens}};
  b.st = ortep_graph_add_input(b.g, nm_io.tokens, ORTEP_DTYPE_I32, &ids);
  if (b.st == ORTEP_OK) b.st = ortep_graph_add_input(b.g, nm_io.positions, ORTEP_DTYPE_I32, &ids);
  if (b.st == ORTEP_OK && slots) b.st = ortep_graph_add_input(b.g, nm_io.slots, ORTEP_DTYPE_I32, &smap);
  rope_tables(&b, rope);
  char h[64] = "h.0";
  value(&b, h, 1, 1, c->hidden_size);
  b.prefer = dt->embedding;
  weight(&b, "model.embed_tokens.weight");
  b.prefer = ORTEP_DTYPE_COUNT;
  /* ortep:Embedding reads the table row-major or in the CPU EP's blocked
   * layout, so a tied table the EP blocks for the lm_head is held once */
  node(&b, "Embedding", ORTEP_DOMAIN_ORTEP, "embed", (const char *[]){"model.embed_tokens.weight", nm_io.tokens}, 2,
       (const char *[]){h}, 1);
  for (int64_t l = 0; l < c->num_hidden_layers && !b.st; l++) add_layer(&b, l, &io, h);
  add_head(&b, step, &nm_io, max_seq, dt, h);
  if (b.st != ORTEP_OK) {
    ortep_graph_destroy(b.g);
    return ortep__wrap(b.st, tokens == 1 ? "building the decode graph" : "building the prefill graph of %zu tokens",
                       tokens);
  }
  *out = b.g;
  return ORTEP_OK;
}
