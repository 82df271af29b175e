/*
 * device.h: where memory lives. A device is a type (CPU or CUDA) and an
 * index; a tier says how far away memory is (host RAM, device memory, disk).
 */
#ifndef ORTEP_DEVICE_H
#define ORTEP_DEVICE_H

#include "ortep/common.h"

ORTEP_BEGIN_DECLS

typedef enum ortep_device_type { ORTEP_DEVICE_CPU = 0, ORTEP_DEVICE_CUDA = 1 } ortep_device_type;

typedef struct ortep_device {
  ortep_device_type type;
  uint32_t index;
} ortep_device;

/* DISK (not used yet): the governor keeps its budget and counters, but no
 * backend allocates from disk. */
typedef enum ortep_tier { ORTEP_TIER_HOST = 0, ORTEP_TIER_DEVICE = 1, ORTEP_TIER_DISK = 2 } ortep_tier;
#define ORTEP_TIER_COUNT 3

static inline ortep_device ortep_device_cpu(void) { return (ortep_device){ORTEP_DEVICE_CPU, 0}; }
static inline ortep_device ortep_device_cuda(uint32_t index) { return (ortep_device){ORTEP_DEVICE_CUDA, index}; }
static inline bool ortep_device_equal(ortep_device a, ortep_device b) { return a.type == b.type && a.index == b.index; }

/* Whether the host can dereference pointers into this device's memory. */
ORTEP_API bool ortep_device_is_host_accessible(ortep_device device);
/* The tier a device's memory belongs to (CPU -> HOST, CUDA -> DEVICE). */
ORTEP_API ortep_tier ortep_device_tier(ortep_device device);
/* "cpu" / "cuda"; "host" / "device" / "disk". Never NULL. */
ORTEP_API const char *ortep_device_type_name(ortep_device_type type);
ORTEP_API const char *ortep_tier_name(ortep_tier tier);
/* Writes "cpu:0" or "cuda:1" into buf (always NUL-terminated); returns buf. */
ORTEP_API char *ortep_device_format(ortep_device device, char *buf, size_t len);

ORTEP_END_DECLS

#endif
