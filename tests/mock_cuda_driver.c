/*
 * A mock CUDA driver (libmockcuda.so) for testing backend_cuda.c without a
 * GPU: the entry points coop loads, under the versioned names cuda.h maps
 * them to, acting on this process's address space (PROT_NONE, never touched).
 *
 * It checks what a real driver would refuse or what would corrupt a real
 * device: calls without a current context, unmapping or freeing while work
 * is queued (an event was recorded and no cuCtxSynchronize followed),
 * mappings that do not match exactly, leaked handles and events. Tests read
 * its counters and arm failures through mock_cuda_* functions (dlsym).
 */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MOCK_EXPORT __attribute__((visibility("default")))
#define MOCK_MAX_MAPPINGS 4096
#define MOCK_GRANULE (2u << 20)

typedef struct mock_counters {
    long mapped_bytes;     /* physical bytes currently mapped */
    long live_handles;     /* cuMemCreate minus cuMemRelease */
    long live_events;      /* cuEventCreate minus cuEventDestroy */
    long live_segments;    /* cuMemAlloc minus cuMemFree */
    long syncs;            /* cuCtxSynchronize calls */
    long unsafe_releases;  /* unmap / cuMemFree while work was queued */
    long no_context;       /* calls made without a current context */
    long retained;         /* primary context references */
    long accessible_bytes; /* cuMemMap'ed bytes opened by cuMemSetAccess */
    long access_calls;     /* cuMemSetAccess calls */
    long event_creates;    /* cuEventCreate calls */
} mock_counters;

static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static mock_counters counters;
static long physical_limit = 1l << 30; /* bytes cuMemCreate + cuMemAlloc may hand out */
static bool work_queued;               /* an event was recorded since the last sync */
static bool streams_held;              /* events stay incomplete */
static char fail_name[64];             /* the Nth next call of this entry point fails */
static int fail_countdown;
static CUresult fail_rc;

static struct {
    CUdeviceptr addr;
    size_t size;
    bool accessible; /* cuMemSetAccess covered it (VMM mappings) */
} mappings[MOCK_MAX_MAPPINGS];

static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;

/* ---- controls for tests ---- */

MOCK_EXPORT void mock_cuda_counters(mock_counters *out);
MOCK_EXPORT void mock_cuda_fail_nth(const char *entry_point, int nth, int rc);
MOCK_EXPORT void mock_cuda_hold_streams(bool hold);
MOCK_EXPORT void mock_cuda_set_memory(long bytes);

void mock_cuda_counters(mock_counters *out)
{
    pthread_mutex_lock(&mock_lock);
    *out = counters;
    pthread_mutex_unlock(&mock_lock);
}

void mock_cuda_fail_nth(const char *entry_point, int nth, int rc)
{
    pthread_mutex_lock(&mock_lock);
    strncpy(fail_name, entry_point, sizeof fail_name - 1);
    fail_countdown = nth;
    fail_rc = (CUresult)rc;
    pthread_mutex_unlock(&mock_lock);
}

void mock_cuda_hold_streams(bool hold)
{
    streams_held = hold;
}

void mock_cuda_set_memory(long bytes)
{
    physical_limit = bytes;
}

/* An armed failure for this entry point, consumed once. */
static CUresult injected(const char *name)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_lock);
    if (fail_name[0] && strcmp(fail_name, name) == 0 && --fail_countdown == 0) {
        rc = fail_rc;
        fail_name[0] = '\0';
    }
    pthread_mutex_unlock(&mock_lock);
    return rc;
}

static bool has_context(void)
{
    if (ctx_depth > 0 && ctx_stack[ctx_depth - 1])
        return true;
    __atomic_add_fetch(&counters.no_context, 1, __ATOMIC_RELAXED);
    return false;
}

#define MOCK_ENTRY(name, needs_ctx)                                                                \
    do {                                                                                           \
        CUresult rc_ = injected(name);                                                             \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            return rc_;                                                                            \
        if ((needs_ctx) && !has_context())                                                         \
            return CUDA_ERROR_INVALID_CONTEXT;                                                     \
    } while (0)

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
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    (void)Flags;
    const char *no_device = getenv("MOCK_CUDA_NO_DEVICE");
    if (no_device && no_device[0] == '1')
        return CUDA_ERROR_NO_DEVICE;
    return injected("cuInit");
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    *count = 2;
    return injected("cuDeviceGetCount");
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    MOCK_ENTRY("cuDeviceGet", false);
    if (ordinal < 0 || ordinal >= 2)
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

/* Fake context handles: never dereferenced by the backend. */
static char primary_contexts[2];

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    MOCK_ENTRY("cuDevicePrimaryCtxRetain", false);
    *pctx = (CUcontext)(void *)&primary_contexts[dev];
    __atomic_add_fetch(&counters.retained, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    (void)dev;
    __atomic_sub_fetch(&counters.retained, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    *pctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    if (ctx_depth == 16)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pctx = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    MOCK_ENTRY("cuCtxSynchronize", true);
    pthread_mutex_lock(&mock_lock);
    counters.syncs++;
    work_queued = false;
    pthread_mutex_unlock(&mock_lock);
    return CUDA_SUCCESS;
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

static void note_release(void)
{
    pthread_mutex_lock(&mock_lock);
    if (work_queued)
        counters.unsafe_releases++;
    pthread_mutex_unlock(&mock_lock);
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    MOCK_ENTRY("cuMemAlloc", true);
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!take_physical((long)bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = reserve_aligned(bytesize, 512);
    if (!p) {
        give_physical((long)bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* remember the size in the mapping table to check cuMemFree */
    pthread_mutex_lock(&mock_lock);
    for (int i = 0; i < MOCK_MAX_MAPPINGS; i++)
        if (!mappings[i].addr) {
            mappings[i].addr = (CUdeviceptr)p;
            mappings[i].size = bytesize;
            break;
        }
    counters.live_segments++;
    pthread_mutex_unlock(&mock_lock);
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
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
            mappings[i].addr = 0;
            mappings[i].accessible = false;
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
    note_release();
    give_physical((long)size);
    munmap((void *)dptr, size);
    __atomic_sub_fetch(&counters.live_segments, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    (void)option;
    MOCK_ENTRY("cuMemGetAllocationGranularity", false);
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = MOCK_GRANULE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    (void)addr;
    (void)flags;
    MOCK_ENTRY("cuMemAddressReserve", true);
    if (size == 0 || size % MOCK_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = reserve_aligned(size, alignment ? alignment : MOCK_GRANULE);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    MOCK_ENTRY("cuMemAddressFree", true);
    munmap((void *)ptr, size);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)prop;
    (void)flags;
    MOCK_ENTRY("cuMemCreate", true);
    if (size == 0 || size % MOCK_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!take_physical((long)size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t *record = malloc(sizeof *record);
    if (!record) {
        give_physical((long)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *record = size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)record;
    __atomic_add_fetch(&counters.live_handles, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    MOCK_ENTRY("cuMemRelease", true);
    size_t *record = (size_t *)(uintptr_t)handle;
    give_physical((long)*record);
    free(record);
    __atomic_sub_fetch(&counters.live_handles, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    (void)flags;
    MOCK_ENTRY("cuMemMap", true);
    if (offset != 0 || size != *(size_t *)(uintptr_t)handle || ptr % MOCK_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_lock);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < MOCK_MAX_MAPPINGS; i++)
        if (mappings[i].addr == ptr) {
            rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
            break;
        }
    for (int i = 0; i < MOCK_MAX_MAPPINGS && rc == CUDA_ERROR_OUT_OF_MEMORY; i++)
        if (!mappings[i].addr) {
            mappings[i].addr = ptr;
            mappings[i].size = size;
            mappings[i].accessible = false;
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
    note_release();
    return CUDA_SUCCESS;
}

/* As the driver documents it: the range must be fully mapped, and may span
 * several mappings (one per page here); all of them become accessible. */
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    MOCK_ENTRY("cuMemSetAccess", true);
    if (count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE || size == 0)
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

/* ---- events ---- */

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    MOCK_ENTRY("cuEventCreate", true);
    if (!(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE; /* coop never needs timing */
    *phEvent = (CUevent)malloc(16);
    __atomic_add_fetch(&counters.live_events, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&counters.event_creates, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    (void)hEvent;
    (void)hStream;
    MOCK_ENTRY("cuEventRecord", true);
    pthread_mutex_lock(&mock_lock);
    work_queued = true; /* the stream has (pretend) kernels queued */
    pthread_mutex_unlock(&mock_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    (void)hEvent;
    MOCK_ENTRY("cuEventQuery", true);
    return streams_held ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    MOCK_ENTRY("cuEventDestroy", true);
    free(hEvent);
    __atomic_sub_fetch(&counters.live_events, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
