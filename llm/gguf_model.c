/*
 * gguf_model.c: a GGUF file (gguf.h) as a model: the config from its
 * metadata (llama.cpp's keys, "<arch>.embedding_length" ...) and its tensors
 * under the Hugging Face names the graph builder uses (token_embd.weight ->
 * model.embed_tokens.weight, blk.N.attn_q.weight ->
 * model.layers.N.self_attn.q_proj.weight, ...), in place in the file.
 *
 * llama.cpp's converter permutes a llama model's q and k rows, within each
 * head, from Hugging Face's rotate-half order (the first half of the
 * dimensions, then the second) to adjacent pairs, for ggml's RoPE. ortep
 * leaves them so and runs RoPE on adjacent pairs for such a model
 * (config.rope_interleaved): q and k come out permuted alike within each
 * head, which leaves every attention score as it is, and v and the output
 * are not permuted. Qwen2 files keep Hugging Face's order (ggml's NEOX RoPE).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "ortep/gguf.h"

#define META_FAIL(...) ortep__fail(ORTEP_E_FORMAT, "gguf metadata: " __VA_ARGS__)

/* An integer entry ("<arch>.<suffix>"), 1 to 1e12; absent: fallback, or an
 * error when required. */
static ortep_status get_int(const ortep_gguf *g, const char *arch, const char *suffix, bool required, int64_t fallback,
                            int64_t *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  const ortep_gguf_kv *kv = ortep_gguf_find_kv(g, key);
  if (!kv) {
    if (required) return META_FAIL("'%s' is missing (llama.cpp's converter writes it)", key);
    *out = fallback;
    return ORTEP_OK;
  }
  bool is_int = kv->type <= ORTEP_GGUF_I32 || kv->type == ORTEP_GGUF_U64 || kv->type == ORTEP_GGUF_I64;
  bool sgn = kv->type == ORTEP_GGUF_I8 || kv->type == ORTEP_GGUF_I16 || kv->type == ORTEP_GGUF_I32 ||
             kv->type == ORTEP_GGUF_I64;
  if (!is_int || kv->type == ORTEP_GGUF_F32 || (sgn ? kv->i < 1 : kv->u < 1) ||
      (sgn ? kv->i > (int64_t)1e12 : kv->u > (uint64_t)1e12))
    return META_FAIL("'%s' must be an integer from 1 to 1e12", key);
  *out = sgn ? kv->i : (int64_t)kv->u;
  return ORTEP_OK;
}

static ortep_status get_float(const ortep_gguf *g, const char *arch, const char *suffix, bool required, double fallback,
                              double lo, double hi, double *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  const ortep_gguf_kv *kv = ortep_gguf_find_kv(g, key);
  if (!kv) {
    if (required) return META_FAIL("'%s' is missing (llama.cpp's converter writes it)", key);
    *out = fallback;
    return ORTEP_OK;
  }
  if ((kv->type != ORTEP_GGUF_F32 && kv->type != ORTEP_GGUF_F64) || !(kv->f >= lo && kv->f <= hi))
    return META_FAIL("'%s' must be a float from %g to %g", key, lo, hi);
  *out = kv->f;
  return ORTEP_OK;
}

static bool is_str(const ortep_gguf_kv *kv, const char *s) {
  return kv && kv->type == ORTEP_GGUF_STRING && kv->len == strlen(s) && !memcmp(kv->str, s, kv->len);
}

ortep_status ortep__gguf_config(const ortep_gguf *g, ortep_model_config *c) {
  memset(c, 0, sizeof *c);
  const ortep_gguf_kv *a = ortep_gguf_find_kv(g, "general.architecture");
  const char *arch = is_str(a, "llama") ? "llama" : is_str(a, "qwen2") ? "qwen2" : NULL;
  if (!arch)
    return a && a->type == ORTEP_GGUF_STRING
               ? META_FAIL("general.architecture '%.*s' is not supported; ortep runs \"llama\" and \"qwen2\"",
                           (int)(a->len < 64 ? a->len : 64), a->str)
               : META_FAIL("general.architecture (a string) is missing; ortep runs \"llama\" and \"qwen2\"");
  c->arch = arch[0] == 'l' ? ORTEP_ARCH_LLAMA : ORTEP_ARCH_QWEN2;
  ortep_status st;
  if ((st = get_int(g, arch, "embedding_length", true, 0, &c->hidden_size)) != ORTEP_OK ||
      (st = get_int(g, arch, "feed_forward_length", true, 0, &c->intermediate_size)) ||
      (st = get_int(g, arch, "block_count", true, 0, &c->num_hidden_layers)) ||
      (st = get_int(g, arch, "attention.head_count", true, 0, &c->num_attention_heads)) ||
      (st = get_int(g, arch, "context_length", true, 0, &c->max_position_embeddings)) ||
      (st = get_int(g, arch, "attention.head_count_kv", false, c->num_attention_heads, &c->num_key_value_heads)) ||
      (st = get_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0, 1e-30, 1.0, &c->rms_norm_eps)) ||
      (st = get_float(g, arch, "rope.freq_base", false, 10000.0, 1.0, 1e12, &c->rope_theta)))
    return st;
  if (c->hidden_size % c->num_attention_heads && !ortep_gguf_find_kv(g, "llama.attention.key_length") &&
      !ortep_gguf_find_kv(g, "qwen2.attention.key_length"))
    return META_FAIL("embedding_length %lld is not a multiple of attention.head_count %lld", (long long)c->hidden_size,
                     (long long)c->num_attention_heads);
  if ((st = get_int(g, arch, "attention.key_length", false, c->hidden_size / c->num_attention_heads, &c->head_dim)))
    return st;
  int64_t vlen, rot;
  if ((st = get_int(g, arch, "attention.value_length", false, c->head_dim, &vlen)) ||
      (st = get_int(g, arch, "rope.dimension_count", false, c->head_dim, &rot)))
    return st;
  if (vlen != c->head_dim || rot != c->head_dim)
    return META_FAIL(
        "attention.value_length %lld and rope.dimension_count %lld must equal the head size %lld "
        "(ortep runs full rotary on equal key and value heads)",
        (long long)vlen, (long long)rot, (long long)c->head_dim);
  char key[128];
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  const ortep_gguf_kv *rs = ortep_gguf_find_kv(g, key);
  if (rs && !is_str(rs, "none"))
    return META_FAIL("%s is set; ortep implements plain RoPE only (use a model without rope scaling)", key);
  const ortep_gguf_tensor *embed = ortep_gguf_find_tensor(g, "token_embd.weight");
  int64_t vocab_fallback = embed && embed->shape.rank == 2 ? embed->shape.dims[0] : 0;
  const ortep_gguf_kv *toks = ortep_gguf_find_kv(g, "tokenizer.ggml.tokens");
  if (!vocab_fallback && toks && toks->type == ORTEP_GGUF_ARRAY) vocab_fallback = (int64_t)toks->count;
  if ((st = get_int(g, arch, "vocab_size", !vocab_fallback, vocab_fallback, &c->vocab_size))) return st;
  c->tie_word_embeddings = !ortep_gguf_find_tensor(g, "output.weight");
  c->attention_bias = ortep_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
  c->rope_interleaved = c->arch == ORTEP_ARCH_LLAMA;
  if ((st = ortep__model_check_sizes(c, "gguf metadata")) != ORTEP_OK) return st;
  const ortep_gguf_kv *eos = ortep_gguf_find_kv(g, "tokenizer.ggml.eos_token_id");
  if (eos) {
    bool ok = (eos->type == ORTEP_GGUF_U32 || eos->type == ORTEP_GGUF_I32 || eos->type == ORTEP_GGUF_U64) &&
              eos->u < (uint64_t)c->vocab_size;
    if (!ok)
      return META_FAIL("tokenizer.ggml.eos_token_id must be a token id below the vocabulary size %lld",
                       (long long)c->vocab_size);
    c->eos_token_ids[0] = (int32_t)eos->u, c->n_eos_token_ids = 1;
  }
  return ORTEP_OK;
}

/* llama.cpp's tensor names and Hugging Face's, one table for both ways:
 * the top-level ones, and the per-layer suffixes (blk.N. / model.layers.N.). */
static const char *const top_names[][2] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                           {"output_norm.weight", "model.norm.weight"},
                                           {"output.weight", "lm_head.weight"}};
static const char *const layer_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},      {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},      {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},          {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},           {"ffn_down.weight", "mlp.down_proj.weight"}};

/* The most digits a layer index has (a million layers) */
#define LAYER_DIGITS 6

/* name in one convention (from: 0 GGUF, 1 Hugging Face) into the other: 1;
 * 0: not a tensor the graph reads; -1: a layer's name whose index is not a
 * decimal number as the converters write it (digits, no sign, no leading
 * zero, at most LAYER_DIGITS), which would otherwise alias another layer's
 * ("blk.00." and "blk.4294967296." are not "blk.0."). With the index read
 * so, and the tables one to one, distinct names translate to distinct names
 * (and the GGUF reader refuses a name that appears twice). */
static int translate(const char *name, int from, char *out, size_t len) {
  static const char *const prefix[2] = {"blk.", "model.layers."};
  for (size_t i = 0; i < sizeof top_names / sizeof *top_names; i++)
    if (!strcmp(name, top_names[i][from])) return (size_t)snprintf(out, len, "%s", top_names[i][!from]) < len;
  size_t p = strlen(prefix[from]), digits = 0;
  if (strncmp(name, prefix[from], p)) return 0;
  unsigned layer = 0;
  while (name[p + digits] >= '0' && name[p + digits] <= '9' && digits <= LAYER_DIGITS)
    layer = layer * 10 + (unsigned)(name[p + digits++] - '0');
  if (!digits || digits > LAYER_DIGITS || name[p + digits] != '.' || (digits > 1 && name[p] == '0')) return -1;
  for (size_t i = 0; i < sizeof layer_names / sizeof *layer_names; i++)
    if (!strcmp(name + p + digits + 1, layer_names[i][from]))
      return (size_t)snprintf(out, len, "%s%u.%s", prefix[!from], layer, layer_names[i][!from]) < len;
  return 0;
}

ortep_status ortep__gguf_entries(const ortep_gguf *g, ortep_safetensors_entry **out, size_t *n, char **names) {
  size_t count = ortep_gguf_tensor_count(g);
  ortep_safetensors_entry *e = ortep__calloc(count ? count : 1, sizeof *e);
  char *buf = ortep__malloc(count * 96 + 1);
  *out = e, *n = 0, *names = buf;
  if (!e || !buf) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for %zu tensors' names", count);
  for (size_t i = 0; i < count; i++) {
    const ortep_gguf_tensor *t = ortep_gguf_tensor_at(g, i);
    int named = translate(t->name, 0, buf, 96);
    if (named == 0) continue; /* not read by the graph (e.g. rope_freqs) */
    if (named < 0)
      return ortep__fail(ORTEP_E_FORMAT,
                         "gguf: tensor '%s': its layer index is not a decimal number of at most %d digits without "
                         "sign or leading zero (as in 'blk.0.'); the file was not written by a GGUF converter, or was "
                         "edited",
                         t->name, LAYER_DIGITS);
    if (t->dtype == ORTEP_DTYPE_COUNT)
      return ortep__fail(ORTEP_E_FORMAT,
                         "gguf: tensor '%s' (%s) is %s; ortep reads F32, F16, BF16, Q8_0 and Q4_0 tensors (convert "
                         "the model with one of those, e.g. llama.cpp's convert_hf_to_gguf.py --outtype q8_0)",
                         t->name, buf, ortep_gguf_type_name(t->ggml_type));
    e[(*n)++] = (ortep_safetensors_entry){buf, t->dtype, t->shape, t->data, t->size};
    buf += strlen(buf) + 1;
  }
  return ORTEP_OK;
}

/* --- writing a model as GGUF ----------------------------------------------------- */
/* llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, for q (heads) and k
 * (KV heads): within each head, row j * hd/2 + i goes to 2i + j. */
static void permute_rows(const uint8_t *src, uint8_t *dst, size_t rows, size_t row_bytes, size_t heads) {
  size_t hd = rows / heads;
  for (size_t h = 0; h < heads; h++)
    for (size_t i = 0; i < hd / 2; i++)
      for (size_t j = 0; j < 2; j++)
        memcpy(dst + (h * hd + 2 * i + j) * row_bytes, src + (h * hd + j * (hd / 2) + i) * row_bytes, row_bytes);
}

static uint32_t ggml_of(ortep_dtype d) {
  switch (d) {
    case ORTEP_DTYPE_F16: return ORTEP_GGML_F16;
    case ORTEP_DTYPE_BF16: return ORTEP_GGML_BF16;
    case ORTEP_DTYPE_Q8_0: return ORTEP_GGML_Q8_0;
    case ORTEP_DTYPE_Q4_0: return ORTEP_GGML_Q4_0;
    default: return ORTEP_GGML_F32;
  }
}

static bool gguf_name(const char *hf, char *out, size_t len) { return translate(hf, 1, out, len) > 0; }

static ortep_status add_meta(ortep_gguf_writer *w, const ortep_model_config *c) {
  const char *arch = c->arch == ORTEP_ARCH_LLAMA ? "llama" : "qwen2";
  char k[128];
  ortep_status st = ortep_gguf_writer_add_string(w, "general.architecture", arch);
#define U32(suffix, v)                                   \
  if (st == ORTEP_OK) {                                  \
    snprintf(k, sizeof k, "%s.%s", arch, suffix);        \
    st = ortep_gguf_writer_add_u32(w, k, (uint32_t)(v)); \
  }
  U32("embedding_length", c->hidden_size);
  U32("feed_forward_length", c->intermediate_size);
  U32("block_count", c->num_hidden_layers);
  U32("attention.head_count", c->num_attention_heads);
  U32("attention.head_count_kv", c->num_key_value_heads);
  U32("context_length", c->max_position_embeddings);
  U32("attention.key_length", c->head_dim);
  U32("attention.value_length", c->head_dim);
  U32("rope.dimension_count", c->head_dim);
  U32("vocab_size", c->vocab_size);
#undef U32
  if (st == ORTEP_OK) {
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    st = ortep_gguf_writer_add_f32(w, k, (float)c->rms_norm_eps);
  }
  if (st == ORTEP_OK) {
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    st = ortep_gguf_writer_add_f32(w, k, (float)c->rope_theta);
  }
  if (st == ORTEP_OK && c->n_eos_token_ids)
    st = ortep_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_token_ids[0]);
  return st;
}

ortep_status ortep_model_write_gguf(const ortep_model *m, const char *path, const char *dtype) {
  if (!m || !path) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_write_gguf: NULL argument");
  ortep_gguf_writer *w;
  ortep_status st = ortep_gguf_writer_create(&w);
  if (st == ORTEP_OK) st = ortep_model_add_to_gguf(m, w, dtype);
  if (st == ORTEP_OK) st = ortep_gguf_writer_write(w, path);
  ortep_gguf_writer_destroy(w);
  return st;
}

ortep_status ortep_model_add_to_gguf(const ortep_model *m, ortep_gguf_writer *w, const char *dtype) {
  if (!m || !w) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: NULL argument");
  ortep_dtype q = ORTEP_DTYPE_COUNT;
  if (dtype && strcmp(dtype, "stored") && (ortep_dtype_parse(dtype, &q) != ORTEP_OK || !ortep_dtype_is_quantized(q)))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: dtype '%s': use stored, q8_0 or q4_0",
                       dtype);
  const ortep_model_config *c = ortep_model_get_config(m);
  if (c->rope_interleaved)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: the model is a GGUF's already");
  ortep_status st = add_meta(w, c);
  float *row = NULL;
  uint8_t *buf = NULL, *perm = NULL;
  char gname[128];
  const char *const names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  size_t layers = (size_t)c->num_hidden_layers, per = 12, total = 3 + layers * per;
  static const char *const suffix[] = {"input_layernorm.weight",  "post_attention_layernorm.weight",
                                       "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight", "self_attn.q_proj.bias",
                                       "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
                                       "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                                       "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  for (size_t t = 0; st == ORTEP_OK && t < total; t++) {
    char hf[128];
    if (t < 3)
      snprintf(hf, sizeof hf, "%s", names[t]);
    else
      snprintf(hf, sizeof hf, "model.layers.%zu.%s", (t - 3) / per, suffix[(t - 3) % per]);
    const ortep_safetensors_entry *e = ortep_model_tensor(m, hf);
    if (!e || !gguf_name(hf, gname, sizeof gname)) continue;
    bool table = t == 0 || t == 2, is_q = strstr(hf, "q_proj."), is_k = strstr(hf, "k_proj.");
    ortep_dtype to = e->dtype;
    if (q != ORTEP_DTYPE_COUNT && e->shape.rank == 2) to = table ? ORTEP_DTYPE_Q8_0 : q;
    size_t rows = (size_t)e->shape.dims[0], k = e->shape.rank == 2 ? (size_t)e->shape.dims[1] : rows;
    if (e->shape.rank == 1) rows = 1;
    size_t out_bytes;
    if ((st = ortep_shape_bytes(&e->shape, to, &out_bytes)) != ORTEP_OK) break;
    ortep__free(buf), ortep__free(perm), ortep__free(row);
    buf = ortep__malloc(out_bytes), perm = ortep__malloc(out_bytes), row = ortep__malloc(k * sizeof *row);
    if (!buf || !perm || !row) {
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory to convert '%s'", hf);
      break;
    }
    if (to == e->dtype) {
      memcpy(buf, e->data, out_bytes);
    } else if ((st = ortep__quantize_check(hf, to, e->dtype, e->data, rows * k, k)) != ORTEP_OK) {
      break;
    } else {
      size_t es = ortep_dtype_size(e->dtype), rb = out_bytes / rows;
      for (size_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)e->data + r * k * es;
        for (size_t j = 0; j < k; j++)
          row[j] = e->dtype == ORTEP_DTYPE_F32    ? ((const float *)(const void *)src)[j]
                   : e->dtype == ORTEP_DTYPE_BF16 ? ortep_bf16_to_f32(((const uint16_t *)(const void *)src)[j])
                                                  : ortep_f16_to_f32(((const uint16_t *)(const void *)src)[j]);
        ortep_quantize(to, row, k, buf + r * rb);
      }
    }
    const uint8_t *data = buf;
    if (c->arch == ORTEP_ARCH_LLAMA && (is_q || is_k)) { /* the converter's permutation, rows and biases alike */
      size_t n_rows = e->shape.rank == 2 ? rows : (size_t)e->shape.dims[0];
      permute_rows(buf, perm, n_rows, out_bytes / n_rows,
                   (size_t)(is_q ? c->num_attention_heads : c->num_key_value_heads));
      data = perm;
    }
    st = ortep_gguf_writer_add_tensor(w, gname, ggml_of(to), &e->shape, data, out_bytes);
  }
  ortep__free(buf), ortep__free(perm), ortep__free(row);
  return st;
}
