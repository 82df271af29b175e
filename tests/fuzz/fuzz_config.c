/* fuzz_config.c: libFuzzer harness for the config.json parser. */
#include <stdlib.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_model_config c;
  ortep_status s = ortep_model_config_parse((const char *)data, size, &c);
  if (s != ORTEP_OK && s != ORTEP_E_FORMAT) abort();
  if (s == ORTEP_OK && (c.hidden_size < 1 || c.num_attention_heads < 1 || c.num_key_value_heads < 1 ||
                        c.num_attention_heads % c.num_key_value_heads || c.head_dim % 2))
    abort(); /* an accepted config must satisfy what the parser promises */
  return 0;
}
