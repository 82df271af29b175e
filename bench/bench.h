/*
 * bench.h: what the ortep-bench subcommands share: timing, medians, the
 * machine/build description, the table printer, JSON output through cJSON,
 * and the usage-error convention (exit 2 naming the bad argument).
 */
#ifndef ORTEP_BENCH_H
#define ORTEP_BENCH_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <time.h>

#include "ortep/ortep.h"

#define BENCH_EXIT_USAGE 2

static inline double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Median of v[0..n) (sorts v). */
/* "median (lowest-highest)" of v[0..n) times scale, each printed with fmt
 * (just the median when n is 1); sorts v. */
void bench_spread(double *v, size_t n, double scale, const char *fmt, char *out, size_t len);
double bench_median(double *v, size_t n);
double bench_min(const double *v, size_t n);
double bench_max(const double *v, size_t n);

/* Weights for a kernel's rate (bytes of dt): ordinary values near 1 (f32,
 * f16, bf16), or blocks with f16 scales near 2^-7 (q8_0, q4_0), never
 * subnormal: arithmetic on subnormals runs far slower on some CPUs (an
 * Intel Xeon's f32 Linear read 8 GFLOP/s over arbitrary bytes). */
void bench_fill_weights(void *w, size_t bytes, ortep_dtype dt);

/* The CPU EP's blocked layout of an [n, k] weight of dt, as the decoder
 * binds it (kernels/opset.h; the benches see only the public API, so they
 * spell it here, once): bench_blocked_rows(dt) rows a tile (16 for q8_0 /
 * q4_0, else 4), and the shape [n / rows, k / cols, rows, cols] (cols 32
 * for q8_0 / q4_0, else 16). */
size_t bench_blocked_rows(ortep_dtype dt);
ortep_shape bench_blocked_shape(ortep_dtype dt, size_t n, size_t k);

/* {"cpu": ..., "cores": ..., "blas_core": ..., "gpu": ...} and {"version", "git_revision", ...}. */
cJSON *bench_machine_json(void);
cJSON *bench_build_json(void);
void bench_print_header(const char *what);

/* Writes root to path (pretty-printed). Returns 0, or 1 with a message. */
/* --json: the file is created before the run (bench_json_open: NULL, with
 * the reason on stderr, when it cannot be), so an unwritable path fails at
 * once rather than after the run; bench_json_finish writes root and closes. */
FILE *bench_json_open(const char *path);
int bench_json_finish(FILE *f, const char *path, const cJSON *root);

/* Prints "ortep-bench <cmd>: <message>\n<usage hint>" to stderr; returns 2. */
int bench_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The option loop every command shares (getopt_long over lo, which must
 * hold {"help", no_argument, 0, 'h'}): returns the next option for the
 * command to handle; or BENCH_OPTIONS_DONE when the options are over and no
 * stray argument is left; or BENCH_OPTIONS_EXIT with *exit_code set (--help
 * printed usage: 0; a missing value, an unknown option or a stray argument:
 * a usage error, 2). */
#define BENCH_OPTIONS_DONE (-1)
#define BENCH_OPTIONS_EXIT (-2)
struct option;
int bench_next_option(const char *cmd, int argc, char **argv, const struct option *lo, const char *usage,
                      int *exit_code);
/* Parses a positive integer option; on error prints a usage error. */
int bench_parse_count(const char *cmd, const char *opt, const char *arg, long min, long max, long *out);

/* The read bound (read.c): `threads` threads streaming a buffer of
 * BENCH_READ_BYTES, far larger than the caches; read_rate reads at least
 * `bytes` and returns bytes per second. Peaks are the best of
 * BENCH_READ_PASSES such passes. */
#define BENCH_READ_BYTES  ((size_t)512 << 20)
#define BENCH_READ_PASSES 10
typedef struct read_bench read_bench;
read_bench *read_new(size_t threads); /* its buffer written, or NULL */
double read_rate(read_bench *b, size_t bytes);
void read_delete(read_bench *b);
/* Buffers to stream (the read bound's, the Linear probe's weights) from the
 * runtime's host allocator, on the pages weights read into memory get. */
ortep_allocator *bench_stream_host(void);
void *bench_stream_alloc(ortep_allocator *host, size_t bytes);
void bench_stream_free(ortep_allocator *host, void *p, size_t bytes);
/* The weight bytes of the model as a decoder over it holds them: as stored,
 * or with --dtype q8_0 / q4_0 the projections, and the embedding / lm_head
 * as --embedding-dtype says (q8_0 by default), as quantized at open;
 * *read_per_token (when not NULL): what one decode step reads of them (an
 * untied embedding table: one row). */
struct tool_model;
size_t bench_held_weight_bytes(const struct tool_model *m, const ortep_model *mdl, size_t *read_per_token);
/* Whether a step reading read_per_token bytes streams them from memory on
 * `threads` threads (read.c), so that a read of as many bytes bounds it. */
bool bench_read_binds(size_t read_per_token, size_t threads);

/* --dtype A,B,... of decode and prefill: split into buf (len bytes), 2 to
 * BENCH_DTYPES_MAX types, none empty or twice, each checked as --dtype alone
 * (--embedding-dtype applies to the list's q8_0 / q4_0 and needs one of
 * them); then m's other options are checked with the first type, which
 * m->dtype names after. 0, or the usage error's exit code. */
#define BENCH_DTYPES_MAX 5
int bench_parse_dtype_list(const char *cmd, struct tool_model *m, char *buf, size_t len, const char **dtypes,
                           size_t *n);

/* ortep-bench decode --dtype A,B,... (dtypes.c): graph-mode decode of the
 * model in each weight type, in interleaved rounds. Returns the exit code;
 * *json (opened by the caller, or NULL) is finished and set NULL on success. */
typedef struct bench_dtypes {
  const struct tool_model *m; /* every option but --dtype */
  const char *const *dtypes;
  size_t n;
  const int32_t *prompt;
  size_t plen;
  long tokens, warmup, runs;
  FILE **json;
  const char *json_path;
} bench_dtypes;
int bench_decode_dtypes(const bench_dtypes *a);
/* Best-of-10 GFLOP/s of an OpenBLAS sgemm [m, k] x [k, n] (prefill.c). */
double bench_sgemm_gflops(size_t m, size_t k, size_t n, size_t threads);
/* Best-of-5 GFLOP/s of one ortep:Linear [m, k] x [k, n] of dt weights on ep, 16-bit and q8_0 /
 * q4_0 ones in the CPU EP's blocked layouts (prefill.c); 0 when the EP does not take it. */
double bench_linear_gflops(ortep_ep *ep, ortep_dtype dt, size_t m, size_t k, size_t n);

/* K tokens per launch (launch.c), for ortep-bench decode: per K
 * (tokens_per_launch; 0: automatic) the median tokens/s of whole generate
 * calls and launches per call, and the tokens generated (malloc'd). */
typedef struct bench_launch {
  size_t k;
  bool ran;
  double tok_s, launches;
  int32_t *tokens;
  size_t ntokens;
} bench_launch;
int bench_launch_run(const char *dir, const char *ep, const ortep_config *config, const int32_t *prompt, size_t plen,
                     long tokens, long runs, bench_launch *ks, size_t n);

int bench_alloc_main(int argc, char **argv);
int bench_batch_main(int argc, char **argv);
int bench_prefill_main(int argc, char **argv);
int bench_decode_main(int argc, char **argv);
int bench_replay_main(int argc, char **argv);
int bench_tokenizer_main(int argc, char **argv);
int bench_kv_main(int argc, char **argv);

#endif
