/*
 * The PyTorch ABI with more than one device (host backend: each pool is a
 * simulated device of its own). Every device's pool, capacity, fraction,
 * statistics, failed-malloc count and history are its own: one device's
 * activity, and misuse naming a device, must not show in another's. The
 * ABI's state is per process (init's count, the configuration fixed by the
 * first pool), so each case runs in a child forked from a parent that never
 * calls the ABI, as in torch_abi_fresh_test.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cases_in_children.h"
#include "coop.h"
#include "test_seed.h"
#include "torch/torch_abi.h"

#define MIB (1ull << 20)
#define STREAM(n) ((void *)(uintptr_t)(n))

/* Seconds a case may run (a lock left held must fail it, not hang). */
#define CASE_TIME_LIMIT 60

/* What can be seen of one device from outside: its pool's statistics and
 * check, its failed mallocs, and its snapshot (blocks and events). */
typedef struct device_view {
    coop_pool *pool;
    coop_stats stats;
    uint64_t failed;
    char failure[512];
    size_t num_blocks, num_events;
    coop_block_info blocks[64];
    coop_torch_event events[64];
} device_view;

static void view(int device, device_view *v)
{
    memset(v, 0, sizeof *v);
    v->pool = coop_torch_pool(device);
    if (v->pool) {
        coop_get_stats(v->pool, &v->stats);
        assert_int_equal(coop_pool_check(v->pool), COOP_OK);
    }
    v->failed = coop_torch_failed_mallocs(device, v->failure, sizeof v->failure);
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(device, &snap), COOP_OK);
    assert_int_equal(snap->device, device);
    assert_true(snap->num_blocks <= 64 && snap->num_events <= 64);
    v->num_blocks = snap->num_blocks;
    v->num_events = snap->num_events;
    if (snap->num_blocks)
        memcpy(v->blocks, snap->blocks, snap->num_blocks * sizeof *snap->blocks);
    for (size_t i = 0; i < snap->num_events; i++) {
        assert_int_equal(snap->events[i].device, device); /* no other device's event */
        v->events[i] = snap->events[i];
    }
    coop_torch_snapshot_free(snap);
}

/* Fails unless device's view is still before (field by field: the structs
 * have padding). */
static void assert_unchanged(int device, const device_view *before)
{
    device_view now;
    view(device, &now);
    const coop_stats *a = &before->stats, *b = &now.stats;
    if (now.pool != before->pool || a->capacity != b->capacity ||
        a->allocation.current != b->allocation.current ||
        a->allocation.allocated != b->allocation.allocated ||
        a->allocation.freed != b->allocation.freed ||
        a->reserved_bytes.current != b->reserved_bytes.current ||
        a->reserved_bytes.peak != b->reserved_bytes.peak ||
        a->allocated_bytes.peak != b->allocated_bytes.peak ||
        a->active.current != b->active.current || a->num_ooms != b->num_ooms ||
        a->num_maps != b->num_maps || a->num_unmaps != b->num_unmaps ||
        a->free_bytes != b->free_bytes || now.failed != before->failed ||
        strcmp(now.failure, before->failure) != 0 || now.num_blocks != before->num_blocks ||
        now.num_events != before->num_events)
        fail_msg("device %d changed: capacity %ju -> %ju, allocations %jd -> %jd, mapped %jd -> "
                 "%jd, ooms %ju -> %ju, failed mallocs %ju -> %ju, blocks %zu -> %zu, events "
                 "%zu -> %zu",
                 device, (uintmax_t)a->capacity, (uintmax_t)b->capacity,
                 (intmax_t)a->allocation.current, (intmax_t)b->allocation.current,
                 (intmax_t)a->reserved_bytes.current, (intmax_t)b->reserved_bytes.current,
                 (uintmax_t)a->num_ooms, (uintmax_t)b->num_ooms, (uintmax_t)before->failed,
                 (uintmax_t)now.failed, before->num_blocks, now.num_blocks, before->num_events,
                 now.num_events);
    for (size_t i = 0; i < now.num_blocks; i++) {
        const coop_block_info *x = &before->blocks[i], *y = &now.blocks[i];
        if (x->address != y->address || x->size != y->size || x->state != y->state ||
            x->stream != y->stream)
            fail_msg("device %d: block %zu changed", device, i);
    }
    for (size_t i = 0; i < now.num_events; i++) {
        const coop_torch_event *x = &before->events[i], *y = &now.events[i];
        if (x->address != y->address || x->size != y->size || x->action != y->action ||
            x->time_us != y->time_us)
            fail_msg("device %d: event %zu changed", device, i);
    }
}

static coop_stats stats_of(int device)
{
    coop_stats s;
    coop_get_stats(coop_torch_pool(device), &s);
    return s;
}

/* The ABI's last error, which must contain each of the NULL-terminated
 * words (and the one before must differ: a new error was reported). */
static void assert_new_error(const char *before, ...)
{
    char buf[1024];
    coop_torch_last_error(buf, sizeof buf);
    if (strcmp(buf, before) == 0)
        fail_msg("no new error after '%s'", before);
    va_list ap;
    va_start(ap, before);
    for (const char *word = va_arg(ap, const char *); word; word = va_arg(ap, const char *))
        if (!strstr(buf, word))
            fail_msg("'%s' not in the error '%s'", word, buf);
    va_end(ap);
}

static void last_error(char *buf, size_t size)
{
    coop_torch_last_error(buf, size);
}

/* Everything a device does that has a per-device result, on device d:
 * allocations (one on another stream, freed pending then completed), an
 * out-of-memory, a fraction below the live bytes, frees. Leaves one block
 * more live and a limit of half the capacity. */
static void exercise(int d)
{
    int64_t live = coop_torch_pool(d) ? stats_of(d).allocation.current : 0;
    void *a = coop_torch_malloc(4 * MIB, d, STREAM(1));
    void *b = coop_torch_malloc(3000, d, STREAM(1));
    void *c = coop_torch_malloc(MIB, d, STREAM(2));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    coop_torch_record_stream(b, STREAM(2));
    coop_torch_free(b, 3000, d, STREAM(1)); /* pending on stream 2 */
    char before[1024], name[64];
    coop_torch_last_error(before, sizeof before);
    assert_null(coop_torch_malloc(65 * MIB, d, STREAM(1)));
    snprintf(name, sizeof name, "malloc of %llu bytes on device %d", 65 * MIB, d);
    assert_new_error(before, name, "out of memory", NULL);
    coop_torch_last_error(before, sizeof before);
    coop_torch_record_stream((char *)a + 512, STREAM(2)); /* inside a: found in d's pool */
    snprintf(name, sizeof name, "record_stream on device %d", d);
    assert_new_error(before, name, "inside the block", NULL);
    coop_torch_memory_fraction(0.5, d);
    assert_null(coop_torch_malloc(40 * MIB, d, STREAM(1)));
    assert_int_equal(coop_torch_forget_stream(STREAM(7)), COOP_OK);
    coop_torch_free(c, MIB, d, STREAM(2));
    coop_torch_free(a, 4 * MIB, d, STREAM(1));
    coop_torch_malloc(2 * MIB, d, STREAM(1)); /* completes b; leaves one block */
    assert_int_equal(stats_of(d).capacity, 32 * MIB);
    assert_int_equal(stats_of(d).allocation.current, live + 1);
}

/* Pools, capacity, fraction, statistics, failed mallocs and history of one
 * device are untouched by everything another device does, either way. */
static void test_devices_are_independent(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:2M,history:64"), COOP_OK);
    coop_torch_init(4);
    void *keep = coop_torch_malloc(MIB, 1, STREAM(3));
    assert_non_null(keep);
    device_view one, three;
    view(1, &one);
    view(3, &three); /* no pool yet */
    assert_null(three.pool);
    exercise(0);
    assert_unchanged(1, &one);
    assert_unchanged(3, &three);

    /* device 0 now holds a limit, a failure and events; device 1 does the
     * same, and device 0 must not see it */
    device_view zero;
    view(0, &zero);
    assert_int_equal(zero.failed, 2);
    exercise(1);
    assert_unchanged(0, &zero);
    assert_unchanged(3, &three);
    assert_int_equal(coop_torch_failed_mallocs(1, NULL, 0), 2);

    /* the configuration's capacity is each device's: 64 MiB each, not
     * shared (a pool of its own for device 3 makes 48 MiB at once) */
    void *big = coop_torch_malloc(48 * MIB, 3, STREAM(1));
    assert_non_null(big);
    assert_int_equal(stats_of(3).capacity, 64 * MIB);
    assert_unchanged(0, &zero);

    /* empty_cache is torch's reset hook, for every device: each pool gives
     * back its own free pages (device 3 has none), and nothing live moves */
    coop_stats was[4];
    for (int d = 0; d < 4; d++)
        was[d] = stats_of(d);
    coop_torch_empty_cache();
    for (int d = 0; d < 4; d++) {
        coop_stats s = stats_of(d);
        assert_int_equal(s.allocated_bytes.current, was[d].allocated_bytes.current);
        assert_true(s.reserved_bytes.current <= was[d].reserved_bytes.current);
        assert_int_equal(s.capacity, was[d].capacity);
        if (d < 2) /* exercise left free pages */
            assert_true(s.reserved_bytes.current < was[d].reserved_bytes.current);
    }
    assert_int_equal(stats_of(3).reserved_bytes.current, 48 * MIB);
    assert_int_equal(stats_of(3).allocated_bytes.current, 48 * MIB);
    coop_torch_free(big, 48 * MIB, 3, STREAM(1));
    coop_torch_free(keep, MIB, 1, STREAM(3));
}

/* A fraction is per device, before its pool exists and after; a bad one
 * (outside [0, 1], NaN, infinite) or one for a device that is not there
 * names both, and changes nothing on any device: in particular it is not
 * left pending for a pool made later. */
static void test_fraction_per_device(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:2M"), COOP_OK);
    coop_torch_init(2);
    coop_torch_memory_fraction(0.25, 1); /* before device 1's pool: pending */
    void *p0 = coop_torch_malloc(MIB, 0, STREAM(0));
    void *p1 = coop_torch_malloc(MIB, 1, STREAM(0));
    assert_non_null(p0);
    assert_non_null(p1);
    assert_int_equal(stats_of(0).capacity, 64 * MIB);
    assert_int_equal(stats_of(1).capacity, 16 * MIB);
    coop_torch_memory_fraction(0.5, 0); /* after device 0's */
    assert_int_equal(stats_of(0).capacity, 32 * MIB);
    assert_int_equal(stats_of(1).capacity, 16 * MIB);

    device_view zero, one;
    view(0, &zero);
    view(1, &one);
    const double bad[] = {-0.5, 1.5, NAN, -NAN, INFINITY, -INFINITY};
    char before[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        last_error(before, sizeof before);
        coop_torch_memory_fraction(bad[i], 1);
        assert_new_error(before, "memory fraction", "device 1", "[0, 1]", NULL);
    }
    const int devices[] = {-1, 2, 3, 63, 64, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "device %d", devices[i]);
        last_error(before, sizeof before);
        coop_torch_memory_fraction(0.5, devices[i]);
        assert_new_error(before, name, "devices are 0..1", NULL);
    }
    assert_unchanged(0, &zero);
    assert_unchanged(1, &one);
    /* the refused fraction for device 3 was not kept: its pool, once the
     * count allows it, has the whole capacity */
    coop_torch_init(4);
    void *p3 = coop_torch_malloc(MIB, 3, STREAM(0));
    assert_non_null(p3);
    assert_int_equal(stats_of(3).capacity, 64 * MIB);
    coop_torch_free(p3, MIB, 3, STREAM(0));
    coop_torch_free(p0, MIB, 0, STREAM(0));
    coop_torch_free(p1, MIB, 1, STREAM(0));
}

/* A pointer freed with the wrong device number, one out of range, or one
 * without a pool: an error naming the device and the pointer (and the
 * device whose pool holds it), a FOREIGN_PTR / INVALID kind on stderr
 * once, and no device changes: the block stays allocated where it was,
 * and no history event is recorded anywhere. */
static void test_free_with_the_wrong_device(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:2M,history:64"), COOP_OK);
    coop_torch_init(8);
    void *a = coop_torch_malloc(4 * MIB, 0, STREAM(1));
    void *b = coop_torch_malloc(MIB, 1, STREAM(1));
    assert_non_null(a);
    assert_non_null(b);
    char ptr[32];
    snprintf(ptr, sizeof ptr, "%p", a);
    device_view zero, one;
    view(0, &zero);
    view(1, &one);

    const int devices[] = {1, 5, 7, -1, 8, 63, 64, INT_MIN, INT_MAX};
    char before[1024];
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "device %d", devices[i]);
        last_error(before, sizeof before);
        coop_torch_free(a, 4 * MIB, devices[i], STREAM(1));
        assert_new_error(before, name, ptr, "device 0's pool", NULL);
        assert_unchanged(0, &zero);
        assert_unchanged(1, &one);
    }
    /* a pointer no device's pool holds: named, with no owner */
    int local;
    snprintf(ptr, sizeof ptr, "%p", (void *)&local);
    last_error(before, sizeof before);
    coop_torch_free(&local, 4, 1, STREAM(1));
    assert_new_error(before, "device 1", ptr, NULL);
    char buf[1024];
    last_error(buf, sizeof buf);
    assert_null(strstr(buf, "'s pool"));
    assert_unchanged(0, &zero);
    assert_unchanged(1, &one);
    /* the right device, a pointer inside its block: refused by that pool,
     * which is not named as another holder */
    char *inside = (char *)a + 512;
    snprintf(ptr, sizeof ptr, "%p", (void *)inside);
    last_error(before, sizeof before);
    coop_torch_free(inside, 4, 0, STREAM(1));
    assert_new_error(before, "device 0", ptr, "inside", NULL);
    last_error(buf, sizeof buf);
    assert_null(strstr(buf, "'s pool"));
    assert_unchanged(0, &zero);
    /* and the right device frees it */
    coop_torch_free(a, 4 * MIB, 0, STREAM(1));
    assert_int_equal(stats_of(0).allocation.current, 0);
    coop_torch_free(b, MIB, 1, STREAM(1));
    assert_int_equal(stats_of(1).allocation.current, 0);
}

/* init with another count: growing is fine, and so is shrinking past
 * devices without a pool; a count that would leave out a device that has a
 * pool is refused (its blocks could no longer be freed), naming it, and
 * the count stays. */
static void test_init_count_changes(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M"), COOP_OK);
    coop_torch_init(8);
    coop_torch_init(8); /* the same count again: nothing to say */
    assert_int_equal(coop_torch_last_error(NULL, 0), 0);
    coop_torch_init(4); /* no pool yet: any count */
    coop_torch_init(8);
    void *p = coop_torch_malloc(4096, 5, STREAM(0));
    assert_non_null(p);
    device_view five;
    view(5, &five);
    char before[1024] = "";
    coop_torch_init(4);
    assert_new_error(before, "device count of 4", "device 5 has a pool", "devices stay 0..7", NULL);
    /* a count of 5 leaves device 5 out too */
    last_error(before, sizeof before);
    coop_torch_init(5);
    assert_new_error(before, "device count of 5", "device 5 has a pool", "devices stay 0..7", NULL);
    /* the count stayed 8: device 5 frees, device 7 allocates, 8 is refused */
    assert_unchanged(5, &five);
    void *q = coop_torch_malloc(4096, 7, STREAM(0));
    assert_non_null(q);
    last_error(before, sizeof before);
    assert_null(coop_torch_malloc(4096, 8, STREAM(0)));
    assert_new_error(before, "device 8", "devices are 0..7", NULL);
    coop_torch_free(p, 4096, 5, STREAM(0));
    assert_int_equal(stats_of(5).allocation.current, 0);
    /* down to the highest device with a pool, plus one: allowed */
    coop_torch_init(8);
    last_error(before, sizeof before);
    coop_torch_init(16);
    coop_torch_init(8);
    char now[1024];
    last_error(now, sizeof now);
    assert_string_equal(now, before);
    coop_torch_free(q, 4096, 7, STREAM(0));
    /* 0 and out of range change nothing */
    coop_torch_init(0);
    coop_torch_init(-3);
    coop_torch_init(65);
    q = coop_torch_malloc(4096, 7, STREAM(0));
    assert_non_null(q);
    assert_null(coop_torch_malloc(4096, 8, STREAM(0)));
    coop_torch_free(q, 4096, 7, STREAM(0));
}

/* Thread i works on device i: mallocs, record_stream, frees, fractions,
 * snapshots and out-of-memory failures; the last thread empties the cache
 * meanwhile. Run under ThreadSanitizer in CI. */
typedef struct worker {
    int device;
    unsigned seed;
    uint64_t failed; /* mallocs that returned NULL */
    const char *error;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    void *live[16] = {0};
    size_t sizes[16] = {0};
    for (int i = 0; i < 2000; i++) {
        unsigned slot = (unsigned)rand_r(&w->seed) % 16;
        if (live[slot]) {
            if (slot % 3 == 0)
                coop_torch_record_stream(live[slot], STREAM(9 + w->device));
            coop_torch_free(live[slot], sizes[slot], w->device, STREAM(1));
            live[slot] = NULL;
        } else {
            /* now and then larger than the device: a counted failure */
            sizes[slot] = i % 97 == 0 ? 65 * MIB : 1 + (size_t)rand_r(&w->seed) % (256 * 1024);
            live[slot] = coop_torch_malloc(sizes[slot], w->device, STREAM(1));
            if (!live[slot]) {
                w->failed++;
                if (sizes[slot] != 65 * MIB) {
                    w->error = "a malloc that fits failed";
                    return NULL;
                }
            }
        }
        if (i % 250 == 0) {
            coop_torch_memory_fraction(i % 500 ? 0.75 : 1.0, w->device);
            coop_torch_snapshot *snap = NULL;
            if (coop_torch_snapshot_take(w->device, &snap) != COOP_OK) {
                w->error = "a snapshot failed";
                return NULL;
            }
            for (size_t e = 0; e < snap->num_events; e++)
                if (snap->events[e].device != w->device)
                    w->error = "another device's event in the history";
            coop_torch_snapshot_free(snap);
        }
    }
    for (unsigned slot = 0; slot < 16; slot++)
        if (live[slot])
            coop_torch_free(live[slot], sizes[slot], w->device, STREAM(1));
    return NULL;
}

static void *empty_caches(void *arg)
{
    atomic_int *stop = arg;
    while (!atomic_load(stop))
        coop_torch_empty_cache();
    return NULL;
}

static void test_two_devices_from_two_threads(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:64K,history:256"),
                     COOP_OK);
    coop_torch_init(2);
    unsigned seed = (unsigned)test_seed("torch_devices_test", 0);
    worker w[2] = {{.device = 0, .seed = seed}, {.device = 1, .seed = seed + 1}};
    pthread_t t[2], cleaner;
    atomic_int stop = 0;
    assert_int_equal(pthread_create(&cleaner, NULL, empty_caches, &stop), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(cleaner, NULL);
    for (int d = 0; d < 2; d++) {
        if (w[d].error)
            fail_msg("device %d: %s", d, w[d].error);
        assert_true(w[d].failed > 0);
        assert_int_equal(coop_torch_failed_mallocs(d, NULL, 0), w[d].failed);
        assert_int_equal(stats_of(d).allocation.current, 0);
        assert_int_equal(coop_pool_check(coop_torch_pool(d)), COOP_OK);
    }
}

int main(void)
{
    /* each case's own configuration, whatever the environment says */
    unsetenv("COOP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_are_independent),
        cmocka_unit_test(test_fraction_per_device),
        cmocka_unit_test(test_free_with_the_wrong_device),
        cmocka_unit_test(test_init_count_changes),
        cmocka_unit_test(test_two_devices_from_two_threads),
    };
    return cases_in_children("torch_devices_test", tests, sizeof tests / sizeof tests[0],
                             CASE_TIME_LIMIT);
}
