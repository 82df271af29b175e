/*
 * gguf.c: reading (mmap + validation, gguf.h) and writing GGUF files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "strmap.h"
#include "ortep/gguf.h"

#define MAGIC     0x46554747u /* "GGUF" little-endian */
#define MAX_DIMS  4
#define MAX_NAME  256
#define MAX_ELEMS ((uint64_t)1 << 40)
#define DEF_ALIGN 32

struct ortep_gguf {
  const uint8_t *base;
  size_t len;
  void *map; /* ortep_gguf_open's mapping (NULL: the caller's bytes) */
  uint32_t version;
  ortep_gguf_kv *kv;
  size_t n_kv;
  uint64_t **str_offsets; /* per kv: a string array's element offsets (else NULL) */
  ortep_gguf_tensor *t;
  size_t n_t;
  char *names; /* every key and tensor name, NUL-terminated */
};

/* GGML types whose block ortep knows: elements and bytes per block. */
static bool ggml_block(uint32_t type, uint32_t *elems, uint32_t *bytes) {
  static const struct {
    uint32_t type, elems, bytes;
    const char *name;
  } t[] = {{0, 1, 4, "F32"},       {1, 1, 2, "F16"},       {2, 32, 18, "Q4_0"},    {3, 32, 20, "Q4_1"},
           {6, 32, 22, "Q5_0"},    {7, 32, 24, "Q5_1"},    {8, 32, 34, "Q8_0"},    {9, 32, 36, "Q8_1"},
           {10, 256, 84, "Q2_K"},  {11, 256, 110, "Q3_K"}, {12, 256, 144, "Q4_K"}, {13, 256, 176, "Q5_K"},
           {14, 256, 210, "Q6_K"}, {15, 256, 292, "Q8_K"}, {24, 1, 1, "I8"},       {25, 1, 2, "I16"},
           {26, 1, 4, "I32"},      {27, 1, 8, "I64"},      {28, 1, 8, "F64"},      {30, 1, 2, "BF16"}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (t[i].type == type) {
      if (elems) *elems = t[i].elems, *bytes = t[i].bytes;
      return true;
    }
  return false;
}

const char *ortep_gguf_type_name(uint32_t type) {
  static const char *const names[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "Q4_2",     "Q4_3",     "Q5_0",     "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",     "Q6_K",     "Q8_K",     "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",    "IQ4_XS",   "I8",       "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0"};
  static __thread char other[24];
  if (type < sizeof names / sizeof *names) return names[type];
  snprintf(other, sizeof other, "type %u", type);
  return other;
}

static ortep_dtype ortep_of(uint32_t type) {
  switch (type) {
    case ORTEP_GGML_F32: return ORTEP_DTYPE_F32;
    case ORTEP_GGML_F16: return ORTEP_DTYPE_F16;
    case ORTEP_GGML_BF16: return ORTEP_DTYPE_BF16;
    case ORTEP_GGML_Q8_0: return ORTEP_DTYPE_Q8_0;
    case ORTEP_GGML_Q4_0: return ORTEP_DTYPE_Q4_0;
    default: return ORTEP_DTYPE_COUNT;
  }
}

/* --- reading ------------------------------------------------------------------- */
typedef struct cursor {
  const uint8_t *p, *end;
} cursor;

#define BAD(...) ortep__fail(ORTEP_E_FORMAT, "gguf: " __VA_ARGS__)

static bool take(cursor *c, size_t n, const uint8_t **out) {
  if ((size_t)(c->end - c->p) < n) return false;
  if (out) *out = c->p;
  c->p += n;
  return true;
}
static bool u32(cursor *c, uint32_t *v) {
  const uint8_t *b;
  if (!take(c, 4, &b)) return false;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return true;
}
static bool u64(cursor *c, uint64_t *v) {
  uint32_t lo, hi;
  if (!u32(c, &lo) || !u32(c, &hi)) return false;
  *v = (uint64_t)hi << 32 | lo;
  return true;
}
static bool str(cursor *c, const char **s, size_t *len) {
  uint64_t n;
  const uint8_t *b;
  if (!u64(c, &n) || n > (uint64_t)(c->end - c->p) || !take(c, (size_t)n, &b)) return false;
  *s = (const char *)b, *len = (size_t)n;
  return true;
}

static size_t scalar_size(uint32_t type) {
  switch (type) {
    case ORTEP_GGUF_U8:
    case ORTEP_GGUF_I8:
    case ORTEP_GGUF_BOOL: return 1;
    case ORTEP_GGUF_U16:
    case ORTEP_GGUF_I16: return 2;
    case ORTEP_GGUF_U32:
    case ORTEP_GGUF_I32:
    case ORTEP_GGUF_F32: return 4;
    case ORTEP_GGUF_U64:
    case ORTEP_GGUF_I64:
    case ORTEP_GGUF_F64: return 8;
    default: return 0;
  }
}

static void scalar(ortep_gguf_kv *kv, uint32_t type, const uint8_t *b) {
  uint64_t v = 0;
  size_t n = scalar_size(type);
  for (size_t i = 0; i < n; i++) v |= (uint64_t)b[i] << (8 * i);
  int64_t s = (int64_t)v;
  if (type == ORTEP_GGUF_I8) s = (int8_t)v;
  if (type == ORTEP_GGUF_I16) s = (int16_t)v;
  if (type == ORTEP_GGUF_I32) s = (int32_t)v;
  kv->u = v, kv->i = s;
  if (type == ORTEP_GGUF_F32) {
    float f;
    uint32_t w = (uint32_t)v;
    memcpy(&f, &w, 4);
    kv->f = f;
  } else if (type == ORTEP_GGUF_F64) {
    memcpy(&kv->f, &v, 8);
  } else {
    kv->f = type == ORTEP_GGUF_I8 || type == ORTEP_GGUF_I16 || type == ORTEP_GGUF_I32 || type == ORTEP_GGUF_I64
                ? (double)s
                : (double)v;
  }
  if (type == ORTEP_GGUF_BOOL) kv->u = v != 0;
}

static ortep_status read_kv(ortep_gguf *g, cursor *c, size_t i, char **names) {
  ortep_gguf_kv *kv = &g->kv[i];
  const char *key;
  size_t klen;
  uint32_t type;
  if (!str(c, &key, &klen)) return BAD("metadata entry %zu: its key runs past the end of the file", i);
  if (klen == 0 || klen > 65535) return BAD("metadata entry %zu: a key of %zu bytes (1 to 65535 are allowed)", i, klen);
  if (memchr(key, 0, klen)) return BAD("metadata entry %zu: its key holds a NUL byte", i);
  memcpy(*names, key, klen), (*names)[klen] = '\0';
  kv->key = *names, *names += klen + 1;
  if (!u32(c, &type)) return BAD("metadata '%s': its type runs past the end of the file", kv->key);
  kv->type = (ortep_gguf_type)type;
  const uint8_t *b;
  if (type == ORTEP_GGUF_STRING) {
    if (!str(c, &kv->str, &kv->len)) return BAD("metadata '%s': its string runs past the end of the file", kv->key);
    return ORTEP_OK;
  }
  if (type == ORTEP_GGUF_ARRAY) {
    uint32_t et;
    if (!u32(c, &et) || !u64(c, &kv->count)) return BAD("metadata '%s': its array header runs past the end", kv->key);
    kv->elem_type = (ortep_gguf_type)et;
    kv->data = c->p;
    if (et == ORTEP_GGUF_STRING) {
      if (kv->count > (uint64_t)(c->end - c->p) / 8)
        return BAD("metadata '%s': %llu strings cannot fit the %td bytes left", kv->key, (unsigned long long)kv->count,
                   c->end - c->p);
      uint64_t *off = ortep__malloc((size_t)(kv->count ? kv->count : 1) * sizeof *off);
      if (!off)
        return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for the %llu strings of '%s'",
                           (unsigned long long)kv->count, kv->key);
      g->str_offsets[i] = off;
      for (uint64_t j = 0; j < kv->count; j++) {
        const char *s;
        size_t n;
        off[j] = (uint64_t)(c->p - g->base);
        if (!str(c, &s, &n))
          return BAD("metadata '%s': string %llu of %llu runs past the end of the file", kv->key, (unsigned long long)j,
                     (unsigned long long)kv->count);
      }
      return ORTEP_OK;
    }
    size_t es = scalar_size(et);
    if (!es)
      return BAD("metadata '%s': an array of type %u (arrays hold numbers, bools or strings; not arrays)", kv->key, et);
    if (kv->count > (uint64_t)(c->end - c->p) / es || !take(c, (size_t)kv->count * es, NULL))
      return BAD("metadata '%s': %llu elements of %zu bytes run past the end of the file", kv->key,
                 (unsigned long long)kv->count, es);
    return ORTEP_OK;
  }
  size_t n = scalar_size(type);
  if (!n) return BAD("metadata '%s': value type %u is not one GGUF defines (0-12)", kv->key, type);
  if (!take(c, n, &b)) return BAD("metadata '%s': its value runs past the end of the file", kv->key);
  scalar(kv, type, b);
  return ORTEP_OK;
}

static ortep_status read_tensor(ortep_gguf *g, cursor *c, size_t i, char **names, uint64_t *offset) {
  ortep_gguf_tensor *t = &g->t[i];
  const char *name;
  size_t nlen;
  uint32_t nd, type;
  if (!str(c, &name, &nlen)) return BAD("tensor %zu: its name runs past the end of the file", i);
  if (nlen == 0 || nlen > MAX_NAME)
    return BAD("tensor %zu: a name of %zu bytes (1 to %d are allowed)", i, nlen, MAX_NAME);
  if (memchr(name, 0, nlen)) return BAD("tensor %zu: its name holds a NUL byte", i);
  memcpy(*names, name, nlen), (*names)[nlen] = '\0';
  t->name = *names, *names += nlen + 1;
  if (!u32(c, &nd)) return BAD("tensor '%s': its dimension count runs past the end of the file", t->name);
  if (nd < 1 || nd > MAX_DIMS) return BAD("tensor '%s': %u dimensions (1 to %d are allowed)", t->name, nd, MAX_DIMS);
  uint64_t dims[MAX_DIMS], n = 1;
  for (uint32_t d = 0; d < nd; d++) {
    if (!u64(c, &dims[d])) return BAD("tensor '%s': its dimensions run past the end of the file", t->name);
    if (dims[d] < 1 || dims[d] > MAX_ELEMS || n > MAX_ELEMS / dims[d])
      return BAD("tensor '%s': dimension %u is %llu (each at least 1, %llu elements at most)", t->name, d,
                 (unsigned long long)dims[d], (unsigned long long)MAX_ELEMS);
    n *= dims[d];
  }
  if (!u32(c, &type) || !u64(c, offset)) return BAD("tensor '%s': its type and offset run past the end", t->name);
  uint32_t be, bb;
  if (!ggml_block(type, &be, &bb))
    return BAD("tensor '%s' is of GGML type %s, which ortep does not read (it reads F32, F16, BF16, Q8_0 and Q4_0)",
               t->name, ortep_gguf_type_name(type));
  if (dims[0] % be)
    return BAD("tensor '%s': its rows of %llu values are not whole %s blocks of %u", t->name,
               (unsigned long long)dims[0], ortep_gguf_type_name(type), be);
  t->ggml_type = type;
  t->dtype = ortep_of(type);
  t->size = (size_t)(n / be * bb);
  t->shape.rank = nd;
  for (uint32_t d = 0; d < nd; d++) t->shape.dims[d] = (int64_t)dims[nd - 1 - d];
  return ORTEP_OK;
}

typedef struct span {
  uint64_t begin, end;
  size_t tensor;
} span;
static int by_begin(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static ortep_status parse(ortep_gguf *g) {
  if (!g->len) return BAD("the file is empty (a GGUF file starts with its magic, version and counts)");
  cursor c = {g->base, g->base + g->len};
  uint32_t magic;
  uint64_t nt, nkv;
  if (!u32(&c, &magic) || magic != MAGIC) return BAD("not a GGUF file (no GGUF magic at its start)");
  if (!u32(&c, &g->version) || (g->version != 2 && g->version != 3))
    return BAD("version %u; ortep reads GGUF versions 2 and 3", g->version);
  if (!u64(&c, &nt) || !u64(&c, &nkv)) return BAD("its header is cut short");
  /* each entry takes at least 12 bytes (key length, type), each tensor 28 */
  if (nkv > g->len / 12 || nt > g->len / 28)
    return BAD("%llu metadata entries and %llu tensors cannot fit its %zu bytes", (unsigned long long)nkv,
               (unsigned long long)nt, g->len);
  g->kv = ortep__calloc((size_t)nkv + 1, sizeof *g->kv);
  g->str_offsets = ortep__calloc((size_t)nkv + 1, sizeof *g->str_offsets);
  g->t = ortep__calloc((size_t)nt + 1, sizeof *g->t);
  g->names = ortep__malloc(g->len + 1); /* every name is a piece of the file: this bounds them */
  if (!g->kv || !g->str_offsets || !g->t || !g->names)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for %llu entries and %llu tensors",
                       (unsigned long long)nkv, (unsigned long long)nt);
  char *names = g->names;
  ortep__strmap seen = {0};
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < nkv; i++) {
    g->n_kv = i + 1;
    if ((st = read_kv(g, &c, i, &names)) == ORTEP_OK && ortep__strmap_get(&seen, g->kv[i].key, NULL))
      st = BAD("metadata key '%s' appears twice", g->kv[i].key);
    if (st == ORTEP_OK && !ortep__strmap_put(&seen, g->kv[i].key, (uint32_t)i))
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for the metadata index");
  }
  ortep__strmap_free(&seen);
  uint64_t align = DEF_ALIGN;
  const ortep_gguf_kv *a = st == ORTEP_OK ? ortep_gguf_find_kv(g, "general.alignment") : NULL;
  if (a && (a->type != ORTEP_GGUF_U32 || a->u == 0 || (a->u & (a->u - 1)) || a->u > 65536))
    st = BAD("general.alignment must be a u32 power of two up to 65536");
  if (a && st == ORTEP_OK) align = a->u;
  uint64_t *offs = st == ORTEP_OK ? ortep__calloc((size_t)nt + 1, sizeof *offs) : NULL;
  if (st == ORTEP_OK && !offs) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for the tensor offsets");
  ortep__strmap tnames = {0};
  for (size_t i = 0; st == ORTEP_OK && i < nt; i++) {
    g->n_t = i + 1;
    if ((st = read_tensor(g, &c, i, &names, &offs[i])) == ORTEP_OK && ortep__strmap_get(&tnames, g->t[i].name, NULL))
      st = BAD("tensor '%s' appears twice", g->t[i].name);
    if (st == ORTEP_OK && !ortep__strmap_put(&tnames, g->t[i].name, (uint32_t)i))
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for the tensor index");
  }
  ortep__strmap_free(&tnames);
  /* the data: from the end of the tensor table, rounded up to the alignment */
  uint64_t data = (uint64_t)(c.p - g->base);
  data = (data + align - 1) / align * align;
  span *sp = st == ORTEP_OK ? ortep__calloc((size_t)nt + 1, sizeof *sp) : NULL;
  if (st == ORTEP_OK && !sp) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for the tensor spans");
  for (size_t i = 0; st == ORTEP_OK && i < nt; i++) {
    ortep_gguf_tensor *t = &g->t[i];
    if (offs[i] % align)
      st = BAD("tensor '%s': offset %llu is not a multiple of the alignment %llu", t->name, (unsigned long long)offs[i],
               (unsigned long long)align);
    else if (data > g->len || offs[i] > g->len - data || t->size > g->len - data - offs[i])
      st = BAD("tensor '%s': %zu bytes at data offset %llu run past the end of the %zu-byte file (truncated?)", t->name,
               t->size, (unsigned long long)offs[i], g->len);
    else
      t->data = g->base + data + offs[i], sp[i] = (span){offs[i], offs[i] + t->size, i};
  }
  if (st == ORTEP_OK && nt > 1) {
    qsort(sp, (size_t)nt, sizeof *sp, by_begin);
    for (size_t i = 1; st == ORTEP_OK && i < nt; i++)
      if (sp[i].begin < sp[i - 1].end)
        st = BAD("tensors '%s' and '%s' overlap", g->t[sp[i - 1].tensor].name, g->t[sp[i].tensor].name);
  }
  ortep__free(sp);
  ortep__free(offs);
  return st;
}

static ortep_status finish(ortep_gguf *g, ortep_gguf **out) {
  ortep_status st = parse(g);
  if (st != ORTEP_OK) {
    ortep_gguf_close(g);
    return st;
  }
  *out = g;
  return ORTEP_OK;
}

ortep_status ortep_gguf_parse(const void *bytes, size_t len, ortep_gguf **out) {
  if (!out || (!bytes && len)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_gguf_parse: NULL argument");
  *out = NULL;
  ortep_gguf *g = ortep__calloc(1, sizeof *g);
  if (!g) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory");
  g->base = bytes, g->len = len;
  return finish(g, out);
}

ortep_status ortep_gguf_open(const char *path, ortep_gguf **out) {
  if (!path || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_gguf_open: NULL argument");
  *out = NULL;
  int fd;
  size_t len;
  ortep_status st = ortep__open_regular(path, &fd, &len);
  if (st != ORTEP_OK) return st;
  void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) return ortep__fail(ORTEP_E_IO, "cannot map %s (%zu bytes): %s", path, len, strerror(err));
  ortep_gguf *g = ortep__calloc(1, sizeof *g);
  if (!g) {
    if (map) munmap(map, len);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory");
  }
  g->base = map, g->len = len, g->map = map;
  st = finish(g, out);
  return st == ORTEP_OK ? st : ortep__wrap(st, "%s", path);
}

void ortep_gguf_close(ortep_gguf *g) {
  if (!g) return;
  for (size_t i = 0; g->str_offsets && i < g->n_kv; i++) ortep__free(g->str_offsets[i]);
  ortep__free(g->str_offsets);
  ortep__free(g->kv);
  ortep__free(g->t);
  ortep__free(g->names);
  if (g->map) munmap(g->map, g->len);
  ortep__free(g);
}

uint32_t ortep_gguf_version(const ortep_gguf *g) { return g ? g->version : 0; }
size_t ortep_gguf_kv_count(const ortep_gguf *g) { return g ? g->n_kv : 0; }
const ortep_gguf_kv *ortep_gguf_kv_at(const ortep_gguf *g, size_t i) { return g && i < g->n_kv ? &g->kv[i] : NULL; }
const ortep_gguf_kv *ortep_gguf_find_kv(const ortep_gguf *g, const char *key) {
  for (size_t i = 0; g && key && i < g->n_kv; i++)
    if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
  return NULL;
}
size_t ortep_gguf_tensor_count(const ortep_gguf *g) { return g ? g->n_t : 0; }
const ortep_gguf_tensor *ortep_gguf_tensor_at(const ortep_gguf *g, size_t i) {
  return g && i < g->n_t ? &g->t[i] : NULL;
}
const ortep_gguf_tensor *ortep_gguf_find_tensor(const ortep_gguf *g, const char *name) {
  for (size_t i = 0; g && name && i < g->n_t; i++)
    if (!strcmp(g->t[i].name, name)) return &g->t[i];
  return NULL;
}

ortep_status ortep_gguf_array_string(const ortep_gguf *g, const ortep_gguf_kv *kv, uint64_t i, const char **s,
                                     size_t *len) {
  if (!g || !kv || !s || !len || kv < g->kv || kv >= g->kv + g->n_kv || kv->type != ORTEP_GGUF_ARRAY ||
      kv->elem_type != ORTEP_GGUF_STRING)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_gguf_array_string: '%s' is not an array of strings of this file",
                       kv && kv->key ? kv->key : "(null)");
  if (i >= kv->count)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "'%s': string %llu of %llu", kv->key, (unsigned long long)i,
                       (unsigned long long)kv->count);
  const uint8_t *p = g->base + g->str_offsets[kv - g->kv][i]; /* indexed and checked when parsed */
  uint64_t n = 0;
  for (int b = 0; b < 8; b++) n |= (uint64_t)p[b] << (8 * b);
  *s = (const char *)p + 8, *len = (size_t)n;
  return ORTEP_OK;
}

/* --- writing -------------------------------------------------------------------- */
typedef struct wbuf {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} wbuf;
static void put(wbuf *b, const void *bytes, size_t n) {
  if (b->oom || !n) return;
  if (!ORTEP__GROW(b->p, b->cap, b->n + n)) {
    b->oom = true;
    return;
  }
  memcpy(b->p + b->n, bytes, n);
  b->n += n;
}
static void put_u32(wbuf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(b, x, 4);
}
static void put_u64(wbuf *b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(wbuf *b, const char *s, size_t n) {
  put_u64(b, n);
  put(b, s, n);
}

typedef struct wtensor {
  char *name;
  uint32_t type;
  ortep_shape shape;
  void *data;
  size_t size;
} wtensor;

struct ortep_gguf_writer {
  wbuf kv;
  uint64_t n_kv;
  wtensor *t;
  size_t n_t, cap_t;
};

ortep_status ortep_gguf_writer_create(ortep_gguf_writer **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_gguf_writer_create: out is NULL");
  *out = ortep__calloc(1, sizeof **out);
  return *out ? ORTEP_OK : ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf: no memory for a writer");
}

void ortep_gguf_writer_destroy(ortep_gguf_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_t; i++) ortep__free(w->t[i].name), ortep__free(w->t[i].data);
  ortep__free(w->t);
  ortep__free(w->kv.p);
  ortep__free(w);
}

static ortep_status kv_head(ortep_gguf_writer *w, const char *key, uint32_t type) {
  if (!w || !key || !*key) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "gguf writer: a non-empty key is required");
  put_str(&w->kv, key, strlen(key));
  put_u32(&w->kv, type);
  w->n_kv++;
  return ORTEP_OK;
}
static ortep_status kv_done(ortep_gguf_writer *w) {
  return w->kv.oom ? ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf writer: no memory for the metadata") : ORTEP_OK;
}

ortep_status ortep_gguf_writer_add_u32(ortep_gguf_writer *w, const char *key, uint32_t v) {
  ortep_status st = kv_head(w, key, ORTEP_GGUF_U32);
  if (st == ORTEP_OK) put_u32(&w->kv, v);
  return st == ORTEP_OK ? kv_done(w) : st;
}
ortep_status ortep_gguf_writer_add_f32(ortep_gguf_writer *w, const char *key, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  ortep_status st = kv_head(w, key, ORTEP_GGUF_F32);
  if (st == ORTEP_OK) put_u32(&w->kv, bits);
  return st == ORTEP_OK ? kv_done(w) : st;
}
ortep_status ortep_gguf_writer_add_bool(ortep_gguf_writer *w, const char *key, bool v) {
  uint8_t b = v;
  ortep_status st = kv_head(w, key, ORTEP_GGUF_BOOL);
  if (st == ORTEP_OK) put(&w->kv, &b, 1);
  return st == ORTEP_OK ? kv_done(w) : st;
}
ortep_status ortep_gguf_writer_add_string(ortep_gguf_writer *w, const char *key, const char *v) {
  if (!v) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "gguf writer: '%s': NULL string", key ? key : "");
  ortep_status st = kv_head(w, key, ORTEP_GGUF_STRING);
  if (st == ORTEP_OK) put_str(&w->kv, v, strlen(v));
  return st == ORTEP_OK ? kv_done(w) : st;
}
ortep_status ortep_gguf_writer_add_array(ortep_gguf_writer *w, const char *key, ortep_gguf_type elem,
                                         const void *values, size_t n) {
  size_t es = scalar_size((uint32_t)elem);
  if (!es || (n && !values))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "gguf writer: '%s': an array of numbers or bools needs its values",
                       key ? key : "");
  ortep_status st = kv_head(w, key, ORTEP_GGUF_ARRAY);
  if (st != ORTEP_OK) return st;
  put_u32(&w->kv, (uint32_t)elem);
  put_u64(&w->kv, n);
  put(&w->kv, values, n * es); /* the host is little-endian (x86-64, aarch64) */
  return kv_done(w);
}
ortep_status ortep_gguf_writer_add_strings(ortep_gguf_writer *w, const char *key, const char *const *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!v || !v[i]) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "gguf writer: '%s': string %zu is NULL", key, i);
  ortep_status st = kv_head(w, key, ORTEP_GGUF_ARRAY);
  if (st != ORTEP_OK) return st;
  put_u32(&w->kv, ORTEP_GGUF_STRING);
  put_u64(&w->kv, n);
  for (size_t i = 0; i < n; i++) put_str(&w->kv, v[i], strlen(v[i]));
  return kv_done(w);
}

ortep_status ortep_gguf_writer_add_tensor(ortep_gguf_writer *w, const char *name, uint32_t type,
                                          const ortep_shape *shape, const void *data, size_t size) {
  if (!w || !name || !*name || !shape || (size && !data))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "gguf writer: a tensor needs a name, a shape and its data");
  uint32_t be, bb;
  uint64_t n = 1;
  for (uint32_t d = 0; d < shape->rank; d++) n *= shape->dims[d] > 0 ? (uint64_t)shape->dims[d] : 0;
  if (!ggml_block(type, &be, &bb) || shape->rank < 1 || shape->rank > MAX_DIMS || n == 0 ||
      shape->dims[shape->rank - 1] % be || n / be * bb != size)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "gguf writer: tensor '%s': %zu bytes for a %u-dimensional %s shape (want whole blocks, 1-4 "
                       "dimensions)",
                       name, size, shape->rank, ortep_gguf_type_name(type));
  if (!ORTEP__GROW(w->t, w->cap_t, w->n_t + 1)) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf writer: no memory");
  wtensor t = {ortep__strdup(name), type, *shape, ortep__malloc(size ? size : 1), size};
  if (!t.name || !t.data) {
    ortep__free(t.name), ortep__free(t.data);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf writer: no memory for tensor '%s'", name);
  }
  if (size) memcpy(t.data, data, size);
  w->t[w->n_t++] = t;
  return ORTEP_OK;
}

ortep_status ortep_gguf_writer_write(ortep_gguf_writer *w, const char *path) {
  if (!w || !path) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_gguf_writer_write: NULL argument");
  wbuf h = {0};
  put_u32(&h, MAGIC);
  put_u32(&h, 3);
  put_u64(&h, w->n_t);
  put_u64(&h, w->n_kv);
  put(&h, w->kv.p, w->kv.n);
  uint64_t off = 0;
  for (size_t i = 0; i < w->n_t; i++) {
    const wtensor *t = &w->t[i];
    put_str(&h, t->name, strlen(t->name));
    put_u32(&h, t->shape.rank);
    for (uint32_t d = 0; d < t->shape.rank; d++) put_u64(&h, (uint64_t)t->shape.dims[t->shape.rank - 1 - d]);
    put_u32(&h, t->type);
    put_u64(&h, off);
    off = (off + t->size + DEF_ALIGN - 1) / DEF_ALIGN * DEF_ALIGN;
  }
  static const uint8_t zeros[DEF_ALIGN];
  put(&h, zeros, (DEF_ALIGN - h.n % DEF_ALIGN) % DEF_ALIGN);
  if (h.oom) {
    ortep__free(h.p);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "gguf writer: no memory for the header");
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    ortep__free(h.p);
    return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", tmp, strerror(errno));
  }
  bool ok = fwrite(h.p, 1, h.n, f) == h.n;
  for (size_t i = 0; ok && i < w->n_t; i++) {
    const wtensor *t = &w->t[i];
    ok = fwrite(t->data, 1, t->size, f) == t->size && fwrite(zeros, 1, (DEF_ALIGN - t->size % DEF_ALIGN) % DEF_ALIGN,
                                                             f) == (DEF_ALIGN - t->size % DEF_ALIGN) % DEF_ALIGN;
  }
  int err = ok ? 0 : errno;
  if (fclose(f) != 0 && ok) ok = false, err = errno;
  ortep__free(h.p);
  if (!ok || rename(tmp, path) != 0) {
    if (ok) err = errno;
    unlink(tmp);
    return ortep__fail(ORTEP_E_IO, "writing %s failed: %s", path, strerror(err));
  }
  return ORTEP_OK;
}
