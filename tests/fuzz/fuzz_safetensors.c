/* fuzz_safetensors.c: libFuzzer harness for the safetensors header parser.
 * Any input must give ORTEP_OK or ORTEP_E_FORMAT, never a crash, a leak or
 * an out-of-bounds read; accepted entries must lie inside the input. */
#include <stdlib.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_safetensors *st = NULL;
  ortep_status s = ortep_safetensors_parse(data, size, &st);
  if (s != ORTEP_OK && s != ORTEP_E_FORMAT && s != ORTEP_E_OUT_OF_MEMORY) abort();
  for (size_t i = 0; i < ortep_safetensors_count(st); i++) {
    const ortep_safetensors_entry *e = ortep_safetensors_at(st, i);
    const uint8_t *p = e->data;
    if (p < data || p + e->size > data + size) abort(); /* a pointer outside the input */
    volatile uint8_t sink = 0;
    for (size_t k = 0; k < e->size; k += 4096) sink ^= p[k]; /* touch it: ASan checks the range */
    (void)sink;
  }
  ortep_safetensors_close(st);
  return 0;
}
