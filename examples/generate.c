/*
 * generate.c: text in, text out with ortep's public API: the model's
 * tokenizer.json, chunked prefill, sampling on the device, the text streamed
 * as whole characters, stopping at the model's end-of-sequence token.
 *
 *   ortep-example-generate MODEL_DIR "Once upon a time" [TEMPERATURE [SEED]]
 */
#include <errno.h>
#include <ortep/ortep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool print_piece(int32_t token, size_t index, void *user) {
  (void)index;
  const char *text;
  size_t len;
  if (ortep_detokenizer_push(user, token, &text, &len) != ORTEP_OK) return false;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return true;
}

/* A whole argument or nothing: "abc" or "0.8x" is an error, not 0. */
static int parse_args(int argc, char **argv, ortep_sampling *s) {
  char *end = NULL;
  errno = 0;
  if (argc > 3 && (s->temperature = strtof(argv[3], &end), errno || end == argv[3] || *end || !(s->temperature >= 0)))
    return fprintf(stderr, "TEMPERATURE '%s' is not a number >= 0 (0: greedy)\n", argv[3]), 2;
  if (argc > 4 && (argv[4][0] < '0' || argv[4][0] > '9' || (s->seed = strtoull(argv[4], &end, 10), errno || *end)))
    return fprintf(stderr, "SEED '%s' is not a whole number in [0, 2^64 - 1]\n", argv[4]), 2;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: %s MODEL_DIR PROMPT [TEMPERATURE [SEED]]\n", argv[0]);
    return 2;
  }
  ortep_sampling sampling = {.temperature = 0.8f, .top_p = 0.95f};
  if (parse_args(argc, argv, &sampling)) return 2;
  ortep_generate_options options = {.max_tokens = 32, .sampling = &sampling};
  ortep_tokenizer *tok = NULL;
  ortep_detokenizer *stream = NULL;
  ortep_decoder *d = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  ortep_generate_result result;
  int rc = 0;
  if (ortep_tokenizer_open(argv[1], &tok) != ORTEP_OK ||
      ortep_tokenizer_encode(tok, argv[2], strlen(argv[2]), true, &ids, &n) != ORTEP_OK ||
      ortep_detokenizer_create(tok, true, &stream) != ORTEP_OK ||
      ortep_decoder_open(argv[1], &(ortep_decoder_options){.ep = "auto", .max_seq_len = n + 33}, &d) != ORTEP_OK ||
      ortep_decoder_prefill(d, ids, n, NULL) != ORTEP_OK ||
      ortep_decoder_generate_ex(d, &options, print_piece, stream, &result) != ORTEP_OK) {
    fprintf(stderr, "error: %s\n", ortep_last_error());
    rc = 1;
  } else {
    const char *rest;
    size_t len;
    if (ortep_detokenizer_flush(stream, &rest, &len) == ORTEP_OK) fwrite(rest, 1, len, stdout);
    printf("\n(%zu tokens)\n", result.generated);
  }
  ortep_decoder_close(d); /* each close accepts NULL */
  ortep_detokenizer_destroy(stream);
  ortep_tokenizer_close(tok);
  free(ids);
  return rc;
}
