/*
 * cuda_module.c: the CUDA EP's public entry points (cuda_ep.h) in the core
 * library, which has no CUDA dependency. The first call loads the module
 * libortep_cuda.so with dlopen (module.h says why and how the two sides
 * talk); a program that never asks for CUDA never loads cudart or cuBLAS
 * (about 200 MiB of resident memory once loaded).
 *
 * Where the module is looked for, first found wins:
 *   1. $ORTEP_CUDA_MODULE, a path (then nothing else is tried);
 *   2. beside the library or program holding this code (an installed
 *      libortep.so and its module share a directory);
 *   3. the install libdir and the build tree this copy was built with;
 *   4. the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig).
 * The module stays loaded for the life of the process (unloading cudart at
 * run time is not something CUDA supports well).
 */
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "cpu/ops.h" /* the host's quantizer the module is given */
#include "cuda/module.h"
#include "ortep/cuda_ep.h"

#define NO_CUDA_BUILD                                                                                                \
  "this build of ortep has no CUDA EP (the CUDA Toolkit was not found at configure time); rebuild with the toolkit " \
  "installed, or use the CPU EP"

#if ORTEP_HAVE_CUDA
static pthread_once_t once = PTHREAD_ONCE_INIT;
static ortep__cuda_module mod;
static bool loaded;
static char why_not[768];

static const ortep__cuda_host host = {
    ORTEP__CUDA_MODULE_ABI,
    ortep__fail,
    ortep__wrap,
    ortep__malloc,
    ortep__calloc,
    ortep__realloc,
    ortep__free,
    ortep__grow,
    ortep__format_bytes,
    ortep__op_check,
    ortep_allocator_allocate,
    ortep_allocator_deallocate,
    ortep_allocator_destroy,
    ortep_buffer_wrap_owned,
    ortep_config_check_namespace,
    ortep_config_get,
    ortep_device_is_host_accessible,
    ortep_governor_charge,
    ortep_governor_refund,
    ortep_node_name,
    ortep_node_op_type,
    ortep__cpu_quantize_values, /* ortep__quantize_from's bytes, 16 values at a time with AVX-512 */
};

static bool try_path(const char *path, char *err, size_t len) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, len, "%s", dlerror());
    return false;
  }
  ortep__cuda_module_init_fn init = (ortep__cuda_module_init_fn)(uintptr_t)dlsym(h, ORTEP__CUDA_MODULE_ENTRY);
  if (!init || !init(ORTEP__CUDA_MODULE_ABI, &host, &mod)) {
    snprintf(err, len, "%s is not a CUDA EP module of this ortep build (entry %s missing or ABI %d refused)", path,
             ORTEP__CUDA_MODULE_ENTRY, ORTEP__CUDA_MODULE_ABI);
    dlclose(h);
    return false;
  }
  return true; /* never closed: see the top of the file */
}

static void load(void) {
  char err[512] = "";
  const char *env = getenv("ORTEP_CUDA_MODULE");
  if (env && *env) {
    loaded = try_path(env, err, sizeof err);
    if (!loaded)
      snprintf(why_not, sizeof why_not, "the CUDA EP module from ORTEP_CUDA_MODULE could not be loaded: %s", err);
    return;
  }
  char beside[4096] = "";
  Dl_info info;
  if (dladdr((void *)(uintptr_t)&ortep_cuda_available, &info) && info.dli_fname) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", info.dli_fname);
    snprintf(beside, sizeof beside, "%s/libortep_cuda.so", dirname(copy));
  }
  const char *paths[] = {beside, ORTEP_CUDA_MODULE_INSTALL_PATH, ORTEP_CUDA_MODULE_BUILD_PATH, "libortep_cuda.so"};
  for (size_t i = 0; i < sizeof paths / sizeof *paths && !loaded; i++) {
    if (!*paths[i]) continue;
    char e[512];
    loaded = try_path(paths[i], e, sizeof e);
    if (!loaded && (!err[0] || !strstr(e, "No such file"))) snprintf(err, sizeof err, "%s", e);
  }
  if (!loaded)
    snprintf(why_not, sizeof why_not,
             "the CUDA EP module libortep_cuda.so could not be loaded (%s); install it beside libortep, or set "
             "ORTEP_CUDA_MODULE to its path",
             err);
}

static bool have_module(void) {
  pthread_once(&once, load);
  return loaded;
}

/* Whether an NVIDIA driver shows itself at all: when none does, asking
 * whether CUDA is available (ep = "auto") answers no without loading the
 * module, so a CPU-only machine never maps cudart. */
static bool driver_present(void) {
  const char *signs[] = {"/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"};
  for (size_t i = 0; i < sizeof signs / sizeof *signs; i++)
    if (access(signs[i], F_OK) == 0) return true;
  return false;
}

bool ortep_cuda_available(char *why, size_t len) {
  if (!getenv("ORTEP_CUDA_MODULE") && !driver_present()) {
    if (why && len) snprintf(why, len, "no CUDA device: no NVIDIA driver on this machine (no /dev/nvidiactl)");
    return false;
  }
  if (have_module()) return mod.available(why, len);
  if (why && len) snprintf(why, len, "%s", why_not);
  return false;
}

ortep_status ortep_cuda_ep_create(ortep_governor *governor, ortep_ep **out) {
  if (out) *out = NULL;
  if (!have_module()) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s; or use the CPU EP", why_not);
  return mod.ep_create(governor, out);
}

ortep_status ortep_cuda_pool_allocator_create(int device, void *stream, ortep_governor *governor,
                                              ortep_allocator **out) {
  if (out) *out = NULL;
  if (!have_module()) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s", why_not);
  return mod.pool_create(device, stream, governor, out);
}

ortep_status ortep_cuda_virtual_allocator_create(int device, ortep_governor *governor, ortep_allocator **out) {
  if (out) *out = NULL;
  if (!have_module()) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s", why_not);
  return mod.vmm_create(device, governor, out);
}

ortep_status ortep_cuda_device_info_get(int device, ortep_cuda_device_info *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!have_module()) return ortep__fail(ORTEP_E_NOT_SUPPORTED, "%s", why_not);
  return mod.device_info(device, out);
}

#else

bool ortep_cuda_available(char *why, size_t len) {
  if (why && len) snprintf(why, len, "this build of ortep has no CUDA support");
  return false;
}

ortep_status ortep_cuda_ep_create(ortep_governor *governor, ortep_ep **out) {
  (void)governor;
  if (out) *out = NULL;
  return ortep__fail(ORTEP_E_NOT_SUPPORTED, NO_CUDA_BUILD);
}

ortep_status ortep_cuda_pool_allocator_create(int device, void *stream, ortep_governor *governor,
                                              ortep_allocator **out) {
  (void)device, (void)stream, (void)governor;
  if (out) *out = NULL;
  return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                     "this build of ortep has no CUDA support (the CUDA Toolkit was not found at configure time); "
                     "rebuild with the toolkit installed");
}

ortep_status ortep_cuda_virtual_allocator_create(int device, ortep_governor *governor, ortep_allocator **out) {
  (void)device, (void)governor;
  if (out) *out = NULL;
  return ortep__fail(ORTEP_E_NOT_SUPPORTED, NO_CUDA_BUILD);
}

ortep_status ortep_cuda_device_info_get(int device, ortep_cuda_device_info *out) {
  (void)device;
  if (out) memset(out, 0, sizeof *out);
  return ortep__fail(ORTEP_E_NOT_SUPPORTED, "this build of ortep has no CUDA support");
}

#endif
