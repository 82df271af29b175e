/* fuzz_tokenizer_json.c: libFuzzer harness for reading tokenizer.json
 * (ortep_tokenizer_open_json): an arbitrary document is refused as
 * ORTEP_E_FORMAT or accepted; an accepted tokenizer then encodes a fixed text
 * (or refuses it as an argument error: a character without a token) and
 * decodes what it gave; every one of its first ids is pushed alone into a
 * fresh stream decoder (an empty token first is a case of its own) and
 * decoded alone. */
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
  size_t v = ortep_tokenizer_vocab_size(t);
  for (int32_t id = 0; (size_t)id < v && id < 64; id++) {
    ortep_detokenizer *d;
    const char *out;
    size_t len;
    if (ortep_detokenizer_create(t, id & 1, &d) != ORTEP_OK) abort();
    if (ortep_detokenizer_push(d, id, &out, &len) != ORTEP_OK || ortep_detokenizer_flush(d, &out, &len) != ORTEP_OK)
      abort();
    ortep_detokenizer_destroy(d);
    char *back;
    if (ortep_tokenizer_decode(t, &id, 1, false, &back, &len) != ORTEP_OK) abort();
    free(back);
  }
  ortep_tokenizer_close(t);
  return 0;
}
