/* test_slab.c: fixed-size object caches: O(1) alloc/free with exact stats,
 * a randomized run against a shadow model, several threads, debug detection
 * of double and foreign frees, device memory left untouched, and the OOM
 * loop over page allocation. */
#include <pthread.h>

#include "testutil.h"

START_TEST(objects_are_aligned_distinct_and_counted) {
  fixture f = fixture_new();
  ortep_slab *s;
  ck_assert_ok(ortep_slab_create(f.fault, 24, 16, 8, &s));
  void *obj[20];
  for (int i = 0; i < 20; i++) {
    ck_assert_ok(ortep_slab_alloc(s, &obj[i]));
    ck_assert_uint_eq((uintptr_t)obj[i] % 16, 0);
    memset(obj[i], i, 24);
  }
  for (int i = 0; i < 20; i++)
    for (int b = 0; b < 24; b++) ck_assert_int_eq(((unsigned char *)obj[i])[b], i);
  ortep_slab_stats st;
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.object_size, 32);
  ck_assert_uint_eq(st.pages, 3);
  ck_assert_uint_eq(st.page_bytes, 256);
  ck_assert_uint_eq(st.capacity, 24);
  ck_assert_uint_eq(st.live, 20);
  ck_assert_uint_eq(st.allocs, 20);
  ck_assert_uint_eq(backing_stats(&f).current_bytes, 3 * 256);
  for (int i = 0; i < 20; i++) ck_assert_ok(ortep_slab_free(s, obj[i]));
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(st.peak_live, 20);
  ck_assert_uint_eq(st.frees, 20);
  /* reuse: no new page */
  for (int i = 0; i < 20; i++) ck_assert_ok(ortep_slab_alloc(s, &obj[i]));
  ck_assert_uint_eq(backing_stats(&f).allocations, 3);
  for (int i = 0; i < 12; i++) ck_assert_ok(ortep_slab_free(s, obj[i]));
  ck_assert_uint_ge(ortep_slab_shrink(s), 1);
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.live, 8);
  ck_assert_uint_eq(backing_stats(&f).current_bytes, st.pages * 256);
  for (int i = 12; i < 20; i++) ck_assert_ok(ortep_slab_free(s, obj[i]));
  ortep_slab_destroy(s);
  fixture_free(&f);
}
END_TEST

START_TEST(bad_parameters_are_refused) {
  fixture f = fixture_new();
  ortep_slab *s = (ortep_slab *)1;
  ck_assert_status(ortep_slab_create(f.fault, 0, 8, 8, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ptr_null(s);
  ck_assert_status(ortep_slab_create(f.fault, 8, 12, 8, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("power of two");
  ck_assert_status(ortep_slab_create(f.fault, SIZE_MAX / 2, 8, 4, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_status(ortep_slab_create(NULL, 8, 8, 4, &s), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ok(ortep_slab_create(f.fault, 100, 4, 0, &s)); /* default objects per page */
  ortep_slab_stats st;
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.page_bytes, (65536 / 100) * 100);
  ortep_slab_destroy(s);
  fixture_free(&f);
}
END_TEST

START_TEST(debug_builds_detect_double_and_foreign_frees) {
  if (!ortep_debug_checks_enabled()) return; /* the checks are compiled out */
  fixture f = fixture_new();
  ortep_slab *s, *other;
  ck_assert_ok(ortep_slab_create(f.fault, 32, 8, 4, &s));
  ck_assert_ok(ortep_slab_create(f.fault, 32, 8, 4, &other));
  void *a, *b, *foreign;
  ck_assert_ok(ortep_slab_alloc(s, &a));
  ck_assert_ok(ortep_slab_alloc(s, &b));
  ck_assert_ok(ortep_slab_alloc(other, &foreign));
  ck_assert_ok(ortep_slab_free(s, a));
  ck_assert_status(ortep_slab_free(s, a), ORTEP_E_INVALID_POINTER);
  ck_assert_error_mentions("double free");
  ck_assert_status(ortep_slab_free(s, foreign), ORTEP_E_INVALID_POINTER);
  ck_assert_error_mentions("not an object of this slab");
  ck_assert_status(ortep_slab_free(s, (unsigned char *)b + 4), ORTEP_E_INVALID_POINTER);
  ck_assert_error_mentions("object boundary");
  int on_stack;
  ck_assert_status(ortep_slab_free(s, &on_stack), ORTEP_E_INVALID_POINTER);
  ortep_slab_stats st;
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.live, 1); /* the refused frees changed nothing */
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_ok(ortep_slab_free(s, b));
  ck_assert_ok(ortep_slab_free(other, foreign));
  ortep_slab_destroy(s);
  ortep_slab_destroy(other);
  fixture_free(&f);
}
END_TEST

START_TEST(device_objects_are_never_touched_by_the_host) {
  test_noaccess_allocator dev = {{&test_noaccess_vtable}, 0};
  ortep_slab *s;
  ck_assert_ok(ortep_slab_create(&dev.base, 4096, 256, 4, &s));
  void *o[10];
  for (int i = 0; i < 10; i++) ck_assert_ok(ortep_slab_alloc(s, &o[i]));
  for (int i = 0; i < 10; i++) ck_assert_ok(ortep_slab_free(s, o[i]));
  ck_assert_uint_eq(ortep_slab_shrink(s), 3);
  ortep_slab_destroy(s);
  ck_assert_int_eq(dev.live, 0);
}
END_TEST

START_TEST(random_operations_match_a_shadow_model) {
  fixture f = fixture_new();
  uint64_t seed = test_seed() + 1000 + (uint64_t)_i;
  test_rng r = test_rng_new(seed);
  size_t size = (size_t)test_rng_range(&r, 1, 200), per_page = (size_t)test_rng_range(&r, 1, 32);
  ortep_slab *s;
  ck_assert_ok(ortep_slab_create(f.fault, size, 8, per_page, &s));
  enum { MAX = 2000 };
  unsigned char **live = calloc(MAX, sizeof *live);
  unsigned char *fill = calloc(MAX, 1);
  size_t n = 0;
  uint64_t allocs = 0, frees = 0;
  for (int op = 0; op < 5000; op++) {
    if (n < MAX && (n == 0 || test_rng_next(&r) % 100 < 55)) {
      ck_assert_ok(ortep_slab_alloc(s, (void **)&live[n]));
      fill[n] = (unsigned char)test_rng_next(&r);
      memset(live[n], fill[n], size);
      n++, allocs++;
    } else {
      size_t k = (size_t)test_rng_range(&r, 0, n - 1);
      for (size_t b = 0; b < size; b++)
        ck_assert_msg(live[k][b] == fill[k], "seed 0x%llx op %d: object corrupted", (unsigned long long)seed, op);
      ck_assert_ok(ortep_slab_free(s, live[k]));
      live[k] = live[n - 1], fill[k] = fill[n - 1];
      n--, frees++;
    }
    if (op % 97 == 0) ortep_slab_shrink(s);
    ortep_slab_stats st;
    ortep_slab_get_stats(s, &st);
    ck_assert_msg(st.live == n && st.allocs == allocs && st.frees == frees && st.capacity >= n &&
                      st.capacity == st.pages * per_page && backing_stats(&f).current_bytes == st.pages * st.page_bytes,
                  "seed 0x%llx op %d: stats disagree with the model", (unsigned long long)seed, op);
  }
  for (size_t i = 0; i < n; i++) ck_assert_ok(ortep_slab_free(s, live[i]));
  free(live);
  free(fill);
  ortep_slab_destroy(s);
  fixture_free(&f);
}
END_TEST

typedef struct worker {
  ortep_slab *s;
  uint64_t seed;
  bool ok;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  test_rng r = test_rng_new(w->seed);
  void *held[64];
  int n = 0;
  w->ok = true;
  for (int i = 0; i < 20000; i++) {
    if (n < 64 && (n == 0 || test_rng_next(&r) % 2)) {
      if (ortep_slab_alloc(w->s, &held[n]) != ORTEP_OK) w->ok = false;
      memset(held[n], (int)(uintptr_t)w, 48);
      n++;
    } else {
      n--;
      for (int b = 0; b < 48; b++)
        if (((unsigned char *)held[n])[b] != (unsigned char)(uintptr_t)w) w->ok = false;
      if (ortep_slab_free(w->s, held[n]) != ORTEP_OK) w->ok = false;
    }
  }
  while (n) ortep_slab_free(w->s, held[--n]);
  return NULL;
}

START_TEST(several_threads_share_one_cache) {
  fixture f = fixture_new();
  ortep_slab *s;
  ck_assert_ok(ortep_slab_create(f.fault, 48, 16, 16, &s));
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){s, test_seed() + (uint64_t)i, false};
    pthread_create(&t[i], NULL, churn, &w[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) ck_assert_msg(w[i].ok, "thread %d saw a failure or a corrupted object", i);
  ortep_slab_stats st;
  ortep_slab_get_stats(s, &st);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(st.allocs, st.frees);
  ck_assert_uint_le(st.peak_live, 4 * 64);
  ortep_slab_destroy(s);
  fixture_free(&f);
}
END_TEST

/* Fill a cache across several pages, failing the nth backing allocation;
 * each failure must leave the cache unchanged and usable. */
START_TEST(oom_loop_over_page_allocation) {
  fixture f = fixture_new();
  for (uint64_t n = 1;; n++) {
    ortep_slab *s;
    ck_assert_ok(ortep_slab_create(f.fault, 64, 64, 4, &s));
    ortep_fault_allocator_arm(f.fault, n, false);
    void *o[30];
    bool failed = false;
    for (int i = 0; i < 30; i++) {
      ortep_slab_stats before, after;
      ortep_slab_get_stats(s, &before);
      ortep_status st = ortep_slab_alloc(s, &o[i]);
      if (st != ORTEP_OK) {
        ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
        ck_assert_error_mentions("injected");
        ortep_slab_get_stats(s, &after);
        ck_assert_mem_eq(&before, &after, sizeof before);
        failed = true;
        ck_assert_ok(ortep_slab_alloc(s, &o[i])); /* still usable */
      }
    }
    for (int i = 0; i < 30; i++) ck_assert_ok(ortep_slab_free(s, o[i]));
    ortep_slab_destroy(s);
    ck_assert_uint_eq(backing_stats(&f).current_bytes, 0);
    ortep_fault_allocator_arm(f.fault, 0, false);
    if (!failed) break;
  }
  /* The same over the small-object hook (page records, free list, bits). */
  for (long n = 1;; n++) {
    test_hooks_install(n);
    ortep_slab *s = NULL;
    bool failed = false;
    void *o[30];
    int got = 0;
    ortep_status st = ortep_slab_create(f.fault, 64, 64, 4, &s);
    if (st != ORTEP_OK) {
      ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
      failed = true;
    } else {
      for (int i = 0; i < 30; i++) {
        st = ortep_slab_alloc(s, &o[got]);
        if (st == ORTEP_OK)
          got++;
        else {
          ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
          failed = true;
        }
      }
      ortep_slab_stats stt;
      ortep_slab_get_stats(s, &stt);
      ck_assert_uint_eq(stt.live, (size_t)got);
      for (int i = 0; i < got; i++) ck_assert_ok(ortep_slab_free(s, o[i]));
      ortep_slab_destroy(s);
    }
    ortep_restore_allocator();
    ck_assert_int_eq(atomic_load(&test_hook_live), 0);
    ck_assert_uint_eq(backing_stats(&f).current_bytes, 0);
    if (!failed) break;
  }
  fixture_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("slab");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, objects_are_aligned_distinct_and_counted);
  tcase_add_test(tc, bad_parameters_are_refused);
  tcase_add_test(tc, debug_builds_detect_double_and_foreign_frees);
  tcase_add_test(tc, device_objects_are_never_touched_by_the_host);
  tcase_add_loop_test(tc, random_operations_match_a_shadow_model, 0, 8);
  tcase_add_test(tc, several_threads_share_one_cache);
  tcase_add_test(tc, oom_loop_over_page_allocation);
  suite_add_tcase(s, tc);
  return test_run(s);
}
