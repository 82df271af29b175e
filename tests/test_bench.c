/* test_bench.c: ortep-bench as a user runs it: argument errors exit 2 naming
 * the argument; --help works for every command; a tiny decode run completes
 * in each mode and writes JSON with the documented fields; a disagreement
 * between modes (forced by the ORTEP_BENCH_PERTURB test hook) exits 1. */
#include <cjson/cJSON.h>
#include <sys/wait.h>

#include "testutil.h"

static char g_tmp[64];

/* Runs ortep-bench with args; returns its exit code; stderr into err. */
static int bench(const char *env, const char *args, char *err, size_t errlen) {
  char cmd[4096], errfile[128];
  snprintf(errfile, sizeof errfile, "%s/stderr.txt", g_tmp);
  snprintf(cmd, sizeof cmd, "env XDG_CACHE_HOME=%s/cache %s %s %s >%s/stdout.txt 2>%s", g_tmp, env ? env : "",
           ORTEP_BENCH_PATH, args, g_tmp, errfile);
  int st = system(cmd);
  ck_assert_msg(WIFEXITED(st), "ortep-bench did not exit normally: %s", cmd);
  if (err) {
    FILE *f = fopen(errfile, "r");
    size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
  }
  return WEXITSTATUS(st);
}

static cJSON *read_json(const char *name) {
  char path[128], buf[1 << 16];
  snprintf(path, sizeof path, "%s/%s", g_tmp, name);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "no JSON written at %s", path);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *j = cJSON_Parse(buf);
  ck_assert_msg(j != NULL, "invalid JSON in %s", path);
  return j;
}

/* What the last bench() printed on stdout (up to 1 MiB). */
static const char *stdout_text(void) {
  static char buf[1 << 20];
  char path[128];
  snprintf(path, sizeof path, "%s/stdout.txt", g_tmp);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  return buf;
}

static void has(const cJSON *o, const char *key) {
  ck_assert_msg(cJSON_GetObjectItemCaseSensitive(o, key) != NULL, "JSON lacks '%s'", key);
}

START_TEST(argument_errors_exit_2_and_name_the_argument) {
  char err[4096];
  struct {
    const char *args, *needle;
  } cases[] = {
      {"decode --tokens many", "--tokens 'many'"},
      {"decode --mode turbo", "--mode 'turbo'"},
      {"decode --ep tpu", "--ep 'tpu'"},
      {"decode --dtype f8", "--dtype 'f8'"},
      {"decode --preset huge", "--preset 'huge'"},
      {"decode --frobnicate", "unknown option '--frobnicate'"},
      {"decode --model /x --preset tiny", "exclude"},
      {"decode stray", "unexpected argument 'stray'"},
      {"decode --runs", "needs a value"},
      {"alloc --runs 0", "--runs '0'"},
      {"replay --nodes -3", "--nodes '-3'"},
      {"warp", "unknown command 'warp'"},
      {"prefill --lengths 0", "--lengths '0'"},
      {"prefill --lengths 8,x", "--lengths '8,x'"},
      {"prefill --chunk 1", "--chunk '1'"},
      {"prefill --preset huge", "--preset 'huge'"},
      {"prefill --ep cpu --lengths 600", "max_position_embeddings 512"},
      {"decode --layout diagonal", "--layout 'diagonal' is not one of auto, blocked, row_major"},
      {"prefill --layout rows", "--layout 'rows' is not one of auto, blocked, row_major"},
      {"prefill --products fast", "--products 'fast' is not one of auto, bf16, f32"},
      {"batch --batches 0", "--batches '0' is not a whole number in [1, 64]"},
      {"batch --system -1", "--system '-1'"},
      {"decode --threads 0", "--threads '0' is not a whole number in [1, 1024]"},
      {"decode --tokens-per-launch 4,65", "--tokens-per-launch '65'"},
      {"decode --dtype bf16,f8", "--dtype 'f8'"},
      {"decode --dtype bf16,q8_0,bf16", "--dtype lists 'bf16' twice"},
      {"decode --dtype bf16,", "--dtype 'bf16,' has an empty entry"},
      {"decode --dtype bf16,,q8_0", "has an empty entry"},
      {"decode --dtype ,", "has an empty entry"},
      {"decode --dtype f32,f16,bf16,q8_0,q4_0,f32", "at most 5 types"},
      {"decode --dtype bf16,q8_0 --mode eager", "graph mode only; drop --mode eager"},
      {"decode --dtype bf16,q8_0 --profile", "--profile goes with one type"},
      {"decode --dtype bf16,q8_0 --tokens-per-launch 4", "--tokens-per-launch goes with one type"},
      {"decode --dtype f32,bf16 --embedding-dtype q4_0", "--embedding-dtype goes with a q8_0 or q4_0 type"},
      {"prefill --threads 2000", "--threads '2000'"},
      {"prefill --dtype bf16,q8_0,bf16", "--dtype lists 'bf16' twice"},
      {"prefill --dtype bf16,,q4_0", "has an empty entry"},
      {"prefill --dtype bf16,q8_0 --profile", "--profile goes with one type"},
      {"tokenizer --added 10,0", "--added '0'"},
      {"tokenizer --text-bytes 1.5", "--text-bytes '1.5'"},
      {"kv --forks 0", "--forks '0'"},
      {"kv --positions 16,x", "--positions 'x'"},
      {"kv --preset huge", "--preset 'huge'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_int_eq(bench(NULL, cases[i].args, err, sizeof err), 2);
    ck_assert_msg(strstr(err, cases[i].needle), "'%s': stderr '%s' lacks '%s'", cases[i].args, err, cases[i].needle);
  }
  ck_assert_int_eq(bench(NULL, "", err, sizeof err), 2);
}
END_TEST

START_TEST(help_for_every_command) {
  const char *cmds[] = {"--help",         "decode --help",    "alloc --help", "replay --help",
                        "prefill --help", "tokenizer --help", "kv --help",    "batch --help"};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) ck_assert_int_eq(bench(NULL, cmds[i], NULL, 0), 0);
}
END_TEST

START_TEST(decode_runs_every_mode_and_writes_the_documented_json) {
  char err[4096];
  char args[256];
  snprintf(args, sizeof args, "decode --ep cpu --tokens 6 --runs 2 --warmup 1 --prompt-len 3 --json %s/decode.json",
           g_tmp);
  /* a cache of 1 GiB through the test hook: whether the tiny model's weights
   * fit is otherwise measured, and a loaded machine may blur that */
  ck_assert_msg(bench("ORTEP_BENCH_CACHE_BYTES=1073741824", args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("decode.json");
  const char *top[] = {"command",      "machine",      "build",
                       "ep",           "model",        "prompt_token_ids",
                       "modes",        "tokens_agree", "speedup_graph_over_eager",
                       "weight_bytes", "tokens",       "runs"};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) has(j, top[i]);
  has(cJSON_GetObjectItem(j, "machine"), "cpu");
  has(cJSON_GetObjectItem(j, "build"), "git_revision");
  has(cJSON_GetObjectItem(j, "build"), "cuda");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "ep")->valuestring, "cpu_ep");
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "tokens_agree")));
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "prompt_token_ids")), 3);
  /* K tokens per launch (default 1, 4, 16): the same tokens (tokens_agree),
   * fewer launches per call as K grows: 5 steps for 6 tokens */
  const cJSON *per = cJSON_GetObjectItem(j, "tokens_per_launch");
  ck_assert_int_eq(cJSON_GetArraySize(per), 3);
  static const double launches[] = {5, 2, 1};
  for (int i = 0; i < 3; i++) {
    const cJSON *e = cJSON_GetArrayItem(per, i);
    ck_assert_double_gt(cJSON_GetObjectItem(e, "tokens_per_s")->valuedouble, 0);
    ck_assert_double_eq(cJSON_GetObjectItem(e, "launches_per_call")->valuedouble, launches[i]);
  }
  const cJSON *modes = cJSON_GetObjectItem(j, "modes");
  const char *names[] = {"eager", "graph", "segmented"};
  const char *fields[] = {"tokens_per_s",
                          "ttft_ms",
                          "prefill_tokens_per_s",
                          "weight_bytes_per_s",
                          "latency_p50_us",
                          "latency_p90_us",
                          "latency_p99_us",
                          "latency_max_us",
                          "host_cpu_us_per_token",
                          "host_launch_us_per_token",
                          "kernels_per_token",
                          "graph_kernel_nodes",
                          "segments",
                          "seams",
                          "seam_reasons",
                          "allocations_per_step",
                          "planned_arena_bytes",
                          "lower_bound_bytes",
                          "naive_sum_bytes",
                          "kv_reserved_bytes",
                          "kv_committed_bytes",
                          "token_ids"};
  for (int m = 0; m < 3; m++) {
    const cJSON *o = cJSON_GetObjectItem(modes, names[m]);
    ck_assert_msg(o != NULL, "mode %s missing", names[m]);
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) has(o, fields[f]);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "token_ids")), 6);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "allocations_per_step")->valuedouble, 0.0);
  }
  ck_assert_int_eq((int)cJSON_GetObjectItem(cJSON_GetObjectItem(modes, "segmented"), "seams")->valuedouble, 2);
  has(j, "bandwidth_bound");
  const cJSON *bb = cJSON_GetObjectItem(j, "bandwidth_bound");
  has(bb, "read_bytes_per_s");
  has(bb, "threads");
  /* the tiny model's weights fit in cache: no read beside the runs (it would
   * evict them), the bound is the best read pass */
  ck_assert_str_eq(cJSON_GetObjectItem(bb, "read")->valuestring, "best_pass");
  ck_assert_double_eq(cJSON_GetObjectItem(bb, "read_bytes_per_s")->valuedouble,
                      cJSON_GetObjectItem(bb, "peak_read_bytes_per_s")->valuedouble);
  ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(modes, "graph"), "fraction_of_read_before_runs"));
  /* the Linear kernel alone, over the model's weight dtype and hidden size
   * (tiny: f32, 64); its decode fraction only where the bound binds, and the
   * tiny model's weights fit in cache */
  const cJSON *lin = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "bandwidth_bound"), "linear_kernel");
  ck_assert_msg(lin != NULL, "bandwidth_bound.linear_kernel missing");
  ck_assert_str_eq(cJSON_GetObjectItem(lin, "dtype")->valuestring, "f32");
  ck_assert_int_eq((int)cJSON_GetObjectItem(lin, "k")->valuedouble, 64);
  ck_assert_int_eq((long long)cJSON_GetObjectItem(lin, "rows")->valuedouble, (512LL << 20) / (64 * 4));
  ck_assert(cJSON_GetObjectItem(lin, "read_bytes_per_s")->valuedouble > 0);
  ck_assert(cJSON_GetObjectItem(lin, "fraction_of_read")->valuedouble > 0);
  ck_assert_ptr_null(cJSON_GetObjectItem(lin, "decode_fraction_of_kernel"));
  cJSON_Delete(j);
}
END_TEST

/* Where the weights outgrow the cache (here: a cache of 0 bytes, through
 * the test hook), a read of as many bytes goes before each timed run and
 * each run is set against it; the peak read and the kernel alone are still
 * reported, and decode over the kernel is the ratio of the two fractions. */
START_TEST(a_binding_bound_is_read_before_each_run) {
  char err[4096], args[256];
  snprintf(args, sizeof args, "decode --ep cpu --mode all --tokens 4 --runs 3 --warmup 0 --json %s/bind.json", g_tmp);
  ck_assert_msg(bench("ORTEP_BENCH_CACHE_BYTES=0", args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("bind.json");
  const cJSON *bb = cJSON_GetObjectItem(j, "bandwidth_bound"), *modes = cJSON_GetObjectItem(j, "modes");
  ck_assert_ptr_nonnull(bb);
  ck_assert_str_eq(cJSON_GetObjectItem(bb, "read")->valuestring, "before_each_run");
  const char *names[] = {"eager", "graph", "segmented"};
  for (int m = 0; m < 3; m++) {
    const cJSON *o = cJSON_GetObjectItem(modes, names[m]);
    ck_assert_msg(cJSON_GetObjectItem(o, "read_before_runs_bytes_per_s")->valuedouble > 0, "%s", names[m]);
    ck_assert_msg(cJSON_GetObjectItem(o, "fraction_of_read_before_runs")->valuedouble > 0, "%s", names[m]);
  }
  const cJSON *graph = cJSON_GetObjectItem(modes, "graph");
  double frac = cJSON_GetObjectItem(bb, "fraction_achieved")->valuedouble;
  ck_assert_double_eq(frac, cJSON_GetObjectItem(graph, "fraction_of_read_before_runs")->valuedouble);
  ck_assert_double_eq(cJSON_GetObjectItem(bb, "read_bytes_per_s")->valuedouble,
                      cJSON_GetObjectItem(graph, "read_before_runs_bytes_per_s")->valuedouble);
  double peak = cJSON_GetObjectItem(bb, "peak_read_bytes_per_s")->valuedouble;
  ck_assert(peak > 0);
  ck_assert_double_eq_tol(cJSON_GetObjectItem(bb, "fraction_of_peak")->valuedouble,
                          cJSON_GetObjectItem(graph, "weight_bytes_per_s")->valuedouble / peak, 1e-9);
  const cJSON *lin = cJSON_GetObjectItem(bb, "linear_kernel");
  ck_assert_ptr_nonnull(lin);
  ck_assert_double_eq_tol(cJSON_GetObjectItem(lin, "decode_fraction_of_kernel")->valuedouble,
                          frac / cJSON_GetObjectItem(lin, "fraction_of_read")->valuedouble, 1e-9);
  cJSON_Delete(j);
  ck_assert_msg(strstr(stdout_text(), "right before it") && strstr(stdout_text(), "peak read:"), "%.3000s",
                stdout_text());
}
END_TEST

/* --threads sets the CPU EP's workers (the bound is measured with as many);
 * --profile adds the time per token by op type, every op of the graph. */
START_TEST(threads_and_profile) {
  char err[4096], args[256];
  snprintf(args, sizeof args,
           "decode --ep cpu --mode graph --tokens 4 --runs 1 --warmup 0 --threads 3 --profile --json %s/p.json", g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("p.json");
  ck_assert_int_eq((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "bandwidth_bound"), "threads")->valuedouble, 3);
  /* the dot products the CPU EP used, one of the sets ORTEP_CPU_SIMD names */
  const cJSON *simd = cJSON_GetObjectItem(j, "cpu_simd");
  ck_assert_msg(cJSON_IsString(simd) && (!strcmp(simd->valuestring, "avx512") || !strcmp(simd->valuestring, "avx2") ||
                                         !strcmp(simd->valuestring, "portable")),
                "cpu_simd missing or unknown");
  const cJSON *prof = cJSON_GetObjectItem(j, "profile_us_per_token");
  ck_assert_ptr_nonnull(prof);
  const char *ops[] = {"Linear",
                       "GroupQueryAttention",
                       "RotaryEmbedding",
                       "SimplifiedLayerNormalization",
                       "SkipSimplifiedLayerNormalization",
                       "Embedding",
                       "SelectToken"};
  for (size_t i = 0; i < 7; i++) {
    const cJSON *v = cJSON_GetObjectItem(prof, ops[i]);
    ck_assert_msg(v && v->valuedouble >= 0, "profile lacks %s", ops[i]);
  }
  cJSON_Delete(j);
  ck_assert_int_eq(bench(NULL, "decode --threads 0", err, sizeof err), 2);
  ck_assert_msg(strstr(err, "--threads '0'"), "%s", err);
}
END_TEST

START_TEST(single_modes_and_explain) {
  char err[4096];
  ck_assert_int_eq(bench(NULL, "decode --ep cpu --mode graph --tokens 4 --runs 1 --warmup 0 --prompt-len 2 --explain",
                         err, sizeof err),
                   0);
  const char *buf = stdout_text();
  /* the decode graph, then each prefill chunk's */
  ck_assert_msg(strstr(buf, "[graph] graph 0 of") && strstr(buf, "segment 0") && strstr(buf, "graph 1 of"), "%.2000s",
                buf);
  ck_assert_msg(!strstr(buf, "eager  "), "only graph mode should run");
}
END_TEST

START_TEST(disagreement_between_modes_is_an_error) {
  char err[4096];
  int rc = bench("ORTEP_BENCH_PERTURB=segmented", "decode --ep cpu --tokens 6 --runs 1 --warmup 0 --prompt-len 2", err,
                 sizeof err);
  ck_assert_int_eq(rc, 1);
  ck_assert_msg(strstr(err, "disagree"), "%s", err);
}
END_TEST

/* A --seam naming nothing in the graph is a usage error listing its op
 * types; an unwritable --json fails before the run, not after it. */
START_TEST(unknown_seams_and_unwritable_json_fail_up_front) {
  char err[4096];
  ck_assert_int_eq(
      bench(NULL, "decode --ep cpu --mode segmented --seam NoSuchOp --tokens 2 --runs 1 --warmup 0", err, sizeof err),
      2);
  ck_assert_msg(strstr(err, "forced seam 'NoSuchOp' names no op type or node") && strstr(err, "GroupQueryAttention"),
                "%s", err);
  ck_assert_int_eq(bench(NULL, "decode --ep cpu --tokens 4 --runs 1 --json /nonexistent/dir/d.json", err, sizeof err),
                   1);
  ck_assert_msg(strstr(err, "cannot write --json /nonexistent/dir/d.json"), "%s", err);
  ck_assert_msg(!strstr(err, "token"), "the run should not have started: %s", err);
}
END_TEST

/* ORTEP_CPU_SIMD naming a set this CPU lacks is a failure to start (exit 1,
 * the variable named), not a usage error: nothing on the command line is
 * wrong. ORTEP_CPU_HIDE makes any CPU one without AVX-512 (this test once
 * judged by the set the EP had picked, and so expected a refusal on an
 * AVX-512 machine run with ORTEP_CPU_SIMD=avx2). */
START_TEST(a_cpu_simd_set_the_cpu_lacks_exits_1) {
  char err[4096];
  ck_assert_int_eq(bench("ORTEP_CPU_HIDE=avx512 ORTEP_CPU_SIMD=avx512",
                         "decode --ep cpu --tokens 2 --runs 1 --warmup 0", err, sizeof err),
                   1);
  ck_assert_msg(strstr(err, "ORTEP_CPU_SIMD=avx512") && strstr(err, "unset ORTEP_CPU_SIMD") && !strstr(err, "--help"),
                "%s", err);
  ck_assert_int_eq(
      bench("ORTEP_CPU_HIDE=avx512 ORTEP_CPU_SIMD=avx512", "prefill --ep cpu --lengths 4 --runs 1", err, sizeof err),
      1);
  ck_assert_msg(strstr(err, "ORTEP_CPU_SIMD=avx512") && !strstr(err, "--help"), "%s", err);
}
END_TEST

/* An ORTEP_CPU_SIMD that names no set is a usage error (exit 2) in every
 * command that opens a decoder, with the sets it could have named. */
START_TEST(an_unknown_cpu_simd_name_is_a_usage_error) {
  char err[4096];
  const char *cmds[] = {"decode --ep cpu --tokens 2 --runs 1 --warmup 0", "prefill --ep cpu --lengths 4 --runs 1"};
  for (size_t i = 0; i < 2; i++) {
    ck_assert_int_eq(bench("ORTEP_CPU_SIMD=sse9", cmds[i], err, sizeof err), 2);
    ck_assert_msg(strstr(err, "ORTEP_CPU_SIMD='sse9'") && strstr(err, "avx2"), "%s: %s", cmds[i], err);
  }
}
END_TEST

/* ortep-bench batch on the tiny preset: one JSON entry per B with its
 * sequences, tokens/s, allocations per steady step (none) and GFLOP/s as a
 * fraction of the EP's own Linear rate (the GEMM peak, measured in the run),
 * the mixed workload, and the system-prompt workload: sharing holds less
 * KV and runs fewer prompt tokens than not sharing. */
START_TEST(batch_reports_every_batch_size) {
  char err[4096], args[256];
  snprintf(args, sizeof args, "batch --batches 1,2 --tokens 20 --runs 1 --mixed 2 --system 100 --json %s/bt.json",
           g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("bt.json");
  const cJSON *arr = cJSON_GetObjectItem(j, "batches");
  ck_assert_int_eq(cJSON_GetArraySize(arr), 2);
  for (int i = 0; i < 2; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    ck_assert_int_eq(cJSON_GetObjectItem(e, "sequences")->valueint, i + 1);
    ck_assert_double_gt(cJSON_GetObjectItem(e, "aggregate_tokens_per_s")->valuedouble, 0);
    ck_assert_double_eq(cJSON_GetObjectItem(e, "allocations_per_step")->valuedouble, 0);
    ck_assert_double_gt(cJSON_GetObjectItem(e, "fraction_of_gemm")->valuedouble, 0);
  }
  ck_assert_double_gt(cJSON_GetObjectItem(j, "gemm_peak_gflops")->valuedouble, 0);
  ck_assert_ptr_nonnull(cJSON_GetObjectItem(j, "mixed"));
  ck_assert_int_ge(cJSON_GetObjectItem(j, "captures")->valueint, 2); /* the buckets of 1 and 2, prompt chunks */
  const cJSON *sys = cJSON_GetObjectItem(j, "system_prompt");
  ck_assert_int_eq(cJSON_GetArraySize(sys), 2);
  const cJSON *on = cJSON_GetArrayItem(sys, 0), *off = cJSON_GetArrayItem(sys, 1);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(on, "prefix_sharing")));
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(off, "prefix_sharing")));
  ck_assert_double_gt(cJSON_GetObjectItem(on, "shared_tokens")->valuedouble, 0);
  ck_assert_double_eq(cJSON_GetObjectItem(off, "shared_tokens")->valuedouble, 0);
  ck_assert_double_lt(cJSON_GetObjectItem(on, "kv_peak_bytes")->valuedouble,
                      cJSON_GetObjectItem(off, "kv_peak_bytes")->valuedouble);
  ck_assert_double_lt(cJSON_GetObjectItem(on, "prompt_tokens_run")->valuedouble,
                      cJSON_GetObjectItem(off, "prompt_tokens_run")->valuedouble);
  cJSON_Delete(j);
  ck_assert_msg(strstr(stdout_text(), "of gemm: the EP Linear"), "%.2000s", stdout_text());
}
END_TEST

/* --products sets cpu.products: prefill reports which products ran (by
 * default bf16 x bf16 where this CPU has AVX512-BF16, f32 when asked) and
 * the EP's Linear rate for f32, f16 and bf16 weights beside the sgemm's. */
START_TEST(products_are_reported_and_honoured) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  bool can = ortep_cpu_ep_bf16_products(ep);
  ortep_ep_destroy(ep);
  char err[4096], args[256];
  const char *products[] = {"", "--products f32"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "prefill --ep cpu --dtype bf16 --lengths 4 --runs 1 %s --json %s/pp.json", products[i],
             g_tmp);
    ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
    cJSON *j = read_json("pp.json");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "bf16_products")) == (i == 0 && can));
    const cJSON *lin = cJSON_GetObjectItem(j, "linear_gflops");
    const char *dts[] = {"f32", "f16", "bf16"};
    for (int d = 0; d < 3; d++) ck_assert_double_gt(cJSON_GetObjectItem(lin, dts[d])->valuedouble, 0);
    cJSON_Delete(j);
    ck_assert_msg(strstr(stdout_text(), i == 0 && can ? "bf16 x bf16 with AVX512-BF16" : "(bf16 widened to f32)"),
                  "%.2000s", stdout_text());
  }
}
END_TEST

/* OpenBLAS's kernel set: where OpenBLAS fell back to its generic Prescott
 * kernels on a CPU that runs wider ones (ortep_cpu_blas_suggested_core, the
 * variable unset), ortep-bench starts again with OPENBLAS_CORETYPE naming
 * them, and its header and JSON say which set ran; a set the user names is
 * kept, even a slower one. */
char *openblas_get_config(void);
START_TEST(openblas_runs_the_kernels_this_cpu_can) {
  unsetenv("OPENBLAS_CORETYPE");
  const char *suggested = ortep_cpu_blas_suggested_core(), *core = ortep_cpu_blas_core();
  if (suggested) ck_assert_str_eq(core, "Prescott");
  char err[4096], args[256], want[128];
  snprintf(args, sizeof args, "decode --ep cpu --mode eager --tokens 2 --runs 1 --warmup 0 --json %s/blas.json", g_tmp);
  for (int user = 0; user < 2; user++) {
    ck_assert_msg(bench(user ? "OPENBLAS_CORETYPE=Prescott" : NULL, args, err, sizeof err) == 0, "%s", err);
    const char *ran = user ? "Prescott" : suggested ? suggested : core;
    bool dynamic = strstr(openblas_get_config(), "DYNAMIC_ARCH") != NULL;
    snprintf(want, sizeof want, "OpenBLAS %s%s\n", ran, user || suggested ? " (OPENBLAS_CORETYPE)" : "");
    if (!user || dynamic) /* a build for one CPU keeps its set whatever the variable says */
      ck_assert_msg(strstr(stdout_text(), want), "wanted '%s' in: %.300s", want, stdout_text());
    cJSON *j = read_json("blas.json");
    const cJSON *m = cJSON_GetObjectItem(j, "machine");
    if (!user || dynamic) ck_assert_str_eq(cJSON_GetObjectItem(m, "blas_core")->valuestring, ran);
    cJSON_Delete(j);
    ck_assert_msg(!strstr(err, "OPENBLAS_CORETYPE"), "a restart that should work warned: %s", err);
  }
  /* the variable set, there is nothing to suggest */
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  ck_assert_ptr_null(ortep_cpu_blas_suggested_core());
  unsetenv("OPENBLAS_CORETYPE");
}
END_TEST

/* --layout sets ortep.weights_layout: 16-bit weights on the CPU are blocked
 * by default, row-major when asked; decode measures the kernel alone in the
 * layout it ran with, and decode and prefill report the layout the decoder
 * holds. */
START_TEST(layout_is_reported_and_honoured) {
  char err[4096], args[256];
  const char *layouts[] = {"", "--layout row_major"}, *want[] = {"blocked", "row_major"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args,
             "decode --ep cpu --dtype bf16 --mode graph --tokens 2 --runs 1 --warmup 0 %s --json "
             "%s/layout.json",
             layouts[i], g_tmp);
    ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
    cJSON *j = read_json("layout.json");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "weights_layout")->valuestring, want[i]);
    const cJSON *lin = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "bandwidth_bound"), "linear_kernel");
    ck_assert_ptr_nonnull(lin);
    ck_assert_str_eq(cJSON_GetObjectItem(lin, "layout")->valuestring, want[i]);
    cJSON_Delete(j);
    ck_assert_msg(strstr(stdout_text(), i ? "row-major weights)" : "blocked weights)"), "%.2000s", stdout_text());
    snprintf(args, sizeof args, "prefill --ep cpu --dtype bf16 --lengths 4 --runs 1 %s --json %s/pl.json", layouts[i],
             g_tmp);
    ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
    j = read_json("pl.json");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "weights_layout")->valuestring, want[i]);
    cJSON_Delete(j);
  }
}
END_TEST

/* --dtype A,B,...: every type decoded in graph mode, in rounds that run each
 * once; the JSON holds each type's bytes per token (fewer for the block
 * types), its tokens/s and its ratio to the first type per round, and its
 * tokens; a directory's weights are named as stored or refused. */
START_TEST(decode_compares_weight_types_in_rounds) {
  char err[4096], args[512];
  snprintf(args, sizeof args,
           "decode --ep cpu --preset small --dtype bf16,q8_0,q4_0 --runs 2 --tokens 3 --warmup 0 --prompt-len 2 "
           "--json %s/types.json",
           g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(strstr(stdout_text(), "over bf16, per round"), "%.2000s", stdout_text());
  cJSON *j = read_json("types.json");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "mode")->valuestring, "graph");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "ep")->valuestring, "cpu_ep");
  const cJSON *types = cJSON_GetObjectItem(j, "dtypes");
  ck_assert_int_eq(cJSON_GetArraySize(types), 3);
  const char *want[] = {"bf16", "q8_0", "q4_0"};
  double bytes[3];
  for (int i = 0; i < 3; i++) {
    const cJSON *t = cJSON_GetArrayItem(types, i);
    ck_assert_str_eq(cJSON_GetObjectItem(t, "dtype")->valuestring, want[i]);
    bytes[i] = cJSON_GetObjectItem(t, "weight_bytes_per_token")->valuedouble;
    const cJSON *tps = cJSON_GetObjectItem(t, "tokens_per_s"), *over = cJSON_GetObjectItem(t, "over_first");
    ck_assert_int_eq(cJSON_GetArraySize(tps), 2);
    ck_assert_int_eq(cJSON_GetArraySize(over), 2);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "token_ids")), 3);
    for (int r = 0; r < 2; r++) {
      double v = cJSON_GetArrayItem(tps, r)->valuedouble,
             v0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(types, 0), "tokens_per_s"), r)->valuedouble;
      ck_assert_double_gt(v, 0);
      ck_assert_double_eq_tol(cJSON_GetArrayItem(over, r)->valuedouble, v / v0, 1e-9);
    }
  }
  ck_assert_msg(bytes[0] > bytes[1] && bytes[1] > bytes[2], "bytes per token %g, %g, %g", bytes[0], bytes[1], bytes[2]);
  cJSON_Delete(j);
  /* a round that draws other tokens than the first is an error, and the unfinished JSON goes */
  ck_assert_int_eq(bench("ORTEP_BENCH_PERTURB=rounds", args, err, sizeof err), 1);
  ck_assert_msg(strstr(err, "--dtype bf16: round 2 drew token"), "%s", err);
  char path[128];
  snprintf(path, sizeof path, "%s/types.json", g_tmp);
  ck_assert_int_ne(access(path, F_OK), 0);
  /* the preset's directory holds bf16: f32 is not what it would run */
  snprintf(args, sizeof args, "decode --ep cpu --model %s/cache/ortep/models/small-bf16 --dtype f32,q8_0 --runs 1",
           g_tmp);
  ck_assert_int_eq(bench(NULL, args, err, sizeof err), 2);
  ck_assert_msg(strstr(err, "holds its projections as bf16"), "%s", err);
}
END_TEST

/* prefill --dtype A,B,...: each type's chunked prefill per prompt length,
 * in rounds that run each once; the JSON holds every round's time and its
 * ratio to the first type's, and each type's next token, which must repeat
 * in every round (a perturbed round is an error and the JSON goes). */
START_TEST(prefill_compares_weight_types_in_rounds) {
  char err[4096], args[512];
  snprintf(args, sizeof args,
           "prefill --ep cpu --preset small --dtype bf16,q8_0,q4_0 --lengths 3,20 --runs 2 --json %s/ptypes.json",
           g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(strstr(stdout_text(), "over bf16, per round"), "%.2000s", stdout_text());
  cJSON *j = read_json("ptypes.json");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "command")->valuestring, "prefill");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "dtypes")), 3);
  const cJSON *res = cJSON_GetObjectItem(j, "results");
  ck_assert_int_eq(cJSON_GetArraySize(res), 2);
  const char *want[] = {"bf16", "q8_0", "q4_0"};
  for (int l = 0; l < 2; l++) {
    const cJSON *row = cJSON_GetArrayItem(res, l), *types = cJSON_GetObjectItem(row, "dtypes");
    ck_assert_int_eq((int)cJSON_GetObjectItem(row, "prompt_tokens")->valuedouble, l ? 20 : 3);
    ck_assert_int_eq(cJSON_GetArraySize(types), 3);
    const cJSON *first = cJSON_GetObjectItem(cJSON_GetArrayItem(types, 0), "chunked_ms");
    for (int i = 0; i < 3; i++) {
      const cJSON *t = cJSON_GetArrayItem(types, i), *ms = cJSON_GetObjectItem(t, "chunked_ms"),
                  *over = cJSON_GetObjectItem(t, "over_first");
      ck_assert_str_eq(cJSON_GetObjectItem(t, "dtype")->valuestring, want[i]);
      ck_assert_int_eq(cJSON_GetArraySize(ms), 2);
      ck_assert_int_eq(cJSON_GetArraySize(over), 2);
      ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(t, "next_token")));
      for (int r = 0; r < 2; r++) {
        double v = cJSON_GetArrayItem(ms, r)->valuedouble, v0 = cJSON_GetArrayItem(first, r)->valuedouble;
        ck_assert_double_gt(v, 0);
        ck_assert_double_eq_tol(cJSON_GetArrayItem(over, r)->valuedouble, v0 / v, 1e-9);
      }
    }
  }
  cJSON_Delete(j);
  ck_assert_int_eq(bench("ORTEP_BENCH_PERTURB=rounds", args, err, sizeof err), 1);
  ck_assert_msg(strstr(err, "--dtype bf16, a prompt of 3 tokens: round 2 drew token"), "%s", err);
  char path[128];
  snprintf(path, sizeof path, "%s/ptypes.json", g_tmp);
  ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(alloc_replay_and_tokenizer_write_json) {
  char err[4096], args[256];
  snprintf(args, sizeof args, "alloc --runs 1 --steps 5 --json %s/alloc.json", g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("alloc.json");
  has(j, "patterns");
  has(j, "planner");
  has(j, "targets");
  cJSON_Delete(j);
  snprintf(args, sizeof args, "replay --nodes 50 --runs 2 --iters 5 --json %s/replay.json", g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  j = read_json("replay.json");
  has(j, "eager_ns_per_node");
  has(j, "replay_ns_per_node");
  cJSON_Delete(j);
  snprintf(args, sizeof args, "tokenizer --added 100,2000 --text-bytes 5000 --runs 1 --json %s/tok.json", g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  j = read_json("tok.json");
  cJSON *counts = cJSON_GetObjectItem(j, "counts");
  ck_assert_int_eq(cJSON_GetArraySize(counts), 2);
  has(cJSON_GetArrayItem(counts, 1), "open_ms");
  has(cJSON_GetArrayItem(counts, 1), "encode_ms");
  cJSON_Delete(j);
  /* kv: the memory rows say committed grows with the positions held, under the reservation */
  snprintf(args, sizeof args, "kv --ep cpu --positions 16,200,9000 --runs 1 --tokens 4 --forks 3 --json %s/kv.json",
           g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  j = read_json("kv.json");
  cJSON *mem = cJSON_GetObjectItem(j, "memory");
  ck_assert_int_eq(cJSON_GetArraySize(mem), 2); /* 9000 is past the tiny preset's context: skipped */
  double c0 = cJSON_GetObjectItem(cJSON_GetArrayItem(mem, 0), "committed_bytes")->valuedouble;
  double c1 = cJSON_GetObjectItem(cJSON_GetArrayItem(mem, 1), "committed_bytes")->valuedouble;
  double r1 = cJSON_GetObjectItem(cJSON_GetArrayItem(mem, 1), "reserved_bytes")->valuedouble;
  ck_assert_msg(c0 > 0 && c0 < c1 && c1 < r1, "committed %g then %g of %g reserved", c0, c1, r1);
  has(cJSON_GetObjectItem(j, "speed"), "whole_context_tokens_per_s");
  has(cJSON_GetObjectItem(j, "chat"), "turn_ms");
  cJSON *forks = cJSON_GetObjectItem(j, "forks");
  ck_assert_double_eq(cJSON_GetObjectItem(forks, "forks")->valuedouble, 3);
  ck_assert_double_gt(cJSON_GetObjectItem(forks, "shared_bytes")->valuedouble, 0);
  cJSON_Delete(j);
  snprintf(args, sizeof args, "replay --nodes 5 --runs 1 --iters 1 --json /nonexistent/dir/x.json");
  ck_assert_int_eq(bench(NULL, args, err, sizeof err), 1);
  ck_assert_msg(strstr(err, "cannot write --json /nonexistent/dir/x.json"), "%s", err);
}
END_TEST

static void setup(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/ortep-bench-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}
static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
  ck_assert_int_eq(system(cmd), 0);
}

/* prefill: token by token and chunked side by side per prompt length, the
 * same next token, the documented JSON. */
START_TEST(prefill_compares_token_by_token_with_chunks) {
  char err[4096], args[256];
  snprintf(args, sizeof args, "prefill --ep cpu --lengths 5,40 --runs 1 --profile --json %s/prefill.json", g_tmp);
  ck_assert_msg(bench(NULL, args, err, sizeof err) == 0, "%s", err);
  cJSON *j = read_json("prefill.json");
  const char *top[] = {"machine",     "build",        "model",        "ep",      "threads",   "cpu_simd",
                       "chunk_sizes", "chunk_graphs", "sgemm_gflops", "results", "profile_ms"};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) has(j, top[i]);
  const cJSON *rows = cJSON_GetObjectItem(j, "results");
  ck_assert_int_eq(cJSON_GetArraySize(rows), 2);
  const char *fields[] = {"prompt_tokens",        "by_token_ms",       "chunked_ms",     "by_token_tokens_per_s",
                          "chunked_tokens_per_s", "speedup",           "chunked_gflops", "fraction_of_sgemm",
                          "same_next_token",      "max_rel_logit_diff"};
  for (int r = 0; r < 2; r++) {
    const cJSON *row = cJSON_GetArrayItem(rows, r);
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) has(row, fields[f]);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(row, "same_next_token")));
    ck_assert_double_le(cJSON_GetObjectItem(row, "max_rel_logit_diff")->valuedouble, 1e-4);
  }
  ck_assert_int_eq((int)cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 1), "prompt_tokens")->valuedouble, 40);
  /* the profile covers the chunk graphs' ops */
  has(cJSON_GetObjectItem(j, "profile_ms"), "Linear");
  has(cJSON_GetObjectItem(j, "profile_ms"), "GroupQueryAttention");
  /* every chunk graph that ran was captured exactly once (graph mode) */
  const cJSON *graphs = cJSON_GetObjectItem(j, "chunk_graphs");
  for (const cJSON *g = graphs->child; g; g = g->next) {
    double runs = cJSON_GetObjectItem(g, "runs")->valuedouble, caps = cJSON_GetObjectItem(g, "captures")->valuedouble;
    ck_assert_double_eq(caps, runs > 0 ? 1.0 : 0.0);
  }
  cJSON_Delete(j);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bench");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, argument_errors_exit_2_and_name_the_argument);
  tcase_add_test(tc, help_for_every_command);
  tcase_add_test(tc, decode_runs_every_mode_and_writes_the_documented_json);
  tcase_add_test(tc, decode_compares_weight_types_in_rounds);
  tcase_add_test(tc, single_modes_and_explain);
  tcase_add_test(tc, prefill_compares_token_by_token_with_chunks);
  tcase_add_test(tc, prefill_compares_weight_types_in_rounds);
  tcase_add_test(tc, disagreement_between_modes_is_an_error);
  tcase_add_test(tc, alloc_replay_and_tokenizer_write_json);
  tcase_add_test(tc, unknown_seams_and_unwritable_json_fail_up_front);
  tcase_add_test(tc, a_binding_bound_is_read_before_each_run);
  tcase_add_test(tc, threads_and_profile);
  tcase_add_test(tc, a_cpu_simd_set_the_cpu_lacks_exits_1);
  tcase_add_test(tc, an_unknown_cpu_simd_name_is_a_usage_error);
  tcase_add_test(tc, products_are_reported_and_honoured);
  tcase_add_test(tc, batch_reports_every_batch_size);
  tcase_add_test(tc, layout_is_reported_and_honoured);
  tcase_add_test(tc, openblas_runs_the_kernels_this_cpu_can);
  suite_add_tcase(s, tc);
  return test_run(s);
}
