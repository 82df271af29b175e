/*
 * tokenizer.c: `ortep-bench tokenizer`, the tokenizer's cost on files with
 * many added tokens: for each count N, a tokenizer.json (built in memory)
 * whose N added tokens share their first byte ("a0" .. "aN-1") is opened,
 * and a text of that byte alone is encoded, so every position starts an
 * added-token search. Opening should grow with N (n log n at most), encoding
 * should not grow with it at all; the figures say whether they do.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char tokenizer_usage[] =
    "usage: ortep-bench tokenizer [--added N,...] [--text-bytes B] [--runs R] [--json FILE]\n"
    "\n"
    "Open and encode times of tokenizer.json files with many added tokens that share their\n"
    "first byte (built in memory), for each count; the figures are medians over runs.\n"
    "\n"
    "  --added N,...    added-token counts (default 10000,20000,40000,80000; each 1..1000000)\n"
    "  --text-bytes B   bytes of text encoded (default 100000)\n"
    "  --runs R         timed runs (default 5)\n"
    "  --json FILE      also write the figures as JSON\n"
    "  -h, --help       this text\n";

#define MAX_COUNTS 16

/* The tokenizer.json of n added tokens "a0" .. "a<n-1>" over a vocabulary of
 * "a" and the digits; malloc'd, *len bytes. */
static char *added_tokens_json(long n, size_t *len) {
  size_t cap = 128 + (size_t)n * 48;
  char *json = malloc(cap);
  if (!json) return NULL;
  size_t w = (size_t)snprintf(json, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0");
  for (int d = 0; d < 10; d++) w += (size_t)snprintf(json + w, cap - w, ", \"%d\": %d", d, 1 + d);
  w += (size_t)snprintf(json + w, cap - w, "}, \"merges\": []}, \"added_tokens\": [");
  for (long k = 0; k < n; k++)
    w += (size_t)snprintf(json + w, cap - w, "%s{\"id\": %ld, \"content\": \"a%ld\"}", k ? ", " : "", 11 + k, k);
  w += (size_t)snprintf(json + w, cap - w, "]}");
  *len = w;
  return json;
}

static int parse_counts(const char *arg, long *counts, size_t *n) {
  *n = 0;
  char *copy = strdup(arg), *save = NULL;
  int rc = copy ? 0 : 1;
  for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc; tok = strtok_r(NULL, ",", &save)) {
    if (*n == MAX_COUNTS) {
      rc = bench_usage_error("tokenizer", "--added: at most %d counts", MAX_COUNTS);
      break;
    }
    rc = bench_parse_count("tokenizer", "--added", tok, 1, 1000000, &counts[(*n)++]);
  }
  if (!rc && *n == 0) rc = bench_usage_error("tokenizer", "--added '%s' names no count", arg);
  free(copy);
  return rc;
}

/* One count: the medians of runs opens and encodes, in ms. */
static int measure(long n, const char *text, size_t text_len, long runs, double *open_ms, double *encode_ms) {
  size_t len;
  char *json = added_tokens_json(n, &len);
  double *o = malloc((size_t)runs * sizeof *o), *e = malloc((size_t)runs * sizeof *e);
  int rc = json && o && e ? 0 : 1;
  for (long r = 0; r < runs && !rc; r++) {
    ortep_tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n_ids;
    double t0 = bench_now_ns();
    if (ortep_tokenizer_open_json(json, len, &t) != ORTEP_OK) rc = 1;
    double t1 = bench_now_ns();
    if (!rc && ortep_tokenizer_encode(t, text, text_len, false, &ids, &n_ids) != ORTEP_OK) rc = 1;
    double t2 = bench_now_ns();
    o[r] = (t1 - t0) / 1e6, e[r] = (t2 - t1) / 1e6;
    free(ids);
    ortep_tokenizer_close(t);
  }
  if (rc) fprintf(stderr, "ortep-bench tokenizer: %s\n", json && o && e ? ortep_last_error() : "out of memory");
  if (!rc) *open_ms = bench_median(o, (size_t)runs), *encode_ms = bench_median(e, (size_t)runs);
  free(json), free(o), free(e);
  return rc;
}

int bench_tokenizer_main(int argc, char **argv) {
  long counts[MAX_COUNTS] = {10000, 20000, 40000, 80000}, runs = 5, text_bytes = 100000;
  size_t n_counts = 4;
  const char *json_path = NULL;
  static const struct option lo[] = {{"added", required_argument, 0, 'a'}, {"text-bytes", required_argument, 0, 't'},
                                     {"runs", required_argument, 0, 'r'},  {"json", required_argument, 0, 'j'},
                                     {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("tokenizer", argc, argv, lo, tokenizer_usage, &rc)) >= 0) {
    switch (c) {
      case 'a': rc = parse_counts(optarg, counts, &n_counts); break;
      case 't': rc = bench_parse_count("tokenizer", "--text-bytes", optarg, 1, 1L << 30, &text_bytes); break;
      case 'r': rc = bench_parse_count("tokenizer", "--runs", optarg, 1, 1000, &runs); break;
      case 'j': json_path = optarg; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  FILE *json = NULL; /* created now: an unwritable --json fails before the run */
  if (json_path && !(json = bench_json_open(json_path))) return 1;
  char *text = malloc((size_t)text_bytes);
  if (!text) {
    fprintf(stderr, "ortep-bench tokenizer: no memory for %ld bytes of text\n", text_bytes);
    if (json) fclose(json);
    return 1;
  }
  memset(text, 'a', (size_t)text_bytes);
  double open_ms[MAX_COUNTS], encode_ms[MAX_COUNTS];
  int exit_code = 0;
  for (size_t i = 0; i < n_counts && !exit_code; i++)
    exit_code = measure(counts[i], text, (size_t)text_bytes, runs, &open_ms[i], &encode_ms[i]);
  free(text);
  if (exit_code) {
    if (json) fclose(json);
    return exit_code;
  }
  bench_print_header("tokenizer");
  printf("added tokens sharing their first byte; %ld bytes of that byte encoded; medians of %ld runs\n", text_bytes,
         runs);
  printf("  %12s %12s %14s %14s\n", "added", "open ms", "encode ms", "encode MB/s");
  cJSON *root = cJSON_CreateObject(), *rows = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "command", "tokenizer");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON_AddNumberToObject(root, "text_bytes", (double)text_bytes);
  cJSON_AddNumberToObject(root, "runs", (double)runs);
  for (size_t i = 0; i < n_counts; i++) {
    double mbps = (double)text_bytes / 1e6 / (encode_ms[i] / 1e3);
    printf("  %12ld %12.2f %14.3f %14.1f\n", counts[i], open_ms[i], encode_ms[i], mbps);
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "added_tokens", (double)counts[i]);
    cJSON_AddNumberToObject(row, "open_ms", open_ms[i]);
    cJSON_AddNumberToObject(row, "encode_ms", encode_ms[i]);
    cJSON_AddNumberToObject(row, "encode_mb_per_s", mbps);
    cJSON_AddItemToArray(rows, row);
  }
  cJSON_AddItemToObject(root, "counts", rows);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "ortep-bench tokenizer: the figures could not be written to stdout\n");
    exit_code = 1;
  }
  if (json && bench_json_finish(json, json_path, root)) exit_code = 1;
  cJSON_Delete(root);
  return exit_code;
}
