/*
 * gguf_write.c: a model (safetensors or GGUF, as opened) written as a GGUF
 * file, as llama.cpp's convert_hf_to_gguf.py writes one: its config as
 * metadata, its tensors under llama.cpp's names (gguf_model.c's table), q
 * and k rows permuted for a llama model, projections quantized when asked.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "ortep/gguf.h"

/* llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, for q (heads) and k
 * (KV heads): within each head, row j * hd/2 + i goes to 2i + j. */
static void permute_rows(const uint8_t *src, uint8_t *dst, size_t rows, size_t row_bytes, size_t heads) {
  size_t hd = rows / heads;
  for (size_t h = 0; h < heads; h++)
    for (size_t i = 0; i < hd / 2; i++)
      for (size_t j = 0; j < 2; j++)
        memcpy(dst + (h * hd + 2 * i + j) * row_bytes, src + (h * hd + j * (hd / 2) + i) * row_bytes, row_bytes);
}

static uint32_t ggml_of(ortep_dtype d) {
  switch (d) {
    case ORTEP_DTYPE_F16: return ORTEP_GGML_F16;
    case ORTEP_DTYPE_BF16: return ORTEP_GGML_BF16;
    case ORTEP_DTYPE_Q8_0: return ORTEP_GGML_Q8_0;
    case ORTEP_DTYPE_Q4_0: return ORTEP_GGML_Q4_0;
    default: return ORTEP_GGML_F32;
  }
}

static ortep_status add_meta(ortep_gguf_writer *w, const ortep_model_config *c) {
  const char *arch = c->arch == ORTEP_ARCH_LLAMA ? "llama" : "qwen2";
  char k[128];
  ortep_status st = ortep_gguf_writer_add_string(w, "general.architecture", arch);
#define U32(suffix, v)                                   \
  if (st == ORTEP_OK) {                                  \
    snprintf(k, sizeof k, "%s.%s", arch, suffix);        \
    st = ortep_gguf_writer_add_u32(w, k, (uint32_t)(v)); \
  }
  U32("embedding_length", c->hidden_size);
  U32("feed_forward_length", c->intermediate_size);
  U32("block_count", c->num_hidden_layers);
  U32("attention.head_count", c->num_attention_heads);
  U32("attention.head_count_kv", c->num_key_value_heads);
  U32("context_length", c->max_position_embeddings);
  U32("attention.key_length", c->head_dim);
  U32("attention.value_length", c->head_dim);
  U32("rope.dimension_count", c->head_dim);
  U32("vocab_size", c->vocab_size);
#undef U32
  if (st == ORTEP_OK) {
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    st = ortep_gguf_writer_add_f32(w, k, (float)c->rms_norm_eps);
  }
  if (st == ORTEP_OK) {
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    st = ortep_gguf_writer_add_f32(w, k, (float)c->rope_theta);
  }
  if (st == ORTEP_OK && c->n_eos_token_ids)
    st = ortep_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_token_ids[0]);
  return st;
}

ortep_status ortep_model_write_gguf(const ortep_model *m, const char *path, const char *dtype) {
  if (!m || !path) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_write_gguf: NULL argument");
  ortep_gguf_writer *w;
  ortep_status st = ortep_gguf_writer_create(&w);
  if (st == ORTEP_OK) st = ortep_model_add_to_gguf(m, w, dtype);
  if (st == ORTEP_OK) st = ortep_gguf_writer_write(w, path);
  ortep_gguf_writer_destroy(w);
  return st;
}

ortep_status ortep_model_add_to_gguf(const ortep_model *m, ortep_gguf_writer *w, const char *dtype) {
  if (!m || !w) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: NULL argument");
  ortep_dtype q = ORTEP_DTYPE_COUNT;
  if (dtype && strcmp(dtype, "stored") && (ortep_dtype_parse(dtype, &q) != ORTEP_OK || !ortep_dtype_is_quantized(q)))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: dtype '%s': use stored, q8_0 or q4_0",
                       dtype);
  const ortep_model_config *c = ortep_model_get_config(m);
  if (c->rope_interleaved)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_model_add_to_gguf: the model is a GGUF's already");
  ortep_status st = add_meta(w, c);
  float *row = NULL;
  uint8_t *buf = NULL, *perm = NULL;
  char gname[128];
  const char *const names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  size_t layers = (size_t)c->num_hidden_layers, per = 12, total = 3 + layers * per;
  static const char *const suffix[] = {"input_layernorm.weight",  "post_attention_layernorm.weight",
                                       "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight", "self_attn.q_proj.bias",
                                       "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
                                       "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                                       "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  for (size_t t = 0; st == ORTEP_OK && t < total; t++) {
    char hf[128];
    if (t < 3)
      snprintf(hf, sizeof hf, "%s", names[t]);
    else
      snprintf(hf, sizeof hf, "model.layers.%zu.%s", (t - 3) / per, suffix[(t - 3) % per]);
    const ortep_safetensors_entry *e = ortep_model_tensor(m, hf);
    if (!e || !ortep__gguf_name(hf, gname, sizeof gname)) continue;
    bool table = t == 0 || t == 2, is_q = strstr(hf, "q_proj."), is_k = strstr(hf, "k_proj.");
    ortep_dtype to = e->dtype;
    if (q != ORTEP_DTYPE_COUNT && e->shape.rank == 2) to = table ? ORTEP_DTYPE_Q8_0 : q;
    size_t rows = (size_t)e->shape.dims[0], k = e->shape.rank == 2 ? (size_t)e->shape.dims[1] : rows;
    if (e->shape.rank == 1) rows = 1;
    size_t out_bytes;
    if ((st = ortep_shape_bytes(&e->shape, to, &out_bytes)) != ORTEP_OK) break;
    ortep__free(buf), ortep__free(perm), ortep__free(row);
    buf = ortep__malloc(out_bytes), perm = ortep__malloc(out_bytes), row = ortep__malloc(k * sizeof *row);
    if (!buf || !perm || !row) {
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory to convert '%s'", hf);
      break;
    }
    if (to == e->dtype) {
      memcpy(buf, e->data, out_bytes);
    } else if ((st = ortep__quantize_check(hf, to, e->dtype, e->data, rows * k, k)) != ORTEP_OK) {
      break;
    } else {
      size_t es = ortep_dtype_size(e->dtype), rb = out_bytes / rows;
      for (size_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)e->data + r * k * es;
        for (size_t j = 0; j < k; j++)
          row[j] = e->dtype == ORTEP_DTYPE_F32    ? ((const float *)(const void *)src)[j]
                   : e->dtype == ORTEP_DTYPE_BF16 ? ortep_bf16_to_f32(((const uint16_t *)(const void *)src)[j])
                                                  : ortep_f16_to_f32(((const uint16_t *)(const void *)src)[j]);
        ortep_quantize(to, row, k, buf + r * rb);
      }
    }
    const uint8_t *data = buf;
    if (c->arch == ORTEP_ARCH_LLAMA && (is_q || is_k)) { /* the converter's permutation, rows and biases alike */
      size_t n_rows = e->shape.rank == 2 ? rows : (size_t)e->shape.dims[0];
      permute_rows(buf, perm, n_rows, out_bytes / n_rows,
                   (size_t)(is_q ? c->num_attention_heads : c->num_key_value_heads));
      data = perm;
    }
    st = ortep_gguf_writer_add_tensor(w, gname, ggml_of(to), &e->shape, data, out_bytes);
  }
  ortep__free(buf), ortep__free(perm), ortep__free(row);
  return st;
}
