/* test_kv.c: the decoder's KV caches on virtual backing: the whole context
 * reserved and committed as tokens arrive (the governor and the kernel's page
 * tables are the witnesses), memory given back on truncation and reset,
 * conversations that reuse what the caches hold, and forks that share a
 * prefix's memory. */
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[64];
static void setup(void) { test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32); }
static void teardown(void) { test_model_dir_remove(g_dir); }

static ortep_decoder *open_kv(ortep_governor *g, size_t max_seq) {
  ortep_decoder *d;
  ck_assert_ok(
      ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = max_seq, .governor = g}, &d));
  return d;
}

static uint64_t host_bytes(ortep_governor *g) {
  ortep_mem_stats s;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &s);
  return s.current_bytes;
}

/* The tokens run through the model so far: every graph's steps times its
 * tokens per step (the prefill chunks and the decode step). */
static uint64_t tokens_run(ortep_decoder *d) {
  uint64_t n = 0;
  ortep_session *s = ortep_decoder_session(d);
  for (size_t g = 0; ortep_decoder_graph_tokens(d, g); g++) {
    ortep_session_stats st;
    ck_assert_ok(ortep_session_get_graph_stats(s, g, &st));
    n += st.steps * ortep_decoder_graph_tokens(d, g);
  }
  return n;
}

/* The two decoders' last logits agree within tol x (1 + |b|). */
static void same_logits(ortep_decoder *a, ortep_decoder *b, float tol) {
  float la[512], lb[512];
  size_t v = ortep_decoder_vocab_size(a);
  ck_assert_uint_le(v, 512);
  ck_assert_ok(ortep_decoder_logits(a, la, v));
  ck_assert_ok(ortep_decoder_logits(b, lb, v));
  for (size_t i = 0; i < v; i++)
    ck_assert_msg(fabsf(la[i] - lb[i]) <= tol * (1.0f + fabsf(lb[i])), "logit %zu: %g vs %g", i, (double)la[i],
                  (double)lb[i]);
}

static int32_t *ramp(size_t n, int32_t seed) {
  int32_t *ids = malloc(n * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((seed + (int32_t)i * 37) % 500 + 3);
  return ids;
}

START_TEST(the_whole_context_is_reserved_and_memory_follows_the_tokens) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_decoder *d = open_kv(g, 0);
  ortep_model_config cfg;
  ck_assert_ok(ortep_model_config_read(g_dir, &cfg));
  const ortep_model_config *c = &cfg;
  ck_assert_uint_eq(ortep_decoder_max_seq_len(d), (size_t)c->max_position_embeddings); /* the default */
  ortep_kv_stats k;
  ortep_decoder_kv_stats(d, &k);
  size_t row = (size_t)c->num_key_value_heads * (size_t)c->head_dim * sizeof(float),
         caches = 2 * (size_t)c->num_hidden_layers;
  ck_assert_uint_eq(k.capacity, (size_t)c->max_position_embeddings);
  ck_assert_uint_eq(k.reserved_bytes, caches * row * k.capacity);
  ck_assert_uint_eq(k.committed_bytes, 0);
  uint64_t before = host_bytes(g);
  /* 40 positions: each cache commits the pages holding them, no more */
  int32_t *ids = ramp(40, 1), next;
  ck_assert_ok(ortep_decoder_prefill(d, ids, 40, &next));
  size_t page = (size_t)sysconf(_SC_PAGESIZE), per = (40 * row + page - 1) / page * page;
  ortep_decoder_kv_stats(d, &k);
  ck_assert_uint_eq(k.positions, 40);
  ck_assert_uint_eq(k.committed_bytes, caches * per);
  ck_assert_uint_eq(host_bytes(g) - before, caches * per); /* charged to the governor as committed */
  /* steps commit only when they cross a page: count the boundaries */
  uint64_t commits = k.commits;
  size_t steps = 3 * page / row;
  ck_assert_uint_lt(40 + steps + 1, k.capacity);
  size_t generated;
  ck_assert_ok(ortep_decoder_generate(d, steps + 1, NULL, NULL, &generated));
  ortep_decoder_kv_stats(d, &k);
  size_t held = ortep_decoder_position(d), pages_then = per / page, pages_now = (held * row + page - 1) / page;
  ck_assert_uint_eq(k.commits - commits, caches * (pages_now - pages_then));
  ck_assert_uint_eq(k.committed_bytes, caches * pages_now * page);
  /* truncation gives back the pages wholly past what is kept */
  ck_assert_ok(ortep_decoder_truncate(d, 10));
  ortep_decoder_kv_stats(d, &k);
  ck_assert_uint_eq(k.committed_bytes, caches * ((10 * row + page - 1) / page * page));
  ck_assert_uint_eq(ortep_decoder_position(d), 10);
  ck_assert_status(ortep_decoder_truncate(d, 11), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("the caches hold 10");
  ck_assert_status(ortep_decoder_generate(d, 1, NULL, NULL, NULL), ORTEP_E_STATE); /* nothing pending */
  ck_assert_ok(ortep_decoder_reset(d));
  ortep_decoder_kv_stats(d, &k);
  ck_assert_uint_eq(k.committed_bytes, 0);
  ck_assert_uint_eq(host_bytes(g), before);
  free(ids);
  ortep_decoder_close(d);
  ck_assert_uint_eq(host_bytes(g), 0);
  ortep_governor_destroy(g);
}
END_TEST

/* A truncated decoder continues exactly like one that never held the rest. */
START_TEST(truncation_continues_like_a_fresh_prefill) {
  ortep_decoder *a = open_kv(NULL, 256), *b = open_kv(NULL, 256);
  int32_t *ids = ramp(70, 5), na, nb;
  ck_assert_ok(ortep_decoder_prefill(a, ids, 70, &na));
  ck_assert_ok(ortep_decoder_truncate(a, 33));
  int32_t held[70];
  ck_assert_uint_eq(ortep_decoder_tokens(a, held, 70), 33);
  ck_assert_mem_eq(held, ids, 33 * sizeof *ids);
  int32_t tail[] = {7, 8, 9};
  ck_assert_ok(ortep_decoder_prefill(a, tail, 3, &na));
  int32_t *both = malloc(36 * sizeof *both);
  memcpy(both, ids, 33 * sizeof *ids), memcpy(both + 33, tail, sizeof tail);
  ck_assert_ok(ortep_decoder_prefill(b, both, 36, &nb));
  ck_assert_int_eq(na, nb);
  same_logits(a, b, 1e-4f);
  free(ids), free(both);
  ortep_decoder_close(a), ortep_decoder_close(b);
}
END_TEST

static bool keep(int32_t t, size_t i, void *user) {
  int32_t *out = user;
  out[i] = t;
  return true;
}

/* Three turns of a chat, each prefilled as the whole conversation so far,
 * equal one prefill of the whole text; each turn ran only its own tokens. */
START_TEST(a_conversation_runs_only_each_turns_new_tokens) {
  ortep_decoder *d = open_kv(NULL, 0), *ref = open_kv(NULL, 0);
  int32_t conv[400];
  size_t n = 0;
  int32_t *turn[3] = {ramp(60, 1), ramp(25, 2), ramp(9, 3)};
  size_t len[3] = {60, 25, 9};
  int32_t next = 0;
  for (int t = 0; t < 3; t++) {
    memcpy(conv + n, turn[t], len[t] * sizeof *conv);
    n += len[t];
    uint64_t before = tokens_run(d);
    size_t reused = 99;
    ck_assert_ok(ortep_decoder_prefill_conversation(d, conv, n, &next, &reused));
    uint64_t ran = tokens_run(d) - before;
    /* the turn's prompt, plus the last reply token (emitted, not yet run) */
    ck_assert_uint_eq(reused, t == 0 ? 0 : n - len[t]);
    ck_assert_uint_eq(ran, t == 0 ? len[0] : len[t] + 1);
    int32_t reply[8];
    size_t got;
    ck_assert_ok(ortep_decoder_generate(d, 8, keep, reply, &got));
    ck_assert_uint_eq(got, 8);
    memcpy(conv + n, reply, sizeof reply);
    n += 8;
  }
  /* the same conversation in one prefill */
  int32_t whole_next;
  ck_assert_ok(ortep_decoder_prefill(ref, conv, n, &whole_next));
  size_t reused;
  ck_assert_ok(ortep_decoder_prefill_conversation(d, conv, n, &next, &reused));
  ck_assert_uint_eq(reused, n - 1); /* all held but the last reply token, which runs */
  ck_assert_int_eq(next, whole_next);
  same_logits(d, ref, 1e-4f);
  int32_t held[400];
  ck_assert_uint_eq(ortep_decoder_tokens(d, held, 400), n);
  ck_assert_mem_eq(held, conv, n * sizeof *conv);
  /* an edit in the middle keeps what comes before it */
  conv[30] = conv[30] == 4 ? 5 : 4;
  uint64_t before = tokens_run(d);
  ck_assert_ok(ortep_decoder_prefill_conversation(d, conv, n, &next, &reused));
  ck_assert_uint_eq(reused, 30);
  ck_assert_uint_eq(tokens_run(d) - before, n - 30);
  ck_assert_status(ortep_decoder_prefill_conversation(d, conv, 0, &next, NULL), ORTEP_E_INVALID_ARGUMENT);
  for (int t = 0; t < 3; t++) free(turn[t]);
  ortep_decoder_close(d), ortep_decoder_close(ref);
}
END_TEST

/* The budget bounds committed memory: a decoder whose whole context would
 * not fit opens, and fails cleanly, naming the KV caches, when the tokens it
 * holds outgrow the budget. */
START_TEST(a_budget_bounds_the_tokens_held_not_the_context) {
  test_model_set_context(g_dir, 65536); /* its caches then reserve more than the rest of the decoder takes */
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_decoder *d = open_kv(g, 0);
  ortep_kv_stats k;
  ortep_decoder_kv_stats(d, &k);
  /* what is in use now plus 256 KiB: far less than the whole context's caches */
  uint64_t budget = host_bytes(g) + (256 << 10);
  ck_assert_ok(ortep_governor_set_budget(g, ORTEP_TIER_HOST, budget));
  ck_assert_uint_gt(k.reserved_bytes, budget);
  int32_t *ids = ramp(1024, 9), next; /* 1024 positions: 512 KiB of caches */
  ck_assert_status(ortep_decoder_prefill(d, ids, 1024, &next), ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("the KV caches need memory for");
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_uint_eq(host_bytes(g), budget - (256 << 10));  /* the reset gave it back */
  ck_assert_ok(ortep_decoder_prefill(d, ids, 256, &next)); /* what fits works */
  ck_assert_ok(ortep_decoder_generate(d, 8, NULL, NULL, NULL));
  free(ids);
  ortep_decoder_close(d);
  ck_assert_uint_eq(host_bytes(g), 0);
  ortep_governor_destroy(g);
}
END_TEST

static void greedy(ortep_decoder *d, size_t n, int32_t *out) {
  size_t got;
  ck_assert_ok(ortep_decoder_generate(d, n, keep, out, &got));
  ck_assert_uint_eq(got, n);
}

/* A fork decodes exactly as an independent decoder given the same calls,
 * and forking changes nothing for the parent. */
START_TEST(a_fork_decodes_like_an_independent_decoder) {
  ortep_decoder *p = open_kv(NULL, 0), *ref = open_kv(NULL, 0), *f, *ff;
  int32_t *ids = ramp(150, 4), next, want[24], got[24];
  ck_assert_ok(ortep_decoder_prefill(p, ids, 150, &next));
  ck_assert_ok(ortep_decoder_fork(p, &f));
  ck_assert_uint_eq(ortep_decoder_position(f), 150);
  int32_t held[150];
  ck_assert_uint_eq(ortep_decoder_tokens(f, held, 150), 150);
  ck_assert_mem_eq(held, ids, sizeof held);
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 150, &next));
  greedy(ref, 24, want);
  greedy(f, 24, got);
  ck_assert_mem_eq(got, want, sizeof got);
  greedy(p, 24, got); /* the parent continues as if nothing happened */
  ck_assert_mem_eq(got, want, sizeof got);
  /* a sampled draw of the pending token and the steps after it, too */
  ck_assert_ok(ortep_decoder_reset(ref));
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 150, &next));
  ck_assert_ok(ortep_decoder_fork(ref, &ff));
  ortep_sampling smp = {.temperature = 0.9f, .top_k = 20, .repetition_penalty = 1.3f, .seed = 7};
  ortep_generate_options go = {.max_tokens = 16, .ignore_eos = true, .sampling = &smp};
  ortep_generate_result r1, r2;
  int32_t s1[16], s2[16];
  ck_assert_ok(ortep_decoder_generate_ex(ref, &go, keep, s1, &r1));
  ck_assert_ok(ortep_decoder_generate_ex(ff, &go, keep, s2, &r2));
  ck_assert_uint_eq(r1.generated, 16);
  ck_assert_mem_eq(s1, s2, sizeof s1);
  /* close the parent first: the fork keeps working on the shared weights */
  ortep_decoder_close(ref);
  ck_assert_ok(ortep_decoder_generate_ex(ff, &go, keep, s2, &r2));
  ortep_decoder_close(ff);
  ortep_decoder_close(p);
  greedy(f, 4, got);
  ortep_decoder_close(f);
  free(ids);
}
END_TEST

/* N forks of a prefix hold its whole pages once: exactly what the books say. */
START_TEST(forks_hold_a_shared_prefix_once) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_decoder *p = open_kv(g, 0), *f[8];
  int32_t *ids = ramp(300, 2), next;
  ck_assert_ok(ortep_decoder_prefill(p, ids, 300, &next));
  ortep_kv_stats k;
  ortep_decoder_kv_stats(p, &k);
  size_t caches = 4, row = k.reserved_bytes / caches / k.capacity, page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t whole = 300 * row / page * page, before = host_bytes(g), solo = k.committed_bytes;
  for (int i = 0; i < 8; i++) ck_assert_ok(ortep_decoder_fork(p, &f[i]));
  ortep_decoder_kv_stats(p, &k);
  ck_assert_uint_eq(k.shared_bytes, caches * whole); /* the parent's whole pages are the shared copy now */
  ck_assert_uint_eq(k.committed_bytes, solo - caches * whole);
  uint64_t kv_total = k.committed_bytes + caches * whole;
  for (int i = 0; i < 8; i++) {
    ortep_kv_stats c;
    ortep_decoder_kv_stats(f[i], &c);
    ck_assert_uint_eq(c.shared_bytes, caches * whole);
    ck_assert_uint_eq(c.committed_bytes, caches * ((300 * row + page - 1) / page * page - whole)); /* the last page */
    kv_total += c.committed_bytes;
    int32_t t[2] = {(int32_t)i + 3, 9};
    ck_assert_ok(ortep_decoder_prefill(f[i], t, 2, &next)); /* each its own suffix */
  }
  /* the governor saw the shared pages once (the forks' sessions and caches
   * besides): committed KV across all nine is one prefix plus their pages */
  ck_assert_uint_lt(kv_total, 2 * solo);
  ck_assert_uint_gt(host_bytes(g), before);
  /* truncating the parent into the shared prefix unshares its pages; the
   * forks keep theirs and still decode like the parent did */
  int32_t want[8], got[8];
  ortep_decoder *ref = open_kv(g, 0);
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 300, &next));
  int32_t t0[2] = {3, 9};
  ck_assert_ok(ortep_decoder_prefill(ref, t0, 2, &next));
  greedy(ref, 8, want);
  ck_assert_ok(ortep_decoder_truncate(p, 100));
  ortep_decoder_kv_stats(p, &k);
  ck_assert_uint_eq(k.shared_bytes, caches * (100 * row / page * page));
  int32_t other[3] = {11, 12, 13};
  ck_assert_ok(ortep_decoder_prefill(p, other, 3, &next));
  greedy(p, 8, got);
  greedy(f[0], 8, got);
  ck_assert_mem_eq(got, want, sizeof got);
  for (int i = 0; i < 8; i++) ortep_decoder_close(f[i]);
  ortep_decoder_close(p), ortep_decoder_close(ref);
  ck_assert_uint_eq(host_bytes(g), 0);
  ortep_governor_destroy(g);
  free(ids);
}
END_TEST

/* The fork's weights are its parent's: the prepared (blocked) projections
 * are not prepared again. */
START_TEST(a_fork_holds_no_second_copy_of_the_weights) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_BF16);
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_decoder *p, *f, *q;
  ortep_decoder_options o = {.ep = "cpu", .governor = g};
  ck_assert_ok(ortep_decoder_open(dir, &o, &p));
  ck_assert_uint_gt(ortep_decoder_blocked_weights(p), 0);
  uint64_t a = host_bytes(g);
  ck_assert_ok(ortep_decoder_fork(p, &f));
  uint64_t b = host_bytes(g);
  ck_assert_ok(ortep_decoder_open(dir, &o, &q));
  uint64_t c = host_bytes(g);
  ck_assert_uint_eq(ortep_decoder_blocked_weights(f), ortep_decoder_blocked_weights(p));
  ck_assert_uint_lt(b - a, c - b); /* a second copy of the blocked weights would make them equal */
  /* the parent closed first: the fork still decodes from the blocked weights it shares */
  int32_t ids[5] = {3, 1, 4, 1, 5}, next, x[8], y[8];
  ck_assert_ok(ortep_decoder_prefill(f, ids, 5, &next));
  ck_assert_ok(ortep_decoder_prefill(q, ids, 5, &next));
  ortep_decoder_close(p);
  greedy(f, 8, x);
  greedy(q, 8, y);
  ck_assert_mem_eq(x, y, sizeof x);
  ortep_decoder_close(f), ortep_decoder_close(q);
  ck_assert_uint_eq(host_bytes(g), 0);
  ortep_governor_destroy(g);
  test_model_dir_remove(dir);
}
END_TEST

typedef struct gen_job {
  ortep_decoder *d;
  int32_t out[32];
  ortep_status st;
} gen_job;
static void *gen_thread(void *arg) {
  gen_job *j = arg;
  size_t got = 0;
  j->st = ortep_decoder_generate(j->d, 32, keep, j->out, &got);
  if (got != 32 && j->st == ORTEP_OK) j->st = ORTEP_E_INTERNAL;
  return NULL;
}

/* A parent and its fork decode on two threads at once, over shared weights
 * and shared prefix pages (ThreadSanitizer runs this case), each as an
 * independent decoder would. */
START_TEST(a_parent_and_its_fork_decode_on_two_threads) {
  ortep_decoder *p = open_kv(NULL, 0), *ref = open_kv(NULL, 0), *f;
  int32_t *ids = ramp(90, 6), next, want[32];
  ck_assert_ok(ortep_decoder_prefill(p, ids, 90, &next));
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 90, &next));
  greedy(ref, 32, want);
  ck_assert_ok(ortep_decoder_fork(p, &f));
  gen_job a = {.d = p}, b = {.d = f};
  pthread_t ta, tb;
  ck_assert_int_eq(pthread_create(&ta, NULL, gen_thread, &a), 0);
  ck_assert_int_eq(pthread_create(&tb, NULL, gen_thread, &b), 0);
  pthread_join(ta, NULL), pthread_join(tb, NULL);
  ck_assert_ok(a.st);
  ck_assert_ok(b.st);
  ck_assert_mem_eq(a.out, want, sizeof want);
  ck_assert_mem_eq(b.out, want, sizeof want);
  ortep_decoder_close(p), ortep_decoder_close(f), ortep_decoder_close(ref);
  free(ids);
}
END_TEST

static ortep_decoder *open_kv_dtype(const char *dt, size_t max_seq) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  if (dt) ck_assert_ok(ortep_config_set(c, "ortep.kv_dtype", dt));
  ortep_decoder *d;
  ck_assert_ok(
      ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = max_seq, .config = c}, &d));
  ortep_config_destroy(c);
  return d;
}

/* 16-bit caches: half the bytes per position; the logits of a 100-token
 * prompt and the steps after it stay within 5e-3 (f16, 11 bits of mantissa;
 * 3.5e-3 measured) and 3e-2 (bf16, 8 bits; 1.9e-2 measured with f32
 * products, 2.5e-2 with the bf16 products a bf16 cache's chunk attention
 * takes where the CPU has them) of the f32 caches' on the tiny preset, the
 * greedy tokens the same; forks share them too. */
START_TEST(sixteen_bit_caches_halve_the_bytes_and_keep_the_tokens) {
  const char *dts[] = {"f16", "bf16"};
  ortep_decoder *ref = open_kv_dtype(NULL, 0);
  int32_t *ids = ramp(100, 8), next, want[16];
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 100, &next));
  size_t v = ortep_decoder_vocab_size(ref);
  float *l32 = malloc(v * sizeof *l32), *l16 = malloc(v * sizeof *l16);
  ck_assert_ok(ortep_decoder_logits(ref, l32, v));
  greedy(ref, 16, want);
  ortep_kv_stats k32;
  ortep_decoder_kv_stats(ref, &k32);
  for (int i = 0; i < 2; i++) {
    ortep_decoder *d = open_kv_dtype(dts[i], 0), *f;
    ck_assert_ok(ortep_decoder_prefill(d, ids, 100, &next));
    ck_assert_ok(ortep_decoder_logits(d, l16, v));
    float worst = 0;
    for (size_t j = 0; j < v; j++) worst = fmaxf(worst, fabsf(l16[j] - l32[j]) / (1.0f + fabsf(l32[j])));
    ck_assert_msg(worst <= (i ? 3e-2f : 5e-3f), "%s caches: logits off by %g", dts[i], (double)worst);
    ortep_kv_stats k;
    ortep_decoder_kv_stats(d, &k);
    ck_assert_uint_eq(k.reserved_bytes * 2, k32.reserved_bytes);
    ck_assert_ok(ortep_decoder_fork(d, &f));
    int32_t got[16], forked[16];
    greedy(d, 16, got);
    greedy(f, 16, forked);
    ck_assert_mem_eq(got, want, sizeof got);
    ck_assert_mem_eq(forked, want, sizeof got);
    ortep_decoder_close(f), ortep_decoder_close(d);
  }
  ortep_decoder *bad;
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.kv_dtype", "f8"));
  ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &bad),
                   ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("ortep.kv_dtype = 'f8': use f32 (the default), f16 or bf16");
  ortep_config_destroy(c);
  free(l32), free(l16), free(ids);
  ortep_decoder_close(ref);
}
END_TEST

/* A bf16 model's prefill chunks attend with bf16 products whatever the
 * caches' dtype (its attention nodes carry bf16_products=1; the CPU EP takes
 * them where it has AVX512-BF16 and cpu.products allows): K and V rounded as
 * a bf16 cache holds them, so after a prompt of several chunks the logits of
 * f32 and bf16 caches are bitwise equal. With cpu.products = f32, and for an
 * f32 model, the f32 caches attend in f32 and the two differ. */
static void prompt_logits(const char *dir, const char *kv, const char *products, float *l, size_t v) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.kv_dtype", kv));
  if (products) ck_assert_ok(ortep_config_set(c, "cpu.products", products));
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .config = c}, &d));
  ortep_config_destroy(c);
  int32_t *ids = ramp(100, 5), next;
  ck_assert_ok(ortep_decoder_prefill(d, ids, 100, &next));
  ck_assert_uint_gt(ortep_decoder_graph_tokens(d, 1), 1); /* the prompt ran in chunks */
  ck_assert_ok(ortep_decoder_logits(d, l, v));
  free(ids);
  ortep_decoder_close(d);
}

START_TEST(a_bf16_models_chunks_attend_in_bf16_whatever_the_caches) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_BF16);
  ortep_ep *probe;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &probe));
  ck_assert_ok(ortep_ep_initialize(probe, NULL));
  bool bf16 = ortep_cpu_ep_bf16_products(probe);
  ortep_ep_destroy(probe);
  float a[512], b[512];
  size_t v = 512;
  if (bf16) {
    prompt_logits(dir, "f32", NULL, a, v);
    prompt_logits(dir, "bf16", NULL, b, v);
    ck_assert_msg(!memcmp(a, b, sizeof a), "f32 and bf16 caches attend differently in a bf16 model's chunks");
  }
  prompt_logits(dir, "f32", "f32", a, v);
  prompt_logits(dir, "bf16", "f32", b, v);
  ck_assert_msg(memcmp(a, b, sizeof a), "with cpu.products = f32 the f32 caches attended in bf16");
  prompt_logits(g_dir, "f32", NULL, a, v); /* the f32 model: no bf16_products on its nodes */
  prompt_logits(g_dir, "bf16", NULL, b, v);
  ck_assert_msg(memcmp(a, b, sizeof a), "an f32 model's f32 caches attended in bf16");
  test_model_dir_remove(dir);
}
END_TEST

/* A caller's host allocator with virtual backing and no shared mappings: the
 * caches live on it, and a fork copies the prefix instead of sharing it. */
typedef struct vb_only {
  ortep_allocator base;
  ortep_allocator *inner;
  ortep_virtual_backing vb;
} vb_only;
#define VB_INNER(s) (((vb_only *)(s))->inner)
static ortep_status vo_alloc(ortep_allocator *s, size_t b, size_t a, void **o) {
  return ortep_allocator_allocate(VB_INNER(s), b, a, o);
}
static void vo_free(ortep_allocator *s, void *p, size_t b, size_t a) {
  ortep_allocator_deallocate(VB_INNER(s), p, b, a);
}
static ortep_release_outcome vo_release(ortep_allocator *s, void *p, size_t b, size_t a) {
  return ortep_allocator_release(VB_INNER(s), p, b, a);
}
static ortep_device_key vo_device(const ortep_allocator *s) { return ortep_device_key_host(); }
static ortep_status vo_reserve(ortep_allocator *s, size_t b, size_t a, void **o) {
  return ortep_allocator_reserve(VB_INNER(s), b, a, o);
}
static ortep_status vo_commit(ortep_allocator *s, const ortep_commit_range *r, uint64_t *n) {
  return ortep_allocator_commit(VB_INNER(s), r, n);
}
static ortep_status vo_decommit(ortep_allocator *s, const ortep_commit_range *r, uint64_t *n) {
  return ortep_allocator_decommit(VB_INNER(s), r, n);
}
static const ortep_virtual_backing *vo_vb(ortep_allocator *s) { return &((vb_only *)s)->vb; }
static const ortep_allocator_vtable vo_vt = {.name = "vb_only",
                                             .allocate = vo_alloc,
                                             .deallocate = vo_free,
                                             .device = vo_device,
                                             .release = vo_release,
                                             .virtual_backing = vo_vb};

START_TEST(a_fork_over_an_allocator_without_shared_mappings_copies_the_prefix) {
  vb_only a = {{&vo_vt}, NULL, {0}};
  ck_assert_ok(ortep_host_virtual_allocator_create(NULL, &a.inner));
  a.vb = (ortep_virtual_backing){ortep_allocator_granularity(a.inner), vo_reserve, vo_commit, vo_decommit};
  ortep_decoder *d, *f, *ref = open_kv(NULL, 0);
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .host_allocator = &a.base}, &d));
  int32_t *ids = ramp(100, 12), next, want[8], got[8];
  ck_assert_ok(ortep_decoder_prefill(d, ids, 100, &next));
  ck_assert_ok(ortep_decoder_prefill(ref, ids, 100, &next));
  ck_assert_ok(ortep_decoder_fork(d, &f));
  ortep_kv_stats k;
  ortep_decoder_kv_stats(f, &k);
  ck_assert_uint_eq(k.shared_bytes, 0); /* copied, not shared */
  ck_assert_uint_gt(k.committed_bytes, 0);
  greedy(ref, 8, want);
  greedy(f, 8, got);
  ck_assert_mem_eq(got, want, sizeof got);
  ortep_decoder_close(f), ortep_decoder_close(d), ortep_decoder_close(ref);
  ortep_allocator_destroy(a.inner);
  free(ids);
}
END_TEST

/* The OOM loop over the caches' whole life: the CPU EP and the caches on a
 * fault-injecting host virtual allocator, the Nth memory-taking call (an
 * allocation, a reservation, a commit, a shared prefix, its mapping) failing
 * in open, prefill, fork and generate until the sequence succeeds; every
 * failure is a clean error and everything is given back. */
START_TEST(every_injected_failure_in_the_caches_is_clean) {
  bool done = false;
  uint64_t nth;
  for (nth = 1; !done && nth < 400; nth++) {
    ortep_governor *g;
    ck_assert_ok(ortep_governor_create(&g));
    ortep_allocator *vm, *fa;
    ck_assert_ok(ortep_host_virtual_allocator_create(g, &vm));
    ck_assert_ok(ortep_fault_allocator_create(vm, &fa));
    ortep_fault_allocator_arm(fa, nth, false);
    ortep_decoder *d = NULL, *f = NULL;
    int32_t ids[40], next;
    for (int i = 0; i < 40; i++) ids[i] = (i * 29 + 3) % 500;
    ortep_status st = ortep_decoder_open(
        g_dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 128, .governor = g, .host_allocator = fa}, &d);
    if (st == ORTEP_OK) st = ortep_decoder_prefill(d, ids, 40, &next);
    if (st == ORTEP_OK) st = ortep_decoder_fork(d, &f);
    if (st == ORTEP_OK) st = ortep_decoder_prefill(f, ids, 30, &next);
    if (st == ORTEP_OK) st = ortep_decoder_generate(d, 4, NULL, NULL, NULL);
    done = st == ORTEP_OK;
    if (!done)
      ck_assert_msg(st == ORTEP_E_OUT_OF_MEMORY, "failure %llu: %s", (unsigned long long)nth, ortep_last_error());
    ortep_decoder_close(f);
    ortep_decoder_close(d);
    ck_assert_uint_eq(host_bytes(g), 0);
    ortep_allocator_destroy(fa);
    ortep_allocator_destroy(vm);
    ortep_governor_destroy(g);
  }
  ck_assert_msg(done, "the sequence never succeeded in %llu tries", (unsigned long long)nth);
  ck_assert_uint_gt(nth, 20); /* the calls were reached: ~55 failure points when written */
}
END_TEST

int main(void) {
  Suite *s = suite_create("kv");
  TCase *tc = tcase_create("decoder");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, the_whole_context_is_reserved_and_memory_follows_the_tokens);
  tcase_add_test(tc, truncation_continues_like_a_fresh_prefill);
  tcase_add_test(tc, a_conversation_runs_only_each_turns_new_tokens);
  tcase_add_test(tc, a_budget_bounds_the_tokens_held_not_the_context);
  tcase_add_test(tc, a_fork_decodes_like_an_independent_decoder);
  tcase_add_test(tc, forks_hold_a_shared_prefix_once);
  tcase_add_test(tc, a_fork_holds_no_second_copy_of_the_weights);
  tcase_add_test(tc, sixteen_bit_caches_halve_the_bytes_and_keep_the_tokens);
  tcase_add_test(tc, a_bf16_models_chunks_attend_in_bf16_whatever_the_caches);
  tcase_add_test(tc, every_injected_failure_in_the_caches_is_clean);
  tcase_add_test(tc, a_fork_over_an_allocator_without_shared_mappings_copies_the_prefix);
  suite_add_tcase(s, tc);
  /* its own case, so the ThreadSanitizer job can run it alone (kv_threads) */
  TCase *threads = tcase_create("threads");
  tcase_add_checked_fixture(threads, setup, teardown);
  tcase_add_test(threads, a_parent_and_its_fork_decode_on_two_threads);
  suite_add_tcase(s, threads);
  return test_run(s);
}
