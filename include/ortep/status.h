/*
 * status.h: every fallible ortep call returns an ortep_status. The codes come
 * from one X-macro list, so a code can never lack a name or a description.
 * The message of the last failure is kept per thread and read with
 * ortep_last_error(); messages say what was asked, what is allowed, and how
 * to fix it. No ortep call prints to stderr or aborts on bad input.
 */
#ifndef ORTEP_STATUS_H
#define ORTEP_STATUS_H

#include "ortep/common.h"

ORTEP_BEGIN_DECLS

/* XX(NAME, description) */
#define ORTEP_STATUS_MAP(XX)                                                               \
  XX(OK, "success")                                                                        \
  XX(E_INVALID_ARGUMENT, "an argument is outside what the call accepts")                   \
  XX(E_OUT_OF_MEMORY, "a backing allocator could not provide the memory")                  \
  XX(E_BUDGET_EXCEEDED, "the memory governor refused a charge over the tier's budget")     \
  XX(E_NOT_SUPPORTED, "the operation is not supported by this object or build")            \
  XX(E_NOT_HOST_ACCESSIBLE, "the memory is not host-accessible; copy it out first")        \
  XX(E_NOT_ALLOCATED, "the storage has not been allocated yet")                            \
  XX(E_TYPE_MISMATCH, "the data type differs from the one asked for")                      \
  XX(E_OUT_OF_RANGE, "an offset, index or size lies outside the valid range")              \
  XX(E_WRONG_DEVICE, "the object belongs to another device or execution provider")         \
  XX(E_INVALID_POINTER, "the pointer was not produced by this object or is already freed") \
  XX(E_CAPTURE_ACTIVE, "the operation is not allowed while a graph capture is open")       \
  XX(E_DEVICE_VALIDATION, "a device kernel latched a bit in the device error word")        \
  XX(E_DEVICE_ERROR, "the device runtime reported an error")                               \
  XX(E_NO_DEVICE, "no usable device or driver was found")                                  \
  XX(E_IO, "a file could not be read or written")                                          \
  XX(E_FORMAT, "a file or document is malformed")                                          \
  XX(E_STATE, "the object is not in a state that allows this call")                        \
  XX(E_INTERNAL, "an internal invariant failed (a bug in ortep)")

typedef enum ortep_status {
#define ORTEP__STATUS_ENUM(name, desc) ORTEP_##name,
  ORTEP_STATUS_MAP(ORTEP__STATUS_ENUM)
#undef ORTEP__STATUS_ENUM
      ORTEP_STATUS_COUNT
} ortep_status;

/* "ORTEP_E_INVALID_ARGUMENT" for ORTEP_E_INVALID_ARGUMENT; "ORTEP_E_UNKNOWN" for
 * a value outside the list. Never NULL. */
ORTEP_API const char *ortep_status_name(ortep_status status);
/* The one-line description of the code (not of the last failure). */
ORTEP_API const char *ortep_status_describe(ortep_status status);

/* The message of the most recent failure on this thread ("" when none). The
 * pointer stays valid until the next ortep call on this thread. */
ORTEP_API const char *ortep_last_error(void);
/* The status of the most recent failure on this thread (ORTEP_OK when none). */
ORTEP_API ortep_status ortep_last_status(void);
/* Forget this thread's last failure. */
ORTEP_API void ortep_clear_error(void);

ORTEP_END_DECLS

#endif
