/* internal.h: what graph/'s files share. */
#ifndef ORTEP_GRAPH_INTERNAL_H
#define ORTEP_GRAPH_INTERNAL_H

#include "runtime/internal.h"
#include "runtime/strmap.h"
/* the executor uses the public headers of the layers below and its own */
#include "ortep/ortep.h"

/* An ortep_allocator drawing from an EP's allocate/deallocate, so the memory
 * layer's planned arena can hold an EP's activations. Its device key follows
 * the EP's device, so host-side debug fills never touch device memory. */
ortep_status ortep__ep_allocator_create(ortep_ep *ep, ortep_allocator **out);

/* ortep_session_run with its trace calls compiled out, for ortep-bench
 * replay's "tracing compiled in vs out" comparison. */
ortep_status ortep__session_run_untraced(ortep_session *session);

#endif
