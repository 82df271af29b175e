/*
 * session.c: the executor (session.h).
 *
 * Build turns the graph into a flat list of steps (node launches and cross-EP
 * copies) whose kernel_io pointer arrays are resolved once, against planned
 * arenas, so running a step is a loop of kernel calls with no lookup and no
 * allocation. GRAPH mode groups the steps into units, each a captured segment
 * (maximal run of capturable nodes on one graph-capable EP) or an eager seam,
 * and replays the units in order.
 *
 * A session may hold several graphs (ortep_session_create_multi), e.g. a
 * decode step and prefill chunks of a few sizes. They share their graph
 * inputs and outputs by name (the KV caches, the logits) and one planned
 * arena per EP: persistent values first, then the activations of each graph
 * at the same offsets (only one graph runs at a time, so the arena is sized
 * for the largest). Each graph has its own steps, units and capture state;
 * its segments are captured lazily at its first run and appended to the
 * EP's list, so capturing one graph never disturbs another's.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/trace.h"
#include "internal.h"
#include "ortep/session.h"
#include "ortep/tensor.h"

#define SLOT_ALIGN 256
#define NONE       UINT32_MAX
/* The session's fixed limits, each with the message that names it. */
#define MAX_NODE_INPUTS 64   /* shapes and dtypes of one node's inputs live on the stack */
#define WHY_BYTES       2048 /* every EP's refusal of one node, joined with " | " */
#define REASON_BYTES    200  /* why a step is a seam */
#define LABEL_BYTES     160  /* "<op> <node>": the trace range of a seam */
#define FALLBACK_BYTES  400  /* why GRAPH mode fell back to EAGER */
#define OPS_LIST_BYTES  1024 /* the graph's op types, for a bad forced-seam name */

typedef struct slot {
  const char *name;
  uint32_t ep;
  ortep_dtype dtype;
  size_t bytes;
  /* The value's lifetime in execution order: the first and last step that
   * use it (writing or reading), the interval the memory planner keeps it
   * alive for. */
  uint32_t first, last;
  bool persistent;  /* graph inputs/outputs: never share memory, shared by every graph of the session */
  bool bound;       /* an initializer bound in place or uploaded: not planned */
  bool external;    /* options.external_values: the caller's memory (ortep_session_bind_value), not planned */
  uint32_t graph;   /* the graph whose steps use it (persistent: the first that declared it) */
  const void *src;  /* bound: the initializer's host data (graphs share one binding of the same bytes) */
  size_t src_bytes; /* bound: the initializer's size, as the graphs declare it */
  bool prepared;    /* bound: the EP holds it in a layout of its own (pdtype, shape below), in an upload */
  ortep_dtype pdtype;
  ortep_shape shape;
  size_t offset;
  void *ptr;
} slot;

typedef enum step_kind { STEP_NODE, STEP_COPY } step_kind;

/* One entry of the execution order: a tagged union, `kind` saying which of
 * the two members is live (only that one is ever read or freed). */
typedef struct step {
  step_kind kind;
  uint32_t ep;
  union {
    struct { /* STEP_NODE: a kernel over bound slots */
      const ortep_node *node;
      ortep_kernel *kernel;
      uint32_t *in, *out; /* slot indices; NONE for an absent optional value */
      size_t n_in, n_out;
      const void **in_ptrs;
      void **out_ptrs;
      ortep_kernel_io io;
    };
    struct { /* STEP_COPY: a value crossing EPs */
      uint32_t src, dst;
    };
  };
  bool seam;
  char reason[REASON_BYTES];
  bool record_failed;
  char label[LABEL_BYTES]; /* "<op> <node>": the trace range of this step as a seam */
} step;

/* What a replay runs in order: a segment (count steps captured together on
 * one EP) or a seam (one step run eagerly). */
typedef struct unit {
  bool segment;
  uint32_t ep;
  size_t ep_segment;   /* segment: its index among that EP's captured segments */
  size_t first, count; /* the steps it covers */
} unit;

/* One graph of the session: its steps are steps[first_step, first_step +
 * n_steps), its units its own. */
typedef struct variant {
  const ortep_graph *graph;
  size_t first_step, n_steps;
  ortep__strmap home; /* value name -> home slot (this graph's, or a shared persistent one) */
  unit *units;
  size_t n_units;
  ortep_run_mode mode;
  bool captured;
  bool warmed;         /* one eager step has run: lazy set-up is done before any capture */
  size_t kernel_nodes; /* device kernels its live segments hold */
  char fallback[FALLBACK_BYTES];
  uint64_t n_run, captures, retries;
  uint64_t device_loops; /* runs through run_graph_while that looped on the EP (one launch each) */
  ortep_node_id *order;  /* while building: the topological order and each node's EP */
  uint32_t *where;
} variant;

typedef struct ep_state {
  ortep_ep *ep;
  ortep_allocator *alloc;
  ortep_arena *arena;
  ortep_plan_summary plan;
  ortep_buffer *uploads;
  size_t n_uploads, uploads_cap;
  size_t prepared; /* initializers the EP prepared into a layout of its own */
  bool used;
} ep_state;

struct ortep_session {
  ortep_session_options opts;
  size_t prep_done, prep_total; /* opts.progress: the initializer bytes prepared so far, and all of them */
  char *forced;
  ep_state *eps;
  size_t n_eps;
  slot *slots;
  size_t n_slots, slots_cap;
  ortep__strmap io; /* graph input/output name -> its persistent slot, across graphs */
  step *steps;
  size_t n_steps, steps_cap;
  variant *graphs;
  size_t n_graphs;
  void *staging; /* host bounce buffer for device-to-device copies across EPs */
  size_t staging_bytes;
  atomic_flag running; /* a run is in progress: an overlapping run is refused */
  size_t unbound;      /* external values not bound yet: running is refused while any is */
  uint64_t *prof_ns;   /* options.profile: eager nanoseconds per step */
};

/* --- small helpers ------------------------------------------------------------- */
static ortep_status oom(const char *what) {
  return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "session: no memory for %s", what);
}

static ortep_status add_slot(ortep_session *s, uint32_t graph, const char *name, uint32_t ep, ortep_dtype dtype,
                             size_t bytes, uint32_t first, uint32_t *out) {
  if (!ORTEP__GROW(s->slots, s->slots_cap, s->n_slots + 1)) return oom("a value");
  s->slots[s->n_slots] =
      (slot){.name = name, .ep = ep, .dtype = dtype, .bytes = bytes, .first = first, .last = first, .graph = graph};
  *out = (uint32_t)s->n_slots++;
  return ORTEP_OK;
}

static step *new_step(ortep_session *s) {
  if (!ORTEP__GROW(s->steps, s->steps_cap, s->n_steps + 1)) return NULL;
  step *st = &s->steps[s->n_steps++];
  memset(st, 0, sizeof *st);
  return st;
}

/* Every entry of the forced-seam list must name an op type or a node of the
 * graph: a misspelt one would otherwise silently force nothing. */
static ortep_status check_forced(const ortep_session *s, const ortep_graph *g, const ortep_node_id *order, size_t n) {
  for (const char *p = s->forced; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && *p == ' ') p++, len--;
    while (len && p[len - 1] == ' ') len--;
    bool found = len == 0;
    for (size_t i = 0; i < n && !found; i++) {
      const ortep_node *node = ortep_graph_node(g, order[i]);
      const char *op = ortep_node_op_type(node), *name = ortep_node_name(node);
      found = (strlen(op) == len && !strncmp(op, p, len)) || (strlen(name) == len && !strncmp(name, p, len));
    }
    if (!found) {
      char ops[OPS_LIST_BYTES] = "";
      size_t used = 0;
      for (size_t i = 0; i < n; i++) {
        const char *op = ortep_node_op_type(ortep_graph_node(g, order[i]));
        char probe[96];
        snprintf(probe, sizeof probe, " %s,", op);
        char padded[1030];
        snprintf(padded, sizeof padded, " %s", ops);
        if (strstr(padded, probe) || used + strlen(op) + 3 >= sizeof ops) continue;
        used += (size_t)snprintf(ops + used, sizeof ops - used, "%s, ", op);
      }
      if (used >= 2) ops[used - 2] = '\0';
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "forced seam '%.*s' names no op type or node of the graph; its op types are: %s", (int)len, p,
                         ops);
    }
    if (!end) break;
    p = end + 1;
  }
  return ORTEP_OK;
}

static bool in_list(const char *list, const char *item) {
  if (!list || !*list) return false;
  size_t n = strlen(item);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && *p == ' ') p++, len--;
    while (len && p[len - 1] == ' ') len--;
    if (len == n && strncmp(p, item, n) == 0) return true;
    if (!end) break;
    p = end + 1;
  }
  return false;
}

static const char *ep_name(const ortep_session *s, uint32_t ep) { return ortep_ep_name(s->eps[ep].ep); }

/* --- placement --------------------------------------------------------------------- */
static ortep_status node_signature(const ortep_graph *g, const ortep_node *n, ortep_shape *shapes,
                                   ortep_dtype *dtypes) {
  for (size_t i = 0; i < ortep_node_input_count(n); i++) {
    const char *v = ortep_node_input(n, i);
    if (!*v) {
      shapes[i] = (ortep_shape){0};
      dtypes[i] = ORTEP_DTYPE_F32;
      continue;
    }
    if (ortep_graph_value_info(g, v, &dtypes[i], &shapes[i]) != ORTEP_OK)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "node '%s' (op %s): input '%s' has no declared dtype and shape; declare it with "
                         "ortep_graph_add_value",
                         ortep_node_name(n), ortep_node_op_type(n), v);
  }
  for (size_t i = 0; i < ortep_node_output_count(n); i++) {
    const char *v = ortep_node_output(n, i);
    ortep_shape sh;
    if (*v && ortep_graph_value_info(g, v, NULL, &sh) != ORTEP_OK)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "node '%s' (op %s): output '%s' has no declared dtype and shape; declare it with "
                         "ortep_graph_add_value",
                         ortep_node_name(n), ortep_node_op_type(n), v);
    if (*v && !ortep_shape_is_static(&sh)) {
      char b[160];
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "node '%s' (op %s): output '%s' has shape %s, which is not static; planned memory needs "
                         "static shapes",
                         ortep_node_name(n), ortep_node_op_type(n), v, ortep_shape_format(&sh, b, sizeof b));
    }
  }
  return ORTEP_OK;
}

static int64_t node_opset(const ortep_graph *g, const ortep_node *n) {
  const char *d = ortep_node_domain(n);
  int64_t v = ortep_graph_opset(g, d);
  if (!v && !*d) v = ortep_graph_opset(g, "ai.onnx");
  return v;
}

static ortep_status place(ortep_session *s, const ortep_graph *g, const ortep_node_id *order, size_t n,
                          uint32_t *where) {
  size_t total = ortep_graph_node_count(g);
  for (size_t i = 0; i < total; i++) where[i] = NONE;
  ortep_shape shapes[MAX_NODE_INPUTS];
  ortep_dtype dtypes[MAX_NODE_INPUTS];
  for (size_t k = 0; k < n; k++) {
    const ortep_node *node = ortep_graph_node(g, order[k]);
    size_t nin = ortep_node_input_count(node);
    if (nin > MAX_NODE_INPUTS)
      return ortep__fail(ORTEP_E_NOT_SUPPORTED, "node '%s' has %zu inputs; at most %d", ortep_node_name(node), nin,
                         MAX_NODE_INPUTS);
    ortep_status st = node_signature(g, node, shapes, dtypes);
    if (st != ORTEP_OK) return st;
    uint32_t best = NONE, best_cost = UINT32_MAX;
    char why[WHY_BYTES];
    size_t used = 0;
    for (size_t e = 0; e < s->n_eps; e++) {
      ortep_kernel_match m;
      ortep_ep_supports_op(s->eps[e].ep, node, node_opset(g, node), shapes, dtypes, nin, &m);
      if (m.supported && m.cost < best_cost) best = (uint32_t)e, best_cost = m.cost;
      if (!m.supported && used < sizeof why)
        used += (size_t)snprintf(why + used, sizeof why - used, "%s%s", used ? " | " : "", m.reason);
    }
    if (best == NONE)
      return ortep__fail(ORTEP_E_NOT_SUPPORTED, "node '%s' (op %s%s%s) is supported by no registered EP: %s",
                         ortep_node_name(node), *ortep_node_domain(node) ? ortep_node_domain(node) : "",
                         *ortep_node_domain(node) ? ":" : "", ortep_node_op_type(node),
                         s->n_eps ? why : "no EP is registered");
    where[order[k]] = best;
  }
  return ORTEP_OK;
}

/* --- slots and steps ------------------------------------------------------------- */
static bool is_graph_output(const ortep_graph *g, const char *v) {
  for (size_t i = 0; i < ortep_graph_output_count(g); i++)
    if (strcmp(ortep_graph_output(g, i), v) == 0) return true;
  return false;
}

/* Every node of the session, in every graph, that reads initializer v (the
 * same bytes as init) on EP e: what the EP's preparation must serve.
 * *elsewhere: a node on another EP reads them too. */
static ortep_status initializer_uses(const ortep_session *s, const char *v, uint32_t e, const ortep_tensor *init,
                                     ortep_initializer_use **out, size_t *n, bool *elsewhere) {
  size_t cap = 0;
  *out = NULL, *n = 0, *elsewhere = false;
  for (size_t gj = 0; gj < s->n_graphs; gj++) {
    const variant *vj = &s->graphs[gj];
    const ortep_graph *g = vj->graph;
    const ortep_tensor *other = ortep_graph_initializer(g, v);
    if (!other || !vj->where || ortep_tensor_data_ptr(other) != ortep_tensor_data_ptr(init)) continue;
    for (size_t k = 0; k < ortep_graph_node_count(g); k++) {
      const ortep_node *node = ortep_graph_node(g, (ortep_node_id)k);
      for (size_t j = 0; j < ortep_node_input_count(node); j++) {
        if (strcmp(ortep_node_input(node, j), v) != 0) continue;
        if (vj->where[k] != e) {
          *elsewhere = true;
          continue;
        }
        if (!ORTEP__GROW(*out, cap, *n + 1)) return oom("an initializer's uses");
        (*out)[(*n)++] = (ortep_initializer_use){g, node, j};
      }
    }
  }
  return ORTEP_OK;
}

/* ortep_initializer.read_done of initializer `name`: options.prepared. */
typedef struct read_done_ctx {
  ortep_session *s;
  const char *name;
} read_done_ctx;
static void read_done(void *ctx, size_t offset, size_t bytes) {
  read_done_ctx *r = ctx;
  r->s->opts.prepared(r->s->opts.prepared_ctx, r->name, offset, bytes);
}

/* The EP's chance to hold initializer v (slot sl) in a layout of its own
 * (backend_impl.h: prepare_initializer), given every node that reads it on
 * that EP. *prepared: it did; the slot then points at the EP's buffer (an
 * upload of the session, freed with it) and carries the shape its kernels
 * see. */
static ortep_status prepare_initializer(ortep_session *s, uint32_t gi, const char *v, uint32_t e, ortep_tensor *init,
                                        uint32_t sl, bool *prepared) {
  *prepared = false;
  ep_state *es = &s->eps[e];
  if (!ortep_ep_prepares_initializers(es->ep)) return ORTEP_OK;
  ortep_initializer_use *uses;
  size_t n;
  bool elsewhere;
  ortep_status st = initializer_uses(s, v, e, init, &uses, &n, &elsewhere);
  /* writable in place: a mutable borrow (a model's private copy) no other EP reads */
  void *mut = NULL;
  if (st == ORTEP_OK && !elsewhere && ortep_tensor_is_borrowed(init) &&
      ortep_tensor_host_data_mut(init, ortep_tensor_dtype(init), &mut) != ORTEP_OK) {
    mut = NULL; /* a read-only borrow (mapped file pages) */
    ortep_clear_error();
  }
  read_done_ctx rd = {s, v};
  ortep_initializer in = {v,
                          ortep_tensor_dtype(init),
                          {0},
                          ortep_tensor_data_ptr(init),
                          ortep_tensor_size(init),
                          mut,
                          uses,
                          n,
                          ortep_graph_initializer_preference(s->graphs[gi].graph, v),
                          s->opts.prepared ? read_done : NULL,
                          &rd};
  ortep_graph_value_info(s->graphs[gi].graph, v, NULL, &in.shape);
  ortep_buffer b = {0};
  ortep_shape shape;
  ortep_dtype dtype;
  /* a weight to be quantized, checked here for every EP: values the block
   * formats cannot hold are refused, not turned into zeros */
  bool floats = in.dtype == ORTEP_DTYPE_F32 || in.dtype == ORTEP_DTYPE_F16 || in.dtype == ORTEP_DTYPE_BF16;
  if (st == ORTEP_OK && ortep_dtype_is_quantized(in.prefer) && floats && in.shape.rank > 0) {
    size_t k = (size_t)in.shape.dims[in.shape.rank - 1];
    st = ortep__quantize_check(v, in.prefer, in.dtype, in.data, in.bytes / ortep_dtype_size(in.dtype), k ? k : 1);
  }
  if (st == ORTEP_OK && !ORTEP__GROW(es->uploads, es->uploads_cap, es->n_uploads + 1)) st = oom("an upload");
  if (st == ORTEP_OK) st = ortep_ep_prepare_initializer(es->ep, &in, &dtype, &shape, &b);
  ortep__free(uses);
  if (st == ORTEP_E_NOT_SUPPORTED) {
    ortep_clear_error();
    return ORTEP_OK; /* kept as it is */
  }
  if (st != ORTEP_OK) return ortep__wrap(st, "preparing initializer '%s' on %s", v, ortep_ep_name(es->ep));
  es->uploads[es->n_uploads++] = b;
  es->prepared++;
  s->prep_done += in.bytes;
  if (s->opts.prepared) s->opts.prepared(s->opts.prepared_ctx, v, 0, in.bytes);
  if (s->opts.progress) s->opts.progress(s->opts.progress_ctx, "preparing the weights", s->prep_done, s->prep_total);
  slot *x = &s->slots[sl];
  x->ptr = b.ptr, x->prepared = true, x->pdtype = dtype, x->shape = shape;
  *prepared = true;
  return ORTEP_OK;
}

/* options.initializers_from: the other session's binding of the same bytes
 * on an EP of the same name and device, used as it is (prepared or
 * uploaded, it stays the other session's). */
static bool from_donor(ortep_session *s, uint32_t e, slot *sl, const char *v) {
  const ortep_session *o = s->opts.initializers_from;
  if (!o) return false;
  ortep_ep *ep = s->eps[e].ep;
  for (size_t i = 0; i < o->n_slots; i++) {
    const slot *x = &o->slots[i];
    ortep_ep *xe = o->eps[x->ep].ep;
    if (!x->bound || !x->ptr || x->src != sl->src || x->src_bytes != sl->src_bytes || x->dtype != sl->dtype ||
        strcmp(x->name, v) || strcmp(ortep_ep_name(xe), ortep_ep_name(ep)) ||
        ortep_ep_device(xe).type != ortep_ep_device(ep).type || ortep_ep_device(xe).index != ortep_ep_device(ep).index)
      continue;
    sl->ptr = x->ptr, sl->prepared = x->prepared, sl->pdtype = x->pdtype, sl->shape = x->shape;
    if (x->prepared) s->eps[e].prepared++;
    return true;
  }
  return false;
}

/* The slot holding value v on EP e for graph gi, creating an initializer
 * binding or a cross-EP copy as needed. */
static ortep_status slot_for(ortep_session *s, uint32_t gi, const char *v, uint32_t e, uint32_t *out) {
  variant *var = &s->graphs[gi];
  const ortep_graph *g = var->graph;
  for (size_t i = 0; i < s->n_slots; i++)
    if (s->slots[i].ep == e && (s->slots[i].graph == gi || s->slots[i].persistent) && strcmp(s->slots[i].name, v) == 0)
      return *out = (uint32_t)i, ORTEP_OK;
  ortep_tensor *init = ortep_graph_initializer(g, v);
  ortep_status st;
  if (init) {
    ortep_ep *ep = s->eps[e].ep;
    ortep_dtype dt = ortep_tensor_dtype(init);
    void *p = ortep_tensor_data_ptr(init);
    /* graphs of one session bind the same bytes once (an upload is not repeated per graph) */
    for (size_t i = 0; p && i < s->n_slots; i++)
      if (s->slots[i].bound && s->slots[i].ep == e && s->slots[i].src == p && s->slots[i].dtype == dt &&
          s->slots[i].src_bytes == ortep_tensor_size(init) && strcmp(s->slots[i].name, v) == 0)
        return *out = (uint32_t)i, ORTEP_OK;
    if ((st = add_slot(s, gi, v, e, dt, ortep_tensor_size(init), 0, out)) != ORTEP_OK) return st;
    slot *sl = &s->slots[*out];
    sl->bound = true;
    sl->src = p;
    sl->src_bytes = ortep_tensor_size(init);
    /* an EP prepares (quantizes, repacks, uploads) whatever bytes the host can
     * read, also for a device the host cannot see; only the zero-copy borrow
     * below needs the EP itself on host memory */
    bool host_bytes = ortep_device_is_host_accessible(ortep_ep_device(ortep_tensor_ep(init)));
    bool readable = host_bytes && ortep_device_is_host_accessible(ortep_ep_device(ep));
    if (!p)
      return ortep__fail(ORTEP_E_NOT_ALLOCATED, "initializer '%s' has no data; allocate and fill it before the session",
                         v);
    if (from_donor(s, e, sl, v)) return ORTEP_OK;
    bool prepared = false;
    if (host_bytes && (st = prepare_initializer(s, gi, v, e, init, *out, &prepared)) != ORTEP_OK) return st;
    if (prepared) return ORTEP_OK;
    if (readable && ((uintptr_t)p % ortep_dtype_align(dt)) == 0) {
      sl->ptr = p; /* BORROWED in place: zero-copy */
      return ORTEP_OK;
    }
    ep_state *es = &s->eps[e];
    if (!ORTEP__GROW(es->uploads, es->uploads_cap, es->n_uploads + 1)) return oom("an upload");
    ortep_buffer b;
    if ((st = ortep_ep_allocate(ep, sl->bytes, SLOT_ALIGN, &b)) != ORTEP_OK)
      return ortep__wrap(st, "uploading initializer '%s' to %s", v, ortep_ep_name(ep));
    es->uploads[es->n_uploads++] = b;
    if ((st = ortep_ep_copy_from_host(ep, p, sl->bytes, &es->uploads[es->n_uploads - 1])) != ORTEP_OK) return st;
    sl->ptr = b.ptr;
    return ORTEP_OK;
  }
  uint32_t home;
  if (!ortep__strmap_get(&var->home, v, &home))
    return ortep__fail(ORTEP_E_INTERNAL, "session: value '%s' has no producer (the graph changed?)", v);
  /* A cross-EP copy, emitted now (before the consumer). */
  uint32_t copy = NONE;
  if ((st = add_slot(s, gi, s->slots[home].name, e, s->slots[home].dtype, s->slots[home].bytes, (uint32_t)s->n_steps,
                     &copy)) != ORTEP_OK)
    return st;
  step *cp = new_step(s);
  if (!cp) return oom("a copy step");
  cp->kind = STEP_COPY;
  cp->ep = e;
  snprintf(cp->label, sizeof cp->label, "copy %s", v);
  cp->src = home;
  cp->dst = copy;
  s->slots[home].last = (uint32_t)(s->n_steps - 1);
  *out = copy;
  return ORTEP_OK;
}

/* A graph input or output another graph of the session declared already is
 * the same value: it must agree in dtype, size and EP. */
static ortep_status share_io(ortep_session *s, uint32_t gi, const char *v, uint32_t e, ortep_dtype dt, size_t bytes,
                             bool *shared, uint32_t *sl) {
  *shared = ortep__strmap_get(&s->io, v, sl);
  if (!*shared) return ORTEP_OK;
  const slot *x = &s->slots[*sl];
  if (x->dtype != dt || x->bytes != bytes || x->ep != e)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "graph %u of the session declares '%s' as %s, %zu bytes on %s, but graph %u has it as %s, %zu "
                       "bytes on %s; graphs of one session share inputs and outputs by name, so give them the same "
                       "dtype and shape or different names",
                       gi, v, ortep_dtype_name(dt), bytes, ep_name(s, e), x->graph, ortep_dtype_name(x->dtype),
                       x->bytes, ep_name(s, x->ep));
  return ORTEP_OK;
}

/* Value v's dtype and size (what: "graph input" or "value", for messages). */
static ortep_status value_bytes(const ortep_graph *g, const char *v, const char *what, ortep_dtype *dt, size_t *bytes) {
  ortep_shape sh;
  ortep_graph_value_info(g, v, dt, &sh);
  ortep_status st = ortep_shape_bytes(&sh, *dt, bytes);
  return st == ORTEP_OK ? st : ortep__wrap(st, "%s '%s'", what, v);
}

/* Graph gi's inputs: each lives on the EP of its first consumer, a
 * persistent slot (shared between graphs where share_io allows). */
static ortep_status input_slots(ortep_session *s, uint32_t gi, const ortep_node_id *order, size_t n,
                                const uint32_t *where) {
  variant *var = &s->graphs[gi];
  const ortep_graph *g = var->graph;
  ortep_status st;
  for (size_t i = 0; i < ortep_graph_input_count(g); i++) {
    const char *v = ortep_graph_input(g, i);
    uint32_t e = 0;
    for (size_t k = 0; k < n && e == 0; k++) {
      const ortep_node *node = ortep_graph_node(g, order[k]);
      for (size_t j = 0; j < ortep_node_input_count(node); j++)
        if (strcmp(ortep_node_input(node, j), v) == 0) {
          e = where[order[k]];
          k = n;
          break;
        }
    }
    ortep_dtype dt;
    size_t bytes;
    if ((st = value_bytes(g, v, "graph input", &dt, &bytes)) != ORTEP_OK) return st;
    uint32_t sl = NONE;
    bool shared;
    if ((st = share_io(s, gi, v, e, dt, bytes, &shared, &sl)) != ORTEP_OK) return st;
    if (!shared) {
      if ((st = add_slot(s, gi, v, e, dt, bytes, 0, &sl)) != ORTEP_OK) return st;
      s->slots[sl].persistent = true;
      for (size_t x = 0; x < s->opts.n_external_values; x++)
        if (!strcmp(s->opts.external_values[x], v)) s->slots[sl].external = true, s->unbound++;
      if (!ortep__strmap_put(&s->io, s->slots[sl].name, sl)) return oom("the value index");
    }
    if (!ortep__strmap_put(&var->home, s->slots[sl].name, sl)) return oom("the value index");
  }
  return ORTEP_OK;
}

/* The slots of a step's outputs (here: the step's index), a graph output's
 * persistent. */
static ortep_status output_slots(ortep_session *s, uint32_t gi, const ortep_node *node, uint32_t e, uint32_t here) {
  variant *var = &s->graphs[gi];
  const ortep_graph *g = var->graph;
  ortep_status st;
  for (size_t j = 0; j < ortep_node_output_count(node); j++) {
    const char *v = ortep_node_output(node, j);
    s->steps[here].out[j] = NONE;
    if (!*v) continue;
    ortep_dtype dt;
    size_t bytes;
    if ((st = value_bytes(g, v, "value", &dt, &bytes)) != ORTEP_OK) return st;
    uint32_t sl = NONE;
    bool out_io = is_graph_output(g, v), shared = false;
    if (out_io && (st = share_io(s, gi, v, e, dt, bytes, &shared, &sl)) != ORTEP_OK) return st;
    if (!shared) {
      if ((st = add_slot(s, gi, v, e, dt, bytes, here, &sl)) != ORTEP_OK) return st;
      s->slots[sl].persistent = out_io;
      if (out_io && !ortep__strmap_put(&s->io, s->slots[sl].name, sl)) return oom("the value index");
    }
    s->steps[here].out[j] = sl;
    if (!ortep__strmap_put(&var->home, s->slots[sl].name, sl)) return oom("the value index");
  }
  return ORTEP_OK;
}

/* A node's step on EP e: its inputs' slots (their last use moved here),
 * then its outputs'. */
static ortep_status node_step(ortep_session *s, uint32_t gi, const ortep_node *node, uint32_t e) {
  ortep_status st;
  size_t nin = ortep_node_input_count(node), nout = ortep_node_output_count(node);
  uint32_t *in = ortep__malloc((nin + nout + 1) * sizeof *in);
  if (!in) return oom("a step");
  for (size_t j = 0; j < nin; j++) {
    const char *v = ortep_node_input(node, j);
    in[j] = NONE;
    if (*v && (st = slot_for(s, gi, v, e, &in[j])) != ORTEP_OK) {
      ortep__free(in);
      return st;
    }
  }
  step *sp = new_step(s);
  if (!sp) {
    ortep__free(in);
    return oom("a step");
  }
  sp->kind = STEP_NODE;
  sp->ep = e;
  sp->node = node;
  snprintf(sp->label, sizeof sp->label, "%s %s", ortep_node_op_type(node), ortep_node_name(node));
  sp->in = in;
  sp->n_in = nin;
  sp->out = in + nin;
  sp->n_out = nout;
  uint32_t here = (uint32_t)(s->n_steps - 1);
  for (size_t j = 0; j < nin; j++)
    if (in[j] != NONE && s->slots[in[j]].last < here) s->slots[in[j]].last = here;
  return output_slots(s, gi, node, e, here);
}

static ortep_status build_steps(ortep_session *s, uint32_t gi, const ortep_node_id *order, size_t n,
                                const uint32_t *where) {
  variant *var = &s->graphs[gi];
  var->first_step = s->n_steps;
  ortep_status st = input_slots(s, gi, order, n, where);
  for (size_t k = 0; st == ORTEP_OK && k < n; k++)
    st = node_step(s, gi, ortep_graph_node(var->graph, order[k]), where[order[k]]);
  if (st != ORTEP_OK) return st;
  var->n_steps = s->n_steps - var->first_step;
  return ORTEP_OK;
}

static ortep_status make_kernels(ortep_session *s, const variant *var) {
  ortep_shape shapes[MAX_NODE_INPUTS];
  ortep_dtype dtypes[MAX_NODE_INPUTS];
  for (size_t i = var->first_step; i < var->first_step + var->n_steps; i++) {
    step *sp = &s->steps[i];
    if (sp->kind != STEP_NODE) continue;
    node_signature(var->graph, sp->node, shapes, dtypes);
    for (size_t j = 0; j < sp->n_in; j++) /* an initializer the EP prepared: the dtype and shape it chose */
      if (sp->in[j] != NONE && s->slots[sp->in[j]].prepared)
        shapes[j] = s->slots[sp->in[j]].shape, dtypes[j] = s->slots[sp->in[j]].pdtype;
    ortep_status st = ortep_ep_get_kernel(s->eps[sp->ep].ep, sp->node, shapes, dtypes, sp->n_in,
                                          node_opset(var->graph, sp->node), &sp->kernel);
    if (st != ORTEP_OK)
      return ortep__wrap(st, "creating the kernel of node '%s' on %s", ortep_node_name(sp->node), ep_name(s, sp->ep));
  }
  return ORTEP_OK;
}

/* Plans the slots of one EP that keep(slot) selects into t/idx; offsets
 * (from base) go to the slots. */
static ortep_status plan_part(ortep_session *s, uint32_t e, uint32_t gi, bool persistent, ortep_plan_tensor *t,
                              size_t *idx, size_t *off, ortep_plan_summary *sum, size_t *n_out) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_slots; i++) {
    const slot *x = &s->slots[i];
    if (x->ep != e || x->bound || x->external || x->persistent != persistent || (!persistent && x->graph != gi))
      continue;
    /* persistent values live through every step of every graph */
    t[n] = (ortep_plan_tensor){x->bytes, SLOT_ALIGN, persistent ? 0 : x->first,
                               persistent ? (uint32_t)s->n_steps : x->last};
    idx[n++] = i;
  }
  *n_out = n;
  *sum = (ortep_plan_summary){0};
  if (n == 0) return ORTEP_OK;
  return ortep_plan_memory(t, n, off, sum);
}

/* One arena per EP: the persistent values (shared by every graph) at the
 * front, then each graph's activations from the same offset: only one graph
 * runs at a time, so the arena is as large as the largest graph needs. */
static ortep_status plan_memory(ortep_session *s) {
  ortep_status st = ORTEP_OK;
  ortep_plan_tensor *t = ortep__malloc((s->n_slots + 1) * sizeof *t);
  size_t *idx = ortep__malloc((s->n_slots + 1) * sizeof *idx);
  size_t *off = ortep__malloc((s->n_slots + 1) * sizeof *off);
  if (!t || !idx || !off) {
    st = oom("the memory plan");
    goto out;
  }
  for (size_t e = 0; e < s->n_eps; e++) {
    ep_state *es = &s->eps[e];
    ortep_plan_summary fixed, part;
    size_t n = 0, any = 0;
    if ((st = plan_part(s, (uint32_t)e, 0, true, t, idx, off, &fixed, &n)) != ORTEP_OK) goto out;
    any += n;
    size_t base = (fixed.total + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN, act = 0, act_lb = 0,
           naive = fixed.naive_sum;
    for (size_t k = 0; k < n; k++) s->slots[idx[k]].offset = off[k];
    for (uint32_t gi = 0; gi < s->n_graphs; gi++) {
      if ((st = plan_part(s, (uint32_t)e, gi, false, t, idx, off, &part, &n)) != ORTEP_OK) goto out;
      any += n;
      for (size_t k = 0; k < n; k++) s->slots[idx[k]].offset = base + off[k];
      act = part.total > act ? part.total : act;
      act_lb = part.lower_bound > act_lb ? part.lower_bound : act_lb;
      naive += part.naive_sum;
    }
    if (any == 0) continue;
    es->used = true;
    es->plan = (ortep_plan_summary){base + act, fixed.lower_bound + act_lb, naive};
    if ((st = ortep__ep_allocator_create(es->ep, &es->alloc)) != ORTEP_OK) goto out;
    if ((st = ortep_arena_create_planned(es->alloc, es->plan.total, SLOT_ALIGN, &es->arena)) != ORTEP_OK) {
      st = ortep__wrap(st, "the planned arena of %s (%zu bytes)", ortep_ep_name(es->ep), es->plan.total);
      goto out;
    }
    for (size_t i = 0; i < s->n_slots; i++) {
      slot *sl = &s->slots[i];
      if (sl->ep != e || sl->bound || sl->external) continue;
      if ((st = ortep_arena_at(es->arena, sl->offset, sl->bytes, &sl->ptr)) != ORTEP_OK) goto out;
    }
  }
out:
  ortep__free(t), ortep__free(idx), ortep__free(off);
  return st;
}

static ortep_status bind_io(ortep_session *s) {
  for (size_t i = 0; i < s->n_steps; i++) {
    step *sp = &s->steps[i];
    if (sp->kind == STEP_COPY) {
      ortep_device a = ortep_ep_device(s->eps[s->slots[sp->src].ep].ep), b = ortep_ep_device(s->eps[sp->ep].ep);
      if (!ortep_device_is_host_accessible(a) && !ortep_device_is_host_accessible(b) &&
          s->slots[sp->src].bytes > s->staging_bytes)
        s->staging_bytes = s->slots[sp->src].bytes;
      continue;
    }
    sp->in_ptrs = ortep__calloc(sp->n_in + 1, sizeof *sp->in_ptrs);
    sp->out_ptrs = ortep__calloc(sp->n_out + 1, sizeof *sp->out_ptrs);
    if (!sp->in_ptrs || !sp->out_ptrs) return oom("kernel bindings");
    for (size_t j = 0; j < sp->n_in; j++) sp->in_ptrs[j] = sp->in[j] == NONE ? NULL : s->slots[sp->in[j]].ptr;
    for (size_t j = 0; j < sp->n_out; j++) sp->out_ptrs[j] = sp->out[j] == NONE ? NULL : s->slots[sp->out[j]].ptr;
    ortep_ep *ep = s->eps[sp->ep].ep;
    sp->io = (ortep_kernel_io){sp->in_ptrs, sp->n_in, sp->out_ptrs, sp->n_out, ortep_ep_error_word_ptr(ep), NULL};
  }
  if (s->staging_bytes && !(s->staging = ortep__malloc(s->staging_bytes))) return oom("the copy staging buffer");
  return ORTEP_OK;
}

/* --- running ------------------------------------------------------------------------ */
static ortep_buffer view(const ortep_session *s, uint32_t sl, bool writable) {
  const slot *x = &s->slots[sl];
  return (ortep_buffer){x->ptr, x->bytes, 1, ortep_ep_device(s->eps[x->ep].ep),
                        writable ? ORTEP_BUFFER_BORROWED_MUT : ORTEP_BUFFER_BORROWED};
}

static ortep_status run_copy(ortep_session *s, const step *sp) {
  const slot *src = &s->slots[sp->src], *dst = &s->slots[sp->dst];
  ortep_ep *se = s->eps[src->ep].ep, *de = s->eps[dst->ep].ep;
  ortep_buffer sb = view(s, sp->src, false), db = view(s, sp->dst, true);
  if (ortep_device_is_host_accessible(sb.device)) return ortep_ep_copy_from_host(de, sb.ptr, sb.size, &db);
  if (ortep_device_is_host_accessible(db.device)) return ortep_ep_copy_to_host(se, &sb, db.ptr, db.size);
  ortep_status st = ortep_ep_copy_to_host(se, &sb, s->staging, sb.size);
  return st == ORTEP_OK ? ortep_ep_copy_from_host(de, s->staging, db.size, &db) : st;
}

static ortep_status run_step(ortep_session *s, step *sp) {
  if (sp->kind == STEP_COPY) return run_copy(s, sp);
  ortep_status st = ortep_ep_run_kernel(s->eps[sp->ep].ep, sp->kernel, &sp->io);
  if (st != ORTEP_OK)
    return ortep__wrap(st, "node '%s' (%s)", ortep_node_name(sp->node), ortep_kernel_name(sp->kernel));
  return ORTEP_OK;
}

/* Drops every graph's segments (an EP's segment list is one for the
 * session): each graph re-captures at its next run. */
static void reset_graphs(ortep_session *s) {
  bool any = false;
  for (size_t gi = 0; gi < s->n_graphs; gi++) {
    any = any || s->graphs[gi].captured;
    s->graphs[gi].captured = false;
    s->graphs[gi].kernel_nodes = 0;
  }
  if (any) ortep__trace_mark(ORTEP__TRACE_GRAPH_RESET, s->graphs[0].captures);
  for (size_t e = 0; e < s->n_eps; e++)
    if (s->eps[e].used) ortep_ep_reset_graph(s->eps[e].ep, NULL);
}

static void decide_seams(ortep_session *s, const variant *var) {
  size_t node_index = 0;
  for (size_t i = var->first_step; i < var->first_step + var->n_steps; i++) {
    step *sp = &s->steps[i];
    if (sp->kind == STEP_COPY) {
      sp->seam = true;
      snprintf(sp->reason, sizeof sp->reason, "cross-EP copy %s -> %s", ep_name(s, s->slots[sp->src].ep),
               ep_name(s, sp->ep));
      continue;
    }
    node_index++;
    if (sp->record_failed) continue; /* keeps its reason */
    sp->seam = true;
    const char *op = ortep_node_op_type(sp->node), *name = ortep_node_name(sp->node);
    if (in_list(s->forced, op))
      snprintf(sp->reason, sizeof sp->reason, "forced by the user (op %s)", op);
    else if (in_list(s->forced, name))
      snprintf(sp->reason, sizeof sp->reason, "forced by the user (node %s)", name);
    else if (s->opts.seam_every >= 2 && node_index % s->opts.seam_every == 0)
      snprintf(sp->reason, sizeof sp->reason, "forced by the user (every %u nodes)", s->opts.seam_every);
    else if (!ortep_ep_get_capabilities(s->eps[sp->ep].ep).device_graphs)
      snprintf(sp->reason, sizeof sp->reason, "EP %s has no device graphs", ep_name(s, sp->ep));
    else if (!ortep_kernel_is_capturable(sp->kernel))
      snprintf(sp->reason, sizeof sp->reason, "kernel %s is not capturable", ortep_kernel_name(sp->kernel));
    else
      sp->seam = false, sp->reason[0] = '\0';
  }
}

static ortep_status build_units(ortep_session *s, variant *var) {
  decide_seams(s, var);
  ortep__free(var->units);
  var->n_units = 0;
  var->units = ortep__calloc(var->n_steps + 1, sizeof *var->units);
  if (!var->units) return oom("the replay list");
  for (size_t i = var->first_step; i < var->first_step + var->n_steps; i++) {
    step *sp = &s->steps[i];
    unit *last = var->n_units ? &var->units[var->n_units - 1] : NULL;
    if (!sp->seam && last && last->segment && last->ep == sp->ep) {
      last->count++;
      continue;
    }
    var->units[var->n_units++] = (unit){!sp->seam, sp->ep, 0, i, 1};
  }
  return ORTEP_OK;
}

static size_t live_kernel_nodes(const ortep_session *s) {
  size_t n = 0;
  for (size_t e = 0; e < s->n_eps; e++)
    if (s->eps[e].used) n += ortep_ep_graph_kernel_nodes(s->eps[e].ep);
  return n;
}

/* Records every segment of one graph, appended to its EPs' segment lists. On
 * a node's failure: aborts that capture and reports the step. */
static ortep_status record_all(ortep_session *s, variant *var, size_t *failed) {
  *failed = SIZE_MAX;
  size_t segment_no = 0, before = live_kernel_nodes(s);
  for (size_t u = 0; u < var->n_units; u++) {
    unit *un = &var->units[u];
    if (!un->segment) continue;
    ortep_ep *ep = s->eps[un->ep].ep;
    ortep__trace_push(ORTEP__TRACE_CAPTURE_SEGMENT, ortep__trace_segment_payload(segment_no++, un->count));
    /* capturability was decided per step (decide_seams); no kernel list */
    ortep_status st = ortep_ep_begin_capture(ep);
    for (size_t i = 0; st == ORTEP_OK && i < un->count; i++) {
      st = run_step(s, &s->steps[un->first + i]);
      if (st != ORTEP_OK) {
        ortep_ep_abort_capture(ep);
        *failed = un->first + i;
      }
    }
    if (st == ORTEP_OK && (st = ortep_ep_end_capture(ep)) != ORTEP_OK) ortep_ep_abort_capture(ep);
    ortep__trace_pop();
    if (st != ORTEP_OK) return st;
    un->ep_segment = ortep_ep_segment_count(ep) - 1;
  }
  var->kernel_nodes = live_kernel_nodes(s) - before;
  return ORTEP_OK;
}

static ortep_status capture(ortep_session *s, variant *var) {
  if (var->captures) ortep__trace_mark(ORTEP__TRACE_RECAPTURE, var->captures);
  for (int attempt = 0; attempt < 2; attempt++) {
    ortep_status st = build_units(s, var);
    if (st != ORTEP_OK) return st;
    size_t failed;
    st = record_all(s, var, &failed);
    if (st == ORTEP_OK) {
      var->captured = true;
      var->captures++;
      return ORTEP_OK;
    }
    /* what this attempt appended is unusable: every graph starts over */
    reset_graphs(s);
    if (failed == SIZE_MAX || attempt == 1) {
      snprintf(var->fallback, sizeof var->fallback, "capture failed%s: %s", attempt ? " again after a retry" : "",
               ortep_last_error());
      break;
    }
    step *sp = &s->steps[failed];
    sp->record_failed = true;
    sp->seam = true;
    snprintf(sp->reason, sizeof sp->reason, "recording failed: %s", ortep_last_error());
    var->retries++;
  }
  var->mode = ORTEP_RUN_EAGER; /* the fallback: still correct, just slower */
  build_units(s, var);
  return ORTEP_OK;
}

static inline __attribute__((always_inline)) ortep_status run_eager(ortep_session *s, const variant *var,
                                                                    const bool traced) {
  for (size_t i = var->first_step; i < var->first_step + var->n_steps; i++) {
    if (traced) ortep__trace_push_text(s->steps[i].label, ORTEP__TRACE_CAT_EXECUTOR);
    uint64_t t0 = s->prof_ns ? ortep__now_ns() : 0;
    ortep_status st = run_step(s, &s->steps[i]);
    if (s->prof_ns) s->prof_ns[i] += ortep__now_ns() - t0;
    if (traced) ortep__trace_pop();
    if (st != ORTEP_OK) return st;
  }
  return ORTEP_OK;
}

/* One step of one graph. Written once and inlined twice: `traced` is a
 * constant in each caller, so in the untraced copy the trace calls are
 * compiled out (what ortep-bench replay compares against). */
static inline __attribute__((always_inline)) ortep_status run_once(ortep_session *s, variant *var, const bool traced) {
  ortep_status st;
  if (var->mode == ORTEP_RUN_GRAPH && !var->captured) {
    /* Warm-up: the first step of a graph runs eagerly, then captures, so
     * whatever an EP sets up lazily on first use (CUDA module loading,
     * cuBLAS's first-call allocations) happens outside stream capture. The
     * eager run computed this step's outputs; capture records without
     * running, so nothing is replayed this time. */
    if (!var->warmed) {
      if ((st = run_eager(s, var, traced)) != ORTEP_OK) return st;
      var->warmed = true;
      if ((st = capture(s, var)) != ORTEP_OK) return st;
      var->n_run++;
      return ORTEP_OK;
    }
    if ((st = capture(s, var)) != ORTEP_OK) return st;
  }
  if (var->mode == ORTEP_RUN_EAGER) {
    if ((st = run_eager(s, var, traced)) != ORTEP_OK) return st;
  } else {
    size_t segment_no = 0;
    for (size_t u = 0; u < var->n_units; u++) {
      const unit *un = &var->units[u];
      if (un->segment) {
        if (traced) ortep__trace_push(ORTEP__TRACE_REPLAY_SEGMENT, ortep__trace_segment_payload(segment_no, un->count));
        segment_no++;
        ortep__assert(un->ep_segment < ortep_ep_segment_count(s->eps[un->ep].ep)); /* captured by record_all */
        st = ortep_ep_replay_segment(s->eps[un->ep].ep, un->ep_segment);
      } else {
        if (traced) ortep__trace_push_text(s->steps[un->first].label, ORTEP__TRACE_CAT_EXECUTOR);
        st = run_step(s, &s->steps[un->first]);
      }
      if (traced) ortep__trace_pop();
      if (st != ORTEP_OK) return st;
    }
  }
  var->n_run++;
  return ORTEP_OK;
}

static __attribute__((noinline)) ortep_status run_traced(ortep_session *s, variant *var) {
  return run_once(s, var, true);
}
static __attribute__((noinline)) ortep_status run_untraced(ortep_session *s, variant *var) {
  return run_once(s, var, false);
}

/* The threading contract (session.h): one thread at a time. An overlapping
 * run is refused with one atomic exchange rather than racing on the
 * planned arena and the capture state. */
static ortep_status busy(void) {
  return ortep__fail(ORTEP_E_STATE,
                     "ortep_session_run: the session is running on another thread; a session serves one thread at a "
                     "time");
}

static ortep_status unbound(const ortep_session *s, const char *call) {
  const char *name = "?";
  for (size_t i = 0; i < s->n_slots; i++)
    if (s->slots[i].external && !s->slots[i].ptr) {
      name = s->slots[i].name;
      break;
    }
  return ortep__fail(ORTEP_E_STATE,
                     "%s: external value '%s' (and %zu in all) has no memory yet; bind it with "
                     "ortep_session_bind_value first",
                     call, name, s->unbound);
}

ortep_status ortep_session_run_graph(ortep_session *s, size_t graph) {
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_run: session is NULL");
  if (graph >= s->n_graphs)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_session_run_graph: graph %zu of a session of %zu", graph,
                       s->n_graphs);
  if (s->unbound) return unbound(s, "ortep_session_run");
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return busy();
  /* one check per step: with no tool attached the trace-free loop runs */
  variant *var = &s->graphs[graph];
  ortep_status st = ortep__trace_maybe_on() ? run_traced(s, var) : run_untraced(s, var);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return st;
}

ortep_status ortep_session_run(ortep_session *s) { return ortep_session_run_graph(s, 0); }

ortep_status ortep__session_run_untraced(ortep_session *s) {
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_run: session is NULL");
  if (s->unbound) return unbound(s, "ortep_session_run");
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return busy();
  ortep_status st = run_untraced(s, &s->graphs[0]);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return st;
}

ortep_status ortep_session_invalidate(ortep_session *s) {
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_invalidate: session is NULL");
  reset_graphs(s);
  return ORTEP_OK;
}

/* --- lifecycle ------------------------------------------------------------------------ */
void ortep_session_destroy(ortep_session *s) {
  if (!s) return;
  reset_graphs(s); /* before any buffer a graph references is released */
  for (size_t i = 0; i < s->n_steps; i++) {
    if (s->steps[i].kind != STEP_NODE) continue;
    ortep_kernel_destroy(s->steps[i].kernel);
    ortep__free(s->steps[i].in);
    ortep__free(s->steps[i].in_ptrs);
    ortep__free(s->steps[i].out_ptrs);
  }
  for (size_t e = 0; e < s->n_eps; e++) {
    ep_state *es = &s->eps[e];
    ortep_arena_destroy(es->arena);
    for (size_t u = 0; u < es->n_uploads; u++) ortep_ep_deallocate(es->ep, &es->uploads[u]);
    ortep__free(es->uploads);
    ortep_allocator_destroy(es->alloc);
  }
  for (size_t gi = 0; gi < s->n_graphs; gi++) {
    ortep__free(s->graphs[gi].units);
    ortep__strmap_free(&s->graphs[gi].home);
  }
  ortep__free(s->graphs);
  ortep__free(s->eps);
  ortep__free(s->slots);
  ortep__free(s->steps);
  ortep__free(s->staging);
  ortep__free(s->forced);
  ortep__free(s->prof_ns);
  ortep__strmap_free(&s->io);
  ortep__free(s);
}

/* Places one graph of the session and appends its steps and kernels. */
/* Build, step 1 for every graph: its order and each node's EP (kept in the
 * variant until every graph has them: an EP preparing an initializer is
 * shown every node of the session that reads it). */
static ortep_status place_graph(ortep_session *s, uint32_t gi) {
  variant *var = &s->graphs[gi];
  size_t n = ortep_graph_node_count(var->graph);
  var->order = ortep__malloc((n + 1) * sizeof *var->order);
  var->where = ortep__malloc((n + 1) * sizeof *var->where);
  ortep_status st = var->order && var->where ? ORTEP_OK : oom("building");
  if (st == ORTEP_OK) st = ortep_graph_topo_order(var->graph, var->order);
  if (st == ORTEP_OK && gi == 0) st = check_forced(s, var->graph, var->order, n);
  if (st == ORTEP_OK) {
    ortep__trace_push(ORTEP__TRACE_PLACEMENT, n);
    st = place(s, var->graph, var->order, n, var->where);
    ortep__trace_pop();
  }
  if (st != ORTEP_OK && s->n_graphs > 1) return ortep__wrap(st, "graph %u of the session", gi);
  return st;
}

/* Step 2: its steps, slots and kernels. */
static ortep_status build_graph(ortep_session *s, uint32_t gi) {
  variant *var = &s->graphs[gi];
  size_t n = ortep_graph_node_count(var->graph);
  ortep_status st = build_steps(s, gi, var->order, n, var->where);
  if (st == ORTEP_OK) st = make_kernels(s, var);
  if (st != ORTEP_OK && s->n_graphs > 1) return ortep__wrap(st, "graph %u of the session", gi);
  return st;
}

static void drop_placement(ortep_session *s) {
  for (size_t gi = 0; s->graphs && gi < s->n_graphs; gi++) {
    ortep__free(s->graphs[gi].order), ortep__free(s->graphs[gi].where);
    s->graphs[gi].order = NULL, s->graphs[gi].where = NULL;
  }
}

/* Every external value must name a graph input. */
static ortep_status check_externals(const ortep_session *s) {
  for (size_t x = 0; x < s->opts.n_external_values; x++) {
    const char *v = s->opts.external_values[x];
    uint32_t sl;
    if (!v || !ortep__strmap_get(&s->io, v, &sl) || !s->slots[sl].external)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "external value '%s' is not a graph input of the session; external values are graph inputs "
                         "whose memory the caller provides",
                         v ? v : "(null)");
  }
  return ORTEP_OK;
}

ortep_status ortep_session_create_multi(const ortep_graph *const *graphs, size_t n_graphs, ortep_ep_registry *registry,
                                        const ortep_session_options *options, ortep_session **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_create: out is NULL");
  *out = NULL;
  bool all = graphs && n_graphs > 0;
  for (size_t i = 0; all && i < n_graphs; i++) all = graphs[i] != NULL;
  if (!all || !registry)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_create: a graph and an EP registry are required");
  if (n_graphs > UINT32_MAX / 2)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_create_multi: %zu graphs is too many", n_graphs);
  if (ortep_ep_registry_count(registry) == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_session_create: the registry has no EP; register one (e.g. ortep_cpu_ep_create)");
  ortep_session *s = ortep__calloc(1, sizeof *s);
  if (!s) return oom("the session");
  atomic_flag_clear(&s->running);
  if (options) s->opts = *options;
  ortep_status st = ORTEP_OK;
  size_t n_eps = ortep_ep_registry_count(registry);
  s->eps = ortep__calloc(n_eps, sizeof *s->eps);
  if (s->eps) s->n_eps = n_eps; /* so a failed build never walks a missing array */
  s->graphs = ortep__calloc(n_graphs, sizeof *s->graphs);
  if (s->graphs) s->n_graphs = n_graphs;
  if (s->opts.forced_seams && !(s->forced = ortep__strdup(s->opts.forced_seams))) st = oom("options");
  if (!s->eps || !s->graphs) st = oom("building");
  if (st == ORTEP_OK) {
    for (size_t e = 0; e < s->n_eps; e++) s->eps[e].ep = ortep_ep_registry_get(registry, (uint32_t)e);
    for (size_t gi = 0; gi < s->n_graphs; gi++) s->graphs[gi].graph = graphs[gi], s->graphs[gi].mode = s->opts.mode;
  }
  size_t nodes = 0;
  for (size_t gi = 0; gi < n_graphs; gi++) nodes += ortep_graph_node_count(graphs[gi]);
  ortep__trace_push(ORTEP__TRACE_SESSION_BUILD, nodes);
  for (uint32_t gi = 0; st == ORTEP_OK && gi < s->n_graphs; gi++) st = place_graph(s, gi);
  for (size_t i = 0; i < ortep_graph_initializer_count(graphs[0]); i++) /* the graphs share their weights */
    s->prep_total += ortep_tensor_size(ortep_graph_initializer(graphs[0], ortep_graph_initializer_name(graphs[0], i)));
  for (uint32_t gi = 0; st == ORTEP_OK && gi < s->n_graphs; gi++) st = build_graph(s, gi);
  if (st == ORTEP_OK && s->prep_done && s->opts.progress) /* the end of the step (what was not prepared is done too) */
    s->opts.progress(s->opts.progress_ctx, "preparing the weights", s->prep_total, s->prep_total);
  drop_placement(s);
  if (st == ORTEP_OK) st = check_externals(s);
  if (st == ORTEP_OK) {
    ortep__trace_push(ORTEP__TRACE_MEMORY_PLANNING, s->n_slots);
    st = plan_memory(s);
    ortep__trace_pop();
  }
  if (st == ORTEP_OK) st = bind_io(s);
  for (size_t gi = 0; st == ORTEP_OK && gi < s->n_graphs; gi++) st = build_units(s, &s->graphs[gi]);
  if (st == ORTEP_OK && s->opts.profile && !(s->prof_ns = ortep__calloc(s->n_steps + 1, sizeof *s->prof_ns)))
    st = oom("the profile");
  ortep__trace_pop();
  if (st != ORTEP_OK) {
    ortep_session_destroy(s);
    return st;
  }
  *out = s;
  return ORTEP_OK;
}

ortep_status ortep_session_create(const ortep_graph *graph, ortep_ep_registry *registry,
                                  const ortep_session_options *options, ortep_session **out) {
  return ortep_session_create_multi(&graph, 1, registry, options, out);
}

size_t ortep_session_graph_count(const ortep_session *s) { return s ? s->n_graphs : 0; }

/* --- values ------------------------------------------------------------------------- */
static ortep_status find_io(const ortep_session *s, const char *name, uint32_t *out) {
  uint32_t sl = 0;
  if (!s || !name || !ortep__strmap_get(&s->io, name, &sl))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "'%s' is not a graph input or output of this session",
                       name ? name : "(null)");
  *out = sl;
  return ORTEP_OK;
}

ortep_status ortep_session_value(const ortep_session *s, const char *name, ortep_ep **ep, void **ptr, size_t *bytes) {
  uint32_t sl = 0;
  ortep_status st = find_io(s, name, &sl);
  if (st != ORTEP_OK) return st;
  if (ep) *ep = s->eps[s->slots[sl].ep].ep;
  if (ptr) *ptr = s->slots[sl].ptr;
  if (bytes) *bytes = s->slots[sl].bytes;
  return ORTEP_OK;
}

/* A value that can be read or written: bound if external. */
static ortep_status find_usable(const ortep_session *s, const char *name, const char *call, uint32_t *sl) {
  ortep_status st = find_io(s, name, sl);
  if (st == ORTEP_OK && !s->slots[*sl].ptr)
    return ortep__fail(ORTEP_E_STATE,
                       "%s '%s': the external value has no memory yet; bind it with "
                       "ortep_session_bind_value first",
                       call, name);
  return st;
}

ortep_status ortep_session_bind_value(ortep_session *s, const char *name, void *ptr, size_t bytes) {
  uint32_t sl = 0;
  ortep_status st = find_io(s, name, &sl);
  if (st != ORTEP_OK) return st;
  slot *x = &s->slots[sl];
  if (!x->external)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "binding '%s': it lives in the session's planned arena; only values named in "
                       "options.external_values take the caller's memory",
                       name);
  if (!ptr || bytes != x->bytes || ((uintptr_t)ptr & (SLOT_ALIGN - 1)))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "binding '%s': needs %zu bytes at a %d-byte aligned address on %s (got %zu bytes at %p)", name,
                       x->bytes, SLOT_ALIGN, ep_name(s, x->ep), bytes, ptr);
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return busy();
  if (!x->ptr) s->unbound--;
  bool moved = x->ptr && x->ptr != ptr;
  x->ptr = ptr;
  for (size_t i = 0; i < s->n_steps; i++) { /* the kernels' pointer arrays */
    step *sp = &s->steps[i];
    if (sp->kind != STEP_NODE || !sp->in_ptrs) continue;
    for (size_t j = 0; j < sp->n_in; j++)
      if (sp->in[j] == sl) sp->in_ptrs[j] = ptr;
    for (size_t j = 0; j < sp->n_out; j++)
      if (sp->out[j] == sl) sp->out_ptrs[j] = ptr;
  }
  if (moved) reset_graphs(s);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return ORTEP_OK;
}

ortep_status ortep_session_write(ortep_session *s, const char *name, const void *src, size_t len) {
  uint32_t sl = 0;
  ortep_status st = find_usable(s, name, "writing", &sl);
  if (st != ORTEP_OK) return st;
  if (len != s->slots[sl].bytes)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "writing '%s': %zu bytes given, the value holds %zu", name, len,
                       s->slots[sl].bytes);
  ortep_buffer b = view(s, sl, true);
  return ortep_ep_copy_from_host(s->eps[s->slots[sl].ep].ep, src, len, &b);
}

ortep_status ortep_session_read(ortep_session *s, const char *name, void *dst, size_t len) {
  uint32_t sl = 0;
  ortep_status st = find_usable(s, name, "reading", &sl);
  if (st != ORTEP_OK) return st;
  if (len > s->slots[sl].bytes)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "reading '%s': %zu bytes asked, the value holds %zu", name, len,
                       s->slots[sl].bytes);
  ortep_buffer b = view(s, sl, false);
  return ortep_ep_copy_to_host(s->eps[s->slots[sl].ep].ep, &b, dst, len);
}

/* Whether graph var runs as one launch of one captured segment on the EP
 * that holds flag slot sl, and that EP repeats segments itself. */
static bool loops_on_device(const ortep_session *s, const variant *var, uint32_t sl) {
  if (var->mode != ORTEP_RUN_GRAPH || !var->captured || var->n_units != 1 || !var->units[0].segment) return false;
  if (var->units[0].ep != s->slots[sl].ep) return false;
  return ortep_ep_get_capabilities(s->eps[var->units[0].ep].ep).device_loops;
}

/* The loop (session.h): on the EP when the graph is one segment there (one
 * launch, no sync between iterations), else from here, reading the flag
 * after each run (also when the EP finds it cannot loop after all:
 * ORTEP_E_NOT_SUPPORTED before anything ran). The first run of a graph is always from here: it runs
 * eagerly and captures (run_once's warm-up), and the flag then says
 * whether the loop goes on, on the EP from then. */
static ortep_status run_while(ortep_session *s, variant *var, uint32_t sl, size_t max_iterations) {
  ortep_buffer flag = view(s, sl, false);
  ortep_ep *ep = s->eps[s->slots[sl].ep].ep;
  for (size_t done = 0; done < max_iterations;) {
    if (loops_on_device(s, var, sl)) {
      ortep__trace_push(ORTEP__TRACE_REPLAY_SEGMENT, ortep__trace_segment_payload(0, var->units[0].count));
      ortep_status st = ortep_ep_replay_segment_while(s->eps[var->units[0].ep].ep, var->units[0].ep_segment,
                                                      (const int32_t *)s->slots[sl].ptr, max_iterations - done);
      ortep__trace_pop();
      if (st == ORTEP_OK) var->n_run++, var->device_loops++;
      if (st != ORTEP_E_NOT_SUPPORTED) return st;
      ortep_clear_error(); /* the EP could not build the loop (nothing ran; it says so from now on): from here */
    }
    ortep_status st = ortep__trace_maybe_on() ? run_traced(s, var) : run_untraced(s, var);
    if (st != ORTEP_OK) return st;
    int32_t go = 0;
    if (++done < max_iterations && (st = ortep_ep_copy_to_host(ep, &flag, &go, sizeof go)) != ORTEP_OK) return st;
    if (!go) break;
  }
  return ORTEP_OK;
}

ortep_status ortep_session_run_graph_while(ortep_session *s, size_t graph, const char *flag, size_t max_iterations) {
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_run_graph_while: session is NULL");
  if (graph >= s->n_graphs)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_session_run_graph_while: graph %zu of a session of %zu", graph,
                       s->n_graphs);
  if (!max_iterations)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_run_graph_while: max_iterations is 0; give at least 1");
  uint32_t sl = 0;
  ortep_status st = find_usable(s, flag, "ortep_session_run_graph_while: the flag", &sl);
  if (st != ORTEP_OK) return st;
  if (s->slots[sl].dtype != ORTEP_DTYPE_I32 || s->slots[sl].bytes < sizeof(int32_t))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_session_run_graph_while: the flag '%s' must be an i32 value the graph writes, got %s",
                       flag, ortep_dtype_name(s->slots[sl].dtype));
  if (s->unbound) return unbound(s, "ortep_session_run_graph_while");
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return busy();
  st = run_while(s, &s->graphs[graph], sl, max_iterations);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return st;
}

/* --- introspection ---------------------------------------------------------------------- */
bool ortep_session_initializer_prepared(const ortep_session *s, const char *name) {
  return ortep_session_initializer_form(s, name, NULL, NULL);
}

bool ortep_session_initializer_form(const ortep_session *s, const char *name, ortep_dtype *dtype, ortep_shape *shape) {
  for (size_t i = 0; s && name && i < s->n_slots; i++)
    if (s->slots[i].prepared && strcmp(s->slots[i].name, name) == 0) {
      if (dtype) *dtype = s->slots[i].pdtype;
      if (shape) *shape = s->slots[i].shape;
      return true;
    }
  return false;
}

ortep_status ortep_session_get_graph_stats(const ortep_session *s, size_t graph, ortep_session_stats *out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_get_graph_stats: out is NULL");
  memset(out, 0, sizeof *out);
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_get_graph_stats: session is NULL");
  if (graph >= s->n_graphs)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_session_get_graph_stats: graph %zu of a session of %zu", graph,
                       s->n_graphs);
  const variant *var = &s->graphs[graph];
  out->graphs = s->n_graphs;
  out->mode = var->mode;
  out->nodes = ortep_graph_node_count(var->graph);
  for (size_t i = var->first_step; i < var->first_step + var->n_steps; i++) {
    if (s->steps[i].kind == STEP_NODE)
      out->kernels_per_step++;
    else
      out->copies_per_step++;
  }
  if (var->mode == ORTEP_RUN_GRAPH)
    for (size_t u = 0; u < var->n_units; u++) {
      if (var->units[u].segment)
        out->segments++;
      else
        out->seams++;
    }
  if (var->mode == ORTEP_RUN_GRAPH) out->graph_kernel_nodes = var->kernel_nodes;
  for (size_t e = 0; e < s->n_eps; e++) {
    if (!s->eps[e].used) continue;
    out->eps_used++;
    out->planned_bytes += s->eps[e].plan.total;
    out->lower_bound_bytes += s->eps[e].plan.lower_bound;
    out->naive_bytes += s->eps[e].plan.naive_sum;
    uint64_t a = 0, f = 0;
    if (ortep_ep_allocation_counts(s->eps[e].ep, &a, &f)) out->ep_allocations += a, out->ep_frees += f;
    out->prepared_initializers += s->eps[e].prepared;
    ortep_ep_graph_counts(s->eps[e].ep, &a, &f);
    out->instantiations += a;
    out->graph_updates += f;
  }
  out->steps = var->n_run;
  out->device_loops = var->device_loops;
  out->captures = var->captures;
  out->capture_retries = var->retries;
  out->fallback_reason = var->fallback[0] ? var->fallback : NULL;
  return ORTEP_OK;
}

void ortep_session_get_stats(const ortep_session *s, ortep_session_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (s) ortep_session_get_graph_stats(s, 0, out);
}

size_t ortep_session_profile_graph_count(const ortep_session *s, size_t graph) {
  return s && s->prof_ns && graph < s->n_graphs ? s->graphs[graph].n_steps : 0;
}

ortep_status ortep_session_profile_graph(const ortep_session *s, size_t graph, size_t i, const char **op_type,
                                         const char **node, uint64_t *total_ns) {
  if (!s) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_profile: session is NULL");
  if (!s->prof_ns)
    return ortep__fail(ORTEP_E_STATE, "ortep_session_profile: the session was created without options.profile");
  if (graph >= s->n_graphs)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_session_profile: graph %zu of a session of %zu", graph,
                       s->n_graphs);
  const variant *var = &s->graphs[graph];
  if (i >= var->n_steps)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "ortep_session_profile: step %zu of %zu", i, var->n_steps);
  const step *sp = &s->steps[var->first_step + i];
  if (op_type) *op_type = sp->kind == STEP_COPY ? "copy" : ortep_node_op_type(sp->node);
  if (node) *node = sp->kind == STEP_COPY ? "" : ortep_node_name(sp->node);
  if (total_ns) *total_ns = s->prof_ns[var->first_step + i];
  return ORTEP_OK;
}

size_t ortep_session_profile_count(const ortep_session *s) { return ortep_session_profile_graph_count(s, 0); }

ortep_status ortep_session_profile(const ortep_session *s, size_t i, const char **op_type, const char **node,
                                   uint64_t *total_ns) {
  return ortep_session_profile_graph(s, 0, i, op_type, node, total_ns);
}

size_t ortep_session_seam_count(const ortep_session *s) {
  size_t n = 0;
  const variant *var = s ? &s->graphs[0] : NULL;
  for (size_t u = 0; var && var->mode == ORTEP_RUN_GRAPH && u < var->n_units; u++) n += !var->units[u].segment;
  return n;
}

ortep_status ortep_session_seam(const ortep_session *s, size_t i, const char **node, const char **op,
                                const char **reason) {
  size_t k = 0;
  const variant *var = s ? &s->graphs[0] : NULL;
  for (size_t u = 0; var && var->mode == ORTEP_RUN_GRAPH && u < var->n_units; u++) {
    if (var->units[u].segment) continue;
    if (k++ != i) continue;
    const step *sp = &s->steps[var->units[u].first];
    if (node) *node = sp->kind == STEP_NODE ? ortep_node_name(sp->node) : s->slots[sp->dst].name;
    if (op) *op = sp->kind == STEP_NODE ? ortep_node_op_type(sp->node) : "(copy)";
    if (reason) *reason = sp->reason;
    return ORTEP_OK;
  }
  return ortep__fail(ORTEP_E_OUT_OF_RANGE, "seam %zu does not exist (%zu seams)", i, ortep_session_seam_count(s));
}

ortep_ep *ortep_session_node_ep(const ortep_session *s, const char *name) {
  for (size_t i = 0; s && name && i < s->n_steps; i++)
    if (s->steps[i].kind == STEP_NODE && strcmp(ortep_node_name(s->steps[i].node), name) == 0)
      return s->eps[s->steps[i].ep].ep;
  return NULL;
}

ortep_status ortep_session_format_plan(const ortep_session *s, char **text) {
  if (!s || !text) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_session_format_plan: NULL argument");
  size_t len;
  FILE *f = open_memstream(text, &len);
  if (!f) return oom("the plan text");
  for (size_t gi = 0; gi < s->n_graphs; gi++) {
    const variant *var = &s->graphs[gi];
    ortep_session_stats st;
    ortep_session_get_graph_stats(s, gi, &st);
    if (s->n_graphs > 1) fprintf(f, "%sgraph %zu of %zu: ", gi ? "\n" : "", gi, s->n_graphs);
    fprintf(f, "plan: %zu nodes, %zu kernels and %zu copies per step, mode %s", st.nodes, st.kernels_per_step,
            st.copies_per_step, var->mode == ORTEP_RUN_GRAPH ? "graph" : "eager");
    if (var->mode == ORTEP_RUN_GRAPH) fprintf(f, ", %zu segments, %zu seams", st.segments, st.seams);
    if (var->fallback[0]) fprintf(f, " (fell back to eager: %s)", var->fallback);
    fprintf(f, "\n  %-4s %-34s %-30s %-8s %-12s %s\n", "#", "node", "op", "ep", "run", "outputs: name @ offset +bytes");
    size_t segment_no = 0;
    for (size_t u = 0; u < var->n_units; u++) {
      const unit *un = &var->units[u];
      if (u && var->units[u - 1].segment) segment_no++;
      for (size_t i = 0; i < un->count; i++) {
        size_t k = un->first + i;
        const step *sp = &s->steps[k];
        char run[48];
        if (var->mode == ORTEP_RUN_EAGER)
          snprintf(run, sizeof run, "eager");
        else if (un->segment)
          snprintf(run, sizeof run, "segment %zu", segment_no);
        else
          snprintf(run, sizeof run, "seam");
        if (sp->kind == STEP_COPY) {
          fprintf(f, "  %-4zu %-34s %-30s %-8s %-12s %s @ %zu +%zu", k, s->slots[sp->dst].name, "(copy)",
                  ep_name(s, sp->ep), run, s->slots[sp->dst].name, s->slots[sp->dst].offset, s->slots[sp->dst].bytes);
        } else {
          fprintf(f, "  %-4zu %-34s %-30s %-8s %-12s", k, ortep_node_name(sp->node), ortep_node_op_type(sp->node),
                  ep_name(s, sp->ep), run);
          for (size_t j = 0; j < sp->n_out; j++)
            if (sp->out[j] != NONE)
              fprintf(f, "%s%s @ %zu +%zu", j ? ", " : "", s->slots[sp->out[j]].name, s->slots[sp->out[j]].offset,
                      s->slots[sp->out[j]].bytes);
        }
        if (var->mode == ORTEP_RUN_GRAPH && sp->seam) fprintf(f, "  [seam: %s]", sp->reason);
        fputc('\n', f);
      }
    }
  }
  char b1[32], b2[32], b3[32];
  for (size_t e = 0; e < s->n_eps; e++) {
    if (!s->eps[e].used) continue;
    const ortep_plan_summary *p = &s->eps[e].plan;
    fprintf(f, "memory %s: planned arena %s (lower bound %s, naive sum %s)\n", ep_name(s, (uint32_t)e),
            ortep__format_bytes(p->total, b1, sizeof b1), ortep__format_bytes(p->lower_bound, b2, sizeof b2),
            ortep__format_bytes(p->naive_sum, b3, sizeof b3));
  }
  if (fclose(f) != 0) {
    free(*text);
    *text = NULL;
    return oom("the plan text");
  }
  return ORTEP_OK;
}
