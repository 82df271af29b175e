/*
 * ep.c: the CPU execution provider: host memory through the host allocator
 * and governor, copies, fences already signalled, argmax and the error word
 * in host memory, and device graphs as recorded plans.
 *
 * A recorded plan is the CPU's CUDA Graph: while a capture is open, running
 * a kernel appends (kernel, bound pointers) to the segment being recorded
 * instead of executing it; ending the capture seals the segment. Replay walks
 * the records and calls each kernel's run directly: no lookup, no shape check,
 * no allocation. Bound pointers stay valid because the executor carves every
 * activation from a planned arena at a fixed offset.
 */
#include <cblas.h>
#include <stdatomic.h>
#include <float.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels/opset.h" /* the blocked layout */
#include "ortep/cpu_ep.h"

/* OpenBLAS's thread control (declared in its cblas.h as well on Debian). */
void openblas_set_num_threads(int num_threads);

typedef struct record {
  ortep_kernel *kernel;
  ortep_kernel_io io;
} record;

typedef struct segment {
  record *records;
  size_t n;
} segment;

typedef struct cpu_ep {
  ortep_ep base;
  ortep_governor *governor;
  ortep_allocator *host;
  bool owns_host; /* false when the caller provided the allocator */
  bool initialized;
  _Atomic uint64_t allocations, frees, fences;
  uint32_t error_word;
  bool capturing;
  segment open; /* the segment being recorded */
  size_t open_cap;
  segment *segments;
  size_t n_segments, segments_cap;
  uint64_t installed;    /* segments ever installed: the CPU's "instantiations" */
  ortep__cpu_pool *pool; /* workers, from initialise to destroy */
  void *sample_scratch;  /* the sampler's ORTEP__SAMPLE_SCRATCH_BYTES(vocabulary), from its first call on */
  size_t sample_bytes;
  bool row_major;          /* cpu.weights_layout = row_major: prepare no initializer */
  bool bf16_products;      /* cpu.products: a chunk's rows x bf16 weights through vdpbf16ps */
  ortep__cpu_context *ctx; /* what it prepared; what a loaded context serves (context.c) */
  char keys[160];          /* context_source_keys, '\n'-joined (a blob's keys) */
  char key_split[160];     /* the same, each key '\0'-ended: key_list points into it */
  const char *key_list[3];
  size_t n_keys;
} cpu_ep;

/* The public parameter block and the one the kernels read are one layout. */
_Static_assert(sizeof(ortep_sample_params) == sizeof(ortep__sample_params), "sampler parameter layouts differ");
_Static_assert(offsetof(ortep_sample_params, n_history) == offsetof(ortep__sample_params, n_history),
               "sampler parameter layouts differ");
_Static_assert(offsetof(ortep_sample_params, seed_hi) == offsetof(ortep__sample_params, seed_hi),
               "sampler parameter layouts differ");

static cpu_ep *self_of(ortep_ep *ep) { return (cpu_ep *)ep; }
static const cpu_ep *cself_of(const ortep_ep *ep) { return (const cpu_ep *)ep; }

static ortep_status need_init(const cpu_ep *e, const char *what) {
  if (!e->initialized)
    return ortep__fail(ORTEP_E_STATE, "%s: %s before ortep_ep_initialize; initialise the EP first", CPU_EP_NAME, what);
  return ORTEP_OK;
}

/* The blocked layouts in the EP's keys (cpu_initialize): their sizes
 * come from kernels/opset.h, so that changing one makes earlier cache files
 * foreign; a change of their arrangement must change the words. */
#define KEY_STR_(x) #x
#define KEY_STR(x)  KEY_STR_(x)
#define BLOCKED_KEY \
  "blocked " KEY_STR(ORTEP__LINEAR_ROWS) "x" KEY_STR(ORTEP__LINEAR_COLS) " 16-bit, " KEY_STR(ORTEP__QUANT_ROWS) \
      "x" KEY_STR(ORTEP__QUANT_COLS) " q8_0^0x80/q4_0 GGUF bytes in 4-byte lanes, runs of " KEY_STR(            \
          ORTEP__QUANT_RUN) " blocks; quantizer llama.cpp-ref"

static ortep_status cpu_initialize(ortep_ep *ep, const ortep_config *config) {
  cpu_ep *e = self_of(ep);
  static const char *const known[] = {"cpu.threads", "cpu.weights_layout", "cpu.products"};
  ortep_status st = ortep_config_check_namespace(config, "cpu", known, 3);
  if (st != ORTEP_OK) return st;
  if ((st = ortep__cpu_simd_check()) != ORTEP_OK) return st;
  /* cpu.products: auto (the default: a node over many rows of bf16 weights
   * in the blocked layout, a prefill chunk, multiplies bf16 by bf16 with
   * AVX512-BF16 where the CPU has it, its rows rounded to bf16), bf16 (the
   * same, refused where the CPU lacks it) or f32 (f32 activations in every
   * product, the portable reference) */
  const char *products = ortep_config_get(config, "cpu.products");
  if (products && strcmp(products, "auto") && strcmp(products, "bf16") && strcmp(products, "f32"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "cpu.products = '%s': use auto (the default: bf16 x bf16 products for a prefill chunk's "
                       "bf16 weights where the CPU has AVX512-BF16), bf16 or f32 (f32 activations throughout)",
                       products);
  if (products && !strcmp(products, "bf16") && !ortep__cpu_bf16_rows())
    return ortep__fail(
        ORTEP_E_NOT_SUPPORTED,
        "cpu.products = bf16: this process's dot products (%s) have no AVX512-BF16 (the CPU lacks it, or "
        "ORTEP_CPU_SIMD chose a narrower set); use auto or f32",
        ortep__cpu_simd_name());
  bool bf16_products = ortep__cpu_bf16_rows() && !(products && !strcmp(products, "f32"));
  /* cpu.weights_layout: blocked (the default: 16-bit projection weights
   * repacked when a session binds them, prepare_initializer below) or
   * row_major (as in the file) */
  const char *layout = ortep_config_get(config, "cpu.weights_layout");
  if (layout && strcmp(layout, "blocked") && strcmp(layout, "row_major"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "cpu.weights_layout = '%s': use blocked (the default: 16-bit projections in the CPU EP's "
                       "blocked layout) or row_major (as in the file)",
                       layout);
  e->row_major = layout && !strcmp(layout, "row_major");
  /* what a prepared weight depends on: this EP, its build, its layouts */
  snprintf(e->keys, sizeof e->keys, "%s\nortep %s\n%s", CPU_EP_NAME, ortep_version(),
           e->row_major ? "row_major; q8_0/q4_0 rows as GGUF; quantizer llama.cpp-ref" : BLOCKED_KEY);
  memcpy(e->key_split, e->keys, sizeof e->keys);
  e->n_keys = 0;
  for (char *k = e->key_split; k && e->n_keys < 3; e->n_keys++) {
    e->key_list[e->n_keys] = k;
    if ((k = strchr(k, '\n')) != NULL) *k++ = '\0';
  }
  /* cpu.threads: the workers this EP runs its nodes on (pool.c), by default
   * every CPU the process may run on. OpenBLAS itself stays single-threaded
   * (process-wide): its own threads would fight ours for the same cores. */
  size_t n = ortep__cpu_default_threads();
  const char *threads = ortep_config_get(config, "cpu.threads");
  if (threads) {
    char *end;
    long v = strtol(threads, &end, 10);
    if (*end || end == threads || v < 1 || v > 1024)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "cpu.threads = '%s': use a whole number of threads from 1 to 1024",
                         threads);
    n = (size_t)v;
  }
  if (e->initialized) return ORTEP_OK;
  e->bf16_products = bf16_products;
  openblas_set_num_threads(1);
  if (!e->pool && (st = ortep__cpu_pool_create(n, &e->pool)) != ORTEP_OK) return st;
  if (!e->host) {
    if ((st = ortep_host_allocator_create(e->governor, &e->host)) != ORTEP_OK) return st;
    e->owns_host = true;
  }
  if (ortep_allocator_device(e->host).tier != ORTEP_TIER_HOST)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: the backing allocator '%s' is not host memory", CPU_EP_NAME,
                       ortep_allocator_name(e->host));
  e->initialized = true;
  return ORTEP_OK;
}

static void free_segments(cpu_ep *e) {
  for (size_t i = 0; i < e->n_segments; i++) {
    for (size_t r = 0; r < e->segments[i].n; r++) ortep__free((void *)(uintptr_t)e->segments[i].records[r].io.inputs);
    ortep__free(e->segments[i].records);
  }
  e->n_segments = 0;
}

static void drop_open(cpu_ep *e) {
  for (size_t r = 0; r < e->open.n; r++) ortep__free((void *)(uintptr_t)e->open.records[r].io.inputs);
  e->open.n = 0;
}

static ortep_status cpu_shutdown(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  drop_open(e);
  e->capturing = false;
  free_segments(e);
  e->initialized = false;
  return ORTEP_OK;
}

static void cpu_destroy(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  cpu_shutdown(ep);
  ortep__free(e->open.records);
  ortep__free(e->segments);
  ortep__free(e->sample_scratch);
  if (e->owns_host) ortep_allocator_destroy(e->host);
  ortep__cpu_pool_destroy(e->pool);
  ortep__cpu_context_destroy(e->ctx);
  ortep__free(e);
}

static ortep_ep_capabilities cpu_capabilities(const ortep_ep *ep) {
  return (ortep_ep_capabilities){true, true, true, true};
}

static void cpu_supports(const ortep_ep *ep, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                         const ortep_dtype *dtypes, size_t n, ortep_kernel_match *out) {
  ortep__cpu_supports(node, opset, shapes, dtypes, n, out);
}

static ortep_status cpu_get_kernel(ortep_ep *ep, const ortep_node *node, const ortep_shape *shapes,
                                   const ortep_dtype *dtypes, size_t n, int64_t opset, ortep_kernel **out) {
  return ortep__cpu_make_kernel(node, shapes, dtypes, n, opset, self_of(ep)->pool, self_of(ep)->bf16_products, out);
}

static ortep_status cpu_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out) {
  cpu_ep *e = self_of(ep);
  ortep_status st = need_init(e, "allocate");
  if (st != ORTEP_OK) return st;
  if (e->capturing)
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE,
                       "%s: allocation of %zu bytes while a device-graph capture is open; carve from the arena "
                       "before capture",
                       CPU_EP_NAME, size);
  void *p;
  if ((st = ortep_allocator_allocate(e->host, size, align, &p)) != ORTEP_OK) return st;
  if ((st = ortep_buffer_wrap_owned(p, ep->device, size, align, out)) != ORTEP_OK) {
    /* the allocator broke its contract (a misaligned block): give it back */
    ortep_allocator_deallocate(e->host, p, size, align);
    return ortep__wrap(st, "%s: allocator '%s' returned an unusable block", CPU_EP_NAME, ortep_allocator_name(e->host));
  }
  atomic_fetch_add(&e->allocations, 1);
  return ORTEP_OK;
}

static ortep_status cpu_deallocate(ortep_ep *ep, ortep_buffer *b) {
  cpu_ep *e = self_of(ep);
  ortep__cpu_context_forget(e->ctx, b->ptr); /* a prepared weight freed is no longer saved */
  ortep_allocator_deallocate(e->host, b->ptr, b->size, b->align);
  atomic_fetch_add(&e->frees, 1);
  return ORTEP_OK;
}

static ortep_status cpu_copy(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size) {
  if (size) memmove(dst->ptr, src->ptr, size);
  return ORTEP_OK;
}

static ortep_status cpu_copy_async(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size,
                                   ortep_fence *out) {
  cpu_copy(ep, src, dst, size);
  *out = (ortep_fence){atomic_fetch_add(&self_of(ep)->fences, 1) + 1, NULL}; /* already signalled */
  return ORTEP_OK;
}

static ortep_status cpu_fence_wait(ortep_ep *ep, ortep_fence *f) { return ORTEP_OK; }
static ortep_status cpu_sync(ortep_ep *ep) { return ORTEP_OK; }

static ortep_status cpu_argmax(ortep_ep *ep, const void *logits, size_t n, ortep_dtype dtype, ortep_buffer *result) {
  cpu_ep *e = self_of(ep);
  bool bad = false;
  uint32_t token = ortep__cpu_pool_argmax(e->pool, dtype == ORTEP_DTYPE_F16 ? NULL : logits,
                                          dtype == ORTEP_DTYPE_F16 ? logits : NULL, n, &bad);
  if (bad) __atomic_fetch_or(&e->error_word, ORTEP_ERROR_ARGMAX_NOT_FINITE, __ATOMIC_RELAXED);
  uint32_t pair[2] = {token, __atomic_load_n(&e->error_word, __ATOMIC_RELAXED)};
  memcpy(result->ptr, pair, sizeof pair);
  return ORTEP_OK;
}

/* The sampler (kernels/sampling.h) on one thread; its scratch is made at the
 * first call (a warm-up, as for every lazy set-up) and reused after. */
static ortep_status cpu_sample(ortep_ep *ep, const void *logits, size_t n, ortep_dtype dtype, const void *params,
                               const int32_t *history, ortep_buffer *result) {
  cpu_ep *e = self_of(ep);
  const ortep__sample_params *p = params;
  if (!(p->temperature > 0.0f && p->temperature <= FLT_MAX) || !(p->top_p > 0.0f && p->top_p <= 1.0f) ||
      !(p->min_p >= 0.0f && p->min_p < 1.0f) || !(p->repetition_penalty > 0.0f && p->repetition_penalty <= FLT_MAX))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: sampling parameters out of range (temperature %g finite > 0, top_p %g in (0, 1], min_p %g "
                       "in [0, 1), repetition_penalty %g finite > 0)",
                       CPU_EP_NAME, (double)p->temperature, (double)p->top_p, (double)p->min_p,
                       (double)p->repetition_penalty);
  if (n > SIZE_MAX / 16) return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: %zu logits", CPU_EP_NAME, n);
  if (e->sample_bytes < ORTEP__SAMPLE_SCRATCH_BYTES(n)) {
    void *s = ortep__malloc(ORTEP__SAMPLE_SCRATCH_BYTES(n));
    if (!s)
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory for the sampler's scratch (%zu bytes)", CPU_EP_NAME,
                         ORTEP__SAMPLE_SCRATCH_BYTES(n));
    ortep__free(e->sample_scratch);
    e->sample_scratch = s, e->sample_bytes = ORTEP__SAMPLE_SCRATCH_BYTES(n);
  }
  uint32_t token = ortep__cpu_sample(dtype == ORTEP_DTYPE_F16 ? NULL : logits, dtype == ORTEP_DTYPE_F16 ? logits : NULL,
                                     n, p, history, e->sample_scratch, &e->error_word);
  uint32_t pair[2] = {token, __atomic_load_n(&e->error_word, __ATOMIC_RELAXED)};
  memcpy(result->ptr, pair, sizeof pair);
  return ORTEP_OK;
}

/* --- device graphs: recorded plans ------------------------------------------ */
static ortep_status cpu_run_kernel(ortep_ep *ep, ortep_kernel *k, const ortep_kernel_io *io) {
  cpu_ep *e = self_of(ep);
  if (!e->capturing) return k->vtable->run(k, io);
  if (k->vtable->record) {
    ortep_status st = k->vtable->record(k, io);
    if (st != ORTEP_OK) return ortep__wrap(st, "%s: recording %s failed", CPU_EP_NAME, ortep_kernel_name(k));
  }
  if (!ORTEP__GROW(e->open.records, e->open_cap, e->open.n + 1))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to record a kernel", CPU_EP_NAME);
  /* One block holds the bound pointers: inputs, then outputs. */
  size_t slots = io->n_inputs + io->n_outputs;
  void **ptrs = ortep__malloc((slots ? slots : 1) * sizeof *ptrs);
  if (!ptrs) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to record a kernel's bindings", CPU_EP_NAME);
  for (size_t i = 0; i < io->n_inputs; i++) ptrs[i] = (void *)(uintptr_t)io->inputs[i];
  for (size_t i = 0; i < io->n_outputs; i++) ptrs[io->n_inputs + i] = io->outputs[i];
  record *r = &e->open.records[e->open.n++];
  r->kernel = k;
  r->io = (ortep_kernel_io){
      (const void *const *)ptrs, io->n_inputs, ptrs + io->n_inputs, io->n_outputs, &e->error_word, NULL};
  return ORTEP_OK;
}

static ortep_status cpu_begin_capture(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  ortep_status st = need_init(e, "begin_capture");
  if (st != ORTEP_OK) return st;
  e->capturing = true; /* the dispatcher refused a second open capture */
  e->open.n = 0;
  return ORTEP_OK;
}

static ortep_status cpu_end_capture(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  if (!ORTEP__GROW(e->segments, e->segments_cap, e->n_segments + 1))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to install a segment", CPU_EP_NAME);
  record *exact = ortep__malloc((e->open.n ? e->open.n : 1) * sizeof *exact);
  if (!exact) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to install a segment", CPU_EP_NAME);
  if (e->open.n) memcpy(exact, e->open.records, e->open.n * sizeof *exact);
  e->segments[e->n_segments++] = (segment){exact, e->open.n};
  e->installed++;
  e->open.n = 0;
  e->capturing = false;
  return ORTEP_OK;
}

static ortep_status cpu_abort_capture(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  drop_open(e);
  e->capturing = false;
  return ORTEP_OK;
}

static ortep_status replay_one(cpu_ep *e, const segment *s) {
  for (size_t i = 0; i < s->n; i++) {
    ortep_status st = s->records[i].kernel->vtable->run(s->records[i].kernel, &s->records[i].io);
    if (st != ORTEP_OK) return st;
  }
  return ORTEP_OK;
}

static ortep_status cpu_replay(ortep_ep *ep) {
  cpu_ep *e = self_of(ep);
  if (!e->n_segments)
    return ortep__fail(ORTEP_E_STATE, "%s: replay with no captured graph; capture first", CPU_EP_NAME);
  for (size_t i = 0; i < e->n_segments; i++) {
    ortep_status st = replay_one(e, &e->segments[i]);
    if (st != ORTEP_OK) return st;
  }
  return ORTEP_OK;
}

/* The dispatcher checked the capture state and the index (runtime/ep.c). */
static ortep_status cpu_replay_segment(ortep_ep *ep, size_t index) {
  cpu_ep *e = self_of(ep);
  return replay_one(e, &e->segments[index]);
}

/* The CPU's device loop: the plan replayed while the flag its last kernel
 * writes stays set (the kernels ran, so the flag is current: no sync). */
static ortep_status cpu_replay_segment_while(ortep_ep *ep, size_t index, const int32_t *flag, size_t max) {
  cpu_ep *e = self_of(ep);
  for (size_t i = 0; i < max; i++) {
    ortep_status st = replay_one(e, &e->segments[index]);
    if (st != ORTEP_OK) return st;
    if (!__atomic_load_n(flag, __ATOMIC_RELAXED)) break;
  }
  return ORTEP_OK;
}

static ortep_status cpu_reset_graph(ortep_ep *ep, bool *had) {
  cpu_ep *e = self_of(ep);
  *had = e->n_segments > 0;
  free_segments(e);
  return ORTEP_OK;
}

static size_t cpu_segment_count(const ortep_ep *ep) { return cself_of(ep)->n_segments; }
static size_t cpu_graph_kernel_nodes(const ortep_ep *ep) {
  size_t n = 0;
  for (size_t i = 0; i < cself_of(ep)->n_segments; i++) n += cself_of(ep)->segments[i].n;
  return n;
}
static bool cpu_capture_active(const ortep_ep *ep) { return cself_of(ep)->capturing; }

static ortep_status cpu_check_error(ortep_ep *ep, uint32_t *bits) {
  *bits = __atomic_load_n(&self_of(ep)->error_word, __ATOMIC_RELAXED);
  return ORTEP_OK;
}
static ortep_status cpu_reset_error(ortep_ep *ep) {
  __atomic_store_n(&self_of(ep)->error_word, 0, __ATOMIC_RELAXED);
  return ORTEP_OK;
}
static uint32_t *cpu_error_ptr(ortep_ep *ep) { return &self_of(ep)->error_word; }

static bool cpu_counts(const ortep_ep *ep, uint64_t *a, uint64_t *f) {
  const cpu_ep *e = cself_of(ep);
  if (a) *a = atomic_load(&((cpu_ep *)(uintptr_t)e)->allocations);
  if (f) *f = atomic_load(&((cpu_ep *)(uintptr_t)e)->frees);
  return true;
}

static void cpu_graph_counts(const ortep_ep *ep, uint64_t *inst, uint64_t *upd) {
  *inst = cself_of(ep)->installed;
  *upd = 0; /* a recorded plan is rebuilt, never patched */
}

/* --- preparing initializers: the blocked layout (kernels/opset.h) ---------------- */
static bool blockable(ortep_dtype dt, const ortep_shape *s) {
  bool quant = ortep_dtype_is_quantized(dt);
  return (dt == ORTEP_DTYPE_BF16 || dt == ORTEP_DTYPE_F16 || quant) && s->rank == 2 && s->dims[0] > 0 &&
         s->dims[1] > 0 && s->dims[0] % (int64_t)ortep__blocked_rows(dt) == 0 &&
         s->dims[1] % (quant ? ORTEP__QUANT_COLS : ORTEP__LINEAR_COLS) == 0;
}

/* Whether a use reads the blocked layout: a weight of an ortep:Linear all
 * of whose weights can be blocked (a node's weights share one layout) and
 * are asked for the same block type (prefer, or none), or the table of an
 * ortep:Embedding. *linear: it is a Linear's weight. */
static bool takes_blocked(const ortep_initializer_use *u, ortep_dtype prefer, bool *linear) {
  const char *op = ortep_node_op_type(u->node);
  if (strcmp(ortep_node_domain(u->node), ORTEP_DOMAIN_ORTEP) != 0) return false;
  if (!strcmp(op, "Embedding")) return u->input == 0;
  if (strcmp(op, "Linear") != 0 || (u->input != 1 && u->input != 3 && u->input != 5)) return false;
  for (size_t w = 1; w <= 5; w += 2) {
    const char *name = w < ortep_node_input_count(u->node) ? ortep_node_input(u->node, w) : "";
    ortep_dtype dt;
    ortep_shape sh;
    if (!*name) continue;
    if (ortep_graph_value_info(u->graph, name, &dt, &sh) != ORTEP_OK ||
        ortep_graph_initializer_preference(u->graph, name) != prefer)
      return false;
    if (!blockable(prefer != ORTEP_DTYPE_COUNT ? prefer : dt, &sh)) return false;
  }
  return *linear = true;
}

#define SMALL_CONSTANT (64u << 10)
#define READ_PIECE     ((size_t)4 << 20) /* source bytes prepared between read_done calls */

/* A weight prepared into a copy (dst is not its source), spread over the
 * EP's workers item by item: a tile of rows when blocked (kernels/opset.h),
 * else a row (a quantized embedding read only by its lookup). Quantizing
 * (ortep__cpu_quantize_row: ortep_quantize's rounding, llama.cpp's), a
 * tile's rows go to the worker's scratch and are repacked from there, so
 * the copy is written once; a 16-bit or already quantized weight is
 * repacked tile by tile, on every worker (what preparing costs:
 * docs/models.md). The source goes in pieces of READ_PIECE bytes, each
 * told to read_done when done, so a large tensor's source pages go as its
 * copy grows instead of both being held whole at once. */
typedef struct prepare_job {
  ortep_dtype to, from;
  bool quantize, blocked;
  const char *src;
  char *dst;
  size_t k, in_row, out_row, scratch;
  char *work; /* per worker: a tile of row-major blocks, then k floats */
} prepare_job;

static void prepare_task(void *ctx, size_t worker, size_t begin, size_t end) {
  const prepare_job *j = ctx;
  size_t rows = j->blocked ? ortep__blocked_rows(j->to) : 1;
  char *tile = j->work ? j->work + worker * j->scratch : NULL;
  float *row = tile ? (float *)(tile + rows * j->out_row) : NULL;
  for (size_t it = begin; it < end; it++) {
    const char *src = j->src + it * rows * j->in_row;
    char *dst = j->dst + it * rows * j->out_row, *out = j->blocked ? tile : dst;
    if (!j->quantize) {
      if (ortep_dtype_is_quantized(j->to))
        ortep__cpu_quant_block(j->to, src, rows, j->k, dst);
      else
        ortep__cpu_to_blocked((const uint16_t *)src, rows, j->k, (uint16_t *)dst);
      continue;
    }
    for (size_t r = 0; r < rows; r++)
      ortep__cpu_quantize_row(j->to, j->from, src + r * j->in_row, j->k, out + r * j->out_row, row);
    if (j->blocked) ortep__cpu_quant_block(j->to, tile, rows, j->k, dst);
  }
}

static ortep_status prepare_copy(cpu_ep *e, const ortep_initializer *in, ortep_dtype to, bool quantize, bool blocked,
                                 size_t n, size_t k, void *dst) {
  prepare_job j = {.to = to,
                   .from = in->dtype,
                   .quantize = quantize,
                   .blocked = blocked,
                   .src = in->data,
                   .dst = dst,
                   .k = k,
                   .in_row = k / ortep_dtype_block(in->dtype) * ortep_dtype_size(in->dtype),
                   .out_row = k / ortep_dtype_block(to) * ortep_dtype_size(to)};
  size_t rows = blocked ? ortep__blocked_rows(to) : 1, threads = ortep__cpu_pool_threads(e->pool), items = n / rows;
  if (quantize) {
    j.scratch = (rows * j.out_row + k * sizeof(float) + 63) / 64 * 64;
    if (!(j.work = ortep__malloc(j.scratch * threads)))
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to quantize '%s' (%zu bytes of scratch)", CPU_EP_NAME,
                         in->name, j.scratch * threads);
  }
  /* in pieces of about READ_PIECE source bytes, each told read_done once
   * done, so the owner can drop them while the rest is prepared */
  size_t item_bytes = rows * j.in_row, piece = in->read_done && item_bytes ? READ_PIECE / item_bytes : items;
  if (piece < 1) piece = 1;
  for (size_t at = 0; at < items; at += piece) {
    size_t count = items - at < piece ? items - at : piece;
    j.src = (const char *)in->data + at * item_bytes;
    j.dst = (char *)dst + at * rows * j.out_row;
    ortep__cpu_pool_for(e->pool, count, rows * k * (quantize ? 16 : 1), prepare_task, &j);
    if (in->read_done) in->read_done(in->read_done_ctx, at * item_bytes, count * item_bytes);
  }
  ortep__free(j.work);
  return ORTEP_OK;
}

/* A weight into the layout (and, asked for, the block type) its kernels
 * read fastest: a 16-bit or q8_0 / q4_0 projection weight (and a tied
 * embedding read by the lm_head) into the blocked layout of kernels/opset.h;
 * a float one the graph asks to be stored as q8_0 / q4_0 quantized first
 * (an embedding read only by its lookup: quantized, not blocked). In place
 * when the session allows it (a model's private copy), else into a copy of
 * this EP's, charged to its governor. Otherwise left as it is. */
typedef struct plan {
  enum { KEEP, COPY, TRANSFORM } kind; /* left as it is; a small constant copied; quantized and/or blocked */
  bool quantize, block;
  ortep_dtype dtype; /* what the kernels read: the form prepare gives */
  ortep_shape shape;
  size_t bytes;
} plan;
static plan plan_of(const cpu_ep *e, const ortep_initializer *in);
static ortep_status prepare(ortep_ep *ep, const ortep_initializer *in, const plan *p, ortep_buffer *out);

/* A loaded context's copy when it has this initializer prepared from the
 * same source (name, dtype, shape, preference) in the form prepare would
 * give it now (a file edited to another shape of the same bytes is not
 * served: it is prepared again): borrowed, nothing done; else prepared now
 * and noted, for save_context. */
static ortep_status cpu_prepare(ortep_ep *ep, const ortep_initializer *in, ortep_dtype *dtype, ortep_shape *shape,
                                ortep_buffer *out) {
  cpu_ep *e = self_of(ep);
  const void *ptr;
  plan p = plan_of(e, in);
  if (p.kind == KEEP) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s keeps '%s' as it is", CPU_EP_NAME, in->name);
  *dtype = p.dtype, *shape = p.shape;
  if (ortep__cpu_context_lookup(e->ctx, in, p.dtype, &p.shape, p.bytes, &ptr))
    return ortep_buffer_wrap_borrowed(ptr, ep->device, p.bytes, 64, out);
  ortep_status st = prepare(ep, in, &p, out);
  if (st == ORTEP_OK && (st = ortep__cpu_context_record(e->ctx, in, *dtype, shape, out->ptr, out->size)) != ORTEP_OK)
    ortep_ep_deallocate(ep, out);
  return st;
}

static size_t cpu_context_keys(const ortep_ep *ep, const char **out, size_t cap) {
  const cpu_ep *e = cself_of(ep);
  for (size_t i = 0; i < e->n_keys && i < cap; i++) out[i] = e->key_list[i];
  return e->n_keys;
}

static ortep_status cpu_save_context(ortep_ep *ep, ortep_context_write_fn write, void *ctx, size_t *len) {
  cpu_ep *e = self_of(ep);
  ortep_status st = need_init(e, "save_context");
  return st == ORTEP_OK ? ortep__cpu_context_save(e->ctx, e->keys, write, ctx, len) : st;
}

static ortep_status cpu_load_context(ortep_ep *ep, const void *blob, size_t len) {
  cpu_ep *e = self_of(ep);
  ortep_status st = need_init(e, "load_context");
  return st == ORTEP_OK ? ortep__cpu_context_load(e->ctx, e->keys, blob, len) : st;
}

static plan plan_of(const cpu_ep *e, const ortep_initializer *in) {
  plan p = {KEEP, false, false, in->dtype, in->shape, in->bytes};
  p.quantize = in->prefer != ORTEP_DTYPE_COUNT && ortep_dtype_is_float(in->dtype) && in->shape.rank == 2 &&
               in->shape.dims[1] % ORTEP__QUANT_COLS == 0;
  ortep_dtype to = p.quantize ? in->prefer : in->dtype;
  bool ok = blockable(to, &in->shape) && in->n_uses, linear = false;
  for (size_t i = 0; ok && i < in->n_uses; i++)
    ok = takes_blocked(&in->uses[i], p.quantize ? to : ORTEP_DTYPE_COUNT, &linear);
  p.block = ok && linear && !e->row_major;
  if (!p.block && !(p.quantize && ok)) {
    /* a small 1-D float constant (a norm's scale, a bias): copied, so that a
     * step reads no page of the model file (a mapped file's large folios
     * would otherwise keep megabytes around each resident), and so that the
     * EP context holds every weight a step reads */
    p.quantize = false;
    if (ortep_dtype_is_float(in->dtype) && in->shape.rank <= 1 && in->bytes <= SMALL_CONSTANT) p.kind = COPY;
    return p;
  }
  p.kind = TRANSFORM;
  size_t n = (size_t)in->shape.dims[0], k = (size_t)in->shape.dims[1];
  size_t cols = ortep_dtype_is_quantized(to) ? ORTEP__QUANT_COLS : ORTEP__LINEAR_COLS, rows = ortep__blocked_rows(to);
  if (p.quantize) ortep_shape_bytes(&in->shape, to, &p.bytes); /* K % 32 == 0: cannot fail */
  p.dtype = to;
  if (p.block) p.shape = (ortep_shape){4, {(int64_t)(n / rows), (int64_t)(k / cols), (int64_t)rows, (int64_t)cols}};
  return p;
}

static ortep_status prepare(ortep_ep *ep, const ortep_initializer *in, const plan *p, ortep_buffer *out) {
  if (p->kind == COPY) {
    ortep_status cst = ortep_ep_allocate(ep, in->bytes, 64, out);
    if (cst != ORTEP_OK) return ortep__wrap(cst, "copying '%s' (%zu bytes)", in->name, in->bytes);
    memcpy(out->ptr, in->data, in->bytes);
    return ORTEP_OK;
  }
  const bool quantize = p->quantize, block = p->block, quant = ortep_dtype_is_quantized(p->dtype);
  const ortep_dtype to = p->dtype;
  size_t n = (size_t)in->shape.dims[0], k = (size_t)in->shape.dims[1], bytes = p->bytes;
  if (!in->writable) {
    ortep_status st = ortep_ep_allocate(ep, bytes, 64, out);
    if (st != ORTEP_OK)
      return quantize ? ortep__wrap(st, "quantizing '%s' to %s (%zu bytes%s; ortep.weights_dtype)", in->name,
                                    ortep_dtype_name(to), bytes, block ? ", blocked" : "")
                      : ortep__wrap(st, "repacking '%s' (%zu bytes) into the blocked layout (cpu.weights_layout)",
                                    in->name, bytes);
    if ((st = prepare_copy(self_of(ep), in, to, quantize, block, n, k, out->ptr)) != ORTEP_OK)
      ortep_ep_deallocate(ep, out);
    return st;
  }
  /* In place (a model's private copy; writable == data): quantized row by
   * row in order, each row's blocks where its first values were, then
   * repacked tile by tile through scratch of a widened row / a tile. */
  void *w = in->writable;
  size_t tmp = quantize ? k * sizeof(float) : 0;
  if (block) {
    size_t tile = quant ? ortep__cpu_quant_tile_bytes(to, k) : ORTEP__LINEAR_ROWS * k * sizeof(uint16_t);
    if (tile > tmp) tmp = tile;
  }
  void *scratch = tmp ? ortep__malloc(tmp) : NULL;
  if (tmp && !scratch)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "%s: no memory to prepare '%s' (%zu bytes of scratch)", CPU_EP_NAME,
                       in->name, tmp);
  if (quantize) {
    size_t in_row = k * ortep_dtype_size(in->dtype), out_row = k / ORTEP__QUANT_COLS * ortep_dtype_size(to);
    for (size_t r = 0; r < n; r++)
      ortep__cpu_quantize_row(to, in->dtype, (const char *)w + r * in_row, k, (char *)w + r * out_row, scratch);
  }
  if (block && quant)
    ortep__cpu_quant_block_in_place(to, w, n, k, scratch);
  else if (block)
    ortep__cpu_to_blocked_in_place(w, n, k, scratch);
  ortep__free(scratch);
  return ortep_buffer_wrap_borrowed_mut(w, ep->device, bytes, 2, out);
}

static const ortep_ep_vtable cpu_vtable = {
    .name = CPU_EP_NAME,
    .initialize = cpu_initialize,
    .shutdown = cpu_shutdown,
    .destroy = cpu_destroy,
    .supports_op = cpu_supports,
    .get_kernel = cpu_get_kernel,
    .allocate = cpu_allocate,
    .deallocate = cpu_deallocate,
    .copy = cpu_copy,
    .copy_async = cpu_copy_async,
    .fence_wait = cpu_fence_wait,
    .sync = cpu_sync,
    .prepare_initializer = cpu_prepare,
    .context_source_keys = cpu_context_keys,
    .save_context = cpu_save_context,
    .load_context = cpu_load_context,
    .capabilities = cpu_capabilities,
    .run_kernel = cpu_run_kernel,
    .device_argmax = cpu_argmax,
    .device_sample = cpu_sample,
    .begin_capture = cpu_begin_capture,
    .end_capture = cpu_end_capture,
    .abort_capture = cpu_abort_capture,
    .replay = cpu_replay,
    .replay_segment = cpu_replay_segment,
    .replay_segment_while = cpu_replay_segment_while,
    .reset_graph = cpu_reset_graph,
    .segment_count = cpu_segment_count,
    .capture_active = cpu_capture_active,
    .check_error_word = cpu_check_error,
    .reset_error_word = cpu_reset_error,
    .error_word_ptr = cpu_error_ptr,
    .allocation_counts = cpu_counts,
    .graph_counts = cpu_graph_counts,
    .graph_kernel_nodes = cpu_graph_kernel_nodes,
};

ortep_status ortep_cpu_ep_create(ortep_governor *governor, ortep_ep **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cpu_ep_create: out is NULL");
  *out = NULL;
  cpu_ep *e = ortep__calloc(1, sizeof *e);
  if (!e || ortep__cpu_context_create(&e->ctx) != ORTEP_OK) {
    ortep__free(e);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_cpu_ep_create: no memory for the EP");
  }
  e->base = (ortep_ep){&cpu_vtable, ortep_device_cpu(), 0};
  e->governor = governor;
  *out = &e->base;
  return ORTEP_OK;
}

ortep_status ortep_cpu_ep_create_with_allocator(ortep_allocator *backing, ortep_ep **out) {
  if (!backing) {
    if (out) *out = NULL;
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_cpu_ep_create_with_allocator: backing allocator is NULL");
  }
  ortep_status st = ortep_cpu_ep_create(NULL, out);
  if (st == ORTEP_OK) self_of(*out)->host = backing;
  return st;
}

size_t ortep_cpu_ep_threads(const ortep_ep *ep) {
  if (!ep || strcmp(ortep_ep_name(ep), CPU_EP_NAME) != 0) return 0;
  return ortep__cpu_pool_threads(cself_of(ep)->pool);
}

const char *ortep_cpu_ep_simd(const ortep_ep *ep) {
  if (!ep || strcmp(ortep_ep_name(ep), CPU_EP_NAME) != 0 || !cself_of(ep)->initialized) return NULL;
  return ortep__cpu_simd_name();
}

bool ortep_cpu_ep_bf16_products(const ortep_ep *ep) {
  return ortep_cpu_ep_simd(ep) != NULL && cself_of(ep)->bf16_products;
}
