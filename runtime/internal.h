/*
 * internal.h: what the runtime layer shares with the layers above it but not
 * with users: setting the per-thread error, the small-object allocation hook,
 * byte formatting, and the assertion levels.
 */
#ifndef ORTEP_RUNTIME_INTERNAL_H
#define ORTEP_RUNTIME_INTERNAL_H

#include <assert.h>
#include <stdarg.h>

/* The runtime layer's own public headers, and nothing above it. Its include
 * path holds runtime/ alone (cmake/layers.cmake), so a runtime file that
 * reached for an allocator, an EP implementation, the executor or a model
 * would not compile; the layering test proves it. */
#include "ortep/buffer.h"
#include "ortep/device.h"
#include "ortep/dtype.h"
#include "ortep/backend_impl.h" /* the library implements the contracts */
#include "ortep/ep.h"
#include "ortep/error_word.h"
#include "ortep/hooks.h"
#include "ortep/ir.h"
#include "ortep/safetensors.h"
#include "ortep/status.h"
#include "ortep/tensor.h"

/* Record a failure for ortep_last_error() and return its status. */
ortep_status ortep__fail(ortep_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ortep_status ortep__failv(ortep_status status, const char *fmt, va_list ap);
/* Prefix the current message with context ("loading x: <old message>"). */
ortep_status ortep__wrap(ortep_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The library's small-object allocations (hooks.h). */
void *ortep__malloc(size_t size);
void *ortep__calloc(size_t count, size_t size);
void *ortep__realloc(void *ptr, size_t size);
void ortep__free(void *ptr);

/* Parses one JSON document with cJSON, refusing trailing bytes and duplicate
 * keys anywhere (json.c says why); `what` names the file in messages. On
 * success *out is the tree (free with cJSON_Delete). */
struct cJSON;
ortep_status ortep__json_parse(const char *text, size_t len, const char *what, struct cJSON **out);

/* Grows the array *arr (elements of elem bytes, room for *cap) to room for
 * at least need: the capacity doubles, from 8. On failure (false) *arr and
 * *cap are untouched, so the caller's array is never torn. The one growth
 * rule of the library: ORTEP__GROW(array, cap, need) spells the sizes. */
bool ortep__grow(void **arr, size_t *cap, size_t need, size_t elem);
#define ORTEP__GROW(arr, cap, need) ortep__grow((void **)&(arr), &(cap), (need), sizeof *(arr))

/* Opens path for reading and checks it is a regular file without ever
 * blocking: O_NONBLOCK first, then the type, so a FIFO (which would block
 * open() and read() forever) or a device is refused at once, naming the path.
 * On success *fd is open (the caller closes it) and *size is the file's. */
ortep_status ortep__open_regular(const char *path, int *fd, size_t *size);
/* A whole regular file into memory (ortep__malloc'd), refusing one larger
 * than limit bytes ("... is not <what>"). */
ortep_status ortep__read_file(const char *path, size_t limit, const char *what, char **out, size_t *len);

/* The position of e (one of st's entries) in st: 0 .. count - 1. */
size_t ortep__safetensors_index(const ortep_safetensors *st, const ortep_safetensors_entry *e);
/* Drops the resident pages wholly inside bytes [offset, offset + bytes) of
 * entry e of a mapped file (st from ortep_safetensors_open) from this process, for a caller that holds the
 * bytes elsewhere now (llm/model.c's repacked weights): advice
 * (MADV_DONTNEED), and a later read would fault them back in from the file.
 * Nothing happens for bytes that are the caller's (ortep_safetensors_parse). */
void ortep__safetensors_release(const ortep_safetensors *st, const ortep_safetensors_entry *e, size_t offset,
                                size_t bytes);
/* Drops the resident pages wholly inside [data, data + size) of a file
 * mapping (MADV_DONTNEED): they are read again from the file if touched. */
void ortep__release_pages(const void *data, size_t size);
/* FNV-1a over n bytes, continuing from h (ORTEP__FNV_SEED to start). */
#define ORTEP__FNV_SEED 0xcbf29ce484222325ull
uint64_t ortep__fnv1a(uint64_t h, const void *p, size_t n);

/* The monotonic clock in nanoseconds. */
uint64_t ortep__now_ns(void);

/* "1.5 GiB", "200 MiB", "64 B". Writes into buf (>= 32 bytes); returns buf. */
char *ortep__format_bytes(uint64_t bytes, char *buf, size_t len);
/* A byte count as the config keys take it: digits with an optional K, M, G
 * or T suffix (powers of 1024; "8G", "512MiB", "64kb"), or "unlimited"
 * (UINT64_MAX). False for anything else or an overflow. */
bool ortep__parse_bytes(const char *s, uint64_t *out);

static inline bool ortep__is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
/* Round x up to a multiple of align (a power of two); false on overflow. */
static inline bool ortep__align_up(size_t x, size_t align, size_t *out) {
  if (x > SIZE_MAX - (align - 1)) return false;
  *out = (x + align - 1) & ~(align - 1);
  return true;
}

/* Assertion levels (SQLite's ALWAYS, mimalloc's internal checks): the
 * invariants of the library's own bookkeeping (a carve inside its chunk, a
 * plan no smaller than its lower bound, a position inside the cache the
 * host checked) are checked in every build, Release included: CMake's
 * -DNDEBUG does not turn ortep__assert off, because each check is a compare
 * and a branch, and a broken invariant means memory is about to be
 * corrupted. A failure is a bug in ortep, never bad input (bad input
 * returns a status): it prints the expression and the place and aborts.
 * ortep__assert_expensive runs only in Debug builds (ORTEP_DEBUG): a check
 * that costs more than what it guards (a whole-plan verification), or one
 * on a path of a few nanoseconds that the line before it already proves
 * (the arena's carve). */
/* n values (a multiple of 32) of f32, f16 or bf16 at x into q8_0 / q4_0
 * blocks at out, rounded as ortep_quantize rounds (dtype.h): what an EP
 * that quantizes weights it prepares calls (the CUDA module through its
 * host table). */
ortep_status ortep__quantize_from(ortep_dtype from, const void *x, size_t n, ortep_dtype to, void *out);
/* Whether weight `name` (n values of f32, f16 or bf16 at x, rows of k) can
 * be quantized to q8_0 / q4_0 as a model's weight: every value finite, and
 * none so large that its block's scale overflows the format's f16 scale
 * (ortep_quantize follows llama.cpp there and writes blocks that decode to
 * infinities or zeros). ORTEP_E_FORMAT names the first bad value's row,
 * column and value. One integer compare per value, vectorized. The session
 * checks every weight it has an EP quantize (graph/session.c), the GGUF
 * writer every tensor it quantizes. */
ortep_status ortep__quantize_check(const char *name, ortep_dtype to, ortep_dtype from, const void *x, size_t n,
                                   size_t k);

__attribute__((noreturn, cold)) void ortep__assert_fail(const char *expr, const char *file, int line);
#define ortep__assert(x) ((x) ? (void)0 : ortep__assert_fail(#x, __FILE__, __LINE__))
#if defined(ORTEP_DEBUG)
#define ortep__assert_expensive(x) ortep__assert(x)
#else
#define ortep__assert_expensive(x) ((void)0)
#endif

#endif
