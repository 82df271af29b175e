/*
 * kv.c: `ortep-bench kv`, the KV caches on virtual backing measured as a
 * user meets them, four figures from one run:
 *
 *   memory   reserved vs committed bytes when the caches hold P positions
 *            (the whole context reserved, memory in proportion to P), and
 *            the commits it took;
 *   speed    decode tokens/s of a decoder opened with the model's whole
 *            context vs one of --short positions (the old default), runs
 *            interleaved, medians: the reservation must cost nothing;
 *   chat     a second turn's prefill through ortep_decoder_prefill_conversation
 *            for T and 2T new tokens after a long first turn, beside the whole
 *            conversation prefilled again: a turn costs its own tokens;
 *   forks    N forks of a P-token prefix, each with its own S-token suffix:
 *            committed KV of them all over one decoder's prefix plus N
 *            suffixes (the shared pages held once).
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "model_options.h"

static const char kv_usage[] =
    "usage: ortep-bench kv [model options] [--positions P,...] [--short N] [--tokens N] [--runs R]\n"
    "                      [--turn T] [--forks N] [--prefix P] [--suffix S] [--only S,...] [--json FILE]\n"
    "\n"
    "The KV caches on virtual backing: committed memory at P positions, decode speed with the\n"
    "whole context reserved vs a short cache, a chat turn's prefill vs the whole conversation's,\n"
    "and the memory of N forks sharing a prefix (the tiny preset with no model option).\n"
    "\n" TOOL_MODEL_HELP
    "  --positions P,...  positions held for the memory figures (default 16,1024,8192; those past the\n"
    "                     model's context are skipped)\n"
    "  --short N        the short cache's positions for the speed figure (default 1024)\n"
    "  --tokens N       tokens generated per speed run (default 64)\n"
    "  --runs R         interleaved runs (default 5)\n"
    "  --turn T         a chat turn's new tokens (default 64; 2T is measured too)\n"
    "  --forks N        forks (default 8)\n"
    "  --prefix P       the forks' shared prefix (default 512)\n"
    "  --suffix S       each fork's own tokens (default 64)\n"
    "  --only S,...     the sections to run: memory, speed, chat, forks (default: all)\n"
    "  --json FILE      also write the figures as JSON\n"
    "  -h, --help       this text\n";

#define MAX_POSITIONS 8

typedef struct kv_opts {
  tool_model m;
  long positions[MAX_POSITIONS], shortcap, tokens, runs, turn, forks, prefix, suffix;
  size_t n_positions;
  const char *json_path, *only;
} kv_opts;

/* Whether section name is wanted (--only lists names separated by commas). */
static bool wanted(const kv_opts *o, const char *name) {
  if (!o->only) return true;
  size_t n = strlen(name);
  for (const char *p = o->only; (p = strstr(p, name)); p += n)
    if ((p == o->only || p[-1] == ',') && (p[n] == ',' || !p[n])) return true;
  return false;
}

static int fail(const char *what) {
  fprintf(stderr, "ortep-bench kv: %s: %s\n", what, ortep_last_error());
  return 1;
}

static int32_t *ids_for(size_t n, size_t vocab, unsigned seed) {
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  for (size_t i = 0; ids && i < n; i++) ids[i] = (int32_t)((i * 7919u + seed * 131u + 13u) % vocab);
  return ids;
}

static int open_decoder(const kv_opts *o, const ortep_config *cfg, size_t cap, ortep_governor *g, ortep_decoder **d) {
  ortep_decoder_options dopt = {.ep = o->m.ep,
                                .max_seq_len = cap,
                                .config = cfg,
                                .governor = g,
                                .progress = tool_progress,
                                .progress_ctx = (void *)&o->m};
  return ortep_decoder_open(o->m.dir, &dopt, d) == ORTEP_OK ? 0 : fail("opening the decoder");
}

/* Memory at each position count: one decoder, prefilled up to each in turn. */
static int memory_figures(const kv_opts *o, const ortep_config *cfg, const ortep_model_config *mc, cJSON *out) {
  ortep_decoder *d;
  if (open_decoder(o, cfg, 0, NULL, &d)) return 1;
  size_t ctx = ortep_decoder_max_seq_len(d), held = 0, vocab = ortep_decoder_vocab_size(d);
  int32_t *ids = ids_for(ctx, vocab, 1);
  int rc = ids ? 0 : 1;
  printf("\nmemory: the whole context (%zu positions) reserved, memory committed as positions are held\n", ctx);
  printf("  %10s %16s %16s %14s %10s\n", "positions", "reserved MiB", "committed MiB", "bytes/pos", "commits");
  for (size_t i = 0; i < o->n_positions && !rc; i++) {
    size_t p = (size_t)o->positions[i];
    if (p >= ctx) {
      printf("  %10zu  (past the model's context of %zu: skipped)\n", p, ctx);
      continue;
    }
    if (p > held && ortep_decoder_prefill(d, ids + held, p - held, NULL) != ORTEP_OK) rc = fail("prefill");
    held = p;
    ortep_kv_stats k;
    ortep_decoder_kv_stats(d, &k);
    printf("  %10zu %16.2f %16.3f %14.1f %10llu\n", p, (double)k.reserved_bytes / 1048576.0,
           (double)k.committed_bytes / 1048576.0, (double)k.committed_bytes / (double)p, (unsigned long long)k.commits);
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "positions", (double)p);
    cJSON_AddNumberToObject(row, "reserved_bytes", (double)k.reserved_bytes);
    cJSON_AddNumberToObject(row, "committed_bytes", (double)k.committed_bytes);
    cJSON_AddNumberToObject(row, "commits", (double)k.commits);
    cJSON_AddItemToArray(out, row);
  }
  (void)mc;
  free(ids);
  ortep_decoder_close(d);
  return rc;
}

/* One timed decode: reset, a 16-token prompt, tokens generated; tokens/s. */
static int decode_once(ortep_decoder *d, long tokens, double *tps) {
  int32_t prompt[16];
  for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((i * 31 + 7) % (int)ortep_decoder_vocab_size(d));
  if (ortep_decoder_reset(d) != ORTEP_OK || ortep_decoder_prefill(d, prompt, 16, NULL) != ORTEP_OK)
    return fail("prefill");
  ortep_generate_options go = {.max_tokens = (size_t)tokens, .ignore_eos = true};
  ortep_generate_result r;
  double t0 = bench_now_ns();
  if (ortep_decoder_generate_ex(d, &go, NULL, NULL, &r) != ORTEP_OK) return fail("generate");
  *tps = (double)r.generated / ((bench_now_ns() - t0) / 1e9);
  return 0;
}

static int speed_figures(const kv_opts *o, const ortep_config *cfg, cJSON *out) {
  ortep_decoder *full, *shrt;
  if (open_decoder(o, cfg, 0, NULL, &full)) return 1;
  size_t ctx = ortep_decoder_max_seq_len(full), cap = (size_t)o->shortcap < ctx ? (size_t)o->shortcap : ctx;
  if (open_decoder(o, cfg, cap, NULL, &shrt)) {
    ortep_decoder_close(full);
    return 1;
  }
  double *a = calloc((size_t)o->runs, sizeof *a), *b = calloc((size_t)o->runs, sizeof *b), w;
  int rc = a && b ? 0 : 1;
  rc = rc || decode_once(full, 8, &w) || decode_once(shrt, 8, &w); /* warm-up: captures */
  for (long r = 0; r < o->runs && !rc; r++) /* interleaved, the order alternating (ABBA): no side goes first always */
    rc = r % 2 ? decode_once(shrt, o->tokens, &b[r]) || decode_once(full, o->tokens, &a[r])
               : decode_once(full, o->tokens, &a[r]) || decode_once(shrt, o->tokens, &b[r]);
  if (!rc) {
    double fa = bench_median(a, (size_t)o->runs), fb = bench_median(b, (size_t)o->runs);
    printf("\nspeed: decode tokens/s (16-token prompt, %ld tokens, medians of %ld interleaved runs)\n", o->tokens,
           o->runs);
    printf("  whole context (%zu positions reserved) %10.1f\n", ctx, fa);
    printf("  short cache (%zu positions)            %10.1f\n", cap, fb);
    printf("  ratio whole / short                     %10.3f\n", fa / fb);
    cJSON_AddNumberToObject(out, "context_positions", (double)ctx);
    cJSON_AddNumberToObject(out, "short_positions", (double)cap);
    cJSON_AddNumberToObject(out, "whole_context_tokens_per_s", fa);
    cJSON_AddNumberToObject(out, "short_cache_tokens_per_s", fb);
  }
  free(a), free(b);
  ortep_decoder_close(full), ortep_decoder_close(shrt);
  return rc;
}

/* A first turn of `first` tokens and its 16-token reply, then a second turn
 * of t tokens: ms of the conversation call, and of the whole conversation
 * prefilled from scratch; both medians of runs. */
static int turn_ms(ortep_decoder *d, const int32_t *ids, size_t first, size_t t, long runs, double *turn, double *whole,
                   size_t *ran) {
  size_t vocab = ortep_decoder_vocab_size(d);
  int32_t *conv = malloc((first + 16 + t) * sizeof *conv);
  double *x = calloc((size_t)runs, sizeof *x), *y = calloc((size_t)runs, sizeof *y);
  int rc = conv && x && y ? 0 : 1;
  for (long r = 0; r < runs && !rc; r++) {
    memcpy(conv, ids, first * sizeof *conv);
    size_t reused = 0;
    if (ortep_decoder_reset(d) != ORTEP_OK || ortep_decoder_prefill(d, conv, first, NULL) != ORTEP_OK) {
      rc = fail("first turn");
      break;
    }
    size_t got = 0;
    ortep_generate_options go = {.max_tokens = 16, .ignore_eos = true};
    ortep_generate_result gr;
    if (ortep_decoder_generate_ex(d, &go, NULL, NULL, &gr) != ORTEP_OK) rc = fail("reply");
    got = ortep_decoder_tokens(d, conv, first + 16);
    conv[got] = 1; /* the reply's last token: emitted, not yet run; any id will do */
    for (size_t i = 0; i < t; i++) conv[got + 1 + i] = (int32_t)((i * 13 + 5) % vocab);
    size_t n = got + 1 + t;
    double t0 = bench_now_ns();
    if (!rc && ortep_decoder_prefill_conversation(d, conv, n, NULL, &reused) != ORTEP_OK) rc = fail("second turn");
    x[r] = (bench_now_ns() - t0) / 1e6;
    *ran = n - reused;
    if (!rc && ortep_decoder_reset(d) != ORTEP_OK) rc = fail("reset");
    t0 = bench_now_ns();
    if (!rc && ortep_decoder_prefill(d, conv, n, NULL) != ORTEP_OK) rc = fail("whole conversation");
    y[r] = (bench_now_ns() - t0) / 1e6;
  }
  if (!rc) *turn = bench_median(x, (size_t)runs), *whole = bench_median(y, (size_t)runs);
  free(conv), free(x), free(y);
  return rc;
}

static int chat_figures(const kv_opts *o, const ortep_config *cfg, cJSON *out) {
  ortep_decoder *d;
  if (open_decoder(o, cfg, 0, NULL, &d)) return 1;
  size_t ctx = ortep_decoder_max_seq_len(d), t = (size_t)o->turn;
  size_t first = ctx / 2 < 1024 ? ctx / 2 : 1024;
  if (first + 16 + 2 * t + 2 > ctx) t = (ctx - first - 18) / 2;
  int32_t *ids = ids_for(first, ortep_decoder_vocab_size(d), 2);
  double turn1, whole1, turn2, whole2;
  size_t ran1, ran2;
  int rc = ids ? 0 : 1;
  rc = rc || turn_ms(d, ids, first, t, o->runs, &turn1, &whole1, &ran1) ||
       turn_ms(d, ids, first, 2 * t, o->runs, &turn2, &whole2, &ran2);
  if (!rc) {
    printf("\nchat: a second turn after a %zu-token first turn and a 16-token reply (medians of %ld runs)\n", first,
           o->runs);
    printf("  %10s %12s %14s %18s %10s\n", "new tokens", "tokens run", "turn ms", "whole again ms", "ratio");
    printf("  %10zu %12zu %14.2f %18.2f %10.1f\n", t, ran1, turn1, whole1, whole1 / turn1);
    printf("  %10zu %12zu %14.2f %18.2f %10.1f\n", 2 * t, ran2, turn2, whole2, whole2 / turn2);
    printf("  a turn of 2T over one of T: %.2fx (its own tokens: about 2)\n", turn2 / turn1);
    cJSON_AddNumberToObject(out, "first_turn_tokens", (double)first);
    cJSON_AddNumberToObject(out, "turn_tokens", (double)t);
    cJSON_AddNumberToObject(out, "turn_ms", turn1);
    cJSON_AddNumberToObject(out, "whole_conversation_ms", whole1);
    cJSON_AddNumberToObject(out, "turn_2x_ms", turn2);
    cJSON_AddNumberToObject(out, "whole_conversation_2x_ms", whole2);
  }
  free(ids);
  ortep_decoder_close(d);
  return rc;
}

static int fork_figures(const kv_opts *o, const ortep_config *cfg, cJSON *out) {
  ortep_decoder *p;
  if (open_decoder(o, cfg, 0, NULL, &p)) return 1;
  size_t ctx = ortep_decoder_max_seq_len(p), P = (size_t)o->prefix, S = (size_t)o->suffix, N = (size_t)o->forks;
  if (P + S + 1 > ctx) P = ctx / 2, S = ctx / 4;
  int32_t *ids = ids_for(P + S, ortep_decoder_vocab_size(p), 3);
  ortep_decoder **f = calloc(N, sizeof *f);
  int rc = ids && f ? 0 : 1;
  if (!rc && ortep_decoder_prefill(p, ids, P, NULL) != ORTEP_OK) rc = fail("prefix");
  ortep_kv_stats solo;
  ortep_decoder_kv_stats(p, &solo); /* one decoder's KV for the prefix */
  double t0 = bench_now_ns();
  for (size_t i = 0; i < N && !rc; i++)
    if (ortep_decoder_fork(p, &f[i]) != ORTEP_OK) rc = fail("fork");
  double fork_ms = (bench_now_ns() - t0) / 1e6 / (double)N;
  for (size_t i = 0; i < N && !rc; i++) {
    int32_t *own = ids_for(S, ortep_decoder_vocab_size(p), 10 + (unsigned)i);
    if (!own || ortep_decoder_prefill(f[i], own, S, NULL) != ORTEP_OK) rc = fail("a fork's suffix");
    free(own);
  }
  if (!rc) {
    ortep_kv_stats k;
    ortep_decoder_kv_stats(p, &k);
    uint64_t total = k.committed_bytes + k.shared_bytes, per_pos = solo.committed_bytes / P;
    for (size_t i = 0; i < N; i++) {
      ortep_kv_stats c;
      ortep_decoder_kv_stats(f[i], &c);
      total += c.committed_bytes;
    }
    double ideal = (double)solo.committed_bytes + (double)(N * S * per_pos);
    printf("\nforks: %zu forks of a %zu-token prefix, each with %zu tokens of its own\n", N, P, S);
    printf("  one decoder's KV for the prefix     %12.3f MiB\n", (double)solo.committed_bytes / 1048576.0);
    printf("  shared, held once                   %12.3f MiB\n", (double)k.shared_bytes / 1048576.0);
    printf("  committed by all %2zu + the parent    %12.3f MiB\n", N, (double)total / 1048576.0);
    printf("  over one prefix + %zu suffixes        %12.3f (target <= 1.2)\n", N, (double)total / ideal);
    printf("  fork time                           %12.2f ms each\n", fork_ms);
    cJSON_AddNumberToObject(out, "forks", (double)N);
    cJSON_AddNumberToObject(out, "prefix_tokens", (double)P);
    cJSON_AddNumberToObject(out, "suffix_tokens", (double)S);
    cJSON_AddNumberToObject(out, "prefix_kv_bytes", (double)solo.committed_bytes);
    cJSON_AddNumberToObject(out, "shared_bytes", (double)k.shared_bytes);
    cJSON_AddNumberToObject(out, "committed_bytes_all", (double)total);
    cJSON_AddNumberToObject(out, "over_ideal", (double)total / ideal);
    cJSON_AddNumberToObject(out, "fork_ms", fork_ms);
  }
  for (size_t i = 0; f && i < N; i++) ortep_decoder_close(f[i]);
  free(f), free(ids);
  ortep_decoder_close(p);
  return rc;
}

static int parse_positions(const char *arg, kv_opts *o) {
  o->n_positions = 0;
  char *copy = strdup(arg), *save = NULL;
  int rc = copy ? 0 : 1;
  for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc; tok = strtok_r(NULL, ",", &save)) {
    if (o->n_positions == MAX_POSITIONS) {
      rc = bench_usage_error("kv", "--positions: at most %d counts", MAX_POSITIONS);
      break;
    }
    rc = bench_parse_count("kv", "--positions", tok, 1, 1L << 30, &o->positions[o->n_positions++]);
  }
  if (!rc && !o->n_positions) rc = bench_usage_error("kv", "--positions '%s' names no count", arg);
  free(copy);
  return rc;
}

static int parse(int argc, char **argv, kv_opts *o) {
  *o = (kv_opts){.m = {.prog = "ortep-bench", .cmd = "kv"},
                 .positions = {16, 1024, 8192},
                 .n_positions = 3,
                 .shortcap = 1024,
                 .tokens = 64,
                 .runs = 5,
                 .turn = 64,
                 .forks = 8,
                 .prefix = 512,
                 .suffix = 64};
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,
                                     {"positions", required_argument, 0, 'p'},
                                     {"short", required_argument, 0, 'c'},
                                     {"tokens", required_argument, 0, 'n'},
                                     {"runs", required_argument, 0, 'r'},
                                     {"turn", required_argument, 0, 't'},
                                     {"forks", required_argument, 0, 'f'},
                                     {"prefix", required_argument, 0, 'P'},
                                     {"suffix", required_argument, 0, 'S'},
                                     {"only", required_argument, 0, 'o'},
                                     {"json", required_argument, 0, 'j'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("kv", argc, argv, lo, kv_usage, &rc)) >= 0) {
    if (tool_model_option(&o->m, c, optarg, &rc)) {
      if (rc) return rc;
      continue;
    }
    switch (c) {
      case 'p': rc = parse_positions(optarg, o); break;
      case 'c': rc = bench_parse_count("kv", "--short", optarg, 2, 1L << 30, &o->shortcap); break;
      case 'n': rc = bench_parse_count("kv", "--tokens", optarg, 1, 1000000, &o->tokens); break;
      case 'r': rc = bench_parse_count("kv", "--runs", optarg, 1, 1000, &o->runs); break;
      case 't': rc = bench_parse_count("kv", "--turn", optarg, 1, 1L << 20, &o->turn); break;
      case 'f': rc = bench_parse_count("kv", "--forks", optarg, 1, 256, &o->forks); break;
      case 'P': rc = bench_parse_count("kv", "--prefix", optarg, 1, 1L << 30, &o->prefix); break;
      case 'S': rc = bench_parse_count("kv", "--suffix", optarg, 1, 1L << 30, &o->suffix); break;
      case 'j': o->json_path = optarg; break;
      case 'o': o->only = optarg; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  if (o->only) {
    static const char *const names[] = {"memory", "speed", "chat", "forks"};
    char *copy = strdup(o->only), *save = NULL;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc; tok = strtok_r(NULL, ",", &save)) {
      bool known = false;
      for (int i = 0; i < 4; i++) known = known || !strcmp(tok, names[i]);
      if (!known) rc = bench_usage_error("kv", "--only '%s' is not one of memory, speed, chat, forks", tok);
    }
    free(copy);
    if (rc) return rc;
  }
  return tool_model_check(&o->m, true) ? 2 : -1;
}

int bench_kv_main(int argc, char **argv) {
  kv_opts o;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  if ((rc = tool_model_resolve(&o.m, true)) != 0) return rc;
  FILE *json = NULL;
  if (o.json_path && !(json = bench_json_open(o.json_path))) return 1;
  ortep_model_config mc;
  ortep_config *cfg = NULL;
  if (ortep_model_config_read(o.m.dir, &mc) != ORTEP_OK) rc = fail("reading the model's config");
  if (!rc && tool_model_config(&o.m, &cfg)) rc = 1;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "kv");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "model", o.m.model ? o.m.model : o.m.preset);
  if (!rc) {
    bench_print_header("kv");
    printf("model %s (%lld layers, %lld KV heads x %lld, context %lld positions)\n", o.m.model ? o.m.model : o.m.preset,
           (long long)mc.num_hidden_layers, (long long)mc.num_key_value_heads, (long long)mc.head_dim,
           (long long)mc.max_position_embeddings);
  }
  if (!rc && wanted(&o, "memory")) rc = memory_figures(&o, cfg, &mc, cJSON_AddArrayToObject(root, "memory"));
  if (!rc && wanted(&o, "speed")) rc = speed_figures(&o, cfg, cJSON_AddObjectToObject(root, "speed"));
  if (!rc && wanted(&o, "chat")) rc = chat_figures(&o, cfg, cJSON_AddObjectToObject(root, "chat"));
  if (!rc && wanted(&o, "forks")) rc = fork_figures(&o, cfg, cJSON_AddObjectToObject(root, "forks"));
  ortep_config_destroy(cfg);
  if (json) {
    int jrc = rc ? (fclose(json), 0) : bench_json_finish(json, o.json_path, root);
    rc = rc ? rc : jrc;
  }
  cJSON_Delete(root);
  if (!rc && fflush(stdout) != 0) rc = 1;
  return rc;
}
