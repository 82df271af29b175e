/* test_gguf.c: the GGUF reader and writer (gguf.h). A file written with every
 * metadata type, string arrays and tensors of the five dtypes ortep reads (and
 * a Q4_K one it names but does not read) parses back to the same values,
 * shapes outermost first and data in place; then every way a file can be
 * wrong is refused as ORTEP_E_FORMAT naming the key or tensor: each cut of
 * the file, a changed magic or version, duplicates, a bad alignment, an
 * array of arrays, zero or five dimensions, rows not whole blocks, an
 * unknown GGML type, misaligned, out-of-range and overlapping data. */
#include <math.h>

#include "testutil.h"

static char g_path[96];

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len ? *len : 1);
  ck_assert_uint_eq(fread(b, 1, *len, f), *len);
  fclose(f);
  return b;
}

/* A small valid file: every metadata type and five tensors. */
static void write_sample(const char *path) {
  ortep_gguf_writer *w;
  ck_assert_ok(ortep_gguf_writer_create(&w));
  ck_assert_ok(ortep_gguf_writer_add_string(w, "general.architecture", "qwen2"));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "qwen2.block_count", 24));
  ck_assert_ok(ortep_gguf_writer_add_f32(w, "qwen2.rope.freq_base", 1e6f));
  ck_assert_ok(ortep_gguf_writer_add_bool(w, "general.flag", true));
  const char *toks[3] = {"a", "", "hello"};
  ck_assert_ok(ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", toks, 3));
  int32_t types[3] = {1, -2, 3};
  ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.token_type", ORTEP_GGUF_I32, types, 3));
  float f32[64];
  uint16_t h16[64];
  for (int i = 0; i < 64; i++) f32[i] = (float)i - 32.0f, h16[i] = ortep_f32_to_bf16(f32[i]);
  ortep_shape s2 = SHAPE(2, 32), s1 = SHAPE(64);
  uint8_t q8[2 * 34], q4[2 * 18], qk[144];
  ck_assert_ok(ortep_quantize(ORTEP_DTYPE_Q8_0, f32, 64, q8));
  ck_assert_ok(ortep_quantize(ORTEP_DTYPE_Q4_0, f32, 64, q4));
  memset(qk, 7, sizeof qk);
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "f32", ORTEP_GGML_F32, &s2, f32, sizeof f32));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "bf16", ORTEP_GGML_BF16, &s1, h16, sizeof h16));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "q8", ORTEP_GGML_Q8_0, &s2, q8, sizeof q8));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "q4", ORTEP_GGML_Q4_0, &s2, q4, sizeof q4));
  ortep_shape sk = SHAPE(1, 256);
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "qk", 12 /* Q4_K */, &sk, qk, sizeof qk));
  /* what the writer refuses */
  ck_assert_status(ortep_gguf_writer_add_tensor(w, "bad", ORTEP_GGML_Q8_0, &s1, q8, 10), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_gguf_writer_add_array(w, "bad", ORTEP_GGUF_STRING, toks, 3), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ok(ortep_gguf_writer_write(w, path));
  ortep_gguf_writer_destroy(w);
}

static void setup(void) {
  snprintf(g_path, sizeof g_path, "/tmp/ortep-gguf-%d.gguf", (int)getpid());
  write_sample(g_path);
}
static void teardown(void) { unlink(g_path); }

START_TEST(a_written_file_reads_back) {
  ortep_gguf *g;
  ck_assert_ok(ortep_gguf_open(g_path, &g));
  ck_assert_uint_eq(ortep_gguf_version(g), 3);
  ck_assert_uint_eq(ortep_gguf_kv_count(g), 6);
  const ortep_gguf_kv *kv = ortep_gguf_find_kv(g, "general.architecture");
  ck_assert_int_eq(kv->type, ORTEP_GGUF_STRING);
  ck_assert(kv->len == 5 && !memcmp(kv->str, "qwen2", 5));
  kv = ortep_gguf_find_kv(g, "qwen2.block_count");
  ck_assert(kv->type == ORTEP_GGUF_U32 && kv->u == 24);
  ck_assert(ortep_gguf_find_kv(g, "qwen2.rope.freq_base")->f == 1e6);
  ck_assert(ortep_gguf_find_kv(g, "general.flag")->u == 1);
  kv = ortep_gguf_find_kv(g, "tokenizer.ggml.tokens");
  ck_assert(kv->type == ORTEP_GGUF_ARRAY && kv->elem_type == ORTEP_GGUF_STRING && kv->count == 3);
  const char *s;
  size_t n;
  ck_assert_ok(ortep_gguf_array_string(g, kv, 2, &s, &n));
  ck_assert(n == 5 && !memcmp(s, "hello", 5));
  ck_assert_ok(ortep_gguf_array_string(g, kv, 1, &s, &n));
  ck_assert_uint_eq(n, 0);
  ck_assert_status(ortep_gguf_array_string(g, kv, 3, &s, &n), ORTEP_E_OUT_OF_RANGE);
  kv = ortep_gguf_find_kv(g, "tokenizer.ggml.token_type");
  ck_assert(kv->elem_type == ORTEP_GGUF_I32 && kv->count == 3);
  int32_t t1;
  memcpy(&t1, (const uint8_t *)kv->data + 4, 4);
  ck_assert_int_eq(t1, -2);
  ck_assert_status(ortep_gguf_array_string(g, kv, 0, &s, &n), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ptr_null(ortep_gguf_find_kv(g, "nope"));
  ck_assert_uint_eq(ortep_gguf_tensor_count(g), 5);
  const ortep_gguf_tensor *t = ortep_gguf_find_tensor(g, "f32");
  ck_assert(t->dtype == ORTEP_DTYPE_F32 && t->shape.rank == 2 && t->shape.dims[0] == 2 && t->shape.dims[1] == 32);
  ck_assert_uint_eq(t->size, 256);
  ck_assert_float_eq(((const float *)t->data)[33], 1.0f);
  ck_assert_uint_eq((uintptr_t)t->data % 32, 0);
  t = ortep_gguf_find_tensor(g, "q8");
  ck_assert(t->dtype == ORTEP_DTYPE_Q8_0 && t->size == 68);
  float back[64];
  ck_assert_ok(ortep_dequantize(ORTEP_DTYPE_Q8_0, t->data, 64, back));
  ck_assert_float_eq_tol(back[0], -32.0f, 0.01f); /* the f16 scale's rounding */
  ck_assert(ortep_gguf_find_tensor(g, "q4")->dtype == ORTEP_DTYPE_Q4_0);
  ck_assert(ortep_gguf_find_tensor(g, "bf16")->shape.rank == 1);
  t = ortep_gguf_find_tensor(g, "qk"); /* named, not read */
  ck_assert(t->dtype == ORTEP_DTYPE_COUNT && t->ggml_type == 12 && t->size == 144);
  ck_assert_str_eq(ortep_gguf_type_name(t->ggml_type), "Q4_K");
  ck_assert_str_eq(ortep_gguf_type_name(999), "type 999");
  ortep_gguf_close(g);
}
END_TEST

/* Offsets in the sample (the writer's layout): magic 0, version 4, counts
 * 8 / 16, then the first key's length at 24. */
static void expect_refused(const uint8_t *b, size_t len, const char *why) {
  ortep_gguf *g = NULL;
  ck_assert_status(ortep_gguf_parse(b, len, &g), ORTEP_E_FORMAT);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(ortep_last_error(), why), "'%s' lacks '%s'", ortep_last_error(), why);
}

START_TEST(every_cut_is_refused) {
  size_t len;
  uint8_t *b = slurp(g_path, &len);
  ortep_gguf *g;
  ck_assert_ok(ortep_gguf_parse(b, len, &g));
  size_t end = 0; /* the last tensor's last byte: the padding after it is not needed */
  for (size_t i = 0; i < ortep_gguf_tensor_count(g); i++) {
    const ortep_gguf_tensor *t = ortep_gguf_tensor_at(g, i);
    size_t e = (size_t)((const uint8_t *)t->data - b) + t->size;
    if (e > end) end = e;
  }
  ortep_gguf_close(g);
  ck_assert_uint_lt(end, len);
  ck_assert_ok(ortep_gguf_parse(b, end, &g));
  ortep_gguf_close(g);
  for (size_t cut = 0; cut < end; cut++) {
    g = NULL;
    ck_assert_msg(ortep_gguf_parse(b, cut, &g) == ORTEP_E_FORMAT, "a file cut at %zu of %zu bytes was accepted", cut,
                  len);
    ck_assert_ptr_null(g);
  }
  free(b);
}
END_TEST

/* A file with one crafted metadata entry or tensor table, by hand. */
typedef struct craft {
  uint8_t b[1024];
  size_t n;
} craft;
static void c_u32(craft *c, uint32_t v) { memcpy(c->b + c->n, &v, 4), c->n += 4; }
static void c_u64(craft *c, uint64_t v) { memcpy(c->b + c->n, &v, 8), c->n += 8; }
static void c_str(craft *c, const char *s) {
  c_u64(c, strlen(s));
  memcpy(c->b + c->n, s, strlen(s)), c->n += strlen(s);
}
static void c_head(craft *c, uint64_t nt, uint64_t nkv) {
  c->n = 0;
  c_u32(c, 0x46554747u), c_u32(c, 3), c_u64(c, nt), c_u64(c, nkv);
}
/* one tensor's info: name, dims (innermost first), type, offset */
static void c_tensor(craft *c, const char *name, uint32_t nd, const uint64_t *dims, uint32_t type, uint64_t off) {
  c_str(c, name), c_u32(c, nd);
  for (uint32_t d = 0; d < nd; d++) c_u64(c, dims[d]);
  c_u32(c, type), c_u64(c, off);
}
static void c_data(craft *c, size_t bytes) {
  while (c->n % 32) c->b[c->n++] = 0;
  memset(c->b + c->n, 0, bytes), c->n += bytes;
}

START_TEST(bad_files_are_refused_naming_the_problem) {
  size_t len;
  uint8_t *b = slurp(g_path, &len);
  b[0] ^= 1;
  expect_refused(b, len, "not a GGUF file");
  b[0] ^= 1;
  b[4] = 1;
  expect_refused(b, len, "version 1; ortep reads GGUF versions 2 and 3");
  b[4] = 3;
  b[16] = 0xff, b[17] = 0xff; /* a huge metadata count */
  expect_refused(b, len, "cannot fit");
  free(b);
  /* an empty file (mapped as nothing: its parse began at a null pointer) */
  ck_assert_int_eq(truncate(g_path, 0), 0);
  ortep_gguf *empty = NULL;
  ck_assert_status(ortep_gguf_open(g_path, &empty), ORTEP_E_FORMAT);
  ck_assert_ptr_null(empty);
  ck_assert_msg(strstr(ortep_last_error(), "the file is empty") && strstr(ortep_last_error(), g_path), "%s",
                ortep_last_error());
  craft c;
  /* metadata */
  c_head(&c, 0, 2), c_str(&c, "k"), c_u32(&c, ORTEP_GGUF_U32), c_u32(&c, 1), c_str(&c, "k"), c_u32(&c, ORTEP_GGUF_U32),
      c_u32(&c, 2);
  expect_refused(c.b, c.n, "metadata key 'k' appears twice");
  c_head(&c, 0, 1), c_str(&c, "k"), c_u32(&c, 13), c_u32(&c, 0);
  expect_refused(c.b, c.n, "value type 13 is not one GGUF defines");
  c_head(&c, 0, 1), c_str(&c, "k"), c_u32(&c, ORTEP_GGUF_ARRAY), c_u32(&c, ORTEP_GGUF_ARRAY), c_u64(&c, 1);
  expect_refused(c.b, c.n, "not arrays");
  c_head(&c, 0, 1), c_str(&c, "k"), c_u32(&c, ORTEP_GGUF_STRING), c_u64(&c, 1000);
  expect_refused(c.b, c.n, "its string runs past the end");
  c_head(&c, 0, 1), c_str(&c, ""), c_u32(&c, ORTEP_GGUF_U8);
  expect_refused(c.b, c.n, "a key of 0 bytes");
  c_head(&c, 0, 1), c_str(&c, "general.alignment"), c_u32(&c, ORTEP_GGUF_U32), c_u32(&c, 48);
  expect_refused(c.b, c.n, "general.alignment must be a u32 power of two");
  /* tensors */
  uint64_t d2[2] = {32, 2}, d0[1] = {0}, d5[5] = {32, 1, 1, 1, 1}, d48[1] = {48};
  c_head(&c, 1, 0), c_tensor(&c, "w", 1, d0, ORTEP_GGML_F32, 0), c_data(&c, 0);
  expect_refused(c.b, c.n, "tensor 'w': dimension 0 is 0");
  c_head(&c, 1, 0), c_tensor(&c, "w", 5, d5, ORTEP_GGML_F32, 0), c_data(&c, 128);
  expect_refused(c.b, c.n, "tensor 'w': 5 dimensions");
  c_head(&c, 1, 0), c_tensor(&c, "w", 1, d48, ORTEP_GGML_Q8_0, 0), c_data(&c, 64);
  expect_refused(c.b, c.n, "its rows of 48 values are not whole Q8_0 blocks of 32");
  c_head(&c, 1, 0), c_tensor(&c, "w", 2, d2, 16 /* IQ2_XXS */, 0), c_data(&c, 64);
  expect_refused(c.b, c.n, "GGML type IQ2_XXS, which ortep does not read");
  c_head(&c, 1, 0), c_tensor(&c, "w", 2, d2, ORTEP_GGML_F32, 8), c_data(&c, 256);
  expect_refused(c.b, c.n, "offset 8 is not a multiple of the alignment 32");
  c_head(&c, 1, 0), c_tensor(&c, "w", 2, d2, ORTEP_GGML_F32, 0), c_data(&c, 255);
  expect_refused(c.b, c.n, "run past the end");
  c_head(&c, 2, 0), c_tensor(&c, "a", 2, d2, ORTEP_GGML_F32, 0), c_tensor(&c, "b", 2, d2, ORTEP_GGML_F32, 224),
      c_data(&c, 512);
  expect_refused(c.b, c.n, "tensors 'a' and 'b' overlap");
  c_head(&c, 2, 0), c_tensor(&c, "a", 2, d2, ORTEP_GGML_F32, 0), c_tensor(&c, "a", 2, d2, ORTEP_GGML_F32, 256),
      c_data(&c, 512);
  expect_refused(c.b, c.n, "tensor 'a' appears twice");
  /* and the well-formed two-tensor file is accepted */
  c_head(&c, 2, 0), c_tensor(&c, "a", 2, d2, ORTEP_GGML_F32, 0), c_tensor(&c, "b", 2, d2, ORTEP_GGML_F32, 256),
      c_data(&c, 512);
  ortep_gguf *g;
  ck_assert_ok(ortep_gguf_parse(c.b, c.n, &g));
  ortep_gguf_close(g);
  /* a path that is not a file */
  ck_assert_status(ortep_gguf_open("/tmp", &g), ORTEP_E_IO);
}
END_TEST

/* --- models from GGUF files ------------------------------------------------------- */
/* Greedy logits of 12 steps after a 5-token prompt. */
static void decode_logits(const char *model, const char *wd, size_t V, float *out, int32_t *tokens) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  if (wd) ck_assert_ok(ortep_config_set(c, "ortep.weights_dtype", wd));
  ck_assert_ok(ortep_config_set(c, "ortep.weights_cache", "off"));
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(model, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64, .config = c}, &d));
  const int32_t prompt[5] = {5, 9, 17, 33, 2};
  int32_t next;
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 5, &next));
  for (int i = 0; i < 12; i++) {
    tokens[i] = next;
    ck_assert_ok(ortep_decoder_step(d, next, 5 + i, &next));
    ck_assert_ok(ortep_decoder_logits(d, out + (size_t)i * V, V));
  }
  ortep_decoder_close(d);
  ortep_config_destroy(c);
}

/* A preset's directory and its GGUF (dtype: stored, q8_0, q4_0) decode the
 * same tokens; bitwise the same logits where the kernels see the same bytes
 * (a qwen2 file: no row permutation), within float rounding for a llama
 * file (its q/k rows permuted and RoPE on adjacent pairs: the q.k sums run
 * in another order). */
static void same_as_directory(const char *preset, const char *dtype, bool bitwise) {
  char dir[64], file[96];
  test_model_dir(dir, sizeof dir, preset, ORTEP_DTYPE_BF16);
  snprintf(file, sizeof file, "%s/model.gguf", dir);
  ortep_model *m;
  ck_assert_ok(ortep_model_open(dir, &m));
  size_t V = (size_t)ortep_model_get_config(m)->vocab_size;
  ck_assert_ok(ortep_model_write_gguf(m, file, dtype));
  ortep_model_close(m);
  ortep_model_config c;
  ck_assert_ok(ortep_model_config_read(file, &c));
  ck_assert_uint_eq((size_t)c.vocab_size, V);
  ck_assert(c.rope_interleaved == !strcmp(preset, "tiny-llama"));
  const char *wd = strcmp(dtype, "stored") ? dtype : NULL;
  float *a = malloc(12 * V * sizeof *a), *b = malloc(12 * V * sizeof *b);
  int32_t ta[12], tb[12];
  decode_logits(dir, wd, V, a, ta);
  decode_logits(file, NULL, V, b, tb);
  ck_assert_msg(!memcmp(ta, tb, sizeof ta), "%s %s: the GGUF decodes other tokens", preset, dtype);
  if (bitwise) {
    ck_assert_msg(!memcmp(a, b, 12 * V * sizeof *a), "%s %s: logits differ", preset, dtype);
  } else {
    for (size_t i = 0; i < 12 * V; i++)
      ck_assert_msg(fabs(a[i] - b[i]) <= 1e-4 * (1 + fabs(a[i])), "%s %s: logit %zu %.6f vs %.6f", preset, dtype, i,
                    a[i], b[i]);
  }
  free(a), free(b);
  unlink(file);
  test_model_dir_remove(dir);
}

START_TEST(a_gguf_decodes_like_its_directory) {
  same_as_directory("small", "stored", true);
  same_as_directory("small", "q4_0", true);
  same_as_directory("tiny-llama", "stored", false);
  same_as_directory("tiny-llama", "q8_0", false);
}
END_TEST

/* A one-layer llama file written by hand, with one tensor of type ffn_type. */
/* A one-layer llama file; extra (may be NULL): one more f32 norm tensor of that name. */
static void write_llama_with(const char *path, const char *arch, uint32_t ffn_type, const char *extra) {
  ortep_gguf_writer *w;
  ck_assert_ok(ortep_gguf_writer_create(&w));
  ck_assert_ok(ortep_gguf_writer_add_string(w, "general.architecture", arch));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "llama.embedding_length", 256));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "llama.feed_forward_length", 256));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "llama.block_count", 1));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "llama.attention.head_count", 4));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "llama.context_length", 64));
  ck_assert_ok(ortep_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
  static float z[16 * 256];
  static uint8_t qk[256 * 144];
  ortep_shape e = SHAPE(16, 256), n = SHAPE(256), sq = SHAPE(256, 256);
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "token_embd.weight", ORTEP_GGML_F32, &e, z, sizeof z));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "output_norm.weight", ORTEP_GGML_F32, &n, z, 1024));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", ORTEP_GGML_F32, &n, z, 1024));
  ck_assert_ok(ortep_gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", ORTEP_GGML_F32, &n, z, 1024));
  if (extra) ck_assert_ok(ortep_gguf_writer_add_tensor(w, extra, ORTEP_GGML_F32, &n, z, 1024));
  const char *sq_names[] = {"blk.0.attn_q.weight",      "blk.0.attn_k.weight",   "blk.0.attn_v.weight",
                            "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"};
  uint8_t *q8 = calloc(256, 8 * 34);
  for (int i = 0; i < 6; i++)
    ck_assert_ok(ortep_gguf_writer_add_tensor(w, sq_names[i], ORTEP_GGML_Q8_0, &sq, q8, 256 * 8 * 34));
  if (ffn_type == ORTEP_GGML_Q8_0)
    ck_assert_ok(ortep_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", ORTEP_GGML_Q8_0, &sq, q8, 256 * 8 * 34));
  else
    ck_assert_ok(ortep_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", ffn_type, &sq, qk, sizeof qk));
  free(q8);
  ck_assert_ok(ortep_gguf_writer_write(w, path));
  ortep_gguf_writer_destroy(w);
}

static void write_llama(const char *path, const char *arch, uint32_t ffn_type) {
  write_llama_with(path, arch, ffn_type, NULL);
}

START_TEST(gguf_models_refuse_what_ortep_does_not_run) {
  ortep_model *m = NULL;
  write_llama(g_path, "llama", ORTEP_GGML_Q8_0);
  ck_assert_ok(ortep_model_open(g_path, &m));
  const ortep_model_config *c = ortep_model_get_config(m);
  ck_assert(c->arch == ORTEP_ARCH_LLAMA && c->hidden_size == 256 && c->num_key_value_heads == 4 && c->head_dim == 64 &&
            c->vocab_size == 16 && c->tie_word_embeddings && c->rope_theta == 10000.0);
  ck_assert_int_eq(ortep_model_tensor(m, "model.layers.0.mlp.down_proj.weight")->dtype, ORTEP_DTYPE_Q8_0);
  ortep_model_close(m);
  write_llama(g_path, "llama", 12 /* Q4_K */);
  ck_assert_status(ortep_model_open(g_path, &m), ORTEP_E_FORMAT);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(ortep_last_error(), "'blk.0.ffn_down.weight' (model.layers.0.mlp.down_proj.weight) is Q4_K"),
                "%s", ortep_last_error());
  write_llama(g_path, "gpt2", ORTEP_GGML_Q8_0);
  ck_assert_status(ortep_model_open(g_path, &m), ORTEP_E_FORMAT);
  ck_assert_ptr_nonnull(strstr(ortep_last_error(), "general.architecture 'gpt2' is not supported"));
  ck_assert_status(ortep_model_open("/nonexistent.gguf", &m), ORTEP_E_IO);
}
END_TEST

/* A layer index written any other way than the converters write it (a
 * decimal number without sign or leading zero) is refused by name: read
 * loosely, "blk.00." or "blk.4294967296." became "blk.0." and the first of
 * two tensors of one name won. */
START_TEST(gguf_layer_names_that_would_alias_are_refused) {
  static const char *const bad[] = {"blk.00.attn_norm.weight", "blk.+0.attn_norm.weight",
                                    "blk.4294967296.attn_norm.weight", "blk..attn_norm.weight",
                                    "blk.0x0.attn_norm.weight"};
  ortep_model *m = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_llama_with(g_path, "llama", ORTEP_GGML_Q8_0, bad[i]);
    ck_assert_status(ortep_model_open(g_path, &m), ORTEP_E_FORMAT);
    ck_assert_ptr_null(m);
    char want[96];
    snprintf(want, sizeof want, "tensor '%s': its layer index is not a decimal number", bad[i]);
    ck_assert_msg(strstr(ortep_last_error(), want), "%s", ortep_last_error());
  }
  /* a tensor the graph does not read, with a well-formed index, is still no error */
  write_llama_with(g_path, "llama", ORTEP_GGML_Q8_0, "blk.10.attn_norm_2.weight");
  ck_assert_ok(ortep_model_open(g_path, &m));
  ortep_model_close(m);
}
END_TEST

/* The tokenizer from a GGUF's metadata (ortep_tokenizer_add_to_gguf, read
 * back with no tokenizer.json beside the file) gives the ids of the
 * tokenizer.json it came from; a tokenizer.json beside the file wins; a
 * SentencePiece vocabulary and a file without one are refused. */
START_TEST(a_gguf_tokenizer_matches_its_tokenizer_json) {
  char dir[64], other[64] = "/tmp/ortep-gguf-tok-XXXXXX", file[128], tj[128];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  ck_assert_ptr_nonnull(mkdtemp(other));
  snprintf(file, sizeof file, "%s/model.gguf", other);
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  size_t len;
  uint8_t *json = slurp(tj, &len);
  ortep_model *m;
  ck_assert_ok(ortep_model_open(dir, &m));
  ortep_gguf_writer *w;
  ck_assert_ok(ortep_gguf_writer_create(&w));
  ck_assert_ok(ortep_model_add_to_gguf(m, w, "q8_0"));
  ck_assert_ok(ortep_tokenizer_add_to_gguf(w, (const char *)json, len));
  ck_assert_ok(ortep_gguf_writer_write(w, file));
  ortep_gguf_writer_destroy(w);
  ortep_model_close(m);
  ortep_tokenizer *a, *b;
  ck_assert_ok(ortep_tokenizer_open(dir, &a));
  ck_assert_ok(ortep_tokenizer_open_for_vocab(file, 2048, &b));
  ck_assert_uint_eq(ortep_tokenizer_vocab_size(a), ortep_tokenizer_vocab_size(b));
  const char *texts[] = {"Hello, world!",         "  two  spaces\n\nand lines",
                         "digits 12345 and 3.14", "caf\xc3\xa9 \xe6\x97\xa5",
                         "<|endoftext|>special",  "it's we'll they'd"};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    int32_t *x, *y;
    size_t nx, ny;
    ck_assert_ok(ortep_tokenizer_encode(a, texts[i], strlen(texts[i]), true, &x, &nx));
    ck_assert_ok(ortep_tokenizer_encode(b, texts[i], strlen(texts[i]), true, &y, &ny));
    ck_assert_msg(nx == ny && !memcmp(x, y, nx * sizeof *x), "'%s': other ids from the GGUF", texts[i]);
    ck_assert(ortep_tokenizer_is_special(b, 2047) && !ortep_tokenizer_is_special(b, 300));
    free(x), free(y);
  }
  ortep_tokenizer_close(a), ortep_tokenizer_close(b);
  /* a file without tokenizer metadata: refused, unless a tokenizer.json is beside it */
  write_llama(file, "llama", ORTEP_GGML_Q8_0);
  ck_assert_status(ortep_tokenizer_open(file, &b), ORTEP_E_FORMAT);
  ck_assert_ptr_nonnull(strstr(ortep_last_error(), "no tokenizer.ggml.model"));
  char beside[128];
  snprintf(beside, sizeof beside, "%s/tokenizer.json", other);
  FILE *f = fopen(beside, "wb");
  ck_assert_uint_eq(fwrite(json, 1, len, f), len);
  fclose(f);
  ck_assert_ok(ortep_tokenizer_open(file, &b));
  ortep_tokenizer_close(b);
  unlink(beside);
  /* SentencePiece metadata without its scores, or with a NaN among them */
  for (int nan = 0; nan < 2; nan++) {
    ck_assert_ok(ortep_gguf_writer_create(&w));
    ck_assert_ok(ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"));
    const char *toks[2] = {"<unk>", "a"};
    ck_assert_ok(ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", toks, 2));
    if (nan)
      ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.scores", ORTEP_GGUF_F32, (float[]){0, NAN}, 2));
    ck_assert_ok(ortep_gguf_writer_write(w, file));
    ortep_gguf_writer_destroy(w);
    ck_assert_status(ortep_tokenizer_open(file, &b), ORTEP_E_FORMAT);
    ck_assert_ptr_nonnull(
        strstr(ortep_last_error(), nan ? "tokenizer.ggml.scores[1] is NaN" : "tokenizer.ggml.scores (an f32 array"));
  }
  unlink(file);
  rmdir(other);
  free(json);
  test_model_dir_remove(dir);
}
END_TEST

/* A SentencePiece vocabulary (tokenizer.ggml.model "llama") encodes by its
 * scores: the merges are every split of a piece into two pieces, the
 * higher-scored piece first. Here "▁a" (-10), then "ab" (-11), then "▁ab"
 * (-12: "▁" + "ab" before "▁a" + "b", by the halves' ids), so "ab ab!"
 * becomes "▁a" twice, then "▁ab" twice; "!" falls back to its byte piece,
 * "c" (no byte piece) to <unk>; a BOS comes first. "aab" is "▁a" "ab", not
 * "▁" "aa" "b": "aa" (-20) merges last. Decoding gives the text back. */
START_TEST(a_sentencepiece_vocabulary_encodes_by_its_scores) {
  char dir[64] = "/tmp/ortep-gguf-spm-XXXXXX", file[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/spm.gguf", dir);
#define SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */
  const char *toks[11] = {"<unk>", "<s>", "</s>", "<0x21>", SPACE, "a", "b", SPACE "a", "ab", SPACE "ab", "aa"};
#undef SPACE
  float scores[11] = {0, 0, 0, 0, -1, -2, -3, -10, -11, -12, -20};
  int32_t types[11] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1};
  ortep_gguf_writer *w;
  ck_assert_ok(ortep_gguf_writer_create(&w));
  ck_assert_ok(ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"));
  ck_assert_ok(ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", toks, 11));
  ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.scores", ORTEP_GGUF_F32, scores, 11));
  ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.token_type", ORTEP_GGUF_I32, types, 11));
  ck_assert_ok(ortep_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1));
  ck_assert_ok(ortep_gguf_writer_write(w, file));
  ortep_gguf_writer_destroy(w);
  ortep_tokenizer *t;
  ck_assert_ok(ortep_tokenizer_open(file, &t));
  struct {
    const char *text;
    int32_t ids[8];
    size_t n;
  } cases[] = {{"ab ab!", {1, 9, 9, 3}, 4}, {"ab c", {1, 9, 4, 0}, 4}, {"a", {1, 7}, 2}, {"aab", {1, 7, 8}, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int32_t *ids;
    size_t n;
    ck_assert_ok(ortep_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), true, &ids, &n));
    ck_assert_msg(n == cases[i].n && !memcmp(ids, cases[i].ids, n * sizeof *ids), "'%s': %zu ids, first %d",
                  cases[i].text, n, n ? ids[0] : -1);
    free(ids);
  }
  ck_assert(ortep_tokenizer_is_special(t, 1) && ortep_tokenizer_is_special(t, 0) && !ortep_tokenizer_is_special(t, 9));
  char *text;
  size_t len;
  ck_assert_ok(ortep_tokenizer_decode(t, (const int32_t[]){9, 9, 3}, 3, true, &text, &len));
  ck_assert_str_eq(text, "ab ab!");
  free(text);
  ortep_tokenizer_close(t);
  unlink(file);
  rmdir(dir);
}
END_TEST

/* Deriving a SentencePiece vocabulary's merges costs the square of its
 * pieces' lengths: 100 pieces of ~1,000 bytes (a 100 KB file) would compare
 * 10^8 bytes, so it is refused by the stated limit, not worked through (a
 * few MB of them took a minute and gigabytes); the same number of short
 * pieces opens. */
START_TEST(a_sentencepiece_vocabulary_of_long_pieces_is_refused_by_its_limit) {
  char dir[64] = "/tmp/ortep-gguf-long-XXXXXX", file[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/spm.gguf", dir);
  enum { N = 103 };
  for (int longs = 1; longs >= 0; longs--) {
    char *store[N];
    const char *toks[N];
    float scores[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    for (int i = 3; i < N; i++) {
      size_t len = longs ? 900 + (size_t)i : 1 + (size_t)i % 8;
      ck_assert_ptr_nonnull(store[i] = malloc(len + 1));
      for (size_t k = 0; k < len; k++) store[i][k] = (char)('a' + (k * 7 + (size_t)i) % 26);
      store[i][len] = '\0';
      toks[i] = store[i], scores[i] = -(float)i;
    }
    scores[0] = scores[1] = scores[2] = 0;
    ortep_gguf_writer *w;
    ck_assert_ok(ortep_gguf_writer_create(&w));
    ck_assert_ok(ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"));
    ck_assert_ok(ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", toks, N));
    ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.scores", ORTEP_GGUF_F32, scores, N));
    ck_assert_ok(ortep_gguf_writer_write(w, file));
    ortep_gguf_writer_destroy(w);
    for (int i = 3; i < N; i++) free(store[i]);
    ortep_tokenizer *t = NULL;
    if (longs) {
      ck_assert_status(ortep_tokenizer_open(file, &t), ORTEP_E_FORMAT);
      ck_assert_ptr_null(t);
      ck_assert_msg(strstr(ortep_last_error(), "more than the limit of 64 per byte of the pieces") &&
                        strstr(ortep_last_error(), file),
                    "%s", ortep_last_error());
    } else {
      ck_assert_ok(ortep_tokenizer_open(file, &t));
      ck_assert_uint_eq(ortep_tokenizer_vocab_size(t), N);
      ortep_tokenizer_close(t);
    }
  }
  unlink(file);
  rmdir(dir);
}
END_TEST

/* Tokenizer metadata of the wrong type is refused naming the key, not read
 * as false or as no token (add_bos_token "false" as a string, a u32 where a
 * bool belongs, a string or a number past the vocabulary as the BOS id); a
 * bool that says false is honoured. */
START_TEST(gguf_tokenizer_metadata_of_the_wrong_type_is_refused) {
  char dir[64] = "/tmp/ortep-gguf-meta-XXXXXX", file[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/spm.gguf", dir);
  const char *toks[4] = {"<unk>", "<s>", "</s>", "a"};
  float scores[4] = {0, 0, 0, -1};
  static const char *const key[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
                                    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.bos_token_id", NULL};
  for (int c = 0; c < 5; c++) {
    ortep_gguf_writer *w;
    ck_assert_ok(ortep_gguf_writer_create(&w));
    ck_assert_ok(ortep_gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"));
    ck_assert_ok(ortep_gguf_writer_add_strings(w, "tokenizer.ggml.tokens", toks, 4));
    ck_assert_ok(ortep_gguf_writer_add_array(w, "tokenizer.ggml.scores", ORTEP_GGUF_F32, scores, 4));
    if (c == 0) ck_assert_ok(ortep_gguf_writer_add_string(w, key[c], "false"));
    if (c == 1) ck_assert_ok(ortep_gguf_writer_add_u32(w, key[c], 0));
    if (c == 2) ck_assert_ok(ortep_gguf_writer_add_string(w, key[c], "1"));
    if (c == 3) ck_assert_ok(ortep_gguf_writer_add_u32(w, key[c], 4));
    if (c == 4) { /* well-typed: no BOS */
      ck_assert_ok(ortep_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1));
      ck_assert_ok(ortep_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false));
    }
    ck_assert_ok(ortep_gguf_writer_write(w, file));
    ortep_gguf_writer_destroy(w);
    ortep_tokenizer *t = NULL;
    if (key[c]) {
      ck_assert_status(ortep_tokenizer_open(file, &t), ORTEP_E_FORMAT);
      ck_assert_ptr_null(t);
      ck_assert_msg(strstr(ortep_last_error(), key[c]), "%s", ortep_last_error());
      continue;
    }
    ck_assert_ok(ortep_tokenizer_open(file, &t));
    int32_t *ids;
    size_t n;
    ck_assert_ok(ortep_tokenizer_encode(t, "a", 1, true, &ids, &n));
    ck_assert_msg(n >= 1 && ids[0] != 1, "a BOS was added though add_bos_token is false");
    free(ids);
    ortep_tokenizer_close(t);
  }
  unlink(file);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gguf");
  TCase *tc = tcase_create("gguf");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, a_written_file_reads_back);
  tcase_add_test(tc, every_cut_is_refused);
  tcase_add_test(tc, bad_files_are_refused_naming_the_problem);
  tcase_add_test(tc, gguf_layer_names_that_would_alias_are_refused);
  tcase_add_test(tc, gguf_tokenizer_metadata_of_the_wrong_type_is_refused);
  tcase_add_test(tc, a_sentencepiece_vocabulary_of_long_pieces_is_refused_by_its_limit);
  tcase_add_test(tc, a_gguf_decodes_like_its_directory);
  tcase_add_test(tc, gguf_models_refuse_what_ortep_does_not_run);
  tcase_add_test(tc, a_gguf_tokenizer_matches_its_tokenizer_json);
  tcase_add_test(tc, a_sentencepiece_vocabulary_encodes_by_its_scores);
  tcase_set_timeout(tc, 300);
  suite_add_tcase(s, tc);
  return test_run(s);
}
