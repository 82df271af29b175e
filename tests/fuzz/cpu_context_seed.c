/* cpu_context_seed.c: the cpu_context fuzz corpus's valid seed, as this
 * build writes it: a CPU EP context holding the bf16 [8, 64] Linear weight
 * "w" fuzz_cpu_context.c asks for, prepared into the blocked layout.
 *
 *   fuzz_cpu_context_seed FILE           write it to FILE
 *   fuzz_cpu_context_seed --check FILE   exit 1 unless FILE holds it
 *
 * A context is refused whole when its keys (the EP, ortep's version, the
 * layouts) differ from the loader's, so a seed written by an older build
 * fuzzes nothing past the header: the check (a test) says when to write it
 * again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ortep/backend_impl.h"
#include "ortep/ortep.h"

typedef struct blob {
  unsigned char *p;
  size_t n, cap;
} blob;

static bool put(void *ctx, const void *bytes, size_t n) {
  blob *b = ctx;
  if (b->n + n > b->cap) {
    size_t cap = (b->n + n) * 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, bytes, n);
  b->n += n;
  return true;
}

static bool make_seed(blob *out) {
  ortep_ep *ep = NULL;
  ortep_graph *g = NULL;
  bool ok = false;
  ortep_shape ws = {2, {8, 64}}, xs = {2, {1, 64}}, ys = {2, {1, 8}};
  ortep_node_id lin;
  if (ortep_cpu_ep_create(NULL, &ep) != ORTEP_OK || ortep_ep_initialize(ep, NULL) != ORTEP_OK ||
      ortep_graph_create(&g) != ORTEP_OK || ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &xs) != ORTEP_OK ||
      ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &ys) != ORTEP_OK ||
      ortep_graph_add_value(g, "w", ORTEP_DTYPE_BF16, &ws) != ORTEP_OK ||
      ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "lin", (const char *[]){"x", "w"}, 2, (const char *[]){"y"},
                           1, &lin) != ORTEP_OK)
    goto done;
  static uint16_t w[8 * 64];
  for (size_t i = 0; i < 8 * 64; i++) w[i] = (uint16_t)(0x3f80 + i % 7); /* bf16 1.0, 1.0078, ... */
  ortep_initializer_use use = {g, ortep_graph_node(g, lin), 1};
  ortep_initializer in = {"w", ORTEP_DTYPE_BF16, ws, w, sizeof w, NULL, &use, 1, ORTEP_DTYPE_COUNT, NULL, NULL};
  ortep_dtype dt;
  ortep_shape sh;
  ortep_buffer b;
  if (ortep_ep_prepare_initializer(ep, &in, &dt, &sh, &b) != ORTEP_OK) goto done;
  size_t len = 0;
  ok = ortep_ep_save_context(ep, put, out, &len) == ORTEP_OK && len == out->n;
  ortep_ep_deallocate(ep, &b);
done:
  if (!ok) fprintf(stderr, "fuzz_cpu_context_seed: %s\n", ortep_last_error());
  ortep_graph_destroy(g);
  ortep_ep_destroy(ep);
  return ok;
}

int main(int argc, char **argv) {
  bool check = argc == 3 && !strcmp(argv[1], "--check");
  if (argc != 2 + check) {
    fprintf(stderr, "usage: %s FILE | --check FILE\n", argv[0]);
    return 2;
  }
  const char *path = argv[1 + check];
  blob seed = {0};
  if (!make_seed(&seed)) return 1;
  int rc = 0;
  if (check) {
    FILE *f = fopen(path, "rb");
    unsigned char *have = malloc(seed.n + 1);
    size_t n = f && have ? fread(have, 1, seed.n + 1, f) : 0;
    if (!f || n != seed.n || memcmp(have, seed.p, seed.n)) {
      fprintf(stderr,
              "%s is not the seed this build writes (%zu bytes, its keys, its layout): write it again with `%s %s`\n",
              path, seed.n, argv[0], path);
      rc = 1;
    }
    if (f) fclose(f);
    free(have);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seed.p, 1, seed.n, f) != seed.n || fclose(f) != 0) {
      fprintf(stderr, "fuzz_cpu_context_seed: cannot write %s\n", path);
      rc = 1;
    }
  }
  free(seed.p);
  return rc;
}
