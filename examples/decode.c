/* decode.c: open a model, prefill a prompt, generate greedily, print the
 * token ids. Usage: ortep-example-decode MODEL_DIR [TOKEN ...] */
#include <ortep/ortep.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static bool print_token(int32_t token, size_t index, void *user) {
  (void)user;
  printf("%s%d", index ? " " : "", token);
  return true; /* keep going */
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [TOKEN ...]\n", argv[0]);
    return 2;
  }
  int32_t prompt[64] = {1, 2, 3};
  size_t n = 3;
  if (argc > 66) {
    fprintf(stderr, "at most 64 prompt tokens\n");
    return 2;
  }
  if (argc > 2)
    for (n = 0; n + 2 < (size_t)argc; n++) {
      char *end;
      long v = strtol(argv[n + 2], &end, 10);
      if (end == argv[n + 2] || *end || v < 0 || v > INT32_MAX) {
        fprintf(stderr, "TOKEN '%s' is not a token id (a whole number >= 0)\n", argv[n + 2]);
        return 2;
      }
      prompt[n] = (int32_t)v;
    }

  ortep_decoder *d = NULL;
  ortep_decoder_options opts = {.ep = "auto", .max_seq_len = 256}; /* graph mode by default */
  int rc = 0;
  if (ortep_decoder_open(argv[1], &opts, &d) != ORTEP_OK || ortep_decoder_prefill(d, prompt, n, NULL) != ORTEP_OK ||
      ortep_decoder_generate(d, 16, print_token, NULL, NULL) != ORTEP_OK) {
    fprintf(stderr, "error: %s\n", ortep_last_error());
    rc = 1;
  } else {
    printf("\n");
  }
  ortep_decoder_close(d); /* NULL when open failed: closing NULL is a no-op */
  return rc;
}
