/* internal.h: what the CPU EP's files share: the kernel factory. */
#ifndef ORTEP_KERNELS_CPU_INTERNAL_H
#define ORTEP_KERNELS_CPU_INTERNAL_H

#include "ops.h"
#include "pool.h"

#define CPU_EP_NAME "cpu_ep"
#define CPU_OP_COST 100

/* Whether the CPU EP runs this node with these inputs; fills out. */
void ortep__cpu_supports(const ortep_node *node, int64_t opset, const ortep_shape *shapes, const ortep_dtype *dtypes,
                         size_t n, ortep_kernel_match *out);
/* A kernel for the node specialised to these shapes (after supports says yes). */
ortep_status ortep__cpu_make_kernel(const ortep_node *node, const ortep_shape *shapes, const ortep_dtype *dtypes,
                                    size_t n, int64_t opset, ortep__cpu_pool *pool, ortep_kernel **out);

#endif
