/* test_trace.c: the NVTX ranges ortep emits, recorded by a real NVTX
 * injection library (tests/nvtx_recorder.c) loaded through
 * NVTX_INJECTION64_PATH: a tiny decode in graph mode with attention forced
 * to seams must show the designed ranges, nested and ordered, with their
 * payloads; markers for error-word hits, graph resets and re-captures; a
 * named decode thread; and pushes and pops that balance. */
#include <dlfcn.h>

#include "nvtx_recorder.h"
#include "testutil.h"

static size_t (*rec_count)(void);
static const nvtx_event *(*rec_event)(size_t);

typedef struct flat {
  int depth;
  const nvtx_event *e;
} flat;

/* Pushes with their depth, in order; checks balance on the way. */
static size_t flatten(flat *out, size_t cap) {
  int depth = 0;
  size_t n = 0;
  for (size_t i = 0; i < rec_count(); i++) {
    const nvtx_event *e = rec_event(i);
    if (e->kind == NVTX_EV_PUSH) {
      if (n < cap) out[n++] = (flat){depth, e};
      depth++;
    } else if (e->kind == NVTX_EV_POP) {
      depth--;
      ck_assert_msg(depth >= 0, "a pop without a push at event %zu", i);
    }
  }
  ck_assert_int_eq(depth, 0); /* pushes and pops balance */
  return n;
}

static bool has_event(nvtx_event_kind kind, const char *text, uint64_t *payload) {
  for (size_t i = 0; i < rec_count(); i++) {
    const nvtx_event *e = rec_event(i);
    if (e->kind == kind && strcmp(e->text, text) == 0) {
      if (payload) *payload = e->payload;
      return true;
    }
  }
  return false;
}

START_TEST(decode_in_graph_mode_with_a_forced_seam) {
  char dir[64];
  test_model_dir(dir, sizeof dir, "tiny", ORTEP_DTYPE_F32);
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(
      dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16, .forced_seams = "GroupQueryAttention"}, &d));
  void *h = dlopen(NVTX_RECORDER_PATH, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_msg(h != NULL, "the NVTX injection library was not loaded (NVTX_INJECTION64_PATH=%s)",
                getenv("NVTX_INJECTION64_PATH") ? getenv("NVTX_INJECTION64_PATH") : "unset");
  rec_count = (size_t(*)(void))dlsym(h, "nvtx_recorder_count");
  rec_event = (const nvtx_event *(*)(size_t))dlsym(h, "nvtx_recorder_event");
  ck_assert_ptr_nonnull(rec_count);

  /* open: session build > placement (one per graph: the decode step and the
   * prefill chunks), memory planning */
  static flat f[4096];
  size_t n = flatten(f, 4096), child = 1;
  ck_assert_uint_ge(n, 3);
  ck_assert_str_eq(f[0].e->text, "session build");
  ck_assert_int_eq(f[0].depth, 0);
  ck_assert_str_eq(f[1].e->text, "placement");
  ck_assert_int_eq(f[1].depth, 1);
  while (child < n && !strcmp(f[child].e->text, "placement")) ck_assert_int_eq(f[child++].depth, 1);
  ck_assert_uint_eq(child - 1, ortep_session_graph_count(ortep_decoder_session(d)));
  ck_assert_str_eq(f[child].e->text, "memory planning");
  ck_assert_int_eq(f[child].depth, 1);
  ck_assert(has_event(NVTX_EV_DOMAIN, "ortep", NULL));
  ck_assert(has_event(NVTX_EV_CATEGORY, "memory", NULL));
  ck_assert(has_event(NVTX_EV_CATEGORY, "executor", NULL));
  ck_assert(has_event(NVTX_EV_CATEGORY, "decode", NULL));

  int32_t next;
  ck_assert_ok(ortep_decoder_step(d, 3, 0, &next)); /* captures, then replays */
  ck_assert_ok(ortep_decoder_step(d, next, 1, &next));
  ck_assert_ok(ortep_decoder_step(d, next, 2, &next));
  uint64_t tid;
  ck_assert(has_event(NVTX_EV_THREAD, "ortep-decode", &tid));
  n = flatten(f, 4096);
  /* find the three decode steps */
  size_t steps[3], ns = 0;
  for (size_t i = 0; i < n && ns < 3; i++)
    if (!strcmp(f[i].e->text, "decode step")) steps[ns++] = i;
  ck_assert_uint_eq(ns, 3);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(f[steps[k]].depth, 0);
    ck_assert_uint_eq(f[steps[k]].e->payload, (uint64_t)k); /* the position */
  }
  ortep_session_stats st;
  ortep_session_get_stats(ortep_decoder_session(d), &st);
  ck_assert_uint_eq(st.segments, 3);
  /* step 0: three "capture segment" ranges (index, node count), in order */
  size_t i = steps[0] + 1, captured_nodes = 0;
  for (uint64_t seg = 0; seg < 3; seg++, i++) {
    while (strcmp(f[i].e->text, "capture segment")) i++;
    ck_assert_int_eq(f[i].depth, 1);
    ck_assert_uint_eq(f[i].e->payload >> 32, seg);
    captured_nodes += f[i].e->payload & 0xffffffffu;
  }
  ck_assert_uint_eq(captured_nodes, st.kernels_per_step - 2);
  /* steps 1 and 2: exactly replay 0, seam, replay 1, seam, replay 2, sync */
  const char *want[] = {"replay segment", "GroupQueryAttention layers.0.attention",
                        "replay segment", "GroupQueryAttention layers.1.attention",
                        "replay segment", "sync"};
  for (int k = 1; k < 3; k++) {
    size_t at = steps[k] + 1, seg = 0, replayed = 0;
    for (int w = 0; w < 6; w++, at++) {
      ck_assert_msg(at < n && f[at].depth == 1 && !strcmp(f[at].e->text, want[w]),
                    "step %d child %d: '%s' (depth %d), want '%s'", k, w, at < n ? f[at].e->text : "(none)",
                    at < n ? f[at].depth : -1, want[w]);
      if (!strcmp(want[w], "replay segment")) {
        ck_assert_uint_eq(f[at].e->payload >> 32, seg++);
        replayed += f[at].e->payload & 0xffffffffu;
      }
    }
    ck_assert_uint_eq(replayed, st.kernels_per_step - 2);
    ck_assert_uint_eq(f[at - 1].e->payload, (uint64_t)k); /* sync carries the step number */
    ck_assert(k == 2 || !strcmp(f[at].e->text, "decode step"));
  }

  /* an error-word hit is a marker carrying the bits */
  ck_assert_status(ortep_decoder_step(d, 100000, 3, &next), ORTEP_E_DEVICE_VALIDATION);
  uint64_t bits;
  ck_assert(has_event(NVTX_EV_MARK, "error word hit", &bits));
  ck_assert_uint_eq(bits & ORTEP_ERROR_GATHER_INDEX, ORTEP_ERROR_GATHER_INDEX);
  /* reset: the graph is dropped (marker), the next step re-captures (marker) */
  ck_assert(has_event(NVTX_EV_MARK, "graph reset", NULL));
  ck_assert(!has_event(NVTX_EV_MARK, "recapture", NULL));
  ck_assert_ok(ortep_decoder_reset(d));
  ck_assert_ok(ortep_decoder_step(d, 3, 0, &next));
  ck_assert(has_event(NVTX_EV_MARK, "recapture", NULL));
  flatten(f, 4096);
  ortep_decoder_close(d);
  test_model_dir_remove(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, decode_in_graph_mode_with_a_forced_seam);
  suite_add_tcase(s, tc);
  return test_run(s);
}
