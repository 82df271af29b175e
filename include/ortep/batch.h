/*
 * batch.h: many sequences over one model, decoded together (continuous
 * batching). A batch holds the weights once and S sequence slots, each with
 * its own KV range (reserved for the slot's whole context, committed as its
 * tokens arrive, given back when its request ends), position, sampling
 * parameters, stop conditions and token history.
 *
 * Requests join at any time (ortep_batch_add): each waits for a free slot,
 * then its prompt is prefilled in chunks between decode steps, then it
 * decodes with the others until its own stop condition (ortep_generate_options
 * semantics: max_tokens, the model's EOS unless ignore_eos, stop_tokens, a
 * callback returning false, a full slot), and frees its slot for the next.
 *
 * A step (ortep_batch_step) is: waiting requests admitted into free slots;
 * prompt chunks of the prefilling slots, up to prefill_budget tokens (each
 * chunk one graph of M = chunk rows; a slot's chunks are synced once); then
 * one decode step over every decoding slot: one captured graph for the
 * bucket of 1, 2, 4, ... slots that holds them (padding rows touch no slot),
 * M = B matrix products that read the weights once for all B sequences,
 * attention per slot over its own KV at its own position, a draw per slot
 * from its own parameters, and one read of the B (token, error word) pairs.
 * Joining and leaving re-capture nothing; a steady step allocates nothing.
 *
 * Prompts that start alike (a system prompt) hold those positions' KV once:
 * a slot takes what another has run the same way instead of running it
 * (ortep_batch_options.disable_prefix_sharing).
 *
 * Determinism: every row of a batched step is computed exactly as the same
 * sequence alone would be (the Linear kernels' exact_rows), and a prompt is
 * cut into the same chunks a decoder cuts it into, so each request's tokens
 * (greedy and sampled: Philox keyed by its seed and positions) are those of
 * ortep_decoder_generate_ex run alone on the same prompt, whatever its
 * neighbours. A row whose step latches the device error word (a token id
 * outside the vocabulary in a prompt, a non-finite logit) fails its request
 * alone, naming the slot, the token and the position; the others go on.
 *
 * The CPU EP runs batches for now (the CUDA EP has no slot-aware kernels:
 * ep "cuda" is refused, "auto" takes the CPU). Threads: one thread at a time
 * per batch (ORTEP_E_STATE otherwise), callbacks run on it.
 *
 *   ortep_batch *b;
 *   ortep_batch_open("models/tiny", NULL, &b);
 *   ortep_batch_add(b, prompt_a, na, &opts, on_event, ctx, NULL);
 *   ortep_batch_add(b, prompt_b, nb, &opts, on_event, ctx, NULL);
 *   ortep_batch_run(b);   (or ortep_batch_step in the caller's own loop)
 *   ortep_batch_close(b);
 */
#ifndef ORTEP_BATCH_H
#define ORTEP_BATCH_H

#include "ortep/decode.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_batch ortep_batch;

typedef struct ortep_batch_options {
  /* ep ("auto" or "cpu"), max_seq_len (each slot's context; 0: the
   * model's, reserved not committed), eager, config, governor,
   * host_allocator, prefill_chunk, progress: as for a decoder */
  ortep_decoder_options decoder;
  size_t slots; /* sequences decoded together; 0: 8 (at most 256) */
  /* prompt tokens prefilled per step before its decode step (a long prompt
   * is spread over steps, so decoding sequences keep their pace); 0: the
   * largest chunk (256 unless decoder.prefill_chunk says otherwise) */
  size_t prefill_budget;
  /* A prompt that starts with positions another slot has run the same way
   * (a system prompt: the same tokens, cut into the same chunks) takes their
   * KV instead of running them: the whole pages mapped read-only from one
   * shared copy per cache, held once however many slots map it (and waits
   * for a slot still computing more of them); the request's tokens and
   * logits stay bitwise those it would compute alone (docs/batch.md).
   * true: every prompt runs in full. */
  bool disable_prefix_sharing;
} ortep_batch_options;

/* Opens model (model.h) for options->slots sequences; options may be NULL. */
ORTEP_API ortep_status ortep_batch_open(const char *model, const ortep_batch_options *options, ortep_batch **out);
/* Ends every request (no more events) and frees everything. */
ORTEP_API void ortep_batch_close(ortep_batch *batch);

typedef uint64_t ortep_request_id; /* 1, 2, ... in the order added; never 0 */

typedef enum ortep_request_state {
  ORTEP_REQUEST_WAITING = 0, /* no slot free yet */
  ORTEP_REQUEST_PREFILLING,  /* in a slot, its prompt running */
  ORTEP_REQUEST_DECODING,    /* generating */
  ORTEP_REQUEST_DONE,        /* stopped normally (result.reason) */
  ORTEP_REQUEST_FAILED,      /* stopped on an error (status, message) */
  ORTEP_REQUEST_CANCELLED,   /* ortep_batch_cancel */
} ortep_request_state;

typedef enum ortep_batch_event_kind {
  ORTEP_BATCH_TOKEN = 0, /* token, index: a generated token (return false to stop the request) */
  ORTEP_BATCH_DONE,      /* result: the request stopped normally */
  ORTEP_BATCH_FAILED,    /* status, message: the request failed; the others go on */
} ortep_batch_event_kind;

typedef struct ortep_batch_event {
  ortep_batch_event_kind kind;
  ortep_request_id id;
  int32_t token;                /* TOKEN */
  size_t index;                 /* TOKEN: 0 for the request's first generated token */
  ortep_generate_result result; /* DONE, FAILED (what was generated) */
  ortep_status status;          /* FAILED */
  const char *message;          /* FAILED: valid during the callback */
} ortep_batch_event;
/* Runs on the thread that steps the batch, inside ortep_batch_step; its
 * return value counts for TOKEN events only. It may add requests; it must
 * not step, cancel, release or close the batch. */
typedef bool (*ortep_batch_callback)(const ortep_batch_event *event, void *user);

/* Queues a request: prompt (n >= 1 ids, copied) and options (NULL: no limit,
 * stop at the model's EOS, greedy; copied, stop tokens too), checked now
 * (sampling fields, a prompt that cannot fit a slot's context). With a
 * callback the request is forgotten after its DONE or FAILED event; without
 * one it stays until ortep_batch_release, for ortep_batch_request and
 * ortep_batch_tokens to poll. *id may be NULL. */
ORTEP_API ortep_status ortep_batch_add(ortep_batch *batch, const int32_t *prompt, size_t n,
                                       const ortep_generate_options *options, ortep_batch_callback cb, void *user,
                                       ortep_request_id *id);

/* One step (above). *active (may be NULL): the requests still waiting or
 * running afterwards. A failure of one request is its FAILED event, not this
 * call's status, which reports what stops the whole batch (memory, a broken
 * session). */
ORTEP_API ortep_status ortep_batch_step(ortep_batch *batch, size_t *active);
/* Steps until no request is waiting or running. */
ORTEP_API ortep_status ortep_batch_run(ortep_batch *batch);

/* Stops a waiting or running request now (CANCELLED, no event; its slot is
 * free for the next step). ORTEP_E_OUT_OF_RANGE: no such request;
 * ORTEP_E_STATE: it has ended already. */
ORTEP_API ortep_status ortep_batch_cancel(ortep_batch *batch, ortep_request_id id);

typedef struct ortep_request_info {
  ortep_request_state state;
  size_t slot;                  /* PREFILLING / DECODING: its slot; else (size_t)-1 */
  size_t prompt_tokens;         /* its prompt's length */
  size_t position;              /* tokens its slot's KV holds (prompt and generated) */
  ortep_generate_result result; /* generated so far; the reason once DONE */
  ortep_status status;          /* FAILED: why */
  char message[512];            /* FAILED: the error, naming slot, token and position */
} ortep_request_info;
/* ORTEP_E_OUT_OF_RANGE: no such request (never added, or forgotten). */
ORTEP_API ortep_status ortep_batch_request(const ortep_batch *batch, ortep_request_id id, ortep_request_info *out);
/* Its generated tokens so far (at most cap into dst, which may be NULL with
 * cap 0); returns how many there are (0 for an unknown id). */
ORTEP_API size_t ortep_batch_tokens(const ortep_batch *batch, ortep_request_id id, int32_t *dst, size_t cap);
/* Forgets an ended request (DONE, FAILED, CANCELLED); ORTEP_E_STATE while
 * it waits or runs (cancel it first), ORTEP_E_OUT_OF_RANGE when unknown. */
ORTEP_API ortep_status ortep_batch_release(ortep_batch *batch, ortep_request_id id);

typedef struct ortep_batch_stats {
  size_t slots, capacity;       /* slots, and the positions each holds at most */
  size_t running, waiting;      /* requests in a slot / queued */
  uint64_t steps, decode_steps; /* ortep_batch_step calls; of them, those that ran a decode step */
  uint64_t decode_rows;         /* sequences over all decode steps (decode_rows / decode_steps: mean B) */
  uint64_t padded_rows;         /* rows of buckets left empty */
  uint64_t prefill_chunks, prefill_tokens;
  uint64_t shared_tokens; /* prompt positions taken from another slot's KV instead of run */
  uint64_t generated;     /* tokens emitted, every request */
  uint64_t captures;      /* graph captures of the batch's session since open */
  ortep_kv_stats kv;      /* every slot's caches together */
} ortep_batch_stats;
ORTEP_API void ortep_batch_get_stats(const ortep_batch *batch, ortep_batch_stats *out);
ORTEP_API ortep_ep *ortep_batch_ep(ortep_batch *batch);

ORTEP_END_DECLS

#endif
