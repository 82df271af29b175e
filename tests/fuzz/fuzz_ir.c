/* fuzz_ir.c: random graphs from the fuzzer's bytes through the IR builder and
 * the topological sort. Either the graph is refused with a message, or the
 * order is a permutation in which every produced input comes before its
 * consumer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) \
  if (!(x)) abort()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_graph *g;
  if (ortep_graph_create(&g)) return 0;
  ortep_shape s = {1, {4}};
  ortep_graph_add_input(g, "in0", ORTEP_DTYPE_F32, &s);
  ortep_graph_add_input(g, "in1", ORTEP_DTYPE_F32, &s);
  size_t nodes = 0;
  char names[64][16];
  for (size_t i = 0; i + 4 <= size && nodes < 64; i += 4) {
    const uint8_t *b = data + i;
    char in0[16], in1[16], out[16];
    /* inputs: a graph input, an earlier or later node's output, or absent */
    snprintf(in0, sizeof in0, b[1] % 4 == 0 ? "in%u" : "v%u", b[1] % 4 == 0 ? b[1] % 2u : b[1] % 70u);
    if (b[2] % 5 == 0)
      in1[0] = '\0'; /* absent */
    else
      snprintf(in1, sizeof in1, "v%u", b[2] % 70u);
    snprintf(out, sizeof out, "v%u", (b[0] & 0x80) ? b[3] % 70u : (unsigned)nodes);
    const char *op = (b[0] & 1) ? "Add" : "Sigmoid";
    ortep_status st = ortep_graph_add_node(g, op, NULL, NULL, (const char *[]){in0, in1}, (b[0] & 2) ? 2 : 1,
                                           (const char *[]){out}, 1, NULL);
    CHECK(st == ORTEP_OK);
    snprintf(names[nodes++], 16, "%s", out);
    if (b[0] & 4) ortep_graph_set_attr_int(g, (ortep_node_id)(nodes - 1), (b[3] & 1) ? "axis" : "k", b[3]);
  }
  ortep_node_id *order = malloc((nodes + 1) * sizeof *order);
  ortep_status st = ortep_graph_topo_order(g, order);
  if (st != ORTEP_OK) {
    CHECK(st == ORTEP_E_INVALID_ARGUMENT && strlen(ortep_last_error()) > 10);
  } else {
    bool *seen = calloc(nodes + 1, 1);
    for (size_t k = 0; k < nodes; k++) {
      CHECK(order[k] < nodes && !seen[order[k]]);
      const ortep_node *n = ortep_graph_node(g, order[k]);
      for (size_t j = 0; j < ortep_node_input_count(n); j++) {
        const char *v = ortep_node_input(n, j);
        for (size_t p = 0; p < nodes; p++)
          if (!strcmp(names[p], v)) CHECK(seen[p]); /* its producer came first */
      }
      seen[order[k]] = true;
    }
    free(seen);
  }
  free(order);
  ortep_graph_destroy(g);
  return 0;
}
