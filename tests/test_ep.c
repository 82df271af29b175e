/* test_ep.c: the EP contract: the dispatchers' defaults and their
 * messages, configuration namespaces, the registry; and the CPU EP's memory,
 * copies, fences, argmax, error word and recorded-plan device graphs. */
#include <math.h>

#include "testutil.h"

START_TEST(defaults_of_a_minimal_ep) {
  test_min_ep *m = test_min_ep_new(ortep_device_cpu());
  ortep_ep *ep = &m->base;
  ortep_ep_capabilities caps = ortep_ep_get_capabilities(ep);
  ck_assert(!caps.device_graphs && !caps.device_argmax && caps.host_accessible_memory);
  ortep_buffer res;
  ck_assert_ok(ortep_ep_allocate(ep, 8, 8, &res));
  float logits[2] = {1, 2};
  ck_assert_status(ortep_ep_device_argmax(ep, logits, 2, ORTEP_DTYPE_F32, &res), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("min_ep: device argmax is not supported");
  ck_assert_status(ortep_ep_begin_capture(ep), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("min_ep: device graph capture is not supported");
  ck_assert_status(ortep_ep_end_capture(ep), ORTEP_E_NOT_SUPPORTED);
  ck_assert_status(ortep_ep_replay(ep), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("min_ep: device graph replay is not supported");
  ck_assert_status(ortep_ep_replay_segment(ep, 0), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("min_ep: segmented device graph replay is not supported");
  ck_assert_ok(ortep_ep_abort_capture(ep)); /* nothing to abort */
  bool had = true;
  ck_assert_ok(ortep_ep_reset_graph(ep, &had));
  ck_assert(!had);
  uint32_t bits = 99;
  ck_assert_ok(ortep_ep_check_error_word(ep, &bits));
  ck_assert_uint_eq(bits, 0);
  ck_assert_ok(ortep_ep_reset_error_word(ep));
  ck_assert_ptr_null(ortep_ep_error_word_ptr(ep));
  uint64_t a, f;
  ck_assert(!ortep_ep_allocation_counts(ep, &a, &f));
  ck_assert_uint_eq(ortep_ep_context_source_keys(ep, NULL, 0), 0);
  size_t len;
  ck_assert_status(ortep_ep_save_context(ep, NULL, NULL, &len), ORTEP_E_NOT_SUPPORTED);
  ck_assert_status(ortep_ep_load_context(ep, "", 0), ORTEP_E_NOT_SUPPORTED);
  ck_assert_uint_eq(ortep_ep_segment_count(ep), 0);
  ck_assert(!ortep_ep_capture_active(ep));
  ck_assert_ok(ortep_ep_deallocate(ep, &res));
  ck_assert_ptr_null(res.ptr); /* consumed */
  ortep_ep_destroy(ep);
}
END_TEST

/* An EP that quantizes without changing the shape writes only *dtype: the
 * dispatcher hands it init's shape, so the session never sees an unset one
 * (the CUDA EP's q8_0 path once left a session with garbage shapes). The
 * device is one the host cannot read, as a GPU's. */
static ortep_status keep_shape_prepare(ortep_ep *ep, const ortep_initializer *in, ortep_dtype *dtype,
                                       ortep_shape *shape, ortep_buffer *out) {
  (void)shape;
  *dtype = ORTEP_DTYPE_Q8_0;
  return ep->vtable->allocate(ep, (size_t)in->shape.dims[0] * (size_t)in->shape.dims[1] / 32 * 34, 256, out);
}

START_TEST(prepare_initializer_keeps_the_shape_unless_the_ep_changes_it) {
  test_min_ep *m = test_min_ep_new((ortep_device){ORTEP_DEVICE_CUDA, 0});
  ortep_ep_vtable vt = test_min_ep_vtable;
  vt.prepare_initializer = keep_shape_prepare;
  m->base.vtable = &vt;
  ortep_ep *ep = &m->base;
  static float w[4 * 64];
  ortep_initializer in = {.name = "w", .dtype = ORTEP_DTYPE_F32, .shape = SHAPE(4, 64), .data = w, .bytes = sizeof w};
  ortep_dtype dt;
  ortep_shape sh;
  memset(&sh, 0x5a, sizeof sh); /* what an uninitialised local may hold */
  ortep_buffer b;
  ck_assert_ok(ortep_ep_prepare_initializer(ep, &in, &dt, &sh, &b));
  ck_assert_int_eq(dt, ORTEP_DTYPE_Q8_0);
  ck_assert(ortep_shape_equal(&sh, &in.shape));
  ck_assert_ok(ortep_ep_deallocate(ep, &b));
  ck_assert_uint_eq(m->allocs, m->frees);
  ortep_ep_destroy(ep);
}
END_TEST

START_TEST(default_host_copies_check_bounds) {
  test_min_ep *m = test_min_ep_new(ortep_device_cpu());
  ortep_ep *ep = &m->base;
  ortep_buffer dst;
  ck_assert_ok(ortep_ep_allocate(ep, 64, 16, &dst));
  unsigned char src[100];
  memset(src, 0x5a, sizeof src);
  ck_assert_status(ortep_ep_copy_from_host(ep, src, 100, &dst), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("min_ep: host upload of 100 bytes exceeds destination 64 bytes");
  ck_assert_ok(ortep_ep_copy_from_host(ep, src, 64, &dst));
  ck_assert_ok(ortep_ep_copy_from_host(ep, NULL, 0, &dst)); /* empty is fine */
  ck_assert_status(ortep_ep_copy_from_host_at(ep, src, 10, &dst, 60), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("host upload range 60..70 exceeds destination 64 bytes");
  ck_assert_status(ortep_ep_copy_from_host_at(ep, src, 10, &dst, SIZE_MAX - 3), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("host upload range overflows");
  ck_assert_ok(ortep_ep_copy_from_host_at(ep, (unsigned char[]){1, 2}, 2, &dst, 62));
  unsigned char back[64];
  ck_assert_status(ortep_ep_copy_to_host(ep, &dst, back, 65), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("host download of 65 bytes exceeds source 64 bytes");
  ck_assert_ok(ortep_ep_copy_to_host(ep, &dst, back, 64));
  ck_assert_int_eq(back[0], 0x5a);
  ck_assert_int_eq(back[62], 1);
  ck_assert_int_eq(back[63], 2);
  ck_assert_ok(ortep_ep_deallocate(ep, &dst));
  ortep_ep_destroy(ep);

  /* A device the host cannot reach: the defaults refuse, naming it. */
  test_min_ep *d = test_min_ep_new(ortep_device_cuda(0));
  ep = &d->base;
  ck_assert_ok(ortep_ep_allocate(ep, 64, 16, &dst));
  ck_assert_status(ortep_ep_copy_from_host(ep, src, 8, &dst), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("min_ep: host upload is not implemented for device cuda:0");
  ck_assert_status(ortep_ep_copy_from_host_at(ep, src, 8, &dst, 0), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("ranged host upload is not implemented for device cuda:0");
  ck_assert_status(ortep_ep_copy_to_host(ep, &dst, back, 8), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("host download is not implemented for device cuda:0");
  ck_assert_ok(ortep_ep_deallocate(ep, &dst));
  ortep_ep_destroy(ep);
}
END_TEST

START_TEST(unsupported_reasons_are_never_empty) {
  test_min_ep *m = test_min_ep_new(ortep_device_cpu());
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ck_assert_ok(ortep_graph_add_node(g, "Relu", "", "r", (const char *[]){"x"}, 1, (const char *[]){"y"}, 1, NULL));
  ortep_kernel_match km;
  ortep_shape s = SHAPE(4);
  ortep_dtype d = ORTEP_DTYPE_F32;
  ortep_ep_supports_op(&m->base, ortep_graph_node(g, 0), 17, &s, &d, 1, &km);
  ck_assert(!km.supported);
  ck_assert_msg(strstr(km.reason, "min_ep declined it without a reason"), "%s", km.reason);
  ortep_graph_destroy(g);
  ortep_ep_destroy(&m->base);
}
END_TEST

START_TEST(configuration_namespaces) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_status(ortep_config_set(c, "threads", "4"), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not namespaced");
  ck_assert_ok(ortep_config_set(c, "cpu.threads", "2"));
  ck_assert_ok(ortep_config_set(c, "cuda.device_id", "0")); /* another EP's business */
  ck_assert_ok(ortep_config_set(c, "cpu.threads", "1"));
  ck_assert_str_eq(ortep_config_get(c, "cpu.threads"), "1");
  ck_assert_uint_eq(ortep_config_count(c), 2);
  ortep_ep *cpu;
  ck_assert_ok(ortep_cpu_ep_create(NULL, &cpu));
  ck_assert_ok(ortep_ep_initialize(cpu, c));
  ck_assert_ok(ortep_config_set(c, "cpu.threds", "1"));
  ck_assert_status(ortep_ep_initialize(cpu, c), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("unknown option 'cpu.threds' for the cpu EP; known options: cpu.threads");
  ortep_config_destroy(c);
  ck_assert_ok(ortep_config_create(&c));
  ck_assert_ok(ortep_config_set(c, "cpu.threads", "many"));
  ck_assert_status(ortep_ep_initialize(cpu, c), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("cpu.threads = 'many'");
  ortep_config_destroy(c);
  ortep_ep_destroy(cpu);
  /* cpu.products: auto, bf16 (where the CPU has AVX512-BF16) or f32 */
  bool can = false;
  const char *products[] = {"auto", "f32", "bf16", "fast"};
  for (int i = 0; i < 4; i++) {
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, "cpu.products", products[i]));
    ck_assert_ok(ortep_cpu_ep_create(NULL, &cpu));
    ortep_status st = ortep_ep_initialize(cpu, c);
    if (i == 3 || (i == 2 && !can)) {
      ck_assert_status(st, i == 3 ? ORTEP_E_INVALID_ARGUMENT : ORTEP_E_NOT_SUPPORTED);
      ck_assert_error_mentions(i == 3 ? "cpu.products = 'fast': use auto" : "use auto or f32");
    } else {
      ck_assert_ok(st);
      if (i == 0) can = ortep_cpu_ep_bf16_products(cpu);
      ck_assert(ortep_cpu_ep_bf16_products(cpu) == (i == 0 ? can : i == 2));
    }
    ortep_ep_destroy(cpu);
    ortep_config_destroy(c);
  }
  /* an uninitialised EP refuses to allocate */
  ck_assert_ok(ortep_cpu_ep_create(NULL, &cpu));
  ortep_buffer b;
  ck_assert_status(ortep_ep_allocate(cpu, 8, 8, &b), ORTEP_E_STATE);
  ck_assert_error_mentions("initialise the EP first");
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(registry) {
  ortep_ep_registry *r;
  ck_assert_ok(ortep_ep_registry_create(&r));
  ortep_ep *cpu = test_cpu_ep();
  uint32_t id;
  ck_assert_ok(ortep_ep_registry_add(r, cpu, &id));
  ck_assert_uint_eq(id, 0);
  ck_assert_ok(ortep_ep_registry_add(r, &test_min_ep_new(ortep_device_cuda(0))->base, &id));
  ck_assert_uint_eq(id, 1);
  ck_assert_status(ortep_ep_registry_add(r, test_cpu_ep(), &id), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("already registered");
  ck_assert_uint_eq(ortep_ep_registry_count(r), 2);
  ck_assert_ptr_eq(ortep_ep_registry_find(r, "cpu_ep"), cpu);
  ck_assert_ptr_null(ortep_ep_registry_find(r, "tpu_ep"));
  ck_assert_uint_eq(ortep_ep_id(ortep_ep_registry_get(r, 1)), 1);
  ck_assert_ptr_null(ortep_ep_registry_get(r, 2));
  ortep_ep_registry_destroy(r); /* destroys both EPs */
}
END_TEST

START_TEST(cpu_memory_counters_and_ownership) {
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ck_assert_ok(ortep_governor_set_budget(g, ORTEP_TIER_HOST, 4096));
  ortep_ep *cpu;
  ck_assert_ok(ortep_cpu_ep_create(g, &cpu));
  ck_assert_ok(ortep_ep_initialize(cpu, NULL));
  ortep_buffer a, b;
  ck_assert_ok(ortep_ep_allocate(cpu, 1000, 64, &a));
  ck_assert_uint_eq((uintptr_t)a.ptr % 64, 0);
  ck_assert_status(ortep_ep_allocate(cpu, 5000, 64, &b), ORTEP_E_BUDGET_EXCEEDED);
  ck_assert_status(ortep_ep_allocate(cpu, 10, 3, &b), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("power of two");
  /* a buffer of another device is refused */
  ortep_buffer foreign = a;
  foreign.device = ortep_device_cuda(0);
  ck_assert_status(ortep_ep_deallocate(cpu, &foreign), ORTEP_E_WRONG_DEVICE);
  ck_assert_error_mentions("lives on cuda:0 but this EP is on cpu:0");
  /* a borrowed buffer is a no-op free */
  char mine[16];
  ortep_buffer borrowed;
  ck_assert_ok(ortep_buffer_wrap_borrowed(mine, ortep_device_cpu(), 16, 1, &borrowed));
  ck_assert_ok(ortep_ep_deallocate(cpu, &borrowed));
  uint64_t allocs, frees;
  ck_assert(ortep_ep_allocation_counts(cpu, &allocs, &frees));
  ck_assert_uint_eq(allocs, 1);
  ck_assert_uint_eq(frees, 0);
  ortep_mem_stats st;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &st);
  ck_assert_uint_eq(st.current_bytes, 1000);
  ck_assert_ok(ortep_ep_deallocate(cpu, &a));
  ck_assert(ortep_ep_allocation_counts(cpu, &allocs, &frees));
  ck_assert_uint_eq(frees, 1);
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &st);
  ck_assert_uint_eq(st.current_bytes, 0);
  ortep_ep_destroy(cpu);
  ortep_governor_destroy(g);
}
END_TEST

START_TEST(cpu_copies_and_fences) {
  ortep_ep *cpu = test_cpu_ep();
  ortep_buffer a, b;
  ck_assert_ok(ortep_ep_allocate(cpu, 32, 16, &a));
  ck_assert_ok(ortep_ep_allocate(cpu, 16, 16, &b));
  ck_assert_ok(ortep_ep_copy_from_host(cpu, "0123456789abcdefghijklmnopqrstu", 32, &a));
  ck_assert_status(ortep_ep_copy(cpu, &a, &b, 32), ORTEP_E_OUT_OF_RANGE);
  ck_assert_error_mentions("exceeds the destination");
  ck_assert_ok(ortep_ep_copy(cpu, &a, &b, 16));
  ortep_fence f;
  ck_assert_ok(ortep_ep_copy_async(cpu, &a, &b, 8, &f));
  ck_assert_uint_gt(f.id, 0);
  ck_assert_ok(ortep_ep_fence_wait(cpu, &f));
  char out[16];
  ck_assert_ok(ortep_ep_copy_to_host(cpu, &b, out, 16));
  ck_assert_mem_eq(out, "0123456789abcdef", 16);
  ck_assert_ok(ortep_ep_copy_to_host_at(cpu, &a, 29, out, 2));
  ck_assert_mem_eq(out, "tu", 2);
  ck_assert_ok(ortep_ep_sync(cpu));
  ck_assert_ok(ortep_ep_deallocate(cpu, &a));
  ck_assert_ok(ortep_ep_deallocate(cpu, &b));
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(device_argmax_ties_nan_and_f16) {
  ortep_ep *cpu = test_cpu_ep();
  ortep_buffer res;
  ck_assert_ok(ortep_ep_allocate(cpu, 8, 8, &res));
  uint32_t out[2];
  float ties[] = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  ck_assert_ok(ortep_ep_device_argmax(cpu, ties, 5, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 1); /* the first maximum wins */
  ck_assert_uint_eq(out[1], 0);
  /* Any non-finite logit (NaN, +Inf, -Inf) latches the bit in the same pass;
   * the token is the first maximum among the finite values (0 when none). */
  float nans[] = {NAN, 2.0f, NAN, 5.0f, NAN};
  ck_assert_ok(ortep_ep_device_argmax(cpu, nans, 5, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 3);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  float negs[] = {-INFINITY, -5.0f, -INFINITY};
  ck_assert_ok(ortep_ep_device_argmax(cpu, negs, 3, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 1);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  float pinf[] = {1.0f, INFINITY, 4.0f};
  ck_assert_ok(ortep_ep_device_argmax(cpu, pinf, 3, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 2);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  uint16_t h[4] = {ortep_f32_to_f16(0.5f), ortep_f32_to_f16(NAN), ortep_f32_to_f16(7.0f), ortep_f32_to_f16(7.0f)};
  ck_assert_ok(ortep_ep_device_argmax(cpu, h, 4, ORTEP_DTYPE_F16, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 2);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  uint16_t hinf[2] = {ortep_f32_to_f16(1.0f), ortep_f32_to_f16(1e6f) /* overflows to +Inf */};
  ck_assert_ok(ortep_ep_device_argmax(cpu, hinf, 2, ORTEP_DTYPE_F16, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 0);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  /* all NaN: token 0 and the bit, read with the token */
  float all_nan[] = {NAN, NAN};
  ck_assert_ok(ortep_ep_device_argmax(cpu, all_nan, 2, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[0], 0);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  /* the word latches until reset */
  ck_assert_ok(ortep_ep_device_argmax(cpu, ties, 5, ORTEP_DTYPE_F32, &res));
  memcpy(out, res.ptr, 8);
  ck_assert_uint_eq(out[1], ORTEP_ERROR_ARGMAX_NOT_FINITE);
  uint32_t bits;
  ck_assert_ok(ortep_ep_check_error_word(cpu, &bits));
  ck_assert_uint_eq(bits, ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_check_error_word(cpu, &bits)); /* reading does not clear */
  ck_assert_uint_eq(bits, ORTEP_ERROR_ARGMAX_NOT_FINITE);
  ck_assert_ok(ortep_ep_reset_error_word(cpu));
  ck_assert_ok(ortep_ep_check_error_word(cpu, &bits));
  ck_assert_uint_eq(bits, 0);
  ck_assert_status(ortep_ep_device_argmax(cpu, ties, 5, ORTEP_DTYPE_BF16, &res), ORTEP_E_NOT_SUPPORTED);
  ck_assert_error_mentions("f32 or f16");
  ortep_buffer small;
  ck_assert_ok(ortep_ep_allocate(cpu, 4, 4, &small));
  ck_assert_status(ortep_ep_device_argmax(cpu, ties, 5, ORTEP_DTYPE_F32, &small), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("8-byte result");
  ck_assert_ok(ortep_ep_deallocate(cpu, &small));
  ck_assert_ok(ortep_ep_deallocate(cpu, &res));
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(error_word_descriptions) {
  char buf[512];
  ck_assert_str_eq(ortep_error_word_describe(0, buf, sizeof buf), "none");
  ortep_error_word_describe(ORTEP_ERROR_GATHER_INDEX | ORTEP_ERROR_KV_SLOT | (1u << 20), buf, sizeof buf);
  ck_assert_msg(strstr(buf, "GATHER_INDEX (a gather index (token id) was outside the embedding table)") &&
                    strstr(buf, "KV_SLOT") && strstr(buf, "bit 20 (unknown)"),
                "%s", buf);
  ck_assert_str_eq(ortep_error_bit_name(ORTEP_ERROR_ROTARY_POSITION), "ROTARY_POSITION");
  ck_assert_ptr_null(ortep_error_bit_name(1u << 30));
}
END_TEST

/* Record Sigmoid then Add as one segment, replay, compare with eager. */
START_TEST(cpu_recorded_plan_capture_replay_abort) {
  ortep_ep *cpu = test_cpu_ep();
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "s", (const char *[]){"x"}, 1, (const char *[]){"y"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Add", "", "a", (const char *[]){"y", "x"}, 2, (const char *[]){"z"}, 1, NULL));
  ortep_shape s = SHAPE(4);
  ortep_shape ss[2] = {s, s};
  ortep_dtype dd[2] = {ORTEP_DTYPE_F32, ORTEP_DTYPE_F32};
  ortep_kernel *ks, *ka;
  ck_assert_ok(ortep_ep_get_kernel(cpu, ortep_graph_node(g, 0), ss, dd, 1, 17, &ks));
  ck_assert_ok(ortep_ep_get_kernel(cpu, ortep_graph_node(g, 1), ss, dd, 2, 17, &ka));
  ck_assert(ortep_kernel_is_capturable(ks));
  ck_assert_str_eq(ortep_kernel_name(ka), "cpu.Add");
  float x[4] = {-1, 0, 1, 2}, y[4], z[4], z_eager[4];
  ortep_kernel_io io_s = {(const void *[]){x}, 1, (void *[]){y}, 1, ortep_ep_error_word_ptr(cpu), NULL};
  ortep_kernel_io io_a = {(const void *[]){y, x}, 2, (void *[]){z}, 1, ortep_ep_error_word_ptr(cpu), NULL};
  ck_assert_ok(ortep_ep_run_kernel(cpu, ks, &io_s));
  ck_assert_ok(ortep_ep_run_kernel(cpu, ka, &io_a));
  memcpy(z_eager, z, sizeof z);
  memset(z, 0, sizeof z);
  ck_assert_ok(ortep_ep_begin_capture(cpu));
  ck_assert(ortep_ep_capture_active(cpu));
  ck_assert_status(ortep_ep_begin_capture(cpu), ORTEP_E_CAPTURE_ACTIVE);
  ortep_buffer nope;
  ck_assert_status(ortep_ep_allocate(cpu, 64, 8, &nope), ORTEP_E_CAPTURE_ACTIVE);
  ck_assert_error_mentions("carve from the arena before capture");
  ck_assert_ok(ortep_ep_run_kernel(cpu, ks, &io_s));
  ck_assert_ok(ortep_ep_run_kernel(cpu, ka, &io_a));
  for (int i = 0; i < 4; i++) ck_assert_float_eq(z[i], 0); /* recorded, not run */
  ck_assert_ok(ortep_ep_end_capture(cpu));
  ck_assert_uint_eq(ortep_ep_segment_count(cpu), 1);
  ck_assert_ok(ortep_ep_replay(cpu));
  ck_assert_mem_eq(z, z_eager, sizeof z); /* bitwise the same */
  /* new input values at the same address flow through a replay */
  x[0] = 5;
  ck_assert_ok(ortep_ep_replay_segment(cpu, 0));
  ck_assert_float_eq_tol(z[0], 5.0f + 1.0f / (1.0f + expf(-5.0f)), 1e-6f);
  ck_assert_status(ortep_ep_replay_segment(cpu, 1), ORTEP_E_OUT_OF_RANGE);
  /* abort leaves the EP idle and the installed segments intact */
  ck_assert_ok(ortep_ep_begin_capture(cpu));
  ck_assert_ok(ortep_ep_run_kernel(cpu, ks, &io_s));
  ck_assert_ok(ortep_ep_abort_capture(cpu));
  ck_assert(!ortep_ep_capture_active(cpu));
  ck_assert_uint_eq(ortep_ep_segment_count(cpu), 1);
  /* recording validates bindings */
  ortep_kernel_io unbound = {(const void *[]){x}, 1, (void *[]){NULL}, 1, NULL, NULL};
  ck_assert_ok(ortep_ep_begin_capture(cpu));
  ck_assert_status(ortep_ep_run_kernel(cpu, ks, &unbound), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("recording cpu.Sigmoid failed");
  ck_assert_ok(ortep_ep_abort_capture(cpu));
  bool had;
  ck_assert_ok(ortep_ep_reset_graph(cpu, &had));
  ck_assert(had);
  ck_assert_uint_eq(ortep_ep_segment_count(cpu), 0);
  ck_assert_status(ortep_ep_replay(cpu), ORTEP_E_STATE);
  ortep_kernel_destroy(ks);
  ortep_kernel_destroy(ka);
  ortep_graph_destroy(g);
  ortep_ep_destroy(cpu);
}
END_TEST

/* The CPU argmax over long rows (the AVX-512 or AVX2 loop where the CPU has
 * it, 16 or 8 values a lane-wise step, ranges split over the EP's threads) against
 * the rule read plainly: the first maximum among the finite values (0 when
 * none), any NaN or infinity flagged. Values drawn from a few integers so
 * ties fall within and across lanes and ranges; some rows with NaN and
 * infinities, one of only signed zeros, one all non-finite; f32 and f16;
 * lengths around the 16-value step and a vocabulary's. */
static void argmax_rule(const float *x, size_t n, uint32_t out[2]) {
  size_t best = n;
  bool bad = false;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) {
      bad = true;
      continue;
    }
    if (best == n || x[i] > x[best]) best = i;
  }
  out[0] = best == n ? 0 : (uint32_t)best, out[1] = bad ? ORTEP_ERROR_ARGMAX_NOT_FINITE : 0;
}
START_TEST(device_argmax_long_rows_follow_the_rule) {
  ortep_ep *cpu = test_cpu_ep();
  ortep_buffer res;
  ck_assert_ok(ortep_ep_allocate(cpu, 8, 8, &res));
  static const size_t ns[] = {1, 15, 16, 17, 31, 32, 33, 100, 1000, 4099, 151936};
  enum { NMAX = 151936 };
  float *x = malloc(NMAX * sizeof *x), *xh = malloc(NMAX * sizeof *xh);
  uint16_t *h = malloc(NMAX * sizeof *h);
  ck_assert(x && xh && h);
  test_rng r = test_rng_new(test_seed() + 29);
  for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
    for (int kind = 0; kind < 5; kind++) { /* plain, with non-finite values, signed zeros, all non-finite, negative */
      size_t n = ns[ni];
      for (size_t i = 0; i < n; i++) {
        uint64_t u = test_rng_next(&r);
        x[i] = (float)(u % 7) - 3.0f;
        if (kind == 1 && u % 97 == 0) x[i] = (u >> 8) % 3 == 0 ? NAN : (u >> 8) % 3 == 1 ? INFINITY : -INFINITY;
        if (kind == 2) x[i] = u % 2 ? 0.0f : -0.0f;
        if (kind == 3) x[i] = u % 2 ? NAN : -INFINITY;
        if (kind == 4) x[i] = -(float)(u % 5) - 1.0f;
      }
      for (size_t i = 0; i < n; i++) h[i] = ortep_f32_to_f16(x[i]), xh[i] = ortep_f16_to_f32(h[i]);
      for (int f16 = 0; f16 < 2; f16++) {
        uint32_t want[2], got[2];
        argmax_rule(f16 ? xh : x, n, want);
        ck_assert_ok(
            ortep_ep_device_argmax(cpu, f16 ? (const void *)h : x, n, f16 ? ORTEP_DTYPE_F16 : ORTEP_DTYPE_F32, &res));
        memcpy(got, res.ptr, 8);
        ck_assert_msg(got[0] == want[0] && got[1] == want[1],
                      "%s n %zu kind %d: token %u bits %u, the rule gives %u %u", f16 ? "f16" : "f32", n, kind, got[0],
                      got[1], want[0], want[1]);
        ck_assert_ok(ortep_ep_reset_error_word(cpu));
      }
    }
  free(x), free(xh), free(h);
  ck_assert_ok(ortep_ep_deallocate(cpu, &res));
  ortep_ep_destroy(cpu);
}
END_TEST

int main(void) {
  if (test_simd_set_missing()) return 77; /* ctest's *_simd runs on a CPU without the set */
  Suite *s = suite_create("ep");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, defaults_of_a_minimal_ep);
  tcase_add_test(tc, prepare_initializer_keeps_the_shape_unless_the_ep_changes_it);
  tcase_add_test(tc, default_host_copies_check_bounds);
  tcase_add_test(tc, unsupported_reasons_are_never_empty);
  tcase_add_test(tc, configuration_namespaces);
  tcase_add_test(tc, registry);
  tcase_add_test(tc, cpu_memory_counters_and_ownership);
  tcase_add_test(tc, cpu_copies_and_fences);
  tcase_add_test(tc, device_argmax_ties_nan_and_f16);
  tcase_add_test(tc, error_word_descriptions);
  tcase_add_test(tc, cpu_recorded_plan_capture_replay_abort);
  suite_add_tcase(s, tc);
  TCase *am = tcase_create("argmax");
  tcase_add_test(am, device_argmax_long_rows_follow_the_rule);
  suite_add_tcase(s, am);
  return test_run(s);
}
