/* test_cli.c: the `ortep` program as a user runs it: usage errors exit 2
 * naming the argument; generate streams text and ends with a summary on
 * stderr; the same seed gives the same text; tokenize and detokenize
 * round-trip; a model without tokenizer.json is refused with a pointer to
 * --prompt-ids, which then works with ids in and out. */
#include <sys/wait.h>

#include "testutil.h"

static char g_tmp[64];
static char g_out[1 << 16], g_err[1 << 16];

/* Runs ortep with args (stdin from in, may be NULL); returns its exit code;
 * stdout and stderr into g_out and g_err. */
static int ortep(const char *args, const char *in) {
  char cmd[4096], path[128];
  snprintf(cmd, sizeof cmd, "%s%s%s env XDG_CACHE_HOME=%s/cache %s %s >%s/out.txt 2>%s/err.txt", in ? "printf '%s' '" : "",
           in ? in : "", in ? "' |" : "", g_tmp, ORTEP_CLI_PATH, args, g_tmp, g_tmp);
  int st = system(cmd);
  ck_assert_msg(WIFEXITED(st), "ortep did not exit normally: %s", cmd);
  char *bufs[2] = {g_out, g_err};
  const char *names[2] = {"out.txt", "err.txt"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", g_tmp, names[i]);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(bufs[i], 1, sizeof g_out - 1, f) : 0;
    bufs[i][n] = '\0';
    if (f) fclose(f);
  }
  return WEXITSTATUS(st);
}

static void setup(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/ortep-cli-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}
static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(usage_errors_exit_2_and_name_the_argument) {
  struct {
    const char *args, *needle;
  } cases[] = {
      {"", "usage: ortep"},
      {"warp", "unknown command 'warp'"},
      {"generate --preset tiny", "--prompt TEXT and --prompt-ids"},
      {"generate --preset tiny --prompt hi --temperature -1", "--temperature '-1'"},
      {"generate --preset tiny --prompt hi --top-p 2", "--top-p '2'"},
      {"generate --preset tiny --prompt hi --top-k 1.5", "--top-k must be a whole number"},
      {"generate --preset tiny --prompt hi --frobnicate", "unknown option '--frobnicate'"},
      {"generate --preset huge --prompt hi", "unknown preset 'huge'"},
      {"generate --prompt hi", "--model DIR or --preset NAME"},
      {"generate --preset tiny --prompt-ids 1,x", "'x' is not a token id"},
      {"tokenize --preset tiny stray", "unexpected argument 'stray'"},
      {"detokenize --preset tiny 5 -3", "'-3' is not a token id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_msg(ortep(cases[i].args, NULL) == 2, "'%s' did not exit 2: %s", cases[i].args, g_err);
    ck_assert_msg(strstr(g_err, cases[i].needle), "'%s': stderr '%s' lacks '%s'", cases[i].args, g_err,
                  cases[i].needle);
  }
  const char *help[] = {"--help", "generate --help", "tokenize --help", "detokenize --help"};
  for (size_t i = 0; i < 4; i++) ck_assert_int_eq(ortep(help[i], NULL), 0);
  ck_assert(strstr(g_out, "usage: ortep detokenize"));
}
END_TEST

START_TEST(generate_streams_text_and_sampling_is_reproducible) {
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt 'Hello, world' --max-tokens 12", NULL) == 0, "%s", g_err);
  ck_assert_msg(strstr(g_err, "12 generated (--max-tokens reached)") && strstr(g_err, "tokens/s") &&
                    strstr(g_err, "time to first token"),
                "%s", g_err);
  ck_assert_uint_gt(strlen(g_out), 1);
  const char *sample = "generate --ep cpu --preset tiny --prompt 'Hello' --max-tokens 16 --temperature 0.9 --top-p 0.9 "
                       "--repetition-penalty 1.1 --seed 42";
  ck_assert_msg(ortep(sample, NULL) == 0, "%s", g_err);
  static char first[sizeof g_out];
  memcpy(first, g_out, sizeof first);
  ck_assert_int_eq(ortep(sample, NULL), 0);
  ck_assert_str_eq(g_out, first);
}
END_TEST

START_TEST(tokenize_and_detokenize_round_trip) {
  ck_assert_msg(ortep("tokenize --preset tiny --text 'Hello world, 42!'", NULL) == 0, "%s", g_err);
  static char ids[sizeof g_out];
  memcpy(ids, g_out, sizeof ids);
  ids[strcspn(ids, "\n")] = '\0';
  static char args[sizeof g_out + 64];
  snprintf(args, sizeof args, "detokenize --preset tiny %s", ids);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  ck_assert_str_eq(g_out, "Hello world, 42!\n");
  /* ids on stdin too, and --tokens shows the strings */
  ck_assert_int_eq(ortep("detokenize --preset tiny", ids), 0);
  ck_assert_str_eq(g_out, "Hello world, 42!\n");
  ck_assert_int_eq(ortep("tokenize --preset tiny --tokens", "Hi"), 0);
  ck_assert_str_eq(g_out, "72\tH\n105\ti\n");
}
END_TEST

START_TEST(a_model_without_a_tokenizer_takes_ids) {
  char dir[128], path[160], args[512];
  snprintf(dir, sizeof dir, "%s/model", g_tmp);
  ck_assert_ok(ortep_model_write_synthetic(dir, "tiny", ORTEP_DTYPE_F32, 1));
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  ck_assert_int_eq(unlink(path), 0);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt hi", dir);
  ck_assert_int_eq(ortep(args, NULL), 1);
  ck_assert_msg(strstr(g_err, "tokenizer.json") && strstr(g_err, "--prompt-ids"), "%s", g_err);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt-ids 5,17,2 --max-tokens 6", dir);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  int count = 0;
  for (char *p = strtok(g_out, " \n"); p; p = strtok(NULL, " \n")) count++;
  ck_assert_int_eq(count, 6); /* six ids */
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, usage_errors_exit_2_and_name_the_argument);
  tcase_add_test(tc, generate_streams_text_and_sampling_is_reproducible);
  tcase_add_test(tc, tokenize_and_detokenize_round_trip);
  tcase_add_test(tc, a_model_without_a_tokenizer_takes_ids);
  suite_add_tcase(s, tc);
  return test_run(s);
}
