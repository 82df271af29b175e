/*
 * synthetic.c: deterministic synthetic LLaMA / Qwen2 models. The weights are
 * uniform pseudo-random numbers from a fixed seed (xorshift, one stream per
 * tensor so each tensor is the same whatever the dtype or preset order),
 * scaled so activations stay finite: projections by 2.5/sqrt(fan_in), norms
 * near 1, biases small, embeddings in [-0.25, 0.25]: small enough that the
 * layers, not the input embedding, decide the next token, so greedy decoding
 * wanders instead of repeating its input.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "ortep/model.h"

typedef struct preset {
  const char *name;
  ortep_model_config c;
} preset;

static const preset presets[] = {
    {"tiny", {ORTEP_ARCH_QWEN2, 64, 176, 2, 4, 2, 512, 512, 16, 1e-6, 10000.0, true, true, {0}, 0}},
    {"tiny-llama", {ORTEP_ARCH_LLAMA, 64, 160, 2, 4, 1, 384, 256, 16, 1e-5, 10000.0, false, false, {0}, 0}},
    /* head_dim 24, not hidden / heads = 16 (as Gemma- or Qwen3-style configs declare) */
    {"tiny-wide-heads", {ORTEP_ARCH_LLAMA, 64, 160, 2, 4, 2, 384, 256, 24, 1e-5, 10000.0, false, false, {0}, 0}},
    /* big enough that its projections split across the CPU EP's workers */
    {"small", {ORTEP_ARCH_QWEN2, 256, 704, 4, 8, 2, 2048, 1024, 32, 1e-6, 10000.0, true, true, {0}, 0}},
    {"qwen2.5-0.5b", {ORTEP_ARCH_QWEN2, 896, 4864, 24, 14, 2, 151936, 32768, 64, 1e-6, 1000000.0, true, true, {0}, 0}},
};

typedef enum init_kind { INIT_EMBED, INIT_PROJ, INIT_NORM, INIT_BIAS } init_kind;

/* entries stays an array of its own: ortep_safetensors_write takes it as is.
 * Each array has its own capacity, so a failed growth tears nothing. */
typedef struct gen {
  ortep_safetensors_entry *entries;
  init_kind *kinds;
  char **names;
  size_t n, entries_cap, kinds_cap, names_cap;
  uint64_t seed;
} gen;

static ortep_status add(gen *g, const char *name, ortep_dtype dt, int64_t d0, int64_t d1, init_kind k) {
  if (!ORTEP__GROW(g->entries, g->entries_cap, g->n + 1) || !ORTEP__GROW(g->kinds, g->kinds_cap, g->n + 1) ||
      !ORTEP__GROW(g->names, g->names_cap, g->n + 1))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic model: no memory");
  char *copy = ortep__strdup(name);
  if (!copy) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic model: no memory");
  ortep_shape s = {d1 < 0 ? 1u : 2u, {d0, d1 < 0 ? 0 : d1}};
  size_t bytes;
  ortep_shape_bytes(&s, dt, &bytes);
  g->names[g->n] = copy;
  g->kinds[g->n] = k;
  g->entries[g->n++] = (ortep_safetensors_entry){copy, dt, s, NULL, bytes};
  return ORTEP_OK;
}

static uint64_t hash(const char *s, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
  return h ? h : 1;
}

static ortep_status produce(void *user, size_t i, void *scratch) {
  gen *g = user;
  const ortep_safetensors_entry *e = &g->entries[i];
  size_t n = e->size / ortep_dtype_size(e->dtype);
  uint64_t x = hash(e->name, g->seed);
  float fan_in = e->shape.rank == 2 ? (float)e->shape.dims[1] : 1.0f;
  float scale = g->kinds[i] == INIT_PROJ ? 2.5f / sqrtf(fan_in) : g->kinds[i] == INIT_EMBED ? 0.25f : 0.1f;
  float base = g->kinds[i] == INIT_NORM ? 1.0f : 0.0f;
  for (size_t k = 0; k < n; k++) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    float u = (float)((x * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f * 2.0f - 1.0f; /* [-1, 1) */
    float v = base + scale * u;
    switch (e->dtype) {
      case ORTEP_DTYPE_F16: ((uint16_t *)scratch)[k] = ortep_f32_to_f16(v); break;
      case ORTEP_DTYPE_BF16: ((uint16_t *)scratch)[k] = ortep_f32_to_bf16(v); break;
      default: ((float *)scratch)[k] = v; break;
    }
  }
  return ORTEP_OK;
}

static ortep_status write_config(const char *path, const ortep_model_config *c) {
  cJSON *r = cJSON_CreateObject();
  if (!r) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic model: no memory");
  bool qwen = c->arch == ORTEP_ARCH_QWEN2;
  cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
  cJSON_AddStringToObject(r, "model_type", qwen ? "qwen2" : "llama");
  cJSON_AddNumberToObject(r, "hidden_size", (double)c->hidden_size);
  cJSON_AddNumberToObject(r, "intermediate_size", (double)c->intermediate_size);
  cJSON_AddNumberToObject(r, "num_hidden_layers", (double)c->num_hidden_layers);
  cJSON_AddNumberToObject(r, "num_attention_heads", (double)c->num_attention_heads);
  cJSON_AddNumberToObject(r, "num_key_value_heads", (double)c->num_key_value_heads);
  cJSON_AddNumberToObject(r, "vocab_size", (double)c->vocab_size);
  cJSON_AddNumberToObject(r, "max_position_embeddings", (double)c->max_position_embeddings);
  if (c->head_dim * c->num_attention_heads != c->hidden_size) cJSON_AddNumberToObject(r, "head_dim", (double)c->head_dim);
  cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_norm_eps);
  cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
  cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
  if (!qwen) cJSON_AddBoolToObject(r, "attention_bias", c->attention_bias);
  cJSON_AddStringToObject(r, "torch_dtype", "float32");
  char *text = cJSON_Print(r);
  cJSON_Delete(r);
  if (!text) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic model: no memory");
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  int saved = errno;
  if (f) ok = (fclose(f) == 0) && ok;
  cJSON_free(text);
  return ok ? ORTEP_OK : ortep__fail(ORTEP_E_IO, "cannot write %s: %s", path, strerror(saved));
}

ortep_status ortep_model_write_synthetic(const char *dir, const char *name, ortep_dtype dt, uint64_t seed) {
  if (!dir || !name) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_write_synthetic: NULL argument");
  const preset *p = NULL;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(presets[i].name, name)) p = &presets[i];
  if (!p)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "unknown preset '%s'; the presets are tiny, tiny-llama, tiny-wide-heads, small, qwen2.5-0.5b",
                       name);
  if (!ortep_dtype_is_float(dt))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "synthetic weights are f32, f16 or bf16, not %s", ortep_dtype_name(dt));
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", dir, strerror(errno));
  const ortep_model_config *c = &p->c;
  int64_t H = c->hidden_size, I = c->intermediate_size, q = c->num_attention_heads * c->head_dim;
  int64_t kv = c->num_key_value_heads * c->head_dim;
  gen g = {.seed = seed};
  ortep_status st = add(&g, "model.embed_tokens.weight", dt, c->vocab_size, H, INIT_EMBED);
  char n[256];
  for (int64_t l = 0; st == ORTEP_OK && l < c->num_hidden_layers; l++) {
#define T(suffix, d0, d1, kind)                                                   \
  if (st == ORTEP_OK) {                                                           \
    snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, suffix);          \
    st = add(&g, n, dt, d0, d1, kind);                                            \
  }
    T("input_layernorm.weight", H, -1, INIT_NORM)
    T("self_attn.q_proj.weight", q, H, INIT_PROJ)
    T("self_attn.k_proj.weight", kv, H, INIT_PROJ)
    T("self_attn.v_proj.weight", kv, H, INIT_PROJ)
    if (c->attention_bias) {
      T("self_attn.q_proj.bias", q, -1, INIT_BIAS)
      T("self_attn.k_proj.bias", kv, -1, INIT_BIAS)
      T("self_attn.v_proj.bias", kv, -1, INIT_BIAS)
    }
    T("self_attn.o_proj.weight", H, q, INIT_PROJ)
    T("post_attention_layernorm.weight", H, -1, INIT_NORM)
    T("mlp.gate_proj.weight", I, H, INIT_PROJ)
    T("mlp.up_proj.weight", I, H, INIT_PROJ)
    T("mlp.down_proj.weight", H, I, INIT_PROJ)
#undef T
  }
  if (st == ORTEP_OK) st = add(&g, "model.norm.weight", dt, H, -1, INIT_NORM);
  if (st == ORTEP_OK && !c->tie_word_embeddings) st = add(&g, "lm_head.weight", dt, c->vocab_size, H, INIT_EMBED);
  char path[4096];
  if (st == ORTEP_OK) {
    snprintf(path, sizeof path, "%s/config.json", dir);
    st = write_config(path, c);
  }
  if (st == ORTEP_OK) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st = ortep_safetensors_write_stream(path, g.entries, g.n, produce, &g);
  }
  for (size_t i = 0; i < g.n; i++) ortep__free(g.names[i]);
  ortep__free(g.entries), ortep__free(g.kinds), ortep__free(g.names);
  return st;
}
