/*
 * gguf_vocab.c: tokenizers and GGUF's tokenizer.ggml.* metadata, both ways,
 * for the byte-level BPE family (tokenizer.ggml.model "gpt2", the
 * pre-tokenizer named by tokenizer.ggml.pre: qwen2, llama-bpe, gpt2).
 *
 * Reading: the metadata becomes the tokenizer.json document Hugging Face has
 * for such a model (the vocabulary from tokenizer.ggml.tokens, the merges,
 * the added tokens from token_type CONTROL (special) and USER_DEFINED, the
 * pre-tokenizer's split regex, NFC for qwen2, ignore_merges for llama-bpe,
 * a leading BOS when add_bos_token says so), read by the same code as a
 * tokenizer.json file, so both give the same ids. Writing: a tokenizer.json
 * into those keys, as llama.cpp's convert_hf_to_gguf.py writes them (ids
 * without a token become "[PAD<id>]").
 *
 * SentencePiece vocabularies (tokenizer.ggml.model "llama": scores, no
 * merges) are not read from metadata yet: a tokenizer.json beside the file
 * is needed for them.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"
#include "runtime/strmap.h" /* ortep__strdup */
#include "ortep/gguf.h"
#include "ortep/tokenizer.h"

static const char qwen2_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
static const char llama3_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

#define TOK_FAIL(...) ortep__fail(ORTEP_E_FORMAT, "gguf tokenizer: " __VA_ARGS__)

static bool kv_is(const ortep_gguf_kv *kv, const char *s) {
  return kv && kv->type == ORTEP_GGUF_STRING && kv->len == strlen(s) && !memcmp(kv->str, s, kv->len);
}

/* A NUL-terminated copy of a string element (cJSON wants one). */
static char *dup_n(const char *s, size_t n) {
  char *c = ortep__malloc(n + 1);
  if (c) memcpy(c, s, n), c[n] = '\0';
  return c;
}

static cJSON *pre_tokenizer(const char *re) {
  cJSON *pre = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(pre, "pretokenizers");
  cJSON_AddStringToObject(pre, "type", "Sequence");
  if (re) {
    cJSON *sp = cJSON_CreateObject();
    cJSON_AddStringToObject(sp, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", re);
    cJSON_AddStringToObject(sp, "behavior", "Isolated");
    cJSON_AddBoolToObject(sp, "invert", false);
    cJSON_AddItemToArray(list, sp);
  }
  cJSON *bl = cJSON_CreateObject();
  cJSON_AddStringToObject(bl, "type", "ByteLevel");
  cJSON_AddBoolToObject(bl, "add_prefix_space", false);
  cJSON_AddBoolToObject(bl, "use_regex", re == NULL); /* gpt2: ByteLevel's own split */
  cJSON_AddItemToArray(list, bl);
  return pre;
}

static ortep_status gguf_json(const ortep_gguf *g, char **out, size_t *len) {
  const ortep_gguf_kv *model = ortep_gguf_find_kv(g, "tokenizer.ggml.model");
  const ortep_gguf_kv *pre = ortep_gguf_find_kv(g, "tokenizer.ggml.pre");
  const ortep_gguf_kv *toks = ortep_gguf_find_kv(g, "tokenizer.ggml.tokens");
  const ortep_gguf_kv *types = ortep_gguf_find_kv(g, "tokenizer.ggml.token_type");
  const ortep_gguf_kv *merges = ortep_gguf_find_kv(g, "tokenizer.ggml.merges");
  if (!model || !toks) return TOK_FAIL("the file has no tokenizer.ggml.model / tokenizer.ggml.tokens");
  if (!kv_is(model, "gpt2"))
    return TOK_FAIL(
        "tokenizer.ggml.model '%.*s' is not read from GGUF metadata (ortep reads byte-level BPE, "
        "\"gpt2\"); put the model's tokenizer.json beside the file",
        model->type == ORTEP_GGUF_STRING ? (int)(model->len < 32 ? model->len : 32) : 1,
        model->type == ORTEP_GGUF_STRING ? model->str : "?");
  const char *re = NULL;
  bool nfc = false, ignore_merges = false;
  if (kv_is(pre, "qwen2"))
    re = qwen2_re, nfc = true;
  else if (kv_is(pre, "llama-bpe") || kv_is(pre, "llama3"))
    re = llama3_re, ignore_merges = true;
  else if (pre && !kv_is(pre, "gpt2") && !kv_is(pre, "default"))
    return TOK_FAIL(
        "tokenizer.ggml.pre '%.*s' is not one ortep knows (qwen2, llama-bpe, gpt2); put the model's "
        "tokenizer.json beside the file",
        pre->type == ORTEP_GGUF_STRING ? (int)(pre->len < 32 ? pre->len : 32) : 1,
        pre->type == ORTEP_GGUF_STRING ? pre->str : "?");
  if (toks->type != ORTEP_GGUF_ARRAY || toks->elem_type != ORTEP_GGUF_STRING || !toks->count || toks->count > INT32_MAX)
    return TOK_FAIL("tokenizer.ggml.tokens must be a non-empty array of strings");
  if (types && (types->type != ORTEP_GGUF_ARRAY || types->elem_type != ORTEP_GGUF_I32 || types->count != toks->count))
    return TOK_FAIL("tokenizer.ggml.token_type must be an i32 array as long as the tokens");
  if (!merges || merges->type != ORTEP_GGUF_ARRAY || merges->elem_type != ORTEP_GGUF_STRING)
    return TOK_FAIL("tokenizer.ggml.merges (an array of strings) is missing; byte-level BPE needs it");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  cJSON *m = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(m, "type", "BPE");
  cJSON_AddBoolToObject(m, "ignore_merges", ignore_merges);
  cJSON *vocab = cJSON_AddObjectToObject(m, "vocab"), *ml = cJSON_AddArrayToObject(m, "merges");
  ortep_status st = ORTEP_OK;
  const char *bos_name = NULL;
  char *bos_copy = NULL;
  const ortep_gguf_kv *bos = ortep_gguf_find_kv(g, "tokenizer.ggml.bos_token_id"),
                      *add_bos = ortep_gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
  for (uint64_t i = 0; st == ORTEP_OK && i < toks->count; i++) {
    const char *s;
    size_t n;
    if ((st = ortep_gguf_array_string(g, toks, i, &s, &n)) != ORTEP_OK) break;
    char *c = dup_n(s, n);
    if (!c || strlen(c) != n) {
      ortep__free(c);
      st = c ? TOK_FAIL("token %llu holds a NUL byte", (unsigned long long)i)
             : ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory");
      break;
    }
    int32_t type = 1;
    if (types) memcpy(&type, (const uint8_t *)types->data + i * 4, 4);
    if (type == 3 || type == 4) { /* CONTROL: special; USER_DEFINED: added, not special */
      cJSON *a = cJSON_CreateObject();
      cJSON_AddNumberToObject(a, "id", (double)i);
      cJSON_AddStringToObject(a, "content", c);
      cJSON_AddBoolToObject(a, "normalized", type == 4);
      cJSON_AddBoolToObject(a, "special", type == 3);
      cJSON_AddItemToArray(added, a);
    }
    if (bos && add_bos && add_bos->u && bos->u == i) bos_name = bos_copy = dup_n(c, n);
    cJSON_AddNumberToObject(vocab, c, (double)i);
    ortep__free(c);
  }
  for (uint64_t i = 0; st == ORTEP_OK && i < merges->count; i++) {
    const char *s;
    size_t n;
    if ((st = ortep_gguf_array_string(g, merges, i, &s, &n)) != ORTEP_OK) break;
    char *c = dup_n(s, n);
    if (!c) {
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory");
      break;
    }
    cJSON_AddItemToArray(ml, cJSON_CreateString(c));
    ortep__free(c);
  }
  if (nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
  cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(re));
  cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
  if (bos_name) { /* a leading BOS, as Hugging Face's TemplateProcessing adds it */
    cJSON *pp = cJSON_AddObjectToObject(root, "post_processor"), *single = cJSON_AddArrayToObject(pp, "single");
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *sp = cJSON_CreateObject(), *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "SpecialToken"), "id", bos_name);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(seq, "Sequence"), "id", "A");
    cJSON_AddItemToArray(single, sp);
    cJSON_AddItemToArray(single, seq);
  }
  ortep__free(bos_copy);
  char *text = st == ORTEP_OK ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (st == ORTEP_OK && !text) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for the document");
  *out = text, *len = text ? strlen(text) : 0;
  return st;
}

ortep_status ortep_tokenizer_open_gguf(const char *path, ortep_tokenizer **out) {
  if (!path || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open_gguf: NULL argument");
  *out = NULL;
  ortep_gguf *g;
  ortep_status st = ortep_gguf_open(path, &g);
  if (st != ORTEP_OK) return st;
  char *json = NULL;
  size_t len = 0;
  st = gguf_json(g, &json, &len);
  ortep_gguf_close(g);
  if (st == ORTEP_OK) st = ortep_tokenizer_open_json(json, len, out);
  cJSON_free(json);
  return st == ORTEP_OK ? st : ortep__wrap(st, "the tokenizer of %s", path);
}

/* --- writing ----------------------------------------------------------------------- */
static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The pre-tokenizer's name: the Split regex of a Sequence, or ByteLevel's own. */
static const char *pre_name(const cJSON *root) {
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const char *type = str_of(pre, "type");
  if (type && !strcmp(type, "ByteLevel")) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    return !u || cJSON_IsTrue(u) ? "gpt2" : NULL;
  }
  if (!type || strcmp(type, "Sequence")) return NULL;
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
  const char *re = NULL;
  for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next)
    if (str_of(c, "type") && !strcmp(str_of(c, "type"), "Split"))
      re = str_of(cJSON_GetObjectItemCaseSensitive(c, "pattern"), "Regex");
  if (!re) return NULL;
  return !strcmp(re, qwen2_re) ? "qwen2" : !strcmp(re, llama3_re) ? "llama-bpe" : NULL;
}

ortep_status ortep_tokenizer_add_to_gguf(ortep_gguf_writer *w, const char *json, size_t len) {
  if (!w || !json) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_add_to_gguf: NULL argument");
  cJSON *root = NULL;
  ortep_status st = ortep__json_parse(json, len, "tokenizer.json", &root);
  if (st != ORTEP_OK) return st;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const char *pre = pre_name(root);
  if (!str_of(model, "type") || strcmp(str_of(model, "type"), "BPE") || !cJSON_IsObject(vocab) ||
      !cJSON_IsArray(merges) || !pre) {
    cJSON_Delete(root);
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "tokenizer.json: only byte-level BPE with the qwen2, llama-bpe or gpt2 pre-tokenizer is "
                       "written as GGUF metadata");
  }
  /* ids: the vocabulary's and the added tokens' */
  size_t n = 0;
  for (const cJSON *c = vocab->child; c; c = c->next)
    if (cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble + 1 > (double)n) n = (size_t)c->valuedouble + 1;
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble + 1 > (double)n) n = (size_t)id->valuedouble + 1;
  }
  if (n == 0 || n > (1u << 24)) {
    cJSON_Delete(root);
    return ortep__fail(ORTEP_E_FORMAT, "tokenizer.json: %zu token ids", n);
  }
  const char **tok = ortep__calloc(n, sizeof *tok);
  char **pads = ortep__calloc(n, sizeof *pads);
  int32_t *type = ortep__calloc(n, sizeof *type);
  size_t n_merges = (size_t)cJSON_GetArraySize(merges);
  const char **mrg = ortep__calloc(n_merges + 1, sizeof *mrg);
  char **mbuf = ortep__calloc(n_merges + 1, sizeof *mbuf);
  if (!tok || !pads || !type || !mrg || !mbuf) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
  for (const cJSON *c = vocab->child; st == ORTEP_OK && c; c = c->next)
    if (cJSON_IsNumber(c) && c->valuedouble >= 0)
      tok[(size_t)c->valuedouble] = c->string, type[(size_t)c->valuedouble] = 1;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; st == ORTEP_OK && c; c = c->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const char *content = str_of(c, "content");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || !content) continue;
    tok[(size_t)id->valuedouble] = content;
    type[(size_t)id->valuedouble] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "special")) ? 3 : 4;
  }
  for (size_t i = 0; st == ORTEP_OK && i < n; i++)
    if (!tok[i]) {
      char b[32];
      snprintf(b, sizeof b, "[PAD%zu]", i);
      if (!(pads[i] = ortep__strdup(b))) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
      tok[i] = pads[i], type[i] = 5; /* UNUSED */
    }
  size_t k = 0;
  for (const cJSON *c = merges->child; st == ORTEP_OK && c; c = c->next, k++) {
    if (cJSON_IsString(c)) {
      mrg[k] = c->valuestring;
    } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 && cJSON_IsString(c->child) &&
               cJSON_IsString(c->child->next)) {
      size_t a = strlen(c->child->valuestring), b = strlen(c->child->next->valuestring);
      if (!(mbuf[k] = ortep__malloc(a + b + 2))) {
        st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
        break;
      }
      memcpy(mbuf[k], c->child->valuestring, a), mbuf[k][a] = ' ';
      memcpy(mbuf[k] + a + 1, c->child->next->valuestring, b + 1);
      mrg[k] = mbuf[k];
    } else {
      st = ortep__fail(ORTEP_E_FORMAT, "tokenizer.json: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", k);
    }
  }
  /* a leading BOS the post_processor adds */
  const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
  const char *bos = cJSON_IsArray(single) && single->child
                        ? str_of(cJSON_GetObjectItemCaseSensitive(single->child, "SpecialToken"), "id")
                        : NULL;
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "gpt2");
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_string(w, "tokenizer.ggml.pre", pre);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", tok, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_array(w, "tokenizer.ggml.token_type", ORTEP_GGUF_I32, type, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_strings(w, "tokenizer.ggml.merges", mrg, n_merges);
  for (size_t i = 0; st == ORTEP_OK && bos && i < n; i++)
    if (!strcmp(tok[i], bos)) {
      st = ortep_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)i);
      if (st == ORTEP_OK) st = ortep_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
      break;
    }
  for (size_t i = 0; pads && i < n; i++) ortep__free(pads[i]);
  for (size_t i = 0; mbuf && i < n_merges; i++) ortep__free(mbuf[i]);
  ortep__free(tok), ortep__free(pads), ortep__free(type), ortep__free(mrg), ortep__free(mbuf);
  cJSON_Delete(root);
  return st;
}
