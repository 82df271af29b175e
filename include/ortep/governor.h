/*
 * governor.h: memory budgets per tier. Every backend charges the governor
 * before it allocates and refunds it when it releases, so a process can cap
 * host, device and disk memory and see where it went. A charge over budget is
 * refused with ORTEP_E_BUDGET_EXCEEDED and a message naming the budget, the
 * bytes in use, the request and the setting to change; a refused charge
 * changes no counter. All calls are thread-safe.
 */
#ifndef ORTEP_GOVERNOR_H
#define ORTEP_GOVERNOR_H

#include "ortep/allocator.h"

ORTEP_BEGIN_DECLS

/* No budget: every charge that does not overflow is granted. */
#define ORTEP_BUDGET_UNLIMITED UINT64_MAX

/* Creates a governor with every tier unlimited. Destroy with
 * ortep_governor_destroy once every allocator charging it is gone. */
ORTEP_API ortep_status ortep_governor_create(ortep_governor **out);
ORTEP_API void ortep_governor_destroy(ortep_governor *governor);

/* Sets a tier's budget. Lowering it below the bytes in use is allowed: new
 * charges are refused until enough is refunded. */
ORTEP_API ortep_status ortep_governor_set_budget(ortep_governor *governor, ortep_tier tier, uint64_t bytes);
ORTEP_API uint64_t ortep_governor_budget(const ortep_governor *governor, ortep_tier tier);
/* The same through the setting names messages refer to:
 * "ortep.host.budget_bytes", "ortep.device.budget_bytes",
 * "ortep.disk.budget_bytes"; value a decimal byte count with an optional
 * K/M/G/T (binary) suffix, or "unlimited". */
ORTEP_API ortep_status ortep_governor_configure(ortep_governor *governor, const char *key, const char *value);

/* Charge bytes to a tier before allocating them; on refusal nothing changes. */
ORTEP_API ortep_status ortep_governor_charge(ortep_governor *governor, ortep_tier tier, uint64_t bytes);
/* Refund bytes previously charged. Refunding more than is in use is refused
 * (ORTEP_E_INVALID_ARGUMENT) and changes nothing. */
ORTEP_API ortep_status ortep_governor_refund(ortep_governor *governor, ortep_tier tier, uint64_t bytes);

ORTEP_API void ortep_governor_get_stats(const ortep_governor *governor, ortep_tier tier, ortep_mem_stats *out);

ORTEP_END_DECLS

#endif
