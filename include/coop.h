/*
 * coop: a fragmentation-aware GPU memory allocator with contiguous eviction.
 *
 * This header needs C99 (or C++11; it is wrapped in extern "C"); libcoop
 * itself is built as C11. scripts/check_install.sh compiles it both ways.
 *
 * One pool per device keeps blocks in address order over one expandable
 * virtual range (or, without virtual memory management, over fixed segments).
 * All sizes are bytes, all costs nanoseconds. Every function is thread-safe
 * unless its comment says otherwise.
 *
 * Process lifecycle (tests/README.md, "Process lifecycle: fork, exit,
 * unload"):
 * - fork(): libcoop's pthread_atfork handlers hold every pool's lock (and
 *   the PyTorch ABI's locks) across the fork, so a fork waits for calls in
 *   other threads to finish and the child gets a consistent, unlocked copy
 *   of each pool. A fork from inside a coop_walk visitor, which runs under
 *   the pool's lock, completes: the handlers leave the pools this thread
 *   is walking to the walk (one, or several nested), and in each process
 *   the visitor goes on and coop_walk returns and unlocks as usual; the
 *   child's copy is consistent (a walk changes nothing). Not solved: such
 *   a fork while another thread, inside the PyTorch ABI (its state or a
 *   device's order lock held), waits for the walked pool's lock, and a
 *   fork from another thread (from a visitor of another walk or not) that
 *   began while the walk held the pool: that fork waits for the walk, and
 *   glibc runs the atfork handlers of one fork at a time, so the visitor's
 *   fork waits for it, forever. A visitor must return: a longjmp,
 *   pthread_exit or cancellation out of it leaves the pool locked for
 *   good and this thread's record of its walks pointing into a stack frame
 *   that is gone (its next fork reads it). On the host backend the
 *   child may use its copy (the parent's pool is not affected).
 * - A CUDA pool in a forked child: its memory and streams belong to the
 *   parent's CUDA context, which does not survive fork, so the child's copy
 *   refuses every call at once, without a driver call: each call that
 *   returns a status or a pointer fails with COOP_ERR_UNSUPPORTED (not
 *   COOP_ERR_BACKEND: no driver failed, and nothing in this process will
 *   ever make the pool usable) and the message "FN: this CUDA pool was
 *   created in process P; CUDA cannot be used in a forked child (process
 *   C)". coop_free of a block (from the parent) is refused so, a no-op: the
 *   block's memory is the parent's; nothing is corrupted. The remat calls
 *   on a context over such a pool are refused likewise. coop_get_stats,
 *   coop_pool_config and coop_backend_calls answer from the copy (the
 *   parent's state at the fork); coop_reset_peak_stats does nothing and
 *   sets the message; coop_remat_destroy frees the context's host records;
 *   coop_pool_destroy frees the pool's host memory only (the message then
 *   says the device memory is left to process P). coop_pool_create with
 *   the CUDA backend is refused too (COOP_ERR_UNSUPPORTED, naming both
 *   processes) in a process forked after coop initialized the driver in an
 *   ancestor. The PyTorch ABI refuses its CUDA calls in the same words
 *   (below). As PyTorch, which refuses CUDA in a child forked after CUDA
 *   was initialized ("Cannot re-initialize CUDA in forked subprocess"):
 *   use the spawn start method for workers that need the GPU. Pools are
 *   marked by the fork handler: no call asks getpid(). Not covered: a pool
 *   created single_thread (no lock: its caller must not fork while it is in
 *   use), and a raw clone() or syscall(SYS_fork) (no atfork handlers run).
 *   A remat context is not locked at fork: one that another thread was
 *   inside stays claimed by that thread in the child, and refuses its
 *   calls there (see coop_remat_create).
 * - exit: libcoop has no destructors or atexit handlers; nothing is torn
 *   down at exit, so frees after main returns (an interpreter freeing
 *   tensors at shutdown, from any thread) and a thread still inside a call
 *   while another exits are safe. The PyTorch ABI's pools are never
 *   destroyed; the operating system reclaims them.
 * - dlclose: libcoop unloads, and its fork handlers go with it. A pool
 *   still alive at dlclose is leaked (its memory stays mapped, its functions
 *   are gone): destroy pools first. The last error (coop_last_error) is a
 *   fixed-size thread-local buffer with no destructor: threads that exit, or
 *   that outlive the unload, leave nothing behind.
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

/* Returns sizeof the public structure named type ("coop_config",
 * "coop_stat", "coop_stats", "coop_block_info", "coop_segment_info",
 * "coop_torch_event", "coop_torch_range", "coop_torch_snapshot") as this
 * library was built, or 0 for NULL or another name. For bindings that
 * mirror the structures (as python/coop/native.py does with ctypes): a
 * library of another build may lay them out otherwise under the same
 * version string. */
size_t coop_abi_size(const char *type);

/* Returns offsetof the member named field in the public structure named
 * type (one of coop_abi_size's names; field as coop.h spells it, e.g.
 * coop_abi_offset("coop_torch_range", "size")) as this library was built,
 * or SIZE_MAX ((size_t)-1: 0 is a real offset) for NULL, a type not listed
 * there, or a field that structure lacks. Every member of every listed
 * structure is known. With coop_abi_size, lets a binding check each mirrored
 * field, not only the total: two fields of one width swapped keep the size. */
size_t coop_abi_offset(const char *type, const char *field);

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
    COOP_ERR_UNSUPPORTED,  /* the backend or build lacks this feature; a CUDA pool in a forked
                            * child (see "Process lifecycle" above) */
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
    COOP_ALLOC_LOW = 0,  /* at the block's low-address end (default) */
    COOP_ALLOC_HIGH = 1u /* at the block's high-address end (cheap tensors); a remainder
                          * below min_split stays with the allocation, at either end */
} coop_alloc_flags;

typedef struct coop_config {
    coop_backend_kind backend;
    int device;            /* CUDA device ordinal (ignored by the host backend) */
    uint64_t capacity;     /* most bytes mapped at once; 0 = device's total (CUDA) or 80 GiB
                            * (host: the simulated device is this size, in whole pages: 64 GiB
                            * of 32 GiB pages; a page above 80 GiB is refused); rounded up to
                            * pages, but not past the device's last whole page */
    uint64_t page_size;    /* physical mapping granularity: a power of two >= 512, with VMM a
                            * multiple of the backend's; 0 = backend's (2 MiB). The CUDA
                            * backend backs each page with one physical allocation: the
                            * driver's costs are per allocation, so larger pages map and
                            * release faster and are released only whole */
    uint64_t va_size;      /* virtual range reserved (VMM); 0 = 4 x capacity (both below
                            * 2^56). Holes cost no memory, but the tiled range only grows
                            * (holes between live blocks are not given back): once its top
                            * reaches va_size, a request larger than every free block fails
                            * with COOP_ERR_NOMEM ("virtual range ... exhausted") whatever the
                            * capacity left. Raise it where live blocks spread out (growing
                            * sizes, long-lived blocks of other streams above them). Also
                            * the most coop_set_capacity accepts */
    uint64_t segment_size; /* segment size without VMM; 0 = 20 MiB. A request of half of it
                            * or more gets a segment of its own size in pages (PyTorch: from
                            * 10 MiB), except while segment_size is the capacity in force
                            * (one fixed arena: its first segment is the whole capacity,
                            * shared by the requests after); a segment larger than the
                            * capacity left takes the request's own size */
    uint64_t min_split;    /* smallest remainder a split leaves (a smaller one stays with the
                            * allocation); 0 = 512; at most page_size with VMM, segment_size
                            * without */
    bool use_vmm;          /* map pages on demand (true) or fixed segments (false); a backend
                            * without VMM uses segments (coop_pool_config says which) */
    bool check;            /* run coop_pool_check after every operation (slow) */
    bool single_thread;    /* the caller serializes every call on the pool (one thread, or
                            * its own lock): the pool takes no lock of its own. For
                            * single-threaded tools (replays, simulators); default false */
    bool never_wait;       /* never block on a stream's work: by default (false), when memory
                            * runs out and on coop_empty_cache, the pool waits for busy
                            * streams' pending frees and free blocks, as PyTorch does. Set it
                            * where a stream can be blocked on this thread (a wait for a value
                            * it writes later, a collective waiting for a peer): such memory is
                            * then reported out of memory instead of deadlocking. Pages and
                            * segments are released only where every stream that used them
                            * is seen to have finished (an event on each, never a device-wide
                            * synchronize), so a blocked stream that never used them does not
                            * block that either; without VMM, cuMemFree may still wait for
                            * the whole device by itself */
    unsigned fault_kinds;  /* tests: COOP_FAULT_* mask armed from creation on */
    uint64_t fault_nth;    /* tests: fail the Nth call of fault_kinds (0 = never) */
} coop_config;

/* Fills *config with defaults: host backend, device 0, VMM on, checks off.
 * A NULL config is a no-op. */
void coop_config_default(coop_config *config);

/* NULL handles: every pool function given a NULL pool (or a NULL out pointer
 * where it returns a status) returns COOP_ERR_INVALID with a message naming
 * the function and the argument, and touches nothing. Functions without a
 * status do nothing: coop_pool_destroy(NULL) and coop_reset_peak_stats(NULL)
 * are no-ops, coop_get_stats / coop_pool_config with a NULL pool zero *out
 * (and ignore a NULL out), coop_backend_calls(NULL, ...) returns 0, and
 * coop_malloc(NULL, ...) returns NULL with *status set. */

/* Creates a pool; a NULL config means coop_config_default's. On failure
 * *out is NULL and the status says why; coop_last_error() holds a message
 * with details. COOP_ERR_INVALID, naming the config field: size fields at
 * or above 2^56 bytes, a page_size that is not a power of two of at least
 * 512 (or, with VMM, not a multiple of the backend's), a capacity above the
 * device's memory, a va_size (when given, with VMM) below the capacity, a
 * min_split above a page (VMM) or segment, an unknown backend, fault_kinds
 * with bits other than COOP_FAULT_*. */
coop_status coop_pool_create(const coop_config *config, coop_pool **out);

/* Releases every mapping and reservation of the pool. Outstanding
 * allocations become invalid. Not thread-safe against other calls on the pool.
 * With CUDA, what the driver will not take back (a failed unmap or device
 * synchronization, no usable context) stays with it for the life of the
 * process: a line on stderr and coop_last_error() then say what is left. */
void coop_pool_destroy(coop_pool *pool);

/* Allocates size bytes (rounded up to 512) for use on stream. Returns NULL and
 * sets *status (if non-NULL) on failure. flags: COOP_ALLOC_LOW or
 * COOP_ALLOC_HIGH; other bits, and the stream UINTPTR_MAX (reserved by the
 * pool), are COOP_ERR_INVALID, at any size; otherwise size 0 returns NULL
 * with COOP_OK. A size above
 * the capacity (SIZE_MAX too) is COOP_ERR_NOMEM at once. On out-of-memory (mapping would
 * exceed the capacity, or the device itself is full because memory is used
 * outside the pool and the driver refuses) the pool first releases the
 * cached pages (or free segments) that no queued work can use and retries
 * (counted in num_alloc_retries; with VMM, none where even every cached
 * page would leave too little room under the capacity: a request that
 * cannot fit leaves the cache as it was); then it makes the free blocks of idle
 * streams usable on any stream (except a block next to a free block of a
 * stream still busy, which stays its own stream's: "any stream" would merge
 * it into the busy stream's block) and retries, then (unless
 * coop_config.never_wait) waits for busy streams' pending frees and free
 * blocks, holding the pool's lock, and retries. Each retry after settling
 * streams, where the best fit's pages still cannot be mapped, takes the
 * best free block that needs none (or few enough) instead. The final message
 * (coop_last_error) gives the requested bytes, free bytes and the largest
 * free block, the bytes of pending frees if any (neither allocated nor
 * free), the free bytes kept for other streams not seen finished if any
 * (counted free, usable on those streams only), apart from them those of
 * streams seen finished kept beside such a block (naming this stream's own
 * where it is the busy neighbour), and the driver's message
 * when the device refused. A stream is
 * its handle's value: CUDA's per-thread default stream handle
 * (CU_STREAM_PER_THREAD) names another stream in each thread, and the pool
 * cannot tell them apart, so a block freed on it in one thread is reused at
 * once in another's; use it from one thread, or created streams. On the
 * CUDA backend, streams must belong to the pool device's primary context
 * (as the CUDA runtime's and PyTorch's do): the driver refuses an event on
 * a stream of another context, and memory used on such a stream stays
 * cached for good. Pages are mapped readable and writable by the pool's
 * device only (no peer access). */
void *coop_malloc(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                  coop_status *status);

/* Frees a pointer returned by coop_malloc; NULL is a no-op. Foreign pointers
 * (COOP_ERR_FOREIGN_PTR), interior pointers (COOP_ERR_INTERIOR_PTR) and
 * double frees (COOP_ERR_DOUBLE_FREE: the block is free or pending, also for
 * a pointer inside it) return a
 * distinct status, with the address in coop_last_error(), and leave the pool
 * untouched. The block is reusable at once on its allocation stream. A block
 * used on other streams (coop_record_stream) becomes pending: events are
 * recorded now on those streams and the block is reusable once they complete
 * (checked at the next allocations). Freeing a valid pointer never fails:
 * if the backend cannot record an event now, the block is pending all the
 * same and that event is recorded when pending frees are next processed
 * (allocations, coop_empty_cache), so it is not reused before the other
 * stream's work queued until then completes. The buffer of a coop_tensor
 * (rematerialization section) is refused with COOP_ERR_INVALID: the
 * tensor's context frees it (coop_tensor_release). */
coop_status coop_free(coop_pool *pool, void *ptr);

/* Marks ptr as used on stream (besides its allocation stream; recording the
 * allocation stream is a no-op, and so is a stream recorded already). A
 * block may be recorded on any number of streams (20,000 tried): each is
 * a comparison at every later record of the block and an event at its
 * free; when host memory for one more runs out, COOP_ERR_HOST_NOMEM, the
 * streams recorded before kept. Bad pointers give the statuses of coop_free
 * (NULL: COOP_ERR_FOREIGN_PTR); the stream UINTPTR_MAX is COOP_ERR_INVALID.
 * A coop_tensor's buffer is refused (COOP_ERR_INVALID): the remat API
 * places tensors on stream 0 and evicts them at once, which a pending
 * cross-stream use would defeat. */
coop_status coop_record_stream(coop_pool *pool, void *ptr, coop_stream stream);

/* Unmaps every physical page lying wholly inside free blocks (VMM) or releases
 * wholly free segments (without VMM). First, unless coop_config.never_wait,
 * waits for the streams of pending frees and of free blocks (as PyTorch's
 * empty_cache does), so that their blocks are freed and merge. Free blocks of
 * a stream whose work has not finished (never_wait, or a stream blocked on
 * the host) keep their pages: queued work may still use them. */
coop_status coop_empty_cache(coop_pool *pool);

/* Call before destroying a stream the pool has seen (allocations on it, or
 * coop_record_stream on it). The pool keeps the handle in the blocks freed
 * on it and records events on it later (out of memory, coop_empty_cache,
 * releasing cached memory), which CUDA leaves undefined once the stream is
 * destroyed. This waits for the stream's queued work (unless
 * coop_config.never_wait) and then makes every block the pool keeps for it
 * usable on any stream, so the handle is never used again. COOP_ERR_BUSY,
 * the blocks left as they were, while live blocks are allocated on it or
 * recorded on it (free them first), or while its work has not finished
 * (never_wait, or a stream blocked on the host). The stream UINTPTR_MAX is
 * COOP_ERR_INVALID; a stream the pool has not seen is a no-op. Walks every
 * block.
 * Host memory: the pool cannot tell a destroyed handle from an idle one, so
 * it keeps, for every stream it has seen and not forgotten, a free-index
 * set (about 330 KiB of address space, little of it touched), a queue for
 * pending frees' events (once coop_record_stream named it) and, on the host
 * backend, a stream slot. A program that makes streams as it goes (one per
 * request) must call this for each before destroying it, or that grows
 * with every stream; forgotten, all of it is given back (the backend's
 * slot once no event recorded on the stream is live) and reused for the
 * next streams, so the pool's host memory is bounded by the streams in use
 * at once (tests/steady_state_test). */
coop_status coop_forget_stream(coop_pool *pool, coop_stream stream);

/* Changes the capacity (rounded up to pages, but not past the device's last
 * whole page; at most the device's memory,
 * which on the host backend is the capacity given at creation). 0 or a value
 * above the device's memory (UINT64_MAX too: it does not mean "no limit")
 * is COOP_ERR_INVALID, and so, with VMM, is a capacity above the virtual
 * range reserved at creation (coop_config.va_size, which cannot grow: create
 * the pool with a larger va_size to raise the capacity further). Lowering it
 * below the mapped bytes completes the pending frees whose events are done
 * (without waiting for the others); then a capacity below the pages that
 * live blocks and the remaining pending frees keep is COOP_ERR_NOMEM at
 * once, the cached pages kept (releasing them could not reach it).
 * Otherwise it releases free pages / segments whose streams have finished
 * (waiting for them unless coop_config.never_wait); COOP_ERR_NOMEM if more
 * stays mapped than the new capacity: free pages cached for streams not
 * seen finished (coop_config.never_wait, or a stream blocked on the host).
 * Either message gives the pages live blocks keep, those of pending frees
 * (blocks waiting for other streams' events) and the cached ones. On any
 * error the capacity stays as it was. */
coop_status coop_set_capacity(coop_pool *pool, uint64_t capacity);

/* The pool's configuration as resolved at creation (defaults filled in),
 * with the capacity in force: coop_set_capacity's, as coop_stats.capacity. */
void coop_pool_config(const coop_pool *pool, coop_config *out);

/* The most recent error message of this thread (never NULL; "" if none).
 * Like errno, a successful call leaves it as it was: read it only after a
 * call returned an error status (or NULL with one). */
const char *coop_last_error(void);

/* ------------------------------------------------------------------------
 * Statistics (the counters of torch.cuda.memory_stats() where they match)
 * ---------------------------------------------------------------------- */

/* allocated and freed are cumulative: they stop at INT64_MAX (2^19 malloc /
 * free pairs of 16 TiB reach it), after which current no longer equals
 * allocated - freed. */
typedef struct coop_stat {
    int64_t current, peak, allocated, freed;
} coop_stat;

typedef struct coop_stats {
    coop_stat allocation;     /* allocated blocks */
    coop_stat segment;        /* segments (VMM: 1 reservation from creation; PyTorch's
                               * expandable segments count 0) */
    coop_stat active;         /* allocated + awaiting stream events */
    coop_stat inactive_split; /* free blocks that are part of a split segment (VMM: with a
                               * neighbour in the range; PyTorch's expandable: none) */
    coop_stat allocated_bytes;
    coop_stat reserved_bytes; /* mapped bytes (VMM) or segment bytes */
    coop_stat active_bytes;
    coop_stat inactive_split_bytes;
    coop_stat requested_bytes;  /* sizes as asked, before rounding, of allocated blocks: it
                                 * drops at coop_free with allocated_bytes, even when the
                                 * block stays pending (PyTorch's drops when the block is
                                 * released, with active_bytes) */
    uint64_t num_alloc_retries; /* allocations that took the out-of-memory path (release
                                 * cached memory, settle streams, retry: coop_malloc): once
                                 * each, failed or not, and whether or not anything was
                                 * released (a request that cannot fit even with the cache
                                 * released counts); not a request above the capacity */
    uint64_t num_ooms;          /* allocations that failed for lack of memory: once each.
                                 * Both count a remat context's allocation
                                 * (coop_tensor_create, a recomputation) once,
                                 * however many evictions and tries it took */
    uint64_t num_maps,
        num_unmaps;     /* backend map / unmap calls (segment allocs / frees without VMM) */
    uint64_t map_bytes; /* total bytes ever mapped (first mappings included; without VMM,
                         * the bytes of every segment allocated); stops at UINT64_MAX */
    uint64_t capacity;
    uint64_t free_bytes; /* sum of free blocks */
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
    coop_stream stream;    /* allocation stream (free blocks: last stream) */
    uint64_t mapped_bytes; /* bytes of the block backed by mapped pages */
} coop_block_info;

typedef struct coop_segment_info {
    uintptr_t address;
    uint64_t size; /* tiled range (VMM: up to the top of the arena) */
    uint64_t mapped_bytes;
    size_t num_blocks;
} coop_segment_info;

/* Called once per segment, then once per block of it in address order.
 * Return non-zero to stop the whole walk (no further segment or block);
 * coop_walk still returns COOP_OK: the value is not passed on, so a visitor
 * that must report an error leaves it in ctx. */
typedef int (*coop_segment_visitor)(const coop_segment_info *segment, void *ctx);
typedef int (*coop_block_visitor)(const coop_block_info *block, void *ctx);

/* Visits every segment and block under the pool's lock: visitors must not
 * change the pool, and must return normally: no longjmp, C++ exception,
 * pthread_exit or cancellation out of one. coop_walk has no cleanup for
 * such an exit and nothing detects it: the pool's lock stays held (other
 * threads' calls on the pool wait forever), its count of running walks
 * stays raised, and the thread's record of the walk points into the
 * abandoned stack frame, which that thread's later calls on the pool, its
 * walks of other pools and its fork() read: undefined (seen: a call that
 * waits forever, a coop_malloc let through on a single_thread pool, then a
 * crash in coop_free). The pool cannot be used or destroyed safely after
 * that. A visitor's call back into the pool it walks
 * (on the walking thread) is detected: the calls that only read it
 * (coop_get_stats, coop_pool_config, coop_pool_check, coop_backend_calls,
 * a nested coop_walk) are answered, the pool as it stands; those that
 * would change it (coop_malloc, coop_free, coop_record_stream,
 * coop_empty_cache, coop_set_capacity, coop_forget_stream, the host stream
 * holds, coop_inject_fault) fail with COOP_ERR_BUSY, nothing changed, the
 * message "FN: called from inside a coop_walk visitor of this pool ...";
 * coop_reset_peak_stats and coop_pool_destroy do nothing and set that
 * message; so do the calls of a remat context over the pool (its
 * COOP_ERR_BUSY refusals); so do the PyTorch ABI's calls for the walked
 * pool's device (coop_torch_malloc, coop_torch_free,
 * coop_torch_memory_fraction, coop_torch_snapshot_take: it only reads, but
 * waits for the device's order lock, which another thread's free may hold
 * while it waits for the walk) and those for every
 * device (coop_torch_empty_cache, coop_torch_record_stream,
 * coop_torch_forget_stream): COOP_ERR_BUSY before any of the ABI's locks,
 * nothing changed, "FN: called from inside a coop_walk visitor of device
 * D's pool ...", kept and printed as the ABI's other errors (see "PyTorch
 * integration"; malloc's NULL is counted by coop_torch_failed_mallocs). A
 * free naming another device still finds the pointer in the walked pool.
 * From a visitor of any device's pool, so are the ABI's calls, for any
 * device, that would take its state lock, which another thread may hold
 * while it waits for the walked pool (that device's memory fraction or
 * limit retry): coop_torch_malloc where it would make the device's pool or
 * try again its limit waiting for frees (the try is left for a malloc
 * after the walk), coop_torch_memory_fraction, coop_torch_init,
 * coop_torch_configure, coop_torch_settings (the message in its buffer
 * too), coop_torch_record_history: COOP_ERR_BUSY before that lock,
 * nothing changed, "FN: called from inside a coop_walk visitor of device
 * D's pool, which the walk holds: ... takes the ABI's state lock ...". The
 * others for another device are served (a malloc or free on its pool, a
 * snapshot, with history on or off). Not detected: a fork() from another
 * thread that began while the walk held its pool holds the ABI's locks,
 * and the pools it reached first, until the walk ends: a visitor's call
 * that needs one of them (another device's pool, or its order lock with
 * history on) waits forever; as do two threads whose visitors each call
 * into the pool the other walks. A visitor may fork() (see
 * "Process lifecycle" at the top, and the cases there that deadlock): the
 * child goes on with the walk, and its copy of the pool is unlocked when
 * its coop_walk returns. A visitor may walk another pool. */
coop_status coop_walk(coop_pool *pool, coop_segment_visitor on_segment, coop_block_visitor on_block,
                      void *ctx);

/* Validates every invariant (tiling, coalescing, free index, statistics,
 * page map). Returns COOP_ERR_CORRUPT with a message naming the first
 * violation. Coalescing means no two address-adjacent free blocks are
 * mergeable: free blocks tagged with different streams stay apart (each is
 * reusable only on its stream) until the stream is found idle and they are
 * retagged "any stream", so "no two free blocks adjacent" holds only for
 * single-stream use. */
coop_status coop_pool_check(coop_pool *pool);

/* ------------------------------------------------------------------------
 * Host backend controls (tests and simulators)
 * ---------------------------------------------------------------------- */

/* While a stream is held, events recorded on it stay incomplete; releasing
 * it completes them. A hold stands for a stream blocked on the host: the
 * pool's waits for it fail (on a device they would never return), so its
 * memory stays busy. Host backend only (else COOP_ERR_UNSUPPORTED); the
 * stream UINTPTR_MAX is COOP_ERR_INVALID, as for every call taking one. */
coop_status coop_host_hold_stream(coop_pool *pool, coop_stream stream, bool hold);

/* Holds a stream as busy: kernels queued on it still running. Like a hold,
 * except that a wait for one of its events (the out-of-memory path's,
 * coop_empty_cache's; see coop_config.never_wait) ends it, as the device
 * would finish them. coop_host_hold_stream(pool, stream, false) ends it too.
 * Host backend only (else COOP_ERR_UNSUPPORTED). */
coop_status coop_host_busy_stream(coop_pool *pool, coop_stream stream);

/* Fault injection: makes the Nth next backend call of the given kinds fail
 * once with COOP_ERR_BACKEND (counting from 1; 0 disarms). kinds is a mask of
 * COOP_FAULT_* values: RESERVE (address-space reservation), MAP, UNMAP, EVENT
 * (event record and query), SEGMENT (segment allocation and release).
 * COOP_ERR_INVALID for unknown kinds. */
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

/*
 * Tensors that the pool may evict and the owner can recompute. A context
 * (coop_remat) manages the tensors of one pool under its capacity: when an
 * allocation does not fit, it evicts resident, unpinned, evictable tensors
 * chosen by its policy (by default Coop's sliding window over the pool's
 * address-ordered blocks: the cheapest contiguous run of free and evictable
 * blocks covering the request, and the new tensor is placed inside it), and
 * tells the owner through on_evict. Accessing an evicted tensor recomputes
 * it: inputs first (recursively), each pinned while in use, then the
 * recompute callback writes the result into the tensor's new buffer.
 *
 * Costs are nanoseconds; staleness runs on a logical clock advanced by the
 * cost of every op executed (created, mutated or recomputed), so decisions
 * are deterministic. A context is not thread-safe: use it from one thread
 * at a time (a second thread calling in meanwhile is refused: see
 * coop_remat_create; the pool itself stays thread-safe for other users, whose blocks simply
 * break eviction windows; so do the tensors of another context on the same
 * pool: a context evicts only its own). Tensors live on stream 0; pending
 * blocks and the free blocks of other streams not seen finished (the
 * allocation's out-of-memory path settles streams first) also break
 * windows and count as taken space: no tensor is evicted to merge with
 * them. A released tensor's memory is freed at once; its
 * record stays while a recomputation the owner can still ask for may need
 * it, and is reclaimed by a later API call once none can (so a training
 * loop's host memory stays bounded; docs/remat.md, section 4c).
 * Buffers the owner holds no handle to may stay allocated all the same,
 * evictable, until evicted for room (on_evict tells of them) or
 * coop_remat_destroy: a released tensor or an in-place op's old value
 * recomputed on the way to another stays resident (as in DTR: the next
 * recomputation may need it), and so does copy-on-write's old value
 * (coop_tensor_mutate). So the pool's allocated bytes
 * (coop_remat_stats.resident_bytes) need not drop to the held tensors'
 * when handles are released, nor to 0 when all are.
 *
 * The owner computes every value: coop_tensor_create and coop_tensor_mutate
 * only record the op (its cost, producer and inputs), and the owner then
 * writes the result into the buffer (coop_tensor_data, or the pointer a pin
 * returned); the recompute callback runs only when an evicted tensor is
 * needed again. On the host backend the buffers are addresses in reserved,
 * PROT_NONE space (the simulated device): touching one faults, so a program
 * on the host backend keeps its values in its own memory, keyed by buffer
 * address (a resident tensor keeps its address until evicted; a recomputed
 * one may get another). Failures deep inside a call (no room, a failed
 * recompute callback) are reported under that call's name. A complete
 * program, a 20-layer chain trained under a capacity of 12 activations:
 * tests/remat_example_test.c.
 */
typedef struct coop_remat coop_remat;
typedef struct coop_tensor coop_tensor;

/*
 * Recompute costs (ns): c is a tensor's own producer cost; c_eq adds the
 * union-find classes of its evicted neighbours (DTR-eq: evicted tensors
 * next to each other share a class, which never splits, so after a member
 * is recomputed the class still counts tensors no longer connected to it);
 * c_comp adds exactly the evicted tensors connected to it through evicted
 * tensors (c_comp <= c_eq, equal while none of its neighbours' classes
 * has had a member recomputed).
 * c_live, the part of c_comp that recomputations need, is defined at
 * COOP_REMAT_COOP.
 * staleness is the logical time since the tensor's last access (at least
 * 1 for the window policies), remats how often its recompute callback has
 * run (coop_tensor_recomputes).
 * Degenerate numbers: DTR, DTR-local and DTE score a tensor of staleness 0
 * (used at the current clock, as every tensor is while all ops cost 0) as
 * dearest, whatever its cost; LRU compares last accesses as integers (a
 * double holds the clock exactly only up to 2^53 ns); the clock saturates
 * at UINT64_MAX and stays there. Equal scores go to the tensor made
 * resident earliest, equal window costs per byte (every cost 0, say) to
 * the window that ends at the lowest address. No score is ever NaN. The
 * argmin policies' bytes are the size asked for, as DTR's (a 1-byte tensor
 * scores as 1 byte in its block of 512), a window's its blocks' bytes.
 */
typedef enum coop_remat_policy {
    /* sliding window (the default): the covering window with the smallest
     * sum of c_live x (1 + 0.1 x remats) / staleness per window byte, as
     * `coop sim`'s coop policy (docs/remat.md, sections 2 and 2c). c_live
     * counts what evicting the tensor makes the program recompute: its own
     * cost, its evicted ancestors reached through evicted tensors (its
     * recomputation needs them), and its evicted descendants reached
     * through evicted tensors that are still held, i.e. whose storage has a
     * tensor (itself or a view) the owner has not released with
     * coop_tensor_release (recomputing them would need it); released
     * descendants (and an in-place op's old value) are walked through but
     * not counted, as they are recomputed only on the way to a held one.
     * c <= c_live <= c_comp. Costs two walks over the evicted
     * neighbourhood per evaluation (no cache). Until round 5
     * (docs/remat.md, section 2) this policy costed members by c_comp: that
     * is now COOP_REMAT_COOP_COMP; the name COOP_REMAT_COOP_LIVE, which this
     * policy had while c_live was a candidate, is gone.
     * Without VMM (coop_config.use_vmm false) a window cannot span two
     * segments; when no window covers the request, the window policies
     * evict whole segments whose blocks are all free or evictable, cheapest
     * per byte first (their members' costs summed over the segment's
     * bytes), until the pool can give them back and grow a segment for the
     * request; none when even all of them would leave too little room.
     * With VMM, where the pages of the chosen window cannot be mapped (a
     * window of free space whose pages reclaim unmapped, the capacity
     * used up), or no window covers the request, the capacity binds rather
     * than the address range: the window policies then evict tensors
     * cheapest per byte (window cost over block bytes), one at a time,
     * until the pool can map the request; none when even all of them would
     * leave too little room, or when no run of free and evictable blocks
     * could hold it (the run that ends at the top taking the address range
     * above it: that range binds once the tiled range reaches va_size),
     * and where only that top run could, its tensors go first. */
    COOP_REMAT_COOP = 0,
    /* The argmin policies (DTR to SIZE) evict one tensor at a time until
     * the request fits, and none where it cannot fit even once every
     * evictable tensor of the context is gone: the bytes that stay (other
     * tensors, other users' blocks, pending blocks, busy streams' free
     * blocks) leave too little of the capacity; and, without VMM, no run of
     * adjacent free and evictable blocks inside one segment covers the
     * request, nor would giving back the segments made only of such blocks
     * let the capacity hold a segment of the request's size in pages;
     * with VMM, no such run in the one range, the run that ends at the top
     * taking the address range above it, holds the request.
     * COOP_ERR_NOMEM ("no room") then, nothing evicted. */
    COOP_REMAT_DTR,       /* argmin of c_eq / (bytes * staleness), one at a time */
    COOP_REMAT_DTR_LOCAL, /* argmin of c / (bytes * staleness) */
    COOP_REMAT_DTE,       /* as DTR-local, bytes including adjacent free blocks */
    COOP_REMAT_LRU,       /* least recently accessed first (the last access, exactly) */
    COOP_REMAT_SIZE,      /* largest first */
    /* the window with the cost the coop policy had before the component
     * cost, for comparison: sum of c_eq / staleness per window byte, no
     * recompute history (`coop sim`'s coop-eq ablation, which thrashes on
     * densenet121's DTR log at budget 0.3 where coop-comp and coop do not:
     * one never-splitting class next to many tensors) */
    COOP_REMAT_COOP_EQ,
    /* the window of COOP_REMAT_COOP with each member costed by c_comp
     * instead of c_live (the same weight and the same sum per window byte):
     * COOP_REMAT_COOP's cost until round 5, kept for comparison (`coop
     * sim`'s coop-comp ablation, docs/remat.md, section 2). c_comp also
     * counts evicted tensors that neither recomputation needs (released
     * descendants, tensors connected only through a common ancestor or
     * descendant): section 2c, "Why coop loses vgg16 at 0.9". */
    COOP_REMAT_COOP_COMP
} coop_remat_policy;

enum {
    /* may be evicted (else resident until it and its views are released) */
    COOP_TENSOR_EVICTABLE = 1u << 0,
    COOP_TENSOR_CHEAP = 1u << 1 /* force cheap placement (high end of free blocks) */
};

/* The largest cost an op may be given (2^48 ns, about 3.3 days): larger
 * costs are refused (COOP_ERR_INVALID), so that the sums the policies form
 * are exact over fewer than 2^15 tensors of that cost; sums beyond
 * INT64_MAX ns saturate there (dearest) and stay there, never wrap. */
#define COOP_TENSOR_MAX_COST_NS (1ull << 48)

/* The owner learns that t's buffer is gone (its pointer must not be used).
 * t may also be a handle the owner no longer holds: a released tensor whose
 * record stays for recomputations, or the hidden record of an in-place op's
 * old value (coop_tensor_mutate); an owner keeping a map by handle should
 * ignore handles it does not know. on_evict runs inside the call that
 * needed the room (create, access, pin, mutate), after the search that
 * evicted t and before the call returns, on that call's thread, once per
 * tensor evicted for room (never for a release, coop_remat_destroy or a
 * failed recompute). Both callbacks run inside the context's
 * calls: they may read tensors (coop_tensor_size, _resident, _data,
 * _recomputes) and the statistics
 * (coop_remat_get_stats) but must not call the other functions that take
 * the context (coop_tensor_create and the others): such a call fails with
 * COOP_ERR_BUSY and changes nothing (coop_remat_destroy: see there).
 * Neither runs under the pool's lock: both may call the pool's own
 * functions (coop_malloc of scratch memory, coop_free, coop_get_stats,
 * coop_pool_check): on_evict runs once the tensor that needed the room
 * is placed, the recompute callback once its tensor's buffer is. */
typedef void (*coop_evict_fn)(coop_tensor *t, void *user);
/* Recomputes t: runs producer reading inputs[i] (resident, pinned) and
 * writing out (t's new buffer of coop_tensor_size(t) bytes). A status
 * other than COOP_OK fails the access that asked for t with that status
 * (COOP_ERR_BACKEND if it is not one): t goes back to evicted, its buffer
 * freed, and the next access recomputes it; inputs already recomputed stay
 * resident. When a libcoop call the callback made on the calling thread
 * failed (a call of the context from inside: COOP_ERR_BUSY), the access's
 * message ends with that call's own: "...; a call it made was refused:
 * <its message>". inputs may be NULL when num_inputs is 0. It is asked for any
 * tensor a recomputation needs, the owner's released ones included (a
 * released tensor's buffer is freed at once, even one created not
 * evictable): a tensor the callback cannot rebuild from (producer, inputs),
 * such as data the owner loaded, must not be evictable and must stay held
 * (not released) while a tensor computed from it may still be accessed. */
typedef coop_status (*coop_recompute_fn)(coop_tensor *t, void *producer, void *const *inputs,
                                         size_t num_inputs, void *out, void *user);

typedef struct coop_remat_config {
    coop_remat_policy policy;
    /* cheap tensor partitioning: tensors whose cost per byte is below this
     * (ns/byte) are placed at the high end of free blocks, the others at the
     * low end; < 0 turns it off. 0 selects the default (1e-2, measured on
     * the DTR logs: docs/remat.md). NaN is refused (COOP_ERR_INVALID). */
    double cheap_threshold;
    /* in-place ops: false = recomputable in-place (the buffer and address
     * stay, the old value becomes an evicted tensor); true = DTR's
     * copy-on-write (the new value gets a new buffer). */
    bool copy_on_write;
    coop_evict_fn on_evict;      /* may be NULL */
    coop_recompute_fn recompute; /* required */
    void *user;                  /* passed to both callbacks */
} coop_remat_config;

typedef struct coop_remat_stats {
    uint64_t evictions;    /* tensors evicted to make room */
    uint64_t searches;     /* allocations that did not fit at once and searched */
    uint64_t recomputes;   /* recompute callbacks run */
    uint64_t recompute_ns; /* their summed cost (stops at UINT64_MAX, as clock) */
    uint64_t clock;        /* logical clock (ns of ops executed) */
    uint64_t resident_bytes;
    /* The searches' cost. A search is everything one allocation that did
     * not fit does to place its tensor: every argmin round until it fits
     * (argmin policies), or the window search, evicting the window and
     * placing the tensor in it (coop). Timed in the searching thread's CPU
     * time (CLOCK_THREAD_CPUTIME_ID, ns: preemption and lock waits are not
     * charged); allocations that fit read no clock. For percentiles, read
     * last_search_ns from on_evict, which runs after every search that
     * evicted, before the next allocation (coop sim --engine lib does). */
    uint64_t search_ns;      /* summed over the searches */
    uint64_t last_search_ns; /* the most recent search's */
    /* evaluations of a tensor's eviction cost by the searches: argmin
     * scores, coop's window costs (not their lower bounds, which read the
     * tensor's own cost only) */
    uint64_t heuristic_evals;
    /* searches that began although the pool's free bytes (coop_stats
     * free_bytes) covered the request: fragmentation made them evict */
    uint64_t frag_failures;
    uint64_t search_free_bytes; /* the pool's free bytes at each search, summed (stops at
                                 * UINT64_MAX) */
    /* tensor records the context holds (live tensors, released ones a
     * recomputation may still need, and released ones not yet looked at:
     * collections run when the records have doubled), and how many it has
     * reclaimed since it was created (see coop_tensor_release) */
    uint64_t records;
    uint64_t records_reclaimed;
} coop_remat_stats;

/* Creates a context over pool (which must outlive it: destroying the pool
 * first is undefined). COOP_ERR_INVALID naming the argument: a NULL pool,
 * config, config->recompute or out, a policy that is not a
 * coop_remat_policy, a NaN cheap_threshold.
 *
 * Every function below that takes the context refuses, with
 * COOP_ERR_INVALID and nothing changed: a NULL context or required
 * argument (the ptr of coop_tensor_access / _pin and the old_value of
 * coop_tensor_mutate are optional: NULL there is allowed), a tensor of
 * another context, a released tensor (see coop_tensor_release),
 * a size of 0 (or no outputs), unknown flags, a cost above
 * COOP_TENSOR_MAX_COST_NS; and with
 * COOP_ERR_BUSY a call from inside a callback, or from inside a coop_walk
 * visitor of the context's pool (see coop_walk). Every refusal and failure
 * leaves the outputs given NULL: *out of coop_tensor_create and
 * coop_tensor_alias, outs[i] of coop_tensor_create_outputs (unless outs
 * overlaps inputs: refused, the inputs not written), *ptr, *old_value. A tensor larger than the
 * pool's capacity is COOP_ERR_NOMEM at once (nothing evicted for it). A
 * call that fails past these checks (no room, out of host memory, a
 * recompute callback's failure) leaves
 * what it would have changed as it was: no tensor is marked read (the last
 * accesses, and so the staleness the policies weigh, stay), the clock does
 * not move, no pin stays, no record is left (coop_remat_stats.records).
 * What it did on the way stays done: tensors evicted for room stay evicted
 * (on_evict told, counted in evictions), inputs recomputed on the way to
 * the tensor asked for stay resident, valid (their callbacks ran: counted
 * in recomputes, recompute_ns and the clock, and they read their own
 * inputs), and its search is counted
 * (searches, search_ns, heuristic_evals, frag_failures, search_free_bytes),
 * as work spent; records no recomputation can need may have been
 * reclaimed (records_reclaimed). The
 * context is not thread-safe: one thread at a time (the pool's own calls
 * from other threads are fine; one thread may hand the context to
 * another between calls). Every call that takes the context or one of its
 * tensors claims it for the calling thread until it returns (an atomic
 * compare-and-swap and a thread-local read, about 30 instructions a
 * call): a call from a second thread meanwhile is refused with
 * COOP_ERR_BUSY, nothing read or changed, and the message "FN: the
 * context is in use by another thread (thread T1, in FN1; this is thread
 * T2): ..." (T1, T2 as pthread_self gives them; FN1
 * the holder's call as it stood). The calls without a status answer as
 * for NULL and set that message: coop_remat_get_stats zeros, the tensor
 * queries 0, false or NULL, coop_remat_destroy does nothing. A callback
 * runs on the holder's thread, so its calls are not refused for this
 * (they get the callback refusal above, or answer). A context that
 * another thread was inside at a fork() stays that thread's in the child,
 * which has no such thread: its calls are refused there, as its records
 * are mid-call, from every thread (threads are told apart by a token of
 * their own, not by pthread_self, which a thread the child creates may
 * share with the dead holder). */
coop_status coop_remat_create(coop_pool *pool, const coop_remat_config *config, coop_remat **out);
/* Frees every tensor's buffer and record, live and pinned tensors included
 * (no on_evict notice): every coop_tensor handle of the context and every
 * pointer its calls returned is invalid afterwards; the pool stays usable
 * (its blocks from coop_malloc untouched). NULL is a no-op; from inside a
 * callback, or while another thread is inside one of the context's calls,
 * it does nothing (that call still uses it) and coop_last_error() says
 * so. */
void coop_remat_destroy(coop_remat *r);
/* Fills *out with the context's statistics (zeros for a NULL context, and
 * while another thread is inside one of its calls; a NULL out is
 * ignored). */
void coop_remat_get_stats(const coop_remat *r, coop_remat_stats *out);

/* A new resident tensor of size bytes produced by an op of cost_ns from
 * inputs (which must be resident: access or pin them first), evicting
 * others if needed. producer is what the recompute callback receives.
 * flags: COOP_TENSOR_*. COOP_ERR_NOMEM when nothing evictable makes room.
 * The new buffer holds nothing: the owner writes the op's result into
 * coop_tensor_data(*out) (no callback runs here). An input not resident is
 * COOP_ERR_INVALID, nothing changed. */
coop_status coop_tensor_create(coop_remat *r, size_t size, uint64_t cost_ns, void *producer,
                               coop_tensor *const *inputs, size_t num_inputs, unsigned flags,
                               coop_tensor **out);

/* The outputs of one op with several results (batch norm's output and
 * statistics, an LSTM cell's states): num_outputs new resident tensors of
 * sizes[i] bytes, each as coop_tensor_create makes one, except that the op
 * runs once: the clock advances by cost_ns once, and all outputs are
 * stamped at its end (creating them one by one would count the op once per
 * output); an output placed is not evicted to place the next. Each output
 * records cost_ns as its producer's cost (recomputing one reruns the op).
 * outs[i] receives them; on failure none is left (those placed are
 * released). Outputs whose sizes, each rounded up to 512 bytes as the pool
 * places them, add up past the pool's capacity are refused at once
 * (COOP_ERR_NOMEM, the message giving the sum, the capacity and the number
 * of outputs), before any eviction; so is one output above the capacity.
 * Otherwise the outputs are placed one by one, and when one finds no room
 * (the message names it: "output I of N (BYTES bytes)", I counting
 * from 1) the tensors evicted
 * to place the earlier ones stay evicted (on_evict told of them). outs must
 * not overlap inputs (COOP_ERR_INVALID: the outputs would overwrite the
 * inputs the op reads). */
coop_status coop_tensor_create_outputs(coop_remat *r, size_t num_outputs, const size_t *sizes,
                                       uint64_t cost_ns, void *producer, coop_tensor *const *inputs,
                                       size_t num_inputs, unsigned flags, coop_tensor **outs);

/* A view of base: shares its storage (evicted and recomputed with it). */
coop_status coop_tensor_alias(coop_remat *r, coop_tensor *base, coop_tensor **out);

/* Makes t resident (recomputing as needed), marks it accessed, and returns
 * its buffer (views: the base's buffer). */
coop_status coop_tensor_access(coop_remat *r, coop_tensor *t, void **ptr);

/* Access plus protection from eviction until the matching unpin. Pins
 * count per handle: a tensor and its views each unpin only what they
 * pinned. A handle's pins outlive its release (the storage stays resident,
 * as a constant does): unpin is the one call a released handle takes, as
 * long as it holds pins. A handle holds at most UINT32_MAX pins: one more
 * is refused (COOP_ERR_BUSY, nothing changed, the message naming the
 * tensor and the count). The storage's own count (pins through all its
 * handles, plus those the library takes while an op reads it) is 64 bits
 * and does not wrap. */
coop_status coop_tensor_pin(coop_remat *r, coop_tensor *t, void **ptr);
/* Undoes one coop_tensor_pin through t; COOP_ERR_INVALID if t holds no pin
 * (another handle's pin is that handle's to undo). A storage that nothing
 * names or pins any more is then freed (it stays recomputable). */
coop_status coop_tensor_unpin(coop_remat *r, coop_tensor *t);

/* Records an in-place op on t (cost_ns, producer, extra inputs besides t).
 * Recomputable in-place: t keeps its buffer and address; its old value
 * becomes an evicted tensor that inherits t's previous producer, and t's
 * producer becomes this op applied to that value (inputs[0] of the
 * recompute callback), so t stays evictable. Copy-on-write: t moves to a
 * new buffer; *old_value (if non-NULL) receives the buffer holding the old
 * value, which the caller reads while computing the new one. Ops that had
 * read t before now read the old value when recomputed. The inputs must be
 * resident (t itself, or a view of it, among them need not be); they stay
 * so while t is recomputed first. Copy-on-write refuses a pinned storage
 * (COOP_ERR_BUSY, nothing changed): the buffer the pins returned would go
 * to the old value, unprotected; unpin first (recomputable in-place keeps
 * the buffer, pins and all). As at creation, the owner applies the op to
 * the buffer itself after the call; the recompute callback runs it only
 * when t is recomputed (with the old value as inputs[0]). */
coop_status coop_tensor_mutate(coop_remat *r, coop_tensor *t, uint64_t cost_ns, void *producer,
                               coop_tensor *const *inputs, size_t num_inputs, void **old_value);

/* The owner drops t: its memory is freed once no view or pin holds it
 * (pins taken through t included); the record stays while a
 * recomputation the owner can still ask for may need it (an evicted
 * tensor's inputs, recursively), and is reclaimed after that. t must not be
 * used afterwards: calls with it fail with COOP_ERR_INVALID naming the
 * misuse until its record is reclaimed and for a while after (at least
 * until the next reclamation, and then among the last 4,096 reclaimed
 * records); after that its memory is freed, as a pointer after free().
 * A tensor updated with coop_tensor_mutate keeps its old value's record,
 * and that one its producer's inputs, for as long as the tensor is held:
 * so a parameter updated with coop_tensor_mutate at every step keeps every
 * step's records. Keep parameters and optimizer state that are updated in
 * place not evictable and write the update into coop_tensor_data
 * directly, after the step's readers are released (as DTR treats them:
 * constants), or outside the context (coop_malloc). */
coop_status coop_tensor_release(coop_remat *r, coop_tensor *t);

/* Tensor queries: no recomputation, the context untouched (callbacks may
 * call them). A view answers for its base's storage; NULL gives 0, false
 * or NULL, and so does a tensor whose context another thread is inside
 * (see coop_remat_create).
 *
 * The tensor's bytes as created. */
size_t coop_tensor_size(const coop_tensor *t);
/* How often t's storage has been recomputed (recompute callbacks run for it;
 * views: their base's), stopping at UINT32_MAX. An in-place op starts the
 * count afresh for t's new value; the old value keeps the history. */
uint32_t coop_tensor_recomputes(const coop_tensor *t);
/* Whether its storage holds a buffer now. */
bool coop_tensor_resident(const coop_tensor *t);
/* The buffer if resident, else NULL (no recomputation). */
void *coop_tensor_data(const coop_tensor *t);

/* ---- end section: rematerialization ---- */

/* ---- section: PyTorch integration (torch_abi.c) ---- */

/*
 * The entry points of torch.cuda.memory.CUDAPluggableAllocator, with C
 * linkage (python/coop/torch.py installs them). One pool per device, created
 * on first use from COOP_ALLOC_CONF (or coop_torch_configure). Streams are
 * cudaStream_t values passed as void * (any integer on the host backend).
 * None of them crashes the process on bad input or failure. The hooks
 * PyTorch calls (malloc, free, init, empty_cache, memory_fraction,
 * record_stream), which have no status to return, print the first error of
 * each kind to stderr (once per process, whichever device it came from;
 * an error on a device names it) and keep every error for
 * coop_torch_last_error(), and
 * coop_torch_malloc returns NULL; the functions that return a coop_status
 * (forget_stream, configure, settings, snapshot_take) say why in
 * coop_last_error(), as the rest of this API does (coop_torch_last_error()
 * does not get their failure).
 * In a child forked after a CUDA pool existed (a DataLoader worker of the
 * fork start method; see "Process lifecycle" at the top), every call for
 * a device whose CUDA pool the child inherited fails without a driver
 * call: COOP_ERR_UNSUPPORTED, "FN: device D's CUDA pool was created in
 * process P; CUDA cannot be used in a forked child (process C)" (FN the
 * coop_torch_* function); a device without a pool gets none (the
 * creation is refused, naming both processes). coop_torch_free of an
 * inherited tensor is a no-op whose message is kept for
 * coop_torch_last_error() but not printed: a worker dropping the tensors
 * it inherited makes no mistake. The host backend's pools stay usable.
 */

/* Allocates size bytes on device for use on stream. NULL for size 0 (as
 * PyTorch's own allocator) and on failure (out of memory, bad configuration,
 * no driver, a call from a coop_walk visitor that coop_walk refuses). */
void *coop_torch_malloc(size_t size, int device, void *stream);

/* Frees ptr (size and stream as PyTorch recorded them at allocation; the
 * pool and the history go by the block's own requested size and stream). A
 * pointer the device's pool did not allocate (another device's, given the
 * wrong device number), a device outside init's count or without a pool:
 * reported (see above) with the device and the pointer, and the device
 * whose pool holds it if any; no device's pool or history changes. */
void coop_torch_free(void *ptr, size_t size, int device, void *stream);

/* Init hook: PyTorch's device count (devices >= it are refused; 64 until
 * the first count). A count of 0 (torch's first call, before it counts)
 * changes nothing; a negative one, one above 64, or one that would leave
 * out a device that has a pool (whose blocks could then not be freed)
 * changes nothing and is reported as an error. It may be called again:
 * another count in force from then on, for devices without pools. Also
 * parses the configuration so that syntax errors show at installation;
 * settings the device refuses show at the first allocation (see
 * coop_torch_failed_mallocs). */
void coop_torch_init(int device_count);

/* Reset / empty_cache hook: unmaps every free page of every pool. */
void coop_torch_empty_cache(void);

/* Memory-fraction hook: limits device's pool to fraction [0, 1] of its full
 * capacity (COOP_ALLOC_CONF's capacity, else the device's memory; 0 leaves
 * one page, the smallest capacity a pool has). Applied at creation when the
 * pool does not exist yet. As in PyTorch, the limit applies to later
 * allocations and frees nothing in use. A limit at or above the pages that
 * live blocks and pending frees (blocks waiting for other streams' events)
 * keep mapped applies at once, releasing cached pages down to it (as
 * coop_set_capacity). Below them, the capacity is held at the bytes mapped
 * now, cached free pages included (none is released: torch's fraction does
 * not empty its cache either), so the pool stops growing but still reuses
 * its cache; the limit is tried again at the first allocation after a
 * free, and at coop_torch_empty_cache (which releases the cache first, so
 * a limit still out of reach then holds the capacity at the pages that
 * stay mapped). With wait:false, cached pages of streams not seen finished
 * are kept, and the capacity is held likewise. None of that is an error
 * (nothing is reported; an out-of-memory while a limit waits says, after
 * the pool's figures, which limit is pending and the capacity held); a
 * fraction outside [0, 1] (NaN included) is, and so is a call from a
 * coop_walk visitor of a device's pool (see coop_walk). */
void coop_torch_memory_fraction(double fraction, int device);

/* record_stream hook: ptr is also used on stream. A pointer no coop pool
 * allocated is ignored, as PyTorch's allocator ignores tensors it did not
 * allocate (shared from another process, imported with DLPack). */
void coop_torch_record_stream(void *ptr, void *stream);

/* Not a PyTorch hook: coop_forget_stream on every device's pool, before an
 * application destroys a stream of its own (torch.cuda.ExternalStream);
 * the first failure is returned (coop_last_error says why) and the pools
 * after it are left as they were. The stream UINTPTR_MAX is
 * COOP_ERR_INVALID, pools or not. COOP_ERR_BUSY, no pool changed, from a
 * coop_walk visitor of a device's pool (see coop_walk). Without it, each
 * stream handle the pools have seen keeps host memory for good (see
 * coop_forget_stream). */
coop_status coop_torch_forget_stream(void *stream);

/* Sets the configuration from conf (COOP_ALLOC_CONF syntax; NULL = read the
 * environment variable). COOP_ERR_INVALID with a message naming the key and
 * value if it does not parse, and the configuration in force stays as it
 * was; COOP_ERR_BUSY once a pool exists, or from a coop_walk visitor of a
 * device's pool (see coop_walk). Its history
 * key applies unless coop_torch_record_history has been called, whose
 * setting stays. */
coop_status coop_torch_configure(const char *conf);

/* The configuration in force, as key:value text (NUL-terminated, truncated
 * to size; an error message is cut between UTF-8 characters). Returns
 * COOP_ERR_INVALID with the parse error if it is bad; COOP_ERR_BUSY, the
 * message in buf, from a coop_walk visitor of a device's pool (see
 * coop_walk).
 * The text is a configuration: coop_torch_configure and COOP_ALLOC_CONF take
 * it back, meaning the same. A byte key left at its default (the device's
 * or the pool's) is written "default" (capacity:default, page:default,
 * segment:default, min_split:default), which the parser reads as the key
 * left out (0 there is refused: it reads as zero bytes). */
coop_status coop_torch_settings(char *buf, size_t size);

/* conf (COOP_ALLOC_CONF syntax) parsed and written back as
 * coop_torch_settings writes a configuration: every key, in one order and
 * spelling, so two strings that mean the same give the same text
 * ("capacity:1G" and "capacity:1024M,backend:cuda"). NULL conf: the
 * defaults (not the environment's). Changes nothing.
 * COOP_ERR_INVALID, with the parse error in buf, if it does not parse. */
coop_status coop_torch_normalize_conf(const char *conf, char *buf, size_t size);

/* Copies the most recent error of any thread of the ABI (NUL-terminated,
 * truncated to size between UTF-8 characters: it may quote COOP_ALLOC_CONF)
 * and returns its length; 0 if none. */
size_t coop_torch_last_error(char *buf, size_t size);

/* How many coop_torch_malloc calls on device returned NULL since the process
 * started, for any reason (out of memory, a configuration or pool that could
 * not be created, no driver, a call from a coop_walk visitor that coop_walk
 * refuses; size 0 is not a failure), and the last one's
 * message, copied to buf (NUL-terminated, truncated to size between UTF-8
 * characters; empty if none).
 * 0 for a device outside 0..63 (the ABI serves at most 64 devices); a
 * malloc refused because device is at or past coop_torch_init's count is
 * counted on that device, as the caller named it. */
uint64_t coop_torch_failed_mallocs(int device, char *buf, size_t size);

/* coop_torch_failed_mallocs, and the last failure's status in *status
 * (when status is not NULL; COOP_OK if none), read with the count and the
 * message at once: COOP_ERR_NOMEM for out of memory, another status for a
 * failure that is not (COOP_ERR_NO_DRIVER, a configuration the device
 * refuses: COOP_ERR_INVALID, COOP_ERR_BUSY from a coop_walk visitor, ...),
 * so that a caller can tell them apart without reading the message. A pool
 * that could not be made is never COOP_ERR_NOMEM here: coop_pool_create's
 * COOP_ERR_NOMEM (the address space it reserves, refused) is recorded as
 * COOP_ERR_BACKEND, as no free of the caller's could help. */
uint64_t coop_torch_failed_malloc_status(int device, char *buf, size_t size, coop_status *status);

/* Device's pool if it has been created, else NULL (never creates one).
 * Valid until process exit: the ABI never destroys its pools. */
coop_pool *coop_torch_pool(int device);

/* Turns history recording on, keeping the last max_entries events per
 * device, of those recorded so far too (as PyTorch's
 * _record_memory_history without clear_history), or off (0), dropping what
 * was recorded. This outlasts the
 * configuration, whenever that is loaded or set: before the first
 * allocation as well as after it. The ring's memory grows
 * with the events recorded (up to max_entries), so any bound is accepted and
 * costs nothing until used; if the host has no memory to grow it, it keeps
 * the last events it has room for and reports that once. From a coop_walk
 * visitor of a device's pool it changes nothing and reports COOP_ERR_BUSY
 * (see coop_walk). */
void coop_torch_record_history(size_t max_entries);

/* Drops the events recorded on every device; recording stays on or off. A
 * ring that could not grow for lack of host memory gets its bound back (it
 * grows again as events come; a new failure is reported again). */
void coop_torch_clear_history(void);

/* One recorded event (torch's device_traces entry). */
typedef enum coop_torch_action {
    COOP_TORCH_ALLOC = 0,
    COOP_TORCH_FREE_REQUESTED = 1, /* at the free */
    COOP_TORCH_FREE_COMPLETED = 2, /* reusable: at the free, or once the other
                                    * streams a block was used on are done */
    COOP_TORCH_OOM = 3
} coop_torch_action;

typedef struct coop_torch_event {
    uint64_t time_us;  /* microseconds since the Unix epoch */
    uintptr_t address; /* the block; for OOM, torch's device_free: the bytes the
                        * pool could still map then (capacity minus mapped) */
    uint64_t size;     /* requested bytes; for OOM, rounded up to 512 as torch's
                        * entry has them (its allocator's rounded size) */
    uintptr_t stream;
    int32_t action; /* coop_torch_action */
    int32_t device;
} coop_torch_event;

/* A run of mapped pages, [address, address + size). */
typedef struct coop_torch_range {
    uintptr_t address;
    uint64_t size;
} coop_torch_range;

/* What snapshot() needs for one device: segments and their blocks (as
 * coop_walk gives them; blocks[] holds segments[i].num_blocks blocks for
 * each segment in order), the recorded events, oldest first, and with VMM
 * the runs of mapped pages in address order (they add up to the reserved
 * bytes; a free block's mapped_bytes counts its mapped pages but does not
 * say which they are). Segments, blocks, ranges and events are read in one
 * critical section, so they agree: an allocation or free the blocks show
 * has its events (unless recording was off then or the history's bound
 * dropped them), and no event is of one they do not show yet. */
typedef struct coop_torch_snapshot {
    int device;
    bool vmm;
    size_t num_segments;
    coop_segment_info *segments;
    size_t num_blocks;
    coop_block_info *blocks;
    size_t num_events;
    coop_torch_event *events;
    size_t num_ranges; /* 0 without VMM */
    coop_torch_range *ranges;
} coop_torch_snapshot;

/* Takes device's snapshot (an empty one if it has no pool, as a device in
 * 0..63 at or past coop_torch_init's count never has). Free it with
 * coop_torch_snapshot_free (NULL is a no-op). COOP_ERR_INVALID for a
 * device outside 0..63 (*out NULL) or a NULL out; COOP_ERR_BUSY (*out
 * NULL) from inside a coop_walk visitor of device's pool (see coop_walk). */
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
