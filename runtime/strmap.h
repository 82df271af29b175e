/*
 * strmap.h: a small open-addressing map from strings to u32, for name
 * lookups at graph-build time (values, producers). Keys are borrowed: the
 * caller keeps them alive as long as the map.
 */
#ifndef ORTEP_STRMAP_H
#define ORTEP_STRMAP_H

#include "internal.h"

typedef struct ortep__strmap {
  const char **keys;
  uint32_t *vals;
  size_t cap, count;
} ortep__strmap;

/* Inserts or replaces; false only when out of memory (the map is unchanged). */
bool ortep__strmap_put(ortep__strmap *m, const char *key, uint32_t val);
/* Returns true and *val when key is present. */
bool ortep__strmap_get(const ortep__strmap *m, const char *key, uint32_t *val);
void ortep__strmap_free(ortep__strmap *m);
char *ortep__strdup(const char *s);

#endif
