/* Host backend: reservations, page accounting, segments, simulated events. */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend.h"
#include "coop.h"
#include "status.h"

#define MiB (UINT64_C(1) << 20)

static void test_reserve_map_unmap(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    assert_true(be->has_vmm);
    assert_true(coop_backend_is_host(be));
    uintptr_t va;
    uint64_t unmapped = 0;
    /* 1 TiB of address space on a machine with far less memory. */
    assert_int_equal(be->ops->reserve(be, UINT64_C(1) << 40, &va), COOP_OK);
    assert_int_equal(va % (2 * MiB), 0);
    assert_int_equal(be->ops->map(be, va, 4 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_mapped(be), 4 * MiB);
    assert_int_equal(be->ops->map(be, va + 4 * MiB, 6 * MiB), COOP_ERR_NOMEM); /* device full */
    assert_non_null(strstr(coop_last_error(), "host backend: simulated device full (4194304 of "
                                              "8388608 bytes mapped, 6291456 more asked)"));
    assert_int_equal(be->ops->map(be, va + 1, 2 * MiB), COOP_ERR_INVALID); /* unaligned */
    assert_int_equal(be->ops->unmap(be, va, 4 * MiB, &unmapped), COOP_OK);
    assert_int_equal(unmapped, 4 * MiB);
    assert_int_equal(be->ops->unmap(be, va, 2 * MiB, &unmapped), COOP_ERR_INVALID);
    assert_int_equal(unmapped, 0);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    assert_int_equal(be->ops->release(be, va, UINT64_C(1) << 40), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    coop_backend_destroy(be);
}

static void test_segments(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    assert_false(be->has_vmm);
    uintptr_t a, b, c;
    assert_int_equal(be->ops->segment_alloc(be, 20 * MiB, &a), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 20 * MiB, &b), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &c), COOP_ERR_NOMEM);
    assert_non_null(strstr(coop_last_error(), "host backend: simulated device full (41943040 of "
                                              "41943040 bytes in segments, 2097152 more asked)"));
    assert_int_equal(coop_backend_host_live_ranges(be), 2);
    assert_int_equal(be->ops->segment_free(be, a, 20 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 20 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    coop_backend_destroy(be);
}

/* The addresses one sequence of segment calls gets, as distances below its
 * first segment: a, b, c; free b; d (fits b's room); free a; e (a's room);
 * f (what d left of b's). */
static void segment_offsets(coop_backend *be, uint64_t offsets[4])
{
    uintptr_t a, b, c, d, e, f;
    assert_int_equal(be->ops->segment_alloc(be, 6 * MiB, &a), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 4 * MiB, &b), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 8 * MiB, &c), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 4 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &d), COOP_OK);
    assert_int_equal(d, b + 2 * MiB); /* the top of the highest room that fits */
    assert_int_equal(be->ops->segment_free(be, a, 6 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 6 * MiB, &e), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &f), COOP_OK);
    assert_int_equal(e, a); /* a's room came back */
    assert_int_equal(f, b); /* the rest of b's */
    offsets[0] = a - b, offsets[1] = a - c, offsets[2] = a - d, offsets[3] = a - f;
    /* a segment freed twice is refused, and nothing changes */
    assert_int_equal(be->ops->segment_free(be, c, 8 * MiB), COOP_OK);
    uint64_t mapped = coop_backend_host_mapped(be);
    assert_int_equal(be->ops->segment_free(be, c, 8 * MiB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "is not a live segment"));
    assert_int_equal(coop_backend_host_mapped(be), mapped);
    assert_int_equal(be->ops->segment_free(be, d, 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, e, 6 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, f, 2 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
}

/* Segments come from the backend's own space, top down, so the
 * same calls give the same layout in every run, whatever else the process
 * has mapped in between (mmap's choices would move). */
static void test_segment_addresses_repeat(void **state)
{
    (void)state;
    uint64_t first[4], second[4];
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    segment_offsets(be, first);
    coop_backend_destroy(be);
    /* disturb the process's address space: an odd-sized mapping */
    size_t odd = 3 * MiB + 12288;
    void *noise = mmap(NULL, odd, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    assert_true(noise != MAP_FAILED);
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    segment_offsets(be, second);
    coop_backend_destroy(be);
    munmap(noise, odd);
    assert_memory_equal(first, second, sizeof first);
    assert_int_equal(first[0], 4 * MiB); /* b right below a, c below b */
    assert_int_equal(first[1], 12 * MiB);
}

/* A space too small for the segments asked (512-byte pages, each segment
 * taking a whole OS page of it): the rest get their own mapping, and all of
 * them are given back. */
static void test_segment_space_full(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(64 * 512, 512, false, &be), COOP_OK);
    uintptr_t seg[64];
    for (int i = 0; i < 64; i++)
        assert_int_equal(be->ops->segment_alloc(be, 512, &seg[i]), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 64);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < i; j++)
            assert_true(seg[i] != seg[j]);
    for (int i = 63; i >= 0; i--)
        assert_int_equal(be->ops->segment_free(be, seg[i], 512), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    coop_backend_destroy(be);
}

/* Simulated pages below the OS page size (512 B): reservations, mapping and
 * segments of odd page counts, and a pool on top. */
static void test_small_pages(void **state)
{
    (void)state;
    for (uint64_t ps = 512; ps <= 2048; ps *= 2) {
        coop_backend *be;
        assert_int_equal(coop_backend_host_create(64 * ps, ps, true, &be), COOP_OK);
        uintptr_t va;
        uint64_t unmapped;
        assert_int_equal(be->ops->reserve(be, 3 * ps, &va), COOP_OK);
        assert_int_equal(va % ps, 0);
        assert_int_equal(be->ops->map(be, va + ps, ps), COOP_OK);
        assert_int_equal(coop_backend_host_mapped(be), ps);
        assert_int_equal(be->ops->map(be, va + ps / 2, ps), COOP_ERR_INVALID);
        assert_int_equal(be->ops->unmap(be, va + ps, ps, &unmapped), COOP_OK);
        assert_int_equal(be->ops->release(be, va, 3 * ps), COOP_OK);
        assert_int_equal(coop_backend_host_live_ranges(be), 0);
        coop_backend_destroy(be);

        assert_int_equal(coop_backend_host_create(64 * ps, ps, false, &be), COOP_OK);
        uintptr_t a, b;
        assert_int_equal(be->ops->segment_alloc(be, 5 * ps, &a), COOP_OK);
        assert_int_equal(be->ops->segment_alloc(be, ps, &b), COOP_OK);
        assert_true(a + 5 * ps <= b || b + ps <= a); /* distinct ranges */
        assert_int_equal(coop_backend_host_mapped(be), 6 * ps);
        assert_int_equal(be->ops->segment_free(be, a, 5 * ps), COOP_OK);
        assert_int_equal(be->ops->segment_free(be, b, ps), COOP_OK);
        assert_int_equal(coop_backend_host_live_ranges(be), 0);
        coop_backend_destroy(be);
    }
    /* A pool with 512-byte pages maps exactly what its blocks need. */
    coop_config c;
    coop_config_default(&c);
    c.page_size = 512;
    c.capacity = 64 * 512;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    void *p = coop_malloc(pool, 1000, 1, 0, NULL);
    void *q = coop_malloc(pool, 512, 1, 0, NULL);
    assert_non_null(p);
    assert_non_null(q);
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.reserved_bytes.current, 3 * 512);
    assert_int_equal(coop_free(pool, p), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    coop_get_stats(pool, &s);
    assert_int_equal(s.reserved_bytes.current, 512);
    assert_int_equal(coop_free(pool, q), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_pool_destroy(pool);
}

static bool query(coop_backend *be, coop_event ev)
{
    bool done = false;
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    return done;
}

static void test_events_and_holds(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    coop_event free_run, held, other;
    assert_int_equal(be->ops->event_record(be, 1, &free_run), COOP_OK);
    assert_true(query(be, free_run));
    assert_int_equal(be->ops->hold_stream(be, 1, true, false), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 1, &held), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 2, &other), COOP_OK);
    assert_false(query(be, held));
    assert_true(query(be, other));
    assert_true(query(be, free_run)); /* recorded before the hold */
    assert_int_equal(be->ops->hold_stream(be, 1, false, false), COOP_OK);
    assert_true(query(be, held));
    assert_int_equal(be->ops->hold_stream(be, 1, true, false), COOP_OK); /* a new hold */
    assert_true(query(be, held)); /* belongs to the released hold */
    assert_int_equal(coop_backend_host_live_events(be), 3);
    be->ops->event_destroy(be, free_run);
    be->ops->event_destroy(be, held);
    be->ops->event_destroy(be, other);
    assert_int_equal(coop_backend_host_live_events(be), 0);
    coop_backend_destroy(be);
}

/* Waiting: a complete event at once; a busy hold ends (its kernels finish);
 * a plain hold (blocked on the host) fails the wait with the stream named
 * and stays held. */
static void test_event_wait(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    coop_event idle, busy, blocked, after;
    assert_int_equal(be->ops->event_record(be, 1, &idle), COOP_OK);
    assert_int_equal(be->ops->event_wait(be, idle), COOP_OK);
    assert_int_equal(be->ops->hold_stream(be, 2, true, true), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 2, &busy), COOP_OK);
    assert_false(query(be, busy));
    assert_int_equal(be->ops->event_wait(be, busy), COOP_OK);
    assert_true(query(be, busy));
    assert_int_equal(be->ops->event_record(be, 2, &after), COOP_OK);
    assert_true(query(be, after)); /* the hold ended */
    assert_int_equal(be->ops->hold_stream(be, 3, true, false), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 3, &blocked), COOP_OK);
    assert_int_equal(be->ops->event_wait(be, blocked), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "stream 0x3 is held"));
    assert_false(query(be, blocked));
    assert_int_equal(be->ops->hold_stream(be, 3, false, false), COOP_OK);
    assert_true(query(be, blocked));
    be->ops->event_destroy(be, idle);
    be->ops->event_destroy(be, busy);
    be->ops->event_destroy(be, blocked);
    be->ops->event_destroy(be, after);
    assert_int_equal(coop_backend_host_live_events(be), 0);
    coop_backend_destroy(be);
}

/* Holding a held stream again (say, now busy) keeps the hold it has: the
 * events recorded in it stay pending until it ends. */
static void test_hold_again(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    coop_event ev;
    assert_int_equal(be->ops->hold_stream(be, 1, true, false), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 1, &ev), COOP_OK);
    assert_int_equal(be->ops->hold_stream(be, 1, true, true), COOP_OK);
    assert_false(query(be, ev));
    assert_int_equal(be->ops->event_wait(be, ev), COOP_OK); /* busy now: the wait ends it */
    assert_true(query(be, ev));
    be->ops->event_destroy(be, ev);
    coop_backend_destroy(be);
}

/* Synchronizing the device ends busy holds (their events complete) and
 * refuses, naming the stream, while a stream is held on the host. */
static void test_synchronize(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    coop_event busy, blocked;
    assert_int_equal(be->ops->hold_stream(be, 1, true, true), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 1, &busy), COOP_OK);
    assert_int_equal(be->ops->hold_stream(be, 2, true, false), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 2, &blocked), COOP_OK);
    assert_int_equal(be->ops->synchronize(be), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "stream 0x2 is held"));
    assert_false(query(be, busy)); /* nothing ended */
    assert_int_equal(be->ops->hold_stream(be, 2, false, false), COOP_OK);
    assert_true(query(be, blocked));
    assert_int_equal(be->ops->synchronize(be), COOP_OK);
    assert_true(query(be, busy));
    be->ops->event_destroy(be, busy);
    be->ops->event_destroy(be, blocked);
    coop_backend_destroy(be);
}

/* Stream slots of forgotten streams (forget_stream): a slot is vacated with
 * its stream's last event and reused by the next new stream; a vacant slot
 * names no stream (not even stream 0, the value a cleared slot holds); a
 * forgotten stream used again is in use again and keeps its slot; a held
 * stream keeps its slot (and its hold) when forgotten. */
static void test_forgotten_stream_slots(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    coop_event e5, e0, e5b;
    /* stream 5's slot vacated with its last event */
    assert_int_equal(be->ops->event_record(be, 5, &e5), COOP_OK);
    be->ops->forget_stream(be, 5);
    assert_int_equal(coop_backend_host_streams(be), 1); /* its event still names it */
    be->ops->event_destroy(be, e5);
    assert_int_equal(coop_backend_host_streams(be), 0);
    /* stream 0 gets a slot of its own (the vacant one, reused), and a hold
     * there: a new stream 7 takes another, and releasing stream 0's hold
     * completes the event recorded in it */
    assert_int_equal(be->ops->hold_stream(be, 0, true, false), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 0, &e0), COOP_OK);
    assert_int_equal(coop_backend_host_streams(be), 1);
    assert_int_equal(be->ops->hold_stream(be, 7, true, false), COOP_OK);
    assert_int_equal(coop_backend_host_streams(be), 2);
    assert_false(query(be, e0));
    assert_int_equal(be->ops->hold_stream(be, 0, false, false), COOP_OK);
    assert_true(query(be, e0));
    be->ops->event_destroy(be, e0);
    assert_int_equal(be->ops->hold_stream(be, 7, false, false), COOP_OK);
    assert_int_equal(coop_backend_host_streams(be), 2); /* neither forgotten */
    /* stream 5 forgotten while its event lives, then used again: in use */
    assert_int_equal(be->ops->event_record(be, 5, &e5), COOP_OK);
    be->ops->forget_stream(be, 5);
    assert_int_equal(be->ops->event_record(be, 5, &e5b), COOP_OK);
    be->ops->event_destroy(be, e5);
    be->ops->event_destroy(be, e5b);
    assert_int_equal(coop_backend_host_streams(be), 3);
    /* stream 9 held, then forgotten: its slot and its hold stay */
    assert_int_equal(be->ops->hold_stream(be, 9, true, false), COOP_OK);
    be->ops->forget_stream(be, 9);
    assert_int_equal(coop_backend_host_streams(be), 4);
    coop_event e9;
    assert_int_equal(be->ops->event_record(be, 9, &e9), COOP_OK);
    assert_false(query(be, e9));
    assert_int_equal(be->ops->hold_stream(be, 9, false, false), COOP_OK);
    assert_true(query(be, e9));
    be->ops->event_destroy(be, e9);
    assert_int_equal(coop_backend_host_live_events(be), 0);
    coop_backend_destroy(be);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    coop_backend *be = (coop_backend *)1;
    assert_int_equal(coop_backend_host_create(8 * MiB, 3000, true, &be), COOP_ERR_INVALID);
    assert_null(be);
    assert_int_equal(coop_backend_host_create(8 * MiB, 256, true, &be), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_create(3 * MiB, 2 * MiB, true, &be), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_create(0, 2 * MiB, true, &be), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "device size 0 is not a positive multiple"));
}

/* Whether the CPU can read, or write, the byte at addr: the kernel copies
 * through a pipe and answers EFAULT where a touch would fault. */
static bool cpu_can_read(uintptr_t addr)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    bool ok = write(fd[1], (const void *)addr, 1) == 1;
    assert_true(ok || errno == EFAULT);
    close(fd[0]);
    close(fd[1]);
    return ok;
}

static bool cpu_can_write(uintptr_t addr)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    assert_int_equal(write(fd[1], "x", 1), 1);
    bool ok = read(fd[0], (void *)addr, 1) == 1;
    assert_true(ok || errno == EFAULT);
    close(fd[0]);
    close(fd[1]);
    return ok;
}

/* DESIGN.md: the CPU never reads or writes device memory; the host backend
 * maps it PROT_NONE, so that a touch faults. Mapped pages of a reservation
 * and segments, at their first and last bytes. */
static void test_device_memory_faults_on_touch(void **state)
{
    (void)state;
    coop_backend *be;
    assert_int_equal(coop_backend_host_create(64 * MiB, 2 * MiB, true, &be), COOP_OK);
    uintptr_t va, seg;
    uint64_t unmapped;
    assert_int_equal(be->ops->reserve(be, 16 * MiB, &va), COOP_OK);
    assert_int_equal(be->ops->map(be, va, 4 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &seg), COOP_OK);
    const uintptr_t at[] = {va, va + 4 * MiB - 1, seg, seg + 2 * MiB - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        assert_false(cpu_can_read(at[i]));
        assert_false(cpu_can_write(at[i]));
    }
    char host = 0; /* the probe itself works */
    assert_true(cpu_can_read((uintptr_t)&host));
    assert_true(cpu_can_write((uintptr_t)&host));
    assert_int_equal(be->ops->segment_free(be, seg, 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->unmap(be, va, 4 * MiB, &unmapped), COOP_OK);
    assert_int_equal(be->ops->release(be, va, 16 * MiB), COOP_OK);
    coop_backend_destroy(be);
}

/* Whether [addr, addr + len) is mapped in this process at all (mincore
 * answers ENOMEM for a range with an unmapped page). */
static bool os_mapped(uintptr_t addr, size_t len)
{
    unsigned char vec[4];
    assert_true(len <= 4 * (size_t)sysconf(_SC_PAGESIZE));
    if (mincore((void *)addr, len, vec) == 0)
        return true;
    assert_int_equal(errno, ENOMEM);
    return false;
}

/* Sizes a reservation refuses; a small-page reservation keeps just its OS
 * pages (the alignment slack is given back); page ranges that are empty or
 * not whole pages refused; a failing munmap reported. */
static void test_reservation_edges(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t va;
    uint64_t unmapped;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    assert_int_equal(be->ops->reserve(be, 0, &va), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "bad reservation size 0"));
    /* past UINT64_MAX - 2 x alignment: refused, not wrapped into a small mmap */
    assert_int_equal(be->ops->reserve(be, UINT64_MAX - 2 * MiB, &va), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(be->ops->reserve(be, 8 * MiB, &va), COOP_OK);
    assert_int_equal(be->ops->map(be, va, 0), COOP_ERR_INVALID);
    assert_int_equal(be->ops->map(be, va, 1 * MiB), COOP_ERR_INVALID); /* half a page */
    assert_int_equal(be->ops->unmap(be, va, 0, &unmapped), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    /* munmap refuses an address off the OS page: an error, the range still counted */
    assert_int_equal(be->ops->release(be, va + 1, 8 * MiB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "munmap"));
    assert_int_equal(coop_backend_host_live_ranges(be), 1);
    assert_int_equal(be->ops->release(be, va, 8 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    coop_backend_destroy(be);

    size_t os = (size_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(coop_backend_host_create(64 * 512, 512, true, &be), COOP_OK);
    /* the bound comes from the OS page a range is aligned to, not the 512-byte
     * page: this size, rounded up to whole OS pages, would wrap */
    assert_int_equal(be->ops->reserve(be, UINT64_MAX - 1024, &va), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(be->ops->reserve(be, 3 * 512, &va), COOP_OK);
    assert_true(os_mapped(va, os));
    assert_false(os_mapped(va + os, os)); /* 1536 bytes hold one OS page, no more */
    assert_int_equal(be->ops->release(be, va, 3 * 512), COOP_OK);
    assert_false(os_mapped(va, os));
    coop_backend_destroy(be);
}

/* Segments are page aligned (at least OS-page aligned with small pages:
 * each takes whole OS pages of the space); size 0 and a free reaching past
 * the space are refused. */
static void test_segment_edges(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t a, b, c;
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 0, &a), COOP_ERR_INVALID);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(be->ops->segment_alloc(be, 6 * MiB, &a), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &b), COOP_OK);
    assert_int_equal(a % (2 * MiB), 0);
    assert_int_equal(b % (2 * MiB), 0);
    /* a is the space's top segment: a larger size would free past the space */
    assert_int_equal(be->ops->segment_free(be, a, 8 * MiB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "is not a live segment"));
    assert_int_equal(coop_backend_host_mapped(be), 8 * MiB);
    assert_int_equal(be->ops->segment_free(be, a, 6 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 2 * MiB), COOP_OK);
    /* freed top down, both rooms merged with the rest: 8 MiB fit where a and b were */
    assert_int_equal(be->ops->segment_alloc(be, 8 * MiB, &c), COOP_OK);
    assert_int_equal(c, b);
    assert_int_equal(be->ops->segment_free(be, c, 8 * MiB), COOP_OK);
    coop_backend_destroy(be);

    uint64_t os = (uint64_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(coop_backend_host_create(64 * 512, 512, false, &be), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 512, &a), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 512, &b), COOP_OK);
    assert_int_equal(a % os, 0);
    assert_int_equal(b % os, 0);
    assert_int_equal(a - b, os);
    assert_int_equal(be->ops->segment_free(be, a, 512), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 512), COOP_OK);
    coop_backend_destroy(be);
}

/* The space is twice the device: when the device is full and fragmented,
 * a segment as large as two freed ones still comes from the space (below
 * the others, top down), not from an mmap of its own. */
static void test_segment_space_is_twice_the_device(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t s[4], e;
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(be->ops->segment_alloc(be, 10 * MiB, &s[i]), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, s[0], 10 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, s[2], 10 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 20 * MiB, &e), COOP_OK);
    assert_int_equal(e, s[3] - 20 * MiB);
    assert_int_equal(be->ops->segment_free(be, e, 20 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, s[1], 10 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, s[3], 10 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    coop_backend_destroy(be);
}

/* A reservation that passes the size check but that no address space holds
 * is the host's refusal, out of memory (as a GPU's full address space), not
 * a bad argument; nothing is counted. */
static void test_reservation_beyond_the_address_space(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t va = 0;
    assert_int_equal(coop_backend_host_create(8 * MiB, 2 * MiB, true, &be), COOP_OK);
    assert_int_equal(be->ops->reserve(be, UINT64_MAX - 4 * MiB, &va), COOP_ERR_NOMEM);
    assert_non_null(strstr(coop_last_error(), "cannot reserve"));
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    coop_backend_destroy(be);
}

/* A device too large for a segment space of twice its size (2^61 bytes:
 * no address space holds 2^62): every segment gets its own mapping, still
 * page aligned, and the refused space leaves no error message behind a
 * call that succeeded. */
static void test_segments_without_a_space(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t a, b;
    assert_int_equal(coop_backend_host_create(UINT64_C(1) << 61, 2 * MiB, false, &be), COOP_OK);
    coop_clear_error();
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &a), COOP_OK);
    assert_string_equal(coop_last_error(), "");
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &b), COOP_OK);
    assert_int_equal(a % (2 * MiB), 0);
    assert_int_equal(b % (2 * MiB), 0);
    assert_true(a + 2 * MiB <= b || b + 2 * MiB <= a);
    assert_int_equal(coop_backend_host_live_ranges(be), 2);
    assert_int_equal(be->ops->segment_free(be, a, 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 2 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    coop_backend_destroy(be);
}

/* Destroy gives the segment space back to the OS. */
static void test_destroy_unmaps_the_segment_space(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t a;
    size_t os = (size_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(coop_backend_host_create(40 * MiB, 2 * MiB, false, &be), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &a), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, a, 2 * MiB), COOP_OK);
    assert_true(os_mapped(a, os)); /* freed, but still the space's */
    coop_backend_destroy(be);
    assert_false(os_mapped(a, os));
}

/* Every other segment freed: as many rooms as live segments, and one below
 * them; each comes back to a segment of its size, top down. Then two rooms
 * freed one below the other make one. */
static void test_segment_space_with_many_rooms(void **state)
{
    (void)state;
    coop_backend *be;
    uintptr_t s[8], again[4];
    assert_int_equal(coop_backend_host_create(16 * MiB, 2 * MiB, false, &be), COOP_OK);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &s[i]), COOP_OK);
        if (i > 0)
            assert_int_equal(s[i], s[i - 1] - 2 * MiB);
    }
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(be->ops->segment_free(be, s[i], 2 * MiB), COOP_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(be->ops->segment_alloc(be, 2 * MiB, &again[i]), COOP_OK);
        assert_int_equal(again[i], s[2 * i]);
    }
    /* a room freed right below another (and above a live segment) joins it */
    assert_int_equal(be->ops->segment_free(be, s[4], 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, s[5], 2 * MiB), COOP_OK);
    uintptr_t joined;
    assert_int_equal(be->ops->segment_alloc(be, 4 * MiB, &joined), COOP_OK);
    assert_int_equal(joined, s[5]);
    assert_int_equal(be->ops->segment_free(be, joined, 4 * MiB), COOP_OK);
    for (int i = 0; i < 8; i++)
        if (i != 4 && i != 5)
            assert_int_equal(be->ops->segment_free(be, s[i], 2 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_live_ranges(be), 0);
    assert_int_equal(coop_backend_host_mapped(be), 0);
    coop_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_map_unmap),
        cmocka_unit_test(test_device_memory_faults_on_touch),
        cmocka_unit_test(test_segments),
        cmocka_unit_test(test_small_pages),
        cmocka_unit_test(test_events_and_holds),
        cmocka_unit_test(test_event_wait),
        cmocka_unit_test(test_synchronize),
        cmocka_unit_test(test_forgotten_stream_slots),
        cmocka_unit_test(test_hold_again),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_segment_addresses_repeat),
        cmocka_unit_test(test_segment_space_full),
        cmocka_unit_test(test_reservation_edges),
        cmocka_unit_test(test_segment_edges),
        cmocka_unit_test(test_segment_space_is_twice_the_device),
        cmocka_unit_test(test_reservation_beyond_the_address_space),
        cmocka_unit_test(test_segments_without_a_space),
        cmocka_unit_test(test_destroy_unmaps_the_segment_space),
        cmocka_unit_test(test_segment_space_with_many_rooms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
