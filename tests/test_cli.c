/* test_cli.c: the `ortep` program as a user runs it: usage errors exit 2
 * naming the argument; generate streams text and ends with a summary on
 * stderr; the same seed gives the same text; tokenize and detokenize
 * round-trip; a model without tokenizer.json is refused with a pointer to
 * --prompt-ids, which then works with ids in and out. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_options.h" /* tool_progress, the programs' progress line */
#include "testutil.h"
#include <termios.h>
#include <time.h>

static char g_tmp[64];
static char g_out[1 << 16], g_err[1 << 16];

/* g_tmp/name into buf (cap bytes, NUL-terminated; empty when absent). */
static void slurp(const char *name, char *buf, size_t cap) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", g_tmp, name);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
}

/* Runs ortep with args: stdin from in (may be NULL), or redir, the shell
 * redirections of its own (">/dev/full", "<&-"; then stdout is not kept).
 * stdout into g_out, stderr into g_err; returns the exit code. */
static int ortep_with(const char *args, const char *in, const char *redir) {
  char cmd[4096], out[160];
  if (redir)
    snprintf(out, sizeof out, "%s", redir);
  else
    snprintf(out, sizeof out, ">%s/out.txt", g_tmp);
  snprintf(cmd, sizeof cmd, "%s%s%s env XDG_CACHE_HOME=%s/cache %s %s %s 2>%s/err.txt", in ? "printf '%s' '" : "",
           in ? in : "", in ? "' |" : "", g_tmp, ORTEP_CLI_PATH, args, out, g_tmp);
  int st = system(cmd);
  ck_assert_msg(WIFEXITED(st), "ortep did not exit normally: %s", cmd);
  g_out[0] = '\0';
  if (!redir) slurp("out.txt", g_out, sizeof g_out);
  slurp("err.txt", g_err, sizeof g_err);
  return WEXITSTATUS(st);
}
static int ortep(const char *args, const char *in) { return ortep_with(args, in, NULL); }
static int ortep_redirected(const char *args, const char *redir) { return ortep_with(args, NULL, redir); }

/* Runs ortep with its stdout a pipe whose reader has already gone and
 * SIGPIPE ignored: every write fails with EPIPE, deterministically. */
static int ortep_into_a_closed_pipe(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "exec env XDG_CACHE_HOME=%s/cache %s %s 2>%s/err.txt", g_tmp, ORTEP_CLI_PATH, args, g_tmp);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  close(fds[0]); /* no reader, ever */
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    signal(SIGPIPE, SIG_IGN); /* inherited across exec */
    dup2(fds[1], 1);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  slurp("err.txt", g_err, sizeof g_err);
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

/* --version names the CPU EP's dot products as the environment chooses them
 * (ORTEP_CPU_HIDE, ORTEP_CPU_SIMD), or why the EP refuses to start. */
START_TEST(version_names_the_cpu_eps_dot_products) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  char want[64], hide[64] = "";
  snprintf(want, sizeof want, ", CPU %s, ", ortep_cpu_ep_simd(ep));
  ortep_ep_destroy(ep);
  ck_assert_int_eq(ortep("--version", NULL), 0);
  ck_assert_msg(strstr(g_out, want), "wanted '%s' in: %s", want, g_out);
  /* and the Unicode version of the tokenizer's classes (utf8proc's) */
  char uni[64];
  snprintf(uni, sizeof uni, ", Unicode %s, ", ortep_tokenizer_unicode_version());
  ck_assert_msg(strstr(g_out, uni), "wanted '%s' in: %s", uni, g_out);
  char simd[64] = "";
  if (getenv("ORTEP_CPU_HIDE")) snprintf(hide, sizeof hide, "%s", getenv("ORTEP_CPU_HIDE"));
  if (getenv("ORTEP_CPU_SIMD")) snprintf(simd, sizeof simd, "%s", getenv("ORTEP_CPU_SIMD"));
  unsetenv("ORTEP_CPU_SIMD");          /* the widest of what is left */
  setenv("ORTEP_CPU_HIDE", "avx2", 1); /* a CPU without AVX2 */
  ck_assert_int_eq(ortep("--version", NULL), 0);
  ck_assert_msg(strstr(g_out, ", CPU portable, "), "%s", g_out);
  setenv("ORTEP_CPU_HIDE", "sse9", 1);
  ck_assert_int_eq(ortep("--version", NULL), 0);
  ck_assert_msg(strstr(g_out, ", CPU EP refused: cpu_ep: ORTEP_CPU_HIDE='sse9': 'sse9' is not an instruction set"),
                "%s", g_out);
  setenv("ORTEP_CPU_HIDE", hide, 1);
  if (simd[0]) setenv("ORTEP_CPU_SIMD", simd, 1);
}
END_TEST

/* --version names OpenBLAS's kernel set; where OpenBLAS fell back to its
 * generic Prescott kernels on a CPU that runs wider ones, ortep started
 * again with OPENBLAS_CORETYPE naming them (test_bench checks ortep-bench's),
 * and whatever stdin held still reaches the command after the restart. */
START_TEST(version_names_the_openblas_kernels_and_a_restart_keeps_stdin) {
  unsetenv("OPENBLAS_CORETYPE");
  const char *suggested = ortep_cpu_blas_suggested_core();
  char want[128];
  snprintf(want, sizeof want, ", OpenBLAS %s%s\n", suggested ? suggested : ortep_cpu_blas_core(),
           suggested ? " (OPENBLAS_CORETYPE)" : "");
  ck_assert_int_eq(ortep("--version", NULL), 0);
  ck_assert_msg(strstr(g_out, want), "wanted '%s' in: %s", want, g_out);
  /* and the Unicode version of the tokenizer's classes (utf8proc's) */
  char uni[64];
  snprintf(uni, sizeof uni, ", Unicode %s, ", ortep_tokenizer_unicode_version());
  ck_assert_msg(strstr(g_out, uni), "wanted '%s' in: %s", uni, g_out);
  ck_assert_msg(!strstr(g_err, "OPENBLAS_CORETYPE"), "%s", g_err);
  /* the text on stdin, read after any restart */
  ck_assert_int_eq(ortep("tokenize --preset tiny --tokens", "Hi"), 0);
  ck_assert_str_eq(g_out, "72\tH\n105\ti\n");
}
END_TEST

START_TEST(usage_errors_exit_2_and_name_the_argument) {
  struct {
    const char *args, *needle;
  } cases[] = {
      {"", "usage: ortep"},
      {"warp", "unknown command 'warp'"},
      {"generate --preset tiny", "--prompt TEXT and --prompt-ids"},
      {"generate --preset tiny --prompt hi --temperature -1", "--temperature '-1'"},
      {"generate --preset tiny --prompt hi --top-p 2", "--top-p '2'"},
      {"generate --preset tiny --prompt hi --top-k 1.5", "--top-k '1.5' is not a whole number"},
      {"generate --preset tiny --prompt hi --frobnicate", "unknown option '--frobnicate'"},
      {"generate --preset huge --prompt hi", "unknown preset 'huge'"},
      {"generate --prompt hi", "--model DIR or --preset NAME"},
      {"generate --preset tiny --prompt-ids 1,x", "'x' is not a token id"},
      {"tokenize --preset tiny stray", "unexpected argument 'stray'"},
      {"detokenize --preset tiny 5 -3", "'-3' is not a token id"},
      /* the model and EP options are ortep-bench's, spelt and refused alike (tools/model_options.c) */
      {"generate --preset tiny --prompt hi --threads 0", "--threads '0' is not a whole number in [1, 1024]"},
      {"tokenize --preset tiny --layout rows", "--layout 'rows' is not one of auto, blocked, row_major"},
      {"generate --preset tiny --prompt hi --weights copy", "--weights 'copy' is not one of map, read"},
      {"generate --preset tiny --prompt hi --ep tpu", "--ep 'tpu' is not one of auto, cpu, cuda"},
      {"generate --preset tiny --prompt hi --weights-cache-max lots", "--weights-cache-max 'lots' is not a byte count"},
      {"generate --preset tiny --prompt hi --weights-cache-max 8Q", "--weights-cache-max '8Q' is not a byte count"},
      {"generate --preset tiny --prompt hi --weights-cache-max 99999999999T", "'99999999999T' is not a byte count"},
      {"generate --preset tiny --prompt hi --weights-cache ''", "--weights-cache is empty"},
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
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt 'Hello, world' --max-tokens 12", NULL) == 0, "%s",
                g_err);
  ck_assert_msg(strstr(g_err, "12 generated (--max-tokens reached)") && strstr(g_err, "tokens/s") &&
                    strstr(g_err, "time to first token"),
                "%s", g_err);
  ck_assert_uint_gt(strlen(g_out), 1);
  const char *sample =
      "generate --ep cpu --preset tiny --prompt 'Hello' --max-tokens 16 --temperature 0.9 --top-p 0.9 "
      "--repetition-penalty 1.1 --seed 42";
  ck_assert_msg(ortep(sample, NULL) == 0, "%s", g_err);
  static char first[sizeof g_out];
  memcpy(first, g_out, sizeof first);
  ck_assert_int_eq(ortep(sample, NULL), 0);
  ck_assert_str_eq(g_out, first);
}
END_TEST

/* --tokens-per-launch: the same text for one token a launch and for 8
 * (greedy and sampled, stopping at max-tokens inside a launch); out of
 * range is a usage error. */
START_TEST(tokens_per_launch_changes_no_text) {
  static const char *const base[] = {
      "generate --ep cpu --preset tiny --prompt 'Hello' --max-tokens 29 --ignore-eos",
      "generate --ep cpu --preset tiny --prompt 'Hello' --max-tokens 29 --ignore-eos --temperature 0.9 --top-k 50 "
      "--repetition-penalty 1.2 --seed 5"};
  static char one[sizeof g_out];
  for (int i = 0; i < 2; i++) {
    char args[512];
    snprintf(args, sizeof args, "%s --tokens-per-launch 1", base[i]);
    ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
    memcpy(one, g_out, sizeof one);
    snprintf(args, sizeof args, "%s --tokens-per-launch 8", base[i]);
    ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
    ck_assert_str_eq(g_out, one);
    ck_assert_msg(strstr(g_err, "29 generated"), "%s", g_err);
  }
  ck_assert_int_eq(ortep("generate --preset tiny --prompt x --tokens-per-launch 65", NULL), 2);
  ck_assert_msg(strstr(g_err, "--tokens-per-launch '65' is not a whole number in [0, 64]"), "%s", g_err);
}
END_TEST

/* A .gguf file is a model too (the tokenizer.json beside it), and decodes
 * the text its directory does. */
START_TEST(a_gguf_file_generates_like_its_directory) {
  char dir[96], file[128], args[512];
  snprintf(dir, sizeof dir, "%s/small", g_tmp);
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  ck_assert_ok(ortep_model_write_synthetic(dir, "small", ORTEP_DTYPE_BF16, 7));
  ortep_model *m;
  ck_assert_ok(ortep_model_open(dir, &m));
  snprintf(file, sizeof file, "%s/model.gguf", dir);
  ck_assert_ok(ortep_model_write_gguf(m, file, "q8_0"));
  ortep_model_close(m);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --dtype q8_0 --prompt 'Hello there' --max-tokens 10", dir);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  static char want[sizeof g_out];
  memcpy(want, g_out, sizeof want);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt 'Hello there' --max-tokens 10", file);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  ck_assert_str_eq(g_out, want);
  /* elsewhere, with no tokenizer.json beside it: the tokenizer from the file's metadata */
  char other[96], moved[128], tj[128];
  snprintf(other, sizeof other, "%s/elsewhere", g_tmp);
  ck_assert_int_eq(mkdir(other, 0755), 0);
  snprintf(moved, sizeof moved, "%s/model.gguf", other);
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  FILE *f = fopen(tj, "rb");
  static char json[1 << 20];
  size_t len = fread(json, 1, sizeof json, f);
  fclose(f);
  ortep_gguf_writer *w;
  ck_assert_ok(ortep_model_open(dir, &m));
  ck_assert_ok(ortep_gguf_writer_create(&w));
  ck_assert_ok(ortep_model_add_to_gguf(m, w, "q8_0"));
  ck_assert_ok(ortep_tokenizer_add_to_gguf(w, json, len));
  ck_assert_ok(ortep_gguf_writer_write(w, moved));
  ortep_gguf_writer_destroy(w);
  ortep_model_close(m);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt 'Hello there' --max-tokens 10", moved);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  ck_assert_str_eq(g_out, want);
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

/* Hostile and careless input, round 3 (the probe's classes 1-5 and 11). */

/* 1: a valid temperature or penalty gives a valid distribution; 1e-40 once
 * overflowed and printed "0 0 0 0 0 0 0 0". */
START_TEST(tiny_sampling_parameters_draw_real_tokens) {
  const char *base = "generate --ep cpu --preset tiny --prompt-ids 1,2,3 --max-tokens 8";
  static char greedy[sizeof g_out], args[256];
  ck_assert_msg(ortep(base, NULL) == 0, "%s", g_err);
  memcpy(greedy, g_out, sizeof greedy);
  const char *extra[] = {"--temperature 1e-40", "--temperature 1e-38", "--temperature 1 --repetition-penalty 1e-40"};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof args, "%s %s", base, extra[i]);
    ck_assert_msg(ortep(args, NULL) == 0, "%s: %s", extra[i], g_err);
    ck_assert_msg(strcmp(g_out, "0 0 0 0 0 0 0 0\n") != 0, "%s drew id 0 every time", extra[i]);
    if (i < 2) ck_assert_msg(!strcmp(g_out, greedy), "%s: '%s' is not the greedy '%s'", extra[i], g_out, greedy);
  }
}
END_TEST

/* 2: integer options are parsed as integers: every seed up to 2^64 - 1 is
 * its own, and fractions, signs and values past the range are exit 2 naming
 * the option and the range. */
START_TEST(integer_options_are_parsed_as_integers) {
  const char *base = "generate --ep cpu --preset tiny --prompt-ids 1,2,3 --max-tokens 12 --temperature 1";
  static char a[sizeof g_out], args[256];
  const char *pairs[][2] = {{"18446744073709551615", "0"}, {"9007199254740993", "9007199254740992"}};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "%s --seed %s", base, pairs[i][0]);
    ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
    memcpy(a, g_out, sizeof a);
    snprintf(args, sizeof args, "%s --seed %s", base, pairs[i][1]);
    ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
    ck_assert_msg(strcmp(a, g_out) != 0, "seeds %s and %s drew the same text", pairs[i][0], pairs[i][1]);
  }
  struct {
    const char *opt, *needle;
  } bad[] = {
      {"--seed 18446744073709551616",
       "--seed '18446744073709551616' is not a whole number in [0, 18446744073709551615]"},
      {"--seed 1.5", "--seed '1.5' is not a whole number"},
      {"--seed -1", "--seed '-1' is not a whole number"},
      {"--seed ' 7'", "--seed ' 7' is not a whole number"},
      {"--max-tokens 1.5", "--max-tokens '1.5' is not a whole number in [1, 10000000]"},
      {"--max-tokens 1e3", "--max-tokens '1e3' is not a whole number"},
      {"--max-tokens 0", "--max-tokens '0'"},
      {"--top-k 2.5", "--top-k '2.5' is not a whole number in [0, 4294967295]"},
      {"--top-k 4294967296", "--top-k '4294967296'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(args, sizeof args, "generate --ep cpu --preset tiny --prompt-ids 1 %s", bad[i].opt);
    ck_assert_msg(ortep(args, NULL) == 2, "%s did not exit 2", bad[i].opt);
    ck_assert_msg(strstr(g_err, bad[i].needle), "%s: '%s' lacks '%s'", bad[i].opt, g_err, bad[i].needle);
  }
}
END_TEST

/* 3: output that could not be written is a failure, not "8 generated":
 * a full disk, a closed stdout, a pipe whose reader is gone (SIGPIPE
 * ignored: generation stops at the first failed write). */
START_TEST(lost_output_fails_the_command) {
  const char *cmds[] = {"generate --ep cpu --preset tiny --prompt-ids 1,2,3 --max-tokens 8",
                        "generate --ep cpu --preset tiny --prompt Hello --max-tokens 8",
                        "tokenize --preset tiny --text hi", "detokenize --preset tiny 72 105", "generate --help"};
  const char *redirs[] = {">/dev/full", ">&-"};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    for (int r = 0; r < 2; r++) {
      ck_assert_msg(ortep_redirected(cmds[i], redirs[r]) == 1, "'%s %s' did not exit 1: %s", cmds[i], redirs[r], g_err);
      ck_assert_msg(strstr(g_err, "cannot write the output"), "'%s %s': %s", cmds[i], redirs[r], g_err);
      ck_assert_msg(!strstr(g_err, "generated ("), "'%s %s' reported success: %s", cmds[i], redirs[r], g_err);
    }
  ck_assert_int_eq(ortep_into_a_closed_pipe("generate --ep cpu --preset tiny --prompt-ids 1,2 --max-tokens 400 "
                                            "--ignore-eos"),
                   1);
  ck_assert_msg(strstr(g_err, "Broken pipe") && strstr(g_err, "stopped at the failed write, after 1 token\n"), "%s",
                g_err);
  ck_assert_int_eq(ortep_into_a_closed_pipe("tokenize --preset tiny --text hello"), 1);
  ck_assert_msg(strstr(g_err, "Broken pipe"), "%s", g_err);
}
END_TEST

/* 4: stdin that cannot be read (a directory, a closed descriptor) is an
 * error, not an empty text. */
START_TEST(unreadable_input_is_an_error) {
  const char *cmds[] = {"tokenize --preset tiny", "detokenize --preset tiny"};
  const char *redirs[] = {"</ >/dev/null", "<&- >/dev/null"};
  for (int i = 0; i < 2; i++)
    for (int r = 0; r < 2; r++) {
      ck_assert_msg(ortep_redirected(cmds[i], redirs[r]) == 1, "'%s %s' did not exit 1", cmds[i], redirs[r]);
      ck_assert_msg(strstr(g_err, "cannot read stdin"), "'%s %s': %s", cmds[i], redirs[r], g_err);
    }
}
END_TEST

/* --weights-cache DIR writes the prepared weights there, off writes none;
 * writing removes what no build can use (here a temporary file whose writer
 * is gone) and says so; --weights-cache-max takes byte counts. */
START_TEST(the_weights_cache_is_where_it_is_asked_to_be) {
  char cache[128], dead[256], cmd[512];
  snprintf(cache, sizeof cache, "%s/wc", g_tmp);
  const char *gen = "generate --ep cpu --preset small --dtype q8_0 --prompt-ids 1,2 --max-tokens 2";
  snprintf(cmd, sizeof cmd, "%s --weights-cache off", gen);
  ck_assert_msg(ortep(cmd, NULL) == 0, "%s", g_err);
  ck_assert(access(cache, F_OK) != 0);
  pid_t child = fork(); /* a writer that is gone */
  ck_assert_int_ge(child, 0);
  if (child == 0) _exit(0);
  ck_assert_int_eq(waitpid(child, NULL, 0), child);
  ck_assert_int_eq(mkdir(cache, 0755), 0);
  snprintf(dead, sizeof dead, "%s/0123456789abcdef.ortepw.%ld.tmp", cache, (long)child);
  FILE *f = fopen(dead, "w");
  ck_assert_ptr_nonnull(f);
  fputs("partial", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s --weights-cache %s --weights-cache-max 64GiB", gen, cache);
  ck_assert_msg(ortep(cmd, NULL) == 0, "%s", g_err);
  ck_assert_msg(strstr(g_err, "weights cache: removed 1 file (0.0 MB) that no build can use again"), "%s", g_err);
  ck_assert(access(dead, F_OK) != 0);
  snprintf(cmd, sizeof cmd, "test $(ls %s | grep -c '[.]ortepw$') -eq 1", cache);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s --weights-cache %s --weights-cache-max unlimited", gen, cache);
  ck_assert_msg(ortep(cmd, NULL) == 0, "%s", g_err);
  ck_assert_msg(!strstr(g_err, "weights cache"), "%s", g_err); /* a hit: nothing to say */
}
END_TEST

/* 5: the cache is sized from the request: 2 + 510 fits the tiny preset's
 * 512 positions exactly; more generates until the context is full and says
 * so; a prompt longer than the context is refused naming both. */
START_TEST(the_context_is_sized_from_the_request) {
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt-ids 1,2 --max-tokens 510 --ignore-eos", NULL) == 0,
                "%s", g_err);
  ck_assert_msg(strstr(g_err, "510 generated (--max-tokens reached)"), "%s", g_err);
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt-ids 1,2 --max-tokens 600 --ignore-eos", NULL) == 0,
                "%s", g_err);
  ck_assert_msg(strstr(g_err, "511 generated (the model's context is full)"), "%s", g_err);
  static char args[8192];
  int w = snprintf(args, sizeof args, "generate --ep cpu --preset tiny --prompt-ids ");
  for (int i = 0; i < 513; i++) w += snprintf(args + w, sizeof args - (size_t)w, "%s7", i ? "," : "");
  ck_assert_int_eq(ortep(args, NULL), 2);
  ck_assert_msg(strstr(g_err, "the prompt has 513 tokens but the model's context holds 512 positions"), "%s", g_err);
  ck_assert_msg(!strstr(g_err, "max_seq_len"), "names an option the CLI lacks: %s", g_err);
}
END_TEST

/* 6 (the program's side): the tokenizer is checked against the model's
 * vocabulary: a larger one is refused naming both; a smaller one (a padded
 * model vocabulary) generates, ids without a token adding no text. */
START_TEST(tokenizer_and_model_must_agree) {
  char dir[128], cmd[1024], args[512];
  snprintf(dir, sizeof dir, "%s/model", g_tmp);
  ck_assert_ok(ortep_model_write_synthetic(dir, "tiny", ORTEP_DTYPE_F32, 1));
  snprintf(cmd, sizeof cmd, "cp %s/bytelevel_tokenizer.json %s/tokenizer.json", ORTEP_TEST_DATA, dir);
  ck_assert_int_eq(system(cmd), 0); /* 268 ids beside a vocabulary of 512 */
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt hello --max-tokens 40 --ignore-eos", dir);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  ck_assert_msg(strstr(g_err, "40 generated"), "%s", g_err);
  snprintf(args, sizeof args, "detokenize --model %s 259 400 264", dir);
  ck_assert_msg(ortep(args, NULL) == 0, "%s", g_err);
  ck_assert_str_eq(g_out, "hello world\n");
  snprintf(cmd, sizeof cmd, "sed -i 's/\"vocab_size\":[[:space:]]*512/\"vocab_size\": 200/' %s/config.json", dir);
  ck_assert_int_eq(system(cmd), 0); /* now the tokenizer is the larger */
  snprintf(args, sizeof args, "tokenize --model %s --text hello", dir);
  ck_assert_int_eq(ortep(args, NULL), 1);
  ck_assert_msg(strstr(g_err, "268 token ids but the model's vocabulary has 200"), "%s", g_err);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt hello", dir);
  ck_assert_int_eq(ortep(args, NULL), 1);
  ck_assert_msg(strstr(g_err, "268 token ids but the model's vocabulary has 200"), "%s", g_err);
}
END_TEST

/* 11: messages that send a program's user the right way. */
START_TEST(messages_speak_to_the_programs_user) {
  ck_assert_int_eq(ortep("generate --ep cpu --preset tiny --prompt-ids 1,600", NULL), 2);
  ck_assert_msg(strstr(g_err, "id 600 (number 2) is outside the model's vocabulary (ids 0 to 511)"), "%s", g_err);
  ck_assert_msg(!strstr(g_err, "ortep_decoder_reset"), "an API call named to a program's user: %s", g_err);
  char fifo[96], args[256];
  snprintf(fifo, sizeof fifo, "%s/fifo", g_tmp);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  snprintf(args, sizeof args, "generate --ep cpu --model %s --prompt-ids 1", fifo);
  ck_assert_int_eq(ortep(args, NULL), 1);
  ck_assert_msg(strstr(g_err, "is a FIFO, not a directory"), "%s", g_err);
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt-ids 1 --max-tokens 2", NULL) == 0, "%s", g_err);
  ck_assert_msg(strstr(g_err, "[1 prompt token, 2 generated"), "%s", g_err);
  ck_assert_msg(ortep("generate --ep cpu --preset tiny --prompt-ids 1,2 --max-tokens 3 --threads 1 --weights read "
                      "--layout row_major",
                      NULL) == 0,
                "%s", g_err);
  /* options after the ids are options */
  ck_assert_msg(ortep("detokenize --preset tiny 72 105 511 --skip-special", NULL) == 0, "%s", g_err);
  ck_assert_str_eq(g_out, "Hi\n");
  ck_assert_int_eq(ortep("detokenize --preset tiny 72 --bogus", NULL), 2);
  ck_assert_msg(strstr(g_err, "unknown option '--bogus'"), "%s", g_err);
}
END_TEST

/* Starts a child whose stderr is fd running a slow step (begun 2 s ago)
 * through the programs' progress callback: 1001 calls, 0 to 1000 of 1000
 * done. Returns its pid. */
static pid_t progress_of_a_slow_step_into(int fd) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fd, 2);
    tool_model m = {.prog = "ortep", .cmd = "generate"};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m.progress_t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - 2.0;
    for (size_t done = 0; done <= 1000; done++) tool_progress(&m, "preparing the weights", done, 1000);
    _exit(0);
  }
  return pid;
}

static void exits_0(pid_t pid) {
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The progress of a slow step: on a terminal, a redraw only when the
 * percentage changes (101, not one a call); into a log file, one line when
 * it is done, no carriage returns. A fast step says nothing. */
START_TEST(progress_is_drawn_on_a_terminal_and_one_line_in_a_log) {
  char path[128];
  static char log[1 << 16]; /* a redraw a call would be 44 kB */
  snprintf(path, sizeof path, "%s/progress.txt", g_tmp);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  exits_0(progress_of_a_slow_step_into(fd));
  close(fd);
  slurp("progress.txt", log, sizeof log);
  ck_assert_msg(strncmp(log, "ortep generate: preparing the weights: done (2.", 46) == 0, "'%.300s'", log);
  ck_assert_msg(!strchr(log, '\r') && strchr(log, '\n') == log + strlen(log) - 1, "'%.300s'", log);

  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ck_assert_int_ge(master, 0);
  ck_assert(grantpt(master) == 0 && unlockpt(master) == 0);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  ck_assert_int_ge(slave, 0);
  struct termios raw;
  ck_assert_int_eq(tcgetattr(slave, &raw), 0);
  cfmakeraw(&raw); /* no \n -> \r\n */
  ck_assert_int_eq(tcsetattr(slave, TCSANOW, &raw), 0);
  pid_t writer = progress_of_a_slow_step_into(slave);
  close(slave); /* the child's copy is the last: reads end (EIO) when it exits */
  size_t n = 0;
  for (ssize_t got; n < sizeof log - 1 && (got = read(master, log + n, sizeof log - 1 - n)) > 0;) n += (size_t)got;
  log[n] = '\0';
  close(master);
  exits_0(writer);
  int redraws = 0;
  for (const char *c = log; (c = strchr(c, '\r')); c++) redraws++;
  ck_assert_msg(redraws == 101, "%d redraws in %zu bytes: '%.300s'", redraws, n, log);
  ck_assert_msg(strstr(log, "\rortep generate: preparing the weights: 100% (2."), "'%.300s'", log + n - 100);
  ck_assert_msg(strchr(log, '\n') == log + n - 1, "'%.300s'", log + n - 100);

  /* a fast step: nothing */
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    tool_model m = {.prog = "ortep", .cmd = "generate"};
    for (size_t done = 0; done <= 10; done++) tool_progress(&m, "preparing the weights", done, 10);
    _exit(0);
  }
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
  close(fd);
  slurp("progress.txt", log, sizeof log);
  ck_assert_msg(log[0] == '\0', "'%.300s'", log);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, version_names_the_openblas_kernels_and_a_restart_keeps_stdin);
  tcase_add_test(tc, version_names_the_cpu_eps_dot_products);
  tcase_add_test(tc, usage_errors_exit_2_and_name_the_argument);
  tcase_add_test(tc, generate_streams_text_and_sampling_is_reproducible);
  tcase_add_test(tc, tokens_per_launch_changes_no_text);
  tcase_add_test(tc, tokenize_and_detokenize_round_trip);
  tcase_add_test(tc, a_gguf_file_generates_like_its_directory);
  tcase_add_test(tc, a_model_without_a_tokenizer_takes_ids);
  tcase_add_test(tc, tiny_sampling_parameters_draw_real_tokens);
  tcase_add_test(tc, integer_options_are_parsed_as_integers);
  tcase_add_test(tc, lost_output_fails_the_command);
  tcase_add_test(tc, unreadable_input_is_an_error);
  tcase_add_test(tc, the_context_is_sized_from_the_request);
  tcase_add_test(tc, the_weights_cache_is_where_it_is_asked_to_be);
  tcase_add_test(tc, tokenizer_and_model_must_agree);
  tcase_add_test(tc, messages_speak_to_the_programs_user);
  tcase_add_test(tc, progress_is_drawn_on_a_terminal_and_one_line_in_a_log);
  suite_add_tcase(s, tc);
  return test_run(s);
}
