/*
 * reference_llama.c: a deliberately plain LLaMA/Qwen2 forward pass for one
 * token at a time, in double precision, with its own KV cache. It shares no
 * kernel code with ortep: it reads config and weights through the public
 * model API, widens every weight to double once, and computes each layer with
 * textbook loops (RMSNorm, x W^T + b, rotate-half RoPE, causal grouped-query
 * attention, SwiGLU), the way the Hugging Face modelling code defines them.
 */
#include "reference_llama.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ortep/ortep.h"

typedef struct layer {
  double *ln1, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *ln2, *wg, *wu, *wd;
  double *kc, *vc; /* [kv][max_seq][hd] */
} layer;

struct ref_model {
  ortep_model_config c;
  size_t max_seq;
  bool quantize_x; /* ref_quantize_activations */
  double *embed, *norm, *lm;
  layer *layers;
};

static double *widen(const ortep_model *m, const char *name) {
  const ortep_safetensors_entry *e = ortep_model_tensor(m, name);
  if (!e) return NULL;
  size_t n = e->size / ortep_dtype_size(e->dtype);
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    float f;
    switch (e->dtype) {
      case ORTEP_DTYPE_F16:
        memcpy(&h, (const char *)e->data + 2 * i, 2);
        d[i] = ortep_f16_to_f32(h);
        break;
      case ORTEP_DTYPE_BF16:
        memcpy(&h, (const char *)e->data + 2 * i, 2);
        d[i] = ortep_bf16_to_f32(h);
        break;
      default:
        memcpy(&f, (const char *)e->data + 4 * i, 4);
        d[i] = f;
        break;
    }
  }
  return d;
}

ref_model *ref_open(const char *dir, size_t max_seq) {
  ortep_model *m;
  if (ortep_model_open(dir, &m) != ORTEP_OK) return NULL;
  ref_model *r = calloc(1, sizeof *r);
  r->c = *ortep_model_get_config(m);
  r->max_seq = max_seq;
  r->embed = widen(m, "model.embed_tokens.weight");
  r->norm = widen(m, "model.norm.weight");
  r->lm = r->c.tie_word_embeddings ? NULL : widen(m, "lm_head.weight");
  r->layers = calloc((size_t)r->c.num_hidden_layers, sizeof *r->layers);
  char n[256];
  for (int64_t l = 0; l < r->c.num_hidden_layers; l++) {
    layer *L = &r->layers[l];
#define G(field, suffix)                                                 \
  do {                                                                   \
    snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, suffix); \
    L->field = widen(m, n);                                              \
  } while (0)
    G(ln1, "input_layernorm.weight");
    G(wq, "self_attn.q_proj.weight");
    G(wk, "self_attn.k_proj.weight");
    G(wv, "self_attn.v_proj.weight");
    G(bq, "self_attn.q_proj.bias");
    G(bk, "self_attn.k_proj.bias");
    G(bv, "self_attn.v_proj.bias");
    G(wo, "self_attn.o_proj.weight");
    G(ln2, "post_attention_layernorm.weight");
    G(wg, "mlp.gate_proj.weight");
    G(wu, "mlp.up_proj.weight");
    G(wd, "mlp.down_proj.weight");
#undef G
    size_t cache = (size_t)(r->c.num_key_value_heads * r->c.head_dim) * max_seq;
    L->kc = calloc(cache, sizeof(double));
    L->vc = calloc(cache, sizeof(double));
  }
  ortep_model_close(m);
  return r;
}

static void rmsnorm(const double *x, const double *w, size_t n, double eps, double *y) {
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
  double inv = 1.0 / sqrt(ss / (double)n + eps);
  for (size_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

/* x rounded to q8 blocks as llama.cpp's q8_0 dot products take activations:
 * per 32 values d = max|x| / 127, x = round(x / d) * d (|round| <= 127). */
static void q8_blocks(double *x, size_t n) {
  for (size_t b = 0; b + 32 <= n; b += 32) {
    double amax = 0;
    for (size_t i = b; i < b + 32; i++) amax = fmax(amax, fabs(x[i]));
    double d = amax / 127.0;
    for (size_t i = b; i < b + 32; i++) x[i] = d > 0 ? nearbyint(x[i] / d) * d : 0.0;
  }
}

/* y[out] = W[out][in] x + b (x in q8 blocks first when r->quantize_x) */
static void linear(const ref_model *r, const double *W, const double *b, const double *x, size_t in, size_t out,
                   double *y) {
  double *xq = NULL;
  if (r->quantize_x) {
    xq = malloc(in * sizeof *xq);
    memcpy(xq, x, in * sizeof *xq);
    q8_blocks(xq, in);
    x = xq;
  }
  for (size_t o = 0; o < out; o++) {
    double s = b ? b[o] : 0.0;
    for (size_t i = 0; i < in; i++) s += W[o * in + i] * x[i];
    y[o] = s;
  }
  free(xq);
}

static void rope(double *v, size_t heads, size_t hd, int pos, double theta) {
  size_t half = hd / 2;
  for (size_t h = 0; h < heads; h++) {
    double *x = v + h * hd;
    for (size_t i = 0; i < half; i++) {
      double a = pos * pow(theta, -2.0 * (double)i / (double)hd);
      double x1 = x[i], x2 = x[i + half];
      x[i] = x1 * cos(a) - x2 * sin(a);
      x[i + half] = x2 * cos(a) + x1 * sin(a);
    }
  }
}

void ref_step(ref_model *r, int token, int pos, double *logits) {
  size_t H = (size_t)r->c.hidden_size, I = (size_t)r->c.intermediate_size, NH = (size_t)r->c.num_attention_heads;
  size_t KV = (size_t)r->c.num_key_value_heads, HD = (size_t)r->c.head_dim, V = (size_t)r->c.vocab_size;
  double *h = malloc(H * sizeof *h), *x = malloc(H * sizeof *x), *q = malloc(NH * HD * sizeof *q);
  double *k = malloc(KV * HD * sizeof *k), *v = malloc(KV * HD * sizeof *v), *a = malloc(NH * HD * sizeof *a);
  double *o = malloc(H * sizeof *o), *g = malloc(I * sizeof *g), *u = malloc(I * sizeof *u);
  double *sc = malloc((size_t)(pos + 1) * sizeof *sc);
  memcpy(h, r->embed + (size_t)token * H, H * sizeof *h);
  for (int64_t l = 0; l < r->c.num_hidden_layers; l++) {
    layer *L = &r->layers[l];
    rmsnorm(h, L->ln1, H, r->c.rms_norm_eps, x);
    linear(r, L->wq, L->bq, x, H, NH * HD, q);
    linear(r, L->wk, L->bk, x, H, KV * HD, k);
    linear(r, L->wv, L->bv, x, H, KV * HD, v);
    rope(q, NH, HD, pos, r->c.rope_theta);
    rope(k, KV, HD, pos, r->c.rope_theta);
    for (size_t j = 0; j < KV; j++)
      for (size_t i = 0; i < HD; i++) {
        L->kc[(j * r->max_seq + (size_t)pos) * HD + i] = k[j * HD + i];
        L->vc[(j * r->max_seq + (size_t)pos) * HD + i] = v[j * HD + i];
      }
    for (size_t hh = 0; hh < NH; hh++) {
      size_t j = hh / (NH / KV);
      double mx = -INFINITY, den = 0;
      for (int t = 0; t <= pos; t++) {
        double d = 0;
        for (size_t i = 0; i < HD; i++) d += q[hh * HD + i] * L->kc[(j * r->max_seq + (size_t)t) * HD + i];
        sc[t] = d / sqrt((double)HD);
        if (sc[t] > mx) mx = sc[t];
      }
      for (int t = 0; t <= pos; t++) den += (sc[t] = exp(sc[t] - mx));
      for (size_t i = 0; i < HD; i++) {
        double s = 0;
        for (int t = 0; t <= pos; t++) s += sc[t] / den * L->vc[(j * r->max_seq + (size_t)t) * HD + i];
        a[hh * HD + i] = s;
      }
    }
    linear(r, L->wo, NULL, a, NH * HD, H, o);
    for (size_t i = 0; i < H; i++) h[i] += o[i];
    rmsnorm(h, L->ln2, H, r->c.rms_norm_eps, x);
    linear(r, L->wg, NULL, x, H, I, g);
    linear(r, L->wu, NULL, x, H, I, u);
    for (size_t i = 0; i < I; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
    linear(r, L->wd, NULL, g, I, H, o);
    for (size_t i = 0; i < H; i++) h[i] += o[i];
  }
  rmsnorm(h, r->norm, H, r->c.rms_norm_eps, x);
  linear(r, r->lm ? r->lm : r->embed, NULL, x, H, V, logits);
  free(h), free(x), free(q), free(k), free(v), free(a), free(o), free(g), free(u), free(sc);
}

size_t ref_vocab(const ref_model *r) { return (size_t)r->c.vocab_size; }

void ref_quantize_activations(ref_model *r, bool on) { r->quantize_x = on; }

void ref_close(ref_model *r) {
  if (!r) return;
  for (int64_t l = 0; l < r->c.num_hidden_layers; l++) {
    layer *L = &r->layers[l];
    double *all[] = {L->ln1, L->wq,  L->wk, L->wv, L->bq, L->bk, L->bv,
                     L->wo,  L->ln2, L->wg, L->wu, L->wd, L->kc, L->vc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  }
  free(r->layers), free(r->embed), free(r->norm), free(r->lm), free(r);
}
