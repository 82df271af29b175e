/*
 * text/internal.h: what tokenizer.c gives gguf_vocab.c besides the public
 * API: a tokenizer from a document already parsed, with its merges as
 * ranked pairs of ids (a SentencePiece vocabulary's, derived from scores,
 * never spelled out as strings).
 */
#ifndef ORTEP_TEXT_INTERNAL_H
#define ORTEP_TEXT_INTERNAL_H

#include <cjson/cJSON.h>

#include "runtime/internal.h"
#include "ortep/tokenizer.h"

typedef struct ortep__merge {
  uint32_t left, right; /* ids; rank = position in the array */
} ortep__merge;

/* A tokenizer from root (a tokenizer.json document; name for messages).
 * When merges is not NULL they are the model's merges, by rank, and root's
 * model.merges is not read. */
ortep_status ortep__tokenizer_from_doc(const cJSON *root, const char *name, const ortep__merge *merges, size_t n_merges,
                                       ortep_tokenizer **out);

/* pattern with its Unicode general-category classes (\p{..}, \P{..}) and
 * \s, \S, \d, \D written out as code-point ranges from utf8proc's tables
 * (uniclass.c), for PCRE2 to compile; *out is the caller's (ortep__free). */
ortep_status ortep__regex_with_tables(const char *pattern, char **out);

#endif
