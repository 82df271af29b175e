/*
 * error_word.h: the latching device error word.
 *
 * Every EP keeps one u32 in its own memory. A kernel that finds an index out
 * of range ORs that index's bit into the word and skips the access (writing a
 * defined value instead: zeros), so no kernel ever reads or writes out of
 * bounds. The word latches: reading it does not clear it; only an explicit
 * reset does. The step graph's last node (ortep:SelectToken), like device
 * argmax, writes (token id, error word) as two native-endian u32 into one
 * 8-byte result, so the one host sync per decoded token reads
 * both, and a non-zero word fails the step before its token is used.
 *
 * Every bit:
 *
 *   bit  name                  set when
 *   0    GATHER_INDEX          a Gather index (a token id) is < 0 or >= the
 *                              table's rows; the output row is zeroed
 *   1    ROTARY_POSITION       a RotaryEmbedding position is < 0 or >= the
 *                              cos/sin cache's rows; the input passes unrotated
 *   2    KV_SLOT               a GroupQueryAttention position is < 0 or >= the
 *                              KV cache's capacity; nothing is written to the
 *                              cache and the output is zeroed
 *   3    ARGMAX_NOT_FINITE     a logit given to argmax is NaN or +-Inf (the
 *                              model produced garbage: a bad weight, an
 *                              overflow); the token id is the first maximum
 *                              among the finite logits, 0 when none, and is
 *                              never emitted since the word fails the step
 *   4    SAMPLE_NOT_FINITE     the sampler's distribution was not finite and
 *                              positive (kernels/sampling.h computes it so no
 *                              valid parameter can do this: the bit is the
 *                              guard that a bug cannot pick token 0 silently)
 */
#ifndef ORTEP_ERROR_WORD_H
#define ORTEP_ERROR_WORD_H

#include "ortep/common.h"

ORTEP_BEGIN_DECLS

/* XX(NAME, bit, description) */
#define ORTEP_ERROR_BIT_MAP(XX)                                                                         \
  XX(GATHER_INDEX, 0, "a gather index (token id) was outside the embedding table")                      \
  XX(ROTARY_POSITION, 1, "a rotary position was outside the cos/sin cache (position >= max positions)") \
  XX(KV_SLOT, 2, "a KV-cache slot was outside the cache (position >= max_seq_len)")                     \
  XX(ARGMAX_NOT_FINITE, 3, "a logit given to argmax was NaN or infinite")                               \
  XX(SAMPLE_NOT_FINITE, 4, "the sampler's distribution was not finite")

enum {
#define ORTEP__ERRBIT(name, bit, desc) ORTEP_ERROR_##name = 1u << (bit),
  ORTEP_ERROR_BIT_MAP(ORTEP__ERRBIT)
#undef ORTEP__ERRBIT
};

/* Writes "GATHER_INDEX (a gather index ...); KV_SLOT (...)" for every set bit
 * (unknown bits as "bit N (unknown)") into buf; returns buf. */
ORTEP_API char *ortep_error_word_describe(uint32_t bits, char *buf, size_t len);
/* The name of one bit ("GATHER_INDEX"), or NULL for an unknown bit. */
ORTEP_API const char *ortep_error_bit_name(uint32_t bit_mask);

ORTEP_END_DECLS

#endif
