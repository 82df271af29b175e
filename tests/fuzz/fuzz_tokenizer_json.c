/* fuzz_tokenizer_json.c: libFuzzer harness for reading tokenizer.json
 * (ortep_tokenizer_open_json): an arbitrary document is refused as
 * ORTEP_E_FORMAT or accepted; an accepted tokenizer then encodes a fixed text
 * (or refuses it as an argument error: a character without a token) and
 * decodes what it gave. */
#include <stdlib.h>
#include <string.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_tokenizer *t;
  ortep_status s = ortep_tokenizer_open_json((const char *)data, size, &t);
  if (s != ORTEP_OK && s != ORTEP_E_FORMAT && s != ORTEP_E_OUT_OF_MEMORY) abort();
  if (s != ORTEP_OK) return 0;
  static const char text[] = "Hello world, 42 \xe4\xbd\xa0\xe5\xa5\xbd <s> \xf0\x9f\x99\x82";
  int32_t *ids;
  size_t n;
  s = ortep_tokenizer_encode(t, text, sizeof text - 1, true, &ids, &n);
  if (s != ORTEP_OK && s != ORTEP_E_INVALID_ARGUMENT) abort();
  if (s == ORTEP_OK) {
    char *back;
    size_t len;
    if (ortep_tokenizer_decode(t, ids, n, false, &back, &len) != ORTEP_OK) abort();
    free(back);
    free(ids);
  }
  ortep_tokenizer_close(t);
  return 0;
}
