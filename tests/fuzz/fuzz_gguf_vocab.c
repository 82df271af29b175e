/* fuzz_gguf_vocab.c: libFuzzer harness for tokenizers read from GGUF
 * metadata (text/gguf_vocab.c): SentencePiece vocabularies (pieces and
 * scores, their merges derived) and byte-level BPE ones. The input is the
 * GGUF file, given through a memfd. Opening must give ORTEP_OK or a
 * refusal (FORMAT, NOT_SUPPORTED, OUT_OF_MEMORY), never a crash, a leak or
 * unbounded work; an opened tokenizer encodes a text (or refuses it when a
 * character has no token and there is no unknown token) into ids of its
 * vocabulary, and decodes them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz_gguf_vocab", MFD_CLOEXEC);
  if (fd < 0) abort();
  for (size_t at = 0; at < size;) {
    ssize_t k = write(fd, data + at, size - at);
    if (k <= 0) abort();
    at += (size_t)k;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ortep_tokenizer *t = NULL;
  ortep_status s = ortep_tokenizer_open_gguf(path, &t);
  close(fd);
  if (s != ORTEP_OK) {
    if (t || (s != ORTEP_E_FORMAT && s != ORTEP_E_NOT_SUPPORTED && s != ORTEP_E_OUT_OF_MEMORY)) abort();
    return 0;
  }
  static const char text[] = "hello world! ab aab \xe2\x96\x81 caf\xc3\xa9 123 <|endoftext|>";
  int32_t *ids = NULL;
  size_t n = 0;
  s = ortep_tokenizer_encode(t, text, sizeof text - 1, true, &ids, &n);
  if (s == ORTEP_E_INVALID_ARGUMENT) {
    ortep_tokenizer_close(t);
    return 0;
  }
  if (s != ORTEP_OK) abort();
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= ortep_tokenizer_vocab_size(t)) abort();
  char *back = NULL;
  size_t len = 0;
  if (ortep_tokenizer_decode(t, ids, n, false, &back, &len) != ORTEP_OK) abort();
  free(back);
  free(ids);
  ortep_tokenizer_close(t);
  return 0;
}
