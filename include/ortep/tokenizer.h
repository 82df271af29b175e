/*
 * tokenizer.h: Hugging Face tokenizer.json, the file that ships beside
 * model.safetensors: text in, token ids out, and back.
 *
 * Supported: the BPE model of the two families LLaMA / Qwen checkpoints use.
 *  - byte-level BPE (Qwen2/2.5/3, LLaMA-3, GPT-2): a Split pre-tokenizer with
 *    the Unicode-class regex (PCRE2) and ByteLevel (bytes mapped to printable
 *    characters), merges by rank;
 *  - SentencePiece-style BPE (LLaMA-2, Mistral): Prepend/Replace normalizers
 *    or a Metaspace pre-tokenizer ("▁" for spaces), byte fallback to
 *    <0xNN> tokens for characters outside the vocabulary;
 *  - added and special tokens, matched in the raw text before anything else
 *    and never merged; normalizers NFC / NFD / NFKC (utf8proc), Prepend,
 *    Replace, Sequence; the TemplateProcessing post-processor (BOS / EOS ids
 *    added when add_special is true); decoders ByteLevel, Metaspace, and the
 *    Replace / ByteFallback / Fuse / Strip sequence.
 * Anything else in the file is refused at open with the field named. Chat
 * templates (the Jinja in tokenizer_config.json) are not applied.
 *
 *   ortep_tokenizer *t;
 *   ortep_tokenizer_open("models/qwen", &t);       // a directory or the file
 *   int32_t *ids; size_t n;
 *   ortep_tokenizer_encode(t, "Hello", 5, true, &ids, &n);
 *   char *text; size_t len;
 *   ortep_tokenizer_decode(t, ids, n, true, &text, &len);
 *   free(ids), free(text);
 *   ortep_tokenizer_close(t);
 *
 * A tokenizer is immutable after open: any number of threads may encode and
 * decode with it at once. A stream (ortep_detokenizer) is one thread's.
 */
#ifndef ORTEP_TOKENIZER_H
#define ORTEP_TOKENIZER_H

#include "ortep/common.h"
#include "ortep/gguf.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_tokenizer ortep_tokenizer;

/* path: a tokenizer.json file, or a directory holding one. */
ORTEP_API ortep_status ortep_tokenizer_open(const char *path, ortep_tokenizer **out);
/* The same, checked against the vocabulary of the model it serves
 * (config.json's vocab_size; 0: no model, as ortep_tokenizer_open): a
 * tokenizer with more ids than the model is refused (ORTEP_E_INVALID_ARGUMENT
 * naming both: it belongs to another model); a model vocabulary larger than
 * the tokenizer's (padded for the GPU, as Qwen's is) is accepted, and its ids
 * with no token decode to nothing, as Hugging Face does. */
ORTEP_API ortep_status ortep_tokenizer_open_for_vocab(const char *path, size_t model_vocab, ortep_tokenizer **out);
/* The same from a tokenizer.json already in memory (len bytes). */
ORTEP_API ortep_status ortep_tokenizer_open_json(const char *json, size_t len, ortep_tokenizer **out);
/* A GGUF file's tokenizer: its tokenizer.ggml.* metadata (byte-level BPE:
 * tokenizer.ggml.model "gpt2", pre-tokenizer qwen2, llama-bpe or gpt2) as
 * the tokenizer.json Hugging Face has for it, read by the same code, so the
 * ids are the same; SentencePiece vocabularies ("llama": pieces and scores)
 * as Hugging Face's LlamaConverter makes them (docs/text.md). A vocabulary
 * whose derived merges would exceed a stated bound is refused naming it.
 * (ortep_tokenizer_open on a .gguf uses a tokenizer.json beside the file
 * when there is one.) */
ORTEP_API ortep_status ortep_tokenizer_open_gguf(const char *path, ortep_tokenizer **out);
/* A tokenizer.json (len bytes) as tokenizer.ggml.* metadata into a GGUF
 * writer, as llama.cpp's converter writes it (byte-level BPE only:
 * ORTEP_E_NOT_SUPPORTED otherwise). */
ORTEP_API ortep_status ortep_tokenizer_add_to_gguf(ortep_gguf_writer *w, const char *json, size_t len);
ORTEP_API void ortep_tokenizer_close(ortep_tokenizer *tokenizer);
/* The Unicode version of the character classes every split regex uses
 * (\p{L}, \p{N}, \s, ...: utf8proc's tables, whatever PCRE2 was built with),
 * e.g. "15.0.0". */
ORTEP_API const char *ortep_tokenizer_unicode_version(void);

/* Ids run from 0 to vocab_size - 1 (the model's vocabulary and the added
 * tokens together; a padded model vocabulary beyond them is not counted). */
ORTEP_API size_t ortep_tokenizer_vocab_size(const ortep_tokenizer *tokenizer);

/* UTF-8 text (len bytes; invalid UTF-8 is refused) to ids; add_special adds
 * what the post-processor adds (e.g. LLaMA's BOS). *ids is allocated with
 * malloc (free() it; NULL when *n is 0). */
ORTEP_API ortep_status ortep_tokenizer_encode(const ortep_tokenizer *tokenizer, const char *text, size_t len,
                                              bool add_special, int32_t **ids, size_t *n);
/* Ids to UTF-8 text, NUL-terminated, *len bytes (malloc'd; free() it).
 * skip_special leaves special tokens out. Byte sequences that are not
 * valid UTF-8 become U+FFFD, one for each maximal ill-formed subpart (the
 * Unicode Standard's 3.9; Rust's from_utf8_lossy and Python do the same):
 * ED A0 80 gives three, a cut character one. An id outside the vocabulary
 * is refused naming it. */
ORTEP_API ortep_status ortep_tokenizer_decode(const ortep_tokenizer *tokenizer, const int32_t *ids, size_t n,
                                              bool skip_special, char **text, size_t *len);

/* A token's string as the vocabulary spells it ("Ġhello", "▁the",
 * "<0x0A>", "<|endoftext|>"), or NULL for an id out of range. */
ORTEP_API const char *ortep_tokenizer_token(const ortep_tokenizer *tokenizer, int32_t id);
/* The id of a vocabulary string; ORTEP_E_INVALID_ARGUMENT naming it when
 * there is none. */
ORTEP_API ortep_status ortep_tokenizer_token_id(const ortep_tokenizer *tokenizer, const char *token, int32_t *id);
ORTEP_API bool ortep_tokenizer_is_special(const ortep_tokenizer *tokenizer, int32_t id);

/* Streaming detokenization for generation: push ids as they come, get the
 * text they complete. A character spanning several tokens is emitted only
 * once all its bytes have come, so a terminal never shows half of it. */
typedef struct ortep_detokenizer ortep_detokenizer;
ORTEP_API ortep_status ortep_detokenizer_create(const ortep_tokenizer *tokenizer, bool skip_special,
                                                ortep_detokenizer **out);
ORTEP_API void ortep_detokenizer_destroy(ortep_detokenizer *stream);
/* *text (valid until the next call) receives the newly completed text,
 * *len bytes (possibly 0). */
ORTEP_API ortep_status ortep_detokenizer_push(ortep_detokenizer *stream, int32_t id, const char **text, size_t *len);
/* The bytes still held (an unfinished character) as U+FFFD, then a fresh
 * start. */
ORTEP_API ortep_status ortep_detokenizer_flush(ortep_detokenizer *stream, const char **text, size_t *len);

ORTEP_END_DECLS

#endif
