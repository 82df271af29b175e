/*
 * bench_api.h: the library internals ortep-bench uses, and nothing else.
 * Every other part of ortep-bench goes through the public headers; these two
 * are internal because only a benchmark of the library itself needs them.
 */
#ifndef ORTEP_GRAPH_BENCH_API_H
#define ORTEP_GRAPH_BENCH_API_H

#include "ortep/ortep.h"

/* "1.5 GiB", "200 MiB", "64 B" (runtime/internal.h) */
char *ortep__format_bytes(uint64_t bytes, char *buf, size_t len);
/* ortep_session_run with its trace calls compiled out, for ortep-bench
 * replay's comparison of tracing overhead (graph/internal.h) */
ortep_status ortep__session_run_untraced(ortep_session *session);

#endif
