/* internal.h: what the CPU EP's files share: the kernel factory. */
#ifndef ORTEP_KERNELS_CPU_INTERNAL_H
#define ORTEP_KERNELS_CPU_INTERNAL_H

#include "ortep/backend_impl.h"
#include "ops.h"
#include "pool.h"

#define CPU_EP_NAME "cpu_ep"
#define CPU_OP_COST 100

/* Whether the CPU EP runs this node with these inputs; fills out. */
void ortep__cpu_supports(const ortep_node *node, int64_t opset, const ortep_shape *shapes, const ortep_dtype *dtypes,
                         size_t n, ortep_kernel_match *out);
/* A kernel for the node specialised to these shapes (after supports says
 * yes); bf16_products: cpu.products lets a node over many rows of bf16
 * blocked weights round them to bf16 (simd_rows.h). */
ortep_status ortep__cpu_make_kernel(const ortep_node *node, const ortep_shape *shapes, const ortep_dtype *dtypes,
                                    size_t n, int64_t opset, ortep__cpu_pool *pool, bool bf16_products,
                                    ortep_kernel **out);

/* The argmax of x (f32, or f16 when x32 is NULL) over the pool's workers:
 * the first maximum among the finite values (0 when there is none); *bad:
 * a NaN or infinity was seen. Bitwise the same token for any thread count. */
uint32_t ortep__cpu_pool_argmax(ortep__cpu_pool *pool, const float *x32, const uint16_t *x16, size_t n, bool *bad);

/* The EP's context (context.c): what it prepared, and what a loaded blob
 * serves. */
typedef struct ortep__cpu_context ortep__cpu_context;
ortep_status ortep__cpu_context_create(ortep__cpu_context **out);
void ortep__cpu_context_destroy(ortep__cpu_context *c);
ortep_status ortep__cpu_context_record(ortep__cpu_context *c, const ortep_initializer *in, ortep_dtype dtype,
                                       const ortep_shape *shape, const void *ptr, size_t bytes);
void ortep__cpu_context_forget(ortep__cpu_context *c, const void *ptr);
/* A loaded entry prepared from in's source in exactly the form given
 * (dtype, shape, bytes): its bytes (*ptr). One from that source in another
 * form (a file edited to another shape of the same bytes) is dropped: not
 * served, not saved again. */
bool ortep__cpu_context_lookup(ortep__cpu_context *c, const ortep_initializer *in, ortep_dtype dtype,
                               const ortep_shape *shape, size_t bytes, const void **ptr);
ortep_status ortep__cpu_context_save(ortep__cpu_context *c, const char *keys, ortep_context_write_fn write, void *ctx,
                                     size_t *len);
ortep_status ortep__cpu_context_load(ortep__cpu_context *c, const char *keys, const void *blob, size_t len);

#endif
