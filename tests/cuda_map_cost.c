/*
 * Not a test (timings belong in benchmarks): what device 0's driver costs
 * the pool, through tests/cuda_device.h (exits 77 without a driver or
 * device). One JSON line per figure.
 *
 * 1. "map": for each VMM page size of PAGES (MiB, comma-separated; default
 *    the device's granularity) and SIZE in 2 MiB, 64 MiB, 1 GiB and 8 GiB
 *    (those under half the free memory and at least a page), the median
 *    over REPS of
 *      - vmm_first_us: a fresh VMM pool's first coop_malloc of SIZE (one
 *        cuMemCreate + cuMemMap per page, then cuMemSetAccess);
 *      - vmm_cached_us: the block freed and allocated again (nothing mapped);
 *      - vmm_release_us: coop_free + coop_empty_cache (every page unmapped
 *        and released);
 *      - seg_first_us / seg_release_us: the same with a cuMemAlloc segments
 *        pool;
 *      - drv_alloc_us / drv_free_us: cuMemAlloc and cuMemFree of SIZE alone,
 *        the peer (what PyTorch's native allocator calls underneath).
 *    Pool creation and destruction are outside the timings.
 * 2. "vmm_calls": where a VMM mapping's time goes, in the driver alone
 *    (src/cuda_driver.h's entry points, no pool): for 1 GiB (32 pages where
 *    less than 2 GiB is free, as on the mock), cuMemCreate,
 *    cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease, each summed over
 *    the range's handles, with 2 MiB handles (as coop maps) and with one
 *    handle for the whole range; median over REPS, in milliseconds.
 * 3. "held": whether freeing memory waits for a stream that is held busy
 *    (cuStreamWaitValue32 on a host word another thread writes 1 s later)
 *    and never used that memory: cuMemFree of a cuMemAlloc allocation, a
 *    segments pool's empty_cache (its cuMemFree) and a VMM pool's
 *    empty_cache (cuMemUnmap + cuMemRelease). waited is true when the call
 *    returned only after the word was written. The reason the CUDA tests
 *    hold streams with VMM only (tests/cuda_device.h).
 *
 *   tests/cuda_map_cost [REPS [PAGES]]     (default 5, the device's page)
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "coop.h"
#include "cuda_device.h"
#include "cuda_driver.h"

#define MIB (UINT64_C(1) << 20)
#define MAX_REPS 64

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static coop_pool *make_pool(bool use_vmm, uint64_t capacity, uint64_t page)
{
    coop_config c;
    coop_config_default(&c);
    c.backend = COOP_BACKEND_CUDA;
    c.capacity = capacity;
    c.page_size = use_vmm ? page : 0;
    c.use_vmm = use_vmm;
    c.segment_size = 2 * MIB; /* a segment is the request, rounded to pages */
    coop_pool *pool = NULL;
    if (coop_pool_create(&c, &pool) != COOP_OK) {
        fprintf(stderr, "cuda_map_cost: pool: %s\n", coop_last_error());
        exit(1);
    }
    return pool;
}

static void *must_malloc(coop_pool *pool, size_t size)
{
    coop_status st;
    void *p = coop_malloc(pool, size, 0, 0, &st);
    if (!p) {
        fprintf(stderr, "cuda_map_cost: malloc of %zu bytes: %s\n", size, coop_last_error());
        exit(1);
    }
    return p;
}

typedef struct map_times {
    double vmm_first, vmm_cached, vmm_release, seg_first, seg_release, drv_alloc, drv_free;
} map_times;

static map_times measure_once(uint64_t size, uint64_t page)
{
    map_times t;
    coop_pool *vmm = make_pool(true, 2 * size, page);
    double t0 = now_us();
    void *p = must_malloc(vmm, size);
    double t1 = now_us();
    coop_free(vmm, p);
    double t2 = now_us();
    p = must_malloc(vmm, size);
    double t3 = now_us();
    coop_free(vmm, p);
    coop_empty_cache(vmm);
    double t4 = now_us();
    coop_pool_destroy(vmm);
    t.vmm_first = t1 - t0;
    t.vmm_cached = t3 - t2;
    t.vmm_release = t4 - t3;

    coop_pool *seg = make_pool(false, 2 * size, 0);
    t0 = now_us();
    p = must_malloc(seg, size);
    t1 = now_us();
    coop_free(seg, p);
    coop_empty_cache(seg);
    t2 = now_us();
    coop_pool_destroy(seg);
    t.seg_first = t1 - t0;
    t.seg_release = t2 - t1;

    drv_ptr d = 0;
    t0 = now_us();
    drv_result rc = drv.mem_alloc(&d, size);
    t1 = now_us();
    if (rc != 0) {
        fprintf(stderr, "cuda_map_cost: cuMemAlloc of %llu bytes: CUresult %d\n",
                (unsigned long long)size, rc);
        exit(1);
    }
    drv.mem_free(d);
    t2 = now_us();
    t.drv_alloc = t1 - t0;
    t.drv_free = t2 - t1;
    return t;
}

static void measure_map(uint64_t size, uint64_t page, int reps)
{
    double v[7][MAX_REPS];
    measure_once(size, page); /* warm-up, not counted */
    for (int r = 0; r < reps; r++) {
        map_times t = measure_once(size, page);
        double all[7] = {t.vmm_first,   t.vmm_cached, t.vmm_release, t.seg_first,
                         t.seg_release, t.drv_alloc,  t.drv_free};
        for (int k = 0; k < 7; k++)
            v[k][r] = all[k];
    }
    printf("{\"figure\": \"map\", \"size\": %llu, \"page\": %llu, \"pages\": %llu, "
           "\"reps\": %d, "
           "\"vmm_first_us\": %.1f, \"vmm_cached_us\": %.1f, \"vmm_release_us\": %.1f, "
           "\"seg_first_us\": %.1f, \"seg_release_us\": %.1f, \"drv_alloc_us\": %.1f, "
           "\"drv_free_us\": %.1f}\n",
           (unsigned long long)size, (unsigned long long)page, (unsigned long long)(size / page),
           reps, median(v[0], reps), median(v[1], reps), median(v[2], reps), median(v[3], reps),
           median(v[4], reps), median(v[5], reps), median(v[6], reps));
    fflush(stdout);
}

/* ---- the driver's VMM calls alone ---- */

enum { CALL_CREATE, CALL_MAP, CALL_ACCESS, CALL_UNMAP, CALL_RELEASE, NUM_CALLS };
static const char *const call_names[NUM_CALLS] = {"create_ms", "map_ms", "set_access_ms",
                                                  "unmap_ms", "release_ms"};

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "cuda_map_cost: %s failed with CUresult %d\n", #call, rc_);            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* One mapping of size bytes in handles of handle_size: each call's total. */
static void vmm_calls_once(const cuda_driver *d, uint64_t size, uint64_t handle_size,
                           double ms[NUM_CALLS])
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    uint64_t n = size / handle_size;
    CUmemGenericAllocationHandle *handles = calloc(n, sizeof *handles);
    CUdeviceptr base = 0;
    CU_OK(d->fn.cuMemAddressReserve(&base, size, handle_size, 0, 0));
    double t[NUM_CALLS] = {0};
    for (uint64_t i = 0; i < n; i++) {
        double t0 = now_us();
        CU_OK(d->fn.cuMemCreate(&handles[i], handle_size, &prop, 0));
        double t1 = now_us();
        CU_OK(d->fn.cuMemMap(base + i * handle_size, handle_size, 0, handles[i], 0));
        t[CALL_CREATE] += t1 - t0;
        t[CALL_MAP] += now_us() - t1;
    }
    double t0 = now_us();
    CU_OK(d->fn.cuMemSetAccess(base, size, &access, 1));
    t[CALL_ACCESS] = now_us() - t0;
    for (uint64_t i = 0; i < n; i++) {
        double t1 = now_us();
        CU_OK(d->fn.cuMemUnmap(base + i * handle_size, handle_size));
        double t2 = now_us();
        CU_OK(d->fn.cuMemRelease(handles[i]));
        t[CALL_UNMAP] += t2 - t1;
        t[CALL_RELEASE] += now_us() - t2;
    }
    CU_OK(d->fn.cuMemAddressFree(base, size));
    free(handles);
    for (int k = 0; k < NUM_CALLS; k++)
        ms[k] = t[k] / 1e3;
}

static void measure_vmm_calls(uint64_t size, uint64_t handle_size, int reps)
{
    cuda_driver d = {0};
    if (cuda_driver_load(&d) != COOP_OK) {
        fprintf(stderr, "cuda_map_cost: %s\n", coop_last_error());
        exit(1);
    }
    double v[NUM_CALLS][MAX_REPS], once[NUM_CALLS];
    vmm_calls_once(&d, size, handle_size, once); /* warm-up, not counted */
    for (int r = 0; r < reps; r++) {
        vmm_calls_once(&d, size, handle_size, once);
        for (int k = 0; k < NUM_CALLS; k++)
            v[k][r] = once[k];
    }
    printf("{\"figure\": \"vmm_calls\", \"size\": %llu, \"handle\": %llu, \"handles\": %llu, "
           "\"reps\": %d",
           (unsigned long long)size, (unsigned long long)handle_size,
           (unsigned long long)(size / handle_size), reps);
    for (int k = 0; k < NUM_CALLS; k++)
        printf(", \"%s\": %.3f", call_names[k], median(v[k], reps));
    printf("}\n");
    fflush(stdout);
    cuda_driver_unload(&d);
}

/* ---- frees beside a held stream ---- */

typedef struct release_later {
    volatile uint32_t *word;
    int64_t written_at; /* now_us() when the word was written */
} release_later;

static void *write_word_later(void *arg)
{
    release_later *r = arg;
    nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
    __atomic_store_n(&r->written_at, (int64_t)now_us(), __ATOMIC_SEQ_CST);
    __atomic_store_n(r->word, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

typedef enum { FREE_DRIVER, FREE_SEGMENTS_POOL, FREE_VMM_POOL } free_kind;
static const char *const free_names[] = {"cuMemFree", "segments_empty_cache", "vmm_empty_cache"};

static void measure_held(free_kind kind)
{
    void *words = NULL;
    drv_ptr word_device = 0;
    drv_stream held_stream = NULL;
    if (drv.host_alloc(&words, 4096, DRV_MEMHOSTALLOC_PORTABLE | DRV_MEMHOSTALLOC_DEVICEMAP) ||
        drv.host_device_pointer(&word_device, words, 0) ||
        drv.stream_create(&held_stream, DRV_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "cuda_map_cost: cannot set up a held stream\n");
        exit(1);
    }
    volatile uint32_t *word = words;
    *word = 0;
    coop_pool *pool =
        kind == FREE_DRIVER ? NULL : make_pool(kind == FREE_VMM_POOL, 64 * MIB, device_page);
    drv_ptr d = 0;
    void *p = NULL;
    if (pool) {
        p = must_malloc(pool, 8 * MIB);
        coop_free(pool, p); /* cached on stream 0, unmapped or freed below */
    } else if (drv.mem_alloc(&d, 8 * MIB) != 0) {
        fprintf(stderr, "cuda_map_cost: cuMemAlloc failed\n");
        exit(1);
    }
    if (drv.wait_value32(held_stream, word_device, 1, DRV_STREAM_WAIT_VALUE_GEQ) != 0) {
        printf("{\"figure\": \"held\", \"free\": \"%s\", \"skipped\": \"cuStreamWaitValue32 "
               "failed\"}\n",
               free_names[kind]);
        __atomic_store_n(word, 1, __ATOMIC_SEQ_CST);
    } else {
        release_later r = {.word = word};
        pthread_t writer;
        pthread_create(&writer, NULL, write_word_later, &r);
        double t0 = now_us();
        if (pool)
            coop_empty_cache(pool);
        else
            drv.mem_free(d);
        double t1 = now_us();
        pthread_join(writer, NULL);
        double written = (double)__atomic_load_n(&r.written_at, __ATOMIC_SEQ_CST);
        printf("{\"figure\": \"held\", \"free\": \"%s\", \"call_ms\": %.3f, \"waited\": %s}\n",
               free_names[kind], (t1 - t0) / 1e3, t1 >= written ? "true" : "false");
    }
    fflush(stdout);
    drv.stream_synchronize(held_stream);
    if (pool)
        coop_pool_destroy(pool);
    drv.stream_destroy(held_stream);
    drv.host_free(words);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    uint64_t pages[8] = {0};
    int num_pages = 0;
    for (char *list = argc > 2 ? argv[2] : NULL, *end; list && *list; list = end + (*end == ',')) {
        long mib = strtol(list, &end, 10);
        if (end == list || (*end && *end != ',') || mib < 1 || mib > 1024 || num_pages == 8) {
            num_pages = -1;
            break;
        }
        pages[num_pages++] = (uint64_t)mib * MIB;
    }
    if (reps < 1 || reps > MAX_REPS || argc > 3 || num_pages < 0) {
        fprintf(stderr,
                "usage: %s [REPS [PAGES]]  (REPS 1 .. %d, default 5; PAGES: up to 8 page sizes "
                "in MiB, comma-separated, default the device's)\n",
                argv[0], MAX_REPS);
        return 2;
    }
    int open = cuda_device_open("cuda_map_cost");
    if (open != 0)
        return open;
    if (num_pages == 0)
        pages[num_pages++] = device_page;
    uint64_t free_bytes = device_free_bytes();
    const uint64_t sizes[] = {2 * MIB, 64 * MIB, 1024 * MIB, 8192 * MIB};
    for (int p = 0; p < num_pages; p++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            if (sizes[i] <= free_bytes / 2 && sizes[i] >= pages[p])
                measure_map(sizes[i], pages[p], reps);
    uint64_t calls_size = free_bytes / 2 >= 1024 * MIB ? 1024 * MIB : 32 * device_page;
    measure_vmm_calls(calls_size, device_page, reps);
    measure_vmm_calls(calls_size, calls_size, reps);
    measure_held(FREE_DRIVER);
    measure_held(FREE_SEGMENTS_POOL);
    measure_held(FREE_VMM_POOL);
    cuda_device_close();
    return 0;
}
