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
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "ortep/model.h"

typedef struct preset {
  const char *name;
  ortep_model_config c;
} preset;

static const preset presets[] = {
    {"tiny", {ORTEP_ARCH_QWEN2, 64, 176, 2, 4, 2, 512, 512, 16, 1e-6, 10000.0, true, true, {0}, 0, false}},
    {"tiny-llama", {ORTEP_ARCH_LLAMA, 64, 160, 2, 4, 1, 384, 256, 16, 1e-5, 10000.0, false, false, {0}, 0, false}},
    /* head_dim 24, not hidden / heads = 16 (as Gemma- or Qwen3-style configs declare) */
    {"tiny-wide-heads", {ORTEP_ARCH_LLAMA, 64, 160, 2, 4, 2, 384, 256, 24, 1e-5, 10000.0, false, false, {0}, 0, false}},
    /* big enough that its projections split across the CPU EP's workers */
    {"small", {ORTEP_ARCH_QWEN2, 256, 704, 4, 8, 2, 2048, 1024, 32, 1e-6, 10000.0, true, true, {0}, 0, false}},
    {"qwen2.5-0.5b",
     {ORTEP_ARCH_QWEN2, 896, 4864, 24, 14, 2, 151936, 32768, 64, 1e-6, 1000000.0, true, true, {0}, 0, false}},
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
  if (c->head_dim * c->num_attention_heads != c->hidden_size)
    cJSON_AddNumberToObject(r, "head_dim", (double)c->head_dim);
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

/* The preset's tokenizer.json: a byte-level BPE (Qwen-style split regex,
 * ByteLevel) with exactly vocab_size ids: the 256 byte characters, merges
 * that build strings over printable ASCII in order (every pair, then every
 * pair with one more character, ...), and the last id the special
 * <|endoftext|>. Meaningless as language, valid as BPE: text in and out works
 * on the synthetic models like on real ones. */
static void utf8_put(char **at, unsigned cp) {
  char *o = *at;
  if (cp < 0x80)
    *o++ = (char)cp;
  else
    *o++ = (char)(0xC0 | (cp >> 6)), *o++ = (char)(0x80 | (cp & 0x3F));
  *at = o;
}
/* The merged strings, in id order from 256: strings over printable ASCII,
 * shortest first, each a merge of (its prefix, its last character). */
static ortep_status make_merges(const char (*chars)[3], char (*tok)[16], size_t n_merges, size_t *count) {
  size_t n = 0, level_start = 0, level_end;
  for (unsigned a = 32; a < 127 && n < n_merges; a++)
    for (unsigned b = 32; b < 127 && n < n_merges; b++) {
      size_t la = strlen(chars[a]);
      memcpy(tok[n], chars[a], la);
      memcpy(tok[n] + la, chars[b], strlen(chars[b]) + 1);
      n++;
    }
  level_end = n;
  while (n < n_merges) {
    size_t from = level_start, to = level_end;
    if (from == to) return ortep__fail(ORTEP_E_INTERNAL, "synthetic tokenizer: cannot make %zu merges", n_merges);
    level_start = level_end;
    for (size_t p = from; p < to && n < n_merges; p++)
      for (unsigned b = 32; b < 127 && n < n_merges; b++) {
        size_t lp = strlen(tok[p]), lc = strlen(chars[b]);
        if (lp + lc >= sizeof tok[0]) break; /* never reached: 151k merges need 3 characters */
        memcpy(tok[n], tok[p], lp);
        memcpy(tok[n] + lp, chars[b], lc + 1);
        n++;
      }
    level_end = n;
  }
  *count = n;
  return ORTEP_OK;
}

/* Everything of tokenizer.json but the model: the special <|endoftext|>
 * (the last id), NFC, the Qwen-style split then ByteLevel, its decoder. */
static void add_pipeline(cJSON *root, int64_t vocab) {
  static const char split[] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+";
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *eot = cJSON_CreateObject();
  cJSON_AddNumberToObject(eot, "id", (double)(vocab - 1));
  cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
  cJSON_AddBoolToObject(eot, "normalized", false);
  cJSON_AddBoolToObject(eot, "special", true);
  cJSON_AddItemToArray(added, eot);
  cJSON_AddItemToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", cJSON_CreateString("NFC"));
  cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer"), *list;
  cJSON_AddStringToObject(pre, "type", "Sequence");
  list = cJSON_AddArrayToObject(pre, "pretokenizers");
  cJSON *sp = cJSON_CreateObject(), *bl = cJSON_CreateObject();
  cJSON_AddStringToObject(sp, "type", "Split");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", split);
  cJSON_AddStringToObject(sp, "behavior", "Isolated");
  cJSON_AddBoolToObject(sp, "invert", false);
  cJSON_AddStringToObject(bl, "type", "ByteLevel");
  cJSON_AddBoolToObject(bl, "add_prefix_space", false);
  cJSON_AddBoolToObject(bl, "use_regex", false);
  cJSON_AddItemToArray(list, sp);
  cJSON_AddItemToArray(list, bl);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
}

/* The BPE model: the 256 byte characters, then the n merged strings. */
static void add_model(cJSON *root, const char (*chars)[3], const char (*tok)[16], size_t n) {
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON *v = cJSON_AddObjectToObject(model, "vocab"), *m = cJSON_AddArrayToObject(model, "merges");
  for (unsigned b = 0; b < 256; b++) cJSON_AddNumberToObject(v, chars[b], b);
  for (size_t i = 0; i < n; i++) {
    cJSON_AddNumberToObject(v, tok[i], (double)(256 + i));
    /* the prefix is the string without its last character (1 or 2 bytes) */
    size_t len = strlen(tok[i]), last = ((unsigned char)tok[i][len - 1] & 0xC0) == 0x80 ? 2 : 1;
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(len - last), tok[i]);
    cJSON *pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, cJSON_CreateString(prefix));
    cJSON_AddItemToArray(pair, cJSON_CreateString(tok[i] + len - last));
    cJSON_AddItemToArray(m, pair);
  }
}

static ortep_status write_tokenizer(const char *path, int64_t vocab) {
  if (vocab < 258) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "a synthetic tokenizer needs a vocabulary of >= 258");
  /* the byte characters of GPT-2's byte-level map */
  char chars[256][3];
  unsigned extra = 0;
  for (unsigned b = 0; b < 256; b++) {
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    char *at = chars[b];
    utf8_put(&at, keep ? b : 256 + extra++);
    *at = '\0';
  }
  size_t n_merges = (size_t)vocab - 257, cap = 0, n = 0;
  char(*tok)[16] = NULL; /* merged strings in id order, from id 256 */
  cJSON *root = cJSON_CreateObject();
  ortep_status st = ORTEP_OK;
  if (!root || !ORTEP__GROW(tok, cap, n_merges + 1))
    st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic tokenizer: no memory");
  if (st == ORTEP_OK) st = make_merges((const char(*)[3])chars, tok, n_merges, &n);
  if (st == ORTEP_OK) {
    add_pipeline(root, vocab);
    add_model(root, (const char(*)[3])chars, (const char(*)[16])tok, n);
  }
  char *text = st == ORTEP_OK ? cJSON_PrintUnformatted(root) : NULL;
  if (st == ORTEP_OK && !text) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "synthetic tokenizer: no memory");
  if (st == ORTEP_OK) {
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    int saved = errno;
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok) st = ortep__fail(ORTEP_E_IO, "cannot write %s: %s", path, strerror(saved));
  }
  cJSON_free(text);
  cJSON_Delete(root);
  ortep__free(tok);
  return st;
}

static const preset *find_preset(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(presets[i].name, name)) return &presets[i];
  return NULL;
}

ortep_status ortep_model_write_synthetic(const char *dir, const char *name, ortep_dtype dt, uint64_t seed) {
  if (!dir || !name) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_write_synthetic: NULL argument");
  const preset *p = find_preset(name);
  if (!p)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "unknown preset '%s'; the presets are tiny, tiny-llama, tiny-wide-heads, small, qwen2.5-0.5b",
                       name);
  if (!ortep_dtype_is_float(dt))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "synthetic weights are f32, f16 or bf16, not %s",
                       ortep_dtype_name(dt));
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", dir, strerror(errno));
  const ortep_model_config *c = &p->c;
  int64_t H = c->hidden_size, I = c->intermediate_size, q = c->num_attention_heads * c->head_dim;
  int64_t kv = c->num_key_value_heads * c->head_dim;
  gen g = {.seed = seed};
  ortep_status st = add(&g, "model.embed_tokens.weight", dt, c->vocab_size, H, INIT_EMBED);
  char n[256];
  for (int64_t l = 0; st == ORTEP_OK && l < c->num_hidden_layers; l++) {
#define T(suffix, d0, d1, kind)                                          \
  if (st == ORTEP_OK) {                                                  \
    snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, suffix); \
    st = add(&g, n, dt, d0, d1, kind);                                   \
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
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    st = write_tokenizer(path, c->vocab_size);
  }
  if (st == ORTEP_OK) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st = ortep_safetensors_write_stream(path, g.entries, g.n, produce, &g);
  }
  for (size_t i = 0; i < g.n; i++) ortep__free(g.names[i]);
  ortep__free(g.entries), ortep__free(g.kinds), ortep__free(g.names);
  return st;
}

static ortep_status mkdirs(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) && errno != EEXIST)
        return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", tmp, strerror(errno));
      *p = '/';
    }
  if (mkdir(tmp, 0755) && errno != EEXIST) return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", tmp, strerror(errno));
  return ORTEP_OK;
}

ortep_status ortep_model_synthetic_cached(const char *preset_name, ortep_dtype dtype, char *dir, size_t len,
                                          bool *written) {
  if (written) *written = false;
  if (!preset_name || !dir || !len)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_synthetic_cached: NULL argument");
  const preset *p = find_preset(preset_name);
  if (!p)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "unknown preset '%s'; the presets are tiny, tiny-llama, tiny-wide-heads, small, qwen2.5-0.5b",
                       preset_name);
  if (!ortep_dtype_is_float(dtype))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "synthetic weights are f32, f16 or bf16, not %s",
                       ortep_dtype_name(dtype));
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int w = xdg && *xdg ? snprintf(dir, len, "%s/ortep/models/%s-%s", xdg, preset_name, ortep_dtype_name(dtype))
                      : snprintf(dir, len, "%s/.cache/ortep/models/%s-%s", home && *home ? home : "/tmp", preset_name,
                                 ortep_dtype_name(dtype));
  if (w < 0 || (size_t)w >= len || (size_t)w > 4000)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_synthetic_cached: the cache path does not fit %zu bytes",
                       len);
  char path[4200];
  ortep_status st = mkdirs(dir);
  if (st != ORTEP_OK) return st;
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (access(path, R_OK) != 0) {
    if (written) *written = true;
    return ortep_model_write_synthetic(dir, preset_name, dtype, 0x5eed);
  }
  snprintf(path, sizeof path, "%s/tokenizer.json", dir); /* a cache from before presets had tokenizers */
  if (access(path, R_OK) != 0) return write_tokenizer(path, p->c.vocab_size);
  return ORTEP_OK;
}
