/*
 * decode.c: `ortep-bench decode`, per-token decode latency of eager, graph
 * and segmented execution measured side by side in one run, on a model
 * directory or a synthetic preset (written to a cache folder the first time).
 *
 * For each mode: the decoder is opened, warmed up (capture happens there),
 * then each run resets it, prefills the prompt and times every generated
 * token with the monotonic clock (and the decode thread's CPU clock). The token ids
 * of every mode are compared: any difference is an error (exit 1). On the CPU
 * EP the weight-bandwidth bound is reported: the weight bytes one token reads
 * over the read bandwidth measured in the same run with as many threads as
 * the EP uses (a parallel streaming sum, the access pattern of decode; right
 * before each timed run where the weights outgrow the cache, see run_mode),
 * and the rate of the Linear kernel alone over 512 MiB, so a shortfall
 * shows whether it lies in the dot products or in the rest of a step.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "ortep/backend_impl.h" /* the Linear kernel alone (linear_bench) */
#include "model_options.h"

typedef struct mode_def {
  const char *name;
  bool eager;
  bool seams;
} mode_def;

typedef enum mode_id { MODE_EAGER, MODE_GRAPH, MODE_SEGMENTED, NMODES } mode_id;
static const mode_def modes[NMODES] = {[MODE_EAGER] = {"eager", true, false},
                                       [MODE_GRAPH] = {"graph", false, false},
                                       [MODE_SEGMENTED] = {"segmented", false, true}};

typedef struct mode_result {
  bool ran;
  double tok_s, p50, p90, p99, max_us, cpu_us;
  double read_bw, frac; /* the read before each run (median) and each run over it (median); 0: not measured */
  double launch_us;     /* host time per token up to the sync */
  double ttft_ms;       /* time to first token: the prefill call (median of runs) */
  size_t kernels, graph_kernels, segments, seams, planned, lower_bound, naive, kv_bytes, kv_committed;
  double allocs_per_step;
  double open_s;     /* ortep_decoder_open, seconds */
  int weights_cache; /* ortep_weights_cache_state of that open */
  int32_t *tokens;
  size_t ntokens;
  char **seam_text;
  size_t nseams;
} mode_result;

static const char decode_usage[] =
    "usage: ortep-bench decode [--model DIR | --preset NAME] [--ep auto|cpu|cuda]\n"
    "                          [--dtype f32|f16|bf16|q8_0|q4_0] [--mode eager|graph|segmented|all] [--seam OP,...]\n"
    "                          [--prompt-len P] [--tokens N] [--warmup W] [--runs R] [--threads N]\n"
    "                          [--weights map|read] [--layout auto|blocked|row_major] [--json FILE]\n"
    "                          [--tokens-per-launch K,...] [--explain] [--profile]\n"
    "       ortep-bench decode --dtype A,B,... [--model DIR | --preset NAME] [--runs R] [--tokens N] ...\n"
    "\n"
    "Per-token decode latency of each execution mode, side by side in one run. With no\n"
    "arguments: the synthetic tiny preset (written to ~/.cache/ortep/models the first\n"
    "time), EP auto (CUDA when a device is present, else CPU), all modes. With a list of\n"
    "types (--dtype bf16,q8_0,q4_0): graph mode of each, opened side by side, timed in\n"
    "--runs rounds that run every type once in turn; the speed over the first type per round.\n"
    "\n" TOOL_MODEL_HELP
    "  --mode M         eager, graph, segmented (graph with --seam ops as eager seams), or all (default)\n"
    "  --seam OPS       op types or node names run as seams in segmented mode (default GroupQueryAttention)\n"
    "  --prompt-len P   prompt tokens (default 16)\n"
    "  --tokens N       generated tokens timed per run (default 64)\n"
    "  --warmup W       untimed tokens before the runs (default 8)\n"
    "  --runs R         timed runs per mode (default 5)\n"
    "  --tokens-per-launch K,...  graph mode with K decode steps per launch (each drawn token fed to the\n"
    "                   next step on the device), one generate call per run, runs interleaved over K\n"
    "                   (default 1,4,16; 0: automatic; none: skip)\n"
    "  --profile        also time every node of an eager run and print the time per token by op type\n"
    "  --json FILE      also write the figures as JSON\n"
    "  --explain        print each mode's plan (node -> EP, segment or seam, offsets)\n"
    "  -h, --help       this text\n";

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double pct(const double *sorted, size_t n, double p) {
  if (!n) return 0;
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}
/* CPU time of the thread driving the decode loop: on the CPU EP the work
 * itself, on a GPU the launch and sync overhead. (The process clock would
 * also count OpenBLAS's idle worker, which spins in sched_yield.) */
static double cpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The Linear kernel alone: one [1, k] x [rows, k]^T node of the model's
 * weight dtype over as many bytes as the read bound streams, run by a CPU EP
 * with the same threads. Its rate over the read bound is how close the dot
 * products themselves come to the memory system; decode's rate over it is
 * what the rest of a step (the other ops, a barrier per node, the smaller
 * projections) costs. */
typedef struct linear_bench {
  ortep_allocator *host;
  ortep_ep *ep;
  ortep_config *cfg;
  ortep_graph *g;
  ortep_kernel *kern;
  void *w;
  float *x, *y;
  size_t rows, bytes;
  bool blocked; /* the weight in the CPU EP's blocked layout, as the decoder's */
  const void *in[2];
  void *out[1];
  ortep_kernel_io io;
} linear_bench;
static bool linear_open(linear_bench *b, size_t threads, ortep_dtype dtype, size_t k, bool blocked) {
  bool quant = ortep_dtype_is_quantized(dtype);
  size_t cols = quant ? 32 : 16, row_bytes = k / ortep_dtype_block(dtype) * ortep_dtype_size(dtype);
  blocked = blocked && (ortep_dtype_size(dtype) == 2 || quant) && k % cols == 0;
  size_t tile = bench_blocked_rows(dtype);
  *b = (linear_bench){
      .host = bench_stream_host(), .rows = BENCH_READ_BYTES / row_bytes / tile * tile, .blocked = blocked};
  b->bytes = b->rows * row_bytes;
  b->w = bench_stream_alloc(b->host, b->bytes), b->x = malloc(k * sizeof *b->x), b->y = malloc(b->rows * sizeof *b->y);
  char v[32];
  snprintf(v, sizeof v, "%zu", threads);
  ortep_shape shapes[2] = {{2, {1, (int64_t)k}}, {2, {(int64_t)b->rows, (int64_t)k}}};
  if (blocked) shapes[1] = bench_blocked_shape(dtype, b->rows, k);
  ortep_dtype dtypes[2] = {ORTEP_DTYPE_F32, dtype};
  if (!b->w || !b->x || !b->y || ortep_cpu_ep_create(NULL, &b->ep) != ORTEP_OK ||
      ortep_config_create(&b->cfg) != ORTEP_OK || ortep_config_set(b->cfg, "cpu.threads", v) != ORTEP_OK ||
      ortep_ep_initialize(b->ep, b->cfg) != ORTEP_OK || ortep_graph_create(&b->g) != ORTEP_OK ||
      ortep_graph_add_node(b->g, "Linear", ORTEP_DOMAIN_ORTEP, "linear", (const char *[]){"x", "w"}, 2,
                           (const char *[]){"y"}, 1, NULL) != ORTEP_OK ||
      ortep_ep_get_kernel(b->ep, ortep_graph_node(b->g, 0), shapes, dtypes, 2, 17, &b->kern) != ORTEP_OK)
    return false;
  /* ordinary values (about 1), every page touched before timing */
  for (size_t i = 0; i < k; i++) b->x[i] = 1.0f / (float)(1 + i % 7);
  bench_fill_weights(b->w, b->bytes, dtype);
  b->in[0] = b->x, b->in[1] = b->w, b->out[0] = b->y;
  b->io = (ortep_kernel_io){b->in, 2, b->out, 1, ortep_ep_error_word_ptr(b->ep), NULL};
  return ortep_ep_run_kernel(b->ep, b->kern, &b->io) == ORTEP_OK; /* warm-up */
}
/* One pass: weight bytes per second, 0 if the kernel failed. */
static double linear_pass(linear_bench *b) {
  double t0 = bench_now_ns();
  if (ortep_ep_run_kernel(b->ep, b->kern, &b->io) != ORTEP_OK) return 0;
  return (double)b->bytes / ((bench_now_ns() - t0) / 1e9);
}
static void linear_close(linear_bench *b) {
  ortep_kernel_destroy(b->kern); /* before its EP */
  ortep_graph_destroy(b->g);
  ortep_ep_destroy(b->ep);
  ortep_config_destroy(b->cfg);
  bench_stream_free(b->host, b->w, b->bytes), free(b->x), free(b->y);
  ortep_allocator_destroy(b->host);
}

/* --profile: one more eager decoder with every node timed; the time per
 * token summed by op type, largest first, on stdout (and into json). */
typedef struct op_time {
  const char *op;
  uint64_t ns;
} op_time;
static int cmp_op_time(const void *a, const void *b) {
  uint64_t x = ((const op_time *)a)->ns, y = ((const op_time *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}
static int profile_run(const char *dir, const char *ep, const ortep_config *config, const int32_t *prompt, size_t plen,
                       long tokens, cJSON **out) {
  ortep_decoder_options o = {
      .ep = ep, .max_seq_len = plen + (size_t)tokens + 1, .eager = true, .config = config, .profile = true};
  ortep_decoder *d;
  int32_t next;
  if (ortep_decoder_open(dir, &o, &d) != ORTEP_OK || ortep_decoder_prefill(d, prompt, plen, &next) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench decode: --profile: %s\n", ortep_last_error());
    ortep_decoder_close(d);
    return 1;
  }
  ortep_session *s = ortep_decoder_session(d);
  size_t n = ortep_session_profile_count(s);
  uint64_t *before = calloc(n + 1, sizeof *before);
  op_time *ops = calloc(n + 1, sizeof *ops);
  if (!before || !ops) {
    fprintf(stderr, "ortep-bench decode: --profile: no memory\n");
    free(before), free(ops), ortep_decoder_close(d);
    return 1;
  }
  for (size_t i = 0; i < n; i++) ortep_session_profile(s, i, NULL, NULL, &before[i]);
  int rc = 0;
  for (long t = 0; t < tokens && !rc; t++)
    if (ortep_decoder_step(d, next, (int32_t)(plen + (size_t)t), &next) != ORTEP_OK) {
      fprintf(stderr, "ortep-bench decode: --profile: %s\n", ortep_last_error());
      rc = 1;
    }
  size_t kinds = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    const char *op;
    uint64_t ns;
    ortep_session_profile(s, i, &op, NULL, &ns);
    ns -= before[i]; /* the timed tokens only, not the prompt */
    total += ns;
    size_t k = 0;
    while (k < kinds && strcmp(ops[k].op, op)) k++;
    if (k == kinds) ops[kinds++] = (op_time){op, 0};
    ops[k].ns += ns;
  }
  if (!rc) {
    qsort(ops, kinds, sizeof *ops, cmp_op_time);
    *out = cJSON_CreateObject();
    for (size_t k = 0; k < kinds; k++)
      cJSON_AddNumberToObject(*out, ops[k].op, (double)ops[k].ns / 1e3 / (double)tokens);
  }
  free(before), free(ops);
  ortep_decoder_close(d);
  return rc;
}

static void print_profile(const cJSON *prof, long tokens) {
  double total = 0;
  for (const cJSON *it = prof->child; it; it = it->next) total += it->valuedouble;
  printf("  profile (eager, %ld tokens, every node timed): time per token by op type\n", tokens);
  for (const cJSON *it = prof->child; it; it = it->next)
    printf("    %-36s %10.1f us %6.1f%%\n", it->string, it->valuedouble,
           total > 0 ? 100.0 * it->valuedouble / total : 0);
}

/* One mode's runs. On the CPU EP, where the weights outgrow the cache, a
 * streaming read of as many bytes as a run reads (read_per_token each
 * token) goes right before each timed run, on `before` (opened here the
 * first time), so that every run is set against the read rate of its own
 * moment: this VM's read rate drifts by a third within seconds, and a best
 * pass taken elsewhere sets a long run's average against a short burst. */
/* The samples of a mode's timed runs. */
typedef struct samples {
  double *lat;  /* per token, microseconds: tokens x runs */
  double *tps;  /* per run */
  double *ttft; /* per run, milliseconds */
  double *rd;   /* per run: the read bound before it; then the fraction of it */
} samples;

/* Run `run` of a mode: a reset, the prompt (its time to first token), then
 * `tokens` timed steps (run 0 records the tokens). */
static int timed_run(ortep_decoder *d, const mode_def *m, const int32_t *prompt, size_t plen, long tokens, long run,
                     long runs, bool progress, samples *sm, mode_result *r, double *cpu_total) {
  int32_t next;
  double p0 = 0;
  if (ortep_decoder_reset(d) || (p0 = bench_now_ns(), ortep_decoder_prefill(d, prompt, plen, &next))) {
    fprintf(stderr, "ortep-bench decode: %s mode: %s\n", m->name, ortep_last_error());
    return 1;
  }
  sm->ttft[run] = (bench_now_ns() - p0) / 1e6; /* the prefill ends with the first token known */
  uint64_t a0 = 0, f0 = 0, a1 = 0, f1 = 0;
  ortep_ep_allocation_counts(ortep_decoder_ep(d), &a0, &f0);
  uint64_t l0 = ortep_decoder_launch_ns(d);
  int32_t pos = (int32_t)plen;
  double c0 = cpu_now_ns(), t_run = bench_now_ns();
  for (long t = 0; t < tokens; t++, pos++) {
    if (run == 0) r->tokens[t] = next;
    double t0 = bench_now_ns();
    if (ortep_decoder_step(d, next, pos, &next) != ORTEP_OK) {
      fprintf(stderr, "ortep-bench decode: %s mode, token %ld: %s\n", m->name, t, ortep_last_error());
      return 1;
    }
    sm->lat[run * tokens + t] = (bench_now_ns() - t0) / 1e3;
    if (progress && (t % 8 == 7 || t + 1 == tokens))
      fprintf(stderr, "\r  %-9s run %ld/%ld  token %ld/%ld  %8.1f tok/s   ", m->name, run + 1, runs, t + 1, tokens,
              (double)(t + 1) / ((bench_now_ns() - t_run) / 1e9));
  }
  sm->tps[run] = (double)tokens / ((bench_now_ns() - t_run) / 1e9);
  *cpu_total += cpu_now_ns() - c0;
  r->launch_us += (double)(ortep_decoder_launch_ns(d) - l0) / 1e3;
  ortep_ep_allocation_counts(ortep_decoder_ep(d), &a1, &f1);
  r->allocs_per_step += (double)(a1 - a0 + f1 - f0);
  return 0;
}

/* What the session and the caches say after the runs, its seams' reasons,
 * and the plan (--explain). */
static void record_session(ortep_decoder *d, const mode_def *m, bool explain, mode_result *r) {
  ortep_session *s = ortep_decoder_session(d);
  ortep_session_stats st;
  ortep_session_get_stats(s, &st);
  r->kernels = st.kernels_per_step, r->segments = st.segments, r->seams = st.seams;
  r->graph_kernels = st.graph_kernel_nodes;
  r->planned = st.planned_bytes, r->lower_bound = st.lower_bound_bytes, r->naive = st.naive_bytes;
  ortep_kv_stats kv;
  ortep_decoder_kv_stats(d, &kv);
  r->kv_bytes = kv.reserved_bytes, r->kv_committed = kv.committed_bytes;
  r->nseams = ortep_session_seam_count(s);
  r->seam_text = calloc(r->nseams + 1, sizeof *r->seam_text);
  if (!r->seam_text) r->nseams = 0;
  for (size_t i = 0; i < r->nseams; i++) {
    const char *node, *op, *reason;
    ortep_session_seam(s, i, &node, &op, &reason);
    size_t len = strlen(node) + strlen(op) + strlen(reason) + 8;
    if ((r->seam_text[i] = malloc(len)))
      snprintf(r->seam_text[i], len, "%s (%s): %s", node, op, reason);
    else
      r->nseams = i; /* keep what fitted: the report lists fewer reasons */
  }
  if (explain) {
    char *plan;
    if (ortep_session_format_plan(s, &plan) == ORTEP_OK) {
      printf("\n[%s] %s", m->name, plan);
      free(plan);
    }
  }
}

/* The medians and percentiles of the runs' samples (pair: a read bound was
 * taken before each run). */
static void summarize(samples *sm, long tokens, long runs, bool pair, size_t read_per_token, double cpu_total,
                      mode_result *r) {
  size_t total = (size_t)(tokens * runs);
  qsort(sm->lat, total, sizeof *sm->lat, cmp_d);
  r->ran = true;
  if (pair) {
    double *frac = sm->rd + runs;
    for (long i = 0; i < runs; i++) frac[i] = sm->tps[i] * (double)read_per_token / sm->rd[i];
    r->frac = bench_median(frac, (size_t)runs);
    r->read_bw = bench_median(sm->rd, (size_t)runs);
  }
  r->tok_s = bench_median(sm->tps, (size_t)runs);
  r->ttft_ms = bench_median(sm->ttft, (size_t)runs);
  r->p50 = pct(sm->lat, total, 0.50), r->p90 = pct(sm->lat, total, 0.90), r->p99 = pct(sm->lat, total, 0.99);
  r->max_us = sm->lat[total - 1];
  r->cpu_us = cpu_total / (double)total / 1e3;
  r->allocs_per_step /= (double)total;
  r->launch_us /= (double)total;
}

/* Opens the decoder for a mode and says what it runs on. */
static int open_mode(const char *dir, const mode_def *m, const ortep_decoder_options *o, ortep_decoder **d,
                     mode_result *r) {
  double o0 = bench_now_ns();
  ortep_status ost = ortep_decoder_open(dir, o, d);
  r->open_s = (bench_now_ns() - o0) / 1e9;
  if (ost == ORTEP_E_INVALID_ARGUMENT) /* e.g. a --seam that names nothing in the graph */
    return bench_usage_error("decode", "%s", ortep_last_error());
  if (ost != ORTEP_OK) {
    fprintf(stderr, "ortep-bench decode: %s mode: %s\n", m->name, ortep_last_error());
    return 1;
  }
  ortep_weights_cache_info wc;
  ortep_decoder_weights_cache(*d, &wc);
  r->weights_cache = (int)wc.state;
  if (wc.state == ORTEP_WEIGHTS_CACHE_REBUILT || wc.state == ORTEP_WEIGHTS_CACHE_FAILED)
    fprintf(stderr, "ortep-bench decode: weights cache %s: %s\n", wc.path, wc.reason);
  return 0;
}

static int run_mode(const char *dir, const mode_def *m, const char *ep, const char *seams, const ortep_config *config,
                    const int32_t *prompt, size_t plen, long tokens, long warmup, long runs, bool explain,
                    bool progress, read_bench **before, size_t read_per_token, mode_result *r, char *ep_used,
                    size_t ep_used_len, size_t *threads_used, const char **simd_used, bool *blocked) {
  ortep_decoder_options o = {.ep = ep,
                             .max_seq_len = (size_t)(plen + (size_t)tokens + (size_t)warmup + 1),
                             .eager = m->eager,
                             .forced_seams = m->seams ? seams : NULL,
                             .config = config};
  ortep_decoder *d;
  int rc = open_mode(dir, m, &o, &d, r);
  if (rc) return rc;
  snprintf(ep_used, ep_used_len, "%s", ortep_ep_name(ortep_decoder_ep(d)));
  *threads_used = ortep_cpu_ep_threads(ortep_decoder_ep(d));
  *simd_used = ortep_cpu_ep_simd(ortep_decoder_ep(d));
  *blocked = ortep_decoder_blocked_weights(d) > 0;
  /* warm-up: captures the graph, touches the weights */
  if (ortep_decoder_prefill(d, prompt, plen, NULL) || ortep_decoder_generate(d, (size_t)warmup + 1, NULL, NULL, NULL)) {
    fprintf(stderr, "ortep-bench decode: %s mode warm-up: %s\n", m->name, ortep_last_error());
    ortep_decoder_close(d);
    return 1;
  }
  size_t total = (size_t)(tokens * runs);
  samples sm = {malloc(total * sizeof *sm.lat), malloc((size_t)runs * sizeof *sm.tps),
                malloc((size_t)runs * sizeof *sm.ttft), malloc(2 * (size_t)runs * sizeof *sm.rd)};
  r->tokens = malloc((size_t)tokens * sizeof *r->tokens);
  if (!sm.lat || !sm.tps || !sm.ttft || !sm.rd || !r->tokens) {
    fprintf(stderr, "ortep-bench decode: no memory for %zu latency samples (--tokens x --runs); lower them\n", total);
    free(sm.lat), free(sm.tps), free(sm.ttft), free(sm.rd), free(r->tokens);
    r->tokens = NULL;
    ortep_decoder_close(d);
    return 1;
  }
  r->ntokens = (size_t)tokens;
  bool pair = before && !strcmp(ep_used, "cpu_ep") && bench_read_binds(read_per_token, *threads_used);
  if (pair && !*before && !(*before = read_new(*threads_used))) {
    fprintf(stderr, "ortep-bench decode: no memory for the read before each run; the bound is taken after the runs\n");
    pair = false;
  }
  double cpu_total = 0;
  for (long run = 0; run < runs && !rc; run++) {
    if (pair) sm.rd[run] = read_rate(*before, (size_t)tokens * read_per_token);
    rc = timed_run(d, m, prompt, plen, tokens, run, runs, progress, &sm, r, &cpu_total);
  }
  if (progress) fprintf(stderr, "\r%70s\r", "");
  if (!rc) {
    summarize(&sm, tokens, runs, pair, read_per_token, cpu_total, r);
    record_session(d, m, explain, r);
  }
  free(sm.lat), free(sm.tps), free(sm.ttft), free(sm.rd);
  ortep_decoder_close(d);
  return rc;
}

/* --- the command: parse, prepare, run, compare, report ------------------------ */
typedef struct decode_opts {
  tool_model m; /* --model/--preset, --dtype, --ep, --threads, --weights, --layout */
  const char *seams, *json_path;
  long plen, tokens, warmup, runs;
  bool explain, profile, want[NMODES];
  size_t per_launch[8], n_per_launch; /* --tokens-per-launch */
  bool per_launch_given, mode_given;
  char dtype_list[256]; /* --dtype A,B,...: the types compared (dtypes.c) */
  const char *dtypes[BENCH_DTYPES_MAX];
  size_t ndtypes;
} decode_opts;

typedef struct decode_run {
  char dir[4096];
  ortep_model_config cfg;
  size_t weight_bytes, read_per_token;
  int32_t *prompt;
  FILE *json;
  mode_result res[NMODES];
  char ep_used[64];
  size_t threads_used;
  const char *simd_used; /* the CPU EP's dot products; NULL for another EP */
  bool blocked;          /* the projections ran from the CPU EP's blocked layout */
  cJSON *prof;
  bool agree;
  double bw; /* the read bound (CPU EP), 0 when not measured */
  bool has_wdtype;
  ortep_dtype wdtype; /* of the projections (layer 0's down_proj), when the file has one */
  double kbw;         /* the Linear kernel alone (linear_bench), 0 when not measured */
  size_t krows;
  bool kblocked;          /* its weight blocked */
  bench_launch launch[8]; /* --tokens-per-launch */
  size_t n_launch;
} decode_run;

/* --tokens-per-launch K,... (each 0..64) or none. */
static int parse_per_launch(const char *arg, decode_opts *o) {
  o->n_per_launch = 0;
  if (!strcmp(arg, "none")) return 0;
  char copy[256];
  snprintf(copy, sizeof copy, "%s", arg);
  int rc = 0;
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
    long k;
    if (o->n_per_launch == sizeof o->per_launch / sizeof *o->per_launch)
      return bench_usage_error("decode", "--tokens-per-launch lists at most 8 values");
    if (!(rc = bench_parse_count("decode", "--tokens-per-launch", t, 0, 64, &k)))
      o->per_launch[o->n_per_launch++] = (size_t)k;
  }
  if (!rc && !o->n_per_launch) rc = bench_usage_error("decode", "--tokens-per-launch is empty; give K,... or none");
  return rc;
}

/* --dtype A,B,... (bench_parse_dtype_list): graph mode only, so the options
 * of the other modes are refused. -1: go on; otherwise the usage error's
 * exit code. */
static int parse_dtypes(decode_opts *o, const char *mode) {
  int rc = bench_parse_dtype_list("decode", &o->m, o->dtype_list, sizeof o->dtype_list, o->dtypes, &o->ndtypes);
  if (rc) return rc;
  if (o->mode_given && strcmp(mode, "graph"))
    return bench_usage_error("decode", "--dtype with several types runs graph mode only; drop --mode %s", mode);
  if (o->explain || o->profile || o->per_launch_given)
    return bench_usage_error("decode", "--dtype with several types compares graph-mode runs; %s goes with one type",
                             o->explain   ? "--explain"
                             : o->profile ? "--profile"
                                          : "--tokens-per-launch");
  return -1;
}

/* -1: go on; otherwise the exit code (help: 0, usage errors: 2). */
static int parse(int argc, char **argv, decode_opts *o) {
  *o = (decode_opts){.m = {.prog = "ortep-bench", .cmd = "decode"},
                     .seams = "GroupQueryAttention",
                     .plen = 16,
                     .tokens = 64,
                     .warmup = 8,
                     .runs = 5,
                     .per_launch = {1, 4, 16},
                     .n_per_launch = 3};
  const char *mode = "all";
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,
                                     {"mode", required_argument, 0, 'M'},
                                     {"seam", required_argument, 0, 's'},
                                     {"prompt-len", required_argument, 0, 'P'},
                                     {"tokens", required_argument, 0, 'n'},
                                     {"warmup", required_argument, 0, 'w'},
                                     {"runs", required_argument, 0, 'r'},
                                     {"json", required_argument, 0, 'j'},
                                     {"explain", no_argument, 0, 'x'},
                                     {"profile", no_argument, 0, 'F'},
                                     {"tokens-per-launch", required_argument, 0, 'K'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("decode", argc, argv, lo, decode_usage, &rc)) >= 0) {
    if (tool_model_option(&o->m, c, optarg, &rc)) {
      if (rc) return rc;
      continue;
    }
    switch (c) {
      case 'M': mode = optarg, o->mode_given = true; break;
      case 's': o->seams = optarg; break;
      case 'P': rc = bench_parse_count("decode", "--prompt-len", optarg, 1, 100000, &o->plen); break;
      case 'n': rc = bench_parse_count("decode", "--tokens", optarg, 1, 1000000, &o->tokens); break;
      case 'w': rc = bench_parse_count("decode", "--warmup", optarg, 0, 1000000, &o->warmup); break;
      case 'r': rc = bench_parse_count("decode", "--runs", optarg, 1, 10000, &o->runs); break;
      case 'j': o->json_path = optarg; break;
      case 'x': o->explain = true; break;
      case 'F': o->profile = true; break;
      case 'K': rc = parse_per_launch(optarg, o), o->per_launch_given = o->n_per_launch > 0; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  if (o->m.dtype && strchr(o->m.dtype, ',')) {
    if ((rc = parse_dtypes(o, mode)) != -1) return rc;
  } else if ((rc = tool_model_check(&o->m, true)) != 0) {
    return rc;
  }
  bool all = !strcmp(mode, "all"), found = all;
  for (int i = 0; i < NMODES; i++) {
    o->want[i] = all || !strcmp(mode, modes[i].name);
    found = found || o->want[i];
  }
  if (!found) return bench_usage_error("decode", "--mode '%s' is not one of eager, graph, segmented, all", mode);
  return -1;
}

/* The model (written the first time for a preset), its sizes, the prompt and
 * the --json file: -1 to go on, else the exit code. */
static int prepare(decode_opts *o, decode_run *r) {
  int rc = tool_model_resolve(&o->m, true);
  if (rc) return rc;
  snprintf(r->dir, sizeof r->dir, "%s", o->m.dir);
  ortep_model *mdl;
  if (ortep_model_open(r->dir, &mdl) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench decode: %s\n", ortep_last_error());
    return 1;
  }
  r->cfg = *ortep_model_get_config(mdl);
  const ortep_safetensors_entry *proj = ortep_model_tensor(mdl, "model.layers.0.mlp.down_proj.weight");
  r->has_wdtype = proj != NULL;
  r->wdtype = proj ? proj->dtype : ORTEP_DTYPE_F32;
  if (tool_model_quantized(&o->m)) ortep_dtype_parse(o->m.dtype, &r->wdtype);
  r->weight_bytes = bench_held_weight_bytes(&o->m, mdl, &r->read_per_token);
  ortep_model_close(mdl);
  if ((size_t)o->plen + (size_t)o->tokens + (size_t)o->warmup + 1 > (size_t)r->cfg.max_position_embeddings)
    return bench_usage_error("decode", "--prompt-len + --tokens + --warmup exceeds the model's %lld positions",
                             (long long)r->cfg.max_position_embeddings);
  if (!(r->prompt = malloc((size_t)o->plen * sizeof *r->prompt))) {
    fprintf(stderr, "ortep-bench decode: no memory for a %ld-token prompt\n", o->plen);
    return 1;
  }
  for (long i = 0; i < o->plen; i++) r->prompt[i] = (int32_t)((i * 7919 + 13) % r->cfg.vocab_size);
  /* created now: an unwritable --json fails before the run, not after it */
  if (o->json_path && !(r->json = bench_json_open(o->json_path))) return 1;
  return -1;
}

/* Every wanted mode, then the profile: 0 or the exit code of the failure. */
static int run_all(const decode_opts *o, decode_run *r) {
  bench_print_header("decode");
  printf(
      "model %s (%s, hidden %lld, %lld layers, vocab %lld, %.1f MiB of weights); prompt %ld, %ld tokens x %ld runs, "
      "warm-up %ld\n",
      o->m.model ? o->m.model : o->m.preset, r->cfg.arch == ORTEP_ARCH_QWEN2 ? "qwen2" : "llama",
      (long long)r->cfg.hidden_size, (long long)r->cfg.num_hidden_layers, (long long)r->cfg.vocab_size,
      (double)r->weight_bytes / 1048576.0, o->plen, o->tokens, o->runs, o->warmup);
  ortep_config *config = NULL;
  if (tool_model_config(&o->m, &config)) return 1;
  bool progress = isatty(2);
  int rc = 0;
  read_bench *before = NULL;
  for (int i = 0; i < NMODES && !rc; i++)
    if (o->want[i])
      rc = run_mode(r->dir, &modes[i], o->m.ep, o->seams, config, r->prompt, (size_t)o->plen, o->tokens, o->warmup,
                    o->runs, o->explain, progress, &before, r->read_per_token, &r->res[i], r->ep_used,
                    sizeof r->ep_used, &r->threads_used, &r->simd_used, &r->blocked);
  read_delete(before);
  r->n_launch = o->n_per_launch;
  for (size_t i = 0; i < r->n_launch; i++) r->launch[i] = (bench_launch){.k = o->per_launch[i]};
  if (r->n_launch && !rc)
    rc = bench_launch_run(r->dir, o->m.ep, config, r->prompt, (size_t)o->plen, o->tokens, o->runs, r->launch,
                          r->n_launch);
  if (o->profile && !rc) rc = profile_run(r->dir, o->m.ep, config, r->prompt, (size_t)o->plen, o->tokens, &r->prof);
  ortep_config_destroy(config);
  return rc;
}

/* Every mode must produce the same tokens. A test hook (ORTEP_BENCH_PERTURB=
 * <mode>) flips one token to prove this is checked. */
static bool compare(decode_run *r) {
  const char *perturb = getenv("ORTEP_BENCH_PERTURB");
  mode_result *res = r->res;
  for (int i = 0; perturb && i < NMODES; i++)
    if (res[i].ran && !strcmp(perturb, modes[i].name)) res[i].tokens[res[i].ntokens / 2] ^= 1;
  int first = -1;
  for (int i = 0; i < NMODES; i++) {
    if (!res[i].ran) continue;
    if (first < 0) {
      first = i;
      continue;
    }
    for (size_t t = 0; t < res[i].ntokens; t++)
      if (res[i].tokens[t] != res[first].tokens[t]) {
        fprintf(stderr, "ortep-bench decode: %s and %s disagree at generated token %zu (%d vs %d)\n", modes[first].name,
                modes[i].name, t, res[first].tokens[t], res[i].tokens[t]);
        return false;
      }
  }
  for (size_t k = 0; first >= 0 && k < r->n_launch; k++)
    for (size_t t = 0; r->launch[k].ran && t < r->launch[k].ntokens; t++)
      if (r->launch[k].tokens[t] != res[first].tokens[t]) {
        fprintf(stderr, "ortep-bench decode: %zu tokens per launch and %s disagree at generated token %zu (%d vs %d)\n",
                r->launch[k].k, modes[first].name, t, r->launch[k].tokens[t], res[first].tokens[t]);
        return false;
      }
  return true;
}

static mode_id best_mode(const decode_run *r) {
  return r->res[MODE_GRAPH].ran ? MODE_GRAPH : r->res[MODE_SEGMENTED].ran ? MODE_SEGMENTED : MODE_EAGER;
}

/* After the runs: the peak read (r->bw) and, where the model has
 * projections, the Linear kernel's rate (r->kbw), each the best of
 * BENCH_READ_PASSES passes of 512 MiB taken in alternation (read, kernel, read,
 * ...), so that both see the same moments of a machine whose bandwidth
 * drifts. The peak is the bound where no read went before the runs (the
 * weights fit in cache). A figure that cannot be measured is left 0 (and
 * out of the report). */
static void measure_bounds(decode_run *r) {
  read_bench *rb = read_new(r->threads_used);
  linear_bench lb = {0};
  bool read_ok = rb != NULL;
  bool lin_ok =
      read_ok && r->has_wdtype && linear_open(&lb, r->threads_used, r->wdtype, (size_t)r->cfg.hidden_size, r->blocked);
  if (read_ok && r->has_wdtype && !lin_ok)
    fprintf(stderr, "ortep-bench decode: the Linear kernel alone (%s) could not run: %s\n", ortep_dtype_name(r->wdtype),
            ortep_last_error());
  for (int pass = 0; pass < BENCH_READ_PASSES && read_ok; pass++) {
    double bw = read_rate(rb, BENCH_READ_BYTES);
    if (bw > r->bw) r->bw = bw;
    if (!lin_ok) continue;
    double kbw = linear_pass(&lb);
    lin_ok = kbw > 0;
    if (kbw > r->kbw) r->kbw = kbw;
  }
  if (!lin_ok) r->kbw = 0;
  r->krows = lb.rows;
  r->kblocked = lb.blocked;
  read_delete(rb);
  if (r->has_wdtype) linear_close(&lb);
}

static bool binding(const decode_run *r) { return bench_read_binds(r->read_per_token, r->threads_used); }

/* What the rest of a step costs: decode over the kernel alone, each as a
 * fraction of a read taken like it (the runs against the reads before them,
 * the kernel's best pass against the best read pass), or decode's median
 * over the kernel's best where no read went before the runs. */
static double decode_over_kernel(const decode_run *r) {
  const mode_result *m = &r->res[best_mode(r)];
  return m->frac > 0 ? m->frac / (r->kbw / r->bw) : m->tok_s * (double)r->read_per_token / r->kbw;
}

/* The weight-bandwidth bound of the best mode, and the Linear kernel alone. */
static void report_bound(const decode_run *r) {
  const mode_result *res = r->res;
  mode_id b = best_mode(r);
  double mib = (double)r->read_per_token / 1048576.0;
  if (res[b].frac > 0) {
    printf(
        "  weight-bandwidth bound: %.1f MiB read per token / %.1f GB/s (a %zu-thread streaming read of as many bytes "
        "as each timed run, at least 512 MiB, right before it; median) = %.0f tokens/s at best; %s achieves %.0f%% "
        "(median over its runs, each against the read before it)\n",
        mib, res[b].read_bw / 1e9, r->threads_used, res[b].read_bw / (double)r->read_per_token, modes[b].name,
        100.0 * res[b].frac);
    if (r->bw > 0)
      printf("  peak read: %.1f GB/s (best of 10 passes of 512 MiB after the runs); %s achieves %.0f%% of it\n",
             r->bw / 1e9, modes[b].name, 100.0 * res[b].tok_s * (double)r->read_per_token / r->bw);
  } else if (r->bw > 0) {
    double best_tps = r->bw / (double)r->read_per_token;
    printf(
        "  weight-bandwidth bound: %.1f MiB read per token / %.1f GB/s read with %zu threads = %.0f tokens/s at best; "
        "%s achieves %.0f%%%s\n",
        mib, r->bw / 1e9, r->threads_used, best_tps, modes[b].name, 100.0 * res[b].tok_s / best_tps,
        binding(r) ? "" : " (the weights fit in cache, so the bound is not binding)");
  }
  if (r->bw > 0 && r->kbw > 0) {
    printf(
        "  Linear kernel alone: [1, %lld] x [%zu, %lld]^T %s%s (%.0f MiB, %zu threads, best of 10) reads %.1f GB/s "
        "= %.0f%% of the peak read",
        (long long)r->cfg.hidden_size, r->krows, (long long)r->cfg.hidden_size, ortep_dtype_name(r->wdtype),
        r->kblocked ? " blocked" : "",
        (double)(r->krows * (size_t)r->cfg.hidden_size / ortep_dtype_block(r->wdtype) * ortep_dtype_size(r->wdtype)) /
            1048576.0,
        r->threads_used, r->kbw / 1e9, 100.0 * r->kbw / r->bw);
    if (binding(r))
      printf("; %s decode reaches %.0f%% of it%s\n", modes[b].name, 100.0 * decode_over_kernel(r),
             res[b].frac > 0 ? " (its fraction of the read before each run over the kernel's of the peak)" : "");
    else
      printf("\n");
  }
}

/* K tokens per launch (launch.c). */
static void report_launch(const decode_opts *o, const decode_run *r) {
  if (!r->n_launch || !r->launch[0].ran) return;
  printf("\ntokens per launch (graph mode; one generate call of %ld tokens per run, medians of %ld interleaved runs)\n",
         o->tokens, o->runs);
  printf("  %6s %12s %10s %16s\n", "K", "tokens/s", "vs first", "launches/call");
  for (size_t i = 0; i < r->n_launch; i++) {
    char k[24];
    snprintf(k, sizeof k, r->launch[i].k ? "%zu" : "auto", r->launch[i].k);
    printf("  %6s %12.1f %9.2fx %16.0f\n", k, r->launch[i].tok_s, r->launch[i].tok_s / r->launch[0].tok_s,
           r->launch[i].launches);
  }
}

static void report_table(const decode_opts *o, const decode_run *r) {
  const mode_result *res = r->res;
  if (r->simd_used)
    printf("\nEP %s (%zu threads, %s dot products, %s weights)\n", r->ep_used, r->threads_used, r->simd_used,
           r->blocked ? "blocked" : "row-major");
  else
    printf("\nEP %s\n", r->ep_used);
  printf("  %-28s", "");
  for (int i = 0; i < NMODES; i++)
    if (res[i].ran) printf("%14s", modes[i].name);
  printf("\n");
#define ROW(label, fmt, expr)            \
  do {                                   \
    printf("  %-28s", label);            \
    for (int i = 0; i < NMODES; i++)     \
      if (res[i].ran) printf(fmt, expr); \
    printf("\n");                        \
  } while (0)
  ROW("tokens/s (median of runs)", "%14.1f", res[i].tok_s);
  ROW("time to first token (ms)", "%14.2f", res[i].ttft_ms);
  ROW("prefill tokens/s", "%14.1f", (double)o->plen / res[i].ttft_ms * 1e3);
  ROW("weights read (GB/s)", "%14.2f", res[i].tok_s * (double)r->read_per_token / 1e9);
  ROW("latency p50 (us)", "%14.1f", res[i].p50);
  ROW("latency p90 (us)", "%14.1f", res[i].p90);
  ROW("latency p99 (us)", "%14.1f", res[i].p99);
  ROW("latency max (us)", "%14.1f", res[i].max_us);
  ROW("host CPU per token (us)", "%14.1f", res[i].cpu_us); /* the decode thread's */
  ROW("host launch per token (us)", "%14.1f", res[i].launch_us);
  ROW("kernels per token", "%14zu", res[i].kernels);
  ROW("  in device graphs", "%14zu", res[i].graph_kernels);
  ROW("segments", "%14zu", res[i].segments);
  ROW("seams", "%14zu", res[i].seams);
  ROW("allocations per step", "%14.2f", res[i].allocs_per_step);
  ROW("open (s)", "%14.3f", res[i].open_s);
  ROW("  weights cache", "%14s", ortep_weights_cache_state_name((ortep_weights_cache_state)res[i].weights_cache));
  ROW("planned arena (KiB)", "%14.1f", (double)res[i].planned / 1024.0);
  ROW("  lower bound (KiB)", "%14.1f", (double)res[i].lower_bound / 1024.0);
  ROW("  naive sum (KiB)", "%14.1f", (double)res[i].naive / 1024.0);
  ROW("KV reserved (KiB)", "%14.1f", (double)res[i].kv_bytes / 1024.0);
  ROW("KV committed (KiB)", "%14.1f", (double)res[i].kv_committed / 1024.0);
#undef ROW
  for (int i = 0; i < NMODES; i++)
    for (size_t k = 0; res[i].ran && k < res[i].nseams && k < 8; k++)
      printf("  %s seam: %s\n", modes[i].name, res[i].seam_text[k]);
  if (res[MODE_EAGER].ran && res[MODE_GRAPH].ran)
    printf("  graph over eager: %.2fx tokens/s (same run)\n", res[MODE_GRAPH].tok_s / res[MODE_EAGER].tok_s);
  if (res[MODE_EAGER].ran && res[MODE_SEGMENTED].ran)
    printf("  segmented over eager: %.2fx tokens/s (same run)\n", res[MODE_SEGMENTED].tok_s / res[MODE_EAGER].tok_s);
  printf("  token ids: %s across modes%s\n", r->agree ? "identical" : "DIFFERENT (error)",
         r->n_launch ? " and tokens per launch" : "");
  report_launch(o, r);
  report_bound(r);
  if (r->prof) print_profile(r->prof, o->tokens);
}

/* One mode's figures. */
static void mode_json(cJSON *jm, int i, const mode_result *res, const decode_opts *o, const decode_run *r) {
  cJSON *m = cJSON_AddObjectToObject(jm, modes[i].name);
  cJSON_AddNumberToObject(m, "tokens_per_s", res->tok_s);
  cJSON_AddNumberToObject(m, "ttft_ms", res->ttft_ms);
  cJSON_AddNumberToObject(m, "prefill_tokens_per_s", (double)o->plen / res->ttft_ms * 1e3);
  cJSON_AddNumberToObject(m, "weight_bytes_per_s", res->tok_s * (double)r->read_per_token);
  if (res->frac > 0) {
    cJSON_AddNumberToObject(m, "read_before_runs_bytes_per_s", res->read_bw);
    cJSON_AddNumberToObject(m, "fraction_of_read_before_runs", res->frac);
  }
  cJSON_AddNumberToObject(m, "latency_p50_us", res->p50);
  cJSON_AddNumberToObject(m, "latency_p90_us", res->p90);
  cJSON_AddNumberToObject(m, "latency_p99_us", res->p99);
  cJSON_AddNumberToObject(m, "latency_max_us", res->max_us);
  cJSON_AddNumberToObject(m, "host_cpu_us_per_token", res->cpu_us);
  cJSON_AddNumberToObject(m, "host_launch_us_per_token", res->launch_us);
  cJSON_AddNumberToObject(m, "kernels_per_token", (double)res->kernels);
  cJSON_AddNumberToObject(m, "graph_kernel_nodes", (double)res->graph_kernels);
  cJSON_AddNumberToObject(m, "segments", (double)res->segments);
  cJSON_AddNumberToObject(m, "seams", (double)res->seams);
  cJSON *js = cJSON_AddArrayToObject(m, "seam_reasons");
  for (size_t k = 0; k < res->nseams; k++) cJSON_AddItemToArray(js, cJSON_CreateString(res->seam_text[k]));
  cJSON_AddNumberToObject(m, "allocations_per_step", res->allocs_per_step);
  cJSON_AddNumberToObject(m, "open_seconds", res->open_s);
  cJSON_AddStringToObject(m, "weights_cache",
                          ortep_weights_cache_state_name((ortep_weights_cache_state)res->weights_cache));
  cJSON_AddNumberToObject(m, "planned_arena_bytes", (double)res->planned);
  cJSON_AddNumberToObject(m, "lower_bound_bytes", (double)res->lower_bound);
  cJSON_AddNumberToObject(m, "naive_sum_bytes", (double)res->naive);
  cJSON_AddNumberToObject(m, "kv_reserved_bytes", (double)res->kv_bytes);
  cJSON_AddNumberToObject(m, "kv_committed_bytes", (double)res->kv_committed);
  cJSON *jt = cJSON_AddArrayToObject(m, "token_ids");
  for (size_t t = 0; t < res->ntokens; t++) cJSON_AddItemToArray(jt, cJSON_CreateNumber(res->tokens[t]));
}

/* The bandwidth bound of the best mode and the Linear kernel beside it. */
static void bound_json(cJSON *root, const decode_run *r) {
  const mode_result *res = r->res;
  const mode_result *best = &res[best_mode(r)];
  if (best->frac > 0 || r->bw > 0) {
    double bound = best->frac > 0 ? best->read_bw : r->bw;
    cJSON *b = cJSON_AddObjectToObject(root, "bandwidth_bound");
    cJSON_AddStringToObject(b, "read", best->frac > 0 ? "before_each_run" : "best_pass");
    cJSON_AddNumberToObject(b, "weight_bytes_per_token", (double)r->read_per_token);
    cJSON_AddNumberToObject(b, "read_bytes_per_s", bound);
    cJSON_AddNumberToObject(b, "threads", (double)r->threads_used);
    cJSON_AddNumberToObject(b, "best_tokens_per_s", bound / (double)r->read_per_token);
    cJSON_AddNumberToObject(b, "fraction_achieved",
                            best->frac > 0 ? best->frac : best->tok_s * (double)r->read_per_token / bound);
    if (r->bw > 0) {
      cJSON_AddNumberToObject(b, "peak_read_bytes_per_s", r->bw);
      cJSON_AddNumberToObject(b, "fraction_of_peak", best->tok_s * (double)r->read_per_token / r->bw);
    }
    if (r->bw > 0 && r->kbw > 0) {
      cJSON *l = cJSON_AddObjectToObject(b, "linear_kernel");
      cJSON_AddStringToObject(l, "dtype", ortep_dtype_name(r->wdtype));
      cJSON_AddStringToObject(l, "layout", r->kblocked ? "blocked" : "row_major");
      cJSON_AddNumberToObject(l, "k", (double)r->cfg.hidden_size);
      cJSON_AddNumberToObject(l, "rows", (double)r->krows);
      cJSON_AddNumberToObject(l, "read_bytes_per_s", r->kbw);
      cJSON_AddNumberToObject(l, "fraction_of_read", r->kbw / r->bw);
      if (binding(r)) cJSON_AddNumberToObject(l, "decode_fraction_of_kernel", decode_over_kernel(r));
    }
  }
}

static cJSON *report_json(const decode_opts *o, decode_run *r) {
  const mode_result *res = r->res;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "decode");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "ep", r->ep_used);
  cJSON_AddStringToObject(root, "model", o->m.model ? o->m.model : o->m.preset);
  cJSON_AddStringToObject(root, "model_kind", o->m.model ? "path" : "preset");
  cJSON_AddStringToObject(root, "dtype", o->m.model ? "file" : o->m.dtype);
  cJSON_AddStringToObject(root, "weights", o->m.weights ? o->m.weights : "map");
  cJSON_AddNumberToObject(root, "weight_bytes", (double)r->weight_bytes);
  cJSON_AddNumberToObject(root, "prompt_len", (double)o->plen);
  cJSON_AddNumberToObject(root, "tokens", (double)o->tokens);
  cJSON_AddNumberToObject(root, "warmup", (double)o->warmup);
  cJSON_AddNumberToObject(root, "runs", (double)o->runs);
  cJSON *jp = cJSON_AddArrayToObject(root, "prompt_token_ids");
  for (long i = 0; i < o->plen; i++) cJSON_AddItemToArray(jp, cJSON_CreateNumber(r->prompt[i]));
  cJSON *jm = cJSON_AddObjectToObject(root, "modes");
  for (int i = 0; i < NMODES; i++) {
    if (!res[i].ran) continue;
    mode_json(jm, i, &res[i], o, r);
  }
  if (res[MODE_EAGER].ran && res[MODE_GRAPH].ran)
    cJSON_AddNumberToObject(root, "speedup_graph_over_eager", res[MODE_GRAPH].tok_s / res[MODE_EAGER].tok_s);
  if (res[MODE_EAGER].ran && res[MODE_SEGMENTED].ran)
    cJSON_AddNumberToObject(root, "speedup_segmented_over_eager", res[MODE_SEGMENTED].tok_s / res[MODE_EAGER].tok_s);
  cJSON_AddBoolToObject(root, "tokens_agree", r->agree);
  if (r->simd_used) cJSON_AddStringToObject(root, "cpu_simd", r->simd_used);
  cJSON_AddStringToObject(root, "weights_layout", r->blocked ? "blocked" : "row_major");
  bound_json(root, r);
  cJSON *jl = r->n_launch && r->launch[0].ran ? cJSON_AddArrayToObject(root, "tokens_per_launch") : NULL;
  for (size_t i = 0; jl && i < r->n_launch; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "tokens_per_launch", (double)r->launch[i].k);
    cJSON_AddNumberToObject(e, "tokens_per_s", r->launch[i].tok_s);
    cJSON_AddNumberToObject(e, "launches_per_call", r->launch[i].launches);
    cJSON_AddItemToArray(jl, e);
  }
  if (r->prof) cJSON_AddItemToObject(root, "profile_us_per_token", r->prof), r->prof = NULL;
  return root;
}

/* Everything prepare and run_all made; an unfinished --json file is removed. */
static void release(const decode_opts *o, decode_run *r) {
  if (r->json) fclose(r->json), remove(o->json_path);
  cJSON_Delete(r->prof);
  for (int i = 0; i < NMODES; i++) {
    free(r->res[i].tokens);
    for (size_t k = 0; k < r->res[i].nseams; k++) free(r->res[i].seam_text[k]);
    free(r->res[i].seam_text);
  }
  free(r->prompt);
  for (size_t i = 0; i < r->n_launch; i++) free(r->launch[i].tokens);
}

int bench_decode_main(int argc, char **argv) {
  decode_opts o;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  decode_run r = {.agree = true};
  if ((rc = prepare(&o, &r)) >= 0) {
    release(&o, &r);
    return rc;
  }
  if (o.ndtypes > 1) {
    bench_dtypes a = {&o.m,     o.dtypes, o.ndtypes, r.prompt, (size_t)o.plen,
                      o.tokens, o.warmup, o.runs,    &r.json,  o.json_path};
    rc = bench_decode_dtypes(&a);
    release(&o, &r);
    return rc;
  }
  rc = run_all(&o, &r);
  r.agree = compare(&r);
  if (!r.agree && !rc) rc = 1;
  bool any = false;
  for (int i = 0; i < NMODES; i++) any = any || r.res[i].ran;
  if (any) { /* otherwise the error is already on stderr and there are no figures */
    if (!rc && !strcmp(r.ep_used, "cpu_ep")) measure_bounds(&r);
    report_table(&o, &r);
    cJSON *root = report_json(&o, &r);
    if (r.json && bench_json_finish(r.json, o.json_path, root)) rc = 1;
    r.json = NULL;
    cJSON_Delete(root);
  } else if (!rc) {
    rc = 1;
  }
  release(&o, &r);
  return rc;
}
