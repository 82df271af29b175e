/* common.c: the helpers every ortep-bench subcommand uses (bench.h). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "blas_core.h"     /* tool_blas_label */
#include "model_options.h" /* tool_parse_whole */

/* the argv the option loop is walking: a new one restarts getopt */
static char **bench_last_argv;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
void bench_spread(double *v, size_t n, double scale, const char *fmt, char *out, size_t len) {
  double lo = bench_min(v, n) * scale, hi = bench_max(v, n) * scale, med = bench_median(v, n) * scale;
  char a[32], b[32], c[32];
  snprintf(a, sizeof a, fmt, med), snprintf(b, sizeof b, fmt, lo), snprintf(c, sizeof c, fmt, hi);
  snprintf(out, len, n > 1 ? "%s (%s-%s)" : "%s", a, b, c);
}

double bench_min(const double *v, size_t n) {
  double m = n ? v[0] : 0;
  for (size_t i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}
double bench_max(const double *v, size_t n) {
  double m = n ? v[0] : 0;
  for (size_t i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        c++;
        while (*c == ' ') c++;
        c[strcspn(c, "\n")] = '\0';
        snprintf(buf, len, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

void bench_fill_weights(void *w, size_t bytes, ortep_dtype dt) {
  if (dt == ORTEP_DTYPE_F32)
    for (size_t i = 0; i < bytes / 4; i++) ((float *)w)[i] = 1.0f + (float)(i % 61) / 64.0f;
  else if (ortep_dtype_is_quantized(dt)) /* f16 scales 2^-7 and small quants: any bytes are valid blocks */
    for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)w)[i] = (uint16_t)(0x2000u + i % 61);
  else
    for (size_t i = 0; i < bytes / 2; i++)
      ((uint16_t *)w)[i] = (uint16_t)((dt == ORTEP_DTYPE_BF16 ? 0x3f80u : 0x3c00u) + i % 61);
}

size_t bench_blocked_rows(ortep_dtype dt) { return ortep_dtype_is_quantized(dt) ? 16 : 4; }

ortep_shape bench_blocked_shape(ortep_dtype dt, size_t n, size_t k) {
  size_t rows = bench_blocked_rows(dt), cols = ortep_dtype_is_quantized(dt) ? 32 : 16;
  return (ortep_shape){4, {(int64_t)(n / rows), (int64_t)(k / cols), (int64_t)rows, (int64_t)cols}};
}

cJSON *bench_machine_json(void) {
  char cpu[256];
  cpu_model(cpu, sizeof cpu);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "cpu", cpu);
  cJSON_AddNumberToObject(m, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
  cJSON_AddStringToObject(m, "blas_core", ortep_cpu_blas_core());
  ortep_cuda_device_info g;
  if (ortep_cuda_available(NULL, 0) && ortep_cuda_device_info_get(0, &g) == ORTEP_OK) {
    cJSON *o = cJSON_AddObjectToObject(m, "gpu");
    char v[32];
    cJSON_AddStringToObject(o, "name", g.name);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)g.memory_bytes);
    cJSON_AddNumberToObject(o, "multiprocessors", g.multiprocessors);
    snprintf(v, sizeof v, "%d.%d", g.compute_major, g.compute_minor);
    cJSON_AddStringToObject(o, "compute_capability", v);
    snprintf(v, sizeof v, "%d.%d", g.driver_version / 1000, g.driver_version % 1000 / 10);
    cJSON_AddStringToObject(o, "driver_cuda_version", v);
    snprintf(v, sizeof v, "%d.%d", g.runtime_version / 1000, g.runtime_version % 1000 / 10);
    cJSON_AddStringToObject(o, "runtime_version", v);
    cJSON_AddBoolToObject(o, "conditional_nodes", g.conditional_nodes);
    cJSON_AddBoolToObject(o, "programmatic_launch", g.programmatic_launch);
  } else {
    cJSON_AddNullToObject(m, "gpu");
  }
  return m;
}

cJSON *bench_build_json(void) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "version", ortep_version());
  cJSON_AddStringToObject(b, "git_revision", ortep_git_revision());
  cJSON_AddStringToObject(b, "build_type", ORTEP_BUILD_TYPE);
  cJSON_AddBoolToObject(b, "cuda", ORTEP_HAVE_CUDA);
  cJSON_AddStringToObject(b, "host_allocator", ortep_uses_mimalloc() ? "mimalloc" : "system");
  cJSON_AddBoolToObject(b, "debug_checks", ortep_debug_checks_enabled());
  return b;
}

void bench_print_header(const char *what) {
  char cpu[256], blas[128];
  cpu_model(cpu, sizeof cpu);
  printf("ortep-bench %s — ortep %s (%s, %s build%s), %s, %ld cores, %s\n", what, ortep_version(), ortep_git_revision(),
         ORTEP_BUILD_TYPE, ortep_debug_checks_enabled() ? ", debug checks ON: figures are not representative" : "", cpu,
         sysconf(_SC_NPROCESSORS_ONLN), tool_blas_label(blas, sizeof blas));
}

FILE *bench_json_open(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "ortep-bench: cannot write --json %s: %s\n", path, strerror(errno));
  return f;
}

int bench_json_finish(FILE *f, const char *path, const cJSON *root) {
  char *text = cJSON_Print(root);
  if (!text) {
    fclose(f);
    fprintf(stderr, "ortep-bench: could not render the JSON report (out of memory)\n");
    return 1;
  }
  bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  ok = (fclose(f) == 0) && ok;
  cJSON_free(text);
  if (!ok) {
    fprintf(stderr, "ortep-bench: writing --json %s failed: %s\n", path, strerror(errno));
    return 1;
  }
  return 0;
}

int bench_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ortep-bench %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'ortep-bench %s --help'.\n", cmd);
  va_end(ap);
  return BENCH_EXIT_USAGE;
}

int bench_next_option(const char *cmd, int argc, char **argv, const struct option *lo, const char *usage,
                      int *exit_code) {
  if (optind == 0 || argv != bench_last_argv) { /* a new command line */
    opterr = 0;
    optind = 1;
    bench_last_argv = argv;
  }
  int c = getopt_long(argc, argv, ":h", lo, NULL);
  switch (c) {
    case -1:
      if (optind < argc) {
        *exit_code = bench_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        return BENCH_OPTIONS_EXIT;
      }
      return BENCH_OPTIONS_DONE;
    case 'h':
      fputs(usage, stdout);
      *exit_code = 0;
      return BENCH_OPTIONS_EXIT;
    case ':':
      *exit_code = bench_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      return BENCH_OPTIONS_EXIT;
    case '?': *exit_code = bench_usage_error(cmd, "unknown option '%s'", argv[optind - 1]); return BENCH_OPTIONS_EXIT;
    default: return c;
  }
}

int bench_parse_count(const char *cmd, const char *opt, const char *arg, long min, long max, long *out) {
  uint64_t v;
  if (min < 0 || !tool_parse_whole(arg, (uint64_t)min, (uint64_t)max, &v))
    return bench_usage_error(cmd, "%s '%s' is not a whole number in [%ld, %ld]", opt, arg, min, max);
  *out = (long)v;
  return 0;
}

/* A tensor of n values as q8_0 / q4_0 blocks. */
static size_t quant_bytes(const ortep_safetensors_entry *e, ortep_dtype to) {
  size_t n = e->size / ortep_dtype_size(e->dtype);
  return n / 32 * ortep_dtype_size(to);
}

size_t bench_held_weight_bytes(const tool_model *m, const ortep_model *mdl, size_t *read_per_token) {
  const ortep_model_config *cfg = ortep_model_get_config(mdl);
  size_t bytes = ortep_model_weight_bytes(mdl);
  const ortep_safetensors_entry *embed = ortep_model_tensor(mdl, "model.embed_tokens.weight");
  size_t embed_bytes = embed ? embed->size : 0;
  if (tool_model_quantized(m)) {
    ortep_dtype proj, emb = ORTEP_DTYPE_Q8_0;
    ortep_dtype_parse(m->dtype, &proj);
    bool stored = m->embedding_dtype && !strcmp(m->embedding_dtype, "stored");
    if (m->embedding_dtype && !stored) ortep_dtype_parse(m->embedding_dtype, &emb);
    static const char *const names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    char n[160];
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++)
      for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(n, sizeof n, "model.layers.%lld.%s.weight", (long long)l, names[i]);
        const ortep_safetensors_entry *e = ortep_model_tensor(mdl, n);
        if (e) bytes = bytes - e->size + quant_bytes(e, proj);
      }
    const char *tables[] = {"model.embed_tokens.weight", "lm_head.weight"};
    for (size_t i = 0; i < 2 && !stored; i++) {
      const ortep_safetensors_entry *e = ortep_model_tensor(mdl, tables[i]);
      if (!e) continue;
      bytes = bytes - e->size + quant_bytes(e, emb);
      if (!i) embed_bytes = quant_bytes(e, emb);
    }
  }
  /* per token every weight is read once, except an untied embedding table,
   * of which one row is read */
  if (read_per_token)
    *read_per_token =
        bytes - (cfg->tie_word_embeddings || !embed_bytes ? 0 : embed_bytes - embed_bytes / (size_t)cfg->vocab_size);
  return bytes;
}

int bench_parse_dtype_list(const char *cmd, struct tool_model *m, char *buf, size_t len, const char **dtypes,
                           size_t *n) {
  *n = 0;
  if (strlen(m->dtype) >= len) return bench_usage_error(cmd, "--dtype lists at most %d types", BENCH_DTYPES_MAX);
  snprintf(buf, len, "%s", m->dtype);
  for (char *t = buf, *end; t; t = end ? end + 1 : NULL) {
    if ((end = strchr(t, ','))) *end = '\0';
    if (!*t)
      return bench_usage_error(cmd, "--dtype '%s' has an empty entry; separate the types by single commas", m->dtype);
    if (*n == BENCH_DTYPES_MAX) return bench_usage_error(cmd, "--dtype lists at most %d types", BENCH_DTYPES_MAX);
    for (size_t i = 0; i < *n; i++)
      if (!strcmp(dtypes[i], t)) return bench_usage_error(cmd, "--dtype lists '%s' twice", t);
    tool_model one = *m;
    one.dtype = t;
    if (!tool_model_quantized(&one)) one.embedding_dtype = NULL; /* it applies to the list's q8_0 / q4_0 */
    int rc = tool_model_check(&one, true);
    if (rc) return rc;
    dtypes[(*n)++] = t;
  }
  bool quant = false;
  for (size_t i = 0; i < *n; i++) quant = quant || !strcmp(dtypes[i], "q8_0") || !strcmp(dtypes[i], "q4_0");
  if (m->embedding_dtype && !quant)
    return bench_usage_error(cmd, "--embedding-dtype goes with a q8_0 or q4_0 type in --dtype");
  /* the shared options' defaults and checks, with the first type */
  const char *emb = m->embedding_dtype;
  m->dtype = dtypes[0], m->embedding_dtype = NULL;
  int rc = tool_model_check(m, true);
  m->embedding_dtype = emb;
  return rc;
}
