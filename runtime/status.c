/*
 * status.c: status names and descriptions from the X-macro list, and the
 * per-thread last-error message. The message buffer is thread-local so that
 * concurrent failures on different threads never mix their texts.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define ORTEP__ERROR_CAPACITY 1024

static _Thread_local char error_message[ORTEP__ERROR_CAPACITY];
static _Thread_local ortep_status error_status = ORTEP_OK;

const char *ortep_status_name(ortep_status status) {
  switch (status) {
#define ORTEP__STATUS_NAME(name, desc) \
  case ORTEP_##name: return "ORTEP_" #name;
    ORTEP_STATUS_MAP(ORTEP__STATUS_NAME)
#undef ORTEP__STATUS_NAME
    default: return "ORTEP_E_UNKNOWN";
  }
}

const char *ortep_status_describe(ortep_status status) {
  switch (status) {
#define ORTEP__STATUS_DESC(name, desc) \
  case ORTEP_##name: return desc;
    ORTEP_STATUS_MAP(ORTEP__STATUS_DESC)
#undef ORTEP__STATUS_DESC
    default: return "unknown status code";
  }
}

const char *ortep_last_error(void) { return error_message; }
ortep_status ortep_last_status(void) { return error_status; }

void ortep_clear_error(void) {
  error_message[0] = '\0';
  error_status = ORTEP_OK;
}

ortep_status ortep__failv(ortep_status status, const char *fmt, va_list ap) {
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  error_status = status;
  return status;
}

ortep_status ortep__fail(ortep_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ortep__failv(status, fmt, ap);
  va_end(ap);
  return status;
}

ortep_status ortep__wrap(ortep_status status, const char *fmt, ...) {
  char prefix[ORTEP__ERROR_CAPACITY];
  char old[ORTEP__ERROR_CAPACITY];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, error_message, sizeof old);
  /* Truncation is acceptable: the head of the message says the most. */
  size_t n = strlen(prefix);
  if (n > sizeof error_message - 3) n = sizeof error_message - 3;
  memcpy(error_message, prefix, n);
  memcpy(error_message + n, ": ", 2);
  size_t room = sizeof error_message - n - 3;
  size_t m = strnlen(old, room);
  memcpy(error_message + n + 2, old, m);
  error_message[n + 2 + m] = '\0';
  error_status = status;
  return status;
}

char *ortep__format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

bool ortep__parse_bytes(const char *s, uint64_t *out) {
  if (strcmp(s, "unlimited") == 0) {
    *out = UINT64_MAX;
    return true;
  }
  if (!isdigit((unsigned char)s[0])) return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return false;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return false;
  }
  if (*end) {
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return false;
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = (uint64_t)v << shift;
  return true;
}

uint64_t ortep__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void ortep__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "ortep: internal invariant failed: %s (%s:%d); this is a bug in ortep, please report it\n", expr,
          file, line);
  abort();
}
