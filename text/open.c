/*
 * open.c: a tokenizer from a path: a tokenizer.json file, a model directory
 * holding one, or a GGUF file (the tokenizer.json beside it, else its
 * metadata: gguf_vocab.c), checked against the model's vocabulary. The
 * entry the others sit under: tokenizer.c reads documents, gguf_vocab.c
 * turns GGUF metadata into one, and neither knows about paths' kinds.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/internal.h"

#define TOKENIZER_LIMIT ((size_t)256 << 20)

ortep_status ortep_tokenizer_open(const char *path, ortep_tokenizer **out) {
  return ortep_tokenizer_open_for_vocab(path, 0, out);
}

/* Whether path is a GGUF file (its magic). */
static bool is_gguf(const char *path) {
  FILE *f = fopen(path, "rb");
  char m[4] = {0};
  bool yes = f && fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
  if (f) fclose(f);
  return yes;
}

ortep_status ortep_tokenizer_open_for_vocab(const char *path, size_t model_vocab, ortep_tokenizer **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open: out is NULL");
  *out = NULL;
  if (!path) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open: the path is NULL");
  char file[4096];
  struct stat sb;
  bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
  int w = dir ? snprintf(file, sizeof file, "%s/tokenizer.json", path) : snprintf(file, sizeof file, "%s", path);
  if (!dir && is_gguf(path) && (size_t)w < sizeof file) {
    /* a .gguf: the tokenizer.json beside it wins, else its metadata */
    char *slash = strrchr(file, '/');
    size_t at = slash ? (size_t)(slash - file) + 1 : 0;
    if (at + sizeof "tokenizer.json" <= sizeof file) snprintf(file + at, sizeof file - at, "tokenizer.json");
    if (access(file, F_OK) != 0) {
      ortep_status gst = ortep_tokenizer_open_gguf(path, out);
      return gst == ORTEP_OK ? ortep__tokenizer_fit_vocab(*out, path, model_vocab, out) : gst;
    }
  }
  if (w < 0 || (size_t)w >= sizeof file)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_tokenizer_open: the path is longer than %zu bytes",
                       sizeof file - 1);
  char *text = NULL;
  size_t len = 0;
  ortep_status st = ortep__read_file(file, TOKENIZER_LIMIT, "a tokenizer.json", &text, &len);
  if (st != ORTEP_OK) return ortep__wrap(st, "opening the tokenizer (a model directory needs a tokenizer.json)");
  st = ortep__tokenizer_from_json(text, len, file, out);
  ortep__free(text);
  return st == ORTEP_OK ? ortep__tokenizer_fit_vocab(*out, file, model_vocab, out) : st;
}
