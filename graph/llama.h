/* llama.h: the LLaMA / Qwen2 decode-step graph builder (llama.c). */
#ifndef ORTEP_GRAPH_LLAMA_H
#define ORTEP_GRAPH_LLAMA_H

#include "ortep/model.h"

#define ORTEP_INPUT_TOKEN "token_id"
#define ORTEP_INPUT_POSITION "position"
#define ORTEP_OUTPUT_LOGITS "logits"

/* The graph of one decode step with KV caches of max_seq positions. Weight
 * initializers borrow the model's mapped bytes (the model must outlive the
 * graph); host is the host EP that owns initializer tensors. */
ortep_status ortep__llama_build(const ortep_model *model, ortep_ep *host, size_t max_seq, ortep_graph **out);

#endif
