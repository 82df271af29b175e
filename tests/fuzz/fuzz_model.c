/* fuzz_model.c: libFuzzer harness for ortep_model_open, the whole path a
 * model directory takes: config.json through the parser, model.safetensors
 * through the header validation, and the two checked against each other
 * (check_weights); a model that opens is opened again with its projections
 * repacked into the CPU EP's blocked layout, in memory (READ: in place). The
 * input is config.json, one NUL byte, then model.safetensors; both are
 * written into a private directory per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static ortep_ep *cpu; /* the repacked weights' host memory */

static void cleanup(void) {
  ortep_ep_destroy(cpu);
  char path[128];
  snprintf(path, sizeof path, "%s/config.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  unlink(path);
  rmdir(dir);
}

static int put(const char *name, const uint8_t *p, size_t n) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(p, 1, n, f) : 0;
  return fclose(f) == 0 && w == n ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/ortep-fuzz-model-XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
    if (ortep_cpu_ep_create(NULL, &cpu) != ORTEP_OK || ortep_ep_initialize(cpu, NULL) != ORTEP_OK) abort();
  }
  const uint8_t *nul = memchr(data, 0, size);
  size_t clen = nul ? (size_t)(nul - data) : size;
  const uint8_t *st = nul ? nul + 1 : data + size;
  if (put("config.json", data, clen) || put("model.safetensors", st, (size_t)(data + size - st))) abort();
  ortep_model *m = NULL;
  ortep_status s = ortep_model_open(dir, &m);
  if (s == ORTEP_OK) {
    const ortep_model_config *c = ortep_model_get_config(m);
    /* an accepted model has every tensor its config implies */
    if (!ortep_model_tensor(m, "model.embed_tokens.weight") || !ortep_model_tensor(m, "model.norm.weight") ||
        c->num_hidden_layers < 1)
      abort();
    ortep_model_close(m);
    ortep_model_options o = {.weights = ORTEP_WEIGHTS_READ, .host = cpu};
    s = ortep_model_open_with(dir, &o, &m);
    if (s == ORTEP_OK) {
      const ortep_safetensors_entry *e = ortep_model_tensor(m, "model.layers.0.mlp.down_proj.weight");
      if (!e || (e->shape.rank != 2 && e->shape.rank != 4)) abort();
      ortep_model_close(m);
    } else if (s != ORTEP_E_OUT_OF_MEMORY && s != ORTEP_E_BUDGET_EXCEEDED) {
      abort(); /* what opened mapped opens read and repacked */
    }
  } else if (s != ORTEP_E_FORMAT && s != ORTEP_E_IO && s != ORTEP_E_OUT_OF_MEMORY) {
    abort();
  } else if (m) {
    abort(); /* a failed open hands nothing out */
  }
  return 0;
}
