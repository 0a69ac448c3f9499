/*
 * Host allocation fault sweeps (host_alloc_sweep.h) through each trace
 * reader on a small input: pickle, text, gzip text (and the text writer
 * that makes it), minimalloc CSV, DTR log, and trace_read's detection. A
 * refused read leaves its output zeroed; a recovered one reads every event.
 * Then a pipe kept whole (trace/spool.h) with each of its allocations, and
 * zlib's gzdopen of the copy (-Wl,--wrap=gzdopen: the wrapper below fails
 * it when armed, as zlib does without memory for its state), failing:
 * no descriptor is left open; and the copy of the copy that each open
 * makes without /proc.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <zlib.h>

#include "coop.h"
#include "trace/input.h"
#include "trace/spool.h"
#include "trace/trace.h"

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"
#include "open_descriptors.h"

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

/* A PyTorch snapshot's reader (tests/README.md, "Scaling with trace size"):
 * every entry carries its stack frames, which the reader never reads. The
 * parse used to keep them all, in a tree of 48-byte nodes: about 3,200 heap
 * bytes an event for this file's 16 frames an entry (1,100 of RSS for
 * scripts/long_trace.py's). Pruned as they are parsed, what is left is the
 * file itself (about 310 bytes an event here), each entry's dict and its
 * ints (about 420) and the events (48). */
enum { SNAP_ALLOCS = 20000, SNAP_FRAMES = 16 };

/* Strings are memoized on first use and fetched (LONG_BINGET) after, as
 * PyTorch's pickles repeat keys, file and function names. */
enum {
    S_SEGMENTS,
    S_TRACES,
    S_ACTION,
    S_ADDR,
    S_SIZE,
    S_STREAM,
    S_TIME,
    S_FRAMES,
    S_FILE,
    S_LINE,
    S_NAME,
    S_ALLOC,
    S_REQUESTED,
    S_COMPLETED,
    S_MODEL_PY,
    S_FORWARD,
    NUM_STRS
};
static const char *const snapshot_strs[NUM_STRS] = {
    "segments",       "device_traces",  "action",   "addr",   "size", "stream",
    "time_us",        "frames",         "filename", "line",   "name", "alloc",
    "free_requested", "free_completed", "model.py", "forward"};

typedef struct pickle_out {
    FILE *f;
    unsigned memo[NUM_STRS]; /* memo index + 1 of each string, 0 before its first use */
    unsigned memo_len;
} pickle_out;

static void put_byte(pickle_out *p, unsigned c)
{
    assert_true(fputc((int)c, p->f) != EOF);
}

static void put_uint(pickle_out *p, uint64_t x, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(p, (unsigned)(x >> (8 * i)) & 0xff);
}

static void put_ops(pickle_out *p, const char *ops)
{
    assert_true(fputs(ops, p->f) != EOF);
}

static void put_str(pickle_out *p, int s)
{
    if (p->memo[s]) {
        put_byte(p, 'h'); /* BINGET */
        put_byte(p, p->memo[s] - 1);
        return;
    }
    put_byte(p, 0x8c); /* SHORT_BINUNICODE */
    put_byte(p, (unsigned)strlen(snapshot_strs[s]));
    put_ops(p, snapshot_strs[s]);
    put_byte(p, 'q'); /* BINPUT */
    put_byte(p, p->memo_len);
    p->memo[s] = ++p->memo_len;
}

static void put_long(pickle_out *p, uint64_t x)
{
    put_byte(p, 0x8a); /* LONG1, 8 bytes */
    put_byte(p, 8);
    put_uint(p, x, 8);
}

static void snapshot_is_read_without_its_frames(void **state)
{
    (void)state;
    char path[] = "/tmp/coop-long-snapshot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    pickle_out p = {.f = fdopen(fd, "w")};
    assert_non_null(p.f);
    put_ops(&p, "\x80\x04}(");
    put_str(&p, S_SEGMENTS);
    put_ops(&p, "]");
    put_str(&p, S_TRACES);
    put_ops(&p, "](]("); /* device 0's list, its entries in batches of 1000 */
    size_t entries = 0;
    for (uint64_t a = 0; a < SNAP_ALLOCS; a++) {
        for (int k = 0; k < 3; k++) { /* alloc, free_requested, free_completed */
            put_ops(&p, "}(");
            put_str(&p, S_ACTION);
            put_str(&p, S_ALLOC + k);
            put_str(&p, S_ADDR);
            put_long(&p, 0x7f0000000000ull + (a % 64) * 0x100000);
            put_str(&p, S_SIZE);
            put_long(&p, 512 + (a % 7) * 4096);
            put_str(&p, S_STREAM);
            put_ops(&p, "K");
            put_byte(&p, 0);
            put_str(&p, S_TIME);
            put_long(&p, 1000000 + 3 * a + (uint64_t)k);
            put_str(&p, S_FRAMES);
            put_ops(&p, "](");
            for (int f = 0; f < SNAP_FRAMES; f++) {
                put_ops(&p, "}(");
                put_str(&p, S_FILE);
                put_str(&p, S_MODEL_PY);
                put_str(&p, S_LINE);
                put_byte(&p, 'M');
                put_uint(&p, 100 + (unsigned)f, 2);
                put_str(&p, S_NAME);
                put_str(&p, S_FORWARD);
                put_ops(&p, "u");
            }
            put_ops(&p, "eu"); /* the frames; the entry */
            if (++entries % 1000 == 0)
                put_ops(&p, "e(");
        }
    }
    put_ops(&p, "eeu."); /* the batch, device 0, device_traces; the root */
    long file_bytes = ftell(p.f);
    assert_int_equal(fclose(p.f), 0);

    trace t;
    long long before = host_fault_bytes();
    host_fault_peak_reset();
    assert_int_equal(trace_read_pickle(path, &t), COOP_OK);
    long long peak = host_fault_peak_bytes() - before;
    /* every entry an event: each block is freed before its address (one of
     * 64) is allocated again */
    assert_int_equal(t.num_events, entries);
    trace_free(&t);
    unlink(path);
    print_message("snapshot reader, %zu events with %d frames each (%.1f bytes of pickle an "
                  "event): peak %lld bytes (%.1f an event)\n",
                  entries, SNAP_FRAMES, (double)file_bytes / (double)entries, peak,
                  (double)peak / (double)entries);
    /* the file is read twice, never whole (a regular file: trace_input_each
     * counts it and scans its memo through one buffer of at most 16 MiB,
     * then pkl_parse_stream parses it through a 1 MiB window); besides that
     * buffer, each entry's node with its summary (48 bytes: the entry
     * sealed, pkl_parse_sealed), its slot in the list, the events (48 and
     * the doubling's slack) and the ids. Read whole, the file doubling as
     * it was read, the peak was twice the file and 214 an event besides (249
     * while the buffer was kept until the events were built), against 707
     * with each entry's dict, item array and ints kept (pruned only) and
     * 2,700 with the frames kept too: the bound was 230 besides twice the
     * file, 49.8 MB here, where 230 besides the 16 MiB buffer is 30.6 MB */
    long long beside_buffer = peak - ((long long)16 << 20);
    if (beside_buffer > (long long)(230 * entries))
        fail_msg("reading %zu snapshot events peaked at %lld bytes besides the 16 MiB read "
                 "buffer, %.1f an event (at most 230: is the file read whole, or kept while the "
                 "events are built, or the entries kept as dicts, or their frames?)",
                 entries, beside_buffer, (double)beside_buffer / (double)entries);
}

/* A snapshot's reader out of memory while it builds the trace: the message
 * names the byte of the entry it got to, as the text reader names its line
 * ("PATH: byte N: out of memory (K events read)"). Every allocation of the
 * read fails in turn. */
static void snapshot_out_of_memory_names_its_byte(void **state)
{
    (void)state;
    const char *path = CORPUS "pickle/snapshot3.pickle";
    trace t;
    long calls = host_fault_allocations();
    assert_int_equal(trace_read_pickle(path, &t), COOP_OK);
    calls = host_fault_allocations() - calls;
    trace_free(&t);
    int named = 0;
    for (long k = 1; k <= calls; k++) {
        host_fault_arm(k);
        coop_status st = trace_read_pickle(path, &t);
        host_fault_disarm();
        if (st == COOP_OK) {
            trace_free(&t);
            continue;
        }
        const char *msg = coop_last_error();
        if (!strstr(msg, "events read"))
            continue;
        char format[512];
        unsigned long long byte;
        size_t read;
        char tail[32];
        snprintf(format, sizeof format, "%s: byte %%llu: out of memory (%%zu events read%%31s",
                 path);
        if (sscanf(msg, format, &byte, &read, tail) != 3 || byte == 0)
            fail_msg("out of memory at allocation %ld: '%s' does not name the byte", k, msg);
        named++;
    }
    assert_true(named >= 1);
}

/* ---- pipes kept whole (mutants P22, P28 of docs/mutation-testing.md) ---- */

gzFile __real_gzdopen(int fd, const char *mode);
gzFile __wrap_gzdopen(int fd, const char *mode);

static bool gzdopen_fails; /* the next gzdopen returns NULL (ENOMEM) */

gzFile __wrap_gzdopen(int fd, const char *mode)
{
    if (gzdopen_fails) {
        gzdopen_fails = false;
        errno = ENOMEM;
        return NULL;
    }
    return __real_gzdopen(fd, mode);
}

static const char pipe_text[] = "coop-trace 1\nA 1 10 0\nF 1\n";

/* Descriptor 0 becomes a fresh pipe holding pipe_text, its writer closed:
 * "/dev/stdin" is then kept through descriptor 0 (trace_spool_keep). */
static void stdin_pipe(void)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(write(fds[1], pipe_text, sizeof pipe_text - 1), (ssize_t)sizeof pipe_text - 1);
    close(fds[1]);
    assert_int_equal(dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
    close(fds[0]);
}

/* Each allocation of keeping a pipe failing in turn (the temporary name,
 * the copy's buffer, the name kept, the list): COOP_ERR_HOST_NOMEM naming
 * the pipe, nothing kept, and the copy's descriptor closed (P22: a copy
 * made but not registered was left open). */
static void a_pipe_not_kept_leaves_no_descriptor(void **state)
{
    (void)state;
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    int refusals = 0;
    for (long n = 1; n < 100; n++) {
        stdin_pipe();
        int before = open_descriptors();
        long live = host_fault_live();
        host_fault_arm(n);
        coop_status st = trace_spool_keep("/dev/stdin");
        bool hit = host_fault_disarm();
        if (st != COOP_OK) {
            refusals++;
            assert_true(hit);
            assert_int_equal(st, COOP_ERR_HOST_NOMEM);
            assert_non_null(strstr(coop_last_error(), "/dev/stdin: out of memory"));
            int fd;
            assert_int_equal(trace_spool_open("/dev/stdin", &fd), COOP_OK);
            assert_int_equal(fd, -1); /* nothing kept */
        }
        trace_spool_drop("/dev/stdin");
        if (open_descriptors() != before)
            fail_msg("allocation %ld failed: %d descriptors left open", n,
                     open_descriptors() - before);
        /* the list of kept pipes too is freed once empty */
        if (host_fault_live() != live)
            fail_msg("allocation %ld failed: %ld host blocks leaked", n, host_fault_live() - live);
        if (!hit) {
            assert_int_equal(st, COOP_OK);
            break;
        }
    }
    /* the temporary name, the copy's buffer, the kept name at least */
    assert_true(refusals >= 3);
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
}

/* A kept copy that zlib cannot open (gzdopen without memory): the read is
 * refused as out of host memory and the descriptor trace_spool_open gave
 * is closed (P28: it was left open). */
static void a_kept_copy_zlib_cannot_open_is_closed(void **state)
{
    (void)state;
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    stdin_pipe();
    int before = open_descriptors();
    assert_int_equal(trace_spool_keep("/dev/stdin"), COOP_OK);
    unsigned char *data;
    size_t len;
    gzdopen_fails = true;
    coop_status st = trace_input_slurp("/dev/stdin", &data, &len);
    assert_false(gzdopen_fails); /* the copy was opened through gzdopen */
    assert_int_equal(st, COOP_ERR_HOST_NOMEM);
    assert_string_equal(coop_last_error(), "/dev/stdin: cannot open: out of host memory");
    /* the copy is still kept and reads whole */
    assert_int_equal(trace_input_slurp("/dev/stdin", &data, &len), COOP_OK);
    assert_int_equal(len, sizeof pipe_text - 1);
    assert_memory_equal(data, pipe_text, len);
    free(data);
    trace_spool_drop("/dev/stdin");
    assert_int_equal(open_descriptors(), before);
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
}

/* Without /proc (trace_spool_fd_dir names a missing directory) each open
 * of a kept copy makes a copy of it: each of that copy's allocations (the
 * directory's name, the temporary name, the buffer) failing in turn is
 * COOP_ERR_HOST_NOMEM naming the pipe, with no descriptor or block left,
 * and the copy stays kept: the next open reads it whole. */
static void a_kept_copy_reopened_without_proc(void **state)
{
    (void)state;
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    stdin_pipe();
    assert_int_equal(trace_spool_keep("/dev/stdin"), COOP_OK);
    trace_spool_fd_dir = "/nonexistent/coop/no-proc";
    int refusals = 0;
    for (long n = 1; n < 100; n++) {
        int before = open_descriptors();
        long live = host_fault_live();
        int fd = -2;
        host_fault_arm(n);
        coop_status st = trace_spool_open("/dev/stdin", &fd);
        bool hit = host_fault_disarm();
        if (st != COOP_OK) {
            refusals++;
            assert_true(hit);
            assert_int_equal(st, COOP_ERR_HOST_NOMEM);
            assert_string_equal(coop_last_error(), "/dev/stdin: out of memory");
            assert_int_equal(fd, -1);
        } else {
            assert_false(hit);
            char buf[sizeof pipe_text];
            assert_int_equal(read(fd, buf, sizeof buf), (ssize_t)sizeof pipe_text - 1);
            assert_memory_equal(buf, pipe_text, sizeof pipe_text - 1);
            close(fd);
        }
        if (open_descriptors() != before)
            fail_msg("allocation %ld failed: %d descriptors left open", n,
                     open_descriptors() - before);
        if (host_fault_live() != live)
            fail_msg("allocation %ld failed: %ld host blocks leaked", n, host_fault_live() - live);
        if (!hit)
            break;
    }
    assert_int_equal(refusals, 3); /* the directory's name, the temporary name, the buffer */
    trace_spool_fd_dir = "/proc/self/fd";
    trace_spool_drop("/dev/stdin");
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(readers),
        cmocka_unit_test(gzip_text),
        cmocka_unit_test(long_trace_is_held_once),
        cmocka_unit_test(snapshot_is_read_without_its_frames),
        cmocka_unit_test(snapshot_out_of_memory_names_its_byte),
        cmocka_unit_test(a_pipe_not_kept_leaves_no_descriptor),
        cmocka_unit_test(a_kept_copy_zlib_cannot_open_is_closed),
        cmocka_unit_test(a_kept_copy_reopened_without_proc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
