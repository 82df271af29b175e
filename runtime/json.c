/*
 * json.c: the one way ortep parses a JSON document it is handed (config.json,
 * generation settings, a safetensors header): cJSON, plus the two checks cJSON
 * leaves out and Hugging Face's readers would disagree on.
 *
 * Duplicate keys: cJSON keeps the first value, Python's json (and so every
 * Hugging Face tool) the last, so a file with `"rope_scaling": null, ...,
 * "rope_scaling": {...}` would load here with a setting silently different
 * from what its authors run. A duplicate anywhere is refused, naming it.
 * Trailing bytes: anything but whitespace after the value means the file is
 * not what it claims (two documents concatenated, a truncated edit), and is
 * refused too.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A duplicate key in this object or any object below it; *dup names it. */
static ortep_status find_duplicate(const cJSON *node, const char *what, const char **dup) {
  for (; node; node = node->next) {
    if (cJSON_IsObject(node)) {
      size_t n = 0;
      for (const cJSON *c = node->child; c; c = c->next) n++;
      if (n > 1) {
        const char **keys = ortep__malloc(n * sizeof *keys);
        if (!keys) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to check %zu keys", what, n);
        size_t i = 0;
        for (const cJSON *c = node->child; c; c = c->next) keys[i++] = c->string;
        qsort(keys, n, sizeof *keys, cmp_key);
        for (i = 1; i < n && !*dup; i++)
          if (strcmp(keys[i - 1], keys[i]) == 0) *dup = keys[i];
        ortep__free(keys);
        if (*dup) return ORTEP_OK;
      }
    }
    if ((cJSON_IsObject(node) || cJSON_IsArray(node)) && node->child) {
      ortep_status st = find_duplicate(node->child, what, dup);
      if (st != ORTEP_OK || *dup) return st;
    }
  }
  return ORTEP_OK;
}

ortep_status ortep__json_parse(const char *text, size_t len, const char *what, cJSON **out) {
  *out = NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t where = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
    size_t line = 1;
    for (size_t i = 0; i < where; i++) line += text[i] == '\n';
    return ortep__fail(ORTEP_E_FORMAT, "%s: not valid JSON (syntax error at line %zu, byte %zu)", what, line, where);
  }
  size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
  while (at < len && strchr(" \t\r\n", text[at]) && text[at]) at++;
  if (at < len) {
    cJSON_Delete(root);
    return ortep__fail(ORTEP_E_FORMAT,
                       "%s: %zu unexpected bytes after the JSON value (from byte %zu); the file must hold exactly one "
                       "JSON document",
                       what, len - at, at);
  }
  const char *dup = NULL;
  ortep_status st = find_duplicate(root, what, &dup);
  if (st == ORTEP_OK && dup)
    st = ortep__fail(ORTEP_E_FORMAT,
                     "%s: key '%s' appears twice in one object; readers disagree on which value wins (cJSON the first, "
                     "Python's json the last), so remove one",
                     what, dup);
  if (st != ORTEP_OK) {
    cJSON_Delete(root);
    return st;
  }
  *out = root;
  return ORTEP_OK;
}
