/*
 * module.h: the contract between the core library and the CUDA EP module
 * (libortep_cuda.so), which the core loads with dlopen only when a CUDA EP
 * is asked for (kernels/cuda_module.c), as ONNX Runtime loads its provider
 * libraries: a program that never asks pays nothing for cudart and cuBLAS.
 *
 * The module does not link the core. The core hands it a table of the core
 * functions it calls (ortep__cuda_host), and the module answers with the
 * table of its entry points (ortep__cuda_module). kernels/cuda/host.c, in the
 * module, defines the core's function names over the host table, so the EP
 * sources read as they would inside the core, and errors, small allocations
 * and governor charges all land in the one copy of the core the program
 * has. The version is checked both ways: a module from another build is
 * refused with a message rather than called through a wrong table.
 */
#ifndef ORTEP_KERNELS_CUDA_MODULE_H
#define ORTEP_KERNELS_CUDA_MODULE_H

#include "arena/internal.h" /* ortep__cuda_pool_create */
#include "kernels/opset.h"
#include "ortep/cuda_ep.h"

/* 5: the shared-mapping vtable's map_prefix takes an offset and a length;
 * the host table's quantize_from */
#define ORTEP__CUDA_MODULE_ABI   5
#define ORTEP__CUDA_MODULE_ENTRY "ortep_cuda_module_init"

typedef struct ortep__cuda_host {
  int abi;
  ortep_status (*fail)(ortep_status status, const char *fmt, ...);
  ortep_status (*wrap)(ortep_status status, const char *fmt, ...);
  void *(*malloc)(size_t size);
  void *(*calloc)(size_t count, size_t size);
  void *(*realloc)(void *ptr, size_t size);
  void (*free)(void *ptr);
  bool (*grow)(void **arr, size_t *cap, size_t need, size_t elem);
  char *(*format_bytes)(uint64_t bytes, char *buf, size_t len);
  bool (*op_check)(const char *ep_name, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                   const ortep_dtype *dtypes, size_t n, ortep_kernel_match *match, ortep__op_params *params);
  ortep_status (*allocator_allocate)(ortep_allocator *a, size_t bytes, size_t align, void **out);
  void (*allocator_deallocate)(ortep_allocator *a, void *ptr, size_t bytes, size_t align);
  void (*allocator_destroy)(ortep_allocator *a);
  ortep_status (*buffer_wrap_owned)(void *ptr, ortep_device device, size_t size, size_t align, ortep_buffer *out);
  ortep_status (*config_check_namespace)(const ortep_config *config, const char *ns, const char *const *known,
                                         size_t n_known);
  const char *(*config_get)(const ortep_config *config, const char *key);
  bool (*device_is_host_accessible)(ortep_device device);
  ortep_status (*governor_charge)(ortep_governor *governor, ortep_tier tier, uint64_t bytes);
  ortep_status (*governor_refund)(ortep_governor *governor, ortep_tier tier, uint64_t bytes);
  const char *(*node_name)(const ortep_node *node);
  const char *(*node_op_type)(const ortep_node *node);
  ortep_status (*quantize_from)(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out);
} ortep__cuda_host;

typedef struct ortep__cuda_module {
  int abi;
  bool (*available)(char *why, size_t len);
  ortep_status (*ep_create)(ortep_governor *governor, ortep_ep **out);
  ortep_status (*pool_create)(int device, void *stream, ortep_governor *governor, ortep_allocator **out);
  ortep_status (*device_info)(int device, ortep_cuda_device_info *out);
  ortep_status (*vmm_create)(int device, ortep_governor *governor, ortep_allocator **out);
} ortep__cuda_module;

/* The module's implementations (ep.c; the pool is arena/cuda_pool.c, the
 * virtual allocator arena/cuda_vmm.c). */
ortep_status ortep__cuda_vmm_create(int device, ortep_governor *governor, ortep_allocator **out);
bool ortep__cuda_available(char *why, size_t len);
ortep_status ortep__cuda_ep_create(ortep_governor *governor, ortep_ep **out);
ortep_status ortep__cuda_device_info(int device, ortep_cuda_device_info *out);

/* The one symbol the module exports. Fills *out and returns true when abi
 * matches; keeps host for every later call. */
typedef bool (*ortep__cuda_module_init_fn)(int abi, const ortep__cuda_host *host, ortep__cuda_module *out);

#endif
