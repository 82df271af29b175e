/*
 * batch.c: `ortep-bench batch`, many sequences in one step (batch.h).
 *
 * For each B in --batches (default 1,2,4,8,16): B requests of --prompt-len
 * tokens join an B-slot batch at once and decode --tokens each; per B:
 * aggregate tokens/s (generated tokens over the wall time of the decode
 * steps), per-sequence tokens/s, p50/p99 of the per-token latency a
 * sequence sees (one decode step), time to first token (from the add to the
 * first token's event), the decode steps' weight read rate as a fraction of
 * the read bound measured in the same run, their GFLOP/s beside an sgemm of
 * M = 16 and as a fraction of the EP's own Linear over 256 rows (the GEMM
 * peak) measured in the same run, and the allocations per
 * steady step. Runs are interleaved over B (--runs rounds), medians. A
 * mixed workload follows: --mixed requests arriving one every few steps
 * while others decode. With --system N, eight requests that open with the
 * same N-token system prompt run once with prefix sharing and once without
 * (two batches of the same options): the KV memory held once every prompt
 * ran, the prompt tokens computed and the time to first token.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "model_options.h"

static const char batch_usage[] =
    "usage: ortep-bench batch [model options] [--batches B,...] [--tokens N] [--prompt-len P] [--runs R]\n"
    "                         [--mixed N] [--system N] [--json FILE]\n"
    "\n"
    "Many sequences decoded together: aggregate and per-sequence tokens/s, per-token latency and\n"
    "time to first token for B concurrent sequences, the fraction of the read bound and of the sgemm\n"
    "rate each B reaches, and a mixed workload (the tiny preset with no model option).\n"
    "\n" TOOL_MODEL_HELP
    "  --batches B,...  concurrent sequences (default 1,2,4,8,16; at most 64 each)\n"
    "  --tokens N       tokens generated per sequence (default 32)\n"
    "  --prompt-len P   each prompt's tokens (default 16)\n"
    "  --runs R         interleaved rounds over the batch sizes (default 3; medians)\n"
    "  --mixed N        requests of the mixed workload, one joining every 4 steps (default 16; 0: none)\n"
    "  --system N       eight requests opening with the same N-token system prompt, with and without\n"
    "                   prefix sharing: KV held, prompt tokens run, time to first token (default 0: none)\n"
    "  --json FILE      also write the figures as JSON\n"
    "  -h, --help       this text\n";

#define MAX_B     8
#define MAX_ROUND 64

typedef struct batch_opts {
  tool_model m;
  long batches[MAX_B], tokens, plen, runs, mixed, system;
  size_t n_batches;
  const char *json_path;
} batch_opts;

typedef struct seq {
  double added_ns, first_ns, last_ns;
  size_t n;
} seq;
typedef struct sink {
  seq s[256];
  ortep_request_id first; /* this run's first request: ids count on across runs */
  size_t n;
  double *gaps; /* per-token latencies (between a sequence's tokens) */
  size_t n_gaps, cap_gaps;
} sink;

static bool on_event(const ortep_batch_event *e, void *user) {
  sink *k = user;
  if (e->kind != ORTEP_BATCH_TOKEN || e->id < k->first || e->id - k->first >= 256) return true;
  seq *s = &k->s[e->id - k->first];
  double now = bench_now_ns();
  if (s->n == 0)
    s->first_ns = now;
  else if (k->n_gaps < k->cap_gaps)
    k->gaps[k->n_gaps++] = now - s->last_ns;
  s->last_ns = now;
  s->n++;
  return true;
}

static int fail(const char *what) {
  fprintf(stderr, "ortep-bench batch: %s: %s\n", what, ortep_last_error());
  return 1;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double pct(double *v, size_t n, double p) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_d);
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

typedef struct figures {
  double agg, per_seq, p50_ms, p99_ms, ttft_ms, step_ms;
  double allocs_per_step;
} figures;

/* One run of B sequences in a fresh request set on an open batch. */
static int run_one(const batch_opts *o, ortep_batch *b, size_t B, size_t vocab, figures *f) {
  sink *k = calloc(1, sizeof *k);
  if (!k) return 1;
  k->cap_gaps = B * (size_t)o->tokens;
  k->gaps = malloc(k->cap_gaps * sizeof *k->gaps);
  int32_t *prompt = malloc((size_t)o->plen * sizeof *prompt);
  if (!k->gaps || !prompt) return 1;
  ortep_generate_options g = {.max_tokens = (size_t)o->tokens, .ignore_eos = true};
  ortep_request_id first = 0;
  for (size_t i = 0; i < B; i++) {
    for (long t = 0; t < o->plen; t++) prompt[t] = (int32_t)(((size_t)t * 7919u + i * 131u + 13u) % vocab);
    ortep_request_id id;
    if (ortep_batch_add(b, prompt, (size_t)o->plen, &g, on_event, k, &id) != ORTEP_OK) return fail("adding");
    if (!first) first = k->first = id;
    k->s[(id - first) % 256].added_ns = bench_now_ns();
  }
  int rc = 0;
  ortep_batch_stats s0, s1;
  ortep_batch_get_stats(b, &s0);
  uint64_t a0 = 0, f0 = 0, a1 = 0, f1 = 0;
  double tdec = 0;
  size_t active = 1, steps = 0;
  bool counted = false;
  while (active && !rc) {
    ortep_batch_stats before;
    ortep_batch_get_stats(b, &before);
    double ts = bench_now_ns();
    if (ortep_batch_step(b, &active) != ORTEP_OK) rc = fail("a step");
    double te = bench_now_ns();
    ortep_batch_stats after;
    ortep_batch_get_stats(b, &after);
    if (after.prefill_chunks == before.prefill_chunks && after.decode_steps > before.decode_steps) {
      tdec += te - ts; /* a decode step alone */
      steps++;
      if (!counted && steps == 4) ortep_ep_allocation_counts(ortep_batch_ep(b), &a0, &f0), counted = true;
    }
  }
  ortep_ep_allocation_counts(ortep_batch_ep(b), &a1, &f1);
  ortep_batch_get_stats(b, &s1);
  size_t gen = (size_t)(s1.generated - s0.generated);
  double ttft = 0;
  for (size_t i = 0; i < B; i++) ttft += k->s[i].first_ns - k->s[i].added_ns;
  *f = (figures){0};
  f->agg = tdec > 0 ? (double)(gen - B) / (tdec / 1e9) : 0; /* the first tokens come from the prefill */
  f->per_seq = f->agg / (double)B;
  f->step_ms = steps ? tdec / (double)steps / 1e6 : 0;
  f->p50_ms = pct(k->gaps, k->n_gaps, 0.5) / 1e6;
  f->p99_ms = pct(k->gaps, k->n_gaps, 0.99) / 1e6;
  f->ttft_ms = ttft / (double)B / 1e6;
  f->allocs_per_step = steps > 4 ? (double)((a1 - a0) + (f1 - f0)) / (double)(steps - 4) : 0;
  free(prompt), free(k->gaps), free(k);
  return rc;
}

static int parse(int argc, char **argv, batch_opts *o) {
  *o = (batch_opts){.m = {.prog = "ortep-bench", .cmd = "batch"},
                    .batches = {1, 2, 4, 8, 16},
                    .n_batches = 5,
                    .tokens = 32,
                    .plen = 16,
                    .runs = 3,
                    .mixed = 16};
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,
                                     {"batches", required_argument, 0, 'b'},
                                     {"tokens", required_argument, 0, 'n'},
                                     {"prompt-len", required_argument, 0, 'p'},
                                     {"runs", required_argument, 0, 'r'},
                                     {"mixed", required_argument, 0, 'x'},
                                     {"system", required_argument, 0, 's'},
                                     {"json", required_argument, 0, 'j'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("batch", argc, argv, lo, batch_usage, &rc)) >= 0) {
    if (tool_model_option(&o->m, c, optarg, &rc)) {
      if (rc) return rc;
      continue;
    }
    switch (c) {
      case 'b': {
        o->n_batches = 0;
        char *copy = strdup(optarg), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && !rc; t = strtok_r(NULL, ",", &save)) {
          if (o->n_batches == MAX_B) {
            rc = bench_usage_error("batch", "--batches lists at most %d sizes", MAX_B);
            break;
          }
          rc = bench_parse_count("batch", "--batches", t, 1, 64, &o->batches[o->n_batches++]);
        }
        free(copy);
        if (!rc && !o->n_batches) rc = bench_usage_error("batch", "--batches is empty");
        break;
      }
      case 'n': rc = bench_parse_count("batch", "--tokens", optarg, 2, 100000, &o->tokens); break;
      case 'p': rc = bench_parse_count("batch", "--prompt-len", optarg, 1, 100000, &o->plen); break;
      case 'r': rc = bench_parse_count("batch", "--runs", optarg, 1, MAX_ROUND, &o->runs); break;
      case 'x': rc = bench_parse_count("batch", "--mixed", optarg, 0, 256, &o->mixed); break;
      case 's': rc = bench_parse_count("batch", "--system", optarg, 0, 100000, &o->system); break;
      case 'j': o->json_path = optarg; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  return tool_model_check(&o->m, true) ? 2 : -1;
}

/* The mixed workload: requests joining one every 4 steps while others
 * decode; aggregate tokens/s over the whole run and the latencies seen. */
static int mixed(const batch_opts *o, ortep_batch *b, size_t vocab, cJSON *root) {
  if (!o->mixed) return 0;
  sink *k = calloc(1, sizeof *k);
  int32_t *prompt = malloc((size_t)o->plen * sizeof *prompt);
  if (!k || !prompt) return 1;
  k->cap_gaps = (size_t)o->mixed * (size_t)o->tokens;
  k->gaps = malloc(k->cap_gaps * sizeof *k->gaps);
  ortep_batch_stats s0, s1;
  ortep_batch_get_stats(b, &s0);
  ortep_request_id first = 0;
  size_t added = 0, active = 1;
  int rc = 0;
  double t0 = bench_now_ns();
  for (size_t step = 0; !rc && (active || added < (size_t)o->mixed); step++) {
    if (step % 4 == 0 && added < (size_t)o->mixed) {
      for (long t = 0; t < o->plen; t++) prompt[t] = (int32_t)(((size_t)t * 31u + added * 17u + 3u) % vocab);
      ortep_generate_options g = {.max_tokens = (size_t)o->tokens / 2 + (added % 4) * (size_t)o->tokens / 4,
                                  .ignore_eos = true};
      ortep_request_id id;
      if (ortep_batch_add(b, prompt, (size_t)o->plen, &g, on_event, k, &id) != ORTEP_OK) rc = fail("adding");
      if (!first) first = k->first = id;
      added++;
    }
    if (!rc && ortep_batch_step(b, &active) != ORTEP_OK) rc = fail("a step");
  }
  double secs = (bench_now_ns() - t0) / 1e9;
  ortep_batch_get_stats(b, &s1);
  double rows = (double)(s1.decode_rows - s0.decode_rows), steps = (double)(s1.decode_steps - s0.decode_steps);
  double agg = (double)(s1.generated - s0.generated) / secs;
  double p50 = pct(k->gaps, k->n_gaps, 0.5) / 1e6, p99 = pct(k->gaps, k->n_gaps, 0.99) / 1e6;
  printf("\nmixed: %ld requests, one joining every 4 steps, %.1f sequences per decode step on average\n", o->mixed,
         steps > 0 ? rows / steps : 0);
  printf("  aggregate %.1f tokens/s (prefill included), per-token latency p50 %.2f ms, p99 %.2f ms\n", agg, p50, p99);
  cJSON *m = cJSON_AddObjectToObject(root, "mixed");
  cJSON_AddNumberToObject(m, "requests", (double)o->mixed);
  cJSON_AddNumberToObject(m, "aggregate_tokens_per_s", agg);
  cJSON_AddNumberToObject(m, "mean_sequences_per_step", steps > 0 ? rows / steps : 0);
  cJSON_AddNumberToObject(m, "p50_ms", p50);
  cJSON_AddNumberToObject(m, "p99_ms", p99);
  free(prompt), free(k->gaps), free(k);
  return rc;
}

/* One pass of the system-prompt workload: SYS_REQS requests (the system
 * prompt, then --prompt-len tokens of their own) added at once to a fresh
 * batch of as many slots, run to their end: the most KV memory held after
 * a step, the prompt tokens run in chunks, those taken from another slot. */
#define SYS_REQS 8
typedef struct sys_figures {
  double kv_mib, ttft_ms, secs;
  uint64_t prompt_tokens, shared_tokens;
} sys_figures;
static int system_pass(const batch_opts *o, ortep_config *cfg, size_t vocab, bool share, sys_figures *f) {
  size_t n = (size_t)(o->system + o->plen);
  ortep_batch_options bo = {.decoder = {.ep = o->m.ep, .max_seq_len = n + (size_t)o->tokens + 8, .config = cfg},
                            .slots = SYS_REQS,
                            .disable_prefix_sharing = !share};
  ortep_batch *b = NULL;
  sink *k = calloc(1, sizeof *k);
  int32_t *prompt = malloc(n * sizeof *prompt);
  int rc = !k || !prompt ? fail("no memory") : 0;
  if (!rc && ortep_batch_open(o->m.dir, &bo, &b) != ORTEP_OK) rc = fail("opening the batch");
  ortep_generate_options g = {.max_tokens = (size_t)o->tokens, .ignore_eos = true};
  double t0 = bench_now_ns();
  ortep_request_id last = 0;
  for (size_t i = 0; !rc && i < SYS_REQS; i++) {
    for (size_t t = 0; t < n; t++)
      prompt[t] = (int32_t)((t < (size_t)o->system ? t * 7919u + 13u : t * 31u + i * 131u + 5u) % vocab);
    if (ortep_batch_add(b, prompt, n, &g, on_event, k, &last) != ORTEP_OK) rc = fail("adding");
    if (!rc && i == 0) k->first = last;
    if (!rc) k->s[i].added_ns = bench_now_ns();
  }
  ortep_batch_stats st;
  uint64_t peak = 0;
  for (size_t active = 1; !rc && active;) { /* the KV held at its peak: after a step */
    if (ortep_batch_step(b, &active) != ORTEP_OK) rc = fail("a step");
    ortep_batch_get_stats(b, &st);
    if (st.kv.committed_bytes + st.kv.shared_bytes > peak) peak = st.kv.committed_bytes + st.kv.shared_bytes;
  }
  if (!rc) {
    f->kv_mib = (double)peak / 1048576.0;
    f->secs = (bench_now_ns() - t0) / 1e9;
    ortep_batch_get_stats(b, &st);
    f->prompt_tokens = st.prefill_tokens;
    f->shared_tokens = st.shared_tokens;
    double ttft = 0;
    for (size_t i = 0; i < SYS_REQS; i++) ttft += k->s[i].first_ns - k->s[i].added_ns;
    f->ttft_ms = ttft / SYS_REQS / 1e6;
  }
  ortep_batch_close(b);
  free(prompt), free(k);
  return rc;
}

static int system_prompt(const batch_opts *o, ortep_config *cfg, size_t vocab, cJSON *root) {
  if (!o->system) return 0;
  sys_figures f[2] = {{0}};
  int rc = system_pass(o, cfg, vocab, true, &f[0]);
  if (!rc) rc = system_pass(o, cfg, vocab, false, &f[1]);
  if (rc) return rc;
  printf("\nsystem prompt: %d requests of a %ld-token system prompt and %ld tokens of their own, %d slots\n", SYS_REQS,
         o->system, o->plen, SYS_REQS);
  printf("  %-12s %12s %14s %14s %14s %10s\n", "", "KV peak MiB", "chunk tokens", "shared tokens", "ttft ms (mean)",
         "wall s");
  cJSON *arr = cJSON_AddArrayToObject(root, "system_prompt");
  for (int i = 0; i < 2; i++) {
    printf("  %-12s %12.2f %14llu %14llu %14.1f %10.2f\n", i ? "not sharing" : "sharing", f[i].kv_mib,
           (unsigned long long)f[i].prompt_tokens, (unsigned long long)f[i].shared_tokens, f[i].ttft_ms, f[i].secs);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddBoolToObject(e, "prefix_sharing", !i);
    cJSON_AddNumberToObject(e, "requests", SYS_REQS);
    cJSON_AddNumberToObject(e, "system_tokens", (double)o->system);
    cJSON_AddNumberToObject(e, "kv_peak_bytes", f[i].kv_mib * 1048576.0);
    cJSON_AddNumberToObject(e, "prompt_tokens_run", (double)f[i].prompt_tokens);
    cJSON_AddNumberToObject(e, "shared_tokens", (double)f[i].shared_tokens);
    cJSON_AddNumberToObject(e, "time_to_first_token_ms", f[i].ttft_ms);
    cJSON_AddNumberToObject(e, "seconds", f[i].secs);
    cJSON_AddItemToArray(arr, e);
  }
  return 0;
}

/* Two flops per weight of every projection and the lm_head, per token (attention apart). */
static double flops_per_token(const ortep_model_config *mc) {
  double H = (double)mc->hidden_size, I = (double)mc->intermediate_size, HD = (double)mc->head_dim;
  double q = (double)mc->num_attention_heads * HD, kvw = (double)mc->num_key_value_heads * HD;
  return 2.0 * ((double)mc->num_hidden_layers * (H * (q + 2 * kvw) + q * H + 3 * H * I) + (double)mc->vocab_size * H);
}

/* The weights one decode step reads, as the session holds them (quantized at open too). */
static uint64_t step_weight_bytes(const batch_opts *o) {
  ortep_model *mdl;
  size_t per_step = 0;
  if (ortep_model_open(o->m.dir, &mdl) != ORTEP_OK) return 0;
  bench_held_weight_bytes(&o->m, mdl, &per_step);
  ortep_model_close(mdl);
  return per_step;
}

/* The medians over the rounds of batch size i's figures. */
static figures medians(const batch_opts *o, figures res[MAX_B][MAX_ROUND], size_t i) {
  double v[MAX_ROUND];
  figures m = {0};
#define MED(field)                                             \
  do {                                                         \
    for (long r = 0; r < o->runs; r++) v[r] = res[i][r].field; \
    m.field = bench_median(v, (size_t)o->runs);                \
  } while (0)
  MED(agg);
  MED(per_seq);
  MED(p50_ms);
  MED(p99_ms);
  MED(ttft_ms);
  MED(step_ms);
  MED(allocs_per_step);
#undef MED
  return m;
}

/* What a table row needs besides its figures. */
typedef struct bounds {
  double flops_per_token, read_bw, gemm_peak;
  uint64_t weight_bytes;
} bounds;

/* One row per batch size, printed and into arr. */
static void report_rows(const batch_opts *o, figures res[MAX_B][MAX_ROUND], const bounds *bd, cJSON *arr) {
  printf("\n  %4s %12s %10s %9s %9s %9s %9s %10s %9s %10s %8s %8s\n", "B", "aggregate", "per seq", "vs B=1", "p50 ms",
         "p99 ms", "ttft ms", "read GB/s", "of bound", "GFLOP/s", "of gemm", "allocs");
  double base = 0;
  for (size_t i = 0; i < o->n_batches; i++) {
    figures m = medians(o, res, i);
    if (o->batches[i] == 1) base = m.agg;
    double rd = m.step_ms > 0 ? (double)bd->weight_bytes / (m.step_ms / 1e3) / 1e9 : 0;
    double gf = m.agg * bd->flops_per_token / 1e9;
    printf("  %4ld %12.1f %10.1f %8.2fx %9.2f %9.2f %9.1f %10.1f %8.0f%% %10.1f %7.0f%% %8.2f\n", o->batches[i], m.agg,
           m.per_seq, base > 0 ? m.agg / base : 0, m.p50_ms, m.p99_ms, m.ttft_ms, rd,
           bd->read_bw > 0 ? 100.0 * rd * 1e9 / bd->read_bw : 0, gf, bd->gemm_peak > 0 ? 100.0 * gf / bd->gemm_peak : 0,
           m.allocs_per_step);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "sequences", (double)o->batches[i]);
    cJSON_AddNumberToObject(e, "aggregate_tokens_per_s", m.agg);
    cJSON_AddNumberToObject(e, "per_sequence_tokens_per_s", m.per_seq);
    cJSON_AddNumberToObject(e, "p50_ms", m.p50_ms);
    cJSON_AddNumberToObject(e, "p99_ms", m.p99_ms);
    cJSON_AddNumberToObject(e, "time_to_first_token_ms", m.ttft_ms);
    cJSON_AddNumberToObject(e, "step_ms", m.step_ms);
    cJSON_AddNumberToObject(e, "weight_read_bytes_per_s", rd * 1e9);
    cJSON_AddNumberToObject(e, "gflops", gf);
    if (bd->gemm_peak > 0) cJSON_AddNumberToObject(e, "fraction_of_gemm", gf / bd->gemm_peak);
    cJSON_AddNumberToObject(e, "allocations_per_step", m.allocs_per_step);
    cJSON_AddItemToArray(arr, e);
  }
}

/* The bounds the table is read against, printed and into root. */
static void report_bounds(const ortep_model_config *mc, const bounds *bd, size_t threads, ortep_dtype mdt,
                          uint64_t captures, cJSON *root) {
  double sg = bench_sgemm_gflops(16, (size_t)mc->hidden_size, (size_t)mc->intermediate_size, threads ? threads : 1);
  printf(
      "  read bound %.1f GB/s (%zu threads, median of the rounds); sgemm [16 x %lld] x [%lld x %lld] %.1f "
      "GFLOP/s; %.1f MiB of weights read per step; graphs captured %llu (buckets and prompt chunks)\n",
      bd->read_bw / 1e9, threads, (long long)mc->hidden_size, (long long)mc->hidden_size,
      (long long)mc->intermediate_size, sg, (double)bd->weight_bytes / 1048576.0, (unsigned long long)captures);
  if (bd->gemm_peak > 0)
    printf(
        "  of gemm: the EP Linear [256 x %lld] x [%lld x %lld] of %s weights, %.1f GFLOP/s (a batch keeps f32 "
        "activations)\n",
        (long long)mc->hidden_size, (long long)mc->hidden_size, (long long)mc->intermediate_size, ortep_dtype_name(mdt),
        bd->gemm_peak);
  cJSON_AddNumberToObject(root, "read_bound_bytes_per_s", bd->read_bw);
  cJSON_AddNumberToObject(root, "sgemm16_gflops", sg);
  if (bd->gemm_peak > 0) cJSON_AddNumberToObject(root, "gemm_peak_gflops", bd->gemm_peak);
  cJSON_AddNumberToObject(root, "weight_bytes", (double)bd->weight_bytes);
}

/* The interleaved rounds: every batch size once per round, a read bound after each. */
static int rounds(const batch_opts *o, ortep_batch *b, size_t vocab, size_t threads, figures res[MAX_B][MAX_ROUND],
                  double *bw) {
  int rc = 0;
  read_bench *rb = read_new(threads ? threads : 1);
  for (long r = 0; !rc && r < o->runs; r++) {
    for (size_t i = 0; !rc && i < o->n_batches; i++) rc = run_one(o, b, (size_t)o->batches[i], vocab, &res[i][r]);
    if (rb) bw[r] = read_rate(rb, (size_t)512 << 20);
  }
  read_delete(rb);
  return rc;
}

/* The table, its bounds, then the mixed and system-prompt passes. */
static int measure(const batch_opts *o, ortep_batch *b, ortep_config *cfg, const ortep_model_config *mc, size_t maxb,
                   cJSON *root) {
  figures res[MAX_B][MAX_ROUND] = {{{0}}};
  double bw[MAX_ROUND] = {0};
  size_t vocab = (size_t)mc->vocab_size;
  size_t threads = (size_t)(o->m.threads ? o->m.threads : sysconf(_SC_NPROCESSORS_ONLN));
  bench_print_header("batch");
  printf("model %s, %zu slots, %ld-token prompts, %ld tokens per sequence, %ld interleaved rounds\n",
         o->m.model ? o->m.model : o->m.preset, maxb, o->plen, o->tokens, o->runs);
  figures warm;
  int rc = run_one(o, b, maxb, vocab, &warm); /* captures every bucket */
  if (!rc) rc = rounds(o, b, vocab, threads, res, bw);
  if (rc) return rc;
  ortep_batch_stats ss = {0}; /* its captures: every graph of the batch's session (buckets, prompt chunks) */
  ortep_batch_get_stats(b, &ss);
  bounds bd = {flops_per_token(mc), bench_median(bw, (size_t)o->runs), 0, step_weight_bytes(o)};
  /* the GEMM peak: the EP's Linear [256 x hidden] x [hidden x intermediate] of the model's
   * weights (bf16 products where cpu.products allows; q8_0 / q4_0: the integer rows), in this run */
  ortep_dtype mdt = ORTEP_DTYPE_COUNT;
  if (ortep_dtype_parse(o->m.dtype, &mdt) == ORTEP_OK)
    bd.gemm_peak =
        bench_linear_gflops(ortep_batch_ep(b), mdt, 256, (size_t)mc->hidden_size, (size_t)mc->intermediate_size);
  report_rows(o, res, &bd, cJSON_AddArrayToObject(root, "batches"));
  report_bounds(mc, &bd, threads, mdt, ss.captures, root);
  rc = mixed(o, b, vocab, root);
  if (!rc) rc = system_prompt(o, cfg, vocab, root);
  ortep_batch_get_stats(b, &ss);
  cJSON_AddNumberToObject(root, "captures", (double)ss.captures);
  return rc;
}

int bench_batch_main(int argc, char **argv) {
  batch_opts o;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  if ((rc = tool_model_resolve(&o.m, true)) != 0) return rc;
  FILE *json = NULL;
  if (o.json_path && !(json = bench_json_open(o.json_path))) return 1;
  ortep_config *cfg = NULL;
  ortep_model_config mc;
  if (ortep_model_config_read(o.m.dir, &mc) != ORTEP_OK) rc = fail("reading the model's config");
  if (!rc && tool_model_config(&o.m, &cfg)) rc = 1;
  size_t maxb = 1;
  for (size_t i = 0; i < o.n_batches; i++) maxb = (size_t)o.batches[i] > maxb ? (size_t)o.batches[i] : maxb;
  if (o.mixed && maxb < 8) maxb = 8;
  ortep_batch *b = NULL;
  ortep_batch_options bo = {.decoder = {.ep = o.m.ep,
                                        .max_seq_len = (size_t)(o.plen + o.tokens + 8),
                                        .config = cfg,
                                        .progress = tool_progress,
                                        .progress_ctx = (void *)&o.m},
                            .slots = maxb};
  if (!rc && ortep_batch_open(o.m.dir, &bo, &b) != ORTEP_OK) rc = fail("opening the batch");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "batch");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "model", o.m.model ? o.m.model : o.m.preset);
  if (!rc) rc = measure(&o, b, cfg, &mc, maxb, root);
  ortep_batch_close(b);
  ortep_config_destroy(cfg);
  if (json) {
    int jrc = rc ? (fclose(json), 0) : bench_json_finish(json, o.json_path, root);
    rc = rc ? rc : jrc;
  }
  cJSON_Delete(root);
  if (!rc && fflush(stdout) != 0) rc = 1;
  return rc;
}
