/* internal.h: what llm/'s files share. The LLM layer builds on the
 * executor's public API (session.h, graph.h, ep.h, ...) and the runtime's
 * internals; it reaches into no other layer's private headers. */
#ifndef ORTEP_LLM_INTERNAL_H
#define ORTEP_LLM_INTERNAL_H

#include "ortep/ortep.h"
#include "runtime/internal.h"
#include "runtime/strmap.h"

/* The size checks of a model config (model.c), for config.json and GGUF
 * metadata alike: what names the source in messages. */
ortep_status ortep__model_check_sizes(const ortep_model_config *c, const char *what);

/* A GGUF file as a model (gguf_model.c): the config from its metadata, and
 * its tensors under Hugging Face names (*names holds them; entries point
 * into the file). A tensor of a type ortep does not read is refused, naming
 * it and its type. */
typedef struct ortep_gguf ortep_gguf;
ortep_status ortep__gguf_config(const ortep_gguf *g, ortep_model_config *c);
ortep_status ortep__gguf_entries(const ortep_gguf *g, ortep_safetensors_entry **entries, size_t *n, char **names);
/* A Hugging Face tensor name's llama.cpp name into out (len bytes); false:
 * not a tensor a GGUF file holds. */
bool ortep__gguf_name(const char *hf, char *out, size_t len);
/* The file the model's weights come from (model.safetensors, or the .gguf). */
const char *ortep__model_file(const ortep_model *model);

/* Whether the model's weights are its own private copy (ortep.weights =
 * read), which an EP may rearrange in place when it prepares them. */
bool ortep__model_weights_private(const ortep_model *model);
/* After a session over the model's graphs is built: the weights an EP
 * prepared into a layout of its own are no longer read from the file, so a
 * mapped model drops their resident pages (a weight is then held once).
 * Returns how many the EP holds in a form of its own (blocked, quantized;
 * not the small constants it merely copies). */
size_t ortep__model_release_prepared(ortep_model *model, const ortep_session *session);
/* The same for bytes [offset, offset + bytes) of one weight, as the session
 * prepares it (a session's options.prepared callback: ctx is the model). */
void ortep__model_release_weight(void *model, const char *name, size_t offset, size_t bytes);

/* The weights cache (weights_cache.c, decode.h): opened before the session
 * (setting: ortep.weights_cache; limit: ortep.weights_cache_max, refused
 * when it is not a byte count; options: what the decoder asks of the
 * weights), a file found valid is loaded into the CPU EP's context; saved
 * after the session when the EP prepared what the file did not hold.
 * Fails only for memory or a limit that is not a byte count: what goes
 * wrong with the files is the info's reason. */
typedef struct ortep__wcache ortep__wcache;
ortep_status ortep__wcache_open(const char *setting, const char *limit, const char *model_file, const char *options,
                                ortep_ep *cpu, ortep__wcache **out);
void ortep__wcache_save(ortep__wcache *w, ortep_ep *cpu, size_t prepared);
void ortep__wcache_info(const ortep__wcache *w, ortep_weights_cache_info *out);
/* After the EP is gone: the mapping it served from. */
void ortep__wcache_close(ortep__wcache *w);

/* The decoder's KV caches on virtual backing (kv.c): one reservation per
 * cache for the whole capacity, bound into the session as external values,
 * memory committed as positions are held and given back as they are dropped. */
typedef struct ortep__kv ortep__kv;
/* Where caches come from: the allocators, created on first use (a host
 * virtual allocator charged to g, unless host_allocator has virtual backing;
 * a CUDA one per GPU). One per decoder and its forks, so their caches can
 * share mappings; it outlives every cache made from it. */
typedef struct ortep__kv_memory ortep__kv_memory;
ortep_status ortep__kv_memory_create(ortep_governor *g, ortep_allocator *host_allocator, ortep__kv_memory **out);
void ortep__kv_memory_destroy(ortep__kv_memory *m);
typedef struct ortep__kv_usage {
  uint64_t reserved_bytes, committed_bytes, shared_bytes, commits;
  size_t positions;
} ortep__kv_usage;
/* Reserves (from mem) and binds the 2 x layers caches the session's graphs
 * declare, capacity positions each (slots > 0: a batch's, [slots, capacity,
 * ...], each slot's positions held on their own: hold_slot / drop_slot;
 * capacity from ortep__kv_slot_capacity). */
ortep_status ortep__kv_open(ortep_session *session, size_t layers, size_t slots, size_t capacity, ortep__kv_memory *mem,
                            ortep__kv **out);
/* positions rounded up so that a slot of them (row_bytes each) is whole host pages */
size_t ortep__kv_slot_capacity(size_t positions, size_t row_bytes);
ortep_status ortep__kv_hold_slot(ortep__kv *kv, size_t slot, size_t positions);
/* Keeps a slot's positions [0, positions): 0, or at least what it maps from a prefix. */
ortep_status ortep__kv_drop_slot(ortep__kv *kv, size_t slot, size_t positions);
/* Slot `to` (holding nothing) takes slot `from`'s first positions: the
 * whole granules of them mapped read-only from one prefix per cache shared
 * by the two (and by every slot that took them before), the rest copied.
 * On failure the caller drops `to` to 0. */
ortep_status ortep__kv_share_slot(ortep__kv *kv, size_t from, size_t to, size_t positions);
void ortep__kv_close(ortep__kv *kv);
/* Memory for positions [0, positions) in every cache (a no-op when held). */
ortep_status ortep__kv_hold(ortep__kv *kv, size_t positions);
/* Keeps positions [0, positions); the memory wholly past them goes back. */
ortep_status ortep__kv_drop(ortep__kv *kv, size_t positions);
/* child (fresh, the same shape) takes parent's first positions, the whole
 * granules of them shared read-only between the two. */
ortep_status ortep__kv_share(ortep__kv *parent, ortep__kv *child, size_t positions);
void ortep__kv_stats(const ortep__kv *kv, ortep__kv_usage *out);

/* A batch's decoder (batch.c): opened like ortep_decoder_open, but over
 * `slots` sequences: the KV caches [slots, capacity, ...] (capacity rounded
 * up to whole pages), the decode steps of 1, 2, 4, ... slots sequences
 * (graphs 0..n_seq_graphs-1, every row its own sequence), then the prefill
 * chunks of one slot (largest first), then the redraw graph; the sampler's
 * blocks [slots, 9] and histories [slots, capacity]. batch.c drives its
 * session; the decoder's own calls refuse it. */
#include "llama.h"
ortep_status ortep__decoder_open_slots(const char *dir, const ortep_decoder_options *options, size_t slots,
                                       ortep_decoder **out);
typedef struct ortep__decoder_parts {
  ortep_session *session;
  ortep__kv *kv;
  ortep_ep *ep; /* the EP that runs the step */
  ortep_governor *governor;
  const ortep_model_config *config;
  const size_t *tokens;            /* rows of each graph */
  const ortep__llama_names *names; /* each graph's inputs and outputs */
  size_t n_seq_graphs, n_graphs;   /* decode steps, then chunks; the redraw graph is n_graphs */
  size_t capacity, vocab;          /* the positions a slot may hold (max_seq_len; its caches may be longer) */
} ortep__decoder_parts;
void ortep__decoder_get_parts(ortep_decoder *d, ortep__decoder_parts *out);
ortep_status ortep__decoder_clear_error_words(ortep_decoder *d);
/* Before a batch step over slot's positions below `positions`: their KV
 * memory committed and their rotary rows computed. */
ortep_status ortep__decoder_hold_slot(ortep_decoder *d, size_t slot, size_t positions);
/* Whether t is one of ids[0, n) (stop tokens, the model's EOS ids). */
static inline bool ortep__in_ids(int32_t t, const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] == t) return true;
  return false;
}
/* ortep_sampling checked (ORTEP_E_INVALID_ARGUMENT naming the field) and
 * turned into the device's block; *sampling false: greedy (a zero block). */
ortep_status ortep__sampling_params(const ortep_sampling *s, bool *sampling, ortep_sample_params *out);

#endif
