/*
 * file.c: reading files the library is given (config.json, tokenizer.json,
 * safetensors headers) without ever blocking on one that is not a regular
 * file, and without trusting its size: what every reader above shares.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

ortep_status ortep__open_regular(const char *path, int *fd, size_t *size) {
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return ortep__fail(ORTEP_E_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(*fd);
    *fd = -1;
    return ortep__fail(ORTEP_E_IO,
                       "%s is not a regular file (a FIFO, device or directory); point it at the file itself", path);
  }
  *size = (size_t)sb.st_size;
  return ORTEP_OK;
}

ortep_status ortep__read_file(const char *path, size_t limit, const char *what, char **out, size_t *len) {
  int fd;
  size_t size;
  ortep_status st = ortep__open_regular(path, &fd, &size);
  if (st != ORTEP_OK) return st;
  if (size > limit) {
    close(fd);
    return ortep__fail(ORTEP_E_FORMAT, "%s is larger than %zu MiB; it is not %s", path, limit >> 20, what);
  }
  char *buf = ortep__malloc(size ? size : 1);
  if (!buf) {
    close(fd);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory to read %s", path);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* shrank under us: parse what is there */
    got += (size_t)r;
  }
  int err = got < size && errno != 0 ? errno : 0;
  close(fd);
  if (err) {
    ortep__free(buf);
    return ortep__fail(ORTEP_E_IO, "reading %s failed: %s", path, strerror(err));
  }
  *out = buf, *len = got;
  return ORTEP_OK;
}
