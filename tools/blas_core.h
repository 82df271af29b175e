/*
 * blas_core.h: OpenBLAS's kernel set put right before a program starts its
 * work (ortep, ortep-bench). Programs use the public API only.
 */
#ifndef ORTEP_TOOLS_BLAS_CORE_H
#define ORTEP_TOOLS_BLAS_CORE_H

#include <stddef.h>

/* When OpenBLAS fell back to kernels older than this CPU runs
 * (ortep_cpu_blas_suggested_core): sets OPENBLAS_CORETYPE to the suggested
 * set and starts this program again with the same arguments (and the same
 * open files: call it first thing in main, before any output). Returns if
 * there is nothing to do, or, with a one-line warning on stderr naming the
 * variable to set, if the program could not be started again. */
void tool_blas_restart(const char *prog, char **argv);

/* The kernels OpenBLAS runs, as programs name them to a user:
 * "OpenBLAS <set>", with " (OPENBLAS_CORETYPE)" when the variable chose the
 * set (a user's value or tool_blas_restart's). Writes at most size bytes,
 * NUL-terminated; returns buf. */
const char *tool_blas_label(char *buf, size_t size);

#endif
