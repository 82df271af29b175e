/*
 * model.c: config.json (cJSON) and model.safetensors for LLaMA / Qwen2, and
 * the check that the weights are exactly what the config implies.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "ortep/gguf.h"
#include "ortep/model.h"

struct ortep_model {
  ortep_model_config config;
  ortep_safetensors *weights; /* model.safetensors, or: */
  ortep_gguf *gguf;           /* a .gguf file, its tensors under Hugging Face names in entries */
  ortep_safetensors_entry *entries;
  size_t n_entries;
  char *names;
  char file[4096];   /* the weights' file */
  ortep_ep *host;    /* READ mode: owns `copy` */
  ortep_buffer copy; /* READ mode: the file's bytes in host memory */
};

/* The weights, whichever file they came from. */
static size_t n_weights(const ortep_model *m) { return m->gguf ? m->n_entries : ortep_safetensors_count(m->weights); }
static const ortep_safetensors_entry *weight_at(const ortep_model *m, size_t i) {
  return m->gguf ? (i < m->n_entries ? &m->entries[i] : NULL) : ortep_safetensors_at(m->weights, i);
}
static const ortep_safetensors_entry *find_weight(const ortep_model *m, const char *name) {
  if (!m->gguf) return ortep_safetensors_find(m->weights, name);
  for (size_t i = 0; name && i < m->n_entries; i++)
    if (!strcmp(m->entries[i].name, name)) return &m->entries[i];
  return NULL;
}
/* A mapped weight's pages dropped (read mode: nothing to drop). */
/* Bytes [offset, offset + bytes) of weight e are not read again: a mapped
 * file's pages wholly inside them are dropped (a private copy keeps them). */
static void release_range(const ortep_model *m, const ortep_safetensors_entry *e, size_t offset, size_t bytes) {
  if (m->copy.ptr || offset > e->size || bytes > e->size - offset || !bytes) return;
  if (!m->gguf) {
    ortep__safetensors_release(m->weights, e, offset, bytes);
    return;
  }
  ortep__release_pages((const char *)e->data + offset, bytes);
}
static void release_entry(const ortep_model *m, const ortep_safetensors_entry *e) { release_range(m, e, 0, e->size); }

#define CFG_FAIL(...) ortep__fail(ORTEP_E_FORMAT, "config.json: " __VA_ARGS__)

static ortep_status get_int(const cJSON *root, const char *key, bool required, int64_t fallback, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    if (required)
      return CFG_FAIL("missing required key '%s' (LlamaForCausalLM and Qwen2ForCausalLM configs have it)", key);
    *out = fallback;
    return ORTEP_OK;
  }
  /* range first: converting an out-of-range double is undefined */
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= 1e12) ||
      v->valuedouble != (double)(int64_t)v->valuedouble)
    return CFG_FAIL("'%s' must be an integer between 1 and 1e12", key);
  *out = (int64_t)v->valuedouble;
  return ORTEP_OK;
}

/* A finite number in [lo, hi] (1e999 parses as infinity: refused here). */
static ortep_status get_num(const cJSON *root, const char *key, bool required, double fallback, double lo, double hi,
                            double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    if (required) return CFG_FAIL("missing required key '%s'", key);
    *out = fallback;
    return ORTEP_OK;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return CFG_FAIL("'%s' must be a finite number between %g and %g%s", key, lo, hi,
                    cJSON_IsNumber(v) && !isfinite(v->valuedouble) ? " (it is infinite)" : "");
  *out = v->valuedouble;
  return ORTEP_OK;
}

/* a * b into *out, false when it overflows int64 or exceeds limit */
static ortep_status get_bool(const cJSON *root, const char *key, bool fallback, bool *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) return *out = fallback, ORTEP_OK;
  if (!cJSON_IsBool(v)) return CFG_FAIL("'%s' must be true or false", key);
  *out = cJSON_IsTrue(v);
  return ORTEP_OK;
}

/* "eos_token_id": an int or a list of ints, each a token of the vocabulary.
 * Absent or null leaves *c as it is (so generation_config.json can override
 * config.json). what names the file in messages. */
static ortep_status parse_eos(const cJSON *root, const char *what, ortep_model_config *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
  if (!v || cJSON_IsNull(v)) return ORTEP_OK;
  const cJSON *one = cJSON_IsArray(v) ? v->child : v;
  size_t n = 0;
  int32_t ids[ORTEP_MAX_EOS_TOKENS];
  for (; one; one = cJSON_IsArray(v) ? one->next : NULL) {
    if (n == ORTEP_MAX_EOS_TOKENS)
      return ortep__fail(ORTEP_E_FORMAT, "%s: 'eos_token_id' lists more than %d ids", what, ORTEP_MAX_EOS_TOKENS);
    if (!cJSON_IsNumber(one) || !(one->valuedouble >= 0 && one->valuedouble < (double)c->vocab_size) ||
        one->valuedouble != (double)(int32_t)one->valuedouble)
      return ortep__fail(
          ORTEP_E_FORMAT,
          "%s: 'eos_token_id' must be a token id (an integer in [0, %lld), vocab_size) or a list of them", what,
          (long long)c->vocab_size);
    ids[n++] = (int32_t)one->valuedouble;
  }
  memcpy(c->eos_token_ids, ids, n * sizeof *ids);
  c->n_eos_token_ids = n;
  return ORTEP_OK;
}

static ortep_status parse_config(const cJSON *root, ortep_model_config *c) {
  if (!cJSON_IsObject(root)) return CFG_FAIL("the document is not a JSON object");
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  const char *a0 = cJSON_IsArray(arch) && cJSON_IsString(cJSON_GetArrayItem(arch, 0))
                       ? cJSON_GetArrayItem(arch, 0)->valuestring
                       : NULL;
  const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
  if ((type && !strcmp(type, "llama")) || (!type && a0 && !strcmp(a0, "LlamaForCausalLM")))
    c->arch = ORTEP_ARCH_LLAMA;
  else if ((type && !strcmp(type, "qwen2")) || (!type && a0 && !strcmp(a0, "Qwen2ForCausalLM")))
    c->arch = ORTEP_ARCH_QWEN2;
  else if (!type && !a0)
    return CFG_FAIL("missing required key 'model_type' (or 'architectures'); ortep runs \"llama\" and \"qwen2\"");
  else
    return CFG_FAIL(
        "model_type '%s' is not supported; ortep runs \"llama\" (LlamaForCausalLM) and \"qwen2\" "
        "(Qwen2ForCausalLM)",
        type ? type : a0);
  ortep_status st;
  if ((st = get_int(root, "hidden_size", true, 0, &c->hidden_size)) != ORTEP_OK ||
      (st = get_int(root, "intermediate_size", true, 0, &c->intermediate_size)) ||
      (st = get_int(root, "num_hidden_layers", true, 0, &c->num_hidden_layers)) ||
      (st = get_int(root, "num_attention_heads", true, 0, &c->num_attention_heads)) ||
      (st = get_int(root, "vocab_size", true, 0, &c->vocab_size)) ||
      (st = get_int(root, "max_position_embeddings", true, 0, &c->max_position_embeddings)) ||
      (st = get_num(root, "rms_norm_eps", true, 0, 1e-30, 1.0, &c->rms_norm_eps)) ||
      (st = get_int(root, "num_key_value_heads", false, c->num_attention_heads, &c->num_key_value_heads)) ||
      (st = get_num(root, "rope_theta", false, 10000.0, 1.0, 1e12, &c->rope_theta)) ||
      (st = get_bool(root, "tie_word_embeddings", false, &c->tie_word_embeddings)) ||
      (st = get_bool(root, "attention_bias", c->arch == ORTEP_ARCH_QWEN2, &c->attention_bias)))
    return st;
  if (c->hidden_size % c->num_attention_heads && !cJSON_GetObjectItemCaseSensitive(root, "head_dim"))
    return CFG_FAIL("hidden_size %lld is not a multiple of num_attention_heads %lld", (long long)c->hidden_size,
                    (long long)c->num_attention_heads);
  if ((st = get_int(root, "head_dim", false, c->hidden_size / c->num_attention_heads, &c->head_dim)) != ORTEP_OK)
    return st;
  if ((st = ortep__model_check_sizes(c, "config.json")) != ORTEP_OK) return st;
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  if (rs && !cJSON_IsNull(rs))
    return CFG_FAIL("rope_scaling is set; ortep implements plain RoPE only (remove it or use a model without it)");
  return parse_eos(root, "config.json", c);
}

ortep_status ortep_model_config_parse(const char *json, size_t len, ortep_model_config *out) {
  if (!json || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_config_parse: NULL argument");
  memset(out, 0, sizeof *out);
  cJSON *root = NULL;
  ortep_status pst = ortep__json_parse(json, len, "config.json", &root);
  if (pst != ORTEP_OK) return pst;
  ortep_status st = parse_config(root, out);
  cJSON_Delete(root);
  return st;
}

/* A path to a regular file (a .gguf), not a model directory. */
static bool is_gguf_path(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* READ mode: the whole file into memory from the host EP (charged to its
 * governor), then parsed in place; the file is closed before this returns. */
static ortep_status read_weights(ortep_model *m, const char *path, bool gguf) {
  int fd;
  size_t len;
  ortep_status st = ortep__open_regular(path, &fd, &len);
  if (st != ORTEP_OK) return st;
  st = ortep_ep_allocate(m->host, len ? len : 1, 64, &m->copy);
  if (st != ORTEP_OK) {
    close(fd);
    return ortep__wrap(st,
                       "reading the weights of %s into memory (ortep.weights = read copies the whole file; "
                       "ortep.weights = map, the default, maps it and charges nothing)",
                       path);
  }
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, (char *)m->copy.ptr + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      close(fd);
      return ortep__fail(ORTEP_E_IO, "reading %s: %s after %zu of %zu bytes", path, r ? strerror(e) : "end of file",
                         got, len);
    }
    got += (size_t)r;
  }
  close(fd);
  st = gguf ? ortep_gguf_parse(m->copy.ptr, len, &m->gguf) : ortep_safetensors_parse(m->copy.ptr, len, &m->weights);
  return st == ORTEP_OK ? ORTEP_OK : ortep__wrap(st, "%s", path);
}

static ortep_status expect(const ortep_model *m, const char *name, int64_t d0, int64_t d1) {
  const ortep_safetensors_entry *e = find_weight(m, name);
  const char *file = m->gguf ? "gguf" : "model.safetensors";
  if (!e) return ortep__fail(ORTEP_E_FORMAT, "%s: tensor '%s' is missing (the config implies it)", file, name);
  /* 2-D weights may come quantized (a GGUF's q8_0 / q4_0); 1-D ones are float */
  if (!ortep_dtype_is_float(e->dtype) && !(d1 >= 0 && ortep_dtype_is_quantized(e->dtype)))
    return ortep__fail(ORTEP_E_FORMAT, "%s: tensor '%s' is %s; weights must be f32, f16 or bf16%s", file, name,
                       ortep_dtype_name(e->dtype), d1 >= 0 ? " (or q8_0 / q4_0)" : "");
  bool ok = d1 < 0 ? (e->shape.rank == 1 && e->shape.dims[0] == d0)
                   : (e->shape.rank == 2 && e->shape.dims[0] == d0 && e->shape.dims[1] == d1);
  if (!ok) {
    char got[160];
    ortep_shape_format(&e->shape, got, sizeof got);
    if (d1 < 0)
      return ortep__fail(ORTEP_E_FORMAT, "%s: tensor '%s' has shape %s; the config implies [%lld]", file, name, got,
                         (long long)d0);
    return ortep__fail(ORTEP_E_FORMAT, "%s: tensor '%s' has shape %s; the config implies [%lld, %lld]", file, name, got,
                       (long long)d0, (long long)d1);
  }
  return ORTEP_OK;
}

static ortep_status check_weights(const ortep_model *m) {
  const ortep_model_config *c = &m->config;
  int64_t H = c->hidden_size, I = c->intermediate_size, q = c->num_attention_heads * c->head_dim;
  int64_t kv = c->num_key_value_heads * c->head_dim;
  ortep_status st;
  char n[256];
  if ((st = expect(m, "model.embed_tokens.weight", c->vocab_size, H)) != ORTEP_OK) return st;
  if ((st = expect(m, "model.norm.weight", H, -1)) != ORTEP_OK) return st;
  if (!c->tie_word_embeddings && (st = expect(m, "lm_head.weight", c->vocab_size, H)) != ORTEP_OK) return st;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) {
    struct {
      const char *suffix;
      int64_t d0, d1;
      bool want;
    } t[] = {{"input_layernorm.weight", H, -1, true},
             {"post_attention_layernorm.weight", H, -1, true},
             {"self_attn.q_proj.weight", q, H, true},
             {"self_attn.k_proj.weight", kv, H, true},
             {"self_attn.v_proj.weight", kv, H, true},
             {"self_attn.o_proj.weight", H, q, true},
             {"self_attn.q_proj.bias", q, -1, c->attention_bias},
             {"self_attn.k_proj.bias", kv, -1, c->attention_bias},
             {"self_attn.v_proj.bias", kv, -1, c->attention_bias},
             {"mlp.gate_proj.weight", I, H, true},
             {"mlp.up_proj.weight", I, H, true},
             {"mlp.down_proj.weight", H, I, true}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
      if (!t[i].want) continue;
      snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, t[i].suffix);
      if ((st = expect(m, n, t[i].d0, t[i].d1)) != ORTEP_OK) return st;
    }
  }
  return ORTEP_OK;
}

/* generation_config.json, when the directory has one: its eos_token_id
 * overrides config.json's (as Hugging Face's generate reads them). */
static ortep_status generation_config(const char *dir, ortep_model_config *c) {
  char path[4096];
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  struct stat sb;
  if (stat(path, &sb) != 0) return ORTEP_OK; /* optional */
  char *json = NULL;
  size_t len = 0;
  ortep_status st = ortep__read_file(path, 16u << 20, "a model config", &json, &len);
  cJSON *root = NULL;
  if (st == ORTEP_OK) st = ortep__json_parse(json, len, "generation_config.json", &root);
  ortep__free(json);
  if (st == ORTEP_OK && !cJSON_IsObject(root))
    st = ortep__fail(ORTEP_E_FORMAT, "generation_config.json: the document is not a JSON object");
  if (st == ORTEP_OK) st = parse_eos(root, "generation_config.json", c);
  cJSON_Delete(root);
  return st == ORTEP_OK ? st : ortep__wrap(st, "%s", path);
}

/* What dir is, for a message: "does not exist", "is a FIFO, not a directory". */
static const char *not_a_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) != 0) return errno == ENOENT ? "does not exist" : strerror(errno);
  if (S_ISDIR(sb.st_mode)) return NULL;
  return S_ISREG(sb.st_mode)                          ? "is a file, not a directory"
         : S_ISFIFO(sb.st_mode)                       ? "is a FIFO, not a directory"
         : S_ISSOCK(sb.st_mode)                       ? "is a socket, not a directory"
         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "is a device, not a directory"
                                                      : "is not a directory";
}

ortep_status ortep_model_config_read(const char *dir, ortep_model_config *out) {
  if (!dir || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_config_read: NULL argument");
  if (is_gguf_path(dir)) { /* a .gguf file: its metadata */
    ortep_gguf *g;
    ortep_status st = ortep_gguf_open(dir, &g);
    if (st == ORTEP_OK && (st = ortep__gguf_config(g, out)) != ORTEP_OK) ortep__wrap(st, "%s", dir);
    ortep_gguf_close(g);
    return st;
  }
  const char *why = not_a_dir(dir);
  if (why)
    return ortep__fail(ORTEP_E_IO,
                       "model directory '%s' %s; give a directory that holds config.json and "
                       "model.safetensors, or a .gguf file",
                       dir, why);
  char path[4096];
  /* the longest of the names must fit, or none is opened */
  if ((size_t)snprintf(path, sizeof path, "%s/generation_config.json", dir) >= sizeof path)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "model directory path is %zu bytes; at most %zu are supported",
                       strlen(dir), sizeof path - sizeof "/generation_config.json");
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *json = NULL;
  size_t len = 0;
  ortep_model_config c;
  ortep_status st = ortep__read_file(path, 16u << 20, "a model config", &json, &len);
  if (st == ORTEP_OK && (st = ortep_model_config_parse(json, len, &c)) != ORTEP_OK) ortep__wrap(st, "%s", path);
  ortep__free(json);
  if (st == ORTEP_OK) st = generation_config(dir, &c);
  if (st == ORTEP_OK) *out = c;
  return st;
}

ortep_status ortep_model_open(const char *dir, ortep_model **out) { return ortep_model_open_with(dir, NULL, out); }

ortep_status ortep_model_open_with(const char *dir, const ortep_model_options *options, ortep_model **out) {
  if (!dir || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_open: NULL argument");
  *out = NULL;
  ortep_model_options o = options ? *options : (ortep_model_options){0};
  if (o.weights != ORTEP_WEIGHTS_MAP && o.weights != ORTEP_WEIGHTS_READ)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_open: weights mode %d; use ORTEP_WEIGHTS_MAP or _READ",
                       (int)o.weights);
  if (o.weights == ORTEP_WEIGHTS_READ && !o.host)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_model_open: ORTEP_WEIGHTS_READ needs options.host, the EP whose memory holds the copy");
  ortep_model *m = ortep__calloc(1, sizeof *m);
  if (!m) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the model");
  if (o.weights == ORTEP_WEIGHTS_READ) m->host = o.host;
  ortep_status st;
  if (is_gguf_path(dir)) {
    /* a .gguf file: the config from its metadata, its tensors renamed */
    snprintf(m->file, sizeof m->file, "%s", dir);
    st = o.weights == ORTEP_WEIGHTS_READ ? read_weights(m, dir, true) : ortep_gguf_open(dir, &m->gguf);
    if (st == ORTEP_OK && (st = ortep__gguf_config(m->gguf, &m->config)) != ORTEP_OK) ortep__wrap(st, "%s", dir);
    if (st == ORTEP_OK && (st = ortep__gguf_entries(m->gguf, &m->entries, &m->n_entries, &m->names)) != ORTEP_OK)
      ortep__wrap(st, "%s", dir);
  } else {
    st = ortep_model_config_read(dir, &m->config);
    snprintf(m->file, sizeof m->file, "%s/model.safetensors", dir);
    if (st == ORTEP_OK)
      st = o.weights == ORTEP_WEIGHTS_READ ? read_weights(m, m->file, false)
                                           : ortep_safetensors_open(m->file, &m->weights);
  }
  if (st == ORTEP_OK && (st = check_weights(m)) != ORTEP_OK) ortep__wrap(st, "%s", dir);
  if (st != ORTEP_OK) {
    ortep_model_close(m);
    return st;
  }
  *out = m;
  return ORTEP_OK;
}

const char *ortep__model_file(const ortep_model *m) { return m ? m->file : NULL; }

void ortep_model_close(ortep_model *m) {
  if (!m) return;
  ortep_safetensors_close(m->weights);
  ortep_gguf_close(m->gguf);
  ortep__free(m->entries);
  ortep__free(m->names);
  if (m->copy.ptr) ortep_ep_deallocate(m->host, &m->copy);
  ortep__free(m);
}

const ortep_model_config *ortep_model_get_config(const ortep_model *m) { return m ? &m->config : NULL; }
const ortep_safetensors_entry *ortep_model_tensor(const ortep_model *m, const char *name) {
  return m ? find_weight(m, name) : NULL;
}

bool ortep__model_weights_private(const ortep_model *m) { return m && m->copy.ptr; }

size_t ortep__model_release_prepared(ortep_model *m, const ortep_session *s) {
  size_t n = 0;
  for (size_t i = 0; m && i < n_weights(m); i++) {
    const ortep_safetensors_entry *e = weight_at(m, i);
    ortep_dtype dt;
    ortep_shape sh;
    if (!ortep_session_initializer_form(s, e->name, &dt, &sh)) continue;
    if (dt != e->dtype || !ortep_shape_equal(&sh, &e->shape)) n++; /* a form of its own, not a copy */
    release_entry(m, e);                                           /* mapped: drop its pages */
  }
  return n;
}
void ortep__model_release_weight(void *model, const char *name, size_t offset, size_t bytes) {
  ortep_model *m = model;
  const ortep_safetensors_entry *e = find_weight(m, name);
  if (e) release_range(m, e, offset, bytes);
}

size_t ortep_model_weight_bytes(const ortep_model *m) {
  size_t n = 0;
  for (size_t i = 0; m && i < n_weights(m); i++) n += weight_at(m, i)->size;
  return n;
}
