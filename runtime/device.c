/*
 * device.c: device and tier names, host accessibility. CUDA device memory is
 * not host-accessible (ortep never relies on unified addressing for it).
 */
#include <stdio.h>

#include "internal.h"

bool ortep_device_is_host_accessible(ortep_device device) { return device.type == ORTEP_DEVICE_CPU; }

ortep_tier ortep_device_tier(ortep_device device) {
  return device.type == ORTEP_DEVICE_CPU ? ORTEP_TIER_HOST : ORTEP_TIER_DEVICE;
}

const char *ortep_device_type_name(ortep_device_type type) {
  switch (type) {
    case ORTEP_DEVICE_CPU: return "cpu";
    case ORTEP_DEVICE_CUDA: return "cuda";
  }
  return "unknown";
}

const char *ortep_tier_name(ortep_tier tier) {
  switch (tier) {
    case ORTEP_TIER_HOST: return "host";
    case ORTEP_TIER_DEVICE: return "device";
    case ORTEP_TIER_DISK: return "disk";
  }
  return "unknown";
}

char *ortep_device_format(ortep_device device, char *buf, size_t len) {
  if (buf && len) snprintf(buf, len, "%s:%u", ortep_device_type_name(device.type), device.index);
  return buf;
}
