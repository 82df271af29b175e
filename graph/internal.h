/* internal.h: what graph/'s files share. */
#ifndef ORTEP_GRAPH_INTERNAL_H
#define ORTEP_GRAPH_INTERNAL_H

#include "../runtime/internal.h"
#include "../runtime/strmap.h"
/* graph/ is the top layer of the library: it may use every public header */
#include "ortep/ortep.h"

/* An ortep_allocator drawing from an EP's allocate/deallocate, so the memory
 * layer's planned arena can hold an EP's activations. Its device key follows
 * the EP's device, so host-side debug fills never touch device memory. */
ortep_status ortep__ep_allocator_create(ortep_ep *ep, ortep_allocator **out);

/* A whole regular file into memory (ortep__malloc'd), refusing one larger
 * than limit bytes ("... is not <what>"). */
ortep_status ortep__read_file(const char *path, size_t limit, const char *what, char **out, size_t *len);

/* ortep_session_run with its trace calls compiled out, for ortep-bench
 * replay's "tracing compiled in vs out" comparison. */
ortep_status ortep__session_run_untraced(ortep_session *session);

#endif
