/* test_wcache.c: the weights cache (decode.h: ortep.weights_cache) and the
 * CPU EP context under it (backend_impl.h: save_context / load_context).
 *
 * A first open prepares and writes the file; a second maps it: the same
 * logits bit for bit, nothing quantized or copied (the budget is charged
 * nothing for the weights). A stale (the model file's time changed),
 * truncated, damaged or foreign file is refused with the reason and rebuilt;
 * an unwritable directory leaves the decoder working (FAILED, the reason);
 * off writes nothing; a file another build made (other EP keys) is at the
 * same path and replaced there, never left beside this build's. Writing a
 * file removes what no build can use and, beyond ortep.weights_cache_max,
 * the least recently used. The EP's loader refuses every inconsistent blob. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "llm/internal.h" /* the cache's own open, for two EPs whose keys differ */
#include "testutil.h"

typedef struct run {
  ortep_weights_cache_info info;
  uint64_t charged; /* host bytes the open charged */
  float logits[4][2048];
} run;

/* Opens dir (q8_0 projections unless wd says otherwise) with the cache in
 * cache_dir (at most max bytes when max is not NULL), takes 4 greedy steps'
 * logits, and what the cache did. */
static void open_run_max(const char *dir, const char *cache_dir, const char *wd, const char *max, run *r) {
  ortep_config *c;
  ck_assert_ok(ortep_config_create(&c));
  if (wd) ck_assert_ok(ortep_config_set(c, "ortep.weights_dtype", wd));
  ck_assert_ok(ortep_config_set(c, "ortep.weights_cache", cache_dir));
  if (max) ck_assert_ok(ortep_config_set(c, "ortep.weights_cache_max", max));
  ortep_governor *g;
  ck_assert_ok(ortep_governor_create(&g));
  ortep_decoder *d;
  ck_assert_ok(ortep_decoder_open(
      dir, &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32, .config = c, .governor = g}, &d));
  ortep_mem_stats ms;
  ortep_governor_get_stats(g, ORTEP_TIER_HOST, &ms);
  r->charged = ms.current_bytes;
  ortep_decoder_weights_cache(d, &r->info);
  int32_t next = 3;
  for (int i = 0; i < 4; i++) {
    ck_assert_ok(ortep_decoder_step(d, next, i, &next));
    ck_assert_ok(ortep_decoder_logits(d, r->logits[i], 2048));
  }
  ortep_decoder_close(d);
  ortep_governor_destroy(g);
  ortep_config_destroy(c);
}
static void open_run(const char *dir, const char *cache_dir, const char *wd, run *r) {
  open_run_max(dir, cache_dir, wd, NULL, r);
}

static void rm_dir(const char *d) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", d);
  ck_assert_int_eq(system(cmd), 0);
}

static off_t file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? sb.st_size : -1;
}

/* Overwrites one byte of the file at off with its complement. */
static void flip(const char *path, off_t off) {
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  unsigned char b;
  ck_assert_int_eq(pread(fd, &b, 1, off), 1);
  b = (unsigned char)~b;
  ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

/* Flips the lowest bit of the byte at off (a weight's: a small change). */
static void nudge(const char *path, off_t off) {
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  unsigned char b;
  ck_assert_int_eq(pread(fd, &b, 1, off), 1);
  b ^= 1;
  ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

/* Sets byte off of dir/name to v. */
static void flip_to(const char *dir, const char *name, off_t off, unsigned char v) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, &v, 1, off), 1);
  close(fd);
}

/* Recomputes the checksum of the file's data in its header (at 88), as
 * something that edits it on purpose would: the edit is then for the EP's
 * own checks to find. */
static void reseal(const char *path) {
  off_t n = file_size(path) - 4096;
  uint8_t *blob = malloc((size_t)n);
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, blob, (size_t)n, 4096), (ssize_t)n);
  uint64_t sum = XXH3_64bits(blob, (size_t)n);
  ck_assert_int_eq(pwrite(fd, &sum, 8, 88), 8);
  close(fd);
  free(blob);
}

static void assert_rebuilt(const run *r, const char *why) {
  ck_assert_msg(r->info.state == ORTEP_WEIGHTS_CACHE_REBUILT, "state %s (reason '%s'), not rebuilt",
                ortep_weights_cache_state_name(r->info.state), r->info.reason);
  ck_assert_msg(strstr(r->info.reason, why), "reason '%s' lacks '%s'", r->info.reason, why);
}

START_TEST(a_second_open_maps_what_the_first_prepared) {
  char dir[64], cache[64] = "/tmp/ortep-wcache-XXXXXX";
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, cache, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert_str_eq(a->info.reason, "");
  ck_assert_int_eq(file_size(a->info.path), (off_t)a->info.bytes);
  ck_assert_uint_gt(a->info.bytes, 1u << 20); /* the quantized projections and table */
  open_run(dir, cache, "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert_str_eq(b->info.path, a->info.path);
  ck_assert_msg(!memcmp(a->logits, b->logits, sizeof a->logits), "the cached weights decode differently");
  /* the prepared weights were charged the first time, not the second */
  ck_assert_uint_ge(a->charged - b->charged, a->info.bytes - (64 << 10));
  /* other options, another file; the blocked bf16 weights are cached too */
  open_run(dir, cache, "q4_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert_str_ne(b->info.path, a->info.path);
  open_run(dir, cache, NULL, a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  /* written in 2 MiB pieces: this file takes several and a shorter last one */
  ck_assert_uint_gt(a->info.bytes, 2u * (2u << 20));
  ck_assert_uint_ne(a->info.bytes % (2u << 20), 0);
  ck_assert_int_eq(file_size(a->info.path), (off_t)a->info.bytes);
  open_run(dir, cache, NULL, b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  free(a), free(b);
  rm_dir(cache);
  test_model_dir_remove(dir);
}
END_TEST

START_TEST(a_bad_file_is_refused_and_rebuilt) {
  char dir[64], cache[64] = "/tmp/ortep-wcache-XXXXXX", model[128];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  snprintf(model, sizeof model, "%s/model.safetensors", dir);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, cache, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  const char *path = a->info.path;
  /* stale: the model file's time moved */
  struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ck_assert_int_eq(utimensat(AT_FDCWD, model, ts, 0), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "stale: the model file changed");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  open_run(dir, cache, "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  /* stale: a weight changed in place, its size and time put back as they
   * were (it was served from the old file); the change time says so */
  struct stat before;
  ck_assert_int_eq(stat(model, &before), 0);
  nudge(model, before.st_size - 4);
  struct timespec back[2] = {before.st_atim, before.st_mtim};
  ck_assert_int_eq(utimensat(AT_FDCWD, model, back, 0), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "stale: the model file changed");
  nudge(model, before.st_size - 4);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "stale: the model file changed");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  /* truncated */
  ck_assert_int_eq(truncate(path, file_size(path) - 100), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "truncated");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  ck_assert_int_eq(truncate(path, 100), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "shorter than its header");
  /* a data byte flipped, or zeroed, deep in the weights: the checksum
   * (they decoded differently, silently) */
  off_t deep = file_size(path) - 5000;
  flip(path, deep);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "does not match its checksum");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  unsigned char was;
  int fd = open(path, O_RDONLY);
  ck_assert_int_eq(pread(fd, &was, 1, deep), 1);
  close(fd);
  flip(path, deep);
  if (was == 0xff) flip(path, deep - 1); /* the complement of 0xff is the zero: a byte that was not zero */
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "does not match its checksum");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  /* the EP's table damaged (a byte of the first entry), its checksum made to match */
  flip(path, 4096 + 64 + 200);
  reseal(path);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "cpu_ep context");
  /* the EP's keys: made by another build */
  flip(path, 4096 + 64 + 2);
  reseal(path);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "made for another EP");
  /* not a cache at all */
  flip(path, 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "not an ortep weights cache");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  open_run(dir, cache, "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  free(a), free(b);
  rm_dir(cache);
  test_model_dir_remove(dir);
}
END_TEST

/* A FIFO at the cache file's name, or a link to one, is refused without
 * blocking the open (it hung there) and replaced by the file; a cache
 * directory whose path is too long fails saying so (it was silently off),
 * and the decoder runs without it. */
START_TEST(a_file_not_regular_or_a_path_too_long_is_said) {
  char dir[64], cache[64] = "/tmp/ortep-wcache-XXXXXX", fifo[96], path[4096];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  snprintf(fifo, sizeof fifo, "%s/a.fifo", cache);
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, cache, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  snprintf(path, sizeof path, "%s", a->info.path);
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(mkfifo(path, 0644), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "not a regular file");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(symlink(fifo, path), 0);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "not a regular file");
  open_run(dir, cache, "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  char *deep = malloc(3300);
  snprintf(deep, 3300, "%s/", cache);
  for (size_t n = strlen(deep); n < 3200; n++) deep[n] = n % 200 ? 'd' : '/', deep[n + 1] = '\0';
  open_run(dir, deep, "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_FAILED);
  ck_assert_msg(strstr(b->info.reason, "is longer than") && strstr(b->info.reason, "runs without it"), "%s",
                b->info.reason);
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  free(deep), free(a), free(b);
  rm_dir(cache);
  test_model_dir_remove(dir);
}
END_TEST

/* Sets the prepared shape of entry `name` in the cache file's EP context
 * (kernels/cpu/context.c: entries of ENTRY bytes, the prepared dims at
 * DIMS_AT, the name's length at NAME_AT, the names after the entries) to
 * [rows / 2, cols * 2], the same bytes, and recomputes the table's hash:
 * an edit the context's own checks cannot see. */
enum {
  ENTRY = 16 + 16 * ORTEP_MAX_RANK + 8 + 24,
  DIMS_AT = 20 + 8 * ORTEP_MAX_RANK,
  NAME_AT = 20 + 16 * ORTEP_MAX_RANK
};
static void reshape_entry(const char *path, const char *name) {
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  uint8_t h[64];
  ck_assert_int_eq(pread(fd, h, 64, 4096), 64);
  uint32_t n;
  uint64_t kb, tb;
  memcpy(&n, h + 12, 4), memcpy(&kb, h + 16, 8), memcpy(&tb, h + 24, 8);
  uint8_t *keys = malloc(kb + 1), *t = malloc(tb);
  ck_assert_int_eq(pread(fd, keys, kb, 4096 + 64), (ssize_t)kb);
  ck_assert_int_eq(pread(fd, t, tb, 4096 + 64 + (off_t)kb), (ssize_t)tb);
  size_t at = (size_t)n * ENTRY, found = n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len;
    memcpy(&len, t + i * ENTRY + NAME_AT, 4);
    if (len == strlen(name) && !memcmp(t + at, name, len)) found = i;
    at += len;
  }
  ck_assert_uint_lt(found, n);
  uint8_t *e = t + found * ENTRY;
  int64_t dims[2];
  memcpy(dims, e + DIMS_AT, 16);
  ck_assert_int_eq(dims[0] % 2, 0);
  dims[0] /= 2, dims[1] *= 2;
  memcpy(e + DIMS_AT, dims, 16);
  uint64_t hash = ortep__fnv1a(ortep__fnv1a(ORTEP__FNV_SEED, keys, kb), t, tb);
  ck_assert_int_eq(pwrite(fd, t, tb, 4096 + 64 + (off_t)kb), (ssize_t)tb);
  ck_assert_int_eq(pwrite(fd, &hash, 8, 4096 + 48), 8);
  close(fd);
  free(keys), free(t);
  reseal(path);
}

/* A cache file edited so that a prepared tensor has another shape of the
 * same bytes (its table hash recomputed) is not served in that shape: the
 * EP prepares that weight again (the embedding lookup wrote past its
 * buffer), and the logits are the same. */
START_TEST(a_prepared_tensor_in_another_shape_is_prepared_again) {
  char dir[64], cache[64] = "/tmp/ortep-wcache-XXXXXX";
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, cache, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  reshape_entry(a->info.path, "model.embed_tokens.weight");
  open_run(dir, cache, "q8_0", b);
  ck_assert_msg(!memcmp(a->logits, b->logits, sizeof a->logits), "a reshaped table decodes differently");
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_HIT); /* the other weights came from the file */
  free(a), free(b);
  rm_dir(cache);
  test_model_dir_remove(dir);
}
END_TEST

START_TEST(no_file_when_off_or_unwritable) {
  char dir[64], blocker[64] = "/tmp/ortep-wcache-XXXXXX", under[96];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  int fd = mkstemp(blocker); /* a file where the directory would go */
  ck_assert_int_ge(fd, 0);
  close(fd);
  snprintf(under, sizeof under, "%s/cache", blocker);
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, under, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_FAILED);
  ck_assert_msg(strstr(a->info.reason, "cannot create") && strstr(a->info.reason, "runs without it"), "%s",
                a->info.reason);
  open_run(dir, "off", "q8_0", b);
  ck_assert_int_eq(b->info.state, ORTEP_WEIGHTS_CACHE_OFF);
  ck_assert_str_eq(b->info.path, "");
  ck_assert(!memcmp(a->logits, b->logits, sizeof a->logits));
  ck_assert_str_eq(ortep_weights_cache_state_name(ORTEP_WEIGHTS_CACHE_HIT), "hit");
  unlink(blocker);
  free(a), free(b);
  test_model_dir_remove(dir);
}
END_TEST

/* The CPU EP's context through the contract: sized, streamed, loaded back
 * into another EP that then serves the same bytes; a writer that stops
 * fails the save; blobs cut anywhere, or with any header byte changed, are
 * refused as ORTEP_E_FORMAT. */
typedef struct sink {
  uint8_t *p;
  size_t n, cap, stop_at;
} sink;
static bool to_sink(void *ctx, const void *bytes, size_t n) {
  sink *s = ctx;
  if (s->n + n > s->stop_at) return false;
  if (s->n + n > s->cap) { /* 64-byte aligned, as load_context needs */
    size_t cap = ((s->n + n) * 2 + 63) / 64 * 64;
    uint8_t *p = aligned_alloc(64, cap);
    if (!p) return false;
    if (s->n) memcpy(p, s->p, s->n);
    free(s->p);
    s->p = p, s->cap = cap;
  }
  memcpy(s->p + s->n, bytes, n);
  s->n += n;
  return true;
}

/* The file's name is the model's and the decoder's options', not the EP's
 * keys: a build whose keys differ (another ortep version or layout) finds
 * this build's file at the same path, refuses it and writes its own over
 * it, instead of leaving a stale file beside it for good. Two CPU EPs whose
 * keys differ (their layouts) stand in for two builds. */
START_TEST(another_build_replaces_the_file_in_place) {
  char dir[64], cache[64] = "/tmp/ortep-wcache-XXXXXX", model[128];
  test_model_dir(dir, sizeof dir, "small", ORTEP_DTYPE_BF16);
  snprintf(model, sizeof model, "%s/model.safetensors", dir);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  ortep_ep *eps[2];
  for (int i = 0; i < 2; i++) {
    ortep_config *c;
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, "cpu.weights_layout", i ? "row_major" : "blocked"));
    ck_assert_ok(ortep_cpu_ep_create(NULL, &eps[i]));
    ck_assert_ok(ortep_ep_initialize(eps[i], c));
    ortep_config_destroy(c);
  }
  const char *ka[4], *kb[4];
  ck_assert_uint_eq(ortep_ep_context_source_keys(eps[0], ka, 4), 3);
  ck_assert_uint_eq(ortep_ep_context_source_keys(eps[1], kb, 4), 3);
  ck_assert_str_ne(ka[2], kb[2]); /* the keys differ */
  ortep__wcache *w[2];
  ortep_weights_cache_info info[2];
  for (int i = 0; i < 2; i++) {
    ck_assert_ok(ortep__wcache_open(cache, NULL, model, "the same options", eps[i], &w[i]));
    ortep__wcache_info(w[i], &info[i]);
    ck_assert_int_eq(info[i].state, ORTEP_WEIGHTS_CACHE_OFF); /* no file yet: nothing mapped */
  }
  ck_assert_str_ne(info[0].path, "");
  ck_assert_str_eq(info[0].path, info[1].path);
  for (int i = 0; i < 2; i++) ortep_ep_destroy(eps[i]), ortep__wcache_close(w[i]);
  /* the decoder's own options name the layouts apart: another file each */
  run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  open_run(dir, cache, "q8_0", a);
  ck_assert_int_eq(a->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  /* a file this path held from another build (its keys changed in the
   * header): refused and rewritten at the same path, one file in the
   * directory */
  flip(a->info.path, 4096 + 64 + 2);
  reseal(a->info.path);
  open_run(dir, cache, "q8_0", b);
  assert_rebuilt(b, "made for another EP");
  ck_assert_str_eq(b->info.path, a->info.path);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", cache);
  ck_assert_int_eq(system(cmd), 0);
  free(a), free(b);
  rm_dir(cache);
  test_model_dir_remove(dir);
}
END_TEST

/* A file in dir: name, holding n bytes (a copy of the first n of src when
 * src is not NULL, else the byte c). */
static void put_file(const char *dir, const char *name, const char *src, size_t n, int c) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t *buf = malloc(n);
  memset(buf, c, n);
  if (src) {
    int in = open(src, O_RDONLY);
    ck_assert_int_ge(in, 0);
    ck_assert_int_eq(pread(in, buf, n, 0), (ssize_t)n);
    close(in);
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
  close(fd);
  free(buf);
}
static bool exists_in(const char *dir, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}
static void age(const char *path, time_t seconds_ago) {
  struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) - seconds_ago, 0}};
  ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}
static time_t mtime_of(const char *path) {
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  return sb.st_mtime;
}

/* Writing a file tidies the directory: a file whose model file is gone, one
 * of another format version, a truncated one and a temporary file whose
 * writer is gone are removed (they can never be used again); a live
 * writer's temporary file, files that are not ortep's and other names stay. */
START_TEST(writing_removes_the_files_no_build_can_use) {
  char a[64], b[64], cache[64] = "/tmp/ortep-wcache-XXXXXX";
  test_model_dir(a, sizeof a, "small", ORTEP_DTYPE_BF16);
  test_model_dir(b, sizeof b, "small", ORTEP_DTYPE_BF16);
  ck_assert_ptr_nonnull(mkdtemp(cache));
  run *r = malloc(sizeof *r);
  open_run(a, cache, "q8_0", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert_uint_eq(r->info.removed, 0);
  char pa[4096];
  snprintf(pa, sizeof pa, "%s", r->info.path);
  size_t sa = (size_t)file_size(pa);
  /* a writer that is gone: a child that exited, waited for */
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) _exit(0);
  ck_assert_int_eq(waitpid(child, NULL, 0), child);
  char dead[64], live[64];
  snprintf(dead, sizeof dead, "0123456789abcdef.ortepw.%ld.tmp", (long)child);
  snprintf(live, sizeof live, "fedcba9876543210.ortepw.%ld.tmp", (long)getpid());
  put_file(cache, dead, NULL, 1000, 7);
  put_file(cache, live, NULL, 1000, 7);
  put_file(cache, "00000000000000aa.ortepw", pa, sa, 0); /* another format version: below */
  flip_to(cache, "00000000000000aa.ortepw", 8, 1);
  put_file(cache, "00000000000000ab.ortepw", pa, 5000, 0);   /* truncated */
  put_file(cache, "00000000000000bb.ortepw", NULL, 5000, 9); /* not ortep's */
  put_file(cache, "notes.txt", pa, 5000, 0);                 /* not a cache file's name */
  test_model_dir_remove(a);                                  /* its model is gone */
  open_run(b, cache, "q8_0", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert_uint_eq(r->info.removed, 4);
  ck_assert_uint_eq(r->info.removed_bytes, 2 * sa + 1000 + 5000);
  ck_assert(access(pa, F_OK) != 0);
  ck_assert(!exists_in(cache, dead) && !exists_in(cache, "00000000000000aa.ortepw") &&
            !exists_in(cache, "00000000000000ab.ortepw"));
  ck_assert(exists_in(cache, live) && exists_in(cache, "00000000000000bb.ortepw") && exists_in(cache, "notes.txt"));
  ck_assert_int_eq(file_size(r->info.path), (off_t)r->info.bytes);
  /* a hit writes nothing and removes nothing */
  open_run(b, cache, "q8_0", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert_uint_eq(r->info.removed, 0);
  free(r);
  rm_dir(cache);
  test_model_dir_remove(b);
}
END_TEST

/* ortep.weights_cache_max: beyond it the least recently used files go (a
 * hit makes its file the most recent), never the one just written; a value
 * that is not a byte count is refused at open, naming the key and the
 * forms it takes. */
START_TEST(beyond_the_limit_the_least_recently_used_go) {
  char m[3][64], cache[64] = "/tmp/ortep-wcache-XXXXXX", p[3][4096];
  ck_assert_ptr_nonnull(mkdtemp(cache));
  run *r = malloc(sizeof *r);
  for (int i = 0; i < 3; i++) test_model_dir(m[i], sizeof m[i], "small", ORTEP_DTYPE_BF16);
  for (int i = 0; i < 2; i++) {
    open_run(m[i], cache, "q8_0", r);
    ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
    snprintf(p[i], sizeof p[i], "%s", r->info.path);
  }
  uint64_t s = r->info.bytes; /* the same shapes: every file this size */
  age(p[0], 7200);
  age(p[1], 3600);
  open_run(m[0], cache, "q8_0", r); /* a hit: model 0's file is now the most recent */
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert_int_ge(mtime_of(p[0]), time(NULL) - 600);
  char max[32];
  snprintf(max, sizeof max, "%llu", (unsigned long long)(2 * s + s / 2));
  open_run_max(m[2], cache, "q8_0", max, r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  snprintf(p[2], sizeof p[2], "%s", r->info.path);
  ck_assert_uint_eq(r->info.bytes, s);
  ck_assert_uint_eq(r->info.removed, 1);
  ck_assert_uint_eq(r->info.removed_bytes, s);
  ck_assert(access(p[1], F_OK) != 0 && access(p[0], F_OK) == 0 && access(p[2], F_OK) == 0);
  /* a limit below one file: the others go, the new one stays */
  open_run_max(m[2], cache, "q4_0", "1K", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert_uint_eq(r->info.removed, 2);
  ck_assert(access(p[0], F_OK) != 0 && access(p[2], F_OK) != 0 && access(r->info.path, F_OK) == 0);
  open_run_max(m[2], cache, "q4_0", "unlimited", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert_uint_eq(r->info.removed, 0);
  /* a hit tidies too: a limit lowered since the last write holds from the
   * next open, and the file hit stays */
  char hit[4096];
  snprintf(hit, sizeof hit, "%s", r->info.path);
  open_run_max(m[0], cache, "q8_0", "unlimited", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_WRITTEN);
  ck_assert(access(hit, F_OK) == 0 && access(r->info.path, F_OK) == 0);
  open_run_max(m[2], cache, "q4_0", "1K", r);
  ck_assert_int_eq(r->info.state, ORTEP_WEIGHTS_CACHE_HIT);
  ck_assert_uint_eq(r->info.removed, 1);
  ck_assert(access(hit, F_OK) == 0 && access(p[0], F_OK) != 0);
  /* not a byte count: refused before anything is prepared or written */
  const char *bad[] = {"lots", "-1", "12X", "", "99999999999T"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ortep_config *c;
    ck_assert_ok(ortep_config_create(&c));
    ck_assert_ok(ortep_config_set(c, "ortep.weights_cache", cache));
    ck_assert_ok(ortep_config_set(c, "ortep.weights_cache_max", bad[i]));
    ortep_decoder *d = NULL;
    ck_assert_int_eq(
        ortep_decoder_open(m[1], &(ortep_decoder_options){.ep = "cpu", .max_seq_len = 32, .config = c}, &d),
        ORTEP_E_INVALID_ARGUMENT);
    ck_assert_ptr_null(d);
    ck_assert_msg(strstr(ortep_last_error(), "ortep.weights_cache_max") && strstr(ortep_last_error(), "unlimited"),
                  "%s", ortep_last_error());
    ortep_config_destroy(c);
  }
  char cmd[200];
  snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", cache);
  ck_assert_int_eq(system(cmd), 0);
  free(r);
  rm_dir(cache);
  for (int i = 0; i < 3; i++) test_model_dir_remove(m[i]);
}
END_TEST

START_TEST(the_cpu_context_round_trips_and_refuses_bad_blobs) {
  enum { N = 8, K = 64 };
  ortep_ep *a = test_cpu_ep(), *b = test_cpu_ep();
  const char *keys[4];
  ck_assert_uint_eq(ortep_ep_context_source_keys(a, keys, 4), 3);
  ck_assert_str_eq(keys[0], "cpu_ep");
  uint16_t w[N * K];
  for (size_t i = 0; i < N * K; i++) w[i] = ortep_f32_to_bf16((float)((int)(i % 17) - 8) / 8.0f);
  ortep_graph *g;
  ck_assert_ok(ortep_graph_create(&g));
  ortep_shape ws = SHAPE(N, K), xs = SHAPE(1, K), ys = SHAPE(1, N);
  ck_assert_ok(ortep_graph_add_input(g, "x", ORTEP_DTYPE_F32, &xs));
  ck_assert_ok(ortep_graph_add_value(g, "y", ORTEP_DTYPE_F32, &ys));
  ck_assert_ok(ortep_graph_add_value(g, "w", ORTEP_DTYPE_BF16, &ws));
  ortep_node_id lin;
  ck_assert_ok(ortep_graph_add_node(g, "Linear", ORTEP_DOMAIN_ORTEP, "lin", (const char *[]){"x", "w"}, 2,
                                    (const char *[]){"y"}, 1, &lin));
  ortep_initializer_use use = {g, ortep_graph_node(g, lin), 1};
  ortep_initializer in = {"w", ORTEP_DTYPE_BF16, ws, w, sizeof w, NULL, &use, 1, ORTEP_DTYPE_COUNT, NULL, NULL};
  ortep_dtype dt;
  ortep_shape sh;
  ortep_buffer pa, pb;
  ck_assert_ok(ortep_ep_prepare_initializer(a, &in, &dt, &sh, &pa));
  size_t len;
  ck_assert_ok(ortep_ep_save_context(a, NULL, NULL, &len));
  sink s = {NULL, 0, 0, SIZE_MAX};
  ck_assert_ok(ortep_ep_save_context(a, to_sink, &s, &len));
  ck_assert_uint_eq(s.n, len);
  ck_assert_ok(ortep_ep_load_context(b, s.p, s.n));
  ck_assert_ok(ortep_ep_prepare_initializer(b, &in, &dt, &sh, &pb));
  ck_assert_int_eq(pb.owner, ORTEP_BUFFER_BORROWED); /* served from the blob */
  ck_assert_ptr_eq(pb.ptr, s.p + (size_t)((uint8_t *)pb.ptr - s.p));
  ck_assert_mem_eq(pb.ptr, pa.ptr, sizeof w);
  ck_assert_int_eq(sh.rank, 4);
  ck_assert_ok(ortep_ep_deallocate(b, &pb));
  /* another source (the same bytes as f16) is not served: prepared anew */
  in.dtype = ORTEP_DTYPE_F16;
  ck_assert_ok(ortep_ep_prepare_initializer(b, &in, &dt, &sh, &pb));
  ck_assert_int_eq(pb.owner, ORTEP_BUFFER_OWNED);
  ck_assert_int_eq(dt, ORTEP_DTYPE_F16);
  ck_assert_ok(ortep_ep_deallocate(b, &pb));
  in.dtype = ORTEP_DTYPE_BF16;
  /* a writer that stops */
  sink short_sink = {NULL, 0, 0, 100};
  ck_assert_status(ortep_ep_save_context(a, to_sink, &short_sink, &len), ORTEP_E_IO);
  free(short_sink.p);
  /* every cut and every header byte changed: refused, never accepted */
  ortep_ep *c = test_cpu_ep();
  { /* a blob off the 64-byte alignment its weights are served at: refused, saying so */
    uint8_t *off = aligned_alloc(64, (s.n + 16 + 63) / 64 * 64);
    memcpy(off + 16, s.p, s.n);
    ck_assert_status(ortep_ep_load_context(c, off + 16, s.n), ORTEP_E_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ortep_last_error(), "not 64-byte aligned"));
    free(off);
  }
  for (size_t cut = 0; cut < s.n; cut += cut < 300 ? 1 : 97) {
    ck_assert_status(ortep_ep_load_context(c, s.p, cut), ORTEP_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(ortep_last_error(), "cpu_ep context"));
  }
  for (size_t at = 0; at < 64; at++) {
    if (at >= 56) continue; /* the header's last 8 bytes are reserved */
    uint8_t *copy = aligned_alloc(64, (s.n + 63) / 64 * 64);
    memcpy(copy, s.p, s.n);
    copy[at] ^= 0x5a;
    ck_assert_msg(ortep_ep_load_context(c, copy, s.n) == ORTEP_E_FORMAT, "header byte %zu changed was accepted", at);
    free(copy);
  }
  ck_assert_ok(ortep_ep_deallocate(a, &pa));
  ortep_ep_destroy(c);
  ortep_ep_destroy(b);
  ortep_ep_destroy(a);
  ortep_graph_destroy(g);
  free(s.p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wcache");
  TCase *tc = tcase_create("wcache");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, a_second_open_maps_what_the_first_prepared);
  tcase_add_test(tc, a_bad_file_is_refused_and_rebuilt);
  tcase_add_test(tc, no_file_when_off_or_unwritable);
  tcase_add_test(tc, a_file_not_regular_or_a_path_too_long_is_said);
  tcase_add_test(tc, a_prepared_tensor_in_another_shape_is_prepared_again);
  tcase_add_test(tc, another_build_replaces_the_file_in_place);
  tcase_add_test(tc, writing_removes_the_files_no_build_can_use);
  tcase_add_test(tc, beyond_the_limit_the_least_recently_used_go);
  tcase_add_test(tc, the_cpu_context_round_trips_and_refuses_bad_blobs);
  suite_add_tcase(s, tc);
  return test_run(s);
}
