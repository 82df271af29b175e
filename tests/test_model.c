/* test_model.c: safetensors validation and config.json parsing: every
 * malformed input is a clear ORTEP_E_FORMAT error naming the tensor or key,
 * never a crash or an out-of-bounds read (ASan checks that); round trips of
 * the writer; synthetic presets open cleanly. */
#include <sys/stat.h>

#include "testutil.h"

/* A safetensors image: 8-byte length, header, then data_len zero bytes. */
static unsigned char *image(const char *header, size_t data_len, size_t *len) {
  size_t hl = strlen(header);
  *len = 8 + hl + data_len;
  unsigned char *b = calloc(1, *len);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, header, hl);
  return b;
}

static void expect_bad(const char *header, size_t data_len, const char *needle) {
  size_t len;
  unsigned char *b = image(header, data_len, &len);
  ortep_safetensors *st = (ortep_safetensors *)1;
  ck_assert_status(ortep_safetensors_parse(b, len, &st), ORTEP_E_FORMAT);
  ck_assert_ptr_null(st);
  ck_assert_error_mentions(needle);
  free(b);
}

START_TEST(valid_headers_parse) {
  size_t len;
  unsigned char *b = image(
      "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
      "\"data_offsets\":[0,16]},\"e\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[16,16]},"
      "\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}",
      24, &len);
  ortep_safetensors *st;
  ck_assert_ok(ortep_safetensors_parse(b, len, &st));
  ck_assert_uint_eq(ortep_safetensors_count(st), 3);
  const ortep_safetensors_entry *w = ortep_safetensors_find(st, "w");
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(w->dtype, ORTEP_DTYPE_F32);
  ck_assert_uint_eq(w->size, 16);
  ck_assert_ptr_eq(w->data, b + len - 24);
  ck_assert_uint_eq(ortep_safetensors_find(st, "i")->shape.rank, 0);
  ck_assert_ptr_null(ortep_safetensors_find(st, "nope"));
  ortep_safetensors_close(st);
  free(b);
}
END_TEST

START_TEST(malformed_headers_are_named_errors) {
  unsigned char tiny[5] = {1, 0, 0, 0, 0};
  ortep_safetensors *st;
  ck_assert_status(ortep_safetensors_parse(tiny, 5, &st), ORTEP_E_FORMAT);
  ck_assert_error_mentions("fewer than the 8-byte header length");
  unsigned char past[20] = {0xe8, 0x03}; /* header length 1000 */
  ck_assert_status(ortep_safetensors_parse(past, 20, &st), ORTEP_E_FORMAT);
  ck_assert_error_mentions("header length 1000 runs past the end of the file (20 bytes)");
  expect_bad("{\"w\": {\"dtype\": \"F32\",", 0, "not valid JSON");
  expect_bad("[1, 2]", 0, "not an object");
  expect_bad("{\"w\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w': unknown dtype 'F12'");
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "not supported by ortep");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
             "tensor 'w': data offsets [0, 16) run past the 8 bytes of data");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16, "F32 x 4 elements needs 16");
  expect_bad(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
      24, "overlap");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "reversed");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'data_offsets' must be an array of two integers");
  expect_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'dtype' is missing");
  expect_bad(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
      8, "appears twice");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
             "overflows");
  /* a second value after the header, and a duplicate inside an entry */
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}{}", 4,
             "unexpected bytes after the JSON value");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "key 'dtype' appears twice");
  ck_assert_status(ortep_safetensors_open("/nonexistent.safetensors", &st), ORTEP_E_IO);
}
END_TEST

/* A FIFO (or any non-regular file) must be refused at once, not block
 * forever waiting for a writer; a directory path too long for the file
 * names is refused rather than opening a truncated name. */
START_TEST(fifos_and_overlong_paths_are_refused_without_blocking) {
  char dir[64], p[4200];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_model *m;
  const char *files[] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    char saved[4300];
    snprintf(saved, sizeof saved, "%s.saved", p);
    ck_assert_int_eq(rename(p, saved), 0);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_status(ortep_model_open(dir, &m), ORTEP_E_IO);
    ck_assert_error_mentions("is not a regular file");
    ck_assert_error_mentions(files[i]);
    unlink(p);
    ck_assert_int_eq(rename(saved, p), 0);
  }
  ortep_safetensors *st;
  ck_assert_status(ortep_safetensors_open("/dev/null", &st), ORTEP_E_IO);
  ck_assert_error_mentions("not a regular file");
  /* an existing directory spelt with 4080 bytes: "dir/./././..." */
  size_t n = (size_t)snprintf(p, sizeof p, "%s", dir);
  while (n < 4080) n += (size_t)snprintf(p + n, sizeof p - n, "/.");
  ck_assert_status(ortep_model_open(p, &m), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("model directory path is");
  ck_assert_ok(ortep_model_open(dir, &m)); /* the files are back: it opens */
  ortep_model_close(m);
  test_model_dir_remove(dir);
}
END_TEST

START_TEST(writer_round_trips) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/ortep-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  float a[6] = {1, 2, 3, 4, 5, 6};
  uint16_t h[3] = {1, 2, 3};
  ortep_safetensors_entry e[] = {{"a", ORTEP_DTYPE_F32, SHAPE(2, 3), a, sizeof a},
                                 {"h", ORTEP_DTYPE_F16, SHAPE(3), h, sizeof h}};
  ck_assert_ok(ortep_safetensors_write(path, e, 2));
  ortep_safetensors *st;
  ck_assert_ok(ortep_safetensors_open(path, &st));
  const ortep_safetensors_entry *ra = ortep_safetensors_find(st, "a");
  ck_assert_mem_eq(ra->data, a, sizeof a);
  ck_assert_uint_eq((uintptr_t)ra->data % 8, 0); /* the header is padded to 8 */
  ck_assert_mem_eq(ortep_safetensors_find(st, "h")->data, h, sizeof h);
  ortep_safetensors_close(st);
  unlink(path);
  snprintf(path, sizeof path, "%s/no/such/dir/t.safetensors", dir);
  ck_assert_status(ortep_safetensors_write(path, e, 2), ORTEP_E_IO);
  rmdir(dir);
}
END_TEST

static const char good_config[] =
    "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":100,\"max_position_embeddings\":64,"
    "\"rms_norm_eps\":1e-5}";

START_TEST(config_parsing) {
  ortep_model_config c;
  ck_assert_ok(ortep_model_config_parse(good_config, strlen(good_config), &c));
  ck_assert_int_eq(c.arch, ORTEP_ARCH_LLAMA);
  ck_assert_int_eq(c.head_dim, 16);
  ck_assert(!c.attention_bias);
  ck_assert(!c.tie_word_embeddings);
  ck_assert_double_eq(c.rope_theta, 10000.0);
  const char *qwen =
      "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
      "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
      "\"max_position_embeddings\":8,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";
  ck_assert_ok(ortep_model_config_parse(qwen, strlen(qwen), &c));
  ck_assert_int_eq(c.arch, ORTEP_ARCH_QWEN2);
  ck_assert(c.attention_bias);
  ck_assert_int_eq(c.num_key_value_heads, 4);
  struct {
    const char *json, *needle;
  } bad[] = {
      {"{\"model_type\":\"llama\",", "not valid JSON (syntax error at line 1"},
      {"{\"model_type\":\"llama\"}", "missing required key 'hidden_size'"},
      {"{\"hidden_size\":64}", "missing required key 'model_type'"},
      {"{\"model_type\":\"gpt2\"}", "model_type 'gpt2' is not supported"},
      {"[]", "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_status(ortep_model_config_parse(bad[i].json, strlen(bad[i].json), &c), ORTEP_E_FORMAT);
    ck_assert_error_mentions(bad[i].needle);
  }
  /* bytes after the JSON value */
  char trailing[2048];
  snprintf(trailing, sizeof trailing, "%s {\"hidden_size\": 1}", good_config);
  ck_assert_status(ortep_model_config_parse(trailing, strlen(trailing), &c), ORTEP_E_FORMAT);
  ck_assert_error_mentions("unexpected bytes after the JSON value");
  snprintf(trailing, sizeof trailing, "%s \n\t ", good_config); /* whitespace is fine */
  ck_assert_ok(ortep_model_config_parse(trailing, strlen(trailing), &c));
  /* eos_token_id: an int or a list */
  snprintf(trailing, sizeof trailing, "%.*s,\"eos_token_id\":[7,99]}", (int)(strrchr(good_config, '}') - good_config),
           good_config);
  ck_assert_ok(ortep_model_config_parse(trailing, strlen(trailing), &c));
  ck_assert_uint_eq(c.n_eos_token_ids, 2);
  ck_assert_int_eq(c.eos_token_ids[0], 7);
  ck_assert_int_eq(c.eos_token_ids[1], 99);
  /* a good config with one change */
  struct {
    const char *from, *to, *needle;
  } edits[] = {
      {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":-1", "'rms_norm_eps' must be a finite number between 1e-30 and 1"},
      {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":1e999",
       "'rms_norm_eps' must be a finite number between 1e-30 and 1 (it is infinite)"},
      {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":1e-5,\"rope_theta\":1e999",
       "'rope_theta' must be a finite number between 1 and 1e+12"},
      {"\"hidden_size\":64", "\"hidden_size\":\"64\"", "'hidden_size' must be an integer between 1 and 1e12"},
      {"\"hidden_size\":64", "\"hidden_size\":1e999", "'hidden_size' must be an integer between 1 and 1e12"},
      /* Python's json keeps the last value, cJSON the first: refused, naming the key */
      {"\"rms_norm_eps\":1e-5", "\"rope_scaling\":null,\"rms_norm_eps\":1e-5,\"rope_scaling\":{\"type\":\"linear\"}",
       "key 'rope_scaling' appears twice"},
      {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":1e-5,\"x\":{\"a\":1,\"a\":2}", "key 'a' appears twice"},
      /* products of config values that overflow (UB before) or make absurd tensors */
      {"\"hidden_size\":64", "\"hidden_size\":64,\"head_dim\":1000000000000", "more than 2^40 elements"},
      {"\"intermediate_size\":128", "\"intermediate_size\":100000000000", "more than 2^40 elements"},
      {"\"vocab_size\":100,", "\"vocab_size\":100,\"eos_token_id\":100,", "'eos_token_id' must be a token id"},
      {"\"vocab_size\":100,", "\"vocab_size\":100,\"eos_token_id\":[1,\"2\"],", "'eos_token_id' must be a token id"},
      {"\"num_key_value_heads\":2", "\"num_key_value_heads\":3", "not a multiple of num_key_value_heads 3"},
      {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":1e-5,\"rope_scaling\":{\"type\":\"linear\"}", "rope_scaling"},
      {"\"vocab_size\":100,", "", "missing required key 'vocab_size'"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char buf[1024];
    const char *at = strstr(good_config, edits[i].from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - good_config), good_config, edits[i].to,
             at + strlen(edits[i].from));
    ck_assert_status(ortep_model_config_parse(buf, strlen(buf), &c), ORTEP_E_FORMAT);
    ck_assert_error_mentions(edits[i].needle);
  }
}
END_TEST

static void rewrite_config(const char *dir, const char *from, const char *to) {
  char path[128], buf[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "r");
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *at = strstr(buf, from);
  ck_assert_msg(at != NULL, "config lacks %s", from);
  char out[4096];
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
  f = fopen(path, "w");
  fputs(out, f);
  fclose(f);
}

START_TEST(models_check_weights_against_the_config) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_BF16);
  ortep_model *m;
  ck_assert_ok(ortep_model_open(dir, &m));
  ck_assert_int_eq(ortep_model_get_config(m)->hidden_size, 64);
  ck_assert_int_eq(ortep_model_tensor(m, "model.embed_tokens.weight")->dtype, ORTEP_DTYPE_BF16);
  ck_assert_uint_gt(ortep_model_weight_bytes(m), 0);
  ortep_model_close(m);
  /* the config says untied: lm_head.weight must exist */
  rewrite_config(dir, "\"tie_word_embeddings\":\ttrue", "\"tie_word_embeddings\":\tfalse");
  ck_assert_status(ortep_model_open(dir, &m), ORTEP_E_FORMAT);
  ck_assert_error_mentions("tensor 'lm_head.weight' is missing");
  rewrite_config(dir, "\"tie_word_embeddings\":\tfalse", "\"tie_word_embeddings\":\ttrue");
  /* a different hidden size: shapes no longer match */
  rewrite_config(dir, "\"intermediate_size\":\t176", "\"intermediate_size\":\t192");
  ck_assert_status(ortep_model_open(dir, &m), ORTEP_E_FORMAT);
  ck_assert_error_mentions(
      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [176, 64]; the config implies [192, 64]");
  rewrite_config(dir, "\"intermediate_size\":\t192", "\"intermediate_size\":\t176");
  /* a broken JSON */
  rewrite_config(dir, "\"hidden_size\":", "\"hidden_size\"");
  ck_assert_status(ortep_model_open(dir, &m), ORTEP_E_FORMAT);
  ck_assert_error_mentions("config.json: not valid JSON");
  test_model_dir_remove(dir);
  ck_assert_status(ortep_model_open(dir, &m), ORTEP_E_IO);
  ck_assert_status(ortep_model_write_synthetic(dir, "huge", ORTEP_DTYPE_F32, 1), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("tiny, tiny-llama, tiny-wide-heads, small, qwen2.5-0.5b");
}
END_TEST

int main(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, valid_headers_parse);
  tcase_add_test(tc, malformed_headers_are_named_errors);
  tcase_add_test(tc, writer_round_trips);
  tcase_add_test(tc, fifos_and_overlong_paths_are_refused_without_blocking);
  tcase_add_test(tc, config_parsing);
  tcase_add_test(tc, models_check_weights_against_the_config);
  suite_add_tcase(s, tc);
  return test_run(s);
}
