/*
 * kv.c: the decoder's KV caches on virtual backing (internal.h).
 *
 * Each layer's K and V cache is a session value the decoder places itself
 * (session.h: external values): address space for the whole context is
 * reserved once, so the captured graphs see addresses that never change,
 * and memory is committed in whole granules (host pages, or the GPU's VMM
 * granularity) as positions are about to be written, on the host side before
 * the step that writes them, never inside a captured graph. Dropping
 * positions (a truncation, a reset) decommits the granules wholly past what
 * is kept. The caches are position-major, so the positions held are one
 * prefix of each cache's memory and one range per cache does it.
 *
 * A fork maps its parent's whole-granule prefix read-only from one shared
 * physical copy (allocator.h: shared mappings): the parent's own granules
 * are replaced by the same mapping, so N conversations that share a prompt
 * hold its KV once; the granule the prefix ends in stays private to each.
 *
 * A batch's slots share one reservation per cache: a slot that starts with
 * another's positions (a system prompt) maps the whole granules of them
 * from one shared prefix per cache at its own range (map_prefix_at), the
 * granule they end in copied; a prefix goes back with the last slot that
 * maps it.
 *
 * An EP whose memory has no virtual backing (a GPU without the VMM API)
 * gets its caches allocated whole, committed up front as before.
 */
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct kv_value {
  ortep_allocator *alloc; /* NULL: allocated whole through the EP (buf) */
  ortep_ep *ep;
  ortep_buffer buf;
  void *base;
  size_t bytes;
  size_t committed;            /* bytes from the start backed by memory (private or shared) */
  size_t shared;               /* bytes from the start mapped from a shared prefix (read-only) */
  ortep_shared_prefix *prefix; /* the prefix this cache created for its forks (NULL: none) */
} kv_value;

struct ortep__kv_memory {
  ortep_governor *governor;
  ortep_allocator *host, *device; /* created here, on first use */
  ortep_allocator *host_in;       /* the caller's host allocator, when it has virtual backing */
};

ortep_status ortep__kv_memory_create(ortep_governor *g, ortep_allocator *host_allocator, ortep__kv_memory **out) {
  if (!(*out = ortep__calloc(1, sizeof **out)))
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for the KV caches' allocators");
  (*out)->governor = g;
  if (host_allocator && ortep_allocator_has_virtual_backing(host_allocator)) (*out)->host_in = host_allocator;
  return ORTEP_OK;
}

void ortep__kv_memory_destroy(ortep__kv_memory *m) {
  if (!m) return;
  ortep_allocator_destroy(m->host);
  ortep_allocator_destroy(m->device);
  ortep__free(m);
}

struct ortep__kv {
  ortep__kv_memory *mem;
  kv_value *v;
  size_t n, capacity, row; /* row: bytes per position in one cache */
  size_t held;             /* positions backed in every cache */
  uint64_t commits;        /* commit calls that added memory */
  /* A batch's caches (slots > 0): every cache is [slots, capacity, ...],
   * slot s at s x stride bytes (granule-aligned, ortep__kv_slot_capacity),
   * with its own positions held: slot_held[s], and slot_committed[i x slots
   * + s] bytes of cache i from the slot's start. */
  size_t slots, stride;
  size_t *slot_held, *slot_committed;
  /* Per cache and slot (i x slots + s), the prefix the slot maps its first
   * slot_shared bytes from (NULL: none); prefix_bytes: theirs, each once. */
  struct kv_prefix **slot_prefix;
  size_t *slot_shared;
  uint64_t prefix_bytes;
};

/* A prefix shared among a batch's slots (one cache's). */
typedef struct kv_prefix {
  ortep_shared_prefix *h;
  size_t bytes; /* whole granules from a slot's start */
  size_t users; /* slots mapping it */
} kv_prefix;

static ortep_allocator *allocator_for(ortep__kv_memory *m, ortep_ep *ep, ortep_status *st) {
  ortep_device dev = ortep_ep_device(ep);
  *st = ORTEP_OK;
  if (ortep_device_is_host_accessible(dev)) {
    if (m->host_in) return m->host_in;
    if (!m->host) *st = ortep_host_virtual_allocator_create(m->governor, &m->host);
    return m->host;
  }
  if (!m->device) {
    *st = ortep_cuda_virtual_allocator_create((int)dev.index, m->governor, &m->device);
    if (*st == ORTEP_E_NOT_SUPPORTED) { /* no VMM: whole caches, committed up front */
      ortep_clear_error();
      *st = ORTEP_OK;
      return NULL;
    }
  }
  return m->device;
}

static ortep_status place_value(ortep__kv *kv, ortep_session *s, const char *name) {
  kv_value *x = &kv->v[kv->n];
  ortep_status st = ortep_session_value(s, name, &x->ep, NULL, &x->bytes);
  if (st != ORTEP_OK) return st;
  x->alloc = allocator_for(kv->mem, x->ep, &st);
  if (st != ORTEP_OK) return ortep__wrap(st, "the KV cache '%s'", name);
  if (x->alloc) {
    st = ortep_allocator_reserve(x->alloc, x->bytes, 4096, &x->base);
  } else {
    st = ortep_ep_allocate(x->ep, x->bytes, 256, &x->buf);
    x->base = x->buf.ptr;
    x->committed = x->bytes;
  }
  if (st != ORTEP_OK) return ortep__wrap(st, "reserving the KV cache '%s' (%zu bytes)", name, x->bytes);
  kv->n++;
  return ortep_session_bind_value(s, name, x->base, x->bytes);
}

ortep_status ortep__kv_open(ortep_session *s, size_t layers, size_t slots, size_t capacity, ortep__kv_memory *mem,
                            ortep__kv **out) {
  *out = NULL;
  ortep__kv *kv = ortep__calloc(1, sizeof *kv);
  kv_value *v = ortep__calloc(2 * layers + 1, sizeof *v);
  size_t *held = slots ? ortep__calloc(slots, sizeof *held) : NULL;
  size_t *committed = slots ? ortep__calloc(2 * layers * slots, sizeof *committed) : NULL;
  size_t *shared = slots ? ortep__calloc(2 * layers * slots, sizeof *shared) : NULL;
  kv_prefix **prefix = slots ? ortep__calloc(2 * layers * slots, sizeof *prefix) : NULL;
  if (!kv || !v || (slots && (!held || !committed || !shared || !prefix))) {
    ortep__free(kv), ortep__free(v), ortep__free(held), ortep__free(committed), ortep__free(shared);
    ortep__free(prefix);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for the KV caches' bookkeeping");
  }
  kv->slot_shared = shared, kv->slot_prefix = prefix;
  kv->v = v;
  kv->capacity = capacity;
  kv->mem = mem;
  kv->slots = slots, kv->slot_held = held, kv->slot_committed = committed;
  ortep_status st = ORTEP_OK;
  char name[64];
  for (size_t l = 0; st == ORTEP_OK && l < layers; l++)
    for (int val = 0; st == ORTEP_OK && val < 2; val++)
      st = place_value(kv, s, ortep_decoder_kv_name(l, val, name, sizeof name));
  if (st == ORTEP_OK) kv->row = kv->v[0].bytes / capacity / (slots ? slots : 1);
  if (st == ORTEP_OK && slots) {
    kv->stride = kv->row * capacity;
    for (size_t i = 0; i < kv->n; i++) /* the slots' ranges must not share a granule */
      if (kv->v[i].alloc && kv->stride % ortep_allocator_granularity(kv->v[i].alloc))
        st = ortep__fail(ORTEP_E_INTERNAL, "decoder: a KV slot of %zu bytes is not a whole number of granules",
                         kv->stride);
  }
  for (size_t i = 0; st == ORTEP_OK && i < kv->n; i++) /* caches allocated whole start zeroed, as committed ones */
    if (!kv->v[i].alloc) {
      static const unsigned char zeros[64 << 10];
      for (size_t at = 0; st == ORTEP_OK && at < kv->v[i].bytes; at += sizeof zeros)
        st = ortep_ep_copy_from_host_at(kv->v[i].ep, zeros,
                                        kv->v[i].bytes - at < sizeof zeros ? kv->v[i].bytes - at : sizeof zeros,
                                        &kv->v[i].buf, at);
    }
  if (st != ORTEP_OK) {
    ortep__kv_close(kv);
    return st;
  }
  *out = kv;
  return ORTEP_OK;
}

static size_t round_up(size_t bytes, size_t granule, size_t limit) {
  size_t r = (bytes + granule - 1) / granule * granule;
  return r < limit ? r : limit;
}

static void unref_prefix(ortep__kv *kv, kv_value *x, kv_prefix *p) {
  if (!p || --p->users) return;
  kv->prefix_bytes -= p->bytes;
  ortep_allocator_destroy_prefix(x->alloc, p->h); /* its memory goes with its last mapping */
  ortep__free(p);
}

void ortep__kv_close(ortep__kv *kv) {
  if (!kv) return;
  for (size_t i = 0; kv->slot_prefix && i < kv->n; i++)
    for (size_t s = 0; s < kv->slots; s++) unref_prefix(kv, &kv->v[i], kv->slot_prefix[i * kv->slots + s]);
  for (size_t i = 0; i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    if (x->alloc) {
      ortep_allocator_destroy_prefix(x->alloc, x->prefix);
      ortep_allocator_release(x->alloc, x->base, x->bytes, 4096);
    } else {
      ortep_ep_deallocate(x->ep, &x->buf);
    }
  }
  ortep__free(kv->v);
  ortep__free(kv->slot_held);
  ortep__free(kv->slot_committed);
  ortep__free(kv->slot_shared);
  ortep__free(kv->slot_prefix);
  ortep__free(kv);
}

size_t ortep__kv_slot_capacity(size_t positions, size_t row_bytes) {
  size_t g = 4096; /* the host page: a batch's caches live on the host virtual allocator */
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) g = (size_t)page;
  size_t a = row_bytes, b = g; /* positions per granule-aligned step: g / gcd(row, g) */
  while (b) {
    size_t t = a % b;
    a = b, b = t;
  }
  size_t step = g / a;
  return (positions + step - 1) / step * step;
}

ortep_status ortep__kv_hold_slot(ortep__kv *kv, size_t slot, size_t positions) {
  ortep__assert(slot < kv->slots);
  if (positions <= kv->slot_held[slot]) return ORTEP_OK;
  if (positions > kv->capacity) positions = kv->capacity;
  size_t want = positions * kv->row;
  for (size_t i = 0; i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    size_t *have = &kv->slot_committed[i * kv->slots + slot];
    if (!x->alloc || want <= *have) continue;
    uint64_t added = 0;
    ortep_commit_range r = {x->base, x->bytes, 4096, slot * kv->stride + *have, want - *have};
    ortep_status st = ortep_allocator_commit(x->alloc, &r, &added);
    if (st != ORTEP_OK) {
      char b[32];
      return ortep__wrap(st, "the KV caches of slot %zu need memory for %zu positions (%s more per cache)", slot,
                         positions, ortep__format_bytes(want - *have, b, sizeof b));
    }
    kv->commits += added > 0;
    *have = round_up(want, ortep_allocator_granularity(x->alloc), kv->stride);
  }
  kv->slot_held[slot] = positions;
  return ORTEP_OK;
}

ortep_status ortep__kv_drop_slot(ortep__kv *kv, size_t slot, size_t positions) {
  ortep__assert(slot < kv->slots);
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    size_t *have = &kv->slot_committed[i * kv->slots + slot], *shared = &kv->slot_shared[i * kv->slots + slot];
    if (!x->alloc) continue;
    size_t keep = round_up(positions * kv->row, ortep_allocator_granularity(x->alloc), kv->stride);
    /* a slot ends whole (positions 0) or keeps what it maps: a batch never cuts into its shared prefix */
    ortep__assert(keep >= *shared || keep == 0);
    if (keep >= *have) continue;
    uint64_t released = 0;
    ortep_commit_range r = {x->base, x->bytes, 4096, slot * kv->stride + keep, *have - keep};
    if ((st = ortep_allocator_decommit(x->alloc, &r, &released)) != ORTEP_OK) break;
    *have = keep;
    if (keep < *shared) {
      unref_prefix(kv, x, kv->slot_prefix[i * kv->slots + slot]);
      kv->slot_prefix[i * kv->slots + slot] = NULL, *shared = 0;
    }
  }
  if (positions < kv->slot_held[slot]) kv->slot_held[slot] = positions;
  return st;
}

/* Bytes [off, off + len) of a cache copied within it, through host memory. */
static ortep_status copy_within(kv_value *x, size_t to, size_t from, size_t len);

/* Slot `to` (empty) takes slot `from`'s first positions, cache by cache:
 * their whole granules mapped from one prefix (from's own when it maps one
 * at least that long, else a new one made of from's bytes and mapped into
 * from too), the granule they end in copied. A failure leaves every cache
 * either done or untouched; the caller drops `to`. */
ortep_status ortep__kv_share_slot(ortep__kv *kv, size_t from, size_t to, size_t positions) {
  ortep__assert(from < kv->slots && to < kv->slots && from != to && kv->slot_held[to] == 0 &&
                positions <= kv->slot_held[from]);
  size_t bytes = positions * kv->row;
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    size_t f = i * kv->slots + from, t = i * kv->slots + to;
    size_t gran = x->alloc ? ortep_allocator_granularity(x->alloc) : 1;
    size_t whole = x->alloc && ortep_allocator_has_shared_mapping(x->alloc) ? bytes / gran * gran : 0;
    ortep_shared_commit_info info;
    if (whole && (!kv->slot_prefix[f] || kv->slot_shared[f] < whole)) { /* a new prefix of from's granules */
      kv_prefix *p = ortep__calloc(1, sizeof *p);
      if (!p) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory for a shared KV prefix");
      char *at = (char *)x->base + from * kv->stride;
      st = ortep_allocator_create_prefix(x->alloc, at, whole, &p->h);
      if (st == ORTEP_OK)
        st = ortep_allocator_map_prefix_at(x->alloc, p->h, x->base, x->bytes, from * kv->stride, 0, &info);
      if (st != ORTEP_OK) {
        ortep_allocator_destroy_prefix(x->alloc, p->h);
        ortep__free(p);
        return st;
      }
      unref_prefix(kv, x, kv->slot_prefix[f]); /* from's older, shorter prefix: every granule of it replaced */
      *p = (kv_prefix){p->h, whole, 1};
      kv->prefix_bytes += whole;
      kv->slot_prefix[f] = p, kv->slot_shared[f] = whole;
      if (kv->slot_committed[f] < whole) kv->slot_committed[f] = whole;
    }
    if (whole) {
      kv_prefix *p = kv->slot_prefix[f];
      if ((st = ortep_allocator_map_prefix_at(x->alloc, p->h, x->base, x->bytes, to * kv->stride, whole, &info)) !=
          ORTEP_OK)
        return st;
      p->users++;
      kv->slot_prefix[t] = p, kv->slot_shared[t] = kv->slot_committed[t] = whole;
    }
    if (bytes == whole) continue;
    if (x->alloc) { /* the rest into private memory */
      uint64_t added;
      ortep_commit_range r = {x->base, x->bytes, 4096, to * kv->stride + whole,
                              round_up(bytes, gran, kv->stride) - whole};
      if ((st = ortep_allocator_commit(x->alloc, &r, &added)) != ORTEP_OK) return st;
      kv->commits += added > 0;
      kv->slot_committed[t] = whole + r.bytes;
    }
    st = copy_within(x, to * kv->stride + whole, from * kv->stride + whole, bytes - whole);
  }
  if (st == ORTEP_OK) kv->slot_held[to] = positions;
  return st;
}

static ortep_commit_range span(const kv_value *x, size_t from, size_t to) {
  return (ortep_commit_range){x->base, x->bytes, 4096, from, to - from};
}

ortep_status ortep__kv_hold(ortep__kv *kv, size_t positions) {
  if (positions <= kv->held) return ORTEP_OK;
  if (positions > kv->capacity) positions = kv->capacity; /* the kernels refuse what lies past it */
  size_t want = positions * kv->row;
  for (size_t i = 0; i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    if (!x->alloc || want <= x->committed) continue;
    uint64_t added = 0;
    ortep_commit_range r = span(x, x->committed, want);
    ortep_status st = ortep_allocator_commit(x->alloc, &r, &added);
    if (st != ORTEP_OK) {
      char b[32];
      return ortep__wrap(st, "the KV caches need memory for %zu positions (%s more per cache)", positions,
                         ortep__format_bytes(want - x->committed, b, sizeof b));
    }
    kv->commits += added > 0;
    x->committed = round_up(want, ortep_allocator_granularity(x->alloc), x->bytes);
  }
  kv->held = positions;
  return ORTEP_OK;
}

/* Bytes [off, off + len) of a cache to or from host memory, through its EP. */
static ortep_status move_bytes(kv_value *x, size_t off, void *host, size_t len, bool to_host) {
  ortep_buffer b;
  ortep_status st = ortep_buffer_wrap_borrowed_mut((char *)x->base + off, ortep_ep_device(x->ep), len, 1, &b);
  if (st != ORTEP_OK) return st;
  return to_host ? ortep_ep_copy_to_host(x->ep, &b, host, len) : ortep_ep_copy_from_host(x->ep, host, len, &b);
}

static ortep_status copy_within(kv_value *x, size_t to, size_t from, size_t len) {
  void *tmp = ortep__malloc(len);
  if (!tmp) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory to copy %zu bytes of KV", len);
  ortep_status st = move_bytes(x, from, tmp, len, true);
  if (st == ORTEP_OK) st = move_bytes(x, to, tmp, len, false);
  ortep__free(tmp);
  return st;
}

/* The shared prefix is read-only: a cache that keeps fewer positions than it
 * maps turns the granules from the one holding the last kept byte on into
 * private memory again (that granule's kept bytes copied over), so the next
 * positions can be written. */
static ortep_status privatise(ortep__kv *kv, kv_value *x, size_t keep_bytes) {
  size_t gran = ortep_allocator_granularity(x->alloc), g0 = keep_bytes / gran * gran, n = keep_bytes - g0;
  void *tmp = n ? ortep__malloc(n) : NULL;
  if (n && !tmp) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory to unshare a KV granule");
  ortep_status st = n ? move_bytes(x, g0, tmp, n, true) : ORTEP_OK;
  uint64_t bytes = 0;
  ortep_commit_range r = span(x, g0, x->committed);
  if (st == ORTEP_OK) st = ortep_allocator_decommit(x->alloc, &r, &bytes);
  if (st == ORTEP_OK) x->committed = g0, x->shared = g0;
  r = span(x, g0, round_up(keep_bytes, gran, x->bytes));
  if (st == ORTEP_OK && n && (st = ortep_allocator_commit(x->alloc, &r, &bytes)) == ORTEP_OK) {
    kv->commits++;
    x->committed = r.offset + r.bytes;
    st = move_bytes(x, g0, tmp, n, false);
  }
  ortep__free(tmp);
  /* the handle for forks described the old prefix: later forks make a new one */
  ortep_allocator_destroy_prefix(x->alloc, x->prefix);
  x->prefix = NULL;
  return st;
}

/* Gives back every granule wholly past `positions` (the granule holding the
 * last kept position stays, bytes and all). */
ortep_status ortep__kv_drop(ortep__kv *kv, size_t positions) {
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < kv->n; i++) {
    kv_value *x = &kv->v[i];
    if (!x->alloc) continue;
    size_t keep_bytes = positions * kv->row;
    if (keep_bytes < x->shared) {
      st = privatise(kv, x, keep_bytes);
      continue;
    }
    size_t keep = round_up(keep_bytes, ortep_allocator_granularity(x->alloc), x->bytes);
    if (keep >= x->committed) continue;
    uint64_t released = 0;
    ortep_commit_range r = span(x, keep, x->committed);
    if ((st = ortep_allocator_decommit(x->alloc, &r, &released)) == ORTEP_OK) x->committed = keep;
  }
  if (positions < kv->held) kv->held = positions;
  return st;
}

/* A fork: child's caches (fresh, same shape) take parent's first `positions`
 * positions. The whole granules among them become one shared prefix per
 * cache, mapped read-only into both (the parent's own granules make way);
 * the granule they end in is copied into the child's private memory. */
static ortep_status share_value(ortep__kv *kv, kv_value *x, kv_value *y, size_t bytes) {
  size_t gran = ortep_allocator_granularity(x->alloc), whole = bytes / gran * gran;
  ortep_status st = ORTEP_OK;
  ortep_shared_commit_info info;
  if (whole && !(x->prefix && x->shared == whole)) { /* a new prefix of exactly these granules */
    ortep_shared_prefix *p = NULL;
    st = ortep_allocator_create_prefix(x->alloc, x->base, whole, &p);
    if (st == ORTEP_OK) st = ortep_allocator_map_prefix(x->alloc, p, x->base, x->bytes, &info);
    if (st != ORTEP_OK) {
      ortep_allocator_destroy_prefix(x->alloc, p);
      return st;
    }
    ortep_allocator_destroy_prefix(x->alloc, x->prefix);
    x->prefix = p, x->shared = whole;
    if (x->committed < whole) x->committed = whole;
  }
  if (whole) {
    if ((st = ortep_allocator_map_prefix(y->alloc, x->prefix, y->base, y->bytes, &info)) != ORTEP_OK) return st;
    y->shared = y->committed = whole;
  }
  if (bytes == whole) return ORTEP_OK;
  uint64_t added;
  ortep_commit_range r = span(y, whole, round_up(bytes, gran, y->bytes));
  if ((st = ortep_allocator_commit(y->alloc, &r, &added)) != ORTEP_OK) return st;
  kv->commits++;
  y->committed = r.offset + r.bytes;
  void *tmp = ortep__malloc(bytes - whole);
  if (!tmp) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory to copy a KV granule");
  st = move_bytes(x, whole, tmp, bytes - whole, true);
  if (st == ORTEP_OK) st = move_bytes(y, whole, tmp, bytes - whole, false);
  ortep__free(tmp);
  return st;
}

ortep_status ortep__kv_share(ortep__kv *parent, ortep__kv *child, size_t positions) {
  ortep__assert(parent->n == child->n && parent->row == child->row && positions <= parent->held);
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < parent->n; i++) {
    kv_value *x = &parent->v[i], *y = &child->v[i];
    if (x->alloc && x->alloc == y->alloc && ortep_allocator_has_shared_mapping(x->alloc)) {
      st = share_value(child, x, y, positions * parent->row);
      continue;
    }
    /* no shared mappings between these two (whole caches on a GPU without
     * VMM, a caller's allocator with virtual backing alone): the prefix is
     * copied */
    size_t bytes = positions * parent->row;
    if (y->alloc) {
      uint64_t added;
      ortep_commit_range r = span(y, 0, round_up(bytes, ortep_allocator_granularity(y->alloc), y->bytes));
      if ((st = ortep_allocator_commit(y->alloc, &r, &added)) != ORTEP_OK) break;
      y->committed = r.bytes;
    }
    void *tmp = bytes ? ortep__malloc(bytes) : NULL;
    if (bytes && !tmp) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "decoder: no memory to copy the KV prefix");
    st = bytes ? move_bytes(x, 0, tmp, bytes, true) : ORTEP_OK;
    if (st == ORTEP_OK && bytes) st = move_bytes(y, 0, tmp, bytes, false);
    ortep__free(tmp);
  }
  if (st == ORTEP_OK) child->held = positions;
  return st;
}

void ortep__kv_stats(const ortep__kv *kv, ortep__kv_usage *out) {
  *out = (ortep__kv_usage){0};
  if (!kv) return;
  for (size_t i = 0; i < kv->n; i++) {
    out->reserved_bytes += kv->v[i].bytes;
    out->committed_bytes += kv->v[i].committed - kv->v[i].shared;
    out->shared_bytes += kv->v[i].shared;
    for (size_t s = 0; s < kv->slots; s++)
      out->committed_bytes += kv->slot_committed[i * kv->slots + s] - kv->slot_shared[i * kv->slots + s];
  }
  out->shared_bytes += kv->prefix_bytes; /* a batch's prefixes, each once however many slots map it */
  out->commits = kv->commits;
  out->positions = kv->held;
  for (size_t s = 0; s < kv->slots; s++) out->positions += kv->slot_held[s];
}
