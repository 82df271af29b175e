/* fuzz_wcache.c: libFuzzer harness for the weights cache's reader
 * (llm/weights_cache.c): the input is a cache file, put at the name the
 * cache reads for a tiny model, then opened as a decoder would open it
 * (header checks, the data's checksum, the CPU EP's loader). It must end
 * as a hit or a refusal with a reason, never a crash, a leak or a read
 * outside the file.
 *
 * A random header would never name the model (its size, times, inode) nor
 * match its checksum, and a blob written by another build is refused by
 * its keys, so byte 12 of the input (unused by the format) says which parts
 * the harness leaves as the input has them: bit 0 the model file's fields,
 * bit 1 the options and path, bit 2 the checksum, bit 3 the data (clear:
 * the data and its size are those of a file this build wrote for the model
 * at start). Each part whose bit is clear is set from that file, so a seed
 * of a header with byte 12 zero is a hit and mutations reach past each
 * check (the EP's loader alone: fuzz_cpu_context). */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "llm/internal.h"
#include "ortep/ortep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEADER 4096u

static char g_model[128], g_cache[64], g_path[4096], g_options[1024];
static uint8_t g_header[HEADER]; /* of the file this build wrote */
static uint8_t *g_blob;          /* its data */
static size_t g_blob_bytes;

static void cleanup(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%.*s' '%s'", (int)(strrchr(g_model, '/') - g_model), g_model, g_cache);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_wcache: could not remove its temporary folders\n");
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) abort();
  for (size_t at = 0; at < n;) {
    ssize_t k = write(fd, p + at, n - at);
    if (k <= 0) abort();
    at += (size_t)k;
  }
  close(fd);
}

/* A tiny model, a cache file a decoder writes for it, and what its header says. */
static void setup(void) {
  char dir[64] = "/tmp/ortep-fuzz-wcache-XXXXXX";
  snprintf(g_cache, sizeof g_cache, "/tmp/ortep-fuzz-wcache-cache-XXXXXX");
  if (!mkdtemp(dir) || !mkdtemp(g_cache) ||
      ortep_model_write_synthetic(dir, "tiny-llama", ORTEP_DTYPE_BF16, 1234) != ORTEP_OK)
    abort();
  snprintf(g_model, sizeof g_model, "%s/model.safetensors", dir);
  ortep_config *c;
  ortep_decoder *d;
  if (ortep_config_create(&c) != ORTEP_OK || ortep_config_set(c, "ortep.weights_dtype", "q8_0") != ORTEP_OK ||
      ortep_config_set(c, "ortep.weights_cache", g_cache) != ORTEP_OK ||
      ortep_decoder_open(dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 16, .config = c}, &d) != ORTEP_OK)
    abort();
  ortep_weights_cache_info info;
  ortep_decoder_weights_cache(d, &info);
  if (info.state != ORTEP_WEIGHTS_CACHE_WRITTEN) abort();
  snprintf(g_path, sizeof g_path, "%s", info.path);
  ortep_decoder_close(d);
  ortep_config_destroy(c);
  struct stat sb;
  int fd = open(g_path, O_RDONLY);
  if (fd < 0 || fstat(fd, &sb) != 0 || pread(fd, g_header, HEADER, 0) != HEADER) abort();
  g_blob_bytes = (size_t)sb.st_size - HEADER;
  if (!(g_blob = malloc(g_blob_bytes)) || pread(fd, g_blob, g_blob_bytes, HEADER) != (ssize_t)g_blob_bytes) abort();
  close(fd);
  atexit(cleanup);
  uint64_t n;
  memcpy(&n, g_header + 96, 8);
  if (n >= sizeof g_options) abort();
  memcpy(g_options, g_header + 104, n);
  char *nl = strchr(g_options, '\n'); /* the decoder's options; the EP's keys follow */
  if (nl) *nl = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) setup();
  bool whole = size >= HEADER; /* a header to complete */
  size_t n = whole && !(data[12] & 8) ? HEADER + g_blob_bytes : size;
  uint8_t *file = malloc(n ? n : 1);
  if (!file) abort();
  memcpy(file, data, n < size ? n : size);
  if (whole) {
    uint8_t keep = file[12];
    if (!(keep & 8)) {
      memcpy(file + HEADER, g_blob, g_blob_bytes);
      memcpy(file + 80, g_header + 80, 8); /* its size */
    }
    if (!(keep & 1)) memcpy(file + 16, g_header + 16, 64);
    if (!(keep & 2)) memcpy(file + 96, g_header + 96, HEADER - 96);
    if (!(keep & 4)) {
      uint64_t sum = XXH3_64bits(file + HEADER, n - HEADER);
      memcpy(file + 88, &sum, 8);
    }
  }
  write_file(g_path, file, n);
  free(file);
  ortep_ep *cpu = NULL;
  ortep__wcache *w = NULL;
  if (ortep_cpu_ep_create(NULL, &cpu) != ORTEP_OK || ortep_ep_initialize(cpu, NULL) != ORTEP_OK ||
      ortep__wcache_open(g_cache, NULL, g_model, g_options, cpu, &w) != ORTEP_OK)
    abort();
  ortep_weights_cache_info info;
  ortep__wcache_info(w, &info);
  if (info.state != ORTEP_WEIGHTS_CACHE_HIT && !info.reason[0]) abort(); /* a refusal says why */
  ortep_ep_destroy(cpu); /* the EP may serve weights from the mapping: before it goes */
  ortep__wcache_close(w);
  return 0;
}
