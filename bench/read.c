/*
 * read.c: the machine's read bound for ortep-bench. Threads stream a buffer
 * far larger than the caches, summing it the way decode reads weights; the
 * rate is what every "% of the read" figure of decode, its --dtype rounds
 * and batch is set against, and bench_read_binds says whether a step's
 * weights stream from memory at all (else they are served from the cache and
 * no read bounds them).
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

/* The read bound: `threads` threads each sum their slice of a buffer far
 * larger than the caches, what streaming weights can reach. The sum uses
 * 32-byte loads where the CPU has AVX2 (a scalar loop under-measured this
 * VM's bandwidth by ~15%, and a bound that is too low flatters every
 * fraction of it). */
typedef struct reader {
  const uint64_t *p;
  size_t n, passes;
  uint64_t sum;
  bool avx2;
} reader;
#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
  }
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; i++) s += p[i];
  return s;
}
#endif
static void *read_slice(void *arg) {
  reader *r = arg;
  for (size_t pass = 0; pass < r->passes; pass++) {
#if defined(__x86_64__)
    if (r->avx2) {
      r->sum += sum_avx2(r->p, r->n);
      continue;
    }
#endif
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= r->n; i += 4) s0 += r->p[i], s1 += r->p[i + 1], s2 += r->p[i + 2], s3 += r->p[i + 3];
    r->sum += s0 + s1 + s2 + s3;
  }
  return NULL;
}

/* Whether a token's weights outgrow the last-level cache, so that the read
 * bound is the one that binds: decided by served_from_cache (below, once a
 * process) where they are within the size the CPU reports but more than a
 * sixteenth of it, since that size
 * is not to be trusted alone (this VM reports a 508 MiB L3, and its q8_0
 * 0.5B step of 501 MiB streams from memory). ORTEP_BENCH_CACHE_BYTES (a
 * test hook) stands in for the cache's size, unmeasured. */
static bool served_from_cache(size_t bytes, size_t threads);
bool bench_read_binds(size_t read_per_token, size_t threads) {
  const char *hook = getenv("ORTEP_BENCH_CACHE_BYTES");
  if (hook) return read_per_token > (size_t)atol(hook);
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t claim = llc > 0 ? (size_t)llc : (size_t)32 << 20;
  if (read_per_token > claim) return true;
  if (read_per_token <= claim / 16) return false; /* far inside it: cached, whatever the machine's load */
  static size_t asked;
  static bool bound;
  if (asked != read_per_token) asked = read_per_token, bound = !served_from_cache(read_per_token, threads);
  return bound;
}

/* Both streamed buffers, the read bound's and the kernel's weights, come
 * from the runtime's host allocator, so they sit on the same kind of pages as
 * weights read into memory (transparent huge pages where the kernel gives
 * them; 4 KiB pages cost ~12% of this VM's read rate). */
void *bench_stream_alloc(ortep_allocator *host, size_t bytes) {
  void *p = NULL;
  return host && ortep_allocator_allocate(host, bytes, 64, &p) == ORTEP_OK ? p : NULL;
}
void bench_stream_free(ortep_allocator *host, void *p, size_t bytes) {
  if (p) ortep_allocator_deallocate(host, p, bytes, 64);
}
ortep_allocator *bench_stream_host(void) {
  ortep_allocator *host = NULL;
  return ortep_host_allocator_create(NULL, &host) == ORTEP_OK ? host : NULL;
}

struct read_bench {
  ortep_allocator *host;
  uint64_t *buf;
  size_t words, threads, bytes;
  reader *rd;
  pthread_t *th;
  bool avx2;
};
/* A buffer of `bytes` (a multiple of 8) to stream. */
static bool read_open_sized(read_bench *b, size_t threads, size_t bytes) {
  *b = (read_bench){.host = bench_stream_host(), .words = bytes / 8, .threads = threads, .bytes = bytes};
#if defined(__x86_64__)
  __builtin_cpu_init();
  b->avx2 = __builtin_cpu_supports("avx2");
#endif
  b->buf = bench_stream_alloc(b->host, bytes), b->rd = calloc(threads, sizeof *b->rd);
  b->th = calloc(threads, sizeof *b->th);
  if (!b->buf || !b->rd || !b->th) return false;
  for (size_t i = 0; i < b->words; i++) b->buf[i] = i;
  return true;
}
static bool read_open(read_bench *b, size_t threads) { return read_open_sized(b, threads, BENCH_READ_BYTES); }
/* Reads at least `bytes` (whole passes over the buffer, each thread over its
 * slice): bytes per second. */
double read_rate(read_bench *b, size_t bytes) {
  size_t passes = bytes > b->bytes ? (bytes + b->bytes - 1) / b->bytes : 1;
  double t0 = bench_now_ns();
  size_t started = 0, w = b->words, n = b->threads;
  for (size_t t = 0; t < n; t++) {
    b->rd[t] = (reader){b->buf + w * t / n, w * (t + 1) / n - w * t / n, passes, 0, b->avx2};
    if (t && pthread_create(&b->th[t], NULL, read_slice, &b->rd[t]) == 0) started = t;
  }
  read_slice(&b->rd[0]);
  for (size_t t = 1; t <= started; t++) pthread_join(b->th[t], NULL);
  double bw = (double)(passes * b->words * 8) / ((bench_now_ns() - t0) / 1e9);
  volatile uint64_t sink = b->rd[0].sum;
  (void)sink;
  return bw;
}
static void read_close(read_bench *b) {
  bench_stream_free(b->host, b->buf, b->bytes), free(b->rd), free(b->th);
  ortep_allocator_destroy(b->host);
  *b = (read_bench){0};
}
read_bench *read_new(size_t threads) {
  read_bench *b = calloc(1, sizeof *b);
  if (b && !read_open(b, threads)) {
    read_close(b);
    free(b);
    return NULL;
  }
  return b;
}
void read_delete(read_bench *b) {
  if (b) read_close(b);
  free(b);
}

/* Whether `bytes` read again and again come from the cache: a buffer of as
 * many bytes, warmed by one pass, read over and over (at least 512 MiB in
 * all, so that starting the threads does not count) at least 1.5x as fast
 * as the 512 MiB streaming read (best of three each, taken in alternation). A buffer that
 * cannot be had is taken at the CPU's word. */
static bool served_from_cache(size_t bytes, size_t threads) {
  read_bench hot = {0}, cold = {0};
  size_t sized = (bytes + 63) / 64 * 64;
  bool ok = read_open_sized(&hot, threads, sized);
  ok = ok && read_open(&cold, threads);
  double h = 0, c = 0;
  if (ok) read_rate(&hot, sized); /* into the cache, if it fits */
  for (int i = 0; ok && i < 3; i++) {
    double rh = read_rate(&hot, 3 * sized > BENCH_READ_BYTES ? 3 * sized : BENCH_READ_BYTES),
           rc = read_rate(&cold, BENCH_READ_BYTES);
    h = rh > h ? rh : h, c = rc > c ? rc : c;
  }
  read_close(&hot), read_close(&cold);
  return ok ? h >= 1.5 * c : true;
}
