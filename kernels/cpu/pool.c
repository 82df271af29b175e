/*
 * pool.c: the CPU EP's persistent workers (pool.h).
 *
 * Workers are created when the EP is initialised and live until it is
 * destroyed, so no thread is created and nothing is allocated per node or
 * per step. A parallel-for gives each thread (the caller too) one
 * contiguous share of the items, [t n / T, (t + 1) n / T). A thread claims
 * its own share from the front, half of what is left of it at a time but
 * never less than MIN_CHUNK_WORK multiply-adds, so its chunks follow one
 * another in memory: one run through the weights per thread and node, with
 * its prefetches and the hardware's running on across chunks (a chunk taken
 * from anywhere else starts a new stream, which the small projections of a
 * decode step feel most). A thread whose share is done takes half of what
 * is left of another's from its back, so a thread that runs slower (a VM's
 * cores do not always stream at one rate) leaves little for the others to
 * wait on, where fixed halves left a core idle. Which thread computes an item
 * does not change it: every output row is computed whole by one thread in a
 * fixed order, so results are bitwise the same for any thread count and any
 * schedule.
 *
 * Hand-off: a job is published by bumping `epoch`; a worker spins briefly
 * on it (consecutive nodes of a step arrive microseconds apart) and then
 * sleeps on a futex, so an idle pool costs no CPU. The caller waits for
 * `pending` the same way.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pool.h"

#define SPIN_NS        50000 /* polling before sleeping: consecutive nodes of a step arrive microseconds apart */
#define SPIN_CHECK     64    /* pauses between a yield and a look at the clock */
#define MIN_CHUNK_WORK ((size_t)1 << 14) /* multiply-adds: a few microseconds of streaming 16-bit weights */

/* A thread's share of the job, [lo, hi) as lo | hi << 32 in one word: its
 * owner takes from the front and others from the back, agreeing by
 * compare-and-swap. One cache line each. */
typedef struct share_slot {
  _Atomic uint64_t range;
  char pad[64 - sizeof(uint64_t)];
} share_slot;

typedef struct worker {
  ortep__cpu_pool *pool;
  size_t index;
  pthread_t thread;
} worker;

struct ortep__cpu_pool {
  size_t threads;  /* the caller included */
  worker *workers; /* threads - 1 of them */
  size_t started;
  _Atomic uint32_t epoch;   /* bumped to publish a job */
  _Atomic uint32_t pending; /* workers still running the job */
  _Atomic uint32_t sleepers;
  _Atomic bool stop;
  /* the job: read by workers after they see the epoch change */
  ortep__cpu_task fn;
  void *ctx;
  size_t base, min_chunk; /* items are base + the slots' ranges */
  void *slots_raw;
  share_slot *slots; /* threads of them, 64-byte aligned */
  /* per-worker scratch: threads blocks of `stride` bytes from `scratch`, a
   * mapping of raw_bytes reserved, not committed (MAP_NORESERVE): a row of
   * attention scores is sized by the cache's capacity, which a long context
   * makes gigabytes, while a step touches the positions it reaches */
  void *scratch;
  size_t stride, raw_bytes;
  /* one area every worker reads, written by the caller before a parallel-for */
  void *shared_raw, *shared;
  size_t shared_bytes;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *addr, int n) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* One step of a bounded spin: true while the caller should poll again,
 * false once SPIN_NS have passed (then it sleeps on the futex). The budget
 * is time, not a count of pauses (a pause costs ~10 to ~140 cycles
 * depending on the CPU). Every SPIN_CHECK pauses the thread also yields:
 * when two threads of the pool share one CPU (more threads than cores,
 * another busy process, or the scheduler placing a woken worker next to
 * its waker) the one polling would otherwise hold the CPU for its whole
 * time slice while the one it waits for cannot run (a prefill then took
 * tens of times longer). */
typedef struct spinner {
  unsigned n;
  uint64_t until;
} spinner;
static bool spin(spinner *s) {
  relax();
  if (++s->n % SPIN_CHECK) return true;
  sched_yield();
  uint64_t t = ortep__now_ns();
  if (!s->until) s->until = t + SPIN_NS;
  return t < s->until;
}

static inline uint64_t pack(size_t lo, size_t hi) { return (uint64_t)lo | (uint64_t)hi << 32; }

/* Takes half of what is left of slot t's range, at least min_chunk items
 * (all when fewer are left), from its front or its back: false when it is
 * empty. */
static bool take(ortep__cpu_pool *p, size_t t, bool front, size_t *begin, size_t *end) {
  _Atomic uint64_t *r = &p->slots[t].range;
  uint64_t v = atomic_load_explicit(r, memory_order_relaxed);
  for (;;) {
    size_t lo = (size_t)(v & UINT32_MAX), hi = (size_t)(v >> 32);
    if (lo >= hi) return false;
    size_t left = hi - lo, c = left / 2;
    if (c < p->min_chunk) c = p->min_chunk;
    if (c > left) c = left;
    uint64_t to = front ? pack(lo + c, hi) : pack(lo, hi - c);
    if (atomic_compare_exchange_weak_explicit(r, &v, to, memory_order_relaxed, memory_order_relaxed)) {
      *begin = front ? lo : hi - c, *end = front ? lo + c : hi;
      return true;
    }
  }
}

/* Claims thread `index`'s next chunk: its own share first, then from the
 * back of the others' (the next one's first); false when every item is
 * taken. */
static bool claim(ortep__cpu_pool *p, size_t index, size_t *begin, size_t *end) {
  if (take(p, index, true, begin, end)) return true;
  for (size_t i = 1; i < p->threads; i++)
    if (take(p, (index + i) % p->threads, false, begin, end)) return true;
  return false;
}
/* Thread `index` runs chunks until none is left. */
static void share(ortep__cpu_pool *p, size_t index) {
  size_t b, e;
  while (claim(p, index, &b, &e)) p->fn(p->ctx, index, p->base + b, p->base + e);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  ortep__cpu_pool *p = w->pool;
  uint32_t seen = 0; /* the epoch at creation: no job is published before every worker exists */
  for (;;) {
    uint32_t now;
    spinner sp = {0, 0};
    while ((now = atomic_load_explicit(&p->epoch, memory_order_acquire)) == seen) {
      if (spin(&sp)) continue;
      atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->epoch, memory_order_seq_cst) == seen) futex_wait(&p->epoch, seen);
      atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
      sp = (spinner){0, 0};
    }
    seen = now;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
    ortep__assert(w->index < p->threads);
    share(p, w->index);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) futex_wake(&p->pending, 1);
  }
}

static void publish(ortep__cpu_pool *p) {
  atomic_fetch_add_explicit(&p->epoch, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst)) futex_wake(&p->epoch, INT_MAX);
}

ortep_status ortep__cpu_pool_create(size_t threads, ortep__cpu_pool **out) {
  *out = NULL;
  if (threads < 1) threads = 1;
  ortep__cpu_pool *p = ortep__calloc(1, sizeof *p);
  if (!p) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cpu_ep: no memory for the worker pool");
  p->threads = threads;
  if (threads > 1 && (!(p->workers = ortep__calloc(threads - 1, sizeof *p->workers)) ||
                      !(p->slots_raw = ortep__calloc(threads + 1, sizeof(share_slot))))) {
    ortep__free(p->workers);
    ortep__free(p);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cpu_ep: no memory for %zu workers", threads - 1);
  }
  p->slots = (share_slot *)(((uintptr_t)p->slots_raw + 63) & ~(uintptr_t)63);
  for (size_t i = 0; i + 1 < threads; i++) {
    p->workers[i] = (worker){p, i + 1, 0};
    int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
    if (rc) {
      ortep__cpu_pool_destroy(p);
      return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cpu_ep: cannot start worker %zu of %zu: %s; lower cpu.threads", i + 1,
                         threads - 1, strerror(rc));
    }
    p->started++;
  }
  *out = p;
  return ORTEP_OK;
}

void ortep__cpu_pool_destroy(ortep__cpu_pool *p) {
  if (!p) return;
  atomic_store_explicit(&p->stop, true, memory_order_release);
  publish(p);
  for (size_t i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
  ortep__free(p->workers);
  ortep__free(p->slots_raw);
  if (p->scratch) munmap(p->scratch, p->raw_bytes);
  ortep__free(p->shared_raw);
  ortep__free(p);
}

size_t ortep__cpu_pool_threads(const ortep__cpu_pool *p) { return p ? p->threads : 1; }

ortep_status ortep__cpu_pool_reserve(ortep__cpu_pool *p, size_t bytes) {
  size_t stride = (bytes + 63) / 64 * 64;
  if (stride <= p->stride) return ORTEP_OK;
  if (stride > (SIZE_MAX - 64) / p->threads)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cpu_ep: %zu bytes of scratch per worker is too much", bytes);
  size_t total = stride * p->threads;
  void *raw = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY,
                       "cpu_ep: no memory for %zu bytes of scratch for each of %zu workers (%s); a shorter "
                       "max_seq_len needs less",
                       stride, p->threads, strerror(errno));
  if (p->scratch) munmap(p->scratch, p->raw_bytes);
  p->scratch = raw, p->raw_bytes = total; /* page-aligned */
  p->stride = stride;
  return ORTEP_OK;
}

ortep_status ortep__cpu_pool_reserve_shared(ortep__cpu_pool *p, size_t bytes) {
  if (bytes <= p->shared_bytes) return ORTEP_OK;
  void *raw = bytes < SIZE_MAX - 64 ? ortep__malloc(bytes + 64) : NULL;
  if (!raw) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "cpu_ep: no memory for %zu bytes of shared scratch", bytes);
  ortep__free(p->shared_raw);
  p->shared_raw = raw, p->shared = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63), p->shared_bytes = bytes;
  return ORTEP_OK;
}

void *ortep__cpu_pool_shared(ortep__cpu_pool *p) { return p->shared; }

void *ortep__cpu_pool_scratch(ortep__cpu_pool *p, size_t index) {
  return p && p->scratch ? (char *)p->scratch + index * p->stride : NULL;
}

void ortep__cpu_pool_for(ortep__cpu_pool *p, size_t n, size_t work_per_item, ortep__cpu_task fn, void *ctx) {
  if (!p || p->threads == 1 || n < 2 || n * work_per_item < ORTEP__CPU_POOL_MIN_WORK) {
    if (n) fn(ctx, 0, 0, n);
    return;
  }
  p->fn = fn, p->ctx = ctx;
  p->min_chunk = (MIN_CHUNK_WORK + work_per_item - 1) / work_per_item; /* work_per_item >= 1 here */
  /* the slots hold 32-bit item numbers: more items go in pieces (never seen: items are rows or blocks) */
  for (size_t base = 0; base < n; base += UINT32_MAX) {
    size_t m = n - base < UINT32_MAX ? n - base : UINT32_MAX;
    p->base = base;
    for (size_t t = 0; t < p->threads; t++)
      atomic_store_explicit(&p->slots[t].range, pack(m * t / p->threads, m * (t + 1) / p->threads),
                            memory_order_relaxed);
    atomic_store_explicit(&p->pending, (uint32_t)(p->threads - 1), memory_order_relaxed);
    publish(p); /* seq_cst: the job and the slots are visible to a worker that sees the new epoch */
    share(p, 0);
    uint32_t left;
    spinner sp = {0, 0};
    while ((left = atomic_load_explicit(&p->pending, memory_order_acquire)) != 0) {
      if (spin(&sp)) continue;
      futex_wait(&p->pending, left);
      sp = (spinner){0, 0};
    }
  }
}

size_t ortep__cpu_default_threads(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return (size_t)n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (size_t)n : 1;
}
