/* internal.h: what llm/'s files share. The LLM layer builds on the
 * executor's public API (session.h, graph.h, ep.h, ...) and the runtime's
 * internals; it reaches into no other layer's private headers. */
#ifndef ORTEP_LLM_INTERNAL_H
#define ORTEP_LLM_INTERNAL_H

#include "ortep/ortep.h"
#include "runtime/internal.h"
#include "runtime/strmap.h"

#endif
