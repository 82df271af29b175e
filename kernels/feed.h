/*
 * feed.h: ortep:FeedToken, what lets a decode step run again on the device
 * without the host (K tokens per launch). Compiles as C and as CUDA, so the
 * CPU and CUDA kernels run one definition.
 *
 * The node comes after ortep:SelectToken. Its loop state is an i32 value
 * of ORTEP__FEED_HEADER + kmax words that persists between launches:
 *   [0] limit: the steps this launch may run (the host arms it before the
 *       launch; 0: idle, the node does nothing: a plain single step)
 *   [1] count: the tokens recorded so far in this launch
 *   [2] word:  the error word that ended it (0: none)
 *   [3] reserved (0)
 *   [4 + i]    the token the i-th step drew
 * Each run reads the step's (token, error word). A non-zero word ends the
 * launch with nothing recorded for that step (the token is not emitted, as
 * a single step would not emit it). Otherwise the token is recorded, and
 * the launch ends when `limit` tokens are recorded or the token is in the
 * stop mask (one byte per id of the vocabulary: the model's EOS and the
 * caller's stop ids); else the token and its position + 1 are written into
 * the step's own token and position inputs, so the next run feeds it.
 * The return value is the flag the executor's loop reads (1: run again);
 * an ended launch sets limit back to 0, so the next plain step is idle.
 */
#ifndef ORTEP_KERNELS_FEED_H
#define ORTEP_KERNELS_FEED_H

#include <stdint.h>

#if defined(__CUDACC__)
#define ORTEP__FEED_HD __host__ __device__ __forceinline__
#else
#define ORTEP__FEED_HD static inline
#endif

#define ORTEP__FEED_HEADER 4
#define ORTEP__FEED_MAX    64 /* the most steps one launch runs */

ORTEP__FEED_HD int32_t ortep__feed_token(const int32_t *result, int32_t *token, int32_t *position, const uint8_t *stop,
                                         int64_t vocab, int32_t *state, int64_t kmax) {
  int32_t limit = state[0], i = state[1];
  if (limit <= 0 || limit > kmax || i < 0 || i >= limit) { /* idle (or a state no host armed): nothing */
    state[0] = 0;
    return 0;
  }
  int32_t tok = result[0], word = result[1];
  if (word) {
    state[2] = word;
    state[0] = 0;
    return 0;
  }
  state[ORTEP__FEED_HEADER + i] = tok;
  state[1] = i + 1;
  if (i + 1 >= limit || (tok >= 0 && tok < vocab && stop[tok])) {
    state[0] = 0;
    return 0;
  }
  *token = tok;
  *position += 1;
  return 1;
}

#endif
