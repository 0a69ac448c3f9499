/*
 * The PyTorch ABI as a process starts: cases that need a configuration of
 * their own, or that depend on what happens before the configuration is
 * loaded. The ABI's state is per process, and the first pool fixes the
 * configuration, so each case runs in a child forked from a parent that
 * never calls the ABI: every child starts from a new process's state. A
 * case fails when its child fails an assertion, crashes or exits non-zero.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
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
#include "torch/torch_abi.h"

#define MIB (1ull << 20)
#define STREAM(n) ((void *)(uintptr_t)(n))

/* Seconds a case may run: a corrupted heap can leave a lock held forever,
 * which must fail the case, not hang the suite. */
#define CASE_TIME_LIMIT 120

/* history:N with N * sizeof(coop_torch_event) past SIZE_MAX (the product
 * wraps to 24 bytes): accepted, and every event is kept. */
static void test_huge_history_from_the_configuration(void **state)
{
    (void)state;
    char conf[128];
    snprintf(conf, sizeof conf, "backend:host,capacity:1G,history:%zu",
             SIZE_MAX / sizeof(coop_torch_event) + 1);
    assert_int_equal(coop_torch_configure(conf), COOP_OK);
    void *p = NULL;
    for (int i = 0; i < 3000; i++) {
        p = coop_torch_malloc(4096, 0, STREAM(0));
        assert_non_null(p);
        coop_torch_free(p, 4096, 0, STREAM(0));
    }
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(0, &snap), COOP_OK);
    assert_int_equal(snap->num_events, 3 * 3000);
    assert_int_equal(snap->events[0].action, COOP_TORCH_ALLOC);
    assert_int_equal(snap->events[snap->num_events - 1].action, COOP_TORCH_FREE_COMPLETED);
    assert_int_equal(snap->events[snap->num_events - 1].address, (uintptr_t)p);
    coop_torch_snapshot_free(snap);
}

/* The number of events device's history holds now. */
static size_t history_events(int device)
{
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(device, &snap), COOP_OK);
    size_t n = snap->num_events;
    coop_torch_snapshot_free(snap);
    return n;
}

/* One malloc / free pair on device 0: three events. */
static void malloc_free(void)
{
    void *p = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 0, STREAM(0));
}

/* record_history before the first allocation (torch's
 * _record_memory_history early in a program): the lazy load of
 * COOP_ALLOC_CONF at the first malloc keeps it. */
static void test_record_history_outlasts_the_lazy_load(void **state)
{
    (void)state;
    setenv("COOP_ALLOC_CONF", "backend:host,capacity:256M", 1);
    coop_torch_record_history(1000);
    malloc_free();
    assert_int_equal(history_events(0), 3);
    char buf[512];
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "history:1000"));
}

/* ... and so does a configuration set after it (install(conf) after
 * record_history), even one that names history itself. */
static void test_record_history_outlasts_configure(void **state)
{
    (void)state;
    coop_torch_record_history(50);
    assert_int_equal(coop_torch_configure("backend:host,capacity:256M,history:8"), COOP_OK);
    malloc_free();
    malloc_free();
    malloc_free(); /* 9 events: more than the configuration's 8 */
    assert_int_equal(history_events(0), 9);
    char buf[512];
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "history:50"));
}

/* stderr goes to a temporary file between capture_begin and capture_end,
 * which returns what was written (assert after it: cmocka reports failures
 * on stderr). */
typedef struct capture {
    FILE *file;
    int saved;
    char text[4096];
} capture;

static void capture_begin(capture *c)
{
    fflush(stderr);
    c->file = tmpfile();
    assert_non_null(c->file);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

static const char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    rewind(c->file);
    size_t n = fread(c->text, 1, sizeof c->text - 1, c->file);
    c->text[n] = '\0';
    fclose(c->file);
    return c->text;
}

static coop_stats device_stats(int device)
{
    coop_stats s;
    coop_get_stats(coop_torch_pool(device), &s);
    return s;
}

/* set_per_process_memory_fraction below what live blocks use: torch applies
 * it to later allocations. coop holds the capacity where the mapped bytes
 * are, lowers it to the limit once blocks are freed, and reports nothing,
 * so the first real out-of-memory still reaches stderr. */
static void test_fraction_below_use_applies_after_frees(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    void *live[600];
    for (int i = 0; i < 600; i++) {
        live[i] = coop_torch_malloc(MIB, 0, STREAM(0));
        assert_non_null(live[i]);
    }
    assert_int_equal(device_stats(0).reserved_bytes.current, 600 * MIB);
    capture c;
    capture_begin(&c);
    coop_torch_memory_fraction(0.25, 0);
    size_t error_after_fraction = coop_torch_last_error(NULL, 0);
    coop_stats held = device_stats(0);
    void *grows = coop_torch_malloc(64 * MIB, 0, STREAM(0)); /* needs new pages */
    char grows_why[1024];
    coop_torch_failed_mallocs(0, grows_why, sizeof grows_why);
    /* a failure that is not out of memory: the limit is not its cause */
    void *reserved = coop_torch_malloc(MIB, 0, (void *)UINTPTR_MAX); /* COOP_STREAM_ANY */
    char reserved_why[1024];
    coop_status reserved_st = COOP_OK;
    coop_torch_failed_malloc_status(0, reserved_why, sizeof reserved_why, &reserved_st);
    for (int i = 0; i < 600; i++)
        coop_torch_free(live[i], MIB, 0, STREAM(0));
    void *above = coop_torch_malloc(512 * MIB, 0, STREAM(0)); /* applies the limit first */
    char above_why[1024];
    coop_torch_failed_mallocs(0, above_why, sizeof above_why);
    coop_stats limited = device_stats(0);
    void *below = coop_torch_malloc(200 * MIB, 0, STREAM(0));
    const char *err = capture_end(&c);

    assert_int_equal(error_after_fraction, 0);
    assert_int_equal(held.capacity, 600 * MIB);
    assert_null(grows);
    assert_null(above);
    assert_int_equal(limited.capacity, 256 * MIB);
    assert_non_null(below);
    /* the first out-of-memory was printed, and no error of the fraction's
     * own (error_after_fraction); that out-of-memory quotes the held
     * capacity and says which limit waits behind it (it used to quote the
     * capacity alone), the one after the limit applied no more */
    if (!strstr(err, "67108864 bytes") || strstr(err, "capacity 268"))
        fail_msg("stderr: '%s'", err);
    if (!strstr(grows_why, "capacity 629145600") ||
        !strstr(grows_why, "a memory limit of 268435456 bytes (coop_torch_memory_fraction) is "
                           "pending") ||
        !strstr(grows_why, "the capacity is held at 629145600"))
        fail_msg("held limit's out-of-memory: '%s'", grows_why);
    assert_null(reserved);
    assert_int_equal(reserved_st, COOP_ERR_INVALID);
    if (!strstr(reserved_why, "coop_malloc") || strstr(reserved_why, "memory limit"))
        fail_msg("held limit's refused stream: '%s'", reserved_why);
    if (!strstr(above_why, "capacity 268435456") || strstr(above_why, "pending:"))
        fail_msg("applied limit's out-of-memory: '%s'", above_why);
    coop_torch_free(below, 200 * MIB, 0, STREAM(0));
    coop_torch_memory_fraction(1.0, 0);
    assert_int_equal(device_stats(0).capacity, 1024 * MIB);
}

/* A memory fraction of 0.25 set below use (so held), then a malloc of
 * size on stream that cannot fit: out of memory, its failed-malloc record
 * in why (of why_size bytes). */
static void out_of_memory_under_a_held_limit(size_t size, void *stream, char *why, size_t why_size)
{
    coop_torch_memory_fraction(0.25, 0); /* below use: held */
    capture c;
    capture_begin(&c);
    void *p = coop_torch_malloc(size, 0, stream);
    capture_end(&c);
    assert_null(p);
    coop_status st = COOP_OK;
    coop_torch_failed_malloc_status(0, why, why_size, &st);
    assert_int_equal(st, COOP_ERR_NOMEM);
}

/* The held limit's note survives in the failed-malloc record with a GPU's
 * figures: an 80 GiB device's 11-digit byte counts and a stream that is a
 * heap address. The record kept 512 bytes, and this message is over 530:
 * check_oom raised it cut at "... held at 42951770112 until". */
static void test_a_held_limits_note_survives_gpu_sized_figures(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,page:2M"), COOP_OK);
    void *stream = (void *)(uintptr_t)0x55d5c3a1b2c0u;
    for (int i = 0; i < 40; i++)
        assert_non_null(coop_torch_malloc(1024 * MIB + 512, 0, stream));
    char why[1024];
    out_of_memory_under_a_held_limit(1234567890, stream, why, sizeof why);
    if (!strstr(why, "capacity 42951770112") ||
        !strstr(why,
                "a memory limit of 21474836480 bytes (coop_torch_memory_fraction) is pending") ||
        !strstr(why, "until frees let the limit apply"))
        fail_msg("held limit's out-of-memory: '%s'", why);
}

/* Fills device 0 for a long out-of-memory message on stream, whose figures
 * do not depend on stream's value: GPU-sized blocks, pending frees, free
 * bytes kept for a stream not seen finished (a host hold), a finished
 * stream's beside them and stream's own; then a held limit and a malloc of
 * 25000000000 bytes on stream, its failed-malloc record in why. Releases
 * the holds. */
static void out_of_memory_after_a_long_pool_message(void *stream, char *why, size_t why_size)
{
    assert_int_equal(coop_torch_configure("backend:host,page:2M"), COOP_OK);
    void *other = (void *)(uintptr_t)0x55d5c3a1b4c0u;
    for (int i = 0; i < 30; i++)
        assert_non_null(coop_torch_malloc(1024 * MIB + 512, 0, stream));
    void *third = (void *)(uintptr_t)0x55d5c3a1b6c0u;
    void *kept = coop_torch_malloc(10240 * MIB + 512, 0, other);
    void *beside = coop_torch_malloc(10240 * MIB + 512, 0, third);
    void *own = coop_torch_malloc(1024 * MIB + 512, 0, stream);
    void *pending = coop_torch_malloc(10240 * MIB + 512, 0, stream);
    assert_non_null(kept);
    assert_non_null(beside);
    assert_non_null(own);
    assert_non_null(pending);
    coop_torch_record_stream(pending, other);
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), (coop_stream)other, true), COOP_OK);
    coop_torch_free(kept, 10240 * MIB + 512, 0, other);
    coop_torch_free(beside, 10240 * MIB + 512, 0, third);
    /* held too: its free block stays its own, beside the third's */
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), (coop_stream)stream, true), COOP_OK);
    coop_torch_free(own, 1024 * MIB + 512, 0, stream);
    coop_torch_free(pending, 10240 * MIB + 512, 0, stream);
    out_of_memory_under_a_held_limit(25000000000, stream, why, why_size);
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), (coop_stream)other, false), COOP_OK);
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), (coop_stream)stream, false),
                     COOP_OK);
}

/* The start every such record has, and the held limit's note it ends with. */
static const char long_message_start[] = "coop torch: malloc of 25000000000 bytes on device 0: ";
static const char held_note[] =
    "; a memory limit of 21474836480 bytes (coop_torch_memory_fraction) is pending: live blocks "
    "and pending frees keep more mapped, so the capacity is held at 65500348416 until frees let "
    "the limit apply";

/* The held limit's note survives a pool message long enough to fill the
 * record: with a stream printed in 18 characters, the pool's message (790
 * bytes), "coop torch: malloc ... on device 0: " before it and the note
 * after it passed COOP_ERROR_MAX: the note was cut (rev37-I:
 * "... until frees le"). The pool message is shortened instead, "..."
 * where it is cut (asked for: were the pool's message shorter, this case
 * would no longer test the cut and must be made longer). */
static void test_a_held_limits_note_survives_a_long_pool_message(void **state)
{
    (void)state;
    char why[1024];
    out_of_memory_after_a_long_pool_message((void *)(uintptr_t)0xfffffffffff0c000u, why,
                                            sizeof why);
    if (!strstr(why, long_message_start) || !strstr(why, "...; a memory limit") ||
        !strstr(why,
                "a memory limit of 21474836480 bytes (coop_torch_memory_fraction) is pending") ||
        !strstr(why, "until frees let the limit apply"))
        fail_msg("held limit's out-of-memory (%zu bytes), ending: '%s'", strlen(why),
                 why + (strlen(why) > 400 ? strlen(why) - 400 : 0));
    /* cut to fill the record exactly: the messages are ASCII, so no
     * character's bytes shorten it (rev37-J: one byte short passed) */
    assert_int_equal(strlen(why), sizeof why - 1);
    char last[1024];
    coop_torch_last_error(last, sizeof last);
    if (!strstr(last, "until frees let the limit apply"))
        fail_msg("last error: '%s'", last);
}

/* A pool message exactly the room the start and the note leave is kept
 * whole, not cut (rev37-J's J12: made "<", a mutant no test killed, it lost
 * its last 3 bytes to "..."). Stream 0, printed "0" (%#lx), is 17
 * characters shorter than the case above's, which the message was over the
 * room by: asked for, as the whole record filling COOP_ERROR_MAX - 1 bytes
 * with no "...", so that a change of the figures cannot leave this case
 * testing nothing. */
static void test_a_pool_message_exactly_the_room_left_is_whole(void **state)
{
    (void)state;
    char why[1024];
    out_of_memory_after_a_long_pool_message((void *)(uintptr_t)0, why, sizeof why);
    size_t len = strlen(why);
    size_t note = sizeof held_note - 1;
    if (strncmp(why, long_message_start, sizeof long_message_start - 1) != 0 || len < note ||
        strcmp(why + len - note, held_note) != 0)
        fail_msg("held limit's out-of-memory (%zu bytes): '%s'", len, why);
    if (strstr(why, "..."))
        fail_msg("a pool message exactly the room left was cut (%zu bytes), ending: '%s'", len,
                 why + (len > 400 ? len - 400 : 0));
    /* the room exactly: were the figures to change, the pool's message
     * must be made that much longer or shorter for this case to test it */
    assert_int_equal(len, sizeof why - 1);
    if (!strstr(why, "on stream 0: ") ||
        !strstr(why, "kept with their stream beside a free block of a stream not seen finished "
                     "(this stream's own), usable on their streams only; a memory limit"))
        fail_msg("pool message: '%s'", why);
}

/* A fraction below what live blocks keep holds the capacity at the bytes
 * mapped, cached free pages included: none is released (torch's fraction
 * does not empty its cache either), and the cache is reused; empty_cache
 * releases it and holds the capacity at what stays mapped. */
static void test_a_held_limit_keeps_the_cache(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    void *live = coop_torch_malloc(300 * MIB, 0, STREAM(0));
    void *cached = coop_torch_malloc(300 * MIB, 0, STREAM(0));
    assert_non_null(live);
    assert_non_null(cached);
    coop_torch_free(cached, 300 * MIB, 0, STREAM(0));
    coop_torch_memory_fraction(0.25, 0); /* 256 MiB < 300 MiB live */
    coop_stats held = device_stats(0);
    assert_int_equal(held.capacity, 600 * MIB);
    assert_int_equal(held.reserved_bytes.current, 600 * MIB);
    assert_int_equal(held.num_unmaps, 0);
    void *reuse = coop_torch_malloc(200 * MIB, 0, STREAM(0)); /* from the cache */
    assert_non_null(reuse);
    assert_int_equal(device_stats(0).reserved_bytes.current, 600 * MIB);
    coop_torch_free(reuse, 200 * MIB, 0, STREAM(0));
    coop_torch_empty_cache(); /* the limit still out of reach: held lower */
    assert_int_equal(device_stats(0).capacity, 300 * MIB);
    assert_int_equal(device_stats(0).reserved_bytes.current, 300 * MIB);
    coop_torch_free(live, 300 * MIB, 0, STREAM(0));
    coop_torch_empty_cache();
    assert_int_equal(device_stats(0).capacity, 256 * MIB);
}

/* The block freed by free_at_refusal (once). */
static void *refused_with;

/* torch_limit_refused_hook: frees the block that kept the limit out, as
 * another thread can between the refusal and the limit being held. */
static void free_at_refusal(int device)
{
    assert_int_equal(device, 0);
    torch_limit_refused_hook = NULL;
    coop_torch_free(refused_with, 512 * MIB, 0, STREAM(0));
}

/* A free just after a fraction was refused: the next allocation applies the
 * limit. The limit used to be held pending only after the refusal, so this
 * free found none to flag itself for, and the limit waited for another. */
static void test_free_at_the_refusal_is_not_lost(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    refused_with = coop_torch_malloc(512 * MIB, 0, STREAM(0));
    assert_non_null(refused_with);
    torch_limit_refused_hook = free_at_refusal;
    coop_torch_memory_fraction(0.25, 0);
    assert_null(torch_limit_refused_hook);                 /* it ran: the limit was refused */
    assert_int_equal(device_stats(0).capacity, 512 * MIB); /* held at the mapped bytes */
    void *p = coop_torch_malloc(MIB, 0, STREAM(0));
    assert_non_null(p);
    assert_int_equal(device_stats(0).capacity, 256 * MIB);
    coop_torch_free(p, MIB, 0, STREAM(0));
}

/* torch accepts fractions in [0, 1]: 0 is the smallest capacity coop has,
 * one page; outside [0, 1] is an error naming the fraction and the device. */
static void test_fraction_zero_and_out_of_range(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    coop_torch_memory_fraction(0.0, 1); /* before the pool: pending */
    void *small = coop_torch_malloc(MIB, 1, STREAM(0));
    assert_non_null(small);
    assert_int_equal(coop_torch_last_error(NULL, 0), 0);
    assert_int_equal(device_stats(1).capacity, 2 * MIB);
    assert_null(coop_torch_malloc(4 * MIB, 1, STREAM(0)));
    coop_torch_free(small, MIB, 1, STREAM(0));
    coop_torch_memory_fraction(0.5, 1);
    assert_int_equal(device_stats(1).capacity, 512 * MIB);
    coop_torch_memory_fraction(0.0, 1); /* with a pool, nothing live */
    assert_int_equal(device_stats(1).capacity, 2 * MIB);

    const double bad[] = {-0.25, 1.5, NAN};
    char buf[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coop_torch_memory_fraction(bad[i], 1);
        coop_torch_last_error(buf, sizeof buf);
        if (!strstr(buf, "memory fraction") || !strstr(buf, "device 1") || !strstr(buf, "[0, 1]"))
            fail_msg("fraction %g: '%s'", bad[i], buf);
        assert_int_equal(device_stats(1).capacity, 2 * MIB);
    }
}

/* record_stream of memory coop did not allocate (a tensor shared from
 * another process or imported with DLPack: torch's pluggable route passes
 * every tensor's pointer) is skipped silently, as torch's own allocator
 * skips it: no stderr line, no last error, and the one stderr line for
 * foreign pointers stays for a free that really is wrong. */
static void test_record_stream_of_foreign_memory_is_ignored(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M"), COOP_OK);
    int foreign;
    capture c;
    capture_begin(&c);
    coop_torch_record_stream(&foreign, STREAM(3)); /* before any pool */
    void *p = coop_torch_malloc(4096, 0, STREAM(0));
    coop_torch_record_stream(&foreign, STREAM(3)); /* with a pool */
    size_t error_after_record = coop_torch_last_error(NULL, 0);
    coop_torch_free(&foreign, 4, 0, STREAM(0));
    const char *err = capture_end(&c);

    assert_non_null(p);
    assert_int_equal(error_after_record, 0);
    if (strstr(err, "record_stream") || !strstr(err, "coop_free("))
        fail_msg("stderr: '%s'", err);
    coop_torch_free(p, 4096, 0, STREAM(0));
}

/* A fraction that applies at once leaves no limit pending: a capacity set
 * on the device's pool afterwards (coop_set_capacity on coop_torch_pool) is
 * not lowered back to the fraction by later frees, mallocs or empty_cache. */
static void test_an_applied_fraction_leaves_nothing_pending(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    void *p = coop_torch_malloc(MIB, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_memory_fraction(0.5, 0);
    assert_int_equal(device_stats(0).capacity, 512 * MIB);
    assert_int_equal(coop_set_capacity(coop_torch_pool(0), 1024 * MIB), COOP_OK);
    coop_torch_free(p, MIB, 0, STREAM(0));
    void *q = coop_torch_malloc(MIB, 0, STREAM(0));
    assert_non_null(q);
    assert_int_equal(device_stats(0).capacity, 1024 * MIB);
    coop_torch_empty_cache();
    assert_int_equal(device_stats(0).capacity, 1024 * MIB);
    coop_torch_free(q, MIB, 0, STREAM(0));
}

/* A limit that waits for a block freed while another stream used it: the
 * free's retry came while the stream still held the block, so no later free
 * is there to flag the limit. empty_cache completes the block, releases the
 * cache, and applies the limit itself (torch users read memory_reserved
 * right after it). */
static void test_empty_cache_applies_a_waiting_limit(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    void *small = coop_torch_malloc(MIB, 0, STREAM(1)); /* a page with room for later */
    void *big = coop_torch_malloc(510 * MIB, 0, STREAM(1));
    assert_non_null(small);
    assert_non_null(big);
    coop_torch_memory_fraction(0.25, 0); /* below use: held at the mapped bytes */
    assert_int_equal(device_stats(0).capacity, 512 * MIB);
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), 7, true), COOP_OK);
    coop_torch_record_stream(big, STREAM(7));
    coop_torch_free(big, 510 * MIB, 0, STREAM(1));            /* pending on stream 7 */
    void *more = coop_torch_malloc(512 * 1024, 0, STREAM(1)); /* tries the limit: refused */
    assert_non_null(more);
    assert_int_equal(device_stats(0).capacity, 512 * MIB);
    assert_int_equal(coop_host_hold_stream(coop_torch_pool(0), 7, false), COOP_OK);
    coop_torch_empty_cache();
    assert_int_equal(device_stats(0).capacity, 256 * MIB);
    coop_torch_free(more, 512 * 1024, 0, STREAM(1));
    coop_torch_free(small, MIB, 0, STREAM(1));
}

/* The capacity of a fraction is torch's: fraction * total truncated to
 * bytes (its allowed_memory_maximum), then coop's pages. A product half a
 * byte past two pages gives two pages, not three. */
static void test_fraction_truncates_to_bytes(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:1G,page:2M"), COOP_OK);
    void *p = coop_torch_malloc(MIB, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_memory_fraction(0x1p-8 + 0x1p-31, 0); /* * 2^30 = 2^22 + 0.5 exactly */
    assert_int_equal(device_stats(0).capacity, 4 * MIB);
    coop_torch_free(p, MIB, 0, STREAM(0));
}

/* coop_torch_init takes every count torch can give, up to the last slot,
 * also after a smaller one. */
static void test_init_takes_every_device_count(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M"), COOP_OK);
    coop_torch_init(1);
    assert_null(coop_torch_malloc(64, 1, STREAM(0)));
    coop_torch_init(COOP_TORCH_MAX_DEVICES);
    void *p = coop_torch_malloc(64, COOP_TORCH_MAX_DEVICES - 1, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 64, COOP_TORCH_MAX_DEVICES - 1, STREAM(0));
    /* a count of 0 (torch's first call) or out of range is no count: the
     * limit stays; out of range is an error, reported (0 is not) */
    char buf[256], before[256];
    coop_torch_last_error(before, sizeof before);
    coop_torch_init(0);
    coop_torch_last_error(buf, sizeof buf);
    assert_string_equal(buf, before);
    coop_torch_init(-1);
    coop_torch_last_error(buf, sizeof buf);
    assert_non_null(
        strstr(buf, "init with a device count of -1: it must be 1..64; devices stay 0..63"));
    coop_torch_init(COOP_TORCH_MAX_DEVICES + 1);
    coop_torch_last_error(buf, sizeof buf);
    assert_non_null(strstr(buf, "device count of 65"));
    p = coop_torch_malloc(64, COOP_TORCH_MAX_DEVICES - 1, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 64, COOP_TORCH_MAX_DEVICES - 1, STREAM(0));
}

/* A configuration that parses but cannot make a pool (min_split above the
 * page) fails every malloc; each failure is counted per device with its
 * message, so coop.torch.check_oom can raise it (there is no pool whose
 * num_ooms could). Sizes 0 and devices out of range are not counted. */
static void test_a_pool_that_cannot_be_made_is_counted(void **state)
{
    (void)state;
    char buf[512];
    assert_int_equal(coop_torch_configure("backend:host,page:2M,min_split:4M"), COOP_OK);
    assert_int_equal(coop_torch_failed_mallocs(0, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_null(coop_torch_malloc(64, 0, STREAM(0)));
    assert_null(coop_torch_malloc(64, 0, STREAM(0)));
    assert_null(coop_torch_malloc(0, 0, STREAM(0)));
    assert_null(coop_torch_pool(0));
    assert_int_equal(coop_torch_failed_mallocs(0, buf, sizeof buf), 2);
    assert_non_null(strstr(buf, "min_split"));
    assert_int_equal(coop_torch_failed_mallocs(1, buf, sizeof buf), 0);
    assert_int_equal(coop_torch_failed_mallocs(-1, buf, sizeof buf), 0);
    assert_int_equal(coop_torch_failed_mallocs(64, NULL, 0), 0);
    /* a configuration that works: the count stays, later mallocs succeed */
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M"), COOP_OK);
    void *p = coop_torch_malloc(64, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 64, 0, STREAM(0));
    assert_int_equal(coop_torch_failed_mallocs(0, NULL, 0), 2);
    /* an out-of-memory NULL counts too, with its numbers */
    assert_null(coop_torch_malloc(65 * MIB, 0, STREAM(0)));
    assert_int_equal(coop_torch_failed_mallocs(0, buf, sizeof buf), 3);
    assert_non_null(strstr(buf, "out of memory"));
}

/* coop.h: coop_torch_configure(NULL) reads COOP_ALLOC_CONF; one that does
 * not parse is COOP_ERR_INVALID naming the key and value, and the
 * configuration in force stays; COOP_ERR_BUSY once a pool exists (the
 * environment then changes nothing either). */
static void test_configure_null_reads_the_environment(void **state)
{
    (void)state;
    char before[512], after[512];
    assert_int_equal(setenv("COOP_ALLOC_CONF", "backend:host,capacity:32M,page:1M", 1), 0);
    assert_int_equal(coop_torch_configure(NULL), COOP_OK);
    assert_int_equal(coop_torch_settings(before, sizeof before), COOP_OK);
    assert_non_null(strstr(before, "backend:host,capacity:33554432,page:1048576"));
    assert_int_equal(setenv("COOP_ALLOC_CONF", "backend:host,capacity:12Q", 1), 0);
    assert_int_equal(coop_torch_configure(NULL), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "capacity"));
    assert_non_null(strstr(coop_last_error(), "12Q"));
    assert_int_equal(coop_torch_settings(after, sizeof after), COOP_OK);
    assert_string_equal(after, before);
    void *p = coop_torch_malloc(64, 0, STREAM(0));
    assert_non_null(p);
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.capacity, 32 * MIB);
    assert_int_equal(setenv("COOP_ALLOC_CONF", "backend:host,capacity:16M", 1), 0);
    assert_int_equal(coop_torch_configure(NULL), COOP_ERR_BUSY);
    assert_int_equal(coop_torch_settings(after, sizeof after), COOP_OK);
    assert_string_equal(after, before);
    coop_torch_free(p, 64, 0, STREAM(0));
    unsetenv("COOP_ALLOC_CONF");
}

int main(void)
{
    /* each case's own configuration, whatever the environment says */
    unsetenv("COOP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_history_from_the_configuration),
        cmocka_unit_test(test_record_history_outlasts_the_lazy_load),
        cmocka_unit_test(test_record_history_outlasts_configure),
        cmocka_unit_test(test_fraction_below_use_applies_after_frees),
        cmocka_unit_test(test_a_held_limits_note_survives_gpu_sized_figures),
        cmocka_unit_test(test_a_held_limits_note_survives_a_long_pool_message),
        cmocka_unit_test(test_a_pool_message_exactly_the_room_left_is_whole),
        cmocka_unit_test(test_a_held_limit_keeps_the_cache),
        cmocka_unit_test(test_free_at_the_refusal_is_not_lost),
        cmocka_unit_test(test_an_applied_fraction_leaves_nothing_pending),
        cmocka_unit_test(test_empty_cache_applies_a_waiting_limit),
        cmocka_unit_test(test_fraction_truncates_to_bytes),
        cmocka_unit_test(test_init_takes_every_device_count),
        cmocka_unit_test(test_fraction_zero_and_out_of_range),
        cmocka_unit_test(test_a_pool_that_cannot_be_made_is_counted),
        cmocka_unit_test(test_record_stream_of_foreign_memory_is_ignored),
        cmocka_unit_test(test_configure_null_reads_the_environment),
    };
    return cases_in_children("torch_abi_fresh_test", tests, sizeof tests / sizeof tests[0],
                             CASE_TIME_LIMIT);
}
