/*
 * context.c: the CPU EP's context (backend_impl.h: context_source_keys,
 * save_context, load_context): the initializers it prepared (blocked,
 * quantized) as one blob that a later EP maps back and serves from, so a
 * second open prepares nothing.
 *
 * The blob, little-endian, every field checked on load:
 *   header (64 bytes): "ORTEPCPU", u32 version, u32 entries, u64 keys_bytes,
 *     u64 table_bytes, u64 data_offset, u64 total_bytes, u64 table_hash
 *     (FNV-1a of the keys and the table), 8 bytes zero
 *   keys: the EP's context_source_keys, '\n'-joined (must equal the loader's)
 *   table: per entry (ENTRY_BYTES): the source (dtype, rank, dims, the
 *     preferred block type) it was prepared from, the prepared dtype, rank
 *     and dims, the data offset and bytes, the name's length; then the names
 *   data: each entry's bytes at a 64-byte aligned offset, in table order,
 *     not overlapping, inside total_bytes.
 * Loading refuses (ORTEP_E_FORMAT, saying what is wrong) a blob of another
 * EP, layout or version, a truncated one, and any inconsistent table; the
 * prepared bytes themselves are used as they are (the caller decides whose
 * blob it is: the decoder keys its cache files by the model file).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "runtime/strmap.h"

#define MAGIC        "ORTEPCPU"
#define VERSION      1u
#define HEADER_BYTES 64u
#define ENTRY_BYTES  (4 * 4 + 2 * ORTEP_MAX_RANK * 8 + 2 * 4 + 3 * 8)
#define MAX_NAME     4096u
#define ALIGN        64u

typedef struct entry {
  char *name; /* owned */
  ortep_dtype src_dtype, prefer, dtype;
  ortep_shape src_shape, shape;
  const void *ptr;
  size_t bytes;
  bool loaded; /* from a loaded blob: ptr borrows it */
} entry;

struct ortep__cpu_context {
  entry *e;
  size_t n, cap;
  pthread_mutex_t lock;
};

ortep_status ortep__cpu_context_create(ortep__cpu_context **out) {
  ortep__cpu_context *c = ortep__calloc(1, sizeof *c);
  if (!c) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for its context", CPU_EP_NAME);
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return ORTEP_OK;
}

void ortep__cpu_context_destroy(ortep__cpu_context *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) ortep__free(c->e[i].name);
  ortep__free(c->e);
  pthread_mutex_destroy(&c->lock);
  ortep__free(c);
}

static bool same_source(const entry *x, const ortep_initializer *in) {
  return !strcmp(x->name, in->name) && x->src_dtype == in->dtype && x->prefer == in->prefer &&
         ortep_shape_equal(&x->src_shape, &in->shape);
}

ortep_status ortep__cpu_context_record(ortep__cpu_context *c, const ortep_initializer *in, ortep_dtype dtype,
                                       const ortep_shape *shape, const void *ptr, size_t bytes) {
  pthread_mutex_lock(&c->lock);
  ortep_status st = ORTEP_OK;
  char *name = ortep__strdup(in->name);
  if (!name || !ORTEP__GROW(c->e, c->cap, c->n + 1)) {
    ortep__free(name);
    st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to note what it prepared", CPU_EP_NAME);
  } else {
    c->e[c->n++] = (entry){name, in->dtype, in->prefer, dtype, in->shape, *shape, ptr, bytes, false};
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

void ortep__cpu_context_forget(ortep__cpu_context *c, const void *ptr) {
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < c->n; i++)
    if (!c->e[i].loaded && c->e[i].ptr == ptr) {
      ortep__free(c->e[i].name);
      c->e[i--] = c->e[--c->n];
    }
  pthread_mutex_unlock(&c->lock);
}

bool ortep__cpu_context_lookup(ortep__cpu_context *c, const ortep_initializer *in, ortep_dtype dtype,
                               const ortep_shape *shape, size_t bytes, const void **ptr) {
  bool found = false;
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < c->n && !found; i++) {
    const entry *x = &c->e[i];
    if (!x->loaded || !same_source(x, in)) continue;
    if (x->dtype == dtype && x->bytes == bytes && ortep_shape_equal(&x->shape, shape)) {
      *ptr = x->ptr, found = true;
    } else {
      ortep__free(c->e[i].name);
      c->e[i--] = c->e[--c->n];
    }
  }
  pthread_mutex_unlock(&c->lock);
  return found;
}

/* --- the blob ------------------------------------------------------------------ */
static void put32(uint8_t **p, uint32_t v) {
  for (int i = 0; i < 4; i++) *(*p)++ = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t **p, uint64_t v) {
  for (int i = 0; i < 8; i++) *(*p)++ = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t **p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t) * (*p)++ << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t **p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t) * (*p)++ << (8 * i);
  return v;
}
static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static void put_shape(uint8_t **p, ortep_dtype dt, const ortep_shape *s) {
  put32(p, (uint32_t)dt), put32(p, s->rank);
  for (int i = 0; i < ORTEP_MAX_RANK; i++) put64(p, i < (int)s->rank ? (uint64_t)s->dims[i] : 0);
}

/* Writes through the caller's function, with zeros to pad. */
typedef struct out {
  ortep_context_write_fn write;
  void *ctx;
  bool ok;
  size_t at;
} out;
static void emit(out *o, const void *p, size_t n) {
  if (o->ok && n) o->ok = o->write(o->ctx, p, n);
  o->at += n;
}
static void pad(out *o, size_t to) {
  static const uint8_t zeros[ALIGN];
  while (o->at < to) emit(o, zeros, to - o->at < ALIGN ? to - o->at : ALIGN);
}

ortep_status ortep__cpu_context_save(ortep__cpu_context *c, const char *keys, ortep_context_write_fn write, void *ctx,
                                     size_t *len) {
  pthread_mutex_lock(&c->lock);
  size_t names = 0, data = 0, kb = strlen(keys);
  for (size_t i = 0; i < c->n; i++) names += strlen(c->e[i].name), data = up(data) + c->e[i].bytes;
  size_t table = c->n * ENTRY_BYTES + names, data_off = up(HEADER_BYTES + kb + table), total = data_off + up(data);
  *len = total;
  if (!write) {
    pthread_mutex_unlock(&c->lock);
    return ORTEP_OK;
  }
  /* the table first (it is hashed into the header) */
  uint8_t *t = ortep__malloc(table ? table : 1);
  if (!t) {
    pthread_mutex_unlock(&c->lock);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a context table of %zu bytes", CPU_EP_NAME, table);
  }
  uint8_t *p = t;
  size_t off = data_off;
  for (size_t i = 0; i < c->n; i++) {
    const entry *x = &c->e[i];
    put_shape(&p, x->src_dtype, &x->src_shape);
    put32(&p, (uint32_t)x->prefer);
    put_shape(&p, x->dtype, &x->shape);
    put32(&p, (uint32_t)strlen(x->name));
    put64(&p, off), put64(&p, x->bytes), put64(&p, 0);
    off += up(x->bytes);
  }
  for (size_t i = 0; i < c->n; i++) memcpy(p, c->e[i].name, strlen(c->e[i].name)), p += strlen(c->e[i].name);
  uint8_t h[HEADER_BYTES], *hp = h;
  memcpy(hp, MAGIC, 8), hp += 8;
  put32(&hp, VERSION), put32(&hp, (uint32_t)c->n);
  put64(&hp, kb), put64(&hp, table), put64(&hp, data_off), put64(&hp, total);
  put64(&hp, ortep__fnv1a(ortep__fnv1a(ORTEP__FNV_SEED, keys, kb), t, table)), put64(&hp, 0);
  out o = {write, ctx, true, 0};
  emit(&o, h, HEADER_BYTES);
  emit(&o, keys, kb);
  emit(&o, t, table);
  pad(&o, data_off);
  for (size_t i = 0; i < c->n && o.ok; i++) {
    emit(&o, c->e[i].ptr, c->e[i].bytes);
    pad(&o, up(o.at));
  }
  pthread_mutex_unlock(&c->lock);
  ortep__free(t);
  if (!o.ok)
    return ortep__fail(ORTEP_E_IO, "%s: writing its context stopped after %zu of %zu bytes", CPU_EP_NAME, o.at, total);
  return ORTEP_OK;
}

#define BAD(...) ortep__fail(ORTEP_E_FORMAT, "cpu_ep context: " __VA_ARGS__)

static ortep_status get_shape(const uint8_t **p, const char *what, size_t i, ortep_dtype *dt, ortep_shape *s) {
  uint32_t d = get32(p), rank = get32(p);
  if (d >= ORTEP_DTYPE_COUNT || rank > ORTEP_MAX_RANK)
    return BAD("entry %zu: its %s dtype %u or rank %u is not one ortep knows", i, what, d, rank);
  *dt = (ortep_dtype)d;
  s->rank = rank;
  for (int j = 0; j < ORTEP_MAX_RANK; j++) {
    uint64_t v = get64(p);
    if (j < (int)rank && v > ((uint64_t)1 << 40))
      return BAD("entry %zu: a %s dimension of %llu", i, what, (unsigned long long)v);
    s->dims[j] = j < (int)rank ? (int64_t)v : 0;
  }
  return ORTEP_OK;
}

ortep_status ortep__cpu_context_load(ortep__cpu_context *c, const char *keys, const void *blob, size_t len) {
  const uint8_t *base = blob, *p = base;
  if ((uintptr_t)blob % ALIGN)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: a context blob at %p is not %u-byte aligned; its weights are served in place, so pass "
                       "a mapped file or memory from aligned_alloc(%u, ...)",
                       CPU_EP_NAME, blob, ALIGN, ALIGN);
  if (len < HEADER_BYTES || memcmp(p, MAGIC, 8))
    return BAD("not a CPU EP context (%s)", len < HEADER_BYTES ? "shorter than its header" : "no ORTEPCPU magic");
  p += 8;
  uint32_t version = get32(&p), n = get32(&p);
  uint64_t kb = get64(&p), table = get64(&p), data_off = get64(&p), total = get64(&p), hash = get64(&p);
  if (version != VERSION) return BAD("format version %u; this build reads version %u (rebuild it)", version, VERSION);
  if (total != len) return BAD("%zu bytes, but its header says %llu (truncated?)", len, (unsigned long long)total);
  if (kb > len || table > len || n > table / ENTRY_BYTES || HEADER_BYTES + kb + table > data_off || data_off > len ||
      data_off % ALIGN)
    return BAD("its header's sizes (keys %llu, table %llu for %u entries, data at %llu) do not fit its %zu bytes",
               (unsigned long long)kb, (unsigned long long)table, n, (unsigned long long)data_off, len);
  if (kb != strlen(keys) || memcmp(base + HEADER_BYTES, keys, kb))
    return BAD("made for another EP, layout or version (its keys: \"%.*s\"; this EP's: \"%s\")",
               (int)(kb < 200 ? kb : 200), (const char *)base + HEADER_BYTES, keys);
  const uint8_t *t = base + HEADER_BYTES + kb;
  if (ortep__fnv1a(ortep__fnv1a(ORTEP__FNV_SEED, keys, kb), t, table) != hash)
    return BAD("its table is damaged (hash mismatch)");
  entry *e = ortep__calloc(n ? n : 1, sizeof *e);
  if (!e) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a context of %u entries", CPU_EP_NAME, n);
  ortep_status st = ORTEP_OK;
  const uint8_t *names = t + (size_t)n * ENTRY_BYTES, *names_end = t + table;
  uint64_t next = data_off;
  p = t;
  for (uint32_t i = 0; st == ORTEP_OK && i < n; i++) {
    entry *x = &e[i];
    uint32_t prefer;
    if ((st = get_shape(&p, "source", i, &x->src_dtype, &x->src_shape)) != ORTEP_OK) break;
    prefer = get32(&p);
    if ((st = get_shape(&p, "prepared", i, &x->dtype, &x->shape)) != ORTEP_OK) break;
    uint32_t nl = get32(&p);
    uint64_t off = get64(&p), bytes = get64(&p);
    (void)get64(&p);
    size_t want;
    if (prefer > ORTEP_DTYPE_COUNT || (prefer != ORTEP_DTYPE_COUNT && !ortep_dtype_is_quantized((ortep_dtype)prefer)))
      st = BAD("entry %u: preferred dtype %u", i, prefer);
    else if (nl == 0 || nl > MAX_NAME || nl > (size_t)(names_end - names))
      st = BAD("entry %u: a name of %u bytes runs past the table", i, nl);
    else if (ortep_shape_bytes(&x->shape, x->dtype, &want) != ORTEP_OK || want != bytes)
      st = BAD("entry %u: %llu bytes for its %s shape", i, (unsigned long long)bytes, ortep_dtype_name(x->dtype));
    else if (off != next || off % ALIGN || bytes > len - off)
      st = BAD("entry %u: data at %llu (+%llu bytes) is not where the table's order puts it inside the %zu bytes", i,
               (unsigned long long)off, (unsigned long long)bytes, len);
    if (st != ORTEP_OK) break;
    ortep_clear_error();
    x->prefer = (ortep_dtype)prefer;
    if (!(x->name = ortep__malloc(nl + 1))) {
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a context entry's name", CPU_EP_NAME);
      break;
    }
    memcpy(x->name, names, nl), x->name[nl] = '\0', names += nl;
    if (strlen(x->name) != nl) st = BAD("entry %u: its name holds a NUL byte", i);
    x->ptr = base + off, x->bytes = (size_t)bytes, x->loaded = true;
    next = off + (bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  if (st == ORTEP_OK && names != names_end) st = BAD("its table has %td bytes after the last name", names_end - names);
  pthread_mutex_lock(&c->lock);
  if (st == ORTEP_OK && !ORTEP__GROW(c->e, c->cap, c->n + n))
    st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for a context of %u entries", CPU_EP_NAME, n);
  if (st == ORTEP_OK) memcpy(c->e + c->n, e, n * sizeof *e), c->n += n;
  pthread_mutex_unlock(&c->lock);
  if (st != ORTEP_OK)
    for (uint32_t i = 0; i < n; i++) ortep__free(e[i].name);
  ortep__free(e);
  return st;
}
