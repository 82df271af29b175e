/*
 * backend_impl.h: for the authors of backends (execution providers,
 * allocators), not their users: the vtables behind the opaque ortep_ep,
 * ortep_kernel and ortep_allocator handles, and what a kernel runs on. The
 * model is ggml's ggml-backend.h / ggml-backend-impl.h split: users include
 * ortep/ortep.h; a backend embeds `ortep_ep` (or `ortep_allocator`) as the
 * first member of its own struct and fills a vtable. The dispatch functions
 * (ep.h, allocator.h) check every argument before calling an entry, so an
 * entry may assume valid arguments: a buffer of its own device, bounds that
 * fit, a non-NULL kernel and io.
 */
#ifndef ORTEP_BACKEND_IMPL_H
#define ORTEP_BACKEND_IMPL_H

#include "ortep/allocator.h"
#include "ortep/ep.h"

ORTEP_BEGIN_DECLS

/* --- what the executor calls (dispatch, checked as ep.h's) ---------------- */
ORTEP_API bool ortep_kernel_is_capturable(const ortep_kernel *kernel);
ORTEP_API ortep_ep_capabilities ortep_ep_get_capabilities(const ortep_ep *ep);
/* n_inputs entries each. */
ORTEP_API void ortep_ep_supports_op(const ortep_ep *ep, const ortep_node *node, int64_t opset,
                                    const ortep_shape *shapes, const ortep_dtype *dtypes, size_t n_inputs,
                                    ortep_kernel_match *out);
ORTEP_API ortep_status ortep_ep_get_kernel(ortep_ep *ep, const ortep_node *node, const ortep_shape *shapes,
                                           const ortep_dtype *dtypes, size_t n_inputs, int64_t opset,
                                           ortep_kernel **out);
ORTEP_API ortep_status ortep_ep_copy_async(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size,
                                           ortep_fence *out);
ORTEP_API ortep_status ortep_ep_fence_wait(ortep_ep *ep, ortep_fence *fence);
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
/* Segments instantiated and updated in place (0 and 0 by default). */
ORTEP_API void ortep_ep_graph_counts(const ortep_ep *ep, uint64_t *instantiations, uint64_t *updates);
ORTEP_API size_t ortep_ep_graph_kernel_nodes(const ortep_ep *ep);

/* --- kernels --------------------------------------------------------------- */
/* What a kernel runs on: the raw data pointers of its inputs (NULL for an
 * absent optional input) and outputs on the EP's device, the EP's error word
 * (a device pointer), and the EP's stream (NULL on the CPU). */
struct ortep_kernel_io {
  const void *const *inputs;
  size_t n_inputs;
  void *const *outputs;
  size_t n_outputs;
  uint32_t *error_word;
  void *stream;
};

typedef struct ortep_kernel_vtable {
  ortep_status (*run)(ortep_kernel *self, const ortep_kernel_io *io);
  void (*destroy)(ortep_kernel *self);
  /* Optional: called instead of run while a device-graph capture records the
   * kernel on an EP whose recording does not execute it (the CPU EP's
   * recorded plan). It validates what will be replayed; a failure aborts the
   * capture. */
  ortep_status (*record)(ortep_kernel *self, const ortep_kernel_io *io);
} ortep_kernel_vtable;

struct ortep_kernel {
  const ortep_kernel_vtable *vtable;
  const char *name; /* "cpu.MatMul" */
  bool capturable;  /* safe to record into a device graph: no host sync, no
                        allocation, no host-side data read at run time */
};

/* Runs kernel on ep with the raw pointers of io (checked: ep, kernel and io
 * non-NULL); while a capture is open it records instead (ep.h). The
 * executor's call, and a kernel test's. */
ORTEP_API ortep_status ortep_ep_run_kernel(ortep_ep *ep, ortep_kernel *kernel, const ortep_kernel_io *io);

/* An initializer as a session binds it on an EP, and every node of the
 * session (any of its graphs) that reads it there: input `input` of `node`
 * in `graph`. */
typedef struct ortep_initializer_use {
  const ortep_graph *graph;
  const ortep_node *node;
  size_t input;
} ortep_initializer_use;
typedef struct ortep_initializer {
  const char *name;
  ortep_dtype dtype;
  ortep_shape shape;
  const void *data; /* host-readable */
  size_t bytes;
  /* == data when the EP may transform the bytes in place (a model's private
   * copy that no other EP reads): it may then return *out as a BORROWED_MUT
   * buffer over them instead of a copy. NULL otherwise. */
  void *writable;
  const ortep_initializer_use *uses;
  size_t n_uses;
  /* The block type the graph asks it be stored in (ir.h:
   * ortep_graph_prefer_initializer_dtype), or ORTEP_DTYPE_COUNT. */
  ortep_dtype prefer;
  /* Optional (NULL: none): an EP preparing a copy may call it for a range
   * of data, [offset, offset + bytes) of its bytes, that it will not read
   * again, so that the owner can drop a mapped file's pages before the
   * whole is done (the peak of a large weight's first open then holds the
   * copy and a piece of the source, not both whole). */
  void (*read_done)(void *ctx, size_t offset, size_t bytes);
  void *read_done_ctx;
} ortep_initializer;

/* Where save_context writes its blob: n bytes more; false to stop. */
typedef bool (*ortep_context_write_fn)(void *ctx, const void *bytes, size_t n);

typedef struct ortep_ep_vtable {
  const char *name; /* "cpu_ep", "cuda_ep" */
  /* Required. */
  ortep_status (*initialize)(ortep_ep *self, const ortep_config *config);
  ortep_status (*shutdown)(ortep_ep *self);
  void (*destroy)(ortep_ep *self);
  void (*supports_op)(const ortep_ep *self, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                      const ortep_dtype *dtypes, size_t n_inputs, ortep_kernel_match *out);
  ortep_status (*get_kernel)(ortep_ep *self, const ortep_node *node, const ortep_shape *shapes,
                             const ortep_dtype *dtypes, size_t n_inputs, int64_t opset, ortep_kernel **out);
  ortep_status (*allocate)(ortep_ep *self, size_t size, size_t align, ortep_buffer *out);
  ortep_status (*deallocate)(ortep_ep *self, ortep_buffer *buffer);
  ortep_status (*copy)(ortep_ep *self, const ortep_buffer *src, ortep_buffer *dst, size_t size);
  ortep_status (*copy_async)(ortep_ep *self, const ortep_buffer *src, ortep_buffer *dst, size_t size, ortep_fence *out);
  ortep_status (*fence_wait)(ortep_ep *self, ortep_fence *fence);
  ortep_status (*sync)(ortep_ep *self);
  /* Optional (NULL -> the default in the header comment). */
  ortep_ep_capabilities (*capabilities)(const ortep_ep *self);
  ortep_status (*run_kernel)(ortep_ep *self, ortep_kernel *kernel, const ortep_kernel_io *io);
  ortep_status (*copy_from_host)(ortep_ep *self, const void *src, size_t len, ortep_buffer *dst);
  ortep_status (*copy_from_host_at)(ortep_ep *self, const void *src, size_t len, ortep_buffer *dst, size_t offset);
  ortep_status (*copy_to_host)(ortep_ep *self, const ortep_buffer *src, void *dst, size_t len);
  ortep_status (*copy_to_host_at)(ortep_ep *self, const ortep_buffer *src, size_t offset, void *dst, size_t len);
  ortep_status (*device_argmax)(ortep_ep *self, const void *logits, size_t elements, ortep_dtype dtype,
                                ortep_buffer *result);
  /* params: an ortep_sample_params in this EP's memory; history: n_history
   * i32 ids (may be NULL when n_history is 0 or the penalty is off). */
  ortep_status (*device_sample)(ortep_ep *self, const void *logits, size_t elements, ortep_dtype dtype,
                                const void *params, const int32_t *history, ortep_buffer *result);
  ortep_status (*begin_capture)(ortep_ep *self);
  ortep_status (*end_capture)(ortep_ep *self);
  ortep_status (*abort_capture)(ortep_ep *self);
  ortep_status (*replay)(ortep_ep *self);
  ortep_status (*replay_segment)(ortep_ep *self, size_t index);
  /* Optional (capabilities.device_loops): the dispatcher checked the capture
   * state, the index, flag and max_iterations (ep.h). */
  ortep_status (*replay_segment_while)(ortep_ep *self, size_t index, const int32_t *flag, size_t max_iterations);
  ortep_status (*reset_graph)(ortep_ep *self, bool *had_graph);
  size_t (*segment_count)(const ortep_ep *self);
  /* Required of an EP that implements begin_capture: the dispatcher refuses a
   * second begin, an end without a begin and a replay during a capture by
   * asking it, so no EP repeats those checks. */
  bool (*capture_active)(const ortep_ep *self);
  ortep_status (*check_error_word)(ortep_ep *self, uint32_t *bits);
  ortep_status (*reset_error_word)(ortep_ep *self);
  uint32_t *(*error_word_ptr)(ortep_ep *self);
  bool (*allocation_counts)(const ortep_ep *self, uint64_t *allocations, uint64_t *frees);
  /* Executable graphs instantiated, and updated in place, since creation. */
  void (*graph_counts)(const ortep_ep *self, uint64_t *instantiations, uint64_t *updates);
  /* Kernel launches recorded in the live segments, as the device graph holds
   * them (CUDA: kernel nodes of the captured graphs, which may be more than
   * the graph's nodes when a node launches several kernels). */
  size_t (*graph_kernel_nodes)(const ortep_ep *self);
  /* Optional: the EP's chance to hold an initializer in a layout of its own
   * (a blocked or quantized copy its kernels read faster) when a session
   * binds it. ORTEP_OK: *out is an OWNED buffer of this EP, charged to its
   * governor, holding the prepared bytes, and *dtype / *shape the dtype and
   * shape its kernels are given for that input (get_kernel sees them, for
   * every use; they come in as init->dtype and init->shape: a quantizing
   * EP changes the dtype, a blocking one the shape);
   * ORTEP_E_NOT_SUPPORTED: leave it as it is; another status fails the
   * session. Called once per initializer and EP, outside any capture. With
   * init->writable it may rearrange the bytes where they are and return a
   * BORROWED_MUT buffer over them (no copy, no charge); from a loaded EP
   * context (load_context) it may return a read-only BORROWED buffer over
   * that context's bytes, which the EP's owner keeps alive while the EP
   * lives. */
  ortep_status (*prepare_initializer)(ortep_ep *self, const ortep_initializer *init, ortep_dtype *dtype,
                                      ortep_shape *shape, ortep_buffer *out);
  /* The EP-context contract of the seeds: a prepared state saved as one
   * blob and loaded back, so a later EP serves what it would otherwise
   * prepare again (the CPU EP: its blocked and quantized weights).
   * context_source_keys: what the state depends on (the EP, its build, its
   * layouts), as strings; a blob made under other keys is refused.
   * save_context: the blob, front to back, through write (false from it
   * stops the save, which then fails), and *len its bytes; with write NULL
   * only *len (so a caller can size a file first). load_context: validates the
   * blob in full and serves from it; the caller keeps its bytes alive and
   * unchanged while the EP lives (a mapped cache file), and aligned as the EP
   * needs (the CPU EP: 64 bytes, or ORTEP_E_INVALID_ARGUMENT). */
  size_t (*context_source_keys)(const ortep_ep *self, const char **out, size_t cap);
  ortep_status (*save_context)(ortep_ep *self, ortep_context_write_fn write, void *ctx, size_t *len);
  ortep_status (*load_context)(ortep_ep *self, const void *blob, size_t len);
} ortep_ep_vtable;

struct ortep_ep {
  const ortep_ep_vtable *vtable;
  ortep_device device;
  uint32_t id; /* set by the registry */
};

/* The optional capabilities' entries (allocator.h describes them; the
 * ortep_allocator_* dispatchers validate every range first). */
typedef struct ortep_virtual_backing {
  size_t granularity; /* bytes: every range is widened to whole granules */
  ortep_status (*reserve)(ortep_allocator *self, size_t bytes, size_t align, void **out);
  /* *newly_owned_bytes: physical bytes this commit added. */
  ortep_status (*commit)(ortep_allocator *self, const ortep_commit_range *range, uint64_t *newly_owned_bytes);
  /* *released_bytes: physical bytes this decommit gave back. */
  ortep_status (*decommit)(ortep_allocator *self, const ortep_commit_range *range, uint64_t *released_bytes);
} ortep_virtual_backing;

typedef struct ortep_shared_mapping {
  ortep_status (*create_prefix)(ortep_allocator *self, const void *bytes, size_t len, ortep_shared_prefix **out);
  /* The prefix's first `bytes` (whole granules; 0: all of it) at `offset`
   * (a whole number of granules, checked by the dispatcher) of the
   * reservation; the backend checks they fit it. */
  ortep_status (*map_prefix)(ortep_allocator *self, ortep_shared_prefix *prefix, void *allocation,
                             size_t allocation_bytes, size_t offset, size_t bytes, ortep_shared_commit_info *out);
  void (*destroy_prefix)(ortep_allocator *self, ortep_shared_prefix *prefix);
} ortep_shared_mapping;

typedef struct ortep_allocator_vtable {
  const char *name; /* for messages: "host", "cuda_pool", "fault" ... */
  /* Required. Called only with a power-of-two align and a size that does not
   * overflow; *out receives a pointer aligned to align. */
  ortep_status (*allocate)(ortep_allocator *self, size_t bytes, size_t align, void **out);
  /* Required. */
  void (*deallocate)(ortep_allocator *self, void *ptr, size_t bytes, size_t align);
  /* Required. */
  ortep_device_key (*device)(const ortep_allocator *self);
  /* Optional (see the defaults above). */
  ortep_release_outcome (*release)(ortep_allocator *self, void *ptr, size_t bytes, size_t align);
  bool (*commits_on_demand)(const ortep_allocator *self);
  /* The seeds' lazy virtual backing and shared mappings (NULL: none): the
   * host and CUDA virtual allocators implement both; the fault wrapper
   * forwards them, injecting failures into reserve, commit and prefixes. */
  const ortep_virtual_backing *(*virtual_backing)(ortep_allocator *self);
  const ortep_shared_mapping *(*shared_mapping)(ortep_allocator *self);
  ortep_status (*stats)(const ortep_allocator *self, ortep_mem_stats *out);
  void (*destroy)(ortep_allocator *self);
} ortep_allocator_vtable;

struct ortep_allocator {
  const ortep_allocator_vtable *vtable;
};

/* Whether ep prepares initializers (its vtable has the entry). */
ORTEP_API bool ortep_ep_prepares_initializers(const ortep_ep *ep);
/* The dispatcher of prepare_initializer: checks the arguments, gives
 * ORTEP_E_NOT_SUPPORTED for an EP without the entry, and refuses a result
 * that is not an owned (or in-place, or borrowed) buffer of the EP's device,
 * or whose dtype is not the initializer's or a block type. */
ORTEP_API ortep_status ortep_ep_prepare_initializer(ortep_ep *ep, const ortep_initializer *init, ortep_dtype *dtype,
                                                    ortep_shape *shape, ortep_buffer *out);

ORTEP_END_DECLS

#endif
