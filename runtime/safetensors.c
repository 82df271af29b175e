/*
 * safetensors.c: reading (mmap + validation) and writing safetensors files.
 *
 * Validation is done once, at open, on the whole header; afterwards entries
 * are plain records with pointers into the mapping. Every check compares
 * 64-bit quantities against the real data length before any pointer is
 * formed, so a hostile header cannot make us read outside the file.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strmap.h"
#include "ortep/safetensors.h"

#define MAX_HEADER ((uint64_t)100 << 20) /* the format's own limit */

struct ortep_safetensors {
  void *map;
  size_t map_len; /* 0 when the bytes are the caller's */
  ortep_safetensors_entry *entries;
  size_t n;
  ortep__strmap index;
};

static const struct {
  const char *name;
  ortep_dtype dtype;
} dtypes[] = {{"F32", ORTEP_DTYPE_F32}, {"F16", ORTEP_DTYPE_F16}, {"BF16", ORTEP_DTYPE_BF16}, {"I32", ORTEP_DTYPE_I32},
              {"I64", ORTEP_DTYPE_I64}, {"U8", ORTEP_DTYPE_U8},   {"BOOL", ORTEP_DTYPE_BOOL}};
/* Valid in the format, but not types ortep computes with. */
static const char *const known_unsupported[] = {"F64", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2"};

static const char *dtype_tag(ortep_dtype d) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (dtypes[i].dtype == d) return dtypes[i].name;
  return NULL;
}

void ortep_safetensors_close(ortep_safetensors *st) {
  if (st == ORTEP_OK) return;
  for (size_t i = 0; i < st->n; i++) ortep__free((char *)(uintptr_t)st->entries[i].name);
  ortep__free(st->entries);
  ortep__strmap_free(&st->index);
  if (st->map_len) munmap(st->map, st->map_len);
  ortep__free(st);
}

size_t ortep__safetensors_index(const ortep_safetensors *st, const ortep_safetensors_entry *e) {
  ortep__assert(e >= st->entries && e < st->entries + st->n);
  return (size_t)(e - st->entries);
}

void ortep__release_pages(const void *data, size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)data + page - 1) / page * page, hi = ((uintptr_t)data + size) / page * page;
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint64_t ortep__fnv1a(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

void ortep__safetensors_release(const ortep_safetensors *st, const ortep_safetensors_entry *e, size_t offset,
                                size_t bytes) {
  if (st->map_len && offset <= e->size && bytes <= e->size - offset && bytes)
    ortep__release_pages((const char *)e->data + offset, bytes);
}

typedef struct span {
  uint64_t begin, end;
  size_t entry;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

#define BAD(...) (st_fail = ortep__fail(ORTEP_E_FORMAT, __VA_ARGS__))

/* A JSON number that is a whole count below 2^53. The range is checked
 * before any conversion: casting an out-of-range double is undefined. */
static bool is_count(const cJSON *d) {
  if (!cJSON_IsNumber(d)) return false;
  double v = d->valuedouble;
  return v >= 0 && v <= 9.0e15 && v == (double)(int64_t)v;
}

static ortep_status parse_entry(const cJSON *item, const unsigned char *data, uint64_t data_len,
                                ortep_safetensors_entry *e, span *sp) {
  ortep_status st_fail = ORTEP_OK;
  const char *name = item->string;
  if (!cJSON_IsObject(item)) return BAD("safetensors: tensor '%s': its entry is not a JSON object", name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dt)) return BAD("safetensors: tensor '%s': 'dtype' is missing or not a string", name);
  bool found = false;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0] && !found; i++)
    if (strcmp(dt->valuestring, dtypes[i].name) == 0) e->dtype = dtypes[i].dtype, found = true;
  if (!found) {
    for (size_t i = 0; i < sizeof known_unsupported / sizeof known_unsupported[0]; i++)
      if (strcmp(dt->valuestring, known_unsupported[i]) == 0)
        return BAD(
            "safetensors: tensor '%s': dtype %s is valid safetensors but not supported by ortep (supported: "
            "F32, F16, BF16, I32, I64, U8, BOOL); convert the checkpoint",
            name, dt->valuestring);
    return BAD(
        "safetensors: tensor '%s': unknown dtype '%.32s' (known: F32, F16, BF16, I32, I64, U8, BOOL, F64, I8, "
        "I16, U16, U32, U64, F8_E4M3, F8_E5M2)",
        name, dt->valuestring);
  }
  if (!cJSON_IsArray(shape)) return BAD("safetensors: tensor '%s': 'shape' is missing or not an array", name);
  int rank = cJSON_GetArraySize(shape);
  if (rank > ORTEP_MAX_RANK)
    return BAD("safetensors: tensor '%s': rank %d exceeds ortep's maximum of %d", name, rank, ORTEP_MAX_RANK);
  e->shape.rank = (uint32_t)rank;
  uint64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    const cJSON *d = cJSON_GetArrayItem(shape, i);
    if (!is_count(d)) return BAD("safetensors: tensor '%s': shape dimension %d is not a non-negative integer", name, i);
    uint64_t v = (uint64_t)d->valuedouble;
    e->shape.dims[i] = (int64_t)v;
    if (v && numel > UINT64_MAX / v) return BAD("safetensors: tensor '%s': element count overflows", name);
    numel *= v;
  }
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
    return BAD("safetensors: tensor '%s': 'data_offsets' must be an array of two integers", name);
  uint64_t o[2];
  for (int i = 0; i < 2; i++) {
    const cJSON *d = cJSON_GetArrayItem(offs, i);
    if (!is_count(d)) return BAD("safetensors: tensor '%s': data offset %d is not a non-negative integer", name, i);
    o[i] = (uint64_t)d->valuedouble;
  }
  if (o[0] > o[1])
    return BAD("safetensors: tensor '%s': data offsets [%llu, %llu) are reversed", name, (unsigned long long)o[0],
               (unsigned long long)o[1]);
  if (o[1] > data_len)
    return BAD("safetensors: tensor '%s': data offsets [%llu, %llu) run past the %llu bytes of data (truncated file?)",
               name, (unsigned long long)o[0], (unsigned long long)o[1], (unsigned long long)data_len);
  uint64_t es = ortep_dtype_size(e->dtype);
  if (numel > UINT64_MAX / es || o[1] - o[0] != numel * es)
    return BAD("safetensors: tensor '%s': %llu bytes at [%llu, %llu) but %s x %llu elements needs %llu", name,
               (unsigned long long)(o[1] - o[0]), (unsigned long long)o[0], (unsigned long long)o[1], dt->valuestring,
               (unsigned long long)numel, (unsigned long long)(numel * es));
  e->data = data + o[0];
  e->size = (size_t)(o[1] - o[0]);
  sp->begin = o[0];
  sp->end = o[1];
  return ORTEP_OK;
}

static ortep_status parse(const unsigned char *bytes, size_t len, ortep_safetensors *st) {
  ortep_status st_fail = ORTEP_OK;
  if (len < 8) return BAD("safetensors: the file has %zu bytes, fewer than the 8-byte header length", len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
  if (hlen > len - 8)
    return BAD(
        "safetensors: header length %llu runs past the end of the file (%zu bytes); the file is truncated or "
        "not safetensors",
        (unsigned long long)hlen, len);
  if (hlen > MAX_HEADER)
    return BAD("safetensors: header length %llu exceeds the format's 100 MiB limit", (unsigned long long)hlen);
  const char *header = (const char *)bytes + 8;
  cJSON *root = NULL;
  ortep_status prc = ortep__json_parse(header, (size_t)hlen, "safetensors header", &root);
  if (prc != ORTEP_OK) return prc;
  ortep_status rc = ORTEP_OK;
  span *spans = NULL;
  if (!cJSON_IsObject(root)) {
    rc = BAD("safetensors: the header is JSON but not an object");
    goto out;
  }
  size_t n = 0;
  for (const cJSON *it = root->child; it; it = it->next) n += strcmp(it->string, "__metadata__") != 0;
  st->entries = ortep__calloc(n ? n : 1, sizeof *st->entries);
  spans = ortep__calloc(n ? n : 1, sizeof *spans);
  if (!st->entries || !spans) {
    rc = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory for %zu entries", n);
    goto out;
  }
  const unsigned char *data = bytes + 8 + hlen;
  uint64_t data_len = len - 8 - hlen;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (strcmp(it->string, "__metadata__") == 0) continue;
    ortep_safetensors_entry *e = &st->entries[st->n];
    if ((rc = parse_entry(it, data, data_len, e, &spans[st->n])) != ORTEP_OK) goto out;
    if (ortep__strmap_get(&st->index, it->string, NULL)) {
      rc = BAD("safetensors: tensor '%s' appears twice in the header", it->string);
      goto out;
    }
    if (!(e->name = ortep__strdup(it->string)) || !ortep__strmap_put(&st->index, e->name, (uint32_t)st->n)) {
      ortep__free((char *)(uintptr_t)e->name);
      e->name = NULL;
      rc = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory for tensor names");
      goto out;
    }
    spans[st->n].entry = st->n;
    st->n++;
  }
  qsort(spans, st->n, sizeof *spans, cmp_span);
  for (size_t i = 1; i < st->n; i++) {
    if (spans[i].begin == spans[i].end) continue; /* an empty tensor overlaps nothing */
    for (size_t j = i; j-- > 0;) {
      if (spans[j].begin == spans[j].end) continue;
      if (spans[i].begin < spans[j].end) {
        rc =
            BAD("safetensors: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                st->entries[spans[j].entry].name, (unsigned long long)spans[j].begin, (unsigned long long)spans[j].end,
                st->entries[spans[i].entry].name, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
        goto out;
      }
      break;
    }
  }
out:
  ortep__free(spans);
  cJSON_Delete(root);
  return rc;
}

ortep_status ortep_safetensors_parse(const void *bytes, size_t len, ortep_safetensors **out) {
  if (!out || (len && !bytes)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_safetensors_parse: NULL argument");
  *out = NULL;
  ortep_safetensors *st = ortep__calloc(1, sizeof *st);
  if (st == ORTEP_OK) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory");
  ortep_status rc = parse(bytes, len, st);
  if (rc != ORTEP_OK) {
    ortep_safetensors_close(st);
    return rc;
  }
  *out = st;
  return ORTEP_OK;
}

ortep_status ortep_safetensors_open(const char *path, ortep_safetensors **out) {
  if (!out || !path) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_safetensors_open: NULL argument");
  *out = NULL;
  int fd;
  size_t len;
  ortep_status ost = ortep__open_regular(path, &fd, &len);
  if (ost != ORTEP_OK) return ost;
  void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (map == MAP_FAILED) return ortep__fail(ORTEP_E_IO, "cannot map %s (%zu bytes): %s", path, len, strerror(errno));
  ortep_safetensors *st = ortep__calloc(1, sizeof *st);
  if (st == ORTEP_OK) {
    if (len) munmap(map, len);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory");
  }
  st->map = map;
  st->map_len = len;
  ortep_status rc = parse(map, len, st);
  if (rc != ORTEP_OK) {
    ortep_safetensors_close(st);
    return ortep__wrap(rc, "%s", path);
  }
  *out = st;
  return ORTEP_OK;
}

size_t ortep_safetensors_count(const ortep_safetensors *st) { return st ? st->n : 0; }
const ortep_safetensors_entry *ortep_safetensors_at(const ortep_safetensors *st, size_t i) {
  return st && i < st->n ? &st->entries[i] : NULL;
}
const ortep_safetensors_entry *ortep_safetensors_find(const ortep_safetensors *st, const char *name) {
  uint32_t i;
  return st && name && ortep__strmap_get(&st->index, name, &i) ? &st->entries[i] : NULL;
}

static ortep_status copy_data(void *user, size_t index, void *scratch) {
  const ortep_safetensors_entry *e = user;
  memcpy(scratch, e[index].data, e[index].size);
  return ORTEP_OK;
}

ortep_status ortep_safetensors_write(const char *path, const ortep_safetensors_entry *e, size_t n) {
  for (size_t i = 0; i < n && e; i++)
    if (e[i].size && !e[i].data)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_safetensors_write: tensor '%s' has no data", e[i].name);
  return ortep_safetensors_write_stream(path, e, n, copy_data, (void *)(uintptr_t)e);
}

ortep_status ortep_safetensors_write_stream(const char *path, const ortep_safetensors_entry *e, size_t n,
                                            ortep_safetensors_producer produce, void *user) {
  if (!path || (n && !e) || !produce)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_safetensors_write: NULL argument");
  cJSON *root = cJSON_CreateObject();
  if (!root) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory for the header");
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    const char *tag = dtype_tag(e[i].dtype);
    cJSON *t = cJSON_AddObjectToObject(root, e[i].name);
    if (!tag || !t) {
      cJSON_Delete(root);
      return ortep__fail(tag ? ORTEP_E_OUT_OF_MEMORY : ORTEP_E_INVALID_ARGUMENT,
                         "safetensors: cannot write tensor '%s' (dtype %s)", e[i].name, ortep_dtype_name(e[i].dtype));
    }
    cJSON_AddStringToObject(t, "dtype", tag);
    cJSON *shape = cJSON_AddArrayToObject(t, "shape");
    for (uint32_t d = 0; d < e[i].shape.rank; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e[i].shape.dims[d]));
    cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + e[i].size)));
    off += e[i].size;
  }
  cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  char *header = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!header) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "safetensors: no memory to render the header");
  size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    cJSON_free(header);
    return ortep__fail(ORTEP_E_IO, "cannot create %s: %s", tmp, strerror(errno));
  }
  size_t biggest = 1;
  for (size_t i = 0; i < n; i++) biggest = e[i].size > biggest ? e[i].size : biggest;
  void *scratch = ortep__malloc(biggest);
  unsigned char lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  bool ok = scratch && fwrite(lenb, 1, 8, f) == 8 && fwrite(header, 1, hl, f) == hl;
  for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
  ortep_status produced = ORTEP_OK;
  for (size_t i = 0; ok && i < n; i++) {
    if (!e[i].size) continue;
    if ((produced = produce(user, i, scratch)) != ORTEP_OK) break;
    ok = fwrite(scratch, 1, e[i].size, f) == e[i].size;
  }
  int saved = scratch ? errno : ENOMEM;
  ok = (fclose(f) == 0) && ok && produced == ORTEP_OK;
  cJSON_free(header);
  ortep__free(scratch);
  if (!ok || rename(tmp, path) != 0) {
    if (ok) saved = errno;
    unlink(tmp);
    if (produced != ORTEP_OK) return ortep__wrap(produced, "writing %s", path);
    return ortep__fail(ORTEP_E_IO, "writing %s failed: %s", path, strerror(saved));
  }
  return ORTEP_OK;
}
