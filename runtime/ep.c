/*
 * ep.c: dispatch for the execution-provider contract (ep.h), the
 * namespaced configuration, and the EP registry. Every optional vtable entry
 * left NULL gets its default here (host copies with bounds checks,
 * "not supported" naming the EP for what it lacks), so an EP implements only
 * what it really does.
 */
#include <stdio.h>
#include <string.h>

#include "strmap.h"
#include "ortep/ep.h"

/* --- configuration ---------------------------------------------------------- */
struct ortep_config {
  struct config_item {
    char *key, *val;
  } * items;
  size_t n, cap;
};

ortep_status ortep_config_create(ortep_config **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_config_create: out is NULL");
  *out = ortep__calloc(1, sizeof **out);
  return *out ? ORTEP_OK : ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_config_create: no memory");
}

void ortep_config_destroy(ortep_config *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) ortep__free(c->items[i].key), ortep__free(c->items[i].val);
  ortep__free(c->items), ortep__free(c);
}

ortep_status ortep_config_set(ortep_config *c, const char *key, const char *value) {
  if (!c || !key || !value) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_config_set: NULL argument");
  const char *dot = strchr(key, '.');
  if (!dot || dot == key || !dot[1])
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "configuration key '%s' is not namespaced; use 'namespace.name' (e.g. cpu.threads)", key);
  char *v = ortep__strdup(value);
  if (!v) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_config_set: no memory");
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->items[i].key, key) == 0) {
      ortep__free(c->items[i].val);
      c->items[i].val = v;
      return ORTEP_OK;
    }
  if (!ORTEP__GROW(c->items, c->cap, c->n + 1)) {
    ortep__free(v);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_config_set: no memory");
  }
  char *k = ortep__strdup(key);
  if (!k) {
    ortep__free(v);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_config_set: no memory");
  }
  c->items[c->n++] = (struct config_item){k, v};
  return ORTEP_OK;
}

const char *ortep_config_get(const ortep_config *c, const char *key) {
  for (size_t i = 0; c && key && i < c->n; i++)
    if (strcmp(c->items[i].key, key) == 0) return c->items[i].val;
  return NULL;
}
size_t ortep_config_count(const ortep_config *c) { return c ? c->n : 0; }
const char *ortep_config_key(const ortep_config *c, size_t i) { return c && i < c->n ? c->items[i].key : NULL; }

ortep_status ortep_config_check_namespace(const ortep_config *c, const char *ns, const char *const *known, size_t n) {
  size_t nl = strlen(ns);
  for (size_t i = 0; c && i < c->n; i++) {
    const char *k = c->items[i].key;
    if (strncmp(k, ns, nl) != 0 || k[nl] != '.') continue;
    bool ok = false;
    for (size_t j = 0; j < n && !ok; j++) ok = strcmp(k, known[j]) == 0;
    if (ok) continue;
    char list[512] = "";
    size_t used = 0;
    for (size_t j = 0; j < n && used < sizeof list; j++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "", known[j]);
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "unknown option '%s' for the %s EP; known options: %s", k, ns,
                       n ? list : "(none)");
  }
  return ORTEP_OK;
}

/* --- kernels ---------------------------------------------------------------- */
const char *ortep_kernel_name(const ortep_kernel *k) { return k && k->name ? k->name : "kernel"; }
bool ortep_kernel_is_capturable(const ortep_kernel *k) { return k && k->capturable; }
void ortep_kernel_destroy(ortep_kernel *k) {
  if (k && k->vtable->destroy) k->vtable->destroy(k);
}

/* --- dispatch ---------------------------------------------------------------- */
#define NEED_EP(ep, fn) \
  if (!(ep)) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, fn ": the EP is NULL")

const char *ortep_ep_name(const ortep_ep *ep) { return ep && ep->vtable->name ? ep->vtable->name : "ep"; }
ortep_device ortep_ep_device(const ortep_ep *ep) { return ep ? ep->device : ortep_device_cpu(); }
uint32_t ortep_ep_id(const ortep_ep *ep) { return ep ? ep->id : 0; }

ortep_ep_capabilities ortep_ep_get_capabilities(const ortep_ep *ep) {
  if (ep && ep->vtable->capabilities) return ep->vtable->capabilities(ep);
  return (ortep_ep_capabilities){false, false, ep && ortep_device_is_host_accessible(ep->device), false};
}

ortep_status ortep_ep_initialize(ortep_ep *ep, const ortep_config *config) {
  NEED_EP(ep, "ortep_ep_initialize");
  return ep->vtable->initialize(ep, config);
}
ortep_status ortep_ep_shutdown(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_shutdown");
  return ep->vtable->shutdown(ep);
}
void ortep_ep_destroy(ortep_ep *ep) {
  if (ep) ep->vtable->destroy(ep);
}

void ortep_ep_supports_op(const ortep_ep *ep, const ortep_node *node, int64_t opset, const ortep_shape *shapes,
                          const ortep_dtype *dtypes, size_t n, ortep_kernel_match *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!ep || !node || (n && (!shapes || !dtypes))) {
    snprintf(out->reason, sizeof out->reason, "supports_op: EP, node, shapes and dtypes are required");
    return;
  }
  ep->vtable->supports_op(ep, node, opset, shapes, dtypes, n, out);
  /* the contract: never a bare decline. The caller names the node (the
   * session prefixes every reason with it), so the EP alone is named here:
   * the dispatcher need not know the IR beyond its opaque handle. */
  if (!out->supported && !out->reason[0])
    snprintf(out->reason, sizeof out->reason, "%s declined it without a reason (a bug in that EP)", ortep_ep_name(ep));
}

ortep_status ortep_ep_get_kernel(ortep_ep *ep, const ortep_node *node, const ortep_shape *shapes,
                                 const ortep_dtype *dtypes, size_t n, int64_t opset, ortep_kernel **out) {
  NEED_EP(ep, "ortep_ep_get_kernel");
  if (!node || !out || (n && (!shapes || !dtypes)))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_ep_get_kernel: node, shapes, dtypes and out are required");
  *out = NULL;
  return ep->vtable->get_kernel(ep, node, shapes, dtypes, n, opset, out);
}

ortep_status ortep_ep_run_kernel(ortep_ep *ep, ortep_kernel *k, const ortep_kernel_io *io) {
  if (!ep || !k || !io)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_ep_run_kernel: %s is NULL",
                       !ep  ? "the EP"
                       : !k ? "the kernel"
                            : "io");
  if (ep->vtable->run_kernel) return ep->vtable->run_kernel(ep, k, io);
  return k->vtable->run(k, io);
}

static ortep_status check_own(const ortep_ep *ep, const ortep_buffer *b, const char *what) {
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: %s: the buffer is NULL", ortep_ep_name(ep), what);
  if (b->ptr && !ortep_device_equal(b->device, ep->device)) {
    char a[32], c[32];
    return ortep__fail(ORTEP_E_WRONG_DEVICE,
                       "%s: %s: the buffer lives on %s but this EP is on %s; hand it to its own EP", ortep_ep_name(ep),
                       what, ortep_device_format(b->device, a, sizeof a), ortep_device_format(ep->device, c, sizeof c));
  }
  return ORTEP_OK;
}

ortep_status ortep_ep_allocate(ortep_ep *ep, size_t size, size_t align, ortep_buffer *out) {
  NEED_EP(ep, "ortep_ep_allocate");
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: allocate: out is NULL", ortep_ep_name(ep));
  memset(out, 0, sizeof *out);
  ortep_status st = ortep_allocation_request_check(ortep_ep_name(ep), size, align);
  if (st != ORTEP_OK) return st;
  return ep->vtable->allocate(ep, size, align, out);
}

ortep_status ortep_ep_deallocate(ortep_ep *ep, ortep_buffer *b) {
  NEED_EP(ep, "ortep_ep_deallocate");
  ortep_status st = check_own(ep, b, "deallocate");
  if (st != ORTEP_OK) return st;
  if (!b->ptr) return ORTEP_OK; /* an already-consumed handle */
  if (ortep_buffer_is_borrowed(b)) {
    memset(b, 0, sizeof *b); /* a borrowed buffer is a no-op free */
    return ORTEP_OK;
  }
  st = ep->vtable->deallocate(ep, b);
  if (st == ORTEP_OK) memset(b, 0, sizeof *b);
  return st;
}

/* An EP copies between its own device and host memory: anything else is
 * another EP's business. */
static ortep_status check_reachable(const ortep_ep *ep, const ortep_buffer *b, const char *what) {
  if (ortep_device_equal(b->device, ep->device) || ortep_device_is_host_accessible(b->device)) return ORTEP_OK;
  char a[32], c[32];
  return ortep__fail(ORTEP_E_WRONG_DEVICE,
                     "%s: %s buffer lives on %s, which this EP (on %s) cannot reach; copy through that device's EP",
                     ortep_ep_name(ep), what, ortep_device_format(b->device, a, sizeof a),
                     ortep_device_format(ep->device, c, sizeof c));
}

ortep_status ortep_ep_copy(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size) {
  NEED_EP(ep, "ortep_ep_copy");
  if (!src || !dst) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: copy: NULL buffer", ortep_ep_name(ep));
  ortep_status st;
  if ((st = check_reachable(ep, src, "copy: the source")) != ORTEP_OK ||
      (st = check_reachable(ep, dst, "copy: the destination")) != ORTEP_OK)
    return st;
  if (size > src->size || size > dst->size)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: copy of %zu bytes exceeds the %s (%zu bytes)", ortep_ep_name(ep),
                       size, size > src->size ? "source" : "destination", size > src->size ? src->size : dst->size);
  if (dst->owner == ORTEP_BUFFER_BORROWED)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: copy into a read-only borrowed buffer", ortep_ep_name(ep));
  return ep->vtable->copy(ep, src, dst, size);
}

ortep_status ortep_ep_copy_async(ortep_ep *ep, const ortep_buffer *src, ortep_buffer *dst, size_t size,
                                 ortep_fence *out) {
  NEED_EP(ep, "ortep_ep_copy_async");
  if (!src || !dst || !out)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: copy_async: NULL argument", ortep_ep_name(ep));
  ortep_status st;
  if ((st = check_reachable(ep, src, "async copy: the source")) != ORTEP_OK ||
      (st = check_reachable(ep, dst, "async copy: the destination")))
    return st;
  if (size > src->size || size > dst->size)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: async copy of %zu bytes exceeds the %s (%zu bytes)",
                       ortep_ep_name(ep), size, size > src->size ? "source" : "destination",
                       size > src->size ? src->size : dst->size);
  return ep->vtable->copy_async(ep, src, dst, size, out);
}

ortep_status ortep_ep_fence_wait(ortep_ep *ep, ortep_fence *fence) {
  NEED_EP(ep, "ortep_ep_fence_wait");
  if (!fence) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: fence_wait: fence is NULL", ortep_ep_name(ep));
  return ep->vtable->fence_wait(ep, fence);
}

/* The one check of every host copy, before any EP sees it: the arguments,
 * the buffer's device, the range (without overflow), and for an upload a
 * writable destination. An EP's copy entries may assume all of it. */
static ortep_status check_host_copy(const ortep_ep *ep, const char *what, const ortep_buffer *b, const void *host,
                                    size_t offset, size_t len, bool upload) {
  if (!b || (len && !host))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: %s: NULL argument", ortep_ep_name(ep), what);
  ortep_status st = check_own(ep, b, what);
  if (st != ORTEP_OK) return st;
  const char *side = upload ? "destination" : "source";
  if (offset > SIZE_MAX - len)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: %s range overflows (offset %zu + %zu bytes)", ortep_ep_name(ep), what,
                       offset, len);
  if (offset + len > b->size && offset == 0)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: %s of %zu bytes exceeds %s %zu bytes", ortep_ep_name(ep), what, len,
                       side, b->size);
  if (offset + len > b->size)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: %s range %zu..%zu exceeds %s %zu bytes", ortep_ep_name(ep), what,
                       offset, offset + len, side, b->size);
  if (upload && len && b->owner == ORTEP_BUFFER_BORROWED)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: %s into a read-only borrowed buffer", ortep_ep_name(ep), what);
  return ORTEP_OK;
}

/* The default of the four copy entries: memcpy, for host-accessible memory. */
static ortep_status host_memcpy(const ortep_ep *ep, const char *what, const ortep_buffer *b, void *to, const void *from,
                                size_t len) {
  char d[32];
  if (!ortep_device_is_host_accessible(b->device))
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: %s is not implemented for device %s", ortep_ep_name(ep), what,
                       ortep_device_format(b->device, d, sizeof d));
  if (len) memcpy(to, from, len);
  return ORTEP_OK;
}

ortep_status ortep_ep_copy_from_host(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst) {
  NEED_EP(ep, "ortep_ep_copy_from_host");
  ortep_status st = check_host_copy(ep, "host upload", dst, src, 0, len, true);
  if (st != ORTEP_OK) return st;
  if (ep->vtable->copy_from_host) return ep->vtable->copy_from_host(ep, src, len, dst);
  return host_memcpy(ep, "host upload", dst, dst->ptr, src, len);
}

ortep_status ortep_ep_copy_from_host_at(ortep_ep *ep, const void *src, size_t len, ortep_buffer *dst, size_t offset) {
  NEED_EP(ep, "ortep_ep_copy_from_host_at");
  ortep_status st = check_host_copy(ep, "host upload", dst, src, offset, len, true);
  if (st != ORTEP_OK) return st;
  if (ep->vtable->copy_from_host_at) return ep->vtable->copy_from_host_at(ep, src, len, dst, offset);
  return host_memcpy(ep, "ranged host upload", dst, (unsigned char *)dst->ptr + offset, src, len);
}

ortep_status ortep_ep_copy_to_host(ortep_ep *ep, const ortep_buffer *src, void *dst, size_t len) {
  NEED_EP(ep, "ortep_ep_copy_to_host");
  ortep_status st = check_host_copy(ep, "host download", src, dst, 0, len, false);
  if (st != ORTEP_OK) return st;
  if (ep->vtable->copy_to_host) return ep->vtable->copy_to_host(ep, src, dst, len);
  return host_memcpy(ep, "host download", src, dst, src->ptr, len);
}

ortep_status ortep_ep_copy_to_host_at(ortep_ep *ep, const ortep_buffer *src, size_t offset, void *dst, size_t len) {
  NEED_EP(ep, "ortep_ep_copy_to_host_at");
  ortep_status st = check_host_copy(ep, "host download", src, dst, offset, len, false);
  if (st != ORTEP_OK) return st;
  if (ep->vtable->copy_to_host_at) return ep->vtable->copy_to_host_at(ep, src, offset, dst, len);
  return host_memcpy(ep, "ranged host download", src, dst, (const unsigned char *)src->ptr + offset, len);
}

ortep_status ortep_ep_sync(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_sync");
  return ep->vtable->sync(ep);
}

ortep_status ortep_ep_device_argmax(ortep_ep *ep, const void *logits, size_t elements, ortep_dtype dtype,
                                    ortep_buffer *result) {
  NEED_EP(ep, "ortep_ep_device_argmax");
  if (!ep->vtable->device_argmax)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: device argmax is not supported", ortep_ep_name(ep));
  if (!logits || !result || elements == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: device argmax needs logits, at least one element and a result",
                       ortep_ep_name(ep));
  if (dtype != ORTEP_DTYPE_F32 && dtype != ORTEP_DTYPE_F16)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: device argmax takes f32 or f16 logits, not %s", ortep_ep_name(ep),
                       ortep_dtype_name(dtype));
  if (elements > UINT32_MAX)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: device argmax over %zu elements: token ids are u32",
                       ortep_ep_name(ep), elements);
  ortep_status st = check_own(ep, result, "device argmax");
  if (st != ORTEP_OK) return st;
  if (result->size < 8 || !ortep_buffer_data_mut(result))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: device argmax needs a writable 8-byte result buffer (token id, error word); got %zu bytes",
                       ortep_ep_name(ep), result->size);
  return ep->vtable->device_argmax(ep, logits, elements, dtype, result);
}

ortep_status ortep_ep_device_sample(ortep_ep *ep, const void *logits, size_t elements, ortep_dtype dtype,
                                    const void *params, const int32_t *history, ortep_buffer *result) {
  NEED_EP(ep, "ortep_ep_device_sample");
  if (!ep->vtable->device_sample)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: device sampling is not supported; decode greedily (temperature 0)",
                       ortep_ep_name(ep));
  if (!logits || !params || !result || elements == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "%s: device sampling needs logits, at least one element, parameters and a result",
                       ortep_ep_name(ep));
  if (dtype != ORTEP_DTYPE_F32 && dtype != ORTEP_DTYPE_F16)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: device sampling takes f32 or f16 logits, not %s", ortep_ep_name(ep),
                       ortep_dtype_name(dtype));
  if (elements > UINT32_MAX)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: device sampling over %zu elements: token ids are u32",
                       ortep_ep_name(ep), elements);
  ortep_status st = check_own(ep, result, "device sampling");
  if (st != ORTEP_OK) return st;
  if (result->size < 8 || !ortep_buffer_data_mut(result))
    return ortep__fail(
        ORTEP_E_INVALID_ARGUMENT,
        "%s: device sampling needs a writable 8-byte result buffer (token id, error word); got %zu bytes",
        ortep_ep_name(ep), result->size);
  return ep->vtable->device_sample(ep, logits, elements, dtype, params, history, result);
}

#define GRAPH_DEFAULT(entry, what) \
  if (!ep->vtable->entry) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: " what " is not supported", ortep_ep_name(ep))

ortep_status ortep_ep_begin_capture(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_begin_capture");
  GRAPH_DEFAULT(begin_capture, "device graph capture");
  if (ortep_ep_capture_active(ep))
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE, "%s: a capture is already open; end or abort it first",
                       ortep_ep_name(ep));
  return ep->vtable->begin_capture(ep);
}
ortep_status ortep_ep_end_capture(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_end_capture");
  GRAPH_DEFAULT(end_capture, "device graph capture");
  if (!ortep_ep_capture_active(ep))
    return ortep__fail(ORTEP_E_STATE, "%s: end_capture without begin_capture", ortep_ep_name(ep));
  return ep->vtable->end_capture(ep);
}
ortep_status ortep_ep_abort_capture(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_abort_capture");
  return ep->vtable->abort_capture ? ep->vtable->abort_capture(ep) : ORTEP_OK;
}
ortep_status ortep_ep_replay(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_replay");
  GRAPH_DEFAULT(replay, "device graph replay");
  if (ortep_ep_capture_active(ep))
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE, "%s: replay while a capture is open", ortep_ep_name(ep));
  return ep->vtable->replay(ep);
}
/* What replaying segment `index` needs: no capture open, the segment there. */
static ortep_status segment_ready(ortep_ep *ep, size_t index) {
  if (ortep_ep_capture_active(ep))
    return ortep__fail(ORTEP_E_CAPTURE_ACTIVE, "%s: replay while a capture is open", ortep_ep_name(ep));
  size_t have = ortep_ep_segment_count(ep);
  if (index >= have)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: segment %zu does not exist (%zu captured)", ortep_ep_name(ep), index,
                       have);
  return ORTEP_OK;
}
ortep_status ortep_ep_replay_segment(ortep_ep *ep, size_t index) {
  NEED_EP(ep, "ortep_ep_replay_segment");
  GRAPH_DEFAULT(replay_segment, "segmented device graph replay");
  ortep_status st = segment_ready(ep, index);
  return st == ORTEP_OK ? ep->vtable->replay_segment(ep, index) : st;
}
ortep_status ortep_ep_replay_segment_while(ortep_ep *ep, size_t index, const int32_t *flag, size_t max_iterations) {
  NEED_EP(ep, "ortep_ep_replay_segment_while");
  GRAPH_DEFAULT(replay_segment_while, "replaying a device graph in a loop");
  if (!flag || !max_iterations)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: replay_segment_while: %s", ortep_ep_name(ep),
                       flag ? "max_iterations is 0; give at least 1" : "the flag is NULL");
  ortep_status st = segment_ready(ep, index);
  return st == ORTEP_OK ? ep->vtable->replay_segment_while(ep, index, flag, max_iterations) : st;
}
ortep_status ortep_ep_reset_graph(ortep_ep *ep, bool *had_graph) {
  NEED_EP(ep, "ortep_ep_reset_graph");
  if (!ep->vtable->reset_graph) {
    if (had_graph) *had_graph = false;
    return ORTEP_OK;
  }
  bool dummy;
  return ep->vtable->reset_graph(ep, had_graph ? had_graph : &dummy);
}
size_t ortep_ep_segment_count(const ortep_ep *ep) {
  return ep && ep->vtable->segment_count ? ep->vtable->segment_count(ep) : 0;
}
bool ortep_ep_capture_active(const ortep_ep *ep) {
  return ep && ep->vtable->capture_active && ep->vtable->capture_active(ep);
}
ortep_status ortep_ep_check_error_word(ortep_ep *ep, uint32_t *bits) {
  NEED_EP(ep, "ortep_ep_check_error_word");
  if (!bits) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: check_error_word: bits is NULL", ortep_ep_name(ep));
  if (!ep->vtable->check_error_word) return *bits = 0, ORTEP_OK;
  return ep->vtable->check_error_word(ep, bits);
}
ortep_status ortep_ep_reset_error_word(ortep_ep *ep) {
  NEED_EP(ep, "ortep_ep_reset_error_word");
  return ep->vtable->reset_error_word ? ep->vtable->reset_error_word(ep) : ORTEP_OK;
}
uint32_t *ortep_ep_error_word_ptr(ortep_ep *ep) {
  return ep && ep->vtable->error_word_ptr ? ep->vtable->error_word_ptr(ep) : NULL;
}
bool ortep_ep_allocation_counts(const ortep_ep *ep, uint64_t *a, uint64_t *f) {
  return ep && ep->vtable->allocation_counts && ep->vtable->allocation_counts(ep, a, f);
}
void ortep_ep_graph_counts(const ortep_ep *ep, uint64_t *instantiations, uint64_t *updates) {
  uint64_t i = 0, u = 0;
  if (ep && ep->vtable->graph_counts) ep->vtable->graph_counts(ep, &i, &u);
  if (instantiations) *instantiations = i;
  if (updates) *updates = u;
}
size_t ortep_ep_graph_kernel_nodes(const ortep_ep *ep) {
  return ep && ep->vtable->graph_kernel_nodes ? ep->vtable->graph_kernel_nodes(ep) : 0;
}
bool ortep_ep_prepares_initializers(const ortep_ep *ep) { return ep && ep->vtable->prepare_initializer; }

ortep_status ortep_ep_prepare_initializer(ortep_ep *ep, const ortep_initializer *init, ortep_dtype *dtype,
                                          ortep_shape *shape, ortep_buffer *out) {
  NEED_EP(ep, "ortep_ep_prepare_initializer");
  if (!init || !init->name || !init->data || !dtype || !shape || !out || (init->n_uses && !init->uses))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: prepare_initializer: NULL argument", ortep_ep_name(ep));
  if (!ep->vtable->prepare_initializer)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s prepares no initializers", ortep_ep_name(ep));
  *out = (ortep_buffer){0};
  *dtype = init->dtype;
  *shape = init->shape; /* an EP that keeps the shape need not write it */
  ortep_status st = ep->vtable->prepare_initializer(ep, init, dtype, shape, out);
  bool in_place = out->owner == ORTEP_BUFFER_BORROWED_MUT && init->writable && out->ptr == init->writable;
  if (st == ORTEP_OK &&
      (!out->ptr || (out->owner == ORTEP_BUFFER_BORROWED_MUT && !in_place) ||
       !ortep_device_equal(out->device, ep->device) || (*dtype != init->dtype && !ortep_dtype_is_quantized(*dtype))))
    return ortep__fail(ORTEP_E_INTERNAL, "%s prepared '%s' into a buffer that is not its own (a bug in that EP)",
                       ortep_ep_name(ep), init->name);
  return st;
}

size_t ortep_ep_context_source_keys(const ortep_ep *ep, const char **out, size_t cap) {
  return ep && ep->vtable->context_source_keys ? ep->vtable->context_source_keys(ep, out, cap) : 0;
}
ortep_status ortep_ep_save_context(ortep_ep *ep, ortep_context_write_fn write, void *ctx, size_t *len) {
  NEED_EP(ep, "ortep_ep_save_context");
  if (!len) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: save_context: len is NULL", ortep_ep_name(ep));
  if (!ep->vtable->save_context)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: EPContext is not supported (this EP has no compile step)",
                       ortep_ep_name(ep));
  return ep->vtable->save_context(ep, write, ctx, len);
}
ortep_status ortep_ep_load_context(ortep_ep *ep, const void *blob, size_t len) {
  NEED_EP(ep, "ortep_ep_load_context");
  if (!blob && len) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "%s: load_context: blob is NULL", ortep_ep_name(ep));
  if (!ep->vtable->load_context)
    return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s: EPContext is not supported (this EP has no compile step)",
                       ortep_ep_name(ep));
  return ep->vtable->load_context(ep, blob, len);
}

/* --- registry ----------------------------------------------------------------- */
struct ortep_ep_registry {
  ortep_ep **eps;
  size_t n, cap;
};

ortep_status ortep_ep_registry_create(ortep_ep_registry **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_ep_registry_create: out is NULL");
  *out = ortep__calloc(1, sizeof **out);
  return *out ? ORTEP_OK : ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_ep_registry_create: no memory");
}

void ortep_ep_registry_destroy(ortep_ep_registry *r) {
  if (!r) return;
  for (size_t i = r->n; i-- > 0;) ortep_ep_destroy(r->eps[i]);
  ortep__free(r->eps);
  ortep__free(r);
}

ortep_status ortep_ep_registry_add(ortep_ep_registry *r, ortep_ep *ep, uint32_t *id) {
  if (!r || !ep) {
    ortep_ep_destroy(ep);
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_ep_registry_add: registry and EP are required");
  }
  if (ortep_ep_registry_find(r, ortep_ep_name(ep))) {
    const char *name = ortep_ep_name(ep);
    ortep__fail(ORTEP_E_INVALID_ARGUMENT, "an EP named '%s' is already registered; names must be unique", name);
    ortep_ep_destroy(ep);
    return ORTEP_E_INVALID_ARGUMENT;
  }
  if (!ORTEP__GROW(r->eps, r->cap, r->n + 1)) {
    ortep_ep_destroy(ep);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_ep_registry_add: no memory");
  }
  ep->id = (uint32_t)r->n;
  r->eps[r->n++] = ep;
  if (id) *id = ep->id;
  return ORTEP_OK;
}

size_t ortep_ep_registry_count(const ortep_ep_registry *r) { return r ? r->n : 0; }
ortep_ep *ortep_ep_registry_get(const ortep_ep_registry *r, uint32_t id) { return r && id < r->n ? r->eps[id] : NULL; }
ortep_ep *ortep_ep_registry_find(const ortep_ep_registry *r, const char *name) {
  for (size_t i = 0; r && name && i < r->n; i++)
    if (strcmp(ortep_ep_name(r->eps[i]), name) == 0) return r->eps[i];
  return NULL;
}
