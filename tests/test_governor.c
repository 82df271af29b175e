/* test_governor.c: budgets, refusals that change nothing, configuration by
 * setting name, and counters that balance under concurrent use. */
#include <pthread.h>

#include "testutil.h"

START_TEST(refused_charge_changes_no_counter) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_DEVICE), ORTEP_BUDGET_UNLIMITED);
  ck_assert_ok(ortep_governor_set_budget(g, ORTEP_TIER_DEVICE, (uint64_t)8 << 30));
  ck_assert_ok(ortep_governor_charge(g, ORTEP_TIER_DEVICE, (uint64_t)8090 << 20)); /* 7.9 GiB */
  ortep_mem_stats before, after;
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &before);
  ck_assert_status(ortep_governor_charge(g, ORTEP_TIER_DEVICE, (uint64_t)200 << 20), ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("device budget 8.0 GiB");
  ck_assert_error_mentions("7.9 GiB in use");
  ck_assert_error_mentions("200.0 MiB refused");
  ck_assert_error_mentions("ortep.device.budget_bytes");
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &after);
  ck_assert_mem_eq(&before, &after, sizeof before);
  /* other tiers are independent */
  ck_assert_ok(ortep_governor_charge(g, ORTEP_TIER_HOST, (uint64_t)200 << 20));
  ck_assert_ok(ortep_governor_refund(g, ORTEP_TIER_HOST, (uint64_t)200 << 20));
  ortep_governor_destroy(g);
}
END_TEST

START_TEST(refund_more_than_charged_is_refused) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_ok(ortep_governor_charge(g, ORTEP_TIER_HOST, 10));
  ck_assert_status(ortep_governor_refund(g, ORTEP_TIER_HOST, 11), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("exceeds");
  ortep_mem_stats st;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &st);
  ck_assert_uint_eq(st.current_bytes, 10);
  ck_assert_uint_eq(st.frees, 0);
  ck_assert_status(ortep_governor_charge(g, (ortep_tier)7, 1), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_governor_charge(NULL, ORTEP_TIER_HOST, 1), ORTEP_E_INVALID_ARGUMENT);
  ortep_governor_destroy(g);
}
END_TEST

START_TEST(configure_by_setting_name) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_ok(ortep_governor_configure(g, "ortep.host.budget_bytes", "8G"));
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_HOST), (uint64_t)8 << 30);
  ck_assert_ok(ortep_governor_configure(g, "ortep.device.budget_bytes", "512MiB"));
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_DEVICE), (uint64_t)512 << 20);
  ck_assert_ok(ortep_governor_configure(g, "ortep.disk.budget_bytes", "12345"));
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_DISK), 12345);
  ck_assert_ok(ortep_governor_configure(g, "ortep.host.budget_bytes", "unlimited"));
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_HOST), ORTEP_BUDGET_UNLIMITED);
  ck_assert_status(ortep_governor_configure(g, "ortep.host.budget_bytes", "lots"), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not a byte count");
  ck_assert_status(ortep_governor_configure(g, "ortep.host.budget_bytes", "99999999999T"), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_governor_configure(g, "ortep.gpu.budget", "1"), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("ortep.device.budget_bytes"); /* lists what is known */
  ck_assert_uint_eq(ortep_governor_budget(g, ORTEP_TIER_HOST), ORTEP_BUDGET_UNLIMITED);
  ortep_governor_destroy(g);
}
END_TEST

typedef struct worker {
  ortep_governor *g;
  uint64_t seed;
  long granted, refused;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  test_rng r = test_rng_new(w->seed);
  uint64_t held[16];
  int n = 0;
  for (int i = 0; i < 50000; i++) {
    if (n < 16 && (n == 0 || test_rng_next(&r) % 2)) {
      uint64_t b = test_rng_range(&r, 1, 4096);
      if (ortep_governor_charge(w->g, ORTEP_TIER_HOST, b) == ORTEP_OK) {
        held[n++] = b;
        w->granted++;
      } else {
        w->refused++;
      }
    } else {
      ortep_governor_refund(w->g, ORTEP_TIER_HOST, held[--n]);
    }
  }
  while (n) ortep_governor_refund(w->g, ORTEP_TIER_HOST, held[--n]);
  return NULL;
}

static void run_threads(ortep_governor *g, worker *w, int nthreads) {
  pthread_t t[8];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker){g, test_seed() + (uint64_t)i * 7919, 0, 0};
    pthread_create(&t[i], NULL, churn, &w[i]);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
}

START_TEST(concurrent_charges_and_refunds_balance) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  worker w[4];
  run_threads(g, w, 4);
  ortep_mem_stats st;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &st);
  long granted = 0;
  for (int i = 0; i < 4; i++) granted += w[i].granted;
  ck_assert_uint_eq(st.current_bytes, 0);
  ck_assert_uint_eq(st.allocations, (uint64_t)granted);
  ck_assert_uint_eq(st.frees, (uint64_t)granted);
  ck_assert_uint_eq(st.allocated_bytes, st.freed_bytes);
  ck_assert_uint_gt(st.peak_bytes, 0);
  ortep_governor_destroy(g);
}
END_TEST

START_TEST(concurrent_charges_never_exceed_the_budget) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_ok(ortep_governor_set_budget(g, ORTEP_TIER_HOST, 20000));
  worker w[4];
  run_threads(g, w, 4);
  ortep_mem_stats st;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &st);
  long refused = 0, granted = 0;
  for (int i = 0; i < 4; i++) refused += w[i].refused, granted += w[i].granted;
  ck_assert_int_gt(refused, 0); /* the budget did bite */
  ck_assert_uint_le(st.peak_bytes, 20000);
  ck_assert_uint_eq(st.current_bytes, 0);
  ck_assert_uint_eq(st.allocations, (uint64_t)granted);
  ortep_governor_destroy(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("governor");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, refused_charge_changes_no_counter);
  tcase_add_test(tc, refund_more_than_charged_is_refused);
  tcase_add_test(tc, configure_by_setting_name);
  tcase_add_test(tc, concurrent_charges_and_refunds_balance);
  tcase_add_test(tc, concurrent_charges_never_exceed_the_budget);
  suite_add_tcase(s, tc);
  return test_run(s);
}
