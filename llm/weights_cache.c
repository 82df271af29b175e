/*
 * weights_cache.c: the decoder's weights cache (decode.h): the CPU EP's
 * prepared weights (its EP context) in a file keyed by the model file, so the
 * next open maps them instead of quantizing and repacking again.
 *
 * The file: a 4096-byte header, then the EP's blob (save_context) from
 * offset 4096 (page-aligned when mapped, so the blob's own 64-byte alignment
 * holds):
 *   "ORTEPWC1", u32 version, u32 0, then the model file as it was read
 *   (SOURCE_AT: u64 size, i64 mtime s, ns, i64 ctime s, ns, u64 inode,
 *   u64 device, u64 hash of its header), u64 blob bytes, u64 XXH3-64 of
 *   the blob, u64 length of the options text, the options text (what the
 *   decoder asked for and the EP's context keys), zeros.
 *   At 2040 the length of the model file's real path, the path at 2048
 *   (0 when longer than 2047 bytes), so a file can say whose it is.
 * Stale: any of the model file's fields differs. The ctime is the one a
 * user cannot set: restoring a changed file's size and mtime (touch -d)
 * sets it to now, and so does every write. The model's content is not
 * hashed: that would read every byte of it at each open, where a hit
 * reads none of the weights it replaces.
 * Corrupt: the blob's checksum, verified at every load before the EP sees
 * it: one pass of XXH3 over pages the first step reads anyway (what it
 * costs: docs/models.md).
 * The name: FNV-1a of the model file's real path and the decoder's options
 * (not the EP's keys), so one file per model and configuration, replaced
 * when it goes stale or another ortep build made it: an upgrade rewrites
 * the file in place instead of leaving the old build's beside it for good.
 * A new file is written beside it, flushed and renamed over it, so a reader
 * sees the old file or the whole new one.
 *
 * The directory is kept tidy when a file is written or hit (tidy): the files no
 * build of this format can use again go (their model file gone or changed,
 * another format version, truncated; a writer's temporary file whose
 * process is gone), then the least recently used (a hit touches its file)
 * while they add up to more than ortep.weights_cache_max.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "internal.h"
#include "ortep/decode.h"

#define MAGIC         "ORTEPWC1"
#define VERSION       3u
#define HEADER_BYTES  4096u
#define SOURCE_AT     16u /* the model file: size, mtime, ctime, inode, device, header hash */
#define SOURCE_BYTES  64u
#define BLOB_AT       80u   /* u64 blob bytes */
#define SUM_AT        88u   /* u64 XXH3-64 of the blob */
#define OPTIONS_AT    96u   /* u64 length, then the text */
#define PATH_LEN_AT   2040u /* u64: the model file's path length (0: not recorded) */
#define PATH_AT       2048u
#define HASHED_BYTES  ((size_t)1 << 20)
#define DEFAULT_LIMIT ((uint64_t)32 << 30) /* ortep.weights_cache_max */

struct ortep__wcache {
  ortep_weights_cache_info info;
  char model[PATH_MAX];
  char options[1024];
  struct stat st; /* the model file's */
  uint64_t hash;  /* of its header */
  void *map;      /* a loaded file (HIT), kept while the EP lives */
  size_t map_bytes, blob_bytes;
  bool refused;   /* a file was there and was refused: REBUILT once written */
  uint64_t limit; /* ortep.weights_cache_max */
};

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The directory: the config's, or $XDG_CACHE_HOME/ortep/weights, or
 * ~/.cache/ortep/weights: 1; 0 when off (or no home to put it in); -1 when
 * its path does not fit len bytes (out then holds its start). */
static int cache_dir(const char *v, char *out, size_t len) {
  if (v && !strcmp(v, "off")) return 0;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  size_t n;
  if (v && *v)
    n = (size_t)snprintf(out, len, "%s", v);
  else if (xdg && *xdg)
    n = (size_t)snprintf(out, len, "%s/ortep/weights", xdg);
  else if (home && *home)
    n = (size_t)snprintf(out, len, "%s/.cache/ortep/weights", home);
  else
    return 0;
  return n < len ? 1 : -1;
}

/* mkdir -p */
static bool make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    bool ok = mkdir(path, 0755) == 0 || errno == EEXIST;
    *p = '/';
    if (!ok) return false;
  }
  return mkdir(path, 0755) == 0 || errno == EEXIST;
}

/* info.reason (cut at its size: a long path shortens the message, no more) */
static void say(ortep__wcache *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(ortep__wcache *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->info.reason, sizeof w->info.reason, fmt, ap);
  va_end(ap);
}
static void refuse(ortep__wcache *w, const char *fmt, const char *detail) __attribute__((format(printf, 2, 0)));
static void refuse(ortep__wcache *w, const char *fmt, const char *detail) {
  w->refused = true;
  say(w, fmt, detail);
}

/* The model file's fields a cache file records (SOURCE_AT). */
static void source_fields(const struct stat *st, uint64_t hash, uint8_t *p) {
  put64(p, (uint64_t)st->st_size);
  put64(p + 8, (uint64_t)st->st_mtim.tv_sec);
  put64(p + 16, (uint64_t)st->st_mtim.tv_nsec);
  put64(p + 24, (uint64_t)st->st_ctim.tv_sec);
  put64(p + 32, (uint64_t)st->st_ctim.tv_nsec);
  put64(p + 40, (uint64_t)st->st_ino);
  put64(p + 48, (uint64_t)st->st_dev);
  put64(p + 56, hash);
}

/* The header a file for this model and these options has (its blob's
 * checksum: sum). */
static void header(const ortep__wcache *w, uint64_t blob, uint64_t sum, uint8_t *h) {
  memset(h, 0, HEADER_BYTES);
  memcpy(h, MAGIC, 8);
  h[8] = VERSION;
  source_fields(&w->st, w->hash, h + SOURCE_AT);
  put64(h + BLOB_AT, blob);
  put64(h + SUM_AT, sum);
  size_t n = strlen(w->options);
  put64(h + OPTIONS_AT, n);
  memcpy(h + OPTIONS_AT + 8, w->options, n);
  size_t p = strlen(w->model);
  if (p < HEADER_BYTES - PATH_AT) {
    put64(h + PATH_LEN_AT, p);
    memcpy(h + PATH_AT, w->model, p);
  }
}

/* A file that is there: its header checked against the model and options,
 * then its blob loaded by the EP. Any refusal is recorded (rebuilt later). */
static void try_load(ortep__wcache *w, ortep_ep *cpu) {
  /* not blocking: a FIFO (or a link to one) at the name must not hang the open */
  int fd = open(w->info.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return; /* none yet */
  struct stat sb;
  uint8_t want[HEADER_BYTES], got[HEADER_BYTES];
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    refuse(w, "%s", "it is not a regular file (a FIFO, a device or a directory, or a link to one)");
    return;
  }
  if (sb.st_size < (off_t)HEADER_BYTES || pread(fd, got, HEADER_BYTES, 0) != (ssize_t)HEADER_BYTES) {
    close(fd);
    refuse(w, "%s", "it is shorter than its header (truncated)");
    return;
  }
  uint64_t blob = get64(got + BLOB_AT);
  header(w, blob, get64(got + SUM_AT), want);
  if (memcmp(got, MAGIC, 8) || got[8] != VERSION) {
    close(fd);
    refuse(w, "%s", memcmp(got, MAGIC, 8) ? "it is not an ortep weights cache" : "it is of another format version");
    return;
  }
  if (memcmp(got + OPTIONS_AT, want + OPTIONS_AT, HEADER_BYTES - OPTIONS_AT)) {
    close(fd);
    refuse(w, "%s", "it was made with other options or for another EP build");
    return;
  }
  if (memcmp(got + SOURCE_AT, want + SOURCE_AT, SOURCE_BYTES)) {
    close(fd);
    refuse(w, "%s",
           "it is stale: the model file changed since it was written (its size, modification or change time, inode, "
           "device or header)");
    return;
  }
  if (blob != (uint64_t)sb.st_size - HEADER_BYTES) {
    close(fd);
    refuse(w, "%s", "its size is not what its header says (truncated or appended to)");
    return;
  }
  void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  (void)futimens(fd, NULL); /* used now: the last the limit evicts (fails harmlessly on another's file) */
  close(fd);
  if (map == MAP_FAILED) {
    refuse(w, "it could not be mapped: %s", strerror(errno));
    return;
  }
  /* pages the page cache does not hold are read in as huge folios (mapped
   * with huge pages); a kernel or filesystem without them ignores this */
#if defined(MADV_HUGEPAGE)
  (void)madvise(map, (size_t)sb.st_size, MADV_HUGEPAGE);
#endif
  if (XXH3_64bits((const uint8_t *)map + HEADER_BYTES, (size_t)blob) != get64(got + SUM_AT)) {
    refuse(w, "%s", "its data does not match its checksum (the file was damaged or edited)");
    munmap(map, (size_t)sb.st_size);
    return;
  }
  if (ortep_ep_load_context(cpu, (const uint8_t *)map + HEADER_BYTES, (size_t)blob) != ORTEP_OK) {
    refuse(w, "%s", ortep_last_error());
    ortep_clear_error();
    munmap(map, (size_t)sb.st_size);
    return;
  }
  w->map = map, w->map_bytes = (size_t)sb.st_size, w->blob_bytes = (size_t)blob;
  w->info.bytes = (uint64_t)sb.st_size;
}

/* The file is written in whole 2 MiB pieces at 2 MiB offsets (the last one
 * shorter): the page cache then holds it in 2 MiB folios, which the next
 * open maps with huge pages where the filesystem takes them. Written in
 * pieces of each tensor's size, its pages were a mix of small and large
 * folios, and reading 4 KiB-mapped weights slowed a decode step
 * (docs/models.md). */
#define WRITE_PIECE ((size_t)2 << 20)

typedef struct writer {
  int fd, err;
  uint8_t *buf; /* WRITE_PIECE bytes */
  size_t held;
  XXH3_state_t *sum; /* the blob's checksum, once the header is written */
} writer;
static bool write_out(writer *w, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = write(w->fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      w->err = k < 0 ? errno : ENOSPC;
      return false;
    }
    p += k, n -= (size_t)k;
  }
  return true;
}
static bool write_all(void *ctx, const void *bytes, size_t n) {
  writer *w = ctx;
  const uint8_t *p = bytes;
  if (w->sum && n) XXH3_64bits_update(w->sum, bytes, n);
  while (n) {
    size_t take = WRITE_PIECE - w->held < n ? WRITE_PIECE - w->held : n;
    memcpy(w->buf + w->held, p, take);
    w->held += take, p += take, n -= take;
    if (w->held == WRITE_PIECE) {
      if (!write_out(w, w->buf, WRITE_PIECE)) return false;
      w->held = 0;
    }
  }
  return true;
}
static bool write_rest(writer *w) {
  bool ok = write_out(w, w->buf, w->held);
  w->held = 0;
  return ok;
}

/* --- keeping the directory tidy ------------------------------------------ */
/* A cache file's name: 16 hex digits, ".ortepw"; a writer's temporary file
 * that name, then ".PID.tmp" (*pid). */
static bool hex16(const char *n) {
  for (int i = 0; i < 16; i++)
    if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
  return true;
}
static bool cache_name(const char *n) { return strlen(n) == 23 && hex16(n) && !strcmp(n + 16, ".ortepw"); }
static bool temp_name(const char *n, long *pid) {
  if (strlen(n) < 29 || !hex16(n) || strncmp(n + 16, ".ortepw.", 8)) return false;
  char *end;
  errno = 0;
  *pid = strtol(n + 24, &end, 10);
  return !errno && *pid > 0 && end != n + 24 && !strcmp(end, ".tmp");
}

/* Whether the cache file at fd can never be used again: true when it is
 * truncated, of another format version, or its model file (as its header
 * records it) is gone or has another size or time; false for a file that is
 * not ortep's, records no path, or whose model cannot be looked at. */
static bool unusable(int fd, off_t size) {
  uint8_t h[HEADER_BYTES];
  size_t want = size < (off_t)HEADER_BYTES ? (size_t)size : HEADER_BYTES;
  if (want < 9 || pread(fd, h, want, 0) != (ssize_t)want || memcmp(h, MAGIC, 8)) return false;
  if (want < HEADER_BYTES || h[8] != VERSION || get64(h + BLOB_AT) != (uint64_t)size - HEADER_BYTES) return true;
  uint64_t n = get64(h + PATH_LEN_AT);
  if (n == 0 || n >= HEADER_BYTES - PATH_AT) return false;
  char model[HEADER_BYTES - PATH_AT];
  memcpy(model, h + PATH_AT, n);
  model[n] = '\0';
  struct stat sb;
  if (stat(model, &sb) != 0) return errno == ENOENT || errno == ENOTDIR;
  uint8_t now[SOURCE_BYTES];
  source_fields(&sb, 0, now);
  return memcmp(now, h + SOURCE_AT, SOURCE_BYTES - 8) != 0; /* all but the header's hash */
}

typedef struct kept {
  char name[24];
  struct timespec used; /* the file's mtime: written, or last hit */
  uint64_t bytes;
} kept;
static int by_use(const void *a, const void *b) {
  const kept *x = a, *y = b;
  if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
  if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

static void drop(ortep__wcache *w, int dfd, const char *name, uint64_t bytes) {
  if (unlinkat(dfd, name, 0) != 0) return;
  w->info.removed++;
  w->info.removed_bytes += bytes;
}

/* After this decoder's file (`mine`) was written into dir or mapped from
 * it: see the top. */
static void tidy(ortep__wcache *w, const char *dir, const char *mine) {
  DIR *dp = opendir(dir);
  if (!dp) return;
  int dfd = dirfd(dp);
  kept *list = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = w->info.bytes;
  struct dirent *e;
  while ((e = readdir(dp)) != NULL) {
    long pid;
    struct stat sb;
    if (!strcmp(e->d_name, mine) || fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
      continue;
    if (temp_name(e->d_name, &pid)) { /* a writer's: gone with its process */
      if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) drop(w, dfd, e->d_name, (uint64_t)sb.st_size);
      continue;
    }
    if (!cache_name(e->d_name)) continue;
    int fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    bool gone = unusable(fd, sb.st_size);
    close(fd);
    if (gone) {
      drop(w, dfd, e->d_name, (uint64_t)sb.st_size);
      continue;
    }
    if (!ortep__grow((void **)&list, &cap, n + 1, sizeof *list)) continue; /* no memory: not counted, not evicted */
    memcpy(list[n].name, e->d_name, sizeof list[n].name);                  /* 23 characters and the NUL (cache_name) */
    list[n].used = sb.st_mtim, list[n].bytes = (uint64_t)sb.st_size;
    total += list[n++].bytes;
  }
  if (n) qsort(list, n, sizeof *list, by_use);
  for (size_t i = 0; i < n && total > w->limit; i++) { /* least recently used first; never mine */
    drop(w, dfd, list[i].name, list[i].bytes);
    total -= list[i].bytes;
  }
  ortep__free(list);
  closedir(dp);
}

ortep_status ortep__wcache_open(const char *setting, const char *limit, const char *model_file, const char *options,
                                ortep_ep *cpu, ortep__wcache **out) {
  *out = NULL;
  uint64_t max = DEFAULT_LIMIT;
  if (limit && !ortep__parse_bytes(limit, &max))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                       "ortep.weights_cache_max = '%s': not a byte count; use digits with an optional K, M, G or T "
                       "suffix (e.g. 64G; the default is 32G) or 'unlimited'",
                       limit);
  ortep__wcache *w = ortep__calloc(1, sizeof *w);
  if (!w) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the weights cache");
  *out = w;
  w->limit = max;
  char dir[3072];
  int where = cache_dir(setting, dir, sizeof dir);
  if (where < 0) {
    w->info.state = ORTEP_WEIGHTS_CACHE_FAILED;
    say(w,
        "the cache directory (%.64s...) is longer than %zu bytes; set ortep.weights_cache to a shorter one (the "
        "decoder runs without it)",
        dir, sizeof dir - 1);
    return ORTEP_OK;
  }
  if (!where || !realpath(model_file, w->model) || stat(w->model, &w->st) != 0) return ORTEP_OK; /* off */
  const char *keys[8];
  size_t nk = ortep_ep_context_source_keys(cpu, keys, 8),
         at = (size_t)snprintf(w->options, sizeof w->options, "%s", options);
  uint64_t name = ortep__fnv1a(ortep__fnv1a(ORTEP__FNV_SEED, w->model, strlen(w->model)), w->options,
                               strlen(w->options)); /* the decoder's options: not the keys */
  if (!nk) return ORTEP_OK;                         /* the EP keeps no context */
  for (size_t i = 0; i < nk && i < 8 && at < sizeof w->options; i++)
    at += (size_t)snprintf(w->options + at, sizeof w->options - at, "\n%s", keys[i]);
  /* a hash of the model file's header (safetensors: its 8-byte length and
   * JSON, the names, shapes and offsets; at most 1 MiB), read with pread */
  int fd = open(w->model, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ORTEP_OK;
  uint8_t len8[8] = {0};
  size_t want = 64 << 10;
  if (pread(fd, len8, 8, 0) == 8) {
    uint64_t n = get64(len8);
    if (n < HASHED_BYTES - 8) want = (size_t)n + 8;
  }
  uint8_t *buf = ortep__malloc(want);
  ssize_t n = buf ? pread(fd, buf, want, 0) : -1;
  close(fd);
  if (n < 0) {
    ortep__free(buf);
    return ORTEP_OK;
  }
  w->hash = ortep__fnv1a(ORTEP__FNV_SEED, buf, (size_t)n);
  ortep__free(buf);
  snprintf(w->info.path, sizeof w->info.path, "%s/%016llx.ortepw", dir, (unsigned long long)name);
  try_load(w, cpu);
  if (w->map) { /* a hit keeps the directory within the limit too (it may have been lowered since the last write) */
    w->info.state = ORTEP_WEIGHTS_CACHE_HIT;
    tidy(w, dir, strrchr(w->info.path, '/') + 1);
  }
  return ORTEP_OK;
}

/* After the session bound the weights: a file when there was none, or when
 * the EP prepared more than the loaded one held. */
void ortep__wcache_save(ortep__wcache *w, ortep_ep *cpu, size_t prepared) {
  if (!w || !w->info.path[0]) return;
  size_t len = 0;
  if (ortep_ep_save_context(cpu, NULL, NULL, &len) != ORTEP_OK) {
    ortep_clear_error();
    return;
  }
  if (w->map && len == w->blob_bytes) return; /* every weight came from the file */
  if (!prepared) {                            /* nothing prepared: nothing worth a file */
    w->info = (ortep_weights_cache_info){0};
    return;
  }
  char refusal[512];
  snprintf(refusal, sizeof refusal, "%s", w->info.reason);
  w->info.state = ORTEP_WEIGHTS_CACHE_FAILED;
  char tmp[4200], dir[4096];
  snprintf(dir, sizeof dir, "%s", w->info.path);
  *strrchr(dir, '/') = '\0';
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", w->info.path, (long)getpid());
  int fd = make_dirs(dir) ? open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
  if (fd < 0) {
    say(w, "%s%scannot create %s: %s (the decoder runs without it)", refusal, refusal[0] ? "; then " : "", tmp,
        strerror(errno));
    return;
  }
  size_t total = HEADER_BYTES + len;
  const char *why = NULL;
  int err = 0;
  uint8_t h[HEADER_BYTES];
  header(w, len, 0, h); /* its checksum written last, when the blob's is known */
  /* written, not mapped: the file's pages stay out of this process */
  writer wr = {fd, 0, ortep__malloc(WRITE_PIECE), 0, NULL};
  if (!wr.buf) why = "allocating a 2 MiB buffer for", err = ENOMEM;
  if (!why && !write_all(&wr, h, HEADER_BYTES)) why = "writing", err = wr.err;
  if (!why && (!(wr.sum = XXH3_createState()) || XXH3_64bits_reset(wr.sum) != XXH_OK))
    why = "allocating a checksum state for", err = ENOMEM;
  if (!why && ortep_ep_save_context(cpu, write_all, &wr, &len) != ORTEP_OK) {
    why = "saving the EP context into", err = wr.err;
    ortep_clear_error();
  }
  if (!why && !write_rest(&wr)) why = "writing", err = wr.err;
  if (!why) {
    header(w, len, XXH3_64bits_digest(wr.sum), h);
    if (pwrite(fd, h, HEADER_BYTES, 0) != (ssize_t)HEADER_BYTES) why = "writing the header of", err = errno;
  }
  XXH3_freeState(wr.sum);
  ortep__free(wr.buf);
  /* flushed before the rename: the name never points at a torn file */
  if (!why && fdatasync(fd) != 0) why = "flushing", err = errno;
  if (close(fd) != 0 && !why) why = "closing", err = errno;
  if (!why && rename(tmp, w->info.path) != 0) why = "renaming", err = errno;
  if (why) {
    unlink(tmp);
    say(w, "%s%s%s %s failed%s%s (the decoder runs without it)", refusal, refusal[0] ? "; then " : "", why, tmp,
        err ? ": " : "", err ? strerror(err) : "");
    return;
  }
  w->info.state = w->refused ? ORTEP_WEIGHTS_CACHE_REBUILT : ORTEP_WEIGHTS_CACHE_WRITTEN;
  w->info.bytes = total;
  tidy(w, dir, strrchr(w->info.path, '/') + 1);
}

void ortep__wcache_info(const ortep__wcache *w, ortep_weights_cache_info *out) {
  if (w)
    *out = w->info;
  else
    *out = (ortep_weights_cache_info){0};
}

void ortep__wcache_close(ortep__wcache *w) {
  if (!w) return;
  if (w->map) munmap(w->map, w->map_bytes);
  ortep__free(w);
}

const char *ortep_weights_cache_state_name(ortep_weights_cache_state s) {
  switch (s) {
    case ORTEP_WEIGHTS_CACHE_OFF: return "off";
    case ORTEP_WEIGHTS_CACHE_HIT: return "hit";
    case ORTEP_WEIGHTS_CACHE_WRITTEN: return "written";
    case ORTEP_WEIGHTS_CACHE_REBUILT: return "rebuilt";
    case ORTEP_WEIGHTS_CACHE_FAILED: return "failed";
  }
  return "unknown";
}
