/* test_reliability.c: the SQLite-style OOM loop over whole operations:
 * opening a decoder (model, graph, session, arenas) and building a session.
 * Fail the 1st, 2nd, 3rd ... allocation until the operation succeeds, by
 * three routes: the fault-injecting allocator under the host allocator and
 * governor (EP memory), the small-object hook (library objects), and a
 * governor budget that refuses exactly at each allocation point. Every
 * failure must be a clean status with a message that leaks nothing
 * (governor back to zero; LeakSanitizer in the ASan build) and a retry must
 * then succeed. */
#include "testutil.h"

static char g_dir[64];

typedef struct chain {
  ortep_governor *gov;
  ortep_allocator *host, *fault;
} chain;

static chain chain_new(void) {
  chain c;
  ck_assert_ok(ortep_governor_create(&c.gov));
  ck_assert_ok(ortep_host_allocator_create(c.gov, &c.host));
  ck_assert_ok(ortep_fault_allocator_create(c.host, &c.fault));
  return c;
}
static void expect_clean(const chain *c) {
  ortep_mem_stats st;
  ortep_governor_get_stats(c->gov, ORTEP_TIER_HOST, &st);
  ck_assert_msg(st.current_bytes == 0, "%llu bytes still charged", (unsigned long long)st.current_bytes);
  ck_assert_ok(ortep_allocator_get_stats(c->fault, &st));
  ck_assert_uint_eq(st.current_bytes, 0);
}
static void chain_free(chain *c) {
  expect_clean(c);
  ortep_allocator_destroy(c->fault);
  ortep_allocator_destroy(c->host);
  ortep_governor_destroy(c->gov);
}

/* The operation: open (the model at dir with config cfg, NULL for the
 * defaults), run two steps, close. */
static ortep_status open_model_and_step(const chain *c, const char *dir, const ortep_config *cfg) {
  ortep_decoder *d;
  ortep_decoder_options o = {
      .ep = "cpu", .max_seq_len = 16, .governor = c->gov, .host_allocator = c->fault, .config = cfg};
  ortep_status st = ortep_decoder_open(dir, &o, &d);
  if (st != ORTEP_OK) return st;
  st = ortep_decoder_prefill(d, (int32_t[]){1, 2}, 2, NULL);
  ortep_decoder_close(d);
  return st;
}
/* The first route: fail the fault allocator's 1st, 2nd, ... allocation of
 * opening the model at dir (config cfg) until it succeeds; each failure a
 * clean OUT_OF_MEMORY naming the injection, nothing charged or leaked, and
 * a retry succeeds. */
static void oom_loop_through_the_allocator(const char *dir, const ortep_config *cfg) {
  chain c = chain_new();
  uint64_t n;
  for (n = 1;; n++) {
    uint64_t before = ortep_fault_allocator_failures(c.fault);
    ortep_fault_allocator_arm(c.fault, n, false);
    ortep_clear_error();
    ortep_status st = open_model_and_step(&c, dir, cfg);
    bool injected = ortep_fault_allocator_failures(c.fault) > before;
    ortep_fault_allocator_arm(c.fault, 0, false);
    if (st == ORTEP_OK && !injected) break;
    ck_assert_msg(st == ORTEP_E_OUT_OF_MEMORY, "failure %llu: %s: %s", (unsigned long long)n, ortep_status_name(st),
                  ortep_last_error());
    ck_assert_msg(strstr(ortep_last_error(), "injected"), "failure %llu: '%s'", (unsigned long long)n,
                  ortep_last_error());
    expect_clean(&c);
    ck_assert_ok(open_model_and_step(&c, dir, cfg)); /* a retry succeeds */
    expect_clean(&c);
  }
  ck_assert_uint_gt(n, 3); /* the loop did cover several allocation points */
  chain_free(&c);
}

/* The second route: the small-object hook fails the 1st, 2nd, ... library
 * allocation; nothing leaks and each failure says why. */
static void oom_loop_through_the_small_object_hook(const char *dir, const ortep_config *cfg) {
  long n;
  for (n = 1;; n++) {
    test_hooks_install(n);
    ortep_clear_error();
    ortep_decoder *d = NULL;
    ortep_status st =
        ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16, .config = cfg}, &d);
    if (st == ORTEP_OK) st = ortep_decoder_prefill(d, (int32_t[]){1, 2}, 2, NULL);
    long calls = atomic_load(&test_hook_calls);
    ortep_decoder_close(d);
    ortep_restore_allocator();
    ck_assert_msg(atomic_load(&test_hook_live) == 0, "failure %ld leaked %ld objects", n, atomic_load(&test_hook_live));
    if (st == ORTEP_OK && calls < n) break; /* nothing was failed: done */
    if (st == ORTEP_OK) continue;           /* the failed call was one the operation tolerates (none today) */
    ck_assert_msg(st == ORTEP_E_OUT_OF_MEMORY, "failure %ld: %s: %s", n, ortep_status_name(st), ortep_last_error());
    ck_assert_msg(strlen(ortep_last_error()) > 0, "failure %ld without a message", n);
  }
  ck_assert_int_gt(n, 50);
}

START_TEST(oom_loop_over_decoder_open_through_the_allocator) { oom_loop_through_the_allocator(g_dir, NULL); }
END_TEST

START_TEST(oom_loop_over_decoder_open_through_the_small_object_hook) {
  oom_loop_through_the_small_object_hook(g_dir, NULL);
}
END_TEST

/* A decoder that quantizes its weights at open (ortep.weights_dtype =
 * q4_0, no weights cache, 2 threads: each weight prepared into a copy with
 * scratch of the CPU EP's): both routes, every allocation failed in turn. */
START_TEST(oom_loops_over_a_quantizing_open) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny-llama", ORTEP_DTYPE_F32);
  ortep_config *cfg;
  ck_assert_ok(ortep_config_create(&cfg));
  ck_assert_ok(ortep_config_set(cfg, "ortep.weights_dtype", "q4_0"));
  ck_assert_ok(ortep_config_set(cfg, "ortep.weights_cache", "off"));
  ck_assert_ok(ortep_config_set(cfg, "cpu.threads", "2"));
  oom_loop_through_the_allocator(dir, cfg);
  oom_loop_through_the_small_object_hook(dir, cfg);
  ortep_config_destroy(cfg);
  test_model_dir_remove(dir);
}
END_TEST

/* A wrapper that notes, for each allocation, the bytes the governor would
 * hold if it were granted: a budget one below that value refuses exactly
 * there. */
typedef struct probe {
  ortep_allocator base;
  ortep_allocator *inner;
  ortep_governor *gov;
  uint64_t need[4096];
  size_t n;
} probe;
static ortep_status probe_alloc(ortep_allocator *self, size_t b, size_t a, void **out) {
  probe *p = (probe *)self;
  ortep_mem_stats st;
  ortep_governor_get_stats(p->gov, ORTEP_TIER_HOST, &st);
  if (p->n < 4096) p->need[p->n++] = st.current_bytes + b;
  return ortep_allocator_allocate(p->inner, b, a, out);
}
static void probe_free(ortep_allocator *self, void *ptr, size_t b, size_t a) {
  ortep_allocator_deallocate(((probe *)self)->inner, ptr, b, a);
}
static ortep_device_key probe_device(const ortep_allocator *self) { return ortep_device_key_host(); }
static const ortep_allocator_vtable probe_vt = {
    .name = "probe", .allocate = probe_alloc, .deallocate = probe_free, .device = probe_device};

START_TEST(governor_refusals_at_every_allocation_point) {
  chain c = chain_new();
  probe p = {{&probe_vt}, c.host, c.gov, {0}, 0};
  ortep_decoder *d;
  ortep_decoder_options o = {.ep = "cpu", .max_seq_len = 16, .governor = c.gov, .host_allocator = &p.base};
  ck_assert_ok(ortep_decoder_open(g_dir, &o, &d));
  ortep_decoder_close(d);
  size_t points = p.n;
  ck_assert_uint_gt(points, 2);
  for (size_t k = 0; k < points; k++) {
    if (p.need[k] == 0) continue; /* a zero-byte request cannot be refused */
    ck_assert_ok(ortep_governor_set_budget(c.gov, ORTEP_TIER_HOST, p.need[k] - 1));
    ortep_status st = ortep_decoder_open(g_dir, &o, &d);
    ck_assert_msg(st == ORTEP_E_BUDGET_EXCEEDED, "point %zu (budget %llu): %s: %s", k,
                  (unsigned long long)(p.need[k] - 1), ortep_status_name(st), ortep_last_error());
    ck_assert_msg(strstr(ortep_last_error(), "ortep.host.budget_bytes"), "%s", ortep_last_error());
    expect_clean(&c);
  }
  ck_assert_ok(ortep_governor_set_budget(c.gov, ORTEP_TIER_HOST, ORTEP_BUDGET_UNLIMITED));
  ck_assert_ok(ortep_decoder_open(g_dir, &o, &d)); /* and afterwards it works */
  ortep_decoder_close(d);
  chain_free(&c);
}
END_TEST

/* Session build alone, over a hand-built graph. */
START_TEST(oom_loop_over_session_build) {
  chain c = chain_new();
  ortep_ep *cpu;
  ck_assert_ok(ortep_cpu_ep_create_with_allocator(c.fault, &cpu));
  ck_assert_ok(ortep_ep_initialize(cpu, NULL));
  ortep_ep_registry *r;
  ck_assert_ok(ortep_ep_registry_create(&r));
  ck_assert_ok(ortep_ep_registry_add(r, cpu, NULL));
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape s = SHAPE(1, 64);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s));
  char prev[16] = "x", next[16];
  for (int i = 0; i < 12; i++) {
    snprintf(next, sizeof next, "v%d", i);
    ck_assert_ok(ortep_graph_add_value(g, next, ORTEP_DTYPE_F32, &s));
    ck_assert_ok(ortep_graph_add_node(g, i % 2 ? "Sigmoid" : "Add", "", NULL, (const char *[]){prev, "x"},
                                      i % 2 ? 1 : 2, (const char *[]){next}, 1, NULL));
    snprintf(prev, sizeof prev, "%s", next);
  }
  ck_assert_ok(ortep_graph_add_output(g, prev));
  for (int mode = 0; mode < 2; mode++) {
    for (uint64_t n = 1;; n++) {
      uint64_t before = ortep_fault_allocator_failures(c.fault);
      ortep_fault_allocator_arm(c.fault, n, false);
      ortep_session *sess = NULL;
      ortep_status st = ortep_session_create(g, r, &(ortep_session_options){.mode = (ortep_run_mode)mode}, &sess);
      if (st == ORTEP_OK) st = ortep_session_run(sess);
      bool injected = ortep_fault_allocator_failures(c.fault) > before;
      ortep_fault_allocator_arm(c.fault, 0, false);
      ortep_session_destroy(sess);
      expect_clean(&c);
      if (st == ORTEP_OK && !injected) break;
      ck_assert_msg(st == ORTEP_E_OUT_OF_MEMORY, "failure %llu: %s", (unsigned long long)n, ortep_last_error());
    }
    for (long n = 1;; n++) {
      test_hooks_install(n);
      ortep_session *sess = NULL;
      ortep_status st = ortep_session_create(g, r, &(ortep_session_options){.mode = (ortep_run_mode)mode}, &sess);
      if (st == ORTEP_OK) st = ortep_session_run(sess);
      long calls = atomic_load(&test_hook_calls);
      ortep_session_destroy(sess);
      ortep_restore_allocator();
      ck_assert_int_eq(atomic_load(&test_hook_live), 0);
      expect_clean(&c);
      if (st == ORTEP_OK && calls < n) break;
      if (st != ORTEP_OK) ck_assert_msg(st == ORTEP_E_OUT_OF_MEMORY, "hook failure %ld: %s", n, ortep_last_error());
    }
  }
  ortep_graph_destroy(g);
  ortep_ep_registry_destroy(r);
  chain_free(&c);
}
END_TEST

static void setup(void) { test_model_dir(g_dir, sizeof g_dir, "tiny", ORTEP_DTYPE_F32); }
static void teardown(void) { test_model_dir_remove(g_dir); }

int main(void) {
  Suite *s = suite_create("reliability");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, oom_loop_over_decoder_open_through_the_allocator);
  tcase_add_test(tc, oom_loop_over_decoder_open_through_the_small_object_hook);
  tcase_add_test(tc, oom_loops_over_a_quantizing_open);
  tcase_add_test(tc, governor_refusals_at_every_allocation_point);
  tcase_add_test(tc, oom_loop_over_session_build);
  suite_add_tcase(s, tc);
  return test_run(s);
}
