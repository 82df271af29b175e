/*
 * main.c: ortep-bench, the benchmark driver. Each subcommand has its own
 * file; this one dispatches and prints the top-level help. Benchmarks report
 * figures (a table on stdout, --json for machines); they assert nothing.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "blas_core.h"

static const char usage[] =
    "usage: ortep-bench <command> [options]\n"
    "\n"
    "commands:\n"
    "  decode    per-token decode latency of eager, graph and segmented execution, side by\n"
    "            side (the default synthetic tiny model with no arguments)\n"
    "  prefill   time to first token: the prompt token by token vs in chunks, side by side\n"
    "            for several prompt lengths\n"
    "  batch     many sequences in one step: aggregate and per-sequence tokens/s, latency and time\n"
    "            to first token for 1, 2, 4, 8, 16 concurrent sequences, and a mixed workload\n"
    "  replay    per-node overhead of eager dispatch vs replay, with no-op kernels\n"
    "  tokenizer open and encode times of tokenizer.json files with many added tokens\n"
    "  kv        the KV caches on virtual backing: committed memory by positions held, decode\n"
    "            speed with the whole context reserved, a chat turn's prefill, forks' memory\n"
    "  alloc     allocator microbenchmark: arena, slab, mimalloc and glibc malloc on a\n"
    "            decode-like and a random pattern, plus the memory planner's figures\n"
    "\n"
    "Run 'ortep-bench <command> --help' for a command's options.\n";

int main(int argc, char **argv) {
  tool_blas_restart("ortep-bench", argv);
  if (argc < 2) {
    fputs(usage, stderr);
    return BENCH_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("ortep-bench %s (%s)\n", ortep_version(), ortep_git_revision());
    return 0;
  }
  if (strcmp(cmd, "alloc") == 0) return bench_alloc_main(argc - 1, argv + 1);
  if (strcmp(cmd, "decode") == 0) return bench_decode_main(argc - 1, argv + 1);
  if (strcmp(cmd, "prefill") == 0) return bench_prefill_main(argc - 1, argv + 1);
  if (strcmp(cmd, "replay") == 0) return bench_replay_main(argc - 1, argv + 1);
  if (strcmp(cmd, "tokenizer") == 0) return bench_tokenizer_main(argc - 1, argv + 1);
  if (strcmp(cmd, "kv") == 0) return bench_kv_main(argc - 1, argv + 1);
  if (strcmp(cmd, "batch") == 0) return bench_batch_main(argc - 1, argv + 1);
  fprintf(stderr,
          "ortep-bench: unknown command '%s'; the commands are: decode, prefill, batch, replay, tokenizer, kv, alloc\n",
          cmd);
  fputs(usage, stderr);
  return BENCH_EXIT_USAGE;
}
