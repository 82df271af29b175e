/*
 * pool.h: the CPU EP's persistent worker pool (pool.c). A parallel-for over
 * n items hands out chunks of them to the threads (the caller is worker 0)
 * until all are done; a task may be called several times on one thread, each
 * time with a different range, and must give the same result whichever
 * thread runs an item. Work below ORTEP__CPU_POOL_MIN_WORK (items x work per
 * item, in multiply-adds) runs on the caller alone: waking workers costs
 * more than a small node takes. Not reentrant: one parallel-for at a time
 * per pool (an EP serves one step at a time).
 */
#ifndef ORTEP_KERNELS_CPU_POOL_H
#define ORTEP_KERNELS_CPU_POOL_H

#include "runtime/internal.h"

#define ORTEP__CPU_POOL_MIN_WORK ((size_t)1 << 16)

typedef struct ortep__cpu_pool ortep__cpu_pool;
/* worker: the index (0 .. threads - 1) of the thread running [begin, end),
 * e.g. to pick its scratch. */
typedef void (*ortep__cpu_task)(void *ctx, size_t worker, size_t begin, size_t end);

ortep_status ortep__cpu_pool_create(size_t threads, ortep__cpu_pool **out);
void ortep__cpu_pool_destroy(ortep__cpu_pool *pool);
size_t ortep__cpu_pool_threads(const ortep__cpu_pool *pool);
/* fn(ctx, worker, begin, end) over chunks covering [0, n) once, spread
 * across the pool; returns when all are done. pool may be NULL (then it
 * runs inline, as one call). */
void ortep__cpu_pool_for(ortep__cpu_pool *pool, size_t n, size_t work_per_item, ortep__cpu_task fn, void *ctx);
/* Scratch of at least bytes for each worker (64-byte aligned), kept by the
 * pool and shared by every kernel on it (one node runs at a time): kernels
 * reserve what they need when they are created, never while a step runs. */
ortep_status ortep__cpu_pool_reserve(ortep__cpu_pool *pool, size_t bytes);
void *ortep__cpu_pool_scratch(ortep__cpu_pool *pool, size_t worker);
/* One area of at least bytes (64-byte aligned) shared by every worker and
 * every kernel on the pool: a node writes it before its parallel-for (x in
 * the form all its items read) and the workers only read it. Reserved when
 * kernels are created, like the scratch. */
ortep_status ortep__cpu_pool_reserve_shared(ortep__cpu_pool *pool, size_t bytes);
void *ortep__cpu_pool_shared(ortep__cpu_pool *pool);
/* The CPUs this process may run on (sched_getaffinity). */
size_t ortep__cpu_default_threads(void);

#endif
