/* test_buffer.c: the device buffer handle: owned, borrowed and borrowed-mut
 * handles, construction checks, and who frees what. */
#include <pthread.h>

#include "testutil.h"

START_TEST(owned_buffer_metadata_and_single_free) {
  ortep_allocator *host;
  ck_assert_ok(ortep_host_allocator_create(NULL, &host));
  void *p;
  ck_assert_ok(ortep_allocator_allocate(host, 128, 64, &p));
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_owned(p, ortep_device_cpu(), 128, 64, &b));
  ck_assert_uint_eq(ortep_buffer_size(&b), 128);
  ck_assert(!ortep_buffer_is_empty(&b));
  ck_assert_uint_eq(ortep_buffer_alignment(&b), 64);
  ck_assert(ortep_device_equal(ortep_buffer_device(&b), ortep_device_cpu()));
  ck_assert(!ortep_buffer_is_borrowed(&b));
  ck_assert_ptr_eq(ortep_buffer_data(&b), p);
  ck_assert_ptr_eq(ortep_buffer_data_mut(&b), p);
  void *raw = ortep_buffer_release(&b);
  ck_assert_ptr_eq(raw, p);
  ck_assert_ptr_null(ortep_buffer_data(&b)); /* consumed */
  ortep_allocator_deallocate(host, raw, 128, 64);
  ortep_mem_stats st;
  ck_assert_ok(ortep_allocator_get_stats(host, &st));
  ck_assert_uint_eq(st.allocations, 1);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.current_bytes, 0);
  ortep_allocator_destroy(host);
}
END_TEST

typedef struct move_arg {
  ortep_buffer buf;
  ortep_allocator *host;
  uintptr_t base;
  bool ok;
} move_arg;

static void *free_elsewhere(void *arg) {
  move_arg *m = arg;
  ortep_buffer b = m->buf; /* the handle moves to this thread */
  m->ok = ortep_buffer_size(&b) == 64 && (uintptr_t)ortep_buffer_data(&b) == m->base;
  size_t len = ortep_buffer_size(&b), align = ortep_buffer_alignment(&b);
  ortep_allocator_deallocate(m->host, ortep_buffer_release(&b), len, align);
  return NULL;
}

START_TEST(buffer_moves_to_another_thread_and_is_freed_once) {
  move_arg m = {0};
  ck_assert_ok(ortep_host_allocator_create(NULL, &m.host));
  void *p;
  ck_assert_ok(ortep_allocator_allocate(m.host, 64, 16, &p));
  ck_assert_ok(ortep_buffer_wrap_owned(p, ortep_device_cpu(), 64, 16, &m.buf));
  m.base = (uintptr_t)p;
  pthread_t t;
  pthread_create(&t, NULL, free_elsewhere, &m);
  pthread_join(t, NULL);
  ck_assert(m.ok);
  ortep_mem_stats st;
  ck_assert_ok(ortep_allocator_get_stats(m.host, &st));
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.current_bytes, 0);
  ortep_allocator_destroy(m.host);
}
END_TEST

START_TEST(borrowed_buffer_aliases_without_owning) {
  unsigned char backing[64];
  memset(backing, 7, sizeof backing);
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_borrowed(backing, ortep_device_cpu(), 64, 1, &b));
  ck_assert(ortep_buffer_is_borrowed(&b));
  ck_assert_uint_eq(ortep_buffer_size(&b), 64);
  ck_assert_ptr_eq(ortep_buffer_data(&b), backing);
  ck_assert_ptr_null(ortep_buffer_data_mut(&b)); /* read-only: no writable pointer */
  void *raw = ortep_buffer_release(&b);
  ck_assert_ptr_eq(raw, backing);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(backing[i], 7);
  backing[0] = 9;
  ck_assert_int_eq(backing[0], 9);
}
END_TEST

START_TEST(borrowed_mut_writes_land_in_the_owner) {
  unsigned char backing[8] = {0};
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_borrowed_mut(backing, ortep_device_cpu(), 8, 1, &b));
  ck_assert(ortep_buffer_is_borrowed(&b));
  memcpy(ortep_buffer_data_mut(&b), (unsigned char[]){1, 2, 3}, 3);
  ck_assert_ptr_eq(ortep_buffer_release(&b), backing);
  ck_assert_int_eq(backing[0], 1);
  ck_assert_int_eq(backing[1], 2);
  ck_assert_int_eq(backing[2], 3);
}
END_TEST

START_TEST(null_and_bad_alignment_are_refused) {
  ortep_buffer b = {.size = 99};
  ck_assert_status(ortep_buffer_wrap_borrowed_mut(NULL, ortep_device_cpu(), 0, 1, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("NULL");
  ck_assert_uint_eq(b.size, 0); /* zeroed on failure */
  unsigned char x[64] = {0};
  ck_assert_status(ortep_buffer_wrap_owned(x, ortep_device_cpu(), 8, 3, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("power of two");
  ck_assert_status(ortep_buffer_wrap_borrowed(x + 1, ortep_device_cpu(), 8, 64, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not aligned");
  ck_assert_status(ortep_buffer_wrap_owned(x, ortep_device_cpu(), 8, 1, NULL), ORTEP_E_INVALID_ARGUMENT);
}
END_TEST

START_TEST(zero_length_buffer_is_empty) {
  unsigned char x[1] = {0};
  ortep_buffer b;
  ck_assert_ok(ortep_buffer_wrap_borrowed(x, ortep_device_cuda(2), 0, 1, &b));
  ck_assert(ortep_buffer_is_empty(&b));
  ck_assert(ortep_device_equal(ortep_buffer_device(&b), ortep_device_cuda(2)));
}
END_TEST

int main(void) {
  Suite *s = suite_create("buffer");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, owned_buffer_metadata_and_single_free);
  tcase_add_test(tc, buffer_moves_to_another_thread_and_is_freed_once);
  tcase_add_test(tc, borrowed_buffer_aliases_without_owning);
  tcase_add_test(tc, borrowed_mut_writes_land_in_the_owner);
  tcase_add_test(tc, null_and_bad_alignment_are_refused);
  tcase_add_test(tc, zero_length_buffer_is_empty);
  suite_add_tcase(s, tc);
  return test_run(s);
}
