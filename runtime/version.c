/* version.c: what this copy of the library is and how it was built. */
#include "internal.h"
#include "revision.h" /* generated at build time */

const char *ortep_version(void) { return ORTEP_VERSION_STRING; }
const char *ortep_git_revision(void) { return ORTEP_GIT_REVISION; }

bool ortep_debug_checks_enabled(void) {
#if defined(ORTEP_DEBUG)
  return true;
#else
  return false;
#endif
}

bool ortep_uses_mimalloc(void) { return !ORTEP_SYSTEM_ALLOCATOR; }
