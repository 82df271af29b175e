/*
 * decode.c: the decoder (decode.h). Everything a step touches is set up at
 * open: one session (planned arenas, kernels, bindings) over the step graphs,
 * whose last node selects the token on the device (llama.c). A step is then
 * two 4-byte writes of session values, a run or replay, and one 8-byte read
 * of (token, error word): no allocation and no other call.
 *
 * Prefill runs the prompt in chunks: the session holds the decode graph
 * (graph 0, one token) and one graph per chunk size (bucket: 256, 128, 64,
 * ..., 2 tokens by default), all over the same KV caches and logits and one
 * planned arena. A prompt is cut greedily into the largest buckets that fit, the
 * rest goes token by token; only the last chunk's draw is read, with one
 * 8-byte read (error word included) for the whole prompt.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/trace.h"
#include "internal.h"
#include "kernels/feed.h"
#include "llama.h"
#include "ortep/cpu_ep.h"
#include "ortep/cuda_ep.h"
#include "ortep/decode.h"
#include "ortep/governor.h"

#define ORTEP__MAX_BUCKETS     12 /* prefill chunk sizes: at most this many graphs besides the decode step */
#define ORTEP__MAX_SEQ_BUCKETS 8  /* a batch's decode steps: 1, 2, 4, ..., 64, and all the slots */
#define ORTEP__MAX_GRAPHS      (ORTEP__MAX_BUCKETS + 1 + ORTEP__MAX_SEQ_BUCKETS) /* and a batch's decode steps */

struct ortep_decoder {
  /* Forks (ortep_decoder_fork) share their origin's governor, model and
   * prepared weights (its session binds them), and its KV allocators: the
   * origin lives until its last fork is closed (refs counts itself and its
   * forks); a fork owns its EPs, session and caches. */
  _Atomic size_t refs;
  ortep_decoder *origin;      /* NULL: this decoder is its own origin */
  ortep_decoder_options opts; /* as opened; its strings the decoder's own */
  char *forced;
  ortep__kv_memory *kv_memory; /* the origin's */
  ortep_governor *governor;
  bool owns_governor;
  ortep_config *ep_config; /* the EPs' config: the caller's, copied, with ortep.weights_layout applied */
  ortep_ep_registry *registry;
  ortep_ep *ep;
  ortep_model *model;
  /* graph 0: the decode step; 1..n_graphs-1: prefill chunks of tokens[g]
   * tokens, largest first */
  /* then the redraw graph (llama.h), index n_graphs in the session. A
   * batch's decoder (slots > 0, internal.h) has its decode steps of 1, 2,
   * 4, ... slots sequences first (graphs 0..n_seq_graphs-1), then the chunks. */
  ortep_graph *graphs[ORTEP__MAX_GRAPHS + 1];
  size_t tokens[ORTEP__MAX_GRAPHS];
  size_t n_graphs;
  size_t slots, n_seq_graphs;
  size_t slot_limit; /* a batch: the positions a slot may hold (max_seq_len; max_seq is that rounded to pages) */
  ortep_session *session;
  ortep__llama_dtypes
      dtypes;            /* the caches' (ortep.kv_dtype) and the weights' (ortep.weights_dtype, _embedding_dtype) */
  ortep_tensor *rope[2]; /* the rotary tables every graph views (the origin's, for a fork) */
  /* An origin's: the table rows computed so far (rope_cover), under
   * rope_lock (forks fill the origin's tables); rope_lock_made: initialised. */
  _Atomic size_t rope_rows;
  pthread_mutex_t rope_lock;
  bool rope_lock_made;
  ortep__kv *kv; /* the KV caches: reserved for max_seq positions, committed as they are held (kv.c) */
  int32_t *ids;  /* the token at each position the caches hold (ids[0, pos)) */
  /* every graph's inputs and outputs (session values) */
  ortep__llama_names names[ORTEP__MAX_GRAPHS];
  int32_t *positions; /* host staging for a chunk's positions (the largest bucket) */
  /* Token selection is the graphs' last node (ortep:SelectToken): sampling
   * is its parameter block, a session value written only when the choice
   * changes (dev_sp is what the device holds); the token history lives on
   * the device too, written by the node. last_token is the last token fed
   * (at pos - 1), for a redraw. */
  bool sampling;          /* the draw after a step samples (else argmax) */
  ortep_sample_params sp; /* its parameters (temperature 0: argmax) */
  ortep_sample_params dev_sp;
  bool dev_sp_valid;
  bool next_sampled; /* next was drawn by the sampler with next_sp (else by argmax) */
  ortep_sample_params next_sp;
  int32_t last_token;
  /* The other EPs that run nodes of the step (mixed placement): their error
   * words are read at the sync and ORed into the result's, so a bad index on
   * any EP fails the step. None when one EP runs everything, the usual case. */
  ortep_ep *watch[2];
  size_t n_watch;
  size_t vocab, max_seq, pos;
  /* next: the token generate emits next (valid when have_next). fed: false
   * while the last emitted token has not been run through the model yet; the
   * next generate (or prefill) runs it first, so k calls of N/k emit exactly
   * the tokens of one call of N, with no step wasted at the end of a call. */
  int32_t next;
  bool have_next, fed, failed;
  bool logits_valid; /* the last step succeeded: its logits can be read */
  atomic_flag busy;  /* set while a call runs: a second thread is refused */
  uint32_t last_bits;
  uint64_t steps;
  uint64_t launch_ns;    /* host time in steps up to the sync (what launching costs on a GPU) */
  size_t prepared;       /* weights an EP holds in a layout of its own (the CPU EP's blocked projections) */
  ortep__wcache *wcache; /* the origin's weights cache (weights_cache.c); NULL for a fork */
  /* K tokens per launch (decode.h: tokens_per_launch; kernels/feed.h): the
   * draws of the last launch the device fed on and generate has not taken
   * yet (queue[q_at, q_n)), an error word its last step latched (raised when
   * the queue runs out, where a single step would have failed), the stop
   * mask as the device holds it (mask: a host copy, mask_ids: the ids set),
   * and the measured time per token of launches (auto K). */
  int32_t queue[ORTEP__FEED_MAX];
  size_t q_at, q_n;
  uint32_t q_word;
  uint8_t *mask;
  int32_t *mask_ids;
  size_t n_mask_ids, cap_mask_ids;
  uint64_t ns_per_token;
  uint64_t launches; /* launches of the decode step (a launch of K steps counts once) */
};

/* Drops one reference; the last frees what the decoder owns, then lets go
 * of its origin. */
static void release(ortep_decoder *d) {
  if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1) return;
  ortep_session_destroy(d->session); /* graphs reset before arenas go */
  ortep__kv_close(d->kv);            /* and before the caches they point into */
  ortep__free(d->ids);
  for (size_t g = 0; g <= d->n_graphs; g++) ortep_graph_destroy(d->graphs[g]);
  ortep_tensor_release(d->rope[0]);
  ortep_tensor_release(d->rope[1]);
  ortep__free(d->positions);
  ortep__free(d->mask);
  ortep__free(d->mask_ids);
  ortep_decoder *origin = d->origin;
  if (!origin) ortep_model_close(d->model); /* a private copy is the CPU EP's: before the EPs go */
  ortep_ep_registry_destroy(d->registry);
  ortep__wcache_close(d->wcache); /* the mapping the CPU EP served weights from: after it */
  ortep_config_destroy(d->ep_config);
  ortep__free(d->forced);
  if (!origin) {
    if (d->rope_lock_made) pthread_mutex_destroy(&d->rope_lock);
    ortep__kv_memory_destroy(d->kv_memory);
    if (d->owns_governor) ortep_governor_destroy(d->governor);
  }
  ortep__free(d);
  if (origin) release(origin);
}

void ortep_decoder_close(ortep_decoder *d) {
  if (!d) return;
  /* the conversation's memory goes now, even while forks keep the weights
   * (the session stays with them: it holds the weights the forks bind) */
  ortep__kv_close(d->kv);
  d->kv = NULL;
  release(d);
}

#define WEIGHTS_KEY "ortep.weights"
#define LAYOUT_KEY  "ortep.weights_layout"
#define KV_KEY      "ortep.kv_dtype"
#define WDTYPE_KEY  "ortep.weights_dtype"
#define EDTYPE_KEY  "ortep.embedding_dtype"
#define CACHE_KEY   "ortep.weights_cache"
#define CMAX_KEY    "ortep.weights_cache_max"
#define AUTO_CHUNK  256 /* prefill_chunk 0: chunks of 256, 128, 64, ..., 2 */

/* Every key must belong to a component that reads it: ortep.* (the decoder
 * and the governor), cpu.* and cuda.* (the EPs, whether or not this machine
 * has a GPU, so one config serves both). A key of no namespace is a typo or
 * another program's, and silently ignoring it would hide that. */
static ortep_status check_namespaces(const ortep_config *c) {
  static const char *const spaces[] = {"ortep.", "cpu.", "cuda."};
  for (size_t i = 0; i < ortep_config_count(c); i++) {
    const char *k = ortep_config_key(c, i);
    bool known = false;
    for (size_t j = 0; j < sizeof spaces / sizeof *spaces; j++)
      known = known || !strncmp(k, spaces[j], strlen(spaces[j]));
    if (!known)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "config key '%s': no component reads it; the namespaces are ortep.* (the decoder and the "
                         "memory budgets), cpu.* (the CPU EP) and cuda.* (the CUDA EP)",
                         k);
  }
  return ORTEP_OK;
}

static ortep_status apply_governor_config(ortep_governor *g, const ortep_config *c) {
  ortep_status st = check_namespaces(c);
  if (st != ORTEP_OK) return st;
  for (size_t i = 0; i < ortep_config_count(c); i++) {
    const char *k = ortep_config_key(c, i);
    if (strncmp(k, "ortep.", 6) != 0 || !strcmp(k, WEIGHTS_KEY) || !strcmp(k, LAYOUT_KEY) || !strcmp(k, KV_KEY) ||
        !strcmp(k, WDTYPE_KEY) || !strcmp(k, EDTYPE_KEY) || !strcmp(k, CACHE_KEY) || !strcmp(k, CMAX_KEY))
      continue;
    st = ortep_governor_configure(g, k, ortep_config_get(c, k));
    if (st != ORTEP_OK) /* the governor names its own keys; the decoder's besides */
      return ortep__wrap(st, "decoder config (ortep.* keys: %s, %s, %s, %s, %s, %s, %s and the governor's)",
                         WEIGHTS_KEY, LAYOUT_KEY, KV_KEY, WDTYPE_KEY, EDTYPE_KEY, CACHE_KEY, CMAX_KEY);
  }
  return ORTEP_OK;
}

/* Default host budget when the caller sets none: three quarters of physical
 * memory, so an absurd config is refused with an ortep error instead of
 * ending in the kernel's OOM killer. */
static uint64_t default_host_budget(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return ORTEP_BUDGET_UNLIMITED;
  return (uint64_t)pages / 4 * 3 * (uint64_t)page;
}

/* What the decoder will hold in host memory (on_host: the CPU EP runs the
 * step; otherwise only the rotary tables stay on the host), computed
 * from the config before any of it is allocated (model.c bounds every
 * product, so none of this overflows): the KV caches, the rotary tables, and
 * an upper bound on the planned arena (every activation of the step at once).
 * Refused with the parts named when it cannot fit the budget. */
static ortep_status check_size(ortep_decoder *d, const ortep_model_config *c, bool on_host) {
  uint64_t f = sizeof(float), S = d->max_seq, L = (uint64_t)c->num_hidden_layers, HD = (uint64_t)c->head_dim;
  uint64_t H = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size, V = (uint64_t)c->vocab_size;
  uint64_t q = (uint64_t)c->num_attention_heads * HD, kv = (uint64_t)c->num_key_value_heads * HD;
  uint64_t kv_bytes = 2 * L * kv * S * ortep_dtype_size(d->dtypes.kv) * (d->slots ? d->slots : 1);
  uint64_t rope = S * HD * f; /* cos, sin: S x HD/2 each */
  uint64_t act = (L * (8 * H + 3 * q + 4 * kv + 3 * I) + 2 * V + (uint64_t)c->num_attention_heads * S) * f;
  /* a prefill chunk of T tokens: its layers' activations (the planner reuses
   * them from layer to layer; twice one layer's bounds what it keeps) */
  uint64_t T = 1;
  for (size_t g = 0; g < d->n_graphs; g++) T = d->tokens[g] > T ? d->tokens[g] : T;
  uint64_t chunk = (2 * T * (8 * H + 3 * q + 4 * kv + 3 * I) + 2 * V) * f;
  if (d->n_graphs > 1 && chunk > act) act = chunk;
  /* the KV caches are reserved, not committed: what must fit now is the rest,
   * and the caches may grow to their capacity within what is left */
  uint64_t need = (on_host ? act : 0) + rope, budget = ortep_governor_budget(d->governor, ORTEP_TIER_HOST);
  ortep_mem_stats used;
  ortep_governor_get_stats(d->governor, ORTEP_TIER_HOST, &used);
  if (budget == ORTEP_BUDGET_UNLIMITED || (used.current_bytes <= budget && need <= budget - used.current_bytes))
    return ORTEP_OK;
  char b[6][32];
  return ortep__fail(
      ORTEP_E_BUDGET_EXCEEDED,
      "the decoder needs about %s of host memory up front (activations up to %s, rotary tables %s; "
      "the KV caches, up to %s for max_seq_len %zu, are committed as tokens arrive) but the host "
      "budget is %s with %s in use; lower max_seq_len, or raise ortep.host.budget_bytes",
      ortep__format_bytes(need, b[0], 32), on_host ? ortep__format_bytes(act, b[2], 32) : "0 B (on the GPU)",
      ortep__format_bytes(rope, b[3], 32), on_host ? ortep__format_bytes(kv_bytes, b[1], 32) : "0 B (on the GPU)",
      d->max_seq, ortep__format_bytes(budget, b[4], 32), ortep__format_bytes(used.current_bytes, b[5], 32));
}

/* Initialises ep and hands it to the registry. Ownership has one rule: ep
 * belongs to this call from entry, so on any failure it is already destroyed
 * (ortep_ep_registry_add destroys what it refuses) and the caller must not
 * touch it again. */
static ortep_status register_ep(ortep_decoder *d, ortep_ep *ep, const ortep_config *config) {
  ortep_status st = ortep_ep_initialize(ep, config);
  if (st != ORTEP_OK) {
    ortep_ep_destroy(ep);
    return st;
  }
  return ortep_ep_registry_add(d->registry, ep, NULL);
}

static ortep_status reset_error_words(ortep_decoder *d) {
  for (uint32_t i = 0; i < ortep_ep_registry_count(d->registry); i++) {
    ortep_status st = ortep_ep_reset_error_word(ortep_ep_registry_get(d->registry, i));
    if (st != ORTEP_OK) return st;
  }
  return ORTEP_OK;
}

/* The parameter block the graphs' SelectToken reads: d->sp when sampling,
 * else zeros (temperature 0: the argmax). Written only when it changes, so
 * a run of steps with one choice writes it once. */
static ortep_status write_params(ortep_decoder *d) {
  if (d->slots) return ORTEP_OK; /* a batch writes every slot's block itself */
  ortep_sample_params want = d->sampling ? d->sp : (ortep_sample_params){0};
  if (d->dev_sp_valid && !memcmp(&want, &d->dev_sp, sizeof want)) return ORTEP_OK;
  ortep_status st = ortep_session_write(d->session, ORTEP_INPUT_SAMPLE_PARAMS, &want, sizeof want);
  d->dev_sp_valid = st == ORTEP_OK;
  if (st == ORTEP_OK) d->dev_sp = want;
  return st;
}

/* Open, step 1: the governor (the caller's, or a private one with the
 * default host budget) and the decoder's config applied to it. */
static ortep_status open_governor(ortep_decoder *d, const ortep_decoder_options *o) {
  ortep_status st;
  if (o->governor) {
    d->governor = o->governor;
  } else {
    if ((st = ortep_governor_create(&d->governor)) != ORTEP_OK) return st;
    d->owns_governor = true;
    if ((st = ortep_governor_set_budget(d->governor, ORTEP_TIER_HOST, default_host_budget())) != ORTEP_OK) return st;
  }
  return apply_governor_config(d->governor, o->config);
}

/* The EPs' config: the caller's, with ortep.weights_layout (the decoder's
 * name for it) turned into the CPU EP's cpu.weights_layout, which decides
 * whether it blocks the 16-bit projections when the session binds them. */
static ortep_status ep_config(ortep_decoder *d, const ortep_config *config) {
  const char *lm = ortep_config_get(config, LAYOUT_KEY);
  if (lm && strcmp(lm, "auto") && strcmp(lm, "blocked") && strcmp(lm, "row_major"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s = '%s': use auto (the default: blocked when the CPU runs the step), blocked or row_major",
                       LAYOUT_KEY, lm);
  ortep_status st = ortep_config_create(&d->ep_config); /* a copy: forks are made from it after open */
  for (size_t i = 0; st == ORTEP_OK && i < ortep_config_count(config); i++) {
    const char *k = ortep_config_key(config, i);
    st = ortep_config_set(d->ep_config, k, ortep_config_get(config, k));
  }
  if (st == ORTEP_OK && lm)
    st = ortep_config_set(d->ep_config, "cpu.weights_layout", strcmp(lm, "row_major") ? "blocked" : "row_major");
  return st;
}

/* Step 2: the EPs: the GPU first when wanted and usable (placement prefers
 * its lower cost), then the CPU EP, the host EP that owns initializers.
 * *cpu is the CPU EP, owned by the registry from here on. */
static ortep_status open_eps(ortep_decoder *d, const ortep_decoder_options *o, const ortep_config *config,
                             const char *want, ortep_ep **cpu) {
  *cpu = NULL;
  ortep_status st = ep_config(d, config);
  if (st != ORTEP_OK) return st;
  const ortep_config *cfg = d->ep_config;
  if ((st = ortep_ep_registry_create(&d->registry)) != ORTEP_OK ||
      (st = o->host_allocator ? ortep_cpu_ep_create_with_allocator(o->host_allocator, cpu)
                              : ortep_cpu_ep_create(d->governor, cpu)) != ORTEP_OK)
    return st;
  if (strcmp(want, "cpu") != 0) {
    char why[256] = "";
    if (ortep_cuda_available(why, sizeof why)) {
      ortep_ep *gpu = NULL;
      if ((st = ortep_cuda_ep_create(d->governor, &gpu)) != ORTEP_OK || (st = register_ep(d, gpu, cfg)) != ORTEP_OK) {
        ortep_ep_destroy(*cpu);
        return st;
      }
    } else if (!strcmp(want, "cuda")) {
      ortep_ep_destroy(*cpu);
      return ortep__fail(ORTEP_E_NO_DEVICE, "ep \"cuda\" was asked for, but %s; use ep \"cpu\" or \"auto\"", why);
    }
  }
  return register_ep(d, *cpu, cfg);
}

/* Step 3: the model, mapped or read (ortep.weights). */
static ortep_status open_weights(ortep_decoder *d, const char *dir, const ortep_config *config, ortep_ep *cpu) {
  const char *wm = ortep_config_get(config, WEIGHTS_KEY);
  if (wm && strcmp(wm, "map") && strcmp(wm, "read"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s = '%s': use map (the default: zero-copy) or read (a private copy)",
                       WEIGHTS_KEY, wm);
  const char *lm = ortep_config_get(config, LAYOUT_KEY);
  if (lm && !strcmp(lm, "blocked") && ortep_ep_registry_count(d->registry) > 1)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s = blocked is the CPU EP's layout, but the step runs on the GPU; use auto or row_major, or "
                       "ep \"cpu\"",
                       LAYOUT_KEY);
  ortep_model_options mo = {wm && !strcmp(wm, "read") ? ORTEP_WEIGHTS_READ : ORTEP_WEIGHTS_MAP, cpu};
  return ortep_model_open_with(dir, &mo, &d->model);
}

/* Step 4: the cache's capacity and the chunk sizes: prefill_chunk (or 256),
 * then halves down to 2, so a prompt is cut into at most one chunk of each
 * size below the largest and at most one token goes alone; then whether it
 * all fits the host budget. */
/* ortep.weights_dtype (the projections) and ortep.embedding_dtype (the
 * embedding and lm_head): q8_0, q4_0 or stored; the embedding's default is
 * q8_0 once the projections are quantized, stored otherwise. The graphs ask
 * the EP to store them so (ortep_graph_prefer_initializer_dtype): the CPU or
 * CUDA EP quantizes them when it prepares them. */
static ortep_status quant_choice(const char *key, const char *v, const char *fallback, ortep_dtype *out) {
  if (!v) v = fallback;
  if (!strcmp(v, "stored")) return *out = ORTEP_DTYPE_COUNT, ORTEP_OK;
  if (!strcmp(v, "q8_0")) return *out = ORTEP_DTYPE_Q8_0, ORTEP_OK;
  if (!strcmp(v, "q4_0")) return *out = ORTEP_DTYPE_Q4_0, ORTEP_OK;
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s = '%s': use q8_0, q4_0 or stored (the weights as in the file)", key,
                     v);
}
static ortep_status weights_dtype(ortep_decoder *d) {
  ortep_status st =
      quant_choice(WDTYPE_KEY, ortep_config_get(d->ep_config, WDTYPE_KEY), "stored", &d->dtypes.projections);
  if (st == ORTEP_OK)
    st = quant_choice(EDTYPE_KEY, ortep_config_get(d->ep_config, EDTYPE_KEY),
                      d->dtypes.projections == ORTEP_DTYPE_COUNT ? "stored" : "q8_0", &d->dtypes.embedding);
  return st; /* the EP that runs a weight's nodes quantizes it (the CPU EP; the CUDA EP, not run on a GPU yet) */
}

/* ortep.kv_dtype: f32 (the default), f16 or bf16; 16-bit caches are the CPU
 * EP's only. */
static ortep_status kv_dtype(ortep_decoder *d) {
  ortep_status wst = weights_dtype(d);
  if (wst != ORTEP_OK) return wst;
  const char *v = ortep_config_get(d->ep_config, KV_KEY);
  d->dtypes.kv = ORTEP_DTYPE_F32;
  if (!v) return ORTEP_OK;
  if (ortep_dtype_parse(v, &d->dtypes.kv) != ORTEP_OK ||
      (d->dtypes.kv != ORTEP_DTYPE_F32 && d->dtypes.kv != ORTEP_DTYPE_F16 && d->dtypes.kv != ORTEP_DTYPE_BF16)) {
    ortep_clear_error();
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s = '%s': use f32 (the default), f16 or bf16", KV_KEY, v);
  }
  if (d->dtypes.kv != ORTEP_DTYPE_F32 && ortep_ep_registry_count(d->registry) > 1)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s = %s: 16-bit KV caches are implemented on the CPU EP only, and the step runs on the GPU; "
                       "use f32, or ep \"cpu\"",
                       KV_KEY, v);
  return ORTEP_OK;
}

static ortep_status size_steps(ortep_decoder *d, const ortep_decoder_options *o) {
  ortep_status st = kv_dtype(d);
  if (st != ORTEP_OK) return st;
  const ortep_model_config *c = ortep_model_get_config(d->model);
  size_t limit = (size_t)c->max_position_embeddings;
  d->max_seq = o->max_seq_len ? o->max_seq_len : limit; /* reserved, not committed: the whole context costs nothing */
  if (d->max_seq > limit || d->max_seq > INT32_MAX)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "max_seq_len %zu exceeds the model's max_position_embeddings %zu",
                       d->max_seq, limit);
  d->vocab = (size_t)c->vocab_size;
  d->slot_limit = d->max_seq;
  if (d->slots) { /* a batch: the slots' caches must not share a page; the capacity rounded up to whole pages */
    size_t row = (size_t)c->num_key_value_heads * (size_t)c->head_dim * ortep_dtype_size(d->dtypes.kv);
    d->max_seq = ortep__kv_slot_capacity(d->max_seq, row);
  }
  size_t top = o->prefill_chunk ? o->prefill_chunk : AUTO_CHUNK;
  if (d->slots) { /* the decode steps of 1, 2, 4, ... sequences, and of all the slots */
    for (size_t b = 1; b < d->slots && d->n_seq_graphs < ORTEP__MAX_SEQ_BUCKETS - 1; b *= 2)
      d->tokens[d->n_seq_graphs++] = b;
    d->tokens[d->n_seq_graphs++] = d->slots;
    d->n_graphs = d->n_seq_graphs;
  } else {
    d->tokens[d->n_graphs++] = 1;
  }
  /* sizes past the cache are left out rather than the list cut down to it:
   * a prompt's chunk cuts, and so its logits, never depend on max_seq_len */
  size_t first_chunk = d->n_graphs;
  for (size_t t = top; t >= 2 && d->n_graphs - first_chunk < ORTEP__MAX_BUCKETS; t /= 2)
    if (t <= d->max_seq) d->tokens[d->n_graphs++] = t;
  return check_size(d, c, ortep_ep_registry_count(d->registry) == 1);
}

/* The rotary rows of positions below end, computed before the first step
 * that reads them (ahead: twice what is used, at least 256 rows, at most
 * max_seq), so a long context costs what the decoder uses. The origin's
 * tables, which its forks share: under its lock, the count published last. */
static ortep_status rope_cover(ortep_decoder *d, size_t end) {
  ortep_decoder *o = d->origin ? d->origin : d;
  if (end > o->max_seq) end = o->max_seq;
  if (atomic_load_explicit(&o->rope_rows, memory_order_acquire) >= end) return ORTEP_OK;
  pthread_mutex_lock(&o->rope_lock);
  size_t have = atomic_load_explicit(&o->rope_rows, memory_order_relaxed), to = have * 2;
  ortep_status st = ORTEP_OK;
  if (have < end) {
    to = to > end ? to : end, to = to > 256 ? to : 256, to = to < o->max_seq ? to : o->max_seq;
    st = ortep__llama_rope_fill(o->model, o->rope, have, to);
    if (st == ORTEP_OK) atomic_store_explicit(&o->rope_rows, to, memory_order_release);
  }
  pthread_mutex_unlock(&o->rope_lock);
  return st;
}

/* What a step over positions below end needs first: their KV memory (one
 * sequence's caches, or slot's of a batch) and their rotary rows. */
static ortep_status hold(ortep_decoder *d, size_t slot, size_t end) {
  ortep_status st = rope_cover(d, end);
  if (st == ORTEP_OK) st = d->slots ? ortep__kv_hold_slot(d->kv, slot, end) : ortep__kv_hold(d->kv, end);
  return st;
}

ortep_status ortep__decoder_hold_slot(ortep_decoder *d, size_t slot, size_t positions) {
  return hold(d, slot, positions);
}

/* Step 5: the graphs (the decode step, the prefill chunks, the redraw) and
 * one session over them, and the names of every graph's inputs. */
static ortep_status open_session(ortep_decoder *d, const ortep_decoder_options *o, ortep_ep *cpu) {
  ortep_status st = ORTEP_OK;
  if (d->origin) { /* the same bytes: the session binds the origin's */
    for (int i = 0; i < 2 && st == ORTEP_OK; i++)
      st = ortep_tensor_view_as(d->origin->rope[i], 0, ORTEP_DTYPE_F32, ortep_tensor_shape(d->origin->rope[i]),
                                &d->rope[i]);
  } else {
    st = ortep__llama_rope_tables(d->model, cpu, d->max_seq, d->rope);
    d->rope_lock_made = st == ORTEP_OK && pthread_mutex_init(&d->rope_lock, NULL) == 0;
    if (st == ORTEP_OK && !d->rope_lock_made) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no rotary table lock");
    /* another EP copies the tables when the session binds them: all rows now */
    if (st == ORTEP_OK && ortep_ep_registry_count(d->registry) > 1) st = rope_cover(d, d->max_seq);
  }
  if (st != ORTEP_OK) return st;
  for (size_t g = 0; g < d->n_graphs; g++) {
    ortep__llama_step step = {d->tokens[g], d->slots, g < d->n_seq_graphs};
    if ((st = ortep__llama_build(d->model, cpu, d->max_seq, &step, &d->dtypes, d->rope, &d->graphs[g])) != ORTEP_OK)
      return st;
    ortep__llama_names_of(&step, &d->names[g]);
  }
  if ((st = ortep__llama_build_redraw(d->model, d->max_seq, d->slots, &d->graphs[d->n_graphs])) != ORTEP_OK) return st;
  size_t most = 1; /* positions staged on the host: the largest chunk, or a batch's slots */
  for (size_t g = 0; g < d->n_graphs; g++) most = d->tokens[g] > most ? d->tokens[g] : most;
  if (most > 1 && !(d->positions = ortep__malloc(most * sizeof *d->positions)))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for %zu prefill positions", most);
  /* the KV caches are the decoder's (kv.c), not the arena's */
  size_t layers = (size_t)ortep_model_get_config(d->model)->num_hidden_layers;
  char(*kv_names)[32] = ortep__calloc(2 * layers, sizeof *kv_names);
  const char **ext = ortep__calloc(2 * layers, sizeof *ext);
  if (!kv_names || !ext) st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for the KV caches' names");
  for (size_t i = 0; st == ORTEP_OK && i < 2 * layers; i++)
    ext[i] = ortep_decoder_kv_name(i / 2, i % 2, kv_names[i], sizeof kv_names[i]);
  ortep_session_options so = {.mode = o->eager ? ORTEP_RUN_EAGER : ORTEP_RUN_GRAPH,
                              .forced_seams = o->forced_seams,
                              .seam_every = o->seam_every,
                              .profile = o->profile,
                              .external_values = ext,
                              .n_external_values = 2 * layers,
                              .initializers_from = d->origin ? d->origin->session : NULL,
                              .progress = o->progress,
                              .progress_ctx = o->progress_ctx,
                              .prepared = ortep__model_release_weight,
                              .prepared_ctx = d->model};
  if (st == ORTEP_OK)
    st = ortep_session_create_multi((const ortep_graph *const *)d->graphs, d->n_graphs + 1, d->registry, &so,
                                    &d->session);
  ortep__free(kv_names), ortep__free(ext);
  if (st == ORTEP_OK) d->prepared = ortep__model_release_prepared(d->model, d->session);
  if (st == ORTEP_OK && !d->kv_memory) st = ortep__kv_memory_create(d->governor, o->host_allocator, &d->kv_memory);
  if (st == ORTEP_OK) st = ortep__kv_open(d->session, layers, d->slots, d->max_seq, d->kv_memory, &d->kv);
  if (st == ORTEP_OK && !(d->ids = ortep__malloc(d->max_seq * sizeof *d->ids)))
    st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for the ids of %zu positions", d->max_seq);
  return st;
}

/* Whether any node of the decoder's graphs runs on ep. */
static bool runs_nodes(const ortep_decoder *d, const ortep_ep *ep) {
  for (size_t g = 0; g <= d->n_graphs; g++)
    for (size_t i = 0; i < ortep_graph_node_count(d->graphs[g]); i++)
      if (ortep_session_node_ep(d->session, ortep_node_name(ortep_graph_node(d->graphs[g], (ortep_node_id)i))) == ep)
        return true;
  return false;
}

/* Step 4b: the weights cache, when the CPU EP runs the whole step: keyed by
 * what decides the prepared weights (the dtypes asked for, the layout as
 * asked and the CPU EP's setting of it, "default" when unset: the EP's keys
 * say which layout that is, the decoder need not; the weights mode) besides
 * the model file and the EP's context keys; the file is named by all of it
 * but the keys. */
static ortep_status open_cache(ortep_decoder *d, const char *dir, ortep_ep *cpu) {
  /* off where a GPU runs the step, its settings still checked */
  const char *where = ortep_ep_registry_count(d->registry) != 1 ? "off" : ortep_config_get(d->ep_config, CACHE_KEY);
  const char *lm = ortep_config_get(d->ep_config, LAYOUT_KEY), *wm = ortep_config_get(d->ep_config, WEIGHTS_KEY),
             *cl = ortep_config_get(d->ep_config, "cpu.weights_layout"); /* set directly, or from lm */
  char opts[320];
  (void)dir;
  snprintf(opts, sizeof opts, "ortep weights cache; projections %s; embedding %s; layout %s (cpu %s); weights %s",
           d->dtypes.projections == ORTEP_DTYPE_COUNT ? "stored" : ortep_dtype_name(d->dtypes.projections),
           d->dtypes.embedding == ORTEP_DTYPE_COUNT ? "stored" : ortep_dtype_name(d->dtypes.embedding),
           lm ? lm : "auto", cl ? cl : "default", wm ? wm : "map");
  return ortep__wcache_open(where, ortep_config_get(d->ep_config, CMAX_KEY), ortep__model_file(d->model), opts, cpu,
                            &d->wcache);
}

void ortep_decoder_weights_cache(const ortep_decoder *d, ortep_weights_cache_info *out) {
  if (!out) return;
  ortep__wcache_info(d ? d->wcache : NULL, out);
}

/* Step 6: the state a step starts from: greedy parameters on the device,
 * the other EPs whose words the sync must fold in, clean error words. (The
 * KV caches need no clearing: a position is written before it is read.) */
static ortep_status prime_state(ortep_decoder *d) {
  ortep_status st = ortep_session_value(d->session, ORTEP_OUTPUT_RESULT, &d->ep, NULL, NULL);
  if (st == ORTEP_OK) st = write_params(d);
  if (st == ORTEP_OK && !d->slots) { /* the loop state unarmed (an arena holds anything) and no stop id set */
    int32_t idle[ORTEP__FEED_HEADER + ORTEP__FEED_MAX] = {0};
    if (!(d->mask = ortep__calloc(d->vocab, 1)))
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for the stop mask (%zu ids)", d->vocab);
    st = ortep_session_write(d->session, ORTEP_INPUT_LOOP, idle, sizeof idle);
    if (st == ORTEP_OK) st = ortep_session_write(d->session, ORTEP_INPUT_STOP_MASK, d->mask, d->vocab);
  }
  for (uint32_t i = 0; st == ORTEP_OK && i < ortep_ep_registry_count(d->registry); i++) {
    ortep_ep *ep = ortep_ep_registry_get(d->registry, i);
    if (ep != d->ep && ortep_ep_error_word_ptr(ep) && runs_nodes(d, ep) &&
        d->n_watch < sizeof d->watch / sizeof *d->watch)
      d->watch[d->n_watch++] = ep;
  }
  return st == ORTEP_OK ? reset_error_words(d) : st;
}

static ortep_status open_decoder(const char *dir, const ortep_decoder_options *options, size_t slots,
                                 ortep_decoder **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_open: out is NULL");
  *out = NULL;
  if (!dir) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_open: the model directory is NULL");
  ortep_decoder_options o = options ? *options : (ortep_decoder_options){0};
  const char *want = o.ep ? o.ep : "auto";
  if (o.tokens_per_launch > ORTEP__FEED_MAX)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "tokens_per_launch %zu: use 0 (automatic) or 1 to %d",
                       o.tokens_per_launch, ORTEP__FEED_MAX);
  if (strcmp(want, "auto") && strcmp(want, "cpu") && strcmp(want, "cuda"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "unknown EP '%s'; choose auto, cpu or cuda", want);
  ortep_decoder *d = ortep__calloc(1, sizeof *d);
  if (!d) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the decoder");
  atomic_flag_clear(&d->busy);
  atomic_init(&d->refs, 1);
  d->fed = true;
  d->slots = slots;
  d->opts = o;
  d->opts.config = NULL; /* copied into ep_config */
  d->opts.ep = !strcmp(want, "cpu") ? "cpu" : !strcmp(want, "cuda") ? "cuda" : "auto";
  if (o.forced_seams && !(d->forced = ortep__strdup(o.forced_seams))) {
    ortep__free(d);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the decoder");
  }
  d->opts.forced_seams = d->forced;
  ortep_ep *cpu = NULL;
  ortep_status st = open_governor(d, &o);
  if (st == ORTEP_OK) st = open_eps(d, &o, o.config, want, &cpu);
  if (st == ORTEP_OK) st = open_weights(d, dir, o.config, cpu);
  if (st == ORTEP_OK) st = size_steps(d, &o);
  if (st == ORTEP_OK) st = open_cache(d, dir, cpu);
  if (st == ORTEP_OK) st = open_session(d, &o, cpu);
  if (st == ORTEP_OK) ortep__wcache_save(d->wcache, cpu, d->prepared);
  if (st == ORTEP_OK) st = prime_state(d);
  if (st != ORTEP_OK) {
    ortep_decoder_close(d);
    return st;
  }
  *out = d;
  return ORTEP_OK;
}

ortep_status ortep_decoder_open(const char *dir, const ortep_decoder_options *options, ortep_decoder **out) {
  return open_decoder(dir, options, 0, out);
}

ortep_status ortep__decoder_open_slots(const char *dir, const ortep_decoder_options *options, size_t slots,
                                       ortep_decoder **out) {
  ortep__assert(slots > 0);
  return open_decoder(dir, options, slots, out);
}

void ortep__decoder_get_parts(ortep_decoder *d, ortep__decoder_parts *out) {
  *out = (ortep__decoder_parts){d->session, d->kv,    d->ep,           d->governor, ortep_model_get_config(d->model),
                                d->tokens,  d->names, d->n_seq_graphs, d->n_graphs, d->slot_limit,
                                d->vocab};
}

ortep_status ortep__decoder_clear_error_words(ortep_decoder *d) { return reset_error_words(d); }

/* Entry guard of every call that touches the decoder's state: the contract
 * (decode.h) is one thread at a time, and a second concurrent call gets
 * ORTEP_E_STATE instead of corrupting the session. One atomic exchange. */
static ortep_status enter(ortep_decoder *d, const char *what) {
  if (d->slots) /* a batch's own (ortep_batch): never handed out, but say so rather than misbehave */
    return ortep__fail(ORTEP_E_STATE, "%s: this decoder is a batch's; use the ortep_batch calls", what);
  if (atomic_flag_test_and_set_explicit(&d->busy, memory_order_acquire))
    return ortep__fail(ORTEP_E_STATE,
                       "%s: the decoder is in use by another call right now; a decoder serves one thread at a time "
                       "(use one decoder per thread, or a lock around it)",
                       what);
  return ORTEP_OK;
}
static ortep_status leave(ortep_decoder *d, ortep_status st) {
  atomic_flag_clear_explicit(&d->busy, memory_order_release);
  return st;
}

static ortep_status refuse_failed(const ortep_decoder *d) {
  return ortep__fail(ORTEP_E_STATE,
                     "the decoder stopped on a device validation error (bits 0x%x); call ortep_decoder_reset to start "
                     "over",
                     d->last_bits);
}

/* Graph g over n = tokens[g] tokens at position..position + n - 1: the ids
 * and positions written, the graph run or replayed (its last node selects
 * the next token on the device). No sync. */
static ortep_status launch(ortep_decoder *d, size_t g, const int32_t *ids, int32_t position) {
  size_t n = d->tokens[g];
  const int32_t *pos = &position;
  if (n > 1) {
    for (size_t i = 0; i < n; i++) d->positions[i] = position + (int32_t)i;
    pos = d->positions;
  }
  d->last_token = ids[n - 1];
  ortep_status st = ORTEP_OK;
  /* memory for the positions this launch writes, committed before it runs
   * (never inside a captured graph); a position outside the cache is the
   * device's to refuse (KV_SLOT), so nothing is held or recorded for it */
  if (position >= 0 && (size_t)position + n <= d->max_seq) {
    st = hold(d, 0, (size_t)position + n);
    memcpy(d->ids + position, ids, n * sizeof *ids);
  }
  if (st == ORTEP_OK) st = write_params(d);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, d->names[g].tokens, ids, n * sizeof *ids);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, d->names[g].positions, pos, n * sizeof *pos);
  if (st == ORTEP_OK) st = ortep_session_run_graph(d->session, g);
  return st;
}

/* A step latched the error word: the decoder fails (what: the positions and
 * tokens that ran, for the message). */
static ortep_status fail_word(ortep_decoder *d, uint32_t word, const char *what) {
  d->failed = true;
  d->last_bits = word;
  ortep_session_invalidate(d->session);
  char bits[512];
  return ortep__fail(ORTEP_E_DEVICE_VALIDATION,
                     "%s: the device error word is 0x%x: %s; the token was not emitted and the graph was "
                     "invalidated; call ortep_decoder_reset to start over",
                     what, word, ortep_error_word_describe(word, bits, sizeof bits));
}

/* The words of the other EPs that ran nodes (mixed placement), ORed. */
static ortep_status watched_words(ortep_decoder *d, uint32_t *word) {
  for (size_t i = 0; i < d->n_watch; i++) {
    uint32_t bits = 0;
    ortep_status st = ortep_ep_check_error_word(d->watch[i], &bits);
    if (st != ORTEP_OK) return st;
    *word |= bits;
  }
  return ORTEP_OK;
}

/* The one sync: an 8-byte read of the (token, error word) the graph's last
 * node wrote, the words of other EPs that ran nodes ORed in (none when one
 * EP runs the step). A set bit fails the decoder (what: the positions and
 * tokens that ran, for the message). */
static ortep_status finish(ortep_decoder *d, uint64_t t0, int32_t *next, const char *what) {
  uint32_t pair[2] = {0, 0};
  ortep__trace_push(ORTEP__TRACE_SYNC, d->steps);
  d->launch_ns += ortep__now_ns() - t0;
  ortep_status st = ortep_session_read(d->session, ORTEP_OUTPUT_RESULT, pair, sizeof pair); /* the one sync */
  if (st == ORTEP_OK) st = watched_words(d, &pair[1]);
  ortep__trace_pop();
  if (st == ORTEP_OK && pair[1]) ortep__trace_mark(ORTEP__TRACE_ERROR_WORD_HIT, pair[1]);
  if (st != ORTEP_OK) return st;
  if (pair[1]) return fail_word(d, pair[1], what);
  d->logits_valid = true;
  d->next_sampled = d->sampling;
  d->next_sp = d->sp;
  if (next) *next = (int32_t)pair[0];
  return ORTEP_OK;
}

static ortep_status step(ortep_decoder *d, int32_t token, int32_t position, int32_t *next) {
  if (d->failed) return refuse_failed(d);
  d->logits_valid = false;
  ortep__trace_name_thread("ortep-decode");
  ortep__trace_push(ORTEP__TRACE_DECODE_STEP, (uint64_t)(uint32_t)position);
  uint64_t t0 = ortep__now_ns();
  ortep_status st = launch(d, 0, &token, position);
  if (st == ORTEP_OK) {
    char what[96];
    snprintf(what, sizeof what, "step at position %d (token %d)", position, token);
    st = finish(d, t0, next, what);
  }
  d->steps++;
  ortep__trace_pop();
  return st;
}

ortep_status ortep_decoder_step(ortep_decoder *d, int32_t token, int32_t position, int32_t *next) {
  if (!d) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_step: decoder is NULL");
  ortep_status st = enter(d, "ortep_decoder_step");
  if (st != ORTEP_OK) return st;
  d->sampling = false; /* a single step answers with its argmax */
  /* inside the cache, a step past the sequence's end would leave positions
   * whose ids and KV were never computed for a later prefill to reuse */
  if (!d->failed && position >= 0 && (size_t)position < d->max_seq && (size_t)position > d->pos)
    return leave(d, ortep__fail(ORTEP_E_OUT_OF_RANGE,
                                "ortep_decoder_step: position %d would leave positions %zu..%d unset (the sequence "
                                "holds %zu); step at a position up to %zu, or prefill the positions between",
                                position, d->pos, position - 1, d->pos, d->pos));
  int32_t t = 0;
  st = step(d, token, position, &t);
  /* The step moves the sequence (decode.h): the position follows it, and
   * its argmax is the pending token, replacing whatever was pending, so
   * greedy and sampled generation both continue from the step's logits. */
  d->have_next = st == ORTEP_OK;
  d->fed = true;
  if (st == ORTEP_OK) {
    d->pos = (size_t)position + 1;
    d->next = t;
    if (next) *next = t;
  }
  return leave(d, st);
}

/* --- K tokens per launch (decode.h: tokens_per_launch) --------------------------
 * generate runs the decode step (graph 0) for up to K tokens in one launch:
 * its last node, ortep:FeedToken (kernels/feed.h), records each draw and
 * feeds it to the next step on the device, until K draws, a stop id (the
 * mask) or a latched error word. The draws wait in the queue and are taken
 * one per token, so pos, next and fed move exactly as with single steps:
 * a launch never runs past what the caller still wants (max_tokens), the
 * cache or a stop id. Only a callback that stops inside a launch leaves
 * draws behind: they are dropped (drop_queue), as if never run. */
#define LAUNCH_BUDGET_NS 4000000 /* auto K: a launch of about 4 ms at most... */
#define AUTO_MAX_TOKENS  16      /* ...and of at most 16 tokens */

/* The ids generate stops at, as the device's stop mask: written (the whole
 * mask) only when the set changes. Ids outside the vocabulary are never
 * drawn: left out. */
static ortep_status set_stop_mask(ortep_decoder *d, const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  size_t distinct = 0;
  bool changed = false;
  for (size_t i = 0; i < na + nb; i++) { /* mark the wanted ids (bit 2), counting each once */
    int32_t id = i < na ? a[i] : b[i - na];
    if (id < 0 || (size_t)id >= d->vocab || d->mask[id] & 2) continue;
    changed |= !(d->mask[id] & 1);
    d->mask[id] |= 2, distinct++;
  }
  changed |= distinct != d->n_mask_ids;
  if (changed && !ORTEP__GROW(d->mask_ids, d->cap_mask_ids, distinct)) changed = false, distinct = SIZE_MAX;
  for (size_t i = 0; changed && i < d->n_mask_ids; i++) d->mask[d->mask_ids[i]] = 0; /* the old set goes */
  size_t n = 0;
  for (size_t i = 0; i < na + nb; i++) {
    int32_t id = i < na ? a[i] : b[i - na];
    if (id < 0 || (size_t)id >= d->vocab || !(d->mask[id] & 2)) continue;
    d->mask[id] = changed ? 1 : d->mask[id] & 1; /* unmarked; set when the set changes */
    if (changed) d->mask_ids[n++] = id;
  }
  if (distinct == SIZE_MAX) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for %zu stop ids", na + nb);
  if (!changed) return ORTEP_OK;
  d->n_mask_ids = n;
  return ortep_session_write(d->session, ORTEP_INPUT_STOP_MASK, d->mask, d->vocab);
}

/* How many steps the next launch runs: the option (or the automatic K),
 * within what the caller still wants and the cache holds. One when the
 * step runs on several EPs (the other EPs' words are read per step). */
static size_t launch_size(const ortep_decoder *d, size_t ahead) {
  size_t k = d->opts.tokens_per_launch;
  if (!k) {
    k = d->ns_per_token ? LAUNCH_BUDGET_NS / d->ns_per_token : 1;
    k = k < 1 ? 1 : k > AUTO_MAX_TOKENS ? AUTO_MAX_TOKENS : k;
  }
  if (d->n_watch) k = 1;
  if (k > ahead) k = ahead;
  return k < d->max_seq - d->pos ? k : d->max_seq - d->pos;
}

static void measured(ortep_decoder *d, uint64_t t0, size_t tokens) {
  if (!tokens) return;
  uint64_t per = (ortep__now_ns() - t0) / tokens;
  d->ns_per_token = d->ns_per_token ? (3 * d->ns_per_token + per) / 4 : per;
}

/* One launch of up to k steps from the pending token at d->pos (the KV
 * memory for them held by the caller, outside any graph): one write each
 * of the token, the position and the loop header, the launch, and one read
 * of the header with the draws (the only sync). */
static ortep_status launch_steps(ortep_decoder *d, size_t k) {
  ortep__trace_push(ORTEP__TRACE_DECODE_STEP, (uint64_t)d->pos);
  uint64_t t0 = ortep__now_ns();
  int32_t position = (int32_t)d->pos, state[ORTEP__FEED_HEADER + ORTEP__FEED_MAX] = {(int32_t)k};
  ortep_status st = write_params(d);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, d->names[0].tokens, &d->next, sizeof d->next);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, d->names[0].positions, &position, sizeof position);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, ORTEP_INPUT_LOOP, state, sizeof state); /* armed: k */
  if (st == ORTEP_OK) st = ortep_session_run_graph_while(d->session, 0, ORTEP_OUTPUT_LOOP_GO, k);
  d->launch_ns += ortep__now_ns() - t0;
  if (st == ORTEP_OK)
    st = ortep_session_read(d->session, ORTEP_INPUT_LOOP, state, (ORTEP__FEED_HEADER + k) * sizeof *state);
  uint32_t word = (uint32_t)state[2];
  if (st == ORTEP_OK) st = watched_words(d, &word);
  ortep__trace_pop();
  if (st != ORTEP_OK) return st;
  size_t n = state[1] >= 0 && (size_t)state[1] <= k ? (size_t)state[1] : 0;
  ortep__assert(n == (size_t)state[1] && (n || word)); /* the node records a draw or a word every step */
  memcpy(d->queue, state + ORTEP__FEED_HEADER, n * sizeof *d->queue);
  d->q_at = 0, d->q_n = n, d->q_word = word;
  for (size_t j = 0; j < n + (word != 0); j++) d->ids[d->pos + j] = j ? d->queue[j - 1] : d->next; /* what each fed */
  d->last_token = n ? d->ids[d->pos + n - 1] : d->next;
  d->steps += n + (word != 0), d->launches++;
  d->logits_valid = !word; /* the last step's: the one that drew queue[n - 1] */
  d->next_sampled = d->sampling, d->next_sp = d->sp;
  measured(d, t0, n);
  return ORTEP_OK;
}

/* The draw of the step the device fed d->next to, or its failure. */
static ortep_status take_queued(ortep_decoder *d) {
  if (d->q_at == d->q_n) { /* the step after the last draw latched the word */
    char what[96];
    snprintf(what, sizeof what, "step at position %zu (token %d)", d->pos, d->next);
    uint32_t word = d->q_word;
    d->q_word = 0, d->have_next = false;
    return fail_word(d, word, what);
  }
  d->next = d->queue[d->q_at++];
  d->pos++;
  d->fed = true;
  return ORTEP_OK;
}

/* Draws generate will not take (a callback stopped inside a launch): the
 * sequence stays at the token emitted last, as if they were never run. The
 * logits are a later step's; an error word the last of them latched goes. */
static void drop_queue(ortep_decoder *d) {
  if (d->q_at == d->q_n && !d->q_word) return;
  d->logits_valid = false;
  if (d->q_word && reset_error_words(d) != ORTEP_OK) ortep_clear_error();
  d->q_at = d->q_n = 0, d->q_word = 0;
}

/* Runs the token generate emitted last, if it has not been run yet: takes
 * its draw from the last launch, or launches up to `ahead` steps (the
 * tokens the caller still wants), one when K is 1 or memory for more
 * positions is not there (the single step then says where it runs out). */
static ortep_status feed_emitted(ortep_decoder *d, size_t emitted, size_t ahead) {
  if (d->fed) return ORTEP_OK;
  if (d->q_at < d->q_n || d->q_word) return take_queued(d);
  if (d->pos >= d->max_seq)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "the KV cache is full (max_seq_len %zu) after %zu generated tokens; open the decoder with a "
                       "larger max_seq_len",
                       d->max_seq, emitted);
  size_t k = launch_size(d, ahead);
  if (k > 1 && hold(d, 0, d->pos + k) != ORTEP_OK) { /* memory for fewer: the single step says where */
    ortep_clear_error();
    k = 1;
  }
  if (k > 1) {
    ortep_status st = launch_steps(d, k);
    if (st == ORTEP_OK) return take_queued(d);
    d->have_next = false;
    return st;
  }
  uint64_t t0 = ortep__now_ns();
  ortep_status st = step(d, d->next, (int32_t)d->pos, &d->next);
  if (st != ORTEP_OK) {
    d->have_next = false;
    return st;
  }
  measured(d, t0, 1);
  d->launches++;
  d->pos++;
  d->fed = true;
  ortep__assert(d->pos <= d->max_seq); /* checked before the step */
  return ORTEP_OK;
}

ortep_status ortep__sampling_params(const ortep_sampling *s, bool *sampling, ortep_sample_params *out) {
  *sampling = false;
  *out = (ortep_sample_params){0};
  if (!s || s->temperature == 0.0f) return ORTEP_OK;
  if (!(s->temperature > 0.0f) || !isfinite(s->temperature))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "sampling.temperature = %g: use 0 (greedy) or a finite value > 0 (1 samples the model's own "
                       "distribution)",
                       (double)s->temperature);
  if (!(s->top_p >= 0.0f && s->top_p <= 1.0f))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "sampling.top_p = %g: use a value in (0, 1], or 0 or 1 for off",
                       (double)s->top_p);
  if (!(s->min_p >= 0.0f && s->min_p < 1.0f))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "sampling.min_p = %g: use a value in [0, 1) (0: off)",
                       (double)s->min_p);
  if (!(s->repetition_penalty >= 0.0f) || !isfinite(s->repetition_penalty))
    return ortep__fail(
        ORTEP_E_INVALID_ARGUMENT,
        "sampling.repetition_penalty = %g: use a finite value > 0 (1 or 0: off; > 1 discourages repeats)",
        (double)s->repetition_penalty);
  *sampling = true;
  *out = (ortep_sample_params){.temperature = s->temperature,
                               .top_p = s->top_p == 0.0f ? 1.0f : s->top_p,
                               .min_p = s->min_p,
                               .repetition_penalty = s->repetition_penalty == 0.0f ? 1.0f : s->repetition_penalty,
                               .top_k = s->top_k,
                               .seed_lo = (uint32_t)s->seed,
                               .seed_hi = (uint32_t)(s->seed >> 32)};
  return ORTEP_OK;
}

/* The draw the next tokens use: greedy (s NULL or temperature 0) or the
 * sampler with s, checked. */
static ortep_status choose_draw(ortep_decoder *d, const ortep_sampling *s) {
  bool sampling;
  ortep_sample_params sp;
  ortep_status st = ortep__sampling_params(s, &sampling, &sp);
  if (st != ORTEP_OK) return st;
  d->sampling = sampling;
  if (sampling) d->sp = sp;
  return ORTEP_OK;
}

static bool same_draw(const ortep_sample_params *a, const ortep_sample_params *b) {
  return a->temperature == b->temperature && a->top_p == b->top_p && a->min_p == b->min_p &&
         a->repetition_penalty == b->repetition_penalty && a->top_k == b->top_k && a->seed_lo == b->seed_lo &&
         a->seed_hi == b->seed_hi;
}

/* A pending next token (its step ran, it was not emitted) chosen another way
 * than the draw now asked for is drawn again from the same logits: the
 * redraw graph, one SelectToken over the session's logits, given the last
 * token fed and its position. */
static ortep_status redraw_pending(ortep_decoder *d) {
  if (!d->have_next || !d->fed || !d->logits_valid || d->pos == 0) return ORTEP_OK;
  if (d->next_sampled == d->sampling && (!d->sampling || same_draw(&d->next_sp, &d->sp))) return ORTEP_OK;
  char what[96];
  snprintf(what, sizeof what, "drawing the token at position %zu again", d->pos);
  uint64_t t0 = ortep__now_ns();
  int32_t position = (int32_t)d->pos - 1;
  ortep_status st = write_params(d);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, ORTEP_REDRAW_TOKEN, &d->last_token, sizeof d->last_token);
  if (st == ORTEP_OK) st = ortep_session_write(d->session, ORTEP_REDRAW_POSITION, &position, sizeof position);
  if (st == ORTEP_OK) st = ortep_session_run_graph(d->session, d->n_graphs);
  return st == ORTEP_OK ? finish(d, t0, &d->next, what) : st;
}

/* The prompt in chunks (the decoder's buckets, largest first, greedily),
 * the rest token by token; one sync at the end. Nothing is emitted on a
 * failure (the error word covers every row of every chunk). */
static ortep_status run_prompt(ortep_decoder *d, const int32_t *tokens, size_t n, int32_t *next) {
  if (d->failed) return refuse_failed(d);
  d->logits_valid = false;
  ortep__trace_name_thread("ortep-decode");
  size_t i = 0, first = d->pos;
  uint64_t t0 = ortep__now_ns();
  ortep_status st = ORTEP_OK;
  bool pending = false; /* a chunk ran and was not synced yet */
  while (st == ORTEP_OK && i < n) {
    size_t g = 1;
    while (g < d->n_graphs && d->tokens[g] > n - i) g++;
    if (g == d->n_graphs) break;                        /* fewer left than the smallest chunk */
    ortep__assert(d->pos + d->tokens[g] <= d->max_seq); /* the prompt was checked to fit */
    ortep__trace_push(ORTEP__TRACE_DECODE_STEP, (uint64_t)d->pos);
    st = launch(d, g, tokens + i, (int32_t)d->pos);
    ortep__trace_pop();
    if (st != ORTEP_OK) return ortep__wrap(st, "prefill chunk of %zu tokens at position %zu", d->tokens[g], d->pos);
    i += d->tokens[g];
    d->pos += d->tokens[g];
    d->steps++;
    pending = true;
  }
  if (pending) {
    /* the message names the first id outside the vocabulary, if any (the
     * error word is the check; this only says which row it was) */
    char what[192];
    int w = snprintf(what, sizeof what, "prefill of positions %zu..%zu in chunks", first, d->pos - 1);
    for (size_t k = 0; k < i && w > 0 && (size_t)w < sizeof what; k++)
      if (tokens[k] < 0 || (size_t)tokens[k] >= d->vocab) {
        snprintf(what + w, sizeof what - (size_t)w, " (token %d at position %zu is outside the vocabulary of %zu)",
                 tokens[k], first + k, d->vocab);
        break;
      }
    if ((st = finish(d, t0, next, what)) != ORTEP_OK) {
      d->pos = first; /* nothing of the prompt counts: the decoder needs a reset */
      return st;
    }
  }
  for (; i < n; i++) { /* the tail, token by token */
    if ((st = step(d, tokens[i], (int32_t)d->pos, next)) != ORTEP_OK)
      return ortep__wrap(st, "prefill token %zu of %zu", i, n);
    d->pos++;
  }
  return ORTEP_OK;
}

static ortep_status prefill(ortep_decoder *d, const int32_t *tokens, size_t n, int32_t *next) {
  if (n == 0) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_prefill: the prompt is empty");
  d->sampling = false;                      /* a prefill's next token is its argmax (generate_ex may draw it again) */
  size_t pending = d->have_next && !d->fed; /* the last generated token goes in first */
  if (n > d->max_seq || d->pos + pending > d->max_seq - n) /* no overflow for any n */
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "a prompt of %zu token%s at position %zu does not fit max_seq_len %zu; shorten it or open the "
                       "decoder with a larger max_seq_len",
                       n, n == 1 ? "" : "s", d->pos + pending, d->max_seq);
  ortep_status st = pending ? feed_emitted(d, 0, 1) : ORTEP_OK;
  if (st != ORTEP_OK) return st;
  int32_t t = 0;
  if ((st = run_prompt(d, tokens, n, &t)) != ORTEP_OK) {
    d->have_next = false;
    return st;
  }
  d->next = t;
  d->have_next = true;
  d->fed = true;
  if (next) *next = d->next;
  return ORTEP_OK;
}

ortep_status ortep_decoder_prefill(ortep_decoder *d, const int32_t *tokens, size_t n, int32_t *next) {
  if (!d || (n && !tokens)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_prefill: NULL argument");
  ortep_status st = enter(d, "ortep_decoder_prefill");
  return st != ORTEP_OK ? st : leave(d, prefill(d, tokens, n, next));
}

/* The decoder forgets positions n.. : nothing pending, the memory past n
 * given back. */
static ortep_status drop_to(ortep_decoder *d, size_t n) {
  d->pos = n;
  d->have_next = false;
  d->fed = true;
  d->logits_valid = false;
  return ortep__kv_drop(d->kv, n);
}

static ortep_status prefill_conversation(ortep_decoder *d, const int32_t *ids, size_t n, int32_t *next,
                                         size_t *reused) {
  if (d->failed) return refuse_failed(d);
  if (n == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_prefill_conversation: the conversation is empty");
  /* an emitted token not yet run is held in all but memory: run it if the
   * conversation continues with it, forget it otherwise */
  size_t held = d->pos, common = 0;
  bool pending = d->have_next && !d->fed;
  while (common < held && common < n && d->ids[common] == ids[common]) common++;
  if (pending && common == held && n > held && ids[held] == d->next) {
    ortep_status st = feed_emitted(d, 0, 1);
    if (st != ORTEP_OK) return st;
    common = ++held;
  }
  if (common == n) common = n - 1; /* the last id runs: its logits choose next */
  ortep_status st = common < d->pos || pending ? drop_to(d, common) : ORTEP_OK;
  if (st != ORTEP_OK) return st;
  if (reused) *reused = common;
  return prefill(d, ids + common, n - common, next);
}

ortep_status ortep_decoder_prefill_conversation(ortep_decoder *d, const int32_t *ids, size_t n, int32_t *next,
                                                size_t *reused) {
  if (reused) *reused = 0;
  if (!d || (n && !ids))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_prefill_conversation: NULL argument");
  ortep_status st = enter(d, "ortep_decoder_prefill_conversation");
  return st != ORTEP_OK ? st : leave(d, prefill_conversation(d, ids, n, next, reused));
}

/* A fork's sequence state: the parent's positions (their KV shared), ids,
 * pending token, draw, logits and the device's token history. */
static ortep_status copy_sequence(ortep_decoder *d, ortep_decoder *p) {
  ortep_status st = ortep__kv_hold(p->kv, p->pos); /* held already: the shared range is backed */
  if (st == ORTEP_OK) st = ortep__kv_share(p->kv, d->kv, p->pos);
  if (st != ORTEP_OK) return st;
  memcpy(d->ids, p->ids, p->pos * sizeof *d->ids);
  d->pos = p->pos, d->next = p->next, d->have_next = p->have_next, d->fed = p->fed, d->last_token = p->last_token;
  d->sampling = p->sampling, d->sp = p->sp, d->next_sampled = p->next_sampled, d->next_sp = p->next_sp;
  size_t bytes = 0;
  if ((st = ortep_session_value(d->session, ORTEP_INPUT_HISTORY, NULL, NULL, &bytes)) != ORTEP_OK) return st;
  int32_t *hist = ortep__calloc(1, bytes > d->max_seq * sizeof *hist ? bytes : d->max_seq * sizeof *hist);
  if (!hist) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "fork: no memory for the token history");
  memcpy(hist, p->ids, p->pos * sizeof *hist);
  st = ortep_session_write(d->session, ORTEP_INPUT_HISTORY, hist, bytes);
  ortep__free(hist);
  if (st == ORTEP_OK && p->logits_valid) { /* a redraw of the pending token reads them */
    float *l = ortep__malloc(d->vocab * sizeof *l);
    if (!l) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "fork: no memory for the logits");
    st = ortep_session_read(p->session, ORTEP_OUTPUT_LOGITS, l, d->vocab * sizeof *l);
    if (st == ORTEP_OK) st = ortep_session_write(d->session, ORTEP_OUTPUT_LOGITS, l, d->vocab * sizeof *l);
    ortep__free(l);
    d->logits_valid = st == ORTEP_OK;
  }
  return st;
}

static ortep_status fork_decoder(ortep_decoder *p, ortep_decoder **out) {
  if (p->failed) return refuse_failed(p);
  ortep_decoder *root = p->origin ? p->origin : p;
  ortep_decoder *d = ortep__calloc(1, sizeof *d);
  if (!d) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the fork");
  atomic_flag_clear(&d->busy);
  atomic_init(&d->refs, 1);
  atomic_fetch_add_explicit(&root->refs, 1, memory_order_relaxed);
  d->origin = root;
  d->opts = root->opts;
  d->opts.forced_seams = NULL;
  d->opts.max_seq_len = root->max_seq;
  d->fed = true;
  d->governor = root->governor, d->model = root->model, d->kv_memory = root->kv_memory, d->prepared = root->prepared;
  ortep_status st = ORTEP_OK;
  if (root->forced && !(d->forced = ortep__strdup(root->forced)))
    st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the fork");
  d->opts.forced_seams = d->forced;
  ortep_ep *cpu = NULL;
  if (st == ORTEP_OK) st = open_eps(d, &d->opts, root->ep_config, d->opts.ep, &cpu);
  if (st == ORTEP_OK) st = size_steps(d, &d->opts);
  if (st == ORTEP_OK) st = open_session(d, &d->opts, cpu);
  if (st == ORTEP_OK) st = prime_state(d);
  if (st == ORTEP_OK) st = copy_sequence(d, p);
  if (st != ORTEP_OK) {
    ortep_decoder_close(d);
    return ortep__wrap(st, "forking the decoder at position %zu", p->pos);
  }
  *out = d;
  return ORTEP_OK;
}

ortep_status ortep_decoder_fork(ortep_decoder *parent, ortep_decoder **out) {
  if (out) *out = NULL;
  if (!parent || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_fork: NULL argument");
  ortep_status st = enter(parent, "ortep_decoder_fork");
  return st != ORTEP_OK ? st : leave(parent, fork_decoder(parent, out));
}

ortep_status ortep_decoder_truncate(ortep_decoder *d, size_t n) {
  if (!d) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_truncate: decoder is NULL");
  ortep_status st = enter(d, "ortep_decoder_truncate");
  if (st != ORTEP_OK) return st;
  if (n > d->pos)
    return leave(
        d, ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "ortep_decoder_truncate: %zu positions asked to be kept, but the caches hold %zu", n, d->pos));
  return leave(d, drop_to(d, n));
}

size_t ortep_decoder_tokens(const ortep_decoder *d, int32_t *dst, size_t cap) {
  if (!d) return 0;
  if (dst) memcpy(dst, d->ids, (cap < d->pos ? cap : d->pos) * sizeof *dst);
  return d->pos;
}

void ortep_decoder_kv_stats(const ortep_decoder *d, ortep_kv_stats *out) {
  if (!out) return;
  *out = (ortep_kv_stats){0};
  if (!d) return;
  ortep__kv_usage u;
  ortep__kv_stats(d->kv, &u);
  *out = (ortep_kv_stats){d->max_seq, u.positions, u.reserved_bytes, u.committed_bytes, u.shared_bytes, u.commits};
}

static ortep_status generate_ex(ortep_decoder *d, const ortep_generate_options *o, ortep_token_callback cb, void *user,
                                ortep_generate_result *r) {
  *r = (ortep_generate_result){0, ORTEP_STOP_MAX_TOKENS, -1};
  if (d->failed) return refuse_failed(d);
  if (!d->have_next)
    return ortep__fail(ORTEP_E_STATE, "ortep_decoder_generate_ex: nothing to continue from; prefill a prompt first");
  if (o->n_stop_tokens && !o->stop_tokens)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_generate_ex: %zu stop tokens but the list is NULL",
                       o->n_stop_tokens);
  const ortep_model_config *c = ortep_model_get_config(d->model);
  ortep_status cst = choose_draw(d, o->sampling);
  if (cst == ORTEP_OK) cst = redraw_pending(d);
  if (cst == ORTEP_OK) /* a launch stops where this loop stops: at the same ids */
    cst = set_stop_mask(d, c->eos_token_ids, o->ignore_eos ? 0 : c->n_eos_token_ids, o->stop_tokens, o->n_stop_tokens);
  if (cst != ORTEP_OK) return cst;
  for (size_t i = 0; o->max_tokens == 0 || i < o->max_tokens; i++) {
    if (!d->fed && d->pos >= d->max_seq) {
      r->reason = ORTEP_STOP_CACHE_FULL;
      return ORTEP_OK;
    }
    ortep_status st = feed_emitted(d, i, o->max_tokens ? o->max_tokens - i : SIZE_MAX);
    if (st != ORTEP_OK) return st;
    int32_t tok = d->next;
    bool eos = !o->ignore_eos && ortep__in_ids(tok, c->eos_token_ids, c->n_eos_token_ids);
    if (eos || ortep__in_ids(tok, o->stop_tokens, o->n_stop_tokens)) {
      r->reason = eos ? ORTEP_STOP_EOS : ORTEP_STOP_STOP_TOKEN;
      r->stop_token = tok; /* stays next: not emitted, not fed */
      return ORTEP_OK;
    }
    d->fed = false;
    r->generated = i + 1;
    if (cb && !cb(tok, i, user)) {
      r->reason = ORTEP_STOP_CALLBACK;
      return ORTEP_OK;
    }
  }
  return ORTEP_OK;
}

ortep_status ortep_decoder_generate_ex(ortep_decoder *d, const ortep_generate_options *options, ortep_token_callback cb,
                                       void *user, ortep_generate_result *result) {
  ortep_generate_result scratch;
  ortep_generate_result *r = result ? result : &scratch;
  *r = (ortep_generate_result){0, ORTEP_STOP_MAX_TOKENS, -1};
  if (!d) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_generate_ex: decoder is NULL");
  ortep_generate_options o = options ? *options : (ortep_generate_options){0};
  ortep_status st = enter(d, "ortep_decoder_generate_ex");
  if (st != ORTEP_OK) return st;
  st = generate_ex(d, &o, cb, user, r);
  drop_queue(d); /* a callback stopped inside a launch */
  return leave(d, st);
}

static ortep_status generate(ortep_decoder *d, size_t max_tokens, ortep_token_callback cb, void *user,
                             size_t *generated) {
  if (d->failed) return refuse_failed(d);
  if (!d->have_next)
    return ortep__fail(ORTEP_E_STATE, "ortep_decoder_generate: nothing to continue from; prefill a prompt first");
  ortep_status cst = choose_draw(d, NULL); /* greedy */
  if (cst == ORTEP_OK) cst = redraw_pending(d);
  if (cst == ORTEP_OK) cst = set_stop_mask(d, NULL, 0, NULL, 0); /* no stop id: max_tokens or the callback */
  if (cst != ORTEP_OK) return cst;
  for (size_t i = 0; i < max_tokens; i++) {
    ortep_status st = feed_emitted(d, i, max_tokens - i);
    if (st != ORTEP_OK) return st;
    int32_t tok = d->next;
    d->fed = false; /* emitted now; run through the model on the next call or iteration */
    if (generated) *generated = i + 1;
    if (cb && !cb(tok, i, user)) break;
  }
  return ORTEP_OK;
}

ortep_status ortep_decoder_generate(ortep_decoder *d, size_t max_tokens, ortep_token_callback cb, void *user,
                                    size_t *generated) {
  if (generated) *generated = 0;
  if (!d) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_generate: decoder is NULL");
  ortep_status st = enter(d, "ortep_decoder_generate");
  if (st != ORTEP_OK) return st;
  st = generate(d, max_tokens, cb, user, generated);
  drop_queue(d); /* a callback stopped inside a launch */
  return leave(d, st);
}

ortep_status ortep_decoder_reset(ortep_decoder *d) {
  if (!d) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_reset: decoder is NULL");
  ortep_status st = enter(d, "ortep_decoder_reset");
  if (st != ORTEP_OK) return st;
  /* The captured graphs stay: they read positions from device memory, and a
   * failed step dropped them already (finish). A server resetting per
   * request re-captures nothing. */
  st = reset_error_words(d);
  if (st == ORTEP_OK) st = ortep__kv_drop(d->kv, 0); /* the caches' memory goes back */
  d->pos = 0;
  d->have_next = false;
  d->fed = true;
  d->failed = false;
  d->logits_valid = false;
  d->last_bits = 0;
  d->q_at = d->q_n = 0, d->q_word = 0; /* empty outside generate; said again */
  return leave(d, st);
}

ortep_status ortep_decoder_logits(ortep_decoder *d, float *dst, size_t n) {
  if (!d || !dst) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_logits: NULL argument");
  if (n > d->vocab) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_decoder_logits: %zu > vocab %zu", n, d->vocab);
  ortep_status st = enter(d, "ortep_decoder_logits");
  if (st != ORTEP_OK) return st;
  if (!d->logits_valid)
    return leave(d, ortep__fail(ORTEP_E_STATE,
                                "ortep_decoder_logits: no logits to read: no step has succeeded since the decoder was "
                                "opened or reset (or the last step failed); run a step or a prefill first"));
  return leave(d, ortep_session_read(d->session, ORTEP_OUTPUT_LOGITS, dst, n * sizeof *dst));
}

size_t ortep_decoder_position(const ortep_decoder *d) { return d ? d->pos : 0; }
uint64_t ortep_decoder_launch_ns(const ortep_decoder *d) { return d ? d->launch_ns : 0; }
size_t ortep_decoder_vocab_size(const ortep_decoder *d) { return d ? d->vocab : 0; }
size_t ortep_decoder_max_seq_len(const ortep_decoder *d) { return d ? d->max_seq : 0; }
uint32_t ortep_decoder_last_error_bits(const ortep_decoder *d) { return d ? d->last_bits : 0; }
ortep_session *ortep_decoder_session(ortep_decoder *d) { return d ? d->session : NULL; }
size_t ortep_decoder_graph_tokens(const ortep_decoder *d, size_t graph) {
  return d && graph < d->n_graphs ? d->tokens[graph] : 0;
}
ortep_ep *ortep_decoder_ep(ortep_decoder *d) { return d ? d->ep : NULL; }
size_t ortep_decoder_blocked_weights(const ortep_decoder *d) { return d ? d->prepared : 0; }
