/*
 * dtypes.c: ortep-bench decode --dtype A,B,...: the same model's decode in
 * several weight types, measured in one run. Every type's decoder is opened
 * and warmed up first; then each round times one run of every type, one
 * after the other (graph mode, each run right after a streaming read of as
 * many bytes as it reads, on the CPU EP), so the types are compared at the
 * same moments of a machine whose read rate drifts. The ratio to the first
 * type is taken per round (neighbours in time) and reported as the median
 * and range over the rounds, beside each type's tokens/s and its fraction
 * of the read bound computed from its own bytes per token.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "model_options.h"

typedef struct dtype_run {
  tool_model m;
  ortep_config *config;
  ortep_decoder *d;
  size_t read_per_token, threads;
  double open_s;
  double *tps, *frac, *over; /* per round: tokens/s, fraction of the read before it, over the first type */
  int32_t *tokens;           /* the first round's; every later round must repeat them */
  const char *simd;          /* the CPU EP's dot products; NULL for another EP */
  char ep[64];
  bool blocked;
} dtype_run;

/* The type's model, config, bytes per token and warmed-up decoder: 0, or the
 * exit code with the reason printed. */
static int open_one(const bench_dtypes *a, const char *dtype, bool announce, dtype_run *e) {
  e->m = *a->m;
  e->m.dtype = dtype;
  if (!tool_model_quantized(&e->m)) e->m.embedding_dtype = NULL; /* it goes with q8_0 / q4_0 only */
  int rc = tool_model_resolve(&e->m, announce);
  if (rc) return rc;
  ortep_model *mdl;
  if (ortep_model_open(e->m.dir, &mdl) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench decode: --dtype %s: %s\n", dtype, ortep_last_error());
    return 1;
  }
  /* a directory's weights are as stored: the list names that type, not another */
  const ortep_safetensors_entry *proj = ortep_model_tensor(mdl, "model.layers.0.mlp.down_proj.weight");
  ortep_dtype want;
  ortep_dtype_parse(dtype, &want);
  if (e->m.model && proj && !tool_model_quantized(&e->m) && proj->dtype != want) {
    const char *stored = ortep_dtype_name(proj->dtype); /* a static name, not the model's */
    ortep_model_close(mdl);
    return bench_usage_error("decode",
                             "--dtype %s: %s holds its projections as %s (run as stored); name %s, or q8_0 / q4_0",
                             dtype, e->m.model, stored, stored);
  }
  bench_held_weight_bytes(&e->m, mdl, &e->read_per_token);
  ortep_model_close(mdl);
  if (tool_model_config(&e->m, &e->config)) return 1;
  ortep_decoder_options o = {.ep = e->m.ep,
                             .max_seq_len = a->plen + (size_t)a->tokens + (size_t)a->warmup + 1,
                             .config = e->config,
                             .progress = tool_progress,
                             .progress_ctx = &e->m};
  double t0 = bench_now_ns();
  if (ortep_decoder_open(e->m.dir, &o, &e->d) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench decode: --dtype %s: %s\n", dtype, ortep_last_error());
    return 1;
  }
  e->open_s = (bench_now_ns() - t0) / 1e9;
  snprintf(e->ep, sizeof e->ep, "%s", ortep_ep_name(ortep_decoder_ep(e->d)));
  e->threads = ortep_cpu_ep_threads(ortep_decoder_ep(e->d));
  e->simd = ortep_cpu_ep_simd(ortep_decoder_ep(e->d));
  e->blocked = ortep_decoder_blocked_weights(e->d) > 0;
  size_t rounds = (size_t)a->runs;
  e->tps = calloc(rounds, sizeof *e->tps), e->frac = calloc(rounds, sizeof *e->frac);
  e->over = calloc(rounds, sizeof *e->over), e->tokens = calloc((size_t)a->tokens, sizeof *e->tokens);
  if (!e->tps || !e->frac || !e->over || !e->tokens) {
    fprintf(stderr, "ortep-bench decode: no memory for %ld rounds of %ld tokens\n", a->runs, a->tokens);
    return 1;
  }
  /* warm-up: captures the graph, touches the weights */
  if (ortep_decoder_prefill(e->d, a->prompt, a->plen, NULL) ||
      ortep_decoder_generate(e->d, (size_t)a->warmup + 1, NULL, NULL, NULL)) {
    fprintf(stderr, "ortep-bench decode: --dtype %s warm-up: %s\n", dtype, ortep_last_error());
    return 1;
  }
  return 0;
}

/* One timed run of e in round `round`, after the read (when rb). */
static int run_one(const bench_dtypes *a, dtype_run *e, size_t round, read_bench *rb) {
  double rd = rb ? read_rate(rb, (size_t)a->tokens * e->read_per_token) : 0;
  int32_t next;
  if (ortep_decoder_reset(e->d) || ortep_decoder_prefill(e->d, a->prompt, a->plen, &next)) {
    fprintf(stderr, "ortep-bench decode: --dtype %s: %s\n", e->m.dtype, ortep_last_error());
    return 1;
  }
  int32_t pos = (int32_t)a->plen;
  /* a test hook (ORTEP_BENCH_PERTURB=rounds) flips a token of the second
   * round as seen here, to prove the rounds are compared */
  const char *perturb = getenv("ORTEP_BENCH_PERTURB");
  long flip = perturb && !strcmp(perturb, "rounds") && round == 1 ? a->tokens / 2 : -1;
  double t0 = bench_now_ns();
  for (long t = 0; t < a->tokens; t++, pos++) {
    int32_t seen = t == flip ? next ^ 1 : next;
    if (round == 0) e->tokens[t] = seen;
    if (round > 0 && e->tokens[t] != seen) {
      fprintf(stderr, "ortep-bench decode: --dtype %s: round %zu drew token %d at %ld where round 1 drew %d\n",
              e->m.dtype, round + 1, seen, t, e->tokens[t]);
      return 1;
    }
    if (ortep_decoder_step(e->d, next, pos, &next) != ORTEP_OK) {
      fprintf(stderr, "ortep-bench decode: --dtype %s, token %ld: %s\n", e->m.dtype, t, ortep_last_error());
      return 1;
    }
  }
  e->tps[round] = (double)a->tokens / ((bench_now_ns() - t0) / 1e9);
  e->frac[round] = rd > 0 ? e->tps[round] * (double)e->read_per_token / rd : 0;
  return 0;
}

static void report(const bench_dtypes *a, dtype_run *e, size_t n, bool paired) {
  size_t rounds = (size_t)a->runs;
  printf("\nweight types (graph mode, %ld tokens a run, %zu rounds each running every type once, in order)\n",
         a->tokens, rounds);
  if (e[0].simd)
    printf("EP %s (%zu threads, %s dot products, %s weights)\n", e[0].ep, e[0].threads, e[0].simd,
           e[0].blocked ? "blocked" : "row-major");
  else
    printf("EP %s\n", e[0].ep);
  char over[32];
  snprintf(over, sizeof over, "over %s, per round", e[0].m.dtype);
  printf("  %-6s %10s %26s %24s %24s %9s\n", "dtype", "MiB/token", "tokens/s", over,
         paired ? "% of the read before it" : "", "open (s)");
  for (size_t i = 0; i < n; i++) {
    char t[64], o[64], f[64] = "";
    bench_spread(e[i].tps, rounds, 1, "%.1f", t, sizeof t);
    bench_spread(e[i].over, rounds, 1, "%.2fx", o, sizeof o);
    if (paired) bench_spread(e[i].frac, rounds, 100, "%.0f", f, sizeof f);
    printf("  %-6s %10.1f %26s %24s %24s %9.2f\n", e[i].m.dtype, (double)e[i].read_per_token / 1048576.0, t, o, f,
           e[i].open_s);
  }
  printf("  (median (lowest-highest) over the rounds; each type's tokens are the same in every round)\n");
}

static cJSON *report_json(const bench_dtypes *a, dtype_run *e, size_t n, bool paired) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "decode");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "model", a->m->model ? a->m->model : a->m->preset);
  cJSON_AddStringToObject(root, "mode", "graph");
  cJSON_AddNumberToObject(root, "tokens", (double)a->tokens);
  cJSON_AddNumberToObject(root, "rounds", (double)a->runs);
  cJSON_AddStringToObject(root, "ep", e[0].ep);
  if (e[0].simd) {
    cJSON_AddNumberToObject(root, "threads", (double)e[0].threads);
    cJSON_AddStringToObject(root, "cpu_simd", e[0].simd);
    cJSON_AddStringToObject(root, "weights_layout", e[0].blocked ? "blocked" : "row_major");
  }
  cJSON *arr = cJSON_AddArrayToObject(root, "dtypes");
  for (size_t i = 0; i < n; i++) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "dtype", e[i].m.dtype);
    cJSON_AddNumberToObject(d, "weight_bytes_per_token", (double)e[i].read_per_token);
    cJSON_AddNumberToObject(d, "open_seconds", e[i].open_s);
    cJSON_AddItemToObject(d, "tokens_per_s", cJSON_CreateDoubleArray(e[i].tps, (int)a->runs));
    cJSON_AddItemToObject(d, "over_first", cJSON_CreateDoubleArray(e[i].over, (int)a->runs));
    if (paired) cJSON_AddItemToObject(d, "fraction_of_read_before", cJSON_CreateDoubleArray(e[i].frac, (int)a->runs));
    cJSON *jt = cJSON_AddArrayToObject(d, "token_ids");
    for (long t = 0; t < a->tokens; t++) cJSON_AddItemToArray(jt, cJSON_CreateNumber(e[i].tokens[t]));
    cJSON_AddItemToArray(arr, d);
  }
  return root;
}

int bench_decode_dtypes(const bench_dtypes *a) {
  size_t n = a->n, rounds = (size_t)a->runs;
  dtype_run *e = calloc(n, sizeof *e);
  if (!e) {
    fprintf(stderr, "ortep-bench decode: no memory\n");
    return 1;
  }
  bench_print_header("decode");
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) rc = open_one(a, a->dtypes[i], i > 0, &e[i]); /* prepare() named the first */
  /* the read before each run where the CPU EP streams the weights */
  bool paired = !rc && e[0].simd;
  for (size_t i = 0; i < n && paired; i++) paired = bench_read_binds(e[i].read_per_token, e[i].threads);
  read_bench *rb = paired ? read_new(e[0].threads) : NULL;
  paired = rb != NULL;
  for (size_t r = 0; r < rounds && !rc; r++)
    for (size_t i = 0; i < n && !rc; i++) {
      rc = run_one(a, &e[i], r, rb);
      if (isatty(2))
        fprintf(stderr, "\r  round %zu/%zu  %-5s %8.1f tok/s   ", r + 1, rounds, e[i].m.dtype, e[i].tps[r]);
    }
  if (isatty(2)) fprintf(stderr, "\r%60s\r", "");
  read_delete(rb);
  if (!rc) {
    for (size_t r = 0; r < rounds; r++)
      for (size_t i = 0; i < n; i++) e[i].over[r] = e[i].tps[r] / e[0].tps[r];
    cJSON *root = report_json(a, e, n, paired); /* before report(), which sorts the rounds' figures */
    report(a, e, n, paired);
    if (*a->json && bench_json_finish(*a->json, a->json_path, root)) rc = 1;
    *a->json = NULL;
    cJSON_Delete(root);
  }
  for (size_t i = 0; i < n; i++) {
    ortep_decoder_close(e[i].d);
    ortep_config_destroy(e[i].config);
    free(e[i].tps), free(e[i].frac), free(e[i].over), free(e[i].tokens);
  }
  free(e);
  return rc;
}
