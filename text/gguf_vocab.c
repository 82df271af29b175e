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
 * SentencePiece vocabularies (tokenizer.ggml.model "llama": pieces with
 * scores, no merges) become the document Hugging Face's converter makes from
 * the same pieces (LlamaConverter: a BPE with byte fallback, the Prepend /
 * Replace normalizer, the LLaMA decoder): the merges are every split of a
 * piece into two pieces of the vocabulary, ranked by the piece's score
 * (higher first), then the piece's id, then the two halves' ids, the order
 * its extractor gives (checked on the real LLaMA-2 tokenizer.json: 58,980
 * merges). Written back, a piece's score is minus the rank of the first
 * merge that makes it, so reading gives the same merges again.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "runtime/strmap.h" /* ortep__strdup */
#include "ortep/gguf.h"
#include "ortep/tokenizer.h"
#include "text/internal.h"

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

/* Key `key` of g as a bool (def when absent); of any other type it is
 * refused, not taken as false (a string "false" would read as true). */
static ortep_status kv_bool(const ortep_gguf *g, const char *key, bool def, bool *out) {
  const ortep_gguf_kv *kv = ortep_gguf_find_kv(g, key);
  *out = def;
  if (!kv) return ORTEP_OK;
  if (kv->type != ORTEP_GGUF_BOOL)
    return TOK_FAIL("%s must be a bool (GGUF type 7), not of GGUF type %d", key, (int)kv->type);
  *out = kv->u != 0;
  return ORTEP_OK;
}

/* Key `key` of g as a token id below n (-1 when absent); refused when it is
 * not an integer or not a token. */
static ortep_status kv_token(const ortep_gguf *g, const char *key, uint64_t n, int64_t *out) {
  const ortep_gguf_kv *kv = ortep_gguf_find_kv(g, key);
  *out = -1;
  if (!kv) return ORTEP_OK;
  bool sgn = kv->type == ORTEP_GGUF_I8 || kv->type == ORTEP_GGUF_I16 || kv->type == ORTEP_GGUF_I32 ||
             kv->type == ORTEP_GGUF_I64;
  bool uns = kv->type == ORTEP_GGUF_U8 || kv->type == ORTEP_GGUF_U16 || kv->type == ORTEP_GGUF_U32 ||
             kv->type == ORTEP_GGUF_U64;
  if ((!sgn && !uns) || (sgn ? kv->i < 0 || (uint64_t)kv->i >= n : kv->u >= n))
    return TOK_FAIL("%s must be an integer token id below the vocabulary's %llu tokens", key, (unsigned long long)n);
  *out = sgn ? kv->i : (int64_t)kv->u;
  return ORTEP_OK;
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

/* --- SentencePiece pieces ----------------------------------------------------------- */
typedef struct spm_merge {
  float score;
  uint32_t piece, l, r;
} spm_merge;

static int merge_order(const void *a, const void *b) {
  const spm_merge *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  if (x->piece != y->piece) return x->piece < y->piece ? -1 : 1;
  if (x->l != y->l) return x->l < y->l ? -1 : 1;
  return (x->r > y->r) - (x->r < y->r);
}

/* What deriving the merges may cost: the splits of a piece of L bytes
 * compare ~L^2 bytes, so a vocabulary of long pieces (a few MB of them)
 * would take minutes and gigabytes for merges no SentencePiece model has.
 * The pieces' L^2 summed may be at most SPM_WORK_PER_BYTE times their bytes
 * (real vocabularies: pieces of at most a few dozen bytes) plus
 * SPM_WORK_FLOOR; the merges are then at most one per byte of the pieces. */
#define SPM_WORK_PER_BYTE 64u
#define SPM_WORK_FLOOR    (64ull << 20)
#define SPM_MAX_PIECE     1024 /* no piece this long is made of two */

static ortep_status spm_budget(char *const *piece, size_t n) {
  uint64_t bytes = 0, work = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t len = strlen(piece[i]);
    bytes += len;
    if (len < SPM_MAX_PIECE) work += len * len;
  }
  if (work <= SPM_WORK_PER_BYTE * bytes + SPM_WORK_FLOOR) return ORTEP_OK;
  return TOK_FAIL(
      "deriving the merges of these %zu SentencePiece pieces (%llu bytes) would compare %llu bytes of "
      "splits, more than the limit of %u per byte of the pieces plus %llu MiB: pieces this long are not a "
      "SentencePiece vocabulary",
      n, (unsigned long long)bytes, (unsigned long long)work, SPM_WORK_PER_BYTE,
      (unsigned long long)(SPM_WORK_FLOOR >> 20));
}

/* The merges of n pieces (NUL-terminated strings, their scores): every
 * split at a character boundary into two pieces of the vocabulary, ranked
 * as the file comment says, into *out (*n_out of them). */
static ortep_status spm_merges(char *const *piece, const float *score, size_t n, ortep__merge **out, size_t *n_out) {
  *out = NULL, *n_out = 0;
  ortep_status st = spm_budget(piece, n);
  if (st != ORTEP_OK) return st;
  ortep__strmap ids = {0};
  spm_merge *m = NULL;
  size_t nm = 0, cap = 0;
  for (size_t i = 0; st == ORTEP_OK && i < n; i++)
    if (!ortep__strmap_get(&ids, piece[i], &(uint32_t){0}) && !ortep__strmap_put(&ids, piece[i], (uint32_t)i))
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory to index %zu pieces", n);
  char buf[SPM_MAX_PIECE];
  for (size_t i = 0; st == ORTEP_OK && i < n; i++) {
    size_t len = strlen(piece[i]);
    if (len >= sizeof buf) continue;
    for (size_t at = 1; st == ORTEP_OK && at < len; at++) {
      if (((unsigned char)piece[i][at] & 0xc0) == 0x80) continue; /* inside a character */
      uint32_t l, r;
      memcpy(buf, piece[i], at), buf[at] = '\0';
      if (!ortep__strmap_get(&ids, buf, &l) || !ortep__strmap_get(&ids, piece[i] + at, &r)) continue;
      if (!ORTEP__GROW(m, cap, nm + 1))
        st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for %zu merges (%zu bytes)", nm + 1,
                         (nm + 1) * sizeof *m);
      if (st == ORTEP_OK) m[nm++] = (spm_merge){score[i], (uint32_t)i, l, r};
    }
  }
  ortep__strmap_free(&ids);
  if (st == ORTEP_OK && nm) {
    qsort(m, nm, sizeof *m, merge_order);
    if (!(*out = ortep__malloc(nm * sizeof **out)))
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for %zu merges (%zu bytes)", nm,
                       nm * sizeof **out);
    for (size_t k = 0; st == ORTEP_OK && k < nm; k++) (*out)[k] = (ortep__merge){m[k].l, m[k].r};
    if (st == ORTEP_OK) *n_out = nm;
  }
  ortep__free(m);
  return st;
}

/* What a LLaMA-2 tokenizer.json holds besides its pieces: byte fallback,
 * "▁" for spaces (and before the text: add_space_prefix, true unless the
 * file says otherwise), the decoder that undoes both. */
static void spm_frame(bool space_prefix, cJSON *root, cJSON *model, const char *unk) {
  cJSON_AddBoolToObject(model, "byte_fallback", true);
  cJSON_AddBoolToObject(model, "fuse_unk", true);
  if (unk) cJSON_AddStringToObject(model, "unk_token", unk);
  cJSON *norm = cJSON_AddObjectToObject(root, "normalizer"), *nl = cJSON_AddArrayToObject(norm, "normalizers");
  cJSON_AddStringToObject(norm, "type", "Sequence");
  if (space_prefix) {
    cJSON *pre = cJSON_CreateObject();
    cJSON_AddStringToObject(pre, "type", "Prepend");
    cJSON_AddStringToObject(pre, "prepend", "\u2581");
    cJSON_AddItemToArray(nl, pre);
  }
  cJSON *rp = cJSON_CreateObject();
  cJSON_AddStringToObject(rp, "type", "Replace");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(rp, "pattern"), "String", " ");
  cJSON_AddStringToObject(rp, "content", "\u2581");
  cJSON_AddItemToArray(nl, rp);
  cJSON *dec = cJSON_AddObjectToObject(root, "decoder"), *dl = cJSON_AddArrayToObject(dec, "decoders");
  cJSON_AddStringToObject(dec, "type", "Sequence");
  cJSON *d0 = cJSON_CreateObject(), *d1 = cJSON_CreateObject(), *d2 = cJSON_CreateObject(), *d3 = cJSON_CreateObject();
  cJSON_AddStringToObject(d0, "type", "Replace");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(d0, "pattern"), "String", "\u2581");
  cJSON_AddStringToObject(d0, "content", " ");
  cJSON_AddStringToObject(d1, "type", "ByteFallback");
  cJSON_AddStringToObject(d2, "type", "Fuse");
  cJSON_AddStringToObject(d3, "type", "Strip");
  cJSON_AddStringToObject(d3, "content", " ");
  cJSON_AddNumberToObject(d3, "start", 1);
  cJSON_AddNumberToObject(d3, "stop", 0);
  cJSON_AddItemToArray(dl, d0), cJSON_AddItemToArray(dl, d1), cJSON_AddItemToArray(dl, d2),
      cJSON_AddItemToArray(dl, d3);
}

static char *gguf_string(const ortep_gguf_kv *kv) { /* a short string value, for a message */
  static _Thread_local char b[40];
  snprintf(b, sizeof b, "%.*s", kv->type == ORTEP_GGUF_STRING ? (int)(kv->len < 32 ? kv->len : 32) : 1,
           kv->type == ORTEP_GGUF_STRING ? kv->str : "?");
  return b;
}

/* The keys a vocabulary needs, checked: tokens, their types, and the
 * merges (byte-level BPE) or the scores (SentencePiece). */
typedef struct gguf_vocab {
  const ortep_gguf_kv *toks, *types, *merges, *scores;
  const char *re;
  bool spm, nfc, ignore_merges;
  bool add_bos, space_prefix; /* tokenizer.ggml.add_bos_token, .add_space_prefix */
  int64_t bos;                /* tokenizer.ggml.bos_token_id; -1: none */
} gguf_vocab;

static ortep_status vocab_keys(const ortep_gguf *g, gguf_vocab *v) {
  const ortep_gguf_kv *model = ortep_gguf_find_kv(g, "tokenizer.ggml.model");
  const ortep_gguf_kv *pre = ortep_gguf_find_kv(g, "tokenizer.ggml.pre");
  *v = (gguf_vocab){ortep_gguf_find_kv(g, "tokenizer.ggml.tokens"),
                    ortep_gguf_find_kv(g, "tokenizer.ggml.token_type"),
                    ortep_gguf_find_kv(g, "tokenizer.ggml.merges"),
                    ortep_gguf_find_kv(g, "tokenizer.ggml.scores"),
                    NULL,
                    false,
                    false,
                    false,
                    false,
                    false,
                    -1};
  if (!model || !v->toks) return TOK_FAIL("the file has no tokenizer.ggml.model / tokenizer.ggml.tokens");
  v->spm = kv_is(model, "llama");
  if (!v->spm && !kv_is(model, "gpt2"))
    return TOK_FAIL(
        "tokenizer.ggml.model '%s' is not read from GGUF metadata (ortep reads byte-level BPE, \"gpt2\", "
        "and SentencePiece, \"llama\"); put the model's tokenizer.json beside the file",
        gguf_string(model));
  if (kv_is(pre, "qwen2"))
    v->re = qwen2_re, v->nfc = true;
  else if (kv_is(pre, "llama-bpe") || kv_is(pre, "llama3"))
    v->re = llama3_re, v->ignore_merges = true;
  else if (!v->spm && pre && !kv_is(pre, "gpt2") && !kv_is(pre, "default"))
    return TOK_FAIL(
        "tokenizer.ggml.pre '%s' is not one ortep knows (qwen2, llama-bpe, gpt2); put the model's "
        "tokenizer.json beside the file",
        gguf_string(pre));
  const ortep_gguf_kv *t = v->toks;
  if (t->type != ORTEP_GGUF_ARRAY || t->elem_type != ORTEP_GGUF_STRING || !t->count || t->count > INT32_MAX)
    return TOK_FAIL("tokenizer.ggml.tokens must be a non-empty array of strings");
  if (v->types &&
      (v->types->type != ORTEP_GGUF_ARRAY || v->types->elem_type != ORTEP_GGUF_I32 || v->types->count != t->count))
    return TOK_FAIL("tokenizer.ggml.token_type must be an i32 array as long as the tokens");
  ortep_status st;
  /* llama.cpp's defaults: a BOS and a space prefix for SentencePiece */
  if ((st = kv_bool(g, "tokenizer.ggml.add_bos_token", v->spm, &v->add_bos)) != ORTEP_OK ||
      (st = kv_bool(g, "tokenizer.ggml.add_space_prefix", true, &v->space_prefix)) != ORTEP_OK ||
      (st = kv_token(g, "tokenizer.ggml.bos_token_id", t->count, &v->bos)) != ORTEP_OK)
    return st;
  if (v->spm) {
    if (!v->scores || v->scores->type != ORTEP_GGUF_ARRAY || v->scores->elem_type != ORTEP_GGUF_F32 ||
        v->scores->count != t->count)
      return TOK_FAIL("tokenizer.ggml.scores (an f32 array as long as the tokens) is missing; SentencePiece needs it");
    for (uint64_t i = 0; i < t->count; i++) {
      float sc;
      memcpy(&sc, (const uint8_t *)v->scores->data + i * 4, 4);
      if (sc != sc) return TOK_FAIL("tokenizer.ggml.scores[%llu] is NaN", (unsigned long long)i);
    }
  } else if (!v->merges || v->merges->type != ORTEP_GGUF_ARRAY || v->merges->elem_type != ORTEP_GGUF_STRING) {
    return TOK_FAIL("tokenizer.ggml.merges (an array of strings) is missing; byte-level BPE needs it");
  }
  return ORTEP_OK;
}

/* The pieces into the vocabulary (NUL-terminated copies kept in piece[]),
 * the added tokens from their types (CONTROL and, for SentencePiece,
 * UNKNOWN: special; USER_DEFINED: added), the BOS to prepend and the
 * unknown piece's name. */
static ortep_status vocab_pieces(const ortep_gguf *g, const gguf_vocab *v, cJSON *vocab, cJSON *added, char **piece,
                                 const char **bos_name, const char **unk) {
  for (uint64_t i = 0; i < v->toks->count; i++) {
    const char *s;
    size_t n;
    ortep_status st = ortep_gguf_array_string(g, v->toks, i, &s, &n);
    if (st != ORTEP_OK) return st;
    char *c = piece[i] = dup_n(s, n);
    if (!c)
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for token %llu (%zu bytes)",
                         (unsigned long long)i, n + 1);
    if (strlen(c) != n) return TOK_FAIL("token %llu holds a NUL byte", (unsigned long long)i);
    int32_t type = 1;
    if (v->types) memcpy(&type, (const uint8_t *)v->types->data + i * 4, 4);
    bool special = type == 3 || (v->spm && type == 2);
    if (special || type == 4) { /* CONTROL (and UNKNOWN): special; USER_DEFINED: added, not special */
      cJSON *a = cJSON_CreateObject();
      cJSON_AddNumberToObject(a, "id", (double)i);
      cJSON_AddStringToObject(a, "content", c);
      cJSON_AddBoolToObject(a, "normalized", type == 4);
      if (!cJSON_AddBoolToObject(a, "special", special) || !cJSON_AddItemToArray(added, a)) {
        cJSON_Delete(a);
        return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for added token %llu",
                           (unsigned long long)i);
      }
    }
    if (type == 2 && !*unk) *unk = c;
    if (v->add_bos && v->bos == (int64_t)i) *bos_name = c;
    if (!cJSON_AddNumberToObject(vocab, c, (double)i))
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for token %llu of %llu",
                         (unsigned long long)i, (unsigned long long)v->toks->count);
  }
  return ORTEP_OK;
}

static ortep_status bpe_merges(const ortep_gguf *g, const ortep_gguf_kv *merges, cJSON *ml) {
  for (uint64_t i = 0; i < merges->count; i++) {
    const char *s;
    size_t n;
    ortep_status st = ortep_gguf_array_string(g, merges, i, &s, &n);
    if (st != ORTEP_OK) return st;
    char *c = dup_n(s, n);
    if (!c)
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for token %llu (%zu bytes)",
                         (unsigned long long)i, n + 1);
    bool added = cJSON_AddItemToArray(ml, cJSON_CreateString(c));
    ortep__free(c);
    if (!added)
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for merge %llu of %llu",
                         (unsigned long long)i, (unsigned long long)merges->count);
  }
  return ORTEP_OK;
}

static void post_bos(cJSON *root,
                     const char *bos_name) { /* a leading BOS, as Hugging Face's TemplateProcessing adds it */
  cJSON *pp = cJSON_AddObjectToObject(root, "post_processor"), *single = cJSON_AddArrayToObject(pp, "single");
  cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
  cJSON *sp = cJSON_CreateObject(), *seq = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "SpecialToken"), "id", bos_name);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(seq, "Sequence"), "id", "A");
  cJSON_AddItemToArray(single, sp);
  cJSON_AddItemToArray(single, seq);
}

/* The tokenizer.json document of g's vocabulary (*root) and, for
 * SentencePiece, its merges as ranked id pairs (*merges; byte-level BPE's
 * are in the document). */
static ortep_status gguf_doc(const ortep_gguf *g, cJSON **root_out, ortep__merge **merges, size_t *n_merges) {
  gguf_vocab v;
  ortep_status st = vocab_keys(g, &v);
  if (st != ORTEP_OK) return st;
  char **piece = ortep__calloc(v.toks->count, sizeof *piece);
  float *score = v.spm ? ortep__malloc(v.toks->count * sizeof *score) : NULL;
  cJSON *root = cJSON_CreateObject();
  if (!piece || (v.spm && !score) || !root) {
    ortep__free(piece), ortep__free(score), cJSON_Delete(root);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for %llu tokens",
                       (unsigned long long)v.toks->count);
  }
  if (v.spm) memcpy(score, v.scores->data, v.toks->count * sizeof *score);
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  cJSON *m = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(m, "type", "BPE");
  cJSON_AddBoolToObject(m, "ignore_merges", v.ignore_merges);
  cJSON *vocab = cJSON_AddObjectToObject(m, "vocab"), *ml = cJSON_AddArrayToObject(m, "merges");
  const char *bos_name = NULL, *unk = NULL;
  if (!added || !vocab || !ml) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf tokenizer: no memory for the document");
  if (st == ORTEP_OK) st = vocab_pieces(g, &v, vocab, added, piece, &bos_name, &unk);
  if (st == ORTEP_OK)
    st = v.spm ? spm_merges(piece, score, v.toks->count, merges, n_merges) : bpe_merges(g, v.merges, ml);
  if (v.spm) {
    spm_frame(v.space_prefix, root, m, unk);
  } else {
    if (v.nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(v.re));
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
  }
  if (bos_name) post_bos(root, bos_name);
  for (uint64_t i = 0; i < v.toks->count; i++) ortep__free(piece[i]);
  ortep__free(piece), ortep__free(score);
  if (st != ORTEP_OK) cJSON_Delete(root), root = NULL;
  *root_out = root;
  return st;
}

ortep_status ortep_tokenizer_open_gguf(const char *path, ortep_tokenizer **out) {
  if (!path || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open_gguf: NULL argument");
  *out = NULL;
  ortep_gguf *g;
  ortep_status st = ortep_gguf_open(path, &g);
  if (st != ORTEP_OK) return st;
  cJSON *root = NULL;
  ortep__merge *merges = NULL;
  size_t n_merges = 0;
  st = gguf_doc(g, &root, &merges, &n_merges);
  ortep_gguf_close(g);
  if (st == ORTEP_OK) st = ortep__tokenizer_from_doc(root, path, merges, n_merges, out);
  cJSON_Delete(root);
  ortep__free(merges);
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

/* A SentencePiece-style tokenizer.json (LLaMA-2): byte fallback, and a
 * normalizer that turns spaces into "▁" (a Replace, after a Prepend of
 * "▁" when spaces are prefixed: *prefix). */
static bool spm_json(const cJSON *root, const cJSON *model, bool *prefix) {
  *prefix = false;
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) return false;
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
  bool replace = false;
  for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) {
    const char *type = str_of(c, "type"), *content = str_of(c, "content");
    if (type && !strcmp(type, "Prepend") && str_of(c, "prepend") && !strcmp(str_of(c, "prepend"), "\u2581"))
      *prefix = true;
    if (type && !strcmp(type, "Replace") && content && !strcmp(content, "\u2581")) replace = true;
  }
  return replace;
}

/* SentencePiece scores from the merges: minus the rank of the first merge
 * that makes a piece (reading ranks merges by them: gguf_json), below every
 * such rank for the pieces no merge makes. */
static ortep_status spm_scores(const char *const *tok, size_t n, const char *const *mrg, size_t n_merges,
                               float *score) {
  ortep__strmap ids = {0};
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; i < n; i++) score[i] = -(float)(n_merges + 1 + i);
  for (size_t i = 0; st == ORTEP_OK && i < n; i++)
    if (!ortep__strmap_get(&ids, tok[i], &(uint32_t){0}) && !ortep__strmap_put(&ids, tok[i], (uint32_t)i))
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
  char buf[1024];
  for (size_t k = 0; st == ORTEP_OK && k < n_merges; k++) {
    const char *sp = strchr(mrg[k], ' ');
    size_t a = sp ? (size_t)(sp - mrg[k]) : 0, b = sp ? strlen(sp + 1) : 0;
    uint32_t id;
    if (!sp || a + b >= sizeof buf) continue;
    memcpy(buf, mrg[k], a), memcpy(buf + a, sp + 1, b + 1);
    if (ortep__strmap_get(&ids, buf, &id) && score[id] < -(float)n_merges) score[id] = -(float)k;
  }
  ortep__strmap_free(&ids);
  return st;
}

/* SentencePiece token types: unknown 2, byte pieces ("<0x41>") 6. */
static void spm_types(const char *const *tok, size_t n, const char *unk, int32_t *type) {
  for (size_t i = 0; i < n; i++) {
    const char *t = tok[i];
    if (type[i] != 1) continue;
    if (unk && !strcmp(t, unk))
      type[i] = 2;
    else if (strlen(t) == 6 && !strncmp(t, "<0x", 3) && t[5] == '>')
      type[i] = 6;
  }
}

/* The keys of each kind, as llama.cpp's converter writes them. */
static ortep_status add_bpe(ortep_gguf_writer *w, const char *const *tok, size_t n, const char *const *mrg,
                            size_t n_merges, const int32_t *type, const char *pre) {
  ortep_status st = ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "gpt2");
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_string(w, "tokenizer.ggml.pre", pre);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", tok, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_array(w, "tokenizer.ggml.token_type", ORTEP_GGUF_I32, type, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_strings(w, "tokenizer.ggml.merges", mrg, n_merges);
  return st;
}
static ortep_status add_spm(ortep_gguf_writer *w, const char *const *tok, size_t n, const char *const *mrg,
                            size_t n_merges, int32_t *type, const char *unk, bool prefix) {
  float *score = ortep__malloc(n * sizeof *score);
  if (!score) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory for %zu scores", n);
  spm_types(tok, n, unk, type);
  ortep_status st = spm_scores(tok, n, mrg, n_merges, score);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "llama");
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", tok, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_array(w, "tokenizer.ggml.scores", ORTEP_GGUF_F32, score, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_array(w, "tokenizer.ggml.token_type", ORTEP_GGUF_I32, type, n);
  if (st == ORTEP_OK) st = ortep_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", prefix);
  for (size_t i = 0; st == ORTEP_OK && i < n; i++)
    if (type[i] == 2) {
      st = ortep_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)i);
      break;
    }
  ortep__free(score);
  return st;
}

/* A tokenizer.json's ids as GGUF writes them: tok[id] (the vocabulary's
 * strings, the added tokens' contents, "[PAD<id>]" for a hole: pads owns
 * those), type[id] (1 normal, 3 control, 4 user-defined, 5 unused), and its
 * merges as "a b" strings (mbuf owns those made from pairs). */
typedef struct json_vocab {
  size_t n, n_merges;
  const char **tok, **mrg;
  char **pads, **mbuf;
  int32_t *type;
} json_vocab;

static void json_vocab_free(json_vocab *v) {
  for (size_t i = 0; v->pads && i < v->n; i++) ortep__free(v->pads[i]);
  for (size_t i = 0; v->mbuf && i < v->n_merges; i++) ortep__free(v->mbuf[i]);
  ortep__free(v->tok), ortep__free(v->pads), ortep__free(v->type), ortep__free(v->mrg), ortep__free(v->mbuf);
}

/* One past the largest id of the vocabulary and the added tokens. */
static size_t count_ids(const cJSON *vocab, const cJSON *added) {
  size_t n = 0;
  for (const cJSON *c = vocab->child; c; c = c->next)
    if (cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble + 1 > (double)n) n = (size_t)c->valuedouble + 1;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble + 1 > (double)n) n = (size_t)id->valuedouble + 1;
  }
  return n;
}

static ortep_status json_tokens(const cJSON *vocab, const cJSON *added, json_vocab *v) {
  for (const cJSON *c = vocab->child; c; c = c->next)
    if (cJSON_IsNumber(c) && c->valuedouble >= 0)
      v->tok[(size_t)c->valuedouble] = c->string, v->type[(size_t)c->valuedouble] = 1;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const char *content = str_of(c, "content");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || !content) continue;
    v->tok[(size_t)id->valuedouble] = content;
    v->type[(size_t)id->valuedouble] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "special")) ? 3 : 4;
  }
  for (size_t i = 0; i < v->n; i++)
    if (!v->tok[i]) {
      char b[32];
      snprintf(b, sizeof b, "[PAD%zu]", i);
      if (!(v->pads[i] = ortep__strdup(b))) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
      v->tok[i] = v->pads[i], v->type[i] = 5; /* UNUSED */
    }
  return ORTEP_OK;
}

static ortep_status json_merges(const cJSON *merges, json_vocab *v) {
  size_t k = 0;
  for (const cJSON *c = merges->child; c; c = c->next, k++) {
    if (cJSON_IsString(c)) {
      v->mrg[k] = c->valuestring;
    } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 && cJSON_IsString(c->child) &&
               cJSON_IsString(c->child->next)) {
      size_t a = strlen(c->child->valuestring), b = strlen(c->child->next->valuestring);
      if (!(v->mbuf[k] = ortep__malloc(a + b + 2)))
        return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
      memcpy(v->mbuf[k], c->child->valuestring, a), v->mbuf[k][a] = ' ';
      memcpy(v->mbuf[k] + a + 1, c->child->next->valuestring, b + 1);
      v->mrg[k] = v->mbuf[k];
    } else {
      return ortep__fail(ORTEP_E_FORMAT, "tokenizer.json: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", k);
    }
  }
  return ORTEP_OK;
}

/* The leading BOS the post_processor adds, as bos_token_id and add_bos_token. */
static ortep_status add_bos(ortep_gguf_writer *w, const cJSON *root, const json_vocab *v) {
  const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
  const char *bos = cJSON_IsArray(single) && single->child
                        ? str_of(cJSON_GetObjectItemCaseSensitive(single->child, "SpecialToken"), "id")
                        : NULL;
  for (size_t i = 0; bos && i < v->n; i++)
    if (!strcmp(v->tok[i], bos)) {
      ortep_status st = ortep_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)i);
      return st == ORTEP_OK ? ortep_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true) : st;
    }
  return ORTEP_OK;
}

ortep_status ortep_tokenizer_add_to_gguf(ortep_gguf_writer *w, const char *json, size_t len) {
  if (!w || !json) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_add_to_gguf: NULL argument");
  cJSON *root = NULL;
  ortep_status st = ortep__json_parse(json, len, "tokenizer.json", &root);
  if (st != ORTEP_OK) return st;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  const char *pre = pre_name(root);
  bool prefix, spm = spm_json(root, model, &prefix);
  json_vocab v = {0};
  if (!str_of(model, "type") || strcmp(str_of(model, "type"), "BPE") || !cJSON_IsObject(vocab) ||
      !cJSON_IsArray(merges) || (!pre && !spm))
    st = ortep__fail(ORTEP_E_NOT_SUPPORTED,
                     "tokenizer.json: only byte-level BPE with the qwen2, llama-bpe or gpt2 pre-tokenizer and "
                     "SentencePiece-style BPE (byte fallback, \"\u2581\" for spaces) are written as GGUF metadata");
  if (st == ORTEP_OK && ((v.n = count_ids(vocab, added)) == 0 || v.n > (1u << 24)))
    st = ortep__fail(ORTEP_E_FORMAT, "tokenizer.json: %zu token ids", v.n);
  if (st == ORTEP_OK) {
    v.n_merges = (size_t)cJSON_GetArraySize(merges);
    v.tok = ortep__calloc(v.n, sizeof *v.tok), v.pads = ortep__calloc(v.n, sizeof *v.pads);
    v.type = ortep__calloc(v.n, sizeof *v.type);
    v.mrg = ortep__calloc(v.n_merges + 1, sizeof *v.mrg), v.mbuf = ortep__calloc(v.n_merges + 1, sizeof *v.mbuf);
    if (!v.tok || !v.pads || !v.type || !v.mrg || !v.mbuf)
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer to gguf: no memory");
  }
  if (st == ORTEP_OK) st = json_tokens(vocab, added, &v);
  if (st == ORTEP_OK) st = json_merges(merges, &v);
  if (st == ORTEP_OK && spm)
    st = add_spm(w, v.tok, v.n, v.mrg, v.n_merges, v.type, str_of(model, "unk_token"), prefix);
  else if (st == ORTEP_OK)
    st = add_bpe(w, v.tok, v.n, v.mrg, v.n_merges, v.type, pre);
  if (st == ORTEP_OK) st = add_bos(w, root, &v);
  json_vocab_free(&v);
  cJSON_Delete(root);
  return st;
}
