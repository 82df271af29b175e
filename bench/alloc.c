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

int bench_alloc_main(int argc, char **argv) {
  long runs = 7, steps = 200, k = 64;
  const char *json_path = NULL;
  static const struct option longopts[] = {{"runs", required_argument, 0, 'r'},
                                           {"steps", required_argument, 0, 's'},
                                           {"tensors", required_argument, 0, 'k'},
                                           {"json", required_argument, 0, 'j'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
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

  ortep_allocator *host;
  if (ortep_host_allocator_create(NULL, &host) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench alloc: %s\n", ortep_last_error());
    if (json) fclose(json);
    return 1;
  }
  ortep_arena *arena;
  ortep_slab *caches[SLAB_CLASSES] = {0};
  if (ortep_arena_create(host, &(ortep_arena_options){.chunk_bytes = 64 << 20}, &arena) != ORTEP_OK) {
    fprintf(stderr, "ortep-bench alloc: %s\n", ortep_last_error());
    if (json) fclose(json);
    return 1;
  }
  for (size_t i = 0; i < SLAB_CLASSES; i++) {
    size_t obj = (size_t)64 << i;
    if (ortep_slab_create(host, obj, ALIGN, obj >= (64 << 10) ? 1 : (64 << 10) / obj, &caches[i]) != ORTEP_OK) {
      fprintf(stderr, "ortep-bench alloc: %s\n", ortep_last_error());
      if (json) fclose(json);
    return 1;
    }
  }
  libc_fns libc = {0};
  void *libc_handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc_handle) {
    libc.memalign = (int (*)(void **, size_t, size_t))dlsym(libc_handle, "posix_memalign");
    libc.free = (void (*)(void *))dlsym(libc_handle, "free");
  }
  enum { ARENA, SLAB, MIMALLOC, MALLOC, NCONT };
  contender cont[NCONT] = {
      {"arena", true, NULL, run_arena, arena},
      {"slab", true, NULL, run_slab, caches},
#if !ORTEP_SYSTEM_ALLOCATOR
      {"mimalloc", true, NULL, run_mimalloc, NULL},
#else
      {"mimalloc", false, "this build uses the system allocator (ORTEP_SYSTEM_ALLOCATOR)", NULL, NULL},
#endif
      {"malloc", libc.memalign && libc.free, "glibc's posix_memalign/free not found through dlsym", run_malloc,
       &libc},
  };

  pattern pats[2] = {make_pattern("decode", (size_t)steps, (size_t)k, false, 0xdec0de),
                     make_pattern("random", (size_t)steps, (size_t)k, true, 0x7a9d0)};
  pats[0].description = "per step K tensors of fixed log-uniform sizes 64 B..4 MiB, carved then all released";
  pats[1].description = "per step 16..2K tensors of random sizes 16 B..64 KiB, released in random order";
  size_t max_n = 2 * (size_t)k + 16;
  void **ptrs = malloc(max_n * sizeof *ptrs);
  double *samples = malloc((size_t)runs * sizeof *samples);
  result res[2][NCONT] = {{{0}}};

  bench_print_header("alloc");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "command", "alloc");
  cJSON_AddItemToObject(root, "machine", bench_machine_json());
  cJSON_AddItemToObject(root, "build", bench_build_json());
  cJSON *jpats = cJSON_AddArrayToObject(root, "patterns");
  int exit_code = 0;

  for (int pi = 0; pi < 2; pi++) {
    pattern *p = &pats[pi];
    /* Warm every contender once (arena chunks, slab pages, allocator heaps),
     * then interleave the timed runs so drift hits all of them alike. */
    for (int ci = 0; ci < NCONT; ci++)
      if (cont[ci].available && cont[ci].run(&cont[ci], p, ptrs) < 0) cont[ci].available = false;
    double all[NCONT][1000];
    for (long r = 0; r < runs; r++)
      for (int ci = 0; ci < NCONT; ci++)
        if (cont[ci].available) all[ci][r] = cont[ci].run(&cont[ci], p, ptrs) / (double)p->ops;
    for (int ci = 0; ci < NCONT; ci++) {
      if (!cont[ci].available) continue;
      memcpy(samples, all[ci], (size_t)runs * sizeof *samples);
      res[pi][ci] = (result){bench_median(samples, (size_t)runs), bench_min(samples, (size_t)runs),
                             bench_max(samples, (size_t)runs), true};
    }
    printf("\n%s pattern: %s\n  (%zu steps, %zu allocations per run, align %d, %ld runs)\n", p->name, p->description,
           p->nsteps, p->ops, ALIGN, runs);
    printf("  %-10s %14s %10s %10s %14s %14s\n", "allocator", "ns/op median", "min", "max", "mimalloc/this",
           "malloc/this");
    cJSON *jp = cJSON_CreateObject();
    cJSON_AddStringToObject(jp, "name", p->name);
    cJSON_AddStringToObject(jp, "description", p->description);
    cJSON_AddNumberToObject(jp, "steps", (double)p->nsteps);
    cJSON_AddNumberToObject(jp, "allocations_per_run", (double)p->ops);
    cJSON_AddNumberToObject(jp, "runs", (double)runs);
    cJSON *jr = cJSON_AddArrayToObject(jp, "results");
    for (int ci = 0; ci < NCONT; ci++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "allocator", cont[ci].name);
      if (!res[pi][ci].ok) {
        printf("  %-10s %14s  (%s)\n", cont[ci].name, "n/a", cont[ci].why_not ? cont[ci].why_not : "failed");
        cJSON_AddNullToObject(o, "ns_per_op_median");
        cJSON_AddStringToObject(o, "unavailable", cont[ci].why_not ? cont[ci].why_not : "failed");
        cJSON_AddItemToArray(jr, o);
        continue;
      }
      double m = res[pi][ci].median;
      double vs_mi = res[pi][MIMALLOC].ok ? res[pi][MIMALLOC].median / m : 0;
      double vs_ma = res[pi][MALLOC].ok ? res[pi][MALLOC].median / m : 0;
      char a[32] = "n/a", b[32] = "n/a";
      if (vs_mi) snprintf(a, sizeof a, "%.2fx", vs_mi);
      if (vs_ma) snprintf(b, sizeof b, "%.2fx", vs_ma);
      printf("  %-10s %14.2f %10.2f %10.2f %14s %14s\n", cont[ci].name, m, res[pi][ci].min, res[pi][ci].max, a, b);
      cJSON_AddNumberToObject(o, "ns_per_op_median", m);
      cJSON_AddNumberToObject(o, "ns_per_op_min", res[pi][ci].min);
      cJSON_AddNumberToObject(o, "ns_per_op_max", res[pi][ci].max);
      if (vs_mi) cJSON_AddNumberToObject(o, "speedup_vs_mimalloc", vs_mi);
      if (vs_ma) cJSON_AddNumberToObject(o, "speedup_vs_malloc", vs_ma);
      cJSON_AddItemToArray(jr, o);
    }
    cJSON_AddItemToArray(jpats, jp);
  }
  printf("  (mimalloc/this: how many times faster than mimalloc; above 1 is faster)\n");

  /* Targets on the decode pattern. */
  cJSON *jt = cJSON_AddObjectToObject(root, "targets");
  if (res[0][ARENA].ok && res[0][MIMALLOC].ok) {
    double x = res[0][MIMALLOC].median / res[0][ARENA].median;
    printf("\ntarget: arena >= 5x faster than mimalloc on the decode pattern: %.1fx — %s\n", x,
           x >= 5 ? "met" : "NOT met");
    cJSON_AddBoolToObject(jt, "arena_5x_mimalloc", x >= 5);
  }
  if (res[0][ARENA].ok && res[0][MALLOC].ok) {
    double x = res[0][MALLOC].median / res[0][ARENA].median;
    printf("target: arena >= 10x faster than glibc malloc on the decode pattern: %.1fx — %s\n", x,
           x >= 10 ? "met" : "NOT met");
    cJSON_AddBoolToObject(jt, "arena_10x_malloc", x >= 10);
  }

  /* The planner. */
  plan_builder dec = decode_lifetimes();
  plan_figures df;
  enum { NRANDOM = 200 };
  double ratios[NRANDOM];
  if (plan(dec.t, dec.n, &df) || random_plans(NRANDOM, 0x51a7, ratios)) {
    exit_code = 1;
  } else {
    char t1[32], t2[32], t3[32];
    double dr = df.lower_bound ? (double)df.total / (double)df.lower_bound : 1.0;
    printf("\nplanner, decode step with Qwen2.5-0.5B shapes (%zu activations, f32, context 1024):\n", df.tensors);
    printf("  block %s, lower bound %s, naive sum %s: %.3fx the lower bound, %.1fx smaller than naive\n",
           ortep__format_bytes(df.total, t1, sizeof t1), ortep__format_bytes(df.lower_bound, t2, sizeof t2),
           ortep__format_bytes(df.naive_sum, t3, sizeof t3), dr, (double)df.naive_sum / (double)df.total);
    double worst = bench_max(ratios, NRANDOM);
    double med = bench_median(ratios, NRANDOM);
    printf("planner, %d random workloads (50..450 tensors): total / lower bound median %.3fx, worst %.3fx\n", NRANDOM,
           med, worst);
    printf("target: decode <= 1.05x the lower bound: %s; random <= 1.10x (median): %s\n", dr <= 1.05 ? "met" : "NOT met",
           med <= 1.10 ? "met" : "NOT met");
    cJSON *jpl = cJSON_AddObjectToObject(root, "planner");
    cJSON *jd = cJSON_AddObjectToObject(jpl, "decode");
    cJSON_AddNumberToObject(jd, "tensors", (double)df.tensors);
    cJSON_AddNumberToObject(jd, "total_bytes", (double)df.total);
    cJSON_AddNumberToObject(jd, "lower_bound_bytes", (double)df.lower_bound);
    cJSON_AddNumberToObject(jd, "naive_sum_bytes", (double)df.naive_sum);
    cJSON_AddNumberToObject(jd, "ratio_to_lower_bound", dr);
    cJSON *jrw = cJSON_AddObjectToObject(jpl, "random");
    cJSON_AddNumberToObject(jrw, "workloads", NRANDOM);
    cJSON_AddNumberToObject(jrw, "median_ratio_to_lower_bound", med);
    cJSON_AddNumberToObject(jrw, "worst_ratio_to_lower_bound", worst);
    cJSON_AddBoolToObject(jt, "planner_decode_1_05", dr <= 1.05);
    cJSON_AddBoolToObject(jt, "planner_random_1_10", med <= 1.10);
  }
  free(dec.t);

  if (json && bench_json_finish(json, json_path, root)) exit_code = 1;
  cJSON_Delete(root);
  free(ptrs);
  free(samples);
  for (int pi = 0; pi < 2; pi++) free_pattern(&pats[pi]);
  for (size_t i = 0; i < SLAB_CLASSES; i++) ortep_slab_destroy(caches[i]);
  ortep_arena_destroy(arena);
  ortep_allocator_destroy(host);
  if (libc_handle) dlclose(libc_handle);
  return exit_code;
}
