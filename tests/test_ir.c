/* test_ir.c: the graph IR: building, attributes, topological order, and the
 * errors that name the node (dangling input, duplicate producer, cycle,
 * missing attribute). */
#include "testutil.h"

static ortep_graph *chain(void) {
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape s = SHAPE(1, 4);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_add_value(g, "z", ORTEP_DTYPE_F32, &s));
  ck_assert_ok(ortep_graph_set_opset(g, "", 17));
  ck_assert_ok(ortep_graph_set_opset(g, ORTEP_DOMAIN_MS, 1));
  return g;
}

START_TEST(build_and_order) {
  ortep_graph *g = chain();
  ortep_node_id a, b, c;
  /* added out of order: c consumes b consumes a */
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", NULL, "c", (const char *[]){"y2"}, 1, (const char *[]){"z"}, 1, &c));
  ck_assert_ok(ortep_graph_add_node(g, "Add", "", "b", (const char *[]){"y1", "x"}, 2, (const char *[]){"y2"}, 1, &b));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", NULL, (const char *[]){"x"}, 1, (const char *[]){"y1"}, 1, &a));
  ck_assert_ok(ortep_graph_add_output(g, "z"));
  ortep_node_id order[3];
  ck_assert_ok(ortep_graph_topo_order(g, order));
  ck_assert_uint_eq(order[0], a);
  ck_assert_uint_eq(order[1], b);
  ck_assert_uint_eq(order[2], c);
  const ortep_node *n = ortep_graph_node(g, a);
  ck_assert_str_eq(ortep_node_name(n), "Sigmoid_2"); /* generated */
  ck_assert_str_eq(ortep_node_op_type(n), "Sigmoid");
  ck_assert_str_eq(ortep_node_domain(n), "");
  ck_assert_uint_eq(ortep_node_id_of(n), a);
  ck_assert_int_eq(ortep_graph_opset(g, ""), 17);
  ck_assert_int_eq(ortep_graph_opset(g, ORTEP_DOMAIN_MS), 1);
  ck_assert_int_eq(ortep_graph_opset(g, "ai.onnx.ml"), 0);
  ck_assert_uint_eq(ortep_graph_input_count(g), 1);
  ck_assert_str_eq(ortep_graph_output(g, 0), "z");
  ortep_dtype d;
  ortep_shape s;
  ck_assert_ok(ortep_graph_value_info(g, "z", &d, &s));
  ck_assert_int_eq(s.dims[1], 4);
  ck_assert_status(ortep_graph_value_info(g, "nope", &d, &s), ORTEP_E_INVALID_ARGUMENT);
  ortep_graph_destroy(g);
}
END_TEST

START_TEST(attributes) {
  ortep_graph *g = chain();
  ortep_node_id id;
  ck_assert_ok(ortep_graph_add_node(g, "GroupQueryAttention", ORTEP_DOMAIN_MS, "attn", (const char *[]){"x"}, 1,
                                    (const char *[]){"z"}, 1, &id));
  ck_assert_ok(ortep_graph_set_attr_int(g, id, "num_heads", 14));
  ck_assert_ok(ortep_graph_set_attr_float(g, id, "scale", 0.125f));
  ck_assert_ok(ortep_graph_set_attr_ints(g, id, "perm", (int64_t[]){2, 0, 1}, 3));
  ck_assert_ok(ortep_graph_set_attr_floats(g, id, "f", (float[]){1.5f}, 1));
  ck_assert_ok(ortep_graph_set_attr_string(g, id, "mode", "decode"));
  ck_assert_status(ortep_graph_set_attr_int(g, id, "num_heads", 2), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("set twice");
  const ortep_node *n = ortep_graph_node(g, id);
  int64_t v;
  ck_assert_ok(ortep_node_attr_int(n, "num_heads", &v));
  ck_assert_int_eq(v, 14);
  float f;
  ck_assert_ok(ortep_node_attr_float(n, "scale", &f));
  ck_assert_float_eq(f, 0.125f);
  const int64_t *ints;
  size_t cnt;
  ck_assert_ok(ortep_node_attr_ints(n, "perm", &ints, &cnt));
  ck_assert_uint_eq(cnt, 3);
  ck_assert_int_eq(ints[0], 2);
  const char *str;
  ck_assert_ok(ortep_node_attr_string(n, "mode", &str));
  ck_assert_str_eq(str, "decode");
  ck_assert_status(ortep_node_attr_int(n, "kv_num_heads", &v), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("node 'attn' (op GroupQueryAttention) is missing its required int attribute 'kv_num_heads'");
  ck_assert_status(ortep_node_attr_int(n, "scale", &v), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("is float, expected int");
  ck_assert_int_eq(ortep_node_attr_int_or(n, "kv_num_heads", 2), 2);
  ck_assert_float_eq(ortep_node_attr_float_or(n, "scale", 1.0f), 0.125f);
  ortep_graph_destroy(g);
}
END_TEST

START_TEST(dangling_input_names_the_node) {
  ortep_graph *g = chain();
  ck_assert_ok(
      ortep_graph_add_node(g, "Add", "", "adder", (const char *[]){"x", "ghost"}, 2, (const char *[]){"z"}, 1, NULL));
  ortep_node_id order[1];
  ck_assert_status(ortep_graph_topo_order(g, order), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("node 'adder' (op Add): input 1 'ghost' is dangling");
  ortep_graph_destroy(g);
}
END_TEST

START_TEST(duplicate_producer_names_both_nodes) {
  ortep_graph *g = chain();
  ck_assert_ok(
      ortep_graph_add_node(g, "Sigmoid", "", "first", (const char *[]){"x"}, 1, (const char *[]){"z"}, 1, NULL));
  ck_assert_ok(
      ortep_graph_add_node(g, "Sigmoid", "", "second", (const char *[]){"x"}, 1, (const char *[]){"z"}, 1, NULL));
  ortep_node_id order[2];
  ck_assert_status(ortep_graph_topo_order(g, order), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("node 'second' (op Sigmoid): output 'z' is also produced by node 'first'");
  ortep_graph_destroy(g);
  g = chain();
  ck_assert_ok(
      ortep_graph_add_node(g, "Sigmoid", "", "clobber", (const char *[]){"z"}, 1, (const char *[]){"x"}, 1, NULL));
  ck_assert_status(ortep_graph_topo_order(g, order), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("also a graph input");
  ortep_graph_destroy(g);
}
END_TEST

START_TEST(cycle_names_a_node_on_it) {
  ortep_graph *g = chain();
  ck_assert_ok(ortep_graph_add_node(g, "Add", "", "p", (const char *[]){"x", "b"}, 2, (const char *[]){"a"}, 1, NULL));
  ck_assert_ok(ortep_graph_add_node(g, "Sigmoid", "", "q", (const char *[]){"a"}, 1, (const char *[]){"b"}, 1, NULL));
  ortep_node_id order[2];
  ck_assert_status(ortep_graph_topo_order(g, order), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("node 'p' (op Add) is on a cycle");
  ortep_graph_destroy(g);
}
END_TEST

START_TEST(outputs_values_and_initializers) {
  ortep_graph *g = chain();
  ck_assert_status(ortep_graph_add_output(g, "undeclared"), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("not a declared value");
  ck_assert_ok(ortep_graph_add_output(g, "z"));
  ortep_node_id order[1];
  ck_assert_status(ortep_graph_topo_order(g, order), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("graph output 'z' is produced by no node");
  ortep_shape other = SHAPE(2);
  ck_assert_status(ortep_graph_add_value(g, "z", ORTEP_DTYPE_F32, &other), ORTEP_E_INVALID_ARGUMENT);
  ck_assert_error_mentions("already declared as f32 [1, 4]");
  ortep_ep *cpu = test_cpu_ep();
  ortep_tensor *w, *w2;
  ortep_shape s = SHAPE(4);
  ck_assert_ok(ortep_tensor_create(cpu, ORTEP_DTYPE_F32, &s, false, &w));
  ck_assert_ok(ortep_graph_add_initializer(g, "w", w));
  ck_assert_ptr_eq(ortep_graph_initializer(g, "w"), w);
  ck_assert_ok(ortep_tensor_create(cpu, ORTEP_DTYPE_F32, &s, false, &w2));
  ck_assert_status(ortep_graph_add_initializer(g, "w", w2), ORTEP_E_INVALID_ARGUMENT); /* takes w2 anyway */
  ck_assert_uint_eq(ortep_graph_initializer_count(g), 1);
  ck_assert_str_eq(ortep_graph_initializer_name(g, 0), "w");
  ck_assert_ok(
      ortep_graph_add_node(g, "Add", "", "use", (const char *[]){"x", "w"}, 2, (const char *[]){"z"}, 1, NULL));
  ck_assert_ok(ortep_graph_topo_order(g, order));
  ortep_graph_destroy(g); /* releases the initializer */
  uint64_t a, f;
  ortep_ep_allocation_counts(cpu, &a, &f);
  ck_assert_uint_eq(a, 2);
  ck_assert_uint_eq(f, 2);
  ortep_ep_destroy(cpu);
}
END_TEST

START_TEST(graph_building_survives_allocation_failures) {
  for (long n = 1;; n++) {
    test_hooks_install(n);
    ortep_graph *g = NULL;
    ortep_status st = ortep_graph_create(&g);
    ortep_shape s = SHAPE(1, 4);
    if (st == ORTEP_OK) st = ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &s);
    if (st == ORTEP_OK) st = ortep_graph_add_value(g, "z", ORTEP_DTYPE_F32, &s);
    if (st == ORTEP_OK)
      st = ortep_graph_add_node(g, "Sigmoid", "", "s", (const char *[]){"x"}, 1, (const char *[]){"z"}, 1, NULL);
    if (st == ORTEP_OK) st = ortep_graph_set_attr_ints(g, 0, "a", (int64_t[]){1, 2}, 2);
    if (st == ORTEP_OK) st = ortep_graph_add_output(g, "z");
    ortep_node_id order[1];
    if (st == ORTEP_OK) st = ortep_graph_topo_order(g, order);
    ortep_graph_destroy(g);
    ortep_restore_allocator();
    ck_assert_int_eq(atomic_load(&test_hook_live), 0);
    if (st == ORTEP_OK) break;
    ck_assert_int_eq(st, ORTEP_E_OUT_OF_MEMORY);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("ir");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, build_and_order);
  tcase_add_test(tc, attributes);
  tcase_add_test(tc, dangling_input_names_the_node);
  tcase_add_test(tc, duplicate_producer_names_both_nodes);
  tcase_add_test(tc, cycle_names_a_node_on_it);
  tcase_add_test(tc, outputs_values_and_initializers);
  tcase_add_test(tc, graph_building_survives_allocation_failures);
  suite_add_tcase(s, tc);
  return test_run(s);
}
