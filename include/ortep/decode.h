/*
 * decode.h: decoding a LLaMA / Qwen2 model, one token per step: greedy
 * (device argmax) or sampled (the device sampler, ortep_sampling).
 *
 * Per step: the token id and its position are written into fixed input
 * buffers; the decode-step graph runs (eager) or replays (graph: segments and
 * seams); its last node, ortep:SelectToken, writes the step's tokens into the
 * device's token history and (token id, error word) into one 8-byte result,
 * the argmax or the sampler's draw as the parameters on the device say; one
 * 8-byte read brings both to the host; a non-zero error word fails the
 * step with ORTEP_E_DEVICE_VALIDATION naming the bits, the token is not
 * emitted and the captured graph is invalidated. After warm-up a step makes
 * no allocation. The KV caches are reserved for the whole context
 * (max_seq_len positions, by default the model's) at addresses that never
 * change, and memory is committed as positions are held, before the step
 * that writes them (never inside a captured graph), and given back as they
 * are dropped; attention reads the position from device memory, so the
 * cache grows without re-capture.
 *
 * Threads: a decoder is used by one thread at a time; different decoders are
 * independent. A call that overlaps another call on the same decoder returns
 * ORTEP_E_STATE ("in use by another call") instead of corrupting it.
 *
 *   ortep_decoder *d;
 *   ortep_decoder_open("models/tiny", NULL, &d);
 *   int32_t prompt[] = {1, 2, 3};
 *   int32_t next;
 *   ortep_decoder_prefill(d, prompt, 3, &next);
 *   ortep_decoder_generate(d, 16, print_token, NULL, NULL);
 *   ortep_decoder_close(d);
 */
#ifndef ORTEP_DECODE_H
#define ORTEP_DECODE_H

#include "ortep/ep.h"
#include "ortep/governor.h"
#include "ortep/session.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_decoder ortep_decoder;

typedef struct ortep_decoder_options {
  const char *ep;             /* "auto" (default: CUDA when built and a device exists, else CPU), "cpu", "cuda" */
  size_t max_seq_len;         /* KV-cache capacity; 0: the model's max_position_embeddings (reserved, not committed) */
  bool eager;                 /* false (default): graph mode (segments + seams); true: eager */
  const char *forced_seams;   /* op types / node names to run as seams (session.h) */
  uint32_t seam_every;        /* session.h */
  const ortep_config *config; /* EP options ("cpu.threads") and governor budgets ("ortep.host.budget_bytes") */
  ortep_governor *governor;   /* charge this governor instead of a private one (must outlive the decoder) */
  ortep_allocator *host_allocator; /* back the CPU EP with this allocator (must outlive the decoder) */
  bool profile;                    /* time every node of eager steps (ortep_session_profile) */
  /* Prefill chunking: 0 (default) automatic: chunks of 256, 128, 64, ..., 2
   * tokens; 1: token by token (no chunk graphs); N: chunks of N, N/2, N/4,
   * ... down to 2 (at most 12 sizes; sizes over max_seq_len are left out,
   * so how a prompt is cut never depends on max_seq_len). One graph
   * per chunk size, captured at its first use, all sharing the KV caches and
   * one arena. */
  size_t prefill_chunk;
  /* Tokens per launch of generate / generate_ex: the decode step repeated
   * on the device, each drawn token fed to the next step there, so K tokens
   * cost one launch and one read instead of K (kernels/feed.h; on a GPU one
   * CUDA graph with a conditional WHILE node). The tokens, stop reasons,
   * errors and callbacks are exactly those of one step at a time. 0
   * (default): automatic, as many as keep a launch near 4 ms at the
   * measured time per token (at most 16; 1 where a token takes longer, so
   * streamed text never comes in late bursts); 1: one step per launch; at
   * most 64. */
  size_t tokens_per_launch;
  /* Progress of quantizing the weights at open (ortep.weights_dtype): called
   * as each tensor is done (model.h); NULL: none. */
  ortep_progress_fn progress;
  void *progress_ctx;
} ortep_decoder_options;

/* Opens model_dir (model.h), builds the decode-step graph and a session on
 * the chosen EP. options may be NULL (defaults). */
ORTEP_API ortep_status ortep_decoder_open(const char *model_dir, const ortep_decoder_options *options,
                                          ortep_decoder **out);
ORTEP_API void ortep_decoder_close(ortep_decoder *decoder);

/* Runs the prompt through the model from the current position; afterwards
 * the next token is known (ortep_decoder_generate emits it first). The
 * prompt goes in chunks (options.prefill_chunk): each chunk is one step of
 * M = chunk-size matrix products whose attention writes the chunk's K/V and
 * attends causally; the largest chunk sizes that fit are taken greedily and
 * the rest runs token by token. Only the last position's logits are
 * computed, with one sync for the whole prompt. A prompt that does not fit
 * the cache is refused before anything runs; a bad token id in any row fails
 * the prefill (ORTEP_E_DEVICE_VALIDATION) and nothing is emitted. Chunked
 * logits equal token-by-token logits within float rounding (the sums run in
 * another order). *next may be NULL. */
ORTEP_API ortep_status ortep_decoder_prefill(ortep_decoder *decoder, const int32_t *tokens, size_t n, int32_t *next);

/* A conversation, turn after turn: ids is the whole conversation so far
 * (every turn's prompt and reply, as the caller would prefill it from the
 * start). The longest common prefix with the tokens the caches hold is kept
 * (*reused, may be NULL, says how many), the rest of what the caches hold is
 * dropped, and only the new suffix runs, so a turn costs its own tokens. At
 * least the last id runs (its logits choose *next), so giving the same
 * conversation twice reruns one token. A generated token that was emitted
 * and not yet run counts as held when the conversation continues with it.
 * Errors as ortep_decoder_prefill's; on one, the caches keep the common
 * prefix and nothing is pending. */
ORTEP_API ortep_status ortep_decoder_prefill_conversation(ortep_decoder *decoder, const int32_t *ids, size_t n,
                                                          int32_t *next, size_t *reused);

/* Keeps positions [0, n) and drops the rest: the position becomes n, nothing
 * is pending (a prefill or a step continues), and the memory wholly past n
 * goes back. n greater than the position is ORTEP_E_OUT_OF_RANGE. */
ORTEP_API ortep_status ortep_decoder_truncate(ortep_decoder *decoder, size_t n);

/* A second conversation from this one's current state, e.g. many chats
 * after one long system prompt: the fork decodes exactly as a decoder given
 * the same calls would (same options, tokens, pending token and draw), and
 * shares what can be shared. The model's weights are held once (the fork's
 * session binds the parent's prepared weights; its governor is the
 * parent's), and the KV of the positions held is shared: every whole page
 * (GPU: granule) of them is one read-only physical copy mapped into the
 * parent and all its forks, and only the page the prefix ends in is copied,
 * so N forks of a long prompt hold its KV once. The fork has its own EPs,
 * session and caches, and may run on another thread than its parent. Close
 * forks and parent in any order: the weights stay until the last is closed.
 * A decoder that failed (device validation) cannot be forked. */
ORTEP_API ortep_status ortep_decoder_fork(ortep_decoder *parent, ortep_decoder **out);

/* The token ids the caches hold, positions 0.. (at most cap into dst, which
 * may be NULL with cap 0); returns how many the caches hold (the position). */
ORTEP_API size_t ortep_decoder_tokens(const ortep_decoder *decoder, int32_t *dst, size_t cap);

/* What the KV caches take. */
typedef struct ortep_kv_stats {
  size_t capacity;          /* positions reserved (max_seq_len) */
  size_t positions;         /* positions backed by memory now */
  uint64_t reserved_bytes;  /* address space for the whole capacity (costs no memory) */
  uint64_t committed_bytes; /* memory this decoder's caches own */
  uint64_t shared_bytes;    /* mapped read-only from a prefix shared with forks (owned once among them) */
  uint64_t commits; /* commit calls that added memory, since open (per cache; a launch crossing pages makes one) */
} ortep_kv_stats;
ORTEP_API void ortep_decoder_kv_stats(const ortep_decoder *decoder, ortep_kv_stats *out);

/* The weights cache (config ortep.weights_cache = DIR or off; default
 * $XDG_CACHE_HOME/ortep/weights, else ~/.cache/ortep/weights; at most
 * ortep.weights_cache_max bytes, default 32G, or unlimited): when the CPU
 * EP runs the step, the weights it prepares (blocked, quantized:
 * ortep.weights_layout, ortep.weights_dtype) are written through its
 * save_context to a file keyed by the model file (its path, size, mtime,
 * ctime, inode, device and a hash of its header), the options and the EP's
 * context keys; the next open maps that file and the EP serves every weight
 * from it (load_context): no quantization, no repack, no copy, nothing
 * charged to the budget. A stale (the model changed), truncated, corrupt
 * (its data's checksum) or foreign file is refused with the reason and
 * rebuilt (docs/models.md: what the cache trusts); a file that cannot be written leaves the decoder as
 * it is (FAILED, with the reason). Writing or hitting a file tidies the
 * directory (ortep_weights_cache_info.removed). */
typedef enum ortep_weights_cache_state {
  ORTEP_WEIGHTS_CACHE_OFF = 0, /* off, the GPU runs the step, or no weight was prepared */
  ORTEP_WEIGHTS_CACHE_HIT,     /* every prepared weight was mapped from the file */
  ORTEP_WEIGHTS_CACHE_WRITTEN, /* there was none: prepared now, and written */
  ORTEP_WEIGHTS_CACHE_REBUILT, /* there was one, refused (reason): prepared now, and written again */
  ORTEP_WEIGHTS_CACHE_FAILED,  /* prepared now; the file could not be written (reason) */
} ortep_weights_cache_state;
typedef struct ortep_weights_cache_info {
  ortep_weights_cache_state state;
  char path[4096];  /* the file ("" when off) */
  char reason[512]; /* why a file was refused (REBUILT) or not written (FAILED); "" otherwise */
  uint64_t bytes;   /* the file's size */
  /* Files this open removed from the directory when it wrote or hit its own: those
   * no build can use again (their model file gone or changed, another format,
   * truncated, a dead writer's temporary file) and the least recently used
   * beyond ortep.weights_cache_max. */
  uint32_t removed;
  uint64_t removed_bytes;
} ortep_weights_cache_info;
ORTEP_API void ortep_decoder_weights_cache(const ortep_decoder *decoder, ortep_weights_cache_info *out);
/* "off", "hit", "written", "rebuilt", "failed". */
ORTEP_API const char *ortep_weights_cache_state_name(ortep_weights_cache_state state);

/* Called with each generated token; return false to stop. */
typedef bool (*ortep_token_callback)(int32_t token, size_t index, void *user);

/* Emits up to max_tokens tokens greedily (needs a prefill first). Stops with
 * ORTEP_E_OUT_OF_RANGE when the KV cache is full. *generated may be NULL.
 * Resumable: k calls of N/k emit exactly the tokens of one call of N (the
 * last emitted token is run through the model at the start of the next
 * generate or prefill, which therefore continues the sequence after it). */
ORTEP_API ortep_status ortep_decoder_generate(ortep_decoder *decoder, size_t max_tokens, ortep_token_callback cb,
                                              void *user, size_t *generated);

/* Why ortep_decoder_generate_ex stopped. */
typedef enum ortep_stop_reason {
  ORTEP_STOP_MAX_TOKENS = 0, /* max_tokens were emitted */
  ORTEP_STOP_EOS = 1,        /* the model's end-of-sequence token (model.h: eos_token_ids) came next */
  ORTEP_STOP_STOP_TOKEN = 2, /* one of options.stop_tokens came next */
  ORTEP_STOP_CALLBACK = 3,   /* the callback returned false */
  ORTEP_STOP_CACHE_FULL = 4, /* the KV cache is full (max_seq_len) */
} ortep_stop_reason;

/* Sampling, done on the device by the EP that holds the logits (CPU or
 * CUDA): the token and the error word still come back in one 8-byte read.
 * Random numbers are Philox4x32-10 keyed by seed and counted by the token's
 * position, so a run is reproducible from its seed, however generation is
 * split into calls, and both EPs draw the same numbers (one Philox for both;
 * the CUDA sampler has not run on a GPU yet). The order of the
 * steps (kernels/sampling.h): repetition penalty over the tokens already in
 * the sequence (prompt included), temperature, top-k, softmax, min-p, top-p,
 * then one draw. */
typedef struct ortep_sampling {
  float temperature;        /* 0: greedy (the exact argmax path); > 0: sample */
  uint32_t top_k;           /* keep the k most likely (ties kept); 0: off */
  float top_p;              /* keep the most likely whose mass reaches top_p; 0 or 1: off */
  float min_p;              /* keep those at least min_p x the most likely's probability; 0: off */
  float repetition_penalty; /* > 1 discourages repeats (HF: logit / r if > 0, else logit x r); 0 or 1: off */
  uint64_t seed;
} ortep_sampling;

typedef struct ortep_generate_options {
  size_t max_tokens;          /* at most this many; 0: until a stop token or a full cache */
  const int32_t *stop_tokens; /* more ids to stop at, besides the model's EOS (may be NULL) */
  size_t n_stop_tokens;
  bool ignore_eos;                /* do not stop at the model's eos_token_ids */
  const ortep_sampling *sampling; /* NULL, or temperature 0: greedy */
} ortep_generate_options;

typedef struct ortep_generate_result {
  size_t generated; /* tokens passed to the callback */
  ortep_stop_reason reason;
  int32_t stop_token; /* EOS / STOP_TOKEN: the id that stopped it (not emitted), else -1 */
} ortep_generate_result;

/* Generation as users run it: like ortep_decoder_generate, but stopping at
 * the model's EOS, at user stop ids, after max_tokens, or at a full KV cache,
 * each a normal end (ORTEP_OK) reported in *result (may be NULL), and
 * sampling when options->sampling asks for it (invalid values are refused
 * with ORTEP_E_INVALID_ARGUMENT naming the field). A stop token is not
 * passed to the callback (streamed text never shows it) and is kept as the
 * next token: a later call (say with ignore_eos) emits it first. A pending
 * next token chosen another way (a prefill's argmax, other sampling
 * parameters) is drawn again from the same logits with this call's choice.
 * options may be NULL (no limit, stop at the model's EOS, greedy). */
ORTEP_API ortep_status ortep_decoder_generate_ex(ortep_decoder *decoder, const ortep_generate_options *options,
                                                 ortep_token_callback cb, void *user, ortep_generate_result *result);

/* One step: token at position; *next (may be NULL) receives the argmax. A
 * position past the sequence's end (above ortep_decoder_position) inside the
 * cache is refused with ORTEP_E_OUT_OF_RANGE, since it would leave positions
 * unset; a position outside the cache is the device's to refuse (the error
 * word: ROTARY_POSITION, KV_SLOT). A step moves the sequence: afterwards the decoder's position is
 * position + 1 and the pending next token is the step's argmax, replacing
 * whatever a prefill or generate left pending; a later generate emits it
 * first (greedy), or draws it again from the step's logits (sampled): both
 * continue from the step. */
ORTEP_API ortep_status ortep_decoder_step(ortep_decoder *decoder, int32_t token, int32_t position, int32_t *next);

/* Starts over: position 0, error word cleared. Captured graphs are kept
 * (they do not depend on the position; a failed step already dropped them). */
ORTEP_API ortep_status ortep_decoder_reset(ortep_decoder *decoder);

/* The logits of the last step (vocab f32 values); ORTEP_E_STATE when no step
 * has succeeded since open or reset (or the last one failed). */
ORTEP_API ortep_status ortep_decoder_logits(ortep_decoder *decoder, float *dst, size_t n);
ORTEP_API size_t ortep_decoder_position(const ortep_decoder *decoder);
/* Host nanoseconds spent in steps before each step's sync, summed since open:
 * writing the inputs, running or replaying, launching argmax. On a GPU this
 * is the launch side alone (the sync's wait excluded); on the CPU EP, whose
 * kernels run as they are launched, it is nearly the whole step. */
ORTEP_API uint64_t ortep_decoder_launch_ns(const ortep_decoder *decoder);
ORTEP_API size_t ortep_decoder_vocab_size(const ortep_decoder *decoder);
ORTEP_API size_t ortep_decoder_max_seq_len(const ortep_decoder *decoder);
/* The name of a layer's KV cache in the decode-step graph ("past_key.3",
 * "past_value.3"): a session value (ortep_session_value) of f32
 * [max_seq_len, kv_heads, head_dim] (position-major). Writes into buf; returns buf. */
ORTEP_API const char *ortep_decoder_kv_name(size_t layer, bool value, char *buf, size_t len);
/* The device error word seen at the last failed step (0 when none). */
ORTEP_API uint32_t ortep_decoder_last_error_bits(const ortep_decoder *decoder);
ORTEP_API ortep_session *ortep_decoder_session(ortep_decoder *decoder);
/* The tokens per step of the session's graph `graph` (0: the decode step, 1;
 * then the prefill chunk sizes, largest first); 0 past the last of them (the
 * session's last graph draws a pending token again and runs no tokens). Its
 * stats (captures per chunk size): ortep_session_get_graph_stats. */
ORTEP_API size_t ortep_decoder_graph_tokens(const ortep_decoder *decoder, size_t graph);
ORTEP_API ortep_ep *ortep_decoder_ep(ortep_decoder *decoder);
/* How many of the model's weights the decoder holds in the CPU EP's blocked
 * layout (ortep.weights_layout, through the EP's prepare_initializer): 0 when all are
 * as in the file. */
ORTEP_API size_t ortep_decoder_blocked_weights(const ortep_decoder *decoder);

ORTEP_END_DECLS

#endif
