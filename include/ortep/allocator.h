/*
 * allocator.h: the allocator contract and the host allocator.
 *
 * An allocator is something memory comes from: an opaque handle here, a
 * vtable plus state for its implementer (ortep/backend_impl.h: it embeds
 * `ortep_allocator` as its first member and fills the vtable). Three entries
 * are required (allocate, deallocate, device); every
 * other entry may be NULL and then gets the contract's default through the
 * ortep_allocator_* dispatch functions below:
 *
 *   release                  -> deallocate, reported COMPLETE, 0 bytes unmapped
 *   commits_on_demand        -> false (the safe answer)
 *   virtual_backing          -> none
 *   shared_mapping           -> none
 *   stats                    -> ORTEP_E_NOT_SUPPORTED
 *   destroy                  -> nothing to free
 *
 * The dispatchers validate requests before an implementation sees them: an
 * alignment that is not a power of two, or a size that overflows once
 * rounded, is refused with ORTEP_E_INVALID_ARGUMENT and a reason. Zero bytes
 * is a valid request that yields a usable, distinct, non-null pointer.
 *
 * Ownership: every pointer from allocate is released exactly once, by
 * deallocate or release on the same allocator, with the same bytes and align.
 */
#ifndef ORTEP_ALLOCATOR_H
#define ORTEP_ALLOCATOR_H

#include "ortep/buffer.h" /* ortep_allocation_request_check */
#include "ortep/device.h"
#include "ortep/status.h"

ORTEP_BEGIN_DECLS

/* Which physical memory an allocator draws from: a tier plus an index within
 * it. Two CUDA devices share a tier but are different keys. */
typedef struct ortep_device_key {
  ortep_tier tier;
  uint32_t index;
} ortep_device_key;

static inline ortep_device_key ortep_device_key_host(void) { return (ortep_device_key){ORTEP_TIER_HOST, 0}; }
static inline ortep_device_key ortep_device_key_device(uint32_t index) {
  return (ortep_device_key){ORTEP_TIER_DEVICE, index};
}
static inline bool ortep_device_key_equal(ortep_device_key a, ortep_device_key b) {
  return a.tier == b.tier && a.index == b.index;
}

/* How a whole-allocation release ended.
 *   COMPLETE     everything is gone (freed or pooled); zero unmapped bytes is a
 *                valid complete result and never signals failure.
 *   FAILED       nothing changed: the allocation is still live and owned.
 *   QUARANTINED  a partial teardown: unmapped_bytes were unmapped and
 *                residual_owned_bytes are still owned by the allocator (not
 *                used yet: no backend tears down partially; only the fault
 *                wrapper forwards it). */
typedef enum ortep_release_kind {
  ORTEP_RELEASE_COMPLETE = 0,
  ORTEP_RELEASE_FAILED = 1,
  ORTEP_RELEASE_QUARANTINED = 2,
} ortep_release_kind;

typedef struct ortep_release_outcome {
  ortep_release_kind kind;
  uint64_t allocation_bytes;     /* the size of the allocation released */
  uint64_t unmapped_bytes;       /* bytes whose mapping went away */
  uint64_t residual_owned_bytes; /* QUARANTINED only: bytes still owned */
} ortep_release_outcome;

/* Counters in the style of PyTorch / RMM memory stats. */
typedef struct ortep_mem_stats {
  uint64_t current_bytes;   /* live now */
  uint64_t peak_bytes;      /* the most ever live at once */
  uint64_t allocated_bytes; /* total ever allocated */
  uint64_t freed_bytes;     /* total ever freed */
  uint64_t allocations;     /* number of allocations */
  uint64_t frees;           /* number of frees */
} ortep_mem_stats;

/* An opaque handle; implementing one is ortep/backend_impl.h's. */
typedef struct ortep_allocator ortep_allocator;

/* Optional capability: lazy virtual backing. reserve takes address space
 * without memory; commit makes a range of it usable (read-write, populated:
 * no fault inside a step) and charges the governor; decommit gives a range's
 * memory back to the OS and refunds it. Ranges are whole granules (pages on
 * the host, the VMM granularity on a GPU): a range is widened to the granules
 * it touches. Committing a committed granule adds nothing (the reported bytes
 * say what each call changed), so callers may commit generously. The
 * reservation itself is released through the allocator's ordinary release,
 * which gives back everything still committed or mapped in it. */
typedef struct ortep_commit_range {
  void *ptr;               /* the reservation's base */
  size_t allocation_bytes; /* the reservation's size */
  size_t align;
  size_t offset; /* the range, relative to ptr */
  size_t bytes;
} ortep_commit_range;

/* Optional capability: shared physical mappings. A prefix is physical memory
 * holding a copy of `len` bytes, owned (and charged) once, which map_prefix
 * maps read-only at the start of any number of reservations of the same
 * allocator, and map_prefix_at at any granule of one (its first granules or
 * all of them, as many times as asked: a batch's slots share one
 * reservation), replacing what those granules held (private memory there
 * is given back, a prefix mapped there before loses those granules).
 * Writing through a shared mapping faults: a user that must change such a
 * range decommits it and commits private memory. The memory goes back when
 * the prefix handle is destroyed and the last mapping is gone (decommitted,
 * or its reservation released). */
typedef struct ortep_shared_prefix ortep_shared_prefix;
typedef struct ortep_shared_commit_info {
  uint64_t additional_owned_bytes; /* the prefix's bytes for its first mapping, zero for every later one */
  uint64_t newly_mapped_bytes;     /* bytes of the reservation now mapped to the prefix */
  uint64_t released_bytes;         /* private memory the mapping replaced and gave back */
  size_t granules;
} ortep_shared_commit_info;

/* --- dispatch (validation + the contract's defaults) ----------------------- */
ORTEP_API ortep_status ortep_allocator_allocate(ortep_allocator *a, size_t bytes, size_t align, void **out);
ORTEP_API void ortep_allocator_deallocate(ortep_allocator *a, void *ptr, size_t bytes, size_t align);
ORTEP_API ortep_release_outcome ortep_allocator_release(ortep_allocator *a, void *ptr, size_t bytes, size_t align);
ORTEP_API ortep_device_key ortep_allocator_device(const ortep_allocator *a);
ORTEP_API const char *ortep_allocator_name(const ortep_allocator *a);
ORTEP_API bool ortep_allocator_commits_on_demand(const ortep_allocator *a);
/* Whether the allocator has the optional capabilities above. */
ORTEP_API bool ortep_allocator_has_virtual_backing(ortep_allocator *a);
ORTEP_API bool ortep_allocator_has_shared_mapping(ortep_allocator *a);
/* Virtual backing (ORTEP_E_NOT_SUPPORTED, naming the allocator, without it).
 * The dispatchers check the range lies inside its reservation without
 * overflow; the allocator checks ptr is one of its reservations. A failed
 * commit changes nothing. */
ORTEP_API ortep_status ortep_allocator_reserve(ortep_allocator *a, size_t bytes, size_t align, void **out);
ORTEP_API ortep_status ortep_allocator_commit(ortep_allocator *a, const ortep_commit_range *range,
                                              uint64_t *newly_owned_bytes);
ORTEP_API ortep_status ortep_allocator_decommit(ortep_allocator *a, const ortep_commit_range *range,
                                                uint64_t *released_bytes);
/* The granule commits and decommits work in (0 without virtual backing). */
ORTEP_API size_t ortep_allocator_granularity(ortep_allocator *a);
/* Shared mappings (ORTEP_E_NOT_SUPPORTED without them). bytes are read in
 * the allocator's memory (host memory for the host allocator, device memory
 * for a GPU's). */
ORTEP_API ortep_status ortep_allocator_create_prefix(ortep_allocator *a, const void *bytes, size_t len,
                                                     ortep_shared_prefix **out);
ORTEP_API ortep_status ortep_allocator_map_prefix(ortep_allocator *a, ortep_shared_prefix *prefix, void *allocation,
                                                  size_t allocation_bytes, ortep_shared_commit_info *out);
/* The prefix's first `bytes` (rounded up to whole granules; 0: all of it)
 * at `offset` into the reservation (a whole number of granules:
 * ORTEP_E_INVALID_ARGUMENT otherwise; ORTEP_E_OUT_OF_RANGE when it does not
 * fit the reservation or asks for more than the prefix holds).
 * map_prefix is this at offset 0 with all of it. */
ORTEP_API ortep_status ortep_allocator_map_prefix_at(ortep_allocator *a, ortep_shared_prefix *prefix, void *allocation,
                                                     size_t allocation_bytes, size_t offset, size_t bytes,
                                                     ortep_shared_commit_info *out);
/* Drops the handle; the memory stays while a mapping holds it. NULL: no-op. */
ORTEP_API void ortep_allocator_destroy_prefix(ortep_allocator *a, ortep_shared_prefix *prefix);
ORTEP_API ortep_status ortep_allocator_get_stats(const ortep_allocator *a, ortep_mem_stats *out);
/* Frees the allocator object itself (not its live allocations). NULL is a no-op. */
ORTEP_API void ortep_allocator_destroy(ortep_allocator *a);

/* --- the host allocator ---------------------------------------------------- */
typedef struct ortep_governor ortep_governor;

/* Host memory from mimalloc (mi_malloc_aligned / mi_free), or the system
 * allocator in a build with ORTEP_SYSTEM_ALLOCATOR. Eager: no optional
 * capability. When governor is non-NULL every allocation is charged to its
 * HOST tier before it is made and refunded when it is released; the governor
 * must outlive the allocator. Per-allocator counters through
 * ortep_allocator_get_stats. Thread-safe. Destroy with ortep_allocator_destroy. */
ORTEP_API ortep_status ortep_host_allocator_create(ortep_governor *governor, ortep_allocator **out);

/* --- the host virtual allocator ------------------------------------------ */
/* Host memory straight from the OS (mmap), with both optional capabilities:
 * reserve is PROT_NONE | MAP_NORESERVE address space, commit maps populated
 * anonymous pages over a range, decommit maps PROT_NONE over it again (the
 * pages go back to the OS), a shared prefix is a memfd mapped MAP_SHARED |
 * MAP_FIXED read-only. The governor's HOST tier is charged for committed
 * pages and prefixes only, so a budget bounds memory, not address space;
 * commits_on_demand is true when a governor is given. An ordinary allocate
 * is a reservation committed whole. Linux only (ORTEP_E_NOT_SUPPORTED
 * elsewhere). Thread-safe. */
ORTEP_API ortep_status ortep_host_virtual_allocator_create(ortep_governor *governor, ortep_allocator **out);

/* --- the CUDA virtual allocator ------------------------------------------ */
/* The same capabilities on GPU `device` over the CUDA virtual memory API
 * (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap,
 * cuMemRelease; granules of cuMemGetAllocationGranularity), charged to the
 * governor's DEVICE tier; newly committed memory is zeroed. In the CUDA
 * module: ORTEP_E_NOT_SUPPORTED in a build without CUDA or on a device
 * without virtual memory management. */
ORTEP_API ortep_status ortep_cuda_virtual_allocator_create(int device, ortep_governor *governor, ortep_allocator **out);

/* --- the CUDA pool allocator ------------------------------------------------- */
/* Device memory on GPU `device` from its cudaMemPool (release threshold
 * raised: freed memory is retained), allocated with cudaMallocFromPoolAsync
 * and freed with cudaFreeAsync on `stream` (a cudaStream_t); charged to the
 * governor's DEVICE tier when one is given. Refuses to allocate while the
 * stream is capturing (ORTEP_E_CAPTURE_ACTIVE). In a build without CUDA it
 * returns ORTEP_E_NOT_SUPPORTED. */
ORTEP_API ortep_status ortep_cuda_pool_allocator_create(int device, void *stream, ortep_governor *governor,
                                                        ortep_allocator **out);

/* --- the fault-injecting wrapper ------------------------------------------- */
/* Forwards to inner (which must outlive it) and fails on request, for the
 * SQLite-style OOM loop: fail the Nth allocate counted from the last arm, and
 * optionally every one after. Failures return ORTEP_E_OUT_OF_MEMORY with a
 * message saying they were injected. Its stats count what it forwarded. */
ORTEP_API ortep_status ortep_fault_allocator_create(ortep_allocator *inner, ortep_allocator **out);
/* nth = 1 fails the next allocate; 0 disarms. persistent: fail every call from
 * the nth on. Resets the call counter. a must come from ortep_fault_allocator_create. */
ORTEP_API void ortep_fault_allocator_arm(ortep_allocator *a, uint64_t nth, bool persistent);
/* allocate calls since the last arm, and failures injected since creation. */
ORTEP_API uint64_t ortep_fault_allocator_calls(const ortep_allocator *a);
ORTEP_API uint64_t ortep_fault_allocator_failures(const ortep_allocator *a);

ORTEP_END_DECLS

#endif
