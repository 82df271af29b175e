/* test_cuda.c: the CUDA EP where there may be no GPU. Creating and
 * initialising it without a device or driver must fail with a clear status
 * carrying the CUDA error string, never crash; the decoder asked for "cuda"
 * says why it cannot; "auto" falls back to the CPU. */
#include "testutil.h"

START_TEST(without_a_device_initialise_fails_cleanly) {
  char why[256] = "";
  bool have = ortep_cuda_available(why, sizeof why);
  ortep_ep *ep = NULL;
  ortep_status st = ortep_cuda_ep_create(NULL, &ep);
  if (!ORTEP_HAVE_CUDA) {
    ck_assert_int_eq(st, ORTEP_E_NOT_SUPPORTED);
    ck_assert_error_mentions("no CUDA EP");
    ck_assert_ptr_null(ep);
    return;
  }
  ck_assert_ok(st);
  st = ortep_ep_initialize(ep, NULL);
  if (have) {
    ck_assert_ok(st); /* on a GPU machine the device suite covers the rest */
  } else {
    ck_assert_msg(strlen(why) > 10, "no reason given: '%s'", why);
    ck_assert_int_eq(st, ORTEP_E_NO_DEVICE);
    ck_assert_error_mentions("cuda_ep: no usable CUDA device or driver");
    ck_assert_error_mentions("cuda"); /* the CUDA error name, e.g. cudaErrorInsufficientDriver */
    ortep_buffer b;
    ck_assert_status(ortep_ep_allocate(ep, 64, 64, &b), ORTEP_E_STATE); /* not initialised: refused */
    ck_assert_error_mentions("initialise the EP first");
  }
  ortep_ep_destroy(ep);
}
END_TEST

START_TEST(bad_options_are_refused_before_touching_the_device) {
  if (!ORTEP_HAVE_CUDA) return;
  ortep_ep *ep;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &ep));
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cuda.devce_id", "0"));
  ck_assert_status(ortep_ep_initialize(ep, c), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("known options: cuda.device_id, cuda.workspace_bytes");
  ortep_config_destroy(c);
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cuda.device_id", "gpu0"));
  ck_assert_status(ortep_ep_initialize(ep, c), ORTEP_E_INVALID_ARGUMENT);
  ortep_config_destroy(c);
  ortep_ep_destroy(ep);
}
END_TEST

/* The CPU EP's blocked weights (kernels/opset.h) are refused by the CUDA EP
 * at placement, saying how to get weights it takes; no device is needed to
 * ask. */
START_TEST(blocked_weights_are_refused_with_the_fix) {
  if (!ORTEP_HAVE_CUDA) return;
  ortep_ep *ep;
  ck_assert_ok(ortep_cuda_ep_create(NULL, &ep));
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_node_id id;
  ck_assert_ok(ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "proj", (const char *[]){"x", "w"}, 2,
                                    (const char *[]){"y"}, 1, &id));
  ortep_shape shapes[2] = {SHAPE(1, 32), SHAPE(2, 2, 4, 16)};
  ortep_dtype dtypes[2] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_BF16};
  ortep_kernel_match m;
  ortep_ep_supports_op(ep, ortep_graph_node(g, id), 17, shapes, dtypes, 2, &m);
  ck_assert(!m.supported);
  ck_assert_msg(strstr(m.reason, "blocked layout") && strstr(m.reason, "ortep.weights_layout = row_major"),
                "reason: %s", m.reason);
  shapes[1] = SHAPE(8, 32); /* the same weight row-major is taken */
  ortep_ep_supports_op(ep, ortep_graph_node(g, id), 17, shapes, dtypes, 2, &m);
  ck_assert_msg(m.supported, "reason: %s", m.reason);
  /* and a blocked table for the token lookup */
  ck_assert_ok(ortep_graph_add_node(g, "Embedding", ORTEP_DOMAIN_ORTEP, "embed", (const char *[]){"t", "ids"}, 2,
                                    (const char *[]){"h"}, 1, &id));
  ortep_shape es[2] = {SHAPE(2, 2, 4, 16), SHAPE(1, 1)};
  ortep_dtype ed[2] = {ORTEP_DTYPE_BF16, ORTEP_DTYPE_I32};
  ortep_ep_supports_op(ep, ortep_graph_node(g, id), 17, es, ed, 2, &m);
  ck_assert(!m.supported);
  ck_assert_msg(strstr(m.reason, "the table is in the CPU EP's blocked layout"), "reason: %s", m.reason);
  ortep_graph_destroy(g);
  ortep_ep_destroy(ep);
}
END_TEST

START_TEST(decoder_ep_choice_without_a_device) {
  if (ortep_cuda_available(NULL, 0)) return; /* a GPU machine: the device suite covers it */
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_decoder *d = (ortep_decoder *)1;
  ortep_status st = ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda"}, &d);
  ck_assert_int_eq(st, ORTEP_E_NO_DEVICE);
  ck_assert_ptr_null(d);
  ck_assert_error_mentions("ep \"cuda\" was asked for");
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "auto"}, &d));
  ck_assert_str_eq(ortep_ep_name(ortep_decoder_ep(d)), "cpu_ep"); /* auto fell back */
  ortep_decoder_close(d);
  ortep_allocator *pool;
  st = ortep_cuda_pool_allocator_create(0, NULL, NULL, &pool);
  ck_assert_int_ne(st, ORTEP_OK);
  ck_assert_ptr_null(pool);
  test_model_dir_remove(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, without_a_device_initialise_fails_cleanly);
  tcase_add_test(tc, bad_options_are_refused_before_touching_the_device);
  tcase_add_test(tc, blocked_weights_are_refused_with_the_fix);
  tcase_add_test(tc, decoder_ep_choice_without_a_device);
  suite_add_tcase(s, tc);
  return test_run(s);
}
