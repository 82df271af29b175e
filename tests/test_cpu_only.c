/* test_cpu_only.c: the CUDA EP is a module loaded on demand, so a program
 * that decodes on the CPU never maps cudart or cuBLAS, even in a CUDA
 * build. A suite of its own: nothing else in this process may have asked
 * for CUDA first. */
#include <stdio.h>

#include "testutil.h"

static bool mapped(const char *needle) {
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  char line[1024];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

START_TEST(cpu_decoding_maps_no_cuda_library) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16}, &d));
  int32_t t;
  ck_assert_ok(ortep_decoder_prefill(d, (int32_t[]){1, 2, 3}, 3, &t));
  ck_assert_msg(!mapped("libcudart"), "libcudart is mapped into a CPU-only decode");
  ck_assert_msg(!mapped("libcublas"), "libcublas is mapped into a CPU-only decode");
  ck_assert_msg(!mapped("libortep_cuda"), "the CUDA module is mapped into a CPU-only decode");
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
END_TEST

/* Run by ctest with ORTEP_CUDA_MODULE naming a file that does not exist:
 * every CUDA entry point says the module could not be loaded, and where. */
START_TEST(a_missing_module_is_a_clear_error) {
  const char *m = getenv("ORTEP_CUDA_MODULE");
  if (!m || !ORTEP_HAVE_CUDA) return; /* only in that run, and only in a CUDA build */
  char why[512] = "";
  ck_assert(!ortep_cuda_available(why, sizeof why));
  ck_assert_msg(strstr(why, "could not be loaded") && strstr(why, m), "%s", why);
  ortep_ep *ep = (ortep_ep *)1;
  ck_assert_status(ortep_cuda_ep_create(NULL, &ep), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("ORTEP_CUDA_MODULE");
  ck_assert_ptr_null(ep);
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_decoder *d = NULL;
  ck_assert_status(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cuda"}, &d), ORTEP_E_NO_DEVICE);
  ck_assert_error_mentions("could not be loaded");
  ck_assert_ok(ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "auto"}, &d)); /* auto falls back */
  ck_assert_str_eq(ortep_ep_name(ortep_decoder_ep(d)), "cpu_ep");
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_only");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, cpu_decoding_maps_no_cuda_library);
  tcase_add_test(tc, a_missing_module_is_a_clear_error);
  suite_add_tcase(s, tc);
  return test_run(s);
}
