/*
 * ortep.c: the `ortep` program, for people: text in, text out, on the public
 * API only (ortep/ortep.h).
 *
 *   ortep generate --preset tiny --prompt "Hello"
 *   ortep generate --model DIR --prompt "..." --temperature 0.8 --top-p 0.95 --seed 7
 *   ortep tokenize --model DIR --text "Hello world"
 *   ortep detokenize --model DIR 9707 1879
 *
 * generate streams the text as it is produced (whole characters only) to
 * stdout, and prints the prompt and generated token counts, the time to first
 * token and tokens/s to stderr at the end. Usage errors exit 2, other
 * failures 1, and so does output that could not be written (a full disk, a
 * closed pipe or stdout): generation stops at the first failed write.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blas_core.h"
#include "model_options.h"
#include "ortep/ortep.h"

#define USAGE_EXIT 2

static const char usage[] =
    "usage: ortep <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate     generate text from a prompt, streamed as it is produced\n"
    "  tokenize     the token ids of a text\n"
    "  detokenize   the text of token ids\n"
    "\n"
    "Run 'ortep <command> --help' for a command's options.\n";

static const char generate_usage[] =
    "usage: ortep generate (--model DIR | --preset NAME) (--prompt TEXT | --prompt-ids IDS) [options]\n"
    "\n"
    "Generates from the prompt and streams the text to stdout; the counts, the time to first\n"
    "token and tokens/s go to stderr at the end. Greedy unless --temperature is above 0.\n"
    "A preset's weights are random: its text is gibberish.\n"
    "\n" TOOL_MODEL_HELP
    "  --prompt TEXT          the prompt, tokenized with the model's tokenizer.json\n"
    "  --prompt-ids IDS       the prompt as token ids (comma-separated), for a model without a\n"
    "                         tokenizer.json; the output is then ids too\n"
    "  --max-tokens N         at most N new tokens (default 128); it also stops at the model's\n"
    "                         end-of-sequence token and at a full KV cache\n"
    "  --temperature T        0 (default): greedy; > 0: sample\n"
    "  --top-k K              keep the K most likely tokens (0: off)\n"
    "  --top-p P              keep the most likely tokens whose mass reaches P (1: off)\n"
    "  --min-p M              keep tokens at least M x the most likely's probability (0: off)\n"
    "  --repetition-penalty R > 1 discourages tokens already in the text (1: off)\n"
    "  --seed S               the sampler's seed (default 0): the same seed, the same text\n"
    "  --ignore-eos           do not stop at the end-of-sequence token\n"
    "  --tokens-per-launch K  decode steps per launch, each drawn token fed to the next step on the\n"
    "                         device (0, default: automatic; 1 to 64); the text is the same for any K\n"
    "  -h, --help             this text\n";

static const char tokenize_usage[] =
    "usage: ortep tokenize (--model DIR | --preset NAME) [--text TEXT] [--tokens] [--no-special]\n"
    "\n"
    "Prints the token ids of TEXT (or of stdin when --text is not given), space-separated.\n"
    "\n" TOOL_MODEL_HELP
    "  --text TEXT                   the text (default: all of stdin)\n"
    "  --tokens                      one line per token: id, then the token's string\n"
    "  --no-special                  do not add the tokenizer's special tokens (e.g. BOS)\n"
    "  -h, --help                    this text\n";

static const char detokenize_usage[] =
    "usage: ortep detokenize (--model DIR | --preset NAME) [--skip-special] ID...\n"
    "\n"
    "Prints the text of the token ids (arguments, or whitespace-separated on stdin).\n"
    "\n" TOOL_MODEL_HELP
    "  --skip-special                leave special tokens out\n"
    "  -h, --help                    this text\n";

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ortep %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun 'ortep %s --help' for the options.\n", cmd);
  return USAGE_EXIT;
}

static int fail(const char *cmd) {
  fprintf(stderr, "ortep %s: %s\n", cmd, ortep_last_error());
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_number(const char *cmd, const char *opt, const char *arg, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || *end || end == arg || !(v >= lo && v <= hi))
    return usage_error(cmd, "%s '%s' is not a number in [%g, %g]", opt, arg, lo, hi);
  *out = v;
  return 0;
}

/* A whole number in [lo, hi], parsed as one (strtoull: no rounding through a
 * double, so every seed up to 2^64 - 1 is its own); digits only: no sign,
 * no space, no fraction, no exponent. */
static int parse_whole(const char *cmd, const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (tool_parse_whole(arg, lo, hi, out)) return 0;
  return usage_error(cmd, "%s '%s' is not a whole number in [%" PRIu64 ", %" PRIu64 "]", opt, arg, lo, hi);
}

/* Whether everything written to stdout so far reached it; a failed or short
 * write (a full disk, a closed stdout, a pipe whose reader left with SIGPIPE
 * ignored) is reported once, with the reason, and the command fails. */
static int output_failed(const char *cmd) {
  errno = 0;
  int flushed = fflush(stdout), e = errno;
  if (flushed == 0 && !ferror(stdout)) return 0;
  fprintf(stderr, "ortep %s: cannot write the output: %s\n", cmd, strerror(e ? e : EIO));
  return 1;
}

/* Whether --model names a file (a .gguf), not a directory. */
static bool is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The model's config (config.json, or a .gguf's metadata: the vocabulary
 * and context sizes), when it has one: 0, or 1 with the reason printed.
 * *have is false when there is none. */
static int model_config(const char *cmd, const char *dir, bool required, ortep_model_config *c, bool *have) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  *have = false;
  if (!required && !is_file(dir) && access(path, F_OK) != 0) return 0; /* a tokenizer-only directory */
  if (ortep_model_config_read(dir, c) != ORTEP_OK) return fail(cmd);
  *have = true;
  return 0;
}

/* "1,2,3" or "1 2 3" into ids. */
static int parse_ids(const char *cmd, const char *arg, int32_t **ids, size_t *n) {
  size_t cap = 16;
  *n = 0;
  *ids = malloc(cap * sizeof **ids);
  for (const char *p = arg; *ids && *p;) {
    while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || v < 0 || v > INT32_MAX || (*end && !strchr(", \n\t", *end))) {
      free(*ids);
      *ids = NULL;
      int len = (int)strcspn(p, ", \n\t");
      return usage_error(cmd, "'%.*s' is not a token id (a whole number >= 0)", len < 20 ? len : 20, p);
    }
    if (*n == cap && !(*ids = realloc(*ids, (cap *= 2) * sizeof **ids))) break;
    (*ids)[(*n)++] = (int32_t)v;
    p = end;
  }
  if (!*ids) {
    fprintf(stderr, "ortep %s: out of memory\n", cmd);
    return 1;
  }
  return 0;
}

/* All of stdin, NUL-terminated; NULL with the reason printed when it cannot
 * be read (a directory, a closed descriptor: an error, not an empty text). */
static char *read_stdin(const char *cmd, size_t *len) {
  size_t cap = 1 << 16;
  char *buf = malloc(cap + 1);
  *len = 0;
  errno = 0;
  for (size_t got; buf && (got = fread(buf + *len, 1, cap - *len, stdin)) > 0;) {
    *len += got;
    if (*len == cap) {
      char *more = realloc(buf, (cap *= 2) + 1);
      if (!more) free(buf);
      buf = more;
    }
  }
  if (!buf) {
    fprintf(stderr, "ortep %s: out of memory reading stdin\n", cmd);
  } else if (ferror(stdin)) {
    fprintf(stderr, "ortep %s: cannot read stdin: %s\n", cmd, strerror(errno ? errno : EIO));
    free(buf);
    buf = NULL;
  } else {
    buf[*len] = '\0';
  }
  return buf;
}

/* --- generate ---------------------------------------------------------------------- */
typedef struct stream {
  ortep_detokenizer *detok; /* NULL: print ids */
  size_t n;
  double first_at;
  bool failed;       /* the detokenizer failed (ortep_last_error says why) */
  bool write_failed; /* stdout did not take the text: stop generating */
} stream;

static bool on_token(int32_t token, size_t index, void *user) {
  stream *s = user;
  if (s->n++ == 0) s->first_at = now_s();
  if (!s->detok) {
    printf("%s%d", index ? " " : "", token);
  } else {
    const char *text;
    size_t len;
    if (ortep_detokenizer_push(s->detok, token, &text, &len) != ORTEP_OK) {
      s->failed = true;
      return false;
    }
    fwrite(text, 1, len, stdout);
  }
  if (fflush(stdout) != 0 || ferror(stdout)) s->write_failed = true;
  return !s->write_failed;
}

static const char *reason_name(ortep_stop_reason r) {
  switch (r) {
    case ORTEP_STOP_MAX_TOKENS: return "--max-tokens reached";
    case ORTEP_STOP_EOS: return "end-of-sequence token";
    case ORTEP_STOP_STOP_TOKEN: return "stop token";
    case ORTEP_STOP_CALLBACK: return "stopped";
    case ORTEP_STOP_CACHE_FULL: return "the model's context is full";
  }
  return "?";
}

typedef struct gen_args {
  tool_model src;
  const char *prompt, *prompt_ids;
  uint64_t max_tokens, top_k, seed, per_launch;
  double temperature, top_p, min_p, penalty;
  bool ignore_eos;
} gen_args;

static int parse_generate(int argc, char **argv, gen_args *a) {
  static const char *cmd = "generate";
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,
                                     {"prompt", required_argument, 0, 'P'},
                                     {"prompt-ids", required_argument, 0, 'I'},
                                     {"max-tokens", required_argument, 0, 'n'},
                                     {"temperature", required_argument, 0, 't'},
                                     {"top-k", required_argument, 0, 'k'},
                                     {"top-p", required_argument, 0, 'u'},
                                     {"min-p", required_argument, 0, 'M'},
                                     {"repetition-penalty", required_argument, 0, 'r'},
                                     {"seed", required_argument, 0, 's'},
                                     {"ignore-eos", no_argument, 0, 'E'},
                                     {"tokens-per-launch", required_argument, 0, 'K'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  *a = (gen_args){.src = {.prog = "ortep", .cmd = cmd}, .max_tokens = 128, .top_p = 1, .penalty = 1};
  int c, rc = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1 && !rc) {
    if (tool_model_option(&a->src, c, optarg, &rc)) continue;
    switch (c) {
      case 'P': a->prompt = optarg; break;
      case 'I': a->prompt_ids = optarg; break;
      case 'n': rc = parse_whole(cmd, "--max-tokens", optarg, 1, 10000000, &a->max_tokens); break;
      case 't': rc = parse_number(cmd, "--temperature", optarg, 0, 100, &a->temperature); break;
      case 'k': rc = parse_whole(cmd, "--top-k", optarg, 0, UINT32_MAX, &a->top_k); break;
      case 'u': rc = parse_number(cmd, "--top-p", optarg, 0, 1, &a->top_p); break;
      case 'M': rc = parse_number(cmd, "--min-p", optarg, 0, 0.999999, &a->min_p); break;
      case 'r': rc = parse_number(cmd, "--repetition-penalty", optarg, 0, 100, &a->penalty); break;
      case 's': rc = parse_whole(cmd, "--seed", optarg, 0, UINT64_MAX, &a->seed); break;
      case 'E': a->ignore_eos = true; break;
      case 'K': rc = parse_whole(cmd, "--tokens-per-launch", optarg, 0, 64, &a->per_launch); break;
      case 'h': fputs(generate_usage, stdout); return -1;
      case ':': return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default: return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (rc) return rc;
  if (optind < argc) return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  if ((rc = tool_model_check(&a->src, false)) != 0) return rc;
  if (!a->prompt == !a->prompt_ids) return usage_error(cmd, "give exactly one of --prompt TEXT and --prompt-ids IDS");
  return tool_model_resolve(&a->src, false);
}

/* The prompt's ids, from the text (through the model's tokenizer, checked
 * against its vocabulary; *detok then streams the output) or from
 * --prompt-ids (each checked against the vocabulary here, so a bad id is a
 * usage error, not a failed prefill). */
static int prompt_tokens(const gen_args *a, const ortep_model_config *c, ortep_tokenizer **tok,
                         ortep_detokenizer **detok, int32_t **ids, size_t *n) {
  static const char *cmd = "generate";
  if (a->prompt) {
    if (ortep_tokenizer_open_for_vocab(a->src.dir, (size_t)c->vocab_size, tok) != ORTEP_OK) {
      fprintf(stderr, "ortep generate: %s\n%s", ortep_last_error(),
              ortep_last_status() == ORTEP_E_INVALID_ARGUMENT
                  ? ""
                  : "(the model has no usable tokenizer.json: give the prompt as token ids with --prompt-ids)\n");
      return 1;
    }
    if (ortep_tokenizer_encode(*tok, a->prompt, strlen(a->prompt), true, ids, n) != ORTEP_OK ||
        ortep_detokenizer_create(*tok, true, detok) != ORTEP_OK)
      return fail(cmd);
    return *n ? 0 : usage_error(cmd, "the prompt gives no tokens; give some text");
  }
  int rc = parse_ids(cmd, a->prompt_ids, ids, n);
  if (rc) return rc;
  if (*n == 0) return usage_error(cmd, "--prompt-ids is empty");
  for (size_t i = 0; i < *n; i++)
    if ((*ids)[i] >= c->vocab_size)
      return usage_error(cmd,
                         "--prompt-ids: id %d (number %zu) is outside the model's vocabulary (ids 0 to %" PRId64 ")",
                         (*ids)[i], i + 1, c->vocab_size - 1);
  return 0;
}

/* The KV cache holds exactly what the request needs: the prompt and every
 * token but the last (which is emitted, never run), up to the model's
 * context; past that, generation ends when the context is full. */
static int context_for(const ortep_model_config *c, size_t n, uint64_t max_tokens, size_t *max_seq) {
  size_t limit = (size_t)c->max_position_embeddings;
  if (n > limit)
    return usage_error("generate",
                       "the prompt has %zu tokens but the model's context holds %zu positions; shorten the prompt", n,
                       limit);
  uint64_t need = (uint64_t)n + max_tokens - 1;
  *max_seq = need < limit ? (size_t)need : limit;
  return 0;
}

static int cmd_generate(int argc, char **argv) {
  static const char *cmd = "generate";
  gen_args a;
  int rc = parse_generate(argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  ortep_model_config c;
  bool have;
  if ((rc = model_config(cmd, a.src.dir, true, &c, &have)) != 0) return rc;
  ortep_tokenizer *tok = NULL;
  ortep_detokenizer *detok = NULL;
  ortep_decoder *d = NULL;
  ortep_config *config = NULL;
  int32_t *ids = NULL;
  size_t n = 0, max_seq = 0;
  if ((rc = prompt_tokens(&a, &c, &tok, &detok, &ids, &n)) != 0 || (rc = context_for(&c, n, a.max_tokens, &max_seq)))
    goto out;
  if ((rc = tool_model_config(&a.src, &config)) != 0) goto out;
  ortep_decoder_options o = {.ep = a.src.ep,
                             .max_seq_len = max_seq,
                             .config = config,
                             .progress = tool_progress,
                             .progress_ctx = &a.src,
                             .tokens_per_launch = (size_t)a.per_launch};
  double t0 = now_s();
  if (ortep_decoder_open(a.src.dir, &o, &d) != ORTEP_OK) {
    rc = ortep_last_status() == ORTEP_E_INVALID_ARGUMENT && strstr(ortep_last_error(), "EP")
             ? usage_error(cmd, "%s", ortep_last_error())
             : fail(cmd);
    goto out;
  }
  double t_open = now_s();
  ortep_weights_cache_info wc;
  ortep_decoder_weights_cache(d, &wc);
  if (wc.state == ORTEP_WEIGHTS_CACHE_REBUILT || wc.state == ORTEP_WEIGHTS_CACHE_FAILED)
    fprintf(stderr, "%s %s: weights cache %s: %s (%s)\n", "ortep", cmd, wc.path,
            wc.state == ORTEP_WEIGHTS_CACHE_REBUILT ? "refused and rebuilt" : "not written", wc.reason);
  if (wc.removed)
    fprintf(stderr,
            "%s %s: weights cache: removed %u file%s (%.1f MB) that no build can use again or beyond "
            "--weights-cache-max\n",
            "ortep", cmd, wc.removed, wc.removed == 1 ? "" : "s", (double)wc.removed_bytes / 1e6);
  stream s = {detok, 0, 0, false, false};
  ortep_sampling sampling = {(float)a.temperature, (uint32_t)a.top_k, (float)a.top_p,
                             (float)a.min_p,       (float)a.penalty,  a.seed};
  ortep_generate_options g = {.max_tokens = (size_t)a.max_tokens, .ignore_eos = a.ignore_eos, .sampling = &sampling};
  ortep_generate_result r = {0};
  if (ortep_decoder_prefill(d, ids, n, NULL) != ORTEP_OK ||
      ortep_decoder_generate_ex(d, &g, on_token, &s, &r) != ORTEP_OK || s.failed) {
    rc = fail(cmd);
    goto out;
  }
  const char *rest;
  size_t len;
  if (!s.write_failed && detok && ortep_detokenizer_flush(detok, &rest, &len) == ORTEP_OK) fwrite(rest, 1, len, stdout);
  printf("\n");
  if ((rc = output_failed(cmd)) != 0) {
    fprintf(stderr, "ortep generate: generation stopped at the failed write, after %zu token%s\n", r.generated,
            r.generated == 1 ? "" : "s");
    goto out;
  }
  double end = now_s();
  fprintf(
      stderr,
      "\n[%zu prompt token%s, %zu generated (%s); load %.2f s; time to first token %.1f ms; %.1f tokens/s; ep %s]\n", n,
      n == 1 ? "" : "s", r.generated, reason_name(r.reason), t_open - t0, s.n ? (s.first_at - t_open) * 1e3 : 0.0,
      s.n > 1 ? (double)(s.n - 1) / (end - s.first_at) : 0.0, ortep_ep_name(ortep_decoder_ep(d)));
out:
  ortep_decoder_close(d);
  ortep_config_destroy(config);
  free(ids);
  ortep_detokenizer_destroy(detok);
  ortep_tokenizer_close(tok);
  return rc;
}

/* --- tokenize / detokenize ------------------------------------------------------------ */
/* The tokenizer of dir, checked against the model's vocabulary when dir has
 * a config.json (a tokenizer-only directory is fine for these two). */
static int open_tokenizer(const char *cmd, const char *dir, ortep_tokenizer **t) {
  ortep_model_config c;
  bool have;
  int rc = model_config(cmd, dir, false, &c, &have);
  if (rc) return rc;
  return ortep_tokenizer_open_for_vocab(dir, have ? (size_t)c.vocab_size : 0, t) == ORTEP_OK ? 0 : fail(cmd);
}

static int cmd_tokenize(int argc, char **argv) {
  static const char *cmd = "tokenize";
  tool_model src = {.prog = "ortep", .cmd = cmd};
  const char *text = NULL;
  bool per_token = false, special = true;
  static const struct option lo[] = {TOOL_MODEL_LONG_OPTIONS,         {"text", required_argument, 0, 'T'},
                                     {"tokens", no_argument, 0, 'k'}, {"no-special", no_argument, 0, 'N'},
                                     {"help", no_argument, 0, 'h'},   {0, 0, 0, 0}};
  int c, rc = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    if (tool_model_option(&src, c, optarg, &rc)) {
      if (rc) return rc;
      continue;
    }
    switch (c) {
      case 'T': text = optarg; break;
      case 'k': per_token = true; break;
      case 'N': special = false; break;
      case 'h': fputs(tokenize_usage, stdout); return 0;
      case ':': return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default: return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return usage_error(cmd, "unexpected argument '%s' (give the text with --text)", argv[optind]);
  if ((rc = tool_model_check(&src, false)) == 0) rc = tool_model_resolve(&src, false);
  ortep_tokenizer *t = NULL;
  if (rc || (rc = open_tokenizer(cmd, src.dir, &t)) != 0) return rc;
  size_t len = 0;
  char *owned = NULL;
  if (!text) {
    if (!(owned = read_stdin(cmd, &len))) {
      ortep_tokenizer_close(t);
      return 1;
    }
    text = owned;
  } else {
    len = strlen(text);
  }
  int32_t *ids;
  size_t n;
  if (ortep_tokenizer_encode(t, text, len, special, &ids, &n) != ORTEP_OK) {
    rc = fail(cmd);
  } else {
    for (size_t i = 0; i < n && !ferror(stdout); i++) {
      if (per_token)
        printf("%d\t%s\n", ids[i], ortep_tokenizer_token(t, ids[i]));
      else
        printf("%s%d", i ? " " : "", ids[i]);
    }
    if (!per_token) printf("\n");
    rc = output_failed(cmd);
    free(ids);
  }
  free(owned);
  ortep_tokenizer_close(t);
  return rc;
}

/* Whether arg is a negative whole number ("-3"): an id, not an option. */
static bool negative_number(const char *arg) {
  if (arg[0] != '-' || arg[1] < '0' || arg[1] > '9') return false;
  for (const char *p = arg + 1; *p; p++)
    if (*p < '0' || *p > '9') return false;
  return true;
}

static int cmd_detokenize(int argc, char **argv) {
  static const char *cmd = "detokenize";
  tool_model src = {.prog = "ortep", .cmd = cmd};
  bool skip = false;
  static const struct option lo[] = {
      TOOL_MODEL_LONG_OPTIONS, {"skip-special", no_argument, 0, 'S'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int c, rc = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) { /* options anywhere, before or after the ids */
    if (tool_model_option(&src, c, optarg, &rc)) {
      if (rc) return rc;
      continue;
    }
    switch (c) {
      case 'S': skip = true; break;
      case 'h': fputs(detokenize_usage, stdout); return 0;
      case ':': return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default:
        if (negative_number(argv[optind - 1]))
          return usage_error(cmd, "'%s' is not a token id (a whole number >= 0)", argv[optind - 1]);
        return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if ((rc = tool_model_check(&src, false)) != 0 || (rc = tool_model_resolve(&src, false)) != 0) return rc;
  /* the ids: the arguments, else stdin */
  size_t len = 0;
  char *joined = NULL;
  if (optind < argc) {
    size_t cap = 1;
    for (int i = optind; i < argc; i++) cap += strlen(argv[i]) + 1;
    if ((joined = malloc(cap))) {
      joined[0] = '\0';
      for (int i = optind; i < argc; i++) strcat(strcat(joined, argv[i]), " ");
    } else {
      fprintf(stderr, "ortep detokenize: out of memory\n");
    }
  } else {
    joined = read_stdin(cmd, &len);
  }
  if (!joined) return 1;
  int32_t *ids = NULL;
  size_t n = 0;
  rc = parse_ids(cmd, joined, &ids, &n);
  free(joined);
  if (rc) return rc;
  ortep_tokenizer *t = NULL;
  if ((rc = open_tokenizer(cmd, src.dir, &t)) != 0) {
    free(ids);
    return rc;
  }
  char *text;
  size_t tl;
  if (ortep_tokenizer_decode(t, ids, n, skip, &text, &tl) != ORTEP_OK) {
    rc = fail(cmd);
  } else {
    fwrite(text, 1, tl, stdout);
    printf("\n");
    rc = output_failed(cmd);
    free(text);
  }
  free(ids);
  ortep_tokenizer_close(t);
  return rc;
}

/* "CPU <set>": the dot products the CPU EP uses here (ORTEP_CPU_SIMD and
 * ORTEP_CPU_HIDE included), or why it refuses to start. */
static const char *cpu_label(char *buf, size_t size) {
  ortep_ep *ep = NULL;
  ortep_status st = ortep_cpu_ep_create(NULL, &ep);
  if (st == ORTEP_OK) st = ortep_ep_initialize(ep, NULL);
  if (st == ORTEP_OK)
    snprintf(buf, size, "CPU %s", ortep_cpu_ep_simd(ep));
  else
    snprintf(buf, size, "CPU EP refused: %s", ortep_last_error());
  ortep_ep_destroy(ep);
  return buf;
}

static int run_command(int argc, char **argv) {
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage, stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    char blas[128], cpu[600];
    printf("ortep %s (%s), %s, Unicode %s, %s\n", ortep_version(), ortep_git_revision(), cpu_label(cpu, sizeof cpu),
           ortep_tokenizer_unicode_version(), tool_blas_label(blas, sizeof blas));
    return 0;
  }
  if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
  fprintf(stderr, "ortep: unknown command '%s'; the commands are: generate, tokenize, detokenize\n", cmd);
  fputs(usage, stderr);
  return USAGE_EXIT;
}

int main(int argc, char **argv) {
  tool_blas_restart("ortep", argv);
  if (argc < 2) {
    fputs(usage, stderr);
    return USAGE_EXIT;
  }
  int rc = run_command(argc, argv);
  /* what is still buffered, and the close, can fail too (help text into a
   * full disk): the exit status says so */
  if (rc == 0) rc = output_failed(argv[1]); /* a command that failed has said why already */
  errno = 0;
  if (fclose(stdout) != 0 && rc == 0) {
    fprintf(stderr, "ortep %s: cannot write the output: %s\n", argv[1], strerror(errno ? errno : EIO));
    rc = 1;
  }
  return rc;
}
