/* reference_llama.h: an independent LLaMA/Qwen2 forward pass for tests. */
#ifndef ORTEP_TEST_REFERENCE_LLAMA_H
#define ORTEP_TEST_REFERENCE_LLAMA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ref_model ref_model;
/* NULL on failure (the message is in ortep_last_error()). */
ref_model *ref_open(const char *dir, size_t max_seq);
/* One decode step; logits receives vocab doubles. */
void ref_step(ref_model *m, int token, int position, double *logits);
size_t ref_vocab(const ref_model *m);
/* Every projection's input (and the lm_head's) rounded to q8 blocks first,
 * as a q8_0 / q4_0 model's integer dot products take them. */
void ref_quantize_activations(ref_model *m, bool on);
void ref_close(ref_model *m);

#endif
