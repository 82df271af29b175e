/*
 * alloc.c: `ortep-bench alloc`. Per-allocation cost of the ways ortep can
 * hand out tensor memory, measured side by side in one run:
 *
 *   arena     bump carving, one reset per step (ortep_arena)
 *   slab      one fixed-size cache per power-of-two size class (ortep_slab)
 *   mimalloc  mi_malloc_aligned / mi_free
 *   malloc    glibc's posix_memalign / free, reached through dlsym on
 *             libc.so.6 because Debian's libmimalloc replaces malloc (and
 *             even __libc_malloc) process-wide once linked
 *
 * on two patterns: "decode" (per step, K tensors of fixed mixed sizes from 64
 * B to 4 MiB are carved, then all released, as a decode step's scratch is)
 * and "random" (per step, a random number of random sizes, released in random
 * order). The figure is ns per allocation + free, the median over runs.
 * It also reports the memory planner on a decode-shaped lifetime pattern and
 * on random workloads.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "graph/bench_api.h"
#include "bench.h"
#if !ORTEP_SYSTEM_ALLOCATOR
#include <mimalloc.h>
#endif

#define ALIGN 64

typedef struct rng {
  uint64_t s;
} rng;
static uint64_t rng_next(rng *r) {
  r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1DULL;
}
/* Log-uniform in [lo, hi]. */
static size_t log_uniform(rng *r, size_t lo, size_t hi) {
  double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
  double v = (double)lo * __builtin_pow((double)hi / (double)lo, u);
  size_t s = (size_t)v;
  return s < lo ? lo : s > hi ? hi : s;
}

/* One step: n sizes, and the order in which to free them. */
typedef struct step {
  size_t n;
  size_t *size;
  size_t *free_order;
} step;

typedef struct pattern {
  const char *name;
  const char *description;
  size_t nsteps;
  step *steps;
  size_t ops; /* allocations over all steps */
} pattern;

static pattern make_pattern(const char *name, size_t nsteps, size_t k, bool random, uint64_t seed) {
  pattern p = {name, NULL, nsteps, calloc(nsteps, sizeof(step)), 0};
  rng r = {seed};
  size_t *decode_sizes = malloc(k * sizeof *decode_sizes);
  for (size_t i = 0; i < k; i++) decode_sizes[i] = log_uniform(&r, 64, (size_t)4 << 20);
  for (size_t s = 0; s < nsteps; s++) {
    step *st = &p.steps[s];
    st->n = random ? 16 + rng_next(&r) % (2 * k - 15) : k;
    st->size = malloc(st->n * sizeof *st->size);
    st->free_order = malloc(st->n * sizeof *st->free_order);
    for (size_t i = 0; i < st->n; i++) {
      st->size[i] = random ? log_uniform(&r, 16, 64 << 10) : decode_sizes[i];
      st->free_order[i] = i;
    }
    if (random)
      for (size_t i = st->n; i > 1; i--) {
        size_t j = rng_next(&r) % i, t = st->free_order[i - 1];
        st->free_order[i - 1] = st->free_order[j];
        st->free_order[j] = t;
      }
    p.ops += st->n;
  }
  free(decode_sizes);
  return p;
}

static void free_pattern(pattern *p) {
  for (size_t s = 0; s < p->nsteps; s++) free(p->steps[s].size), free(p->steps[s].free_order);
  free(p->steps);
}

/* --- the contenders -------------------------------------------------------- */
typedef struct contender contender;
struct contender {
  const char *name;
  bool available;
  const char *why_not;
  /* Run the whole pattern once; returns elapsed ns, or < 0 on failure. */
  double (*run)(contender *c, const pattern *p, void **ptrs);
  void *state;
};

static double run_arena(contender *c, const pattern *p, void **ptrs) {
  ortep_arena *a = c->state;
  double t0 = bench_now_ns();
  for (size_t s = 0; s < p->nsteps; s++) {
    const step *st = &p->steps[s];
    for (size_t i = 0; i < st->n; i++)
      if (ortep_arena_alloc(a, st->size[i], ALIGN, &ptrs[i]) != ORTEP_OK) return -1;
    ortep_arena_reset(a);
  }
  return bench_now_ns() - t0;
}

#define SLAB_CLASSES 24 /* 64 B << 0 .. 64 B << 23 */
static size_t size_class(size_t bytes) {
  size_t c = 0;
  while (((size_t)64 << c) < bytes) c++;
  return c;
}

static double run_slab(contender *c, const pattern *p, void **ptrs) {
  ortep_slab **caches = c->state;
  double t0 = bench_now_ns();
  for (size_t s = 0; s < p->nsteps; s++) {
    const step *st = &p->steps[s];
    for (size_t i = 0; i < st->n; i++)
      if (ortep_slab_alloc(caches[size_class(st->size[i])], &ptrs[i]) != ORTEP_OK) return -1;
    for (size_t i = 0; i < st->n; i++) {
      size_t j = st->free_order[i];
      ortep_slab_free(caches[size_class(st->size[j])], ptrs[j]);
    }
  }
  return bench_now_ns() - t0;
}

#if !ORTEP_SYSTEM_ALLOCATOR
static double run_mimalloc(contender *c, const pattern *p, void **ptrs) {
  double t0 = bench_now_ns();
  for (size_t s = 0; s < p->nsteps; s++) {
    const step *st = &p->steps[s];
    for (size_t i = 0; i < st->n; i++)
      if (!(ptrs[i] = mi_malloc_aligned(st->size[i], ALIGN))) return -1;
    for (size_t i = 0; i < st->n; i++) mi_free(ptrs[st->free_order[i]]);
  }
  return bench_now_ns() - t0;
}
#endif

typedef struct libc_fns {
  int (*memalign)(void **, size_t, size_t);
  void (*free)(void *);
} libc_fns;

static double run_malloc(contender *c, const pattern *p, void **ptrs) {
  libc_fns *f = c->state;
  double t0 = bench_now_ns();
  for (size_t s = 0; s < p->nsteps; s++) {
    const step *st = &p->steps[s];
    for (size_t i = 0; i < st->n; i++)
      if (f->memalign(&ptrs[i], ALIGN, st->size[i]) != 0) return -1;
    for (size_t i = 0; i < st->n; i++) f->free(ptrs[st->free_order[i]]);
  }
  return bench_now_ns() - t0;
}

/* --- the planner's figures ------------------------------------------------- */
typedef struct plan_builder {
  ortep_plan_tensor *t;
  size_t n, cap;
  uint32_t step;
} plan_builder;

static size_t pb_add(plan_builder *b, size_t bytes) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    ortep_plan_tensor *t = realloc(b->t, cap * sizeof *t);
    if (!t) {
      fprintf(stderr, "ortep-bench alloc: no memory for the planner workload\n");
      exit(1);
    }
    b->t = t, b->cap = cap;
  }
  b->t[b->n] = (ortep_plan_tensor){bytes, 256, b->step, b->step};
  return b->n++;
}
static void pb_use(plan_builder *b, size_t i) { b->t[i].last_use = b->step; }

/* The activations of one decode step of a LLaMA/Qwen2 model with the shapes
 * of Qwen2.5-0.5B (f32 activations, one token), in execution order. */
static plan_builder decode_lifetimes(void) {
  const size_t hidden = 896, inter = 4864, heads = 14, kv = 2, hd = 64, vocab = 151936, layers = 24, ctx = 1024;
  const size_t f = 4;
  plan_builder b = {0};
  size_t h = pb_add(&b, hidden * f); /* embedding gather */
  for (size_t l = 0; l < layers; l++) {
    b.step++;
    size_t n1 = pb_add(&b, hidden * f);
    pb_use(&b, h);
    b.step++;
    size_t q = pb_add(&b, heads * hd * f), k = pb_add(&b, kv * hd * f), v = pb_add(&b, kv * hd * f);
    pb_use(&b, n1);
    b.step++;
    size_t qr = pb_add(&b, heads * hd * f), kr = pb_add(&b, kv * hd * f);
    pb_use(&b, q), pb_use(&b, k);
    b.step++;
    size_t scores = pb_add(&b, heads * ctx * f), attn = pb_add(&b, heads * hd * f);
    pb_use(&b, qr), pb_use(&b, kr), pb_use(&b, v);
    b.step++;
    size_t o = pb_add(&b, hidden * f);
    pb_use(&b, attn), pb_use(&b, scores);
    b.step++;
    size_t h2 = pb_add(&b, hidden * f), n2 = pb_add(&b, hidden * f);
    pb_use(&b, h), pb_use(&b, o);
    b.step++;
    size_t gate = pb_add(&b, inter * f), up = pb_add(&b, inter * f);
    pb_use(&b, n2);
    b.step++;
    size_t act = pb_add(&b, inter * f);
    pb_use(&b, gate), pb_use(&b, up);
    b.step++;
    size_t down = pb_add(&b, hidden * f);
    pb_use(&b, act);
    b.step++;
    h = pb_add(&b, hidden * f);
    pb_use(&b, h2), pb_use(&b, down);
  }
  b.step++;
  size_t fn = pb_add(&b, hidden * f);
  pb_use(&b, h);
  b.step++;
  size_t logits = pb_add(&b, vocab * f);
  pb_use(&b, fn);
  b.step++;
  pb_add(&b, 8); /* argmax result */
  pb_use(&b, logits);
  return b;
}

typedef struct plan_figures {
  size_t tensors, total, lower_bound, naive_sum;
} plan_figures;

static int plan(const ortep_plan_tensor *t, size_t n, plan_figures *out) {
  size_t *off = malloc((n ? n : 1) * sizeof *off);
  ortep_plan_summary s;
  ortep_status st = ortep_plan_memory(t, n, off, &s);
  if (st == ORTEP_OK) st = ortep_plan_verify(t, n, off, s.total);
  free(off);
  if (st != ORTEP_OK) {
    fprintf(stderr, "ortep-bench alloc: planner failed: %s\n", ortep_last_error());
    return 1;
  }
  *out = (plan_figures){n, s.total, s.lower_bound, s.naive_sum};
  return 0;
}

/* Random workloads: tensors of log-uniform sizes with short lifetimes mostly
 * and some long ones, as a general graph has. */
static int random_plans(size_t count, uint64_t seed, double *ratios) {
  rng r = {seed};
  for (size_t w = 0; w < count; w++) {
    size_t n = 50 + rng_next(&r) % 400;
    uint32_t steps = (uint32_t)(n / 2 + 1);
    ortep_plan_tensor *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
      uint32_t a = (uint32_t)(rng_next(&r) % steps);
      uint32_t len = (uint32_t)(rng_next(&r) % 4 ? rng_next(&r) % 6 : rng_next(&r) % steps);
      t[i] = (ortep_plan_tensor){log_uniform(&r, 64, 1 << 20), 64, a, a + len < steps ? a + len : steps - 1};
    }
    plan_figures f;
    int rc = plan(t, n, &f);
    free(t);
    if (rc) return rc;
    ratios[w] = f.lower_bound ? (double)f.total / (double)f.lower_bound : 1.0;
  }
  return 0;
}

/* --- the command ----------------------------------------------------------- */
static const char alloc_usage[] =
    "usage: ortep-bench alloc [--runs R] [--steps S] [--tensors K] [--json FILE]\n"
    "\n"
    "Per-allocation cost (allocation + free, ns, median over runs) of ortep's arena and\n"
    "slab, mimalloc and glibc malloc, measured side by side, on a decode-like pattern and\n"
    "a random one; then the memory planner's block size against the lower bound.\n"
    "\n"
    "  --runs R      timed runs per allocator and pattern (default 7)\n"
    "  --steps S     steps per run (default 200)\n"
    "  --tensors K   tensors per decode step (default 64; random steps carry 16..2K)\n"
    "  --json FILE   also write the figures as JSON to FILE\n"
    "  -h, --help    this text\n";

typedef struct result {
  double median, min, max;
  bool ok;
} result;

enum { ARENA, SLAB, MIMALLOC, MALLOC, NCONT };
enum { NRANDOM = 200 }; /* random planner workloads */

/* Everything the command measures, built once; the table and the JSON are
 * both printed from it. */
typedef struct alloc_figures {
  long runs;
  pattern pats[2];
  const char *names[NCONT], *why_not[NCONT];
  result res[2][NCONT];
  bool planned; /* the planner figures below are valid */
  plan_figures decode_plan;
  double random_median, random_worst;
} alloc_figures;

/* The contenders and what they allocate from. */
typedef struct alloc_env {
  ortep_allocator *host;
  ortep_arena *arena;
  ortep_slab *caches[SLAB_CLASSES];
  libc_fns libc;
  void *libc_handle;
  contender cont[NCONT];
} alloc_env;

static void env_close(alloc_env *e) {
  for (size_t i = 0; i < SLAB_CLASSES; i++) ortep_slab_destroy(e->caches[i]);
  ortep_arena_destroy(e->arena);
  ortep_allocator_destroy(e->host);
  if (e->libc_handle) dlclose(e->libc_handle);
}

static int env_open(alloc_env *e) {
  *e = (alloc_env){0};
  bool ok = ortep_host_allocator_create(NULL, &e->host) == ORTEP_OK &&
            ortep_arena_create(e->host, &(ortep_arena_options){.chunk_bytes = 64 << 20}, &e->arena) == ORTEP_OK;
  for (size_t i = 0; ok && i < SLAB_CLASSES; i++) {
    size_t obj = (size_t)64 << i;
    ok = ortep_slab_create(e->host, obj, ALIGN, obj >= (64 << 10) ? 1 : (64 << 10) / obj, &e->caches[i]) == ORTEP_OK;
  }
  if (!ok) {
    fprintf(stderr, "ortep-bench alloc: %s\n", ortep_last_error());
    env_close(e);
    return 1;
  }
  if ((e->libc_handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD))) {
    e->libc.memalign = (int (*)(void **, size_t, size_t))dlsym(e->libc_handle, "posix_memalign");
    e->libc.free = (void (*)(void *))dlsym(e->libc_handle, "free");
  }
  contender cont[NCONT] = {
    {"arena", true, NULL, run_arena, e->arena},
    {"slab", true, NULL, run_slab, e->caches},
#if !ORTEP_SYSTEM_ALLOCATOR
    {"mimalloc", true, NULL, run_mimalloc, NULL},
#else
    {"mimalloc", false, "this build uses the system allocator (ORTEP_SYSTEM_ALLOCATOR)", NULL, NULL},
#endif
    {"malloc", e->libc.memalign && e->libc.free, "glibc's posix_memalign/free not found through dlsym", run_malloc,
     &e->libc},
  };
  memcpy(e->cont, cont, sizeof cont);
  return 0;
}

/* One pattern: every contender warmed once (arena chunks, slab pages,
 * allocator heaps), then the timed runs interleaved so drift hits all alike. */
static void measure_pattern(alloc_env *e, const pattern *p, long runs, void **ptrs, double *samples, result *res) {
  static double all[NCONT][1000];
  for (int ci = 0; ci < NCONT; ci++)
    if (e->cont[ci].available && e->cont[ci].run(&e->cont[ci], p, ptrs) < 0) e->cont[ci].available = false;
  for (long r = 0; r < runs; r++)
    for (int ci = 0; ci < NCONT; ci++)
      if (e->cont[ci].available) all[ci][r] = e->cont[ci].run(&e->cont[ci], p, ptrs) / (double)p->ops;
  for (int ci = 0; ci < NCONT; ci++) {
    if (!e->cont[ci].available) continue;
    memcpy(samples, all[ci], (size_t)runs * sizeof *samples);
    res[ci] = (result){bench_median(samples, (size_t)runs), bench_min(samples, (size_t)runs),
                       bench_max(samples, (size_t)runs), true};
  }
}

/* The planner on the decode step of the 0.5B shape and on random workloads. */
static int measure_planner(alloc_figures *f) {
  plan_builder dec = decode_lifetimes();
  double ratios[NRANDOM];
  int rc = plan(dec.t, dec.n, &f->decode_plan) || random_plans(NRANDOM, 0x51a7, ratios);
  free(dec.t);
  if (rc) return 1;
  f->random_median = bench_median(ratios, NRANDOM);
  f->random_worst = bench_max(ratios, NRANDOM);
  f->planned = true;
  return 0;
}

static int measure_all(alloc_figures *f, long steps, long k) {
  static const char *const names[NCONT] = {"arena", "slab", "mimalloc", "malloc"};
  for (int ci = 0; ci < NCONT; ci++) f->names[ci] = names[ci], f->why_not[ci] = "not measured";
  alloc_env e;
  if (env_open(&e)) return 1;
  f->pats[0] = make_pattern("decode", (size_t)steps, (size_t)k, false, 0xdec0de);
  f->pats[1] = make_pattern("random", (size_t)steps, (size_t)k, true, 0x7a9d0);
  f->pats[0].description = "per step K tensors of fixed log-uniform sizes 64 B..4 MiB, carved then all released";
  f->pats[1].description = "per step 16..2K tensors of random sizes 16 B..64 KiB, released in random order";
  void **ptrs = malloc((2 * (size_t)k + 16) * sizeof *ptrs);
  double *samples = malloc((size_t)f->runs * sizeof *samples);
  for (int pi = 0; ptrs && samples && pi < 2; pi++)
    measure_pattern(&e, &f->pats[pi], f->runs, ptrs, samples, f->res[pi]);
  for (int ci = 0; ci < NCONT; ci++) f->why_not[ci] = e.cont[ci].why_not ? e.cont[ci].why_not : "failed";
  int rc = ptrs && samples ? 0 : 1;
  if (rc) fprintf(stderr, "ortep-bench alloc: out of memory\n");
  free(ptrs);
  free(samples);
  env_close(&e);
  return rc || measure_planner(f);
}

/* How many times faster than contender `than` (0: not measured). */
static double faster(const alloc_figures *f, int pi, int ci, int than) {
  return f->res[pi][ci].ok && f->res[pi][than].ok ? f->res[pi][than].median / f->res[pi][ci].median : 0;
}

static void print_pattern(const alloc_figures *f, int pi) {
  const pattern *p = &f->pats[pi];
  printf("\n%s pattern: %s\n  (%zu steps, %zu allocations per run, align %d, %ld runs)\n", p->name, p->description,
         p->nsteps, p->ops, ALIGN, f->runs);
  printf("  %-10s %14s %10s %10s %14s %14s\n", "allocator", "ns/op median", "min", "max", "mimalloc/this",
         "malloc/this");
  for (int ci = 0; ci < NCONT; ci++) {
    const result *r = &f->res[pi][ci];
    if (!r->ok) {
      printf("  %-10s %14s  (%s)\n", f->names[ci], "n/a", f->why_not[ci]);
      continue;
    }
    char a[32] = "n/a", b[32] = "n/a";
    if (faster(f, pi, ci, MIMALLOC)) snprintf(a, sizeof a, "%.2fx", faster(f, pi, ci, MIMALLOC));
    if (faster(f, pi, ci, MALLOC)) snprintf(b, sizeof b, "%.2fx", faster(f, pi, ci, MALLOC));
    printf("  %-10s %14.2f %10.2f %10.2f %14s %14s\n", f->names[ci], r->median, r->min, r->max, a, b);
  }
}

static double plan_ratio(const plan_figures *p) {
  return p->lower_bound ? (double)p->total / (double)p->lower_bound : 1.0;
}

static void print_figures(const alloc_figures *f) {
  for (int pi = 0; pi < 2; pi++) print_pattern(f, pi);
  printf("  (mimalloc/this: how many times faster than mimalloc; above 1 is faster)\n");
  double xm = faster(f, 0, ARENA, MIMALLOC), xl = faster(f, 0, ARENA, MALLOC);
  if (xm)
    printf("\ntarget: arena >= 5x faster than mimalloc on the decode pattern: %.1fx — %s\n", xm,
           xm >= 5 ? "met" : "NOT met");
  if (xl)
    printf("target: arena >= 10x faster than glibc malloc on the decode pattern: %.1fx — %s\n", xl,
           xl >= 10 ? "met" : "NOT met");
  if (!f->planned) return;
  const plan_figures *d = &f->decode_plan;
  char t1[32], t2[32], t3[32];
  printf("\nplanner, decode step with Qwen2.5-0.5B shapes (%zu activations, f32, context 1024):\n", d->tensors);
  printf("  block %s, lower bound %s, naive sum %s: %.3fx the lower bound, %.1fx smaller than naive\n",
         ortep__format_bytes(d->total, t1, sizeof t1), ortep__format_bytes(d->lower_bound, t2, sizeof t2),
         ortep__format_bytes(d->naive_sum, t3, sizeof t3), plan_ratio(d), (double)d->naive_sum / (double)d->total);
  printf("planner, %d random workloads (50..450 tensors): total / lower bound median %.3fx, worst %.3fx\n", NRANDOM,
         f->random_median, f->random_worst);
  printf("target: decode <= 1.05x the lower bound: %s; random <= 1.10x (median): %s\n",
         plan_ratio(d) <= 1.05 ? "met" : "NOT met", f->random_median <= 1.10 ? "met" : "NOT met");
}

static cJSON *pattern_json(const alloc_figures *f, int pi) {
  const pattern *p = &f->pats[pi];
  cJSON *jp = cJSON_CreateObject();
  cJSON_AddStringToObject(jp, "name", p->name);
  cJSON_AddStringToObject(jp, "description", p->description);
  cJSON_AddNumberToObject(jp, "steps", (double)p->nsteps);
  cJSON_AddNumberToObject(jp, "allocations_per_run", (double)p->ops);
  cJSON_AddNumberToObject(jp, "runs", (double)f->runs);
  cJSON *jr = cJSON_AddArrayToObject(jp, "results");
  for (int ci = 0; ci < NCONT; ci++) {
    const result *r = &f->res[pi][ci];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "allocator", f->names[ci]);
    if (!r->ok) {
      cJSON_AddNullToObject(o, "ns_per_op_median");
      cJSON_AddStringToObject(o, "unavailable", f->why_not[ci]);
    } else {
      cJSON_AddNumberToObject(o, "ns_per_op_median", r->median);
      cJSON_AddNumberToObject(o, "ns_per_op_min", r->min);
      cJSON_AddNumberToObject(o, "ns_per_op_max", r->max);
      if (faster(f, pi, ci, MIMALLOC)) cJSON_AddNumberToObject(o, "speedup_vs_mimalloc", faster(f, pi, ci, MIMALLOC));
      if (faster(f, pi, ci, MALLOC)) cJSON_AddNumberToObject(o, "speedup_vs_malloc", faster(f, pi, ci, MALLOC));
    }
    cJSON_AddItemToArray(jr, o);
  }
  return jp;
}

static cJSON *figures_json(const alloc_figures *f) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "alloc");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON *jpats = cJSON_AddArrayToObject(root, "patterns");
  for (int pi = 0; pi < 2; pi++) cJSON_AddItemToArray(jpats, pattern_json(f, pi));
  cJSON *jt = cJSON_AddObjectToObject(root, "targets");
  double xm = faster(f, 0, ARENA, MIMALLOC), xl = faster(f, 0, ARENA, MALLOC);
  if (xm) cJSON_AddBoolToObject(jt, "arena_5x_mimalloc", xm >= 5);
  if (xl) cJSON_AddBoolToObject(jt, "arena_10x_malloc", xl >= 10);
  if (!f->planned) return root;
  const plan_figures *d = &f->decode_plan;
  cJSON *jpl = cJSON_AddObjectToObject(root, "planner"), *jd = cJSON_AddObjectToObject(jpl, "decode");
  cJSON_AddNumberToObject(jd, "tensors", (double)d->tensors);
  cJSON_AddNumberToObject(jd, "total_bytes", (double)d->total);
  cJSON_AddNumberToObject(jd, "lower_bound_bytes", (double)d->lower_bound);
  cJSON_AddNumberToObject(jd, "naive_sum_bytes", (double)d->naive_sum);
  cJSON_AddNumberToObject(jd, "ratio_to_lower_bound", plan_ratio(d));
  cJSON *jrw = cJSON_AddObjectToObject(jpl, "random");
  cJSON_AddNumberToObject(jrw, "workloads", NRANDOM);
  cJSON_AddNumberToObject(jrw, "median_ratio_to_lower_bound", f->random_median);
  cJSON_AddNumberToObject(jrw, "worst_ratio_to_lower_bound", f->random_worst);
  cJSON_AddBoolToObject(jt, "planner_decode_1_05", plan_ratio(d) <= 1.05);
  cJSON_AddBoolToObject(jt, "planner_random_1_10", f->random_median <= 1.10);
  return root;
}

int bench_alloc_main(int argc, char **argv) {
  long runs = 7, steps = 200, k = 64;
  const char *json_path = NULL;
  static const struct option longopts[] = {{"runs", required_argument, 0, 'r'},    {"steps", required_argument, 0, 's'},
                                           {"tensors", required_argument, 0, 'k'}, {"json", required_argument, 0, 'j'},
                                           {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  int c, rc = 0;
  while ((c = bench_next_option("alloc", argc, argv, longopts, alloc_usage, &rc)) >= 0) {
    switch (c) {
      case 'r': rc = bench_parse_count("alloc", "--runs", optarg, 1, 1000, &runs); break;
      case 's': rc = bench_parse_count("alloc", "--steps", optarg, 1, 1000000, &steps); break;
      case 'k': rc = bench_parse_count("alloc", "--tensors", optarg, 8, 4096, &k); break;
      case 'j': json_path = optarg; break;
    }
    if (rc) return rc;
  }
  if (c == BENCH_OPTIONS_EXIT) return rc;
  FILE *json = NULL; /* created now: an unwritable --json fails before the run */
  if (json_path && !(json = bench_json_open(json_path))) return 1;
  alloc_figures f = {.runs = runs};
  int exit_code = measure_all(&f, steps, k);
  bench_print_header("alloc");
  print_figures(&f);
  cJSON *root = figures_json(&f);
  if (json && bench_json_finish(json, json_path, root)) exit_code = 1;
  cJSON_Delete(root);
  for (int pi = 0; pi < 2; pi++) free_pattern(&f.pats[pi]);
  return exit_code;
}
