/* test_tokenizer.c: tokenizer.json through the public API on two small
 * hand-made files (tests/data): a byte-level BPE (Qwen-style split regex,
 * ByteLevel, an added special token and an overlapping added token) and a
 * SentencePiece-style BPE (Prepend/Replace normalizers, byte fallback,
 * TemplateProcessing with BOS, the Replace/ByteFallback/Fuse/Strip decoder),
 * and the byte-level one with lstrip / rstrip / single_word added tokens.
 * The expected ids were recorded from Hugging Face's tokenizers (the Rust
 * library, through its Node binding) on the same files. Also: merges by rank,
 * streaming detokenization holding a character cut across tokens, U+FFFD
 * for bytes that never form one, and the errors (invalid UTF-8, unknown ids
 * and tokens, unsupported tokenizer.json contents). */
#include "testutil.h"

#ifndef ORTEP_TEST_DATA
#error "ORTEP_TEST_DATA (the tests/data folder) must be defined"
#endif

static ortep_tokenizer *open_fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", ORTEP_TEST_DATA, name);
  ortep_tokenizer *t;
  ck_assert_ok(ortep_tokenizer_open(path, &t));
  return t;
}

static void expect_ids(const ortep_tokenizer *t, const char *text, bool special, const int32_t *want, size_t n) {
  int32_t *ids;
  size_t got;
  ck_assert_ok(ortep_tokenizer_encode(t, text, strlen(text), special, &ids, &got));
  ck_assert_msg(got == n, "'%s': %zu ids, want %zu", text, got, n);
  for (size_t i = 0; i < n; i++) ck_assert_msg(ids[i] == want[i], "'%s' id %zu: %d, want %d", text, i, ids[i], want[i]);
  free(ids);
}

static void expect_roundtrip(const ortep_tokenizer *t, const char *text, bool special, const char *want) {
  int32_t *ids;
  size_t n, len;
  char *back;
  ck_assert_ok(ortep_tokenizer_encode(t, text, strlen(text), special, &ids, &n));
  ck_assert_ok(ortep_tokenizer_decode(t, ids, n, false, &back, &len));
  ck_assert_str_eq(back, want);
  ck_assert_uint_eq(len, strlen(want));
  free(ids), free(back);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

START_TEST(byte_level_bpe_matches_hugging_face) {
  ortep_tokenizer *t = open_fixture("bytelevel_tokenizer.json");
  ck_assert_uint_eq(ortep_tokenizer_vocab_size(t), 268);
  expect_ids(t, "hello world", true, IDS(259, 264));
  /* the longest added token wins; added tokens are never merged */
  expect_ids(t, "hello<|end|>x world<|end|>", true, IDS(259, 267, 264, 266));
  /* characters without merges fall to their bytes */
  expect_ids(t, "hell\xc3\xb6 w\xc3\xb6rld \xe2\x82\xac", true, IDS(258, 195, 182, 260, 195, 182, 114, 263, 32, 226, 130, 172));
  expect_ids(t, "  hello", true, IDS(32, 32, 259));
  expect_roundtrip(t, "hello<|end|>x world \xe2\x82\xac  \n\t!", false, "hello<|end|>x world \xe2\x82\xac  \n\t!");
  ck_assert_str_eq(ortep_tokenizer_token(t, 259), "hello");
  ck_assert_str_eq(ortep_tokenizer_token(t, 264), "\xc4\xa0world"); /* "Ġworld" */
  ck_assert_ptr_null(ortep_tokenizer_token(t, 268));
  int32_t id;
  ck_assert_ok(ortep_tokenizer_token_id(t, "<|end|>", &id));
  ck_assert_int_eq(id, 266);
  ck_assert(ortep_tokenizer_is_special(t, 266));
  ck_assert(!ortep_tokenizer_is_special(t, 267)); /* added, not special */
  ck_assert(!ortep_tokenizer_is_special(t, 259));
  ck_assert_status(ortep_tokenizer_token_id(t, "nope", &id), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("\"nope\"");
  /* skip_special drops <|end|> but keeps the plain added token */
  char *text;
  size_t len;
  ck_assert_ok(ortep_tokenizer_decode(t, (const int32_t[]){259, 266, 267}, 3, true, &text, &len));
  ck_assert_str_eq(text, "hello<|end|>x");
  free(text);
  /* empty text: no ids */
  int32_t *ids;
  size_t n;
  ck_assert_ok(ortep_tokenizer_encode(t, "", 0, true, &ids, &n));
  ck_assert_uint_eq(n, 0);
  ck_assert_ptr_null(ids);
  ortep_tokenizer_close(t);
}
END_TEST

START_TEST(sentencepiece_bpe_matches_hugging_face) {
  ortep_tokenizer *t = open_fixture("sentencepiece_tokenizer.json");
  expect_ids(t, "hello world", true, IDS(1, 272, 277));
  expect_ids(t, "hello world", false, IDS(272, 277)); /* no BOS without add_special */
  /* "€" is not in the vocabulary: its three bytes as <0xE2> <0x82> <0xAC> */
  expect_ids(t, "hello \xe2\x82\xac", true, IDS(1, 272, 259, 229, 133, 175));
  expect_ids(t, "hi  world", true, IDS(1, 259, 260, 108, 259, 277));
  expect_roundtrip(t, "hello \xe2\x82\xac world", false, "hello \xe2\x82\xac world");
  char *text;
  size_t len;
  ck_assert_ok(ortep_tokenizer_decode(t, (const int32_t[]){1, 272, 277, 2}, 4, true, &text, &len));
  ck_assert_str_eq(text, "hello world"); /* BOS/EOS skipped, the leading space stripped */
  free(text);
  /* a lone continuation byte decodes to U+FFFD */
  ck_assert_ok(ortep_tokenizer_decode(t, (const int32_t[]){272, 133}, 2, false, &text, &len));
  ck_assert_str_eq(text, "hello\xef\xbf\xbd");
  free(text);
  ortep_tokenizer_close(t);
}
END_TEST

/* Added tokens with lstrip (takes the whitespace before it), rstrip (after
 * it) and single_word (only between non-word characters), against Hugging
 * Face's ids on the same file. */
START_TEST(added_token_flags_match_hugging_face) {
  ortep_tokenizer *t = open_fixture("bytelevel_flags_tokenizer.json");
  expect_ids(t, "a  <|L|>b", false, IDS(97, 268, 98));
  expect_ids(t, "a<|R|>  b", false, IDS(97, 269, 98));
  expect_ids(t, "a word b", false, IDS(97, 32, 270, 32, 98));
  expect_ids(t, "awordb", false, IDS(97, 119, 261, 100, 98)); /* inside a word: not the added token */
  expect_ids(t, "words word,", false, IDS(119, 261, 100, 115, 32, 270, 44));
  expect_ids(t, "x<|L|> <|R|> y", false, IDS(120, 268, 32, 269, 121));
  ortep_tokenizer_close(t);
}
END_TEST

/* Streaming: "€" arrives as three byte tokens; nothing is emitted until the
 * last one, then the whole character; an unfinished character is flushed as
 * U+FFFD. The Strip decoder removes the leading space once. */
START_TEST(streaming_emits_whole_characters_only) {
  ortep_tokenizer *t = open_fixture("sentencepiece_tokenizer.json");
  ortep_detokenizer *s;
  ck_assert_ok(ortep_detokenizer_create(t, true, &s));
  const char *out;
  size_t len;
  char all[128] = "";
  /* <s> (skipped), "▁hello", "▁", the bytes E2 82 AC, "▁world" */
  const int32_t seq[] = {1, 272, 259, 229, 133, 175, 277};
  const size_t want_len[] = {0, 5, 1, 0, 0, 3, 6};
  for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
    ck_assert_ok(ortep_detokenizer_push(s, seq[i], &out, &len));
    ck_assert_msg(len == want_len[i], "push %zu: %zu bytes, want %zu", i, len, want_len[i]);
    strncat(all, out, len);
  }
  ck_assert_str_eq(all, "hello \xe2\x82\xac world");
  ck_assert_ok(ortep_detokenizer_push(s, 229, &out, &len)); /* a cut character ... */
  ck_assert_uint_eq(len, 0);
  ck_assert_ok(ortep_detokenizer_flush(s, &out, &len)); /* ... flushed as U+FFFD */
  ck_assert_uint_eq(len, 3);
  ck_assert_mem_eq(out, "\xef\xbf\xbd", 3);
  ck_assert_status(ortep_detokenizer_push(s, 100000, &out, &len), ORTEP_E_INVALID_ARGUMENT);
  ortep_detokenizer_destroy(s);
  ortep_tokenizer_close(t);
}
END_TEST

START_TEST(bad_input_and_unsupported_files_are_refused) {
  ortep_tokenizer *t = open_fixture("bytelevel_tokenizer.json");
  int32_t *ids = NULL;
  size_t n = 9;
  ck_assert_status(ortep_tokenizer_encode(t, "ok \xff bad", 8, true, &ids, &n), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not valid UTF-8 at byte 3");
  ck_assert_uint_eq(n, 0);
  char *text = NULL;
  size_t len;
  ck_assert_status(ortep_tokenizer_decode(t, (const int32_t[]){5, -1}, 2, false, &text, &len), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("outside the vocabulary");
  ck_assert_ptr_null(text);
  ortep_tokenizer_close(t);
  /* unsupported contents are refused at open, naming them */
  char dir[] = "/tmp/ortep-tok-XXXXXX", path[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  struct {
    const char *json, *needle;
  } bad[] = {
      {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "only BPE"},
      {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
       "Lowercase"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "lacks"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "share one id"},
      {"{\"model\": {\"type\": \"BPE\"", "not valid JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(path, "w");
    fputs(bad[i].json, f);
    fclose(f);
    ck_assert_status(ortep_tokenizer_open(dir, &t), ORTEP_E_FORMAT);
    ck_assert_error_mentions(bad[i].needle);
    ck_assert_ptr_null(t);
  }
  remove(path);
  ck_assert_status(ortep_tokenizer_open(dir, &t), ORTEP_E_IO);
  ck_assert_error_mentions("tokenizer.json");
  rmdir(dir);
}
END_TEST

/* Every synthetic preset ships a byte-level tokenizer.json of its
 * vocabulary size whose last id is the special <|endoftext|>. */
START_TEST(presets_have_a_tokenizer) {
  const char *presets[] = {"tiny", "tiny-llama"};
  const size_t vocab[] = {512, 384};
  for (int i = 0; i < 2; i++) {
    char dir[64];
    test_model_dir(dir, sizeof dir, presets[i], ORTEP_DTYPE_F32);
    ortep_tokenizer *t;
    ck_assert_ok(ortep_tokenizer_open(dir, &t));
    ck_assert_uint_eq(ortep_tokenizer_vocab_size(t), vocab[i]);
    ck_assert_str_eq(ortep_tokenizer_token(t, (int32_t)vocab[i] - 1), "<|endoftext|>");
    ck_assert(ortep_tokenizer_is_special(t, (int32_t)vocab[i] - 1));
    expect_roundtrip(t, "Hello, world! 42 \xe2\x82\xac<|endoftext|>", false, "Hello, world! 42 \xe2\x82\xac<|endoftext|>");
    int32_t *ids;
    size_t n;
    ck_assert_ok(ortep_tokenizer_encode(t, " a", 2, false, &ids, &n));
    ck_assert_uint_eq(n, 1); /* " a" is one of the first merges (space, then each character) */
    free(ids);
    ortep_tokenizer_close(t);
    test_model_dir_remove(dir);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("tokenizer");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, byte_level_bpe_matches_hugging_face);
  tcase_add_test(tc, sentencepiece_bpe_matches_hugging_face);
  tcase_add_test(tc, added_token_flags_match_hugging_face);
  tcase_add_test(tc, streaming_emits_whole_characters_only);
  tcase_add_test(tc, bad_input_and_unsupported_files_are_refused);
  tcase_add_test(tc, presets_have_a_tokenizer);
  suite_add_tcase(s, tc);
  return test_run(s);
}
