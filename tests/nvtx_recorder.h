/* nvtx_recorder.h: what the NVTX recording injection library records. */
#ifndef ORTEP_TEST_NVTX_RECORDER_H
#define ORTEP_TEST_NVTX_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#define NVTX_RECORDER_MAX 65536

typedef enum nvtx_event_kind {
  NVTX_EV_DOMAIN,
  NVTX_EV_CATEGORY,
  NVTX_EV_PUSH,
  NVTX_EV_POP,
  NVTX_EV_START,
  NVTX_EV_END,
  NVTX_EV_MARK,
  NVTX_EV_THREAD,
} nvtx_event_kind;

typedef struct nvtx_event {
  nvtx_event_kind kind;
  char text[160];
  uint64_t payload;
  uint32_t category;
} nvtx_event;

size_t nvtx_recorder_count(void);
const nvtx_event *nvtx_recorder_event(size_t i);
void nvtx_recorder_clear(void);

#endif
