/*
 * planner.c: offsets for tensors with known lifetimes, in one block.
 *
 * The placement is the "greedy by size" strategy of TFLite's and ONNX
 * Runtime's static planners, with best fit: take tensors in some order, and
 * put each into the smallest gap, among the tensors already placed whose
 * lifetimes overlap it, that holds it; when no gap does, put it above them
 * all. The order matters, and no single order wins on every workload, so the
 * planner tries three (by size; by size x lifetime; by first use, then size)
 * and keeps the smallest block. Each try is O(n^2); the result is
 * deterministic.
 *
 * The lower bound is exact for what it claims: the most bytes live at any one
 * step. No plan can be smaller, so total / lower_bound measures the plan.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t align_of(const ortep_plan_tensor *t) { return t->align ? t->align : 1; }

static bool lifetimes_overlap(const ortep_plan_tensor *a, const ortep_plan_tensor *b) {
  return a->first_use <= b->last_use && b->first_use <= a->last_use;
}

static ortep_status check_input(const char *who, const ortep_plan_tensor *t, size_t n) {
  if (n && !t) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: tensors is NULL but n is %zu", who, n);
  for (size_t i = 0; i < n; i++) {
    if (t[i].align && !ortep__is_pow2(t[i].align))
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: tensor %zu: alignment %zu is not a power of two", who, i,
                         t[i].align);
    if (t[i].last_use < t[i].first_use)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "%s: tensor %zu: last_use %u is before first_use %u; a lifetime is [first_use, last_use]", who,
                         i, t[i].last_use, t[i].first_use);
    size_t r;
    if (!ortep__align_up(t[i].size, align_of(&t[i]), &r))
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: tensor %zu: size %zu overflows", who, i, t[i].size);
  }
  return ORTEP_OK;
}

typedef struct event {
  uint64_t time; /* 2*step for an end (step = last_use + 1), 2*step + 1 for a start */
  size_t size;
} event;

static int cmp_event(const void *a, const void *b) {
  const event *x = a, *y = b;
  return x->time < y->time ? -1 : x->time > y->time;
}

/* The lower bound and naive sum alone (total left 0). */
static ortep_status plan_bounds(const ortep_plan_tensor *t, size_t n, ortep_plan_summary *summary) {
  if (!summary) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_plan_memory: summary is NULL");
  *summary = (ortep_plan_summary){0};
  ortep_status st = check_input("ortep_plan_memory", t, n);
  if (st != ORTEP_OK) return st;
  if (n == 0) return ORTEP_OK;
  event *ev = ortep__malloc(2 * n * sizeof *ev);
  if (!ev) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_plan_memory: no memory for %zu events", 2 * n);
  size_t naive = 0;
  for (size_t i = 0; i < n; i++) {
    /* Ends sort before starts at the same step: a tensor whose last use is
     * step s does not share memory pressure with one first used at s + 1. */
    ev[2 * i] = (event){2 * (uint64_t)t[i].first_use + 1, t[i].size};
    ev[2 * i + 1] = (event){2 * ((uint64_t)t[i].last_use + 1), t[i].size};
    naive += t[i].size;
  }
  qsort(ev, 2 * n, sizeof *ev, cmp_event);
  size_t live = 0, peak = 0;
  for (size_t i = 0; i < 2 * n; i++) {
    if (ev[i].time & 1) {
      live += ev[i].size;
      if (live > peak) peak = live;
    } else {
      live -= ev[i].size;
    }
  }
  ortep__free(ev);
  summary->lower_bound = peak;
  summary->naive_sum = naive;
  return ORTEP_OK;
}

/* --- greedy placement under one order ------------------------------------ */

typedef enum order_kind { ORDER_SIZE, ORDER_AREA, ORDER_FIRST_USE, ORDER_COUNT } order_kind;

typedef struct sort_ctx {
  const ortep_plan_tensor *t;
  order_kind kind;
} sort_ctx;

static _Thread_local sort_ctx g_sort; /* qsort has no context argument in C17 */

static int cmp_order(const void *pa, const void *pb) {
  size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
  const ortep_plan_tensor *x = &g_sort.t[a], *y = &g_sort.t[b];
  unsigned __int128 kx = 0, ky = 0;
  switch (g_sort.kind) {
    case ORDER_SIZE: kx = x->size, ky = y->size; break;
    case ORDER_AREA:
      kx = (unsigned __int128)x->size * (x->last_use - x->first_use + 1u);
      ky = (unsigned __int128)y->size * (y->last_use - y->first_use + 1u);
      break;
    case ORDER_FIRST_USE:
      if (x->first_use != y->first_use) return x->first_use < y->first_use ? -1 : 1;
      kx = x->size, ky = y->size;
      break;
    case ORDER_COUNT: break;
  }
  if (kx != ky) return kx > ky ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* placed[0..np) holds indices sorted by offset. */
static size_t place_all(const ortep_plan_tensor *t, size_t n, const size_t *order, size_t *offsets, size_t *placed) {
  size_t np = 0, total = 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = order[k];
    size_t align = align_of(&t[i]);
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, top = 0;
    if (t[i].size == 0) {
      offsets[i] = 0;
      continue;
    }
    for (size_t q = 0; q < np; q++) {
      size_t j = placed[q];
      if (!lifetimes_overlap(&t[i], &t[j])) continue;
      size_t start = top;
      ortep__align_up(top, align, &start);
      if (offsets[j] >= start) {
        size_t gap = offsets[j] - start;
        if (gap >= t[i].size && gap < best_gap) {
          best_gap = gap;
          best = start;
        }
      }
      size_t end = offsets[j] + t[j].size;
      if (end > top) top = end;
    }
    if (best == SIZE_MAX) {
      best = top;
      ortep__align_up(top, align, &best);
    }
    ortep__assert(best % align == 0);
    offsets[i] = best;
    if (best + t[i].size > total) total = best + t[i].size;
    /* Insert into the offset-sorted list. */
    size_t at = np;
    while (at > 0 && offsets[placed[at - 1]] > best) at--;
    memmove(&placed[at + 1], &placed[at], (np - at) * sizeof *placed);
    placed[at] = i;
    np++;
  }
  return total;
}

ortep_status ortep_plan_memory(const ortep_plan_tensor *t, size_t n, size_t *offsets, ortep_plan_summary *summary) {
  if (!summary || (n && !offsets))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_plan_memory: %s is NULL", summary ? "offsets" : "summary");
  ortep_status st = plan_bounds(t, n, summary);
  if (st != ORTEP_OK) return st;
  if (n == 0) return ORTEP_OK;
  size_t *order = ortep__malloc(n * sizeof *order);
  size_t *placed = ortep__malloc(n * sizeof *placed);
  size_t *trial = ortep__malloc(n * sizeof *trial);
  if (!order || !placed || !trial) {
    ortep__free(order), ortep__free(placed), ortep__free(trial);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_plan_memory: no memory to plan %zu tensors", n);
  }
  size_t best_total = SIZE_MAX;
  for (int kind = 0; kind < ORDER_COUNT; kind++) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    g_sort = (sort_ctx){t, (order_kind)kind};
    qsort(order, n, sizeof *order, cmp_order);
    size_t total = place_all(t, n, order, trial, placed);
    if (total < best_total) {
      best_total = total;
      memcpy(offsets, trial, n * sizeof *offsets);
    }
  }
  ortep__free(order), ortep__free(placed), ortep__free(trial);
  summary->total = best_total;
  ortep__assert(best_total >= summary->lower_bound); /* no plan beats the bound (plan_bounds) */
  ortep__assert_expensive(ortep_plan_verify(t, n, offsets, best_total) == ORTEP_OK);
  return ORTEP_OK;
}

ortep_status ortep_plan_verify(const ortep_plan_tensor *t, size_t n, const size_t *offsets, size_t total) {
  ortep_status st = check_input("ortep_plan_verify", t, n);
  if (st != ORTEP_OK) return st;
  if (n && !offsets) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_plan_verify: offsets is NULL");
  for (size_t i = 0; i < n; i++) {
    if (offsets[i] % align_of(&t[i]) != 0)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "plan: tensor %zu at offset %zu is not aligned to %zu", i,
                         offsets[i], align_of(&t[i]));
    if (offsets[i] > total || t[i].size > total - offsets[i])
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "plan: tensor %zu [%zu, +%zu) runs past the block's %zu bytes", i,
                         offsets[i], t[i].size, total);
  }
  for (size_t i = 0; i < n; i++) {
    if (t[i].size == 0) continue;
    for (size_t j = i + 1; j < n; j++) {
      if (t[j].size == 0 || !lifetimes_overlap(&t[i], &t[j])) continue;
      if (offsets[i] < offsets[j] + t[j].size && offsets[j] < offsets[i] + t[i].size)
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                           "plan: tensors %zu [%zu, +%zu) steps %u..%u and %zu [%zu, +%zu) steps %u..%u are live "
                           "together and overlap in memory",
                           i, offsets[i], t[i].size, t[i].first_use, t[i].last_use, j, offsets[j], t[j].size,
                           t[j].first_use, t[j].last_use);
    }
  }
  return ORTEP_OK;
}
