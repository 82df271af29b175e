/*
 * ir.h: the graph IR. A small ONNX-shaped graph: nodes (op type, domain,
 * name, input and output value names, attributes), values (name, dtype,
 * shape), initializers (constant tensors, possibly borrowing mmap'd bytes),
 * graph inputs and outputs, and opset imports per domain. Op names follow
 * ONNX and its com.microsoft contrib ops so an ONNX loader can come later.
 *
 * Values are named by strings, as in ONNX; an input named "" is an absent
 * optional input. Build a graph with the ortep_graph_* calls, then
 * ortep_graph_topo_order validates it: a dangling input, a value with two
 * producers, or a cycle is an error naming the node.
 */
#ifndef ORTEP_IR_H
#define ORTEP_IR_H

#include "ortep/dtype.h"

ORTEP_BEGIN_DECLS

typedef struct ortep_graph ortep_graph;
typedef struct ortep_node ortep_node;
typedef struct ortep_tensor ortep_tensor;
typedef uint32_t ortep_node_id;

/* The default (ONNX) domain is "". */
#define ORTEP_DOMAIN_ONNX  ""
#define ORTEP_DOMAIN_MS    "com.microsoft"
#define ORTEP_DOMAIN_ORTEP "ortep"

typedef enum ortep_attr_type {
  ORTEP_ATTR_INT,
  ORTEP_ATTR_FLOAT,
  ORTEP_ATTR_INTS,
  ORTEP_ATTR_FLOATS,
  ORTEP_ATTR_STRING,
} ortep_attr_type;

ORTEP_API ortep_status ortep_graph_create(ortep_graph **out);
/* Frees the graph and the initializer tensors it owns. NULL is a no-op. */
ORTEP_API void ortep_graph_destroy(ortep_graph *graph);

/* Imports domain at version (replacing an earlier import of it). */
ORTEP_API ortep_status ortep_graph_set_opset(ortep_graph *graph, const char *domain, int64_t version);
/* The imported version of domain, or 0 when it is not imported. */
ORTEP_API int64_t ortep_graph_opset(const ortep_graph *graph, const char *domain);

/* Declares a value's dtype and shape (value info). Declaring a name twice
 * with a different dtype or shape is an error. */
ORTEP_API ortep_status ortep_graph_add_value(ortep_graph *graph, const char *name, ortep_dtype dtype,
                                             const ortep_shape *shape);
/* Declares a value and makes it a graph input (fed at run time). */
ORTEP_API ortep_status ortep_graph_add_input(ortep_graph *graph, const char *name, ortep_dtype dtype,
                                             const ortep_shape *shape);
/* Makes a declared value a graph output. */
ORTEP_API ortep_status ortep_graph_add_output(ortep_graph *graph, const char *name);
/* Adds a constant. The graph takes ownership of tensor (also on failure) and
 * declares the value with the tensor's dtype and shape. */
ORTEP_API ortep_status ortep_graph_add_initializer(ortep_graph *graph, const char *name, ortep_tensor *tensor);

/* Adds a node. domain NULL means ONNX; name NULL gets "<op_type>_<id>". An
 * input or output named "" (or NULL) is an absent optional one; at least one
 * output must be named. */
ORTEP_API ortep_status ortep_graph_add_node(ortep_graph *graph, const char *op_type, const char *domain,
                                            const char *name, const char *const *inputs, size_t n_inputs,
                                            const char *const *outputs, size_t n_outputs, ortep_node_id *out);
ORTEP_API ortep_status ortep_graph_set_attr_int(ortep_graph *graph, ortep_node_id node, const char *attr, int64_t v);
ORTEP_API ortep_status ortep_graph_set_attr_float(ortep_graph *graph, ortep_node_id node, const char *attr, float v);
ORTEP_API ortep_status ortep_graph_set_attr_ints(ortep_graph *graph, ortep_node_id node, const char *attr,
                                                 const int64_t *v, size_t n);
ORTEP_API ortep_status ortep_graph_set_attr_floats(ortep_graph *graph, ortep_node_id node, const char *attr,
                                                   const float *v, size_t n);
ORTEP_API ortep_status ortep_graph_set_attr_string(ortep_graph *graph, ortep_node_id node, const char *attr,
                                                   const char *v);

/* Fills order[node_count] with the nodes in a topological order (stable:
 * ties keep insertion order). Errors, each naming the node: an input that no
 * graph input, initializer or node produces; a value produced twice; a cycle;
 * a graph output nothing produces. */
ORTEP_API ortep_status ortep_graph_topo_order(const ortep_graph *graph, ortep_node_id *order);

ORTEP_API size_t ortep_graph_node_count(const ortep_graph *graph);
ORTEP_API const ortep_node *ortep_graph_node(const ortep_graph *graph, ortep_node_id id);
ORTEP_API size_t ortep_graph_input_count(const ortep_graph *graph);
ORTEP_API const char *ortep_graph_input(const ortep_graph *graph, size_t i);
ORTEP_API size_t ortep_graph_output_count(const ortep_graph *graph);
ORTEP_API const char *ortep_graph_output(const ortep_graph *graph, size_t i);
/* dtype and shape of a declared value; ORTEP_E_INVALID_ARGUMENT when unknown. */
ORTEP_API ortep_status ortep_graph_value_info(const ortep_graph *graph, const char *name, ortep_dtype *dtype,
                                              ortep_shape *shape);
/* The initializer of that name, or NULL. The graph keeps ownership. */
ORTEP_API ortep_tensor *ortep_graph_initializer(const ortep_graph *graph, const char *name);
ORTEP_API size_t ortep_graph_initializer_count(const ortep_graph *graph);
/* Asks that an f32/f16/bf16 initializer be stored as a block type (q8_0,
 * q4_0) by an EP that can: the EP that prepares it for its kernels
 * quantizes it then (backend_impl.h: prepare_initializer; the CPU EP does),
 * the graph's value keeps its logical dtype, and an EP that cannot keeps it
 * as it is. ortep_graph_initializer_preference: the request, or
 * ORTEP_DTYPE_COUNT for none. */
ORTEP_API ortep_status ortep_graph_prefer_initializer_dtype(ortep_graph *graph, const char *name, ortep_dtype dtype);
ORTEP_API ortep_dtype ortep_graph_initializer_preference(const ortep_graph *graph, const char *name);
ORTEP_API const char *ortep_graph_initializer_name(const ortep_graph *graph, size_t i);

/* --- nodes --------------------------------------------------------------- */
ORTEP_API ortep_node_id ortep_node_id_of(const ortep_node *node);
ORTEP_API const char *ortep_node_op_type(const ortep_node *node);
ORTEP_API const char *ortep_node_domain(const ortep_node *node);
ORTEP_API const char *ortep_node_name(const ortep_node *node);
ORTEP_API size_t ortep_node_input_count(const ortep_node *node);
/* "" for an absent optional input; NULL past the end. */
ORTEP_API const char *ortep_node_input(const ortep_node *node, size_t i);
ORTEP_API size_t ortep_node_output_count(const ortep_node *node);
ORTEP_API const char *ortep_node_output(const ortep_node *node, size_t i);

/* Required attributes: a missing one (or one of another type) is
 * ORTEP_E_INVALID_ARGUMENT naming the node, its op and the attribute. */
ORTEP_API ortep_status ortep_node_attr_int(const ortep_node *node, const char *attr, int64_t *out);
ORTEP_API ortep_status ortep_node_attr_float(const ortep_node *node, const char *attr, float *out);
ORTEP_API ortep_status ortep_node_attr_ints(const ortep_node *node, const char *attr, const int64_t **v, size_t *n);
ORTEP_API ortep_status ortep_node_attr_string(const ortep_node *node, const char *attr, const char **out);
/* Optional attributes with a default. */
ORTEP_API int64_t ortep_node_attr_int_or(const ortep_node *node, const char *attr, int64_t fallback);
ORTEP_API float ortep_node_attr_float_or(const ortep_node *node, const char *attr, float fallback);

ORTEP_END_DECLS

#endif
