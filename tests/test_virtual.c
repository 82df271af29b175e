/* test_virtual.c: the host virtual allocator (allocator.h): reserved
 * address space costs nothing, commits and decommits move real pages (the
 * kernel's mincore and /proc/self/maps are the witnesses) and exactly the
 * bytes they report through the governor, shared prefixes are physical
 * pages owned once and mapped read-only into several reservations, and every
 * failure (a budget, an injected fault) leaves nothing changed. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* How many of the n pages at p the kernel holds in memory. */
static size_t resident(void *p, size_t n) {
  unsigned char v[4096];
  ck_assert_uint_le(n, sizeof v);
  ck_assert_int_eq(mincore(p, n * page(), v), 0);
  size_t r = 0;
  for (size_t i = 0; i < n; i++) r += v[i] & 1;
  return r;
}

/* The permissions /proc/self/maps shows for the mapping holding p ("rw-p"). */
static void perms(const void *p, char out[5]) {
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  char line[512];
  strcpy(out, "none");
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char pr[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi) {
      memcpy(out, pr, 5);
      break;
    }
  }
  fclose(f);
}

static uint64_t gov_bytes(ortep_governor *g) {
  ortep_mem_stats s;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &s);
  return s.current_bytes;
}

typedef struct vfix {
  ortep_governor *g;
  ortep_allocator *a;
} vfix;
static vfix vfix_new(uint64_t budget) {
  vfix f;
  ck_assert_ok(ortep_governor_create(&f.g));
  if (budget) ck_assert_ok(ortep_governor_set_budget(f.g, ORTEP_TIER_HOST, budget));
  ck_assert_ok(ortep_host_virtual_allocator_create(f.g, &f.a));
  return f;
}
static void vfix_free(vfix *f) {
  ck_assert_uint_eq(gov_bytes(f->g), 0); /* everything given back */
  ortep_allocator_destroy(f->a);
  ortep_governor_destroy(f->g);
}

static ortep_commit_range range(void *base, size_t bytes, size_t off, size_t len) {
  return (ortep_commit_range){base, bytes, 64, off, len};
}

START_TEST(reserved_space_costs_nothing_and_commits_move_real_pages) {
  vfix f = vfix_new(0);
  size_t P = page(), R = (size_t)1 << 34; /* 16 GiB of address space: more than this machine has */
  ck_assert(ortep_allocator_has_virtual_backing(f.a));
  ck_assert(ortep_allocator_has_shared_mapping(f.a));
  ck_assert(ortep_allocator_commits_on_demand(f.a));
  ck_assert_uint_eq(ortep_allocator_granularity(f.a), P);
  char *base;
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&base));
  ck_assert_uint_eq(gov_bytes(f.g), 0);
  ck_assert_uint_eq(resident(base, 8), 0);
  char pr[5];
  perms(base, pr);
  ck_assert_str_eq(pr, "---p");
  /* a range of 1.5 pages at offset 100 is widened to the 2 pages it touches */
  uint64_t got;
  ortep_commit_range c = range(base, R, 100, P + P / 2);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, 2 * P);
  ck_assert_uint_eq(gov_bytes(f.g), 2 * P);
  ck_assert_uint_eq(resident(base, 4), 2); /* populated at commit: no fault inside a step */
  perms(base, pr);
  ck_assert_str_eq(pr, "rw-p");
  for (size_t i = 0; i < 2 * P; i++) ck_assert_int_eq(base[i], 0); /* fresh pages read zero */
  memset(base, 7, 2 * P);
  /* overlapping: only the new page is added, the old ones keep their bytes */
  c = range(base, R, P, 2 * P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, P);
  ck_assert_int_eq(base[P + 5], 7);
  ck_assert_int_eq(base[2 * P], 0);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, 0);
  /* decommit the middle page: its memory goes back, its bytes are gone */
  c = range(base, R, P, P);
  ck_assert_ok(ortep_allocator_decommit(f.a, &c, &got));
  ck_assert_uint_eq(got, P);
  ck_assert_uint_eq(gov_bytes(f.g), 2 * P);
  ck_assert_uint_eq(resident(base, 3), 2);
  perms(base + P, pr);
  ck_assert_str_eq(pr, "---p");
  ck_assert_ok(ortep_allocator_decommit(f.a, &c, &got));
  ck_assert_uint_eq(got, 0);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_int_eq(base[P + 5], 0); /* recommitted: zero again */
  ck_assert_int_eq(base[5], 7);
  /* far into the reservation: the address is fixed, the cost one page */
  c = range(base, R, R - 10, 10);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, P);
  base[R - 1] = 1;
  ortep_mem_stats s;
  ck_assert_ok(ortep_allocator_get_stats(f.a, &s));
  ck_assert_uint_eq(s.current_bytes, 4 * P);
  ortep_release_outcome o = ortep_allocator_release(f.a, base, R, 64);
  ck_assert_int_eq(o.kind, ORTEP_RELEASE_COMPLETE);
  ck_assert_uint_eq(o.unmapped_bytes, 4 * P);
  vfix_free(&f);
}
END_TEST

START_TEST(a_budget_bounds_committed_memory_not_address_space) {
  size_t P = page();
  vfix f = vfix_new(3 * P);
  char *base;
  ck_assert_ok(ortep_allocator_reserve(f.a, 1 << 30, 64, (void **)&base));
  uint64_t got;
  ortep_commit_range c = range(base, 1 << 30, 0, 2 * P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  memset(base, 3, 2 * P);
  /* 0..4 pages would add 2 more: over the budget, nothing changes */
  c = range(base, 1 << 30, 0, 4 * P);
  ck_assert_status(ortep_allocator_commit(f.a, &c, &got), ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_uint_eq(gov_bytes(f.g), 2 * P);
  ck_assert_uint_eq(resident(base, 4), 2);
  ck_assert_int_eq(base[P], 3);
  c = range(base, 1 << 30, 0, 3 * P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, P);
  ck_assert_uint_eq(ortep_allocator_release(f.a, base, 1 << 30, 64).unmapped_bytes, 3 * P);
  vfix_free(&f);
}
END_TEST

START_TEST(bad_ranges_and_foreign_pointers_are_refused) {
  vfix f = vfix_new(0);
  char *base;
  size_t R = 16 * page();
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&base));
  uint64_t got = 99;
  ortep_commit_range c = range(base, R, R - 8, 16);
  ck_assert_status(ortep_allocator_commit(f.a, &c, &got), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("does not lie inside its reservation");
  ck_assert_uint_eq(got, 0);
  c = range(base, R, SIZE_MAX, 2);
  ck_assert_status(ortep_allocator_decommit(f.a, &c, &got), ORTEP_E_OUT_OF_RANGE);
  char other[64];
  c = range(other, sizeof other, 0, 8);
  ck_assert_status(ortep_allocator_commit(f.a, &c, &got), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("is not a reservation of this allocator");
  void *bad;
  ck_assert_status(ortep_allocator_reserve(f.a, 64, 3, &bad), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(ortep_allocator_release(f.a, other, sizeof other, 64).kind, ORTEP_RELEASE_FAILED);
  c = range(base, R, 0, 0); /* an empty range: nothing to do */
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(got, 0);
  ortep_allocator_release(f.a, base, R, 64);
  vfix_free(&f);
}
END_TEST

START_TEST(ordinary_allocations_are_committed_and_aligned) {
  vfix f = vfix_new(0);
  size_t P = page();
  size_t cases[][2] = {{1, 8}, {P, 64}, {3 * P + 1, 4096}, {100, (size_t)2 << 20}, {0, 64}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *p;
    ck_assert_ok(ortep_allocator_allocate(f.a, cases[i][0], cases[i][1], (void **)&p));
    ck_assert_uint_eq((uintptr_t)p % cases[i][1], 0);
    memset(p, 1, cases[i][0]);
    size_t pages = cases[i][0] ? (cases[i][0] + P - 1) / P : 1;
    ck_assert_uint_eq(gov_bytes(f.g), pages * P);
    ortep_release_outcome o = ortep_allocator_release(f.a, p, cases[i][0], cases[i][1]);
    ck_assert_uint_eq(o.unmapped_bytes, pages * P);
  }
  vfix_free(&f);
}
END_TEST

START_TEST(a_shared_prefix_is_owned_once_and_mapped_read_only) {
  vfix f = vfix_new(0);
  size_t P = page(), R = 64 * P, len = 2 * P + 100;
  char *src = malloc(len);
  for (size_t i = 0; i < len; i++) src[i] = (char)(i * 7 + 1);
  ortep_shared_prefix *pre;
  ck_assert_ok(ortep_allocator_create_prefix(f.a, src, len, &pre));
  ck_assert_uint_eq(gov_bytes(f.g), 3 * P); /* charged once, whole pages */
  char *a, *b;
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&a));
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&b));
  /* a had private pages where the prefix goes: they make way and are refunded */
  uint64_t got;
  ortep_commit_range c = range(a, R, 0, 5 * P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  memset(a, 9, 5 * P);
  ortep_shared_commit_info ia, ib;
  ck_assert_ok(ortep_allocator_map_prefix(f.a, pre, a, R, &ia));
  ck_assert_uint_eq(ia.additional_owned_bytes, 3 * P);
  ck_assert_uint_eq(ia.newly_mapped_bytes, 3 * P);
  ck_assert_uint_eq(ia.released_bytes, 3 * P);
  ck_assert_uint_eq(ia.granules, 3);
  ck_assert_ok(ortep_allocator_map_prefix(f.a, pre, b, R, &ib));
  ck_assert_uint_eq(ib.additional_owned_bytes, 0); /* the second mapping adds nothing */
  ck_assert_uint_eq(ib.released_bytes, 0);
  ck_assert_uint_eq(gov_bytes(f.g), 3 * P + 2 * P); /* the prefix + a's two private pages after it */
  ck_assert_mem_eq(a, src, len);
  ck_assert_mem_eq(b, src, len);
  ck_assert_int_eq(a[3 * P], 9); /* a's private pages past the prefix are untouched */
  char pr[5];
  perms(a, pr);
  ck_assert_str_eq(pr, "r--s");
  perms(b + 2 * P, pr);
  ck_assert_str_eq(pr, "r--s");
  /* committing private memory over a shared page is refused; after it, fine */
  c = range(b, R, 2 * P, 2 * P);
  ck_assert_status(ortep_allocator_commit(f.a, &c, &got), ORTEP_E_STATE);
  ck_assert_error_mentions("shared read-only prefix");
  c = range(b, R, 3 * P, P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  memcpy(b + 3 * P, "private", 8);
  /* the handle goes, the mappings keep the memory; it goes with the last */
  ortep_allocator_destroy_prefix(f.a, pre);
  ck_assert_mem_eq(b, src, len);
  ck_assert_uint_eq(ortep_allocator_release(f.a, a, R, 64).unmapped_bytes, 5 * P);
  ck_assert_uint_eq(gov_bytes(f.g), 3 * P + P);
  /* decommitting b's last shared page gives the prefix back */
  c = range(b, R, 0, 3 * P);
  ck_assert_ok(ortep_allocator_decommit(f.a, &c, &got));
  ck_assert_uint_eq(got, 3 * P);
  ck_assert_uint_eq(gov_bytes(f.g), P);
  ck_assert_str_eq(b + 3 * P, "private");
  ortep_allocator_release(f.a, b, R, 64);
  free(src);
  vfix_free(&f);
}
END_TEST

START_TEST(prefix_mappings_are_checked) {
  vfix f = vfix_new(0);
  size_t P = page();
  char src[64] = "prefix";
  ortep_shared_prefix *pre, *big;
  ck_assert_ok(ortep_allocator_create_prefix(f.a, src, sizeof src, &pre));
  char *big_src = calloc(1, 4 * P);
  ck_assert_ok(ortep_allocator_create_prefix(f.a, big_src, 4 * P, &big));
  char *a;
  ck_assert_ok(ortep_allocator_reserve(f.a, 2 * P, 64, (void **)&a));
  ortep_shared_commit_info info;
  ck_assert_status(ortep_allocator_map_prefix(f.a, big, a, 2 * P, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("do not fit a reservation");
  ck_assert_status(ortep_allocator_map_prefix(f.a, pre, a, 3 * P, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_allocator_map_prefix(f.a, pre, src, 2 * P, &info), ORTEP_E_INVALID_ARGUMENT);
  ortep_shared_prefix *none;
  ck_assert_status(ortep_allocator_create_prefix(f.a, src, 0, &none), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_ptr_null(none);
  /* mapping the same prefix twice into one reservation is harmless */
  ck_assert_ok(ortep_allocator_map_prefix(f.a, pre, a, 2 * P, &info));
  ck_assert_ok(ortep_allocator_map_prefix(f.a, pre, a, 2 * P, &info));
  ck_assert_uint_eq(info.additional_owned_bytes, 0);
  ck_assert_str_eq(a, "prefix");
  ortep_allocator_destroy_prefix(f.a, pre);
  ortep_allocator_destroy_prefix(f.a, big);
  ortep_allocator_release(f.a, a, 2 * P, 64);
  free(big_src);
  vfix_free(&f);
}
END_TEST

/* map_prefix_at: a prefix's first pages, or all of it, at any page of a
 * reservation, several times into one (a batch's slots share one). A newer
 * mapping takes the pages it covers from an older one; each prefix goes
 * back with the last page that maps it, whoever mapped it. */
START_TEST(a_prefix_maps_at_any_page_of_one_reservation) {
  vfix f = vfix_new(0);
  size_t P = page(), R = 32 * P;
  char *sa = malloc(3 * P), *sb = malloc(2 * P);
  for (size_t i = 0; i < 3 * P; i++) sa[i] = (char)(i * 5 + 3);
  for (size_t i = 0; i < 2 * P; i++) sb[i] = (char)(i * 11 + 7);
  ortep_shared_prefix *a, *b;
  ck_assert_ok(ortep_allocator_create_prefix(f.a, sa, 3 * P, &a));
  ck_assert_ok(ortep_allocator_create_prefix(f.a, sb, 2 * P, &b));
  char *base;
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&base));
  ortep_shared_commit_info info;
  /* all of a at page 4, its first two pages at page 10 and at page 20 */
  ck_assert_ok(ortep_allocator_map_prefix_at(f.a, a, base, R, 4 * P, 0, &info));
  ck_assert_uint_eq(info.additional_owned_bytes, 3 * P);
  ck_assert_uint_eq(info.newly_mapped_bytes, 3 * P);
  ck_assert_ok(ortep_allocator_map_prefix_at(f.a, a, base, R, 10 * P, 2 * P - 100, &info));
  ck_assert_uint_eq(info.additional_owned_bytes, 0);
  ck_assert_uint_eq(info.newly_mapped_bytes, 2 * P); /* rounded up to whole pages */
  ck_assert_uint_eq(info.granules, 2);
  ck_assert_ok(ortep_allocator_map_prefix_at(f.a, a, base, R, 20 * P, 2 * P, &info));
  ck_assert_uint_eq(gov_bytes(f.g), 5 * P); /* a and b, once each */
  ck_assert_mem_eq(base + 4 * P, sa, 3 * P);
  ck_assert_mem_eq(base + 10 * P, sa, 2 * P);
  ck_assert_mem_eq(base + 20 * P, sa, 2 * P);
  ck_assert_uint_eq(resident(base + 12 * P, 1), 0); /* past the two pages asked for: nothing */
  char pr[5];
  perms(base + 21 * P, pr);
  ck_assert_str_eq(pr, "r--s");
  /* b over pages 5..6: a loses them there, keeps page 4 */
  ck_assert_ok(ortep_allocator_map_prefix_at(f.a, b, base, R, 5 * P, 0, &info));
  ck_assert_uint_eq(info.released_bytes, 0); /* shared pages: nothing of the reservation's own */
  ck_assert_mem_eq(base + 4 * P, sa, P);
  ck_assert_mem_eq(base + 5 * P, sb, 2 * P);
  /* the handles go; the mappings keep the memory until their last page */
  ortep_allocator_destroy_prefix(f.a, a);
  ortep_allocator_destroy_prefix(f.a, b);
  ck_assert_uint_eq(gov_bytes(f.g), 5 * P);
  uint64_t got = 0;
  ortep_commit_range c = range(base, R, 5 * P, 2 * P); /* b's only mapping */
  ck_assert_ok(ortep_allocator_decommit(f.a, &c, &got));
  ck_assert_uint_eq(got, 2 * P); /* b went with it */
  ck_assert_uint_eq(gov_bytes(f.g), 3 * P);
  c = range(base, R, 0, 16 * P); /* a's pages 4, 10, 11 */
  ck_assert_ok(ortep_allocator_decommit(f.a, &c, &got));
  ck_assert_uint_eq(gov_bytes(f.g), 3 * P); /* page 20's mapping still holds a */
  ck_assert_mem_eq(base + 20 * P, sa, 2 * P);
  /* private memory beside a mapped prefix, and the whole reservation going at once */
  c = range(base, R, 22 * P, P);
  ck_assert_ok(ortep_allocator_commit(f.a, &c, &got));
  ck_assert_uint_eq(ortep_allocator_release(f.a, base, R, 64).unmapped_bytes, 3 * P);
  free(sa), free(sb);
  vfix_free(&f); /* a went with the release */
}
END_TEST

START_TEST(prefix_offsets_are_checked) {
  vfix f = vfix_new(0);
  size_t P = page();
  char src[64] = "prefix";
  ortep_shared_prefix *pre;
  ck_assert_ok(ortep_allocator_create_prefix(f.a, src, sizeof src, &pre));
  char *a;
  ck_assert_ok(ortep_allocator_reserve(f.a, 4 * P, 64, (void **)&a));
  ortep_shared_commit_info info;
  ck_assert_status(ortep_allocator_map_prefix_at(f.a, pre, a, 4 * P, P / 2, 0, &info), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("whole number");
  ck_assert_status(ortep_allocator_map_prefix_at(f.a, pre, a, 4 * P, 4 * P, 0, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_allocator_map_prefix_at(f.a, pre, a, 4 * P, 5 * P, 0, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_status(ortep_allocator_map_prefix_at(f.a, pre, a, 4 * P, 0, 2 * P, &info), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("asked to be mapped");
  ck_assert_uint_eq(gov_bytes(f.g), P); /* nothing changed */
  ck_assert_ok(ortep_allocator_map_prefix_at(f.a, pre, a, 4 * P, 3 * P, 0, &info));
  ck_assert_str_eq(a + 3 * P, "prefix");
  ortep_allocator_destroy_prefix(f.a, pre);
  ortep_allocator_release(f.a, a, 4 * P, 64);
  vfix_free(&f);
}
END_TEST

/* The OOM loop: fail the 1st, 2nd, ... memory-taking call of a sequence
 * (reserve, commits, a prefix, its mapping) until it succeeds; each
 * failure leaves the governor where the successful calls put it and the
 * cleanup gives everything back. */
START_TEST(every_injected_failure_is_clean) {
  size_t P = page();
  bool done = false;
  for (uint64_t nth = 1; !done; nth++) {
    vfix f = vfix_new(0);
    ortep_allocator *fa;
    ck_assert_ok(ortep_fault_allocator_create(f.a, &fa));
    ck_assert_uint_eq(ortep_allocator_granularity(fa), P);
    ortep_fault_allocator_arm(fa, nth, false);
    char *r = NULL, src[100] = "abc";
    ortep_shared_prefix *pre = NULL;
    uint64_t got;
    ortep_status st = ortep_allocator_reserve(fa, 32 * P, 64, (void **)&r);
    ortep_commit_range c = range(r, 32 * P, 0, 4 * P);
    if (st == ORTEP_OK) st = ortep_allocator_commit(fa, &c, &got);
    uint64_t expect = st == ORTEP_OK ? 4 * P : 0;
    ck_assert_uint_eq(gov_bytes(f.g), expect);
    if (st == ORTEP_OK) st = ortep_allocator_create_prefix(fa, src, sizeof src, &pre);
    ortep_shared_commit_info info;
    if (st == ORTEP_OK) st = ortep_allocator_map_prefix(fa, pre, r, 32 * P, &info);
    if (st == ORTEP_OK) ck_assert_str_eq(r, "abc");
    c = range(r, 32 * P, 8 * P, P);
    if (st == ORTEP_OK) st = ortep_allocator_commit(fa, &c, &got);
    done = st == ORTEP_OK;
    if (!done) {
      ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
      ck_assert_error_mentions("injected failure");
    }
    ortep_allocator_destroy_prefix(fa, pre);
    if (r) ck_assert_int_eq(ortep_allocator_release(fa, r, 32 * P, 64).kind, ORTEP_RELEASE_COMPLETE);
    ortep_allocator_destroy(fa);
    vfix_free(&f);
    ck_assert_uint_lt(nth, 10);
  }
}
END_TEST

typedef struct half {
  ortep_allocator *a;
  char *base;
  size_t R, off;
} half;
static void *churn(void *arg) {
  half *h = arg;
  size_t P = page();
  for (int i = 0; i < 200; i++) {
    uint64_t g;
    ortep_commit_range c = range(h->base, h->R, h->off, (size_t)(i % 7 + 1) * P);
    if (ortep_allocator_commit(h->a, &c, &g) != ORTEP_OK) return "commit failed";
    h->base[h->off] = (char)i;
    if (ortep_allocator_decommit(h->a, &c, &g) != ORTEP_OK || g != (size_t)(i % 7 + 1) * P) return "decommit";
  }
  return NULL;
}

START_TEST(concurrent_commits_keep_the_books) {
  /* two threads commit and decommit their own halves of one reservation */
  vfix f = vfix_new(0);
  size_t P = page(), R = 256 * P;
  char *base;
  ck_assert_ok(ortep_allocator_reserve(f.a, R, 64, (void **)&base));
  half h[2] = {{f.a, base, R, 0}, {f.a, base, R, 128 * P}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, churn, &h[i]), 0);
  for (int i = 0; i < 2; i++) {
    void *why;
    pthread_join(t[i], &why);
    ck_assert_msg(why == NULL, "thread %d: %s", i, (const char *)why);
  }
  ck_assert_uint_eq(gov_bytes(f.g), 0);
  ortep_allocator_release(f.a, base, R, 64);
  vfix_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("virtual");
  TCase *tc = tcase_create("host");
  tcase_add_test(tc, reserved_space_costs_nothing_and_commits_move_real_pages);
  tcase_add_test(tc, a_budget_bounds_committed_memory_not_address_space);
  tcase_add_test(tc, bad_ranges_and_foreign_pointers_are_refused);
  tcase_add_test(tc, ordinary_allocations_are_committed_and_aligned);
  tcase_add_test(tc, a_shared_prefix_is_owned_once_and_mapped_read_only);
  tcase_add_test(tc, prefix_mappings_are_checked);
  tcase_add_test(tc, a_prefix_maps_at_any_page_of_one_reservation);
  tcase_add_test(tc, prefix_offsets_are_checked);
  tcase_add_test(tc, every_injected_failure_is_clean);
  tcase_add_test(tc, concurrent_commits_keep_the_books);
  suite_add_tcase(s, tc);
  return test_run(s);
}
