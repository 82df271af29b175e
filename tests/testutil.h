/*
 * testutil.h: what the Check suites share: status assertions that print the
 * library's message, a seeded PRNG whose seed is printed on failure
 * (ORTEP_TEST_SEED overrides it), counting/failing small-object hooks for the
 * OOM loops, and a runner that returns a ctest-friendly exit code.
 */
#ifndef ORTEP_TESTUTIL_H
#define ORTEP_TESTUTIL_H

#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ortep/backend_impl.h" /* the suites test backends too */
#include "ortep/ortep.h"

/* Check's per-test limit is a hang detector, not a speed check: its 4 s
 * default failed a test that waits for the CUDA runtime to initialise on a
 * busy 2-core machine (6.1 s; 1.6 s idle). Every suite gets one generous
 * limit, the same loaded or idle (ctest's TIMEOUT of 300 s per suite is the
 * outer bound); CK_DEFAULT_TIMEOUT set by the caller (Valgrind's 1200) wins,
 * and a suite that runs longer cases sets more itself. */
__attribute__((constructor)) static void test_default_timeout(void) { setenv("CK_DEFAULT_TIMEOUT", "240", 0); }

#define ck_assert_ok(expr)                                                                           \
  do {                                                                                               \
    ortep_status s_ = (expr);                                                                        \
    ck_assert_msg(s_ == ORTEP_OK, "%s -> %s: %s", #expr, ortep_status_name(s_), ortep_last_error()); \
  } while (0)

#define ck_assert_status(expr, want)                                                                             \
  do {                                                                                                           \
    ortep_status s_ = (expr);                                                                                    \
    ck_assert_msg(s_ == (want), "%s -> %s (want %s): %s", #expr, ortep_status_name(s_), ortep_status_name(want), \
                  ortep_last_error());                                                                           \
  } while (0)

#define ck_assert_error_mentions(needle) \
  ck_assert_msg(strstr(ortep_last_error(), (needle)) != NULL, "message '%s' lacks '%s'", ortep_last_error(), (needle))

/* --- AddressSanitizer builds --------------------------------------------- */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif
#if TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* --- deterministic randomness ------------------------------------------- */
static inline uint64_t test_seed(void) {
  const char *s = getenv("ORTEP_TEST_SEED");
  return s ? strtoull(s, NULL, 0) : 0x0e7e95eedULL;
}
typedef struct test_rng {
  uint64_t state;
} test_rng;
static inline test_rng test_rng_new(uint64_t seed) { return (test_rng){seed ? seed : 1}; }
static inline uint64_t test_rng_next(test_rng *r) {
  uint64_t x = r->state;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  r->state = x;
  return x * 0x2545F4914F6CDD1DULL;
}
/* Uniform in [lo, hi]. */
static inline uint64_t test_rng_range(test_rng *r, uint64_t lo, uint64_t hi) {
  return lo + test_rng_next(r) % (hi - lo + 1);
}

/* --- failing small-object hooks (hooks.h) ---------------------------------- */
static _Atomic long test_hook_calls;
static _Atomic long test_hook_fail_at; /* 0: never */
static _Atomic long test_hook_live;
static inline bool test_hook_should_fail(void) {
  long n = atomic_fetch_add(&test_hook_calls, 1) + 1;
  long at = atomic_load(&test_hook_fail_at);
  return at && n == at;
}
static inline void *test_hook_malloc(size_t n) {
  if (test_hook_should_fail()) return NULL;
  void *p = malloc(n);
  if (p) atomic_fetch_add(&test_hook_live, 1);
  return p;
}
static inline void *test_hook_calloc(size_t c, size_t n) {
  if (test_hook_should_fail()) return NULL;
  void *p = calloc(c, n);
  if (p) atomic_fetch_add(&test_hook_live, 1);
  return p;
}
static inline void *test_hook_realloc(void *p, size_t n) {
  if (test_hook_should_fail()) return NULL;
  void *q = realloc(p, n);
  if (q && !p) atomic_fetch_add(&test_hook_live, 1);
  return q;
}
static inline void test_hook_free(void *p) {
  if (p) atomic_fetch_sub(&test_hook_live, 1);
  free(p);
}
/* Install the counting hooks; fail_at = N fails the Nth call (0: never). */
static inline void test_hooks_install(long fail_at) {
  atomic_store(&test_hook_calls, 0);
  atomic_store(&test_hook_fail_at, fail_at);
  atomic_store(&test_hook_live, 0);
  ck_assert_ok(ortep_replace_allocator(test_hook_malloc, test_hook_calloc, test_hook_realloc, test_hook_free));
}

/* ORTEP_CPU_SIMD (ctest's *_simd runs) naming a set this CPU lacks: prints
 * why and returns true (the suite then exits 77: nothing to test here). */
static inline bool test_simd_set_missing(void) {
  if (!getenv("ORTEP_CPU_SIMD")) return false;
  ortep_ep *ep = NULL;
  ortep_status st = ortep_cpu_ep_create(NULL, &ep);
  if (st == ORTEP_OK) st = ortep_ep_initialize(ep, NULL);
  ortep_ep_destroy(ep);
  if (st != ORTEP_E_NOT_SUPPORTED) return false;
  printf("skipped: %s\n", ortep_last_error());
  return true;
}

/* --- runner -------------------------------------------------------------- */
static inline int test_run_with(Suite *s, enum fork_status fork) {
  SRunner *sr = srunner_create(s);
  if (fork != CK_FORK_GETENV) srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (failed)
    fprintf(stderr, "(random tests used seed 0x%llx; rerun with ORTEP_TEST_SEED)\n", (unsigned long long)test_seed());
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
/* Forked per test unless CK_FORK=no says otherwise (Valgrind runs). */
static inline int test_run(Suite *s) { return test_run_with(s, CK_FORK_GETENV); }
/* Never forked, whatever the environment says: a suite whose main() has
 * touched the CUDA driver (a device probe) cannot fork, since a CUDA context
 * does not survive fork() and every child would see no device. */
static inline int test_run_unforked(Suite *s) { return test_run_with(s, CK_NOFORK); }

/* --- a host allocator under a fault-injecting wrapper ----------------------- */
typedef struct fixture {
  ortep_allocator *host, *fault;
} fixture;
static inline fixture fixture_new(void) {
  fixture f;
  ck_assert_ok(ortep_host_allocator_create(NULL, &f.host));
  ck_assert_ok(ortep_fault_allocator_create(f.host, &f.fault));
  return f;
}
/* What the wrapper has handed out and not had back. */
static inline ortep_mem_stats backing_stats(const fixture *f) {
  ortep_mem_stats st;
  ck_assert_ok(ortep_allocator_get_stats(f->fault, &st));
  return st;
}
static inline void fixture_free(fixture *f) {
  ck_assert_uint_eq(backing_stats(f).current_bytes, 0); /* nothing leaked */
  ortep_allocator_destroy(f->fault);
  ortep_allocator_destroy(f->host);
}

/* --- a "device" allocator the host cannot touch ---------------------------- */
/* Hands out PROT_NONE pages and says it is device memory: any host read or
 * write through its pointers crashes the test, which proves that arena and
 * slab code never touches memory that is not host-accessible. */
#include <sys/mman.h>
typedef struct test_noaccess_allocator {
  ortep_allocator base;
  long live;
} test_noaccess_allocator;
static inline ortep_status test_noaccess_alloc(ortep_allocator *self, size_t b, size_t a, void **out) {
  size_t len = (b ? b : 1) + a;
  unsigned char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return ORTEP_E_OUT_OF_MEMORY;
  ((test_noaccess_allocator *)self)->live++;
  *out = p; /* mmap is page aligned; tests use a <= 4096 */
  return ORTEP_OK;
}
static inline void test_noaccess_free(ortep_allocator *self, void *p, size_t b, size_t a) {
  munmap(p, (b ? b : 1) + a);
  ((test_noaccess_allocator *)self)->live--;
}
static inline ortep_device_key test_noaccess_device(const ortep_allocator *self) { return ortep_device_key_device(0); }
static const ortep_allocator_vtable test_noaccess_vtable = {.name = "noaccess",
                                                            .allocate = test_noaccess_alloc,
                                                            .deallocate = test_noaccess_free,
                                                            .device = test_noaccess_device};

/* --- a minimal EP: only the contract's required entries ------------------- */
/* Memory is host memory (or PROT_NONE pages for a non-host device, so any
 * host access through it would crash the test). Counts what it does. */
typedef struct test_min_ep {
  ortep_ep base;
  long allocs, frees;
} test_min_ep;
static inline ortep_status tmin_init(ortep_ep *e, const ortep_config *c) {
  static const char *const known[] = {"min.flag"};
  return ortep_config_check_namespace(c, "min", known, 1);
}
static inline ortep_status tmin_shutdown(ortep_ep *e) { return ORTEP_OK; }
static inline void tmin_destroy(ortep_ep *e) { free(e); }
static inline void tmin_supports(const ortep_ep *e, const ortep_node *n, int64_t o, const ortep_shape *s,
                                 const ortep_dtype *d, size_t k, ortep_kernel_match *m) {
  m->supported = false; /* a bare decline: the dispatcher must fill a reason */
}
static inline ortep_status tmin_get_kernel(ortep_ep *e, const ortep_node *n, const ortep_shape *s, const ortep_dtype *d,
                                           size_t k, int64_t o, ortep_kernel **out) {
  return ORTEP_E_NOT_SUPPORTED;
}
static inline ortep_status tmin_alloc(ortep_ep *e, size_t size, size_t align, ortep_buffer *out) {
  void *p;
  if (ortep_device_is_host_accessible(e->device)) {
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
      return ORTEP_E_OUT_OF_MEMORY;
  } else {
    p = mmap(NULL, size ? size : 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ORTEP_E_OUT_OF_MEMORY;
  }
  ((test_min_ep *)e)->allocs++;
  return ortep_buffer_wrap_owned(p, e->device, size, align, out);
}
static inline ortep_status tmin_dealloc(ortep_ep *e, ortep_buffer *b) {
  if (ortep_device_is_host_accessible(e->device))
    free(b->ptr);
  else
    munmap(b->ptr, b->size ? b->size : 1);
  ((test_min_ep *)e)->frees++;
  return ORTEP_OK;
}
static inline ortep_status tmin_copy(ortep_ep *e, const ortep_buffer *s, ortep_buffer *d, size_t n) {
  if (!ortep_device_is_host_accessible(e->device)) return ORTEP_E_NOT_SUPPORTED;
  memmove(d->ptr, s->ptr, n);
  return ORTEP_OK;
}
static inline ortep_status tmin_copy_async(ortep_ep *e, const ortep_buffer *s, ortep_buffer *d, size_t n,
                                           ortep_fence *f) {
  *f = (ortep_fence){1, NULL};
  return tmin_copy(e, s, d, n);
}
static inline ortep_status tmin_wait(ortep_ep *e, ortep_fence *f) { return ORTEP_OK; }
static inline ortep_status tmin_sync(ortep_ep *e) { return ORTEP_OK; }
static const ortep_ep_vtable test_min_ep_vtable = {.name = "min_ep",
                                                   .initialize = tmin_init,
                                                   .shutdown = tmin_shutdown,
                                                   .destroy = tmin_destroy,
                                                   .supports_op = tmin_supports,
                                                   .get_kernel = tmin_get_kernel,
                                                   .allocate = tmin_alloc,
                                                   .deallocate = tmin_dealloc,
                                                   .copy = tmin_copy,
                                                   .copy_async = tmin_copy_async,
                                                   .fence_wait = tmin_wait,
                                                   .sync = tmin_sync};
static inline test_min_ep *test_min_ep_new(ortep_device device) {
  test_min_ep *e = calloc(1, sizeof *e);
  e->base = (ortep_ep){&test_min_ep_vtable, device, 0};
  return e;
}

/* A CPU EP, initialised. */
static inline ortep_ep *test_cpu_ep(void) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  return ep;
}
static inline ortep_shape test_shape(size_t rank, const int64_t *dims) {
  ortep_shape s;
  ck_assert_ok(ortep_shape_make(dims, rank, &s));
  return s;
}
#define SHAPE(...) test_shape(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

/* --- synthetic models in a scratch directory ------------------------------ */
#include <unistd.h>
static inline void test_model_dir(char *dir, size_t len, const char *preset, ortep_dtype dtype) {
  snprintf(dir, len, "/tmp/ortep-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_ok(ortep_model_write_synthetic(dir, preset, dtype, 1234));
}
/* Rewrites the model's max_position_embeddings in config.json. */
static inline void test_model_set_context(const char *dir, long long positions) {
  char path[128], buf[4096], out[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *at = strstr(buf, "\"max_position_embeddings\"");
  ck_assert_ptr_nonnull(at);
  char *end = strpbrk(at + strlen("\"max_position_embeddings\""), ",}");
  ck_assert_ptr_nonnull(end);
  snprintf(out, sizeof out, "%.*s\"max_position_embeddings\": %lld%s", (int)(at - buf), buf, positions, end);
  ck_assert_ptr_nonnull(f = fopen(path, "w"));
  fputs(out, f);
  fclose(f);
}
static inline void test_model_dir_remove(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/config.json", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/tokenizer.json", dir);
  unlink(p);
  rmdir(dir);
}

/* Overwrites element `index` of f32 tensor `name` in dir/model.safetensors
 * with value (a crafted bad checkpoint: an Inf or NaN in a weight). */
static inline void test_poison_f32_weight(const char *dir, const char *name, size_t index, float value) {
  char p[512], key[256];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  FILE *f = fopen(p, "r+b");
  ck_assert_ptr_nonnull(f);
  uint64_t hlen = 0;
  ck_assert_int_eq(fread(&hlen, 8, 1, f), 1);
  char *h = calloc(1, (size_t)hlen + 1);
  ck_assert_int_eq(fread(h, 1, (size_t)hlen, f), hlen);
  snprintf(key, sizeof key, "\"%s\"", name);
  const char *at = strstr(h, key);
  ck_assert_msg(at != NULL, "no tensor %s", name);
  const char *offs = strstr(at, "\"data_offsets\"");
  unsigned long long begin = 0, end = 0;
  ck_assert_ptr_nonnull(offs);
  ck_assert_int_eq(sscanf(strchr(offs, '[') + 1, "%llu , %llu", &begin, &end), 2);
  ck_assert_uint_lt(begin + index * 4, end);
  ck_assert_int_eq(fseek(f, (long)(8 + hlen + begin + index * 4), SEEK_SET), 0);
  ck_assert_int_eq(fwrite(&value, 4, 1, f), 1);
  fclose(f);
  free(h);
}

#endif
