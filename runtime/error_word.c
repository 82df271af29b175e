/* error_word.c: names and descriptions of the device error word's bits. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *ortep_error_bit_name(uint32_t mask) {
  switch (mask) {
#define NM(name, bit, desc) \
  case 1u << (bit): return #name;
    ORTEP_ERROR_BIT_MAP(NM)
#undef NM
    default: return NULL;
  }
}

static const char *bit_desc(uint32_t mask) {
  switch (mask) {
#define DS(name, bit, desc) \
  case 1u << (bit): return desc;
    ORTEP_ERROR_BIT_MAP(DS)
#undef DS
    default: return "unknown";
  }
}

char *ortep_error_word_describe(uint32_t bits, char *buf, size_t len) {
  if (!buf || !len) return buf;
  buf[0] = '\0';
  size_t n = 0;
  for (uint32_t b = 0; b < 32; b++) {
    uint32_t m = 1u << b;
    if (!(bits & m)) continue;
    const char *name = ortep_error_bit_name(m);
    int w = name ? snprintf(buf + n, len - n, "%s%s (%s)", n ? "; " : "", name, bit_desc(m))
                 : snprintf(buf + n, len - n, "%sbit %u (unknown)", n ? "; " : "", b);
    if (w < 0 || (size_t)w >= len - n) break;
    n += (size_t)w;
  }
  if (bits == 0) snprintf(buf, len, "none");
  return buf;
}
