/* test_planner.c: the memory planner: exact lower bounds, sharing of memory
 * between tensors whose lifetimes do not overlap, verify catching overlap,
 * and 1000 random workloads planned and verified. */
#include "testutil.h"

START_TEST(disjoint_lifetimes_share_memory) {
  ortep_plan_tensor t[] = {{100, 1, 0, 1}, {100, 1, 2, 3}, {50, 1, 1, 2}};
  size_t off[3];
  ortep_plan_summary s;
  ck_assert_ok(ortep_plan_memory(t, 3, off, &s));
  ck_assert_uint_eq(s.naive_sum, 250);
  ck_assert_uint_eq(s.lower_bound, 150);
  ck_assert_uint_eq(s.total, 150);
  ck_assert_uint_eq(off[0], off[1]); /* the two 100-byte tensors reuse one region */
  ck_assert_ok(ortep_plan_verify(t, 3, off, s.total));
}
END_TEST

START_TEST(alignment_and_zero_sizes) {
  ortep_plan_tensor t[] = {{3, 1, 0, 5}, {64, 256, 0, 5}, {0, 16, 0, 5}, {10, 0, 2, 2}};
  size_t off[4];
  ortep_plan_summary s;
  ck_assert_ok(ortep_plan_memory(t, 4, off, &s));
  ck_assert_uint_eq(off[1] % 256, 0);
  ck_assert_uint_eq(off[2], 0);
  ck_assert_ok(ortep_plan_verify(t, 4, off, s.total));
  ck_assert_ok(ortep_plan_memory(NULL, 0, NULL, &s));
  ck_assert_uint_eq(s.total, 0);
}
END_TEST

START_TEST(verify_catches_overlap_and_misalignment) {
  ortep_plan_tensor t[] = {{100, 1, 0, 3}, {100, 1, 2, 5}, {8, 8, 0, 0}};
  size_t bad[] = {0, 50, 200};
  ck_assert_status(ortep_plan_verify(t, 3, bad, 300), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("tensors 0");
  ck_assert_error_mentions("overlap");
  size_t mis[] = {0, 100, 201};
  ck_assert_status(ortep_plan_verify(t, 3, mis, 300), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not aligned");
  size_t past[] = {0, 100, 200};
  ck_assert_status(ortep_plan_verify(t, 3, past, 205), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("past the block");
  ck_assert_ok(ortep_plan_verify(t, 3, past, 208));
}
END_TEST

START_TEST(bad_input_is_refused) {
  ortep_plan_tensor t[] = {{100, 1, 5, 3}};
  size_t off[1];
  ortep_plan_summary s;
  ck_assert_status(ortep_plan_memory(t, 1, off, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("before first_use");
  t[0] = (ortep_plan_tensor){100, 24, 0, 1};
  ck_assert_status(ortep_plan_memory(t, 1, off, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("power of two");
  ck_assert_status(ortep_plan_memory(NULL, 3, off, &s), ORTEP_E_INVALID_ARGUMENT);
}
END_TEST

/* The most bytes live at one step, the slow obvious way. */
static size_t brute_lower_bound(const ortep_plan_tensor *t, size_t n, uint32_t steps) {
  size_t best = 0;
  for (uint32_t s = 0; s < steps; s++) {
    size_t live = 0;
    for (size_t i = 0; i < n; i++)
      if (t[i].first_use <= s && s <= t[i].last_use) live += t[i].size;
    if (live > best) best = live;
  }
  return best;
}

START_TEST(thousand_random_workloads_plan_and_verify) {
  test_rng r = test_rng_new(test_seed() + 77);
  ortep_plan_tensor t[160];
  size_t off[160];
  double worst = 1.0;
  for (int w = 0; w < 1000; w++) {
    size_t n = (size_t)test_rng_range(&r, 1, 160);
    uint32_t steps = (uint32_t)test_rng_range(&r, 1, 200);
    for (size_t i = 0; i < n; i++) {
      uint32_t a = (uint32_t)test_rng_range(&r, 0, steps - 1);
      uint32_t len = (uint32_t)test_rng_range(&r, 0, test_rng_range(&r, 0, 3) ? 10 : steps);
      uint32_t b = a + len < steps ? a + len : steps - 1;
      t[i] = (ortep_plan_tensor){(size_t)test_rng_range(&r, 0, 1u << test_rng_range(&r, 4, 20)),
                                 (size_t)1 << test_rng_range(&r, 0, 8), a, b};
    }
    ortep_plan_summary s;
    ck_assert_ok(ortep_plan_memory(t, n, off, &s));
    ck_assert_msg(ortep_plan_verify(t, n, off, s.total) == ORTEP_OK, "workload %d: %s", w, ortep_last_error());
    ck_assert_uint_eq(s.lower_bound, brute_lower_bound(t, n, steps));
    ck_assert_uint_ge(s.total, s.lower_bound);
    size_t naive = 0;
    for (size_t i = 0; i < n; i++) naive += t[i].size;
    ck_assert_uint_eq(s.naive_sum, naive);
    if (s.lower_bound && (double)s.total / (double)s.lower_bound > worst)
      worst = (double)s.total / (double)s.lower_bound;
  }
  fprintf(stderr, "planner: worst total / lower bound over 1000 random workloads: %.3f\n", worst);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, disjoint_lifetimes_share_memory);
  tcase_add_test(tc, alignment_and_zero_sizes);
  tcase_add_test(tc, verify_catches_overlap_and_misalignment);
  tcase_add_test(tc, bad_input_is_refused);
  tcase_add_test(tc, thousand_random_workloads_plan_and_verify);
  suite_add_tcase(s, tc);
  return test_run(s);
}
