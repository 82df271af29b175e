/* fuzz_tokenizer.c: libFuzzer harness for encoding and decoding: arbitrary
 * bytes through the byte-level and the SentencePiece-style fixtures
 * (tests/data). Encoding is either refused as invalid UTF-8 or succeeds;
 * decoding what it gave succeeds, and for text without added-token
 * spellings, which NFC leaves alone, gives the text back exactly. */
#include <stdlib.h>
#include <string.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ortep_tokenizer *g_tok[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_tok[0]) {
    if (ortep_tokenizer_open(ORTEP_TEST_DATA "/bytelevel_tokenizer.json", &g_tok[0]) != ORTEP_OK ||
        ortep_tokenizer_open(ORTEP_TEST_DATA "/sentencepiece_tokenizer.json", &g_tok[1]) != ORTEP_OK)
      abort();
  }
  for (int k = 0; k < 2; k++) {
    int32_t *ids;
    size_t n;
    ortep_status s = ortep_tokenizer_encode(g_tok[k], (const char *)data, size, k == 1, &ids, &n);
    if (s == ORTEP_E_INVALID_ARGUMENT) continue; /* not UTF-8 */
    if (s != ORTEP_OK) abort();
    char *text;
    size_t len;
    if (ortep_tokenizer_decode(g_tok[k], ids, n, true, &text, &len) != ORTEP_OK) abort();
    bool ascii = true;
    for (size_t i = 0; i < size; i++) ascii = ascii && data[i] >= 0x20 && data[i] < 0x7f && data[i] != '<';
    /* byte-level: exact; SentencePiece-style: exact unless it starts with a space (the decoder strips one) */
    if (ascii && (k == 0 || size == 0 || data[0] != ' ') && (len != size || memcmp(text, data, size))) abort();
    free(ids);
    free(text);
  }
  return 0;
}
