/*
 * launch.c: K tokens per launch in `ortep-bench decode` (decode.h:
 * tokens_per_launch). For each K of --tokens-per-launch a graph-mode decoder
 * with that K generates --tokens tokens in one ortep_decoder_generate_ex
 * call per run, the whole call timed (launches, syncs, the callback), the
 * runs interleaved over K so a slow minute of the machine is spread over
 * all of them, medians. Each K's tokens are kept for decode.c to compare
 * with the single steps' (they must be the same).
 */
#include <stdlib.h>

#include "bench.h"

typedef struct collected {
  int32_t *tokens;
  size_t n, cap;
} collected;

static bool keep(int32_t token, size_t index, void *user) {
  collected *c = user;
  if (index < c->cap) c->tokens[index] = token;
  c->n = index + 1;
  return true;
}

static int fail(size_t k, const char *what) {
  fprintf(stderr, "ortep-bench decode: tokens per launch %zu: %s: %s\n", k, what, ortep_last_error());
  return 1;
}

/* One run of K = l->k on its open decoder: reset, prefill, one generate. */
static int one_run(ortep_decoder *d, bench_launch *l, const int32_t *prompt, size_t plen, long tokens, double *tok_s,
                   double *launches) {
  ortep_session_stats s0, s1;
  collected c = {l->tokens, 0, (size_t)tokens};
  ortep_generate_options g = {.max_tokens = (size_t)tokens, .ignore_eos = true};
  if (ortep_decoder_reset(d) || ortep_decoder_prefill(d, prompt, plen, NULL)) return fail(l->k, "prefill");
  ortep_session_get_graph_stats(ortep_decoder_session(d), 0, &s0);
  double t0 = bench_now_ns();
  if (ortep_decoder_generate_ex(d, &g, keep, &c, NULL)) return fail(l->k, "generate");
  double secs = (bench_now_ns() - t0) / 1e9;
  ortep_session_get_graph_stats(ortep_decoder_session(d), 0, &s1);
  if (c.n != (size_t)tokens) {
    fprintf(stderr, "ortep-bench decode: tokens per launch %zu: %zu tokens, %ld asked\n", l->k, c.n, tokens);
    return 1;
  }
  *tok_s = (double)tokens / secs;
  *launches = (double)(s1.steps - s0.steps);
  return 0;
}

int bench_launch_run(const char *dir, const char *ep, const ortep_config *config, const int32_t *prompt, size_t plen,
                     long tokens, long runs, bench_launch *ks, size_t n) {
  ortep_decoder **d = calloc(n, sizeof *d);
  double *tps = malloc(n * (size_t)runs * sizeof *tps), *ln = malloc(n * (size_t)runs * sizeof *ln);
  int rc = !d || !tps || !ln;
  if (rc) fprintf(stderr, "ortep-bench decode: no memory for the tokens-per-launch runs\n");
  for (size_t i = 0; !rc && i < n; i++) {
    ortep_decoder_options o = {
        .ep = ep, .max_seq_len = plen + (size_t)tokens + 1, .config = config, .tokens_per_launch = ks[i].k};
    if (!(ks[i].tokens = malloc((size_t)tokens * sizeof *ks[i].tokens))) rc = fail(ks[i].k, "no memory");
    if (!rc && ortep_decoder_open(dir, &o, &d[i]) != ORTEP_OK) rc = fail(ks[i].k, "opening the decoder");
    double warm, wl; /* captures the graph, measures the time per token (K automatic) */
    if (!rc) rc = one_run(d[i], &ks[i], prompt, plen, tokens, &warm, &wl);
  }
  for (long r = 0; !rc && r < runs; r++)
    for (size_t i = 0; !rc && i < n; i++)
      rc = one_run(d[i], &ks[i], prompt, plen, tokens, &tps[i * (size_t)runs + (size_t)r],
                   &ln[i * (size_t)runs + (size_t)r]);
  for (size_t i = 0; !rc && i < n; i++) {
    ks[i].tok_s = bench_median(tps + i * (size_t)runs, (size_t)runs);
    ks[i].launches = bench_median(ln + i * (size_t)runs, (size_t)runs);
    ks[i].ntokens = (size_t)tokens;
    ks[i].ran = true;
  }
  for (size_t i = 0; d && i < n; i++) ortep_decoder_close(d[i]);
  free(d), free(tps), free(ln);
  return rc;
}
