/* test_cuda_device.c: the CUDA EP on a GPU. Exits 77 (ctest: skipped) with a
 * one-line reason when no device is present. Runs unforked whatever CK_FORK
 * says (test_run_unforked): main() probes the driver, and a CUDA context does
 * not survive fork().
 *
 * Tolerance: CUDA vs CPU logits within 1e-3 x (1 + |cpu|) (different
 * summation orders in f32, the same function for every weight type); tokens
 * identical for 32 steps except at near-ties, which are printed. */
#include <math.h>

#include "testutil.h"

static char g_dir[64];

static ortep_decoder *open_ep(const char *ep, bool eager, const char *seams) {
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(
      g_dir, &(ortep_decoder_options){.ep = ep, .eager = eager, .max_seq_len = 64, .forced_seams = seams}, &d));
  return d;
}

/* CUDA against the CPU EP on one model: both decode 32 steps fed the CPU's
 * token (so one near-tie cannot derail the rest). Logits must agree within
 * tol x (1 + |cpu|) when tol > 0; a token may differ only at a near-tie,
 * where the CPU's best two logits are closer than the largest logit
 * difference seen at that step. Prints one summary line, near-ties with
 * their margins. */
static void compare_with_cpu_cfg(const char *dir, const char *label, int steps, float tol, const ortep_config *cfg) {
  ortep_decoder *g, *c;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda", .max_seq_len = 64, .config = cfg}, &g));
  ck_assert_ok(ortep_decoder_open(
      dir, &(ortep_decoder_options){.ep = "cpu", .eager = true, .max_seq_len = 64, .config = cfg}, &c));
  ck_assert_str_eq(ortep_ep_name(ortep_decoder_ep(g)), "cuda_ep");
  size_t V = ortep_decoder_vocab_size(c);
  float *lg = malloc(V * sizeof *lg), *lc = malloc(V * sizeof *lc);
  int32_t token = 5, same = 0;
  float worst = 0.0f;
  char ties[512] = "";
  for (int pos = 0; pos < steps; pos++) {
    int32_t tg, tc;
    ck_assert_ok(ortep_decoder_step(g, token, pos, &tg));
    ck_assert_ok(ortep_decoder_step(c, token, pos, &tc));
    ck_assert_ok(ortep_decoder_logits(g, lg, V));
    ck_assert_ok(ortep_decoder_logits(c, lc, V));
    float step_worst = 0.0f, top1 = -INFINITY, top2 = -INFINITY;
    for (size_t i = 0; i < V; i++) {
      float d = fabsf(lg[i] - lc[i]);
      if (d > step_worst) step_worst = d;
      if (tol > 0)
        ck_assert_msg(d <= tol * (1.0f + fabsf(lc[i])), "%s pos %d logit %zu: cuda %.7g cpu %.7g", label, pos, i,
                      (double)lg[i], (double)lc[i]);
      if (lc[i] > top1)
        top2 = top1, top1 = lc[i];
      else if (lc[i] > top2)
        top2 = lc[i];
    }
    if (step_worst > worst) worst = step_worst;
    if (tg == tc) {
      same++;
    } else {
      float margin = top1 - top2;
      size_t used = strlen(ties);
      snprintf(ties + used, sizeof ties - used, " pos %d (cuda %d, cpu %d, margin %.3g)", pos, tg, tc, (double)margin);
      ck_assert_msg(margin <= 2.0f * step_worst,
                    "%s pos %d: cuda token %d, cpu token %d, margin %g is no near-tie "
                    "(largest logit difference %g)",
                    label, pos, tg, tc, (double)margin, (double)step_worst);
    }
    token = tc;
  }
  printf("%-22s %d/%d tokens identical, max |cuda - cpu| logit %.3g%s%s\n", label, same, steps, (double)worst,
         ties[0] ? ", near-ties:" : "", ties);
  fflush(stdout);
  free(lg), free(lc);
  ortep_decoder_close(g);
  ortep_decoder_close(c);
}

static void compare_with_cpu(const char *dir, const char *label, int steps, float tol) {
  compare_with_cpu_cfg(dir, label, steps, tol, NULL);
}

/* The tiny-llama preset in bf16 in a fresh directory (dir: 64 bytes), for
 * the quantized cases. */
static void quantizable_model(char *dir) {
  snprintf(dir, 64, "/tmp/ortep-cuda-q-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_ok(ortep_model_write_synthetic(dir, "tiny-llama", ORTEP_DTYPE_BF16, 1234));
}
/* A decoder configuration quantizing the projections to q, no weights cache. */
static ortep_config *quantizing(const char *q) {
  ortep_config *cfg;
  ck_assert_ok(ortep_config_create(&cfg));
  ck_assert_ok(ortep_config_set(cfg, "ortep.weights_dtype", q));
  ck_assert_ok(ortep_config_set(cfg, "ortep.weights_cache", "off"));
  return cfg;
}

/* q8_0 / q4_0 quantized at open by each EP (the same bytes: ortep_quantize's
 * rounding), x quantized per node the same way, integer dot products: the
 * CPU's function up to the order of the f32 sums of block products. Rounding
 * x to 8 bits is a step function: where the two orders of a sum put a value
 * on either side of a rounding edge, one q differs by 1 and the difference
 * grows with the positions. On the H200 (2026-12-04) q8_0 kept within 1e-3 x
 * (1 + |cpu|) for 30 positions and reached 7e-3 at the 31st; the bound is
 * 2e-2, which the weights left unquantized on the GPU (the CUDA EP's bug of
 * that day: 4e-2 at the first position) still fails. This bound has not yet
 * run on a GPU. */
START_TEST(cuda_matches_cpu_with_quantized_weights) {
  static const char *const q[] = {"q8_0", "q4_0"};
  char dir[64], label[64];
  quantizable_model(dir);
  for (int i = 0; i < 2; i++) {
    ortep_config *cfg = quantizing(q[i]);
    snprintf(label, sizeof label, "tiny-llama %s", q[i]);
    /* the CUDA EP holds the blocks: its prepare_initializer ran for every projection */
    ortep_decoder *g;
    ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda", .max_seq_len = 64, .config = cfg}, &g));
    ck_assert_msg(ortep_session_initializer_prepared(ortep_decoder_session(g), "model.layers.0.mlp.down_proj.weight"),
                  "%s: the CUDA EP did not quantize the weights", label);
    ck_assert_uint_ge(ortep_decoder_blocked_weights(g), 7);
    ortep_decoder_close(g);
    compare_with_cpu_cfg(dir, label, 32, 2e-2f, cfg);
    ortep_config_destroy(cfg);
  }
  test_model_dir_remove(dir);
}
END_TEST

/* A prefill chunk over q8_0 / q4_0 weights: the CUDA EP widens each weight to
 * f32 and runs one SGEMM with f32 x, the CPU EP widens its blocks into
 * scratch for sgemm: the same function up to the order of the sums, so the
 * prompt's last logits agree within 1e-3 x (1 + |cpu|) (no activation is
 * quantized in a chunk, so no rounding edge to cross), and the next token is
 * the same. Written without a GPU: never run yet. */
START_TEST(chunked_prefill_of_quantized_weights_on_cuda) {
  static const int32_t p[23] = {5,  17, 2,  99,  41, 7,   250, 13, 88,  3,  64, 199,
                                21, 9,  77, 150, 6,  230, 31,  4,  120, 55, 18};
  static const char *const q[] = {"q8_0", "q4_0"};
  char dir[64];
  quantizable_model(dir);
  for (int i = 0; i < 2; i++) {
    ortep_config *cfg = quantizing(q[i]);
    ortep_decoder *g, *c;
    ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda", .max_seq_len = 64, .config = cfg}, &g));
    ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 64, .config = cfg}, &c));
    size_t V = ortep_decoder_vocab_size(c);
    float *lg = malloc(V * sizeof *lg), *lc = malloc(V * sizeof *lc), worst = 0;
    int32_t tg, tc;
    ck_assert_ok(ortep_decoder_prefill(g, p, 23, &tg));
    ck_assert_ok(ortep_decoder_prefill(c, p, 23, &tc));
    ck_assert_ok(ortep_decoder_logits(g, lg, V));
    ck_assert_ok(ortep_decoder_logits(c, lc, V));
    for (size_t j = 0; j < V; j++) {
      float d = fabsf(lg[j] - lc[j]);
      worst = d > worst ? d : worst;
      ck_assert_msg(d <= 1e-3f * (1.0f + fabsf(lc[j])), "%s logit %zu: cuda chunked %.7g, cpu chunked %.7g", q[i], j,
                    (double)lg[j], (double)lc[j]);
    }
    ck_assert_int_eq(tg, tc);
    printf("chunked prefill (cuda, %s) 23 tokens: max |cuda - cpu| %.3g, next token identical\n", q[i], (double)worst);
    free(lg), free(lc);
    ortep_decoder_close(g), ortep_decoder_close(c);
    ortep_config_destroy(cfg);
  }
  test_model_dir_remove(dir);
}
END_TEST

/* The GEMV computes the CPU's function (f32 activations, widened weights,
 * f32 accumulation) for every weight type, so one tolerance serves all. */
START_TEST(cuda_matches_cpu_in_every_weight_type) {
  const ortep_dtype types[] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_BF16, ORTEP_DTYPE_F16};
  for (int i = 0; i < 3; i++) {
    char dir[64], label[64];
    snprintf(dir, sizeof dir, "/tmp/ortep-cuda-dt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ok(ortep_model_write_synthetic(dir, "tiny", types[i], 1234));
    snprintf(label, sizeof label, "tiny %s", ortep_dtype_name(types[i]));
    compare_with_cpu(dir, label, 32, 1e-3f);
    test_model_dir_remove(dir);
  }
}
END_TEST

/* The Qwen2.5-0.5B shape in bf16 (24 layers, vocab 151936): ~1 GB written,
 * so only when asked (bench/device-check.sh sets ORTEP_DEVICE_CHECK_LARGE). */
START_TEST(cuda_matches_cpu_on_the_qwen_shape) {
  if (!getenv("ORTEP_DEVICE_CHECK_LARGE")) {
    printf("qwen2.5-0.5b bf16: not run (set ORTEP_DEVICE_CHECK_LARGE=1)\n");
    return;
  }
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/ortep-cuda-qwen-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_ok(ortep_model_write_synthetic(dir, "qwen2.5-0.5b", ORTEP_DTYPE_BF16, 1234));
  compare_with_cpu(dir, "qwen2.5-0.5b bf16", 32, 0.0f);
  test_model_dir_remove(dir);
}
END_TEST

/* The device budget is the one that binds when the KV cache and activations
 * live on the GPU (the CPU suite's host-budget test means the CPU EP). */
START_TEST(device_budget_refuses_on_cuda) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "ortep.device.budget_bytes", "64K"));
  ortep_decoder *d = NULL;
  ck_assert_status(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cuda", .config = c}, &d),
                   ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("ortep.device.budget_bytes");
  ck_assert_ptr_null(d);
  ortep_config_destroy(c);
}
END_TEST

START_TEST(eager_and_replay_agree_on_cuda) {
  const char *seams[] = {NULL, "GroupQueryAttention"};
  for (int k = 0; k < 2; k++) {
    ortep_decoder *e = open_ep("cuda", true, NULL), *g = open_ep("cuda", false, seams[k]);
    int32_t te = 7, tg = 7;
    for (int pos = 0; pos < 48; pos++) {
      ck_assert_ok(ortep_decoder_step(e, te, pos, &te));
      ck_assert_ok(ortep_decoder_step(g, tg, pos, &tg));
      ck_assert_msg(te == tg, "seams %s, pos %d: eager %d, replay %d", seams[k] ? seams[k] : "none", pos, te, tg);
    }
    ortep_session_stats st;
    ortep_session_get_stats(ortep_decoder_session(g), &st);
    ck_assert_uint_eq(st.seams, k ? 2 : 0);
    if (!k) { /* the launch budget: at most 10 kernels per layer, plus embedding, final norm, lm_head, the token's
               * selection (ortep:SelectToken) and its feed to the next step (ortep:FeedToken) */
      printf("tiny on cuda: %zu graph nodes, %zu CUDA kernel nodes per token (2 layers)\n", st.kernels_per_step,
             st.graph_kernel_nodes);
      ck_assert_uint_le(st.graph_kernel_nodes, 2 * 10 + 5);
      ck_assert_uint_ge(st.graph_kernel_nodes, st.kernels_per_step);
    }
    ck_assert_ptr_null(st.fallback_reason);
    ortep_decoder_close(e);
    ortep_decoder_close(g);
  }
}
END_TEST

START_TEST(error_word_paths_on_cuda) {
  ortep_decoder *d = open_ep("cuda", false, NULL);
  int32_t t;
  ck_assert_status(ortep_decoder_step(d, 100000, 0, &t), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_GATHER_INDEX, ORTEP_ERROR_GATHER_INDEX);
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_step(d, 3, 0, &t));
  ck_assert_status(ortep_decoder_step(d, 3, 64, &t), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_ROTARY_POSITION, ORTEP_ERROR_ROTARY_POSITION);
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_step(d, 3, 0, &t));
  ortep_decoder_close(d);
}
END_TEST

/* A corrupt checkpoint (an Inf in a weight): the CUDA argmax flags the
 * non-finite logits in the same pass, graph and eager, and nothing is emitted. */
START_TEST(a_non_finite_weight_fails_the_step_on_cuda) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  test_poison_f32_weight(dir, "model.norm.weight", 3, INFINITY);
  for (int eager = 0; eager < 2; eager++) {
    ortep_decoder *d;
    ck_assert_ok(
        ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda", .eager = eager, .max_seq_len = 16}, &d));
    int32_t next = -42;
    ck_assert_status(ortep_decoder_step(d, 3, 0, &next), ORTEP_E_DEVICE_VALIDATION);
    ck_assert_int_eq(next, -42);
    ck_assert_uint_eq(ortep_decoder_last_error_bits(d) & ORTEP_ERROR_ARGMAX_NOT_FINITE, ORTEP_ERROR_ARGMAX_NOT_FINITE);
    ortep_decoder_close(d);
  }
  test_model_dir_remove(dir);
}
END_TEST

START_TEST(zero_allocations_per_step_and_none_during_capture) {
  ortep_decoder *d = open_ep("cuda", false, NULL);
  int32_t t = 1;
  ck_assert_ok(ortep_decoder_step(d, t, 0, &t));
  uint64_t a0, f0, a1, f1;
  ortep_ep *ep = ortep_decoder_ep(d);
  ck_assert(ortep_ep_allocation_counts(ep, &a0, &f0));
  for (int pos = 1; pos < 40; pos++) ck_assert_ok(ortep_decoder_step(d, t, pos, &t));
  ck_assert(ortep_ep_allocation_counts(ep, &a1, &f1));
  ck_assert_uint_eq(a1, a0);
  ck_assert_uint_eq(f1, f0);
  /* an allocation while a capture is open is refused, and abort leaves the stream clean */
  ck_assert_ok(ortep_ep_begin_capture(ep));
  ortep_buffer b;
  ck_assert_status(ortep_ep_allocate(ep, 1024, 256, &b), ORTEP_E_CAPTURE_ACTIVE);
  ck_assert_error_mentions("carve from the arena before capture");
  ck_assert_ok(ortep_ep_abort_capture(ep));
  ck_assert(!ortep_ep_capture_active(ep));
  ortep_session_stats st;
  ortep_session_get_stats(ortep_decoder_session(d), &st);
  uint64_t inst = st.instantiations;
  ck_assert_ok(ortep_session_invalidate(ortep_decoder_session(d)));
  ck_assert_ok(ortep_decoder_step(d, t, 40, &t)); /* re-captures and runs */
  ortep_session_get_stats(ortep_decoder_session(d), &st);
  ck_assert_uint_ge(st.graph_updates, 1); /* the same segment: updated in place */
  ck_assert_uint_eq(st.instantiations, inst);
  ortep_decoder_close(d);
}
END_TEST

/* The two-pass device argmax: the first maximum wins across blocks, any
 * non-finite logit latches the bit while the finite maximum is still found,
 * f16 logits too; the result matches the CPU EP's on the same input. */
static void argmax_on(ortep_ep *ep, const void *host, size_t n, ortep_dtype dt, uint32_t out[2]) {
  size_t es = dt == ORTEP_DTYPE_F16 ? 2 : 4;
  ortep_buffer logits, res;
  ck_assert_ok(ortep_ep_allocate(ep, n * es, 256, &logits));
  ck_assert_ok(ortep_ep_allocate(ep, 8, 8, &res));
  ck_assert_ok(ortep_ep_copy_from_host(ep, host, n * es, &logits));
  ck_assert_ok(ortep_ep_device_argmax(ep, logits.ptr, n, dt, &res));
  ck_assert_ok(ortep_ep_copy_to_host(ep, &res, out, 8));
  ck_assert_ok(ortep_ep_deallocate(ep, &logits));
  ck_assert_ok(ortep_ep_deallocate(ep, &res));
  ck_assert_ok(ortep_ep_reset_error_word(ep));
}
START_TEST(device_argmax_across_blocks_matches_the_cpu) {
  ortep_ep *gpu, *cpu = test_cpu_ep();
  ck_assert_ok(ortep_cuda_ep_create(NULL, &gpu));
  ck_assert_ok(ortep_ep_initialize(gpu, NULL));
  const size_t n = 151936; /* Qwen2.5's vocabulary: many blocks */
  float *x = malloc(n * sizeof *x);
  uint16_t *h = malloc(n * sizeof *h);
  test_rng r = test_rng_new(test_seed());
  for (int c = 0; c < 5; c++) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(test_rng_next(&r) % 20000) / 1000.0f - 10.0f;
    if (c >= 1) x[140000] = x[9000] = 50.0f; /* a tie in different blocks: 9000 wins */
    if (c >= 2) x[7] = NAN;                  /* flagged, the finite maximum still found */
    if (c >= 3) x[n - 1] = INFINITY;
    if (c == 4)
      for (size_t i = 0; i < n; i++) x[i] = NAN; /* no finite logit: token 0 */
    uint32_t g[2], want[2];
    argmax_on(gpu, x, n, ORTEP_DTYPE_F32, g);
    argmax_on(cpu, x, n, ORTEP_DTYPE_F32, want);
    ck_assert_msg(g[0] == want[0] && g[1] == want[1], "case %d: cuda (%u, 0x%x), cpu (%u, 0x%x)", c, g[0], g[1],
                  want[0], want[1]);
    for (size_t i = 0; i < n; i++) h[i] = ortep_f32_to_f16(x[i]);
    argmax_on(gpu, h, n, ORTEP_DTYPE_F16, g);
    argmax_on(cpu, h, n, ORTEP_DTYPE_F16, want);
    ck_assert_msg(g[0] == want[0] && g[1] == want[1], "f16 case %d: cuda (%u, 0x%x), cpu (%u, 0x%x)", c, g[0], g[1],
                  want[0], want[1]);
  }
  free(x), free(h);
  ortep_ep_destroy(gpu);
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(copies_and_fences) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  ortep_buffer a, b;
  ck_assert_ok(ortep_ep_allocate(ep, 4096, 256, &a));
  ck_assert_ok(ortep_ep_allocate(ep, 4096, 256, &b));
  unsigned char src[4096], dst[4096];
  for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(i * 7);
  ck_assert_ok(ortep_ep_copy_from_host(ep, src, sizeof src, &a));
  ortep_fence f;
  ck_assert_ok(ortep_ep_copy_async(ep, &a, &b, 4096, &f));
  ck_assert_ok(ortep_ep_fence_wait(ep, &f));
  ck_assert_ok(ortep_ep_copy_to_host(ep, &b, dst, sizeof dst));
  ck_assert_mem_eq(src, dst, sizeof src);
  ck_assert_status(ortep_ep_copy_from_host(ep, src, 5000, &a), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ok(ortep_ep_deallocate(ep, &a));
  ck_assert_ok(ortep_ep_deallocate(ep, &b));
  ortep_ep_destroy(ep);
}
END_TEST

/* Batched prefill on the GPU: a 23-token prompt (chunks of 16 and 4 and
 * three single tokens at max_seq_len 64) against token by token on CUDA and
 * against the CPU EP's chunked prefill: logits within 1e-4 / 1e-3, the same
 * greedy continuation; a bad id inside a chunk fails it with GATHER_INDEX. */
START_TEST(chunked_prefill_on_cuda) {
  static const int32_t p[23] = {5,  17, 2,  99,  41, 7,   250, 13, 88,  3,  64, 199,
                                21, 9,  77, 150, 6,  230, 31,  4,  120, 55, 18};
  ortep_decoder *d[3];
  const char *eps[3] = {"cuda", "cuda", "cpu"};
  for (int k = 0; k < 3; k++)
    ck_assert_ok(ortep_decoder_open(
        g_dir, &(ortep_decoder_options){.ep = eps[k], .max_seq_len = 64, .prefill_chunk = k == 1 ? 1 : 0}, &d[k]));
  size_t V = ortep_decoder_vocab_size(d[0]);
  float *l[3];
  int32_t tok[3][8];
  for (int k = 0; k < 3; k++) {
    l[k] = malloc(V * sizeof(float));
    ck_assert_ok(ortep_decoder_prefill(d[k], p, 23, &tok[k][0]));
    ck_assert_ok(ortep_decoder_logits(d[k], l[k], V));
    for (int i = 1; i < 8; i++) ck_assert_ok(ortep_decoder_step(d[k], tok[k][i - 1], 22 + i, &tok[k][i]));
  }
  float worst[2] = {0, 0};
  for (size_t i = 0; i < V; i++)
    for (int k = 1; k < 3; k++) {
      float diff = fabsf(l[0][i] - l[k][i]);
      worst[k - 1] = diff > worst[k - 1] ? diff : worst[k - 1];
      ck_assert_msg(diff <= (k == 1 ? 1e-4f : 1e-3f) * (1.0f + fabsf(l[k][i])), "logit %zu: cuda chunked %.7g, %s %.7g",
                    i, (double)l[0][i], k == 1 ? "cuda by token" : "cpu chunked", (double)l[k][i]);
    }
  ck_assert_mem_eq(tok[0], tok[1], sizeof tok[0]);
  ck_assert_mem_eq(tok[0], tok[2], sizeof tok[0]);
  printf(
      "chunked prefill (cuda)  23 tokens: max |chunked - by token| %.3g, max |cuda - cpu| %.3g, 8 tokens identical\n",
      (double)worst[0], (double)worst[1]);
  int32_t bad[20];
  memcpy(bad, p, sizeof bad);
  bad[9] = (int32_t)V;
  ck_assert_ok(ortep_decoder_reset(d[0]));
  ck_assert_status(ortep_decoder_prefill(d[0], bad, 20, NULL), ORTEP_E_DEVICE_VALIDATION);
  ck_assert_uint_eq(ortep_decoder_last_error_bits(d[0]) & ORTEP_ERROR_GATHER_INDEX, ORTEP_ERROR_GATHER_INDEX);
  for (int k = 0; k < 3; k++) {
    free(l[k]);
    ortep_decoder_close(d[k]);
  }
}
END_TEST

/* The sampler on the GPU against the CPU EP's, over the same logits and
 * parameters: the same Philox numbers, so the same tokens except where a
 * draw falls within float rounding of a boundary between two tokens (the
 * kept mass is summed in another order). */
START_TEST(sampling_on_cuda_draws_what_the_cpu_draws) {
  ortep_ep *gpu, *cpu;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &gpu));
  ck_assert_ok(ortep_ep_initialize(gpu, NULL));
  ck_assert_ok(ortep_cpu_ep_create(NULL, &cpu));
  ck_assert_ok(ortep_ep_initialize(cpu, NULL));
  /* under compute-sanitizer (bench/device-check.sh sets ORTEP_DEVICE_CHECK_SANITIZER) 25 draws a set: racecheck
   * instruments every shared-memory access of the sampler's block reductions, 400 x 3 draws outlast its limit */
  enum { V = 5000 };
  const int N = getenv("ORTEP_DEVICE_CHECK_SANITIZER") ? 25 : 400;
  float *x = malloc(V * sizeof *x);
  for (int i = 0; i < V; i++) x[i] = (float)((i * 7919) % 1000) / 250.0f - 2.0f;
  int32_t hist[16];
  for (int i = 0; i < 16; i++) hist[i] = (i * 131) % V;
  ortep_buffer dx, dp, dh, dr;
  ck_assert_ok(ortep_ep_allocate(gpu, V * sizeof *x, 256, &dx));
  ck_assert_ok(ortep_ep_allocate(gpu, 64, 64, &dp));
  ck_assert_ok(ortep_ep_allocate(gpu, sizeof hist, 64, &dh));
  ck_assert_ok(ortep_ep_allocate(gpu, 8, 8, &dr));
  ck_assert_ok(ortep_ep_copy_from_host(gpu, x, V * sizeof *x, &dx));
  ck_assert_ok(ortep_ep_copy_from_host(gpu, hist, sizeof hist, &dh));
  const ortep_sample_params base[3] = {
      {.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed_lo = 7},
      {.temperature = 0.7f,
       .top_p = 0.9f,
       .min_p = 0.05f,
       .repetition_penalty = 1.3f,
       .top_k = 50,
       .seed_lo = 9,
       .n_history = 16},
      {.temperature = 1.2f, .top_p = 0.5f, .repetition_penalty = 1.0f, .top_k = 0, .seed_hi = 3}};
  uint32_t pair_c[2], pair_g[2];
  ortep_buffer rc;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(pair_c, ortep_device_cpu(), 8, 4, &rc));
  for (int b = 0; b < 3; b++) {
    int same = 0;
    for (int i = 0; i < N; i++) {
      ortep_sample_params p = base[b];
      p.position = (uint32_t)i;
      ck_assert_ok(ortep_ep_copy_from_host(gpu, &p, sizeof p, &dp));
      ck_assert_ok(ortep_ep_device_sample(gpu, dx.ptr, V, ORTEP_DTYPE_F32, dp.ptr, dh.ptr, &dr));
      ck_assert_ok(ortep_ep_copy_to_host(gpu, &dr, pair_g, sizeof pair_g));
      ck_assert_ok(ortep_ep_device_sample(cpu, x, V, ORTEP_DTYPE_F32, &p, hist, &rc));
      ck_assert_uint_eq(pair_g[1], 0);
      same += pair_g[0] == pair_c[0];
    }
    printf("sampler cuda vs cpu, parameters %d: %d/%d draws identical\n", b, same, N);
    ck_assert_int_ge(same, N * 98 / 100);
  }
  ortep_ep_deallocate(gpu, &dx), ortep_ep_deallocate(gpu, &dp), ortep_ep_deallocate(gpu, &dh),
      ortep_ep_deallocate(gpu, &dr);
  free(x);
  ortep_ep_destroy(gpu);
  ortep_ep_destroy(cpu);
}
END_TEST

/* K tokens per launch on the GPU: the decode step inside a conditional
 * WHILE node (when the runtime and driver have them; else the session's
 * host loop, said in the output), the same tokens and bitwise the same last
 * logits as one step per launch, greedy and sampled, and a stop id ending
 * the launch at the same token. */
typedef struct kept {
  int32_t *t;
  size_t n;
} kept;
static bool keep_token(int32_t token, size_t index, void *user) {
  kept *k = user;
  ck_assert_uint_lt(index, 64);
  k->t[k->n++] = token;
  return true;
}

static void cuda_generate(size_t k, const ortep_sampling *s, const int32_t *stop, int32_t *out, size_t *n,
                          float *logits, size_t vocab, uint64_t *loops) {
  ortep_decoder *d;
  ck_assert_ok(
      ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cuda", .max_seq_len = 64, .tokens_per_launch = k}, &d));
  static const int32_t prompt[] = {3, 14, 15, 92};
  ck_assert_ok(ortep_decoder_prefill(d, prompt, 4, NULL));
  ortep_generate_options g = {
      .max_tokens = 40, .ignore_eos = true, .sampling = s, .stop_tokens = stop, .n_stop_tokens = stop ? 1 : 0};
  ortep_generate_result r;
  kept kt = {out, 0};
  ck_assert_ok(ortep_decoder_generate_ex(d, &g, keep_token, &kt, &r));
  *n = r.generated;
  ck_assert_uint_eq(kt.n, *n);
  ck_assert_ok(ortep_decoder_logits(d, logits, vocab));
  ortep_session_stats st;
  ck_assert_ok(ortep_session_get_graph_stats(ortep_decoder_session(d), 0, &st));
  *loops = st.device_loops;
  ortep_decoder_close(d);
}

START_TEST(k_tokens_per_launch_on_cuda) {
  ortep_ep *ep;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  bool loops = ortep_ep_get_capabilities(ep).device_loops;
  ortep_ep_destroy(ep);
  const ortep_sampling sampled = {.temperature = 0.8f, .top_k = 40, .repetition_penalty = 1.2f, .seed = 3};
  size_t vocab = 512;
  float *l1 = malloc(vocab * sizeof *l1), *l8 = malloc(vocab * sizeof *l8);
  for (int way = 0; way < 3; way++) {
    const ortep_sampling *s = way == 1 ? &sampled : NULL;
    int32_t t1[64], t8[64], stop = 0;
    size_t n1, n8;
    uint64_t lp1, lp8;
    cuda_generate(1, s, NULL, t1, &n1, l1, vocab, &lp1);
    if (way == 2) { /* a stop id: the token drawn at index 20 */
      stop = t1[20];
      cuda_generate(1, s, &stop, t1, &n1, l1, vocab, &lp1);
    }
    cuda_generate(8, s, way == 2 ? &stop : NULL, t8, &n8, l8, vocab, &lp8);
    ck_assert_uint_eq(n8, n1);
    for (size_t i = 0; i < n1; i++) ck_assert_int_eq(t8[i], t1[i]);
    ck_assert_msg(!memcmp(l1, l8, vocab * sizeof *l1), "way %d: the last logits differ", way);
    ck_assert_uint_eq(lp1, 0);
    if (loops) ck_assert_uint_gt(lp8, 0);
    printf("K tokens per launch on cuda (%s): %zu tokens identical to K = 1, %s\n",
           way == 0   ? "greedy"
           : way == 1 ? "sampled"
                      : "stop id",
           n1, loops ? "looped on the device (conditional WHILE node)" : "host loop (no conditional nodes)");
  }
  free(l1), free(l8);
}
END_TEST

/* The CUDA virtual allocator: reserve costs nothing, commits add whole
 * granules (zeroed) charged to the DEVICE tier, decommits give them back, a
 * shared prefix maps the same bytes into two reservations read-only and is
 * charged once. Bytes are checked through the CUDA EP's copies. */
START_TEST(cuda_virtual_allocator_commits_and_shares) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_allocator *a;
  ck_assert_ok(ortep_cuda_virtual_allocator_create(0, g, &a));
  ortep_ep *ep;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, NULL));
  size_t gran = ortep_allocator_granularity(a), R = 16 * gran;
  ck_assert_uint_gt(gran, 0);
  void *base, *other;
  ck_assert_ok(ortep_allocator_reserve(a, R, 256, &base));
  ck_assert_ok(ortep_allocator_reserve(a, R, 256, &other));
  ortep_mem_stats st;
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &st);
  ck_assert_uint_eq(st.current_bytes, 0);
  uint64_t got;
  ortep_commit_range c = {base, R, 256, 10, gran + 1}; /* touches two granules */
  ck_assert_ok(ortep_allocator_commit(a, &c, &got));
  ck_assert_uint_eq(got, 2 * gran);
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &st);
  ck_assert_uint_eq(st.current_bytes, 2 * gran);
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(base, ortep_ep_device(ep), 2 * gran, 256, &b));
  unsigned char *h = malloc(2 * gran);
  ck_assert_ok(ortep_ep_copy_to_host(ep, &b, h, 2 * gran));
  for (size_t i = 0; i < 2 * gran; i += 4093) ck_assert_uint_eq(h[i], 0); /* zeroed */
  memset(h, 0x5a, 2 * gran);
  ck_assert_ok(ortep_ep_copy_from_host(ep, h, 2 * gran, &b));
  ortep_shared_prefix *p;
  ck_assert_ok(ortep_allocator_create_prefix(a, base, gran, &p));
  ortep_shared_commit_info info;
  ck_assert_ok(ortep_allocator_map_prefix(a, p, other, R, &info));
  ck_assert_uint_eq(info.additional_owned_bytes, gran);
  ck_assert_ok(ortep_allocator_map_prefix(a, p, base, R, &info)); /* base's first granule makes way */
  ck_assert_uint_eq(info.additional_owned_bytes, 0);
  ck_assert_uint_eq(info.released_bytes, gran);
  ortep_buffer ob;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(other, ortep_ep_device(ep), gran, 256, &ob));
  memset(h, 0, gran);
  ck_assert_ok(ortep_ep_copy_to_host(ep, &ob, h, gran));
  for (size_t i = 0; i < gran; i += 4093) ck_assert_uint_eq(h[i], 0x5a);
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &st);
  ck_assert_uint_eq(st.current_bytes, 2 * gran); /* base's second granule + the prefix */
  ortep_allocator_destroy_prefix(a, p);
  c = (ortep_commit_range){base, R, 256, 0, 2 * gran};
  ck_assert_ok(ortep_allocator_decommit(a, &c, &got));
  ck_assert_uint_eq(got, gran); /* its private granule; the prefix stays for `other` */
  ck_assert_int_eq(ortep_allocator_release(a, other, R, 256).kind, ORTEP_RELEASE_COMPLETE);
  ck_assert_int_eq(ortep_allocator_release(a, base, R, 256).kind, ORTEP_RELEASE_COMPLETE);
  ortep_governor_get_stats(g, ORTEP_TIER_DEVICE, &st);
  ck_assert_uint_eq(st.current_bytes, 0);
  free(h);
  ortep_ep_destroy(ep);
  ortep_allocator_destroy(a);
  ortep_governor_destroy(g);
}
END_TEST

static bool collect_tokens(int32_t t, size_t i, void *user) {
  ((int32_t *)user)[i] = t;
  return true;
}

/* The decoder's caches on the GPU: committed as positions are held, and a
 * fork decodes like its parent. */
START_TEST(kv_caches_grow_and_fork_on_cuda) {
  ortep_decoder *d, *f;
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = "cuda"}, &d));
  ortep_kv_stats k;
  ortep_decoder_kv_stats(d, &k);
  ck_assert_uint_eq(k.committed_bytes, 0);
  int32_t ids[40], a[8], b[8], next;
  for (int i = 0; i < 40; i++) ids[i] = (i * 37 + 3) % 500;
  ck_assert_ok(ortep_decoder_prefill(d, ids, 40, &next));
  ortep_decoder_kv_stats(d, &k);
  ck_assert_uint_gt(k.committed_bytes, 0);
  ck_assert_uint_lt(k.committed_bytes, k.reserved_bytes + 1);
  ck_assert_ok(ortep_decoder_fork(d, &f));
  size_t n;
  ck_assert_ok(ortep_decoder_generate(d, 8, collect_tokens, a, &n));
  ck_assert_ok(ortep_decoder_generate(f, 8, collect_tokens, b, &n));
  ck_assert_mem_eq(a, b, sizeof a);
  ortep_decoder_close(d);
  ortep_decoder_close(f);
}
END_TEST

int main(void) {
  char why[256];
  if (!ortep_cuda_available(why, sizeof why)) {
    printf("skipped: %s\n", why);
    return 77;
  }
  snprintf(g_dir, sizeof g_dir, "/tmp/ortep-cuda-XXXXXX");
  if (!mkdtemp(g_dir) || ortep_model_write_synthetic(g_dir, "tiny", ORTEP_DTYPE_F32, 1234) != ORTEP_OK) {
    fprintf(stderr, "cannot write the test model: %s\n", ortep_last_error());
    return 1;
  }
  Suite *s = suite_create("cuda_device");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, cuda_matches_cpu_in_every_weight_type);
  tcase_add_test(tc, device_budget_refuses_on_cuda);
  tcase_add_test(tc, eager_and_replay_agree_on_cuda);
  tcase_add_test(tc, error_word_paths_on_cuda);
  tcase_add_test(tc, a_non_finite_weight_fails_the_step_on_cuda);
  tcase_add_test(tc, zero_allocations_per_step_and_none_during_capture);
  tcase_add_test(tc, copies_and_fences);
  tcase_add_test(tc, device_argmax_across_blocks_matches_the_cpu);
  tcase_add_test(tc, chunked_prefill_on_cuda);
  tcase_add_test(tc, sampling_on_cuda_draws_what_the_cpu_draws);
  tcase_add_test(tc, cuda_virtual_allocator_commits_and_shares);
  tcase_add_test(tc, kv_caches_grow_and_fork_on_cuda);
  tcase_add_test(tc, k_tokens_per_launch_on_cuda);
  tcase_add_test(tc, cuda_matches_cpu_with_quantized_weights);
  tcase_add_test(tc, chunked_prefill_of_quantized_weights_on_cuda);
  suite_add_tcase(s, tc);
  /* its own case, so the sanitizer runs can leave it out (CK_RUN_CASE=core) */
  TCase *large = tcase_create("large");
  tcase_set_timeout(large, 600);
  tcase_add_test(large, cuda_matches_cpu_on_the_qwen_shape);
  suite_add_tcase(s, large);
  int rc = test_run_unforked(s);
  test_model_dir_remove(g_dir);
  return rc;
}
