/* fuzz_memory.c: arena, slab and planner operation sequences from the fuzzer's
 * bytes, checked against a shadow model: live blocks never overlap and keep
 * their contents, stats agree, injected allocation failures change nothing,
 * and every plan verifies. */
#include <stdlib.h>
#include <string.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct blk {
  unsigned char *p;
  size_t n;
  unsigned char fill;
} blk;

#define CHECK(x) \
  if (!(x)) abort()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_allocator *host, *fault;
  if (ortep_host_allocator_create(NULL, &host)) return 0;
  ortep_fault_allocator_create(host, &fault);
  ortep_arena *a;
  ortep_slab *s;
  ortep_arena_create(fault, &(ortep_arena_options){.chunk_bytes = 1024}, &a);
  ortep_slab_create(fault, 24, 8, 4, &s);
  blk ab[256], sb[256];
  size_t na = 0, ns = 0;
  ortep_arena_mark marks[16];
  size_t mark_n[16], nm = 0;
  size_t i = 0;
  while (i + 3 <= size && i < 3 * 2000) {
    uint8_t op = data[i], x = data[i + 1], y = data[i + 2];
    i += 3;
    switch (op % 9) {
      case 0:
      case 1:
      case 2: {
        if (na == 256) break;
        size_t n = (size_t)x * 16 + y % 16;
        size_t align = (size_t)1 << (y % 9);
        if (op & 0x80) ortep_fault_allocator_arm(fault, 1, false);
        ortep_arena_stats before, after;
        ortep_arena_get_stats(a, &before);
        void *p;
        ortep_status st = ortep_arena_alloc(a, n, align, &p);
        ortep_fault_allocator_arm(fault, 0, false);
        if (st != ORTEP_OK) {
          ortep_arena_get_stats(a, &after);
          CHECK(memcmp(&before, &after, sizeof before) == 0);
          break;
        }
        CHECK(((uintptr_t)p & (align - 1)) == 0);
        memset(p, (int)op, n);
        ab[na++] = (blk){p, n, op};
        break;
      }
      case 3:
        if (nm < 16) marks[nm] = ortep_arena_get_mark(a), mark_n[nm++] = na;
        break;
      case 4:
        if (nm) {
          size_t k = x % nm;
          CHECK(ortep_arena_rewind(a, marks[k]) == ORTEP_OK);
          na = mark_n[k];
          nm = k;
        }
        break;
      case 5:
        ortep_arena_reset(a);
        na = nm = 0;
        break;
      case 6:
      case 7: {
        if (ns == 256) break;
        if (op & 0x80) ortep_fault_allocator_arm(fault, 1, false);
        void *p;
        ortep_status st = ortep_slab_alloc(s, &p);
        ortep_fault_allocator_arm(fault, 0, false);
        if (st != ORTEP_OK) break;
        memset(p, (int)x, 24);
        sb[ns++] = (blk){p, 24, x};
        break;
      }
      case 8:
        if (ns) {
          size_t k = x % ns;
          CHECK(ortep_slab_free(s, sb[k].p) == ORTEP_OK);
          sb[k] = sb[--ns];
        }
        break;
    }
    /* the shadow model */
    for (size_t k = 0; k < na; k++)
      for (size_t j = 0; j < ab[k].n; j += 1 + ab[k].n / 4) CHECK(ab[k].p[j] == ab[k].fill);
    for (size_t k = 0; k < ns; k++) CHECK(sb[k].p[0] == sb[k].fill && sb[k].p[23] == sb[k].fill);
    ortep_slab_stats ss;
    ortep_slab_get_stats(s, &ss);
    CHECK(ss.live == ns);
  }
  for (size_t k = 0; k < na; k++)
    for (size_t j = k + 1; j < na; j++)
      if (ab[k].n && ab[j].n) CHECK(ab[k].p + ab[k].n <= ab[j].p || ab[j].p + ab[j].n <= ab[k].p);
  /* the planner over the rest of the bytes */
  size_t nt = (size - i) / 4;
  if (nt > 300) nt = 300;
  ortep_plan_tensor *t = malloc((nt + 1) * sizeof *t);
  size_t *off = malloc((nt + 1) * sizeof *off);
  for (size_t k = 0; k < nt; k++) {
    const uint8_t *b = data + i + 4 * k;
    uint32_t first = b[2] % 64, len = b[3] % 16;
    t[k] = (ortep_plan_tensor){(size_t)b[0] * 8 + b[1] % 8, (size_t)1 << (b[1] % 7), first, first + len};
  }
  ortep_plan_summary sum;
  CHECK(ortep_plan_memory(t, nt, off, &sum) == ORTEP_OK);
  CHECK(ortep_plan_verify(t, nt, off, sum.total) == ORTEP_OK);
  CHECK(sum.total >= sum.lower_bound && sum.lower_bound <= sum.naive_sum);
  free(t), free(off);
  for (size_t k = 0; k < ns; k++) ortep_slab_free(s, sb[k].p);
  ortep_slab_destroy(s);
  ortep_arena_destroy(a);
  ortep_mem_stats st;
  ortep_allocator_get_stats(fault, &st);
  CHECK(st.current_bytes == 0);
  ortep_allocator_destroy(fault);
  ortep_allocator_destroy(host);
  return 0;
}
