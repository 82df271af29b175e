/*
 * ir.c: the graph IR. Nodes are heap objects so `const ortep_node *` stays
 * valid while the graph grows; values are looked up by name through a hash
 * map. Validation happens in ortep_graph_topo_order (Kahn's algorithm,
 * stable in insertion order), where every error names the node at fault.
 */
#include <stdio.h>
#include <string.h>

#include "strmap.h"
#include "ortep/tensor.h"

typedef struct attr {
  char *name;
  ortep_attr_type type;
  int64_t i;
  float f;
  int64_t *ints;
  float *floats;
  size_t n;
  char *s;
} attr;

struct ortep_node {
  ortep_node_id id;
  char *op_type, *domain, *name;
  char **inputs, **outputs;
  size_t n_inputs, n_outputs;
  attr *attrs;
  size_t n_attrs;
};

typedef struct value {
  char *name;
  ortep_dtype dtype;
  ortep_shape shape;
} value;

typedef struct initializer {
  char *name;
  ortep_tensor *tensor;
  ortep_dtype prefer; /* ORTEP_DTYPE_COUNT: none */
} initializer;

typedef struct opset {
  char *domain;
  int64_t version;
} opset;

struct ortep_graph {
  ortep_node **nodes;
  size_t n_nodes, nodes_cap;
  value *values;
  size_t n_values, values_cap;
  ortep__strmap value_index;
  const char **inputs, **outputs; /* borrowed from values[].name */
  size_t n_inputs, inputs_cap, n_outputs, outputs_cap;
  initializer *inits;
  size_t n_inits, inits_cap;
  opset *opsets;
  size_t n_opsets, opsets_cap;
};

#define OOM(what) ortep__fail(ORTEP_E_OUT_OF_MEMORY, "graph: no memory for %s", what)

ortep_status ortep_graph_create(ortep_graph **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_create: out is NULL");
  *out = ortep__calloc(1, sizeof **out);
  return *out ? ORTEP_OK : OOM("the graph object");
}

static void free_node(ortep_node *n) {
  if (!n) return;
  ortep__free(n->op_type), ortep__free(n->domain), ortep__free(n->name);
  for (size_t i = 0; i < n->n_inputs; i++) ortep__free(n->inputs[i]);
  for (size_t i = 0; i < n->n_outputs; i++) ortep__free(n->outputs[i]);
  ortep__free(n->inputs), ortep__free(n->outputs);
  for (size_t i = 0; i < n->n_attrs; i++) {
    ortep__free(n->attrs[i].name), ortep__free(n->attrs[i].ints), ortep__free(n->attrs[i].floats);
    ortep__free(n->attrs[i].s);
  }
  ortep__free(n->attrs);
  ortep__free(n);
}

void ortep_graph_destroy(ortep_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_nodes; i++) free_node(g->nodes[i]);
  for (size_t i = 0; i < g->n_values; i++) ortep__free(g->values[i].name);
  for (size_t i = 0; i < g->n_inits; i++) {
    ortep__free(g->inits[i].name);
    ortep_tensor_release(g->inits[i].tensor);
  }
  for (size_t i = 0; i < g->n_opsets; i++) ortep__free(g->opsets[i].domain);
  ortep__free(g->nodes), ortep__free(g->values), ortep__free(g->inputs), ortep__free(g->outputs);
  ortep__free(g->inits), ortep__free(g->opsets);
  ortep__strmap_free(&g->value_index);
  ortep__free(g);
}

ortep_status ortep_graph_set_opset(ortep_graph *g, const char *domain, int64_t version) {
  if (!g || !domain || version < 1)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_set_opset: %s",
                       !g || !domain ? "graph or domain is NULL" : "version must be >= 1");
  for (size_t i = 0; i < g->n_opsets; i++)
    if (strcmp(g->opsets[i].domain, domain) == 0) return g->opsets[i].version = version, ORTEP_OK;
  if (!ORTEP__GROW(g->opsets, g->opsets_cap, g->n_opsets + 1)) return OOM("an opset");
  char *d = ortep__strdup(domain);
  if (!d) return OOM("an opset");
  g->opsets[g->n_opsets++] = (opset){d, version};
  return ORTEP_OK;
}

int64_t ortep_graph_opset(const ortep_graph *g, const char *domain) {
  for (size_t i = 0; g && domain && i < g->n_opsets; i++)
    if (strcmp(g->opsets[i].domain, domain) == 0) return g->opsets[i].version;
  return 0;
}

static const value *find_value(const ortep_graph *g, const char *name) {
  uint32_t idx;
  return ortep__strmap_get(&g->value_index, name, &idx) ? &g->values[idx] : NULL;
}

ortep_status ortep_graph_add_value(ortep_graph *g, const char *name, ortep_dtype dtype, const ortep_shape *shape) {
  if (!g || !name || !*name || !shape)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep_graph_add_value: graph, a non-empty name and shape are required");
  if (!ortep_dtype_size(dtype))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "value '%s': unknown dtype value %d", name, (int)dtype);
  if (shape->rank > ORTEP_MAX_RANK)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "value '%s': rank %u exceeds %d", name, shape->rank, ORTEP_MAX_RANK);
  const value *v = find_value(g, name);
  if (v) {
    if (v->dtype == dtype && ortep_shape_equal(&v->shape, shape)) return ORTEP_OK;
    char a[160], b[160];
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "value '%s' is already declared as %s %s; it cannot be redeclared as %s %s", name,
                       ortep_dtype_name(v->dtype), ortep_shape_format(&v->shape, a, sizeof a), ortep_dtype_name(dtype),
                       ortep_shape_format(shape, b, sizeof b));
  }
  if (!ORTEP__GROW(g->values, g->values_cap, g->n_values + 1)) return OOM("a value");
  char *n = ortep__strdup(name);
  if (!n) return OOM("a value name");
  if (!ortep__strmap_put(&g->value_index, n, (uint32_t)g->n_values)) {
    ortep__free(n);
    return OOM("the value index");
  }
  g->values[g->n_values++] = (value){n, dtype, *shape};
  return ORTEP_OK;
}

static ortep_status add_name(const char ***arr, size_t *n, size_t *cap, const char *name) {
  if (!ortep__grow((void **)arr, cap, *n + 1, sizeof **arr)) return OOM("a graph input or output");
  (*arr)[(*n)++] = name;
  return ORTEP_OK;
}

ortep_status ortep_graph_add_input(ortep_graph *g, const char *name, ortep_dtype dtype, const ortep_shape *shape) {
  ortep_status st = ortep_graph_add_value(g, name, dtype, shape);
  if (st != ORTEP_OK) return st;
  for (size_t i = 0; i < g->n_inputs; i++)
    if (strcmp(g->inputs[i], name) == 0) return ORTEP_OK;
  return add_name(&g->inputs, &g->n_inputs, &g->inputs_cap, find_value(g, name)->name);
}

ortep_status ortep_graph_add_output(ortep_graph *g, const char *name) {
  if (!g || !name) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_add_output: NULL argument");
  const value *v = find_value(g, name);
  if (!v)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "graph output '%s' is not a declared value; declare it with ortep_graph_add_value first", name);
  return add_name(&g->outputs, &g->n_outputs, &g->outputs_cap, v->name);
}

ortep_status ortep_graph_add_initializer(ortep_graph *g, const char *name, ortep_tensor *t) {
  if (!g || !name || !*name || !t) {
    ortep_tensor_release(t);
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_add_initializer: graph, name and tensor are required");
  }
  if (ortep_graph_initializer(g, name)) {
    ortep_tensor_release(t);
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "initializer '%s' is added twice; names must be unique", name);
  }
  ortep_status st = ortep_graph_add_value(g, name, ortep_tensor_dtype(t), ortep_tensor_shape(t));
  if (st != ORTEP_OK) {
    ortep_tensor_release(t);
    return st;
  }
  char *n = NULL;
  if (!ORTEP__GROW(g->inits, g->inits_cap, g->n_inits + 1) || !(n = ortep__strdup(name))) {
    ortep_tensor_release(t);
    return OOM("an initializer");
  }
  g->inits[g->n_inits++] = (initializer){n, t, ORTEP_DTYPE_COUNT};
  return ORTEP_OK;
}

static char **dup_names(const char *const *names, size_t n, bool *ok) {
  *ok = true;
  if (n == 0) return NULL;
  char **out = ortep__calloc(n, sizeof *out);
  if (!out) return *ok = false, NULL;
  for (size_t i = 0; i < n; i++) {
    if (!(out[i] = ortep__strdup(names[i] ? names[i] : ""))) *ok = false;
  }
  return out;
}

ortep_status ortep_graph_add_node(ortep_graph *g, const char *op_type, const char *domain, const char *name,
                                  const char *const *inputs, size_t n_inputs, const char *const *outputs,
                                  size_t n_outputs, ortep_node_id *out) {
  if (!g || !op_type || !*op_type)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_add_node: graph and a non-empty op_type are required");
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node %s (op %s): inputs/outputs array is NULL", name ? name : "?",
                       op_type);
  size_t named = 0;
  for (size_t i = 0; i < n_outputs; i++) named += outputs[i] && *outputs[i];
  if (n_outputs && !named)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "node %s (op %s): every output is unnamed; name at least one (\"\" marks an absent optional "
                       "output)",
                       name ? name : "?", op_type);
  if (!ORTEP__GROW(g->nodes, g->nodes_cap, g->n_nodes + 1)) return OOM("a node");
  ortep_node *n = ortep__calloc(1, sizeof *n);
  if (!n) return OOM("a node");
  n->id = (ortep_node_id)g->n_nodes;
  char auto_name[96];
  if (!name) snprintf(auto_name, sizeof auto_name, "%s_%u", op_type, n->id);
  n->op_type = ortep__strdup(op_type);
  n->domain = ortep__strdup(domain ? domain : "");
  n->name = ortep__strdup(name ? name : auto_name);
  bool ok1, ok2;
  n->inputs = dup_names(inputs, n_inputs, &ok1);
  n->n_inputs = n->inputs || !n_inputs ? n_inputs : 0;
  n->outputs = dup_names(outputs, n_outputs, &ok2);
  n->n_outputs = n->outputs || !n_outputs ? n_outputs : 0;
  if (!n->op_type || !n->domain || !n->name || !ok1 || !ok2) {
    free_node(n);
    return OOM("a node's names");
  }
  g->nodes[g->n_nodes++] = n;
  if (out) *out = n->id;
  return ORTEP_OK;
}

static ortep_status new_attr(ortep_graph *g, ortep_node_id id, const char *name, ortep_attr_type type, attr **out) {
  if (!g || id >= g->n_nodes || !name)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "setting attribute '%s': no node %u in this graph", name ? name : "?",
                       id);
  ortep_node *n = g->nodes[id];
  for (size_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s): attribute '%s' is set twice", n->name,
                         n->op_type, name);
  attr *grown = ortep__realloc(n->attrs, (n->n_attrs + 1) * sizeof *grown);
  if (!grown) return OOM("an attribute");
  n->attrs = grown;
  attr *a = &n->attrs[n->n_attrs];
  memset(a, 0, sizeof *a);
  if (!(a->name = ortep__strdup(name))) return OOM("an attribute");
  a->type = type;
  n->n_attrs++;
  *out = a;
  return ORTEP_OK;
}

ortep_status ortep_graph_set_attr_int(ortep_graph *g, ortep_node_id id, const char *name, int64_t v) {
  attr *a;
  ortep_status st = new_attr(g, id, name, ORTEP_ATTR_INT, &a);
  if (st == ORTEP_OK) a->i = v;
  return st;
}

ortep_status ortep_graph_set_attr_float(ortep_graph *g, ortep_node_id id, const char *name, float v) {
  attr *a;
  ortep_status st = new_attr(g, id, name, ORTEP_ATTR_FLOAT, &a);
  if (st == ORTEP_OK) a->f = v;
  return st;
}

/* Copy a payload before adding the attribute, so a failure adds nothing. */
static ortep_status set_array(ortep_graph *g, ortep_node_id id, const char *name, ortep_attr_type type, const void *v,
                              size_t n, size_t elem) {
  void *copy = ortep__malloc(n * elem);
  if (!copy) return OOM("an attribute");
  if (n) memcpy(copy, v, n * elem);
  attr *a;
  ortep_status st = new_attr(g, id, name, type, &a);
  if (st != ORTEP_OK) return ortep__free(copy), st;
  if (type == ORTEP_ATTR_INTS)
    a->ints = copy;
  else
    a->floats = copy;
  a->n = n;
  return ORTEP_OK;
}

ortep_status ortep_graph_set_attr_ints(ortep_graph *g, ortep_node_id id, const char *name, const int64_t *v, size_t n) {
  return set_array(g, id, name, ORTEP_ATTR_INTS, v, n, sizeof *v);
}

ortep_status ortep_graph_set_attr_floats(ortep_graph *g, ortep_node_id id, const char *name, const float *v, size_t n) {
  return set_array(g, id, name, ORTEP_ATTR_FLOATS, v, n, sizeof *v);
}

ortep_status ortep_graph_set_attr_string(ortep_graph *g, ortep_node_id id, const char *name, const char *v) {
  char *copy = ortep__strdup(v ? v : "");
  if (!copy) return OOM("an attribute");
  attr *a;
  ortep_status st = new_attr(g, id, name, ORTEP_ATTR_STRING, &a);
  if (st != ORTEP_OK) return ortep__free(copy), st;
  a->s = copy;
  return ORTEP_OK;
}

/* --- validation and order ------------------------------------------------- */

static bool is_graph_input(const ortep_graph *g, const char *name) {
  for (size_t i = 0; i < g->n_inputs; i++)
    if (strcmp(g->inputs[i], name) == 0) return true;
  return false;
}

/* Every node output into producer (value -> node), refusing a value produced
 * twice or produced and also a graph input or initializer. */
static ortep_status index_producers(const ortep_graph *g, ortep__strmap *producer) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ortep_node *nd = g->nodes[i];
    for (size_t o = 0; o < nd->n_outputs; o++) {
      const char *v = nd->outputs[o];
      if (!*v) continue; /* an absent optional output */
      uint32_t other;
      if (ortep__strmap_get(producer, v, &other))
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s): output '%s' is also produced by node '%s'",
                           nd->name, nd->op_type, v, g->nodes[other]->name);
      if (is_graph_input(g, v) || ortep_graph_initializer(g, v))
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s): output '%s' is also a graph %s", nd->name,
                           nd->op_type, v, is_graph_input(g, v) ? "input" : "initializer");
      if (!ortep__strmap_put(producer, v, (uint32_t)i)) return OOM("ordering");
    }
  }
  return ORTEP_OK;
}

/* Each node's in-degree (inputs another node produces) and their total;
 * a dangling input or graph output is refused. */
static ortep_status count_inputs(const ortep_graph *g, const ortep__strmap *producer, uint32_t *indeg, size_t *edges) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ortep_node *nd = g->nodes[i];
    for (size_t k = 0; k < nd->n_inputs; k++) {
      const char *v = nd->inputs[k];
      if (!*v) continue; /* absent optional input */
      if (ortep__strmap_get(producer, v, NULL)) {
        indeg[i]++;
        (*edges)++;
      } else if (!is_graph_input(g, v) && !ortep_graph_initializer(g, v)) {
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                           "node '%s' (op %s): input %zu '%s' is dangling: no graph input, initializer or node "
                           "produces it",
                           nd->name, nd->op_type, k, v);
      }
    }
  }
  for (size_t i = 0; i < g->n_outputs; i++) {
    const char *v = g->outputs[i];
    if (!ortep__strmap_get(producer, v, NULL) && !is_graph_input(g, v) && !ortep_graph_initializer(g, v))
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "graph output '%s' is produced by no node", v);
  }
  return ORTEP_OK;
}

/* Consumer edges in CSR form: consumers of node p are edges[first[p] ..
 * first[p + 1]). A node that reads one value twice gets two edges and two
 * in-degree counts, which balance. first has n + 1 entries (zeroed). */
static ortep_status consumer_edges(const ortep_graph *g, const ortep__strmap *producer, size_t *first,
                                   uint32_t *edges) {
  size_t n = g->n_nodes;
  for (size_t j = 0; j < n; j++)
    for (size_t k = 0; k < g->nodes[j]->n_inputs; k++) {
      uint32_t p;
      if (*g->nodes[j]->inputs[k] && ortep__strmap_get(producer, g->nodes[j]->inputs[k], &p)) first[p + 1]++;
    }
  for (size_t p = 0; p < n; p++) first[p + 1] += first[p];
  size_t *fill = ortep__calloc(n + 1, sizeof *fill);
  if (!fill) return OOM("ordering");
  for (size_t j = 0; j < n; j++)
    for (size_t k = 0; k < g->nodes[j]->n_inputs; k++) {
      uint32_t p;
      if (*g->nodes[j]->inputs[k] && ortep__strmap_get(producer, g->nodes[j]->inputs[k], &p))
        edges[first[p] + fill[p]++] = (uint32_t)j;
    }
  ortep__free(fill);
  return ORTEP_OK;
}

/* Kahn, always taking the lowest ready id so the order is stable. */
static ortep_status kahn(const ortep_graph *g, uint32_t *indeg, bool *done, const size_t *first, const uint32_t *edges,
                         ortep_node_id *order) {
  size_t n = g->n_nodes, emitted = 0;
  while (emitted < n) {
    size_t i = 0;
    while (i < n && (done[i] || indeg[i])) i++;
    if (i == n) break; /* nothing ready: a cycle */
    done[i] = true;
    order[emitted++] = (ortep_node_id)i;
    for (size_t e = first[i]; e < first[i + 1]; e++) indeg[edges[e]]--;
  }
  if (emitted == n) return ORTEP_OK;
  size_t i = 0;
  while (done[i]) i++;
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s) is on a cycle: the graph must be acyclic",
                     g->nodes[i]->name, g->nodes[i]->op_type);
}

ortep_status ortep_graph_topo_order(const ortep_graph *g, ortep_node_id *order) {
  if (!g || (g->n_nodes && !order))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_topo_order: NULL argument");
  size_t n = g->n_nodes, total_edges = 0, *first = NULL;
  ortep__strmap producer = {0};
  uint32_t *edges = NULL, *indeg = ortep__calloc(n + 1, sizeof *indeg);
  bool *done = ortep__calloc(n + 1, sizeof *done);
  ortep_status st = indeg && done ? index_producers(g, &producer) : OOM("ordering");
  if (st == ORTEP_OK) st = count_inputs(g, &producer, indeg, &total_edges);
  if (st == ORTEP_OK) {
    first = ortep__calloc(n + 1, sizeof *first);
    edges = ortep__calloc(total_edges + 1, sizeof *edges);
    st = first && edges ? consumer_edges(g, &producer, first, edges) : OOM("ordering");
  }
  if (st == ORTEP_OK) st = kahn(g, indeg, done, first, edges, order);
  ortep__strmap_free(&producer);
  ortep__free(indeg);
  ortep__free(done);
  ortep__free(first);
  ortep__free(edges);
  return st;
}

/* --- accessors ------------------------------------------------------------- */
size_t ortep_graph_node_count(const ortep_graph *g) { return g ? g->n_nodes : 0; }
const ortep_node *ortep_graph_node(const ortep_graph *g, ortep_node_id id) {
  return g && id < g->n_nodes ? g->nodes[id] : NULL;
}
size_t ortep_graph_input_count(const ortep_graph *g) { return g ? g->n_inputs : 0; }
const char *ortep_graph_input(const ortep_graph *g, size_t i) { return g && i < g->n_inputs ? g->inputs[i] : NULL; }
size_t ortep_graph_output_count(const ortep_graph *g) { return g ? g->n_outputs : 0; }
const char *ortep_graph_output(const ortep_graph *g, size_t i) { return g && i < g->n_outputs ? g->outputs[i] : NULL; }

ortep_status ortep_graph_value_info(const ortep_graph *g, const char *name, ortep_dtype *dtype, ortep_shape *shape) {
  const value *v = g && name ? find_value(g, name) : NULL;
  if (!v)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "value '%s' is not declared in the graph", name ? name : "(null)");
  if (dtype) *dtype = v->dtype;
  if (shape) *shape = v->shape;
  return ORTEP_OK;
}

ortep_tensor *ortep_graph_initializer(const ortep_graph *g, const char *name) {
  for (size_t i = 0; g && name && i < g->n_inits; i++)
    if (strcmp(g->inits[i].name, name) == 0) return g->inits[i].tensor;
  return NULL;
}
size_t ortep_graph_initializer_count(const ortep_graph *g) { return g ? g->n_inits : 0; }

ortep_status ortep_graph_prefer_initializer_dtype(ortep_graph *g, const char *name, ortep_dtype dtype) {
  if (!g || !name) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_prefer_initializer_dtype: NULL argument");
  if (!ortep_dtype_is_quantized(dtype))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "initializer '%s': a preferred dtype is a block type an EP may store it in (q8_0, q4_0); "
                       "got %s",
                       name, ortep_dtype_name(dtype));
  for (size_t i = 0; i < g->n_inits; i++)
    if (strcmp(g->inits[i].name, name) == 0) {
      ortep_dtype have = ortep_tensor_dtype(g->inits[i].tensor);
      const ortep_shape *sh = ortep_tensor_shape(g->inits[i].tensor);
      size_t bytes;
      if (!ortep_dtype_is_float(have))
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                           "initializer '%s' is %s: only f32/f16/bf16 ones can be stored as %s", name,
                           ortep_dtype_name(have), ortep_dtype_name(dtype));
      if (ortep_shape_bytes(sh, dtype, &bytes) != ORTEP_OK) {
        char b[160];
        return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                           "initializer '%s' %s cannot be stored as %s: its rows of %lld values are not whole "
                           "blocks of %zu",
                           name, ortep_shape_format(sh, b, sizeof b), ortep_dtype_name(dtype),
                           sh->rank ? (long long)sh->dims[sh->rank - 1] : 0LL, ortep_dtype_block(dtype));
      }
      g->inits[i].prefer = dtype;
      return ORTEP_OK;
    }
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_graph_prefer_initializer_dtype: no initializer '%s'", name);
}

ortep_dtype ortep_graph_initializer_preference(const ortep_graph *g, const char *name) {
  for (size_t i = 0; g && name && i < g->n_inits; i++)
    if (strcmp(g->inits[i].name, name) == 0) return g->inits[i].prefer;
  return ORTEP_DTYPE_COUNT;
}
const char *ortep_graph_initializer_name(const ortep_graph *g, size_t i) {
  return g && i < g->n_inits ? g->inits[i].name : NULL;
}

ortep_node_id ortep_node_id_of(const ortep_node *n) { return n->id; }
const char *ortep_node_op_type(const ortep_node *n) { return n->op_type; }
const char *ortep_node_domain(const ortep_node *n) { return n->domain; }
const char *ortep_node_name(const ortep_node *n) { return n->name; }
size_t ortep_node_input_count(const ortep_node *n) { return n->n_inputs; }
const char *ortep_node_input(const ortep_node *n, size_t i) { return i < n->n_inputs ? n->inputs[i] : NULL; }
size_t ortep_node_output_count(const ortep_node *n) { return n->n_outputs; }
const char *ortep_node_output(const ortep_node *n, size_t i) { return i < n->n_outputs ? n->outputs[i] : NULL; }

static const attr *find_attr(const ortep_node *n, const char *name) {
  for (size_t i = 0; n && name && i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

static const char *type_name(ortep_attr_type t) {
  static const char *const names[] = {"int", "float", "ints", "floats", "string"};
  return names[t];
}

static ortep_status get_attr(const ortep_node *n, const char *name, ortep_attr_type want, const attr **out) {
  const attr *a = find_attr(n, name);
  if (!a)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s) is missing its required %s attribute '%s'",
                       n ? n->name : "?", n ? n->op_type : "?", type_name(want), name ? name : "?");
  if (a->type != want)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "node '%s' (op %s): attribute '%s' is %s, expected %s", n->name,
                       n->op_type, name, type_name(a->type), type_name(want));
  *out = a;
  return ORTEP_OK;
}

ortep_status ortep_node_attr_int(const ortep_node *n, const char *name, int64_t *out) {
  const attr *a;
  ortep_status st = get_attr(n, name, ORTEP_ATTR_INT, &a);
  if (st == ORTEP_OK) *out = a->i;
  return st;
}
ortep_status ortep_node_attr_float(const ortep_node *n, const char *name, float *out) {
  const attr *a;
  ortep_status st = get_attr(n, name, ORTEP_ATTR_FLOAT, &a);
  if (st == ORTEP_OK) *out = a->f;
  return st;
}
ortep_status ortep_node_attr_ints(const ortep_node *n, const char *name, const int64_t **v, size_t *cnt) {
  const attr *a;
  ortep_status st = get_attr(n, name, ORTEP_ATTR_INTS, &a);
  if (st == ORTEP_OK) *v = a->ints, *cnt = a->n;
  return st;
}
ortep_status ortep_node_attr_string(const ortep_node *n, const char *name, const char **out) {
  const attr *a;
  ortep_status st = get_attr(n, name, ORTEP_ATTR_STRING, &a);
  if (st == ORTEP_OK) *out = a->s;
  return st;
}
int64_t ortep_node_attr_int_or(const ortep_node *n, const char *name, int64_t fallback) {
  const attr *a = find_attr(n, name);
  return a && a->type == ORTEP_ATTR_INT ? a->i : fallback;
}
float ortep_node_attr_float_or(const ortep_node *n, const char *name, float fallback) {
  const attr *a = find_attr(n, name);
  return a && a->type == ORTEP_ATTR_FLOAT ? a->f : fallback;
}
