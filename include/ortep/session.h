/*
 * session.h: the executor. A session turns a graph and the registered EPs
 * into something that runs one step (e.g. one decoded token) as fast as the
 * hardware allows:
 *
 *   1. place: each node on the EP whose supports_op accepts it at the lowest
 *      cost (a node no EP supports is an error naming it, its op and every
 *      EP's reason); copies are inserted where a value crosses EPs;
 *   2. kernels are created, specialised to the graph's static shapes;
 *   3. memory: every activation, graph input and graph output gets a fixed
 *      offset in one planned arena block per EP (graph inputs and outputs,
 *      like KV caches, live for the whole step and keep their contents
 *      between steps); initializers are bound in place (BORROWED) when the EP
 *      can read them, else uploaded once;
 *   4. run: EAGER dispatches node by node; GRAPH captures maximal runs of
 *      capturable nodes on a graph-capable EP as segments and runs every
 *      other node as an eager seam between segment replays, each seam with
 *      its reason. A node whose recording fails aborts that capture, becomes
 *      a seam ("recording failed") and capture is retried; if the retry fails
 *      too the session falls back to eager and says why.
 *
 * Replay is bitwise identical to eager. After the first step a step makes no
 * allocation. The graph must outlive the session.
 *
 * Several graphs, one session (ortep_session_create_multi): e.g. a decode
 * step and prefill chunks of a few sizes over the same weights and KV caches.
 * Graph inputs and outputs with the same name are one value shared by every
 * graph (same dtype, size and EP, else creation fails naming both);
 * initializers over the same bytes are bound once; each EP gets one planned
 * arena holding the shared values and, from one offset, the activations of
 * whichever graph runs (so it is sized for the largest graph, not the sum).
 * Each graph is captured lazily at its first GRAPH-mode run; invalidating
 * drops every graph's capture.
 *
 * Threads: a session is used by one thread at a time; different sessions are
 * independent. A run that overlaps another run of the same session returns
 * ORTEP_E_STATE instead of racing on its memory.
 */
#ifndef ORTEP_SESSION_H
#define ORTEP_SESSION_H

#include "ortep/ep.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_session ortep_session;

typedef enum ortep_run_mode { ORTEP_RUN_EAGER = 0, ORTEP_RUN_GRAPH = 1 } ortep_run_mode;

typedef struct ortep_session_options {
  ortep_run_mode mode;
  /* Nodes to run as eager seams even when capturable: a comma-separated list
   * of op types and/or node names, e.g. "GroupQueryAttention,layers.0.o_proj".
   * NULL or "" for none. */
  const char *forced_seams;
  /* Also force every Nth node (in execution order, N >= 2) to be a seam: a
   * testing aid for seam handling. 0: off. */
  uint32_t seam_every;
  /* Time every step of an eager run (two clock reads per node): read with
   * ortep_session_profile. Off by default. */
  bool profile;
  /* Graph inputs whose memory the caller provides (KV caches on virtual
   * backing): they are left out of the planned arena, and each must be bound
   * with ortep_session_bind_value before the first run. Every name must be a
   * graph input of some graph of the session. */
  const char *const *external_values;
  size_t n_external_values;
  /* Weights held once by several sessions (forked decoders): an initializer
   * over the same bytes that this session bound on an EP of the same name
   * and device, prepared into the EP's layout or uploaded, is used from there
   * instead of being prepared or uploaded again. It must outlive this one. */
  const ortep_session *initializers_from;
  /* Called as the EPs prepare initializers (a blocked or quantized copy),
   * with the bytes done of those that are candidates; NULL: none. */
  ortep_progress_fn progress;
  void *progress_ctx;
  /* Called as bytes initializer `name` came from will not be read again:
   * pieces of them ([offset, offset + bytes)) while an EP prepares a copy
   * of a large one, and all of them (0, its size) once the EP holds it in a
   * form of its own; a mapped model drops their pages as they come, keeping
   * the peak near one copy. NULL: none. */
  void (*prepared)(void *ctx, const char *name, size_t offset, size_t bytes);
  void *prepared_ctx;
} ortep_session_options;

typedef struct ortep_session_stats {
  ortep_run_mode mode;       /* the mode in force (GRAPH may have fallen back to EAGER) */
  size_t graphs;             /* graphs in the session (the fields below up to planned_bytes are one graph's) */
  size_t nodes;              /* graph nodes */
  size_t kernels_per_step;   /* kernels (graph nodes run) per step */
  size_t graph_kernel_nodes; /* device kernels in this graph's captured segments (GRAPH; CUDA counts kernel nodes) */
  size_t copies_per_step;    /* cross-EP copies per step */
  size_t segments;           /* captured segments (GRAPH) */
  size_t seams;              /* eager steps between segments (GRAPH) */
  size_t eps_used;
  size_t planned_bytes;     /* arena bytes over all EPs (the whole session's) */
  size_t lower_bound_bytes; /* the most bytes live at one step */
  size_t naive_bytes;       /* every value its own memory */
  uint64_t steps;           /* runs of this graph the host started (a loop on the EP counts once) */
  uint64_t device_loops;    /* of them, ortep_session_run_graph_while loops the EP ran alone (one launch each) */
  uint64_t captures;        /* successful captures of this graph (re-captures included) */
  uint64_t capture_retries; /* captures retried after a recording failure */
  uint64_t graph_updates;   /* executable graphs updated in place (CUDA) */
  uint64_t instantiations;  /* executable graphs instantiated (CUDA) */
  uint64_t ep_allocations;  /* EP allocations since creation (all EPs) */
  uint64_t ep_frees;
  size_t prepared_initializers; /* held by their EP in a layout of its own (the CPU EP's blocked weights) */
  const char *fallback_reason;  /* why GRAPH fell back to EAGER, or NULL */
} ortep_session_stats;

/* Builds a session; registry's EPs must be initialised and outlive it. */
ORTEP_API ortep_status ortep_session_create(const ortep_graph *graph, ortep_ep_registry *registry,
                                            const ortep_session_options *options, ortep_session **out);
/* One session over n_graphs graphs (see above); graph 0 is the one
 * ortep_session_run, the stats, seam and profile calls describe. Every graph
 * must outlive the session. */
ORTEP_API ortep_status ortep_session_create_multi(const ortep_graph *const *graphs, size_t n_graphs,
                                                  ortep_ep_registry *registry, const ortep_session_options *options,
                                                  ortep_session **out);
ORTEP_API size_t ortep_session_graph_count(const ortep_session *session);
/* Resets device graphs, then releases arenas, uploads and kernels. */
ORTEP_API void ortep_session_destroy(ortep_session *session);

/* Where a graph input or output lives: its EP and device address (in the
 * EP's planned arena; fixed for the session's lifetime) and size. */
ORTEP_API ortep_status ortep_session_value(const ortep_session *session, const char *name, ortep_ep **ep,
                                           void **device_ptr, size_t *bytes);
/* Gives external value `name` (options.external_values) its memory: bytes
 * (exactly the value's size) at ptr, on the value's EP (ortep_session_value
 * says which) and 256-byte aligned; the caller keeps it valid, at the same
 * address, until the session is destroyed or the value is bound again. A
 * rebinding drops the captured graphs (they hold the old address). Before
 * every external value is bound, ortep_session_value gives a NULL pointer
 * and running, writing or reading is refused (ORTEP_E_STATE). */
ORTEP_API ortep_status ortep_session_bind_value(ortep_session *session, const char *name, void *ptr, size_t bytes);
/* Host -> a graph input / graph output -> host, through the owning EP. */
ORTEP_API ortep_status ortep_session_write(ortep_session *session, const char *name, const void *src, size_t len);
ORTEP_API ortep_status ortep_session_read(ortep_session *session, const char *name, void *dst, size_t len);

/* Runs one step of graph 0: eager, or (GRAPH) capture when needed, then
 * replay. */
ORTEP_API ortep_status ortep_session_run(ortep_session *session);
/* The same for graph `graph` of a multi-graph session (ORTEP_E_OUT_OF_RANGE
 * past the last). */
ORTEP_API ortep_status ortep_session_run_graph(ortep_session *session, size_t graph);
/* Runs graph `graph` at least once, and again while the i32 value `flag`
 * (a graph input or output the graph writes, e.g. ortep:FeedToken's) is
 * non-zero after a run, at most max_iterations times (>= 1). In GRAPH mode,
 * once the graph is captured as one segment on the EP that holds the flag
 * and that EP loops device graphs (capabilities.device_loops: the CPU EP's
 * recorded plan, the CUDA EP's conditional WHILE node), the whole loop is
 * one launch with no host round trip between runs (stats: device_loops);
 * otherwise (eager, seams, another EP) the session runs it from the host,
 * reading the flag after each run. Either way the graph's results are those
 * of the same runs one by one. */
ORTEP_API ortep_status ortep_session_run_graph_while(ortep_session *session, size_t graph, const char *flag,
                                                     size_t max_iterations);
/* Drops the captured graphs (the next GRAPH step re-captures). */
ORTEP_API ortep_status ortep_session_invalidate(ortep_session *session);

/* Graph 0's stats (and the whole session's memory). */
ORTEP_API void ortep_session_get_stats(const ortep_session *session, ortep_session_stats *out);
/* Whether an EP holds initializer `name` in a layout of its own (prepared
 * when the session bound it: the CPU EP's blocked 16-bit weights); the
 * file's bytes under it are then no longer read. */
ORTEP_API bool ortep_session_initializer_prepared(const ortep_session *session, const char *name);
/* The dtype and shape the EP holds a prepared initializer in (a blocked or
 * quantized form: what its kernels read); false when it is not prepared.
 * dtype and shape may be NULL. */
ORTEP_API bool ortep_session_initializer_form(const ortep_session *session, const char *name, ortep_dtype *dtype,
                                              ortep_shape *shape);
ORTEP_API ortep_status ortep_session_get_graph_stats(const ortep_session *session, size_t graph,
                                                     ortep_session_stats *out);
/* The seams, in execution order: node name, op type, reason. */
ORTEP_API size_t ortep_session_seam_count(const ortep_session *session);
/* With options.profile: the steps of the plan in execution order, each with
 * its op type ("copy" for a cross-EP copy), node name and the nanoseconds
 * its eager runs took in total. ORTEP_E_STATE without profiling;
 * ORTEP_E_OUT_OF_RANGE past the last step. */
ORTEP_API size_t ortep_session_profile_count(const ortep_session *session);
ORTEP_API ortep_status ortep_session_profile(const ortep_session *session, size_t i, const char **op_type,
                                             const char **node, uint64_t *total_ns);
/* The same for graph `graph` of a multi-graph session (the calls above
 * describe graph 0): 0 steps / ORTEP_E_OUT_OF_RANGE past the last graph. */
ORTEP_API size_t ortep_session_profile_graph_count(const ortep_session *session, size_t graph);
ORTEP_API ortep_status ortep_session_profile_graph(const ortep_session *session, size_t graph, size_t i,
                                                   const char **op_type, const char **node, uint64_t *total_ns);
ORTEP_API ortep_status ortep_session_seam(const ortep_session *session, size_t i, const char **node,
                                          const char **op_type, const char **reason);
/* The EP a node was placed on (NULL when unknown). */
ORTEP_API ortep_ep *ortep_session_node_ep(const ortep_session *session, const char *node_name);

/* The plan as text: node -> EP, segment or seam (reason), output offsets, and
 * the memory summary. The caller frees *text with free(). */
ORTEP_API ortep_status ortep_session_format_plan(const ortep_session *session, char **text);

ORTEP_END_DECLS

#endif
