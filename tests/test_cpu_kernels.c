/* test_cpu_kernels.c: every CPU kernel against a plain reference computed
 * here in double precision (small shapes, random inputs from a fixed seed),
 * the out-of-range paths of the error word (bit set, defined output, no
 * out-of-bounds access: ASan checks that), and the refusal reasons.
 *
 * Tolerance: |got - want| <= 1e-4 * (1 + |want|) for f32 math; the f16/bf16
 * weight paths compare against references fed the same widened weights. */
#include <math.h>
#include <stdatomic.h>
#include <time.h>

#include "kernels/cpu/ops.h" /* ortep__cpu_quant_block: the blocked q8_0 / q4_0 layout */
#include "kernels/cpu/pool.h"
#include "testutil.h"

#define TOL(w) (1e-4 * (1.0 + fabs(w)))

typedef struct tin {
  ortep_dtype dt;
  ortep_shape shape;
  const void *data; /* NULL: an absent optional input */
} tin;

typedef struct tattr {
  const char *name;
  int is_float;
  int64_t i;
  float f;
} tattr;

static ortep_ep *g_cpu;
static ortep_kernel_match g_match;

/* Builds a one-node graph, asks supports_op, creates the kernel, runs it. */
static ortep_status run_node(const char *op, const char *domain, const tattr *attrs, size_t nattrs, const tin *ins,
                             size_t nin, void **outs, size_t nout) {
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  char names[8][24], onames[4][24];
  const char *in_names[8], *out_names[4];
  ortep_shape shapes[8];
  ortep_dtype dtypes[8];
  const void *in_ptrs[8];
  for (size_t i = 0; i < nin; i++) {
    snprintf(names[i], sizeof names[i], "i%zu", i);
    in_names[i] = ins[i].data ? names[i] : "";
    shapes[i] = ins[i].shape;
    dtypes[i] = ins[i].dt;
    in_ptrs[i] = ins[i].data;
  }
  for (size_t i = 0; i < nout; i++) {
    snprintf(onames[i], sizeof onames[i], "o%zu", i);
    out_names[i] = outs[i] ? onames[i] : "";
  }
  ortep_node_id id;
  ck_assert_ok(ortep_graph_add_node(g, op, domain, "n", in_names, nin, out_names, nout, &id));
  for (size_t i = 0; i < nattrs; i++) {
    if (attrs[i].is_float)
      ck_assert_ok(ortep_graph_set_attr_float(g, id, attrs[i].name, attrs[i].f));
    else
      ck_assert_ok(ortep_graph_set_attr_int(g, id, attrs[i].name, attrs[i].i));
  }
  const ortep_node *node = ortep_graph_node(g, id);
  ortep_ep_supports_op(g_cpu, node, 17, shapes, dtypes, nin, &g_match);
  ortep_status st = ORTEP_E_NOT_SUPPORTED;
  if (g_match.supported) {
    ortep_kernel *k;
    ck_assert_ok(ortep_ep_get_kernel(g_cpu, node, shapes, dtypes, nin, 17, &k));
    ortep_kernel_io io = {in_ptrs, nin, outs, nout, ortep_ep_error_word_ptr(g_cpu), NULL};
    st = ortep_ep_run_kernel(g_cpu, k, &io);
    ortep_kernel_destroy(k);
  } else {
    ck_assert_msg(strlen(g_match.reason) > 0, "an unsupported match without a reason");
    ortep_kernel *k = NULL;
    ck_assert_status(ortep_ep_get_kernel(g_cpu, node, shapes, dtypes, nin, 17, &k), ORTEP_E_NOT_SUPPORTED);
    ck_assert_ptr_null(k);
  }
  ortep_graph_destroy(g);
  return st;
}

static uint32_t error_bits(void) {
  uint32_t b;
  ck_assert_ok(ortep_ep_check_error_word(g_cpu, &b));
  return b;
}

static void setup(void) {
  g_cpu = test_cpu_ep();
  ortep_ep_reset_error_word(g_cpu);
}
static void teardown(void) {
  uint64_t a, f;
  ortep_ep_allocation_counts(g_cpu, &a, &f);
  ck_assert_uint_eq(a, f);
  ortep_ep_destroy(g_cpu);
}

static void fill(test_rng *r, float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * ((float)(test_rng_next(r) % 20001) / 10000.0f - 1.0f);
}

/* Weights of a dtype from f32 values, and the f32 values they really hold. */
static void *as_dtype(const float *x, size_t n, ortep_dtype d, float *actual) {
  if (d == ORTEP_DTYPE_F32) {
    memcpy(actual, x, n * sizeof *x);
    float *c = malloc(n * sizeof *c);
    memcpy(c, x, n * sizeof *c);
    return c;
  }
  uint16_t *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) {
    h[i] = d == ORTEP_DTYPE_F16 ? ortep_f32_to_f16(x[i]) : ortep_f32_to_bf16(x[i]);
    actual[i] = d == ORTEP_DTYPE_F16 ? ortep_f16_to_f32(h[i]) : ortep_bf16_to_f32(h[i]);
  }
  return h;
}

static void expect_close(const float *got, const double *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= TOL(want[i]), "%s[%zu]: got %.7g, want %.7g", what, i, got[i], want[i]);
}

static const ortep_dtype wdt[3] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_F16, ORTEP_DTYPE_BF16};

START_TEST(gather_rows_and_out_of_range_indices) {
  test_rng r = test_rng_new(test_seed() + 1);
  enum { V = 10, H = 6 };
  float table[V * H], actual[V * H];
  fill(&r, table, V * H, 1.0f);
  void *t = as_dtype(table, V * H, wdt[_i], actual);
  int64_t idx64[4] = {3, 0, 9, 3};
  int32_t idx32[4] = {-1, 2, 10, 9};
  float out[4 * H];
  ck_assert_ok(run_node("Gather", "", NULL, 0,
                        (tin[]){{wdt[_i], SHAPE(V, H), t}, {ORTEP_DTYPE_I64, SHAPE(1, 4), idx64}}, 2, (void *[]){out},
                        1));
  for (int n = 0; n < 4; n++)
    for (int j = 0; j < H; j++) ck_assert_float_eq(out[n * H + j], actual[idx64[n] * H + j]);
  ck_assert_uint_eq(error_bits(), 0);
  memset(out, 0x7f, sizeof out);
  ck_assert_ok(run_node("Gather", "", NULL, 0, (tin[]){{wdt[_i], SHAPE(V, H), t}, {ORTEP_DTYPE_I32, SHAPE(4), idx32}},
                        2, (void *[]){out}, 1));
  ck_assert_uint_eq(error_bits(), ORTEP_ERROR_GATHER_INDEX);
  for (int j = 0; j < H; j++) {
    ck_assert_float_eq(out[0 * H + j], 0.0f); /* -1: zeroed */
    ck_assert_float_eq(out[1 * H + j], actual[2 * H + j]);
    ck_assert_float_eq(out[2 * H + j], 0.0f); /* == rows: zeroed */
    ck_assert_float_eq(out[3 * H + j], actual[9 * H + j]);
  }
  free(t);
}
END_TEST

/* ortep:Embedding looks tokens up in a row-major table like Gather, and in a
 * blocked one ([V/4, H/16, 4, 16], a tied embedding repacked for the
 * lm_head) finds the same rows; bad ids latch the bit and zero their rows. */
static void *blocked_copy(const void *w, size_t n, size_t k);
START_TEST(embedding_reads_row_major_and_blocked_tables) {
  test_rng r = test_rng_new(test_seed() + 3);
  enum { V = 12, H = 48 };
  ortep_dtype dt = _i ? ORTEP_DTYPE_BF16 : ORTEP_DTYPE_F16;
  float table[V * H], actual[V * H];
  fill(&r, table, V * H, 1.0f);
  void *t = as_dtype(table, V * H, dt, actual), *tb = blocked_copy(t, V, H);
  int32_t ids[6] = {3, 0, 11, 5, -1, 12};
  float out[2][6 * H];
  for (int b = 0; b < 2; b++) {
    memset(out[b], 0x7f, sizeof out[b]);
    tin ins[] = {{dt, b ? SHAPE(V / 4, H / 16, 4, 16) : SHAPE(V, H), b ? tb : t}, {ORTEP_DTYPE_I32, SHAPE(1, 6), ids}};
    ck_assert_ok(run_node("Embedding", ORTEP_DOMAIN_ORTEP, NULL, 0, ins, 2, (void *[]){out[b]}, 1));
    ck_assert_uint_eq(error_bits(), ORTEP_ERROR_GATHER_INDEX);
    ck_assert_ok(ortep_ep_reset_error_word(g_cpu));
    for (int n = 0; n < 6; n++)
      for (int j = 0; j < H; j++)
        ck_assert_msg(out[b][n * H + j] == (n < 4 ? actual[ids[n] * H + j] : 0.0f), "%s table, id %d [%d]: %g",
                      b ? "blocked" : "row-major", ids[n], j, out[b][n * H + j]);
  }
  float f[64] = {0};
  tin bad[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, 4, 16), f}, {ORTEP_DTYPE_I32, SHAPE(1), ids}};
  ck_assert_status(run_node("Embedding", ORTEP_DOMAIN_ORTEP, NULL, 0, bad, 2, (void *[]){out[0]}, 1),
                   ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(g_match.reason, "blocked bf16/f16 [V/4, H/16, 4, 16] or q8_0/q4_0 [V/16, H/32, 16, 32]"),
                "reason: %s", g_match.reason);
  free(t), free(tb);
}
END_TEST

START_TEST(matmul_and_gemm_match_the_reference) {
  test_rng r = test_rng_new(test_seed() + 2 + (uint64_t)_i);
  enum { M = 3, K = 17, N = 5 };
  float a[M * K], b[K * N], bact[K * N], c[N], out[M * N];
  double ab[M * N], abt[M * N], want[M * N];
  fill(&r, a, M * K, 1.0f);
  fill(&r, b, K * N, 0.5f);
  fill(&r, c, N, 1.0f);
  void *bw = as_dtype(b, K * N, wdt[_i], bact);
  /* the references: the same weight bytes read as B [K, N] and as B [N, K] */
  for (size_t i = 0; i < M; i++)
    for (size_t j = 0; j < N; j++) {
      double s = 0, st = 0;
      for (size_t t = 0; t < K; t++) {
        s += (double)a[i * K + t] * bact[t * N + j];
        st += (double)a[i * K + t] * bact[j * K + t];
      }
      ab[i * N + j] = s, abt[i * N + j] = st;
    }
  for (size_t m = 1; m <= M; m += 2) { /* M = 1 (gemv path) and M = 3 */
    ck_assert_ok(run_node("MatMul", "", NULL, 0,
                          (tin[]){{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), a}, {wdt[_i], SHAPE(K, N), bw}}, 2,
                          (void *[]){out}, 1));
    expect_close(out, ab, m * N, "MatMul");
    /* Gemm with transB=1, a bias, alpha and beta */
    tattr at[] = {{"transB", 0, 1, 0}, {"alpha", 1, 0, 0.5f}, {"beta", 1, 0, 2.0f}};
    ck_assert_ok(run_node(
        "Gemm", "", at, 3,
        (tin[]){{ORTEP_DTYPE_F32, SHAPE((int64_t)m, K), a}, {wdt[_i], SHAPE(N, K), bw}, {ORTEP_DTYPE_F32, SHAPE(N), c}},
        3, (void *[]){out}, 1));
    for (size_t i = 0; i < m * N; i++) want[i] = 0.5 * abt[i] + 2.0 * c[i % N];
    expect_close(out, want, m * N, "Gemm transB");
    /* FusedMatMul with transB=1 on a rank-3 A */
    ck_assert_ok(run_node("FusedMatMul", ORTEP_DOMAIN_MS, (tattr[]){{"transB", 0, 1, 0}}, 1,
                          (tin[]){{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), a}, {wdt[_i], SHAPE(N, K), bw}}, 2,
                          (void *[]){out}, 1));
    expect_close(out, abt, m * N, "FusedMatMul transB");
    /* Gemm without C and without transB */
    ck_assert_ok(run_node("Gemm", "", NULL, 0,
                          (tin[]){{ORTEP_DTYPE_F32, SHAPE((int64_t)m, K), a}, {wdt[_i], SHAPE(K, N), bw}}, 2,
                          (void *[]){out}, 1));
    expect_close(out, ab, m * N, "Gemm");
  }
  free(bw);
}
END_TEST

START_TEST(elementwise_ops_and_broadcasting) {
  test_rng r = test_rng_new(test_seed() + 3);
  enum { R = 3, C = 4 };
  float a[R * C], b[R * C], bias[C], one[1] = {2.5f}, out[R * C];
  double want[R * C];
  fill(&r, a, R * C, 3.0f);
  fill(&r, b, R * C, 3.0f);
  fill(&r, bias, C, 1.0f);
  ck_assert_ok(run_node("Add", "", NULL, 0,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}, {ORTEP_DTYPE_F32, SHAPE(R, C), b}}, 2,
                        (void *[]){out}, 1));
  for (int i = 0; i < R * C; i++) want[i] = (double)a[i] + b[i];
  expect_close(out, want, R * C, "Add");
  float bias_act[C];
  void *bias16 = as_dtype(bias, C, ORTEP_DTYPE_F16, bias_act);
  ck_assert_ok(run_node("Add", "", NULL, 0,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}, {ORTEP_DTYPE_F16, SHAPE(C), bias16}}, 2,
                        (void *[]){out}, 1));
  for (int i = 0; i < R * C; i++) want[i] = (double)a[i] + bias_act[i % C];
  expect_close(out, want, R * C, "Add bias f16");
  ck_assert_ok(run_node("Mul", "", NULL, 0,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}, {ORTEP_DTYPE_F32, SHAPE(1), one}}, 2,
                        (void *[]){out}, 1));
  for (int i = 0; i < R * C; i++) want[i] = (double)a[i] * 2.5;
  expect_close(out, want, R * C, "Mul scalar");
  ck_assert_ok(run_node("Sigmoid", "", NULL, 0, (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}}, 1, (void *[]){out}, 1));
  for (int i = 0; i < R * C; i++) want[i] = 1.0 / (1.0 + exp(-(double)a[i]));
  expect_close(out, want, R * C, "Sigmoid");
  ck_assert_ok(run_node("SiLUMul", ORTEP_DOMAIN_ORTEP, NULL, 0,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}, {ORTEP_DTYPE_F32, SHAPE(R, C), b}}, 2,
                        (void *[]){out}, 1));
  for (int i = 0; i < R * C; i++) want[i] = (double)a[i] / (1.0 + exp(-(double)a[i])) * b[i];
  expect_close(out, want, R * C, "SiLUMul");
  /* a shape that does not broadcast is refused with what is accepted */
  float bad[3] = {0};
  ck_assert_int_eq(
      run_node("Add", "", NULL, 0, (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, C), a}, {ORTEP_DTYPE_F32, SHAPE(3), bad}}, 2,
               (void *[]){out}, 1),
      ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(g_match.reason, "trailing dimensions"), "%s", g_match.reason);
  free(bias16);
}
END_TEST

START_TEST(rmsnorm_and_skip_rmsnorm) {
  test_rng r = test_rng_new(test_seed() + 4);
  enum { R = 2, H = 16 };
  float x[R * H], skip[R * H], scale[H], bias[H], out[R * H], sum[R * H], sact[H];
  double want[R * H], wsum[R * H];
  fill(&r, x, R * H, 2.0f);
  fill(&r, skip, R * H, 2.0f);
  fill(&r, scale, H, 1.0f);
  fill(&r, bias, H, 0.5f);
  void *sw = as_dtype(scale, H, ORTEP_DTYPE_BF16, sact);
  tattr eps[] = {{"epsilon", 1, 0, 1e-6f}};
  ck_assert_ok(run_node("SimplifiedLayerNormalization", "", eps, 1,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, H), x}, {ORTEP_DTYPE_BF16, SHAPE(H), sw}}, 2,
                        (void *[]){out}, 1));
  for (int rr = 0; rr < R; rr++) {
    double ss = 0;
    for (int j = 0; j < H; j++) ss += (double)x[rr * H + j] * x[rr * H + j];
    double inv = 1.0 / sqrt(ss / H + 1e-6);
    for (int j = 0; j < H; j++) want[rr * H + j] = x[rr * H + j] * inv * sact[j];
  }
  expect_close(out, want, R * H, "RMSNorm");
  ck_assert_ok(run_node("SkipSimplifiedLayerNormalization", ORTEP_DOMAIN_MS, eps, 1,
                        (tin[]){{ORTEP_DTYPE_F32, SHAPE(R, H), x},
                                {ORTEP_DTYPE_F32, SHAPE(R, H), skip},
                                {ORTEP_DTYPE_BF16, SHAPE(H), sw},
                                {ORTEP_DTYPE_F32, SHAPE(H), bias}},
                        4, (void *[]){out, NULL, NULL, sum}, 4));
  for (int rr = 0; rr < R; rr++) {
    double ss = 0;
    for (int j = 0; j < H; j++) {
      wsum[rr * H + j] = (double)x[rr * H + j] + skip[rr * H + j] + bias[j];
      ss += wsum[rr * H + j] * wsum[rr * H + j];
    }
    double inv = 1.0 / sqrt(ss / H + 1e-6);
    for (int j = 0; j < H; j++) want[rr * H + j] = wsum[rr * H + j] * inv * sact[j];
  }
  expect_close(out, want, R * H, "SkipRMSNorm");
  expect_close(sum, wsum, R * H, "SkipRMSNorm sum");
  free(sw);
}
END_TEST

static void rotary_ref(const float *x, const int64_t *pos, size_t tokens, size_t heads, size_t hd, size_t rd,
                       bool inter, const float *cosc, const float *sinc, double *y) {
  size_t half = rd / 2;
  for (size_t t = 0; t < tokens; t++)
    for (size_t h = 0; h < heads; h++) {
      const float *xh = x + (t * heads + h) * hd;
      double *yh = y + (t * heads + h) * hd;
      for (size_t i = 0; i < hd; i++) yh[i] = xh[i];
      for (size_t i = 0; i < half; i++) {
        double c = cosc[pos[t] * (int64_t)half + (int64_t)i], s = sinc[pos[t] * (int64_t)half + (int64_t)i];
        size_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;
        yh[i1] = xh[i1] * c - xh[i2] * s;
        yh[i2] = xh[i2] * c + xh[i1] * s;
      }
    }
}

START_TEST(rotary_embedding_both_layouts_and_bad_positions) {
  test_rng r = test_rng_new(test_seed() + 5);
  enum { T = 2, NH = 3, HD = 8, MAXP = 12 };
  size_t rd = _i == 2 ? 4 : HD; /* loop 2: partial rotary */
  bool inter = _i == 1;
  float x[T * NH * HD], cosc[MAXP * HD / 2], sinc[MAXP * HD / 2], out[T * NH * HD];
  double want[T * NH * HD];
  fill(&r, x, T * NH * HD, 1.0f);
  for (int p = 0; p < MAXP; p++)
    for (size_t i = 0; i < rd / 2; i++) {
      double th = p * pow(10000.0, -2.0 * (double)i / (double)rd);
      cosc[p * rd / 2 + i] = (float)cos(th), sinc[p * rd / 2 + i] = (float)sin(th);
    }
  int64_t pos[T] = {5, 11};
  tattr at[] = {{"num_heads", 0, NH, 0}, {"interleaved", 0, inter, 0}, {"rotary_embedding_dim", 0, (int64_t)rd, 0}};
  tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, T, NH * HD), x},
               {ORTEP_DTYPE_I64, SHAPE(1, T), pos},
               {ORTEP_DTYPE_F32, SHAPE(MAXP, (int64_t)rd / 2), cosc},
               {ORTEP_DTYPE_F32, SHAPE(MAXP, (int64_t)rd / 2), sinc}};
  ck_assert_ok(run_node("RotaryEmbedding", ORTEP_DOMAIN_MS, at, 3, ins, 4, (void *[]){out}, 1));
  rotary_ref(x, pos, T, NH, HD, rd, inter, cosc, sinc, want);
  expect_close(out, want, T * NH * HD, "RotaryEmbedding");
  ck_assert_uint_eq(error_bits(), 0);
  /* a position past the cache: its token passes unrotated, the bit is set */
  pos[1] = MAXP;
  ck_assert_ok(run_node("RotaryEmbedding", ORTEP_DOMAIN_MS, at, 3, ins, 4, (void *[]){out}, 1));
  ck_assert_uint_eq(error_bits(), ORTEP_ERROR_ROTARY_POSITION);
  for (int i = 0; i < NH * HD; i++) ck_assert_float_eq(out[NH * HD + i], x[NH * HD + i]);
  expect_close(out, want, NH * HD, "RotaryEmbedding token 0");
}
END_TEST

/* Heads of a long attention and rows of a big Linear run on the CPU EP's
 * workers: the outputs are bitwise the same for 1, 3 and 8 threads (the
 * attention's items then hold 4, 2 and 1 of the 4 query heads that share a
 * KV head: ortep__cpu_gqa_per_item). */
static ortep_ep *cpu_with_threads(const char *n) {
  ortep_ep *ep;
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cpu.threads", n));
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, c));
  ortep_config_destroy(c);
  ck_assert_uint_eq(ortep_cpu_ep_threads(ep), (size_t)atoi(n));
  return ep;
}
START_TEST(split_across_workers_bitwise_equal_to_one_thread) {
  enum { NH = 8, KV = 2, HD = 64, CAP = 512, N = 512, K = 256 };
  test_rng r = test_rng_new(test_seed() + 11);
  float *kc = malloc(KV * CAP * HD * sizeof *kc), *vc = malloc(KV * CAP * HD * sizeof *vc);
  float *w = malloc(N * K * sizeof *w), q[NH * HD], k[KV * HD], v[KV * HD], x[K];
  fill(&r, kc, KV * CAP * HD, 1.0f), fill(&r, vc, KV * CAP * HD, 1.0f), fill(&r, w, N * K, 0.1f);
  fill(&r, q, NH * HD, 1.0f), fill(&r, k, KV * HD, 1.0f), fill(&r, v, KV * HD, 1.0f), fill(&r, x, K, 1.0f);
  int32_t pos = 400; /* 8 heads x 401 positions: enough work to split */
  float att[3][NH * HD], lin[3][N];
  enum { R = 128, RH = 512 }; /* RMSNorm over 128 rows, RoPE over 128 tokens: split by rows */
  float *rx = malloc(R * RH * sizeof *rx), *rs = malloc(RH * sizeof *rs), *rn[3], *rr[3];
  float *cosc = malloc(512 * HD / 2 * sizeof *cosc), *sinc = malloc(512 * HD / 2 * sizeof *sinc);
  int64_t rpos[R];
  fill(&r, rx, R * RH, 1.0f), fill(&r, rs, RH, 1.0f), fill(&r, cosc, 512 * HD / 2, 1.0f),
      fill(&r, sinc, 512 * HD / 2, 1.0f);
  for (int i = 0; i < R; i++) rpos[i] = 3 * i;
  for (int t = 0; t < 3; t++) rn[t] = malloc(R * RH * sizeof(float)), rr[t] = malloc(R * RH * sizeof(float));
  ortep_ep *saved = g_cpu;
  const char *threads[] = {"1", "3", "8"};
  for (int t = 0; t < 3; t++) {
    g_cpu = cpu_with_threads(threads[t]);
    tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
    tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), q}, {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), k},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), v}, {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kc},
                 {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), vc},  {ORTEP_DTYPE_I32, SHAPE(1), &pos}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){att[t]}, 1));
    tin lins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, K), x}, {ORTEP_DTYPE_F32, SHAPE(N, K), w}};
    ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, lins, 2, (void *[]){lin[t]}, 1));
    tattr eps[] = {{"epsilon", 1, 0, 1e-5f}};
    tin nins[] = {{ORTEP_DTYPE_F32, SHAPE(1, R, RH), rx}, {ORTEP_DTYPE_F32, SHAPE(RH), rs}};
    ck_assert_ok(run_node("SimplifiedLayerNormalization", "", eps, 1, nins, 2, (void *[]){rn[t]}, 1));
    tattr rat[] = {{"num_heads", 0, RH / HD, 0}};
    tin rins[] = {{ORTEP_DTYPE_F32, SHAPE(1, R, RH), rx},
                  {ORTEP_DTYPE_I64, SHAPE(1, R), rpos},
                  {ORTEP_DTYPE_F32, SHAPE(512, HD / 2), cosc},
                  {ORTEP_DTYPE_F32, SHAPE(512, HD / 2), sinc}};
    ck_assert_ok(run_node("RotaryEmbedding", ORTEP_DOMAIN_MS, rat, 1, rins, 4, (void *[]){rr[t]}, 1));
    ck_assert_uint_eq(error_bits(), 0);
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  for (int t = 1; t < 3; t++) {
    ck_assert_msg(memcmp(rn[0], rn[t], R * RH * sizeof(float)) == 0, "RMSNorm differs between 1 and %s threads",
                  threads[t]);
    ck_assert_msg(memcmp(rr[0], rr[t], R * RH * sizeof(float)) == 0, "RoPE differs between 1 and %s threads",
                  threads[t]);
    ck_assert_msg(memcmp(att[0], att[t], sizeof att[0]) == 0, "attention differs between 1 and %s threads", threads[t]);
    ck_assert_msg(memcmp(lin[0], lin[t], sizeof lin[0]) == 0, "Linear differs between 1 and %s threads", threads[t]);
  }
  free(rx), free(rs), free(cosc), free(sinc);
  for (int t = 0; t < 3; t++) free(rn[t]), free(rr[t]);
  free(kc), free(vc), free(w);
}
END_TEST

/* The worker pool's schedule (pool.c): every item runs exactly once for any
 * item and thread count; the chunks a thread runs of its own share
 * [t n / T, (t + 1) n / T) follow one another from the share's start (one
 * run through memory); a thread whose share is done takes what is left of
 * a slow one's. Failures are recorded by the workers and asserted here. */
enum { POOL_MAX_THREADS = 5, POOL_MAX_ITEMS = 1001 };
typedef struct pool_log {
  size_t n, threads, slow; /* slow: a worker that waits in its first chunk until another takes from its share */
  _Atomic unsigned count[POOL_MAX_ITEMS];
  size_t next_own[POOL_MAX_THREADS];
  _Atomic size_t ran[POOL_MAX_THREADS], taken_from_slow;
  _Atomic bool out_of_range, own_gap, slow_waited_forever;
} pool_log;

static void pool_task(void *ctx, size_t worker, size_t begin, size_t end) {
  pool_log *l = ctx;
  if (worker >= l->threads || begin >= end || end > l->n) {
    atomic_store(&l->out_of_range, true);
    return;
  }
  size_t lo = l->n * worker / l->threads, hi = l->n * (worker + 1) / l->threads;
  if (begin >= lo && begin < hi) { /* its own share: from the front, each chunk after the last */
    if (begin != l->next_own[worker]) atomic_store(&l->own_gap, true);
    l->next_own[worker] = end;
  }
  size_t slo = l->n * l->slow / l->threads, shi = l->n * (l->slow + 1) / l->threads;
  if (l->slow && worker != l->slow && begin >= slo && end <= shi) atomic_fetch_add(&l->taken_from_slow, end - begin);
  for (size_t i = begin; i < end; i++) atomic_fetch_add(&l->count[i], 1);
  atomic_fetch_add(&l->ran[worker], end - begin);
  if (l->slow && worker == l->slow) { /* bounded: 10 s, far beyond any steal, then recorded as a failure */
    for (int i = 0; i < 100000 && !atomic_load(&l->taken_from_slow); i++)
      nanosleep(&(struct timespec){0, 100000}, NULL);
    if (!atomic_load(&l->taken_from_slow)) atomic_store(&l->slow_waited_forever, true);
  }
}

static void check_pool_log(pool_log *l, const char *what) {
  ck_assert_msg(!atomic_load(&l->out_of_range), "%s: a chunk outside [0, n) or a bad worker index", what);
  ck_assert_msg(!atomic_load(&l->own_gap), "%s: a thread's chunks of its own share do not follow one another", what);
  size_t sum = 0;
  for (size_t i = 0; i < l->n; i++)
    ck_assert_msg(atomic_load(&l->count[i]) == 1, "%s: item %zu ran %u times", what, i, atomic_load(&l->count[i]));
  for (size_t t = 0; t < l->threads; t++) sum += atomic_load(&l->ran[t]);
  ck_assert_uint_eq(sum, l->n);
}

START_TEST(pool_runs_every_item_once_in_runs_per_thread) {
  const size_t threads[] = {1, 2, 3, 5}, ns[] = {2, 3, 7, 100, 1001}, work[] = {1, 1000, 16384};
  for (size_t ti = 0; ti < 4; ti++) {
    ortep__cpu_pool *pool;
    ck_assert_ok(ortep__cpu_pool_create(threads[ti], &pool));
    for (size_t ni = 0; ni < 5; ni++)
      for (size_t wi = 0; wi < 3; wi++)
        for (int rep = 0; rep < 3; rep++) { /* the pool is reused: each job starts from fresh shares */
          pool_log *l = calloc(1, sizeof *l);
          l->n = ns[ni], l->threads = threads[ti];
          for (size_t t = 0; t < l->threads; t++) l->next_own[t] = l->n * t / l->threads;
          ortep__cpu_pool_for(pool, l->n, work[wi], pool_task, l);
          char what[96];
          snprintf(what, sizeof what, "%zu threads, %zu items of %zu", threads[ti], ns[ni], work[wi]);
          check_pool_log(l, what);
          free(l);
        }
    ortep__cpu_pool_destroy(pool);
  }
  /* worker 1 holds its first chunk until another thread has taken from
   * its share: the caller, done with its own, must take the rest */
  for (size_t threads2 = 2; threads2 <= 3; threads2++) {
    ortep__cpu_pool *pool;
    ck_assert_ok(ortep__cpu_pool_create(threads2, &pool));
    pool_log *l = calloc(1, sizeof *l);
    l->n = 1000, l->threads = threads2, l->slow = 1;
    for (size_t t = 0; t < l->threads; t++) l->next_own[t] = l->n * t / l->threads;
    ortep__cpu_pool_for(pool, l->n, 16384, pool_task, l); /* one item is a whole minimum chunk */
    check_pool_log(l, "a slow worker");
    ck_assert_msg(!atomic_load(&l->slow_waited_forever), "no thread took from the slow worker's share");
    ck_assert_uint_gt(atomic_load(&l->taken_from_slow), 0);
    free(l);
    ortep__cpu_pool_destroy(pool);
  }
}
END_TEST

START_TEST(group_query_attention_decode_steps_and_bad_slots) {
  test_rng r = test_rng_new(test_seed() + 6);
  enum { NH = 4, KV = 2, HD = 8, CAP = 6 };
  float kc[KV * CAP * HD] = {0}, vc[KV * CAP * HD] = {0};
  float kref[KV * CAP * HD] = {0}, vref[KV * CAP * HD] = {0};
  tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
  for (int32_t p = 0; p < CAP; p++) {
    float q[NH * HD], k[KV * HD], v[KV * HD], out[NH * HD];
    double want[NH * HD];
    fill(&r, q, NH * HD, 1.0f), fill(&r, k, KV * HD, 1.0f), fill(&r, v, KV * HD, 1.0f);
    tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), q}, {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), k},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), v}, {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kc},
                 {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), vc},  {ORTEP_DTYPE_I32, SHAPE(1), &p}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){out}, 1));
    for (int g = 0; g < KV; g++)
      for (int i = 0; i < HD; i++)
        kref[(p * KV + g) * HD + i] = k[g * HD + i], vref[(p * KV + g) * HD + i] = v[g * HD + i];
    for (int h = 0; h < NH; h++) {
      int g = h / (NH / KV);
      double sc[CAP], mx = -1e300, den = 0;
      for (int t = 0; t <= p; t++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * kref[(t * KV + g) * HD + i];
        sc[t] = d / sqrt((double)HD);
        mx = sc[t] > mx ? sc[t] : mx;
      }
      for (int t = 0; t <= p; t++) den += (sc[t] = exp(sc[t] - mx));
      for (int i = 0; i < HD; i++) {
        double s = 0;
        for (int t = 0; t <= p; t++) s += sc[t] / den * vref[(t * KV + g) * HD + i];
        want[h * HD + i] = s;
      }
    }
    expect_close(out, want, NH * HD, "GroupQueryAttention");
    ck_assert_mem_eq(kc, kref, sizeof kc); /* the new K/V landed at position p */
    ck_assert_mem_eq(vc, vref, sizeof vc);
  }
  ck_assert_uint_eq(error_bits(), 0);
  /* a slot outside the cache: bit set, output zeroed, caches untouched */
  float q[NH * HD], k[KV * HD], v[KV * HD], out[NH * HD];
  fill(&r, q, NH * HD, 1.0f), fill(&r, k, KV * HD, 1.0f), fill(&r, v, KV * HD, 1.0f);
  int32_t bad = CAP;
  tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), q}, {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), k},
               {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), v}, {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kc},
               {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), vc},  {ORTEP_DTYPE_I32, SHAPE(1), &bad}};
  memset(out, 0x7f, sizeof out);
  ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){out}, 1));
  ck_assert_uint_eq(error_bits(), ORTEP_ERROR_KV_SLOT);
  for (int i = 0; i < NH * HD; i++) ck_assert_float_eq(out[i], 0.0f);
  ck_assert_mem_eq(kc, kref, sizeof kc);
  bad = -1;
  ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){out}, 1));
  ck_assert_mem_eq(vc, vref, sizeof vc);
}
END_TEST

START_TEST(softmax_and_argmax) {
  float x[2 * 5] = {1, 3, 3, NAN, 0, -1, -2, 5, 5, 4}, out[10];
  int64_t idx[2];
  ck_assert_ok(run_node("ArgMax", "", (tattr[]){{"axis", 0, -1, 0}}, 1, (tin[]){{ORTEP_DTYPE_F32, SHAPE(2, 5), x}}, 1,
                        (void *[]){idx}, 1));
  ck_assert_int_eq(idx[0], 1); /* ties: first; NaN skipped */
  ck_assert_int_eq(idx[1], 2);
  float y[2 * 4] = {1, 2, 3, 4, -1, 0, 1, 100};
  double want[8];
  ck_assert_ok(run_node("Softmax", "", NULL, 0, (tin[]){{ORTEP_DTYPE_F32, SHAPE(2, 4), y}}, 1, (void *[]){out}, 1));
  for (int rr = 0; rr < 2; rr++) {
    double mx = -1e300, s = 0;
    for (int i = 0; i < 4; i++) mx = y[rr * 4 + i] > mx ? y[rr * 4 + i] : mx;
    for (int i = 0; i < 4; i++) s += exp(y[rr * 4 + i] - mx);
    for (int i = 0; i < 4; i++) want[rr * 4 + i] = exp(y[rr * 4 + i] - mx) / s;
  }
  expect_close(out, want, 8, "Softmax");
  /* rows of 8 and 11 (four lanes, and a tail): a NaN anywhere makes the row
   * NaN (the exponential keeps it), a row without one stays finite; large
   * and tiny values do not overflow */
  float z[2 * 11] = {0, 1, NAN, 2, 3, 4, 5, 6, -1, -1, -1, 90, -90, 0, 1, 2, 3, 4, 5, 6, 7, 8}, zo[22];
  ck_assert_ok(run_node("Softmax", "", NULL, 0, (tin[]){{ORTEP_DTYPE_F32, SHAPE(2, 11), z}}, 1, (void *[]){zo}, 1));
  for (int i = 0; i < 11; i++) ck_assert_msg(isnan(zo[i]), "softmax of a row with a NaN: %g at %d", zo[i], i);
  double zs = 0;
  for (int i = 11; i < 22; i++) zs += zo[i];
  ck_assert_msg(fabs(zs - 1.0) < 1e-6 && zo[11] > 0.999f, "softmax of a finite row sums to %g", zs);
  ck_assert_int_eq(run_node("Softmax", "", (tattr[]){{"axis", 0, 0, 0}}, 1, (tin[]){{ORTEP_DTYPE_F32, SHAPE(2, 4), y}},
                            1, (void *[]){out}, 1),
                   ORTEP_E_NOT_SUPPORTED);
  ck_assert_msg(strstr(g_match.reason, "only the last axis"), "%s", g_match.reason);
}
END_TEST

/* Every refusal names what the EP accepts. */
START_TEST(refusals_say_what_is_accepted) {
  float f[64] = {0};
  int32_t i32[4] = {0};
  struct {
    const char *op, *domain;
    tattr attr;
    size_t nattr;
    tin ins[6];
    size_t nin;
    const char *needle;
  } cases[] = {
      {"Relu", "", {0}, 0, {{ORTEP_DTYPE_F32, SHAPE(4), f}}, 1, "cpu_ep supports Gather, MatMul"},
      {"Gather",
       "",
       {"axis", 0, 1, 0},
       1,
       {{ORTEP_DTYPE_F32, SHAPE(2, 2), f}, {ORTEP_DTYPE_I32, SHAPE(1), i32}},
       2,
       "got axis 1 of a rank-2 input"},
      {"Gather",
       "",
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(2, 2), f}, {ORTEP_DTYPE_F32, SHAPE(1), f}},
       2,
       "indices must be i32 or i64"},
      {"MatMul",
       "",
       {0},
       0,
       {{ORTEP_DTYPE_I32, SHAPE(1, 2), i32}, {ORTEP_DTYPE_F32, SHAPE(2, 2), f}},
       2,
       "insert a Cast to f32"},
      {"MatMul",
       "",
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 3), f}, {ORTEP_DTYPE_F32, SHAPE(2, 2), f}},
       2,
       "differs from B's first"},
      {"MatMul", "", {0}, 0, {{ORTEP_DTYPE_F32, SHAPE(-1, 2), f}, {ORTEP_DTYPE_F32, SHAPE(2, 2), f}}, 2, "not static"},
      {"Gemm",
       "",
       {"transA", 0, 1, 0},
       1,
       {{ORTEP_DTYPE_F32, SHAPE(2, 2), f}, {ORTEP_DTYPE_F32, SHAPE(2, 2), f}},
       2,
       "transA=1"},
      {"RotaryEmbedding",
       ORTEP_DOMAIN_MS,
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 1, 8), f},
        {ORTEP_DTYPE_I64, SHAPE(1, 1), f},
        {ORTEP_DTYPE_F32, SHAPE(4, 4), f},
        {ORTEP_DTYPE_F32, SHAPE(4, 4), f}},
       4,
       "num_heads attribute"},
      {"GroupQueryAttention",
       ORTEP_DOMAIN_MS,
       {"num_heads", 0, 2, 0},
       1,
       {{ORTEP_DTYPE_F32, SHAPE(1, 1, 8), f},
        {ORTEP_DTYPE_F32, SHAPE(1, 1, 8), f},
        {ORTEP_DTYPE_F32, SHAPE(1, 1, 8), f},
        {ORTEP_DTYPE_F32, SHAPE(2, 4, 4), f},
        {ORTEP_DTYPE_F32, SHAPE(2, 4, 4), f},
        {ORTEP_DTYPE_I32, SHAPE(1), i32}},
       6,
       "kv_num_heads"},
      {"SimplifiedLayerNormalization",
       "",
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(2, 4), f}, {ORTEP_DTYPE_F32, SHAPE(3), f}},
       2,
       "with 4 elements"},
      {"ArgMax", "", {"select_last_index", 0, 1, 0}, 1, {{ORTEP_DTYPE_F32, SHAPE(4), f}}, 1, "first maximum wins"},
      /* blocked weights: 16-bit [N/4, K/16, 4, 16] only, all of a node's in one layout */
      {"Linear",
       ORTEP_DOMAIN_ORTEP,
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 16), f}, {ORTEP_DTYPE_F32, SHAPE(1, 1, 4, 16), f}},
       2,
       "a blocked weight 0 must be bf16/f16 [N/4, 1, 4, 16] or q8_0/q4_0 [N/16, 0, 16, 32] (K = 16); got f32"},
      {"Linear",
       ORTEP_DOMAIN_ORTEP,
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 16), f}, {ORTEP_DTYPE_BF16, SHAPE(1, 1, 8, 16), f}},
       2,
       "got bf16 of shape [1, 1, 8, 16]"},
      {"Linear",
       ORTEP_DOMAIN_ORTEP,
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 32), f}, {ORTEP_DTYPE_F16, SHAPE(1, 1, 4, 16), f}},
       2,
       "[N/4, 2, 4, 16] or q8_0/q4_0 [N/16, 1, 16, 32] (K = 32)"},
      {"Linear",
       ORTEP_DOMAIN_ORTEP,
       {0},
       0,
       {{ORTEP_DTYPE_F32, SHAPE(1, 16), f},
        {ORTEP_DTYPE_BF16, SHAPE(1, 1, 4, 16), f},
        {ORTEP_DTYPE_F32, SHAPE(0), NULL},
        {ORTEP_DTYPE_BF16, SHAPE(4, 16), f}},
       4,
       "weight 1 is [N, K] but weight 0 is blocked; a node's weights must share one layout"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float out[64];
    ortep_status st = run_node(cases[c].op, cases[c].domain, &cases[c].attr, cases[c].nattr, cases[c].ins, cases[c].nin,
                               (void *[]){out}, 1);
    ck_assert_msg(st == ORTEP_E_NOT_SUPPORTED, "case %zu (%s) was accepted", c, cases[c].op);
    ck_assert_msg(strstr(g_match.reason, "cpu_ep cannot run") && strstr(g_match.reason, cases[c].needle),
                  "case %zu: reason '%s' lacks '%s'", c, g_match.reason, cases[c].needle);
  }
}
END_TEST

/* Prefill: ortep:Linear over M = 5 rows goes through blocked sgemm; every
 * row matches the one-row (decode) path within float rounding, for each
 * weight dtype, with q/k/v groups and biases, gate_up, and the residual; and
 * the blocks split over 3 workers give the bits of 1 thread. */
START_TEST(linear_over_many_rows_matches_row_by_row) {
  enum { M = 5, K = 40, N0 = 130, N1 = 24 }; /* N0 spans three blocks of 64, the last partial */
  test_rng r = test_rng_new(test_seed() + 21);
  ortep_dtype dt = wdt[_i];
  float x[M * K], w0f[N0 * K], w1f[N0 * K], w1s[N1 * K], b0f[N0], b1f[N1], res[M * N0], a0[N0 * K], a1[N0 * K],
      a2[N1 * K], ab0[N0], ab1[N1];
  fill(&r, x, M * K, 1.0f), fill(&r, w0f, N0 * K, 0.2f), fill(&r, w1f, N0 * K, 0.2f), fill(&r, w1s, N1 * K, 0.2f);
  fill(&r, b0f, N0, 0.5f), fill(&r, b1f, N1, 0.5f), fill(&r, res, M * N0, 1.0f);
  void *w0 = as_dtype(w0f, N0 * K, dt, a0), *w1 = as_dtype(w1f, N0 * K, dt, a1), *w2 = as_dtype(w1s, N1 * K, dt, a2);
  void *b0 = as_dtype(b0f, N0, dt, ab0), *b1 = as_dtype(b1f, N1, dt, ab1);
  static float many[3][2][M * N0], one[3][2][M * N0];
  tattr gu[] = {{"gate_up", 0, 1, 0}};
  for (int rows = 0; rows < 2; rows++) {
    size_t m = rows ? M : 1, reps = rows ? 1 : M;
    for (size_t i = 0; i < reps; i++) {
      const float *xr = x + i * K;
      /* two groups with biases */
      tin g2[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, SHAPE(N0, K), w0},
                  {dt, SHAPE(N0), b0},
                  {dt, SHAPE(N1, K), w2},
                  {dt, SHAPE(N1), b1}};
      float *o0 = (rows ? many : one)[0][0] + i * N0, *o1 = (rows ? many : one)[0][1] + i * N1;
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, g2, 5, (void *[]){o0, o1}, 2));
      /* gate_up */
      tin gi[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, SHAPE(N0, K), w0},
                  {dt, SHAPE(N0), b0},
                  {dt, SHAPE(N0, K), w1},
                  {dt, SHAPE(N0), b0}};
      ck_assert_ok(
          run_node("Linear", ORTEP_DOMAIN_ORTEP, gu, 1, gi, 5, (void *[]){(rows ? many : one)[1][0] + i * N0}, 1));
      /* one group with the residual */
      tin gr[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, SHAPE(N0, K), w0},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, N0), res + i * N0}};
      ck_assert_ok(
          run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, gr, 8, (void *[]){(rows ? many : one)[2][0] + i * N0}, 1));
    }
  }
  ck_assert_uint_eq(error_bits(), 0);
  size_t counts[3][2] = {{M * N0, M * N1}, {M * N0, 0}, {M * N0, 0}};
  for (int c = 0; c < 3; c++)
    for (int o = 0; o < 2; o++)
      for (size_t i = 0; i < counts[c][o]; i++)
        ck_assert_msg(fabsf(many[c][o][i] - one[c][o][i]) <= 1e-5f * (1.0f + fabsf(one[c][o][i])),
                      "case %d output %d [%zu]: %d rows %.8g, row by row %.8g", c, o, i, M, many[c][o][i],
                      one[c][o][i]);
  /* the sgemm blocks over 3 workers (150 rows: blocks of 64, 64 and 22 rows; 300 columns: 128, 128, 44): the
   * bits of one thread, and the product within rounding */
  enum { MB = 150, KB = 256, NB = 300 };
  float *xb = malloc(MB * KB * sizeof *xb), *wf = malloc(NB * KB * sizeof *wf), *act = malloc(NB * KB * sizeof *act);
  float *yb[2] = {malloc(MB * NB * sizeof(float)), malloc(MB * NB * sizeof(float))};
  float *yres = malloc(MB * NB * sizeof(float));
  fill(&r, xb, MB * KB, 1.0f), fill(&r, wf, NB * KB, 0.1f);
  void *wb = as_dtype(wf, NB * KB, dt, act);
  ortep_ep *saved = g_cpu;
  const char *threads[] = {"1", "3"};
  for (int t = 0; t < 2; t++) {
    g_cpu = cpu_with_threads(threads[t]);
    tin lins[] = {{ORTEP_DTYPE_F32, SHAPE(1, MB, KB), xb}, {dt, SHAPE(NB, KB), wb}};
    ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, lins, 2, (void *[]){yb[t]}, 1));
    /* with the residual added: the rows of later row blocks take their own residual rows */
    tin rins[] = {{ORTEP_DTYPE_F32, SHAPE(1, MB, KB), xb},
                  {dt, SHAPE(NB, KB), wb},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {ORTEP_DTYPE_F32, SHAPE(1, MB, NB), yb[0]}};
    if (t == 1) ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, rins, 8, (void *[]){yres}, 1));
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  ck_assert_msg(memcmp(yb[0], yb[1], MB * NB * sizeof(float)) == 0,
                "Linear over %d rows differs between 1 and 3 threads", MB);
  for (int i = 0; i < MB; i += 7)
    for (int j = 0; j < NB; j += 5) {
      double want = 0;
      for (int t = 0; t < KB; t++) want += (double)xb[i * KB + t] * act[j * KB + t];
      ck_assert_msg(fabs(yb[0][i * NB + j] - want) <= TOL(want), "Linear over %d rows [%d, %d]: %.7g, want %.7g", MB, i,
                    j, yb[0][i * NB + j], want);
      ck_assert_msg(fabs(yres[i * NB + j] - 2 * want) <= 2 * TOL(want), "Linear + residual [%d, %d]: %.7g, want %.7g",
                    i, j, yres[i * NB + j], 2 * want);
    }
  free(yres);
  free(xb), free(wf), free(act), free(wb), free(yb[0]), free(yb[1]);
  free(w0), free(w1), free(w2), free(b0), free(b1);
}
END_TEST

/* Prefill over q8_0 / q4_0 blocked weights: ortep:Linear over M = 11 rows
 * (quantized in the pool's shared area, up to four at a time against each
 * tile) gives every row bitwise what that row alone (decode) gives, for two
 * groups with biases, gate_up and the residual; 9 blocks a row (a run of 8
 * and one more), 9 tiles (two runs of 4 and one); 1 and 3 threads. */
START_TEST(quantized_rows_are_each_row_alone) {
  enum { M = 11, K = 288, N0 = 144, N1 = 32 };
  ortep_dtype dt = _i ? ORTEP_DTYPE_Q4_0 : ORTEP_DTYPE_Q8_0;
  test_rng r = test_rng_new(test_seed() + 41);
  static float x[M * K], wf[3][N0 * K], b0[N0], b1[N1], res[M * N0];
  fill(&r, x, M * K, 2.0f), fill(&r, b0, N0, 0.5f), fill(&r, b1, N1, 0.5f), fill(&r, res, M * N0, 1.0f);
  for (int i = 0; i < 3; i++) fill(&r, wf[i], N0 * K, 0.1f);
  for (size_t i = 0; i < K; i++) x[3 * K + i] = 0.0f; /* a row of zeros: every block's d = 0 */
  size_t row = (K / 32) * ortep_dtype_size(dt);
  void *wq[3];
  for (int i = 0; i < 3; i++) {
    size_t n = i == 2 ? N1 : N0;
    void *flat = malloc(n * row);
    wq[i] = malloc(n * row);
    ck_assert_ok(ortep_quantize(dt, wf[i], n * K, flat));
    ortep__cpu_quant_block(dt, flat, n, K, wq[i]);
    free(flat);
  }
  ortep_shape s0 = SHAPE(N0 / 16, K / 32, 16, 32), s2 = SHAPE(N1 / 16, K / 32, 16, 32);
  tattr gu[] = {{"gate_up", 0, 1, 0}};
  static float out[3][3][2][M * N0]; /* [alone, 1 thread, 3 threads][case][output] */
  ortep_ep *saved = g_cpu;
  for (int way = 0; way < 3; way++) {
    g_cpu = cpu_with_threads(way == 2 ? "3" : "1");
    size_t m = way ? M : 1, reps = way ? 1 : M;
    for (size_t i = 0; i < reps; i++) {
      const float *xr = x + i * K;
      tin g2[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, s0, wq[0]},
                  {ORTEP_DTYPE_F32, SHAPE(N0), b0},
                  {dt, s2, wq[2]},
                  {ORTEP_DTYPE_F32, SHAPE(N1), b1}};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, g2, 5,
                            (void *[]){out[way][0][0] + i * N0, out[way][0][1] + i * N1}, 2));
      tin gi[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, s0, wq[0]},
                  {ORTEP_DTYPE_F32, SHAPE(N0), b0},
                  {dt, s0, wq[1]},
                  {ORTEP_DTYPE_F32, SHAPE(N0), b0}};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, gu, 1, gi, 5, (void *[]){out[way][1][0] + i * N0}, 1));
      tin gr[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, K), xr},
                  {dt, s0, wq[0]},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {ORTEP_DTYPE_F32, SHAPE(1, (int64_t)m, N0), res + i * N0}};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, gr, 8, (void *[]){out[way][2][0] + i * N0}, 1));
    }
    ck_assert_uint_eq(error_bits(), 0);
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  size_t counts[3][2] = {{M * N0, M * N1}, {M * N0, 0}, {M * N0, 0}};
  for (int way = 1; way < 3; way++)
    for (int c = 0; c < 3; c++)
      for (int o = 0; o < 2; o++)
        for (size_t i = 0; i < counts[c][o]; i++)
          ck_assert_msg(memcmp(&out[way][c][o][i], &out[0][c][o][i], sizeof(float)) == 0,
                        "%s case %d output %d [%zu] (%s threads): %d rows %.9g, the row alone %.9g",
                        ortep_dtype_name(dt), c, o, i, way == 2 ? "3" : "1", M, out[way][c][o][i], out[0][c][o][i]);
  /* and near the products themselves: a zero row gives the biases */
  for (size_t j = 0; j < N0; j++) ck_assert_float_eq(out[1][0][0][3 * N0 + j], b0[j]);
  for (int i = 0; i < 3; i++) free(wq[i]);
}
END_TEST

/* Weights in the blocked layout ([N/4, K/16, 4, 16], llm/model.c's
 * repacking) give the Linear of the row-major weights they came from: over
 * several rows (prefill: the rows gathered back out of their blocks for
 * sgemm) bitwise; over one row (decode: four rows at a time, in another
 * order) within float rounding of the reference, and bitwise with the
 * portable loops, which keep the row-major order; for 1 and 3 threads
 * bitwise the same. With two groups and biases, gate_up, and the residual. */
static void *blocked_copy(const void *w, size_t n, size_t k) {
  const uint16_t *src = w;
  uint16_t *dst = malloc(n * k * sizeof *dst);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) dst[(i / 4) * 4 * k + (j / 16) * 64 + (i % 4) * 16 + j % 16] = src[i * k + j];
  return dst;
}
START_TEST(linear_over_blocked_weights_matches_row_major) {
  enum { M = 11, K = 48, N0 = 132, N1 = 24 }; /* 11 rows: a group of ORTEP_BF16_ROWS and a rest */
  ortep_dtype dt = _i ? ORTEP_DTYPE_BF16 : ORTEP_DTYPE_F16;
  test_rng r = test_rng_new(test_seed() + 31);
  float x[M * K], w0f[N0 * K], w1f[N0 * K], w2f[N1 * K], b0f[N0], b1f[N1], res[M * N0], a0[N0 * K], a1[N0 * K],
      a2[N1 * K], ab0[N0], ab1[N1];
  fill(&r, x, M * K, 1.0f), fill(&r, w0f, N0 * K, 0.2f), fill(&r, w1f, N0 * K, 0.2f), fill(&r, w2f, N1 * K, 0.2f);
  fill(&r, b0f, N0, 0.5f), fill(&r, b1f, N1, 0.5f), fill(&r, res, M * N0, 1.0f);
  void *w[3] = {as_dtype(w0f, N0 * K, dt, a0), as_dtype(w1f, N0 * K, dt, a1), as_dtype(w2f, N1 * K, dt, a2)};
  void *b0 = as_dtype(b0f, N0, dt, ab0), *b1 = as_dtype(b1f, N1, dt, ab1);
  void *wb[3] = {blocked_copy(w[0], N0, K), blocked_copy(w[1], N0, K), blocked_copy(w[2], N1, K)};
  bool portable = !strcmp(ortep_cpu_ep_simd(g_cpu), "portable");
  tattr gu[] = {{"gate_up", 0, 1, 0}};
  static float out[2][3][2][M * N0]; /* [row-major, blocked][case][output] */
  for (int rows = 0; rows < 2; rows++) {
    int64_t m = rows ? M : 1;
    memset(out, 0, sizeof out);
    for (int lay = 0; lay < 2; lay++) {
      void *const *ws = lay ? wb : w;
      ortep_shape s0 = lay ? SHAPE(N0 / 4, K / 16, 4, 16) : SHAPE(N0, K),
                  s2 = lay ? SHAPE(N1 / 4, K / 16, 4, 16) : SHAPE(N1, K);
      tin g2[] = {{ORTEP_DTYPE_F32, SHAPE(1, m, K), x},
                  {dt, s0, ws[0]},
                  {dt, SHAPE(N0), b0},
                  {dt, s2, ws[2]},
                  {dt, SHAPE(N1), b1}};
      void *o2[] = {out[lay][0][0], out[lay][0][1]};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, g2, 5, o2, 2));
      tin gi[] = {{ORTEP_DTYPE_F32, SHAPE(1, m, K), x},
                  {dt, s0, ws[0]},
                  {dt, SHAPE(N0), b0},
                  {dt, s0, ws[1]},
                  {dt, SHAPE(N0), b0}};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, gu, 1, gi, 5, (void *[]){out[lay][1][0]}, 1));
      tin gr[] = {{ORTEP_DTYPE_F32, SHAPE(1, m, K), x},
                  {dt, s0, ws[0]},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {dt, SHAPE(0), NULL},
                  {ORTEP_DTYPE_F32, SHAPE(1, m, N0), res}};
      ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, gr, 8, (void *[]){out[lay][2][0]}, 1));
    }
    if (rows && dt == ORTEP_DTYPE_BF16 && ortep_cpu_ep_bf16_products(g_cpu)) {
      /* AVX512-BF16: x rounded to bf16 (nearest even), the products exact, f32 sums */
      for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N0; j++) {
          double g = ab0[j], u = ab0[j], v = ab1[j % N1];
          for (size_t t = 0; t < K; t++) {
            double xt = ortep_bf16_to_f32(ortep_f32_to_bf16(x[i * K + t]));
            g += xt * a0[j * K + t], u += xt * a1[j * K + t];
            if (j < N1) v += xt * a2[j * K + t];
          }
          double want[4] = {g, v, g / (1.0 + exp(-g)) * u, g - ab0[j] + res[i * N0 + j]};
          float got[4] = {out[1][0][0][i * N0 + j], out[1][0][1][i * N1 + j % N1], out[1][1][0][i * N0 + j],
                          out[1][2][0][i * N0 + j]};
          for (int c = 0; c < 4; c++)
            if (c != 1 || j < N1)
              ck_assert_msg(fabs(got[c] - want[c]) <= TOL(want[c]), "bf16 rows case %d [%zu, %zu]: %.7g, want %.7g", c,
                            i, j, got[c], want[c]);
        }
      continue;
    }
    if (rows || portable) {
      ck_assert_msg(memcmp(out[0], out[1], sizeof out[0]) == 0,
                    "blocked weights over %lld rows (%s) differ from "
                    "row-major ones",
                    (long long)m, ortep_cpu_ep_simd(g_cpu));
      continue;
    }
    for (size_t j = 0; j < N0; j++) {
      double g = ab0[j], u = ab0[j], v = ab1[j % N1];
      for (size_t t = 0; t < K; t++) g += (double)x[t] * a0[j * K + t], u += (double)x[t] * a1[j * K + t];
      for (size_t t = 0; j < N1 && t < K; t++) v += (double)x[t] * a2[j * K + t];
      double lin = g - ab0[j], want[4] = {g, v, g / (1.0 + exp(-g)) * u, lin + res[j]};
      float got[4] = {out[1][0][0][j], out[1][0][1][j], out[1][1][0][j], out[1][2][0][j]};
      for (int c = 0; c < 4; c++)
        if (c != 1 || j < N1)
          ck_assert_msg(fabs(got[c] - want[c]) <= TOL(want[c]), "blocked case %d [%zu]: %.7g, want %.7g", c, j, got[c],
                        want[c]);
    }
  }
  ck_assert_uint_eq(error_bits(), 0);
  /* one row over 1 and 3 workers */
  enum { NB = 1024, KB = 256 };
  float *xb = malloc(KB * sizeof *xb), *wf = malloc(NB * KB * sizeof *wf), *act = malloc(NB * KB * sizeof *act);
  float *yb[2] = {malloc(NB * sizeof(float)), malloc(NB * sizeof(float))};
  fill(&r, xb, KB, 1.0f), fill(&r, wf, NB * KB, 0.1f);
  void *wrow = as_dtype(wf, NB * KB, dt, act), *wblk = blocked_copy(wrow, NB, KB);
  ortep_ep *saved = g_cpu;
  const char *threads[] = {"1", "3"};
  for (int t = 0; t < 2; t++) {
    g_cpu = cpu_with_threads(threads[t]);
    tin lins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, KB), xb}, {dt, SHAPE(NB / 4, KB / 16, 4, 16), wblk}};
    ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, NULL, 0, lins, 2, (void *[]){yb[t]}, 1));
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  ck_assert_msg(memcmp(yb[0], yb[1], NB * sizeof(float)) == 0, "blocked Linear differs between 1 and 3 threads");
  for (int j = 0; j < NB; j += 3) {
    double want = 0;
    for (int t = 0; t < KB; t++) want += (double)xb[t] * act[j * KB + t];
    ck_assert_msg(fabs(yb[0][j] - want) <= TOL(want), "blocked Linear [%d]: %.7g, want %.7g", j, yb[0][j], want);
  }
  free(xb), free(wf), free(act), free(yb[0]), free(yb[1]), free(wrow), free(wblk);
  for (int i = 0; i < 3; i++) free(w[i]), free(wb[i]);
  free(b0), free(b1);
}
END_TEST

/* Many rows over blocked 16-bit weights (the batch's and the chunk's
 * products, simd_rows.h). exact_rows=1: each of 13 rows (two groups of the
 * row kernels and a rest) bitwise what that row alone (M = 1) gives, in
 * every case (two groups, gate_up, a residual), for 1 and 3 threads. A
 * chunk (no exact_rows): bitwise the same for 1 and 3 threads, and with
 * bf16 products its rows 4-6 are bitwise those rows as a chunk of 3 (a row
 * depends on that row alone). _i: f16, bf16. */
enum { RM = 13, RK = 256, RN = 128 }; /* big enough to split over 3 workers */
/* Linear over rows [r0, r0 + m) of x: case c; y0 (and y1 for c 0) [m, RN] */
static void rows_linear(ortep_dtype dt, const float *x, const float *res, size_t r0, int64_t m, int c, bool exact,
                        const void *w0, const void *w1, float *y0, float *y1) {
  ortep_shape ws = SHAPE(RN / 4, RK / 16, 4, 16);
  tin in[8] = {{ORTEP_DTYPE_F32, SHAPE(1, m, RK), x + r0 * RK},
               {dt, ws, w0},
               {dt, SHAPE(0), NULL},
               {dt, c == 2 ? SHAPE(0) : ws, c == 2 ? NULL : w1},
               {dt, SHAPE(0), NULL},
               {dt, SHAPE(0), NULL},
               {dt, SHAPE(0), NULL},
               {ORTEP_DTYPE_F32, SHAPE(1, m, RN), res + r0 * RN}};
  tattr at[2];
  size_t na = 0;
  if (exact) at[na++] = (tattr){"exact_rows", 0, 1, 0};
  if (c == 1) at[na++] = (tattr){"gate_up", 0, 1, 0};
  void *outs[2] = {y0, y1};
  ck_assert_ok(run_node("Linear", ORTEP_DOMAIN_ORTEP, na ? at : NULL, na, in, c == 2 ? 8 : 5, outs, c == 0 ? 2 : 1));
}
START_TEST(rows_over_blocked_weights_are_independent_of_their_neighbours) {
  ortep_dtype dt = _i ? ORTEP_DTYPE_BF16 : ORTEP_DTYPE_F16;
  test_rng r = test_rng_new(test_seed() + 57 + (uint64_t)_i);
  static float x[RM * RK], w0f[RN * RK], w1f[RN * RK], res[RM * RN], a0[RN * RK], a1[RN * RK];
  fill(&r, x, RM * RK, 1.0f), fill(&r, w0f, RN * RK, 0.2f), fill(&r, w1f, RN * RK, 0.2f), fill(&r, res, RM * RN, 1.0f);
  void *r0 = as_dtype(w0f, RN * RK, dt, a0), *r1 = as_dtype(w1f, RN * RK, dt, a1);
  void *b0 = blocked_copy(r0, RN, RK), *b1 = blocked_copy(r1, RN, RK);
  static float together[2][3][2][RM * RN], alone[3][2][RM * RN], chunk[2][3][2][RM * RN], part[2][3 * RN];
  ortep_ep *saved = g_cpu;
  const char *threads[] = {"1", "3"};
  for (int t = 0; t < 2; t++) {
    g_cpu = cpu_with_threads(threads[t]);
    bool bf16 = dt == ORTEP_DTYPE_BF16 && ortep_cpu_ep_bf16_products(g_cpu);
    for (int c = 0; c < 3; c++) {
      rows_linear(dt, x, res, 0, RM, c, true, b0, b1, together[t][c][0], together[t][c][1]);
      for (size_t row = 0; row < RM; row++)
        rows_linear(dt, x, res, row, 1, c, true, b0, b1, alone[c][0] + row * RN, alone[c][1] + row * RN);
      ck_assert_msg(memcmp(together[t][c], alone[c], sizeof alone[c]) == 0,
                    "case %d, %s threads: rows computed together differ from each row alone", c, threads[t]);
      rows_linear(dt, x, res, 0, RM, c, false, b0, b1, chunk[t][c][0], chunk[t][c][1]);
      if (bf16) {
        rows_linear(dt, x, res, 4, 3, c, false, b0, b1, part[0], part[1]);
        ck_assert_msg(memcmp(chunk[t][c][0] + 4 * RN, part[0], sizeof part[0]) == 0 &&
                          (c || memcmp(chunk[t][c][1] + 4 * RN, part[1], sizeof part[1]) == 0),
                      "case %d: rows 4-6 of a chunk of 13 differ from the same rows as a chunk of 3", c);
      }
    }
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  ck_assert_msg(memcmp(chunk[0], chunk[1], sizeof chunk[0]) == 0, "a chunk differs between 1 and 3 threads");
  ck_assert_uint_eq(error_bits(), 0);
  free(r0), free(r1), free(b0), free(b1);
}
END_TEST

/* Prefill: attention over a chunk of T tokens at consecutive positions
 * (two sgemms per head) writes their K/V and gives what T one-token steps
 * give within float rounding (token t sees positions 0..p+t only: causal);
 * the heads split over 3 workers give the bits of one thread; a chunk
 * reaching past the cache (the per-token path) latches KV_SLOT and zeroes
 * just the rows that do not fit. */
/* 16-bit KV caches (f16, bf16): the new K/V are stored rounded, and
 * attention is the double-precision attention over the rounded values, both
 * token by token and over a chunk (whose widened rows give the same within
 * float rounding); 1 and 3 threads agree bitwise. */
START_TEST(group_query_attention_over_16_bit_caches) {
  ortep_dtype dt = _i ? ORTEP_DTYPE_BF16 : ORTEP_DTYPE_F16;
  enum { NH = 4, KV = 2, HD = 8, CAP = 24, P = 12, T = 6 };
  test_rng r = test_rng_new(test_seed() + 40 + (uint64_t)_i);
  uint16_t kc[2][CAP * KV * HD] = {{0}}, vc[2][CAP * KV * HD] = {{0}};
  float kr[CAP * KV * HD] = {0}, vr[CAP * KV * HD] = {0}; /* the rounded values, position-major */
  tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
  float q[T * NH * HD], k[T * KV * HD], v[T * KV * HD], out[T * NH * HD], chunk[T * NH * HD];
  for (int32_t p = 0; p < P + T; p++) { /* token by token into cache 0 */
    float *qt = q + (p >= P ? (p - P) : 0) * NH * HD, *kt = k + (p >= P ? (p - P) : 0) * KV * HD;
    float *vt = v + (p >= P ? (p - P) : 0) * KV * HD, o[NH * HD];
    fill(&r, qt, NH * HD, 1.0f), fill(&r, kt, KV * HD, 1.0f), fill(&r, vt, KV * HD, 1.0f);
    tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), qt},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), kt},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), vt},
                 {dt, SHAPE(CAP, KV, HD), kc[0]},
                 {dt, SHAPE(CAP, KV, HD), vc[0]},
                 {ORTEP_DTYPE_I32, SHAPE(1), &p}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){o}, 1));
    free(as_dtype(kt, KV * HD, dt, kr + p * KV * HD)), free(as_dtype(vt, KV * HD, dt, vr + p * KV * HD));
    for (int i = 0; i < KV * HD; i++) { /* stored as the format rounds */
      float back =
          dt == ORTEP_DTYPE_F16 ? ortep_f16_to_f32(kc[0][p * KV * HD + i]) : ortep_bf16_to_f32(kc[0][p * KV * HD + i]);
      ck_assert_float_eq(back, kr[p * KV * HD + i]);
    }
    double want[NH * HD];
    for (int h = 0; h < NH; h++) {
      int g = h / (NH / KV);
      double sc[CAP], mx = -1e300, den = 0;
      for (int t = 0; t <= p; t++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)qt[h * HD + i] * kr[(t * KV + g) * HD + i];
        sc[t] = d / sqrt((double)HD);
        mx = sc[t] > mx ? sc[t] : mx;
      }
      for (int t = 0; t <= p; t++) den += (sc[t] = exp(sc[t] - mx));
      for (int i = 0; i < HD; i++) {
        double sum = 0;
        for (int t = 0; t <= p; t++) sum += sc[t] / den * vr[(t * KV + g) * HD + i];
        want[h * HD + i] = sum;
      }
    }
    expect_close(o, want, NH * HD, "GroupQueryAttention over 16-bit caches");
    if (p >= P) memcpy(out + (p - P) * NH * HD, o, sizeof o);
    if (p == P - 1) memcpy(kc[1], kc[0], sizeof kc[0]), memcpy(vc[1], vc[0], sizeof vc[0]);
  }
  /* the last T tokens as one chunk into cache 1 (which holds the first P) */
  int32_t pos[T];
  for (int t = 0; t < T; t++) pos[t] = P + t;
  const char *threads[] = {"1", "3"};
  ortep_ep *saved = g_cpu;
  for (int th = 0; th < 2; th++) {
    g_cpu = cpu_with_threads(threads[th]);
    uint16_t k1[CAP * KV * HD], v1[CAP * KV * HD];
    memcpy(k1, kc[1], sizeof k1), memcpy(v1, vc[1], sizeof v1);
    tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, T, NH * HD), q},
                 {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), k},
                 {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), v},
                 {dt, SHAPE(CAP, KV, HD), k1},
                 {dt, SHAPE(CAP, KV, HD), v1},
                 {ORTEP_DTYPE_I32, SHAPE(1, T), pos}};
    float c[T * NH * HD];
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){c}, 1));
    ck_assert_mem_eq(k1, kc[0], sizeof k1); /* the chunk stored what the steps stored */
    ck_assert_mem_eq(v1, vc[0], sizeof v1);
    if (th == 0)
      memcpy(chunk, c, sizeof c);
    else
      ck_assert_mem_eq(c, chunk, sizeof c);
    ck_assert_uint_eq(error_bits(), 0);
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  for (int i = 0; i < T * NH * HD; i++)
    ck_assert_msg(fabsf(chunk[i] - out[i]) <= 1e-5f * (1.0f + fabsf(out[i])), "[%d]: chunk %.8g, steps %.8g", i,
                  chunk[i], out[i]);
  /* the two caches must agree in dtype */
  tin mixed[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), q}, {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), k},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), v}, {dt, SHAPE(CAP, KV, HD), kc[0]},
                 {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kr},  {ORTEP_DTYPE_I32, SHAPE(1), pos}};
  ck_assert_status(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, mixed, 6, (void *[]){out}, 1),
                   ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("same shape and dtype");
}
END_TEST

START_TEST(group_query_attention_over_a_chunk_matches_token_steps) {
  enum { NH = 4, KV = 2, HD = 8, CAP = 16, T = 5, P0 = 3 };
  test_rng r = test_rng_new(test_seed() + 22);
  static float kc[2][KV * CAP * HD], vc[2][KV * CAP * HD];
  float q[T * NH * HD], k[T * KV * HD], v[T * KV * HD], chunk[T * NH * HD], steps[T * NH * HD];
  fill(&r, kc[0], KV * CAP * HD, 1.0f), fill(&r, vc[0], KV * CAP * HD, 1.0f);
  memcpy(kc[1], kc[0], sizeof kc[0]), memcpy(vc[1], vc[0], sizeof vc[0]);
  fill(&r, q, T * NH * HD, 1.0f), fill(&r, k, T * KV * HD, 1.0f), fill(&r, v, T * KV * HD, 1.0f);
  tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
  int32_t pos[T];
  for (int t = 0; t < T; t++) pos[t] = P0 + t;
  tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, T, NH * HD), q},   {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), k},
               {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), v},   {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kc[0]},
               {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), vc[0]}, {ORTEP_DTYPE_I32, SHAPE(1, T), pos}};
  ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){chunk}, 1));
  for (int t = 0; t < T; t++) {
    tin one[] = {{ORTEP_DTYPE_F32, SHAPE(1, 1, NH * HD), q + t * NH * HD},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), k + t * KV * HD},
                 {ORTEP_DTYPE_F32, SHAPE(1, 1, KV * HD), v + t * KV * HD},
                 {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), kc[1]},
                 {ORTEP_DTYPE_F32, SHAPE(CAP, KV, HD), vc[1]},
                 {ORTEP_DTYPE_I32, SHAPE(1), &pos[t]}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, one, 6, (void *[]){steps + t * NH * HD}, 1));
  }
  ck_assert_uint_eq(error_bits(), 0);
  for (int i = 0; i < T * NH * HD; i++)
    ck_assert_msg(fabsf(chunk[i] - steps[i]) <= 1e-5f * (1.0f + fabsf(steps[i])), "[%d]: chunk %.8g, steps %.8g", i,
                  chunk[i], steps[i]);
  ck_assert_msg(memcmp(kc[0], kc[1], sizeof kc[0]) == 0 && memcmp(vc[0], vc[1], sizeof vc[0]) == 0,
                "a chunk wrote other K/V than token-by-token steps");
  /* positions 14..18 of a 16-slot cache: two rows fit, three do not */
  for (int t = 0; t < T; t++) pos[t] = CAP - 2 + t;
  ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){chunk}, 1));
  ck_assert_uint_eq(error_bits(), ORTEP_ERROR_KV_SLOT);
  for (int i = 2 * NH * HD; i < T * NH * HD; i++) ck_assert_float_eq(chunk[i], 0.0f);
  bool nonzero = false;
  for (int i = 0; i < 2 * NH * HD; i++) nonzero = nonzero || chunk[i] != 0.0f;
  ck_assert(nonzero);
  /* a chunk big enough to split its heads over workers: 1 and 3 threads agree bitwise */
  enum { BT = 64, BCAP = 256, BNH = 6 };
  float *bq = malloc(BT * BNH * HD * sizeof *bq), *bk = malloc(BT * KV * HD * sizeof *bk),
        *bv = malloc(BT * KV * HD * sizeof *bv);
  float *bkc = calloc(KV * BCAP * HD, sizeof *bkc), *bvc = calloc(KV * BCAP * HD, sizeof *bvc);
  float *bout[2] = {malloc(BT * BNH * HD * sizeof(float)), malloc(BT * BNH * HD * sizeof(float))};
  fill(&r, bq, BT * BNH * HD, 1.0f), fill(&r, bk, BT * KV * HD, 1.0f), fill(&r, bv, BT * KV * HD, 1.0f);
  int32_t bpos[BT];
  for (int t = 0; t < BT; t++) bpos[t] = 100 + t;
  tattr bat[] = {{"num_heads", 0, BNH, 0}, {"kv_num_heads", 0, KV, 0}};
  ortep_ep *saved = g_cpu;
  const char *threads[] = {"1", "3"};
  for (int t = 0; t < 2; t++) {
    g_cpu = cpu_with_threads(threads[t]);
    tin bins[] = {{ORTEP_DTYPE_F32, SHAPE(1, BT, BNH * HD), bq}, {ORTEP_DTYPE_F32, SHAPE(1, BT, KV * HD), bk},
                  {ORTEP_DTYPE_F32, SHAPE(1, BT, KV * HD), bv},  {ORTEP_DTYPE_F32, SHAPE(BCAP, KV, HD), bkc},
                  {ORTEP_DTYPE_F32, SHAPE(BCAP, KV, HD), bvc},   {ORTEP_DTYPE_I32, SHAPE(1, BT), bpos}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, bat, 2, bins, 6, (void *[]){bout[t]}, 1));
    ck_assert_uint_eq(error_bits(), 0);
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  ck_assert_msg(memcmp(bout[0], bout[1], BT * BNH * HD * sizeof(float)) == 0,
                "chunk attention differs between 1 and 3 threads");
  free(bq), free(bk), free(bv), free(bkc), free(bvc), free(bout[0]), free(bout[1]);
}
END_TEST

/* A chunk's attention over bf16 caches with bf16 products (cpu.products
 * auto on a CPU with AVX512-BF16; ops.h): within 5e-3 x (1 + |want|) of
 * double-precision attention over the cached values (the queries and the
 * probabilities are rounded to bf16: about 2^-9 each), while cpu.products =
 * f32 stays within 1e-5 of it; a row's result is that row's alone (the
 * chunk's last 13 rows as a chunk of their own, after the rest, give the
 * same bits) and the same on 1 and 3 threads. A chunk of 70 at position 5
 * (two blocks of rows, an odd span); _i: head_dim 16, 48, 64, 128 (the
 * output's 1, 3, 4 and 8 registers a row). Where the CPU lacks AVX512-BF16
 * both EPs take f32 products and the f32 bound applies to both. */
static ortep_ep *cpu_with_products(const char *threads, const char *products) {
  ortep_ep *ep;
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cpu.threads", threads));
  ck_assert_ok(ortep_config_set(c, "cpu.products", products));
  ck_assert_ok(ortep_cpu_ep_create(NULL, &ep));
  ck_assert_ok(ortep_ep_initialize(ep, c));
  ortep_config_destroy(c);
  return ep;
}

START_TEST(group_query_attention_over_a_chunk_in_bf16_products) {
  static const int hds[] = {16, 48, 64, 128};
  enum { NH = 4, KV = 2, T = 70, P0 = 5, CAP = 80, TAIL = 13 };
  const int HD = hds[_i];
  test_rng r = test_rng_new(test_seed() + 60 + (uint64_t)_i);
  size_t cache_n = (size_t)CAP * KV * HD;
  float *q = malloc(T * NH * HD * sizeof *q), *k = malloc(T * KV * HD * sizeof *k),
        *v = malloc(T * KV * HD * sizeof *v);
  float *first = malloc(P0 * KV * HD * sizeof *first), *kr = malloc(cache_n * sizeof *kr),
        *vr = malloc(cache_n * sizeof *vr);
  uint16_t *kc0 = calloc(cache_n, 2), *vc0 = calloc(cache_n, 2), *kc = malloc(cache_n * 2), *vc = malloc(cache_n * 2);
  fill(&r, q, (size_t)T * NH * HD, 2.0f), fill(&r, k, (size_t)T * KV * HD, 1.0f),
      fill(&r, v, (size_t)T * KV * HD, 1.0f);
  fill(&r, first, (size_t)P0 * KV * HD, 1.0f);
  for (size_t i = 0; i < (size_t)P0 * KV * HD; i++)
    kc0[i] = ortep_f32_to_bf16(first[i]), vc0[i] = ortep_f32_to_bf16(-first[i]);
  int32_t pos[T];
  for (int t = 0; t < T; t++) pos[t] = P0 + t;
  tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
  float *out[4]; /* products f32; auto on 1 thread, on 3; the tail alone */
  for (int c = 0; c < 4; c++) out[c] = malloc(T * NH * HD * sizeof(float));
  ortep_ep *saved = g_cpu;
  bool bf16 = false;
  for (int c = 0; c < 4; c++) {
    g_cpu = cpu_with_products(c == 2 ? "3" : "1", c == 0 ? "f32" : "auto");
    if (c == 1) bf16 = ortep_cpu_ep_bf16_products(g_cpu);
    memcpy(kc, kc0, cache_n * 2), memcpy(vc, vc0, cache_n * 2);
    size_t t0 = 0, n = T;
    if (c == 3) { /* the first rows as one chunk, then the tail as its own */
      t0 = T - TAIL, n = TAIL;
      tin head[] = {
          {ORTEP_DTYPE_F32, SHAPE(1, T - TAIL, NH * HD), q}, {ORTEP_DTYPE_F32, SHAPE(1, T - TAIL, KV * HD), k},
          {ORTEP_DTYPE_F32, SHAPE(1, T - TAIL, KV * HD), v}, {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), kc},
          {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), vc},        {ORTEP_DTYPE_I32, SHAPE(1, T - TAIL), pos}};
      ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, head, 6, (void *[]){out[3]}, 1));
    }
    tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, (int64_t)n, NH * HD), q + t0 * NH * HD},
                 {ORTEP_DTYPE_F32, SHAPE(1, (int64_t)n, KV * HD), k + t0 * KV * HD},
                 {ORTEP_DTYPE_F32, SHAPE(1, (int64_t)n, KV * HD), v + t0 * KV * HD},
                 {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), kc},
                 {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), vc},
                 {ORTEP_DTYPE_I32, SHAPE(1, (int64_t)n), pos + t0}};
    ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){out[c] + t0 * NH * HD}, 1));
    ck_assert_uint_eq(error_bits(), 0);
    ortep_ep_destroy(g_cpu);
  }
  g_cpu = saved;
  for (size_t i = 0; i < cache_n; i++) kr[i] = ortep_bf16_to_f32(kc[i]), vr[i] = ortep_bf16_to_f32(vc[i]);
  double worst[2] = {0, 0};
  for (int t = 0; t < T; t++)
    for (int h = 0; h < NH; h++) {
      int g = h / (NH / KV), last = P0 + t;
      double sc[CAP], mx = -1e300, den = 0;
      for (int s2 = 0; s2 <= last; s2++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)q[(t * NH + h) * HD + i] * kr[(s2 * KV + g) * HD + i];
        sc[s2] = d / sqrt((double)HD);
        mx = sc[s2] > mx ? sc[s2] : mx;
      }
      for (int s2 = 0; s2 <= last; s2++) den += (sc[s2] = exp(sc[s2] - mx));
      for (int i = 0; i < HD; i++) {
        double want = 0;
        for (int s2 = 0; s2 <= last; s2++) want += sc[s2] / den * vr[(s2 * KV + g) * HD + i];
        size_t at_i = ((size_t)t * NH + h) * HD + i;
        for (int c = 0; c < 2; c++) {
          double e = fabs(out[c][at_i] - want) / (1.0 + fabs(want)), tol = c == 1 && bf16 ? 5e-3 : 1e-5;
          ck_assert_msg(e <= tol, "head_dim %d, products %s: token %d head %d [%d]: %.7g, want %.7g", HD,
                        c ? "auto" : "f32", t, h, i, out[c][at_i], want);
          worst[c] = e > worst[c] ? e : worst[c];
        }
      }
    }
  ck_assert_msg(memcmp(out[1], out[2], T * NH * HD * sizeof(float)) == 0, "head_dim %d: 1 and 3 threads differ", HD);
  if (bf16) /* each row its own: the tail alone gives the tail's bits */
    ck_assert_msg(
        memcmp(out[1] + (T - TAIL) * NH * HD, out[3] + (T - TAIL) * NH * HD, TAIL * NH * HD * sizeof(float)) == 0,
        "head_dim %d: the last %d rows as a chunk of their own differ from the same rows in the chunk", HD, TAIL);
  fprintf(stderr, "bf16 chunk attention, head_dim %d: worst relative error %.2e (f32 products %.2e)%s\n", HD, worst[1],
          worst[0], bf16 ? "" : " (this CPU has no AVX512-BF16: f32 products both)");
  for (int c = 0; c < 4; c++) free(out[c]);
  free(q), free(k), free(v), free(first), free(kr), free(vr), free(kc0), free(vc0), free(kc), free(vc);
}
END_TEST

/* Every tile shape of the bf16-product chunk attention (simd_rows.h: a
 * kernel per head_dim / 16 and row count): head_dim 16 to 128 in steps of
 * 16, chunks of 1 to 9 rows after 3 cached positions, each within 5e-3 x
 * (1 + |f32|) of the f32 products (which the test above holds to double
 * precision); the same bits where the CPU lacks AVX512-BF16. */
START_TEST(group_query_attention_in_bf16_products_for_every_tile_shape) {
  enum { NH = 2, KV = 1, P0 = 3, CAP = 16, MAXT = 9, MAXHD = 128 };
  const int HD = 16 * (_i + 1);
  test_rng r = test_rng_new(test_seed() + 90 + (uint64_t)_i);
  float q[MAXT * NH * MAXHD], k[MAXT * KV * MAXHD], v[MAXT * KV * MAXHD], out[2][MAXT * NH * MAXHD];
  uint16_t cache0[2][CAP * KV * MAXHD], cache[2][CAP * KV * MAXHD];
  fill(&r, q, sizeof q / sizeof *q, 2.0f), fill(&r, k, sizeof k / sizeof *k, 1.0f),
      fill(&r, v, sizeof v / sizeof *v, 1.0f);
  for (size_t i = 0; i < sizeof cache0[0] / 2; i++)
    cache0[0][i] = ortep_f32_to_bf16((float)test_rng_range(&r, 0, 200) / 100.0f - 1.0f),
    cache0[1][i] = ortep_f32_to_bf16((float)test_rng_range(&r, 0, 200) / 100.0f - 1.0f);
  int32_t pos[MAXT];
  for (int t = 0; t < MAXT; t++) pos[t] = P0 + t;
  tattr at[] = {{"num_heads", 0, NH, 0}, {"kv_num_heads", 0, KV, 0}};
  ortep_ep *saved = g_cpu, *eps[2] = {cpu_with_products("1", "f32"), cpu_with_products("1", "auto")};
  bool bf16 = ortep_cpu_ep_bf16_products(eps[1]);
  for (int64_t T = 1; T <= MAXT; T++) {
    for (int c = 0; c < 2; c++) {
      g_cpu = eps[c];
      memcpy(cache, cache0, sizeof cache);
      tin ins[] = {{ORTEP_DTYPE_F32, SHAPE(1, T, NH * HD), q},       {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), k},
                   {ORTEP_DTYPE_F32, SHAPE(1, T, KV * HD), v},       {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), cache[0]},
                   {ORTEP_DTYPE_BF16, SHAPE(CAP, KV, HD), cache[1]}, {ORTEP_DTYPE_I32, SHAPE(1, T), pos}};
      ck_assert_ok(run_node("GroupQueryAttention", ORTEP_DOMAIN_MS, at, 2, ins, 6, (void *[]){out[c]}, 1));
      ck_assert_uint_eq(error_bits(), 0);
    }
    for (int64_t i = 0; i < T * NH * HD; i++) {
      double want = out[0][i], e = fabs(out[1][i] - want) / (1.0 + fabs(want));
      ck_assert_msg(bf16 ? e <= 5e-3 : e == 0, "head_dim %d, %lld rows: [%lld] %.7g, f32 products %.7g", HD,
                    (long long)T, (long long)i, out[1][i], want);
    }
  }
  g_cpu = saved;
  ortep_ep_destroy(eps[0]), ortep_ep_destroy(eps[1]);
}
END_TEST

/* The CPU EP's prepare_initializer (backend_impl.h): a 16-bit weight a
 * Linear reads comes back [N/4, K/16, 4, 16] with every value where the
 * blocked layout puts it (kernels/opset.h), into a copy of the EP's, or in
 * place when the session allows it; a table only a lookup reads, an f32
 * weight and cpu.weights_layout = row_major are left as they are. */
START_TEST(prepare_initializer_blocks_linear_weights) {
  enum { N = 8, K = 32 };
  uint16_t w[N * K], copy[N * K];
  for (size_t i = 0; i < N * K; i++) w[i] = (uint16_t)(0x3c00 + i);
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape ws = SHAPE(N, K), xs = SHAPE(1, K), ys = SHAPE(1, N);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &xs));
  ck_assert_ok(ortep_graph_add_input(g, "w", ORTEP_DTYPE_F16, &ws));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &ys));
  ortep_node_id lin, emb;
  ck_assert_ok(ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "lin", (const char *[]){"x", "w"}, 2,
                                    (const char *[]){"y"}, 1, &lin));
  ck_assert_ok(ortep_graph_add_node(g, "Embedding", ORTEP_DOMAIN_ORTEP, "emb", (const char *[]){"w", "x"}, 2,
                                    (const char *[]){"y"}, 1, &emb));
  ortep_initializer_use uses[2] = {{g, ortep_graph_node(g, lin), 1}, {g, ortep_graph_node(g, emb), 0}};
  ortep_initializer in = {"w", ORTEP_DTYPE_F16, ws, w, sizeof w, NULL, uses, 2, ORTEP_DTYPE_COUNT, NULL, NULL};
  ortep_shape shape;
  ortep_dtype dt;
  ortep_buffer b;
  for (int in_place = 0; in_place < 2; in_place++) {
    memcpy(copy, w, sizeof w);
    in.data = copy, in.writable = in_place ? copy : NULL;
    ck_assert_ok(ortep_ep_prepare_initializer(g_cpu, &in, &dt, &shape, &b));
    ck_assert_int_eq(shape.rank, 4);
    ck_assert_int_eq(dt, ORTEP_DTYPE_F16); /* blocked, not converted */
    ck_assert(shape.dims[0] == N / 4 && shape.dims[1] == K / 16 && shape.dims[2] == 4 && shape.dims[3] == 16);
    ck_assert_int_eq(b.owner, in_place ? ORTEP_BUFFER_BORROWED_MUT : ORTEP_BUFFER_OWNED);
    const uint16_t *bw = b.ptr;
    for (size_t i = 0; i < N; i++)
      for (size_t j = 0; j < K; j++)
        ck_assert_uint_eq(bw[(i / 4) * 4 * K + (j / 16) * 64 + (i % 4) * 16 + j % 16], w[i * K + j]);
    ck_assert_ok(ortep_ep_deallocate(g_cpu, &b)); /* an in-place borrow is a no-op free */
  }
  in.data = w, in.writable = NULL;
  in.n_uses = 1, in.uses = &uses[1]; /* the lookup alone gains nothing */
  ck_assert_status(ortep_ep_prepare_initializer(g_cpu, &in, &dt, &shape, &b), ORTEP_E_NOT_SUPPORTED);
  in.n_uses = 2, in.uses = uses, in.dtype = ORTEP_DTYPE_F32; /* not 16-bit */
  ck_assert_status(ortep_ep_prepare_initializer(g_cpu, &in, &dt, &shape, &b), ORTEP_E_NOT_SUPPORTED);
  in.dtype = ORTEP_DTYPE_F16;
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cpu.weights_layout", "row_major"));
  ortep_ep *rm;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &rm));
  ck_assert_ok(ortep_ep_initialize(rm, c));
  ck_assert_status(ortep_ep_prepare_initializer(rm, &in, &dt, &shape, &b), ORTEP_E_NOT_SUPPORTED);
  ortep_ep_destroy(rm);
  ck_assert_ok(ortep_config_set(c, "cpu.weights_layout", "diagonal"));
  ck_assert_ok(ortep_cpu_ep_create(NULL, &rm));
  ck_assert_status(ortep_ep_initialize(rm, c), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("cpu.weights_layout = 'diagonal': use blocked");
  ortep_ep_destroy(rm);
  ortep_config_destroy(c);
  ortep_graph_destroy(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_kernels");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, gather_rows_and_out_of_range_indices, 0, 3);
  tcase_add_loop_test(tc, embedding_reads_row_major_and_blocked_tables, 0, 2);
  tcase_add_loop_test(tc, matmul_and_gemm_match_the_reference, 0, 3);
  tcase_add_test(tc, elementwise_ops_and_broadcasting);
  tcase_add_test(tc, rmsnorm_and_skip_rmsnorm);
  tcase_add_loop_test(tc, rotary_embedding_both_layouts_and_bad_positions, 0, 3);
  tcase_add_test(tc, group_query_attention_decode_steps_and_bad_slots);
  tcase_add_test(tc, split_across_workers_bitwise_equal_to_one_thread);
  tcase_add_test(tc, pool_runs_every_item_once_in_runs_per_thread);
  tcase_add_test(tc, softmax_and_argmax);
  tcase_add_loop_test(tc, linear_over_many_rows_matches_row_by_row, 0, 3);
  tcase_add_loop_test(tc, linear_over_blocked_weights_matches_row_major, 0, 2);
  tcase_add_loop_test(tc, quantized_rows_are_each_row_alone, 0, 2);
  tcase_add_loop_test(tc, rows_over_blocked_weights_are_independent_of_their_neighbours, 0, 2);
  tcase_add_test(tc, group_query_attention_over_a_chunk_matches_token_steps);
  tcase_add_loop_test(tc, group_query_attention_over_16_bit_caches, 0, 2);
  tcase_add_loop_test(tc, group_query_attention_over_a_chunk_in_bf16_products, 0, 4);
  tcase_add_loop_test(tc, group_query_attention_in_bf16_products_for_every_tile_shape, 0, 8);
  tcase_add_test(tc, refusals_say_what_is_accepted);
  tcase_add_test(tc, prepare_initializer_blocks_linear_weights);
  suite_add_tcase(s, tc);
  return test_run(s);
}
