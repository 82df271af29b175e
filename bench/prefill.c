/*
 * prefill.c: `ortep-bench prefill`, time to the first token of a prompt run
 * token by token and in chunks (batched prefill), side by side in one run,
 * for several prompt lengths.
 *
 * Two decoders over the same model: prefill_chunk 1 (one decode step per
 * token) and the chunked default (or --chunk N). Each is warmed up first
 * (captures its graphs), then every run resets it and times one
 * ortep_decoder_prefill of the prompt: that call ends with the first
 * generated token known, so its time is the time to first token. The two
 * next tokens are compared and the largest logit difference is reported.
 * On the CPU EP the chunked rate is also given as a fraction of the machine's
 * GEMM rate: an OpenBLAS sgemm of the chunk's MLP shape ([chunk, hidden] x
 * [hidden, intermediate]) measured in the same run with the same threads,
 * and of the EP's own ortep:Linear of that shape for the model's dtype (the
 * 16-bit GEMM peak: bf16 x bf16 with AVX512-BF16 where cpu.products allows),
 * with f32, f16 and bf16 weights reported side by side.
 */
#include <cblas.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "model_options.h"
#include "ortep/backend_impl.h" /* ortep_kernel_io: one Linear run on the decoder's EP */

void openblas_set_num_threads(int num_threads);

#define MAX_LENGTHS 16

static const char prefill_usage[] =
    "usage: ortep-bench prefill [--model DIR | --preset NAME] [--dtype f32|f16|bf16|q8_0|q4_0] [--ep auto|cpu|cuda]\n"
    "                           [--lengths L,...] [--chunk N] [--runs R] [--threads N] [--weights map|read]\n"
    "                           [--layout auto|blocked|row_major] [--profile] [--json FILE]\n"
    "       ortep-bench prefill --dtype A,B,... [--model DIR | --preset NAME] [--lengths L,...] [--runs R] ...\n"
    "\n"
    "Time to the first token of a prompt (the whole ortep_decoder_prefill call), token by\n"
    "token vs in chunks, side by side for each prompt length, in graph mode. With a list of\n"
    "types (--dtype bf16,q8_0,q4_0): the chunked prefill of each, opened side by side, timed\n"
    "in --runs rounds that run every type once in turn; the speed over the first type per round.\n"
    "\n" TOOL_MODEL_HELP
    "  --lengths L,...  prompt lengths (default 16,128,512)\n"
    "  --chunk N        the largest prefill chunk (prefill_chunk; default 0: 256, 128, ..., 2)\n"
    "  --runs R         timed prefills per length and way (default 3; the median is reported)\n"
    "  --profile        also prefill the longest prompt once more in eager mode with every node\n"
    "                   timed, and print where its time goes by op type (all chunk graphs together)\n"
    "  --json FILE      also write the figures as JSON\n"
    "  -h, --help       this text\n";

typedef struct prefill_opts {
  tool_model m; /* --model/--preset, --dtype, --ep, --threads, --weights, --layout */
  const char *json_path;
  long lengths[MAX_LENGTHS];
  size_t n_lengths;
  long chunk, runs;
  bool profile;
  char dtype_list[256]; /* --dtype A,B,...: the types compared */
  const char *dtypes[BENCH_DTYPES_MAX];
  size_t ndtypes;
} prefill_opts;

static int parse_lengths(const char *arg, prefill_opts *o) {
  o->n_lengths = 0;
  for (const char *p = arg; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 1000000 || (*end && *end != ','))
      return bench_usage_error("prefill", "--lengths '%s': give prompt lengths from 1 to 1000000 separated by commas",
                               arg);
    if (o->n_lengths == MAX_LENGTHS)
      return bench_usage_error("prefill", "--lengths '%s': at most %d lengths", arg, MAX_LENGTHS);
    o->lengths[o->n_lengths++] = v;
    p = *end ? end + 1 : end;
  }
  if (!o->n_lengths) return bench_usage_error("prefill", "--lengths is empty");
  return 0;
}

static int parse(int argc, char **argv, prefill_opts *o) {
  *o = (prefill_opts){
      .m = {.prog = "ortep-bench", .cmd = "prefill"}, .lengths = {16, 128, 512}, .n_lengths = 3, .runs = 3};
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,
                                     {"lengths", required_argument, 0, 'L'},
                                     {"chunk", required_argument, 0, 'c'},
                                     {"runs", required_argument, 0, 'r'},
                                     {"json", required_argument, 0, 'j'},
                                     {"profile", no_argument, 0, 'F'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("prefill", argc, argv, lo, prefill_usage, &rc)) >= 0) {
    if (!tool_model_option(&o->m, c, optarg, &rc)) switch (c) {
        case 'L': rc = parse_lengths(optarg, o); break;
        case 'c': rc = bench_parse_count("prefill", "--chunk", optarg, 2, 1000000, &o->chunk); break;
        case 'r': rc = bench_parse_count("prefill", "--runs", optarg, 1, 10000, &o->runs); break;
        case 'j': o->json_path = optarg; break;
        case 'F': o->profile = true; break;
      }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  if (o->m.dtype && strchr(o->m.dtype, ',')) {
    if ((rc = bench_parse_dtype_list("prefill", &o->m, o->dtype_list, sizeof o->dtype_list, o->dtypes, &o->ndtypes)))
      return rc;
    if (o->profile)
      return bench_usage_error("prefill", "--dtype with several types compares timings; --profile goes with one type");
    return -1;
  }
  return tool_model_check(&o->m, true) ? 2 : -1;
}

/* Best-of-10 GFLOP/s of an OpenBLAS sgemm [m, k] x [k, n] on `threads`
 * threads (OpenBLAS's own; set back to one after, as the CPU EP wants). */
double bench_sgemm_gflops(size_t m, size_t k, size_t n, size_t threads) {
  float *a = malloc(m * k * sizeof *a), *b = malloc(k * n * sizeof *b), *c = malloc(m * n * sizeof *c);
  double best = 0;
  if (a && b && c) {
    for (size_t i = 0; i < m * k; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < k * n; i++) b[i] = (float)(i % 7) * 0.01f;
    openblas_set_num_threads((int)threads);
    for (int rep = 0; rep < 11; rep++) { /* the first warms up */
      double t0 = bench_now_ns();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f,
                  c, (int)n);
      double g = 2.0 * (double)m * (double)k * (double)n / (bench_now_ns() - t0);
      if (rep && g > best) best = g;
    }
    openblas_set_num_threads(1);
  }
  free(a), free(b), free(c);
  return best;
}

/* Best-of-5 GFLOP/s of one ortep:Linear [m, k] x [k, n] of dt weights on
 * ep, as the chunk graphs run it (16-bit weights in the CPU EP's blocked
 * layout [n/4, k/16, 4, 16], q8_0 / q4_0 in its tiles [n/16, k/32, 16,
 * 32], f32 row-major): 0 when the EP does not take it. The weights are
 * ordinary values (bench_fill_weights): over arbitrary bytes, subnormal
 * products held an Intel Xeon's f32 Linear of the 0.5B MLP shape to 8
 * GFLOP/s. */
double bench_linear_gflops(ortep_ep *ep, ortep_dtype dt, size_t m, size_t k, size_t n) {
  bool quant = ortep_dtype_is_quantized(dt);
  size_t wbytes = quant ? n * (k / 32) * ortep_dtype_size(dt) : n * k * ortep_dtype_size(dt);
  float *x = malloc(m * k * sizeof *x), *y = malloc(m * n * sizeof *y);
  unsigned char *w = malloc(wbytes);
  ortep_graph *g = NULL;
  ortep_kernel *kern = NULL;
  double best = 0;
  if (!x || !y || !w || ortep_graph_create(&g) != ORTEP_OK) goto done;
  for (size_t i = 0; i < m * k; i++) x[i] = (float)(i % 13) * 0.01f;
  bench_fill_weights(w, wbytes, dt);
  const char *in[] = {"x", "w"}, *out[] = {"y"};
  ortep_node_id id;
  if (ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "bench", in, 2, out, 1, &id) != ORTEP_OK) goto done;
  ortep_shape shapes[2] = {
      {3, {1, (int64_t)m, (int64_t)k}},
      dt != ORTEP_DTYPE_F32 ? bench_blocked_shape(dt, n, k) : (ortep_shape){2, {(int64_t)n, (int64_t)k}}};
  ortep_dtype dtypes[2] = {ORTEP_DTYPE_F32, dt};
  if (ortep_ep_get_kernel(ep, ortep_graph_node(g, id), shapes, dtypes, 2, 17, &kern) != ORTEP_OK) goto done;
  const void *ins[2] = {x, w};
  void *outs[1] = {y};
  ortep_kernel_io io = {ins, 2, outs, 1, ortep_ep_error_word_ptr(ep), NULL};
  for (int rep = 0; rep < 6; rep++) { /* the first warms up */
    double t0 = bench_now_ns();
    if (ortep_ep_run_kernel(ep, kern, &io) != ORTEP_OK) {
      best = 0;
      break;
    }
    double gf = 2.0 * (double)m * (double)k * (double)n / (bench_now_ns() - t0);
    if (rep && gf > best) best = gf;
  }
done:
  if (kern) ortep_kernel_destroy(kern);
  ortep_graph_destroy(g);
  free(x), free(y), free(w);
  return best;
}

/* Floating-point operations of a chunked prefill of L tokens: every weight
 * matrix times L rows, attention over the causal triangle, the lm_head once. */
static double prefill_flops(const ortep_model_config *c, double L) {
  double hid = (double)c->hidden_size, inter = (double)c->intermediate_size;
  double q = (double)(c->num_attention_heads * c->head_dim), kv = (double)(c->num_key_value_heads * c->head_dim);
  double layers = (double)c->num_hidden_layers;
  double per_token = 2.0 * (hid * (q + 2 * kv) + q * hid + 3.0 * hid * inter);
  double attention = 2.0 * 2.0 * (L * (L + 1) / 2) * q; /* scores and the weighted sum */
  return layers * (L * per_token + attention) + 2.0 * hid * (double)c->vocab_size;
}

/* --profile: an eager, profiling decoder prefills the prompt twice (the first
 * warms it up); the second's node times, summed over every graph of the
 * session by op type, largest first, on stdout and into json. */
static int profile_prefill(const char *dir, const prefill_opts *o, const ortep_config *cfg, const int32_t *prompt,
                           size_t L, cJSON *root) {
  ortep_decoder_options opt = {.ep = o->m.ep,
                               .max_seq_len = L + 1,
                               .config = cfg,
                               .prefill_chunk = (size_t)o->chunk,
                               .eager = true,
                               .profile = true};
  ortep_decoder *d;
  if (ortep_decoder_open(dir, &opt, &d) != ORTEP_OK || ortep_decoder_prefill(d, prompt, L, NULL) != ORTEP_OK ||
      ortep_decoder_reset(d) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench prefill: --profile: %s\n", ortep_last_error());
    ortep_decoder_close(d);
    return 1;
  }
  ortep_session *s = ortep_decoder_session(d);
  enum { KINDS = 64 };
  const char *op[KINDS];
  double ns[KINDS] = {0}, total = 0;
  size_t kinds = 0;
  for (int pass = 0; pass < 2; pass++) { /* before the timed prefill (subtracted), after it */
    if (pass == 1) {
      double t0 = bench_now_ns();
      if (ortep_decoder_prefill(d, prompt, L, NULL) != ORTEP_OK) {
        fprintf(stderr, "ortep-bench prefill: --profile: %s\n", ortep_last_error());
        ortep_decoder_close(d);
        return 1;
      }
      total = bench_now_ns() - t0;
    }
    for (size_t g = 0; g < ortep_session_graph_count(s); g++)
      for (size_t i = 0; i < ortep_session_profile_graph_count(s, g); i++) {
        const char *name;
        uint64_t t;
        ortep_session_profile_graph(s, g, i, &name, NULL, &t);
        size_t k = 0;
        while (k < kinds && strcmp(op[k], name)) k++;
        if (k == kinds && kinds < KINDS) op[kinds++] = name;
        if (k < kinds) ns[k] += pass ? (double)t : -(double)t;
      }
  }
  for (size_t a = 0; a < kinds; a++) /* largest first */
    for (size_t b = a + 1; b < kinds; b++)
      if (ns[b] > ns[a]) {
        double tn = ns[a];
        const char *to = op[a];
        ns[a] = ns[b], op[a] = op[b], ns[b] = tn, op[b] = to;
      }
  double sum = 0;
  for (size_t k = 0; k < kinds; k++) sum += ns[k];
  printf("\nprofile (eager, every node timed): a prefill of %zu tokens took %.1f ms, %.1f ms of it in nodes\n", L,
         total / 1e6, sum / 1e6);
  cJSON *prof = cJSON_AddObjectToObject(root, "profile_ms");
  for (size_t k = 0; k < kinds; k++) {
    printf("    %-36s %10.2f ms %6.1f%%\n", op[k], ns[k] / 1e6, sum > 0 ? 100.0 * ns[k] / sum : 0.0);
    cJSON_AddNumberToObject(prof, op[k], ns[k] / 1e6);
  }
  ortep_decoder_close(d);
  return 0;
}

typedef struct way {
  ortep_decoder *d;
  double ms;
  int32_t next;
  float *logits;
} way;

static int open_way(const char *dir, const prefill_opts *o, const ortep_config *cfg, size_t max_seq, size_t chunk,
                    way *w) {
  ortep_decoder_options opt = {.ep = o->m.ep, .max_seq_len = max_seq, .config = cfg, .prefill_chunk = chunk};
  if (ortep_decoder_open(dir, &opt, &w->d) != ORTEP_OK) {
    if (ortep_last_status() == ORTEP_E_INVALID_ARGUMENT) /* e.g. an unknown ORTEP_CPU_SIMD: as decode says it */
      return bench_usage_error("prefill", "%s", ortep_last_error());
    fprintf(stderr, "ortep-bench prefill: %s\n", ortep_last_error());
    return 1;
  }
  return 0;
}

/* The median of runs timed prefills of prompt[0..L). */
static int time_prefill(way *w, const int32_t *prompt, size_t L, long runs) {
  double t[64];
  size_t n = runs < 64 ? (size_t)runs : 64;
  for (size_t r = 0; r < n; r++) {
    if (ortep_decoder_reset(w->d) != ORTEP_OK) goto fail;
    double t0 = bench_now_ns();
    if (ortep_decoder_prefill(w->d, prompt, L, &w->next) != ORTEP_OK) goto fail;
    t[r] = (bench_now_ns() - t0) / 1e6;
  }
  w->ms = bench_median(t, n);
  if (ortep_decoder_logits(w->d, w->logits, ortep_decoder_vocab_size(w->d)) != ORTEP_OK) goto fail;
  return 0;
fail:
  fprintf(stderr, "ortep-bench prefill: a prompt of %zu tokens: %s\n", L, ortep_last_error());
  return 1;
}

/* Everything one run of the command holds. */
typedef struct prefill_run {
  prefill_opts o;
  FILE *json;
  ortep_model_config mc;
  ortep_config *cfg;
  int32_t *prompt;
  long longest;
  size_t V;
  way w[2]; /* 0: token by token, 1: chunked */
  const char *ep, *simd;
  bool cpu;
  size_t threads, top;
  double gemm;
  double linear[5]; /* the EP's ortep:Linear of the chunk's MLP shape: f32, f16, bf16, q8_0, q4_0 weights */
  double peak;      /* linear[] of the model's dtype (0: another dtype) */
} prefill_run;

/* The model's sizes, the config and the prompt: 0, or the exit code. */
static int prepare(prefill_run *r) {
  prefill_opts *o = &r->o;
  int rc = tool_model_resolve(&o->m, true);
  if (rc) return rc;
  if (ortep_model_config_read(o->m.dir, &r->mc) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench prefill: %s\n", ortep_last_error());
    return 1;
  }
  for (size_t i = 0; i < o->n_lengths; i++) r->longest = o->lengths[i] > r->longest ? o->lengths[i] : r->longest;
  if (r->longest + 1 > r->mc.max_position_embeddings)
    return bench_usage_error("prefill", "--lengths: %ld tokens do not fit the model's max_position_embeddings %lld",
                             r->longest, (long long)r->mc.max_position_embeddings);
  if (tool_model_config(&o->m, &r->cfg)) return 1;
  r->V = (size_t)r->mc.vocab_size;
  r->prompt = malloc((size_t)r->longest * sizeof *r->prompt);
  r->w[0].logits = malloc(r->V * sizeof(float));
  r->w[1].logits = malloc(r->V * sizeof(float));
  if (!r->prompt || !r->w[0].logits || !r->w[1].logits) {
    fprintf(stderr, "ortep-bench prefill: no memory for the prompt and logits\n");
    return 1;
  }
  for (long i = 0; i < r->longest; i++) r->prompt[i] = (int32_t)((i * 7919 + 13) % (long)r->V);
  return 0;
}

/* The two decoders, what they run on, and the machine's sgemm rate. */
static int open_ways(prefill_run *r) {
  size_t max_seq = (size_t)r->longest + 1;
  int rc = open_way(r->o.m.dir, &r->o, r->cfg, max_seq, 1, &r->w[0]);
  if (!rc) rc = open_way(r->o.m.dir, &r->o, r->cfg, max_seq, (size_t)r->o.chunk, &r->w[1]);
  if (rc) return rc;
  ortep_ep *ep = ortep_decoder_ep(r->w[1].d);
  r->ep = ortep_ep_name(ep);
  r->cpu = !strcmp(r->ep, "cpu_ep");
  r->threads = r->cpu ? ortep_cpu_ep_threads(ep) : 0;
  r->simd = r->cpu ? ortep_cpu_ep_simd(ep) : NULL;
  r->top = ortep_decoder_graph_tokens(r->w[1].d, 1);
  if (r->cpu) {
    size_t m = r->top ? r->top : 1, k = (size_t)r->mc.hidden_size, n = (size_t)r->mc.intermediate_size;
    r->gemm = bench_sgemm_gflops(m, k, n, r->threads);
    const ortep_dtype dt[5] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_F16, ORTEP_DTYPE_BF16, ORTEP_DTYPE_Q8_0, ORTEP_DTYPE_Q4_0};
    const char *names[5] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    for (int i = 0; i < 5; i++) {
      r->linear[i] = bench_linear_gflops(ep, dt[i], m, k, n);
      if (!strcmp(r->o.m.dtype, names[i])) r->peak = r->linear[i];
    }
  }
  return 0;
}

static void print_head(const prefill_run *r) {
  printf("model %s, ep %s", r->o.m.model ? r->o.m.model : r->o.m.preset, r->ep);
  if (r->cpu)
    printf(", %zu threads (%s dot products), sgemm [%zu x %lld] x [%lld x %lld]: %.1f GFLOP/s", r->threads, r->simd,
           r->top ? r->top : 1, (long long)r->mc.hidden_size, (long long)r->mc.hidden_size,
           (long long)r->mc.intermediate_size, r->gemm);
  if (r->cpu)
    printf("\nthe EP's Linear of that shape: f32 %.1f, f16 %.1f, bf16 %.1f, q8_0 %.1f, q4_0 %.1f GFLOP/s (bf16 %s)",
           r->linear[0], r->linear[1], r->linear[2], r->linear[3], r->linear[4],
           ortep_cpu_ep_bf16_products(ortep_decoder_ep(r->w[1].d)) ? "x bf16 with AVX512-BF16" : "widened to f32");
  printf("\nchunk sizes:");
  for (size_t g = 1; ortep_decoder_graph_tokens(r->w[1].d, g); g++)
    printf(" %zu", ortep_decoder_graph_tokens(r->w[1].d, g));
  printf("; median of %ld prefills each, graph mode\n\n", r->o.runs);
  printf("%8s %14s %10s %14s %10s %8s %9s %9s %9s %6s %12s\n", "prompt", "by-token ms", "tok/s", "chunked ms", "tok/s",
         "speedup", "GFLOP/s", "of sgemm", "of gemm", "same", "max rel diff");
}

/* One prompt length, both ways: a line of the table and a row of the JSON. */
static int measure_length(prefill_run *r, size_t L, cJSON *rows) {
  way *w = r->w;
  int rc = 0;
  /* warm-up: captures the chunk graphs this length uses (and the decode step) */
  for (int k = 0; k < 2 && !rc; k++) rc = time_prefill(&w[k], r->prompt, k ? L : (L < 8 ? L : 8), 1);
  for (int k = 0; k < 2 && !rc; k++) rc = time_prefill(&w[k], r->prompt, L, r->o.runs);
  if (rc) return rc;
  double diff = 0;
  for (size_t i = 0; i < r->V; i++) {
    double d = fabs((double)w[0].logits[i] - w[1].logits[i]) / (1.0 + fabs((double)w[0].logits[i]));
    diff = d > diff ? d : diff;
  }
  bool same = w[0].next == w[1].next;
  double gf = prefill_flops(&r->mc, (double)L) / (w[1].ms * 1e6);
  printf("%8zu %14.2f %10.1f %14.2f %10.1f %7.1fx %9.1f %8.0f%% %8.0f%% %6s %12.2e\n", L, w[0].ms,
         (double)L / w[0].ms * 1e3, w[1].ms, (double)L / w[1].ms * 1e3, w[0].ms / w[1].ms, gf,
         r->gemm > 0 ? 100.0 * gf / r->gemm : 0.0, r->peak > 0 ? 100.0 * gf / r->peak : 0.0, same ? "yes" : "NO", diff);
  cJSON *row = cJSON_CreateObject();
  cJSON_AddNumberToObject(row, "prompt_tokens", (double)L);
  cJSON_AddNumberToObject(row, "by_token_ms", w[0].ms);
  cJSON_AddNumberToObject(row, "chunked_ms", w[1].ms);
  cJSON_AddNumberToObject(row, "by_token_tokens_per_s", (double)L / w[0].ms * 1e3);
  cJSON_AddNumberToObject(row, "chunked_tokens_per_s", (double)L / w[1].ms * 1e3);
  cJSON_AddNumberToObject(row, "speedup", w[0].ms / w[1].ms);
  cJSON_AddNumberToObject(row, "chunked_gflops", gf);
  if (r->gemm > 0) cJSON_AddNumberToObject(row, "fraction_of_sgemm", gf / r->gemm);
  if (r->peak > 0) cJSON_AddNumberToObject(row, "fraction_of_gemm", gf / r->peak);
  cJSON_AddBoolToObject(row, "same_next_token", same);
  cJSON_AddNumberToObject(row, "max_rel_logit_diff", diff);
  cJSON_AddItemToArray(rows, row);
  return 0;
}

/* Each chunk size's graph: captured once at first use, replayed after. */
static void print_graphs(const prefill_run *r) {
  ortep_session *ss = ortep_decoder_session(r->w[1].d);
  printf("\nchunk graphs (size: runs, captures):");
  for (size_t g = 1; ortep_decoder_graph_tokens(r->w[1].d, g); g++) {
    ortep_session_stats st;
    ortep_session_get_graph_stats(ss, g, &st);
    printf(" %zu: %llu, %llu;", ortep_decoder_graph_tokens(r->w[1].d, g), (unsigned long long)st.steps,
           (unsigned long long)st.captures);
  }
  printf("\n");
}

/* The JSON report (root takes rows). */
static int write_json(prefill_run *r, cJSON *root, cJSON *rows) {
  const prefill_opts *o = &r->o;
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "model", o->m.model ? o->m.model : o->m.preset);
  cJSON_AddStringToObject(root, "dtype", o->m.dtype);
  cJSON_AddStringToObject(root, "ep", r->ep);
  cJSON_AddStringToObject(root, "weights", o->m.weights ? o->m.weights : "map");
  cJSON_AddStringToObject(root, "weights_layout", ortep_decoder_blocked_weights(r->w[1].d) ? "blocked" : "row_major");
  cJSON_AddNumberToObject(root, "threads", (double)r->threads);
  if (r->simd) cJSON_AddStringToObject(root, "cpu_simd", r->simd);
  cJSON *sizes = cJSON_AddArrayToObject(root, "chunk_sizes"), *graphs = cJSON_AddArrayToObject(root, "chunk_graphs");
  for (size_t g = 1; ortep_decoder_graph_tokens(r->w[1].d, g); g++) {
    ortep_session_stats st;
    ortep_session_get_graph_stats(ortep_decoder_session(r->w[1].d), g, &st);
    cJSON_AddItemToArray(sizes, cJSON_CreateNumber((double)ortep_decoder_graph_tokens(r->w[1].d, g)));
    cJSON *one = cJSON_CreateObject();
    cJSON_AddNumberToObject(one, "tokens", (double)ortep_decoder_graph_tokens(r->w[1].d, g));
    cJSON_AddNumberToObject(one, "runs", (double)st.steps);
    cJSON_AddNumberToObject(one, "captures", (double)st.captures);
    cJSON_AddItemToArray(graphs, one);
  }
  if (r->gemm > 0) cJSON_AddNumberToObject(root, "sgemm_gflops", r->gemm);
  if (r->cpu) {
    cJSON *lin = cJSON_AddObjectToObject(root, "linear_gflops");
    cJSON_AddNumberToObject(lin, "f32", r->linear[0]);
    cJSON_AddNumberToObject(lin, "f16", r->linear[1]);
    cJSON_AddNumberToObject(lin, "bf16", r->linear[2]);
    cJSON_AddNumberToObject(lin, "q8_0", r->linear[3]);
    cJSON_AddNumberToObject(lin, "q4_0", r->linear[4]);
    cJSON_AddBoolToObject(root, "bf16_products", ortep_cpu_ep_bf16_products(ortep_decoder_ep(r->w[1].d)));
  }
  cJSON_AddItemToObject(root, "results", rows);
  int rc = bench_json_finish(r->json, o->json_path, root);
  r->json = NULL;
  return rc;
}

/* --dtype A,B,...: a chunked decoder of each type, all opened first; per
 * prompt length each is warmed up (its chunk graphs captured), then --runs
 * rounds time one prefill of every type in turn, so the types are compared
 * at the same moments of a machine whose speed drifts; the speed over the
 * first type is taken per round. Each round's first token must be the
 * type's first round's (ORTEP_BENCH_PERTURB=rounds flips one in round 2, to
 * prove it is checked). */
typedef struct type_way {
  tool_model m;
  ortep_config *cfg;
  ortep_decoder *d;
  double open_s, *ms, *over;
  int32_t first;
} type_way;

static int open_type(prefill_run *r, size_t i, type_way *t) {
  t->m = r->o.m;
  t->m.dtype = r->o.dtypes[i];
  if (!tool_model_quantized(&t->m)) t->m.embedding_dtype = NULL; /* it goes with q8_0 / q4_0 only */
  int rc = tool_model_resolve(&t->m, i > 0);                     /* prepare() announced the first */
  if (rc || tool_model_config(&t->m, &t->cfg)) return rc ? rc : 1;
  ortep_decoder_options opt = {.ep = t->m.ep,
                               .max_seq_len = (size_t)r->longest + 1,
                               .config = t->cfg,
                               .prefill_chunk = (size_t)r->o.chunk,
                               .progress = tool_progress,
                               .progress_ctx = &t->m};
  double t0 = bench_now_ns();
  if (ortep_decoder_open(t->m.dir, &opt, &t->d) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench prefill: --dtype %s: %s\n", t->m.dtype, ortep_last_error());
    return 1;
  }
  t->open_s = (bench_now_ns() - t0) / 1e9;
  t->ms = calloc((size_t)r->o.runs, sizeof *t->ms), t->over = calloc((size_t)r->o.runs, sizeof *t->over);
  if (!t->ms || !t->over) {
    fprintf(stderr, "ortep-bench prefill: no memory for %ld rounds\n", r->o.runs);
    return 1;
  }
  return 0;
}

/* One length: the warm-ups, the rounds, a block of the table and a row of the JSON. */
static int types_length(prefill_run *r, type_way *t, size_t n, size_t L, cJSON *rows) {
  size_t runs = (size_t)r->o.runs;
  const char *perturb = getenv("ORTEP_BENCH_PERTURB");
  bool flip = perturb && !strcmp(perturb, "rounds");
  for (size_t rd = 0; rd <= runs; rd++) /* round 0 warms up */
    for (size_t i = 0; i < n; i++) {
      int32_t next;
      double t0 = bench_now_ns();
      if (ortep_decoder_reset(t[i].d) != ORTEP_OK || ortep_decoder_prefill(t[i].d, r->prompt, L, &next) != ORTEP_OK) {
        fprintf(stderr, "ortep-bench prefill: --dtype %s, a prompt of %zu tokens: %s\n", t[i].m.dtype, L,
                ortep_last_error());
        return 1;
      }
      double ms = (bench_now_ns() - t0) / 1e6;
      if (rd == 2 && flip) next ^= 1;
      if (rd == 0) t[i].first = next;
      if (rd > 0 && next != t[i].first) {
        fprintf(stderr,
                "ortep-bench prefill: --dtype %s, a prompt of %zu tokens: round %zu drew token %d where the "
                "warm-up drew %d\n",
                t[i].m.dtype, L, rd, next, t[i].first);
        return 1;
      }
      if (rd > 0) t[i].ms[rd - 1] = ms;
      if (isatty(2)) fprintf(stderr, "\r  %zu tokens, round %zu/%zu  %-5s %9.1f ms   ", L, rd, runs, t[i].m.dtype, ms);
    }
  if (isatty(2)) fprintf(stderr, "\r%60s\r", "");
  cJSON *row = cJSON_CreateObject(), *arr = cJSON_CreateArray();
  cJSON_AddNumberToObject(row, "prompt_tokens", (double)L);
  double flops = prefill_flops(&r->mc, (double)L);
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < runs; k++) t[i].over[k] = t[0].ms[k] / t[i].ms[k];
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "dtype", t[i].m.dtype);
    cJSON_AddItemToObject(d, "chunked_ms", cJSON_CreateDoubleArray(t[i].ms, (int)runs));
    cJSON_AddItemToObject(d, "over_first", cJSON_CreateDoubleArray(t[i].over, (int)runs));
    cJSON_AddNumberToObject(d, "next_token", t[i].first);
    cJSON_AddItemToArray(arr, d);
  }
  for (size_t i = 0; i < n; i++) { /* bench_spread() sorts: after the JSON */
    char ms[64], over[64];
    bench_spread(t[i].over, runs, 1, "%.2fx", over, sizeof over);
    bench_spread(t[i].ms, runs, 1, "%.1f", ms, sizeof ms);
    double med = bench_median(t[i].ms, runs);
    printf("%8zu  %-6s %26s %10.1f %24s %9.1f\n", L, t[i].m.dtype, ms, (double)L / med * 1e3, over,
           flops / (med * 1e6));
  }
  cJSON_AddItemToObject(row, "dtypes", arr);
  cJSON_AddItemToArray(rows, row);
  return 0;
}

static int prefill_dtypes(prefill_run *r) {
  size_t n = r->o.ndtypes;
  type_way *t = calloc(n, sizeof *t);
  cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "results");
  int rc = t ? 0 : 1;
  for (size_t i = 0; i < n && !rc; i++) rc = open_type(r, i, &t[i]);
  bench_print_header("prefill");
  if (!rc) {
    ortep_ep *ep = ortep_decoder_ep(t[0].d);
    const char *simd = ortep_cpu_ep_simd(ep);
    printf(
        "weight types (chunked prefill, graph mode, %ld rounds per prompt length each running every type once, "
        "in order, after a warm-up round)\nmodel %s, EP %s",
        r->o.runs, r->o.m.model ? r->o.m.model : r->o.m.preset, ortep_ep_name(ep));
    if (simd)
      printf(" (%zu threads, %s dot products, %s weights)", ortep_cpu_ep_threads(ep), simd,
             ortep_decoder_blocked_weights(t[0].d) ? "blocked" : "row-major");
    char over[32];
    snprintf(over, sizeof over, "over %s, per round", t[0].m.dtype);
    printf("\n\n%8s  %-6s %26s %10s %24s %9s\n", "prompt", "dtype", "chunked ms", "tok/s", over, "GFLOP/s");
    cJSON_AddStringToObject(root, "command", "prefill");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddItemToObject(root, "build", bench_build_json());
    cJSON_AddStringToObject(root, "model", r->o.m.model ? r->o.m.model : r->o.m.preset);
    cJSON_AddStringToObject(root, "ep", ortep_ep_name(ep));
    cJSON_AddNumberToObject(root, "rounds", (double)r->o.runs);
    if (simd) {
      cJSON_AddNumberToObject(root, "threads", (double)ortep_cpu_ep_threads(ep));
      cJSON_AddStringToObject(root, "cpu_simd", simd);
    }
    cJSON *types = cJSON_AddArrayToObject(root, "dtypes");
    for (size_t i = 0; i < n; i++) {
      cJSON *d = cJSON_CreateObject();
      cJSON_AddStringToObject(d, "dtype", t[i].m.dtype);
      cJSON_AddNumberToObject(d, "open_seconds", t[i].open_s);
      cJSON_AddItemToArray(types, d);
    }
  }
  for (size_t li = 0; !rc && li < r->o.n_lengths; li++) rc = types_length(r, t, n, (size_t)r->o.lengths[li], rows);
  if (!rc) {
    printf("  (median (lowest-highest) over the rounds; each type's next token the same in every round; open:");
    for (size_t i = 0; i < n; i++) printf(" %s %.2f s%s", t[i].m.dtype, t[i].open_s, i + 1 < n ? "," : ")\n");
  }
  if (!rc && r->json) {
    rc = bench_json_finish(r->json, r->o.json_path, root); /* closes it either way */
    r->json = NULL;
  }
  cJSON_Delete(root);
  for (size_t i = 0; t && i < n; i++) {
    ortep_decoder_close(t[i].d);
    ortep_config_destroy(t[i].cfg);
    free(t[i].ms), free(t[i].over);
  }
  free(t);
  return rc;
}

int bench_prefill_main(int argc, char **argv) {
  prefill_run r = {0};
  int rc = parse(argc, argv, &r.o);
  if (rc >= 0) return rc;
  rc = r.o.json_path && !(r.json = bench_json_open(r.o.json_path)); /* an unwritable --json fails first */
  if (!rc) rc = prepare(&r);
  if (!rc && r.o.ndtypes > 1) {
    rc = prefill_dtypes(&r);
    if (r.json) fclose(r.json), remove(r.o.json_path); /* unfinished */
    r.json = NULL;
    goto done;
  }
  if (!rc) rc = open_ways(&r);
  bench_print_header("prefill");
  if (!rc) print_head(&r);
  cJSON *root = cJSON_CreateObject(), *rows = cJSON_CreateArray();
  for (size_t li = 0; !rc && li < r.o.n_lengths; li++) rc = measure_length(&r, (size_t)r.o.lengths[li], rows);
  if (!rc) print_graphs(&r);
  if (!rc && r.o.profile) rc = profile_prefill(r.o.m.dir, &r.o, r.cfg, r.prompt, (size_t)r.longest, root);
  if (!rc && r.json) {
    rc = write_json(&r, root, rows);
    rows = NULL;
  }
  if (r.json) fclose(r.json);
  cJSON_Delete(rows);
  cJSON_Delete(root);
done:
  for (int k = 0; k < 2; k++) {
    ortep_decoder_close(r.w[k].d);
    free(r.w[k].logits);
  }
  free(r.prompt);
  ortep_config_destroy(r.cfg);
  return rc;
}
