/*
 * nvtx_recorder.c: a minimal NVTX injection library for tests. Loaded by
 * NVTX through NVTX_INJECTION64_PATH, it installs handlers for the domain
 * calls ortep makes and records every push, pop, start, end, mark, thread
 * name and category name with its text and payload. Only domain "ortep" is
 * recorded: other libraries in the process (cuBLAS, the CUDA runtime) may
 * emit ranges of their own domains, which the test must not see. The test
 * reads the record through nvtx_recorder_count / nvtx_recorder_event.
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx_recorder.h"

static nvtx_event events[NVTX_RECORDER_MAX];
static size_t count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvtxDomainRegistration_st { int unused; } ortep_domain, other_domain;
#define OURS(d) ((d) == (nvtxDomainHandle_t)&ortep_domain)

static void record(nvtx_event_kind kind, const char *text, uint64_t payload, uint32_t category) {
  pthread_mutex_lock(&lock);
  if (count < NVTX_RECORDER_MAX) {
    nvtx_event *e = &events[count++];
    e->kind = kind;
    strncpy(e->text, text ? text : "", sizeof e->text - 1);
    e->payload = payload;
    e->category = category;
  }
  pthread_mutex_unlock(&lock);
}

static void from_attrs(nvtx_event_kind kind, const nvtxEventAttributes_t *a) {
  const char *text = "";
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) text = a->message.ascii;
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) text = (const char *)a->message.registered;
  record(kind, text, a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ? a->payload.ullValue : 0, a->category);
}

static nvtxDomainHandle_t domain_create(const char *name) {
  if (!name || strcmp(name, "ortep") != 0) return (nvtxDomainHandle_t)&other_domain;
  record(NVTX_EV_DOMAIN, name, 0, 0);
  return (nvtxDomainHandle_t)&ortep_domain;
}
static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
  (void)d;
  return (nvtxStringHandle_t)strdup(s); /* lives as long as the process: a test tool */
}
static void name_category(nvtxDomainHandle_t d, uint32_t cat, const char *name) {
  if (OURS(d)) record(NVTX_EV_CATEGORY, name, cat, cat);
}
static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  if (OURS(d)) from_attrs(NVTX_EV_PUSH, a);
  return 0;
}
static int pop(nvtxDomainHandle_t d) {
  if (OURS(d)) record(NVTX_EV_POP, "", 0, 0);
  return 0;
}
static void mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  if (OURS(d)) from_attrs(NVTX_EV_MARK, a);
}
static nvtxRangeId_t start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  if (OURS(d)) from_attrs(NVTX_EV_START, a);
  return count;
}
static void end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  if (OURS(d)) record(NVTX_EV_END, "", id, 0);
}
static void name_thread(uint32_t tid, const char *name) { record(NVTX_EV_THREAD, name, tid, 0); }

static void set(NvtxFunctionTable t, unsigned size, unsigned id, NvtxFunctionPointer f) {
  if (id <= size && t[id]) *t[id] = f;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
  if (!cb) return 0;
  NvtxFunctionTable t;
  unsigned size;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &size)) return 0;
  set(t, size, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create);
  set(t, size, NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)register_string);
  set(t, size, NVTX_CBID_CORE2_DomainNameCategoryA, (NvtxFunctionPointer)name_category);
  set(t, size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)push);
  set(t, size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)pop);
  set(t, size, NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)mark);
  set(t, size, NVTX_CBID_CORE2_DomainRangeStartEx, (NvtxFunctionPointer)start);
  set(t, size, NVTX_CBID_CORE2_DomainRangeEnd, (NvtxFunctionPointer)end);
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &size)) return 0;
  set(t, size, NVTX_CBID_CORE_NameOsThreadA, (NvtxFunctionPointer)name_thread);
  return 1;
}

size_t nvtx_recorder_count(void) { return count; }
const nvtx_event *nvtx_recorder_event(size_t i) { return i < count ? &events[i] : NULL; }
void nvtx_recorder_clear(void) { count = 0; }
