/*
 * blas_core.c: OpenBLAS's kernel set put right (blas_core.h).
 *
 * OpenBLAS reads OPENBLAS_CORETYPE once, in its constructor, before main
 * runs: the only public way to change its choice is to set the variable and
 * run the program image again. The variable is then set, so the second
 * start finds nothing to do (ortep_cpu_blas_suggested_core is NULL once
 * the variable names a set), and a user who sets it, to anything, keeps
 * their choice.
 */
#include "blas_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ortep/ortep.h"

void tool_blas_restart(const char *prog, char **argv) {
  const char *core = ortep_cpu_blas_suggested_core();
  if (!core) return;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  int err = n < 0 ? errno : ENAMETOOLONG;
  if (n > 0 && (size_t)n < sizeof exe - 1) {
    exe[n] = '\0';
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
      execv(exe, argv); /* returns only on failure */
      err = errno;
      unsetenv("OPENBLAS_CORETYPE");
    } else {
      err = errno;
    }
  }
  fprintf(stderr,
          "%s: OpenBLAS runs its generic Prescott kernels on this CPU, which can run its %s ones; starting again "
          "with OPENBLAS_CORETYPE=%s failed (%s): set it yourself for faster f32 products\n",
          prog, core, core, strerror(err));
}

const char *tool_blas_label(char *buf, size_t size) {
  snprintf(buf, size, "OpenBLAS %s%s", ortep_cpu_blas_core(),
           getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
  return buf;
}
