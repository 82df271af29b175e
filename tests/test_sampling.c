/* test_sampling.c: the sampler through the EP contract (ortep_ep_device_sample
 * on the CPU EP) and through the decoder (ortep_decoder_generate_ex with
 * ortep_sampling): Philox4x32-10 against its published known-answer vectors;
 * the distribution against the softmax by a chi-square test (many draws from
 * a fixed seed, so the verdict is the same every run); temperature, top-k,
 * top-p, min-p and the repetition penalty honoured exactly; non-finite logits
 * caught by the error word; runs reproducible from the seed however they are
 * split into calls; bad parameters refused naming the field. */
#include <float.h>
#include <math.h>

#include "../kernels/sampling.h"
#include "testutil.h"

static ortep_ep *g_cpu;

/* Draws n tokens over logits x[v] with params p at positions 0..n-1. */
static void draw_counts(const float *x, size_t v, ortep_sample_params p, const int32_t *history, size_t n,
                        size_t *counts) {
  uint32_t pair[2];
  ortep_buffer res;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(pair, ortep_device_cpu(), sizeof pair, 4, &res));
  for (size_t i = 0; i < v; i++) counts[i] = 0;
  for (size_t i = 0; i < n; i++) {
    p.position = (uint32_t)i;
    ck_assert_ok(ortep_ep_device_sample(g_cpu, x, v, ORTEP_DTYPE_F32, &p, history, &res));
    ck_assert_uint_eq(pair[1], 0);
    ck_assert_uint_lt(pair[0], v);
    counts[pair[0]]++;
  }
}

/* Chi-square of counts against probabilities want[] (those > 0), with the
 * critical value for p = 0.001 at the degrees of freedom given. */
static void chi_square(const size_t *counts, const double *want, size_t v, size_t n, double critical,
                       const char *what) {
  double chi = 0.0;
  for (size_t i = 0; i < v; i++) {
    if (want[i] == 0.0) {
      ck_assert_msg(counts[i] == 0, "%s: token %zu (excluded) was drawn %zu times", what, i, counts[i]);
      continue;
    }
    double e = want[i] * (double)n, d = (double)counts[i] - e;
    chi += d * d / e;
  }
  ck_assert_msg(chi < critical, "%s: chi-square %.2f >= %.2f (p = 0.001)", what, chi, critical);
}

static void softmax(const float *x, size_t v, double t, double *p) {
  double mx = -INFINITY, s = 0.0;
  for (size_t i = 0; i < v; i++) mx = x[i] / t > mx ? x[i] / t : mx;
  for (size_t i = 0; i < v; i++) s += (p[i] = exp(x[i] / t - mx));
  for (size_t i = 0; i < v; i++) p[i] /= s;
}

static ortep_sample_params params(float t) {
  return (ortep_sample_params){.temperature = t, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed_lo = 42};
}

static void setup(void) { g_cpu = test_cpu_ep(); }
static void teardown(void) { ortep_ep_destroy(g_cpu); }

/* Random123's known-answer vectors for philox4x32-10. */
START_TEST(philox_matches_its_known_answers) {
  static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                     {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
  static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                      {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                      {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    ortep__philox4x32_10(ctr[i], key[i][0], key[i][1], out);
    ck_assert_mem_eq(out, want[i], sizeof out);
  }
}
END_TEST

/* Temperature 1 and 0.5: the draws follow softmax(x / T). */
START_TEST(draws_follow_the_softmax) {
  const float x[8] = {1.0f, 0.5f, -0.25f, 2.0f, 0.0f, -1.0f, 1.5f, 0.75f};
  size_t counts[8];
  double want[8];
  const float temps[2] = {1.0f, 0.5f};
  for (int t = 0; t < 2; t++) {
    draw_counts(x, 8, params(temps[t]), NULL, 40000, counts);
    softmax(x, 8, temps[t], want);
    chi_square(counts, want, 8, 40000, 24.32 /* 7 degrees of freedom */, temps[t] == 1.0f ? "T=1" : "T=0.5");
  }
}
END_TEST

/* top-k keeps the k largest (renormalised); top-p the smallest most-likely
 * set reaching the mass; min-p those at least min_p x the most likely. */
START_TEST(top_k_top_p_and_min_p_truncate_exactly) {
  /* probabilities 8/15, 4/15, 2/15, 1/15 (logits ln 8, ln 4, ln 2, 0) */
  const float x[4] = {logf(8.0f), logf(4.0f), logf(2.0f), 0.0f};
  size_t counts[4];
  double want[4];
  ortep_sample_params p = params(1.0f);
  p.top_k = 2;
  draw_counts(x, 4, p, NULL, 20000, counts);
  double k2[4] = {2.0 / 3.0, 1.0 / 3.0, 0, 0};
  chi_square(counts, k2, 4, 20000, 10.83 /* 1 dof */, "top_k=2");
  p = params(1.0f);
  p.top_p = 0.7f; /* 8/15 = 0.53 < 0.7 <= 12/15: the two most likely */
  draw_counts(x, 4, p, NULL, 20000, counts);
  chi_square(counts, k2, 4, 20000, 10.83, "top_p=0.7");
  p = params(1.0f);
  p.min_p = 0.2f; /* q = 1, 0.5, 0.25, 0.125: the first three */
  draw_counts(x, 4, p, NULL, 20000, counts);
  double m3[4] = {8.0 / 14.0, 4.0 / 14.0, 2.0 / 14.0, 0};
  chi_square(counts, m3, 4, 20000, 13.82 /* 2 dof */, "min_p=0.2");
  p = params(1.0f);
  p.top_k = 1; /* the argmax, always */
  draw_counts(x, 4, p, NULL, 1000, counts);
  ck_assert_uint_eq(counts[0], 1000);
  /* nothing truncated: all four */
  draw_counts(x, 4, params(1.0f), NULL, 30000, counts);
  softmax(x, 4, 1.0, want);
  chi_square(counts, want, 4, 30000, 16.27 /* 3 dof */, "no truncation");
}
END_TEST

/* top-p on a 2,000-token vocabulary with a few likely tokens (the sampler
 * sorts only the values that can be in the nucleus): exactly the nucleus a
 * full sort in double precision gives, with its renormalised distribution. */
START_TEST(top_p_over_a_large_vocabulary) {
  enum { V = 2000 };
  static float x[V];
  for (int i = 0; i < V; i++) x[i] = -4.0f + (float)((i * 7919) % 97) / 97.0f;
  const int likely[6] = {17, 400, 1203, 5, 1999, 777};
  for (int k = 0; k < 6; k++) x[likely[k]] = 6.0f - (float)k * 0.5f;
  double p[V], order[V];
  softmax(x, V, 1.0, p);
  memcpy(order, p, sizeof order);
  for (int i = 1; i < V; i++) /* descending insertion sort of a copy */
    for (int j = i; j > 0 && order[j] > order[j - 1]; j--) {
      double t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  double cum = 0, t = 0;
  for (int j = 0; j < V && cum < 0.8; j++) cum += order[j], t = order[j];
  double want[V], kept = 0;
  for (int i = 0; i < V; i++) kept += (want[i] = p[i] >= t ? p[i] : 0.0);
  int in_nucleus = 0;
  for (int i = 0; i < V; i++) in_nucleus += want[i] > 0, want[i] /= kept;
  ck_assert_int_ge(in_nucleus, 3);
  ck_assert_int_le(in_nucleus, 6);
  ortep_sample_params sp = params(1.0f);
  sp.top_p = 0.8f;
  static size_t counts[V];
  draw_counts(x, V, sp, NULL, 20000, counts);
  const double crit[7] = {0, 0, 10.83, 13.82, 16.27, 18.47, 20.52}; /* p = 0.001, in_nucleus - 1 dof */
  chi_square(counts, want, V, 20000, crit[in_nucleus], "top_p=0.8 over 2000 tokens");
}
END_TEST

/* The penalty divides a positive logit of a token in the history (once,
 * however often it appears) and multiplies a negative one. */
START_TEST(repetition_penalty_applies_once_per_token) {
  const float x[3] = {1.0f, 1.0f, -0.5f};
  const int32_t history[4] = {0, 0, 2, 0};
  ortep_sample_params p = params(1.0f);
  p.repetition_penalty = 3.0f;
  p.n_history = 4;
  size_t counts[3];
  draw_counts(x, 3, p, history, 30000, counts);
  const float y[3] = {1.0f / 3.0f, 1.0f, -1.5f};
  double want[3];
  softmax(y, 3, 1.0, want);
  chi_square(counts, want, 3, 30000, 13.82, "repetition_penalty=3");
}
END_TEST

START_TEST(seeds_reproduce_and_differ) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)((i * 37) % 11) * 0.3f;
  size_t a[64], b[64], c[64];
  ortep_sample_params p = params(0.8f);
  draw_counts(x, 64, p, NULL, 500, a);
  draw_counts(x, 64, p, NULL, 500, b);
  ck_assert_mem_eq(a, b, sizeof a);
  p.seed_hi = 1;
  draw_counts(x, 64, p, NULL, 500, c);
  ck_assert_msg(memcmp(a, c, sizeof a) != 0, "another seed drew the same 500 tokens");
}
END_TEST

START_TEST(non_finite_logits_and_bad_parameters) {
  float x[4] = {0.0f, 1.0f, NAN, 2.0f};
  uint32_t pair[2] = {7, 7};
  ortep_buffer res;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(pair, ortep_device_cpu(), sizeof pair, 4, &res));
  ortep_sample_params p = params(1.0f);
  ck_assert_ok(ortep_ep_device_sample(g_cpu, x, 4, ORTEP_DTYPE_F32, &p, NULL, &res));
  ck_assert_uint_eq(pair[0], 0);
  ck_assert_uint_eq(pair[1] & ORTEP_ERROR_ARGMAX_NOT_FINITE, ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ortep_ep_reset_error_word(g_cpu);
  x[2] = 0.0f;
  p.temperature = 0.0f;
  ck_assert_status(ortep_ep_device_sample(g_cpu, x, 4, ORTEP_DTYPE_F32, &p, NULL, &res), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("temperature");
  ck_assert_status(ortep_ep_device_sample(g_cpu, x, 0, ORTEP_DTYPE_F32, &p, NULL, &res), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_ep_device_sample(g_cpu, x, 4, ORTEP_DTYPE_I32, &p, NULL, &res), ORTEP_E_NOT_SUPPORTED);
}
END_TEST

/* Parameters at the edges of their range still give a distribution (steps
 * 2-4 in double: kernels/sampling.h): a temperature of FLT_MIN or a denormal
 * is the argmax, its exact ties drawn evenly; a penalty of 1e-40 lifts a
 * repeated positive logit above all others; 1e40 sinks it. Once each of
 * these overflowed to infinity and drew token 0. */
START_TEST(extreme_parameters_give_a_valid_distribution) {
  const float x[4] = {0.5f, 3.0f, -2.0f, 2.9f}, ties[4] = {1.0f, 5.0f, 5.0f, 0.0f};
  const float temps[] = {FLT_MIN, 1e-40f, FLT_TRUE_MIN, 1e-30f};
  size_t counts[4];
  for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
    draw_counts(x, 4, params(temps[t]), NULL, 200, counts);
    ck_assert_msg(counts[1] == 200, "temperature %g: the argmax was drawn %zu of 200 times", (double)temps[t],
                  counts[1]);
    draw_counts(ties, 4, params(temps[t]), NULL, 400, counts);
    ck_assert_msg(counts[0] == 0 && counts[3] == 0 && counts[1] > 150 && counts[2] > 150,
                  "temperature %g over a tie: %zu and %zu", (double)temps[t], counts[1], counts[2]);
  }
  ortep_sample_params p = params(1.0f);
  p.repetition_penalty = 1e-40f, p.n_history = 1;
  const int32_t hist3[] = {3}, hist1[] = {1};
  draw_counts(x, 4, p, hist3, 100, counts);
  ck_assert_uint_eq(counts[3], 100);
  p.repetition_penalty = 1e38f;
  p.temperature = 1e-30f;
  draw_counts(x, 4, p, hist1, 100, counts); /* 3.0 / 1e38: the next largest, 2.9, is the argmax */
  ck_assert_uint_eq(counts[3], 100);
  /* infinite parameters are out of range, not a distribution */
  uint32_t pair[2];
  ortep_buffer res;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(pair, ortep_device_cpu(), sizeof pair, 4, &res));
  p = params(INFINITY);
  ck_assert_status(ortep_ep_device_sample(g_cpu, x, 4, ORTEP_DTYPE_F32, &p, NULL, &res), ORTEP_E_INVALID_ARGUMENT);
  p = params(1.0f), p.repetition_penalty = INFINITY;
  ck_assert_status(ortep_ep_device_sample(g_cpu, x, 4, ORTEP_DTYPE_F32, &p, NULL, &res), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("repetition_penalty");
}
END_TEST

/* --- through the decoder ------------------------------------------------------ */
static char g_dir[64];
static const int32_t prompt[] = {5, 17, 2, 99};

static bool collect(int32_t t, size_t i, void *user) {
  ((int32_t *)user)[i] = t;
  return true;
}

static void run(const ortep_sampling *s, size_t split, int32_t *out, size_t n) {
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64}, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ortep_generate_result r;
  size_t done = 0;
  for (size_t part = 0; done < n; part++) {
    size_t want = split && n - done > split ? split : n - done;
    ortep_generate_options o = {.max_tokens = want, .ignore_eos = true, .sampling = s};
    ck_assert_ok(ortep_decoder_generate_ex(d, &o, collect, out + done, &r));
    ck_assert_uint_eq(r.generated, want);
    done += want;
  }
  ortep_decoder_close(d);
}

START_TEST(decoder_samples_reproducibly_from_the_seed) {
  test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32);
  int32_t a[24], b[24], c[24], g[24], k1[24];
  ortep_sampling s = {.temperature = 1.0f, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 1234};
  run(&s, 0, a, 24);
  run(&s, 7, b, 24); /* 7 + 7 + 7 + 3: the same tokens */
  ck_assert_mem_eq(a, b, sizeof a);
  s.seed = 99;
  run(&s, 0, c, 24);
  ck_assert_msg(memcmp(a, c, sizeof a) != 0, "seeds 1234 and 99 drew the same 24 tokens");
  run(NULL, 0, g, 24); /* greedy */
  ortep_sampling k = {.temperature = 1.0f, .top_k = 1, .seed = 5};
  run(&k, 0, k1, 24); /* top-k 1: the argmax every time */
  ck_assert_mem_eq(g, k1, sizeof g);
  ortep_sampling t0 = {.temperature = 0.0f, .top_k = 40, .seed = 5};
  run(&t0, 5, k1, 24); /* temperature 0 is the greedy path */
  ck_assert_mem_eq(g, k1, sizeof g);
  test_model_dir_remove(g_dir);
}
END_TEST

/* Through generate_ex: a temperature of FLT_MIN draws the greedy tokens
 * (it drew id 0 every time), and a penalty of 1e-40 draws valid ids with a
 * clean error word. */
START_TEST(decoder_tiny_temperature_is_greedy) {
  test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32);
  int32_t g[16], t[16];
  run(NULL, 0, g, 16);
  ortep_sampling tiny = {.temperature = FLT_MIN, .seed = 3};
  run(&tiny, 0, t, 16);
  ck_assert_mem_eq(g, t, sizeof g);
  ortep_sampling pen = {.temperature = 1.0f, .repetition_penalty = 1e-40f, .seed = 3};
  run(&pen, 0, t, 16); /* run() asserts every call succeeds */
  for (int i = 0; i < 16; i++) ck_assert_int_lt(t[i], 512);
  test_model_dir_remove(g_dir);
}
END_TEST

START_TEST(decoder_refuses_bad_sampling_options) {
  test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32);
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32}, &d));
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  struct {
    ortep_sampling s;
    const char *field;
  } bad[] = {{{.temperature = -1.0f}, "temperature"},
             {{.temperature = NAN}, "temperature"},
             {{.temperature = 1.0f, .top_p = 1.5f}, "top_p"},
             {{.temperature = 1.0f, .min_p = 1.0f}, "min_p"},
             {{.temperature = 1.0f, .repetition_penalty = -2.0f}, "repetition_penalty"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ortep_generate_options o = {.max_tokens = 2, .sampling = &bad[i].s};
    ortep_generate_result r;
    ck_assert_status(ortep_decoder_generate_ex(d, &o, NULL, NULL, &r), ORTEP_E_INVALID_ARGUMENT);
    ck_assert_error_mentions(bad[i].field);
    ck_assert_uint_eq(r.generated, 0);
  }
  /* the decoder still works, greedily */
  ck_assert_ok(ortep_decoder_generate(d, 2, NULL, NULL, NULL));
  ortep_decoder_close(d);
  test_model_dir_remove(g_dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sampling");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, philox_matches_its_known_answers);
  tcase_add_test(tc, draws_follow_the_softmax);
  tcase_add_test(tc, top_k_top_p_and_min_p_truncate_exactly);
  tcase_add_test(tc, repetition_penalty_applies_once_per_token);
  tcase_add_test(tc, top_p_over_a_large_vocabulary);
  tcase_add_test(tc, seeds_reproduce_and_differ);
  tcase_add_test(tc, extreme_parameters_give_a_valid_distribution);
  tcase_add_test(tc, decoder_tiny_temperature_is_greedy);
  tcase_add_test(tc, non_finite_logits_and_bad_parameters);
  tcase_add_test(tc, decoder_samples_reproducibly_from_the_seed);
  tcase_add_test(tc, decoder_refuses_bad_sampling_options);
  suite_add_tcase(s, tc);
  return test_run(s);
}
