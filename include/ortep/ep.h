/*
 * ep.h: execution providers as their users see them: opaque ortep_ep and
 * ortep_kernel handles, the dispatch functions a program calls,
 * configuration, and the registry. What only the executor and backends call
 * (placement, kernels, capture and replay, asynchronous copies, the device
 * argmax and sampler) and implementing an EP (its vtable, the kernel vtable,
 * what a kernel runs on) are ortep/backend_impl.h's, installed beside this
 * one.
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
ORTEP_API ortep_status ortep_ep_initialize(ortep_ep *ep, const ortep_config *config);
ORTEP_API ortep_status ortep_ep_shutdown(ortep_ep *ep);
/* Shuts down (if needed) and frees the EP. NULL is a no-op. */
ORTEP_API void ortep_ep_destroy(ortep_ep *ep);

ORTEP_API ortep_status ortep_ep_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out);
/* Frees an OWNED buffer of this EP and zeroes the handle; a borrowed buffer is
 * a no-op free; a buffer of another device is refused (ORTEP_E_WRONG_DEVICE). */
ORTEP_API ortep_status ortep_ep_deallocate(ortep_ep *ep, ortep_buffer *buffer);
ORTEP_API ortep_status ortep_ep_copy(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size);
ORTEP_API ortep_status ortep_ep_copy_from_host(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst);
ORTEP_API ortep_status ortep_ep_copy_from_host_at(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst,
                                                  size_t offset);
ORTEP_API ortep_status ortep_ep_copy_to_host(ortep_ep *ep, const ortep_buffer *src, void *dst, size_t len);
ORTEP_API ortep_status ortep_ep_copy_to_host_at(ortep_ep *ep, const ortep_buffer *src, size_t offset, void *dst,
                                                size_t len);
ORTEP_API ortep_status ortep_ep_sync(ortep_ep *ep);

/* Reads (without clearing) the latched error word. */
ORTEP_API ortep_status ortep_ep_check_error_word(ortep_ep *ep, uint32_t *bits);
ORTEP_API ortep_status ortep_ep_reset_error_word(ortep_ep *ep);
/* The device pointer kernels OR bits into (NULL when the EP has none). */
ORTEP_API uint32_t *ortep_ep_error_word_ptr(ortep_ep *ep);
/* false when the EP keeps no counters. */
ORTEP_API bool ortep_ep_allocation_counts(const ortep_ep *ep, uint64_t *allocations, uint64_t *frees);
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
