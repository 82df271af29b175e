/* test_decode.c: greedy decoding through the public API: eager and replay
 * agree bitwise (also with forced seams); ortep agrees with an independent
 * reference forward pass; the device error word stops bad steps; a steady
 * state step allocates nothing. */
#include <math.h>
#include <pthread.h>

#include "reference_llama.h"
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[64];
static const int32_t prompt[] = {5, 17, 2, 99};
/* 23 ids (< 256, every preset's vocabulary): with max_seq_len 64 the chunk
 * sizes are 64, 32, 16, 8, 4 and 2, so it runs as 16 + 4 + 2 and one token */
static const int32_t long_prompt[23] = {5,  17, 2,  99,  41, 7,   250, 13, 88,  3,  64, 199,
                                        21, 9,  77, 150, 6,  230, 31,  4,  120, 55, 18};

/* Whether this process's CPU EP rounds a chunk's rows to bf16 for bf16
 * weights (AVX512-BF16; ortep_cpu_ep_bf16_products). */
static bool bf16_products(void) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  bool on = ortep_cpu_ep_bf16_products(ep);
  ortep_ep_destroy(ep);
  return on;
}

/* This suite means the CPU EP (on a GPU machine "auto" would pick CUDA,
 * whose variants live in test_cuda_device.c): an unset ep becomes "cpu". */
static ortep_decoder *open_with(const ortep_decoder_options *o) {
  ortep_decoder_options c = o ? *o : (ortep_decoder_options){0};
  if (!c.ep) c.ep = "cpu";
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(g_dir, &c, &d));
  return d;
}

/* Decode 64 steps in eager mode and in graph mode (with options o); tokens
 * and logits must match bit for bit. */
static void compare_eager_and_graph(const ortep_decoder_options *graph_opts, size_t expect_seams) {
  ortep_decoder *e = open_with(&(ortep_decoder_options){.eager = true, .max_seq_len = 80});
  ortep_decoder *g = open_with(graph_opts);
  size_t V = ortep_decoder_vocab_size(e);
  float *le = malloc(V * sizeof *le), *lg = malloc(V * sizeof *lg);
  int32_t te, tg;
  ck_assert_ok(ortep_decoder_prefill(e, prompt, 4, &te));
  ck_assert_ok(ortep_decoder_prefill(g, prompt, 4, &tg));
  int32_t pos = 4;
  for (int step = 0; step < 64; step++, pos++) {
    ck_assert_msg(te == tg, "step %d: eager token %d, graph token %d", step, te, tg);
    ck_assert_ok(ortep_decoder_logits(e, le, V));
    ck_assert_ok(ortep_decoder_logits(g, lg, V));
    ck_assert_msg(memcmp(le, lg, V * sizeof *le) == 0, "step %d: logits differ between eager and replay", step);
    ck_assert_ok(ortep_decoder_step(e, te, pos, &te));
    ck_assert_ok(ortep_decoder_step(g, tg, pos, &tg));
  }
  ortep_session_stats st;
  ortep_session_get_stats(ortep_decoder_session(g), &st);
  ck_assert_int_eq(st.mode, ORTEP_RUN_GRAPH);
  ck_assert_ptr_null(st.fallback_reason);
  ck_assert_uint_eq(st.seams, expect_seams);
  ck_assert_uint_eq(st.captures, 1); /* captured once, replayed ever since */
  ck_assert_uint_ge(st.segments, 1);
  /* every node outside a seam is in a segment, one recorded kernel each */
  ck_assert_uint_eq(st.graph_kernel_nodes, st.kernels_per_step - st.seams);
  free(le), free(lg);
  ortep_decoder_close(e);
  ortep_decoder_close(g);
}

START_TEST(eager_and_replay_agree_bitwise) { compare_eager_and_graph(&(ortep_decoder_options){.max_seq_len = 80}, 0); }
END_TEST

START_TEST(eager_and_replay_agree_with_attention_as_seams) {
  /* tiny has 2 layers: each attention node becomes a seam */
  compare_eager_and_graph(&(ortep_decoder_options){.max_seq_len = 80, .forced_seams = "GroupQueryAttention"}, 2);
  ortep_decoder *g = open_with(&(ortep_decoder_options){.max_seq_len = 16, .forced_seams = "GroupQueryAttention"});
  ck_assert_ok(ortep_decoder_prefill(g, prompt, 1, NULL));
  const char *node, *op, *reason;
  ck_assert_ok(ortep_session_seam(ortep_decoder_session(g), 0, &node, &op, &reason));
  ck_assert_str_eq(node, "layers.0.attention");
  ck_assert_str_eq(op, "GroupQueryAttention");
  ck_assert_str_eq(reason, "forced by the user (op GroupQueryAttention)");
  ortep_decoder_close(g);
}
END_TEST

START_TEST(eager_and_replay_agree_with_every_third_node_a_seam) {
  ortep_decoder *g = open_with(&(ortep_decoder_options){.max_seq_len = 8, .seam_every = 3});
  ck_assert_ok(ortep_decoder_prefill(g, prompt, 1, NULL));
  ortep_session_stats st;
  ortep_session_get_stats(ortep_decoder_session(g), &st);
  size_t expect = st.kernels_per_step / 3;
  ortep_decoder_close(g);
  compare_eager_and_graph(&(ortep_decoder_options){.max_seq_len = 80, .seam_every = 3}, expect);
}
END_TEST

/* ortep against the reference, for a Qwen2-style and a LLaMA-style model.
 * Tokens must be identical for 32 steps; logits within
 * |ortep - reference| <= 1e-3 * (1 + |reference|). */
static void against_reference(const char *preset, ortep_dtype dtype) {
  char dir[64];
  test_model_dir(dir, sizeof dir, preset, dtype);
  ref_model *ref = ref_open(dir, 64);
  ck_assert_msg(ref != NULL, "%s", ortep_last_error());
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64}, &d));
  size_t V = ref_vocab(ref);
  double *want = malloc(V * sizeof *want);
  float *got = malloc(V * sizeof *got);
  int32_t token = prompt[0];
  for (int pos = 0; pos < 36; pos++) {
    int32_t next;
    ck_assert_ok(ortep_decoder_step(d, token, pos, &next));
    ref_step(ref, token, pos, want);
    ck_assert_ok(ortep_decoder_logits(d, got, V));
    size_t best = 0;
    for (size_t i = 0; i < V; i++) {
      ck_assert_msg(fabs(got[i] - want[i]) <= 1e-3 * (1.0 + fabs(want[i])), "%s %s pos %d logit %zu: %.6f vs %.6f",
                    preset, ortep_dtype_name(dtype), pos, i, got[i], want[i]);
      if (want[i] > want[best]) best = i;
    }
    if (pos >= 4)
      ck_assert_msg((size_t)next == best, "%s pos %d: ortep token %d, reference %zu", preset, pos, next, best);
    token = pos + 1 < 4 ? prompt[pos + 1] : next;
  }
  free(want), free(got);
  ref_close(ref);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}

START_TEST(matches_the_reference_qwen2_style) { against_reference("tiny", ORTEP_DTYPE_F32); }
END_TEST
START_TEST(matches_the_reference_llama_style) { against_reference("tiny-llama", ORTEP_DTYPE_F32); }
END_TEST
START_TEST(matches_the_reference_with_bf16_and_f16_weights) {
  against_reference("tiny", ORTEP_DTYPE_BF16);
  against_reference("tiny-llama", ORTEP_DTYPE_F16);
}
END_TEST

/* Chunked prefill against the independent reference (which runs the prompt
 * token by token): the logits after the prompt and 12 greedy steps after it,
 * on a Qwen2-style, a LLaMA-style and a head_dim != hidden / heads model. */
static void chunked_against_reference(const char *preset) {
  char dir[64];
  test_model_dir(dir, sizeof dir, preset, ORTEP_DTYPE_F32);
  ref_model *ref = ref_open(dir, 64);
  ck_assert_msg(ref != NULL, "%s", ortep_last_error());
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64}, &d));
  size_t V = ref_vocab(ref), n = sizeof long_prompt / sizeof *long_prompt;
  double *want = malloc(V * sizeof *want);
  float *got = malloc(V * sizeof *got);
  int32_t next;
  ck_assert_ok(ortep_decoder_prefill(d, long_prompt, n, &next));
  for (size_t i = 0; i < n; i++) ref_step(ref, long_prompt[i], (int)i, want);
  for (int step = 0; step < 12; step++) {
    ck_assert_ok(ortep_decoder_logits(d, got, V));
    size_t best = 0;
    for (size_t i = 0; i < V; i++) {
      ck_assert_msg(fabs(got[i] - want[i]) <= 1e-3 * (1.0 + fabs(want[i])), "%s step %d logit %zu: %.6f vs %.6f",
                    preset, step, i, got[i], want[i]);
      if (want[i] > want[best]) best = i;
    }
    ck_assert_msg((size_t)next == best, "%s step %d: ortep token %d, reference %zu", preset, step, next, best);
    ref_step(ref, next, (int)(n + (size_t)step), want);
    ck_assert_ok(ortep_decoder_step(d, next, (int32_t)(n + (size_t)step), &next));
  }
  free(want), free(got);
  ref_close(ref);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
START_TEST(chunked_prefill_matches_the_reference) {
  const char *presets[] = {"tiny", "tiny-llama", "tiny-wide-heads"};
  chunked_against_reference(presets[_i]);
}
END_TEST

/* Chunked prefill against token-by-token prefill on the same model: logits
 * within 1e-4 relative (f32; the chunk's sums run in sgemm's order), the same
 * greedy continuation, each chunk size captured once and then replayed, and
 * a second prompt after a reset allocating nothing. _i: eager (1) or graph. */
START_TEST(chunked_prefill_matches_token_by_token) {
  bool eager = _i == 1;
  const char *presets[] = {"tiny", "tiny-llama", "tiny-wide-heads"};
  for (int pi = 0; pi < 3; pi++) {
    char dir[64];
    test_model_dir(dir, sizeof dir, presets[pi], ORTEP_DTYPE_F32);
    ortep_decoder *d[2];
    for (int c = 0; c < 2; c++)
      ck_assert_ok(ortep_decoder_open(
          dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64, .eager = eager, .prefill_chunk = c ? 1 : 0},
          &d[c]));
    for (size_t g = 1, t = 64; g <= 7; g++, t /= 2)
      ck_assert_uint_eq(ortep_decoder_graph_tokens(d[0], g), t >= 2 ? t : 0); /* 64, 32, ..., 2, then none */
    ck_assert_uint_eq(ortep_decoder_graph_tokens(d[1], 1), 0);                /* token by token: no chunk graphs */
    size_t V = ortep_decoder_vocab_size(d[0]), n = sizeof long_prompt / sizeof *long_prompt;
    float *l[2] = {malloc(V * sizeof(float)), malloc(V * sizeof(float))};
    for (int round = 0; round < 2; round++) {
      uint64_t a0 = 0, f0 = 0, a1, f1;
      if (round) ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d[0]), &a0, &f0));
      int32_t tok[2][16];
      for (int c = 0; c < 2; c++) {
        ck_assert_ok(ortep_decoder_reset(d[c]));
        ck_assert_ok(ortep_decoder_prefill(d[c], long_prompt, n, &tok[c][0]));
        ck_assert_uint_eq(ortep_decoder_position(d[c]), n);
        ck_assert_ok(ortep_decoder_logits(d[c], l[c], V));
      }
      for (size_t i = 0; i < V; i++)
        ck_assert_msg(fabsf(l[0][i] - l[1][i]) <= 1e-4f * (1.0f + fabsf(l[1][i])),
                      "%s logit %zu: chunked %.7g, by token %.7g", presets[pi], i, l[0][i], l[1][i]);
      for (int c = 0; c < 2; c++)
        for (int i = 1; i < 16; i++)
          ck_assert_ok(ortep_decoder_step(d[c], tok[c][i - 1], (int32_t)(n + (size_t)i - 1), &tok[c][i]));
      ck_assert_mem_eq(tok[0], tok[1], sizeof tok[0]);
      if (round) {
        ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d[0]), &a1, &f1));
        ck_assert_uint_eq(a1, a0);
        ck_assert_uint_eq(f1, f0);
      }
    }
    ortep_session *s = ortep_decoder_session(d[0]);
    ortep_session_stats st;
    /* per graph of chunk sizes 64, 32, 16, 8, 4, 2: 16 + 4 + 2 (+ 1 token), two prompts */
    const uint64_t runs[7] = {0, 0, 0, 2, 0, 2, 2};
    for (size_t g = 1; g < 7; g++) {
      ck_assert_ok(ortep_session_get_graph_stats(s, g, &st));
      ck_assert_uint_eq(st.steps, runs[g]);
      ck_assert_uint_eq(st.captures, eager || !runs[g] ? 0 : 1); /* captured at first use, replayed after */
    }
    free(l[0]), free(l[1]);
    ortep_decoder_close(d[0]);
    ortep_decoder_close(d[1]);
    test_model_dir_remove(dir);
  }
}
END_TEST

/* bf16 weights in the CPU EP's blocked layout, where the CPU has
 * AVX512-BF16: by default (cpu.products = auto) a chunk's rows are rounded
 * to bf16 before vdpbf16ps, token-by-token rows are not, and the logits
 * after the prompt and for 12 steps after it (each decoder fed the
 * token-by-token one's choice) stay within the tolerance docs/batch.md
 * states, |chunked - by token| <= BF16_CHUNK_TOL * (1 + |by token|) (the
 * worst seen on these random-weight presets: 1.9e-2 tiny, 2.5e-2
 * tiny-llama, 9.4e-2 small). cpu.products = f32 keeps f32 activations in
 * the chunk too: within 1e-4, as chunked_prefill_matches_token_by_token.
 * _i: preset (0-2) x products (auto, f32). */
#define BF16_CHUNK_TOL 0.15f
START_TEST(bf16_chunks_stay_within_the_stated_tolerance) {
  const char *presets[] = {"tiny", "tiny-llama", "small"};
  const char *products = _i < 3 ? "auto" : "f32";
  char dir[64];
  test_model_dir(dir, sizeof dir, presets[_i % 3], ORTEP_DTYPE_BF16);
  ortep_config *cfg;
  ck_assert_ok(ortep_config_create(&cfg));
  ck_assert_ok(ortep_config_set(cfg, "cpu.products", products));
  ortep_decoder *d[2];
  for (int c = 0; c < 2; c++)
    ck_assert_ok(ortep_decoder_open(
        dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64, .prefill_chunk = c ? 1 : 0, .config = cfg},
        &d[c]));
  bool bf16 = ortep_cpu_ep_bf16_products(ortep_decoder_ep(d[0]));
  ck_assert(bf16 == (_i < 3 && bf16_products()));
  float tol = bf16 ? BF16_CHUNK_TOL : 1e-4f;
  size_t V = ortep_decoder_vocab_size(d[0]), n = sizeof long_prompt / sizeof *long_prompt;
  float *l[2] = {malloc(V * sizeof(float)), malloc(V * sizeof(float))};
  int32_t tok[2];
  for (int c = 0; c < 2; c++) ck_assert_ok(ortep_decoder_prefill(d[c], long_prompt, n, &tok[c]));
  for (int step = 0; step < 13; step++) {
    for (int c = 0; c < 2; c++) ck_assert_ok(ortep_decoder_logits(d[c], l[c], V));
    for (size_t i = 0; i < V; i++)
      ck_assert_msg(fabsf(l[0][i] - l[1][i]) <= tol * (1.0f + fabsf(l[1][i])),
                    "%s, cpu.products = %s, step %d logit %zu: chunked %.7g, by token %.7g", presets[_i % 3], products,
                    step, i, l[0][i], l[1][i]);
    int32_t next = tok[1];
    for (int c = 0; c < 2; c++) ck_assert_ok(ortep_decoder_step(d[c], next, (int32_t)(n + (size_t)step), &tok[c]));
  }
  free(l[0]), free(l[1]);
  for (int c = 0; c < 2; c++) ortep_decoder_close(d[c]);
  ortep_config_destroy(cfg);
  test_model_dir_remove(dir);
}
END_TEST

/* How a prompt is cut into chunks never depends on max_seq_len: sizes over
 * it are left out, not the list scaled down to it (max_seq_len 49 once gave
 * chunks of 49, 24, 12, ... and 57 gave 57, 28, 14, ..., so a 16-token
 * prompt ran as 12 + 3 + 1 or 14 + 1 + 1 and the logits, and at a near-tie
 * the tokens, changed with the cache's size). */
START_TEST(chunk_cuts_do_not_depend_on_max_seq_len) {
  const size_t sizes[] = {17, 49, 57, 64, 300};
  int32_t ids[16];
  for (int i = 0; i < 16; i++) ids[i] = (int32_t)((i * 37 + 5) % 512);
  float *ref = NULL, *l = NULL;
  size_t v = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = sizes[i]});
    for (size_t g = 1; ortep_decoder_graph_tokens(d, g); g++) { /* powers of two up to 256 that fit */
      size_t t = ortep_decoder_graph_tokens(d, g);
      ck_assert_uint_le(t, sizes[i]);
      ck_assert_uint_eq(t & (t - 1), 0);
    }
    if (!ref) {
      v = ortep_decoder_vocab_size(d);
      ref = malloc(v * sizeof *ref), l = malloc(v * sizeof *l);
    }
    ck_assert_ok(ortep_decoder_prefill(d, ids, 16, NULL));
    ck_assert_ok(ortep_decoder_logits(d, i ? l : ref, v));
    if (i) ck_assert_msg(!memcmp(l, ref, v * sizeof *l), "max_seq_len %zu: other logits", sizes[i]);
    ortep_decoder_close(d);
  }
  free(ref), free(l);
}
END_TEST

static bool collect(int32_t t, size_t i, void *user) {
  ((int32_t *)user)[i] = t;
  return true;
}

/* _i: bit 0 eager, bit 1 token by token (else the bad id sits in a chunk of
 * 2: max_seq_len 32 gives chunk sizes 32, 16, 8, 4 and 2) */
START_TEST(bad_token_fails_the_step_with_the_gather_bit) {
  bool by_token = _i & 2;
  ortep_decoder *d =
      open_with(&(ortep_decoder_options){.max_seq_len = 32, .eager = _i & 1, .prefill_chunk = by_token ? 1 : 0});
  ck_assert_uint_eq(ortep_decoder_graph_tokens(d, 0), 1);
  ck_assert_uint_eq(ortep_decoder_graph_tokens(d, 1), by_token ? 0 : 32);
  int32_t bad[] = {3, 512, 4}; /* vocab is 512 */
  ck_assert_status(ortep_decoder_prefill(d, bad, 3, NULL), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_error_mentions("GATHER_INDEX");
  ck_assert_error_mentions("token 512");
  ck_assert_error_mentions("not emitted");
  ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_GATHER_INDEX, ORTEP_ERROR_GATHER_INDEX);
  /* token by token, the bad token did not advance; a chunk counts as a whole */
  ck_assert_uint_eq(ortep_decoder_position(d), by_token ? 1 : 0);
  size_t n = 99;
  ck_assert_status(ortep_decoder_generate(d, 4, NULL, NULL, &n), ORTEP_E_STATE);
  ck_assert_uint_eq(n, 0); /* nothing emitted */
  ck_assert_status(ortep_decoder_step(d, 3, 1, NULL), ORTEP_E_STATE);
  ck_assert_error_mentions("ortep_decoder_reset");
  /* after a reset the decoder works again, and decodes what a fresh one does */
  ck_assert_ok(ortep_decoder_reset(d));
  int32_t a[8], b[8];
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate(d, 8, collect, a, NULL));
  ortep_decoder *fresh = open_with(&(ortep_decoder_options){.max_seq_len = 32, .prefill_chunk = by_token ? 1 : 0});
  ck_assert_ok(ortep_decoder_prefill(fresh, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate(fresh, 8, collect, b, NULL));
  ck_assert_mem_eq(a, b, sizeof a);
  ortep_decoder_close(fresh);
  ortep_decoder_close(d);
}
END_TEST

/* A step past the sequence's end inside the cache is refused, changing
 * nothing: it would leave positions whose ids and KV no step computed (which
 * ortep_decoder_tokens returned and a conversation reused). The next
 * position and earlier ones step as before. */
START_TEST(a_step_that_would_leave_a_gap_is_refused) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 32});
  int32_t next, ids[4];
  ck_assert_status(ortep_decoder_step(d, 7, 10, &next), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("positions 0..9 unset");
  ck_assert_uint_eq(ortep_decoder_position(d), 0);
  ck_assert_uint_eq(ortep_decoder_tokens(d, ids, 4), 0);
  ck_assert_ok(ortep_decoder_step(d, 7, 0, &next));
  ck_assert_status(ortep_decoder_step(d, 7, 2, &next), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ok(ortep_decoder_step(d, 8, 1, &next));
  ck_assert_ok(ortep_decoder_step(d, 9, 1, &next)); /* an earlier position: the sequence ends after it */
  ck_assert_uint_eq(ortep_decoder_tokens(d, ids, 4), 2);
  ck_assert_int_eq(ids[0], 7);
  ck_assert_int_eq(ids[1], 9);
  /* a conversation reuses only what ran: the first two ids */
  size_t reused;
  ck_assert_ok(ortep_decoder_prefill_conversation(d, (const int32_t[]){7, 9, 4}, 3, &next, &reused));
  ck_assert_uint_eq(reused, 2);
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_status(ortep_decoder_step(d, 7, 3, &next), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ok(ortep_decoder_prefill_conversation(d, (const int32_t[]){7, 9, 4}, 3, &next, &reused));
  ck_assert_uint_eq(reused, 0);
  ortep_decoder_close(d);
}
END_TEST

START_TEST(position_past_the_cache_fails_with_the_position_bit) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 16, .eager = _i == 1});
  int32_t next;
  ck_assert_ok(ortep_decoder_step(d, 7, 0, &next));
  ck_assert_status(ortep_decoder_step(d, 7, 16, &next), ORTEP_E_DEVICE_VALIDATION);
  uint32_t bits = ortep_decoder_last_error_bits(d);
  ck_assert_uint_eq(bits & ORTEP_ERROR_ROTARY_POSITION, ORTEP_ERROR_ROTARY_POSITION);
  ck_assert_uint_eq(bits & ORTEP_ERROR_KV_SLOT, ORTEP_ERROR_KV_SLOT);
  ck_assert_error_mentions("ROTARY_POSITION");
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_step(d, 7, 0, &next));
  ck_assert_status(ortep_decoder_step(d, 7, -1, &next), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_ok(ortep_decoder_reset(d));
  /* generate stops on the host before the cache overflows */
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  size_t n;
  ck_assert_status(ortep_decoder_generate(d, 100, NULL, NULL, &n), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("KV cache is full");
  ck_assert_uint_eq(n, 13);
  ortep_decoder_close(d);
}
END_TEST

START_TEST(steady_state_steps_allocate_nothing) {
  test_hooks_install(0); /* count the library's small allocations too */
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 64, .eager = _i == 1});
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate(d, 2, NULL, NULL, NULL)); /* warm-up */
  uint64_t a0, f0, a1, f1;
  ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d), &a0, &f0));
  long hooks0 = atomic_load(&test_hook_calls);
  int32_t tok;
  for (int i = 0; i < 30; i++)
    ck_assert_ok(ortep_decoder_step(d, 11, (int32_t)ortep_decoder_position(d), &tok)); /* a step moves it */
  ck_assert(ortep_ep_allocation_counts(ortep_decoder_ep(d), &a1, &f1));
  ck_assert_uint_eq(a1, a0);
  ck_assert_uint_eq(f1, f0);
  ck_assert_int_eq(atomic_load(&test_hook_calls), hooks0);
  ortep_session_stats st;
  ortep_session_get_stats(ortep_decoder_session(d), &st);
  ck_assert_uint_le(st.planned_bytes, st.naive_bytes);
  ck_assert_uint_ge(st.planned_bytes, st.lower_bound_bytes);
  ortep_decoder_close(d);
  ortep_restore_allocator();
  ck_assert_int_eq(atomic_load(&test_hook_live), 0);
}
END_TEST

/* An Inf or a NaN in one weight (a corrupt checkpoint): the step that reads
 * it fails through the error word in the same pass, in eager and graph mode,
 * and no token of it is emitted. _i 1: a NaN in a key projection, which
 * reaches the logits only through the attention's softmax (its exponential
 * keeps a NaN a NaN). */
START_TEST(a_non_finite_weight_fails_the_step_and_emits_nothing) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  if (_i == 0)
    test_poison_f32_weight(dir, "model.norm.weight", 3, INFINITY);
  else
    test_poison_f32_weight(dir, "model.layers.1.self_attn.k_proj.weight", 5, NAN);
  for (int eager = 0; eager < 2; eager++) {
    ortep_decoder *d;
    ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .eager = eager, .max_seq_len = 16}, &d));
    int32_t next = -42;
    /* nine tokens: softmaxes of 4 and more positions (their four-lane path), by chunk and by token */
    static const int32_t nine[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ck_assert_status(ortep_decoder_prefill(d, _i ? nine : prompt, _i ? 9 : 2, &next), ORTEP_E_DEVICE_VALIDATION);
    ck_assert_int_eq(next, -42); /* nothing emitted */
    ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_ARGMAX_NOT_FINITE, ORTEP_ERROR_ARGMAX_NOT_FINITE);
    ck_assert_error_mentions("NaN or infinite");
    ck_assert_status(ortep_decoder_generate(d, 4, NULL, NULL, NULL), ORTEP_E_STATE);
    ortep_decoder_close(d);
  }
  test_model_dir_remove(dir);
}
END_TEST

/* Streaming and chunked callers get exactly the tokens of one long call:
 * one call of N == k calls of N/k == N calls of 1, and stopping from the
 * callback then resuming changes nothing either. */
typedef struct sink {
  int32_t tok[64];
  size_t n, stop_after;
} sink;
static bool collect_into_sink(int32_t token, size_t index, void *user) {
  sink *s = user;
  s->tok[s->n++] = token;
  return !(s->stop_after && s->n % s->stop_after == 0);
}
static void generate_in_calls(size_t total, size_t per_call, size_t stop_after, sink *out) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 64});
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  *out = (sink){.stop_after = stop_after};
  while (out->n < total) {
    size_t before = out->n, got = 0;
    size_t ask = per_call < total - out->n ? per_call : total - out->n;
    ck_assert_ok(ortep_decoder_generate(d, ask, collect_into_sink, out, &got));
    ck_assert_uint_eq(got, out->n - before);
    ck_assert_uint_ge(got, 1);
  }
  ck_assert_uint_eq(ortep_decoder_position(d), 4 + total - 1); /* the last token is emitted, not yet run */
  ortep_decoder_close(d);
}
START_TEST(generate_in_chunks_emits_the_tokens_of_one_call) {
  const size_t totals[] = {1, 6, 12};
  for (size_t t = 0; t < 3; t++) {
    size_t N = totals[t];
    sink one, chunks, singles, stopped;
    generate_in_calls(N, N, 0, &one);
    generate_in_calls(N, N >= 3 ? N / 3 : 1, 0, &chunks);
    generate_in_calls(N, 1, 0, &singles);
    generate_in_calls(N, N, 4, &stopped); /* the callback stops every 4 tokens; resumed */
    ck_assert_uint_eq(one.n, N);
    for (size_t i = 0; i < N; i++) {
      ck_assert_msg(chunks.tok[i] == one.tok[i] && singles.tok[i] == one.tok[i] && stopped.tok[i] == one.tok[i],
                    "N %zu, token %zu: one call %d, chunks %d, singles %d, stopped %d", N, i, one.tok[i], chunks.tok[i],
                    singles.tok[i], stopped.tok[i]);
    }
  }
  /* and the same tokens as stepping by hand */
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 64});
  sink one;
  generate_in_calls(6, 6, 0, &one);
  int32_t t;
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, &t));
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(t, one.tok[i]);
    ck_assert_ok(ortep_decoder_step(d, t, 4 + i, &t));
  }
  ortep_decoder_close(d);
}
END_TEST

START_TEST(logits_need_a_successful_step_and_prefill_bounds_cannot_wrap) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 16});
  size_t V = ortep_decoder_vocab_size(d);
  float *l = malloc(V * sizeof *l);
  ck_assert_status(ortep_decoder_logits(d, l, V), ORTEP_E_STATE);
  ck_assert_error_mentions("no step has succeeded");
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 2, NULL));
  ck_assert_ok(ortep_decoder_logits(d, l, V));
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_status(ortep_decoder_logits(d, l, V), ORTEP_E_STATE);
  /* n near SIZE_MAX: refused up front, never wrapping past the bound */
  ck_assert_status(ortep_decoder_prefill(d, prompt, SIZE_MAX, NULL), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_decoder_prefill(d, prompt, SIZE_MAX - 3, NULL), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("does not fit max_seq_len 16");
  ck_assert_uint_eq(ortep_decoder_position(d), 0);
  free(l);
  ortep_decoder_close(d);
}
END_TEST

/* The threading contract: one decoder, one thread at a time. Two threads
 * hammering one decoder get ORTEP_E_STATE for the overlapping calls, never
 * a corrupted heap (this suite runs under ThreadSanitizer in CI). */
typedef struct hammer {
  ortep_decoder *d;
  int ok, refused, other;
} hammer;
static void *hammer_run(void *arg) {
  hammer *h = arg;
  for (int i = 0; i < 200; i++) {
    int32_t t;
    ortep_status st =
        (i % 2) ? ortep_decoder_step(h->d, 3, i % 8, &t) : ortep_decoder_generate(h->d, 1, NULL, NULL, NULL);
    if (st == ORTEP_OK)
      h->ok++;
    else if (st == ORTEP_E_STATE && strstr(ortep_last_error(), "in use by another call"))
      h->refused++;
    else if (st == ORTEP_E_OUT_OF_RANGE)
      h->ok++; /* the cache filled up: a clean answer */
    else
      h->other++;
  }
  return NULL;
}
START_TEST(two_threads_on_one_decoder_are_refused_not_corrupted) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 512});
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 2, NULL));
  hammer a = {d, 0, 0, 0}, b = {d, 0, 0, 0};
  pthread_t ta, tb;
  ck_assert_int_eq(pthread_create(&ta, NULL, hammer_run, &a), 0);
  ck_assert_int_eq(pthread_create(&tb, NULL, hammer_run, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ck_assert_int_eq(a.other + b.other, 0);
  ck_assert_int_eq(a.ok + a.refused, 200);
  ck_assert_int_eq(b.ok + b.refused, 200);
  ck_assert_int_gt(a.ok + b.ok, 0);
  int32_t t;
  ck_assert_ok(ortep_decoder_step(d, 3, 0, &t)); /* still usable afterwards */
  ortep_decoder_close(d);
}
END_TEST

/* A config that would need more memory than the machine has is refused by
 * the default budget (3/4 of physical memory) from the config alone, before
 * anything is allocated: no OOM killer, and quickly. */
START_TEST(an_oversized_decoder_is_refused_before_touching_memory) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  test_model_set_context(dir, 4000000000LL);
  ortep_decoder *d = NULL;
  ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = INT32_MAX}, &d),
                   ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("KV caches");
  ck_assert_error_mentions("lower max_seq_len, or raise ortep.host.budget_bytes");
  ck_assert_ptr_null(d);
  test_model_dir_remove(dir);
}
END_TEST

static size_t resident_bytes(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%ld %ld", &pages, &resident), 2);
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* A model claiming 2^21 positions, opened with max_seq_len 0 (its whole
 * context), commits what it uses, not the context: the rotary tables'
 * rows are computed as positions come into use (all of them, 128 MiB for
 * head_dim 16, were written at open; 2^26 positions took 4 GB), and its
 * logits are bitwise those of a decoder opened for 600 positions, through
 * rows filled on demand (past 256 and 512). What open still holds (an
 * int32 per position: 8 MiB, and a sanitizer's or Valgrind's shadow of it)
 * stays under 96 MiB. */
START_TEST(a_long_context_commits_what_is_used) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  test_model_set_context(dir, 1 << 21);
  size_t before = resident_bytes();
  ortep_decoder *d, *ref;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu"}, &d));
  ck_assert_uint_eq(ortep_decoder_max_seq_len(d), 1u << 21);
  size_t grown = resident_bytes() - before;
  ck_assert_msg(grown < (96u << 20), "opening took %zu MB resident", grown >> 20);
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 600}, &ref));
  int32_t tokens[520];
  for (int i = 0; i < 520; i++) tokens[i] = (int32_t)((i * 7 + 3) % 100);
  int32_t a, b;
  ck_assert_ok(ortep_decoder_prefill(d, tokens, 520, &a));
  ck_assert_ok(ortep_decoder_prefill(ref, tokens, 520, &b));
  ck_assert_int_eq(a, b);
  size_t V = ortep_decoder_vocab_size(d);
  float *x = malloc(V * sizeof *x), *y = malloc(V * sizeof *y);
  ck_assert_ok(ortep_decoder_logits(d, x, V));
  ck_assert_ok(ortep_decoder_logits(ref, y, V));
  ck_assert_msg(!memcmp(x, y, V * sizeof *x), "the logits at position 519 differ");
  free(x), free(y);
  ortep_decoder_close(ref);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
END_TEST

/* ortep.weights = read: the same tokens as the mapped default, and the
 * decoder keeps working after the file is truncated under it (a mapped
 * decoder would take SIGBUS); the copy is charged to the budget. */
START_TEST(weights_read_into_memory_survive_truncation) {
  char dir[64], path[128];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.weights", "read"));
  ortep_decoder *mapped, *read;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32}, &mapped));
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32, .config = c}, &read));
  int32_t want[12], t;
  ck_assert_ok(ortep_decoder_prefill(mapped, prompt, 4, &t));
  for (int i = 0; i < 12; i++) {
    want[i] = t;
    ck_assert_ok(ortep_decoder_step(mapped, t, 4 + i, &t));
  }
  ortep_decoder_close(mapped); /* no mapping of the file is left */
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  ck_assert_int_eq(truncate(path, 0), 0);
  ck_assert_ok(ortep_decoder_prefill(read, prompt, 4, &t));
  for (int i = 0; i < 12; i++) {
    ck_assert_int_eq(t, want[i]);
    ck_assert_ok(ortep_decoder_step(read, t, 4 + i, &t));
  }
  ortep_decoder_close(read);
  ck_assert_ok(ortep_config_set(c, "ortep.weights", "copy"));
  ortep_decoder *d = NULL;
  ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                   ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("use map");
  test_model_dir_remove(dir);
  /* the copy counts against the host budget */
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ck_assert_ok(ortep_config_set(c, "ortep.weights", "read"));
  ck_assert_ok(ortep_config_set(c, "ortep.host.budget_bytes", "100K")); /* tiny's weights are 0.5 MiB */
  ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                   ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("ortep.weights = read");
  ck_assert_ptr_null(d);
  ortep_config_destroy(c);
  test_model_dir_remove(dir);
}
END_TEST

/* ortep.weights_layout: on the CPU the 16-bit projections are blocked by
 * default (llm/model.c); the tokens are those of row_major and the logits
 * within float rounding of them (the four-row dot products sum in another
 * order), and mapped or read into memory give bitwise the same logits (the
 * same repacked values, the same kernels). Unknown values and keys are
 * refused. */
START_TEST(blocked_weights_decode_like_row_major_ones) {
  const char *presets[] = {"small", "tiny-llama"};
  const ortep_dtype types[] = {ORTEP_DTYPE_F16, ORTEP_DTYPE_BF16};
  for (int pi = 0; pi < 2; pi++) {
    char dir[64];
    test_model_dir(dir, sizeof dir, presets[pi], types[pi]);
    const char *how[][2] = {{"row_major", "map"}, {NULL, "map"}, {"blocked", "read"}};
    float *logits[3] = {NULL, NULL, NULL};
    int32_t toks[3][12];
    size_t V = 0;
    for (int h = 0; h < 3; h++) {
      ortep_config *c;
      ck_assert_ok(ortep_config_create(&c));
      if (how[h][0]) ck_assert_ok(ortep_config_set(c, "ortep.weights_layout", how[h][0]));
      ck_assert_ok(ortep_config_set(c, "ortep.weights", how[h][1]));
      ortep_decoder *d;
      ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32, .config = c}, &d));
      ck_assert_msg((ortep_decoder_blocked_weights(d) > 0) == (h > 0), "%s: %zu weights blocked with %s", presets[pi],
                    ortep_decoder_blocked_weights(d), how[h][0] ? how[h][0] : "auto");
      V = ortep_decoder_vocab_size(d);
      logits[h] = malloc(12 * V * sizeof(float));
      int32_t t;
      ck_assert_ok(ortep_decoder_prefill(d, long_prompt, 12, &t));
      for (int i = 0; i < 12; i++) {
        toks[h][i] = t;
        ck_assert_ok(ortep_decoder_logits(d, logits[h] + (size_t)i * V, V));
        ck_assert_ok(ortep_decoder_step(d, t, 12 + i, &t));
      }
      ortep_decoder_close(d);
      ortep_config_destroy(c);
    }
    for (int i = 0; i < 12; i++)
      ck_assert_msg(toks[1][i] == toks[0][i], "%s step %d: blocked token %d, row-major %d", presets[pi], i, toks[1][i],
                    toks[0][i]);
    /* blocked bf16 prompt chunks on AVX512-BF16 round x to bf16 (BF16_CHUNK_TOL) */
    float tol = types[pi] == ORTEP_DTYPE_BF16 && bf16_products() ? BF16_CHUNK_TOL : 1e-3f;
    for (size_t i = 0; i < 12 * V; i++)
      ck_assert_msg(fabsf(logits[1][i] - logits[0][i]) <= tol * (1.0f + fabsf(logits[0][i])),
                    "%s logit %zu: blocked %.6f, row-major %.6f", presets[pi], i, logits[1][i], logits[0][i]);
    ck_assert_msg(memcmp(logits[1], logits[2], 12 * V * sizeof(float)) == 0,
                  "%s: blocked logits differ between "
                  "mapped and read weights",
                  presets[pi]);
    for (int h = 0; h < 3; h++) free(logits[h]);
    ortep_config *c;
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, "ortep.weights_layout", "rows4"));
    ortep_decoder *d = (ortep_decoder *)1;
    ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                     ORTEP_E_INVALID_ARGUMENT);
    ck_assert_error_mentions("ortep.weights_layout = 'rows4': use auto");
    ck_assert_ptr_null(d);
    ortep_config_destroy(c);
    /* a misspelt key is named, with the keys there are */
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, "ortep.weights_layot", "row_major"));
    ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                     ORTEP_E_INVALID_ARGUMENT);
    ck_assert_error_mentions(
        "ortep.* keys: ortep.weights, ortep.weights_layout, ortep.kv_dtype, ortep.weights_dtype, "
        "ortep.embedding_dtype, "
        "ortep.weights_cache, ortep.weights_cache_max and the governor's");
    ck_assert_error_mentions("unknown governor setting 'ortep.weights_layot'; known: ortep.host.budget_bytes");
    ortep_config_destroy(c);
    test_model_dir_remove(dir);
  }
}
END_TEST

/* The CPU EP's workers (cpu.threads): every output row (and attention head)
 * is computed whole by one worker in a fixed order, so tokens and logits are
 * bitwise the same for 1, 2, 3 and 8 threads, eager and replayed, on a model
 * whose nodes do split across workers ("small": 4 layers) and on one whose
 * nodes do not ("tiny"). Attention split over heads needs a long context:
 * test_cpu_kernels checks it on the kernel. */
START_TEST(logits_are_bitwise_equal_for_every_thread_count) {
  const char *presets[] = {"tiny", "small"};
  const ortep_dtype types[] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_BF16};
  const size_t prompt_len[] = {4, 12}; /* chunks of 4; and 8 + 4 (max_seq_len 32: sizes 32, 16, ..., 2) */
  for (int pi = 0; pi < 2; pi++) {
    char dir[64];
    test_model_dir(dir, sizeof dir, presets[pi], types[pi]);
    float *want = NULL;
    int32_t want_tok[16];
    size_t V = 0;
    const char *threads[] = {"1", "2", "3", "8"};
    for (int t = 0; t < 4; t++)
      for (int eager = 0; eager < 2; eager++) {
        ortep_config *c;
        ck_assert_ok(ortep_config_create(&c));
        ck_assert_ok(ortep_config_set(c, "cpu.threads", threads[t]));
        ortep_decoder *d;
        ck_assert_ok(ortep_decoder_open(
            dir, &(ortep_decoder_options){.ep = "cpu", .eager = eager, .max_seq_len = 32, .config = c}, &d));
        V = ortep_decoder_vocab_size(d);
        float *l = malloc(16 * V * sizeof *l);
        int32_t tok;
        size_t plen = prompt_len[pi];
        ck_assert_ok(ortep_decoder_prefill(d, long_prompt, plen, &tok));
        for (int i = 0; i < 16; i++) {
          ck_assert_ok(ortep_decoder_logits(d, l + (size_t)i * V, V));
          if (want)
            ck_assert_msg(tok == want_tok[i], "%s, %s threads, eager %d, step %d: token %d, want %d", presets[pi],
                          threads[t], eager, i, tok, want_tok[i]);
          else
            want_tok[i] = tok;
          ck_assert_ok(ortep_decoder_step(d, tok, (int32_t)plen + i, &tok));
        }
        if (want)
          ck_assert_msg(memcmp(l, want, 16 * V * sizeof *l) == 0, "%s, %s threads, eager %d: logits differ",
                        presets[pi], threads[t], eager);
        else
          want = l, l = NULL;
        free(l);
        ortep_decoder_close(d);
        ortep_config_destroy(c);
      }
    free(want);
    test_model_dir_remove(dir);
  }
}
END_TEST

/* Stop conditions: the model's eos_token_id (config.json, overridden by
 * generation_config.json; an int or a list), user stop ids, max_tokens, the
 * callback and a full cache, each reported; a stop token is never emitted. */
static void append_key(const char *dir, const char *file, const char *kv) {
  char path[160], buf[8192];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  size_t n = 0;
  if (f) {
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
  char *end = strrchr(buf, '}');
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  if (end) {
    *end = '\0';
    fprintf(f, "%s, %s}\n", buf, kv);
  } else {
    fprintf(f, "{%s}\n", kv);
  }
  fclose(f);
}
START_TEST(generation_stops_at_eos_stop_ids_limits_and_a_full_cache) {
  char dir[64], kv[128];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  /* the greedy continuation, and a token that first appears at k >= 2 */
  int32_t seq[16];
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 64});
  sink all = {0};
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate(d, 16, collect_into_sink, &all, NULL));
  memcpy(seq, all.tok, sizeof seq);
  ortep_decoder_close(d);
  size_t k = 0, k2 = 0;
  for (size_t i = 2; i < 16 && !k; i++) {
    bool fresh = true;
    for (size_t j = 0; j < i; j++) fresh = fresh && seq[j] != seq[i];
    if (fresh) k = i;
  }
  for (size_t i = 1; i < k && !k2; i++) {
    bool fresh = true;
    for (size_t j = 0; j < i; j++) fresh = fresh && seq[j] != seq[i];
    if (fresh) k2 = i;
  }
  ck_assert_msg(k >= 2 && k2 >= 1, "the greedy sequence repeats too much for this test");
  snprintf(kv, sizeof kv, "\"eos_token_id\": %d", seq[k]);
  append_key(dir, "config.json", kv);
  ortep_decoder_options o = {.ep = "cpu", .max_seq_len = 64};
  ck_assert_ok(ortep_decoder_open(dir, &o, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  sink s = {0};
  ortep_generate_result r;
  ck_assert_ok(ortep_decoder_generate_ex(d, NULL, collect_into_sink, &s, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_EOS);
  ck_assert_int_eq(r.stop_token, seq[k]);
  ck_assert_uint_eq(r.generated, k);
  ck_assert_uint_eq(s.n, k);
  ck_assert_mem_eq(s.tok, seq, k * sizeof *seq);
  /* resumed past it: the stop token comes first */
  s = (sink){0};
  ck_assert_ok(ortep_decoder_generate_ex(d, &(ortep_generate_options){.max_tokens = 2, .ignore_eos = true},
                                         collect_into_sink, &s, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_MAX_TOKENS);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_int_eq(s.tok[0], seq[k]);
  ck_assert_int_eq(s.tok[1], seq[k + 1]);
  /* a user stop id, the callback, max_tokens */
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate_ex(d, &(ortep_generate_options){.stop_tokens = &seq[k2], .n_stop_tokens = 1},
                                         NULL, NULL, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_STOP_TOKEN);
  ck_assert_uint_eq(r.generated, k2);
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  s = (sink){.stop_after = 1};
  ck_assert_ok(ortep_decoder_generate_ex(d, NULL, collect_into_sink, &s, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_CALLBACK);
  ck_assert_uint_eq(r.generated, 1);
  ortep_decoder_close(d);
  /* a full cache is a normal end */
  o.max_seq_len = 8;
  ck_assert_ok(ortep_decoder_open(dir, &o, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate_ex(d, &(ortep_generate_options){.ignore_eos = true}, NULL, NULL, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_CACHE_FULL);
  ck_assert_uint_eq(r.generated, 5); /* positions 4..7 fed, and the token the last one gave */
  ortep_decoder_close(d);
  /* generation_config.json overrides config.json, and takes a list */
  snprintf(kv, sizeof kv, "\"eos_token_id\": [%d, %d]", 511, seq[k2]);
  append_key(dir, "generation_config.json", kv);
  o.max_seq_len = 64;
  ck_assert_ok(ortep_decoder_open(dir, &o, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate_ex(d, NULL, NULL, NULL, &r));
  ck_assert_int_eq(r.reason, ORTEP_STOP_EOS);
  ck_assert_int_eq(r.stop_token, seq[k2]);
  ortep_decoder_close(d);
  /* bad ids are refused, naming the file */
  append_key(dir, "generation_config.json", "\"x\": 1"); /* still valid */
  char path[160];
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"eos_token_id\": 512}", f);
  fclose(f);
  ck_assert_status(ortep_decoder_open(dir, &o, &d), ORTEP_E_FORMAT);
  ck_assert_error_mentions("generation_config.json: 'eos_token_id' must be a token id");
  f = fopen(path, "w");
  fputs("{\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", f);
  fclose(f);
  ck_assert_status(ortep_decoder_open(dir, &o, &d), ORTEP_E_FORMAT);
  ck_assert_error_mentions("more than 8 ids");
  unlink(path);
  test_model_dir_remove(dir);
}
END_TEST

START_TEST(open_errors_are_clear) {
  ortep_decoder *d = (ortep_decoder *)1;
  ck_assert_status(ortep_decoder_open("/nonexistent/model", NULL, &d), ORTEP_E_IO);
  ck_assert_error_mentions("does not exist");
  ck_assert_ptr_null(d);
  ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "tpu"}, &d), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("choose auto, cpu or cuda");
  ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.max_seq_len = 100000}, &d),
                   ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("max_position_embeddings");
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.host.budget_bytes", "64K"));
  ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                   ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("ortep.host.budget_bytes");
  ortep_config_destroy(c);
  /* a key no component reads (a typo, another program's) is refused naming the namespaces */
  const char *stray[] = {"foo.bar", "ortepp.x", "cpus.threads"};
  for (size_t i = 0; i < 3; i++) {
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, stray[i], "1"));
    ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d),
                     ORTEP_E_INVALID_ARGUMENT);
    ck_assert_error_mentions(stray[i]);
    ck_assert_error_mentions("the namespaces are ortep.*");
    ortep_config_destroy(c);
  }
  ck_assert_ok(ortep_config_create(&c)); /* cuda.* is known on a machine without a GPU too */
  ck_assert_ok(ortep_config_set(c, "cuda.device_id", "0"));
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d));
  ortep_decoder_close(d);
  ortep_config_destroy(c);
  /* a path that is not a directory says what it is */
  char fifo[96];
  snprintf(fifo, sizeof fifo, "%s/fifo", g_dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_status(ortep_decoder_open(fifo, NULL, &d), ORTEP_E_IO);
  ck_assert_error_mentions("is a FIFO, not a directory");
  unlink(fifo);
  d = open_with(NULL);
  ck_assert_status(ortep_decoder_generate(d, 1, NULL, NULL, NULL), ORTEP_E_STATE);
  ck_assert_error_mentions("prefill a prompt first");
  ck_assert_status(ortep_decoder_prefill(d, prompt, 0, NULL), ORTEP_E_INVALID_ARGUMENT);
  ortep_decoder_close(d);
}
END_TEST

static void setup(void) { test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32); }
static void teardown(void) { test_model_dir_remove(g_dir); }

static bool collect_ids(int32_t t, size_t i, void *user) {
  ((int32_t *)user)[i] = t;
  return true;
}

/* A step after a prefill moves the sequence (decode.h): its argmax is the
 * pending token and the position follows it, so greedy and sampled
 * generation both continue from the step's logits, exactly as after a
 * prefill that ended with the step's token. (Sampled generation once drew
 * from the stray step's logits while greedy emitted the prefill's token.) */
START_TEST(a_step_after_prefill_moves_the_sequence) {
  const ortep_decoder_options tok_by_tok = {.max_seq_len = 64, .prefill_chunk = 1}; /* bitwise-equal logits */
  const ortep_sampling samp = {.temperature = 0.8f, .top_p = 0.9f, .repetition_penalty = 1.2f, .seed = 77};
  for (int sampled = 0; sampled < 2; sampled++) {
    ortep_decoder *a = open_with(&tok_by_tok), *b = open_with(&tok_by_tok);
    const int32_t with_77[] = {5, 17, 2, 99, 77};
    int32_t next_a, next_b, ta[8], tb[8];
    ck_assert_ok(ortep_decoder_prefill(a, prompt, 4, NULL));
    ck_assert_ok(ortep_decoder_step(a, 77, 4, &next_a));
    ck_assert_uint_eq(ortep_decoder_position(a), 5);
    ck_assert_ok(ortep_decoder_prefill(b, with_77, 5, &next_b));
    ck_assert_int_eq(next_a, next_b);
    ortep_generate_options o = {.max_tokens = 8, .ignore_eos = true, .sampling = sampled ? &samp : NULL};
    ortep_generate_result ra, rb;
    ck_assert_ok(ortep_decoder_generate_ex(a, &o, collect_ids, ta, &ra));
    ck_assert_ok(ortep_decoder_generate_ex(b, &o, collect_ids, tb, &rb));
    ck_assert_uint_eq(ra.generated, 8);
    ck_assert_mem_eq(ta, tb, sizeof ta);
    if (!sampled) ck_assert_int_eq(ta[0], next_a); /* greedy emits the step's argmax first */
    /* a stray position past the end is refused; an earlier one: the sequence ends after it */
    ck_assert_status(ortep_decoder_step(a, 77, 40, &next_a), ORTEP_E_OUT_OF_RANGE);
    ck_assert_uint_eq(ortep_decoder_position(a), 12);
    ck_assert_ok(ortep_decoder_step(a, 77, 6, &next_a));
    ck_assert_uint_eq(ortep_decoder_position(a), 7);
    o.max_tokens = 1;
    ck_assert_ok(ortep_decoder_generate_ex(a, &o, collect_ids, ta, &ra));
    if (!sampled) ck_assert_int_eq(ta[0], next_a);
    ck_assert_uint_eq(ortep_decoder_position(a), 7);
    ortep_decoder_close(a);
    ortep_decoder_close(b);
  }
}
END_TEST

/* After a prefill that failed on the device, generating says to reset (not
 * to prefill, which would be refused too). */
START_TEST(generate_after_a_failed_prefill_points_to_reset) {
  ortep_decoder *d = open_with(&(ortep_decoder_options){.max_seq_len = 32});
  const int32_t bad[] = {5, 100000, 2};
  ck_assert_status(ortep_decoder_prefill(d, bad, 3, NULL), ORTEP_E_DEVICE_VALIDATION);
  ortep_generate_options o = {.max_tokens = 2};
  ck_assert_status(ortep_decoder_generate_ex(d, &o, NULL, NULL, NULL), ORTEP_E_STATE);
  ck_assert_error_mentions("call ortep_decoder_reset");
  ck_assert_status(ortep_decoder_generate(d, 2, NULL, NULL, NULL), ORTEP_E_STATE);
  ck_assert_error_mentions("call ortep_decoder_reset");
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ck_assert_ok(ortep_decoder_generate_ex(d, &o, NULL, NULL, NULL));
  static const int32_t forty[40];
  ck_assert_status(ortep_decoder_prefill(d, forty, 40, NULL), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("a prompt of 40 tokens");
  ortep_decoder_close(d);
}
END_TEST

/* The resident bytes (Rss) of every mapping of file in /proc/self/smaps;
 * SIZE_MAX when smaps cannot be read. */
static size_t rss_of_file(const char *file) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return SIZE_MAX;
  char line[4608];
  bool inside = false;
  size_t rss = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, kb;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      line[strcspn(line, "\n")] = '\0';
      size_t n = strlen(line), m = strlen(file);
      inside = n >= m && strcmp(line + n - m, file) == 0;
    } else if (inside && sscanf(line, "Rss: %lu kB", &kb) == 1) {
      rss += (size_t)kb * 1024;
    }
  }
  fclose(f);
  return rss;
}

static const char *const projections[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                          "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                          "mlp.down_proj"};
/* the i-th blocked weight of a tied model: 7 per layer, then the embedding */
static const char *blocked_name(const ortep_model_config *c, size_t i, char *name, size_t len) {
  if (i == 7 * (size_t)c->num_hidden_layers) return "model.embed_tokens.weight";
  snprintf(name, len, "model.layers.%zu.%s.weight", i / 7, projections[i % 7]);
  return name;
}

/* A decoder on a governor of the test's, with ortep.weights and
 * ortep.weights_layout set; the host bytes it charges. */
static ortep_decoder *open_charged(ortep_governor *gov, const char *dir, const char *weights, const char *layout,
                                   uint64_t *charged) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.weights", weights));
  ck_assert_ok(ortep_config_set(c, "ortep.weights_layout", layout));
  ck_assert_ok(ortep_config_set(c, "ortep.weights_cache", "off")); /* what preparing costs (test_quant: the cache) */
  ortep_mem_stats a, b;
  ortep_governor_get_stats(gov, ORTEP_TIER_HOST, &a);
  ortep_decoder *d = NULL;
  ortep_status st = ortep_decoder_open(
      dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16, .config = c, .governor = gov, .prefill_chunk = 1},
      &d);
  ortep_config_destroy(c);
  if (st != ORTEP_OK) return NULL;
  ortep_governor_get_stats(gov, ORTEP_TIER_HOST, &b);
  *charged = b.current_bytes - a.current_bytes;
  return d;
}

/* The CPU EP blocks the 16-bit projections (and the tied embedding, which
 * the lm_head reads) when the session binds them, through the EP's
 * prepare_initializer hook: every one of the 7 per layer and the table. Memory
 * is not doubled: with the weights mapped the EP's copies are charged to the
 * governor and the file's pages under them dropped; with the weights read
 * into memory the EP rearranges that private copy in place and charges
 * nothing more. A budget too small for the copies is refused naming the
 * weight, with nothing leaked. */
START_TEST(blocked_weights_are_held_once) {
  char dir[64], name[128];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_F16);
  ortep_model *m;
  ck_assert_ok(ortep_model_open(dir, &m));
  const ortep_model_config cfg = *ortep_model_get_config(m), *c = &cfg; /* outlives the model */
  size_t packed = 0, count = 7 * (size_t)c->num_hidden_layers + 1;
  for (size_t i = 0; i < count; i++) packed += ortep_model_tensor(m, blocked_name(c, i, name, sizeof name))->size;
  size_t other = ortep_model_weight_bytes(m) - packed;
  ortep_model_close(m);
  ortep_governor *gov;
  ck_assert_ok(ortep_governor_create(&gov));
  const char *modes[] = {"map", "read"};
  for (int mode = 0; mode < 2; mode++) {
    uint64_t rows, blocks;
    ortep_decoder *r = open_charged(gov, dir, modes[mode], "row_major", &rows);
    ck_assert_ptr_nonnull(r);
    ortep_decoder *b = open_charged(gov, dir, modes[mode], "blocked", &blocks);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(ortep_decoder_blocked_weights(r), 0);
    ck_assert_uint_eq(ortep_decoder_blocked_weights(b), count);
    for (size_t i = 0; i < count; i++)
      ck_assert_msg(ortep_session_initializer_prepared(ortep_decoder_session(b), blocked_name(c, i, name, sizeof name)),
                    "%s is not blocked", name);
    if (mode) {
      ck_assert_uint_eq(blocks, rows); /* in place: nothing more */
    } else {
      ck_assert_uint_ge(blocks - rows, packed); /* the copies are charged */
      ck_assert_uint_le(blocks - rows, packed + count * 64);
    }
    /* the same tokens as the row-major weights (test blocked_weights_decode_like_row_major_ones has the logits) */
    int32_t tr, tb;
    ck_assert_ok(ortep_decoder_prefill(r, prompt, 4, &tr));
    ck_assert_ok(ortep_decoder_prefill(b, prompt, 4, &tb));
    ck_assert_int_eq(tr, tb);
    ortep_decoder_close(r);
    ortep_decoder_close(b);
  }
  /* mapped: the file's pages under the blocked weights are dropped, so after
   * a prefill (which reads every weight) the mapping holds what was not
   * blocked and the pages a blocked weight shares with its neighbours (two
   * each at most); without the release it would hold every projection */
  char file[128];
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  uint64_t charged;
  ortep_decoder *b = open_charged(gov, dir, "map", "blocked", &charged);
  ck_assert_ptr_nonnull(b);
  int32_t t;
  ck_assert_ok(ortep_decoder_prefill(b, prompt, 4, &t));
  size_t rss = rss_of_file(file), bound = other + (2 * count + 16) * 4096;
  if (rss != SIZE_MAX)
    ck_assert_msg(rss <= bound, "the mapping holds %zu bytes with %zu blocked; at most %zu expected", rss, packed,
                  bound);
  ortep_decoder_close(b);
  /* a budget too small for the copies */
  ortep_mem_stats s0;
  ortep_governor_get_stats(gov, ORTEP_TIER_HOST, &s0);
  ck_assert_ok(ortep_governor_set_budget(gov, ORTEP_TIER_HOST, s0.current_bytes + packed / 2));
  ck_assert_ptr_null(open_charged(gov, dir, "map", "blocked", &charged));
  ck_assert_error_mentions("into the blocked layout (cpu.weights_layout)");
  ortep_mem_stats s1;
  ortep_governor_get_stats(gov, ORTEP_TIER_HOST, &s1);
  ck_assert_uint_eq(s1.current_bytes, s0.current_bytes);
  ortep_governor_destroy(gov);
  test_model_dir_remove(dir);
}
END_TEST

/* Which weights are blocked: an untied lm_head is, the untied embedding
 * table (only its looked-up rows are read) is not, f32 weights are not; a
 * norm's scale is copied as it is (a small constant). */
START_TEST(blocked_weights_take_only_what_fits) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny-llama", ORTEP_DTYPE_BF16);
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16}, &d));
  ortep_session *s = ortep_decoder_session(d);
  ck_assert(ortep_session_initializer_prepared(s, "lm_head.weight"));
  ck_assert(ortep_session_initializer_prepared(s, "model.layers.1.mlp.down_proj.weight"));
  ck_assert(!ortep_session_initializer_prepared(s, "model.embed_tokens.weight"));
  ortep_shape sh;
  ck_assert(ortep_session_initializer_form(s, "model.norm.weight", NULL, &sh));
  ck_assert_int_eq(sh.rank, 1);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16}, &d));
  ck_assert_uint_eq(ortep_decoder_blocked_weights(d), 0);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
END_TEST

int main(void) {
  if (test_simd_set_missing()) return 77; /* ctest's *_simd runs on a CPU without the set */
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, eager_and_replay_agree_bitwise);
  tcase_add_test(tc, eager_and_replay_agree_with_attention_as_seams);
  tcase_add_test(tc, eager_and_replay_agree_with_every_third_node_a_seam);
  tcase_add_test(tc, matches_the_reference_qwen2_style);
  tcase_add_test(tc, matches_the_reference_llama_style);
  tcase_add_test(tc, matches_the_reference_with_bf16_and_f16_weights);
  tcase_add_loop_test(tc, bad_token_fails_the_step_with_the_gather_bit, 0, 4);
  tcase_add_loop_test(tc, position_past_the_cache_fails_with_the_position_bit, 0, 2);
  tcase_add_test(tc, a_step_that_would_leave_a_gap_is_refused);
  tcase_add_loop_test(tc, steady_state_steps_allocate_nothing, 0, 2);
  tcase_add_test(tc, open_errors_are_clear);
  tcase_add_test(tc, a_step_after_prefill_moves_the_sequence);
  tcase_add_test(tc, generate_after_a_failed_prefill_points_to_reset);
  tcase_add_test(tc, generation_stops_at_eos_stop_ids_limits_and_a_full_cache);
  tcase_add_test(tc, logits_are_bitwise_equal_for_every_thread_count);
  tcase_add_test(tc, weights_read_into_memory_survive_truncation);
  tcase_add_test(tc, blocked_weights_decode_like_row_major_ones);
  tcase_add_test(tc, blocked_weights_are_held_once);
  tcase_add_test(tc, blocked_weights_take_only_what_fits);
  tcase_add_test(tc, an_oversized_decoder_is_refused_before_touching_memory);
  tcase_add_test(tc, a_long_context_commits_what_is_used);
  tcase_add_test(tc, generate_in_chunks_emits_the_tokens_of_one_call);
  tcase_add_test(tc, logits_need_a_successful_step_and_prefill_bounds_cannot_wrap);
  tcase_add_test(tc, two_threads_on_one_decoder_are_refused_not_corrupted);
  tcase_add_loop_test(tc, chunked_prefill_matches_the_reference, 0, 3);
  tcase_add_loop_test(tc, bf16_chunks_stay_within_the_stated_tolerance, 0, 6);
  tcase_add_loop_test(tc, chunked_prefill_matches_token_by_token, 0, 2);
  tcase_add_test(tc, chunk_cuts_do_not_depend_on_max_seq_len);
  tcase_add_loop_test(tc, a_non_finite_weight_fails_the_step_and_emits_nothing, 0, 2);
  suite_add_tcase(s, tc);
  return test_run(s);
}
