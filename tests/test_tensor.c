/* test_tensor.c: tensors and dtypes: lazy allocation, views
 * sharing storage, host-only access, type checks, item, copies, and the
 * reference count that frees exactly once. */
#include <math.h>

#include "testutil.h"

START_TEST(dtypes_and_shapes) {
  ck_assert_uint_eq(ortep_dtype_size(ORTEP_DTYPE_BF16), 2);
  ck_assert_uint_eq(ortep_dtype_size(ORTEP_DTYPE_I64), 8);
  ck_assert_str_eq(ortep_dtype_name(ORTEP_DTYPE_BOOL), "bool");
  ortep_dtype d;
  ck_assert_ok(ortep_dtype_parse("bfloat16", &d));
  ck_assert_int_eq(d, ORTEP_DTYPE_BF16);
  ck_assert_status(ortep_dtype_parse("f8", &d), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("f32, f16, bf16");
  ortep_shape s;
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  ck_assert_status(ortep_shape_make(nine, 9, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("up to 8");
  size_t n;
  ortep_shape big = SHAPE(INT64_MAX / 2, 8);
  ck_assert_status(ortep_shape_numel(&big, &n), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("overflow");
  ortep_shape huge = SHAPE(INT64_MAX / 2);
  ck_assert_status(ortep_shape_bytes(&huge, ORTEP_DTYPE_I64, &n), ORTEP_E_INVALID_ARGUMENT);
  ortep_shape dyn = SHAPE(-1, 4);
  ck_assert(!ortep_shape_is_static(&dyn));
  ck_assert_status(ortep_shape_numel(&dyn, &n), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not static");
  ortep_shape scalar = SHAPE();
  ck_assert_ok(ortep_shape_numel(&scalar, &n));
  ck_assert_uint_eq(n, 1);
  char b[64];
  ck_assert_str_eq(ortep_shape_format(&big, b, sizeof b), "[4611686018427387903, 8]");
}
END_TEST

START_TEST(half_precision_round_trips) {
  float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.96046448e-08f, 0.333251953125f};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    ck_assert_float_eq(ortep_f16_to_f32(ortep_f32_to_f16(vals[i])), vals[i]);
  ck_assert(isinf(ortep_f16_to_f32(ortep_f32_to_f16(1e6f))));
  ck_assert(isnan(ortep_f16_to_f32(ortep_f32_to_f16(NAN))));
  ck_assert_uint_eq(ortep_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
  ck_assert_float_eq(ortep_bf16_to_f32(ortep_f32_to_bf16(1.5f)), 1.5f);
  ck_assert(isnan(ortep_bf16_to_f32(ortep_f32_to_bf16(NAN))));
  ck_assert_float_eq_tol(ortep_bf16_to_f32(ortep_f32_to_bf16(3.14159f)), 3.14159f, 0.01f);
}
END_TEST

START_TEST(lazy_allocation_and_views_share_storage) {
  test_min_ep *ep = test_min_ep_new(ortep_device_cpu());
  ortep_tensor *t, *v;
  ortep_shape s = SHAPE(4, 8);
  ck_assert_ok(ortep_tensor_create(&ep->base, ORTEP_DTYPE_F32, &s, true, &t));
  ck_assert(!ortep_tensor_is_allocated(t));
  ck_assert_int_eq(ep->allocs, 0);
  const void *p;
  size_t len;
  ck_assert_status(ortep_tensor_host_bytes(t, &p, &len), ORTEP_E_NOT_ALLOCATED);
  ck_assert_error_mentions("ensure_allocated");
  ck_assert_ok(ortep_tensor_view(t, 32, 64, &v));
  ck_assert_uint_eq(ortep_tensor_storage_id(t), ortep_tensor_storage_id(v));
  ck_assert_ok(ortep_tensor_ensure_allocated(v)); /* allocates the whole storage */
  ck_assert(ortep_tensor_is_allocated(t));
  ck_assert_int_eq(ep->allocs, 1);
  ck_assert_ptr_eq(ortep_tensor_data_ptr(v), (char *)ortep_tensor_data_ptr(t) + 32);
  ck_assert_uint_eq(ortep_tensor_numel(v), 16);
  ck_assert_uint_eq(ortep_tensor_offset(v), 32);
  /* a view of a view is relative to it */
  ortep_tensor *vv;
  ck_assert_ok(ortep_tensor_view(v, 4, 8, &vv));
  ck_assert_uint_eq(ortep_tensor_offset(vv), 36);
  ortep_tensor *bad = (ortep_tensor *)1;
  ck_assert_status(ortep_tensor_view(v, 60, 8, &bad), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ptr_null(bad);
  ck_assert_error_mentions("outside");
  ck_assert_status(ortep_tensor_view(t, 2, 8, &bad), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("element size");
  /* another tensor has another id */
  ortep_tensor *other;
  ck_assert_ok(ortep_tensor_create(&ep->base, ORTEP_DTYPE_F32, &s, true, &other));
  ck_assert_uint_ne(ortep_tensor_storage_id(other), ortep_tensor_storage_id(t));
  ortep_tensor_release(other);
  /* the view keeps the storage alive after the original is released */
  float data[16];
  for (int i = 0; i < 16; i++) data[i] = (float)i;
  ck_assert_ok(ortep_tensor_copyin(v, data, sizeof data));
  ortep_tensor_release(t);
  ck_assert_int_eq(ep->frees, 0);
  float back[16];
  ck_assert_ok(ortep_tensor_copyout(v, back, sizeof back));
  ck_assert_mem_eq(back, data, sizeof data);
  ortep_tensor_release(vv);
  ortep_tensor_release(v);
  ck_assert_int_eq(ep->frees, 1); /* exactly once */
  ck_assert_int_eq(ep->allocs, 1);
  ortep_ep_destroy(&ep->base);
}
END_TEST

START_TEST(host_access_typed_access_and_item) {
  ortep_ep *cpu = test_cpu_ep();
  ortep_tensor *t;
  ortep_shape s = SHAPE(3);
  ck_assert_ok(ortep_tensor_create(cpu, ORTEP_DTYPE_I32, &s, false, &t));
  int32_t *d;
  ck_assert_ok(ortep_tensor_host_data_mut(t, ORTEP_DTYPE_I32, (void **)&d));
  d[0] = 7, d[1] = 8, d[2] = 9;
  const void *f;
  ck_assert_status(ortep_tensor_host_data(t, ORTEP_DTYPE_F32, &f), ORTEP_E_TYPE_MISMATCH);
  ck_assert_error_mentions("holds i32, not the f32");
  int32_t one;
  ck_assert_status(ortep_tensor_item(t, ORTEP_DTYPE_I32, &one), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("exactly one element");
  ortep_tensor *v;
  ck_assert_ok(ortep_tensor_view(t, 4, 4, &v));
  ck_assert_ok(ortep_tensor_item(v, ORTEP_DTYPE_I32, &one));
  ck_assert_int_eq(one, 8);
  float wrong;
  ck_assert_status(ortep_tensor_item(v, ORTEP_DTYPE_F32, &wrong), ORTEP_E_TYPE_MISMATCH);
  int32_t in[3] = {1, 2, 3};
  ck_assert_status(ortep_tensor_copyin(t, in, 8), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("sizes must match");
  /* a view with its own dtype and shape */
  ortep_tensor *as;
  ortep_shape s2 = SHAPE(1, 2);
  ck_assert_ok(ortep_tensor_view_as(t, 4, ORTEP_DTYPE_U8, &s2, &as));
  ck_assert_uint_eq(ortep_tensor_size(as), 2);
  ortep_tensor_release(as);
  ortep_tensor_release(v);
  ortep_tensor_release(t);
  uint64_t a, fr;
  ck_assert(ortep_ep_allocation_counts(cpu, &a, &fr));
  ck_assert_uint_eq(a, 1);
  ck_assert_uint_eq(fr, 1);
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(device_tensors_refuse_host_access) {
  test_min_ep *dev = test_min_ep_new(ortep_device_cuda(0));
  ortep_tensor *t;
  ortep_shape s = SHAPE(16);
  ck_assert_ok(ortep_tensor_create(&dev->base, ORTEP_DTYPE_F32, &s, false, &t));
  const void *p;
  size_t len;
  ck_assert_status(ortep_tensor_host_bytes(t, &p, &len), ORTEP_E_NOT_HOST_ACCESSIBLE);
  ck_assert_error_mentions("ortep_tensor_copyout");
  ck_assert_error_mentions("cuda:0");
  float x;
  ck_assert_status(ortep_tensor_item(t, ORTEP_DTYPE_F32, &x), ORTEP_E_NOT_HOST_ACCESSIBLE);
  /* the minimal EP has no host upload path for device memory: the default refuses */
  float data[16] = {0};
  ck_assert_status(ortep_tensor_copyin(t, data, sizeof data), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("not implemented for device cuda:0");
  ortep_tensor_release(t);
  ck_assert_int_eq(dev->frees, 1);
  ortep_ep_destroy(&dev->base);
}
END_TEST

START_TEST(copies_between_tensors_and_borrowed_storage) {
  ortep_ep *cpu = test_cpu_ep();
  float weights[6] = {1, 2, 3, 4, 5, 6};
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_borrowed(weights, ortep_device_cpu(), sizeof weights, 4, &b));
  ortep_tensor *w, *dst;
  ortep_shape s = SHAPE(2, 3);
  ck_assert_ok(ortep_tensor_from_borrowed(cpu, ORTEP_DTYPE_F32, &s, &b, &w));
  ck_assert(ortep_tensor_is_borrowed(w));
  ck_assert_ptr_eq(ortep_tensor_data_ptr(w), weights); /* zero-copy */
  void *mut;
  size_t len;
  ck_assert_status(ortep_tensor_host_bytes_mut(w, &mut, &len), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("read-only");
  ck_assert_ok(ortep_tensor_create(cpu, ORTEP_DTYPE_F32, &s, true, &dst));
  ck_assert_ok(ortep_tensor_copy_from(dst, w));
  float out[6];
  ck_assert_ok(ortep_tensor_copyout(dst, out, sizeof out));
  ck_assert_mem_eq(out, weights, sizeof weights);
  ck_assert_status(ortep_tensor_copy_from(w, dst), ORTEP_E_INVALID_ARGUMENT); /* read-only destination */
  ck_assert_ok(ortep_tensor_synchronize(dst));
  /* an owned buffer cannot back a borrowed tensor */
  ortep_buffer owned;
  ck_assert_ok(ortep_ep_allocate(cpu, 24, 8, &owned));
  ortep_tensor *bad;
  ck_assert_status(ortep_tensor_from_borrowed(cpu, ORTEP_DTYPE_F32, &s, &owned, &bad), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ok(ortep_ep_deallocate(cpu, &owned));
  ortep_shape s3 = SHAPE(3, 3);
  ck_assert_status(ortep_tensor_from_borrowed(cpu, ORTEP_DTYPE_F32, &s3, &b, &bad), ORTEP_E_OUT_OF_RANGE);
  ortep_tensor_release(w);
  ortep_tensor_release(dst);
  ck_assert_float_eq(weights[0], 1); /* the borrowed memory was never freed or written */
  uint64_t a, f;
  ortep_ep_allocation_counts(cpu, &a, &f);
  ck_assert_uint_eq(a, f);
  ortep_ep_destroy(cpu);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tensor");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, dtypes_and_shapes);
  tcase_add_test(tc, half_precision_round_trips);
  tcase_add_test(tc, lazy_allocation_and_views_share_storage);
  tcase_add_test(tc, host_access_typed_access_and_item);
  tcase_add_test(tc, device_tensors_refuse_host_access);
  tcase_add_test(tc, copies_between_tensors_and_borrowed_storage);
  suite_add_tcase(s, tc);
  return test_run(s);
}
