/*
 * planner.h: the static memory planner. Given tensors with a size, an
 * alignment and a lifetime [first_use, last_use] in execution order, it
 * assigns each an offset in one block such that no two tensors whose
 * lifetimes overlap share a byte. It reports the block's total, the lower
 * bound (the most bytes live at any one step: no plan can be smaller) and the
 * naive sum (every tensor its own memory). ortep_plan_verify proves a plan.
 */
#ifndef ORTEP_PLANNER_H
#define ORTEP_PLANNER_H

#include "ortep/status.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_plan_tensor {
  size_t size;        /* bytes; 0 is allowed and gets offset 0 */
  size_t align;       /* a power of two; 0 -> 1 */
  uint32_t first_use; /* the step that writes it first */
  uint32_t last_use;  /* the last step that reads it (>= first_use) */
} ortep_plan_tensor;

typedef struct ortep_plan_summary {
  size_t total;       /* bytes the block needs */
  size_t lower_bound; /* the most bytes live at one step */
  size_t naive_sum;   /* the sum of every size */
} ortep_plan_summary;

/* Fills offsets[n] and *summary. Deterministic. O(n^2) in the worst case. */
ORTEP_API ortep_status ortep_plan_memory(const ortep_plan_tensor *tensors, size_t n, size_t *offsets,
                                         ortep_plan_summary *summary);
/* ORTEP_OK when every offset is aligned, every tensor fits in total, and no
 * two tensors with overlapping lifetimes overlap in memory; otherwise
 * ORTEP_E_INVALID_ARGUMENT naming the first offending tensor(s). */
ORTEP_API ortep_status ortep_plan_verify(const ortep_plan_tensor *tensors, size_t n, const size_t *offsets,
                                         size_t total);

ORTEP_END_DECLS

#endif
