/*
 * CUDA backend: the driver API (loaded at run time, cuda_driver.c) on one
 * device's primary context, the context the CUDA runtime and PyTorch use.
 *
 * With virtual memory management every page of a reservation gets its own
 * physical allocation (cuMemCreate of one granule), so the arena can unmap
 * any single page while its neighbours stay mapped; a map call opens its
 * whole range with one cuMemSetAccess. Without it (device
 * lacks VMM, or want_vmm is false) the pool works on cuMemAlloc segments.
 *
 * Every entry point makes the primary context current for the duration of
 * the call (push / pop only when another context is current), so it works
 * from any thread, whatever the caller had made current.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h" /* COOP_ALIGN, the alignment of the pool's blocks */
#include "backend.h"
#include "cuda_driver.h"
#include "status.h"

/* ------------------------------------------------------------------------
 * State
 * ---------------------------------------------------------------------- */

/* Events the pool is done with, kept for the next record: a block used on
 * other streams records one per stream at every free, and cuEventCreate /
 * cuEventDestroy are driver calls (PyTorch's allocator pools its events too). */
#define CUDA_EVENT_CACHE 64

/* A segment whose cuMemAlloc address was not aligned for the pool: it was
 * allocated with room to spare and is handed out aligned up. With aligned 0,
 * the misaligned first allocation instead, never handed out, whose cuMemFree
 * failed: kept for the next segment_alloc, or destroy, to free. */
typedef struct cuda_shifted_segment {
    CUdeviceptr aligned;  /* what the pool was given (0: nothing) */
    CUdeviceptr original; /* what cuMemFree needs */
    struct cuda_shifted_segment *next;
} cuda_shifted_segment;

/* What a page of a reservation is. A stray page is mapped in the driver while
 * the pool believes it unmapped: undoing a failed map could not unmap it. The
 * next map of it takes it as it is; release unmaps it. A held page is
 * unmapped but still has its handle (cuMemRelease of it failed: dropped, its
 * memory would stay with the driver for the life of the process); the next
 * map maps that handle again, and release tries once more. */
enum page_state { PAGE_UNMAPPED = 0, PAGE_MAPPED = 1, PAGE_STRAY = 2, PAGE_HELD = 3 };

/* One cuMemAddressReserve range and the physical handle of each page. */
typedef struct cuda_reservation {
    CUdeviceptr base;
    uint64_t size;
    uint64_t num_pages;
    CUmemGenericAllocationHandle *handles; /* valid where mapped[i] != PAGE_UNMAPPED */
    uint8_t *mapped;                       /* page_state of each page */
    struct cuda_reservation *next;
} cuda_reservation;

typedef struct cuda_backend {
    coop_backend base;
    cuda_driver drv;
    int ordinal;
    CUdevice device;
    CUcontext context; /* primary context, retained */
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    pthread_mutex_t lock; /* guards reservations, shifted segments and kept events */
    cuda_reservation *reservations;
    cuda_shifted_segment *shifted;         /* rare: see cuda_segment_alloc */
    CUevent event_cache[CUDA_EVENT_CACHE]; /* destroyed events kept for reuse */
    int num_cached_events;
    /* Events given back past a full cache while no context could be made
     * current to destroy them (see cuda_event_destroy): reused first. */
    CUevent *orphan_events;
    size_t num_orphan_events, cap_orphan_events;
    coop_backend_cuda_held held; /* under the pool's lock, as every call that changes it */
} cuda_backend;

static cuda_backend *as_cuda(coop_backend *be)
{
    return (cuda_backend *)be;
}

/* ------------------------------------------------------------------------
 * Context scope: the primary context is current between enter and leave.
 * ---------------------------------------------------------------------- */

typedef struct ctx_scope {
    bool pushed;
} ctx_scope;

/* A primary context this thread pushed and could not pop (cuCtxPopCurrent
 * failed), so still current over the caller's, or NULL. The next scope that
 * finds it current pops it at its end, giving the caller its context back;
 * once another context is current instead, the thread's stack has changed
 * under it and the note is dropped (what is below is not known to be ours). */
static _Thread_local CUcontext unpopped;

static coop_status ctx_enter(cuda_backend *cb, ctx_scope *scope)
{
    CUcontext current = NULL;
    scope->pushed = false;
    CUresult rc = cb->drv.fn.cuCtxGetCurrent(&current);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuCtxGetCurrent", "(device %d)", cb->ordinal);
    if (unpopped != current)
        unpopped = NULL;
    if (current == cb->context) {
        scope->pushed = unpopped != NULL; /* ours to pop, this time */
        unpopped = NULL;
        return COOP_OK;
    }
    rc = cb->drv.fn.cuCtxPushCurrent(cb->context);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuCtxPushCurrent", "(device %d)", cb->ordinal);
    scope->pushed = true;
    return COOP_OK;
}

/* A failed pop cannot fail the call (what it did is done): it is said on
 * stderr, the call's own message kept, and noted for the next scope. */
static void ctx_leave(cuda_backend *cb, const ctx_scope *scope)
{
    if (!scope->pushed)
        return;
    CUcontext popped;
    CUresult rc = cb->drv.fn.cuCtxPopCurrent(&popped);
    if (rc == CUDA_SUCCESS)
        return;
    unpopped = cb->context;
    coop_error_kept saved;
    coop_error_keep(&saved);
    cuda_driver_error(&cb->drv, rc, "cuCtxPopCurrent", "(device %d)", cb->ordinal);
    fprintf(stderr,
            "coop: %s: the device's primary context may stay current on this thread until "
            "coop's next call on it\n",
            coop_last_error());
    coop_error_restore(&saved);
}

/* Waits until the device has finished all work: freed blocks may still be
 * read or written by kernels queued before the free. */
static coop_status device_sync(cuda_backend *cb)
{
    CUresult rc = cb->drv.fn.cuCtxSynchronize();
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuCtxSynchronize", "(device %d)", cb->ordinal);
    return COOP_OK;
}

/* ------------------------------------------------------------------------
 * Reservations and pages (VMM)
 * ---------------------------------------------------------------------- */

/* The reservation holding [addr, addr+size), or NULL. Caller holds lock. */
static cuda_reservation *find_reservation(cuda_backend *cb, uintptr_t addr, uint64_t size)
{
    for (cuda_reservation *r = cb->reservations; r; r = r->next)
        if (addr >= r->base && size <= r->size && addr - r->base <= r->size - size)
            return r;
    return NULL;
}

/* Validates a map (want_mapped = 0) or unmap (want_mapped = 1) of [addr, addr+size):
 * page-aligned, inside one reservation, every page in the opposite state. Sets
 * the reservation and the range's first page index and page count. */
static coop_status check_page_range(cuda_backend *cb, const char *op, uintptr_t addr, uint64_t size,
                                    uint8_t want_mapped, cuda_reservation **out, uint64_t *first,
                                    uint64_t *count)
{
    uint64_t page = cb->base.page_size;
    if (size == 0 || addr % page || size % page)
        return coop_set_error(COOP_ERR_INVALID,
                              "cuda backend: %s of [%#jx, +%ju) is not aligned to the %ju-byte "
                              "page",
                              op, (uintmax_t)addr, (uintmax_t)size, (uintmax_t)page);
    cuda_reservation *r = find_reservation(cb, addr, size);
    if (!r)
        return coop_set_error(COOP_ERR_INVALID,
                              "cuda backend: %s of [%#jx, +%ju) is outside every reservation", op,
                              (uintmax_t)addr, (uintmax_t)size);
    *out = r;
    *first = (addr - r->base) / page;
    *count = size / page;
    for (uint64_t i = *first; i < *first + *count; i++)
        if (want_mapped ? r->mapped[i] != PAGE_MAPPED : r->mapped[i] == PAGE_MAPPED)
            return coop_set_error(COOP_ERR_INVALID,
                                  "cuda backend: %s of [%#jx, +%ju): page at %#jx is %s", op,
                                  (uintmax_t)addr, (uintmax_t)size, (uintmax_t)(r->base + i * page),
                                  want_mapped ? "not mapped" : "already mapped");
    return COOP_OK;
}

/* Releases the handle of page i of r (unmapped: held); on failure the page
 * stays held. */
static coop_status release_page(cuda_backend *cb, cuda_reservation *r, uint64_t i)
{
    CUresult rc = cb->drv.fn.cuMemRelease(r->handles[i]);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuMemRelease", "of the page at %#jx",
                                 (uintmax_t)(r->base + i * cb->base.page_size));
    r->mapped[i] = PAGE_UNMAPPED;
    cb->held.handles--;
    return COOP_OK;
}

/* Unmaps page i of r (mapped), keeping its handle: the page becomes held. */
static coop_status unmap_keep_handle(cuda_backend *cb, cuda_reservation *r, uint64_t i)
{
    uint64_t page = cb->base.page_size;
    CUdeviceptr at = r->base + i * page;
    CUresult rc = cb->drv.fn.cuMemUnmap(at, page);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuMemUnmap", "at %#jx (%ju bytes)", (uintmax_t)at,
                                 (uintmax_t)page);
    r->mapped[i] = PAGE_HELD;
    cb->held.mapped_bytes -= page;
    return COOP_OK;
}

/* Unmaps and releases page i of r (mapped, or held: release only). Returns
 * the first failure. */
static coop_status unmap_page(cuda_backend *cb, cuda_reservation *r, uint64_t i)
{
    coop_status st = r->mapped[i] == PAGE_HELD ? COOP_OK : unmap_keep_handle(cb, r, i);
    return st == COOP_OK ? release_page(cb, r, i) : st;
}

/* Creates (or takes the held handle of) and maps page i of r (not yet
 * accessible: cuda_map opens its whole range with one cuMemSetAccess). On
 * failure nothing of it is left but a held handle. */
static coop_status map_page(cuda_backend *cb, cuda_reservation *r, uint64_t i)
{
    uint64_t page = cb->base.page_size;
    CUdeviceptr at = r->base + i * page;
    CUmemGenericAllocationHandle handle = r->handles[i];
    CUresult rc;
    if (r->mapped[i] != PAGE_HELD) {
        rc = cb->drv.fn.cuMemCreate(&handle, page, &cb->prop, 0);
        if (rc != CUDA_SUCCESS)
            return cuda_driver_error(&cb->drv, rc, "cuMemCreate", "(%ju bytes on device %d)",
                                     (uintmax_t)page, cb->ordinal);
        cb->held.handles++;
        r->handles[i] = handle;
        r->mapped[i] = PAGE_HELD;
    }
    rc = cb->drv.fn.cuMemMap(at, page, 0, handle, 0);
    if (rc != CUDA_SUCCESS) {
        coop_status st = cuda_driver_error(&cb->drv, rc, "cuMemMap", "at %#jx (%ju bytes)",
                                           (uintmax_t)at, (uintmax_t)page);
        (void)release_page(cb, r, i);
        return st;
    }
    r->mapped[i] = PAGE_MAPPED;
    cb->held.mapped_bytes += page;
    return COOP_OK;
}

static coop_status cuda_reserve(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    cuda_backend *cb = as_cuda(be);
    uint64_t page = be->page_size;
    if (size == 0 || size % page)
        return coop_set_error(COOP_ERR_INVALID,
                              "cuda backend: reservation of %ju bytes is not a multiple of the "
                              "%ju-byte page",
                              (uintmax_t)size, (uintmax_t)page);
    cuda_reservation *r = calloc(1, sizeof *r);
    uint64_t num_pages = size / page;
    if (r) {
        r->handles = malloc(num_pages * sizeof *r->handles);
        r->mapped = calloc(num_pages, 1);
    }
    if (!r || !r->handles || !r->mapped) {
        if (r) {
            free(r->handles);
            free(r->mapped);
        }
        free(r);
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "cuda backend: no host memory for the page table of a %ju-byte "
                              "reservation",
                              (uintmax_t)size);
    }
    r->size = size;
    r->num_pages = num_pages;

    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st == COOP_OK) {
        CUresult rc = cb->drv.fn.cuMemAddressReserve(&r->base, size, page, 0, 0);
        if (rc != CUDA_SUCCESS)
            st = cuda_driver_error(&cb->drv, rc, "cuMemAddressReserve",
                                   "(%ju bytes of address space)", (uintmax_t)size);
        ctx_leave(cb, &scope);
    }
    if (st != COOP_OK) {
        free(r->handles);
        free(r->mapped);
        free(r);
        return st;
    }
    pthread_mutex_lock(&cb->lock);
    r->next = cb->reservations;
    cb->reservations = r;
    pthread_mutex_unlock(&cb->lock);
    cb->held.reservations++;
    *addr = (uintptr_t)r->base;
    return COOP_OK;
}

/* Unmaps and releases every page of r after one device synchronisation. */
static coop_status unmap_all(cuda_backend *cb, cuda_reservation *r)
{
    bool any = false;
    for (uint64_t i = 0; i < r->num_pages && !any; i++)
        any = r->mapped[i];
    if (!any)
        return COOP_OK;
    coop_status st = device_sync(cb);
    for (uint64_t i = 0; i < r->num_pages && st == COOP_OK; i++)
        if (r->mapped[i])
            st = unmap_page(cb, r, i);
    return st;
}

/* Frees r's address range (nothing mapped in it). */
static coop_status address_free(cuda_backend *cb, cuda_reservation *r)
{
    CUresult rc = cb->drv.fn.cuMemAddressFree(r->base, r->size);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuMemAddressFree", "of [%#jx, +%ju)",
                                 (uintmax_t)r->base, (uintmax_t)r->size);
    cb->held.reservations--;
    return COOP_OK;
}

static coop_status cuda_release(coop_backend *be, uintptr_t addr, uint64_t size)
{
    cuda_backend *cb = as_cuda(be);
    pthread_mutex_lock(&cb->lock);
    cuda_reservation **link = &cb->reservations;
    while (*link && !((*link)->base == addr && (*link)->size == size))
        link = &(*link)->next;
    cuda_reservation *r = *link;
    if (!r) {
        pthread_mutex_unlock(&cb->lock);
        return coop_set_error(COOP_ERR_INVALID,
                              "cuda backend: release of [%#jx, +%ju) matches no reservation",
                              (uintmax_t)addr, (uintmax_t)size);
    }
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st == COOP_OK) {
        st = unmap_all(cb, r);
        if (st == COOP_OK)
            st = address_free(cb, r);
        ctx_leave(cb, &scope);
    }
    if (st == COOP_OK) {
        *link = r->next;
        free(r->handles);
        free(r->mapped);
        free(r);
    }
    pthread_mutex_unlock(&cb->lock);
    return st;
}

/* Maps pages [first, first+count) of r (none mapped by the pool: unmapped,
 * held or stray) and opens them with one cuMemSetAccess. All or nothing: on
 * failure the pages it mapped (never used yet) are unmapped again, a page
 * that will not unmap staying a stray (see page_state), and the thread's
 * error is the first failure, not the undo's. */
static coop_status map_run(cuda_backend *cb, cuda_reservation *r, uint64_t first, uint64_t count)
{
    uint64_t page = cb->base.page_size;
    CUdeviceptr addr = r->base + first * page;
    coop_status st = COOP_OK;
    uint64_t done = 0;
    while (done < count) {
        uint64_t i = first + done;
        if (r->mapped[i] == PAGE_STRAY)
            r->mapped[i] = PAGE_MAPPED; /* still has its handle */
        else if ((st = map_page(cb, r, i)) != COOP_OK)
            break;
        done++;
    }
    /* One cuMemSetAccess opens every page of the range: the driver
     * accepts a fully mapped range spanning several allocations, and a
     * call per page would cost a third of the driver calls again. */
    if (st == COOP_OK) {
        CUresult rc = cb->drv.fn.cuMemSetAccess(addr, count * page, &cb->access, 1);
        if (rc != CUDA_SUCCESS)
            st = cuda_driver_error(&cb->drv, rc, "cuMemSetAccess", "of [%#jx, +%ju)",
                                   (uintmax_t)addr, (uintmax_t)(count * page));
    }
    if (st != COOP_OK) {
        char why[512];
        coop_copy_last_error(why, sizeof why);
        while (done > 0) {
            uint64_t i = first + --done;
            if (unmap_page(cb, r, i) != COOP_OK && r->mapped[i] == PAGE_MAPPED)
                r->mapped[i] = PAGE_STRAY;
        }
        coop_set_error(st, "%s", why);
    }
    return st;
}

static coop_status cuda_map(coop_backend *be, uintptr_t addr, uint64_t size)
{
    cuda_backend *cb = as_cuda(be);
    pthread_mutex_lock(&cb->lock);
    cuda_reservation *r;
    uint64_t first = 0, count = 0;
    coop_status st = check_page_range(cb, "map", addr, size, 0, &r, &first, &count);
    ctx_scope scope;
    if (st == COOP_OK)
        st = ctx_enter(cb, &scope);
    if (st == COOP_OK) {
        st = map_run(cb, r, first, count);
        ctx_leave(cb, &scope);
    }
    pthread_mutex_unlock(&cb->lock);
    return st;
}

/* All or nothing, as backend.h requires: if a page fails to unmap, the pages
 * unmapped before it are mapped again (with the handles they kept), so the
 * pool's page map (which keeps the range mapped on failure) stays true. If
 * mapping them again fails too, they are left unmapped, not half mapped (a
 * page mapped back without access would be handed out by the pool), and
 * reported in *unmapped for the pool to mark so. */
static coop_status cuda_unmap(coop_backend *be, uintptr_t addr, uint64_t size, uint64_t *unmapped)
{
    cuda_backend *cb = as_cuda(be);
    *unmapped = 0;
    pthread_mutex_lock(&cb->lock);
    cuda_reservation *r;
    uint64_t first = 0, count = 0;
    coop_status st = check_page_range(cb, "unmap", addr, size, 1, &r, &first, &count);
    ctx_scope scope;
    if (st == COOP_OK)
        st = ctx_enter(cb, &scope);
    if (st == COOP_OK) {
        /* no device synchronization: the pool unmaps only free space whose
         * streams it has seen finish (an event on each, or cuda_synchronize
         * at pool destruction), as PyTorch's expandable segments synchronize
         * only their own stream; a context-wide synchronize would also wait
         * for streams that never touched these pages, such as one blocked
         * on the host */
        /* all or nothing: every page is unmapped before any handle is
         * released, so that a failure can map them back without new
         * physical memory (another process may have taken it meanwhile) */
        uint64_t end = first + count, stop = first;
        while (stop < end && (st = unmap_keep_handle(cb, r, stop)) == COOP_OK)
            stop++;
        if (st != COOP_OK && stop > first) {
            char why[512];
            coop_copy_last_error(why, sizeof why);
            if (map_run(cb, r, first, stop - first) == COOP_OK) {
                stop = first;
                coop_set_error(st, "%s", why);
            } else {
                char undo[512]; /* the message cannot be formatted into itself */
                coop_copy_last_error(undo, sizeof undo);
                coop_set_error(st,
                               "%s; mapping the %ju pages before it again failed too (%s): they "
                               "are left unmapped",
                               why, (uintmax_t)(stop - first), undo);
            }
        }
        /* The pages unmapped now (all, or those before a failure whose undo
         * failed) give up their handles, whatever a release says: a handle
         * cuMemRelease refuses stays held (mapped again by the next map,
         * released with the reservation). */
        if (st == COOP_OK)
            stop = end;
        for (uint64_t i = first; i < stop; i++)
            if (r->mapped[i] == PAGE_HELD)
                (void)release_page(cb, r, i);
        *unmapped = (stop - first) * cb->base.page_size;
        ctx_leave(cb, &scope);
    }
    pthread_mutex_unlock(&cb->lock);
    return st;
}

static coop_status cuda_synchronize(coop_backend *be)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    st = device_sync(cb);
    ctx_leave(cb, &scope);
    return st;
}

/* ------------------------------------------------------------------------
 * Segments (no VMM)
 * ---------------------------------------------------------------------- */

/* The pool tiles a segment with blocks aligned to COOP_ALIGN (512 bytes).
 * cuMemAlloc promises only 256 ("any address ... returned by one of the
 * memory allocation routines from the driver or runtime API is always aligned
 * to at least 256 bytes", CUDA C++ Programming Guide, device memory accesses);
 * in practice large allocations come page-aligned. */
_Static_assert(COOP_ALIGN % 256 == 0, "cuMemAlloc's guaranteed alignment divides COOP_ALIGN");

static coop_status mem_alloc(cuda_backend *cb, uint64_t size, CUdeviceptr *dptr)
{
    CUresult rc = cb->drv.fn.cuMemAlloc(dptr, size);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(&cb->drv, rc, "cuMemAlloc", "(%ju bytes on device %d)",
                                 (uintmax_t)size, cb->ordinal);
    cb->held.segments++;
    return COOP_OK;
}

/* Keeps dptr, a segment the pool never had whose cuMemFree failed, for
 * free_unused_segments; without host memory for its record it is lost. */
static void keep_unused_segment(cuda_backend *cb, CUdeviceptr dptr)
{
    cuda_shifted_segment *unused = malloc(sizeof *unused);
    if (!unused)
        return;
    unused->aligned = 0;
    unused->original = dptr;
    pthread_mutex_lock(&cb->lock);
    unused->next = cb->shifted;
    cb->shifted = unused;
    pthread_mutex_unlock(&cb->lock);
}

/* Frees the kept segments the pool never had (the primary context is
 * current; never used, so nothing to wait for). COOP_OK, or the first
 * failure, whose segment stays kept. */
static coop_status free_unused_segments(cuda_backend *cb)
{
    coop_status st = COOP_OK;
    pthread_mutex_lock(&cb->lock);
    cuda_shifted_segment **link = &cb->shifted;
    while (*link) {
        cuda_shifted_segment *unused = *link;
        CUresult rc = CUDA_SUCCESS;
        if (!unused->aligned && (rc = cb->drv.fn.cuMemFree(unused->original)) == CUDA_SUCCESS) {
            *link = unused->next;
            free(unused);
            cb->held.segments--;
            continue;
        }
        if (rc != CUDA_SUCCESS && st == COOP_OK)
            st = cuda_driver_error(&cb->drv, rc, "cuMemFree", "of an unused segment at %#jx",
                                   (uintmax_t)unused->original);
        link = &unused->next;
    }
    pthread_mutex_unlock(&cb->lock);
    return st;
}

static coop_status cuda_segment_alloc(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    /* first, as the memory may be needed now: a failure is tried again later */
    (void)free_unused_segments(cb);
    CUdeviceptr dptr = 0;
    st = mem_alloc(cb, size, &dptr);
    if (st == COOP_OK && dptr % COOP_ALIGN) {
        /* allocate again with room to align up; keep the original for cuMemFree */
        cuda_shifted_segment *shift = malloc(sizeof *shift);
        if (cb->drv.fn.cuMemFree(dptr) == CUDA_SUCCESS) /* never used: nothing to wait for */
            cb->held.segments--;
        else /* not lost: freed later */
            keep_unused_segment(cb, dptr);
        if (!shift)
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "cuda backend: no host memory");
        else
            st = mem_alloc(cb, size + COOP_ALIGN, &dptr);
        if (st == COOP_OK) {
            shift->original = dptr;
            shift->aligned = (dptr + COOP_ALIGN - 1) & ~(CUdeviceptr)(COOP_ALIGN - 1);
            dptr = shift->aligned;
            pthread_mutex_lock(&cb->lock);
            shift->next = cb->shifted;
            cb->shifted = shift;
            pthread_mutex_unlock(&cb->lock);
        } else {
            free(shift);
        }
    }
    if (st == COOP_OK)
        *addr = (uintptr_t)dptr;
    ctx_leave(cb, &scope);
    return st;
}

/* The address cuMemAlloc gave for the segment the pool knows at addr;
 * forgets the shift when forget is set. */
static CUdeviceptr segment_original(cuda_backend *cb, uintptr_t addr, bool forget)
{
    CUdeviceptr original = (CUdeviceptr)addr;
    pthread_mutex_lock(&cb->lock);
    for (cuda_shifted_segment **link = &cb->shifted; *link; link = &(*link)->next)
        if ((*link)->aligned == (CUdeviceptr)addr) {
            cuda_shifted_segment *shift = *link;
            original = shift->original;
            if (forget) {
                *link = shift->next;
                free(shift);
            }
            break;
        }
    pthread_mutex_unlock(&cb->lock);
    return original;
}

static coop_status cuda_segment_free(coop_backend *be, uintptr_t addr, uint64_t size)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    /* no device synchronization of our own, as for cuda_unmap: the pool
     * frees only segments whose streams it has seen finish (cuMemFree may
     * still wait for the device by itself, as cudaFree is documented to) */
    CUresult rc = cb->drv.fn.cuMemFree(segment_original(cb, addr, false));
    if (rc != CUDA_SUCCESS)
        st = cuda_driver_error(&cb->drv, rc, "cuMemFree", "of [%#jx, +%ju)", (uintmax_t)addr,
                               (uintmax_t)size);
    else {
        segment_original(cb, addr, true);
        cb->held.segments--;
    }
    ctx_leave(cb, &scope);
    return st;
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

/* A kept event (an orphan first), or NULL. */
static CUevent take_cached_event(cuda_backend *cb)
{
    pthread_mutex_lock(&cb->lock);
    CUevent event = NULL;
    if (cb->num_orphan_events)
        event = cb->orphan_events[--cb->num_orphan_events];
    else if (cb->num_cached_events)
        event = cb->event_cache[--cb->num_cached_events];
    pthread_mutex_unlock(&cb->lock);
    return event;
}

/* Keeps event for reuse; false when the cache is full. */
static bool cache_event(cuda_backend *cb, CUevent event)
{
    pthread_mutex_lock(&cb->lock);
    bool kept = cb->num_cached_events < CUDA_EVENT_CACHE;
    if (kept)
        cb->event_cache[cb->num_cached_events++] = event;
    pthread_mutex_unlock(&cb->lock);
    return kept;
}

static coop_status cuda_event_record(coop_backend *be, coop_stream stream, coop_event *ev)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    CUevent event = take_cached_event(cb);
    CUresult rc = CUDA_SUCCESS;
    if (!event)
        rc = cb->drv.fn.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        st = cuda_driver_error(&cb->drv, rc, "cuEventCreate", "(device %d)", cb->ordinal);
    } else {
        /* re-recording an event captures the stream's work anew */
        rc = cb->drv.fn.cuEventRecord(event, (CUstream)stream);
        if (rc != CUDA_SUCCESS) {
            st = cuda_driver_error(&cb->drv, rc, "cuEventRecord", "on stream %#jx",
                                   (uintmax_t)stream);
            if (!cache_event(cb, event))
                cb->drv.fn.cuEventDestroy(event);
        } else {
            *ev = (coop_event)event;
        }
    }
    ctx_leave(cb, &scope);
    return st;
}

static coop_status cuda_event_query(coop_backend *be, coop_event ev, bool *done)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    CUresult rc = cb->drv.fn.cuEventQuery((CUevent)ev);
    if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_READY)
        *done = rc == CUDA_SUCCESS;
    else
        st = cuda_driver_error(&cb->drv, rc, "cuEventQuery", "(device %d)", cb->ordinal);
    ctx_leave(cb, &scope);
    return st;
}

/* Blocks this thread until the event's work is done (the pool's lock is
 * held: other threads' calls on the pool wait too, as in PyTorch's
 * synchronize_and_free_events). */
static coop_status cuda_event_wait(coop_backend *be, coop_event ev)
{
    cuda_backend *cb = as_cuda(be);
    ctx_scope scope;
    coop_status st = ctx_enter(cb, &scope);
    if (st != COOP_OK)
        return st;
    CUresult rc = cb->drv.fn.cuEventSynchronize((CUevent)ev);
    if (rc != CUDA_SUCCESS)
        st = cuda_driver_error(&cb->drv, rc, "cuEventSynchronize", "(device %d)", cb->ordinal);
    ctx_leave(cb, &scope);
    return st;
}

/* Keeps event past the cache; false when there is no host memory for it. */
static bool keep_orphan_event(cuda_backend *cb, CUevent event)
{
    pthread_mutex_lock(&cb->lock);
    bool kept = cb->num_orphan_events < cb->cap_orphan_events;
    if (!kept) {
        size_t cap = cb->cap_orphan_events ? 2 * cb->cap_orphan_events : 8;
        CUevent *grown = realloc(cb->orphan_events, cap * sizeof *grown);
        if (grown) {
            cb->orphan_events = grown;
            cb->cap_orphan_events = cap;
            kept = true;
        }
    }
    if (kept)
        cb->orphan_events[cb->num_orphan_events++] = event;
    pthread_mutex_unlock(&cb->lock);
    return kept;
}

/* Destroys event (the primary context is current); false, with the
 * thread's error set, if the driver refused: the event is lost. */
static bool destroy_event(cuda_backend *cb, CUevent event)
{
    CUresult rc = cb->drv.fn.cuEventDestroy(event);
    if (rc != CUDA_SUCCESS)
        cuda_driver_error(&cb->drv, rc, "cuEventDestroy", "(device %d)", cb->ordinal);
    return rc == CUDA_SUCCESS;
}

/* Destroys the orphans (the primary context is current); returns how many
 * the driver refused. */
static size_t destroy_orphan_events(cuda_backend *cb)
{
    size_t refused = 0;
    pthread_mutex_lock(&cb->lock);
    while (cb->num_orphan_events > 0)
        refused += !destroy_event(cb, cb->orphan_events[--cb->num_orphan_events]);
    pthread_mutex_unlock(&cb->lock);
    return refused;
}

/* cuEventDestroy is made, as every driver call here, with the event's
 * context current: its documented errors include CUDA_ERROR_INVALID_CONTEXT,
 * so it is not called without one. When the context cannot be made current
 * (cuCtxGetCurrent or cuCtxPushCurrent failed) and the cache is full, the
 * event is kept as an orphan rather than lost: the next record reuses it,
 * the next destroy that enters the context destroys it, and so does the
 * backend's destroy. */
static void cuda_event_destroy(coop_backend *be, coop_event ev)
{
    cuda_backend *cb = as_cuda(be);
    if (cache_event(cb, (CUevent)ev))
        return;
    ctx_scope scope;
    if (ctx_enter(cb, &scope) != COOP_OK) {
        /* without host memory either, nothing can keep it: lost */
        (void)keep_orphan_event(cb, (CUevent)ev);
        return;
    }
    /* an event the driver will not destroy is lost whatever is done: the
     * backend's destroy reports its own, not these */
    (void)destroy_event(cb, (CUevent)ev);
    (void)destroy_orphan_events(cb);
    ctx_leave(cb, &scope);
}

void coop_backend_cuda_held_now(const coop_backend *be, coop_backend_cuda_held *out)
{
    cuda_backend *cb = as_cuda((coop_backend *)be);
    *out = cb->held;
    pthread_mutex_lock(&cb->lock); /* counted, not kept: a count could drift from the list */
    out->segment_records = 0;
    for (const cuda_shifted_segment *shift = cb->shifted; shift; shift = shift->next)
        out->segment_records++;
    pthread_mutex_unlock(&cb->lock);
}

/* ------------------------------------------------------------------------
 * Creation and destruction
 * ---------------------------------------------------------------------- */

/* Keeps the thread's last error, the first failure of a destroy, for its
 * report. */
static void first_failure(char *why, size_t size)
{
    if (!why[0])
        coop_copy_last_error(why, size);
}

/* Whether a page of any reservation is mapped in the driver. */
static bool any_page_mapped(const cuda_backend *cb)
{
    for (const cuda_reservation *r = cb->reservations; r; r = r->next)
        for (uint64_t i = 0; i < r->num_pages; i++)
            if (r->mapped[i] == PAGE_MAPPED || r->mapped[i] == PAGE_STRAY)
                return true;
    return false;
}

/* Gives back at destroy whatever of r the driver takes, one failure not
 * stopping the rest (the primary context is current). A page still mapped
 * (the pool's release of r failed) is unmapped only when synced (the device
 * seen idle: a kernel may still use it otherwise). Every handle is
 * released, mapped or not: the driver documents that a handle may be
 * released while mappings of it remain, its memory freed when the last one
 * goes. The address range is freed only with nothing mapped in it, which
 * is all the driver documents. What stays is left counted in cb->held. */
static void teardown_reservation(cuda_backend *cb, cuda_reservation *r, bool synced, char *why,
                                 size_t why_size)
{
    bool mapped = false;
    for (uint64_t i = 0; i < r->num_pages; i++) {
        if (r->mapped[i] == PAGE_UNMAPPED)
            continue;
        if (r->mapped[i] != PAGE_HELD && synced && unmap_keep_handle(cb, r, i) != COOP_OK)
            first_failure(why, why_size);
        mapped |= r->mapped[i] != PAGE_HELD; /* mapped or stray: still in the driver */
        if (release_page(cb, r, i) != COOP_OK)
            first_failure(why, why_size);
    }
    if (!mapped && address_free(cb, r) != COOP_OK)
        first_failure(why, why_size);
}

/* Destroy cannot fail, yet what the driver kept (device memory above all)
 * stays with it for the life of the process: said on stderr, where a person
 * sees it, and in the thread's last error, where a program can. Nothing is
 * said when nothing is left. */
static void report_leftovers(const cuda_backend *cb, size_t events, const char *why)
{
    const coop_backend_cuda_held *h = &cb->held;
    if (!h->handles && !h->mapped_bytes && !h->reservations && !h->segments && !events)
        return;
    coop_set_error(COOP_ERR_BACKEND,
                   "cuda backend: destroyed with %ju page handles, %ju bytes mapped, %ju "
                   "reservations, %ju segments and %zu events left in the driver for the life "
                   "of the process (device %d; the first failure: %s)",
                   (uintmax_t)h->handles, (uintmax_t)h->mapped_bytes, (uintmax_t)h->reservations,
                   (uintmax_t)h->segments, events, cb->ordinal,
                   why[0] ? why : "none here: the pool had not given them back");
    fprintf(stderr, "coop: %s\n", coop_last_error());
}

/* Gives back everything the driver takes (see teardown_reservation) and
 * reports the rest. Without the primary context current no call is made:
 * every driver call of the backend runs with it, and without it the device
 * cannot be synchronized before unmapping. */
static void cuda_destroy(coop_backend *be)
{
    cuda_backend *cb = as_cuda(be);
    /* the thread's error is left as it was unless something is reported:
     * a failed creation's message comes before its destroy */
    coop_error_kept saved;
    char why[512] = "";
    coop_error_keep(&saved);
    ctx_scope scope;
    bool entered = false, synced = false;
    if (cb->context) {
        entered = ctx_enter(cb, &scope) == COOP_OK;
        if (!entered)
            first_failure(why, sizeof why);
    }
    if (entered) {
        synced = !any_page_mapped(cb) || device_sync(cb) == COOP_OK;
        if (!synced)
            first_failure(why, sizeof why);
    }
    while (cb->reservations) {
        cuda_reservation *r = cb->reservations;
        cb->reservations = r->next;
        if (entered)
            teardown_reservation(cb, r, synced, why, sizeof why);
        free(r->handles);
        free(r->mapped);
        free(r);
    }
    if (entered && free_unused_segments(cb) != COOP_OK)
        first_failure(why, sizeof why);
    while (cb->shifted) { /* the pool frees its segments first; records only */
        cuda_shifted_segment *shift = cb->shifted;
        cb->shifted = shift->next;
        free(shift);
    }
    size_t events_left = cb->num_cached_events + cb->num_orphan_events;
    if (entered) {
        events_left = destroy_orphan_events(cb);
        while (cb->num_cached_events > 0)
            events_left += !destroy_event(cb, cb->event_cache[--cb->num_cached_events]);
        if (events_left)
            first_failure(why, sizeof why);
    }
    free(cb->orphan_events);
    if (entered)
        ctx_leave(cb, &scope);
    coop_error_restore(&saved);
    report_leftovers(cb, events_left, why);
    if (cb->context)
        cb->drv.fn.cuDevicePrimaryCtxRelease(cb->device);
    cuda_driver_unload(&cb->drv);
    pthread_mutex_destroy(&cb->lock);
    free(cb);
}

/* A forked child's copy (coop_backend_ops.abandon): the reservations,
 * segments, events and the context retain named here are the parent's,
 * and the driver is not usable in this process, so only host memory is
 * freed (the driver library stays loaded, as at every destroy). */
static void cuda_abandon(coop_backend *be)
{
    cuda_backend *cb = as_cuda(be);
    while (cb->reservations) {
        cuda_reservation *r = cb->reservations;
        cb->reservations = r->next;
        free(r->handles);
        free(r->mapped);
        free(r);
    }
    while (cb->shifted) {
        cuda_shifted_segment *shift = cb->shifted;
        cb->shifted = shift->next;
        free(shift);
    }
    free(cb->orphan_events);
    cuda_driver_unload(&cb->drv);
    pthread_mutex_destroy(&cb->lock);
    free(cb);
}

static const coop_backend_ops cuda_ops = {
    .reserve = cuda_reserve,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .synchronize = cuda_synchronize,
    .segment_alloc = cuda_segment_alloc,
    .segment_free = cuda_segment_free,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
    .event_destroy = cuda_event_destroy,
    .hold_stream = NULL,
    .forget_stream = NULL,
    .destroy = cuda_destroy,
    .abandon = cuda_abandon,
};

/* Segment backends still report a page size, the pool's default page (it
 * rounds segments to it): the device's allocation granularity where the
 * driver reports one, else this. It is no requirement: cuMemAlloc takes any
 * size, and the pool takes any power-of-two page for segments. */
#define COOP_CUDA_SEGMENT_GRANULE (2u << 20)

/* Device queries once the primary context is current. */
static coop_status query_device(cuda_backend *cb, bool want_vmm)
{
    cuda_driver *d = &cb->drv;
    size_t free_bytes = 0, total_bytes = 0;
    CUresult rc = d->fn.cuMemGetInfo(&free_bytes, &total_bytes);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(d, rc, "cuMemGetInfo", "(device %d)", cb->ordinal);
    cb->base.device_memory = total_bytes;

    int vmm = 0;
    rc = d->fn.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                    cb->device);
    if (rc != CUDA_SUCCESS)
        return cuda_driver_error(d, rc, "cuDeviceGetAttribute",
                                 "(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device %d)", cb->ordinal);

    memset(&cb->prop, 0, sizeof cb->prop);
    cb->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    cb->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    cb->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    cb->prop.location.id = cb->ordinal; /* the documentation's device ordinal */
    memset(&cb->access, 0, sizeof cb->access);
    cb->access.location = cb->prop.location;
    cb->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    cb->base.has_vmm = want_vmm && vmm;
    cb->base.page_size = COOP_CUDA_SEGMENT_GRANULE;
    if (vmm) {
        /* cuMemCreate sizes and cuMemMap ranges must be multiples of the
         * minimum granularity; segments are rounded to it too (2 MiB on
         * current GPUs, the physical page size), by default only: without
         * VMM a failed query, or an answer that is no page size (0, not a
         * power of two), keeps the default page rather than refuse a backend
         * that never needs it */
        size_t granularity = 0;
        rc = d->fn.cuMemGetAllocationGranularity(&granularity, &cb->prop,
                                                 CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        bool page_sized = granularity && !(granularity & (granularity - 1));
        if ((rc != CUDA_SUCCESS || !page_sized) && !cb->base.has_vmm)
            return COOP_OK;
        if (rc != CUDA_SUCCESS)
            return cuda_driver_error(d, rc, "cuMemGetAllocationGranularity", "(device %d)",
                                     cb->ordinal);
        if (!page_sized)
            return coop_set_error(COOP_ERR_BACKEND,
                                  "CUDA driver: device %d reports an allocation granularity of "
                                  "%zu bytes (not a power of two)",
                                  cb->ordinal, granularity);
        cb->base.page_size = granularity;
    }
    return COOP_OK;
}

/* The first process whose cuInit succeeded (0: none): a forked child
 * inherits it, and so knows that the driver it would call was initialized
 * in another process. */
static atomic_int init_pid;

int coop_backend_cuda_init_pid(void)
{
    return atomic_load(&init_pid);
}

coop_status coop_backend_cuda_create(int device, bool want_vmm, coop_backend **out)
{
    *out = NULL;
    cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "cuda backend: no host memory");
    pthread_mutex_init(&cb->lock, NULL);
    cb->base.ops = &cuda_ops;
    cb->base.name = "cuda";
    cb->ordinal = device;
    coop_status st = cuda_driver_load(&cb->drv);
    if (st != COOP_OK) {
        cuda_destroy(&cb->base);
        return st;
    }
    cuda_driver *d = &cb->drv;
    CUresult rc = d->fn.cuInit(0);
    if (rc != CUDA_SUCCESS) {
        /* e.g. CUDA_ERROR_NO_DEVICE: a driver library without a usable device */
        cuda_driver_error(d, rc, "cuInit", "(no usable CUDA device)");
        char why[400];
        coop_copy_last_error(why, sizeof why);
        cuda_destroy(&cb->base);
        return coop_set_error(COOP_ERR_NO_DRIVER, "no CUDA driver usable: %s", why);
    }
    int none = 0;
    atomic_compare_exchange_strong(&init_pid, &none, (int)getpid());
    int count = 0;
    rc = d->fn.cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS) {
        st = cuda_driver_error(d, rc, "cuDeviceGetCount", "%s", "");
        cuda_destroy(&cb->base);
        return st;
    }
    if (device < 0 || device >= count) {
        cuda_destroy(&cb->base);
        return coop_set_error(COOP_ERR_INVALID,
                              "cuda backend: device %d does not exist (%d CUDA device%s)", device,
                              count, count == 1 ? "" : "s");
    }
    rc = d->fn.cuDeviceGet(&cb->device, device);
    if (rc == CUDA_SUCCESS) {
        rc = d->fn.cuDevicePrimaryCtxRetain(&cb->context, cb->device);
        if (rc != CUDA_SUCCESS) {
            cb->context = NULL;
            st = cuda_driver_error(d, rc, "cuDevicePrimaryCtxRetain", "(device %d)", device);
        }
    } else {
        st = cuda_driver_error(d, rc, "cuDeviceGet", "(device %d)", device);
    }
    if (st == COOP_OK) {
        ctx_scope scope;
        st = ctx_enter(cb, &scope);
        if (st == COOP_OK) {
            st = query_device(cb, want_vmm);
            ctx_leave(cb, &scope);
        }
    }
    if (st != COOP_OK) {
        cuda_destroy(&cb->base);
        return st;
    }
    *out = &cb->base;
    return COOP_OK;
}
