/* test_status.c: status codes and names, the per-thread last error, devices,
 * the small-object hook, version information. */
#include <pthread.h>

#include <signal.h>

#include "runtime/internal.h"
#include "testutil.h"

START_TEST(every_status_has_a_distinct_name_and_description) {
  for (int i = 0; i < ORTEP_STATUS_COUNT; i++) {
    const char *n = ortep_status_name((ortep_status)i);
    ck_assert_msg(strncmp(n, "ORTEP_", 6) == 0, "name %s", n);
    ck_assert_str_ne(n, "ORTEP_E_UNKNOWN");
    ck_assert_int_gt((int)strlen(ortep_status_describe((ortep_status)i)), 5);
    for (int j = 0; j < i; j++) ck_assert_str_ne(n, ortep_status_name((ortep_status)j));
  }
  ck_assert_str_eq(ortep_status_name(ORTEP_OK), "ORTEP_OK");
  ck_assert_str_eq(ortep_status_name(ORTEP_E_DEVICE_VALIDATION), "ORTEP_E_DEVICE_VALIDATION");
  ck_assert_str_eq(ortep_status_name((ortep_status)9999), "ORTEP_E_UNKNOWN");
  ck_assert_str_eq(ortep_status_describe((ortep_status)-1), "unknown status code");
}
END_TEST

static void *fail_in_thread(void *arg) {
  (void)arg;
  ortep_buffer b;
  ortep_buffer_wrap_owned(NULL, ortep_device_cpu(), 1, 1, &b);
  return strstr(ortep_last_error(), "NULL") ? (void *)1 : NULL;
}

START_TEST(last_error_is_per_thread_and_clearable) {
  ortep_clear_error();
  ck_assert_str_eq(ortep_last_error(), "");
  ck_assert_int_eq(ortep_last_status(), ORTEP_OK);
  pthread_t t;
  void *seen = NULL;
  pthread_create(&t, NULL, fail_in_thread, NULL);
  pthread_join(t, &seen);
  ck_assert_ptr_nonnull(seen);
  ck_assert_str_eq(ortep_last_error(), ""); /* the other thread's failure is not ours */
  ortep_buffer b;
  ck_assert_status(ortep_buffer_wrap_owned(NULL, ortep_device_cpu(), 1, 1, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(ortep_last_status(), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("NULL");
  ortep_clear_error();
  ck_assert_str_eq(ortep_last_error(), "");
}
END_TEST

START_TEST(devices_and_tiers) {
  char buf[32];
  ck_assert(ortep_device_is_host_accessible(ortep_device_cpu()));
  ck_assert(!ortep_device_is_host_accessible(ortep_device_cuda(0)));
  ck_assert_int_eq(ortep_device_tier(ortep_device_cpu()), ORTEP_TIER_HOST);
  ck_assert_int_eq(ortep_device_tier(ortep_device_cuda(3)), ORTEP_TIER_DEVICE);
  ck_assert_str_eq(ortep_device_format(ortep_device_cuda(1), buf, sizeof buf), "cuda:1");
  ck_assert_str_eq(ortep_device_format(ortep_device_cpu(), buf, sizeof buf), "cpu:0");
  ck_assert_str_eq(ortep_tier_name(ORTEP_TIER_DISK), "disk");
  ck_assert(!ortep_device_equal(ortep_device_cuda(0), ortep_device_cuda(1)));
  ck_assert(ortep_device_equal(ortep_device_cuda(1), ortep_device_cuda(1)));
}
END_TEST

START_TEST(small_object_hook_is_used_and_can_fail) {
  ck_assert_status(ortep_replace_allocator(NULL, calloc, realloc, free), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("malloc=NULL");
  test_hooks_install(0);
  ortep_governor *g = NULL;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_int_ge(atomic_load(&test_hook_calls), 1);
  ck_assert_int_eq(atomic_load(&test_hook_live), 1);
  ortep_governor_destroy(g);
  ck_assert_int_eq(atomic_load(&test_hook_live), 0);
  test_hooks_install(1);
  ck_assert_status(ortep_governor_create(&g), ORTEP_E_OUT_OF_MEMORY);
  ck_assert_ptr_null(g);
  ck_assert_int_eq(atomic_load(&test_hook_live), 0);
  ortep_restore_allocator();
}
END_TEST

START_TEST(version_is_reported) {
  ck_assert_str_eq(ortep_version(), ORTEP_VERSION_STRING);
  ck_assert_int_gt((int)strlen(ortep_git_revision()), 0);
  ck_assert(ortep_uses_mimalloc() == !ORTEP_SYSTEM_ALLOCATOR);
}
END_TEST

/* An internal invariant is checked in every build type (runtime/internal.h:
 * -DNDEBUG does not turn ortep__assert off): a broken one aborts (Check
 * expects SIGABRT from this test's forked child). */
static volatile int g_broken = 1;
START_TEST(a_broken_invariant_aborts_in_every_build) { ortep__assert(g_broken == 0); }
END_TEST

int main(void) {
  Suite *s = suite_create("status");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, every_status_has_a_distinct_name_and_description);
  tcase_add_test(tc, last_error_is_per_thread_and_clearable);
  tcase_add_test(tc, devices_and_tiers);
  tcase_add_test(tc, small_object_hook_is_used_and_can_fail);
  tcase_add_test(tc, version_is_reported);
  const char *fork = getenv("CK_FORK");
  if (!fork || strcmp(fork, "no") != 0) /* a signal test needs Check's fork (Valgrind runs without) */
    tcase_add_test_raise_signal(tc, a_broken_invariant_aborts_in_every_build, SIGABRT);
  suite_add_tcase(s, tc);
  return test_run(s);
}
