/*
 * config.c: the checks every model config passes, wherever it came from
 * (config.json: model.c; GGUF metadata: gguf_model.c), so the sizes derived
 * from it cannot overflow.
 */
#include "internal.h"

static bool product(int64_t a, int64_t b, int64_t limit, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= limit;
}

/* The checks every config passes, wherever it came from (what: "config.json"
 * or "gguf metadata", for messages). */
ortep_status ortep__model_check_sizes(const ortep_model_config *c, const char *what) {
  if (c->head_dim % 2)
    return ortep__fail(ORTEP_E_FORMAT, "%s: head_dim %lld must be even for rotary embeddings", what,
                       (long long)c->head_dim);
  if (c->num_attention_heads % c->num_key_value_heads)
    return ortep__fail(ORTEP_E_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       what, (long long)c->num_attention_heads, (long long)c->num_key_value_heads);
  if (c->vocab_size > INT32_MAX)
    return ortep__fail(ORTEP_E_FORMAT, "%s: vocab_size %lld exceeds what i32 token ids hold", what,
                       (long long)c->vocab_size);
  /* Every size derived from the config below is a product of these; checked
   * here once, so later arithmetic on them cannot overflow. A tensor of
   * more than 2^40 elements (4 TiB in f32) is no model this runtime loads. */
  const int64_t lim = (int64_t)1 << 40;
  int64_t q, kv, e;
  if (!product(c->num_attention_heads, c->head_dim, lim, &q) ||
      !product(c->num_key_value_heads, c->head_dim, lim, &kv) || !product(c->vocab_size, c->hidden_size, lim, &e) ||
      !product(q, c->hidden_size, lim, &e) || !product(c->intermediate_size, c->hidden_size, lim, &e) ||
      !product(c->max_position_embeddings, c->head_dim, lim, &e) ||
      !product(c->num_hidden_layers, c->max_position_embeddings, lim, &e) || !product(e, kv, lim, &e))
    return ortep__fail(
        ORTEP_E_FORMAT,
        "%s: the sizes it gives (hidden_size %lld, intermediate_size %lld, num_attention_heads %lld, head_dim "
        "%lld, num_hidden_layers %lld, vocab_size %lld, max_position_embeddings %lld) make a tensor of "
        "more than 2^40 elements; check them",
        what, (long long)c->hidden_size, (long long)c->intermediate_size, (long long)c->num_attention_heads,
        (long long)c->head_dim, (long long)c->num_hidden_layers, (long long)c->vocab_size,
        (long long)c->max_position_embeddings);
  return ORTEP_OK;
}
