/* strmap.c: string -> u32 open-addressing map (FNV-1a, linear probing). */
#include <string.h>

#include "strmap.h"

static size_t hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
  return (size_t)h;
}

static bool grow(ortep__strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  const char **keys = ortep__calloc(cap, sizeof *keys);
  uint32_t *vals = ortep__calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    ortep__free(keys), ortep__free(vals);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = hash(m->keys[i]) & (cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    vals[j] = m->vals[i];
  }
  ortep__free(m->keys), ortep__free(m->vals);
  m->keys = keys, m->vals = vals, m->cap = cap;
  return true;
}

bool ortep__strmap_put(ortep__strmap *m, const char *key, uint32_t val) {
  if ((m->count + 1) * 2 > m->cap && !grow(m)) return false;
  size_t j = hash(key) & (m->cap - 1);
  while (m->keys[j] && strcmp(m->keys[j], key) != 0) j = (j + 1) & (m->cap - 1);
  if (!m->keys[j]) m->count++;
  m->keys[j] = key;
  m->vals[j] = val;
  return true;
}

bool ortep__strmap_get(const ortep__strmap *m, const char *key, uint32_t *val) {
  if (!m->cap) return false;
  size_t j = hash(key) & (m->cap - 1);
  while (m->keys[j]) {
    if (strcmp(m->keys[j], key) == 0) {
      if (val) *val = m->vals[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

void ortep__strmap_free(ortep__strmap *m) {
  ortep__free(m->keys), ortep__free(m->vals);
  memset(m, 0, sizeof *m);
}

char *ortep__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = ortep__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}
