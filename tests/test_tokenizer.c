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
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "testutil.h"
#include "text/internal.h" /* the split regexes' Unicode classes */

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
  expect_ids(t, "hell\xc3\xb6 w\xc3\xb6rld \xe2\x82\xac", true,
             IDS(258, 195, 182, 260, 195, 182, 114, 263, 32, 226, 130, 172));
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
  ck_assert_status(ortep_tokenizer_decode(t, (const int32_t[]){5, -1}, 2, false, &text, &len),
                   ORTEP_E_INVALID_ARGUMENT);
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
      {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
       "[]}}",
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
    expect_roundtrip(t, "Hello, world! 42 \xe2\x82\xac<|endoftext|>", false,
                     "Hello, world! 42 \xe2\x82\xac<|endoftext|>");
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

/* "61 F1 80" -> bytes; "0061 FFFD" -> UTF-8. */
static size_t hex_bytes(const char *hex, unsigned char *out) {
  size_t n = 0;
  for (char *end; *hex; hex = end) {
    out[n++] = (unsigned char)strtoul(hex, &end, 16);
    while (*end == ' ') end++;
  }
  return n;
}
static size_t code_points(const char *hex, char *out) {
  size_t n = 0;
  for (char *end; *hex; hex = end) {
    unsigned long cp = strtoul(hex, &end, 16);
    if (cp < 0x80) {
      out[n++] = (char)cp;
    } else {
      ck_assert_uint_eq(cp, 0xFFFD); /* the tables use ASCII and U+FFFD */
      memcpy(out + n, "\xef\xbf\xbd", 3), n += 3;
    }
    while (*end == ' ') end++;
  }
  out[n] = '\0';
  return n;
}

/* The Unicode Standard's examples of U+FFFD substitution of maximal
 * subparts (chapter 3.9, Tables 3-8 to 3-11) and the cases the probe found,
 * through the batch decoder and the streaming one byte by byte (the
 * byte-level fixture's ids 0..255 are the bytes). */
START_TEST(utf8_repair_replaces_each_maximal_subpart) {
  static const struct {
    const char *bytes, *chars;
  } cases[] = {
      {"61 F1 80 80 E1 80 C2 62 80 63 80 BF 64", "61 FFFD FFFD FFFD 62 FFFD 63 FFFD FFFD 64"}, /* 3-8 */
      {"C0 AF E0 80 BF F0 81 82 41", "FFFD FFFD FFFD FFFD FFFD FFFD FFFD FFFD 41"},            /* non-shortest */
      {"ED A0 80 ED BF BF ED AF 41", "FFFD FFFD FFFD FFFD FFFD FFFD FFFD FFFD 41"},            /* surrogates */
      {"F4 91 92 93 FF 41 80 BF 42", "FFFD FFFD FFFD FFFD FFFD 41 FFFD FFFD 42"},              /* other */
      {"E1 80 E2 F0 91 92 F1 BF 41", "FFFD FFFD FFFD FFFD 41"},                                /* truncated */
      {"ED A0 80", "FFFD FFFD FFFD"},
      {"E0 80 80", "FFFD FFFD FFFD"},
      {"F4 90 80 80", "FFFD FFFD FFFD FFFD"},
      {"E2 82", "FFFD"},        /* a character cut by the end: one */
      {"41 E2 82 AC 42", NULL}, /* valid: the bytes themselves */
  };
  ortep_tokenizer *t = open_fixture("bytelevel_tokenizer.json");
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    unsigned char in[32];
    char want[128], *got, streamed[128] = "";
    size_t n = hex_bytes(cases[c].bytes, in), want_len, len;
    if (cases[c].chars)
      want_len = code_points(cases[c].chars, want);
    else
      memcpy(want, in, n), want[want_len = n] = '\0';
    int32_t ids[32];
    for (size_t i = 0; i < n; i++) ids[i] = in[i];
    ck_assert_ok(ortep_tokenizer_decode(t, ids, n, false, &got, &len));
    ck_assert_msg(len == want_len && !memcmp(got, want, len), "%s: %zu bytes, want %zu", cases[c].bytes, len, want_len);
    free(got);
    ortep_detokenizer *s;
    ck_assert_ok(ortep_detokenizer_create(t, false, &s));
    const char *out;
    for (size_t i = 0; i <= n; i++) {
      if (i < n)
        ck_assert_ok(ortep_detokenizer_push(s, ids[i], &out, &len));
      else
        ck_assert_ok(ortep_detokenizer_flush(s, &out, &len));
      strncat(streamed, out, len);
    }
    ck_assert_msg(!strcmp(streamed, want), "%s streamed differs from the batch decoder", cases[c].bytes);
    ortep_detokenizer_destroy(s);
  }
  ortep_tokenizer_close(t);
}
END_TEST

/* A tokenizer larger than the model's vocabulary is another model's and is
 * refused naming both; a padded model vocabulary is accepted, and its extra
 * ids decode to nothing, as Hugging Face's tokenizers do. */
START_TEST(tokenizer_and_model_vocabularies_are_compared_at_open) {
  char path[512];
  snprintf(path, sizeof path, "%s/bytelevel_tokenizer.json", ORTEP_TEST_DATA);
  ortep_tokenizer *t = (ortep_tokenizer *)1;
  ck_assert_status(ortep_tokenizer_open_for_vocab(path, 100, &t), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("268 token ids but the model's vocabulary has 100");
  ck_assert_ptr_null(t);
  ck_assert_ok(ortep_tokenizer_open_for_vocab(path, 300, &t));
  ck_assert_uint_eq(ortep_tokenizer_vocab_size(t), 268);
  char *text;
  size_t len;
  ck_assert_ok(ortep_tokenizer_decode(t, (const int32_t[]){259, 280, 299, 264}, 4, false, &text, &len));
  ck_assert_str_eq(text, "hello world");
  free(text);
  ck_assert_status(ortep_tokenizer_decode(t, (const int32_t[]){300}, 1, false, &text, &len), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("ids run from 0 to 299 (the model's vocabulary)");
  ortep_detokenizer *s;
  const char *out;
  ck_assert_ok(ortep_detokenizer_create(t, false, &s));
  ck_assert_ok(ortep_detokenizer_push(s, 290, &out, &len));
  ck_assert_uint_eq(len, 0);
  ck_assert_status(ortep_detokenizer_push(s, 300, &out, &len), ORTEP_E_INVALID_ARGUMENT);
  ortep_detokenizer_destroy(s);
  ortep_tokenizer_close(t);
  ck_assert_ok(ortep_tokenizer_open_for_vocab(path, 268, &t)); /* equal sizes: fine */
  ortep_tokenizer_close(t);
}
END_TEST

/* A gap in the ids has the empty token: pushed first into a fresh stream
 * (once undefined behaviour: memmove from NULL) or anywhere, it adds
 * nothing. */
START_TEST(an_empty_token_pushed_first_adds_nothing) {
  static const char json[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"c\": 2}, \"merges\": []}}";
  ortep_tokenizer *t;
  ck_assert_ok(ortep_tokenizer_open_json(json, sizeof json - 1, &t));
  ck_assert_str_eq(ortep_tokenizer_token(t, 1), "");
  ortep_detokenizer *s;
  const char *out;
  size_t len;
  ck_assert_ok(ortep_detokenizer_create(t, false, &s));
  ck_assert_ok(ortep_detokenizer_push(s, 1, &out, &len));
  ck_assert_uint_eq(len, 0);
  ck_assert_ok(ortep_detokenizer_push(s, 2, &out, &len));
  ck_assert_str_eq(out, "c");
  ck_assert_ok(ortep_detokenizer_flush(s, &out, &len));
  ck_assert_uint_eq(len, 0);
  ortep_detokenizer_destroy(s);
  ortep_tokenizer_close(t);
}
END_TEST

/* 20,000 added tokens that share their first byte ("a0" .. "a19999"): the
 * longest one at each position wins, whatever their number (a trie walk, not
 * a scan of the list); ortep-bench tokenizer times it. */
/* Whether the pattern, its Unicode classes rewritten as the tokenizer
 * rewrites them, matches the whole of code point cp. */
static bool class_matches(const char *pattern, uint32_t cp) {
  char *re;
  ck_assert_ok(ortep__regex_with_tables(pattern, &re));
  int err;
  PCRE2_SIZE at;
  pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &at, NULL);
  ck_assert_msg(c != NULL, "'%s' (from '%s') does not compile", re, pattern);
  free(re);
  uint8_t u8[4];
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  if (n == 1) u8[0] = (uint8_t)cp;
  if (n == 2) u8[0] = (uint8_t)(0xc0 | cp >> 6), u8[1] = (uint8_t)(0x80 | (cp & 63));
  if (n == 3)
    u8[0] = (uint8_t)(0xe0 | cp >> 12), u8[1] = (uint8_t)(0x80 | (cp >> 6 & 63)), u8[2] = (uint8_t)(0x80 | (cp & 63));
  if (n == 4)
    u8[0] = (uint8_t)(0xf0 | cp >> 18), u8[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
    u8[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), u8[3] = (uint8_t)(0x80 | (cp & 63));
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
  int rc = pcre2_match(c, u8, n, 0, 0, md, NULL);
  pcre2_match_data_free(md);
  pcre2_code_free(c);
  return rc > 0;
}

/* The classes the split regexes use hold utf8proc's code points in every
 * form they are written in, whether the rewrite patches PCRE2's class or
 * writes it out whole: a Kawi digit (U+11F50, Unicode 15) is \p{N}, not
 * \p{L}; U+180E (Cf since Unicode 6.3) is not \s, as in Oniguruma, where
 * PCRE2's own \s has it; U+0085 is \s; surrogates never appear. */
START_TEST(unicode_classes_are_utf8procs_in_every_form) {
  struct {
    const char *pattern;
    uint32_t cp;
    bool in;
  } cases[] = {
      {"\\p{N}", 0x11F50, true},
      {"[\\p{N}]", 0x11F50, true},
      {"\\P{N}", 0x11F50, false},
      {"[^\\p{N}]", 0x11F50, false},
      {"[\\P{N}]", 0x11F50, false},
      {"[x\\P{N}]", 'x', true},
      {"\\p{L}", 0x11F50, false},
      {"\\p{L}", 0x31350, true},
      {"[^\\s\\p{L}\\p{N}]", 0x11F50, false},
      {"\\pN", 0x0663, true},
      {"\\d", 0x11F50, true},
      {"\\D", 0x11F50, false},
      {"\\s", 0x180E, false},
      {"[\\s]", 0x180E, false},
      {"\\S", 0x180E, true},
      {"[\\S]", 0x180E, true},
      {"[^\\S]", 0x180E, false},
      {"\\s", 0x85, true},
      {"[\\S]", 0x85, false},
      {"[^\\S]", 0x85, true},
      {"\\s", 0x3000, true},
      {"\\p{^L}", 'a', false},
      {"\\p{L&}", 'a', true},
      {"\\p{Lo}", 0x31350, true},
      {"\\Q\\p{L}\\E", 'a', false},
      {"[[:alpha:]\\p{N}]", 0x11F50, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    ck_assert_msg(class_matches(cases[i].pattern, cases[i].cp) == cases[i].in, "'%s' %s U+%04X", cases[i].pattern,
                  cases[i].in ? "misses" : "matches", cases[i].cp);
  ck_assert_int_ge(atoi(ortep_tokenizer_unicode_version()), 15); /* the cases above are Unicode 15's */
}
END_TEST

START_TEST(many_added_tokens_match_longest_first) {
  enum { N = 20000 };
  size_t cap = 64 + (size_t)N * 40;
  char *json = malloc(cap);
  ck_assert_ptr_nonnull(json);
  int w = sprintf(json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0");
  for (int d = 0; d < 10; d++) w += sprintf(json + w, ", \"%d\": %d", d, 1 + d);
  w += sprintf(json + w, "}, \"merges\": []}, \"added_tokens\": [");
  for (int k = 0; k < N; k++) w += sprintf(json + w, "%s{\"id\": %d, \"content\": \"a%d\"}", k ? ", " : "", 11 + k, k);
  w += sprintf(json + w, "]}");
  ortep_tokenizer *t;
  ck_assert_ok(ortep_tokenizer_open_json(json, (size_t)w, &t));
  free(json);
  ck_assert_uint_eq(ortep_tokenizer_vocab_size(t), 11 + N);
  /* "a123456": "a12345" (the longest added token there), then "6"; "aa7": "a", then "a7" */
  expect_ids(t, "a123456", false, IDS(11 + 12345, 1 + 6));
  expect_ids(t, "aa7", false, IDS(0, 11 + 7));
  expect_ids(t, "a19999a20000", false, IDS(11 + 19999, 11 + 2000, 1 + 0));
  size_t big = 100000;
  char *text = malloc(big + 1);
  ck_assert_ptr_nonnull(text);
  memset(text, 'a', big), text[big] = '\0';
  int32_t *ids;
  size_t n;
  ck_assert_ok(ortep_tokenizer_encode(t, text, big, false, &ids, &n));
  ck_assert_uint_eq(n, big);
  ck_assert_int_eq(ids[0], 0);
  ck_assert_int_eq(ids[big - 1], 0);
  free(ids), free(text);
  ortep_tokenizer_close(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tokenizer");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, byte_level_bpe_matches_hugging_face);
  tcase_add_test(tc, unicode_classes_are_utf8procs_in_every_form);
  tcase_add_test(tc, sentencepiece_bpe_matches_hugging_face);
  tcase_add_test(tc, added_token_flags_match_hugging_face);
  tcase_add_test(tc, streaming_emits_whole_characters_only);
  tcase_add_test(tc, bad_input_and_unsupported_files_are_refused);
  tcase_add_test(tc, presets_have_a_tokenizer);
  tcase_add_test(tc, utf8_repair_replaces_each_maximal_subpart);
  tcase_add_test(tc, tokenizer_and_model_vocabularies_are_compared_at_open);
  tcase_add_test(tc, an_empty_token_pushed_first_adds_nothing);
  tcase_add_test(tc, many_added_tokens_match_longest_first);
  suite_add_tcase(s, tc);
  return test_run(s);
}
