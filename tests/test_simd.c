/*
 * test_simd.c: which SIMD dot products the CPU EP uses, as a user sees and
 * chooses them: ortep_cpu_ep_simd names the widest set this CPU has, and
 * ORTEP_CPU_SIMD asks for one, refused at ortep_ep_initialize with the sets
 * the CPU does have when it is unknown or missing. The choice is made once per
 * process, so each case runs in a child process of its own.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* What this CPU supports, asked of the compiler's runtime (not ortep's CPUID
 * code, which is what is under test). */
static const char *widest_here(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "portable";
}

typedef struct outcome {
  ortep_status status;
  char simd[32];
  char message[512];
} outcome;

/* A CPU EP initialised in a child with ORTEP_CPU_SIMD = want (NULL: unset). */
static outcome init_with(const char *want) {
  int fd[2];
  ck_assert_int_eq(pipe(fd), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fd[0]);
    if (want)
      setenv("ORTEP_CPU_SIMD", want, 1);
    else
      unsetenv("ORTEP_CPU_SIMD");
    outcome o = {0};
    ortep_ep *ep = NULL;
    o.status = ortep_cpu_ep_create(NULL, &ep);
    if (o.status == ORTEP_OK) o.status = ortep_ep_initialize(ep, NULL);
    if (o.status == ORTEP_OK)
      snprintf(o.simd, sizeof o.simd, "%s", ortep_cpu_ep_simd(ep) ? ortep_cpu_ep_simd(ep) : "(null)");
    else
      snprintf(o.message, sizeof o.message, "%s", ortep_last_error());
    ortep_ep_destroy(ep);
    ssize_t w = write(fd[1], &o, sizeof o);
    close(fd[1]);
    _exit(w == (ssize_t)sizeof o ? 0 : 1);
  }
  close(fd[1]);
  outcome o;
  ck_assert_int_eq(read(fd[0], &o, sizeof o), (ssize_t)sizeof o);
  close(fd[0]);
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  return o;
}

START_TEST(the_widest_set_by_default) {
  outcome o = init_with(NULL);
  ck_assert_msg(o.status == ORTEP_OK, "%s", o.message);
  ck_assert_str_eq(o.simd, widest_here());
  o = init_with("auto");
  ck_assert_msg(o.status == ORTEP_OK, "%s", o.message);
  ck_assert_str_eq(o.simd, widest_here());
}
END_TEST

START_TEST(a_set_the_cpu_has_is_used) {
  outcome o = init_with("portable");
  ck_assert_msg(o.status == ORTEP_OK, "%s", o.message);
  ck_assert_str_eq(o.simd, "portable");
  if (strcmp(widest_here(), "portable") != 0) {
    o = init_with("avx2");
    ck_assert_msg(o.status == ORTEP_OK, "%s", o.message);
    ck_assert_str_eq(o.simd, "avx2");
  }
}
END_TEST

START_TEST(a_set_the_cpu_lacks_is_refused) {
  const char *widest = widest_here();
  if (!strcmp(widest, "avx512")) {
    outcome o = init_with("avx512");
    ck_assert_msg(o.status == ORTEP_OK, "%s", o.message);
    ck_assert_str_eq(o.simd, "avx512");
    return; /* nothing is missing here */
  }
  outcome o = init_with("avx512");
  ck_assert_int_eq(o.status, ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(o.message, "ORTEP_CPU_SIMD=avx512: this CPU (or its OS) does not support it"), "%s", o.message);
  ck_assert_msg(strstr(o.message, !strcmp(widest, "avx2") ? "supports avx2 and portable" : "supports portable only"),
                "%s", o.message);
  ck_assert_msg(strstr(o.message, "unset ORTEP_CPU_SIMD"), "%s", o.message);
}
END_TEST

START_TEST(an_unknown_set_is_refused) {
  outcome o = init_with("sse9");
  ck_assert_int_eq(o.status, ORTEP_E_INVALID_ARGUMENT);
  ck_assert_msg(strstr(o.message,
                       "ORTEP_CPU_SIMD='sse9' is not a set of dot products: use auto, avx512, avx2 or "
                       "portable"),
                "%s", o.message);
}
END_TEST

START_TEST(only_an_initialised_cpu_ep_has_a_set) {
  ck_assert_ptr_null(ortep_cpu_ep_simd(NULL));
  ortep_ep *ep;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ptr_null(ortep_cpu_ep_simd(ep));
  ortep_ep_destroy(ep);
}
END_TEST

int main(void) {
  Suite *s = suite_create("simd");
  TCase *tc = tcase_create("choice");
  tcase_add_test(tc, the_widest_set_by_default);
  tcase_add_test(tc, a_set_the_cpu_has_is_used);
  tcase_add_test(tc, a_set_the_cpu_lacks_is_refused);
  tcase_add_test(tc, an_unknown_set_is_refused);
  tcase_add_test(tc, only_an_initialised_cpu_ep_has_a_set);
  suite_add_tcase(s, tc);
  return test_run(s);
}
