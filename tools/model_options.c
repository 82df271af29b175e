/*
 * model_options.c: the options every ortep program takes to name a model
 * (model_options.h).
 */
#include "model_options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool tool_parse_whole(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (arg[0] < '0' || arg[0] > '9') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = (uint64_t)v;
  return true;
}

int tool_usage_error(const tool_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s %s: ", m->prog, m->cmd);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun '%s %s --help' for the options.\n", m->prog, m->cmd);
  return 2;
}

static int one_of(const tool_model *m, const char *opt, const char *v, const char *const *names, size_t n,
                  const char *list) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v, names[i])) return 0;
  return tool_usage_error(m, "%s '%s' is not one of %s", opt, v, list);
}

bool tool_model_option(tool_model *m, int c, const char *arg, int *rc) {
  *rc = 0;
  switch (c) {
    case TOOL_OPT_MODEL: m->model = arg; return true;
    case TOOL_OPT_PRESET: m->preset = arg; return true;
    case TOOL_OPT_DTYPE: m->dtype = arg; return true;
    case TOOL_OPT_EP: m->ep = arg; return true;
    case TOOL_OPT_WEIGHTS: m->weights = arg; return true;
    case TOOL_OPT_LAYOUT: m->layout = arg; return true;
    case TOOL_OPT_KV_DTYPE: m->kv_dtype = arg; return true;
    case TOOL_OPT_PRODUCTS: m->products = arg; return true;
    case TOOL_OPT_EMBEDDING_DTYPE: m->embedding_dtype = arg; return true;
    case TOOL_OPT_CACHE: m->cache = arg; return true;
    case TOOL_OPT_CACHE_MAX: m->cache_max = arg; return true;
    case TOOL_OPT_THREADS: {
      uint64_t v;
      if (tool_parse_whole(arg, 1, 1024, &v))
        m->threads = (long)v;
      else
        *rc = tool_usage_error(m, "--threads '%s' is not a whole number in [1, 1024]", arg);
      return true;
    }
    default: return false;
  }
}

/* A byte count as ortep.weights_cache_max takes it: digits with an optional
 * K, M, G or T (powers of 1024, then an optional "iB" or "B"), or
 * "unlimited"; the library checks it again at open. */
static bool byte_count(const char *s) {
  if (!strcmp(s, "unlimited")) return true;
  if (*s < '0' || *s > '9') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return false;
  const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
  if (*end && !u) return false;
  if (u) {
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'B' || *end == 'b') end++;
  }
  return !*end && (!u || v <= (~0ULL >> (10 * (u - units + 1))));
}

int tool_model_check(tool_model *m, bool default_preset) {
  static const char *const eps[] = {"auto", "cpu", "cuda"}, *const dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0"},
                           *const edtypes[] = {"q8_0", "q4_0", "stored"};
  static const char *const weights[] = {"map", "read"}, *const layouts[] = {"auto", "blocked", "row_major"},
                           *const kv[] = {"f32", "f16", "bf16"}, *const products[] = {"auto", "bf16", "f32"};
  if (m->model && m->preset) return tool_usage_error(m, "--model and --preset exclude each other; give one");
  if (!m->model && !m->preset) {
    if (!default_preset) return tool_usage_error(m, "give --model DIR or --preset NAME");
    m->preset = "tiny";
  }
  if (!m->ep) m->ep = "auto";
  if (!m->dtype) m->dtype = "f32";
  int rc = one_of(m, "--ep", m->ep, eps, 3, "auto, cpu, cuda");
  if (!rc) rc = one_of(m, "--dtype", m->dtype, dtypes, 5, "f32, f16, bf16, q8_0, q4_0");
  if (!rc && m->embedding_dtype)
    rc = one_of(m, "--embedding-dtype", m->embedding_dtype, edtypes, 3, "q8_0, q4_0, stored");
  if (!rc && m->embedding_dtype && !tool_model_quantized(m))
    rc = tool_usage_error(m, "--embedding-dtype goes with --dtype q8_0 or q4_0 (the weights quantized at open)");
  if (!rc && m->weights) rc = one_of(m, "--weights", m->weights, weights, 2, "map, read");
  if (!rc && m->layout) rc = one_of(m, "--layout", m->layout, layouts, 3, "auto, blocked, row_major");
  if (!rc && m->kv_dtype) rc = one_of(m, "--kv-dtype", m->kv_dtype, kv, 3, "f32, f16, bf16");
  if (!rc && m->products) rc = one_of(m, "--products", m->products, products, 3, "auto, bf16, f32");
  if (!rc && m->cache && !*m->cache) rc = tool_usage_error(m, "--weights-cache is empty; give a directory or off");
  if (!rc && m->cache_max && !byte_count(m->cache_max))
    rc = tool_usage_error(m,
                          "--weights-cache-max '%s' is not a byte count; use digits with an optional K, M, G or T "
                          "(e.g. 8G) or unlimited",
                          m->cache_max);
  return rc;
}

int tool_model_resolve(tool_model *m, bool announce) {
  if (m->model) {
    snprintf(m->dir, sizeof m->dir, "%s", m->model);
    return 0;
  }
  ortep_dtype dt;
  ortep_dtype_parse(m->dtype, &dt);                        /* checked by tool_model_check */
  if (ortep_dtype_is_quantized(dt)) dt = ORTEP_DTYPE_BF16; /* written in bf16, quantized at open */
  if (announce)
    fprintf(stderr, "%s %s: the synthetic %s preset (%s%s), written to the cache on first use\n", m->prog, m->cmd,
            m->preset, ortep_dtype_name(dt), tool_model_quantized(m) ? ", quantized at open" : "");
  if (ortep_model_synthetic_cached(m->preset, dt, m->dir, sizeof m->dir, NULL) == ORTEP_OK) return 0;
  if (ortep_last_status() == ORTEP_E_INVALID_ARGUMENT) /* an unknown preset */
    return tool_usage_error(m, "--preset '%s': %s", m->preset, ortep_last_error());
  fprintf(stderr, "%s %s: %s\n", m->prog, m->cmd, ortep_last_error());
  return 1;
}

bool tool_model_quantized(const tool_model *m) {
  return m->dtype && (!strcmp(m->dtype, "q8_0") || !strcmp(m->dtype, "q4_0"));
}

int tool_model_config(const tool_model *m, ortep_config **out) {
  *out = NULL;
  bool q = tool_model_quantized(m);
  if (!m->threads && !m->weights && !m->layout && !m->kv_dtype && !m->products && !q && !m->cache && !m->cache_max)
    return 0;
  char threads[24];
  snprintf(threads, sizeof threads, "%ld", m->threads);
  ortep_config *c = NULL;
  if (ortep_config_create(&c) != ORTEP_OK || (m->threads && ortep_config_set(c, "cpu.threads", threads) != ORTEP_OK) ||
      (m->weights && ortep_config_set(c, "ortep.weights", m->weights) != ORTEP_OK) ||
      (m->layout && ortep_config_set(c, "ortep.weights_layout", m->layout) != ORTEP_OK) ||
      (m->kv_dtype && ortep_config_set(c, "ortep.kv_dtype", m->kv_dtype) != ORTEP_OK) ||
      (m->products && ortep_config_set(c, "cpu.products", m->products) != ORTEP_OK) ||
      (q && ortep_config_set(c, "ortep.weights_dtype", m->dtype) != ORTEP_OK) ||
      (m->embedding_dtype && ortep_config_set(c, "ortep.embedding_dtype", m->embedding_dtype) != ORTEP_OK) ||
      (m->cache && ortep_config_set(c, "ortep.weights_cache", m->cache) != ORTEP_OK) ||
      (m->cache_max && ortep_config_set(c, "ortep.weights_cache_max", m->cache_max) != ORTEP_OK)) {
    fprintf(stderr, "%s %s: %s\n", m->prog, m->cmd, ortep_last_error());
    ortep_config_destroy(c);
    return 1;
  }
  *out = c;
  return 0;
}

void tool_progress(void *ctx, const char *what, size_t done, size_t total) {
  tool_model *m = ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  if (m->progress_t0 == 0.0) m->progress_t0 = now;
  bool finished = done >= total;
  if (!isatty(2)) {
    if (finished && now - m->progress_t0 > 1.0)
      fprintf(stderr, "%s %s: %s: done (%.1f s)\n", m->prog, m->cmd, what, now - m->progress_t0);
  } else if (now - m->progress_t0 > 1.0 || (m->progress_shown && finished)) {
    int percent = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (!m->progress_shown || percent != m->progress_percent)
      fprintf(stderr, "\r%s %s: %s: %3d%%", m->prog, m->cmd, what, percent);
    m->progress_percent = percent;
    m->progress_shown = true;
  }
  if (finished) {
    if (m->progress_shown) fprintf(stderr, " (%.1f s)\n", now - m->progress_t0);
    m->progress_t0 = 0.0, m->progress_shown = false;
  }
}
