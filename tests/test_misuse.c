/* test_misuse.c: the public entry points of every module (allocators,
 * governor, arena, slab, planner, buffers, tensors, EPs, config, graphs,
 * sessions, models, decoders, tokenizers) called with NULL, zero, huge and
 * mismatched arguments, from a table (one or more calls per entry point that
 * takes a pointer or a size, not every one of the API's functions). Each call must return a clear error
 * status with a message (or, for the calls documented to accept it, do
 * nothing) and never crash. ASan and UBSan check the "never crash" part. */
#include "testutil.h"

typedef struct env {
  ortep_ep *cpu, *other;
  ortep_allocator *host;
  ortep_governor *gov;
  ortep_graph *graph;
  ortep_tensor *f32, *borrowed;
  ortep_buffer owned, borrowed_buf;
  unsigned char bytes[64];
} env;

typedef struct misuse {
  const char *what;
  ortep_status (*call)(env *);
} misuse;

#define M(name, ...)                 \
  static ortep_status name(env *e) { \
    (void)e;                         \
    __VA_ARGS__                      \
  }

M(alloc_null_out, return ortep_allocator_allocate(e->host, 8, 8, NULL);)
M(alloc_null_allocator, void *p; return ortep_allocator_allocate(NULL, 8, 8, &p);)
M(alloc_huge, void *p; return ortep_allocator_allocate(e->host, SIZE_MAX, 64, &p);)
M(alloc_align_zero, void *p; return ortep_allocator_allocate(e->host, 8, 0, &p);)
M(alloc_align_odd, void *p; return ortep_allocator_allocate(e->host, 8, 48, &p);)
M(host_create_null, return ortep_host_allocator_create(NULL, NULL);)
M(fault_create_null_inner, ortep_allocator *a; return ortep_fault_allocator_create(NULL, &a);)
M(stats_null, return ortep_allocator_get_stats(e->host, NULL);)
M(gov_charge_bad_tier, return ortep_governor_charge(e->gov, (ortep_tier)99, 1);)
M(gov_refund_too_much, return ortep_governor_refund(e->gov, ORTEP_TIER_DISK, 1);)
M(gov_configure_null, return ortep_governor_configure(e->gov, NULL, "1");)
M(gov_configure_bad, return ortep_governor_configure(e->gov, "ortep.host.budget_bytes", "-5");)
M(arena_null_backing, ortep_arena *a; return ortep_arena_create(NULL, NULL, &a);)
M(arena_bad_chunk_align, ortep_arena *a;
  return ortep_arena_create(e->host, &(ortep_arena_options){.chunk_align = 100}, &a);)
M(arena_alloc_null, void *p; return ortep_arena_alloc(NULL, 8, 8, &p);)
M(planned_huge, ortep_arena *a; return ortep_arena_create_planned(e->host, SIZE_MAX - 2, 256, &a);)
M(slab_zero_size, ortep_slab *s; return ortep_slab_create(e->host, 0, 8, 4, &s);)
M(slab_free_null, return ortep_slab_free(NULL, e->bytes);)
M(plan_null_summary, return ortep_plan_memory(NULL, 0, NULL, NULL);)
M(plan_verify_null_offsets, ortep_plan_tensor t = {8, 8, 0, 1}; return ortep_plan_verify(&t, 1, NULL, 8);)
M(buffer_null, ortep_buffer b; return ortep_buffer_wrap_owned(NULL, ortep_device_cpu(), 8, 8, &b);)
M(buffer_misaligned, ortep_buffer b; return ortep_buffer_wrap_owned(e->bytes + 1, ortep_device_cpu(), 8, 8, &b);)
M(shape_rank_9, ortep_shape s; int64_t d[9] = {1}; return ortep_shape_make(d, 9, &s);)
M(shape_negative, ortep_shape s; int64_t d[1] = {-7}; return ortep_shape_make(d, 1, &s);)
M(dtype_unknown, ortep_dtype d; return ortep_dtype_parse("complex128", &d);)
M(tensor_no_ep, ortep_tensor *t; ortep_shape s = {1, {4}};
  return ortep_tensor_create(NULL, ORTEP_DTYPE_F32, &s, true, &t);)
M(tensor_bad_dtype, ortep_tensor *t; ortep_shape s = {1, {4}};
  return ortep_tensor_create(e->cpu, (ortep_dtype)42, &s, true, &t);)
M(tensor_huge, ortep_tensor *t; ortep_shape s = {2, {INT64_MAX / 2, 4}};
  return ortep_tensor_create(e->cpu, ORTEP_DTYPE_F32, &s, false, &t);)
M(tensor_view_past_end, ortep_tensor *t; return ortep_tensor_view(e->f32, 8, 64, &t);)
M(tensor_view_overflow, ortep_tensor *t; return ortep_tensor_view(e->f32, SIZE_MAX - 3, 8, &t);)
M(tensor_view_as_past_end, ortep_tensor *t; ortep_shape s = {1, {100}};
  return ortep_tensor_view_as(e->f32, 0, ORTEP_DTYPE_F32, &s, &t);)
M(tensor_wrong_dtype, const void *p; return ortep_tensor_host_data(e->f32, ORTEP_DTYPE_I64, &p);)
M(tensor_item_many, float f; return ortep_tensor_item(e->f32, ORTEP_DTYPE_F32, &f);)
M(tensor_copyin_short, return ortep_tensor_copyin(e->f32, e->bytes, 3);)
M(tensor_copyin_null, return ortep_tensor_copyin(e->f32, NULL, 64);)
M(tensor_copyout_short, return ortep_tensor_copyout(e->f32, e->bytes, 1);)
M(tensor_write_borrowed, return ortep_tensor_copyin(e->borrowed, e->bytes, 64);)
M(tensor_copy_from_mismatch, return ortep_tensor_copy_from(e->borrowed, e->f32);)
M(tensor_from_owned, ortep_tensor *t; ortep_shape s = {1, {2}};
  return ortep_tensor_from_borrowed(e->cpu, ORTEP_DTYPE_F32, &s, &e->owned, &t);)
M(ep_free_foreign, ortep_buffer b = e->owned; b.device = ortep_device_cuda(3); return ortep_ep_deallocate(e->cpu, &b);)
M(ep_wrong_ep_buffer, ortep_buffer b = e->owned; b.device = ortep_device_cuda(0);
  return ortep_ep_copy(e->other, &e->owned, &b, 8);)
M(ep_copy_past_end, ortep_buffer b = e->owned; return ortep_ep_copy(e->cpu, &e->owned, &b, 1000);)
M(ep_copy_into_borrowed, return ortep_ep_copy(e->cpu, &e->owned, &e->borrowed_buf, 8);)
M(ep_upload_past_end, return ortep_ep_copy_from_host(e->cpu, e->bytes, 65, &e->owned);)
M(ep_download_past_end, return ortep_ep_copy_to_host_at(e->cpu, &e->owned, 60, e->bytes, 8);)
M(ep_argmax_zero, return ortep_ep_device_argmax(e->cpu, e->bytes, 0, ORTEP_DTYPE_F32, &e->owned);)
M(ep_argmax_i32, return ortep_ep_device_argmax(e->cpu, e->bytes, 4, ORTEP_DTYPE_I32, &e->owned);)
M(ep_argmax_borrowed_result, return ortep_ep_device_argmax(e->cpu, e->bytes, 4, ORTEP_DTYPE_F32, &e->borrowed_buf);)
M(ep_alloc_null_ep, ortep_buffer b; return ortep_ep_allocate(NULL, 8, 8, &b);)
M(ep_alloc_bad_align, ortep_buffer b; return ortep_ep_allocate(e->cpu, 8, 3, &b);)
M(ep_end_without_begin, return ortep_ep_end_capture(e->cpu);)
M(ep_replay_nothing, return ortep_ep_replay(e->cpu);)
M(ep_replay_segment_missing, return ortep_ep_replay_segment(e->cpu, 7);)
M(ep_get_kernel_null, ortep_kernel *k; return ortep_ep_get_kernel(e->cpu, NULL, NULL, NULL, 0, 17, &k);)
M(ep_check_null, return ortep_ep_check_error_word(e->cpu, NULL);)
M(config_null, return ortep_config_set(NULL, "a.b", "c");)
M(config_no_namespace, ortep_config *c; ortep_config_create(&c); ortep_status s = ortep_config_set(c, "flat", "1");
  ortep_config_destroy(c); return s;)
M(registry_null_ep, ortep_ep_registry *r; ortep_ep_registry_create(&r);
  ortep_status s = ortep_ep_registry_add(r, NULL, NULL); ortep_ep_registry_destroy(r); return s;)
M(graph_node_no_op, return ortep_graph_add_node(e->graph, "", NULL, NULL, NULL, 0, (const char *[]){"y"}, 1, NULL);)
M(graph_node_null_inputs,
  return ortep_graph_add_node(e->graph, "Add", NULL, NULL, NULL, 2, (const char *[]){"y"}, 1, NULL);)
M(graph_attr_bad_node, return ortep_graph_set_attr_int(e->graph, 999, "axis", 0);)
M(graph_value_bad_dtype, ortep_shape s = {0}; return ortep_graph_add_value(e->graph, "v", (ortep_dtype)77, &s);)
M(graph_init_null, return ortep_graph_add_initializer(e->graph, "w", NULL);)
M(graph_opset_zero, return ortep_graph_set_opset(e->graph, "", 0);)
M(graph_value_unknown, ortep_dtype d; return ortep_graph_value_info(e->graph, "nope", &d, NULL);)
M(session_null_graph, ortep_session *s; ortep_ep_registry * r; ortep_ep_registry_create(&r);
  ortep_status st = ortep_session_create(NULL, r, NULL, &s); ortep_ep_registry_destroy(r); return st;)
M(session_run_null, return ortep_session_run(NULL);)
M(session_write_null, return ortep_session_write(NULL, "x", e->bytes, 4);)
M(safetensors_null, ortep_safetensors *s; return ortep_safetensors_parse(NULL, 10, &s);)
M(safetensors_dir, ortep_safetensors *s; return ortep_safetensors_open("/tmp", &s);)
M(config_parse_null, ortep_model_config c; return ortep_model_config_parse(NULL, 0, &c);)
M(config_parse_empty, ortep_model_config c; return ortep_model_config_parse("", 0, &c);)
M(model_null, ortep_model *m; return ortep_model_open(NULL, &m);)
M(synthetic_bad_dtype, return ortep_model_write_synthetic("/tmp/ortep-misuse-never", "tiny", ORTEP_DTYPE_I32, 1);)
M(decoder_null_dir, ortep_decoder *d; return ortep_decoder_open(NULL, NULL, &d);)
M(decoder_step_null, int32_t t; return ortep_decoder_step(NULL, 1, 0, &t);)
M(decoder_prefill_null, return ortep_decoder_prefill(NULL, NULL, 1, NULL);)
M(decoder_generate_null, return ortep_decoder_generate(NULL, 1, NULL, NULL, NULL);)
M(decoder_logits_null, return ortep_decoder_logits(NULL, NULL, 1);)
M(replace_hooks_null, return ortep_replace_allocator(NULL, NULL, NULL, NULL);)
M(tokenizer_open_null, ortep_tokenizer *t; return ortep_tokenizer_open(NULL, &t);)
M(tokenizer_open_dir, ortep_tokenizer *t; return ortep_tokenizer_open("/nonexistent-ortep", &t);)
M(tokenizer_open_json_null, ortep_tokenizer *t; return ortep_tokenizer_open_json(NULL, 5, &t);)
M(tokenizer_open_json_garbage, ortep_tokenizer *t; return ortep_tokenizer_open_json("{]", 2, &t);)
M(tokenizer_vocab_null_out, return ortep_tokenizer_open_for_vocab("/tmp", 10, NULL);)
M(tokenizer_encode_null, int32_t *ids; size_t n; return ortep_tokenizer_encode(NULL, "a", 1, true, &ids, &n);)
M(tokenizer_decode_null, char *t; size_t n; return ortep_tokenizer_decode(NULL, NULL, 0, false, &t, &n);)
M(tokenizer_token_id_null, int32_t id; return ortep_tokenizer_token_id(NULL, "a", &id);)
M(detokenizer_create_null, ortep_detokenizer *d; return ortep_detokenizer_create(NULL, false, &d);)
M(detokenizer_push_null, const char *t; size_t n; return ortep_detokenizer_push(NULL, 1, &t, &n);)
M(detokenizer_flush_null, const char *t; size_t n; return ortep_detokenizer_flush(NULL, &t, &n);)
M(model_config_read_fifo_dir, ortep_model_config c; return ortep_model_config_read("/dev/null", &c);)

static const misuse table[] = {
#define R(n) {#n, n},
    R(alloc_null_out) R(alloc_null_allocator) R(alloc_huge) R(alloc_align_zero) R(alloc_align_odd) R(host_create_null)
        R(fault_create_null_inner) R(stats_null) R(gov_charge_bad_tier) R(gov_refund_too_much) R(gov_configure_null) R(
            gov_configure_bad) R(arena_null_backing) R(arena_bad_chunk_align) R(arena_alloc_null) R(planned_huge)
            R(slab_zero_size) R(slab_free_null) R(plan_null_summary) R(plan_verify_null_offsets) R(buffer_null) R(
                buffer_misaligned) R(shape_rank_9) R(shape_negative) R(dtype_unknown) R(tensor_no_ep)
                R(tensor_bad_dtype) R(tensor_huge) R(tensor_view_past_end) R(tensor_view_overflow) R(
                    tensor_view_as_past_end) R(tensor_wrong_dtype) R(tensor_item_many) R(tensor_copyin_short)
                    R(tensor_copyin_null) R(tensor_copyout_short) R(tensor_write_borrowed) R(tensor_copy_from_mismatch)
                        R(tensor_from_owned) R(ep_free_foreign) R(ep_wrong_ep_buffer) R(ep_copy_past_end)
                            R(ep_copy_into_borrowed) R(ep_upload_past_end) R(ep_download_past_end) R(ep_argmax_zero)
                                R(ep_argmax_i32) R(ep_argmax_borrowed_result) R(ep_alloc_null_ep) R(ep_alloc_bad_align)
                                    R(ep_end_without_begin) R(ep_replay_nothing) R(ep_replay_segment_missing)
                                        R(ep_get_kernel_null) R(ep_check_null) R(config_null) R(config_no_namespace) R(
                                            registry_null_ep) R(graph_node_no_op) R(graph_node_null_inputs)
                                            R(graph_attr_bad_node) R(graph_value_bad_dtype) R(graph_init_null) R(
                                                graph_opset_zero) R(graph_value_unknown) R(session_null_graph)
                                                R(session_run_null) R(session_write_null) R(safetensors_null) R(
                                                    safetensors_dir) R(config_parse_null) R(config_parse_empty)
                                                    R(model_null) R(synthetic_bad_dtype) R(decoder_null_dir) R(
                                                        decoder_step_null) R(decoder_prefill_null)
                                                        R(decoder_generate_null) R(decoder_logits_null) R(
                                                            replace_hooks_null) R(tokenizer_open_null)
                                                            R(tokenizer_open_dir) R(tokenizer_open_json_null) R(
                                                                tokenizer_open_json_garbage) R(tokenizer_vocab_null_out)
                                                                R(tokenizer_encode_null) R(tokenizer_decode_null) R(
                                                                    tokenizer_token_id_null) R(detokenizer_create_null)
                                                                    R(detokenizer_push_null) R(detokenizer_flush_null)
                                                                        R(model_config_read_fifo_dir)
#undef R
};

START_TEST(each_misuse_is_a_clear_error) {
  env e = {0};
  e.cpu = test_cpu_ep();
  e.other = test_cpu_ep();
  ck_assert_ok(ortep_governor_create(&e.gov));
  ck_assert_ok(ortep_host_allocator_create(e.gov, &e.host));
  ck_assert_ok(ortep_graph_create(&e.graph));
  ortep_shape s = SHAPE(16);
  ck_assert_ok(ortep_tensor_create(e.cpu, ORTEP_DTYPE_F32, &s, false, &e.f32));
  ck_assert_ok(ortep_buffer_wrap_borrowed(e.bytes, ortep_device_cpu(), sizeof e.bytes, 1, &e.borrowed_buf));
  ck_assert_ok(
      ortep_tensor_from_borrowed(e.cpu, ORTEP_DTYPE_U8, &(ortep_shape){1, {64}}, &e.borrowed_buf, &e.borrowed));
  ck_assert_ok(ortep_ep_allocate(e.cpu, 64, 64, &e.owned));
  const misuse *m = &table[_i];
  ortep_clear_error();
  ortep_status st = m->call(&e);
  ck_assert_msg(st != ORTEP_OK, "%s was accepted", m->what);
  ck_assert_msg(strcmp(ortep_status_name(st), "ORTEP_E_UNKNOWN") != 0, "%s returned an unknown status", m->what);
  ck_assert_msg(strlen(ortep_last_error()) > 10, "%s gave %s without a message", m->what, ortep_status_name(st));
  ck_assert_int_eq(ortep_last_status(), st);
  /* nothing was lost: the fixtures are intact and free cleanly */
  ck_assert_ok(ortep_ep_deallocate(e.cpu, &e.owned));
  ortep_tensor_release(e.borrowed);
  ortep_tensor_release(e.f32);
  ortep_graph_destroy(e.graph);
  ortep_allocator_destroy(e.host);
  ortep_mem_stats gs;
  ortep_governor_get_stats(e.gov, ORTEP_TIER_HOST, &gs);
  ck_assert_uint_eq(gs.current_bytes, 0);
  ortep_governor_destroy(e.gov);
  uint64_t a, f;
  ortep_ep_allocation_counts(e.cpu, &a, &f);
  ck_assert_msg(a == f, "%s: %llu allocations, %llu frees", m->what, (unsigned long long)a, (unsigned long long)f);
  ortep_ep_destroy(e.cpu);
  ortep_ep_destroy(e.other);
}
END_TEST

/* The calls documented to accept NULL as "nothing to do". */
START_TEST(null_is_a_no_op_where_documented) {
  ortep_allocator_destroy(NULL);
  ortep_allocator_deallocate(NULL, NULL, 0, 1);
  ortep_arena_destroy(NULL);
  ortep_arena_reset(NULL);
  ck_assert_uint_eq(ortep_arena_trim(NULL), 0);
  ortep_slab_destroy(NULL);
  ck_assert_uint_eq(ortep_slab_shrink(NULL), 0);
  ortep_governor_destroy(NULL);
  ortep_tensor_release(NULL);
  ortep_graph_destroy(NULL);
  ortep_ep_destroy(NULL);
  ortep_ep_registry_destroy(NULL);
  ortep_config_destroy(NULL);
  ortep_kernel_destroy(NULL);
  ortep_session_destroy(NULL);
  ortep_safetensors_close(NULL);
  ortep_model_close(NULL);
  ortep_decoder_close(NULL);
  ck_assert_ptr_null(ortep_buffer_release(NULL));
  ck_assert_uint_eq(ortep_graph_node_count(NULL), 0);
  ck_assert_ptr_null(ortep_ep_registry_find(NULL, "cpu_ep"));
  ck_assert_uint_eq(ortep_decoder_blocked_weights(NULL), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("misuse");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, each_misuse_is_a_clear_error, 0, (int)(sizeof table / sizeof table[0]));
  tcase_add_test(tc, null_is_a_no_op_where_documented);
  suite_add_tcase(s, tc);
  return test_run(s);
}
