/*
 * The PyTorch ABI in C (also under the sanitizers, where the Python tests
 * cannot load libcoop.so): configuration, pools per device, history ring
 * wrap-around, snapshots, misuse, threads. The ABI's state is per process:
 * the tests run in order on one configuration.
 */
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "coop.h"
#include "test_seed.h"
#include "torch/torch_abi.h"
#include "utf8_valid.h"

#define MIB (1ull << 20)
#define STREAM(n) ((void *)(uintptr_t)(n))

static void test_configure_rejects_then_accepts(void **state)
{
    (void)state;
    char buf[256], before[256];
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M"), COOP_OK);
    assert_int_equal(coop_torch_settings(before, sizeof before), COOP_OK);
    /* a string that does not parse is an error and changes nothing: the
     * configuration in force stays, allocations keep working from it */
    assert_int_equal(coop_torch_configure("backend:host,colour:red"), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "unknown key 'colour'"));
    assert_int_equal(coop_torch_configure("backend:host,capacity:12Q"), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "'12Q'"));
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_string_equal(buf, before);
    assert_null(coop_torch_pool(0));
    /* normalized: two spellings of one configuration give one text, which
     * is what the settings say once it is in force; nothing changes */
    char a[256], b[256];
    assert_int_equal(coop_torch_normalize_conf("backend:host,capacity:64M", a, sizeof a), COOP_OK);
    assert_int_equal(
        coop_torch_normalize_conf("capacity:67108864,vmm:true,backend:host", b, sizeof b), COOP_OK);
    assert_string_equal(a, b);
    assert_string_equal(a, before);
    assert_int_equal(coop_torch_normalize_conf("backend:host,capacity:65M", b, sizeof b), COOP_OK);
    assert_string_not_equal(a, b);
    assert_int_equal(coop_torch_normalize_conf("capacity:12Q", b, sizeof b), COOP_ERR_INVALID);
    assert_non_null(strstr(b, "'12Q'"));
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_string_equal(buf, before);
    /* every key is in the settings (snapshots' allocator_settings) */
    assert_int_equal(coop_torch_configure("backend:host,wait:false"), COOP_OK);
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, ",wait:false"));
    assert_int_equal(coop_torch_configure("backend:host,capacity:256M,history:8,check:true"),
                     COOP_OK);
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "backend:host"));
    assert_non_null(strstr(buf, "history:8"));
    assert_non_null(strstr(buf, ",wait:true"));
}

/* The normalized text names every key in one order, and the fraction only
 * when one is given (it excludes a capacity): a default configuration has
 * no "fraction:0". */
static void test_normalized_text_has_a_fraction_only_when_given(void **state)
{
    (void)state;
    char buf[256];
    assert_int_equal(coop_torch_normalize_conf("backend:host", buf, sizeof buf), COOP_OK);
    assert_string_equal(buf, "backend:host,capacity:default,page:default,vmm:true,"
                             "segment:default,placement:low,min_split:default,check:false,"
                             "history:0,wait:true");
    assert_int_equal(coop_torch_normalize_conf("fraction:0.5", buf, sizeof buf), COOP_OK);
    assert_string_equal(buf, "backend:cuda,capacity:default,fraction:0.5,page:default,vmm:true,"
                             "segment:default,placement:low,min_split:default,check:false,"
                             "history:0,wait:true");
    /* NULL text: the defaults; no buffer (NULL or size 0): the status only */
    assert_int_equal(coop_torch_normalize_conf(NULL, buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "backend:cuda,capacity:default,page:default"));
    assert_int_equal(coop_torch_normalize_conf("bogus:1", NULL, 64), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "bogus"));
    assert_int_equal(coop_torch_normalize_conf("backend:host", buf, 0), COOP_OK);
    assert_int_equal(coop_torch_settings(NULL, 64), COOP_OK);
    assert_int_equal(coop_torch_last_error(NULL, 64), coop_torch_last_error(NULL, 0));
}

/* The fraction is written with the digits it needs to read back as the
 * same number: two fractions that differ past %g's six digits are two
 * configurations (install(conf) after the first allocation compares them
 * as text), and the fraction written reads back as the very fraction. */
static void test_normalized_fraction_reads_back_exactly(void **state)
{
    (void)state;
    char a[256], b[256];
    assert_int_equal(coop_torch_normalize_conf("fraction:0.1234567", a, sizeof a), COOP_OK);
    assert_int_equal(coop_torch_normalize_conf("fraction:0.1234568", b, sizeof b), COOP_OK);
    assert_non_null(strstr(a, ",fraction:0.1234567,"));
    assert_non_null(strstr(b, ",fraction:0.1234568,"));
    /* the longest a double takes, and the smallest normal one */
    const char *const cases[] = {"0.10000000000000001", "2.2250738585072014e-308",
                                 "0.99999999999999989", "1", "0.1"};
    const char *const written[] = {"0.1", "2.2250738585072014e-308", "0.9999999999999999", "1",
                                   "0.1"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char conf[64], expect[64];
        snprintf(conf, sizeof conf, "fraction:%s", cases[i]);
        snprintf(expect, sizeof expect, ",fraction:%s,", written[i]);
        assert_int_equal(coop_torch_normalize_conf(conf, a, sizeof a), COOP_OK);
        assert_non_null(strstr(a, expect));
        /* and what is written reads back as the same fraction */
        snprintf(conf, sizeof conf, "fraction:%s", written[i]);
        assert_int_equal(coop_torch_normalize_conf(conf, b, sizeof b), COOP_OK);
        assert_string_equal(a, b);
    }
}

/* The settings' text is a configuration: given back to
 * coop_torch_configure (COOP_ALLOC_CONF, a snapshot's allocator_settings
 * copied by a user) it parses and means the same, defaults included
 * ("default", where 0 would read as zero bytes and is refused). */
static void test_settings_text_round_trips(void **state)
{
    (void)state;
    const char *const confs[] = {
        "backend:host",
        "fraction:0.3,vmm:false,placement:high",
        "backend:host,capacity:1G,page:2M,segment:4M,min_split:1K,check:1,history:true,wait:no",
    };
    char before[256], text[256], again[256];
    assert_int_equal(coop_torch_settings(before, sizeof before), COOP_OK);
    for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
        assert_int_equal(coop_torch_normalize_conf(confs[i], text, sizeof text), COOP_OK);
        if (coop_torch_normalize_conf(text, again, sizeof again) != COOP_OK)
            fail_msg("'%s' written as '%s', which does not parse: %s", confs[i], text, again);
        assert_string_equal(again, text);
        assert_int_equal(coop_torch_configure(text), COOP_OK);
        assert_int_equal(coop_torch_settings(again, sizeof again), COOP_OK);
        assert_string_equal(again, text);
    }
    /* each byte key written with its own value (format_conf's buffers) */
    assert_int_equal(coop_torch_normalize_conf(confs[2], text, sizeof text), COOP_OK);
    static const char *const bytes[] = {",capacity:1073741824,", ",page:2097152,",
                                        ",segment:4194304,", ",min_split:1024,"};
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (!strstr(text, bytes[i]))
            fail_msg("'%s' written as '%s', without '%s'", confs[2], text, bytes[i]);
    /* default is the key left out, for the keys whose default is the
     * device's or the pool's; 0 stays refused */
    assert_int_equal(
        coop_torch_normalize_conf("capacity:DEFAULT, page : default", text, sizeof text), COOP_OK);
    assert_int_equal(coop_torch_normalize_conf("", again, sizeof again), COOP_OK);
    assert_string_equal(text, again);
    assert_int_equal(coop_torch_normalize_conf("capacity:0", text, sizeof text), COOP_ERR_INVALID);
    assert_int_equal(coop_torch_normalize_conf("vmm:default", text, sizeof text), COOP_ERR_INVALID);
    assert_int_equal(coop_torch_configure(before), COOP_OK);
}

static void test_pools_per_device(void **state)
{
    (void)state;
    assert_null(coop_torch_malloc(0, 0, STREAM(0)));
    void *a = coop_torch_malloc(1000, 0, STREAM(1));
    void *b = coop_torch_malloc(1000, 3, STREAM(2));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(coop_torch_pool(0));
    assert_non_null(coop_torch_pool(3));
    assert_null(coop_torch_pool(1));
    assert_ptr_not_equal(coop_torch_pool(0), coop_torch_pool(3));
    /* a pool exists: the configuration is fixed */
    assert_int_equal(coop_torch_configure("backend:host"), COOP_ERR_BUSY);
    /* freeing on the wrong device is refused, the block stays */
    coop_torch_free(a, 1000, 3, STREAM(1));
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.allocation.current, 1);
    coop_torch_free(a, 1000, 0, STREAM(1));
    coop_torch_free(b, 1000, 3, STREAM(2));
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.allocation.current, 0);
    assert_int_equal(coop_pool_check(coop_torch_pool(0)), COOP_OK);
}

static void test_history_ring_keeps_the_last_events(void **state)
{
    (void)state;
    coop_torch_clear_history();
    coop_torch_record_history(8);
    void *p[6];
    for (int i = 0; i < 6; i++)
        p[i] = coop_torch_malloc(512u * (unsigned)(i + 1), 2, STREAM(i));
    for (int i = 0; i < 6; i++)
        coop_torch_free(p[i], 512u * (unsigned)(i + 1), 2, STREAM(i));
    /* 6 allocs + 12 free events = 18: the ring holds the last 8 */
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(2, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 8);
    /* the last 8: frees of p[2..5], requested then completed */
    for (size_t i = 0; i < 8; i++) {
        int k = 2 + (int)i / 2;
        assert_int_equal(snap->events[i].action,
                         i % 2 ? COOP_TORCH_FREE_COMPLETED : COOP_TORCH_FREE_REQUESTED);
        assert_int_equal(snap->events[i].address, (uintptr_t)p[k]);
        assert_int_equal(snap->events[i].size, 512u * (unsigned)(k + 1));
        assert_int_equal(snap->events[i].stream, (uintptr_t)k);
        assert_int_equal(snap->events[i].device, 2);
        if (i)
            assert_true(snap->events[i].time_us >= snap->events[i - 1].time_us);
    }
    coop_torch_snapshot_free(snap);
    /* OOM is recorded too, with what the pool could still map (torch's
     * device_free) where the others have the address */
    void *held = coop_torch_malloc(3 * MIB, 2, STREAM(0));
    assert_null(coop_torch_malloc((1ull << 40) + 1, 2, STREAM(0)));
    coop_stats stats;
    coop_get_stats(coop_torch_pool(2), &stats);
    assert_true(stats.reserved_bytes.current > 0);
    assert_int_equal(coop_torch_snapshot_take(2, &snap), COOP_OK);
    assert_int_equal(snap->events[snap->num_events - 1].action, COOP_TORCH_OOM);
    /* the size rounded as torch's entry has it (params.size()) */
    assert_int_equal(snap->events[snap->num_events - 1].size, (1ull << 40) + 512);
    assert_int_equal(snap->events[snap->num_events - 1].address,
                     stats.capacity - (uint64_t)stats.reserved_bytes.current);
    coop_torch_free(held, 3 * MIB, 2, STREAM(0));
    coop_torch_snapshot_free(snap);
    /* a new bound keeps the last events that fit; clearing drops them and
     * keeps recording */
    coop_torch_record_history(4);
    assert_int_equal(coop_torch_snapshot_take(2, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 4);
    assert_int_equal(snap->events[3].action, COOP_TORCH_FREE_COMPLETED);
    assert_int_equal(snap->events[3].address, (uintptr_t)held);
    coop_torch_snapshot_free(snap);
    coop_torch_clear_history();
    coop_torch_free(coop_torch_malloc(512, 2, STREAM(0)), 512, 2, STREAM(0));
    assert_int_equal(coop_torch_snapshot_take(2, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 3);
    coop_torch_snapshot_free(snap);
    coop_torch_record_history(0);
    assert_int_equal(coop_torch_snapshot_take(2, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 0);
    coop_torch_snapshot_free(snap);
}

static void test_snapshot_walks_blocks(void **state)
{
    (void)state;
    void *a = coop_torch_malloc(3 * MIB, 1, STREAM(0));
    void *b = coop_torch_malloc(5000, 1, STREAM(0));
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(1, &snap), COOP_OK);
    assert_true(snap->vmm);
    assert_true(snap->num_segments >= 1);
    size_t blocks = 0, allocated = 0;
    for (size_t i = 0; i < snap->num_segments; i++)
        blocks += snap->segments[i].num_blocks;
    assert_int_equal(blocks, snap->num_blocks);
    for (size_t i = 0; i < snap->num_blocks; i++)
        if (snap->blocks[i].state == COOP_BLOCK_ALLOCATED) {
            allocated++;
            assert_true(snap->blocks[i].address == (uintptr_t)a ||
                        snap->blocks[i].address == (uintptr_t)b);
        }
    assert_int_equal(allocated, 2);
    /* runs of mapped pages: in order, apart, inside the segment, and they
     * add up to the reserved bytes */
    coop_stats stats;
    coop_get_stats(coop_torch_pool(1), &stats);
    assert_true(snap->num_ranges >= 1);
    uint64_t mapped = 0;
    for (size_t i = 0; i < snap->num_ranges; i++) {
        const coop_torch_range *r = &snap->ranges[i];
        assert_true(r->size > 0);
        assert_true(r->address >= snap->segments[0].address);
        if (i)
            assert_true(r->address > snap->ranges[i - 1].address + snap->ranges[i - 1].size);
        mapped += r->size;
    }
    assert_int_equal(mapped, stats.reserved_bytes.current);
    coop_torch_snapshot_free(snap);
    assert_int_equal(coop_torch_snapshot_take(7, &snap), COOP_OK); /* no pool: empty */
    assert_int_equal(snap->num_segments, 0);
    coop_torch_snapshot_free(snap);
    assert_int_equal(coop_torch_snapshot_take(-1, &snap), COOP_ERR_INVALID);
    assert_null(snap);
    coop_torch_free(a, 3 * MIB, 1, STREAM(0));
    coop_torch_free(b, 5000, 1, STREAM(0));
}

/* The gap race: a thread frees gap_freed and allocates gap_allocated on
 * device 1 while a snapshot is between its blocks and its events. */
static void *gap_freed, *gap_allocated;
static atomic_bool gap_done;
static pthread_t gap_thread;

static void *free_then_malloc(void *arg)
{
    (void)arg;
    coop_torch_free(gap_freed, 4096, 1, STREAM(1));
    gap_allocated = coop_torch_malloc(8192, 1, STREAM(1));
    atomic_store(&gap_done, true);
    return NULL;
}

/* torch_snapshot_gap_hook: starts the thread, and gives it until it is done
 * or 500 ms have passed (a snapshot that holds it back, as it must, keeps it
 * waiting that long; one that does not lets it run in the gap). */
static void race_into_the_gap(int device)
{
    assert_int_equal(device, 1);
    assert_int_equal(pthread_create(&gap_thread, NULL, free_then_malloc, NULL), 0);
    for (int ms = 0; ms < 500 && !atomic_load(&gap_done); ms++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

/* A snapshot's blocks and events agree although a free and a malloc race
 * it (forced into the gap between reading the two): the blocks allocated
 * are exactly those the events leave allocated. They were read under two
 * separate locks, so the events could show the free and the malloc where
 * the blocks did not. */
static void test_snapshot_blocks_agree_with_events(void **state)
{
    (void)state;
    coop_torch_record_history(100);
    coop_torch_clear_history();
    gap_freed = coop_torch_malloc(4096, 1, STREAM(1));
    assert_non_null(gap_freed);
    torch_snapshot_gap_hook = race_into_the_gap;
    coop_torch_snapshot *snap = NULL;
    coop_status st = coop_torch_snapshot_take(1, &snap);
    torch_snapshot_gap_hook = NULL;
    assert_int_equal(pthread_join(gap_thread, NULL), 0);
    assert_int_equal(st, COOP_OK);
    assert_non_null(gap_allocated);
    /* the blocks live by the events (all of device 1's began with them);
     * sizes too: the malloc may reuse the freed block's address */
    const coop_torch_event *live[8];
    size_t num_live = 0;
    for (size_t i = 0; i < snap->num_events; i++) {
        const coop_torch_event *e = &snap->events[i];
        if (e->action == COOP_TORCH_ALLOC) {
            assert_true(num_live < 8);
            live[num_live++] = e;
        } else if (e->action == COOP_TORCH_FREE_REQUESTED) {
            for (size_t k = 0; k < num_live; k++)
                if (live[k]->address == e->address)
                    live[k] = live[--num_live];
        }
    }
    size_t allocated = 0;
    for (size_t i = 0; i < snap->num_blocks; i++) {
        const coop_block_info *b = &snap->blocks[i];
        if (b->state == COOP_BLOCK_FREE)
            continue;
        allocated++;
        bool found = false;
        for (size_t k = 0; k < num_live; k++)
            found = found || (live[k]->address == b->address && live[k]->size == b->requested_size);
        if (!found)
            fail_msg("block %#jx (%ju bytes) is allocated but the events do not allocate it",
                     (uintmax_t)b->address, (uintmax_t)b->requested_size);
    }
    if (allocated != num_live)
        fail_msg("%zu blocks allocated, the events leave %zu", allocated, num_live);
    coop_torch_snapshot_free(snap);
    coop_torch_free(gap_allocated, 8192, 1, STREAM(1));
    coop_torch_record_history(0);
}

/* The last event of device's history: its action, address and size. */
static coop_torch_event last_event(int device)
{
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(device, &snap), COOP_OK);
    assert_true(snap->num_events > 0);
    coop_torch_event e = snap->events[snap->num_events - 1];
    coop_torch_snapshot_free(snap);
    return e;
}

/* A block another stream still uses is freed: torch records free_requested
 * at the free and free_completed only once the stream's work is done (its
 * process_events), which is when the block is reusable; coop recorded both
 * at the free, so a snapshot could show a block pending whose trace said
 * completed. */
static void test_free_completed_waits_for_the_other_stream(void **state)
{
    (void)state;
    coop_torch_record_history(100);
    void *p = coop_torch_malloc(6000, 3, STREAM(1));
    assert_non_null(p);
    coop_pool *pool = coop_torch_pool(3);
    assert_int_equal(coop_host_hold_stream(pool, 7, true), COOP_OK);
    coop_torch_record_stream(p, STREAM(7));
    coop_torch_free(p, 6000, 3, STREAM(1));
    coop_torch_event e = last_event(3);
    assert_int_equal(e.action, COOP_TORCH_FREE_REQUESTED);
    assert_int_equal(e.address, (uintptr_t)p);
    /* other calls while stream 7 is busy complete nothing */
    coop_torch_free(coop_torch_malloc(512, 3, STREAM(1)), 512, 3, STREAM(1));
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(3, &snap), COOP_OK);
    for (size_t i = 0; i < snap->num_events; i++)
        assert_false(snap->events[i].action == COOP_TORCH_FREE_COMPLETED &&
                     snap->events[i].address == (uintptr_t)p);
    coop_torch_snapshot_free(snap);
    /* the stream finishes; the next call processes the pending free */
    assert_int_equal(coop_host_hold_stream(pool, 7, false), COOP_OK);
    void *q = coop_torch_malloc(512, 3, STREAM(1));
    assert_int_equal(coop_torch_snapshot_take(3, &snap), COOP_OK);
    size_t completed = 0, requested_at = SIZE_MAX;
    for (size_t i = 0; i < snap->num_events; i++) {
        const coop_torch_event *x = &snap->events[i];
        if (x->address != (uintptr_t)p)
            continue;
        if (x->action == COOP_TORCH_FREE_REQUESTED)
            requested_at = i;
        if (x->action == COOP_TORCH_FREE_COMPLETED) {
            completed++;
            assert_true(i > requested_at);
            assert_int_equal(x->size, 6000); /* the size asked for, as torch has it */
            assert_int_equal(x->stream, 1);  /* the allocation's stream */
            assert_int_equal(x->device, 3);
        }
    }
    assert_int_equal(completed, 1);
    coop_torch_snapshot_free(snap);
    coop_torch_free(q, 512, 3, STREAM(1));
    e = last_event(3); /* a free no other stream used completes at once */
    assert_int_equal(e.action, COOP_TORCH_FREE_COMPLETED);
    assert_int_equal(e.address, (uintptr_t)q);
    coop_torch_record_history(0);
}

/* A free given another size or stream than its malloc's (a caller other
 * than torch's metadata, which passes the malloc's): the pool frees the
 * block as it was allocated, and the free's events carry the block's
 * requested size and stream, as torch's (block->requested_size,
 * block->stream) and as coop's own free_completed of a pending block: the
 * caller's 5 bytes on stream 9 made a trace whose free did not match its
 * alloc. */
static void test_free_events_carry_the_blocks_size_and_stream(void **state)
{
    (void)state;
    coop_torch_record_history(100);
    coop_torch_clear_history();
    void *p = coop_torch_malloc(1000, 3, STREAM(1));
    assert_non_null(p);
    coop_torch_free(p, 5, 3, STREAM(9));
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(3, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(snap->events[i].action, (int)i); /* alloc, requested, completed */
        assert_int_equal(snap->events[i].address, (uintptr_t)p);
        assert_int_equal(snap->events[i].size, 1000);
        assert_int_equal(snap->events[i].stream, 1);
    }
    coop_torch_snapshot_free(snap);
    coop_stats st;
    coop_get_stats(coop_torch_pool(3), &st);
    assert_int_equal(st.allocation.current, 0);
    coop_torch_record_history(0);
}

/* torch_malloc_gap_hook (torch_free_gap_hook): switches recording on in
 * the middle of a malloc (a free) that began with it off, after its pool
 * call and before its alloc event (before its pool call), and takes a
 * snapshot there, once. */
static coop_torch_snapshot *switch_snap;

static void switch_history_on(int device)
{
    torch_malloc_gap_hook = NULL;
    torch_free_gap_hook = NULL;
    coop_torch_record_history(100);
    assert_int_equal(coop_torch_snapshot_take(device, &switch_snap), COOP_OK);
}

/* Replays the events of a snapshot taken now on the set of blocks
 * allocated in switch_snap (addresses, at most 8): an alloc only of an
 * address not allocated, a free_requested only of one allocated. The blocks
 * left must be those allocated now. Returns the number of events. */
static size_t replay_since_switch(int device)
{
    const coop_torch_snapshot *snap = switch_snap;
    coop_torch_snapshot *end = NULL;
    assert_int_equal(coop_torch_snapshot_take(device, &end), COOP_OK);
    const coop_torch_event *events = end->events;
    size_t num_events = end->num_events;
    uintptr_t live[8];
    size_t num_live = 0;
    for (size_t i = 0; i < snap->num_blocks; i++)
        if (snap->blocks[i].state != COOP_BLOCK_FREE) {
            assert_true(num_live < 8);
            live[num_live++] = snap->blocks[i].address;
        }
    for (size_t i = 0; i < num_events; i++) {
        const coop_torch_event *e = &events[i];
        size_t k = 0;
        while (k < num_live && live[k] != e->address)
            k++;
        if (e->action == COOP_TORCH_ALLOC) {
            if (k < num_live)
                fail_msg("event %zu allocates %#jx, which the snapshot before it had allocated", i,
                         (uintmax_t)e->address);
            assert_true(num_live < 8);
            live[num_live++] = e->address;
        } else if (e->action == COOP_TORCH_FREE_REQUESTED) {
            if (k == num_live) {
                fail_msg("event %zu frees %#jx, which is not allocated", i, (uintmax_t)e->address);
                return 0; /* not reached: said for the static analyzer */
            }
            live[k] = live[--num_live];
        }
    }
    size_t allocated = 0;
    for (size_t i = 0; i < end->num_blocks; i++) {
        if (end->blocks[i].state == COOP_BLOCK_FREE)
            continue;
        allocated++;
        bool found = false;
        for (size_t k = 0; k < num_live; k++)
            found = found || live[k] == end->blocks[i].address;
        if (!found)
            fail_msg("block %#jx is allocated but the events do not allocate it",
                     (uintmax_t)end->blocks[i].address);
    }
    if (allocated != num_live)
        fail_msg("%zu blocks allocated, the events leave %zu", allocated, num_live);
    coop_torch_snapshot_free(end);
    return num_events;
}

/* Recording is switched on between a malloc's pool call and its alloc
 * event (the malloc began with it off, so without the order lock). A
 * snapshot taken at that moment has the block allocated and no events;
 * the block is one allocated before the recording, so the events after
 * that snapshot must not allocate it again. The malloc recorded its alloc
 * anyway (whether recording was on at its event, not at its start), and a
 * reader going from the first snapshot by the events found the block
 * allocated twice; af5f365 leaves that alloc out. The block's free is
 * recorded (a free of a block allocated before the recording, as torch's
 * readers take). */
static void test_history_switched_on_inside_a_malloc(void **state)
{
    (void)state;
    coop_torch_record_history(0);
    torch_malloc_gap_hook = switch_history_on;
    void *p = coop_torch_malloc(3000, 2, STREAM(1));
    torch_malloc_gap_hook = NULL;
    assert_non_null(p);
    assert_non_null(switch_snap);
    size_t allocated_then = 0;
    for (size_t i = 0; i < switch_snap->num_blocks; i++)
        allocated_then += switch_snap->blocks[i].address == (uintptr_t)p &&
                          switch_snap->blocks[i].state != COOP_BLOCK_FREE;
    assert_int_equal(allocated_then, 1);
    assert_int_equal(switch_snap->num_events, 0);
    replay_since_switch(2);
    coop_torch_free(p, 3000, 2, STREAM(1));
    assert_int_equal(replay_since_switch(2), 2); /* free_requested, free_completed */
    coop_torch_snapshot_free(switch_snap);
    switch_snap = NULL;
    coop_torch_record_history(0);
}

/* The free side of the same moment: recording is switched on after a free
 * read it off (so without the order lock), before its pool call. Its
 * events are recorded whenever recording is on by then, under the pool's
 * lock, with the block's state change itself: a snapshot sees both or
 * neither, and this one (block allocated, no events) is followed by the
 * free. Leaving the free out, as a malloc's alloc is, would leave the
 * events allocating a block the pool has freed. */
static void test_history_switched_on_inside_a_free(void **state)
{
    (void)state;
    coop_torch_record_history(0);
    void *p = coop_torch_malloc(5000, 2, STREAM(1));
    assert_non_null(p);
    torch_free_gap_hook = switch_history_on;
    coop_torch_free(p, 5000, 2, STREAM(1));
    torch_free_gap_hook = NULL;
    assert_non_null(switch_snap);
    assert_int_equal(switch_snap->num_events, 0);
    assert_int_equal(replay_since_switch(2), 2); /* free_requested, free_completed */
    coop_torch_snapshot_free(switch_snap);
    switch_snap = NULL;
    coop_torch_record_history(0);
}

static void test_hooks_and_misuse(void **state)
{
    (void)state;
    void *a = coop_torch_malloc(4 * MIB, 0, STREAM(1));
    /* devices past the slots have no pool (nothing is read past them) */
    assert_null(coop_torch_pool(COOP_TORCH_MAX_DEVICES));
    assert_null(coop_torch_pool(-1));
    /* nor a snapshot: device N of N is refused (test_snapshot_walks_blocks: -1) */
    coop_torch_snapshot *none = NULL;
    assert_int_equal(coop_torch_snapshot_take(COOP_TORCH_MAX_DEVICES, &none), COOP_ERR_INVALID);
    assert_null(none);
    assert_int_equal(coop_torch_snapshot_take(0, NULL), COOP_ERR_INVALID); /* crashed */
    assert_non_null(strstr(coop_last_error(), "snapshot of device 0: out is NULL"));
    coop_torch_snapshot_free(NULL);
    /* the reserved stream, refused with or without pools (device 1 has none) */
    assert_int_equal(coop_torch_forget_stream((void *)UINTPTR_MAX), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "coop_torch_forget_stream: stream"));
    /* a pointer of device 0's pool freed as device 1's: foreign there, and
     * still allocated on device 0 (freed below) */
    assert_non_null(coop_torch_pool(1));
    coop_torch_free(a, 4 * MIB, 1, STREAM(1));
    char msg[256];
    coop_torch_last_error(msg, sizeof msg);
    assert_non_null(strstr(msg, "not allocated by this pool"));
    coop_torch_record_stream(a, STREAM(9));
    coop_torch_record_stream(NULL, STREAM(9));
    int local;
    coop_torch_record_stream((char *)a + 512, STREAM(9)); /* inside a block: an error */
    char buf[256];
    coop_torch_last_error(buf, sizeof buf);
    assert_non_null(strstr(buf, "record_stream"));
    coop_torch_record_stream(&local, STREAM(9)); /* not coop's: ignored, as torch does */
    coop_torch_free(a, 4 * MIB, 0, STREAM(1));
    coop_torch_free(a, 4 * MIB, 0, STREAM(1)); /* double free: reported, no crash */
    coop_torch_free((char *)a + 512, 1, 0, STREAM(1));
    coop_torch_free(&local, 4, 0, STREAM(1));
    coop_torch_free(&local, 4, 5, STREAM(1)); /* device without a pool */
    coop_torch_free(&local, 4, 64, STREAM(1));
    coop_torch_empty_cache();
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.reserved_bytes.current, 0);

    coop_torch_memory_fraction(0.5, 0);
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.capacity, 128 * MIB);
    assert_null(coop_torch_malloc(200 * MIB, 0, STREAM(0)));
    coop_torch_memory_fraction(-1.0, 0);
    coop_torch_memory_fraction(2.0, 0);
    coop_torch_memory_fraction(0.5, 99);
    coop_torch_memory_fraction(1.0, 0);
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.capacity, 256 * MIB);

    /* devices 0..3 have pools: a count that leaves one out is refused */
    coop_torch_init(2);
    coop_torch_last_error(buf, sizeof buf);
    assert_non_null(strstr(buf, "device count of 2: device 3 has a pool"));
    coop_torch_init(4);
    void *d3 = coop_torch_malloc(64, 3, STREAM(0));
    assert_non_null(d3);
    coop_torch_free(d3, 64, 3, STREAM(0));
    assert_null(coop_torch_malloc(64, 4, STREAM(0)));
    coop_torch_last_error(buf, sizeof buf);
    assert_non_null(strstr(buf, "devices are 0..3"));
    assert_int_equal(coop_pool_check(coop_torch_pool(0)), COOP_OK);
}

/* coop.h's contracts for device numbers no pool can have (negative, past
 * the 64 slots, INT_MIN / INT_MAX, and 4: at coop_torch_init's count, set
 * to 4 by test_hooks_and_misuse): malloc returns NULL naming the device;
 * free of a live pointer names the device and the pool that holds it, and
 * frees nothing; the memory fraction changes no pool's capacity; the
 * snapshot is refused with *out NULL (a non-NULL value before); no pool
 * appears; failed mallocs count only devices in 0..63 (4 is counted on 4,
 * as the caller named it), and empty the caller's buffer for the others. */
static void test_bad_device_numbers_change_nothing(void **state)
{
    (void)state;
    void *a = coop_torch_malloc(4096, 0, STREAM(1));
    assert_non_null(a);
    coop_stats before;
    coop_get_stats(coop_torch_pool(0), &before);
    uint64_t failed4 = coop_torch_failed_mallocs(4, NULL, 0);
    const int devices[] = {-1, INT_MIN, INT_MAX, COOP_TORCH_MAX_DEVICES, 4};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        int d = devices[i];
        char want[64], msg[512];
        snprintf(want, sizeof want, "on device %d: devices are 0..3", d);
        assert_null(coop_torch_malloc(64, d, STREAM(1)));
        coop_torch_last_error(msg, sizeof msg);
        if (!strstr(msg, want))
            fail_msg("malloc on device %d: '%s' lacks '%s'", d, msg, want);
        coop_torch_free(a, 4096, d, STREAM(1));
        coop_torch_last_error(msg, sizeof msg);
        if (!strstr(msg, want) || !strstr(msg, "device 0's pool holds it"))
            fail_msg("free on device %d: '%s'", d, msg);
        coop_torch_memory_fraction(0.25, d);
        coop_torch_last_error(msg, sizeof msg);
        if (!strstr(msg, "set_per_process_memory_fraction") || !strstr(msg, want))
            fail_msg("fraction on device %d: '%s'", d, msg);
        coop_torch_snapshot *snap = (coop_torch_snapshot *)&before; /* not NULL */
        coop_status st = coop_torch_snapshot_take(d, &snap);
        if (d == 4) { /* in 0..63: an empty snapshot */
            assert_int_equal(st, COOP_OK);
            assert_int_equal(snap->num_blocks, 0);
            coop_torch_snapshot_free(snap);
        } else {
            assert_int_equal(st, COOP_ERR_INVALID);
            assert_null(snap);
        }
        assert_null(coop_torch_pool(d));
        char failure[64] = "unchanged";
        uint64_t failed = coop_torch_failed_mallocs(d, failure, sizeof failure);
        if (d == 4) {
            assert_int_equal(failed, ++failed4);
            assert_non_null(strstr(failure, "devices are 0..3"));
        } else {
            assert_int_equal(failed, 0);
            assert_string_equal(failure, "");
        }
    }
    coop_stats after;
    coop_get_stats(coop_torch_pool(0), &after);
    assert_int_equal(after.allocation.current, before.allocation.current);
    assert_int_equal(after.allocated_bytes.current, before.allocated_bytes.current);
    assert_int_equal(after.capacity, before.capacity);
    for (int d = 1; d < 4; d++) {
        coop_get_stats(coop_torch_pool(d), &after);
        assert_int_equal(after.capacity, before.capacity);
    }
    coop_torch_free(a, 4096, 0, STREAM(1));
    coop_get_stats(coop_torch_pool(0), &after);
    assert_int_equal(after.allocation.current, before.allocation.current - 1);
}
/* coop.h: the text outputs (coop_torch_settings, _normalize_conf,
 * _last_error, _failed_mallocs' message) are NUL-terminated and truncated
 * to size: a prefix of the full text, size 1 an empty string, size 0 (NULL
 * too) writes nothing; coop_torch_last_error returns the full length
 * whatever size is. */
static void expect_prefix(const char *got, const char *full, size_t size)
{
    size_t n = strlen(got);
    if (n != (size - 1 < strlen(full) ? size - 1 : strlen(full)) || strncmp(got, full, n) != 0)
        fail_msg("size %zu gave '%s' of '%s'", size, got, full);
}

static void test_text_outputs_truncate_to_size(void **state)
{
    (void)state;
    char full[512], buf[16];
    const size_t sizes[] = {1, 2, 8, sizeof buf};
    assert_int_equal(coop_torch_settings(full, sizeof full), COOP_OK);
    assert_true(strlen(full) > sizeof buf);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(buf, 'x', sizeof buf);
        assert_int_equal(coop_torch_settings(buf, sizes[i]), COOP_OK);
        expect_prefix(buf, full, sizes[i]);
    }
    memset(buf, 'x', sizeof buf);
    assert_int_equal(coop_torch_settings(buf, 0), COOP_OK);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(coop_torch_settings(NULL, 0), COOP_OK);

    assert_int_equal(coop_torch_normalize_conf("capacity:12Q", full, sizeof full),
                     COOP_ERR_INVALID);
    assert_non_null(strstr(full, "capacity"));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(buf, 'x', sizeof buf);
        assert_int_equal(coop_torch_normalize_conf("capacity:12Q", buf, sizes[i]),
                         COOP_ERR_INVALID);
        expect_prefix(buf, full, sizes[i]);
    }

    assert_null(coop_torch_malloc(64, -1, STREAM(1))); /* an error to read */
    size_t length = coop_torch_last_error(full, sizeof full);
    assert_int_equal(length, strlen(full));
    assert_true(length > sizeof buf);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(buf, 'x', sizeof buf);
        assert_int_equal(coop_torch_last_error(buf, sizes[i]), length);
        expect_prefix(buf, full, sizes[i]);
    }
    memset(buf, 'x', sizeof buf);
    assert_int_equal(coop_torch_last_error(buf, 0), length);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(coop_torch_last_error(NULL, 0), length);

    assert_null(coop_torch_malloc(64, 4, STREAM(1))); /* counted on device 4 */
    coop_status why = COOP_ERR_NOMEM; /* a device past the count: not out of memory */
    coop_torch_failed_malloc_status(4, NULL, 0, &why);
    assert_int_equal(why, COOP_ERR_INVALID);
    why = COOP_ERR_NOMEM; /* none counted outside 0..63: COOP_OK */
    assert_int_equal(coop_torch_failed_malloc_status(-1, NULL, 0, &why), 0);
    assert_int_equal(why, COOP_OK);
    uint64_t failed = coop_torch_failed_mallocs(4, full, sizeof full);
    assert_true(failed > 0 && strlen(full) > sizeof buf);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(buf, 'x', sizeof buf);
        assert_int_equal(coop_torch_failed_mallocs(4, buf, sizes[i]), failed);
        expect_prefix(buf, full, sizes[i]);
    }
    memset(buf, 'x', sizeof buf);
    assert_int_equal(coop_torch_failed_mallocs(4, buf, 0), failed);
    assert_int_equal(buf[0], 'x');
}

/* rand_r's state of thread i (1..8, also its stream) is this plus i:
 * the printed seed's low 32 bits (0 by default, as before the seed was
 * printed). */
static unsigned thread_seed_base;

static void *thread_body(void *arg)
{
    unsigned seed = thread_seed_base + (unsigned)(uintptr_t)arg;
    void *live[32] = {0};
    size_t sizes[32] = {0};
    for (int i = 0; i < 3000; i++) {
        unsigned slot = (unsigned)rand_r(&seed) % 32;
        int device = (int)(slot % 2);
        if (live[slot]) {
            coop_torch_free(live[slot], sizes[slot], device, arg);
            live[slot] = NULL;
        } else {
            sizes[slot] = 1 + (size_t)rand_r(&seed) % (64 * 1024);
            live[slot] = coop_torch_malloc(sizes[slot], device, arg);
            if (!live[slot])
                return (void *)1;
        }
    }
    for (unsigned slot = 0; slot < 32; slot++)
        if (live[slot])
            coop_torch_free(live[slot], sizes[slot], (int)(slot % 2), arg);
    return NULL;
}

static void test_eight_threads(void **state)
{
    (void)state;
    pthread_t t[8];
    thread_seed_base = (unsigned)test_seed("torch_abi_test", 0);
    for (uintptr_t i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_body, (void *)(i + 1)), 0);
    for (int i = 0; i < 8; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        assert_null(ret);
    }
    for (int d = 0; d < 2; d++) {
        coop_stats s;
        coop_get_stats(coop_torch_pool(d), &s);
        assert_int_equal(s.allocation.current, 0);
        assert_int_equal(coop_pool_check(coop_torch_pool(d)), COOP_OK);
    }
}

/* coop.h (coop_walk): a visitor of a walk of device 0's pool calling the
 * ABI for device 0 is refused, COOP_ERR_BUSY, naming the ABI function,
 * nothing changed (no block, capacity, cache, stream or event): the hooks'
 * refusals are kept for coop_torch_last_error, malloc's counted as a
 * failed malloc; snapshot_take and forget_stream return theirs. A free
 * given the wrong device still names the walked pool as the one holding
 * the pointer, and another device's pool is served. Before the fix,
 * coop_torch_free and coop_torch_snapshot_take waited forever for the
 * pool's lock (taken directly, not through the pool's guarded entry
 * points): the alarm turns that into a failure. */
typedef struct abi_reentry {
    void *live;
    uint64_t failed;
    int visits;
} abi_reentry;

static void expect_abi_refused(const char *fn)
{
    char msg[512];
    coop_torch_last_error(msg, sizeof msg);
    char want[128];
    snprintf(want, sizeof want, "%s: called from inside a coop_walk visitor of device 0's pool",
             fn);
    assert_non_null(strstr(msg, want));
}

static int call_the_abi_back_in(const coop_block_info *b, void *ctx)
{
    (void)b;
    abi_reentry *r = ctx;
    if (r->visits++)
        return 1;
    assert_null(coop_torch_malloc(64, 0, STREAM(1)));
    expect_abi_refused("coop_torch_malloc");
    assert_int_equal(coop_torch_failed_mallocs(0, NULL, 0), r->failed + 1);
    coop_status why = COOP_OK; /* the walk's refusal: not out of memory */
    assert_int_equal(coop_torch_failed_malloc_status(0, NULL, 0, &why), r->failed + 1);
    assert_int_equal(why, COOP_ERR_BUSY);
    coop_torch_free(r->live, 4096, 0, STREAM(1));
    expect_abi_refused("coop_torch_free");
    coop_torch_memory_fraction(0.25, 0);
    expect_abi_refused("coop_torch_memory_fraction");
    coop_torch_record_stream(r->live, STREAM(9));
    expect_abi_refused("coop_torch_record_stream");
    coop_torch_empty_cache();
    expect_abi_refused("coop_torch_empty_cache");
    assert_int_equal(coop_torch_forget_stream(STREAM(1)), COOP_ERR_BUSY);
    assert_non_null(strstr(coop_last_error(), "coop_torch_forget_stream: called from inside"));
    coop_torch_snapshot *snap = (coop_torch_snapshot *)&snap;
    assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_ERR_BUSY);
    assert_null(snap);
    assert_non_null(strstr(coop_last_error(), "coop_torch_snapshot_take: called from inside"));
    /* the wrong device: device 1 has no such block, device 0's (walked,
     * read as it stands) holds it */
    coop_torch_free(r->live, 4096, 1, STREAM(1));
    char msg[512];
    coop_torch_last_error(msg, sizeof msg);
    assert_non_null(strstr(msg, "device 0's pool holds it"));
    /* read without relocking: the walk's lock still held, not released */
    assert_int_not_equal(atomic_load(&coop_torch_pool(0)->lock.state), 0);
    /* another device's pool is not walked: served */
    void *other = coop_torch_malloc(64, 1, STREAM(1));
    assert_non_null(other);
    coop_torch_free(other, 64, 1, STREAM(1));
    return 1;
}

static void test_walk_visitor_calling_the_abi_is_refused(void **state)
{
    (void)state;
    coop_torch_record_history(64);
    abi_reentry r = {.live = coop_torch_malloc(4096, 0, STREAM(1))};
    assert_non_null(r.live);
    void *cached = coop_torch_malloc(3 * MIB, 1, STREAM(1));
    assert_non_null(cached);
    coop_torch_free(cached, 3 * MIB, 1, STREAM(1)); /* device 1's cache: mapped, free */
    r.failed = coop_torch_failed_mallocs(0, NULL, 0);
    coop_stats before0, before1, after;
    coop_get_stats(coop_torch_pool(0), &before0);
    coop_get_stats(coop_torch_pool(1), &before1);
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_OK);
    size_t events = snap->num_events;
    coop_torch_snapshot_free(snap);
    alarm(10);
    assert_int_equal(coop_walk(coop_torch_pool(0), NULL, call_the_abi_back_in, &r), COOP_OK);
    alarm(0);
    assert_int_equal(r.visits, 1);
    coop_get_stats(coop_torch_pool(0), &after);
    assert_memory_equal(&after, &before0, sizeof after);
    coop_get_stats(coop_torch_pool(1), &after);
    assert_int_equal(after.reserved_bytes.current, before1.reserved_bytes.current);
    assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_OK);
    assert_int_equal(snap->num_events, events); /* nothing recorded on device 0 */
    coop_torch_snapshot_free(snap);
    assert_int_equal(coop_pool_check(coop_torch_pool(0)), COOP_OK);
    /* the walk let the pool go: the calls work again */
    coop_torch_free(r.live, 4096, 0, STREAM(1));
    coop_get_stats(coop_torch_pool(0), &after);
    assert_int_equal(after.allocation.current, before0.allocation.current - 1);
    coop_torch_record_history(0);
}

/* The ABI refuses for its own devices' walks only (walked_device,
 * torch_walked_here): a visitor of a pool made with coop_pool_create is
 * served by every call; one nested inside a walk of device 0's pool is
 * refused, naming device 0; with device 1's walk nested inside device 0's,
 * the calls for every device name device 1 (the innermost walk); and a
 * state-lock refusal says which device's step needed the lock. */
typedef enum walk_case {
    WALK_USER_POOL,   /* the user's pool alone */
    WALK_0_THEN_USER, /* device 0's, the user's inside it */
    WALK_0_THEN_1,    /* device 0's, device 1's inside it */
    WALK_1,           /* device 1's alone */
} walk_case;

typedef struct nested_walk {
    walk_case what;
    coop_pool *user;
    int depth;
    int inner_visits;
    char buf[512];
} nested_walk;

/* coop_torch_memory_fraction(2.0, 0)'s error, set before each walk */
#define MARKER "memory fraction 2 for device 0 is not in [0, 1]"

static void expect_last_error_has(const char *want)
{
    char msg[1024];
    coop_torch_last_error(msg, sizeof msg);
    if (!strstr(msg, want))
        fail_msg("wanted \"%s\" in \"%s\"", want, msg);
}

static int abi_from_nested_walk(const coop_block_info *b, void *ctx);

static void in_the_innermost_walk(nested_walk *w)
{
    w->inner_visits++;
    switch (w->what) {
    case WALK_USER_POOL: { /* every call served: the last error stays the marker */
        void *p = coop_torch_malloc(4096, 0, STREAM(1));
        assert_non_null(p);
        coop_torch_record_stream(p, STREAM(2));
        coop_torch_free(p, 4096, 0, STREAM(1));
        coop_torch_memory_fraction(1.0, 0);
        coop_torch_empty_cache();
        assert_int_equal(coop_torch_forget_stream(STREAM(2)), COOP_OK);
        coop_torch_snapshot *snap = NULL;
        assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_OK);
        coop_torch_snapshot_free(snap);
        assert_int_equal(coop_torch_settings(w->buf, sizeof w->buf), COOP_OK);
        expect_last_error_has(MARKER);
        break;
    }
    case WALK_0_THEN_USER:
        coop_torch_empty_cache();
        expect_last_error_has(
            "coop_torch_empty_cache: called from inside a coop_walk visitor of device 0's pool");
        assert_int_equal(coop_torch_settings(w->buf, sizeof w->buf), COOP_ERR_BUSY);
        assert_non_null(strstr(w->buf, "visitor of device 0's pool"));
        break;
    case WALK_0_THEN_1:
        coop_torch_empty_cache();
        expect_last_error_has(
            "coop_torch_empty_cache: called from inside a coop_walk visitor of device 1's pool");
        assert_int_equal(coop_torch_forget_stream(STREAM(1)), COOP_ERR_BUSY);
        assert_non_null(strstr(coop_last_error(), "visitor of device 1's pool"));
        break;
    case WALK_1:
        coop_torch_memory_fraction(0.5, 0);
        expect_last_error_has("visitor of device 1's pool, which the walk holds: setting the "
                              "memory fraction of device 0 takes the ABI's state lock");
        break;
    }
}

static int abi_from_nested_walk(const coop_block_info *b, void *ctx)
{
    (void)b;
    nested_walk *w = ctx;
    bool nests = (w->what == WALK_0_THEN_USER || w->what == WALK_0_THEN_1) && w->depth == 0;
    if (!nests) {
        in_the_innermost_walk(w);
        return 1;
    }
    w->depth++;
    coop_pool *inner = w->what == WALK_0_THEN_USER ? w->user : coop_torch_pool(1);
    assert_int_equal(coop_walk(inner, NULL, abi_from_nested_walk, w), COOP_OK);
    return 1;
}

static void test_walks_of_other_pools_and_nested_walks(void **state)
{
    (void)state;
    coop_config c;
    coop_config_default(&c);
    c.capacity = 8 * MIB;
    c.page_size = 64 * 1024;
    coop_pool *user = NULL;
    assert_int_equal(coop_pool_create(&c, &user), COOP_OK);
    coop_status st;
    void *u = coop_malloc(user, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(u);
    void *one = coop_torch_malloc(4096, 1, STREAM(1)); /* a block for device 1's walk */
    void *zero = coop_torch_malloc(4096, 0, STREAM(1));
    assert_non_null(one);
    assert_non_null(zero);
    uint64_t failed = coop_torch_failed_mallocs(0, NULL, 0);
    alarm(10);
    for (walk_case what = WALK_USER_POOL; what <= WALK_1; what++) {
        coop_torch_memory_fraction(2.0, 0); /* an error of our own: the marker */
        expect_last_error_has(MARKER);
        nested_walk w = {.what = what, .user = user};
        coop_pool *outer = what == WALK_USER_POOL ? user
                           : what == WALK_1       ? coop_torch_pool(1)
                                                  : coop_torch_pool(0);
        assert_int_equal(coop_walk(outer, NULL, abi_from_nested_walk, &w), COOP_OK);
        assert_int_equal(w.inner_visits, 1);
    }
    alarm(0);
    assert_int_equal(coop_torch_failed_mallocs(0, NULL, 0), failed);
    coop_torch_free(zero, 4096, 0, STREAM(1));
    coop_torch_free(one, 4096, 1, STREAM(1));
    assert_int_equal(coop_free(user, u), COOP_OK);
    coop_pool_destroy(user);
}

/* A visitor's refusal comes before the device's order lock: here thread B
 * holds device 0's (history on), stopped in coop_torch_free's gap between
 * that lock and the pool's, which the walk holds. A malloc, free or
 * snapshot of device 0 from the visitor that took the order lock first
 * would wait for B, B for the walk: the alarm fails that. */
static sem_t in_free_gap;

static void free_gap_posts(int device)
{
    (void)device;
    torch_free_gap_hook = NULL;
    sem_post(&in_free_gap);
}

static void *free_on_device_0(void *p)
{
    coop_torch_free(p, 4096, 0, STREAM(1));
    return NULL;
}

typedef struct order_held {
    void *freed_by_b, *live;
    pthread_t b;
    int visits;
} order_held;

static int abi_while_b_holds_the_order_lock(const coop_block_info *b, void *ctx)
{
    (void)b;
    order_held *o = ctx;
    if (o->visits++)
        return 1;
    torch_free_gap_hook = free_gap_posts;
    assert_int_equal(pthread_create(&o->b, NULL, free_on_device_0, o->freed_by_b), 0);
    while (sem_wait(&in_free_gap) != 0)
        continue;
    assert_null(coop_torch_malloc(64, 0, STREAM(1)));
    expect_abi_refused("coop_torch_malloc");
    coop_torch_free(o->live, 4096, 0, STREAM(1));
    expect_abi_refused("coop_torch_free");
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_ERR_BUSY);
    return 1;
}

static void test_walk_refusals_come_before_the_order_lock(void **state)
{
    (void)state;
    coop_torch_record_history(64);
    assert_int_equal(sem_init(&in_free_gap, 0, 0), 0);
    order_held o = {.freed_by_b = coop_torch_malloc(4096, 0, STREAM(1)),
                    .live = coop_torch_malloc(4096, 0, STREAM(1))};
    assert_non_null(o.freed_by_b);
    assert_non_null(o.live);
    coop_stats before, after;
    coop_get_stats(coop_torch_pool(0), &before);
    alarm(10);
    assert_int_equal(coop_walk(coop_torch_pool(0), NULL, abi_while_b_holds_the_order_lock, &o),
                     COOP_OK);
    assert_int_equal(pthread_join(o.b, NULL), 0);
    alarm(0);
    coop_get_stats(coop_torch_pool(0), &after); /* B's free only */
    assert_int_equal(after.allocation.current, before.allocation.current - 1);
    coop_torch_free(o.live, 4096, 0, STREAM(1));
    coop_torch_record_history(0);
    sem_destroy(&in_free_gap);
}

/* A message quoting a long COOP_ALLOC_CONF value is cut between UTF-8
 * characters wherever the ABI copies it: the parse error in buffers of
 * every size up to 520 (coop/torch.py's 512 included), and, in a child
 * whose environment holds the value, the configuration error every malloc
 * reports (kept in 512 bytes) and the last error in small buffers. Runs
 * first: the child's ABI must not have loaded a configuration yet. */
static void test_messages_cut_between_characters(void **state)
{
    (void)state;
    char conf[700] = "capacity:", buf[520];
    repeat_character(conf + strlen(conf), "\xc3\xa9", 300);
    for (size_t size = 1; size <= sizeof buf; size++) {
        assert_int_equal(coop_torch_normalize_conf(conf, buf, size), COOP_ERR_INVALID);
        expect_valid_utf8("coop_torch_normalize_conf", buf);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* a fresh ABI: the environment is read on first use */
        setenv("COOP_ALLOC_CONF", conf, 1);
        if (coop_torch_malloc(64, 0, STREAM(1)))
            _exit(3);
        char out[1024];
        if (coop_torch_failed_mallocs(0, out, sizeof out) != 1)
            _exit(4);
        expect_valid_utf8("coop_torch_failed_mallocs", out);
        for (size_t size = 1; size <= 64; size++) {
            coop_torch_last_error(out, size);
            expect_valid_utf8("coop_torch_last_error", out);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    /* the suite's own configuration, whatever the environment says */
    unsetenv("COOP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        /* first: it forks while no configuration is loaded yet */
        cmocka_unit_test(test_messages_cut_between_characters),
        cmocka_unit_test(test_configure_rejects_then_accepts),
        cmocka_unit_test(test_normalized_text_has_a_fraction_only_when_given),
        cmocka_unit_test(test_normalized_fraction_reads_back_exactly),
        cmocka_unit_test(test_settings_text_round_trips),
        cmocka_unit_test(test_pools_per_device),
        cmocka_unit_test(test_history_ring_keeps_the_last_events),
        cmocka_unit_test(test_snapshot_walks_blocks),
        cmocka_unit_test(test_snapshot_blocks_agree_with_events),
        cmocka_unit_test(test_free_completed_waits_for_the_other_stream),
        cmocka_unit_test(test_free_events_carry_the_blocks_size_and_stream),
        cmocka_unit_test(test_history_switched_on_inside_a_malloc),
        cmocka_unit_test(test_history_switched_on_inside_a_free),
        cmocka_unit_test(test_hooks_and_misuse),
        cmocka_unit_test(test_bad_device_numbers_change_nothing),
        cmocka_unit_test(test_text_outputs_truncate_to_size),
        cmocka_unit_test(test_eight_threads),
        cmocka_unit_test(test_walk_visitor_calling_the_abi_is_refused),
        cmocka_unit_test(test_walks_of_other_pools_and_nested_walks),
        cmocka_unit_test(test_walk_refusals_come_before_the_order_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
