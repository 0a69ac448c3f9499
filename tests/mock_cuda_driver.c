/*
 * A mock CUDA driver (libmockcuda.so) for testing backend_cuda.c without a
 * GPU: the entry points coop loads, under the versioned names cuda.h maps
 * them to, acting on this process's address space (PROT_NONE, never touched).
 *
 * It checks what a real driver would refuse or what would corrupt a real
 * device: calls before cuInit or without a current context (a primary
 * context must be retained to be usable), unmapping or freeing memory that
 * queued work may still use (a cuMemsetD8Async over it whose stream has not
 * been seen to finish it: a successful cuEventQuery or cuEventSynchronize of
 * an event recorded after it on that stream, cuStreamQuery or
 * cuStreamSynchronize of the stream, or cuCtxSynchronize),
 * mappings outside a reservation or not granularity multiples, reservations
 * freed with another range than reserved (or with mappings left in them:
 * undocumented, see cuMemAddressFree), allocation properties other than
 * pinned device memory on an existing device, events used after destroy,
 * streams that were never created, leaked handles, reservations and events.
 * A handle released while still mapped keeps its memory until its last
 * mapping is unmapped, as cuMemRelease is documented to.
 * Memory belongs to a device: cuMemCreate's location, or the device whose
 * primary context is current at cuMemAlloc (mock_cuda_device_bytes).
 * Tests read its counters and arm failures through mock_cuda_* functions
 * (dlsym). Each rule is one the driver API documentation states, but for two
 * stricter ones, marked where they are (MOCK_ENTRY, cuMemAddressFree), where
 * the documentation is silent and only a device can say.
 *
 * Streams: 0 (legacy default), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD and
 * those cuStreamCreate made (opaque small integers here). A test can hold a
 * stream: events recorded on it while held stay incomplete until it is
 * released, as if a kernel queued before them were still running;
 * cuEventSynchronize on such an event ends the hold (the kernel finishes);
 * cuCtxSynchronize leaves it (and its work unfinished).
 * A stream blocked on cuStreamWaitValue32 waits for a host write instead:
 * cuCtxSynchronize and cuEventSynchronize poll the word, as the device
 * would, for up to MOCK_DEADLOCK_MS; if no other thread writes it by then,
 * the wait would never return on a device, so the mock counts a deadlock,
 * says so on stderr and returns CUDA_ERROR_NOT_READY.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_mock_counters.h"

#define MOCK_EXPORT __attribute__((visibility("default")))
#define MOCK_MAX_MAPPINGS 4096
#define MOCK_MAX_RESERVATIONS 256
#define MOCK_MAX_STREAMS 64
#define MOCK_DEVICES 2

static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_mock_counters counters;
static long physical_limit = 1l << 30; /* bytes cuMemCreate + cuMemAlloc may hand out */
/* Queued work: each cuMemsetD8Async stands for a kernel using its range. It
 * counts as running until its stream is seen to finish it: the driver
 * cannot know it has finished otherwise, and neither can coop, so a release
 * of memory it uses before then is unsafe. Work and event records are
 * numbered in one sequence; an event covers its stream's work numbered
 * before it. */
typedef struct mock_work {
    int stream;
    CUdeviceptr ptr;
    size_t size;
    uint64_t seq;
} mock_work;
static mock_work *work; /* unfinished as far as anyone has seen */
static size_t num_work, cap_work;
static uint64_t work_seq; /* numbers of work queued and events recorded */
static bool streams_held; /* events stay incomplete */
/* Armed failures: the Nth next call of an entry point fails (one slot per
 * entry point, four at most at a time); a sticky one fails every call from
 * the Nth on, until the entry point is armed again. */
#define MOCK_FAIL_SLOTS 4
static struct {
    char name[64];
    int countdown;
    bool sticky;
    CUresult rc;
} armed[MOCK_FAIL_SLOTS];
static long calls;        /* calls that acquire or act (not the releasing ones) */
static long fail_call_at; /* that call fails (0: none) */
static CUresult fail_call_rc;
static size_t granule = 2u << 20; /* cuMemGetAllocationGranularity's answer */
/* cuMemAlloc's addresses are aligned to this and no more: the CUDA C++
 * Programming Guide guarantees "at least 256 bytes", nothing beyond */
static size_t alloc_alignment = 256;
static bool initialized; /* cuInit succeeded */
static long primary_retains[MOCK_DEVICES];
/* Physical bytes each device holds (cuMemCreate on its location, cuMemAlloc
 * in its primary context): memory is tied to a device, so that a backend
 * working on the wrong one shows. Under mock_lock. */
static long device_bytes[MOCK_DEVICES];

static struct {
    CUdeviceptr addr;
    size_t size;
} reservations[MOCK_MAX_RESERVATIONS];

/* Per stream handle (index = handle value): created, held, hold generation. */
static struct {
    bool created;
    bool held;
    uint64_t generation;
    /* a cuStreamWaitValue32 the stream is blocked on: while
     * (int32_t)(*wait_addr - wait_value) < 0 */
    const volatile uint32_t *wait_addr;
    uint32_t wait_value;
    uint64_t done_seq; /* its work numbered up to this is seen finished */
} streams[MOCK_MAX_STREAMS];

/* cuMemHostAlloc'd blocks (the device pointer is the host address, UVA). */
#define MOCK_MAX_HOST_ALLOCS 16
static struct {
    void *ptr;
    size_t size;
    bool device_mapped;
} host_allocs[MOCK_MAX_HOST_ALLOCS];

/* What cuMemsetD8Async wrote, oldest first, for cuMemcpyDtoH to read back
 * (the mock's device memory is never touched; bytes never set read 0). */
#define MOCK_MAX_MEMSETS 64
static struct {
    CUdeviceptr ptr;
    size_t size;
    unsigned char value;
} memsets[MOCK_MAX_MEMSETS];
static int num_memsets;

/* Events are never freed, only marked dead, so a use after cuEventDestroy is
 * detected without touching freed memory. */
typedef struct mock_event {
    bool live;
    bool recorded;
    CUstream stream;
    uint64_t generation; /* the stream's hold generation when recorded, 0: not held */
    uint64_t seq;        /* work_seq when recorded: covers the stream's work before it */
    const volatile uint32_t *wait_addr; /* the stream's wait when recorded, or NULL */
    uint32_t wait_value;
    struct mock_event *next_free;
} mock_event;
static mock_event *free_events;

/* Destroyed events are kept for reuse; give them back, and the work list,
 * when the library is unloaded (events still live at that point are the
 * caller's leak). */
__attribute__((destructor)) static void free_mock_memory(void)
{
    free(work);
    work = NULL;
    while (free_events) {
        mock_event *e = free_events;
        free_events = e->next_free;
        free(e);
    }
}

/* A cuMemCreate allocation. As the driver documents cuMemRelease, the handle
 * may be released while mappings of it remain, and its memory is freed once
 * the handle is released and the last mapping is gone. */
typedef struct mock_handle {
    size_t size;
    int device;   /* the allocation's location (CUmemAllocationProp) */
    int mappings; /* cuMemMap'ed and not yet cuMemUnmap'ed */
    bool released;
} mock_handle;

static struct {
    CUdeviceptr addr;
    size_t size;
    bool accessible;     /* cuMemSetAccess covered it (VMM mappings) */
    bool segment;        /* a cuMemAlloc allocation (accessible as it is) */
    int device;          /* a segment's: the device of the context current at cuMemAlloc */
    mock_handle *handle; /* what a VMM mapping maps */
} mappings[MOCK_MAX_MAPPINGS];

static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;

/* ---- controls for tests ---- */

MOCK_EXPORT void mock_cuda_counters(cuda_mock_counters *out);
MOCK_EXPORT void mock_cuda_fail_nth(const char *entry_point, int nth, int rc);
MOCK_EXPORT void mock_cuda_fail_from(const char *entry_point, int nth, int rc);
MOCK_EXPORT void mock_cuda_hold_streams(bool hold);
MOCK_EXPORT void mock_cuda_set_memory(long bytes);
MOCK_EXPORT void mock_cuda_set_granularity(size_t bytes);
MOCK_EXPORT void mock_cuda_fail_call(long nth, int rc);
MOCK_EXPORT long mock_cuda_calls(void);
MOCK_EXPORT int mock_cuda_hold_stream(CUstream stream, bool hold);
MOCK_EXPORT long mock_cuda_take_unsafe_releases(void);
MOCK_EXPORT int mock_cuda_launch(CUdeviceptr ptr, size_t size, CUstream stream);
MOCK_EXPORT long mock_cuda_device_bytes(int device);

/* The physical bytes device holds now (-1: no such device). */
long mock_cuda_device_bytes(int device)
{
    if (device < 0 || device >= MOCK_DEVICES)
        return -1;
    pthread_mutex_lock(&mock_lock);
    long n = device_bytes[device];
    pthread_mutex_unlock(&mock_lock);
    return n;
}

void mock_cuda_counters(cuda_mock_counters *out)
{
    pthread_mutex_lock(&mock_lock);
    *out = counters;
    pthread_mutex_unlock(&mock_lock);
}

void mock_cuda_fail_nth(const char *entry_point, int nth, int rc)
{
    pthread_mutex_lock(&mock_lock);
    int slot = -1;
    for (int i = 0; i < MOCK_FAIL_SLOTS && slot < 0; i++)
        if (strcmp(armed[i].name, entry_point) == 0)
            slot = i;
    for (int i = 0; i < MOCK_FAIL_SLOTS && slot < 0; i++)
        if (!armed[i].name[0])
            slot = i;
    if (slot >= 0) {
        strncpy(armed[slot].name, entry_point, sizeof armed[slot].name - 1);
        armed[slot].countdown = nth;
        armed[slot].sticky = false;
        armed[slot].rc = (CUresult)rc;
    }
    pthread_mutex_unlock(&mock_lock);
}

/* As mock_cuda_fail_nth, but every call from the nth on fails, until the
 * entry point is armed again (mock_cuda_fail_nth with nth 0 disarms it). */
void mock_cuda_fail_from(const char *entry_point, int nth, int rc)
{
    mock_cuda_fail_nth(entry_point, nth, rc);
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_FAIL_SLOTS; i++)
        if (strcmp(armed[i].name, entry_point) == 0)
            armed[i].sticky = true;
    pthread_mutex_unlock(&mock_lock);
}

/* The unsafe releases counted so far, and the count reset: for a test that
 * shows the mock catches one. */
long mock_cuda_take_unsafe_releases(void)
{
    pthread_mutex_lock(&mock_lock);
    long n = counters.unsafe_releases;
    counters.unsafe_releases = 0;
    pthread_mutex_unlock(&mock_lock);
    return n;
}

void mock_cuda_hold_streams(bool hold)
{
    streams_held = hold;
}

void mock_cuda_set_memory(long bytes)
{
    physical_limit = bytes;
}

void mock_cuda_set_granularity(size_t bytes)
{
    granule = bytes;
}

/* The stream's index in streams[], or -1 if it is not a valid handle. */
static int stream_index(CUstream s)
{
    uintptr_t h = (uintptr_t)s;
    if (h == 0 || h == (uintptr_t)CU_STREAM_LEGACY || h == (uintptr_t)CU_STREAM_PER_THREAD)
        return (int)h;
    return h < MOCK_MAX_STREAMS && streams[h].created ? (int)h : -1;
}

/* Whether a cuStreamWaitValue32 word has reached its value (GEQ, wrapping). */
static bool word_reached(const volatile uint32_t *addr, uint32_t value)
{
    return (int32_t)(*addr - value) >= 0;
}

/* Whether stream s is blocked on its cuStreamWaitValue32 (which is forgotten
 * once satisfied). Caller holds mock_lock. */
static bool wait_pending(int s)
{
    if (streams[s].wait_addr && !word_reached(streams[s].wait_addr, streams[s].wait_value))
        return true;
    streams[s].wait_addr = NULL;
    return false;
}

/* Holds (or releases) a stream; 0 on success, -1 for an invalid stream. */
int mock_cuda_hold_stream(CUstream stream, bool hold)
{
    pthread_mutex_lock(&mock_lock);
    int i = stream_index(stream);
    if (i >= 0) {
        if (hold && !streams[i].held)
            streams[i].generation++;
        streams[i].held = hold;
    }
    pthread_mutex_unlock(&mock_lock);
    return i >= 0 ? 0 : -1;
}

/* Fails the nth call (counted from now) of any entry point that acquires
 * or acts; the releasing ones (cuMemRelease, cuMemFree, cuMemAddressFree,
 * cuEventDestroy, cuStreamDestroy, cuDevicePrimaryCtxRelease,
 * cuCtxPopCurrent) are not counted: when they fail, what they release is
 * lost whatever the caller does. */
void mock_cuda_fail_call(long nth, int rc)
{
    pthread_mutex_lock(&mock_lock);
    calls = 0;
    fail_call_at = nth;
    fail_call_rc = (CUresult)rc;
    pthread_mutex_unlock(&mock_lock);
}

/* Counted calls since the last mock_cuda_fail_call. */
long mock_cuda_calls(void)
{
    pthread_mutex_lock(&mock_lock);
    long n = calls;
    pthread_mutex_unlock(&mock_lock);
    return n;
}

static bool releases(const char *name)
{
    static const char *const releasing[] = {"cuMemRelease",     "cuMemFree",
                                            "cuMemAddressFree", "cuEventDestroy",
                                            "cuStreamDestroy",  "cuDevicePrimaryCtxRelease",
                                            "cuCtxPopCurrent"};
    for (size_t i = 0; i < sizeof releasing / sizeof releasing[0]; i++)
        if (strcmp(name, releasing[i]) == 0)
            return true;
    return false;
}

/* An armed failure for this entry point, consumed once. */
static CUresult injected(const char *name)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    counters.entry_calls++;
    for (int i = 0; i < MOCK_FAIL_SLOTS; i++)
        if (armed[i].name[0] && strcmp(armed[i].name, name) == 0 &&
            (armed[i].sticky ? --armed[i].countdown <= 0 : --armed[i].countdown == 0)) {
            rc = armed[i].rc;
            if (armed[i].sticky)
                armed[i].countdown = 0; /* no wrap, however many calls */
            else
                armed[i].name[0] = '\0';
        }
    if (!releases(name) && ++calls == fail_call_at) {
        rc = fail_call_rc;
        fail_call_at = 0;
        if (getenv("MOCK_CUDA_TRACE"))
            fprintf(stderr, "mock: failing call %ld: %s\n", calls, name);
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* Fake context handles: never dereferenced by the backend. */
static char primary_contexts[MOCK_DEVICES];

/* A context is current, and if it is a primary context, it is retained
 * (a primary context whose last reference was released is inactive). */
static bool has_context(void)
{
    CUcontext top = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    bool ok = top != NULL;
    for (int d = 0; ok && d < MOCK_DEVICES; d++)
        if (top == (CUcontext)(void *)&primary_contexts[d])
            ok = __atomic_load_n(&primary_retains[d], __ATOMIC_RELAXED) > 0;
    if (!ok)
        __atomic_add_fetch(&counters.no_context, 1, __ATOMIC_RELAXED);
    return ok;
}

/* The device whose primary context is current on this thread, or -1. */
static int current_device(void)
{
    CUcontext top = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    for (int d = 0; d < MOCK_DEVICES; d++)
        if (top == (CUcontext)(void *)&primary_contexts[d])
            return d;
    return -1;
}

/* Every entry point but cuInit and the error-string calls needs cuInit first.
 * Those that act on the device's state need a current context, as libcoop
 * always has one: cuMemUnmap, cuMemRelease and cuMemAddressFree too, though
 * their documented errors do not list CUDA_ERROR_INVALID_CONTEXT, so that a
 * call of coop's made without its context is caught (counters.no_context).
 * Whether a real driver needs one for them, and for cuEventDestroy (whose
 * errors do list it), the mock cannot know: scripts/gpu/teardown_check.py
 * asks a device. */
#define MOCK_ENTRY(name, needs_ctx)                                                                \
    do {                                                                                           \
        CUresult rc_ = injected(name);                                                             \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            return rc_;                                                                            \
        if (!__atomic_load_n(&initialized, __ATOMIC_ACQUIRE))                                      \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
        if ((needs_ctx) && !has_context())                                                         \
            return CUDA_ERROR_INVALID_CONTEXT;                                                     \
    } while (0)

/* Pinned device memory on a device that exists: all coop may ask for. */
static bool valid_location(const CUmemLocation *loc)
{
    return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < MOCK_DEVICES;
}

/* ---- errors, devices, contexts ---- */

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    switch (error) {
    case CUDA_SUCCESS:
        *pStr = "CUDA_SUCCESS";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
        *pStr = "CUDA_ERROR_INVALID_VALUE";
        return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
        *pStr = "CUDA_ERROR_OUT_OF_MEMORY";
        return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
        *pStr = "CUDA_ERROR_NO_DEVICE";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT:
        *pStr = "CUDA_ERROR_INVALID_CONTEXT";
        return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY:
        *pStr = "CUDA_ERROR_NOT_READY";
        return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
        *pStr = "CUDA_ERROR_ILLEGAL_ADDRESS";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE:
        *pStr = "CUDA_ERROR_INVALID_HANDLE";
        return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED:
        *pStr = "CUDA_ERROR_NOT_INITIALIZED";
        return CUDA_SUCCESS;
    case CUDA_ERROR_UNKNOWN:
        *pStr = "CUDA_ERROR_UNKNOWN";
        return CUDA_SUCCESS;
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A description for the errors the mock returns (the real driver's wording differs). */
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    switch (error) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        *pStr = "out of memory";
        return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
        *pStr = "invalid argument";
        return CUDA_SUCCESS;
    default: {
        const char *name = NULL;
        CUresult rc = cuGetErrorName(error, &name);
        *pStr = rc == CUDA_SUCCESS ? "mock driver error" : NULL;
        return rc;
    }
    }
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    (void)Flags;
    const char *no_device = getenv("MOCK_CUDA_NO_DEVICE");
    if (no_device && no_device[0] == '1')
        return CUDA_ERROR_NO_DEVICE;
    CUresult rc = injected("cuInit");
    if (rc == CUDA_SUCCESS)
        __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
    return rc;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    MOCK_ENTRY("cuDeviceGetCount", false);
    *count = MOCK_DEVICES;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    MOCK_ENTRY("cuDeviceGet", false);
    if (ordinal < 0 || ordinal >= MOCK_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    (void)dev;
    MOCK_ENTRY("cuDeviceGetAttribute", false);
    const char *no_vmm = getenv("MOCK_CUDA_NO_VMM");
    if (attrib != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = !(no_vmm && no_vmm[0] == '1');
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    MOCK_ENTRY("cuDevicePrimaryCtxRetain", false);
    if (dev < 0 || dev >= MOCK_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(void *)&primary_contexts[dev];
    __atomic_add_fetch(&primary_retains[dev], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&counters.retained, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    MOCK_ENTRY("cuDevicePrimaryCtxRelease", false);
    if (dev < 0 || dev >= MOCK_DEVICES || primary_retains[dev] == 0)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_sub_fetch(&primary_retains[dev], 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&counters.retained, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    MOCK_ENTRY("cuCtxGetCurrent", false);
    *pctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    MOCK_ENTRY("cuCtxPushCurrent", false);
    if (ctx_depth == 16 || !ctx)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    MOCK_ENTRY("cuCtxPopCurrent", false);
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pctx = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}

/* Stream s (an index) is seen to have finished its work numbered up to seq:
 * that work leaves the list. Caller holds mock_lock. */
static void mark_done(int s, uint64_t seq)
{
    if (s < 0 || streams[s].done_seq >= seq)
        return;
    streams[s].done_seq = seq;
    size_t kept = 0;
    for (size_t i = 0; i < num_work; i++)
        if (work[i].stream != s || work[i].seq > seq)
            work[kept++] = work[i];
    num_work = kept;
}

#define MOCK_DEADLOCK_MS 2000

/* Waits, as the device would, for another thread to write a host word a
 * stream waits on (cuStreamWaitValue32); success unless nothing did within
 * MOCK_DEADLOCK_MS, which is then counted and reported as a deadlock.
 * Called with mock_lock held; releases it while waiting. */
static CUresult wait_host_word(const char *entry_point, int stream, const volatile uint32_t *addr,
                               uint32_t value)
{
    pthread_mutex_unlock(&mock_lock);
    bool reached = false;
    for (int ms = 0; ms <= MOCK_DEADLOCK_MS && !reached; ms++) {
        reached = word_reached(addr, value);
        if (!reached)
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    pthread_mutex_lock(&mock_lock);
    if (reached)
        return CUDA_SUCCESS;
    counters.deadlocks++;
    fprintf(stderr,
            "mock CUDA driver: %s would never return: stream %d is blocked on "
            "cuStreamWaitValue32 for a host write that did not come in %d ms\n",
            entry_point, stream, MOCK_DEADLOCK_MS);
    return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    MOCK_ENTRY("cuCtxSynchronize", true);
    pthread_mutex_lock(&mock_lock);
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < MOCK_MAX_STREAMS && rc == CUDA_SUCCESS; i++)
        if ((i < 3 || streams[i].created) && wait_pending(i))
            rc = wait_host_word("cuCtxSynchronize", i, streams[i].wait_addr, streams[i].wait_value);
    if (rc == CUDA_SUCCESS) {
        counters.syncs++;
        /* Every stream's work is seen finished, except a held stream's: the
         * mock cannot wait for it, and leaves it held (as it always has: the
         * random model's holds stand for streams blocked on the host); work
         * queued on it stays unfinished, so a release of memory that work
         * uses is still reported. */
        for (int i = 0; i < MOCK_MAX_STREAMS; i++)
            if (!streams_held && !streams[i].held)
                mark_done(i, work_seq);
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* ---- memory ---- */

CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total)
{
    MOCK_ENTRY("cuMemGetInfo", true);
    pthread_mutex_lock(&mock_lock);
    *total = (size_t)physical_limit;
    *free = (size_t)(physical_limit - counters.mapped_bytes);
    pthread_mutex_unlock(&mock_lock);
    return CUDA_SUCCESS;
}

/* Reserves size bytes of never-touched address space aligned to align. */
static void *reserve_aligned(size_t size, size_t align)
{
    size_t span = size + align;
    char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *aligned = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (aligned > p)
        munmap(p, (size_t)(aligned - p));
    size_t tail = (size_t)(p + span - (aligned + size));
    if (tail)
        munmap(aligned + size, tail);
    return aligned;
}

/* Takes bytes of the physical limit; false when it would be exceeded. */
static bool take_physical(long bytes)
{
    bool ok;
    pthread_mutex_lock(&mock_lock);
    ok = counters.mapped_bytes + bytes <= physical_limit;
    if (ok)
        counters.mapped_bytes += bytes;
    pthread_mutex_unlock(&mock_lock);
    return ok;
}

static void give_physical(long bytes)
{
    pthread_mutex_lock(&mock_lock);
    counters.mapped_bytes -= bytes;
    pthread_mutex_unlock(&mock_lock);
}

/* [ptr, ptr+size) is released: unsafe if unfinished work uses any of it. */
static void note_release(CUdeviceptr ptr, size_t size, const char *entry_point)
{
    pthread_mutex_lock(&mock_lock);
    for (size_t i = 0; i < num_work; i++)
        if (work[i].ptr < ptr + size && ptr < work[i].ptr + work[i].size) {
            counters.unsafe_releases++;
            fprintf(stderr,
                    "mock CUDA driver: %s of [%#llx, +%zu) while stream %d may still use "
                    "[%#llx, +%zu) (a memset it was not seen to finish)\n",
                    entry_point, (unsigned long long)ptr, size, work[i].stream,
                    (unsigned long long)work[i].ptr, work[i].size);
            break;
        }
    pthread_mutex_unlock(&mock_lock);
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    MOCK_ENTRY("cuMemAlloc", true);
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!take_physical((long)bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    char *span = reserve_aligned(bytesize + alloc_alignment, 2 * alloc_alignment);
    if (!span) {
        give_physical((long)bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = span + alloc_alignment;
    /* remember the size in the mapping table to check cuMemFree */
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_MAX_MAPPINGS; i++)
        if (!mappings[i].addr) {
            mappings[i].addr = (CUdeviceptr)p;
            mappings[i].size = bytesize;
            mappings[i].segment = true;
            mappings[i].device = current_device();
            if (mappings[i].device >= 0)
                device_bytes[mappings[i].device] += (long)bytesize;
            break;
        }
    counters.live_segments++;
    pthread_mutex_unlock(&mock_lock);
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

/* Frees h's memory once it is released and no longer mapped. Caller holds
 * mock_lock. */
static void drop_handle_if_unused(mock_handle *h)
{
    if (!h->released || h->mappings > 0)
        return;
    counters.mapped_bytes -= (long)h->size;
    device_bytes[h->device] -= (long)h->size;
    free(h);
}

/* Removes the exact mapping [addr, addr+size) (size 0: any size); returns
 * its size or 0 if there is none. */
static size_t take_mapping(CUdeviceptr addr, size_t size)
{
    size_t found = 0;
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_MAX_MAPPINGS; i++)
        if (mappings[i].addr == addr && (size == 0 || mappings[i].size == size)) {
            found = mappings[i].size;
            if (mappings[i].accessible)
                counters.accessible_bytes -= (long)found;
            if (mappings[i].segment && mappings[i].device >= 0)
                device_bytes[mappings[i].device] -= (long)found;
            if (mappings[i].handle) {
                mappings[i].handle->mappings--;
                drop_handle_if_unused(mappings[i].handle);
            }
            mappings[i].addr = 0;
            mappings[i].accessible = false;
            mappings[i].segment = false;
            mappings[i].handle = NULL;
            break;
        }
    pthread_mutex_unlock(&mock_lock);
    return found;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    MOCK_ENTRY("cuMemFree", true);
    size_t size = take_mapping(dptr, 0);
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    note_release(dptr, size, "cuMemFree");
    give_physical((long)size);
    munmap((char *)(uintptr_t)dptr - alloc_alignment, size + alloc_alignment);
    __atomic_sub_fetch(&counters.live_segments, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    MOCK_ENTRY("cuMemGetAllocationGranularity", false);
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !valid_location(&prop->location) ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    /* the recommended granularity may exceed the minimum (the driver says
     * so); here it does, so that a backend asking for the wrong one shows */
    *granularity = option == CU_MEM_ALLOC_GRANULARITY_MINIMUM ? granule : 2 * granule;
    return CUDA_SUCCESS;
}

/* The reservation holding [ptr, ptr+size), or -1. Caller holds mock_lock. */
static int find_reservation(CUdeviceptr ptr, size_t size)
{
    for (int i = 0; i < MOCK_MAX_RESERVATIONS; i++)
        if (reservations[i].size && ptr >= reservations[i].addr && size <= reservations[i].size &&
            ptr - reservations[i].addr <= reservations[i].size - size)
            return i;
    return -1;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    MOCK_ENTRY("cuMemAddressReserve", true);
    /* flags: "currently unused, must be zero"; alignment: a power of two or 0 */
    if (size == 0 || size % granule || flags != 0 || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = reserve_aligned(size, alignment ? alignment : granule);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mock_lock);
    int slot = -1;
    for (int i = 0; i < MOCK_MAX_RESERVATIONS && slot < 0; i++)
        if (!reservations[i].size)
            slot = i;
    if (slot >= 0) {
        reservations[slot].addr = (CUdeviceptr)p;
        reservations[slot].size = size;
        counters.live_reservations++;
    }
    pthread_mutex_unlock(&mock_lock);
    if (slot < 0) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

/* Whether a VMM mapping lies in [ptr, ptr+size). Caller holds mock_lock. */
static bool mapped_within(CUdeviceptr ptr, size_t size)
{
    for (int i = 0; i < MOCK_MAX_MAPPINGS; i++)
        if (mappings[i].addr && !mappings[i].segment && mappings[i].addr < ptr + size &&
            ptr < mappings[i].addr + mappings[i].size)
            return true;
    return false;
}

/* "The size must match what was given to memAddressReserve and the ptr given
 * must match what was returned from memAddressReserve." The documentation
 * says nothing of a range that still has mappings in it; the mock refuses
 * one (CUDA_ERROR_INVALID_VALUE) and keeps range and mappings as they were,
 * the stricter answer: freeing them along would leave its mapping table
 * pointing into address space it no longer holds, and a caller that counts
 * on either answer should not. What a real driver does is one of
 * scripts/gpu/teardown_check.py's findings (address_free_mapped). */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    MOCK_ENTRY("cuMemAddressFree", true);
    pthread_mutex_lock(&mock_lock);
    int i = find_reservation(ptr, size);
    bool exact = i >= 0 && reservations[i].addr == ptr && reservations[i].size == size;
    bool freed = exact && !mapped_within(ptr, size);
    if (freed) {
        reservations[i].size = 0;
        counters.live_reservations--;
    } else {
        counters.refused_address_frees++;
    }
    pthread_mutex_unlock(&mock_lock);
    if (!freed)
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)ptr, size);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    MOCK_ENTRY("cuMemCreate", true);
    if (size == 0 || size % granule || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        !valid_location(&prop->location))
        return CUDA_ERROR_INVALID_VALUE;
    if (!take_physical((long)size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    mock_handle *record = malloc(sizeof *record);
    if (!record) {
        give_physical((long)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *record = (mock_handle){.size = size, .device = prop->location.id};
    pthread_mutex_lock(&mock_lock);
    device_bytes[record->device] += (long)size;
    pthread_mutex_unlock(&mock_lock);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)record;
    __atomic_add_fetch(&counters.live_handles, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    MOCK_ENTRY("cuMemRelease", true);
    mock_handle *record = (mock_handle *)(uintptr_t)handle;
    pthread_mutex_lock(&mock_lock);
    bool twice = record->released; /* undefined in the driver */
    if (!twice) {
        record->released = true;
        __atomic_sub_fetch(&counters.live_handles, 1, __ATOMIC_RELAXED);
        drop_handle_if_unused(record);
    }
    pthread_mutex_unlock(&mock_lock);
    return twice ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    MOCK_ENTRY("cuMemMap", true);
    mock_handle *record = (mock_handle *)(uintptr_t)handle;
    if (offset != 0 || flags != 0 || size == 0 || size % granule || size != record->size ||
        record->released || ptr % granule)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_lock);
    /* only inside a range cuMemAddressReserve gave */
    CUresult rc =
        find_reservation(ptr, size) >= 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MOCK_MAX_MAPPINGS && rc == CUDA_ERROR_OUT_OF_MEMORY; i++)
        if (mappings[i].addr == ptr) {
            rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
            break;
        }
    for (int i = 0; i < MOCK_MAX_MAPPINGS && rc == CUDA_ERROR_OUT_OF_MEMORY; i++)
        if (!mappings[i].addr) {
            mappings[i].addr = ptr;
            mappings[i].size = size;
            mappings[i].accessible = false;
            mappings[i].handle = record;
            record->mappings++;
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    MOCK_ENTRY("cuMemUnmap", true);
    if (!take_mapping(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    note_release(ptr, size, "cuMemUnmap");
    return CUDA_SUCCESS;
}

/* As the driver documents it: the range must be fully mapped, and may span
 * several mappings (one per page here); all of them become accessible. */
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    MOCK_ENTRY("cuMemSetAccess", true);
    if (count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE || size == 0 ||
        !valid_location(&desc->location))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_lock);
    counters.access_calls++;
    int covering[MOCK_MAX_MAPPINGS];
    int n = 0;
    CUdeviceptr at = ptr;
    while (at < ptr + size) {
        int found = -1;
        for (int i = 0; i < MOCK_MAX_MAPPINGS && found < 0; i++)
            if (mappings[i].addr == at && mappings[i].size)
                found = i;
        if (found < 0 || at + mappings[found].size > ptr + size)
            break;
        covering[n++] = found;
        at += mappings[found].size;
    }
    bool ok = at == ptr + size;
    for (int k = 0; ok && k < n; k++)
        if (!mappings[covering[k]].accessible) {
            mappings[covering[k]].accessible = true;
            counters.accessible_bytes += (long)mappings[covering[k]].size;
        }
    pthread_mutex_unlock(&mock_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- streams and events ---- */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    (void)Flags;
    MOCK_ENTRY("cuStreamCreate", true);
    pthread_mutex_lock(&mock_lock);
    int slot = -1;
    for (int i = 3; i < MOCK_MAX_STREAMS && slot < 0; i++)
        if (!streams[i].created)
            slot = i;
    if (slot >= 0) {
        streams[slot].created = true;
        streams[slot].held = false;
        streams[slot].wait_addr = NULL;
        counters.live_streams++;
    }
    pthread_mutex_unlock(&mock_lock);
    if (slot < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = (CUstream)(uintptr_t)slot;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    MOCK_ENTRY("cuStreamDestroy", true);
    pthread_mutex_lock(&mock_lock);
    int i = stream_index(hStream);
    bool ok = i >= 3;
    if (ok) {
        streams[i].created = false;
        counters.live_streams--;
    }
    pthread_mutex_unlock(&mock_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    MOCK_ENTRY("cuEventCreate", true);
    if (!(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE; /* coop never needs timing */
    pthread_mutex_lock(&mock_lock);
    mock_event *e = free_events;
    if (e)
        free_events = e->next_free;
    pthread_mutex_unlock(&mock_lock);
    if (!e)
        e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *e = (mock_event){.live = true};
    *phEvent = (CUevent)(void *)e;
    __atomic_add_fetch(&counters.live_events, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&counters.event_creates, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* Re-recording overwrites what the event captured. */
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    MOCK_ENTRY("cuEventRecord", true);
    mock_event *e = (mock_event *)(void *)hEvent;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    int s = stream_index(hStream);
    if (!e || !e->live || s < 0) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        e->recorded = true;
        e->stream = hStream;
        e->generation = streams[s].held ? streams[s].generation : 0;
        e->wait_addr = wait_pending(s) ? streams[s].wait_addr : NULL;
        e->wait_value = streams[s].wait_value;
        e->seq = ++work_seq;
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* Whether the stream e was recorded on is still held in the hold e was
 * recorded in (s: the stream's index, or -1). */
static bool event_in_hold(const mock_event *e, int s)
{
    return s >= 0 && streams[s].held && streams[s].generation == e->generation;
}

/* Whether e was recorded behind a cuStreamWaitValue32 whose word has not
 * been written yet. */
static bool event_behind_wait(const mock_event *e)
{
    return e->wait_addr && !word_reached(e->wait_addr, e->wait_value);
}

/* CUDA_ERROR_NOT_READY while the work the event captured is incomplete: its
 * stream is still held in the generation it was recorded in. */
CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    MOCK_ENTRY("cuEventQuery", true);
    mock_event *e = (mock_event *)(void *)hEvent;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    if (!e || !e->live) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (e->recorded) {
        int s = stream_index(e->stream);
        if (streams_held || (e->generation && event_in_hold(e, s)) || event_behind_wait(e))
            rc = CUDA_ERROR_NOT_READY;
        else
            mark_done(s, e->seq);
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* Waits for the event's work: a held stream's kernels finish (its hold, or
 * the hold of every stream, ends); a wait on a host word never would. */
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    MOCK_ENTRY("cuEventSynchronize", true);
    mock_event *e = (mock_event *)(void *)hEvent;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    counters.event_waits++;
    if (!e || !e->live) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (e->recorded) {
        int s = stream_index(e->stream);
        if (event_behind_wait(e))
            rc = wait_host_word("cuEventSynchronize", s, e->wait_addr, e->wait_value);
        if (rc == CUDA_SUCCESS) {
            streams_held = false;
            if (event_in_hold(e, s))
                streams[s].held = false;
            mark_done(s, e->seq);
        }
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* An incomplete event may be destroyed: "the call does not block". */
CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    MOCK_ENTRY("cuEventDestroy", true);
    mock_event *e = (mock_event *)(void *)hEvent;
    pthread_mutex_lock(&mock_lock);
    bool ok = e && e->live;
    if (ok) {
        e->live = false;
        e->next_free = free_events;
        free_events = e;
    }
    pthread_mutex_unlock(&mock_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    __atomic_sub_fetch(&counters.live_events, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* ---- what tests/backend_cuda_test.c needs of a driver besides coop's ---- */

/* Not ready while the stream is held or blocked on a wait. */
CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    MOCK_ENTRY("cuStreamQuery", true);
    pthread_mutex_lock(&mock_lock);
    int s = stream_index(hStream);
    CUresult rc = s < 0                                ? CUDA_ERROR_INVALID_HANDLE
                  : streams[s].held || wait_pending(s) ? CUDA_ERROR_NOT_READY
                                                       : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        mark_done(s, work_seq);
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* A real driver blocks until the stream is idle; the mock cannot (nothing
 * would ever release it), so a blocked stream is reported as
 * CUDA_ERROR_NOT_READY: a deadlock on a device. */
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    CUresult rc = cuStreamQuery(hStream);
    return rc;
}

/* Only the default condition (CU_STREAM_WAIT_VALUE_GEQ), on host memory
 * from cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP. */
CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                     unsigned int flags)
{
    MOCK_ENTRY("cuStreamWaitValue32", true);
    if (flags != CU_STREAM_WAIT_VALUE_GEQ || addr % 4)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mock_lock);
    int s = stream_index(stream);
    bool mapped = false;
    for (int i = 0; i < MOCK_MAX_HOST_ALLOCS && !mapped; i++)
        mapped = host_allocs[i].ptr && host_allocs[i].device_mapped &&
                 addr >= (CUdeviceptr)host_allocs[i].ptr &&
                 addr + 4 <= (CUdeviceptr)host_allocs[i].ptr + host_allocs[i].size;
    CUresult rc = s < 0     ? CUDA_ERROR_INVALID_HANDLE
                  : !mapped ? CUDA_ERROR_INVALID_VALUE
                            : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS && wait_pending(s))
        rc = CUDA_ERROR_NOT_SUPPORTED; /* one wait at a time in the mock */
    if (rc == CUDA_SUCCESS) {
        streams[s].wait_addr = (const volatile uint32_t *)(uintptr_t)addr;
        streams[s].wait_value = value;
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    MOCK_ENTRY("cuMemHostAlloc", true);
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = aligned_alloc(4096, (bytesize + 4095) & ~(size_t)4095);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mock_lock);
    int slot = -1;
    for (int i = 0; i < MOCK_MAX_HOST_ALLOCS && slot < 0; i++)
        if (!host_allocs[i].ptr)
            slot = i;
    if (slot >= 0) {
        host_allocs[slot].ptr = p;
        host_allocs[slot].size = bytesize;
        host_allocs[slot].device_mapped = Flags & CU_MEMHOSTALLOC_DEVICEMAP;
    }
    pthread_mutex_unlock(&mock_lock);
    if (slot < 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    MOCK_ENTRY("cuMemHostGetDevicePointer", true);
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_MAX_HOST_ALLOCS; i++)
        if (host_allocs[i].ptr && host_allocs[i].device_mapped &&
            (char *)p >= (char *)host_allocs[i].ptr &&
            (char *)p < (char *)host_allocs[i].ptr + host_allocs[i].size) {
            *pdptr = (CUdeviceptr)(uintptr_t)p;
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    MOCK_ENTRY("cuMemFreeHost", false);
    bool found = false;
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_MAX_HOST_ALLOCS && !found; i++)
        if (host_allocs[i].ptr == p) {
            host_allocs[i].ptr = NULL;
            found = true;
        }
    pthread_mutex_unlock(&mock_lock);
    if (!found)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

/* Whether the device may read and write [ptr, ptr+size): inside cuMemAlloc
 * allocations or VMM mappings opened by cuMemSetAccess. Caller holds mock_lock. */
static bool device_accessible(CUdeviceptr ptr, size_t size)
{
    CUdeviceptr at = ptr, end = ptr + size;
    while (at < end) {
        int found = -1;
        for (int i = 0; i < MOCK_MAX_MAPPINGS && found < 0; i++)
            if (mappings[i].addr && mappings[i].addr <= at &&
                at - mappings[i].addr < mappings[i].size &&
                (mappings[i].accessible || mappings[i].segment))
                found = i;
        if (found < 0)
            return false;
        at = mappings[found].addr + mappings[found].size;
    }
    return true;
}

/* Work on stream s (an index) using [ptr, +size), unfinished until the
 * stream is seen to finish it. Caller holds mock_lock. */
static void queue_work(int s, CUdeviceptr ptr, size_t size)
{
    if (num_work == cap_work) {
        size_t cap = cap_work ? 2 * cap_work : 256;
        mock_work *grown = realloc(work, cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "mock CUDA driver: out of host memory for queued work\n");
            abort();
        }
        work = grown;
        cap_work = cap;
    }
    work[num_work++] = (mock_work){.stream = s, .ptr = ptr, .size = size, .seq = ++work_seq};
}

/* A kernel a test launches on stream over [ptr, +size) (a test control: no
 * context needed, never failed by injection, not counted as a call): 0, or
 * -1 if the stream is not valid or the range is not wholly mapped and
 * accessible (a kernel would fault there). */
int mock_cuda_launch(CUdeviceptr ptr, size_t size, CUstream stream)
{
    pthread_mutex_lock(&mock_lock);
    int s = stream_index(stream);
    int rc = s < 0 || size == 0 || !device_accessible(ptr, size) ? -1 : 0;
    if (rc == 0)
        queue_work(s, ptr, size);
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

/* Queued work on the stream, using [dstDevice, +N) until the stream is seen
 * to finish it (mock_work). */
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    MOCK_ENTRY("cuMemsetD8Async", true);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    if (stream_index(hStream) < 0)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (N == 0 || !device_accessible(dstDevice, N))
        rc = CUDA_ERROR_INVALID_VALUE; /* a device would fault: CUDA_ERROR_ILLEGAL_ADDRESS */
    else {
        if (num_memsets == MOCK_MAX_MEMSETS) {
            memmove(&memsets[0], &memsets[1], sizeof memsets[0] * (MOCK_MAX_MEMSETS - 1));
            num_memsets--;
        }
        memsets[num_memsets].ptr = dstDevice;
        memsets[num_memsets].size = N;
        memsets[num_memsets].value = uc;
        num_memsets++;
        queue_work(stream_index(hStream), dstDevice, N);
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    MOCK_ENTRY("cuMemcpyDtoH", true);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    if (ByteCount == 0 || !device_accessible(srcDevice, ByteCount)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        unsigned char *out = dstHost;
        memset(out, 0, ByteCount);
        /* each memset's overlap with the range, oldest first so later ones
         * win: one memset call each, not a test per byte and memset (a
         * 128 MiB read-back after 64 page fills took 13 s that way, and
         * remap_check's step on the mock ran past its 60 s under load) */
        CUdeviceptr end = srcDevice + ByteCount;
        for (int k = 0; k < num_memsets; k++) {
            CUdeviceptr lo = memsets[k].ptr > srcDevice ? memsets[k].ptr : srcDevice;
            CUdeviceptr set_end = memsets[k].ptr + memsets[k].size;
            CUdeviceptr hi = set_end < end ? set_end : end;
            if (lo < hi)
                memset(out + (lo - srcDevice), memsets[k].value, (size_t)(hi - lo));
        }
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}
