/* write_model.c: writes a synthetic preset for tests that need a model on
 * disk: write_model DIR PRESET [DTYPE] */
#include <stdio.h>

#include "ortep/ortep.h"

int main(int argc, char **argv) {
  ortep_dtype dt = ORTEP_DTYPE_F32;
  if (argc < 3 || (argc > 3 && ortep_dtype_parse(argv[3], &dt) != ORTEP_OK)) {
    fprintf(stderr, "usage: write_model DIR PRESET [f32|f16|bf16]\n");
    return 2;
  }
  if (ortep_model_write_synthetic(argv[1], argv[2], dt, 1) != ORTEP_OK) {
    fprintf(stderr, "write_model: %s\n", ortep_last_error());
    return 1;
  }
  return 0;
}
