/*
 * ep.h: execution providers as their users see them: opaque ortep_ep and
 * ortep_kernel handles, the dispatch functions, configuration, and the
 * registry. Implementing an EP (its vtable, the kernel vtable, what a kernel
 * runs on) is ortep/backend_impl.h's business, installed beside this one.
 *
 * Every call goes through a dispatch function, which checks the arguments
 * (the one place that does: no EP repeats a check) and gives the contract's
 * default for every optional entry an EP leaves NULL:
 *
 *   copy_from_host / _at, copy_to_host  host memcpy with bounds and
 *                                       overflow checks; refused for a device
 *                                       that is not host-accessible
 *   device_argmax                       unsupported (the EP's name in the message)
 *   begin/end capture, replay, replay_segment, replay_segment_while
 *                                       unsupported (the EP's name in the message)
 *   abort_capture                       a no-op (nothing to abort)
 *   reset_graph                         false (no graph was installed)
 *   check_error_word                    0 (no error); reset_error_word a no-op
 *   allocation_counts                   absent
 *   context_source_keys                 none; save/load_context unsupported
 *                                       (the EP-context contract of the seeds:
 *                                       the CPU EP's prepared weights; the
 *                                       decoder's weights cache, decode.h)
 *   capabilities                        stock (none)
 *
 * Kernels: get_kernel specialises a node to concrete shapes and returns an
 * ortep_kernel. A kernel is run through ortep_ep_run_kernel with the raw
 * device pointers of its inputs and outputs; while a device-graph capture is
 * open on the EP, running a kernel records it instead of executing it (CUDA:
 * stream capture; CPU: a recorded plan of kernel + bound pointers), and a
 * replay executes the recording with no lookup, shape check or allocation.
 */
#ifndef ORTEP_EP_H
#define ORTEP_EP_H

#include "ortep/buffer.h"
#include "ortep/dtype.h"
#include "ortep/ir.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_ep ortep_ep;
typedef struct ortep_kernel ortep_kernel;
typedef struct ortep_kernel_io ortep_kernel_io; /* what a kernel runs on (backend_impl.h) */

/* --- configuration: namespaced key/value options ("cpu.threads") ---------- */
typedef struct ortep_config ortep_config;
ORTEP_API ortep_status ortep_config_create(ortep_config **out);
ORTEP_API void ortep_config_destroy(ortep_config *config);
/* Sets (or replaces) key. Keys are "namespace.name". */
ORTEP_API ortep_status ortep_config_set(ortep_config *config, const char *key, const char *value);
/* The value, or NULL when unset. */
ORTEP_API const char *ortep_config_get(const ortep_config *config, const char *key);
ORTEP_API size_t ortep_config_count(const ortep_config *config);
ORTEP_API const char *ortep_config_key(const ortep_config *config, size_t i);
/* For EP implementations: every key in namespace ns ("cpu") must be one of
 * known[n]; otherwise ORTEP_E_INVALID_ARGUMENT naming the key and the known
 * ones. Keys of other namespaces are not this EP's business. */
ORTEP_API ortep_status ortep_config_check_namespace(const ortep_config *config, const char *ns,
                                                    const char *const *known, size_t n);

/* --- placement ------------------------------------------------------------- */
#define ORTEP_REASON_CAPACITY 384
typedef struct ortep_kernel_match {
  bool supported;
  uint32_t cost; /* lower is better; meaningful when supported */
  /* When unsupported: what the EP accepts and how to fix the model or the
   * registration. Never empty for an unsupported match. */
  char reason[ORTEP_REASON_CAPACITY];
} ortep_kernel_match;

ORTEP_API const char *ortep_kernel_name(const ortep_kernel *kernel);
ORTEP_API bool ortep_kernel_is_capturable(const ortep_kernel *kernel);
ORTEP_API void ortep_kernel_destroy(ortep_kernel *kernel);

/* --- fences ---------------------------------------------------------------- */
typedef struct ortep_fence {
  uint64_t id;
  void *event; /* EP-specific (a cudaEvent_t); NULL when already signalled */
} ortep_fence;

/* --- sampling ---------------------------------------------------------------- */
/* The sampler's parameter block, in the EP's memory (so changing it
 * re-captures nothing): 36 bytes, what every EP's sampler reads. The
 * algorithm and the random numbers (Philox4x32-10 keyed by the seed, counted
 * by position) are defined once in kernels/sampling.h. */
typedef struct ortep_sample_params {
  float temperature;        /* > 0 (greedy decoding is argmax, not the sampler) */
  float top_p;              /* (0, 1]; 1: off */
  float min_p;              /* [0, 1); 0: off */
  float repetition_penalty; /* > 0; 1: off */
  uint32_t top_k;           /* 0: off */
  uint32_t seed_lo, seed_hi;
  uint32_t position;  /* the counter: the position of the token being drawn */
  uint32_t n_history; /* ids in the history buffer the penalty applies to */
} ortep_sample_params;

/* --- capabilities ------------------------------------------------------------ */
typedef struct ortep_ep_capabilities {
  bool device_graphs; /* begin/end capture and replay work */
  bool device_argmax;
  bool host_accessible_memory; /* the EP's buffers are host memory */
  bool device_loops;           /* replay_segment_while repeats a segment with no host round trip */
} ortep_ep_capabilities;

/* --- dispatch -------------------------------------------------------------- */
ORTEP_API const char *ortep_ep_name(const ortep_ep *ep);
ORTEP_API ortep_device ortep_ep_device(const ortep_ep *ep);
ORTEP_API uint32_t ortep_ep_id(const ortep_ep *ep);
ORTEP_API ortep_ep_capabilities ortep_ep_get_capabilities(const ortep_ep *ep);
ORTEP_API ortep_status ortep_ep_initialize(ortep_ep *ep, const ortep_config *config);
ORTEP_API ortep_status ortep_ep_shutdown(ortep_ep *ep);
/* Shuts down (if needed) and frees the EP. NULL is a no-op. */
ORTEP_API void ortep_ep_destroy(ortep_ep *ep);

/* n_inputs entries each. */
ORTEP_API void ortep_ep_supports_op(const ortep_ep *ep, const ortep_node *node, int64_t opset,
                                    const ortep_shape *shapes, const ortep_dtype *dtypes, size_t n_inputs,
                                    ortep_kernel_match *out);
ORTEP_API ortep_status ortep_ep_get_kernel(ortep_ep *ep, const ortep_node *node, const ortep_shape *shapes,
                                           const ortep_dtype *dtypes, size_t n_inputs, int64_t opset,
                                           ortep_kernel **out);

ORTEP_API ortep_status ortep_ep_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out);
/* Frees an OWNED buffer of this EP and zeroes the handle; a borrowed buffer is
 * a no-op free; a buffer of another device is refused (ORTEP_E_WRONG_DEVICE). */
ORTEP_API ortep_status ortep_ep_deallocate(ortep_ep *ep, ortep_buffer *buffer);
ORTEP_API ortep_status ortep_ep_copy(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size);
ORTEP_API ortep_status ortep_ep_copy_async(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size,
                                           ortep_fence *out);
ORTEP_API ortep_status ortep_ep_fence_wait(ortep_ep *ep, ortep_fence *fence);
ORTEP_API ortep_status ortep_ep_copy_from_host(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst);
ORTEP_API ortep_status ortep_ep_copy_from_host_at(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst,
                                                  size_t offset);
ORTEP_API ortep_status ortep_ep_copy_to_host(ortep_ep *ep, const ortep_buffer *src, void *dst, size_t len);
ORTEP_API ortep_status ortep_ep_copy_to_host_at(ortep_ep *ep, const ortep_buffer *src, size_t offset, void *dst,
                                                size_t len);
ORTEP_API ortep_status ortep_ep_sync(ortep_ep *ep);

/* Allocation-free argmax over elements f32 or f16 logits at a device pointer:
 * the first maximum wins, NaN is skipped. result (>= 8 bytes, on this EP)
 * receives two native-endian u32: the token id, then the error word. */
ORTEP_API ortep_status ortep_ep_device_argmax(ortep_ep *ep, const void *logits, size_t elements, ortep_dtype dtype,
                                              ortep_buffer *result);
/* Allocation-free sampling (after the EP's first call) over f32 or f16
 * logits with the parameters at params (an ortep_sample_params in this EP's
 * memory) and, for the repetition penalty, params->n_history ids at history;
 * result as for argmax: the token id, then the error word (a NaN or infinite
 * logit sets ARGMAX_NOT_FINITE). Not supported by EPs without a sampler. */
ORTEP_API ortep_status ortep_ep_device_sample(ortep_ep *ep, const void *logits, size_t elements, ortep_dtype dtype,
                                              const void *params, const int32_t *history, ortep_buffer *result);

/* Opens a device-graph capture: kernels run on the EP until end_capture are
 * recorded into one segment (a non-capturable kernel is refused by its run,
 * so the executor runs it as a seam instead). */
ORTEP_API ortep_status ortep_ep_begin_capture(ortep_ep *ep);
ORTEP_API ortep_status ortep_ep_end_capture(ortep_ep *ep);
ORTEP_API ortep_status ortep_ep_abort_capture(ortep_ep *ep);
ORTEP_API ortep_status ortep_ep_replay(ortep_ep *ep);
ORTEP_API ortep_status ortep_ep_replay_segment(ortep_ep *ep, size_t index);
/* Replays segment `index` at least once and again while the i32 at `flag`
 * (the EP's memory, written by a kernel of the segment) is non-zero after a
 * replay, at most max_iterations times (>= 1), with no host round trip
 * between replays (the CPU EP: a loop over its recorded plan; the CUDA EP:
 * the segment inside a conditional WHILE node of one graph launch).
 * Asynchronous like a replay: the flag and whatever the segment wrote are
 * read after the EP's next sync. ORTEP_E_NOT_SUPPORTED when the EP finds it
 * cannot loop this segment after all, before anything ran (its capabilities
 * then say so). */
ORTEP_API ortep_status ortep_ep_replay_segment_while(ortep_ep *ep, size_t index, const int32_t *flag,
                                                     size_t max_iterations);
ORTEP_API ortep_status ortep_ep_reset_graph(ortep_ep *ep, bool *had_graph);
ORTEP_API size_t ortep_ep_segment_count(const ortep_ep *ep);
ORTEP_API bool ortep_ep_capture_active(const ortep_ep *ep);
/* Reads (without clearing) the latched error word. */
ORTEP_API ortep_status ortep_ep_check_error_word(ortep_ep *ep, uint32_t *bits);
ORTEP_API ortep_status ortep_ep_reset_error_word(ortep_ep *ep);
/* The device pointer kernels OR bits into (NULL when the EP has none). */
ORTEP_API uint32_t *ortep_ep_error_word_ptr(ortep_ep *ep);
/* false when the EP keeps no counters. */
ORTEP_API bool ortep_ep_allocation_counts(const ortep_ep *ep, uint64_t *allocations, uint64_t *frees);
/* Segments instantiated and updated in place (0 and 0 by default). */
ORTEP_API void ortep_ep_graph_counts(const ortep_ep *ep, uint64_t *instantiations, uint64_t *updates);
ORTEP_API size_t ortep_ep_graph_kernel_nodes(const ortep_ep *ep);
ORTEP_API size_t ortep_ep_context_source_keys(const ortep_ep *ep, const char **out, size_t cap);
/* The EP-context contract (backend_impl.h): save_context streams the blob
 * through write (NULL: only its size into *len); load_context needs the
 * blob's bytes to outlive the EP and, since it serves weights from them in
 * place, the blob 64-byte aligned (a mapped file is; ORTEP_E_INVALID_ARGUMENT
 * otherwise). */
typedef bool (*ortep_context_write_fn)(void *ctx, const void *bytes, size_t n);
ORTEP_API ortep_status ortep_ep_save_context(ortep_ep *ep, ortep_context_write_fn write, void *ctx, size_t *len);
ORTEP_API ortep_status ortep_ep_load_context(ortep_ep *ep, const void *blob, size_t len);

/* --- registry -------------------------------------------------------------- */
typedef struct ortep_ep_registry ortep_ep_registry;
ORTEP_API ortep_status ortep_ep_registry_create(ortep_ep_registry **out);
/* Destroys the registry and every EP registered in it. */
ORTEP_API void ortep_ep_registry_destroy(ortep_ep_registry *registry);
/* Takes ownership of ep (also on failure) and gives it the next id (0, 1,
 * ...). Names must be unique. Registration order is placement preference on
 * equal cost. */
ORTEP_API ortep_status ortep_ep_registry_add(ortep_ep_registry *registry, ortep_ep *ep, uint32_t *id);
ORTEP_API size_t ortep_ep_registry_count(const ortep_ep_registry *registry);
ORTEP_API ortep_ep *ortep_ep_registry_get(const ortep_ep_registry *registry, uint32_t id);
/* NULL when no EP has that name. */
ORTEP_API ortep_ep *ortep_ep_registry_find(const ortep_ep_registry *registry, const char *name);

ORTEP_END_DECLS

#endif
