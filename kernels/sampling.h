/*
 * sampling.h: what the samplers of every EP share, so the CPU and the CUDA EP
 * implement one definition: the parameter block the decoder keeps in device
 * memory (changing it re-captures nothing), the counter-based random numbers
 * (Philox4x32-10, keyed by the seed, counted by the position: a run is
 * reproducible from its seed, and both EPs draw the same number for the same
 * position), and the order-preserving map of floats to integers the
 * threshold searches use. Compiles as C and as CUDA (host and device).
 *
 * The sampler, on the logits of one position:
 *   1. any NaN or infinity latches ARGMAX_NOT_FINITE (token 0), as argmax;
 *   2. repetition penalty r: for every id in the history (the tokens already
 *      in the sequence), x = x > 0 ? x / r : x * r (computed from the
 *      original logit, so a repeated id is penalised once);
 *   3. z = x / temperature;
 *   4. p = exp(z - max z), a float in [0, 1] (the largest p is 1);
 *   5. top-k (k > 0): keep p >= the k-th largest p (ties kept);
 *   6. min-p (> 0): keep p >= min_p;
 *   7. top-p (< 1): keep p >= t, t the largest value whose kept mass
 *      sum(p >= t) reaches top_p x the kept mass (ties kept);
 *   8. u = the position's uniform number in [0, 1); the token is the first id
 *      (in id order) where the running kept mass exceeds u x the kept mass.
 * Steps 2-4 run in double precision: a float logit over a float penalty over
 * a float temperature is at most 3.4e38 x 7.2e44 x 7.2e44 < 1e129, so no
 * positive finite parameter can overflow them (a temperature of 1e-40 is
 * the argmax with its exact ties drawn evenly, not a division by zero), and
 * p never is NaN. A kept mass that is not finite and positive all the same
 * latches SAMPLE_NOT_FINITE (token 0) instead of drawing from it.
 * Greedy decoding (temperature 0) never reaches the sampler: it is argmax.
 */
#ifndef ORTEP_KERNELS_SAMPLING_H
#define ORTEP_KERNELS_SAMPLING_H

#include <stdint.h>

#if defined(__CUDACC__)
#define ORTEP__HD __host__ __device__ __forceinline__
#else
#define ORTEP__HD static inline
#endif

/* The device parameter block: the layout of ortep_sample_params (ep.h),
 * repeated here so the CUDA sources need no ortep header; the CPU EP checks
 * at compile time that the two agree. */
typedef struct ortep__sample_params {
  float temperature;        /* > 0 */
  float top_p;              /* (0, 1]; 1: off */
  float min_p;              /* [0, 1); 0: off */
  float repetition_penalty; /* > 0; 1: off */
  uint32_t top_k;           /* 0: off */
  uint32_t seed_lo, seed_hi;
  uint32_t position;  /* the counter: the position of the token being drawn */
  uint32_t n_history; /* ids in the history the penalty applies to */
} ortep__sample_params;

/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11): ten rounds over a 128-bit counter with a 64-bit key. */
ORTEP__HD void ortep__philox4x32_10(const uint32_t ctr_in[4], uint32_t key0, uint32_t key1, uint32_t out[4]) {
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The uniform number in [0, 1) of a position: 24 bits of the first word. */
ORTEP__HD float ortep__sample_uniform(const ortep__sample_params *p) {
  uint32_t ctr[4] = {p->position, 0, 0, 0}, out[4];
  ortep__philox4x32_10(ctr, p->seed_lo, p->seed_hi, out);
  return (float)(out[0] >> 8) * (1.0f / 16777216.0f);
}

/* Floats to unsigned integers in the same order (for finite values). */
ORTEP__HD uint32_t ortep__float_key(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  __builtin_memcpy(&u, &f, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
ORTEP__HD float ortep__key_float(uint32_t k) {
  uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(u);
#else
  __builtin_memcpy(&f, &u, 4);
#endif
  return f;
}

/* Step 2 for one logit, from the original value. */
ORTEP__HD double ortep__penalise(double x, double r) { return x > 0.0 ? x / r : x * r; }

/* The scratch a sampler needs for n logits: z (double) and p (float). */
#define ORTEP__SAMPLE_SCRATCH_BYTES(n) ((n) * (sizeof(double) + sizeof(float)))

#endif
