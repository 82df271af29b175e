/*
 * test_simd.c: which SIMD dot products the CPU EP uses, as a user sees and
 * chooses them: ortep_cpu_ep_simd names the widest set this CPU has, and
 * ORTEP_CPU_SIMD asks for one, refused at ortep_ep_initialize with the sets
 * the CPU does have when it is unknown or missing; ORTEP_CPU_HIDE makes the
 * CPU look as if it lacked sets. The choice is made once per process, so each
 * case runs in a child process of its own. Built a second time against the
 * emulated kernels (ORTEP_TEST_EMULATED), whose CPU has every set.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* Whether the comma-separated list names `set`. */
static bool names(const char *list, const char *set) {
  size_t n = strlen(set);
  for (const char *p = list; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
    if (strcspn(p, ",") == n && !strncmp(p, set, n)) return true;
  return false;
}

/* The widest set of this CPU, asked of the compiler's runtime (not ortep's
 * CPUID code, which is what is under test), less what `hide` hides. */
static const char *widest_with(const char *hide) {
  bool avx512 = false, avx2 = false;
#if defined(ORTEP_TEST_EMULATED)
  avx512 = avx2 = true;
#elif defined(__x86_64__)
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f");
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  if (names(hide, "avx2")) avx2 = false;
  if (names(hide, "avx512") || names(hide, "avx512f") || !avx2) avx512 = false;
  return avx512 ? "avx512" : avx2 ? "avx2" : "portable";
}
static const char *widest_here(void) { return widest_with(getenv("ORTEP_CPU_HIDE")); }

typedef struct outcome {
  ortep_status status;
  char simd[32];
  char message[512];
} outcome;

/* A CPU EP initialised in a child with ORTEP_CPU_SIMD = want (NULL: unset)
 * and ORTEP_CPU_HIDE = hide (NULL: as inherited). */
static outcome init_hiding(const char *want, const char *hide) {
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
    if (hide) setenv("ORTEP_CPU_HIDE", hide, 1);
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

static outcome init_with(const char *want) { return init_hiding(want, NULL); }

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

/* Hidden sets are not used, nor taken when asked for: the CPU runs as one
 * without them would. */
START_TEST(hidden_sets_are_absent) {
  static const char *const hides[] = {"", "avx512", "avx512f", "avx2", "avx512bf16,avx512vnni", "avx512,avx2"};
  for (size_t i = 0; i < sizeof hides / sizeof *hides; i++) {
    outcome o = init_hiding(NULL, hides[i]);
    ck_assert_msg(o.status == ORTEP_OK, "%s: %s", hides[i], o.message);
    ck_assert_msg(!strcmp(o.simd, widest_with(hides[i])), "ORTEP_CPU_HIDE=%s: %s, expected %s", hides[i], o.simd,
                  widest_with(hides[i]));
  }
  if (strcmp(widest_with(""), "avx512")) return; /* nothing to hide here */
  outcome o = init_hiding("avx512", "avx512");
  ck_assert_int_eq(o.status, ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(o.message, "ORTEP_CPU_SIMD=avx512") && strstr(o.message, "ORTEP_CPU_HIDE='avx512' hides it") &&
                    strstr(o.message, "supports avx2 and portable"),
                "%s", o.message);
  o = init_hiding("avx2", "avx2");
  ck_assert_int_eq(o.status, ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(o.message, "supports portable only"), "%s", o.message);
}
END_TEST

START_TEST(an_unknown_hidden_set_is_refused) {
  outcome o = init_hiding(NULL, "avx512,sse9");
  ck_assert_int_eq(o.status, ORTEP_E_INVALID_ARGUMENT);
  ck_assert_msg(strstr(o.message, "ORTEP_CPU_HIDE='avx512,sse9': 'sse9' is not an instruction set") &&
                    strstr(o.message, "avx512vnni"),
                "%s", o.message);
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
  tcase_add_test(tc, hidden_sets_are_absent);
  tcase_add_test(tc, an_unknown_hidden_set_is_refused);
  tcase_add_test(tc, only_an_initialised_cpu_ep_has_a_set);
  suite_add_tcase(s, tc);
  return test_run(s);
}
