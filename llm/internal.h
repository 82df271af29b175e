/* internal.h: what llm/'s files share. The LLM layer builds on the
 * executor's public API (session.h, graph.h, ep.h, ...) and the runtime's
 * internals; it reaches into no other layer's private headers. */
#ifndef ORTEP_LLM_INTERNAL_H
#define ORTEP_LLM_INTERNAL_H

#include "ortep/ortep.h"
#include "runtime/internal.h"
#include "runtime/strmap.h"

/* Whether the model's weights are its own private copy (ortep.weights =
 * read), which an EP may rearrange in place when it prepares them. */
bool ortep__model_weights_private(const ortep_model *model);
/* After a session over the model's graphs is built: the weights an EP
 * prepared into a layout of its own are no longer read from the file, so a
 * mapped model drops their resident pages (a weight is then held once).
 * Returns how many were prepared. */
size_t ortep__model_release_prepared(ortep_model *model, const ortep_session *session);

#endif
