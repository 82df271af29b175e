/* test_arena.c: bump arenas (carving, mark / rewind / reset, growth, trim),
 * planned arenas, debug fill and poison, a randomized run against a shadow
 * model, and the OOM loop over growth and planned-arena creation. */
#include "testutil.h"

START_TEST(carves_are_aligned_disjoint_and_grow_by_chunks) {
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, &(ortep_arena_options){.chunk_bytes = 4096}, &a));
  unsigned char *p, *q, *big;
  ck_assert_ok(ortep_arena_alloc(a, 10, 1, (void **)&p));
  ck_assert_ok(ortep_arena_alloc(a, 100, 64, (void **)&q));
  ck_assert_uint_eq((uintptr_t)q % 64, 0);
  ck_assert(q >= p + 10);
  ck_assert_ok(ortep_arena_alloc(a, 10000, 128, (void **)&big)); /* larger than a chunk */
  ck_assert_uint_eq((uintptr_t)big % 128, 0);
  ortep_arena_stats st;
  ortep_arena_get_stats(a, &st);
  ck_assert_uint_eq(st.chunks, 2);
  ck_assert_uint_eq(st.reserved, backing_stats(&f).current_bytes);
  ck_assert_uint_ge(st.used, 10110);
  ck_assert_uint_eq(st.carves, 3);
  ck_assert_status(ortep_arena_alloc(a, 8, 3, (void **)&p), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("power of two");
  ck_assert_status(ortep_arena_at(a, 0, 1, (void **)&p), ORTEP_E_STATE);
  ck_assert_ptr_null(ortep_arena_base(a));
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

START_TEST(mark_rewind_reset_reuse_memory_without_new_chunks) {
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, &(ortep_arena_options){.chunk_bytes = 1024}, &a));
  void *p1, *p2, *again;
  ck_assert_ok(ortep_arena_alloc(a, 100, 16, &p1));
  ortep_arena_mark m = ortep_arena_get_mark(a);
  ck_assert_ok(ortep_arena_alloc(a, 900, 16, &p2));
  ck_assert_ok(ortep_arena_alloc(a, 900, 16, &p2)); /* spills into chunk 2 */
  ck_assert_ok(ortep_arena_rewind(a, m));
  ck_assert_ok(ortep_arena_alloc(a, 900, 16, &again));
  ck_assert_ptr_eq(again, (unsigned char *)p1 + 112); /* same place as before the mark */
  /* A mark from the future is refused. */
  ortep_arena_mark ahead = ortep_arena_get_mark(a);
  ortep_arena_reset(a);
  ck_assert_status(ortep_arena_rewind(a, ahead), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("ahead of");
  /* A decode-like loop: after the first step no backing allocation happens. */
  uint64_t allocs_after_warmup = 0;
  for (int step = 0; step < 10; step++) {
    for (int k = 0; k < 20; k++) ck_assert_ok(ortep_arena_alloc(a, (size_t)(64 << (k % 6)), 64, &p1));
    if (step == 0) allocs_after_warmup = backing_stats(&f).allocations;
    ortep_arena_reset(a);
  }
  ck_assert_uint_eq(backing_stats(&f).allocations, allocs_after_warmup);
  ortep_arena_stats st;
  ortep_arena_get_stats(a, &st);
  ck_assert_uint_eq(st.used, 0);
  ck_assert_uint_gt(st.high_water, 0);
  /* trim gives back what holds nothing */
  size_t reserved = st.reserved;
  ck_assert_uint_eq(ortep_arena_trim(a), reserved);
  ck_assert_uint_eq(backing_stats(&f).current_bytes, 0);
  ck_assert_ok(ortep_arena_alloc(a, 10, 8, &p1)); /* still usable */
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

/* Reads a byte of released arena memory: under AddressSanitizer that memory
 * is poisoned (which the test asserts), so it is read with the poison lifted
 * for that one byte and put back. */
static int released_byte(unsigned char *p) {
#if TEST_ASAN
  ck_assert_msg(__asan_address_is_poisoned(p), "released arena byte %p is not poisoned", (void *)p);
  ASAN_UNPOISON_MEMORY_REGION(p, 1);
  int v = *p;
  ASAN_POISON_MEMORY_REGION(p, 1);
  return v;
#else
  return *p;
#endif
}

/* ASan builds: what was carved is addressable, what was released is not
 * (a use after rewind or reset is a report), and carving again lifts it. */
START_TEST(asan_builds_poison_released_ranges) {
#if TEST_ASAN
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, NULL, &a));
  ortep_arena_mark m = ortep_arena_get_mark(a);
  unsigned char *p;
  ck_assert_ok(ortep_arena_alloc(a, 256, 64, (void **)&p));
  ck_assert(!__asan_region_is_poisoned(p, 256));
  ck_assert(__asan_address_is_poisoned(p + 256)); /* past the carve: not handed out */
  ck_assert_ok(ortep_arena_rewind(a, m));
  ck_assert(__asan_address_is_poisoned(p));
  ck_assert(__asan_address_is_poisoned(p + 255));
  unsigned char *q;
  ck_assert_ok(ortep_arena_alloc(a, 128, 64, (void **)&q));
  ck_assert_ptr_eq(q, p); /* the same bytes, carved again */
  ck_assert(!__asan_region_is_poisoned(q, 128));
  ortep_arena_reset(a);
  ck_assert(__asan_address_is_poisoned(q));
  ortep_arena_destroy(a);
  fixture_free(&f);
#endif
}
END_TEST

START_TEST(debug_builds_fill_new_and_released_memory) {
  if (!ortep_debug_checks_enabled()) return; /* fills are compiled out */
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, NULL, &a));
  unsigned char *p;
  ck_assert_ok(ortep_arena_alloc(a, 64, 8, (void **)&p));
  for (int i = 0; i < 64; i++) ck_assert_int_eq(p[i], ORTEP_ARENA_DEBUG_FILL_NEW);
  memset(p, 1, 64);
  ortep_arena_mark m = ortep_arena_get_mark(a);
  unsigned char *q;
  ck_assert_ok(ortep_arena_alloc(a, 64, 8, (void **)&q));
  memset(q, 2, 64);
  ck_assert_ok(ortep_arena_rewind(a, m));
  for (int i = 0; i < 64; i++) ck_assert_int_eq(released_byte(q + i), ORTEP_ARENA_DEBUG_FILL_FREED);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(p[i], 1); /* before the mark: kept */
  ortep_arena_reset(a);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(released_byte(p + i), ORTEP_ARENA_DEBUG_FILL_FREED);
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

START_TEST(device_memory_is_never_touched_by_the_host) {
  test_noaccess_allocator dev = {{&test_noaccess_vtable}, 0};
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(&dev.base, &(ortep_arena_options){.chunk_bytes = 4096}, &a));
  void *p;
  for (int i = 0; i < 10; i++) ck_assert_ok(ortep_arena_alloc(a, 1000, 64, &p));
  ortep_arena_mark m = ortep_arena_get_mark(a);
  ck_assert_ok(ortep_arena_alloc(a, 3000, 64, &p));
  ck_assert_ok(ortep_arena_rewind(a, m));
  ortep_arena_reset(a);
  ortep_arena_destroy(a);
  ortep_arena *planned;
  ck_assert_ok(ortep_arena_create_planned(&dev.base, 8192, 256, &planned));
  ortep_arena_reset(planned);
  ortep_arena_destroy(planned);
  ck_assert_int_eq(dev.live, 0);
}
END_TEST

START_TEST(planned_arena_has_fixed_offsets_and_never_grows) {
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create_planned(f.fault, 4096, 256, &a));
  unsigned char *base = ortep_arena_base(a);
  ck_assert_ptr_nonnull(base);
  ck_assert_uint_eq((uintptr_t)base % 256, 0);
  ck_assert_uint_eq(ortep_arena_capacity(a), 4096);
  void *p;
  ck_assert_ok(ortep_arena_at(a, 1024, 3072, &p));
  ck_assert_ptr_eq(p, base + 1024);
  ck_assert_status(ortep_arena_at(a, 1024, 3073, &p), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("re-plan");
  ck_assert_status(ortep_arena_at(a, SIZE_MAX, 2, &p), ORTEP_E_OUT_OF_RANGE);
  ck_assert_ok(ortep_arena_alloc(a, 4000, 1, &p));
  ck_assert_status(ortep_arena_alloc(a, 200, 1, &p), ORTEP_E_OUT_OF_MEMORY);
  ck_assert_error_mentions("never grows");
  ck_assert_uint_eq(backing_stats(&f).allocations, 1);
  ortep_arena *bad = (ortep_arena *)1;
  ck_assert_status(ortep_arena_create_planned(f.fault, 64, 6, &bad), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ptr_null(bad);
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

START_TEST(max_bytes_caps_growth) {
  fixture f = fixture_new();
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, &(ortep_arena_options){.chunk_bytes = 1024, .max_bytes = 2048}, &a));
  void *p;
  ck_assert_ok(ortep_arena_alloc(a, 1000, 8, &p));
  ck_assert_ok(ortep_arena_alloc(a, 1000, 8, &p));
  ck_assert_status(ortep_arena_alloc(a, 1000, 8, &p), ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_error_mentions("max_bytes");
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

/* --- randomized operations against a shadow model ------------------------ */
typedef struct live_block {
  unsigned char *p;
  size_t size;
  unsigned char fill;
} live_block;

START_TEST(random_operations_match_a_shadow_model) {
  fixture f = fixture_new();
  uint64_t seed = test_seed() + (uint64_t)_i;
  test_rng r = test_rng_new(seed);
  ortep_arena *a;
  ck_assert_ok(ortep_arena_create(f.fault, &(ortep_arena_options){.chunk_bytes = 8192}, &a));
  live_block *live = calloc(4096, sizeof *live);
  size_t nlive = 0;
  struct {
    ortep_arena_mark mark;
    size_t nlive;
  } marks[64];
  int nmarks = 0;
  for (int op = 0; op < 3000; op++) {
    uint64_t what = test_rng_range(&r, 0, 99);
    if (what < 80 && nlive < 4096) {
      size_t size = (size_t)test_rng_range(&r, 0, test_rng_range(&r, 0, 3) == 0 ? 20000 : 300);
      size_t align = (size_t)1 << test_rng_range(&r, 0, 8);
      unsigned char *p;
      ck_assert_msg(ortep_arena_alloc(a, size, align, (void **)&p) == ORTEP_OK, "seed 0x%llx op %d: %s",
                    (unsigned long long)seed, op, ortep_last_error());
      ck_assert_msg((uintptr_t)p % align == 0, "seed 0x%llx op %d: misaligned", (unsigned long long)seed, op);
      unsigned char fill = (unsigned char)test_rng_next(&r);
      memset(p, fill, size);
      live[nlive++] = (live_block){p, size, fill};
    } else if (what < 90 && nmarks < 64) {
      marks[nmarks].mark = ortep_arena_get_mark(a);
      marks[nmarks++].nlive = nlive;
    } else if (what < 98 && nmarks > 0) {
      int k = (int)test_rng_range(&r, 0, (uint64_t)nmarks - 1);
      ck_assert_ok(ortep_arena_rewind(a, marks[k].mark));
      nlive = marks[k].nlive;
      nmarks = k; /* marks after k are gone with the memory */
    } else {
      ortep_arena_reset(a);
      nlive = 0;
      nmarks = 0;
    }
    /* Every live block keeps its contents, and no two overlap. */
    size_t sum = 0;
    for (size_t i = 0; i < nlive; i++) {
      sum += live[i].size;
      for (size_t b = 0; b < live[i].size; b += 1 + live[i].size / 8)
        ck_assert_msg(live[i].p[b] == live[i].fill, "seed 0x%llx op %d: block %zu corrupted", (unsigned long long)seed,
                      op, i);
      if (i && live[i].size && live[i - 1].size) {
        bool disjoint = live[i - 1].p + live[i - 1].size <= live[i].p || live[i].p + live[i].size <= live[i - 1].p;
        ck_assert_msg(disjoint, "seed 0x%llx op %d: blocks %zu and %zu overlap", (unsigned long long)seed, op, i - 1,
                      i);
      }
    }
    ortep_arena_stats st;
    ortep_arena_get_stats(a, &st);
    ck_assert_msg(st.used >= sum && st.high_water >= st.used && st.reserved >= st.used,
                  "seed 0x%llx op %d: stats used %zu high %zu reserved %zu for %zu live bytes",
                  (unsigned long long)seed, op, st.used, st.high_water, st.reserved, sum);
    ck_assert_uint_eq(st.reserved, backing_stats(&f).current_bytes);
    if (nlive == 0 && nmarks == 0 && what >= 98) ck_assert_uint_eq(st.used, 0);
  }
  /* Full pairwise overlap check at the end (the loop checks neighbours). */
  for (size_t i = 0; i < nlive; i++)
    for (size_t j = i + 1; j < nlive; j++)
      if (live[i].size && live[j].size)
        ck_assert(live[i].p + live[i].size <= live[j].p || live[j].p + live[j].size <= live[i].p);
  free(live);
  ortep_arena_destroy(a);
  fixture_free(&f);
}
END_TEST

/* --- the OOM loop ---------------------------------------------------------- */
START_TEST(oom_loop_over_arena_growth) {
  fixture f = fixture_new();
  for (uint64_t n = 1;; n++) {
    ortep_arena *a;
    ck_assert_ok(ortep_arena_create(f.fault, &(ortep_arena_options){.chunk_bytes = 2048}, &a));
    ortep_fault_allocator_arm(f.fault, n, false);
    void *p;
    bool failed = false;
    for (int k = 0; k < 40; k++) {
      ortep_arena_stats before, after;
      ortep_arena_get_stats(a, &before);
      ortep_status st = ortep_arena_alloc(a, 700, 64, &p);
      if (st != ORTEP_OK) {
        ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
        ck_assert_error_mentions("injected");
        ortep_arena_get_stats(a, &after);
        ck_assert_mem_eq(&before, &after, sizeof before); /* nothing changed */
        failed = true;
        /* ... and the arena is still usable */
        ck_assert_ok(ortep_arena_alloc(a, 700, 64, &p));
      }
    }
    ortep_arena_destroy(a);
    ck_assert_uint_eq(backing_stats(&f).current_bytes, 0);
    ortep_fault_allocator_arm(f.fault, 0, false);
    if (!failed) break;
  }
  fixture_free(&f);
}
END_TEST

START_TEST(oom_loop_over_planned_arena_creation) {
  fixture f = fixture_new();
  /* backing-allocator failures */
  ortep_fault_allocator_arm(f.fault, 1, false);
  ortep_arena *a = (ortep_arena *)1;
  ck_assert_status(ortep_arena_create_planned(f.fault, 1 << 20, 256, &a), ORTEP_E_OUT_OF_MEMORY);
  ck_assert_ptr_null(a);
  ck_assert_error_mentions("ortep_arena_create_planned");
  ortep_fault_allocator_arm(f.fault, 0, false);
  /* small-object hook failures, one call at a time until it succeeds */
  for (long n = 1;; n++) {
    test_hooks_install(n);
    ortep_status st = ortep_arena_create_planned(f.fault, 1 << 20, 256, &a);
    if (st == ORTEP_OK) {
      ortep_arena_destroy(a);
      ortep_restore_allocator();
      break;
    }
    ortep_restore_allocator();
    ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(atomic_load(&test_hook_live), 0);
    ck_assert_uint_eq(backing_stats(&f).current_bytes, 0);
  }
  ck_assert_int_eq(atomic_load(&test_hook_live), 0);
  fixture_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("arena");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, carves_are_aligned_disjoint_and_grow_by_chunks);
  tcase_add_test(tc, mark_rewind_reset_reuse_memory_without_new_chunks);
  tcase_add_test(tc, debug_builds_fill_new_and_released_memory);
  tcase_add_test(tc, asan_builds_poison_released_ranges);
  tcase_add_test(tc, device_memory_is_never_touched_by_the_host);
  tcase_add_test(tc, planned_arena_has_fixed_offsets_and_never_grows);
  tcase_add_test(tc, max_bytes_caps_growth);
  tcase_add_loop_test(tc, random_operations_match_a_shadow_model, 0, 8);
  tcase_add_test(tc, oom_loop_over_arena_growth);
  tcase_add_test(tc, oom_loop_over_planned_arena_creation);
  suite_add_tcase(s, tc);
  return test_run(s);
}
