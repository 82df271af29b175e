/* test_launch.c: K tokens per launch (decode.h: tokens_per_launch;
 * kernels/feed.h) through the public API. A launch repeats the decode step
 * on the device, feeding each draw to the next step, so its semantics must
 * be exactly those of single steps: the same tokens (greedy and sampled),
 * bitwise the same logits, the same stop at a stop id, the same failure at
 * a latched error word, and a callback that stops inside a launch loses
 * nothing. On the CPU EP the loop runs in its recorded plan (the session's
 * device_loops); eager mode and seams loop from the host with the same
 * results. */
#include <math.h>

#include "testutil.h"

static char g_dir[64];
static void setup(void) { test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32); }
static void teardown(void) { test_model_dir_remove(g_dir); }

static const int32_t prompt[] = {3, 14, 15, 92, 65};
#define N_PROMPT (sizeof prompt / sizeof *prompt)
#define MAX_RUN  96

typedef struct run {
  int32_t tokens[MAX_RUN];
  size_t n;
  size_t stop_after; /* the callback returns false after this many (0: never) */
  ortep_generate_result result;
} run;

static bool collect(int32_t token, size_t index, void *user) {
  run *r = user;
  ck_assert_uint_eq(index, r->n); /* a run per call: indexes count within it */
  ck_assert_uint_lt(r->n, MAX_RUN);
  r->tokens[r->n++] = token;
  return !r->stop_after || r->n < r->stop_after;
}

static ortep_decoder *open_k(const char *dir, size_t k, bool eager, const char *seams) {
  ortep_decoder *d;
  ortep_decoder_options o = {
      .ep = "cpu", .max_seq_len = 128, .tokens_per_launch = k, .eager = eager, .forced_seams = seams};
  ck_assert_ok(ortep_decoder_open(dir, &o, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, N_PROMPT, NULL));
  return d;
}

static void expect_tokens(const run *want, const run *got, const char *what) {
  ck_assert_msg(got->n == want->n, "%s: %zu tokens, %zu one step at a time", what, got->n, want->n);
  for (size_t i = 0; i < want->n; i++)
    ck_assert_msg(got->tokens[i] == want->tokens[i], "%s, token %zu: %d, one step at a time %d", what, i,
                  got->tokens[i], want->tokens[i]);
}

/* The index of the first token at `from` or later of r that neither an
 * earlier token of r nor (avoid_prompt) the prompt has. */
static size_t first_new_token(const run *r, size_t from, bool avoid_prompt) {
  for (size_t at = from; at < r->n; at++) {
    bool seen = false;
    for (size_t j = 0; j < at; j++) seen |= r->tokens[j] == r->tokens[at];
    for (size_t j = 0; avoid_prompt && j < N_PROMPT; j++) seen |= prompt[j] == r->tokens[at];
    if (!seen) return at;
  }
  ck_abort_msg("no new token at %zu or later in %zu tokens", from, r->n);
  return 0;
}

static const ortep_sampling penalised = {
    .temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.3f, .seed = 11};

/* One run of max_tokens in calls of `split` (the last call takes the rest),
 * with its last logits. */
static run generate_in_calls(ortep_decoder *d, const ortep_sampling *s, size_t max_tokens, size_t split, float *logits,
                             size_t vocab) {
  run r = {{0}, 0, 0, {0}};
  for (size_t done = 0; done < max_tokens;) {
    size_t want = split && max_tokens - done > split ? split : max_tokens - done;
    ortep_generate_options g = {.max_tokens = want, .ignore_eos = true, .sampling = s};
    run part = {{0}, 0, 0, {0}};
    ck_assert_ok(ortep_decoder_generate_ex(d, &g, collect, &part, &part.result));
    ck_assert_uint_eq(part.result.generated, want);
    memcpy(r.tokens + r.n, part.tokens, part.n * sizeof *part.tokens);
    r.n += part.n, done += part.n;
  }
  ck_assert_ok(ortep_decoder_logits(d, logits, vocab));
  return r;
}

/* K = 1, 2, 5, 8, 64 and the automatic K, greedy and sampled (with a
 * repetition penalty, which reads the device's token history), in one call
 * and in calls of 7: the tokens and the last step's logits (bitwise) of one
 * step at a time, with the loops run on the device in graph mode. */
START_TEST(k_tokens_are_the_tokens_of_single_steps) {
  const ortep_sampling *s = _i ? &penalised : NULL;
  static const size_t ks[] = {1, 2, 5, 8, 64, 0};
  enum { TOKENS = 41 };
  size_t vocab = 0;
  float *want_logits = NULL, *logits = NULL;
  run want = {{0}, 0, 0, {0}};
  for (size_t split = 0; split <= 7; split += 7)
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
      ortep_decoder *d = open_k(g_dir, ks[i], false, NULL);
      if (!vocab) {
        vocab = ortep_decoder_vocab_size(d);
        want_logits = malloc(vocab * sizeof *want_logits), logits = malloc(vocab * sizeof *logits);
      }
      run got = generate_in_calls(d, s, TOKENS, split, i || split ? logits : want_logits, vocab);
      if (!i && !split) {
        want = got;
        ck_assert_uint_eq(want.n, TOKENS);
      } else {
        char what[64];
        snprintf(what, sizeof what, "K = %zu%s, %s", ks[i], split ? " in calls of 7" : "", s ? "sampled" : "greedy");
        expect_tokens(&want, &got, what);
        ck_assert_msg(!memcmp(want_logits, logits, vocab * sizeof *logits), "%s: the last logits differ", what);
      }
      ortep_session_stats st;
      ck_assert_ok(ortep_session_get_graph_stats(ortep_decoder_session(d), 0, &st));
      if (ks[i] >= 2) ck_assert_uint_gt(st.device_loops, 0); /* the plan looped, not the host */
      if (ks[i] == 1) ck_assert_uint_eq(st.device_loops, 0);
      if (ks[i] == 8 && !split) ck_assert_uint_le(st.steps, 1 + (TOKENS + 7) / 8); /* launches, not tokens */
      ck_assert_uint_eq(ortep_decoder_position(d), N_PROMPT + TOKENS - 1);
      ortep_decoder_close(d);
    }
  free(want_logits), free(logits);
}
END_TEST

/* Eager mode and a forced seam cannot loop on the device: the session loops
 * from the host, reading the flag after each step, with the same tokens. */
START_TEST(host_loops_give_the_same_tokens) {
  size_t vocab;
  ortep_decoder *d = open_k(g_dir, 1, false, NULL);
  vocab = ortep_decoder_vocab_size(d);
  float *l = malloc(vocab * sizeof *l);
  run want = generate_in_calls(d, &penalised, 30, 0, l, vocab);
  ortep_decoder_close(d);
  for (int way = 0; way < 2; way++) {
    d = open_k(g_dir, 8, way == 0, way == 1 ? "GroupQueryAttention" : NULL);
    run got = generate_in_calls(d, &penalised, 30, 0, l, vocab);
    expect_tokens(&want, &got, way ? "a seam in the step" : "eager");
    ortep_session_stats st;
    ck_assert_ok(ortep_session_get_graph_stats(ortep_decoder_session(d), 0, &st));
    ck_assert_uint_eq(st.device_loops, 0);
    ortep_decoder_close(d);
  }
  free(l);
}
END_TEST

/* A stop id drawn inside a launch ends it there: the same count, reason and
 * stop token as one step at a time; the token stays pending, so a later
 * call emits it first and continues as one call would have. */
START_TEST(a_stop_id_ends_the_launch_at_the_same_token) {
  ortep_decoder *d = open_k(g_dir, 1, false, NULL);
  size_t vocab = ortep_decoder_vocab_size(d);
  float *l = malloc(vocab * sizeof *l);
  run all = generate_in_calls(d, NULL, 40, 0, l, vocab);
  ortep_decoder_close(d);
  size_t at = first_new_token(&all, 6, false);
  int32_t stop = all.tokens[at];
  float *want = malloc(vocab * sizeof *want);
  for (size_t k = 1; k <= 16; k *= 4) {
    d = open_k(g_dir, k, false, NULL);
    ortep_generate_options g = {.ignore_eos = true, .stop_tokens = &stop, .n_stop_tokens = 1, .max_tokens = 40};
    run got = {{0}, 0, 0, {0}};
    ck_assert_ok(ortep_decoder_generate_ex(d, &g, collect, &got, &got.result));
    ck_assert_int_eq(got.result.reason, ORTEP_STOP_STOP_TOKEN);
    ck_assert_int_eq(got.result.stop_token, stop);
    ck_assert_uint_eq(got.result.generated, at);
    run head = all;
    head.n = at;
    expect_tokens(&head, &got, k == 1 ? "stopped, K = 1" : "stopped, K > 1");
    /* the launch ended on the stop id (the device's mask), not past it: the
     * logits are the step's that drew it, as one step at a time leaves them */
    if (k == 1) ck_assert_ok(ortep_decoder_logits(d, want, vocab));
    if (k > 1) {
      ck_assert_ok(ortep_decoder_logits(d, l, vocab));
      ck_assert_msg(!memcmp(l, want, vocab * sizeof *l), "K = %zu: the logits at the stop differ", k);
    }
    ortep_generate_options rest = {.ignore_eos = true, .max_tokens = all.n - at};
    run tail = {{0}, 0, 0, {0}};
    ck_assert_ok(ortep_decoder_generate_ex(d, &rest, collect, &tail, &tail.result));
    ck_assert_int_eq(tail.tokens[0], stop);
    for (size_t i = 0; i < tail.n; i++) ck_assert_int_eq(tail.tokens[i], all.tokens[at + i]);
    ortep_decoder_close(d);
  }
  free(l), free(want);
}
END_TEST

/* A callback that stops inside a launch: the draws after its token are
 * dropped, as if never run. The position, the tokens held and what later
 * calls emit are those of one step at a time; the logits, a later step's,
 * are refused rather than handed out as the pending token's. A stop on a
 * launch's last draw drops nothing: the logits are that step's, bitwise
 * one step at a time's. (K = 8: the first launch draws tokens 1..8, the
 * prefill token 0.) */
START_TEST(a_callback_stop_inside_a_launch_loses_nothing) {
  ortep_decoder *d = open_k(g_dir, 1, false, NULL);
  size_t vocab = ortep_decoder_vocab_size(d);
  float *l = malloc(vocab * sizeof *l), *want = malloc(vocab * sizeof *want);
  run all = generate_in_calls(d, &penalised, 30, 0, l, vocab);
  ortep_decoder_close(d);
  static const size_t stops[] = {1, 5, 9, 12};
  for (size_t c = 0; c < sizeof stops / sizeof *stops; c++) {
    size_t stop_after = stops[c];
    bool inside = stop_after > 1 && (stop_after - 1) % 8 != 0;
    ortep_generate_options g = {.ignore_eos = true, .max_tokens = 30, .sampling = &penalised};
    for (size_t k = 1; k <= 8; k *= 8) {
      d = open_k(g_dir, k, false, NULL);
      run first = {{0}, 0, stop_after, {0}};
      g.max_tokens = 30;
      ck_assert_ok(ortep_decoder_generate_ex(d, &g, collect, &first, &first.result));
      ck_assert_int_eq(first.result.reason, ORTEP_STOP_CALLBACK);
      ck_assert_uint_eq(first.n, stop_after);
      ck_assert_uint_eq(ortep_decoder_position(d), N_PROMPT + stop_after - 1);
      int32_t held[N_PROMPT + 32];
      ck_assert_uint_eq(ortep_decoder_tokens(d, held, N_PROMPT + 32), N_PROMPT + stop_after - 1);
      for (size_t i = 0; i + 1 < stop_after; i++) ck_assert_int_eq(held[N_PROMPT + i], all.tokens[i]);
      if (k == 1) {
        ck_assert_ok(ortep_decoder_logits(d, want, vocab));
      } else if (inside) {
        ck_assert_status(ortep_decoder_logits(d, l, vocab), ORTEP_E_STATE);
      } else {
        ck_assert_ok(ortep_decoder_logits(d, l, vocab));
        ck_assert_msg(!memcmp(l, want, vocab * sizeof *l), "stop after %zu: the logits differ", stop_after);
      }
      g.max_tokens = 30 - stop_after;
      run rest = {{0}, 0, 0, {0}};
      ck_assert_ok(ortep_decoder_generate_ex(d, &g, collect, &rest, &rest.result));
      ck_assert_uint_eq(rest.n, 30 - stop_after);
      for (size_t i = 0; i < rest.n; i++) ck_assert_int_eq(rest.tokens[i], all.tokens[stop_after + i]);
      ortep_decoder_close(d);
    }
  }
  free(l), free(want);
}
END_TEST

/* A step whose input makes the logits non-finite latches the error word
 * inside a launch: the tokens before it are emitted, then the call fails
 * with the same bits at the same token as one step at a time. A callback
 * that stops just before that step never sees the failure (the step is
 * dropped with the launch), and the next call fails where it would. */
START_TEST(an_error_word_stops_at_the_same_token) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny-llama", ORTEP_DTYPE_F32); /* untied: one embedding row poisons one token */
  ortep_decoder *d = open_k(dir, 1, false, NULL);
  size_t vocab = ortep_decoder_vocab_size(d), hidden = 64;
  float *l = malloc(vocab * sizeof *l);
  run all = generate_in_calls(d, NULL, 40, 0, l, vocab);
  ortep_decoder_close(d);
  size_t at = first_new_token(&all, 4, true);
  test_poison_f32_weight(dir, "model.embed_tokens.weight", (size_t)all.tokens[at] * hidden, INFINITY);
  for (size_t k = 1; k <= 8; k *= 8) {
    d = open_k(dir, k, false, NULL);
    run got = {{0}, 0, 0, {0}};
    ck_assert_status(ortep_decoder_generate(d, 40, collect, &got, NULL), ORTEP_E_DEVICE_VALIDATION);
    ck_assert_uint_eq(got.n, at + 1); /* the token was drawn and emitted; running it failed */
    for (size_t i = 0; i < got.n; i++) ck_assert_int_eq(got.tokens[i], all.tokens[i]);
    ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_ARGMAX_NOT_FINITE, ORTEP_ERROR_ARGMAX_NOT_FINITE);
    ck_assert_error_mentions("NaN or infinite");
    ck_assert_status(ortep_decoder_generate(d, 4, NULL, NULL, NULL), ORTEP_E_STATE);
    ortep_decoder_close(d);
  }
  d = open_k(dir, 8, false, NULL);
  run before = {{0}, 0, at + 1, {0}}; /* stops on the poisoned token: the step that runs it is dropped */
  ck_assert_ok(ortep_decoder_generate(d, 40, collect, &before, NULL));
  ck_assert_uint_eq(before.n, at + 1);
  run after = {{0}, 0, 0, {0}};
  ck_assert_status(ortep_decoder_generate(d, 40, collect, &after, NULL), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_uint_eq(after.n, 0);
  ortep_decoder_close(d);
  free(l);
  test_model_dir_remove(dir);
}
END_TEST

/* A full cache ends a launch where single steps end: CACHE_FULL after the
 * same tokens. */
START_TEST(a_full_cache_ends_at_the_same_token) {
  size_t got_n[2] = {0, 0};
  int32_t last[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    ortep_decoder *d;
    ortep_decoder_options o = {.ep = "cpu", .max_seq_len = 24, .tokens_per_launch = i ? 16 : 1};
    ck_assert_ok(ortep_decoder_open(g_dir, &o, &d));
    ck_assert_ok(ortep_decoder_prefill(d, prompt, N_PROMPT, NULL));
    ortep_generate_options g = {.ignore_eos = true};
    run r = {{0}, 0, 0, {0}};
    ck_assert_ok(ortep_decoder_generate_ex(d, &g, collect, &r, &r.result));
    ck_assert_int_eq(r.result.reason, ORTEP_STOP_CACHE_FULL);
    got_n[i] = r.n, last[i] = r.tokens[r.n - 1];
    ck_assert_uint_eq(ortep_decoder_position(d), 24);
    ortep_decoder_close(d);
  }
  ck_assert_uint_eq(got_n[0], got_n[1]);
  ck_assert_int_eq(last[0], last[1]);
}
END_TEST

/* After warm-up, launches allocate nothing: no EP allocation and none of
 * the library's own. */
START_TEST(launches_allocate_nothing) {
  test_hooks_install(0);
  ortep_decoder *d = open_k(g_dir, 8, false, NULL);
  ortep_generate_options g = {.ignore_eos = true, .max_tokens = 17, .sampling = &penalised};
  ck_assert_ok(ortep_decoder_generate_ex(d, &g, NULL, NULL, NULL)); /* captured, the mask written */
  uint64_t a0, f0, a1, f1;
  ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d), &a0, &f0));
  long hooks0 = atomic_load(&test_hook_calls);
  g.max_tokens = 40;
  ck_assert_ok(ortep_decoder_generate_ex(d, &g, NULL, NULL, NULL));
  ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d), &a1, &f1));
  ck_assert_uint_eq(a1, a0);
  ck_assert_uint_eq(f1, f0);
  ck_assert_int_eq(atomic_load(&test_hook_calls), hooks0);
  ortep_decoder_close(d);
  ortep_restore_allocator();
  ck_assert_int_eq(atomic_load(&test_hook_live), 0);
}
END_TEST

/* Bad arguments are refused with the reason: the option, the session's
 * loop and the EP's. */
START_TEST(bad_arguments_are_refused) {
  ortep_decoder *d;
  ortep_decoder_options o = {.ep = "cpu", .max_seq_len = 32, .tokens_per_launch = 65};
  ck_assert_status(ortep_decoder_open(g_dir, &o, &d), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("tokens_per_launch 65");
  d = open_k(g_dir, 4, false, NULL);
  ortep_session *s = ortep_decoder_session(d);
  ck_assert_status(ortep_session_run_graph_while(NULL, 0, "loop.go", 4), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_session_run_graph_while(s, 99, "loop.go", 4), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_session_run_graph_while(s, 0, "loop.go", 0), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_session_run_graph_while(s, 0, "no such value", 4), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("no such value");
  ck_assert_status(ortep_session_run_graph_while(s, 0, "logits", 4), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("must be an i32");
  ortep_ep *ep = ortep_decoder_ep(d);
  int32_t flag = 0;
  ck_assert(ortep_ep_get_capabilities(ep).device_loops);
  ck_assert_status(ortep_ep_replay_segment_while(ep, 0, NULL, 1), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_ep_replay_segment_while(ep, 0, &flag, 0), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_ep_replay_segment_while(ep, 1000, &flag, 1), ORTEP_E_OUT_OF_RANGE);
  ortep_decoder_close(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, k_tokens_are_the_tokens_of_single_steps, 0, 2);
  tcase_add_test(tc, host_loops_give_the_same_tokens);
  tcase_add_test(tc, a_stop_id_ends_the_launch_at_the_same_token);
  tcase_add_test(tc, a_callback_stop_inside_a_launch_loses_nothing);
  tcase_add_test(tc, an_error_word_stops_at_the_same_token);
  tcase_add_test(tc, a_full_cache_ends_at_the_same_token);
  tcase_add_test(tc, launches_allocate_nothing);
  tcase_add_test(tc, bad_arguments_are_refused);
  suite_add_tcase(s, tc);
  return test_run(s);
}
