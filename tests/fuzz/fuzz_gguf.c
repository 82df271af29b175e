/* fuzz_gguf.c: libFuzzer harness for the GGUF parser (gguf.h). Any input
 * must give ORTEP_OK or ORTEP_E_FORMAT, never a crash, a leak or a read
 * outside it; every accepted string and tensor lies inside the input. */
#include <stdlib.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *data, size_t size, const void *p, size_t n) {
  const uint8_t *b = p;
  if (n && (b < data || b + n > data + size)) abort();
  volatile uint8_t sink = 0;
  for (size_t k = 0; k < n; k += 64) sink ^= b[k];
  if (n) sink ^= b[n - 1];
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_gguf *g = NULL;
  ortep_status s = ortep_gguf_parse(data, size, &g);
  if (s != ORTEP_OK && s != ORTEP_E_FORMAT && s != ORTEP_E_OUT_OF_MEMORY) abort();
  if (s != ORTEP_OK && g) abort();
  for (size_t i = 0; i < ortep_gguf_kv_count(g); i++) {
    const ortep_gguf_kv *kv = ortep_gguf_kv_at(g, i);
    if (kv->type == ORTEP_GGUF_STRING) inside(data, size, kv->str, kv->len);
    if (kv->type == ORTEP_GGUF_ARRAY && kv->elem_type == ORTEP_GGUF_STRING)
      for (uint64_t j = 0; j < kv->count && j < 64; j++) {
        const char *str;
        size_t n;
        if (ortep_gguf_array_string(g, kv, j, &str, &n) != ORTEP_OK) abort();
        inside(data, size, str, n);
      }
  }
  for (size_t i = 0; i < ortep_gguf_tensor_count(g); i++) {
    const ortep_gguf_tensor *t = ortep_gguf_tensor_at(g, i);
    inside(data, size, t->data, t->size);
  }
  ortep_gguf_close(g);
  return 0;
}
