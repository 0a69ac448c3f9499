/*
 * Backend: the only layer that talks to a device. It knows nothing about
 * blocks: it reserves virtual ranges, maps and unmaps physical pages in them,
 * allocates whole segments where there is no virtual memory management, and
 * records / queries events on streams. One implementation per device kind
 * (backend_host.c, backend_cuda.c) plus a fault-injecting wrapper
 * (backend_fault.c) that every pool goes through.
 */
#ifndef COOP_BACKEND_H
#define COOP_BACKEND_H

#include "coop.h"

typedef struct coop_backend coop_backend;

/* Every call is made under the owning pool's lock, so implementations need
 * no locking of their own. map and segment_alloc return COOP_ERR_NOMEM, with
 * the device's message as the thread's last error, when the device is full
 * (memory used outside the pool too): the arena then releases idle cached
 * pages / free segments and calls once more, and the pool's out-of-memory
 * message quotes the backend's. Other failures are COOP_ERR_BACKEND. */

/* An event recorded on a stream; opaque to the pool. */
typedef uintptr_t coop_event;

typedef struct coop_backend_ops {
    /* VMM: reserve / release address space (no physical memory). */
    coop_status (*reserve)(coop_backend *be, uint64_t size, uintptr_t *addr);
    coop_status (*release)(coop_backend *be, uintptr_t addr, uint64_t size);
    /* VMM: back [addr, addr+size) with physical pages; both page-aligned. */
    coop_status (*map)(coop_backend *be, uintptr_t addr, uint64_t size);
    /* VMM: drop the physical pages of [addr, addr+size); *unmapped is the
     * bytes from addr unmapped when it returns (size on success). Does not
     * wait: the caller has seen every stream that used the pages finish (the
     * pool unmaps only free space whose streams are idle), or has called
     * synchronize. A failure leaves the pages mapped (*unmapped 0), unless
     * the backend could not put back pages it had unmapped: then the first
     * *unmapped bytes are unmapped and the rest mapped, and the caller's page
     * map must follow. */
    coop_status (*unmap)(coop_backend *be, uintptr_t addr, uint64_t size, uint64_t *unmapped);
    /* Waits until the device has finished all queued work (before unmapping
     * everything when a pool is destroyed). */
    coop_status (*synchronize)(coop_backend *be);
    /* Without VMM: one allocation of mapped device memory, and its release. */
    coop_status (*segment_alloc)(coop_backend *be, uint64_t size, uintptr_t *addr);
    coop_status (*segment_free)(coop_backend *be, uintptr_t addr, uint64_t size);
    /* Events: record on stream now; query completion; block until complete
     * (under the pool's lock: the out-of-memory path and empty_cache, unless
     * the pool's never_wait is set); destroy. */
    coop_status (*event_record)(coop_backend *be, coop_stream stream, coop_event *ev);
    coop_status (*event_query)(coop_backend *be, coop_event ev, bool *done);
    coop_status (*event_wait)(coop_backend *be, coop_event ev);
    void (*event_destroy)(coop_backend *be, coop_event ev);
    /* Host only (NULL elsewhere): hold a stream's events incomplete. A busy
     * hold ends when one of its events is waited for (the device finishing
     * the stream's work); a plain hold stands for a stream blocked on the
     * host, and a wait for it fails instead of never returning. */
    coop_status (*hold_stream)(coop_backend *be, coop_stream stream, bool hold, bool busy);
    /* The pool will not use stream again (coop_forget_stream succeeded):
     * a backend that keeps a record per stream drops it, so a program that
     * makes a stream per request does not grow it. NULL: none kept (CUDA). */
    void (*forget_stream)(coop_backend *be, coop_stream stream);
    void (*destroy)(coop_backend *be);
    /* A forked child's copy (CUDA: the parent's context does not survive
     * fork): frees the host records only, with no device call; what they
     * name belongs to the parent. NULL: a backend whose copy stays usable
     * in the child (host), which destroy releases. */
    void (*abandon)(coop_backend *be);
} coop_backend_ops;

struct coop_backend {
    const coop_backend_ops *ops;
    const char *name;
    bool has_vmm;           /* reserve/map/unmap usable */
    uint64_t page_size;     /* VMM: the granularity its pages need; segments: a default */
    uint64_t device_memory; /* total device memory (host: simulated size) */
};

/* Host backend: a simulated device of device_memory bytes in this process's
 * address space (PROT_NONE, MAP_NORESERVE). */
coop_status coop_backend_host_create(uint64_t device_memory, uint64_t page_size, bool vmm,
                                     coop_backend **out);

/* CUDA backend on device ordinal; COOP_ERR_NO_DRIVER if libcuda.so.1 cannot be
 * loaded, COOP_ERR_UNSUPPORTED if the build has no CUDA support. want_vmm
 * false forces the cuMemAlloc fallback. */
coop_status coop_backend_cuda_create(int device, bool want_vmm, coop_backend **out);

/* What a CUDA backend holds of the driver (tests): counted at every
 * acquiring and releasing driver call that succeeded, so that a test on a
 * shared device can check a drained pool without reading the device's free
 * memory, which other processes change. */
typedef struct coop_backend_cuda_held {
    uint64_t handles;      /* physical pages: cuMemCreate'd, not cuMemRelease'd */
    uint64_t mapped_bytes; /* cuMemMap'd, not cuMemUnmap'd */
    uint64_t segments;     /* cuMemAlloc'd, not cuMemFree'd */
    uint64_t reservations; /* cuMemAddressReserve'd, not cuMemAddressFree'd */
    /* host records of segments, counted when asked: one per segment aligned
     * up (its cuMemAlloc address, for cuMemFree) and per unused one whose
     * cuMemFree failed */
    uint64_t segment_records;
} coop_backend_cuda_held;
/* be must be a CUDA backend (all zero in a build without CUDA). */
void coop_backend_cuda_held_now(const coop_backend *be, coop_backend_cuda_held *out);
/* The process in which a CUDA backend first initialized the driver (cuInit
 * succeeded), inherited across fork; 0 if none has (or no CUDA support).
 * In a process of another id CUDA cannot be used (pool_fork.c). */
int coop_backend_cuda_init_pid(void);

/* Wraps inner (taking ownership) with call counting and fault injection. */
coop_status coop_backend_fault_create(coop_backend *inner, coop_backend **out);
void coop_backend_fault_arm(coop_backend *be, unsigned kinds, uint64_t nth);
uint64_t coop_backend_fault_calls(const coop_backend *be, unsigned kinds);
/* From now on every call of the wrapper fails with COOP_ERR_UNSUPPORTED
 * (those without a status do nothing) without reaching the inner backend,
 * and destroy abandons it: the pool's copy in a child forked from process
 * created_pid, the child being child_pid (pool_fork.c). */
void coop_backend_fault_forked(coop_backend *be, int created_pid, int child_pid);
/* The backend a fault wrapper forwards to. */
coop_backend *coop_backend_fault_inner(coop_backend *be);
/* The pool's page (a multiple of the backend's) becomes the wrapper's and
 * the inner backend's page, before anything is reserved: the pool maps and
 * unmaps whole pages only, so the CUDA backend can back each with one
 * physical allocation (cuMemCreate) of that size instead of one per device
 * granule, and a driver's per-allocation costs fall with larger pages. */
void coop_backend_fault_adopt_page(coop_backend *be, uint64_t page_size);

/* Host backend introspection (tests): be must be a host backend. */
bool coop_backend_is_host(const coop_backend *be);
uint64_t coop_backend_host_mapped(const coop_backend *be);    /* bytes mapped or in segments */
size_t coop_backend_host_live_ranges(const coop_backend *be); /* reservations + segments */
size_t coop_backend_host_live_events(const coop_backend *be); /* recorded, not destroyed */
/* Stream slots in use (vacant ones, of forgotten streams, not counted). */
size_t coop_backend_host_streams(const coop_backend *be);

static inline void coop_backend_destroy(coop_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
