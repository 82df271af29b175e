/*
 * hooks.c: the replaceable small-object allocator (hooks.h). The defaults are
 * mimalloc's, or libc's in a system-allocator build; runtime/ knows no other
 * allocator.
 */
#include <stdlib.h>

#include "internal.h"

#if !ORTEP_SYSTEM_ALLOCATOR
#include <mimalloc.h>
#define DEFAULT_MALLOC  mi_malloc
#define DEFAULT_CALLOC  mi_calloc
#define DEFAULT_REALLOC mi_realloc
#define DEFAULT_FREE    mi_free
#else
#define DEFAULT_MALLOC  malloc
#define DEFAULT_CALLOC  calloc
#define DEFAULT_REALLOC realloc
#define DEFAULT_FREE    free
#endif

static struct {
  ortep_malloc_fn m;
  ortep_calloc_fn c;
  ortep_realloc_fn r;
  ortep_free_fn f;
} hooks = {DEFAULT_MALLOC, DEFAULT_CALLOC, DEFAULT_REALLOC, DEFAULT_FREE};

ortep_status ortep_replace_allocator(ortep_malloc_fn m, ortep_calloc_fn c, ortep_realloc_fn r, ortep_free_fn f) {
  if (!m || !c || !r || !f)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_replace_allocator: all four functions must be non-NULL (malloc=%s calloc=%s "
                       "realloc=%s free=%s); call ortep_restore_allocator for the defaults",
                       m ? "set" : "NULL", c ? "set" : "NULL", r ? "set" : "NULL", f ? "set" : "NULL");
  hooks.m = m;
  hooks.c = c;
  hooks.r = r;
  hooks.f = f;
  return ORTEP_OK;
}

void ortep_restore_allocator(void) {
  hooks.m = DEFAULT_MALLOC;
  hooks.c = DEFAULT_CALLOC;
  hooks.r = DEFAULT_REALLOC;
  hooks.f = DEFAULT_FREE;
}

void *ortep__malloc(size_t size) { return hooks.m(size ? size : 1); }
void *ortep__calloc(size_t count, size_t size) { return hooks.c(count ? count : 1, size ? size : 1); }
void *ortep__realloc(void *ptr, size_t size) { return hooks.r(ptr, size ? size : 1); }
void ortep__free(void *ptr) {
  if (ptr) hooks.f(ptr);
}

bool ortep__grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 8;
  while (c < need) {
    if (c > SIZE_MAX / 2) return false;
    c *= 2;
  }
  if (c > SIZE_MAX / elem) return false;
  void *p = ortep__realloc(*arr, c * elem);
  if (!p) return false;
  *arr = p, *cap = c;
  return true;
}
