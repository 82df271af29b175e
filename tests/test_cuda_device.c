/* test_cuda_device.c: the CUDA EP on a GPU. Exits 77 (ctest: skipped) with a
 * one-line reason when no device is present. Runs unforked (CK_FORK=no): a
 * CUDA context does not survive fork().
 *
 * Tolerance: CUDA vs CPU logits within 1e-3 x (1 + |cpu|) (different
 * summation orders in f32); tokens identical for 32 steps. */
#include <math.h>

#include "testutil.h"

static char g_dir[64];

static ortep_decoder *open_ep(const char *ep, bool eager, const char *seams) {
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(g_dir, &(ortep_decoder_options){.ep = ep, .eager = eager, .max_seq_len = 64,
                                                                  .forced_seams = seams},
                                  &d));
  return d;
}

START_TEST(cuda_matches_cpu_for_32_steps) {
  ortep_decoder *g = open_ep("cuda", false, NULL), *c = open_ep("cpu", true, NULL);
  ck_assert_str_eq(ortep_ep_name(ortep_decoder_ep(g)), "cuda_ep");
  size_t V = ortep_decoder_vocab_size(c);
  float *lg = malloc(V * sizeof *lg), *lc = malloc(V * sizeof *lc);
  int32_t tg = 5, tc = 5;
  for (int pos = 0; pos < 32; pos++) {
    ck_assert_ok(ortep_decoder_step(g, tg, pos, &tg));
    ck_assert_ok(ortep_decoder_step(c, tc, pos, &tc));
    ck_assert_ok(ortep_decoder_logits(g, lg, V));
    ck_assert_ok(ortep_decoder_logits(c, lc, V));
    for (size_t i = 0; i < V; i++)
      ck_assert_msg(fabsf(lg[i] - lc[i]) <= 1e-3f * (1.0f + fabsf(lc[i])), "pos %d logit %zu: cuda %f cpu %f", pos, i,
                    lg[i], lc[i]);
    ck_assert_msg(tg == tc, "pos %d: cuda token %d, cpu token %d", pos, tg, tc);
  }
  free(lg), free(lc);
  ortep_decoder_close(g);
  ortep_decoder_close(c);
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
  ck_assert_ok(ortep_ep_begin_capture(ep, NULL, 0));
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
  tcase_add_test(tc, cuda_matches_cpu_for_32_steps);
  tcase_add_test(tc, eager_and_replay_agree_on_cuda);
  tcase_add_test(tc, error_word_paths_on_cuda);
  tcase_add_test(tc, zero_allocations_per_step_and_none_during_capture);
  tcase_add_test(tc, copies_and_fences);
  suite_add_tcase(s, tc);
  int rc = test_run(s);
  test_model_dir_remove(g_dir);
  return rc;
}
