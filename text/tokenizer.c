/*
 * tokenizer.c: Hugging Face tokenizer.json (tokenizer.h).
 *
 * Encoding: added tokens are cut out of the raw text first (the longest
 * match at the leftmost position); every other stretch is normalised
 * (utf8proc for the Unicode forms), pre-tokenised (PCRE2 for the split
 * regex, JIT-compiled) into pieces, and each piece goes through BPE: its
 * characters (or, with byte fallback, the <0xNN> tokens of characters the
 * vocabulary lacks) as symbols in a linked list, and a heap of adjacent pairs
 * ordered by merge rank and then position, popped lazily (a stale entry is
 * skipped), so a long piece (SentencePiece-style models have no pre-
 * tokeniser: a whole stretch of text is one piece) costs O(n log n).
 *
 * Decoding maps each token back to bytes (byte-level characters to their
 * bytes; "▁" to a space and <0xNN> to its byte for SentencePiece-style) and
 * repairs what is not valid UTF-8 with U+FFFD.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/internal.h"
#include "runtime/strmap.h" /* ortep__strdup */
#include "ortep/tokenizer.h"
#include "text/internal.h"

#define FLAG_ADDED   1u
#define FLAG_SPECIAL 2u
#define FLAG_LSTRIP  4u  /* an added token that takes the whitespace before it */
#define FLAG_RSTRIP  8u  /* ... after it */
#define FLAG_SINGLE  16u /* matched only as a whole word */
#define MAX_STEPS    8
#define EMPTY        UINT32_MAX

typedef enum norm_kind { NORM_UNICODE, NORM_PREPEND, NORM_REPLACE } norm_kind;
typedef struct norm_step {
  norm_kind kind;
  utf8proc_option_t form; /* NORM_UNICODE */
  char *a, *b;            /* PREPEND: a; REPLACE: a -> b */
} norm_step;

typedef enum pre_kind { PRE_SPLIT, PRE_BYTE_LEVEL, PRE_METASPACE } pre_kind;
typedef struct pre_step {
  pre_kind kind;
  pcre2_code *re;        /* SPLIT, and BYTE_LEVEL with use_regex */
  bool add_prefix_space; /* BYTE_LEVEL */
  int prepend;           /* METASPACE: 0 never, 1 first, 2 always */
  bool split;            /* METASPACE */
} pre_step;

typedef struct trie_edge {
  uint64_t key; /* (node << 8) | byte; UINT64_MAX: empty */
  uint32_t child;
} trie_edge;

typedef struct pair_entry {
  uint64_t key; /* (left id << 32) | right id; UINT64_MAX: empty */
  uint32_t rank, merged;
} pair_entry;

struct ortep_tokenizer {
  char **tok;       /* id -> string (NUL-terminated) */
  uint32_t *len;    /* its length */
  uint8_t *flags;   /* FLAG_ADDED, FLAG_SPECIAL */
  size_t n;         /* ids */
  size_t decodable; /* ids decode below this: n, or the model's larger (padded) vocabulary, whose extra ids decode
                       to nothing */
  uint32_t *slots;  /* string -> id: open addressing over ids, EMPTY when free */
  size_t slot_cap;
  pair_entry *pairs;
  size_t pair_cap;
  /* The added tokens as a trie over their bytes: node 0 is the root, an
   * edge (node, byte) -> child lives in an open-addressing table, and
   * term[node] is the id whose content ends there (-1: none). Matching at a
   * position walks one path, so encoding costs the text's length times the
   * longest added token at most, whatever their number. */
  trie_edge *edges;
  size_t edge_cap;
  int32_t *term;
  size_t n_nodes;
  bool added_first[256]; /* the first bytes of added tokens: other positions are not searched */
  norm_step norm[MAX_STEPS];
  size_t n_norm;
  pre_step pre[MAX_STEPS];
  size_t n_pre;
  bool byte_fallback, fuse_unk, ignore_merges;
  int32_t unk;
  int32_t byte_tok[256]; /* <0xNN>, or -1 */
  char b2u[256][3];      /* byte-level: byte -> UTF-8 of its character */
  uint8_t b2u_len[256];
  int16_t u2b[512]; /* byte-level: code point (< 512) -> byte, or -1 */
  int32_t prefix[4], suffix[4];
  size_t n_prefix, n_suffix;
  bool dec_byte_level, dec_meta, dec_byte_fallback;
  size_t dec_strip; /* leading spaces stripped from the decoded text */
};

/* --- small growable buffers ------------------------------------------------------ */
typedef struct bytes {
  char *p;
  size_t n, cap;
} bytes;
static bool put(bytes *b, const void *src, size_t n) {
  if (!ORTEP__GROW(b->p, b->cap, b->n + n + 1)) return false;
  memcpy(b->p + b->n, src, n);
  b->n += n;
  b->p[b->n] = '\0';
  return true;
}
typedef struct ids {
  int32_t *p;
  size_t n, cap;
} ids;
static bool push_id(ids *v, int32_t id) {
  if (!ORTEP__GROW(v->p, v->cap, v->n + 1)) return false;
  v->p[v->n++] = id;
  return true;
}
/* pieces: their text back to back in .text, piece i is [off[i], off[i+1]) */
typedef struct pieces {
  bytes text;
  size_t *off, n, cap;
} pieces;
static bool piece_end(pieces *ps) {
  if (!ORTEP__GROW(ps->off, ps->cap, ps->n + 2)) return false;
  if (ps->n == 0) ps->off[0] = 0;
  ps->off[++ps->n] = ps->text.n;
  return true;
}
static void pieces_clear(pieces *ps) { ps->text.n = 0, ps->n = 0; }
static void pieces_free(pieces *ps) {
  ortep__free(ps->text.p);
  ortep__free(ps->off);
}

static ortep_status oom(void) { return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer: out of memory"); }

/* --- the vocabulary ------------------------------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}
static int32_t lookup(const ortep_tokenizer *t, const char *s, size_t n) {
  if (!t->slot_cap) return -1;
  for (size_t i = hash_bytes(s, n) & (t->slot_cap - 1);; i = (i + 1) & (t->slot_cap - 1)) {
    uint32_t id = t->slots[i];
    if (id == EMPTY) return -1;
    if (t->len[id] == n && memcmp(t->tok[id], s, n) == 0) return (int32_t)id;
  }
}
static void index_id(ortep_tokenizer *t, uint32_t id) {
  for (size_t i = hash_bytes(t->tok[id], t->len[id]) & (t->slot_cap - 1);; i = (i + 1) & (t->slot_cap - 1))
    if (t->slots[i] == EMPTY || t->slots[i] == id) {
      t->slots[i] = id;
      return;
    }
}

static pair_entry *pair_slot(const ortep_tokenizer *t, uint32_t a, uint32_t b) {
  uint64_t key = ((uint64_t)a << 32) | b;
  for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (t->pair_cap - 1);; i = (i + 1) & (t->pair_cap - 1))
    if (t->pairs[i].key == key || t->pairs[i].key == UINT64_MAX) return &t->pairs[i];
}

/* --- open: the JSON ------------------------------------------------------------- */
static ortep_status bad(const char *path, const char *fmt, const char *detail) {
  return ortep__fail(ORTEP_E_FORMAT, "%s: %s%s%s", path, fmt, detail ? ": " : "", detail ? detail : "");
}

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool bool_of(const cJSON *o, const char *key, bool def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static ortep_status compile(const char *path, const char *pattern, pcre2_code **out) {
  char *expanded; /* the Unicode classes from utf8proc's tables, not PCRE2's (uniclass.c) */
  ortep_status st = ortep__regex_with_tables(pattern, &expanded);
  if (st != ORTEP_OK) return st;
  int err;
  PCRE2_SIZE at;
  *out = pcre2_compile((PCRE2_SPTR)expanded, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
  ortep__free(expanded);
  if (!*out) { /* the error where the file wrote it: the pattern as written */
    pcre2_code *plain =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    if (plain) {
      pcre2_code_free(plain);
      return ortep__fail(ORTEP_E_FORMAT,
                         "%s: the split regex does not compile once its Unicode classes are written "
                         "out as ranges: %s",
                         path, (const char *)msg);
    }
    return ortep__fail(ORTEP_E_FORMAT, "%s: the split regex does not compile at offset %zu: %s", path, (size_t)at,
                       (const char *)msg);
  }
  pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* faster where JIT exists; the interpreter otherwise */
  return ORTEP_OK;
}

/* The GPT-2 split ByteLevel uses with use_regex. */
static const char gpt2_split[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static ortep_status add_norm(ortep_tokenizer *t, const char *path, const cJSON *n) {
  if (!n || cJSON_IsNull(n)) return ORTEP_OK;
  const char *type = str_of(n, "type");
  if (!type) return bad(path, "normalizer without a type", NULL);
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) {
      ortep_status st = add_norm(t, path, c);
      if (st != ORTEP_OK) return st;
    }
    return ORTEP_OK;
  }
  if (t->n_norm == MAX_STEPS) return bad(path, "more than 8 normalizers", NULL);
  norm_step *s = &t->norm[t->n_norm];
  *s = (norm_step){NORM_UNICODE, 0, NULL, NULL};
  if (!strcmp(type, "NFC"))
    s->form = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  else if (!strcmp(type, "NFD"))
    s->form = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  else if (!strcmp(type, "NFKC"))
    s->form = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (!strcmp(type, "NFKD"))
    s->form = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else if (!strcmp(type, "Prepend")) {
    const char *p = str_of(n, "prepend");
    if (!p) return bad(path, "Prepend normalizer without 'prepend'", NULL);
    s->kind = NORM_PREPEND;
    if (!(s->a = ortep__strdup(p))) return oom();
  } else if (!strcmp(type, "Replace")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
    const char *from = str_of(pat, "String"), *to = str_of(n, "content");
    if (!from || !*from || !to)
      return bad(path, "Replace normalizer: only a non-empty String pattern with a content is supported", NULL);
    s->kind = NORM_REPLACE;
    if (!(s->a = ortep__strdup(from)) || !(s->b = ortep__strdup(to))) return oom();
  } else {
    return bad(path, "normalizer type not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)",
               type);
  }
  t->n_norm++;
  return ORTEP_OK;
}

static ortep_status add_pre(ortep_tokenizer *t, const char *path, const cJSON *p) {
  if (!p || cJSON_IsNull(p)) return ORTEP_OK;
  const char *type = str_of(p, "type");
  if (!type) return bad(path, "pre_tokenizer without a type", NULL);
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) {
      ortep_status st = add_pre(t, path, c);
      if (st != ORTEP_OK) return st;
    }
    return ORTEP_OK;
  }
  if (t->n_pre == MAX_STEPS) return bad(path, "more than 8 pre-tokenizers", NULL);
  pre_step *s = &t->pre[t->n_pre];
  *s = (pre_step){0};
  ortep_status st = ORTEP_OK;
  if (!strcmp(type, "Split")) {
    const char *re = str_of(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
    const char *behavior = str_of(p, "behavior");
    if (!re || !behavior || strcmp(behavior, "Isolated") || bool_of(p, "invert", false))
      return bad(path, "Split pre-tokenizer: only a Regex pattern with behavior Isolated (not inverted) is supported",
                 behavior);
    s->kind = PRE_SPLIT;
    st = compile(path, re, &s->re);
  } else if (!strcmp(type, "ByteLevel")) {
    s->kind = PRE_BYTE_LEVEL;
    s->add_prefix_space = bool_of(p, "add_prefix_space", false);
    if (bool_of(p, "use_regex", true)) st = compile(path, gpt2_split, &s->re);
  } else if (!strcmp(type, "Metaspace")) {
    const char *r = str_of(p, "replacement"), *scheme = str_of(p, "prepend_scheme");
    if (r && strcmp(r, "\xe2\x96\x81"))
      return bad(path, "Metaspace pre-tokenizer: only the replacement \"\\u2581\" is supported", r);
    s->kind = PRE_METASPACE;
    s->prepend = scheme ? (!strcmp(scheme, "always")  ? 2
                           : !strcmp(scheme, "first") ? 1
                                                      : 0)
                        : (bool_of(p, "add_prefix_space", true) ? 2 : 0);
    s->split = bool_of(p, "split", true);
  } else {
    return bad(path, "pre_tokenizer type not supported (supported: Split, ByteLevel, Metaspace, Sequence)", type);
  }
  if (st == ORTEP_OK) t->n_pre++;
  return st;
}

static ortep_status add_decoder(ortep_tokenizer *t, const char *path, const cJSON *d) {
  if (!d || cJSON_IsNull(d)) return ORTEP_OK;
  const char *type = str_of(d, "type");
  if (!type) return bad(path, "decoder without a type", NULL);
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
    for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) {
      ortep_status st = add_decoder(t, path, c);
      if (st != ORTEP_OK) return st;
    }
    return ORTEP_OK;
  }
  if (!strcmp(type, "ByteLevel")) {
    t->dec_byte_level = true;
  } else if (!strcmp(type, "Metaspace")) {
    const char *scheme = str_of(d, "prepend_scheme");
    t->dec_meta = true;
    if (scheme ? strcmp(scheme, "never") != 0 : bool_of(d, "add_prefix_space", true)) t->dec_strip = 1;
  } else if (!strcmp(type, "Replace")) {
    const char *from = str_of(cJSON_GetObjectItemCaseSensitive(d, "pattern"), "String"), *to = str_of(d, "content");
    if (!from || !to || strcmp(from, "\xe2\x96\x81") || strcmp(to, " "))
      return bad(path, "Replace decoder: only \"\\u2581\" -> \" \" is supported", from);
    t->dec_meta = true;
  } else if (!strcmp(type, "ByteFallback")) {
    t->dec_byte_fallback = true;
  } else if (!strcmp(type, "Fuse")) {
    /* the pieces are joined anyway */
  } else if (!strcmp(type, "Strip")) {
    const char *c = str_of(d, "content");
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start"),
                *stop = cJSON_GetObjectItemCaseSensitive(d, "stop");
    if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || start->valuedouble < 0 || start->valuedouble > 8 ||
        (cJSON_IsNumber(stop) && stop->valuedouble != 0))
      return bad(path, "Strip decoder: only stripping up to 8 leading spaces is supported", NULL);
    t->dec_strip = (size_t)start->valuedouble;
  } else {
    return bad(path, "decoder type not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)",
               type);
  }
  return ORTEP_OK;
}

static ortep_status add_post(ortep_tokenizer *t, const char *path, const cJSON *p) {
  if (!p || cJSON_IsNull(p)) return ORTEP_OK;
  const char *type = str_of(p, "type");
  if (type && !strcmp(type, "ByteLevel")) return ORTEP_OK; /* offsets only */
  if (type && !strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
    for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) {
      ortep_status st = add_post(t, path, c);
      if (st != ORTEP_OK) return st;
    }
    return ORTEP_OK;
  }
  if (!type || strcmp(type, "TemplateProcessing"))
    return bad(path, "post_processor type not supported (supported: TemplateProcessing, ByteLevel, Sequence)", type);
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
  bool after = false;
  for (const cJSON *c = cJSON_IsArray(single) ? single->child : NULL; c; c = c->next) {
    if (cJSON_GetObjectItemCaseSensitive(c, "Sequence")) {
      after = true;
      continue;
    }
    const char *name = str_of(cJSON_GetObjectItemCaseSensitive(c, "SpecialToken"), "id");
    int32_t id = name ? lookup(t, name, strlen(name)) : -1;
    if (id < 0) return bad(path, "TemplateProcessing names a special token the vocabulary lacks", name);
    size_t *n = after ? &t->n_suffix : &t->n_prefix;
    if (*n == 4) return bad(path, "TemplateProcessing adds more than 4 tokens on one side", NULL);
    (after ? t->suffix : t->prefix)[(*n)++] = id;
  }
  return ORTEP_OK;
}

/* --- the added tokens' trie ------------------------------------------------------ */
static size_t edge_slot(const ortep_tokenizer *t, uint64_t key) {
  size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (t->edge_cap - 1);
  while (t->edges[i].key != key && t->edges[i].key != UINT64_MAX) i = (i + 1) & (t->edge_cap - 1);
  return i;
}
/* The child of node along byte c, or 0 (the root is nobody's child). */
static uint32_t trie_next(const ortep_tokenizer *t, uint32_t node, unsigned char c) {
  const trie_edge *e = &t->edges[edge_slot(t, ((uint64_t)node << 8) | c)];
  return e->key == UINT64_MAX ? 0 : e->child;
}
/* Sized for `content` bytes of content in all (one node per byte at most). */
static ortep_status trie_init(ortep_tokenizer *t, size_t content) {
  t->edge_cap = 16;
  while (t->edge_cap < 2 * content + 2) t->edge_cap *= 2;
  if (!(t->edges = ortep__malloc(t->edge_cap * sizeof *t->edges)) ||
      !(t->term = ortep__malloc((content + 1) * sizeof *t->term)))
    return oom();
  for (size_t i = 0; i < t->edge_cap; i++) t->edges[i].key = UINT64_MAX;
  t->term[0] = -1, t->n_nodes = 1;
  return ORTEP_OK;
}
/* Two added tokens with one content: the smaller id wins, as it always has. */
static void trie_insert(ortep_tokenizer *t, uint32_t id) {
  uint32_t node = 0;
  for (uint32_t i = 0; i < t->len[id]; i++) {
    size_t slot = edge_slot(t, ((uint64_t)node << 8) | (unsigned char)t->tok[id][i]);
    if (t->edges[slot].key == UINT64_MAX) {
      t->edges[slot] = (trie_edge){((uint64_t)node << 8) | (unsigned char)t->tok[id][i], (uint32_t)t->n_nodes};
      t->term[t->n_nodes++] = -1;
    }
    node = t->edges[slot].child;
  }
  if (t->term[node] < 0 || (uint32_t)t->term[node] > id) t->term[node] = (int32_t)id;
  t->added_first[(unsigned char)t->tok[id][0]] = true;
}

static void byte_level_tables(ortep_tokenizer *t) {
  /* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others
   * to 256, 257, ... in byte order */
  int extra = 0;
  for (int i = 0; i < 512; i++) t->u2b[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = keep ? b : 256 + extra++;
    t->b2u_len[b] = (uint8_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)t->b2u[b]);
    t->u2b[cp] = (int16_t)b;
  }
}

static ortep_status set_token(ortep_tokenizer *t, const char *path, const char *s, double idv, uint8_t flags) {
  if (idv < 0 || idv >= (double)t->n || idv != (double)(size_t)idv)
    return bad(path, "a token id is not a whole number within the vocabulary", s);
  size_t id = (size_t)idv;
  if (t->tok[id] && strcmp(t->tok[id], s)) return bad(path, "two different tokens share one id", s);
  if (!t->tok[id]) {
    if (!(t->tok[id] = ortep__strdup(s))) return oom();
    t->len[id] = (uint32_t)strlen(s);
  }
  t->flags[id] |= flags;
  return ORTEP_OK;
}

/* The vocabulary and the added tokens: every id's string and flags, and the
 * added tokens' trie. */
static ortep_status load_ids(ortep_tokenizer *t, const char *path, const cJSON *vocab, const cJSON *added) {
  /* ids: the largest id + 1 over the vocabulary and the added tokens */
  double top = -1, entries = 0;
  for (const cJSON *c = vocab->child; c; c = c->next, entries++)
    top = cJSON_IsNumber(c) && c->valuedouble > top ? c->valuedouble : top;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next, entries++) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    top = cJSON_IsNumber(id) && id->valuedouble > top ? id->valuedouble : top;
  }
  if (top < 0 || top > (double)INT32_MAX - 1)
    return bad(path, "the vocabulary is empty or its ids are out of range", NULL);
  /* ids are dense in real files; a few holes are tolerated, not a table of
   * two billion entries for one large id */
  if (top >= 2 * entries + 1024)
    return ortep__fail(ORTEP_E_FORMAT,
                       "%s: the largest token id is %.0f but there are only %.0f tokens; ids must run from 0 without "
                       "large gaps",
                       path, top, entries);
  t->n = t->decodable = (size_t)top + 1;
  t->tok = ortep__calloc(t->n, sizeof *t->tok);
  t->len = ortep__calloc(t->n, sizeof *t->len);
  t->flags = ortep__calloc(t->n, 1);
  if (!t->tok || !t->len || !t->flags) return oom();
  ortep_status st;
  for (const cJSON *c = vocab->child; c; c = c->next) {
    if (!cJSON_IsNumber(c)) return bad(path, "a vocabulary id is not a number", c->string);
    if ((st = set_token(t, path, c->string, c->valuedouble, 0)) != ORTEP_OK) return st;
  }
  size_t added_bytes = 0;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next) {
    const char *content = str_of(c, "content");
    added_bytes += content ? strlen(content) : 0;
  }
  if ((st = trie_init(t, added_bytes)) != ORTEP_OK) return st;
  for (const cJSON *c = cJSON_IsArray(added) ? added->child : NULL; c; c = c->next) {
    const char *content = str_of(c, "content");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (!content || !*content || !cJSON_IsNumber(id)) return bad(path, "an added token lacks its content or id", NULL);
    uint8_t f = FLAG_ADDED | (bool_of(c, "special", false) ? FLAG_SPECIAL : 0) |
                (bool_of(c, "lstrip", false) ? FLAG_LSTRIP : 0) | (bool_of(c, "rstrip", false) ? FLAG_RSTRIP : 0) |
                (bool_of(c, "single_word", false) ? FLAG_SINGLE : 0);
    if ((st = set_token(t, path, content, id->valuedouble, f)) != ORTEP_OK) return st;
    trie_insert(t, (uint32_t)id->valuedouble);
  }
  return ORTEP_OK;
}

static ortep_status pairs_alloc(ortep_tokenizer *t, size_t n_merges) {
  t->pair_cap = 16;
  while (t->pair_cap < 2 * n_merges + 2) t->pair_cap *= 2;
  if (!(t->pairs = ortep__malloc(t->pair_cap * sizeof *t->pairs))) return oom();
  for (size_t i = 0; i < t->pair_cap; i++) t->pairs[i].key = UINT64_MAX;
  return ORTEP_OK;
}

/* The merge of rank: a + b (ids ia, ib; -1 where the vocabulary lacks it)
 * makes the token they spell together, which must be in the vocabulary too;
 * the first rank of a pair wins. joined: scratch. */
static ortep_status pair_add(ortep_tokenizer *t, const char *path, uint32_t rank, const char *a, size_t la,
                             const char *b, size_t lb, bytes *joined) {
  int32_t ia = lookup(t, a, la), ib = lookup(t, b, lb);
  joined->n = 0;
  if (!put(joined, a, la) || !put(joined, b, lb)) return oom();
  int32_t im = lookup(t, joined->p, joined->n);
  if (ia < 0 || ib < 0 || im < 0)
    return ortep__fail(ORTEP_E_FORMAT, "%s: merge %u (\"%.*s\" + \"%.*s\") names a token the vocabulary lacks", path,
                       rank, (int)la, a, (int)lb, b);
  pair_entry *e = pair_slot(t, (uint32_t)ia, (uint32_t)ib);
  if (e->key == UINT64_MAX) *e = (pair_entry){((uint64_t)ia << 32) | (uint32_t)ib, rank, (uint32_t)im};
  return ORTEP_OK;
}

/* merges: "a b" strings or ["a", "b"] pairs, rank = position. */
static ortep_status load_merges(ortep_tokenizer *t, const char *path, const cJSON *merges) {
  ortep_status st = pairs_alloc(t, (size_t)cJSON_GetArraySize(merges));
  bytes joined = {0};
  uint32_t rank = 0;
  for (const cJSON *c = merges->child; st == ORTEP_OK && c; c = c->next, rank++) {
    const char *a, *b;
    size_t la, lb;
    if (cJSON_IsString(c)) {
      const char *sp = strchr(c->valuestring, ' ');
      if (!sp) {
        st = bad(path, "a merge is not two tokens separated by a space", c->valuestring);
        break;
      }
      a = c->valuestring, la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 && cJSON_IsString(c->child) &&
               cJSON_IsString(c->child->next)) {
      a = c->child->valuestring, la = strlen(a), b = c->child->next->valuestring, lb = strlen(b);
    } else {
      st = bad(path, "a merge is neither \"a b\" nor [\"a\", \"b\"]", NULL);
      break;
    }
    st = pair_add(t, path, rank, a, la, b, lb, &joined);
  }
  ortep__free(joined.p);
  return st;
}

/* merges given as ranked pairs of ids (from a GGUF SentencePiece vocabulary). */
static ortep_status load_merge_ids(ortep_tokenizer *t, const char *path, const ortep__merge *m, size_t n) {
  ortep_status st = pairs_alloc(t, n);
  bytes joined = {0};
  for (size_t k = 0; st == ORTEP_OK && k < n; k++) {
    if (m[k].left >= t->n || m[k].right >= t->n) {
      st = ortep__fail(ORTEP_E_FORMAT, "%s: merge %zu names id %u, past the %zu ids", path, k,
                       m[k].left >= t->n ? m[k].left : m[k].right, t->n);
      break;
    }
    st = pair_add(t, path, (uint32_t)k, t->tok[m[k].left], t->len[m[k].left], t->tok[m[k].right], t->len[m[k].right],
                  &joined);
  }
  ortep__free(joined.p);
  return st;
}

static ortep_status load(ortep_tokenizer *t, const char *path, const cJSON *root, const ortep__merge *merge_ids,
                         size_t n_merge_ids) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const char *type = str_of(model, "type");
  if (!type || strcmp(type, "BPE")) return bad(path, "model.type is not supported (only BPE is)", type);
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"),
              *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (!cJSON_IsObject(vocab) || (!merge_ids && !cJSON_IsArray(merges)))
    return bad(path, "model.vocab or model.merges is missing", NULL);
  const char *prefix = str_of(model, "continuing_subword_prefix"), *suffix = str_of(model, "end_of_word_suffix");
  if ((prefix && *prefix) || (suffix && *suffix))
    return bad(path, "BPE with a continuing_subword_prefix or end_of_word_suffix is not supported", NULL);
  ortep_status st = load_ids(t, path, vocab, added);
  if (st != ORTEP_OK) return st;
  for (size_t i = 0; i < t->n; i++)
    if (!t->tok[i]) { /* a hole in the ids: a token nobody can produce */
      if (!(t->tok[i] = ortep__strdup(""))) return oom();
    }
  t->slot_cap = 16;
  while (t->slot_cap < 2 * t->n) t->slot_cap *= 2;
  if (!(t->slots = ortep__malloc(t->slot_cap * sizeof *t->slots))) return oom();
  memset(t->slots, 0xff, t->slot_cap * sizeof *t->slots);
  for (size_t i = 0; i < t->n; i++)
    if (t->len[i]) index_id(t, (uint32_t)i);
  st = merge_ids ? load_merge_ids(t, path, merge_ids, n_merge_ids) : load_merges(t, path, merges);
  if (st != ORTEP_OK) return st;
  t->byte_fallback = bool_of(model, "byte_fallback", false);
  t->fuse_unk = bool_of(model, "fuse_unk", false);
  t->ignore_merges = bool_of(model, "ignore_merges", false);
  const char *unk = str_of(model, "unk_token");
  t->unk = unk ? lookup(t, unk, strlen(unk)) : -1;
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->byte_tok[b] = lookup(t, name, 6);
  }
  byte_level_tables(t);
  if ((st = add_norm(t, path, cJSON_GetObjectItemCaseSensitive(root, "normalizer"))) != ORTEP_OK ||
      (st = add_pre(t, path, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"))) != ORTEP_OK ||
      (st = add_post(t, path, cJSON_GetObjectItemCaseSensitive(root, "post_processor"))) != ORTEP_OK ||
      (st = add_decoder(t, path, cJSON_GetObjectItemCaseSensitive(root, "decoder"))) != ORTEP_OK)
    return st;
  return ORTEP_OK;
}

void ortep_tokenizer_close(ortep_tokenizer *t) {
  if (!t) return;
  for (size_t i = 0; t->tok && i < t->n; i++) ortep__free(t->tok[i]);
  ortep__free(t->tok), ortep__free(t->len), ortep__free(t->flags), ortep__free(t->slots), ortep__free(t->pairs);
  ortep__free(t->edges), ortep__free(t->term);
  for (size_t i = 0; i < t->n_norm; i++) ortep__free(t->norm[i].a), ortep__free(t->norm[i].b);
  for (size_t i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
  ortep__free(t);
}

ortep_status ortep__tokenizer_from_doc(const cJSON *root, const char *name, const ortep__merge *merges, size_t n_merges,
                                       ortep_tokenizer **out) {
  if (!cJSON_IsObject(root)) return ortep__fail(ORTEP_E_FORMAT, "%s: the document is not a JSON object", name);
  ortep_tokenizer *t = ortep__calloc(1, sizeof *t);
  ortep_status st = t ? load(t, name, root, merges, n_merges) : oom();
  if (st != ORTEP_OK) {
    ortep_tokenizer_close(t);
    return st;
  }
  *out = t;
  return ORTEP_OK;
}

ortep_status ortep__tokenizer_from_json(const char *text, size_t len, const char *name, ortep_tokenizer **out) {
  cJSON *root = NULL;
  ortep_status st = ortep__json_parse(text, len, name, &root);
  if (st != ORTEP_OK) return st;
  st = ortep__tokenizer_from_doc(root, name, NULL, 0, out);
  cJSON_Delete(root);
  return st;
}

ortep_status ortep__tokenizer_fit_vocab(ortep_tokenizer *t, const char *file, size_t model_vocab,
                                        ortep_tokenizer **out) {
  if (!model_vocab) return ORTEP_OK;
  if (t->n > model_vocab) {
    ortep_status st =
        ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                    "%s has %zu token ids but the model's vocabulary has %zu (config.json vocab_size): the tokenizer "
                    "belongs to another model; use the tokenizer.json that ships with this model",
                    file, t->n, model_vocab);
    ortep_tokenizer_close(t);
    *out = NULL;
    return st;
  }
  t->decodable = model_vocab;
  return ORTEP_OK;
}

ortep_status ortep_tokenizer_open_json(const char *json, size_t len, ortep_tokenizer **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open_json: out is NULL");
  *out = NULL;
  if (!json && len) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open_json: json is NULL");
  return ortep__tokenizer_from_json(json ? json : "", len, "tokenizer.json", out);
}

size_t ortep_tokenizer_vocab_size(const ortep_tokenizer *t) { return t ? t->n : 0; }

const char *ortep_tokenizer_token(const ortep_tokenizer *t, int32_t id) {
  return t && id >= 0 && (size_t)id < t->n ? t->tok[id] : NULL;
}

ortep_status ortep_tokenizer_token_id(const ortep_tokenizer *t, const char *token, int32_t *id) {
  if (!t || !token || !id) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_token_id: NULL argument");
  *id = lookup(t, token, strlen(token));
  if (*id < 0) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "the token \"%s\" is not in the vocabulary", token);
  return ORTEP_OK;
}

bool ortep_tokenizer_is_special(const ortep_tokenizer *t, int32_t id) {
  return t && id >= 0 && (size_t)id < t->n && (t->flags[id] & FLAG_SPECIAL);
}

/* --- encoding -------------------------------------------------------------------- */
/* Normalises src into dst (dst's previous content replaced). */
static ortep_status normalize(const ortep_tokenizer *t, const char *src, size_t n, bytes *dst, bytes *tmp) {
  dst->n = 0;
  if (!put(dst, src, n)) return oom();
  for (size_t k = 0; k < t->n_norm; k++) {
    const norm_step *s = &t->norm[k];
    tmp->n = 0;
    if (s->kind == NORM_UNICODE) {
      utf8proc_uint8_t *out = NULL;
      utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)dst->p, (utf8proc_ssize_t)dst->n, &out, s->form);
      if (m < 0)
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "tokenizer: normalising the text failed: %s", utf8proc_errmsg(m));
      bool ok = put(tmp, out, (size_t)m);
      free(out); /* utf8proc allocates with malloc */
      if (!ok) return oom();
    } else if (s->kind == NORM_PREPEND) {
      if (dst->n && (!put(tmp, s->a, strlen(s->a)) || !put(tmp, dst->p, dst->n))) return oom();
    } else {
      size_t la = strlen(s->a), lb = strlen(s->b);
      for (size_t i = 0; i < dst->n;) {
        if (i + la <= dst->n && !memcmp(dst->p + i, s->a, la)) {
          if (!put(tmp, s->b, lb)) return oom();
          i += la;
        } else {
          if (!put(tmp, dst->p + i, 1)) return oom();
          i++;
        }
      }
    }
    bytes swap = *dst;
    *dst = *tmp, *tmp = swap;
  }
  return ORTEP_OK;
}

/* Splits text by re into pieces (matches and the gaps between, in order). */
static ortep_status regex_split(const pcre2_code *re, pcre2_match_data *md, const char *text, size_t n, pieces *out) {
  size_t at = 0, last = 0;
  while (at <= n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)text, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "tokenizer: the split regex failed on this text: %s",
                         (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b > last && (!put(&out->text, text + last, b - last) || !piece_end(out))) return oom();
    if (e > b && (!put(&out->text, text + b, e - b) || !piece_end(out))) return oom();
    last = e;
    if (e == b) { /* an empty match: step over one character */
      if (e >= n) break;
      e++;
      while (e < n && ((unsigned char)text[e] & 0xC0) == 0x80) e++;
    }
    at = e;
  }
  if (last < n && (!put(&out->text, text + last, n - last) || !piece_end(out))) return oom();
  return ORTEP_OK;
}

typedef struct work {
  bytes norm, tmp;
  pieces a, b;
  pcre2_match_data *md;
  /* BPE */
  struct sym {
    int32_t id;
    int32_t prev, next;
  } * sym;
  size_t sym_cap;
  struct cand {
    uint32_t rank;
    uint32_t left;
  } * heap;
  size_t heap_n, heap_cap;
} work;

static void work_free(work *w) {
  ortep__free(w->norm.p), ortep__free(w->tmp.p);
  pieces_free(&w->a), pieces_free(&w->b);
  if (w->md) pcre2_match_data_free(w->md);
  ortep__free(w->sym), ortep__free(w->heap);
}

static ortep_status pre_tokenize(const ortep_tokenizer *t, work *w, bool first) {
  pieces *in = &w->a, *out = &w->b;
  pieces_clear(in);
  if (!put(&in->text, w->norm.p, w->norm.n) || !piece_end(in)) return oom();
  for (size_t k = 0; k < t->n_pre; k++) {
    const pre_step *s = &t->pre[k];
    pieces_clear(out);
    for (size_t i = 0; i < in->n; i++) {
      const char *p = in->text.p + in->off[i];
      size_t n = in->off[i + 1] - in->off[i];
      ortep_status st = ORTEP_OK;
      if (s->kind == PRE_SPLIT) {
        st = regex_split(s->re, w->md, p, n, out);
      } else if (s->kind == PRE_BYTE_LEVEL) {
        bytes *sp = &w->tmp;
        sp->n = 0;
        if (s->add_prefix_space && first && i == 0 && n && p[0] != ' ' && !put(sp, " ", 1)) return oom();
        if (!put(sp, p, n)) return oom();
        pieces raw = {0};
        if (s->re)
          st = regex_split(s->re, w->md, sp->p, sp->n, &raw);
        else if (!put(&raw.text, sp->p, sp->n) || !piece_end(&raw))
          st = oom();
        for (size_t r = 0; st == ORTEP_OK && r < raw.n; r++) {
          for (size_t j = raw.off[r]; j < raw.off[r + 1]; j++) {
            unsigned char c = (unsigned char)raw.text.p[j];
            if (!put(&out->text, t->b2u[c], t->b2u_len[c])) st = oom();
          }
          if (st == ORTEP_OK && !piece_end(out)) st = oom();
        }
        pieces_free(&raw);
      } else { /* METASPACE */
        static const char meta[] = "\xe2\x96\x81";
        bool pre = s->prepend == 2 || (s->prepend == 1 && first && i == 0);
        size_t start = out->text.n;
        if (pre && n && !(n >= 3 && !memcmp(p, meta, 3)) && !put(&out->text, meta, 3)) return oom();
        for (size_t j = 0; j < n; j++) {
          if (p[j] == ' ') {
            if (s->split && out->text.n > start && !piece_end(out)) return oom();
            if (s->split) start = out->text.n;
            if (!put(&out->text, meta, 3)) return oom();
          } else if (!put(&out->text, p + j, 1)) {
            return oom();
          }
        }
        if (out->text.n > start && !piece_end(out)) return oom();
      }
      if (st != ORTEP_OK) return st;
    }
    pieces swap = *in;
    *in = *out, *out = swap;
  }
  return ORTEP_OK;
}

/* heap of candidate merges: smallest rank, then leftmost */
static bool cand_less(const struct cand *x, const struct cand *y) {
  return x->rank != y->rank ? x->rank < y->rank : x->left < y->left;
}
static bool heap_push(work *w, uint32_t rank, uint32_t left) {
  if (!ORTEP__GROW(w->heap, w->heap_cap, w->heap_n + 1)) return false;
  size_t i = w->heap_n++;
  w->heap[i] = (struct cand){rank, left};
  while (i && cand_less(&w->heap[i], &w->heap[(i - 1) / 2])) {
    struct cand t = w->heap[i];
    w->heap[i] = w->heap[(i - 1) / 2], w->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
  return true;
}
static struct cand heap_pop(work *w) {
  struct cand top = w->heap[0];
  w->heap[0] = w->heap[--w->heap_n];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < w->heap_n && cand_less(&w->heap[l], &w->heap[m])) m = l;
    if (r < w->heap_n && cand_less(&w->heap[r], &w->heap[m])) m = r;
    if (m == i) break;
    struct cand t = w->heap[i];
    w->heap[i] = w->heap[m], w->heap[m] = t;
    i = m;
  }
  return top;
}

static bool push_pair(const ortep_tokenizer *t, work *w, int32_t left) {
  int32_t right = w->sym[left].next;
  if (left < 0 || right < 0) return true;
  const pair_entry *e = pair_slot(t, (uint32_t)w->sym[left].id, (uint32_t)w->sym[right].id);
  return e->key == UINT64_MAX || heap_push(w, e->rank, (uint32_t)left);
}

static ortep_status bpe(const ortep_tokenizer *t, work *w, const char *p, size_t n, ids *out) {
  if (!n) return ORTEP_OK;
  if (t->ignore_merges) {
    int32_t whole = lookup(t, p, n);
    if (whole >= 0) return push_id(out, whole) ? ORTEP_OK : oom();
  }
  size_t count = 0;
  for (size_t i = 0; i < n;) {
    size_t cl = 1;
    unsigned char c = (unsigned char)p[i];
    if (c >= 0xF0)
      cl = 4;
    else if (c >= 0xE0)
      cl = 3;
    else if (c >= 0xC0)
      cl = 2;
    if (i + cl > n) cl = n - i;
    int32_t id = lookup(t, p + i, cl);
    size_t need = id >= 0 || !t->byte_fallback ? 1 : cl;
    if (!ORTEP__GROW(w->sym, w->sym_cap, count + need)) return oom();
    if (id >= 0) {
      w->sym[count++].id = id;
    } else if (t->byte_fallback) {
      for (size_t b = 0; b < cl; b++) {
        int32_t bt = t->byte_tok[(unsigned char)p[i + b]];
        w->sym[count++].id = bt >= 0 ? bt : t->unk;
      }
    } else if (t->unk < 0) {
      utf8proc_int32_t cp = -1;
      utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)cl, &cp);
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "tokenizer: the character U+%04X has no token, and the model has neither byte fallback nor an "
                         "unk_token",
                         (unsigned)cp);
    } else if (!(t->fuse_unk && count && w->sym[count - 1].id == t->unk)) {
      w->sym[count++].id = t->unk;
    }
    i += cl;
  }
  for (size_t i = 0; i < count; i++)
    w->sym[i].prev = (int32_t)i - 1, w->sym[i].next = i + 1 < count ? (int32_t)i + 1 : -1;
  w->heap_n = 0;
  for (size_t i = 0; i + 1 < count; i++)
    if (w->sym[i].id >= 0 && w->sym[i + 1].id >= 0 && !push_pair(t, w, (int32_t)i)) return oom();
  while (w->heap_n) {
    struct cand c = heap_pop(w);
    struct sym *l = &w->sym[c.left];
    if (l->id < 0 || l->next < 0) continue; /* merged away */
    struct sym *r = &w->sym[l->next];
    if (r->id < 0) continue;
    const pair_entry *e = pair_slot(t, (uint32_t)l->id, (uint32_t)r->id);
    if (e->key == UINT64_MAX || e->rank != c.rank) continue; /* stale */
    l->id = (int32_t)e->merged;
    int32_t gone = l->next;
    l->next = r->next;
    if (r->next >= 0) w->sym[r->next].prev = (int32_t)c.left;
    w->sym[gone].id = INT32_MIN; /* dead */
    if ((l->prev >= 0 && w->sym[l->prev].id >= 0 && !push_pair(t, w, l->prev)) ||
        (l->next >= 0 && w->sym[l->next].id >= 0 && !push_pair(t, w, (int32_t)c.left)))
      return oom();
  }
  for (int32_t i = count ? 0 : -1; i >= 0; i = w->sym[i].next)
    if (w->sym[i].id != INT32_MIN && w->sym[i].id >= 0 && !push_id(out, w->sym[i].id)) return oom();
  return ORTEP_OK;
}

static ortep_status encode_stretch(const ortep_tokenizer *t, work *w, const char *p, size_t n, bool first, ids *out) {
  ortep_status st = normalize(t, p, n, &w->norm, &w->tmp);
  if (st == ORTEP_OK) st = pre_tokenize(t, w, first);
  for (size_t i = 0; st == ORTEP_OK && i < w->a.n; i++)
    st = bpe(t, w, w->a.text.p + w->a.off[i], w->a.off[i + 1] - w->a.off[i], out);
  return st;
}

/* Whether the character ending just before text + at (before) or starting
 * at it (!before) is a letter or a digit: single_word tokens match only
 * between non-word characters. */
static bool word_char(const char *text, size_t len, size_t at, bool before) {
  if (before) {
    if (at == 0) return false;
    do at--;
    while (at > 0 && ((unsigned char)text[at] & 0xC0) == 0x80);
  } else if (at >= len) {
    return false;
  }
  utf8proc_int32_t cp;
  if (utf8proc_iterate((const utf8proc_uint8_t *)text + at, (utf8proc_ssize_t)(len - at), &cp) <= 0) return false;
  utf8proc_category_t c = utf8proc_category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* The added token starting at text + at (the longest that may match there),
 * or -1: one walk down the trie, keeping the deepest token whose
 * single_word condition holds. */
static int32_t added_at(const ortep_tokenizer *t, const char *text, size_t len, size_t at) {
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t i = at; i < len && (node = trie_next(t, node, (unsigned char)text[i])) != 0; i++) {
    int32_t id = t->term[node];
    if (id < 0) continue;
    if ((t->flags[id] & FLAG_SINGLE) && (word_char(text, len, at, true) || word_char(text, len, i + 1, false)))
      continue;
    best = id;
  }
  return best;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

ortep_status ortep_tokenizer_encode(const ortep_tokenizer *t, const char *text, size_t len, bool add_special,
                                    int32_t **out_ids, size_t *n) {
  if (out_ids) *out_ids = NULL;
  if (n) *n = 0;
  if (!t || (!text && len) || !out_ids || !n)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_encode: NULL argument");
  for (size_t i = 0; i < len;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_encode: the text is not valid UTF-8 at byte %zu",
                         i);
    i += (size_t)k;
  }
  ids v = {0};
  work w = {0};
  ortep_status st = ORTEP_OK;
  /* one pair: the whole match (the split patterns capture nothing) */
  if (!(w.md = pcre2_match_data_create(1, NULL))) st = oom();
  for (size_t k = 0; st == ORTEP_OK && add_special && k < t->n_prefix; k++)
    if (!push_id(&v, t->prefix[k])) st = oom();
  size_t start = 0;
  bool first = true;
  for (size_t i = 0; st == ORTEP_OK && i <= len;) {
    int32_t a = i < len && t->added_first[(unsigned char)text[i]] ? added_at(t, text, len, i) : -1;
    if (a < 0 && i < len) {
      i++;
      continue;
    }
    size_t end = i; /* lstrip: the whitespace before the token is the token's */
    while (a >= 0 && (t->flags[a] & FLAG_LSTRIP) && end > start && blank(text[end - 1])) end--;
    if (end > start) st = encode_stretch(t, &w, text + start, end - start, first, &v);
    first = false;
    if (st == ORTEP_OK && a >= 0 && !push_id(&v, a)) st = oom();
    if (a < 0) break;
    i += t->len[a];
    while ((t->flags[a] & FLAG_RSTRIP) && i < len && blank(text[i])) i++; /* rstrip: and after it */
    start = i;
  }
  for (size_t k = 0; st == ORTEP_OK && add_special && k < t->n_suffix; k++)
    if (!push_id(&v, t->suffix[k])) st = oom();
  work_free(&w);
  if (st != ORTEP_OK) {
    ortep__free(v.p);
    return st;
  }
  /* handed to the caller, who frees with free() */
  int32_t *res = NULL;
  if (v.n && !(res = malloc(v.n * sizeof *res))) {
    ortep__free(v.p);
    return oom();
  }
  if (v.n) memcpy(res, v.p, v.n * sizeof *res);
  ortep__free(v.p);
  *out_ids = res, *n = v.n;
  return ORTEP_OK;
}

/* --- decoding -------------------------------------------------------------------- */
/* Appends the bytes token id stands for (before UTF-8 repair). */
static bool token_bytes(const ortep_tokenizer *t, int32_t id, bytes *out) {
  const char *s = t->tok[id];
  size_t n = t->len[id];
  if (t->flags[id] & FLAG_ADDED) return put(out, s, n);
  if (t->dec_byte_fallback && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') {
    unsigned v;
    char hex[3] = {s[3], s[4], 0};
    if (sscanf(hex, "%2x", &v) == 1) {
      unsigned char c = (unsigned char)v;
      return put(out, &c, 1);
    }
  }
  for (size_t i = 0; i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) k = 1, cp = -1;
    if (t->dec_byte_level && cp >= 0 && cp < 512 && t->u2b[cp] >= 0) {
      unsigned char c = (unsigned char)t->u2b[cp];
      if (!put(out, &c, 1)) return false;
    } else if (t->dec_meta && cp == 0x2581) {
      if (!put(out, " ", 1)) return false;
    } else if (!put(out, s + i, (size_t)k)) {
      return false;
    }
    i += (size_t)k;
  }
  return true;
}

/* The maximal subpart at p[0..n), n >= 1 (the Unicode Standard, 3.9,
 * "U+FFFD substitution of maximal subparts"; Table 3-7 gives the bytes a
 * well-formed sequence allows: E0 needs A0..BF next, ED 80..9F, F0 90..BF,
 * F4 80..8F). *len is its length; returns 1 for a whole character, 0 for the
 * start of one that the end of the buffer cuts, -1 for an ill-formed
 * subpart (one U+FFFD): so ED A0 80 is three subparts, E0 80 80 three, F4 90
 * 80 80 four, and E1 80 followed by "A" one, then "A". */
static int utf8_subpart(const unsigned char *p, size_t n, size_t *len) {
  unsigned char c = p[0], lo = 0x80, hi = 0xBF;
  size_t want;
  *len = 1;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    want = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    want = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    want = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else
    return -1; /* 80..C1, F5..FF start nothing */
  size_t j = 1;
  for (; j < want && j < n; j++)
    if (p[j] < (j == 1 ? lo : 0x80) || p[j] > (j == 1 ? hi : 0xBF)) break;
  *len = j;
  return j == want ? 1 : j == n ? 0 : -1;
}

/* Appends the characters of p[0..n) to out, each maximal ill-formed
 * subpart as one U+FFFD, as Rust's from_utf8_lossy and Python's
 * decode(errors="replace") do. Not final: a character cut by the end of the
 * buffer may be finished by the next token, so it is left over. Returns the
 * bytes consumed. */
static size_t emit_utf8(const char *p, size_t n, bool final, bytes *out, bool *ok) {
  static const char fffd[] = "\xef\xbf\xbd";
  size_t i = 0;
  *ok = true;
  while (i < n) {
    size_t k;
    int r = utf8_subpart((const unsigned char *)p + i, n - i, &k);
    if (r == 0 && !final) return i; /* unfinished: wait for more */
    if (!(r > 0 ? put(out, p + i, k) : put(out, fffd, 3))) return *ok = false, i;
    i += k;
  }
  return i;
}

/* An id no token of the tokenizer (nor of the model it was opened for) has. */
static ortep_status outside(const ortep_tokenizer *t, const char *fn, int32_t id, size_t at) {
  char where[32] = "";
  if (at != SIZE_MAX) snprintf(where, sizeof where, " (at %zu)", at);
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: id %d%s is outside the vocabulary: ids run from 0 to %zu%s", fn, id,
                     where, t->decodable - 1, t->decodable > t->n ? " (the model's vocabulary)" : "");
}

ortep_status ortep_tokenizer_decode(const ortep_tokenizer *t, const int32_t *id, size_t n, bool skip_special,
                                    char **text, size_t *len) {
  if (text) *text = NULL;
  if (len) *len = 0;
  if (!t || (!id && n) || !text) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_decode: NULL argument");
  bytes raw = {0}, fixed = {0};
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; i < n && st == ORTEP_OK; i++) {
    if (id[i] < 0 || (size_t)id[i] >= t->decodable)
      st = outside(t, "ortep_tokenizer_decode", id[i], i);
    else if ((size_t)id[i] < t->n && !(skip_special && (t->flags[id[i]] & FLAG_SPECIAL)) &&
             !token_bytes(t, id[i], &raw))
      st = oom();
  }
  size_t skip = 0;
  bool ok = true;
  while (st == ORTEP_OK && skip < t->dec_strip && skip < raw.n && raw.p[skip] == ' ') skip++;
  if (st == ORTEP_OK) emit_utf8(raw.p ? raw.p + skip : "", raw.n - skip, true, &fixed, &ok);
  if (st == ORTEP_OK && (!ok || !put(&fixed, "", 0))) st = oom();
  ortep__free(raw.p);
  if (st != ORTEP_OK) {
    ortep__free(fixed.p);
    return st;
  }
  char *res = malloc(fixed.n + 1);
  if (!res) {
    ortep__free(fixed.p);
    return oom();
  }
  memcpy(res, fixed.p, fixed.n + 1);
  if (len) *len = fixed.n;
  *text = res;
  ortep__free(fixed.p);
  return ORTEP_OK;
}

/* --- streaming -------------------------------------------------------------------- */
struct ortep_detokenizer {
  const ortep_tokenizer *t;
  bool skip_special;
  size_t stripped; /* leading spaces stripped so far (the decoder's Strip) */
  bool started;    /* text was emitted: no more stripping */
  bytes pending;   /* bytes of an unfinished character */
  bytes out;       /* what the last call returned */
};

ortep_status ortep_detokenizer_create(const ortep_tokenizer *t, bool skip_special, ortep_detokenizer **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_detokenizer_create: out is NULL");
  *out = NULL;
  if (!t) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_detokenizer_create: tokenizer is NULL");
  ortep_detokenizer *s = ortep__calloc(1, sizeof *s);
  if (!s) return oom();
  s->t = t, s->skip_special = skip_special;
  *out = s;
  return ORTEP_OK;
}

void ortep_detokenizer_destroy(ortep_detokenizer *s) {
  if (!s) return;
  ortep__free(s->pending.p), ortep__free(s->out.p);
  ortep__free(s);
}

ortep_status ortep_detokenizer_push(ortep_detokenizer *s, int32_t id, const char **text, size_t *len) {
  if (!s || !text || !len) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_detokenizer_push: NULL argument");
  *text = "", *len = 0;
  const ortep_tokenizer *t = s->t;
  if (id < 0 || (size_t)id >= t->decodable) return outside(t, "ortep_detokenizer_push", id, SIZE_MAX);
  s->out.n = 0;
  if ((size_t)id >= t->n || (s->skip_special && (t->flags[id] & FLAG_SPECIAL))) return ORTEP_OK;
  if (!token_bytes(t, id, &s->pending)) return oom();
  if (!s->pending.n) return ORTEP_OK; /* an empty token (a gap in the ids) */
  size_t skip = 0;
  while (!s->started && s->stripped < t->dec_strip && skip < s->pending.n && s->pending.p[skip] == ' ')
    skip++, s->stripped++;
  bool ok;
  size_t keep_from = skip + emit_utf8(s->pending.p + skip, s->pending.n - skip, false, &s->out, &ok);
  if (!ok) return oom();
  if (keep_from < s->pending.n) memmove(s->pending.p, s->pending.p + keep_from, s->pending.n - keep_from);
  s->pending.n -= keep_from;
  if (s->out.n) s->started = true;
  *text = s->out.p ? s->out.p : "", *len = s->out.n;
  return ORTEP_OK;
}

ortep_status ortep_detokenizer_flush(ortep_detokenizer *s, const char **text, size_t *len) {
  if (!s || !text || !len) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_detokenizer_flush: NULL argument");
  s->out.n = 0;
  bool ok;
  emit_utf8(s->pending.p ? s->pending.p : "", s->pending.n, true, &s->out, &ok);
  if (!ok) return oom();
  s->pending.n = 0, s->stripped = 0, s->started = false;
  *text = s->out.p ? s->out.p : "", *len = s->out.n;
  return ORTEP_OK;
}
