/* llama.h: the LLaMA / Qwen2 decode-step graph builder (llama.c). */
#ifndef ORTEP_GRAPH_LLAMA_H
#define ORTEP_GRAPH_LLAMA_H

#include "ortep/model.h"

#define ORTEP_INPUT_TOKEN    "token_id"
#define ORTEP_INPUT_POSITION "position"
#define ORTEP_OUTPUT_LOGITS  "logits"
/* ortep:SelectToken's values (llama.c): the sampler's parameter block
 * (kernels/sampling.h, 9 words; temperature 0: argmax), the token history
 * (one id per position), the (token, error word) result */
#define ORTEP_INPUT_SAMPLE_PARAMS "sample.params"
#define ORTEP_INPUT_HISTORY       "sample.history"
#define ORTEP_OUTPUT_RESULT       "select.result"
#define ORTEP__SAMPLE_PARAM_WORDS 9
/* ortep:FeedToken's values in a decoder's decode step (kernels/feed.h):
 * the stop mask (u8, one byte per id), the loop state (i32 [header + max])
 * and the loop flag the session's loop reads */
#define ORTEP_INPUT_STOP_MASK "loop.stop_mask"
#define ORTEP_INPUT_LOOP      "loop.state"
#define ORTEP_OUTPUT_LOOP_GO  "loop.go"
/* the redraw graph's inputs: the last token fed and its position */
#define ORTEP_REDRAW_TOKEN    "redraw.token_id"
#define ORTEP_REDRAW_POSITION "redraw.position"

/* The graph of one step over `tokens` consecutive tokens (1: a decode step;
 * more: a prefill chunk) with KV caches of max_seq positions; its logits are
 * the last token's. Weight initializers borrow the model's mapped bytes (the
 * model must outlive the graph); host is the host EP that owns initializer
 * tensors; kv_dtype the caches' (f32, f16, bf16); rope the rotary tables of
 * at least max_seq rows. */
/* What a decoder asks of its graphs: the KV caches' dtype, and the block
 * types the projections and the embedding / lm_head are to be stored in by
 * the EP that prepares them (ORTEP_DTYPE_COUNT: as stored;
 * ortep_graph_prefer_initializer_dtype). */
typedef struct ortep__llama_dtypes {
  ortep_dtype kv, projections, embedding;
} ortep__llama_dtypes;
/* What one step graph runs: `tokens` rows of one sequence (slots 0: the
 * decoder's caches [max_seq, kv, hd]), or, over a batch's caches
 * [slots, max_seq, kv, hd] with a slot-map input, either a chunk of one
 * slot's tokens (each_row_a_sequence false: logits of the last row) or a
 * decode step of `tokens` sequences, one row each (true: logits and a draw
 * per row, every row computed as it would be alone: exact_rows). */
typedef struct ortep__llama_step {
  size_t tokens, slots;
  bool each_row_a_sequence;
} ortep__llama_step;
ortep_status ortep__llama_build(const ortep_model *model, ortep_ep *host, size_t max_seq, const ortep__llama_step *step,
                                const ortep__llama_dtypes *dtypes, ortep_tensor *const rope[2], ortep_graph **out);
/* The rotary tables the graphs share (cos, sin: [rows, head_dim / 2] f32 on
 * host; every graph holds a view of them), made unfilled: rows are computed
 * by ortep__llama_rope_fill as positions come into use, so a long context
 * costs what is used (the pages no row was written to stay uncommitted). */
ortep_status ortep__llama_rope_tables(const ortep_model *model, ortep_ep *host, size_t rows, ortep_tensor *out[2]);
/* Rows [from, to) of the tables, each as a function of its position alone. */
ortep_status ortep__llama_rope_fill(const ortep_model *model, ortep_tensor *const rope[2], size_t from, size_t to);
/* The graph that draws the pending token again from the logits (a new
 * sampling choice for a token whose step ran): one ortep:SelectToken over
 * the session's logits, parameters and history. */
ortep_status ortep__llama_build_redraw(const ortep_model *model, size_t max_seq, size_t slots, ortep_graph **out);
/* The names of a step graph's inputs ([1, tokens] i32) and outputs:
 * ORTEP_INPUT_TOKEN / ORTEP_INPUT_POSITION for one token, with ".<tokens>"
 * appended for a chunk (and "batch." put before for a batched decode step),
 * so the graphs of one session keep them apart; the slot map (a batch's
 * graphs), the logits and the (token, word) result ("" / the shared names
 * for the graphs whose logits are one row). */
typedef struct ortep__llama_names {
  char tokens[64], positions[64], slots[64], logits[64], result[64];
} ortep__llama_names;
void ortep__llama_names_of(const ortep__llama_step *step, ortep__llama_names *out);
#define ORTEP_REDRAW_SLOT "redraw.slot"

#endif
