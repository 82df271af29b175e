/* fuzz_cpu_context.c: libFuzzer harness for the CPU EP's context loader
 * (kernels/cpu/context.c: a weights-cache file's blob). Any input must give
 * ORTEP_OK or ORTEP_E_FORMAT, never a crash, a leak or a read outside it;
 * an accepted blob serves a prepared weight only from inside the input. */
#include <stdlib.h>
#include <string.h>

#include "ortep/backend_impl.h"
#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ortep_ep *ep = NULL;
  if (ortep_cpu_ep_create(NULL, &ep) != ORTEP_OK || ortep_ep_initialize(ep, NULL) != ORTEP_OK) abort();
  /* a copy: the loader may keep pointers into the blob while the EP lives */
  uint8_t *blob = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
  if (size) memcpy(blob, data, size);
  ortep_status s = ortep_ep_load_context(ep, blob, size);
  if (s != ORTEP_OK && s != ORTEP_E_FORMAT && s != ORTEP_E_OUT_OF_MEMORY) abort();
  if (s == ORTEP_OK) {
    /* ask for what the seed corpus holds: a bf16 [8, 64] weight "w" of a Linear */
    ortep_graph *g = NULL;
    ortep_shape ws = {2, {8, 64}}, xs = {2, {1, 64}}, ys = {2, {1, 8}};
    ortep_node_id lin;
    if (ortep_graph_create(&g) != ORTEP_OK || ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &xs) != ORTEP_OK ||
        ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &ys) != ORTEP_OK ||
        ortep_graph_add_value(g, "w", ORTEP_DTYPE_BF16, &ws) != ORTEP_OK ||
        ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "lin", (const char *[]){"x", "w"}, 2,
                             (const char *[]){"y"}, 1, &lin) != ORTEP_OK)
      abort();
    static uint16_t w[8 * 64];
    ortep_initializer_use use = {g, ortep_graph_node(g, lin), 1};
    ortep_initializer in = {"w", ORTEP_DTYPE_BF16, ws, w, sizeof w, NULL, &use, 1, ORTEP_DTYPE_COUNT, NULL, NULL};
    ortep_dtype dt;
    ortep_shape sh;
    ortep_buffer b;
    if (ortep_ep_prepare_initializer(ep, &in, &dt, &sh, &b) == ORTEP_OK) {
      const uint8_t *p = b.ptr;
      bool inside = p >= blob && p + b.size <= blob + size;
      if (b.owner == ORTEP_BUFFER_BORROWED && !inside) abort();
      volatile uint8_t sink = 0;
      for (size_t k = 0; k < b.size; k++) sink ^= p[k];
      (void)sink;
      ortep_ep_deallocate(ep, &b);
    }
    ortep_graph_destroy(g);
  }
  ortep_ep_destroy(ep);
  free(blob);
  return 0;
}
