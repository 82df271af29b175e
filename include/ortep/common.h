/*
 * common.h: the few definitions every public header shares: the export
 * macro and the standard headers the API's types come from.
 */
#ifndef ORTEP_COMMON_H
#define ORTEP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ortep/config.h"

#if defined(ORTEP_BUILDING)
#define ORTEP_API __attribute__((visibility("default")))
#else
#define ORTEP_API
#endif

#ifdef __cplusplus
#define ORTEP_BEGIN_DECLS extern "C" {
#define ORTEP_END_DECLS   }
#else
#define ORTEP_BEGIN_DECLS
#define ORTEP_END_DECLS
#endif

ORTEP_BEGIN_DECLS

/* The library's version string ("0.1.0") and the git revision it was built from. */
ORTEP_API const char *ortep_version(void);
ORTEP_API const char *ortep_git_revision(void);
/* Whether this build has the debug checks on (arena fill/poison, slab
 * double-free and foreign-pointer detection, expensive assertions). */
ORTEP_API bool ortep_debug_checks_enabled(void);
/* Whether the host allocator is mimalloc (false: the system allocator). */
ORTEP_API bool ortep_uses_mimalloc(void);

/* Progress of a long step (preparing the weights of a session): done of
 * total units so far, what names the step. Called from the calling thread. */
typedef void (*ortep_progress_fn)(void *ctx, const char *what, size_t done, size_t total);

ORTEP_END_DECLS

#endif
