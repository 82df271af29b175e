/* test_session.c: the executor on small hand-built graphs: placement and its
 * errors, nodes placed on a second EP and cross-EP copies, the recording-failure path,
 * seams and their reasons, the plan printout. */
#include <math.h>

#include "testutil.h"

/* --- a test EP: a CPU EP in disguise that runs Mul nodes only and whose kernels
 * fail while being recorded (when flaky). ------------------------------- */
typedef struct flaky_ep {
  ortep_ep base;
  ortep_ep *inner;
  bool flaky;
} flaky_ep;

typedef struct flaky_kernel {
  ortep_kernel base;
  ortep_kernel *inner;
} flaky_kernel;

static ortep_status fk_run(ortep_kernel *k, const ortep_kernel_io *io) {
  ortep_kernel *in = ((flaky_kernel *)k)->inner;
  return in->vtable->run(in, io);
}
static ortep_status fk_record(ortep_kernel *k, const ortep_kernel_io *io) { return ORTEP_E_DEVICE_ERROR; }
static void fk_destroy(ortep_kernel *k) {
  ortep_kernel_destroy(((flaky_kernel *)k)->inner);
  free(k);
}
static const ortep_kernel_vtable flaky_kernel_vt = {fk_run, fk_destroy, fk_record};
static const ortep_kernel_vtable steady_kernel_vt = {fk_run, fk_destroy, NULL};

#define INNER(e) (((flaky_ep *)(e))->inner)
static ortep_status fe_init(ortep_ep *e, const ortep_config *c) { return ortep_ep_initialize(INNER(e), c); }
static ortep_status fe_shutdown(ortep_ep *e) { return ortep_ep_shutdown(INNER(e)); }
static void fe_destroy(ortep_ep *e) {
  ortep_ep_destroy(INNER(e));
  free(e);
}
/* Mul alone, a little cheaper than the CPU EP: it wins every Mul. */
static void fe_supports(const ortep_ep *e, const ortep_node *n, int64_t o, const ortep_shape *s, const ortep_dtype *d,
                        size_t k, ortep_kernel_match *m) {
  if (strcmp(ortep_node_op_type(n), "Mul")) {
    snprintf(m->reason, sizeof m->reason, "flaky_ep runs Mul only");
    return;
  }
  ortep_ep_supports_op(INNER(e), n, o, s, d, k, m);
  m->cost = m->cost ? m->cost - 1 : 0; /* cheaper than the CPU EP, so placement picks it */
}
static ortep_status fe_get_kernel(ortep_ep *e, const ortep_node *n, const ortep_shape *s, const ortep_dtype *d,
                                  size_t k, int64_t o, ortep_kernel **out) {
  ortep_kernel *in;
  ortep_status st = ortep_ep_get_kernel(INNER(e), n, s, d, k, o, &in);
  if (st != ORTEP_OK) return st;
  flaky_kernel *fk = calloc(1, sizeof *fk);
  fk->inner = in;
  fk->base = (ortep_kernel){((flaky_ep *)e)->flaky ? &flaky_kernel_vt : &steady_kernel_vt, "flaky.Mul", true};
  *out = &fk->base;
  return ORTEP_OK;
}
static ortep_status fe_alloc(ortep_ep *e, size_t s, size_t a, ortep_buffer *o) {
  return ortep_ep_allocate(INNER(e), s, a, o);
}
static ortep_status fe_dealloc(ortep_ep *e, ortep_buffer *b) { return ortep_ep_deallocate(INNER(e), b); }
static ortep_status fe_copy(ortep_ep *e, const ortep_buffer *s, ortep_buffer *d, size_t n) {
  return ortep_ep_copy(INNER(e), s, d, n);
}
static ortep_status fe_copy_async(ortep_ep *e, const ortep_buffer *s, ortep_buffer *d, size_t n, ortep_fence *f) {
  return ortep_ep_copy_async(INNER(e), s, d, n, f);
}
static ortep_status fe_wait(ortep_ep *e, ortep_fence *f) { return ortep_ep_fence_wait(INNER(e), f); }
static ortep_status fe_sync(ortep_ep *e) { return ortep_ep_sync(INNER(e)); }
static ortep_ep_capabilities fe_caps(const ortep_ep *e) { return ortep_ep_get_capabilities(INNER(e)); }
static ortep_status fe_run(ortep_ep *e, ortep_kernel *k, const ortep_kernel_io *io) {
  return ortep_ep_run_kernel(INNER(e), k, io);
}
static ortep_status fe_begin(ortep_ep *e) { return ortep_ep_begin_capture(INNER(e)); }
static ortep_status fe_end(ortep_ep *e) { return ortep_ep_end_capture(INNER(e)); }
static ortep_status fe_abort(ortep_ep *e) { return ortep_ep_abort_capture(INNER(e)); }
static ortep_status fe_replay(ortep_ep *e) { return ortep_ep_replay(INNER(e)); }
static ortep_status fe_replay_seg(ortep_ep *e, size_t i) { return ortep_ep_replay_segment(INNER(e), i); }
static ortep_status fe_reset(ortep_ep *e, bool *had) { return ortep_ep_reset_graph(INNER(e), had); }
static size_t fe_segs(const ortep_ep *e) { return ortep_ep_segment_count(INNER(e)); }
static bool fe_active(const ortep_ep *e) { return ortep_ep_capture_active(INNER(e)); }
static uint32_t *fe_word(ortep_ep *e) { return ortep_ep_error_word_ptr(INNER(e)); }
static bool fe_counts(const ortep_ep *e, uint64_t *a, uint64_t *f) {
  return ortep_ep_allocation_counts(INNER(e), a, f);
}
static const ortep_ep_vtable flaky_vt = {.name = "flaky_ep",
                                         .initialize = fe_init,
                                         .shutdown = fe_shutdown,
                                         .destroy = fe_destroy,
                                         .supports_op = fe_supports,
                                         .get_kernel = fe_get_kernel,
                                         .allocate = fe_alloc,
                                         .deallocate = fe_dealloc,
                                         .copy = fe_copy,
                                         .copy_async = fe_copy_async,
                                         .fence_wait = fe_wait,
                                         .sync = fe_sync,
                                         .capabilities = fe_caps,
                                         .run_kernel = fe_run,
                                         .begin_capture = fe_begin,
                                         .end_capture = fe_end,
                                         .abort_capture = fe_abort,
                                         .replay = fe_replay,
                                         .replay_segment = fe_replay_seg,
                                         .reset_graph = fe_reset,
                                         .segment_count = fe_segs,
                                         .capture_active = fe_active,
                                         .error_word_ptr = fe_word,
                                         .allocation_counts = fe_counts};

static ortep_ep *flaky_new(bool flaky) {
  flaky_ep *e = calloc(1, sizeof *e);
  e->base = (ortep_ep){&flaky_vt, ortep_device_cpu(), 0};
  e->flaky = flaky;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &e->inner));
  ck_assert_ok(ortep_ep_initialize(&e->base, NULL));
  return &e->base;
}

/* x -> Sigmoid -> a; a * w -> b (Mul); b + x -> c (Add); Sigmoid(c) -> y */
static ortep_graph *small_graph(ortep_ep *owner) {
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape s = SHAPE(1, 8);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "a", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "b", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "c", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_output(g, "y"));
  ck_assert_ok(ortep_graph_set_opset(g, "", 17));
  ortep_tensor *w;
  ortep_shape ws = SHAPE(8);
  ck_assert_ok(ortep_tensor_create(owner, ORTEP_DTYPE_F32, &ws, false, &w));
  float wv[8] = {1, -2, 3, -4, 0.5f, 0.25f, -1, 2};
  ck_assert_ok(ortep_tensor_copyin(w, wv, sizeof wv));
  ck_assert_ok(ortep_graph_add_initializer(g, "w", w));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "s1", (const char *[]){"x"}, 1, (const char *[]){"a"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Mul", "", "m", (const char *[]){"a", "w"}, 2, (const char *[]){"b"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Add", "", "ad", (const char *[]){"b", "x"}, 2, (const char *[]){"c"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "s2", (const char *[]){"c"}, 1, (const char *[]){"y"}, 1, NULL));
  return g; /* destroy it before owner */
}

static void run_graph(ortep_ep_registry *r, ortep_graph *g, ortep_run_mode mode, int steps, float *y,
                      ortep_session **keep) {
  ortep_session *s;
  ck_assert_ok(ortep_session_create(g, r, &(ortep_session_options){.mode = mode}, &s));
  for (int k = 0; k < steps; k++) {
    float x[8];
    for (int i = 0; i < 8; i++) x[i] = (float)(i - 3) * 0.5f + (float)k;
    ck_assert_ok(ortep_session_write(s, "x", x, sizeof x));
    ck_assert_ok(ortep_session_run(s));
    ck_assert_ok(ortep_session_read(s, "y", y + 8 * k, 8 * sizeof *y));
  }
  if (keep)
    *keep = s;
  else
    ortep_session_destroy(s);
}

static ortep_ep_registry *registry(bool with_flaky, bool flaky) {
  ortep_ep_registry *r;
  ck_assert_ok(ortep_ep_registry_create(&r));
  ck_assert_ok(ortep_ep_registry_add(r, test_cpu_ep(), NULL));
  if (with_flaky) ck_assert_ok(ortep_ep_registry_add(r, flaky_new(flaky), NULL));
  return r;
}

START_TEST(replay_matches_eager_on_one_ep) {
  ortep_ep_registry *r = registry(false, false);
  ortep_graph *g = small_graph(ortep_ep_registry_get(r, 0));
  float ye[24], yg[24];
  run_graph(r, g, ORTEP_RUN_EAGER, 3, ye, NULL);
  ortep_session *s;
  run_graph(r, g, ORTEP_RUN_GRAPH, 3, yg, &s);
  ck_assert_mem_eq(ye, yg, sizeof ye);
  for (int i = 0; i < 8; i++) {
    float x = (float)(i - 3) * 0.5f, w[8] = {1, -2, 3, -4, 0.5f, 0.25f, -1, 2};
    float a = 1.0f / (1.0f + expf(-x)), c = a * w[i] + x;
    ck_assert_float_eq_tol(ye[i], 1.0f / (1.0f + expf(-c)), 1e-6f);
  }
  ortep_session_stats st;
  ortep_session_get_stats(s, &st);
  ck_assert_uint_eq(st.segments, 1);
  ck_assert_uint_eq(st.seams, 0);
  ck_assert_uint_eq(st.kernels_per_step, 4);
  ck_assert_uint_eq(st.steps, 3);
  ck_assert_uint_eq(st.captures, 1);
  ck_assert_uint_eq(st.instantiations, 1); /* one segment installed */
  ck_assert_uint_eq(st.graph_updates, 0);
  char *plan;
  ck_assert_ok(ortep_session_format_plan(s, &plan));
  ck_assert_msg(strstr(plan, "s1") && strstr(plan, "segment 0") && strstr(plan, "memory cpu_ep: planned arena"), "%s",
                plan);
  free(plan);
  ck_assert_ptr_eq(ortep_session_node_ep(s, "m"), ortep_ep_registry_get(r, 0));
  ortep_session_destroy(s);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
}
END_TEST

START_TEST(nodes_on_a_second_ep_get_copies_across_eps) {
  ortep_ep_registry *r = registry(true, false);
  ortep_graph *g = small_graph(ortep_ep_registry_get(r, 0));
  float ye[16], yg[16];
  run_graph(r, g, ORTEP_RUN_EAGER, 2, ye, NULL);
  ortep_session *s;
  run_graph(r, g, ORTEP_RUN_GRAPH, 2, yg, &s);
  ck_assert_mem_eq(ye, yg, sizeof ye);
  ck_assert_str_eq(ortep_ep_name(ortep_session_node_ep(s, "m")), "flaky_ep");
  ck_assert_str_eq(ortep_ep_name(ortep_session_node_ep(s, "ad")), "cpu_ep");
  ortep_session_stats st;
  ortep_session_get_stats(s, &st);
  ck_assert_uint_eq(st.copies_per_step, 2); /* a -> flaky, b -> cpu */
  ck_assert_uint_eq(st.eps_used, 2);
  const char *node, *op, *reason;
  ck_assert_ok(ortep_session_seam(s, 0, &node, &op, &reason));
  ck_assert_str_eq(op, "(copy)");
  ck_assert_msg(strstr(reason, "cross-EP copy cpu_ep -> flaky_ep"), "%s", reason);
  ortep_session_destroy(s);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
}
END_TEST

START_TEST(recording_failure_becomes_a_seam_and_replay_still_matches) {
  ortep_ep_registry *r = registry(true, true);
  ortep_graph *g = small_graph(ortep_ep_registry_get(r, 0));
  float ye[24], yg[24];
  run_graph(r, g, ORTEP_RUN_EAGER, 3, ye, NULL);
  ortep_session *s;
  run_graph(r, g, ORTEP_RUN_GRAPH, 3, yg, &s);
  ck_assert_mem_eq(ye, yg, sizeof ye);
  ortep_session_stats st;
  ortep_session_get_stats(s, &st);
  ck_assert_int_eq(st.mode, ORTEP_RUN_GRAPH); /* no fallback: the retry worked */
  ck_assert_ptr_null(st.fallback_reason);
  ck_assert_uint_eq(st.capture_retries, 1);
  bool found = false;
  for (size_t i = 0; i < ortep_session_seam_count(s); i++) {
    const char *node, *op, *reason;
    ck_assert_ok(ortep_session_seam(s, i, &node, &op, &reason));
    if (!strcmp(node, "m")) {
      found = true;
      ck_assert_msg(strstr(reason, "recording failed"), "%s", reason);
    }
  }
  ck_assert_msg(found, "node m is not a seam");
  /* the EPs are idle and clean: no capture left open */
  ck_assert(!ortep_ep_capture_active(ortep_ep_registry_get(r, 0)));
  ck_assert(!ortep_ep_capture_active(ortep_ep_registry_get(r, 1)));
  char *plan;
  ck_assert_ok(ortep_session_format_plan(s, &plan));
  ck_assert_msg(strstr(plan, "[seam: recording failed"), "%s", plan);
  free(plan);
  /* invalidation re-captures, still equal */
  ortep_session_get_stats(s, &st);
  uint64_t inst = st.instantiations;
  ck_assert_ok(ortep_session_invalidate(s));
  float x[8] = {0};
  ck_assert_ok(ortep_session_write(s, "x", x, sizeof x));
  ck_assert_ok(ortep_session_run(s));
  ortep_session_get_stats(s, &st);
  ck_assert_uint_gt(st.instantiations, inst);
  ck_assert_uint_eq(st.captures, 2);
  ortep_session_destroy(s);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
}
END_TEST

START_TEST(unplaceable_nodes_and_bad_graphs_are_named) {
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape s = SHAPE(4);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_output(g, "y"));
  ck_assert_ok(ortep_graph_add_node(g, "Relu", "", "relu0", (const char *[]){"x"}, 1, (const char *[]){"y"}, 1, NULL));
  ortep_ep_registry *r = registry(true, false);
  ortep_session *sess = (ortep_session *)1;
  ck_assert_status(ortep_session_create(g, r, NULL, &sess), ORTEP_E_NOT_SUPPORTED);
  ck_assert_ptr_null(sess);
  ck_assert_error_mentions("node 'relu0' (op Relu) is supported by no registered EP");
  ck_assert_error_mentions("cpu_ep cannot run Relu");
  ck_assert_error_mentions("| flaky_ep runs Mul only"); /* the second EP's reason too */
  ortep_graph_destroy(g);
  /* an intermediate without a declared shape */
  ck_assert_ok(ortep_graph_create(&g));
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_output(g, "y"));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "a", (const char *[]){"x"}, 1, (const char *[]){"t"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "b", (const char *[]){"t"}, 1, (const char *[]){"y"}, 1, NULL));
  ck_assert_status(ortep_session_create(g, r, NULL, &sess), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("output 't' has no declared dtype and shape");
  ortep_graph_destroy(g);
  ortep_ep_registry *empty;
  ck_assert_ok(ortep_ep_registry_create(&empty));
  g = small_graph(ortep_ep_registry_get(r, 0));
  ck_assert_status(ortep_session_create(g, empty, NULL, &sess), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("registry has no EP");
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(empty);
  ortep_ep_registry_destroy(r);
}
END_TEST

START_TEST(values_and_io_checks) {
  ortep_ep_registry *r = registry(false, false);
  ortep_graph *g = small_graph(ortep_ep_registry_get(r, 0));
  ortep_session *s;
  ck_assert_ok(ortep_session_create(g, r, NULL, &s));
  float x[8] = {0};
  ck_assert_status(ortep_session_write(s, "x", x, 4), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("4 bytes given, the value holds 32");
  ck_assert_status(ortep_session_write(s, "a", x, 32), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not a graph input or output");
  ortep_ep *ep;
  void *p;
  size_t bytes;
  ck_assert_ok(ortep_session_value(s, "y", &ep, &p, &bytes));
  ck_assert_uint_eq(bytes, 32);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq(ortep_session_seam_count(s), 0); /* eager: no seams */
  ortep_session_destroy(s);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
}
END_TEST

/* External values: x in the caller's memory, not the arena; unbound, the
 * session refuses to run; rebound, a captured graph follows the new memory. */
START_TEST(external_values_live_in_the_callers_memory) {
  ortep_ep_registry *r = registry(false, false);
  ortep_graph *g = small_graph(ortep_ep_registry_get(r, 0));
  ortep_session *s;
  const char *bad[] = {"a"}, *ext[] = {"x"};
  ck_assert_status(
      ortep_session_create(g, r, &(ortep_session_options){.external_values = bad, .n_external_values = 1}, &s),
      ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("external value 'a' is not a graph input");
  ortep_session_stats planned, ext_stats;
  ck_assert_ok(ortep_session_create(g, r, NULL, &s));
  ortep_session_get_stats(s, &planned);
  ortep_session_destroy(s);
  ck_assert_ok(ortep_session_create(
      g, r, &(ortep_session_options){.mode = ORTEP_RUN_GRAPH, .external_values = ext, .n_external_values = 1}, &s));
  ortep_session_get_stats(s, &ext_stats);
  ck_assert_uint_lt(ext_stats.planned_bytes, planned.planned_bytes); /* x is not in the arena */
  void *p = (void *)1;
  ck_assert_ok(ortep_session_value(s, "x", NULL, &p, NULL));
  ck_assert_ptr_null(p);
  ck_assert_status(ortep_session_run(s), ORTEP_E_STATE);
  ck_assert_error_mentions("external value 'x' (and 1 in all) has no memory yet");
  float x[8] = {0};
  ck_assert_status(ortep_session_write(s, "x", x, sizeof x), ORTEP_E_STATE);
  ck_assert_error_mentions("bind it with ortep_session_bind_value");
  _Alignas(256) float m1[8], m2[8];
  ck_assert_status(ortep_session_bind_value(s, "x", m1, 16), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("needs 32 bytes at a 256-byte aligned address");
  ck_assert_status(ortep_session_bind_value(s, "x", (char *)m1 + 4, 32), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_session_bind_value(s, "y", m1, 32), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("only values named in options.external_values");
  ck_assert_ok(ortep_session_bind_value(s, "x", m1, sizeof m1));
  ck_assert_ok(ortep_session_value(s, "x", NULL, &p, NULL));
  ck_assert_ptr_eq(p, m1);
  /* the caller writes the memory directly; the session computes from it */
  float want[16], y[16];
  run_graph(r, g, ORTEP_RUN_EAGER, 2, want, NULL);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 8; i++) m1[i] = m2[i] = (float)(i - 3) * 0.5f + (float)k;
    if (k == 1) ck_assert_ok(ortep_session_bind_value(s, "x", m2, sizeof m2)); /* after a capture */
    if (k == 1) memset(m1, 0, sizeof m1);                                      /* the old memory is no longer read */
    ck_assert_ok(ortep_session_run(s));
    ck_assert_ok(ortep_session_read(s, "y", y + 8 * k, 8 * sizeof *y));
  }
  ck_assert_mem_eq(y, want, sizeof y);
  ck_assert_ok(ortep_session_read(s, "x", x, sizeof x));
  ck_assert_mem_eq(x, m2, sizeof x);
  ortep_session_get_stats(s, &ext_stats);
  ck_assert_uint_eq(ext_stats.captures, 2); /* the rebinding dropped the first */
  ortep_session_destroy(s);
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
}
END_TEST

/* x -> Sigmoid -> a; a * w2 -> y: the same input and output names as
 * small_graph (shared by a multi-graph session), another computation; y_len
 * other than 8 declares x and y [1, y_len], which conflicts. */
static ortep_graph *other_graph(ortep_ep *owner, int64_t y_len) {
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape s = SHAPE(1, 8), ys = SHAPE(1, y_len);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &ys));
  ck_assert_ok(ortep_graph_add_value(g, "a", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &ys));
  ck_assert_ok(ortep_graph_add_output(g, "y"));
  ck_assert_ok(ortep_graph_set_opset(g, "", 17));
  ortep_tensor *w;
  ortep_shape ws = SHAPE(8);
  ck_assert_ok(ortep_tensor_create(owner, ORTEP_DTYPE_F32, &ws, false, &w));
  float wv[8] = {3, 1, -1, 2, -2, 0.5f, 4, -3};
  ck_assert_ok(ortep_tensor_copyin(w, wv, sizeof wv));
  ck_assert_ok(ortep_graph_add_initializer(g, "w2", w));
  if (y_len == 8)
    ck_assert_ok(
        ortep_graph_add_node(g, "Sigmoid", "", "s1", (const char *[]){"x"}, 1, (const char *[]){"a"}, 1, NULL));
  if (y_len == 8)
    ck_assert_ok(
        ortep_graph_add_node(g, "Mul", "", "m", (const char *[]){"a", "w2"}, 2, (const char *[]){"y"}, 1, NULL));
  else
    ck_assert_ok(
        ortep_graph_add_node(g, "Sigmoid", "", "s2", (const char *[]){"x"}, 1, (const char *[]){"y"}, 1, NULL));
  return g;
}

/* Two graphs in one session share x and y and one arena; each is captured
 * lazily once and replays what a session of its own computes. */
START_TEST(graphs_of_one_session_share_io_and_memory) {
  ortep_ep_registry *r = registry(false, false);
  ortep_ep *cpu = ortep_ep_registry_get(r, 0);
  ortep_graph *ga = small_graph(cpu), *gb = other_graph(cpu, 8), *bad = other_graph(cpu, 4);
  float want_a[8 * 3], want_b[8 * 3];
  ortep_session *sa, *sb, *s;
  run_graph(r, ga, ORTEP_RUN_EAGER, 3, want_a, &sa);
  run_graph(r, gb, ORTEP_RUN_EAGER, 3, want_b, &sb);
  ortep_session_stats sta, stb, st;
  ortep_session_get_stats(sa, &sta);
  ortep_session_get_stats(sb, &stb);
  ortep_session_destroy(sa);
  ortep_session_destroy(sb);
  const ortep_graph *both[2] = {ga, gb};
  ck_assert_ok(ortep_session_create_multi(both, 2, r, &(ortep_session_options){.mode = ORTEP_RUN_GRAPH}, &s));
  ck_assert_uint_eq(ortep_session_graph_count(s), 2);
  for (int round = 0; round < 2; round++)
    for (int k = 0; k < 3; k++)
      for (size_t gi = 0; gi < 2; gi++) {
        float x[8], y[8];
        for (int i = 0; i < 8; i++) x[i] = (float)(i - 3) * 0.5f + (float)k;
        ck_assert_ok(ortep_session_write(s, "x", x, sizeof x));
        ck_assert_ok(ortep_session_run_graph(s, gi));
        ck_assert_ok(ortep_session_read(s, "y", y, sizeof y));
        ck_assert_mem_eq(y, (gi ? want_b : want_a) + 8 * k, sizeof y);
      }
  for (size_t gi = 0; gi < 2; gi++) {
    ck_assert_ok(ortep_session_get_graph_stats(s, gi, &st));
    ck_assert_uint_eq(st.graphs, 2);
    ck_assert_uint_eq(st.captures, 1); /* lazily, once each: capturing one left the other's segments alone */
    ck_assert_uint_eq(st.steps, 6);
  }
  /* one arena: the shared x and y once, the activations of the larger graph */
  ck_assert_uint_lt(st.planned_bytes, sta.planned_bytes + stb.planned_bytes);
  ck_assert_uint_ge(st.planned_bytes, sta.planned_bytes > stb.planned_bytes ? sta.planned_bytes : stb.planned_bytes);
  ck_assert_status(ortep_session_run_graph(s, 2), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_session_get_graph_stats(s, 2, &st), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ok(ortep_session_invalidate(s)); /* drops both */
  ck_assert_ok(ortep_session_run_graph(s, 1));
  ck_assert_ok(ortep_session_get_graph_stats(s, 1, &st));
  ck_assert_uint_eq(st.captures, 2);
  ortep_session_destroy(s);
  /* a shared name declared differently is refused, naming both graphs */
  const ortep_graph *clash[2] = {ga, bad};
  ck_assert_status(ortep_session_create_multi(clash, 2, r, NULL, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("share inputs and outputs by name");
  ck_assert_ptr_null(s);
  ck_assert_status(ortep_session_create_multi(both, 0, r, NULL, &s), ORTEP_E_INVALID_ARGUMENT);
  ortep_graph_destroy(ga);
  ortep_graph_destroy(gb);
  ortep_graph_destroy(bad);
  ortep_ep_registry_destroy(r);
}
END_TEST

int main(void) {
  Suite *su = suite_create("session");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, replay_matches_eager_on_one_ep);
  tcase_add_test(tc, nodes_on_a_second_ep_get_copies_across_eps);
  tcase_add_test(tc, recording_failure_becomes_a_seam_and_replay_still_matches);
  tcase_add_test(tc, unplaceable_nodes_and_bad_graphs_are_named);
  tcase_add_test(tc, values_and_io_checks);
  tcase_add_test(tc, external_values_live_in_the_callers_memory);
  tcase_add_test(tc, graphs_of_one_session_share_io_and_memory);
  suite_add_tcase(su, tc);
  return test_run(su);
}
