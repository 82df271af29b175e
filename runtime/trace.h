/*
 * trace.h: NVTX3 tracing for Nsight Systems, in domain "ortep". With the
 * NVTX headers (from the CUDA Toolkit; header-only, so CPU-only builds have
 * it too) the calls go to NVTX, which costs one predictable branch per call
 * when no tool is attached; without them every call compiles to nothing.
 *
 * Hot names are registered strings; events carry a category (memory,
 * executor, decode) and, where useful, a u64 payload.
 */
#ifndef ORTEP_RUNTIME_TRACE_H
#define ORTEP_RUNTIME_TRACE_H

#include "internal.h"

/* XX(ID, "registered name", category) */
#define ORTEP_TRACE_MAP(XX)                        \
  XX(SESSION_BUILD, "session build", EXECUTOR)     \
  XX(PLACEMENT, "placement", EXECUTOR)             \
  XX(MEMORY_PLANNING, "memory planning", MEMORY)   \
  XX(CAPTURE_SEGMENT, "capture segment", EXECUTOR) \
  XX(REPLAY_SEGMENT, "replay segment", EXECUTOR)   \
  XX(EAGER_STEP, "eager step", EXECUTOR)           \
  XX(DECODE_STEP, "decode step", DECODE)           \
  XX(SYNC, "sync", DECODE)                         \
  XX(ERROR_WORD_HIT, "error word hit", DECODE)     \
  XX(GRAPH_RESET, "graph reset", EXECUTOR)         \
  XX(RECAPTURE, "recapture", EXECUTOR)             \
  XX(GRAPH_EXEC_UPDATE, "graph exec update", EXECUTOR)

typedef enum ortep__trace_id {
#define ORTEP__TRACE_ENUM(id, name, cat) ORTEP__TRACE_##id,
  ORTEP_TRACE_MAP(ORTEP__TRACE_ENUM)
#undef ORTEP__TRACE_ENUM
      ORTEP__TRACE_COUNT
} ortep__trace_id;

/* The categories, numbered as NVTX sees them. */
enum { ORTEP__TRACE_CAT_MEMORY = 1, ORTEP__TRACE_CAT_EXECUTOR = 2, ORTEP__TRACE_CAT_DECODE = 3 };

/* The payload of segment ranges: index in the high 32 bits, node count in the low. */
static inline uint64_t ortep__trace_segment_payload(size_t index, size_t nodes) {
  return ((uint64_t)index << 32) | (uint64_t)(nodes & 0xffffffffu);
}

/* The CUDA module (kernels/cuda/module.h) traces nothing itself: the core's
 * executor traces around every call into it. */
#if ORTEP_HAVE_NVTX && !defined(ORTEP_CUDA_MODULE)
#include <stdatomic.h>
/* 0: not initialised yet; 1: a tool is attached; 2: none is. With no tool,
 * every trace call costs one relaxed load and a branch: NVTX's domain
 * handle is NULL then, and we stop calling into NVTX at all. */
extern _Atomic int ortep__trace_state;
#define ORTEP__TRACE_OFF 2
void ortep__trace_push_impl(ortep__trace_id id, uint64_t payload);
void ortep__trace_push_text_impl(const char *text, uint32_t category);
void ortep__trace_pop_impl(void);
void ortep__trace_mark_impl(ortep__trace_id id, uint64_t payload);
void ortep__trace_name_thread_impl(const char *name);
static inline bool ortep__trace_maybe_on(void) {
  return atomic_load_explicit(&ortep__trace_state, memory_order_relaxed) != ORTEP__TRACE_OFF;
}
static inline void ortep__trace_push(ortep__trace_id id, uint64_t payload) {
  if (ortep__trace_maybe_on()) ortep__trace_push_impl(id, payload);
}
/* A range named by a string that lives as long as the trace needs it. */
static inline void ortep__trace_push_text(const char *text, uint32_t category) {
  if (ortep__trace_maybe_on()) ortep__trace_push_text_impl(text, category);
}
static inline void ortep__trace_pop(void) {
  if (ortep__trace_maybe_on()) ortep__trace_pop_impl();
}
static inline void ortep__trace_mark(ortep__trace_id id, uint64_t payload) {
  if (ortep__trace_maybe_on()) ortep__trace_mark_impl(id, payload);
}
/* Names the calling OS thread (once per thread). */
static inline void ortep__trace_name_thread(const char *name) {
  if (ortep__trace_maybe_on()) ortep__trace_name_thread_impl(name);
}
#else
static inline bool ortep__trace_maybe_on(void) { return false; }
static inline void ortep__trace_push(ortep__trace_id id, uint64_t payload) { (void)id, (void)payload; }
static inline void ortep__trace_push_text(const char *text, uint32_t category) { (void)text, (void)category; }
static inline void ortep__trace_pop(void) {}
static inline void ortep__trace_mark(ortep__trace_id id, uint64_t payload) { (void)id, (void)payload; }
static inline void ortep__trace_name_thread(const char *name) { (void)name; }
#endif

#endif
