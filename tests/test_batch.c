/* test_batch.c: many sequences in one step (batch.h) through the public API:
 * every request's tokens are those of a decoder running it alone (greedy
 * and sampled, f32/bf16/q8_0 weights), whatever its neighbours; requests
 * join, finish and free their slots; joining and leaving re-capture
 * nothing and a steady step allocates nothing; a request with a bad token
 * fails alone, naming its slot, token and position; bad arguments are
 * refused with the reason. */
#include <stdatomic.h>

#include "testutil.h"

static char g_dir[64];

static void setup(void) { test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_BF16); }
static void teardown(void) { test_model_dir_remove(g_dir); }

/* Prompts of many lengths: a single token (a decode row at once), chunks
 * with and without a tail token, one longer than the largest chunk. */
#define N_PROMPTS 7
static const size_t prompt_len[N_PROMPTS] = {1, 2, 3, 5, 23, 40, 71};
static void make_prompt(size_t which, int32_t *out) {
  for (size_t i = 0; i < prompt_len[which]; i++) out[i] = (int32_t)((which * 37 + i * 11 + 5) % 251);
}

typedef struct run {
  int32_t tokens[64];
  size_t n;
  ortep_generate_result result;
} run;

static bool collect(int32_t token, size_t index, void *user) {
  run *r = user;
  ck_assert_uint_eq(index, r->n);
  r->tokens[r->n++] = token;
  return true;
}

static const ortep_sampling sampled = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 7};

/* The request alone, in a decoder. */
static run alone(const char *dir, const ortep_decoder_options *o, const int32_t *p, size_t n,
                 const ortep_generate_options *g) {
  ortep_decoder *d;
  ortep_decoder_options c = *o;
  c.ep = "cpu";
  ck_assert_ok(ortep_decoder_open(dir, &c, &d));
  run r = {{0}, 0, {0}};
  ck_assert_ok(ortep_decoder_prefill(d, p, n, NULL));
  ck_assert_ok(ortep_decoder_generate_ex(d, g, collect, &r, &r.result));
  ortep_decoder_close(d);
  return r;
}

typedef struct sink {
  run runs[32];
  ortep_request_id ids[32];
  size_t n_ids;
  int done, failed;
  char message[512];
} sink;
static size_t index_of(sink *s, ortep_request_id id) {
  for (size_t i = 0; i < s->n_ids; i++)
    if (s->ids[i] == id) return i;
  ck_abort_msg("an event for request %llu, which was not added", (unsigned long long)id);
  return 0;
}
static bool on_event(const ortep_batch_event *e, void *user) {
  sink *s = user;
  run *r = &s->runs[index_of(s, e->id)];
  if (e->kind == ORTEP_BATCH_TOKEN) {
    ck_assert_uint_eq(e->index, r->n);
    r->tokens[r->n++] = e->token;
  } else if (e->kind == ORTEP_BATCH_DONE) {
    r->result = e->result;
    s->done++;
  } else {
    s->failed++;
    snprintf(s->message, sizeof s->message, "%s", e->message);
  }
  return true;
}

static ortep_batch *open_batch(const char *dir, size_t slots, const ortep_decoder_options *o) {
  ortep_batch_options bo = {.decoder = *o, .slots = slots};
  ortep_batch *b;
  ck_assert_ok(ortep_batch_open(dir, &bo, &b));
  return b;
}

static void add(ortep_batch *b, sink *s, const int32_t *p, size_t n, const ortep_generate_options *g) {
  ck_assert_ok(ortep_batch_add(b, p, n, g, on_event, s, &s->ids[s->n_ids]));
  ck_assert_uint_eq(s->ids[s->n_ids], s->n_ids + 1); /* ids count up from 1 */
  s->n_ids++;
}

static void expect_same(const run *want, const run *got, const char *what, size_t which) {
  ck_assert_msg(got->n == want->n, "%s, prompt %zu: %zu tokens in the batch, %zu alone", what, which, got->n, want->n);
  for (size_t i = 0; i < want->n; i++)
    ck_assert_msg(got->tokens[i] == want->tokens[i], "%s, prompt %zu, token %zu: %d in the batch, %d alone", what,
                  which, i, got->tokens[i], want->tokens[i]);
  ck_assert_int_eq(got->result.reason, want->result.reason);
  ck_assert_uint_eq(got->result.generated, want->result.generated);
}

/* Every prompt, greedy and sampled, in a batch of 3 slots (so requests
 * wait, join as others finish, and the buckets 1, 2 and 3 all run), gives
 * the tokens the decoder gives it alone. _i: the weights (tiny bf16,
 * blocked; tiny-llama quantized to q8_0; tiny-llama f32, row-major; small
 * bf16, whose projections split across the workers). */
START_TEST(every_request_decodes_as_it_would_alone) {
  static const char *const wdt[] = {NULL, "q8_0", NULL, NULL};
  static const char *const preset[] = {NULL, "tiny-llama", "tiny-llama", "small"};
  static const ortep_dtype pdt[] = {ORTEP_DTYPE_BF16, ORTEP_DTYPE_BF16, ORTEP_DTYPE_F32, ORTEP_DTYPE_BF16};
  char dir[64];
  snprintf(dir, sizeof dir, "%s", g_dir);
  if (preset[_i]) test_model_dir(dir, sizeof dir, preset[_i], pdt[_i]);
  ortep_config *cfg;
  ck_assert_ok(ortep_config_create(&cfg));
  if (wdt[_i]) ck_assert_ok(ortep_config_set(cfg, "ortep.weights_dtype", wdt[_i]));
  ortep_decoder_options o = {.max_seq_len = 128, .config = cfg};
  run want[2 * N_PROMPTS];
  ortep_generate_options g[2 * N_PROMPTS];
  int32_t p[2 * N_PROMPTS][80];
  for (size_t k = 0; k < 2 * N_PROMPTS; k++) {
    make_prompt(k % N_PROMPTS, p[k]);
    /* the sampled ones each with its own seed, and max_tokens of their own */
    static ortep_sampling s[2 * N_PROMPTS];
    s[k] = sampled, s[k].seed = 100 + k;
    g[k] = (ortep_generate_options){
        .max_tokens = 6 + k % 5, .ignore_eos = true, .sampling = k >= N_PROMPTS ? &s[k] : NULL};
    want[k] = alone(dir, &o, p[k], prompt_len[k % N_PROMPTS], &g[k]);
  }
  ortep_batch *b = open_batch(dir, 3, &o);
  sink *s = calloc(1, sizeof *s);
  for (size_t k = 0; k < 2 * N_PROMPTS; k++) add(b, s, p[k], prompt_len[k % N_PROMPTS], &g[k]);
  ck_assert_ok(ortep_batch_run(b));
  ck_assert_int_eq(s->done, 2 * N_PROMPTS);
  ck_assert_int_eq(s->failed, 0);
  for (size_t k = 0; k < 2 * N_PROMPTS; k++)
    expect_same(&want[k], &s->runs[k], k < N_PROMPTS ? "greedy" : "sampled", k);
  ortep_batch_stats st;
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_eq(st.running + st.waiting, 0);
  ck_assert_uint_gt(st.decode_rows, st.decode_steps); /* sequences did share steps */
  ck_assert_uint_eq(st.kv.committed_bytes, 0);        /* every slot's memory went back */
  ortep_batch_close(b);
  free(s);
  ortep_config_destroy(cfg);
  if (preset[_i]) test_model_dir_remove(dir);
}
END_TEST

/* The same request beside 0, 1, 3 and 6 neighbours (buckets 1, 2, 4, 8 of
 * an 8-slot batch) and started at other steps: the same tokens every time. */
START_TEST(a_request_does_not_depend_on_its_neighbours) {
  ortep_decoder_options o = {.max_seq_len = 96};
  int32_t mine[23], other[80];
  make_prompt(4, mine);
  ortep_generate_options g = {.max_tokens = 20, .ignore_eos = true, .sampling = &sampled};
  run first = {{0}, 0, {0}};
  static const size_t neighbours[] = {0, 1, 3, 6};
  for (size_t t = 0; t < sizeof neighbours / sizeof *neighbours; t++) {
    ortep_batch *b = open_batch(g_dir, 8, &o);
    sink *s = calloc(1, sizeof *s);
    for (size_t k = 0; k < neighbours[t]; k++) { /* different prompts, lengths and draws */
      make_prompt(k % N_PROMPTS, other);
      ortep_generate_options go = {.max_tokens = 3 + 5 * k, .ignore_eos = true, .sampling = k % 2 ? &sampled : NULL};
      add(b, s, other, prompt_len[k % N_PROMPTS], &go);
    }
    for (size_t k = 0; k < t; k++) ck_assert_ok(ortep_batch_step(b, NULL)); /* joins later each time */
    add(b, s, mine, 23, &g);
    ck_assert_ok(ortep_batch_run(b));
    run *r = &s->runs[s->n_ids - 1];
    ck_assert_uint_eq(r->n, 20);
    if (t == 0)
      first = *r;
    else
      expect_same(&first, r, "beside neighbours", neighbours[t]);
    ortep_batch_close(b);
    free(s);
  }
}
END_TEST

/* Requests polled instead of called back: states, slot, tokens so far, the
 * final result, release; cancel of a waiting and of a running request. */
START_TEST(requests_can_be_polled_cancelled_and_released) {
  ortep_decoder_options o = {.max_seq_len = 64};
  ortep_batch *b = open_batch(g_dir, 2, &o);
  int32_t p[5];
  make_prompt(3, p);
  ortep_generate_options g = {.max_tokens = 5, .ignore_eos = true};
  ortep_request_id a, c, w;
  ck_assert_ok(ortep_batch_add(b, p, 5, &g, NULL, NULL, &a));
  ck_assert_ok(ortep_batch_add(b, p, 5, &g, NULL, NULL, &c));
  ck_assert_ok(ortep_batch_add(b, p, 5, &g, NULL, NULL, &w));
  ortep_request_info info;
  ck_assert_ok(ortep_batch_request(b, w, &info));
  ck_assert_int_eq(info.state, ORTEP_REQUEST_WAITING);
  ck_assert_uint_eq(info.slot, (size_t)-1);
  size_t active;
  ck_assert_ok(ortep_batch_step(b, &active));
  ck_assert_uint_eq(active, 3);
  ck_assert_ok(ortep_batch_request(b, a, &info));
  ck_assert_int_eq(info.state, ORTEP_REQUEST_DECODING);
  ck_assert_uint_eq(info.slot, 0);
  ck_assert_uint_eq(info.prompt_tokens, 5);
  ck_assert_uint_eq(ortep_batch_tokens(b, a, NULL, 0), info.result.generated);
  ck_assert_status(ortep_batch_release(b, a), ORTEP_E_STATE);
  ck_assert_error_mentions("cancel it first");
  ck_assert_ok(ortep_batch_cancel(b, w)); /* waiting */
  ck_assert_ok(ortep_batch_cancel(b, c)); /* running: its slot is free */
  ck_assert_status(ortep_batch_cancel(b, c), ORTEP_E_STATE);
  ck_assert_ok(ortep_batch_request(b, c, &info));
  ck_assert_int_eq(info.state, ORTEP_REQUEST_CANCELLED);
  ck_assert_ok(ortep_batch_run(b));
  ck_assert_ok(ortep_batch_request(b, a, &info));
  ck_assert_int_eq(info.state, ORTEP_REQUEST_DONE);
  ck_assert_int_eq(info.result.reason, ORTEP_STOP_MAX_TOKENS);
  ck_assert_uint_eq(info.result.generated, 5);
  int32_t toks[8];
  ck_assert_uint_eq(ortep_batch_tokens(b, a, toks, 8), 5);
  run want = alone(g_dir, &o, p, 5, &g);
  for (size_t i = 0; i < 5; i++) ck_assert_int_eq(toks[i], want.tokens[i]);
  ck_assert_ok(ortep_batch_release(b, a));
  ck_assert_status(ortep_batch_request(b, a, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_uint_eq(ortep_batch_tokens(b, a, toks, 8), 0);
  ck_assert_status(ortep_batch_cancel(b, 999), ORTEP_E_OUT_OF_RANGE);
  ortep_batch_close(b); /* c and w are still held: freed here */
}
END_TEST

/* Stop conditions per request: EOS (not emitted), a stop token, max_tokens,
 * a callback that says stop, a full slot; each as the decoder reports it. */
static bool stop_after_two(const ortep_batch_event *e, void *user) {
  on_event(e, user);
  return !(e->kind == ORTEP_BATCH_TOKEN && e->index == 1);
}
START_TEST(each_request_stops_at_its_own_condition) {
  ortep_decoder_options o = {.max_seq_len = 40};
  int32_t p[23];
  make_prompt(4, p);
  run free_run = alone(g_dir, &o, p, 5, &(ortep_generate_options){.max_tokens = 10, .ignore_eos = true});
  ck_assert_uint_eq(free_run.n, 10);
  int32_t stop = free_run.tokens[3];
  ortep_batch *b = open_batch(g_dir, 4, &o);
  sink *s = calloc(1, sizeof *s);
  add(b, s, p, 5,
      &(ortep_generate_options){.max_tokens = 10, .stop_tokens = &stop, .n_stop_tokens = 1, .ignore_eos = true});
  add(b, s, p, 5, &(ortep_generate_options){.max_tokens = 4, .ignore_eos = true});
  ck_assert_ok(
      ortep_batch_add(b, p, 5, &(ortep_generate_options){.ignore_eos = true}, stop_after_two, s, &s->ids[s->n_ids]));
  s->n_ids++;
  add(b, s, p, 23, &(ortep_generate_options){.ignore_eos = true}); /* until the slot is full */
  ck_assert_ok(ortep_batch_run(b));
  size_t first_stop = 0; /* the stop token's first appearance: emitted up to it */
  while (free_run.tokens[first_stop] != stop) first_stop++;
  ck_assert_int_eq(s->runs[0].result.reason, ORTEP_STOP_STOP_TOKEN);
  ck_assert_int_eq(s->runs[0].result.stop_token, stop);
  ck_assert_uint_eq(s->runs[0].n, first_stop);
  ck_assert_int_eq(s->runs[1].result.reason, ORTEP_STOP_MAX_TOKENS);
  ck_assert_uint_eq(s->runs[1].n, 4);
  ck_assert_int_eq(s->runs[2].result.reason, ORTEP_STOP_CALLBACK);
  ck_assert_uint_eq(s->runs[2].n, 2);
  ck_assert_int_eq(s->runs[3].result.reason, ORTEP_STOP_CACHE_FULL);
  ortep_batch_stats st;
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_eq(s->runs[3].n, st.capacity - 23 + 1); /* the last token emitted needs no position */
  run full = alone(g_dir, &o, p, 23, &(ortep_generate_options){.ignore_eos = true});
  ck_assert_int_eq(full.result.reason, ORTEP_STOP_CACHE_FULL);
  ck_assert_uint_eq(full.n, 40 - 23 + 1);
  ortep_batch_close(b);
  free(s);
}
END_TEST

/* A prompt with an id outside the vocabulary, in a chunk or as the last
 * (decode-row) token: that request fails with the slot, token and position
 * named; its neighbours in the same steps decode as they would alone. */
START_TEST(a_bad_token_fails_its_request_alone) {
  ortep_decoder_options o = {.max_seq_len = 64};
  int32_t good[23], bad[23];
  make_prompt(4, good);
  make_prompt(_i == 2 ? 4 : 3, bad);
  const size_t n_bad = _i == 2 ? 23 : 5;
  /* _i 0: inside the chunk of 4; 1: the tail token; 2: the first of a prompt's several chunks */
  bad[_i == 1 ? 4 : 1] = 100000;
  ortep_generate_options g = {.max_tokens = 8, .ignore_eos = true};
  run want = alone(g_dir, &o, good, 23, &g);
  ortep_batch *b = open_batch(g_dir, 4, &o);
  sink *s = calloc(1, sizeof *s);
  add(b, s, good, 23, &g);
  add(b, s, bad, n_bad, &g);
  add(b, s, good, 23, &g);
  ck_assert_ok(ortep_batch_run(b));
  ck_assert_int_eq(s->failed, 1);
  ck_assert_int_eq(s->done, 2);
  ck_assert_ptr_nonnull(strstr(s->message, "request 2 (slot 1)"));
  ck_assert_msg(strstr(s->message, _i == 1 ? "token 100000 at position 4" : "token 100000 at position 1"), "%s",
                s->message);
  ck_assert_ptr_nonnull(strstr(s->message, "GATHER_INDEX"));
  ck_assert_uint_eq(s->runs[1].n, 0);
  expect_same(&want, &s->runs[0], "beside a failing request", 0);
  expect_same(&want, &s->runs[2], "beside a failing request", 2);
  /* the batch goes on: a later request is served */
  add(b, s, good, 23, &g);
  ck_assert_ok(ortep_batch_run(b));
  expect_same(&want, &s->runs[3], "after a failed request", 3);
  ortep_batch_close(b);
  free(s);
}
END_TEST

/* A slot holds at most max_seq_len positions, as a decoder does, though its
 * caches are rounded up to whole pages: a prompt that fills them is refused,
 * and generation ends where the decoder's does (CACHE_FULL). */
START_TEST(a_slot_holds_at_most_its_context) {
  ortep_decoder_options o = {.max_seq_len = 20};
  int32_t p[23];
  make_prompt(4, p);
  ortep_generate_options g = {.ignore_eos = true};
  run want = alone(g_dir, &o, p, 17, &g);
  ck_assert_int_eq(want.result.reason, ORTEP_STOP_CACHE_FULL);
  ortep_batch *b = open_batch(g_dir, 2, &o);
  ck_assert_status(ortep_batch_add(b, p, 20, NULL, NULL, NULL, NULL), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("a slot's context of 20 positions");
  sink *s = calloc(1, sizeof *s);
  add(b, s, p, 17, &g);
  add(b, s, p, 3, &g);
  ck_assert_ok(ortep_batch_run(b));
  expect_same(&want, &s->runs[0], "at the end of the context", 0);
  ck_assert_uint_eq(s->runs[1].n, 20 - 3 + 1); /* every position held, and the token the last one drew */
  ck_assert_int_eq(s->runs[1].result.reason, ORTEP_STOP_CACHE_FULL);
  ortep_batch_close(b);
  free(s);
}
END_TEST

/* After every bucket has run once, requests joining and leaving re-capture
 * nothing, and steps allocate nothing (EP arenas, and the library's own
 * allocations: the hooks count them) until a request ends. */
START_TEST(joining_and_leaving_recaptures_nothing_and_steps_allocate_nothing) {
  ortep_decoder_options o = {.max_seq_len = 256};
  ortep_batch *b = open_batch(g_dir, 4, &o);
  int32_t p[23];
  make_prompt(4, p);
  sink *s = calloc(1, sizeof *s);
  /* warm-up: 1..4 sequences decoding, every chunk size of a 23-token prompt */
  for (size_t k = 0; k < 4; k++)
    add(b, s, p, 23, &(ortep_generate_options){.max_tokens = 3 + 2 * k, .ignore_eos = true});
  ck_assert_ok(ortep_batch_run(b));
  ortep_batch_stats st0, st1;
  ortep_batch_get_stats(b, &st0);
  ck_assert_uint_ge(st0.captures, 3); /* every graph counted: the buckets of 1, 2 and 4, and prompt chunks */
  /* more join and leave at other steps */
  for (size_t k = 0; k < 6; k++)
    add(b, s, p, 23, &(ortep_generate_options){.max_tokens = 2 + 3 * k, .ignore_eos = true});
  ck_assert_ok(ortep_batch_run(b));
  ortep_batch_get_stats(b, &st1);
  ck_assert_uint_eq(st1.captures, st0.captures);
  /* steady steps: 4 long requests decoding */
  for (size_t k = 0; k < 4; k++) add(b, s, p, 23, &(ortep_generate_options){.max_tokens = 100, .ignore_eos = true});
  for (int i = 0; i < 30; i++) ck_assert_ok(ortep_batch_step(b, NULL)); /* prefills and page commits */
  test_hooks_install(0);
  uint64_t a0, f0, a1, f1;
  ck_assert(ortep_ep_allocation_counts(ortep_batch_ep(b), &a0, &f0));
  long hooks0 = atomic_load(&test_hook_calls);
  ortep_batch_stats before;
  ortep_batch_get_stats(b, &before);
  for (int i = 0; i < 7; i++) ck_assert_ok(ortep_batch_step(b, NULL)); /* within one page of every slot */
  ortep_batch_stats after;
  ortep_batch_get_stats(b, &after);
  ck_assert(ortep_ep_allocation_counts(ortep_batch_ep(b), &a1, &f1));
  ck_assert_uint_eq(after.decode_rows - before.decode_rows, 28);
  ck_assert_uint_eq(a1, a0);
  ck_assert_uint_eq(f1, f0);
  ck_assert_int_eq(atomic_load(&test_hook_calls), hooks0);
  ortep_restore_allocator();
  ortep_batch_close(b);
  free(s);
}
END_TEST

/* Requests behind one system prompt: each takes the positions another slot
 * ran the same way (ortep_batch_stats.shared_tokens), their pages held once
 * (less KV memory than the same batch without sharing, at the same step),
 * and every request's tokens are those it gives alone: greedy, and sampled
 * with a repetition penalty (which reads the positions it took from the
 * slot's history). A request that joins after the first one ended takes
 * them from a slot that itself took them. */
START_TEST(a_shared_system_prompt_is_held_once_and_changes_no_token) {
  ortep_decoder_options o = {.max_seq_len = 256};
  enum { SYS = 150, REQS = 5 };
  static const size_t suffix[REQS] = {10, 30, 57, 90, 12};
  static const size_t max_tokens[REQS] = {2, 20, 24, 16, 18};
  static int32_t p[REQS][SYS + 90];
  ortep_sampling penalised = sampled;
  penalised.repetition_penalty = 1.6f;
  ortep_generate_options g[REQS];
  run want[REQS];
  for (size_t k = 0; k < REQS; k++) {
    for (size_t i = 0; i < SYS; i++) p[k][i] = (int32_t)((i * 13 + 3) % 241);
    for (size_t i = 0; i < suffix[k]; i++) p[k][SYS + i] = (int32_t)((k * 31 + i * 7 + 1) % 239);
    g[k] = (ortep_generate_options){
        .max_tokens = max_tokens[k], .ignore_eos = true, .sampling = k % 2 ? &penalised : NULL};
    want[k] = alone(g_dir, &o, p[k], SYS + suffix[k], &g[k]);
  }
  uint64_t held[2] = {0, 0};
  for (int share = 1; share >= 0; share--) {
    ortep_batch_options bo = {.decoder = o, .slots = 4, .disable_prefix_sharing = !share};
    ortep_batch *b;
    ck_assert_ok(ortep_batch_open(g_dir, &bo, &b));
    sink *s = calloc(1, sizeof *s);
    for (size_t k = 0; k < REQS - 1; k++) add(b, s, p[k], SYS + suffix[k], &g[k]);
    ortep_request_info info;
    do { /* until every prompt ran: the KV memory of four conversations */
      ck_assert_ok(ortep_batch_step(b, NULL));
      ck_assert_ok(ortep_batch_request(b, s->ids[3], &info));
    } while (info.state == ORTEP_REQUEST_PREFILLING);
    ortep_batch_stats st;
    ortep_batch_get_stats(b, &st);
    held[share] = st.kv.committed_bytes + st.kv.shared_bytes;
    ck_assert_uint_eq(st.kv.shared_bytes > 0, share);
    while (s->done < 1) ck_assert_ok(ortep_batch_step(b, NULL)); /* the first one ends: its slot goes */
    add(b, s, p[REQS - 1], SYS + suffix[REQS - 1], &g[REQS - 1]);
    ck_assert_ok(ortep_batch_run(b));
    ck_assert_int_eq(s->done, REQS);
    for (size_t k = 0; k < REQS; k++) expect_same(&want[k], &s->runs[k], share ? "sharing" : "not sharing", k);
    ortep_batch_get_stats(b, &st);
    /* 128 positions (the plans' first chunk) for each request but the first */
    ck_assert_uint_eq(st.shared_tokens, share ? 128 * (REQS - 1) : 0);
    ck_assert_uint_eq(st.prefill_tokens + st.shared_tokens,
                      share ? st.prefill_tokens + 128 * (REQS - 1) : st.prefill_tokens);
    ck_assert_uint_eq(st.kv.committed_bytes, 0); /* everything went back, prefixes too */
    ck_assert_uint_eq(st.kv.shared_bytes, 0);
    ortep_batch_close(b);
    free(s);
  }
  ck_assert_uint_lt(held[1], held[0] * 2 / 3); /* four conversations' 128 shared positions, held once */
}
END_TEST

/* Followers wait for a leader that is still computing their common
 * prefix, then take all of it: with one chunk a step (prefill_budget 1),
 * the leader's 208-token prompt runs 128, then 64, then its own 16; each
 * follower takes 192 positions, not the 128 there after the first step.
 * A leader cancelled halfway leaves nothing to wait for: the next slot
 * leads, and the other two wait for it. Tokens are always those alone. */
START_TEST(followers_wait_for_the_leaders_chunks) {
  ortep_decoder_options o = {.max_seq_len = 256};
  enum { SYS = 200, N = 208, REQS = 4 };
  static int32_t p[REQS][N];
  ortep_generate_options g = {.max_tokens = 6, .ignore_eos = true};
  run want[REQS];
  for (size_t k = 0; k < REQS; k++) {
    for (size_t i = 0; i < N; i++) p[k][i] = (int32_t)(i < SYS ? (i * 13 + 3) % 241 : (k * 31 + i * 7 + 1) % 239);
    want[k] = alone(g_dir, &o, p[k], N, &g);
  }
  for (int cancel = 0; cancel < 2; cancel++) {
    ortep_batch_options bo = {.decoder = o, .slots = REQS, .prefill_budget = 1};
    ortep_batch *b;
    ck_assert_ok(ortep_batch_open(g_dir, &bo, &b));
    sink *s = calloc(1, sizeof *s);
    for (size_t k = 0; k < REQS; k++) add(b, s, p[k], N, &g);
    ck_assert_ok(ortep_batch_step(b, NULL)); /* the leader's first chunk: the others wait */
    ortep_batch_stats st;
    ortep_batch_get_stats(b, &st);
    ck_assert_uint_eq(st.prefill_tokens, 128);
    ck_assert_uint_eq(st.shared_tokens, 0);
    if (cancel) ck_assert_ok(ortep_batch_cancel(b, s->ids[0]));
    ck_assert_ok(ortep_batch_run(b));
    ortep_batch_get_stats(b, &st);
    ck_assert_uint_eq(st.shared_tokens, 192 * (cancel ? REQS - 2 : REQS - 1));
    ck_assert_int_eq(s->done, cancel ? REQS - 1 : REQS);
    for (size_t k = cancel; k < REQS; k++)
      expect_same(&want[k], &s->runs[k], cancel ? "leader cancelled" : "waiting", k);
    ck_assert_uint_eq(st.kv.committed_bytes + st.kv.shared_bytes, 0);
    ortep_batch_close(b);
    free(s);
  }
}
END_TEST

/* Memory failing at every call in turn while a second request takes a
 * first one's prompt (slot commits, the prefix, its mappings, the copied
 * page): each request ends DONE with the tokens it gives alone (a failed
 * share runs the whole prompt instead) or FAILED naming the injected
 * failure, and every page and prefix goes back. */
START_TEST(a_failed_share_loses_nothing) {
  ortep_decoder_options o = {.max_seq_len = 256};
  int32_t p[150];
  for (size_t i = 0; i < 150; i++) p[i] = (int32_t)((i * 13 + 3) % 241);
  ortep_generate_options g = {.max_tokens = 5, .ignore_eos = true};
  run want = alone(g_dir, &o, p, 150, &g);
  bool fell_back = false, failed = false;
  uint64_t failures = 1;
  for (uint64_t nth = 1; failures; nth++) {
    ortep_governor *gov;
    ortep_allocator *vm, *fa;
    ck_assert_ok(ortep_governor_create(&gov));
    ck_assert_ok(ortep_host_virtual_allocator_create(gov, &vm));
    ck_assert_ok(ortep_fault_allocator_create(vm, &fa));
    ortep_decoder_options fo = o;
    fo.host_allocator = fa;
    ortep_batch *b = open_batch(g_dir, 2, &fo);
    sink *s = calloc(1, sizeof *s);
    add(b, s, p, 150, &g); /* warm-up: the graphs captured, the arenas planned */
    ck_assert_ok(ortep_batch_run(b));
    ortep_fault_allocator_arm(fa, nth, false);
    add(b, s, p, 150, &g);
    add(b, s, p, 150, &g);
    ck_assert_ok(ortep_batch_run(b));
    failures = ortep_fault_allocator_failures(fa);
    ck_assert_int_eq(s->done + s->failed, 3);
    for (size_t k = 0; k < 3; k++)
      if (s->runs[k].result.generated == 5) expect_same(&want, &s->runs[k], "with a failure injected", k);
    if (s->failed) ck_assert_msg(strstr(s->message, "injected failure"), "%s", s->message);
    ortep_batch_stats st;
    ortep_batch_get_stats(b, &st);
    fell_back |= failures && !s->failed && st.shared_tokens == 0;
    failed |= s->failed > 0;
    ck_assert_uint_eq(st.kv.committed_bytes, 0);
    ck_assert_uint_eq(st.kv.shared_bytes, 0);
    ortep_batch_close(b);
    free(s);
    ortep_mem_stats ms;
    ck_assert_ok(ortep_allocator_get_stats(vm, &ms));
    ck_assert_uint_eq(ms.current_bytes, 0); /* every page and prefix back */
    ortep_allocator_destroy(fa);
    ortep_allocator_destroy(vm);
    ortep_governor_destroy(gov);
    ck_assert_uint_lt(nth, 200);
  }
  ck_assert(fell_back); /* some failure hit the share itself */
  ck_assert(failed);    /* and some a commit the request needed */
}
END_TEST

/* Slot memory: committed as a slot's tokens arrive, given back when its
 * request ends; the whole context reserved, not committed. */
START_TEST(slot_memory_follows_its_tokens) {
  ortep_decoder_options o = {.max_seq_len = 512};
  ortep_batch *b = open_batch(g_dir, 4, &o);
  ortep_batch_stats st;
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_eq(st.kv.committed_bytes, 0);
  ck_assert_uint_gt(st.kv.reserved_bytes, 0);
  ck_assert_uint_ge(st.capacity, 512);
  int32_t p[71];
  make_prompt(6, p);
  ortep_request_id id;
  ck_assert_ok(
      ortep_batch_add(b, p, 71, &(ortep_generate_options){.max_tokens = 4, .ignore_eos = true}, NULL, NULL, &id));
  ck_assert_ok(ortep_batch_step(b, NULL));
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_gt(st.kv.committed_bytes, 0);
  ck_assert_uint_lt(st.kv.committed_bytes, st.kv.reserved_bytes / 8); /* one slot, a few pages */
  ck_assert_ok(ortep_batch_run(b));
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_eq(st.kv.committed_bytes, 0);
  ortep_batch_close(b);
}
END_TEST

static bool add_from_callback(const ortep_batch_event *e, void *user) {
  ortep_batch *b = user;
  if (e->kind == ORTEP_BATCH_DONE && e->id == 1) {
    int32_t p[2] = {3, 4};
    ck_assert_ok(ortep_batch_add(b, p, 2, &(ortep_generate_options){.max_tokens = 2, .ignore_eos = true},
                                 add_from_callback, b, NULL));
    ck_assert_status(ortep_batch_step(b, NULL), ORTEP_E_STATE);
    ck_assert_error_mentions("only add requests");
  }
  return true;
}

START_TEST(bad_arguments_are_refused_with_the_reason) {
  ortep_batch *b;
  ortep_batch_options bo = {.slots = 1000};
  ck_assert_status(ortep_batch_open(g_dir, &bo, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("1 to 256");
  bo = (ortep_batch_options){.decoder = {.ep = "cuda"}};
  ck_assert_status(ortep_batch_open(g_dir, &bo, &b), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("CPU EP only");
  ck_assert_status(ortep_batch_open("/nonexistent/model", NULL, &b), ORTEP_E_IO);
  ck_assert_ptr_null(b);
  b = open_batch(g_dir, 2, &(ortep_decoder_options){.max_seq_len = 32});
  int32_t p[40] = {0};
  ck_assert_status(ortep_batch_add(b, p, 0, NULL, NULL, NULL, NULL), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_batch_add(b, NULL, 3, NULL, NULL, NULL, NULL), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_batch_add(b, p, 40, NULL, NULL, NULL, NULL), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("does not fit a slot's context");
  ortep_sampling bad = {.temperature = -1};
  ck_assert_status(ortep_batch_add(b, p, 3, &(ortep_generate_options){.sampling = &bad}, NULL, NULL, NULL),
                   ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("sampling.temperature");
  ck_assert_status(ortep_batch_add(b, p, 3, &(ortep_generate_options){.n_stop_tokens = 2}, NULL, NULL, NULL),
                   ORTEP_E_INVALID_ARGUMENT);
  /* a callback may add, not step */
  ck_assert_ok(ortep_batch_add(b, p, 2, &(ortep_generate_options){.max_tokens = 2, .ignore_eos = true},
                               add_from_callback, b, NULL));
  ck_assert_ok(ortep_batch_run(b));
  ortep_batch_stats st;
  ortep_batch_get_stats(b, &st);
  ck_assert_uint_eq(st.generated, 4);
  ortep_batch_close(b);
  ortep_batch_close(NULL);
}
END_TEST

int main(void) {
  if (test_simd_set_missing()) return 77; /* ctest's *_simd runs on a CPU without the set */
  Suite *s = suite_create("batch");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, every_request_decodes_as_it_would_alone, 0, 4);
  tcase_add_test(tc, a_request_does_not_depend_on_its_neighbours);
  tcase_add_test(tc, requests_can_be_polled_cancelled_and_released);
  tcase_add_test(tc, each_request_stops_at_its_own_condition);
  tcase_add_loop_test(tc, a_bad_token_fails_its_request_alone, 0, 3);
  tcase_add_test(tc, a_slot_holds_at_most_its_context);
  tcase_add_test(tc, joining_and_leaving_recaptures_nothing_and_steps_allocate_nothing);
  tcase_add_test(tc, slot_memory_follows_its_tokens);
  tcase_add_test(tc, a_shared_system_prompt_is_held_once_and_changes_no_token);
  tcase_add_test(tc, a_failed_share_loses_nothing);
  tcase_add_test(tc, followers_wait_for_the_leaders_chunks);
  tcase_add_test(tc, bad_arguments_are_refused_with_the_reason);
  suite_add_tcase(s, tc);
  return test_run(s);
}
