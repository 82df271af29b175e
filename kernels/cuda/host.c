/*
 * host.c (in libortep_cuda.so only): the core functions the CUDA EP calls,
 * defined over the table the core hands over at load time (module.h), and
 * the module's one exported entry point. Everything here is hidden but the
 * entry: the core's own definitions of these names, in the program, never
 * collide with them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/internal.h"
#include "ortep/cuda_ep.h"
#include "module.h"

static const ortep__cuda_host *H;

/* The message is formatted here and handed over whole. */
ortep_status ortep__fail(ortep_status status, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return H->fail(status, "%s", buf);
}
ortep_status ortep__wrap(ortep_status status, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return H->wrap(status, "%s", buf);
}
/* The module's own, as the core's (status.c): a broken invariant is a bug,
 * and the process stops before memory is corrupted. */
void ortep__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr,
          "ortep (CUDA module): internal invariant failed: %s (%s:%d); this is a bug in ortep, please report it\n",
          expr, file, line);
  abort();
}
void *ortep__malloc(size_t size) { return H->malloc(size); }
void *ortep__calloc(size_t count, size_t size) { return H->calloc(count, size); }
void *ortep__realloc(void *ptr, size_t size) { return H->realloc(ptr, size); }
void ortep__free(void *ptr) { H->free(ptr); }
bool ortep__grow(void **arr, size_t *cap, size_t need, size_t elem) { return H->grow(arr, cap, need, elem); }
char *ortep__format_bytes(uint64_t bytes, char *buf, size_t len) { return H->format_bytes(bytes, buf, len); }
bool ortep__op_check(const char *ep_name, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                     const ortep_dtype *dtypes, size_t n, ortep_kernel_match *match, ortep__op_params *params) {
  return H->op_check(ep_name, node, opset, shapes, dtypes, n, match, params);
}
ortep_status ortep_allocator_allocate(ortep_allocator *a, size_t bytes, size_t align, void **out) {
  return H->allocator_allocate(a, bytes, align, out);
}
void ortep_allocator_deallocate(ortep_allocator *a, void *ptr, size_t bytes, size_t align) {
  H->allocator_deallocate(a, ptr, bytes, align);
}
void ortep_allocator_destroy(ortep_allocator *a) { H->allocator_destroy(a); }
ortep_status ortep_buffer_wrap_owned(void *ptr, ortep_device device, size_t size, size_t align, ortep_buffer *out) {
  return H->buffer_wrap_owned(ptr, device, size, align, out);
}
ortep_status ortep_config_check_namespace(const ortep_config *config, const char *ns, const char *const *known,
                                          size_t n) {
  return H->config_check_namespace(config, ns, known, n);
}
const char *ortep_config_get(const ortep_config *config, const char *key) { return H->config_get(config, key); }
bool ortep_device_is_host_accessible(ortep_device device) { return H->device_is_host_accessible(device); }
ortep_status ortep_governor_charge(ortep_governor *g, ortep_tier tier, uint64_t bytes) {
  return H->governor_charge(g, tier, bytes);
}
ortep_status ortep_governor_refund(ortep_governor *g, ortep_tier tier, uint64_t bytes) {
  return H->governor_refund(g, tier, bytes);
}
const char *ortep_node_name(const ortep_node *node) { return H->node_name(node); }
const char *ortep_node_op_type(const ortep_node *node) { return H->node_op_type(node); }
ortep_status ortep__quantize_from(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out) {
  return H->quantize_from(from, x, n, to, out);
}

__attribute__((visibility("default"))) bool ortep_cuda_module_init(int abi, const ortep__cuda_host *host,
                                                                   ortep__cuda_module *out);
bool ortep_cuda_module_init(int abi, const ortep__cuda_host *host, ortep__cuda_module *out) {
  if (abi != ORTEP__CUDA_MODULE_ABI || !host || host->abi != ORTEP__CUDA_MODULE_ABI || !out) return false;
  H = host;
  *out = (ortep__cuda_module){ORTEP__CUDA_MODULE_ABI,  ortep__cuda_available,   ortep__cuda_ep_create,
                              ortep__cuda_pool_create, ortep__cuda_device_info, ortep__cuda_vmm_create};
  return true;
}
