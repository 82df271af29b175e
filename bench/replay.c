/*
 * replay.c: `ortep-bench replay`, the executor's own cost per node: a chain
 * of N ortep:Noop kernels (which do nothing) run by eager dispatch and by
 * replaying the captured graph, side by side. What remains is dispatch,
 * argument binding and the replay loop. (On the CUDA EP this becomes empty
 * kernels launched eagerly vs as a CUDA Graph.) Each mode is also run
 * through a copy of the step loop with the NVTX calls compiled out, so the
 * cost of tracing with no tool attached is measured in the same run.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "graph/bench_api.h"
#include "bench.h"

static const char replay_usage[] =
    "usage: ortep-bench replay [--nodes N] [--runs R] [--iters I] [--json FILE]\n"
    "\n"
    "Per-node overhead of eager dispatch vs replay, with no-op kernels (CPU EP), measured\n"
    "side by side; the figure is ns per node, the median over runs.\n"
    "\n"
    "  --nodes N   nodes in the chain (default 1000)\n"
    "  --runs R    timed runs (default 9)\n"
    "  --iters I   steps per run (default 200)\n"
    "  --json FILE also write the figures as JSON\n"
    "  -h, --help  this text\n";

static ortep_status build_chain(ortep_graph *g, long n) {
  ortep_shape s = {1, {1}};
  char a[32], b[32];
  ortep_status st = ortep_graph_add_input(g, "v0", ORTEP_DTYPE_F32, &s);
  for (long i = 0; st == ORTEP_OK && i < n; i++) {
    snprintf(a, sizeof a, "v%ld", i);
    snprintf(b, sizeof b, "v%ld", i + 1);
    st = ortep_graph_add_value(g, b, ORTEP_DTYPE_F32, &s);
    if (st == ORTEP_OK)
      st = ortep_graph_add_node(g, "Noop", ORTEP_DOMAIN_ORTEP, NULL, (const char *[]){a}, 1, (const char *[]){b}, 1,
                                NULL);
  }
  snprintf(b, sizeof b, "v%ld", n);
  return st == ORTEP_OK ? ortep_graph_add_output(g, b) : st;
}

/* ns per node of each mode, traced (as shipped) and untraced, the median
 * over runs; the variants alternate which goes first. */
static int measure(ortep_session *const s[2], long nodes, long runs, long iters, double ns[2][2]) {
  int exit_code = 0;
  double *samples[2][2];
  for (int m = 0; m < 2; m++)
    for (int t = 0; t < 2; t++) samples[m][t] = malloc((size_t)runs * sizeof(double));
  for (long r = 0; r < runs && !exit_code; r++)
    for (int m = 0; m < 2; m++)
      for (int k = 0; k < 2; k++) {
        int t = (int)((r + k) % 2);
        double t0 = bench_now_ns();
        for (long i = 0; i < iters; i++)
          if ((t ? ortep_session_run(s[m]) : ortep__session_run_untraced(s[m])) != ORTEP_OK) exit_code = 1;
        samples[m][t][r] = (bench_now_ns() - t0) / (double)(iters * nodes);
      }
  for (int m = 0; m < 2; m++)
    for (int t = 0; t < 2; t++) {
      if (!exit_code) ns[m][t] = bench_median(samples[m][t], (size_t)runs);
      free(samples[m][t]);
    }
  if (exit_code) fprintf(stderr, "ortep-bench replay: %s\n", ortep_last_error());
  return exit_code;
}

/* The table, and the JSON when json is open (closed here). */
static int report(long nodes, long runs, long iters, double ns[2][2], FILE *json, const char *json_path) {
  int exit_code = 0;
  bench_print_header("replay");
  printf("a chain of %ld ortep:Noop nodes on cpu_ep, %ld steps x %ld runs\n", nodes, iters, runs);
  printf("  %-10s %16s %18s %12s\n", "mode", "ns/node traced", "ns/node untraced", "tracing");
  for (int m = 0; m < 2; m++)
    printf("  %-10s %16.2f %18.2f %+11.1f%%\n", m ? "replay" : "eager", ns[m][1], ns[m][0],
           100.0 * (ns[m][1] / ns[m][0] - 1.0));
  printf("  replay over eager: %.2fx less overhead per node (same run)\n", ns[0][1] / ns[1][1]);
  printf("  tracing: NVTX %s in this build, no tool attached%s\n", ORTEP_HAVE_NVTX ? "compiled in" : "not available",
         getenv("NVTX_INJECTION64_PATH") ? " (NVTX_INJECTION64_PATH is set: a tool IS attached)" : "");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "replay");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddStringToObject(root, "ep", "cpu_ep");
  cJSON_AddNumberToObject(root, "nodes", (double)nodes);
  cJSON_AddNumberToObject(root, "iters", (double)iters);
  cJSON_AddNumberToObject(root, "runs", (double)runs);
  cJSON_AddNumberToObject(root, "eager_ns_per_node", ns[0][1]);
  cJSON_AddNumberToObject(root, "replay_ns_per_node", ns[1][1]);
  cJSON_AddNumberToObject(root, "eager_untraced_ns_per_node", ns[0][0]);
  cJSON_AddNumberToObject(root, "replay_untraced_ns_per_node", ns[1][0]);
  cJSON_AddNumberToObject(root, "eager_over_replay", ns[0][1] / ns[1][1]);
  cJSON_AddBoolToObject(root, "nvtx_compiled_in", ORTEP_HAVE_NVTX);
  if (json && bench_json_finish(json, json_path, root)) exit_code = 1;
  cJSON_Delete(root);
  return exit_code;
}

int bench_replay_main(int argc, char **argv) {
  long nodes = 1000, runs = 9, iters = 200;
  const char *json_path = NULL;
  static const struct option lo[] = {{"nodes", required_argument, 0, 'n'}, {"runs", required_argument, 0, 'r'},
                                     {"iters", required_argument, 0, 'i'}, {"json", required_argument, 0, 'j'},
                                     {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("replay", argc, argv, lo, replay_usage, &rc)) >= 0) {
    switch (c) {
      case 'n': rc = bench_parse_count("replay", "--nodes", optarg, 1, 1000000, &nodes); break;
      case 'r': rc = bench_parse_count("replay", "--runs", optarg, 1, 10000, &runs); break;
      case 'i': rc = bench_parse_count("replay", "--iters", optarg, 1, 1000000, &iters); break;
      case 'j': json_path = optarg; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  FILE *json = NULL; /* created now: an unwritable --json fails before the run */
  if (json_path && !(json = bench_json_open(json_path))) return 1;

  ortep_ep_registry *reg = NULL;
  ortep_ep *cpu = NULL;
  ortep_graph *g = NULL;
  ortep_session *s[2] = {NULL, NULL};
  int exit_code = 0;
  if (ortep_ep_registry_create(&reg) || ortep_cpu_ep_create(NULL, &cpu) || ortep_ep_initialize(cpu, NULL) ||
      ortep_ep_registry_add(reg, cpu, NULL) || ortep_graph_create(&g) || build_chain(g, nodes) ||
      ortep_session_create(g, reg, &(ortep_session_options){.mode = ORTEP_RUN_EAGER}, &s[0]) ||
      ortep_session_create(g, reg, &(ortep_session_options){.mode = ORTEP_RUN_GRAPH}, &s[1]) ||
      ortep_session_run(s[0]) || ortep_session_run(s[1])) {
    fprintf(stderr, "ortep-bench replay: %s\n", ortep_last_error());
    exit_code = 1;
  }
  /* ns[mode][traced]: mode 0 eager, 1 replay; traced 1 = as shipped */
  double ns[2][2] = {{0, 0}, {0, 0}};
  if (!exit_code) exit_code = measure(s, nodes, runs, iters, ns);
  if (!exit_code) {
    exit_code = report(nodes, runs, iters, ns, json, json_path);
    json = NULL; /* report wrote and closed it */
  }
  if (json) fclose(json); /* the run failed: no report */
  ortep_session_destroy(s[0]);
  ortep_session_destroy(s[1]);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(reg);
  if (!reg) ortep_ep_destroy(cpu);
  return exit_code;
}
