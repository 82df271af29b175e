/*
 * trace.c: the NVTX3 side of trace.h. The domain, its categories and the
 * registered strings are created on first use (NVTX itself initialises
 * lazily, loading a tool named by NVTX_INJECTION64_PATH if there is one).
 */
#include "trace.h"

#if ORTEP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

_Atomic int ortep__trace_state;
static nvtxDomainHandle_t domain;
static nvtxStringHandle_t names[ORTEP__TRACE_COUNT];
static const uint32_t categories[ORTEP__TRACE_COUNT] = {
#define CAT(id, name, cat) ORTEP__TRACE_CAT_##cat,
    ORTEP_TRACE_MAP(CAT)
#undef CAT
};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
  static const char *const text[ORTEP__TRACE_COUNT] = {
#define TXT(id, name, cat) name,
      ORTEP_TRACE_MAP(TXT)
#undef TXT
  };
  domain = nvtxDomainCreateA("ortep");
  /* NVTX hands out a NULL domain when no tool is attached: then stay off. */
  atomic_store_explicit(&ortep__trace_state, domain ? 1 : ORTEP__TRACE_OFF, memory_order_relaxed);
  if (!domain) return;
  nvtxDomainNameCategoryA(domain, ORTEP__TRACE_CAT_MEMORY, "memory");
  nvtxDomainNameCategoryA(domain, ORTEP__TRACE_CAT_EXECUTOR, "executor");
  nvtxDomainNameCategoryA(domain, ORTEP__TRACE_CAT_DECODE, "decode");
  for (int i = 0; i < ORTEP__TRACE_COUNT; i++) names[i] = nvtxDomainRegisterStringA(domain, text[i]);
}

static bool ready(void) {
  pthread_once(&once, init);
  return domain != NULL;
}

static nvtxEventAttributes_t attrs(ortep__trace_id id, uint64_t payload) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = categories[id];
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = names[id];
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = payload;
  return a;
}

void ortep__trace_push_impl(ortep__trace_id id, uint64_t payload) {
  if (!ready()) return;
  nvtxEventAttributes_t a = attrs(id, payload);
  nvtxDomainRangePushEx(domain, &a);
}

void ortep__trace_push_text_impl(const char *text, uint32_t category) {
  if (!ready()) return;
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = text;
  nvtxDomainRangePushEx(domain, &a);
}

void ortep__trace_pop_impl(void) {
  if (ready()) nvtxDomainRangePop(domain);
}

void ortep__trace_mark_impl(ortep__trace_id id, uint64_t payload) {
  if (!ready()) return;
  nvtxEventAttributes_t a = attrs(id, payload);
  nvtxDomainMarkEx(domain, &a);
}

void ortep__trace_name_thread_impl(const char *name) {
  if (!ready()) return;
  static _Thread_local bool named;
  if (named) return;
  named = true;
  nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
}
#endif
