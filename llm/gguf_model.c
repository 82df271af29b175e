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
 * gguf_write.c writes a model the same way back.
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

bool ortep__gguf_name(const char *hf, char *out, size_t len) { return translate(hf, 1, out, len) > 0; }
