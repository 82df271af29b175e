/*
 * model_options.h: the options every ortep program takes to name a model and
 * how to run it (ortep generate/tokenize/detokenize, ortep-bench decode and
 * prefill): one table, one set of checks, one way to turn them into the
 * decoder's config, so a flag is spelt and refused the same everywhere.
 * Programs use the public API only; this is their shared plumbing, not the
 * library's.
 */
#ifndef ORTEP_TOOLS_MODEL_OPTIONS_H
#define ORTEP_TOOLS_MODEL_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ortep/ortep.h"

typedef struct tool_model {
  const char *prog, *cmd; /* "ortep", "generate": for messages */
  const char *model, *preset, *dtype, *ep, *weights, *layout, *kv_dtype, *embedding_dtype, *products;
  const char *cache, *cache_max; /* --weights-cache, --weights-cache-max */
  long threads;                  /* 0: the CPU EP's default */
  double progress_t0;            /* tool_progress: when the step began (0: not yet) */
  int progress_percent;          /* tool_progress: the percentage last drawn */
  bool progress_shown;
  char dir[4096]; /* the model directory, once resolved */
} tool_model;

/* getopt_long values of the shared options: above any short option, so a
 * program's own table cannot collide with them. */
enum {
  TOOL_OPT_MODEL = 0x100,
  TOOL_OPT_PRESET,
  TOOL_OPT_DTYPE,
  TOOL_OPT_EP,
  TOOL_OPT_THREADS,
  TOOL_OPT_WEIGHTS,
  TOOL_OPT_LAYOUT,
  TOOL_OPT_KV_DTYPE,
  TOOL_OPT_EMBEDDING_DTYPE,
  TOOL_OPT_PRODUCTS,
  TOOL_OPT_CACHE,
  TOOL_OPT_CACHE_MAX
};
/* clang-format off */
#define TOOL_MODEL_LONG_OPTIONS                                                                    \
  {"model", required_argument, 0, TOOL_OPT_MODEL},     {"preset", required_argument, 0, TOOL_OPT_PRESET},   \
  {"dtype", required_argument, 0, TOOL_OPT_DTYPE},     {"ep", required_argument, 0, TOOL_OPT_EP},           \
  {"threads", required_argument, 0, TOOL_OPT_THREADS}, {"weights", required_argument, 0, TOOL_OPT_WEIGHTS}, \
  {"layout", required_argument, 0, TOOL_OPT_LAYOUT},   {"kv-dtype", required_argument, 0, TOOL_OPT_KV_DTYPE}, \
  {"embedding-dtype", required_argument, 0, TOOL_OPT_EMBEDDING_DTYPE}, {"products", required_argument, 0, TOOL_OPT_PRODUCTS}, \
  {"weights-cache", required_argument, 0, TOOL_OPT_CACHE}, {"weights-cache-max", required_argument, 0, TOOL_OPT_CACHE_MAX}
/* clang-format on */
#define TOOL_PRESETS "tiny, tiny-llama, tiny-wide-heads, small, qwen2.5-0.5b"
/* The help lines of the shared options, for a program's usage text. */
#define TOOL_MODEL_HELP                                                                                  \
  "  --model DIR      a model directory (config.json + model.safetensors [+ tokenizer.json])\n"          \
  "  --preset NAME    a synthetic preset (random weights): " TOOL_PRESETS                                \
  "\n"                                                                                                   \
  "  --dtype D        the weights: f32 (default), f16, bf16 (a preset's, as written); q8_0, q4_0:\n"     \
  "                   the projections quantized at open (a preset written in bf16; CPU EP only)\n"       \
  "  --embedding-dtype D  with q8_0/q4_0: the embedding and lm_head, q8_0 (default), q4_0, stored\n"     \
  "  --ep E           auto (default: CUDA when a GPU is present), cpu, cuda\n"                           \
  "  --threads N      CPU EP worker threads (cpu.threads; default: every CPU this process may use)\n"    \
  "  --weights W      map (default: the file's pages, zero-copy) or read (a private copy in memory)\n"   \
  "  --layout L       the projection weights' layout (ortep.weights_layout): auto (default: the CPU\n"   \
  "                   EP's blocked layout when the CPU runs the step), blocked, row_major\n"             \
  "  --kv-dtype D     the KV caches' dtype (ortep.kv_dtype): f32 (default), f16 or bf16 (CPU EP only)\n" \
  "  --products P     how the CPU EP multiplies a prefill chunk by bf16 weights (cpu.products): auto\n"  \
  "                   (default: bf16 x bf16 where the CPU has AVX512-BF16), bf16, f32\n"                 \
  "  --weights-cache DIR  where the CPU EP's prepared weights are kept between runs\n"                   \
  "                   (ortep.weights_cache; default $XDG_CACHE_HOME/ortep/weights), or off\n"            \
  "  --weights-cache-max B  at most B bytes there (ortep.weights_cache_max): e.g. 8G, 512M,\n"           \
  "                   unlimited (default 32G); the least recently used files go first\n"

/* Whether arg is a whole number in [lo, hi], parsed as one: digits only (no
 * sign, space, fraction or exponent), no rounding through a double. The one
 * integer parser of every program's options. */
bool tool_parse_whole(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out);
/* Prints "<prog> <cmd>: <message>" and the hint to --help; returns 2. */
int tool_usage_error(const tool_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* When c is one of the shared options, takes arg into m and returns true
 * (*rc: 0, or a usage error's exit code); else false. */
bool tool_model_option(tool_model *m, int c, const char *arg, int *rc);
/* Checks the options once all are in: --model xor --preset (without either:
 * the tiny preset when default_preset, else a usage error), known names.
 * 0 when fine, else the usage error's exit code (2). */
int tool_model_check(tool_model *m, bool default_preset);
/* The model directory into m->dir: --model as given, or the preset's cached
 * copy (written on first use; announce says so on stderr). 0, 1 (a failure,
 * printed) or 2 (a usage error). */
int tool_model_resolve(tool_model *m, bool announce);
/* Whether --dtype quantizes at open (q8_0, q4_0). */
bool tool_model_quantized(const tool_model *m);
/* The decoder's config for --threads, --weights, --layout, --kv-dtype,
 * --dtype q8_0/q4_0, --embedding-dtype, --weights-cache[-max] (*out NULL when
 * none is given; the caller destroys it). 0, or 1 with the reason printed. */
int tool_model_config(const tool_model *m, ortep_config **out);

/* A progress callback (ortep_progress_fn) for ortep_decoder_options: ctx is
 * the tool_model. On a terminal it draws "<prog> <cmd>: quantizing the
 * weights: 40%" on stderr once the step has taken more than a second (quiet
 * below that), redrawing only when the percentage changes, and ends the line
 * with the step's time when it is done. When stderr is not a terminal (a log
 * file, a pipe) it writes one line when a step that took more than a second
 * is done: "<prog> <cmd>: quantizing the weights: done (1.8 s)". */
void tool_progress(void *ctx, const char *what, size_t done, size_t total);

#endif
