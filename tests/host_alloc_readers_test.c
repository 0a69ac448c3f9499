/*
 * Host allocation fault sweeps (host_alloc_sweep.h) through each trace
 * reader on a small input: pickle, text, gzip text (and the text writer
 * that makes it), minimalloc CSV, DTR log, and trace_read's detection. A
 * refused read leaves its output zeroed; a recovered one reads every event.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coop.h"
#include "trace/trace.h"

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"

typedef struct read_ctx {
    coop_status (*read)(const char *path, trace *out);
    const char *path;
    trace t;
    size_t events; /* the unfaulted read's count */
} read_ctx;

static coop_status read_run(void *ctx)
{
    read_ctx *c = ctx;
    return c->read(c->path, &c->t);
}

static void read_cleanup(void *ctx)
{
    read_ctx *c = ctx;
    if (c->t.num_events != c->events)
        fail_msg("%s: %zu events after a recovered fault, not %zu", c->path, c->t.num_events,
                 c->events);
    trace_free(&c->t);
}

static void read_check_failed(void *ctx)
{
    read_ctx *c = ctx;
    static const trace zero;
    if (memcmp(&c->t, &zero, sizeof zero) != 0)
        fail_msg("%s: the output is not zeroed after a failed read", c->path);
}

static void sweep_reader(const char *name, coop_status (*read)(const char *, trace *),
                         const char *path)
{
    read_ctx c = {.read = read, .path = path};
    assert_int_equal(read(path, &c.t), COOP_OK);
    c.events = c.t.num_events;
    assert_true(c.events > 0);
    trace_free(&c.t);
    operation op = {name, read_run, read_cleanup, read_check_failed, &c};
    host_alloc_report(name, host_alloc_sweep(&op));
}

static void readers(void **state)
{
    (void)state;
    sweep_reader("pickle (snapshot3.pickle)", trace_read_pickle, CORPUS "pickle/snapshot3.pickle");
    sweep_reader("pickle (cs336-forward-head.p2)", trace_read_pickle,
                 CORPUS "pickle/cs336-forward-head.p2.pickle");
    sweep_reader("pickle (cs336-forward-head.p4)", trace_read_pickle,
                 CORPUS "pickle/cs336-forward-head.p4.pickle");
    sweep_reader("text (unet-head.trace)", trace_read_text, CORPUS "text/unet-head.trace");
    sweep_reader("minimalloc (buffers.csv)", trace_read_minimalloc,
                 CORPUS "trace_read/buffers.csv");
    sweep_reader("dtr (unet-head.jsonl)", trace_read_dtr, CORPUS "dtr/unet-head.jsonl");
    sweep_reader("detect+read (ops.jsonl)", trace_read, CORPUS "dtr/ops.jsonl");
    sweep_reader("detect+read (snapshot.pickle)", trace_read, CORPUS "trace_read/snapshot.pickle");
    sweep_reader("detect+read (example.trace)", trace_read, CORPUS "text/example.trace");
}

/* The text reader on gzip input: a gzip copy of unet-head.trace written
 * with the text writer (itself swept: a refused write removes nothing it
 * should not and leaks nothing). */
typedef struct write_ctx {
    const trace *t;
    const char *path;
} write_ctx;

static coop_status write_run(void *ctx)
{
    write_ctx *c = ctx;
    return trace_write_text_to(c->t, c->path, true);
}

static void write_cleanup(void *ctx)
{
    (void)ctx;
}

static void gzip_text(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(trace_read_text(CORPUS "text/unet-head.trace", &t), COOP_OK);
    char path[] = "/tmp/coop-host-fault-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_ctx w = {&t, path};
    operation op = {"write text (gzip)", write_run, write_cleanup, NULL, &w};
    host_alloc_report(op.name, host_alloc_sweep(&op));
    assert_int_equal(trace_write_text_to(&t, path, true), COOP_OK);
    trace_free(&t);
    sweep_reader("text (gzip unet-head)", trace_read_text, path);
    unlink(path);
}

/* Memory of a long trace (tests/README.md, "Scaling with trace size"): a
 * reader holds the whole trace once, 48 bytes an event (sizeof (trace_event)),
 * plus a few bytes an id while it numbers them, and makes no allocation per
 * event. trace_builder_finish used to copy the events into a second array,
 * which took the peak to about 100 bytes an event. */
enum { LONG_PAIRS = 125000, LONG_WINDOW = 64 };

static void long_trace_is_held_once(void **state)
{
    (void)state;
    char path[] = "/tmp/coop-long-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f, "coop-trace 1\n");
    /* LONG_PAIRS allocations, LONG_WINDOW of them live at a time */
    for (long i = 0; i < LONG_PAIRS + LONG_WINDOW; i++) {
        if (i < LONG_PAIRS)
            fprintf(f, "A %ld %ld 0\n", i, 512 + (i % 7) * 4096);
        if (i >= LONG_WINDOW)
            fprintf(f, "F %ld\n", i - LONG_WINDOW);
    }
    assert_int_equal(fclose(f), 0);

    const size_t events = 2 * (size_t)LONG_PAIRS;
    trace t;
    long long before = host_fault_bytes();
    long calls = host_fault_allocations();
    host_fault_peak_reset();
    assert_int_equal(trace_read_text(path, &t), COOP_OK);
    long long peak = host_fault_peak_bytes() - before;
    calls = host_fault_allocations() - calls;
    assert_int_equal(t.num_events, events);
    trace_free(&t);

    /* Out of memory part way: the message names the line it got to (line 1
     * is the header, each later one an event). Every allocation of the read
     * fails in turn; those of the events array say "PATH:LINE: out of memory
     * (N events read)" (before: "PATH: out of memory", nothing more). */
    int named = 0;
    for (long k = 1; k <= calls; k++) {
        host_fault_arm(k);
        coop_status st = trace_read_text(path, &t);
        host_fault_disarm();
        if (st == COOP_OK) {
            trace_free(&t);
            continue;
        }
        assert_int_equal(st, COOP_ERR_HOST_NOMEM);
        const char *msg = coop_last_error();
        unsigned long long line;
        size_t read;
        char tail[32];
        if (strstr(msg, "events read")) {
            char format[256];
            snprintf(format, sizeof format, "%s:%%llu: out of memory (%%zu events read%%31s", path);
            if (sscanf(msg, format, &line, &read, tail) != 3 || line != read + 2)
                fail_msg("out of memory at allocation %ld: '%s' does not name the line", k, msg);
            named++;
        }
    }
    assert_true(named >= 5); /* the doublings past the first 1024 events */
    print_message("text reader, %zu events: peak %lld bytes (%.1f an event), %ld allocations\n",
                  events, peak, (double)peak / (double)events, calls);
    /* 48 an event, the doubling's last step rounding 250,000 up to 262,144
     * (50.3), 12 an id for the renumbering (6 an event): 64 leaves room for
     * the input buffer, not for a second copy of the events */
    if (peak > (long long)(64 * events))
        fail_msg("reading %zu events peaked at %lld bytes, %.1f an event (at most 64)", events,
                 peak, (double)peak / (double)events);
    /* the events array doubles: a few dozen allocations whatever the length */
    if (calls > 200)
        fail_msg("reading %zu events made %ld allocations (at most 200)", events, calls);
    unlink(path);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(readers),
        cmocka_unit_test(gzip_text),
        cmocka_unit_test(long_trace_is_held_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
