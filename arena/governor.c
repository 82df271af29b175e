/*
 * governor.c: per-tier budgets with lock-free counters. A charge reserves its
 * bytes with one compare-and-swap on the tier's current total, so a charge is
 * granted or refused as a whole and a refusal touches no counter; peaks and
 * totals are updated only after the reservation has succeeded.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct ortep_governor {
  _Atomic uint64_t budget[ORTEP_TIER_COUNT];
  ortep__counters tier[ORTEP_TIER_COUNT];
};

static bool tier_ok(ortep_tier t) { return (unsigned)t < ORTEP_TIER_COUNT; }

ortep_status ortep_governor_create(ortep_governor **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_governor_create: out is NULL");
  ortep_governor *g = ortep__calloc(1, sizeof *g);
  *out = g;
  if (!g) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_governor_create: no memory for the governor");
  for (int t = 0; t < ORTEP_TIER_COUNT; t++) atomic_init(&g->budget[t], ORTEP_BUDGET_UNLIMITED);
  return ORTEP_OK;
}

void ortep_governor_destroy(ortep_governor *g) { ortep__free(g); }

ortep_status ortep_governor_set_budget(ortep_governor *g, ortep_tier tier, uint64_t bytes) {
  if (!g || !tier_ok(tier))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_governor_set_budget: %s",
                       g ? "tier must be ORTEP_TIER_HOST, _DEVICE or _DISK" : "governor is NULL");
  atomic_store(&g->budget[tier], bytes);
  return ORTEP_OK;
}

uint64_t ortep_governor_budget(const ortep_governor *g, ortep_tier tier) {
  return (g && tier_ok(tier)) ? atomic_load(&g->budget[tier]) : 0;
}

ortep_status ortep_governor_configure(ortep_governor *g, const char *key, const char *value) {
  static const char *const keys[ORTEP_TIER_COUNT] = {"ortep.host.budget_bytes", "ortep.device.budget_bytes",
                                                     "ortep.disk.budget_bytes"};
  if (!g || !key || !value) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_governor_configure: NULL argument");
  for (int t = 0; t < ORTEP_TIER_COUNT; t++) {
    if (strcmp(key, keys[t]) != 0) continue;
    uint64_t bytes;
    if (!ortep__parse_bytes(value, &bytes))
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "%s: '%s' is not a byte count; use digits with an optional K, M, G or T suffix "
                         "(e.g. 8G) or 'unlimited'",
                         key, value);
    return ortep_governor_set_budget(g, (ortep_tier)t, bytes);
  }
  return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                     "unknown governor setting '%s'; known: ortep.host.budget_bytes, ortep.device.budget_bytes, "
                     "ortep.disk.budget_bytes",
                     key);
}

ortep_status ortep_governor_charge(ortep_governor *g, ortep_tier tier, uint64_t bytes) {
  if (!g || !tier_ok(tier))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_governor_charge: %s",
                       g ? "tier must be ORTEP_TIER_HOST, _DEVICE or _DISK" : "governor is NULL");
  ortep__counters *c = &g->tier[tier];
  uint64_t budget = atomic_load_explicit(&g->budget[tier], memory_order_relaxed);
  uint64_t cur = atomic_load_explicit(&c->current, memory_order_relaxed);
  uint64_t next;
  do {
    if (bytes > budget || cur > budget - bytes) {
      char b1[32], b2[32], b3[32];
      return ortep__fail(ORTEP_E_BUDGET_EXCEEDED,
                         "%s budget %s: %s in use, %s refused; raise ortep.%s.budget_bytes "
                         "(ortep_governor_configure) or ask for less",
                         ortep_tier_name(tier), ortep__format_bytes(budget, b1, sizeof b1),
                         ortep__format_bytes(cur, b2, sizeof b2), ortep__format_bytes(bytes, b3, sizeof b3),
                         ortep_tier_name(tier));
    }
    next = cur + bytes;
  } while (!atomic_compare_exchange_weak_explicit(&c->current, &cur, next, memory_order_relaxed, memory_order_relaxed));
  ortep__counters_note_alloc(c, bytes, next);
  return ORTEP_OK;
}

ortep_status ortep_governor_refund(ortep_governor *g, ortep_tier tier, uint64_t bytes) {
  if (!g || !tier_ok(tier))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_governor_refund: %s",
                       g ? "tier must be ORTEP_TIER_HOST, _DEVICE or _DISK" : "governor is NULL");
  ortep__counters *c = &g->tier[tier];
  uint64_t cur = atomic_load_explicit(&c->current, memory_order_relaxed);
  do {
    if (bytes > cur)
      return ortep__fail(ORTEP_E_INVALID_ARGUMENT,
                         "ortep_governor_refund: refund of %llu bytes on the %s tier exceeds the %llu bytes in use; "
                         "refund exactly what was charged",
                         (unsigned long long)bytes, ortep_tier_name(tier), (unsigned long long)cur);
  } while (!atomic_compare_exchange_weak_explicit(&c->current, &cur, cur - bytes, memory_order_relaxed,
                                                  memory_order_relaxed));
  atomic_fetch_add_explicit(&c->freed, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->frees, 1, memory_order_relaxed);
  return ORTEP_OK;
}

void ortep_governor_get_stats(const ortep_governor *g, ortep_tier tier, ortep_mem_stats *out) {
  if (!out) return;
  if (!g || !tier_ok(tier)) {
    *out = (ortep_mem_stats){0};
    return;
  }
  ortep__counters_read(&g->tier[tier], out);
}
