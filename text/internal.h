/*
 * text/internal.h: what the files of text/ give each other besides the
 * public API: tokenizer.c a tokenizer from a document (parsed, with a
 * SentencePiece vocabulary's merges as ranked pairs of ids, or as text) and
 * the vocabulary check; uniclass.c the split regexes' Unicode classes.
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

/* A tokenizer from a tokenizer.json document of len bytes (name: for
 * messages). */
ortep_status ortep__tokenizer_from_json(const char *text, size_t len, const char *name, ortep_tokenizer **out);
/* t checked against a model vocabulary of model_vocab ids (0: none): more
 * ids than the model is refused (t closed, *out NULL, the message naming
 * file); fewer, and the model's extra ids decode to nothing. */
ortep_status ortep__tokenizer_fit_vocab(ortep_tokenizer *t, const char *file, size_t model_vocab,
                                        ortep_tokenizer **out);
/* pattern with its Unicode general-category classes (\p{..}, \P{..}) and
 * \s, \S, \d, \D written out as code-point ranges from utf8proc's tables
 * (uniclass.c), for PCRE2 to compile; *out is the caller's (ortep__free). */
ortep_status ortep__regex_with_tables(const char *pattern, char **out);

#endif
