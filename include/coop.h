/*
 * coop: a fragmentation-aware GPU memory allocator with contiguous eviction.
 *
 * One pool per device keeps blocks in address order over one expandable
 * virtual range (or, without virtual memory management, over fixed segments).
 * All sizes are bytes, all costs nanoseconds. Every function is thread-safe
 * unless its comment says otherwise.
 */
#ifndef COOP_H
#define COOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libcoop is built with hidden visibility: only what this header declares is exported. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define COOP_VERSION_MAJOR 0
#define COOP_VERSION_MINOR 1
#define COOP_VERSION_PATCH 0
#define COOP_VERSION_STRING "0.1.0"

/* Returns the library's version string (may differ from the header's). */
const char *coop_version(void);

/* ------------------------------------------------------------------------
 * Status values
 * ---------------------------------------------------------------------- */

typedef enum coop_status {
    COOP_OK = 0,
    COOP_ERR_NOMEM,        /* the device (capacity) has no room for the request */
    COOP_ERR_INVALID,      /* an argument or configuration value is invalid */
    COOP_ERR_FOREIGN_PTR,  /* pointer not from this pool */
    COOP_ERR_DOUBLE_FREE,  /* pointer already freed */
    COOP_ERR_INTERIOR_PTR, /* pointer inside a block, not at its start */
    COOP_ERR_BACKEND,      /* the backend (driver) failed a call */
    COOP_ERR_NO_DRIVER,    /* no CUDA driver could be loaded */
    COOP_ERR_UNSUPPORTED,  /* the backend or build lacks this feature */
    COOP_ERR_CORRUPT,      /* coop_pool_check found a broken invariant */
    COOP_ERR_HOST_NOMEM,   /* host memory for metadata ran out */
    COOP_ERR_BUSY,         /* the object is in use (pinned tensor, pending event) */
    COOP_STATUS_COUNT
} coop_status;

/* A short, constant, human-readable description of a status. */
const char *coop_strerror(coop_status status);

/* ------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------- */

typedef struct coop_pool coop_pool;

/* A stream handle: a cudaStream_t on the CUDA backend, any integer on the
 * host backend. 0 is the default stream. */
typedef uintptr_t coop_stream;

typedef enum coop_backend_kind {
    COOP_BACKEND_HOST = 0, /* simulated device: reserved, never-touched address space */
    COOP_BACKEND_CUDA = 1  /* CUDA driver API loaded at run time */
} coop_backend_kind;

/* Where inside the chosen free block an allocation is placed. */
typedef enum coop_alloc_flags {
    COOP_ALLOC_LOW = 0,     /* at the block's low-address end (default) */
    COOP_ALLOC_HIGH = 1u    /* at the block's high-address end (cheap tensors) */
} coop_alloc_flags;

typedef struct coop_config {
    coop_backend_kind backend;
    int device;             /* CUDA device ordinal (ignored by the host backend) */
    uint64_t capacity;      /* most bytes mapped at once; 0 = device's total (CUDA) or 80 GiB (host) */
    uint64_t page_size;     /* physical mapping granularity; 0 = backend's (2 MiB) */
    uint64_t va_size;       /* virtual range reserved; 0 = 4 x capacity */
    uint64_t segment_size;  /* segment size without VMM; 0 = 20 MiB */
    uint64_t min_split;     /* smallest remainder a split leaves; 0 = 512 */
    bool use_vmm;           /* map pages on demand (true) or fixed segments (false) */
    bool check;             /* run coop_pool_check after every operation (slow) */
    unsigned fault_kinds;   /* tests: COOP_FAULT_* mask armed from creation on */
    uint64_t fault_nth;     /* tests: fail the Nth call of fault_kinds (0 = never) */
} coop_config;

/* Fills *config with defaults: host backend, device 0, VMM on, checks off. */
void coop_config_default(coop_config *config);

/* Creates a pool. On failure *out is NULL and the status says why;
 * coop_last_error() holds a message with details. */
coop_status coop_pool_create(const coop_config *config, coop_pool **out);

/* Releases every mapping and reservation of the pool. Outstanding
 * allocations become invalid. Not thread-safe against other calls on the pool. */
void coop_pool_destroy(coop_pool *pool);

/* Allocates size bytes (rounded up to 512) for use on stream. Returns NULL and
 * sets *status (if non-NULL) on failure; size 0 returns NULL with COOP_OK.
 * flags: COOP_ALLOC_LOW or COOP_ALLOC_HIGH. On out-of-memory the pool first
 * releases unmappable pages and retries; the final message (coop_last_error)
 * gives the requested bytes, free bytes and the largest free block. */
void *coop_malloc(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                  coop_status *status);

/* Frees a pointer returned by coop_malloc. Foreign pointers, interior pointers
 * and double frees return a distinct status and leave the pool untouched.
 * A block used on other streams (coop_record_stream) becomes reusable only
 * once events recorded now on those streams complete. */
coop_status coop_free(coop_pool *pool, void *ptr);

/* Marks ptr as used on stream (besides its allocation stream). */
coop_status coop_record_stream(coop_pool *pool, void *ptr, coop_stream stream);

/* Unmaps every physical page lying wholly inside free blocks (VMM) or releases
 * wholly free segments (without VMM). */
coop_status coop_empty_cache(coop_pool *pool);

/* Changes the capacity. Lowering it below the mapped bytes releases free
 * pages; COOP_ERR_NOMEM if live blocks still need more. */
coop_status coop_set_capacity(coop_pool *pool, uint64_t capacity);

/* The pool's configuration as resolved at creation (defaults filled in). */
void coop_pool_config(const coop_pool *pool, coop_config *out);

/* The most recent error message of this thread (never NULL; "" if none). */
const char *coop_last_error(void);

/* ------------------------------------------------------------------------
 * Statistics (the counters of torch.cuda.memory_stats() where they match)
 * ---------------------------------------------------------------------- */

typedef struct coop_stat {
    int64_t current, peak, allocated, freed;
} coop_stat;

typedef struct coop_stats {
    coop_stat allocation;           /* allocated blocks */
    coop_stat segment;              /* segments (VMM: 1 reservation) */
    coop_stat active;               /* allocated + awaiting stream events */
    coop_stat inactive_split;       /* free blocks that are part of a split segment */
    coop_stat allocated_bytes;
    coop_stat reserved_bytes;       /* mapped bytes (VMM) or segment bytes */
    coop_stat active_bytes;
    coop_stat inactive_split_bytes;
    coop_stat requested_bytes;      /* sizes as asked, before rounding */
    uint64_t num_alloc_retries;     /* allocations that had to release memory and retry */
    uint64_t num_ooms;              /* allocations that failed for lack of memory */
    uint64_t num_maps, num_unmaps;  /* backend map / unmap calls (segment allocs / frees without VMM) */
    uint64_t map_bytes;             /* total bytes ever mapped (first mappings included) */
    uint64_t capacity;
    uint64_t free_bytes;            /* sum of free blocks */
    uint64_t largest_free_block;
    uint64_t num_free_blocks;
    double fragmentation;           /* 1 - largest_free_block / free_bytes (0 if none free) */
    double reserved_over_allocated; /* reserved / allocated (0 if nothing allocated) */
} coop_stats;

/* Fills *out with the pool's statistics. */
void coop_get_stats(coop_pool *pool, coop_stats *out);

/* Resets the peak of every counter to its current value. */
void coop_reset_peak_stats(coop_pool *pool);

/* ------------------------------------------------------------------------
 * Walking and checking
 * ---------------------------------------------------------------------- */

typedef enum coop_block_state {
    COOP_BLOCK_FREE = 0,
    COOP_BLOCK_ALLOCATED = 1,
    COOP_BLOCK_PENDING = 2 /* freed, waiting for other streams' events */
} coop_block_state;

typedef struct coop_block_info {
    uintptr_t address;
    uint64_t size;
    uint64_t requested_size; /* 0 for free blocks */
    coop_block_state state;
    coop_stream stream;      /* allocation stream (free blocks: last stream) */
    uint64_t mapped_bytes;   /* bytes of the block backed by mapped pages */
} coop_block_info;

typedef struct coop_segment_info {
    uintptr_t address;
    uint64_t size;           /* tiled range (VMM: up to the top of the arena) */
    uint64_t mapped_bytes;
    size_t num_blocks;
} coop_segment_info;

/* Called once per segment, then once per block of it in address order.
 * Return non-zero to stop the walk. */
typedef int (*coop_segment_visitor)(const coop_segment_info *segment, void *ctx);
typedef int (*coop_block_visitor)(const coop_block_info *block, void *ctx);

/* Visits every segment and block under the pool's lock: visitors must not
 * call back into the pool. */
coop_status coop_walk(coop_pool *pool, coop_segment_visitor on_segment,
                      coop_block_visitor on_block, void *ctx);

/* Validates every invariant (tiling, coalescing, free index, statistics,
 * page map). Returns COOP_ERR_CORRUPT with a message naming the first
 * violation. */
coop_status coop_pool_check(coop_pool *pool);

/* ------------------------------------------------------------------------
 * Host backend controls (tests and simulators)
 * ---------------------------------------------------------------------- */

/* While a stream is held, events recorded on it stay incomplete; releasing
 * it completes them. Host backend only (else COOP_ERR_UNSUPPORTED). */
coop_status coop_host_hold_stream(coop_pool *pool, coop_stream stream, bool hold);

/* Fault injection: makes the Nth next backend call of the given kinds fail
 * (counting from 1; 0 disarms). kinds is a mask of COOP_FAULT_* values. */
enum {
    COOP_FAULT_RESERVE = 1u << 0,
    COOP_FAULT_MAP = 1u << 1,
    COOP_FAULT_UNMAP = 1u << 2,
    COOP_FAULT_EVENT = 1u << 3,
    COOP_FAULT_SEGMENT = 1u << 4,
    COOP_FAULT_ALL = 0x1f
};
coop_status coop_inject_fault(coop_pool *pool, unsigned kinds, uint64_t nth);

/* Number of backend calls of the given kinds made so far (for fault sweeps). */
uint64_t coop_backend_calls(coop_pool *pool, unsigned kinds);

/* ---- section: rematerialization (remat.c) ---- */

/* ---- end section: rematerialization ---- */

/* ---- section: PyTorch integration (torch_abi.c) ---- */

/*
 * The entry points of torch.cuda.memory.CUDAPluggableAllocator, with C
 * linkage (python/coop/torch.py installs them). One pool per device, created
 * on first use from COOP_ALLOC_CONF (or coop_torch_configure). Streams are
 * cudaStream_t values passed as void * (any integer on the host backend).
 * None of them crashes the process on bad input or failure: the first error
 * of each kind is printed to stderr, every error is kept for
 * coop_torch_last_error(), and coop_torch_malloc returns NULL.
 */

/* Allocates size bytes on device for use on stream. NULL for size 0 (as
 * PyTorch's own allocator) and on failure (out of memory, bad configuration,
 * no driver). */
void *coop_torch_malloc(size_t size, int device, void *stream);

/* Frees ptr (size and stream as PyTorch recorded them at allocation). */
void coop_torch_free(void *ptr, size_t size, int device, void *stream);

/* Init hook: PyTorch's device count (devices >= it are refused). Also
 * parses the configuration so that errors show at installation. */
void coop_torch_init(int device_count);

/* Reset / empty_cache hook: unmaps every free page of every pool. */
void coop_torch_empty_cache(void);

/* Memory-fraction hook: limits device's pool to fraction (0, 1] of its full
 * capacity (COOP_ALLOC_CONF's capacity, else the device's memory). Applied
 * at creation when the pool does not exist yet. */
void coop_torch_memory_fraction(double fraction, int device);

/* record_stream hook: ptr is also used on stream. */
void coop_torch_record_stream(void *ptr, void *stream);

/* Sets the configuration from conf (COOP_ALLOC_CONF syntax; NULL = read the
 * environment variable). COOP_ERR_INVALID with a message naming the key and
 * value if it does not parse; COOP_ERR_BUSY once a pool exists. */
coop_status coop_torch_configure(const char *conf);

/* The configuration in force, as key:value text (NUL-terminated, truncated
 * to size). Returns COOP_ERR_INVALID with the parse error if it is bad. */
coop_status coop_torch_settings(char *buf, size_t size);

/* Copies the most recent error of any thread of the ABI (NUL-terminated,
 * truncated to size) and returns its length; 0 if none. */
size_t coop_torch_last_error(char *buf, size_t size);

/* Device's pool if it has been created, else NULL (never creates one).
 * Valid until process exit: the ABI never destroys its pools. */
coop_pool *coop_torch_pool(int device);

/* Turns history recording on with room for max_entries events per device,
 * or off (0), dropping what was recorded. */
void coop_torch_record_history(size_t max_entries);

/* One recorded event (torch's device_traces entry). */
typedef enum coop_torch_action {
    COOP_TORCH_ALLOC = 0,
    COOP_TORCH_FREE_REQUESTED = 1,
    COOP_TORCH_FREE_COMPLETED = 2,
    COOP_TORCH_OOM = 3
} coop_torch_action;

typedef struct coop_torch_event {
    uint64_t time_us;  /* microseconds since the Unix epoch */
    uintptr_t address; /* 0 for OOM */
    uint64_t size;     /* requested bytes */
    uintptr_t stream;
    int32_t action;    /* coop_torch_action */
    int32_t device;
} coop_torch_event;

/* What snapshot() needs for one device: segments and their blocks (as
 * coop_walk gives them; blocks[] holds segments[i].num_blocks blocks for
 * each segment in order) and the recorded events, oldest first. */
typedef struct coop_torch_snapshot {
    int device;
    bool vmm;
    size_t num_segments;
    coop_segment_info *segments;
    size_t num_blocks;
    coop_block_info *blocks;
    size_t num_events;
    coop_torch_event *events;
} coop_torch_snapshot;

/* Takes device's snapshot (an empty one if it has no pool). Free it with
 * coop_torch_snapshot_free. */
coop_status coop_torch_snapshot_take(int device, coop_torch_snapshot **out);
void coop_torch_snapshot_free(coop_torch_snapshot *snapshot);

/* ---- end section: PyTorch integration ---- */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* COOP_H */
