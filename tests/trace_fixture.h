/*
 * Shared by the trace tests: a scratch directory for input files, writing
 * files (plain or gzip), and checking a reader's error message.
 */
#ifndef COOP_TESTS_TRACE_FIXTURE_H
#define COOP_TESTS_TRACE_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "coop.h"
#include "trace/trace.h"

static char fixture_dir[256];

/* Creates the scratch directory (under $TMPDIR or /tmp). */
static inline void fixture_init(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fixture_dir, sizeof fixture_dir, "%s/coop-trace-test-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(fixture_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* Removes the scratch directory and what the tests left in it. */
static inline void fixture_cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fixture_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", fixture_dir);
}

/* Path of a scratch file (a static buffer per call site is enough: the
 * tests use one or two at a time). */
static inline const char *fixture_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", fixture_dir, name);
    return buf;
}

/* Writes len bytes to path, gzip-compressed if gzip. */
static inline void fixture_write(const char *path, const void *data, size_t len, int gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        assert_non_null(gz);
        if (len)
            assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(gz), Z_OK);
        return;
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Reads a whole (plain) file into a malloc'ed buffer. */
static inline unsigned char *fixture_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Asserts that read refuses every proper prefix of the gzip file gz_path
 * (the compressed stream itself cut short), each written to cut_path. */
static inline void fixture_refuses_gzip_prefixes(coop_status (*read)(const char *, trace *),
                                                 const char *gz_path, const char *cut_path)
{
    size_t gz_len;
    unsigned char *gz = fixture_read(gz_path, &gz_len);
    for (size_t len = 0; len < gz_len; len++) {
        fixture_write(cut_path, gz, len, 0);
        trace t;
        if (read(cut_path, &t) == COOP_OK)
            fail_msg("gzip prefix of %zu bytes (of %zu) was accepted", len, gz_len);
    }
    free(gz);
}

/* Asserts that st is an error whose message contains every given fragment
 * (NULL-terminated list), and prints the message when it does not. */
static inline void fixture_expect_error(coop_status st, ...)
{
    const char *msg = coop_last_error();
    if (st == COOP_OK)
        fail_msg("expected an error, got success");
    va_list ap;
    va_start(ap, st);
    const char *frag;
    while ((frag = va_arg(ap, const char *)) != NULL)
        if (!strstr(msg, frag)) {
            va_end(ap);
            fail_msg("error message \"%s\" lacks \"%s\"", msg, frag);
        }
    va_end(ap);
}

/* Events equal field for field. */
static inline void fixture_assert_same_trace(const trace *a, const trace *b)
{
    assert_int_equal(a->num_events, b->num_events);
    assert_int_equal(a->num_ids, b->num_ids);
    assert_int_equal(a->num_live_at_start, b->num_live_at_start);
    assert_int_equal(a->num_final_segments, b->num_final_segments);
    assert_int_equal(a->has_segment_events, b->has_segment_events);
    for (size_t i = 0; i < a->num_events; i++) {
        const trace_event *x = &a->events[i], *y = &b->events[i];
        if (x->kind != y->kind || x->id != y->id || x->size != y->size || x->addr != y->addr ||
            x->stream != y->stream || x->time_us != y->time_us || x->cost_ns != y->cost_ns)
            fail_msg("event %zu differs: kind %d/%d id %u/%u size %llu/%llu addr %llx/%llx", i,
                     x->kind, y->kind, x->id, y->id, (unsigned long long)x->size,
                     (unsigned long long)y->size, (unsigned long long)x->addr,
                     (unsigned long long)y->addr);
    }
    for (size_t i = 0; i < a->num_live_at_start; i++)
        assert_int_equal(a->live_at_start[i], b->live_at_start[i]);
    for (size_t i = 0; i < a->num_final_segments; i++) {
        assert_int_equal(a->final_segments[i].addr, b->final_segments[i].addr);
        assert_int_equal(a->final_segments[i].size, b->final_segments[i].size);
        assert_int_equal(a->final_segments[i].stream, b->final_segments[i].stream);
    }
}

/* Checks the invariants every reader promises (trace.h): live-at-start
 * allocs first, ids dense and in order of first appearance, each id
 * allocated once, released at most once and freed at most once, in that
 * order, frees repeating their alloc's size, addr and stream. */
static inline void fixture_check_invariants(const trace *t)
{
    enum { NEW, LIVE, RELEASED, FREED };
    unsigned char *state = calloc(t->num_ids ? t->num_ids : 1, 1);
    size_t *alloc_at = calloc(t->num_ids ? t->num_ids : 1, sizeof *alloc_at);
    uint32_t next = 0;
    assert_true(t->num_live_at_start <= t->num_events);
    for (size_t i = 0; i < t->num_events; i++) {
        const trace_event *e = &t->events[i];
        if (i < t->num_live_at_start) {
            assert_int_equal(e->kind, TRACE_ALLOC);
            assert_int_equal(e->id, t->live_at_start[i]);
        }
        if (e->kind == TRACE_ALLOC) {
            assert_int_equal(e->id, next); /* first appearance, dense */
            next++;
            state[e->id] = LIVE;
            alloc_at[e->id] = i;
        } else if (e->kind == TRACE_FREE_REQUESTED || e->kind == TRACE_FREE) {
            assert_true(e->id < next);
            if (e->kind == TRACE_FREE_REQUESTED)
                assert_int_equal(state[e->id], LIVE);
            else
                assert_true(state[e->id] == LIVE || state[e->id] == RELEASED);
            state[e->id] = e->kind == TRACE_FREE ? FREED : RELEASED;
            const trace_event *a = &t->events[alloc_at[e->id]];
            assert_int_equal(e->size, a->size);
            assert_int_equal(e->addr, a->addr);
            assert_int_equal(e->stream, a->stream);
        } else {
            assert_int_equal(e->id, 0);
        }
    }
    assert_int_equal(next, t->num_ids);
    free(state);
    free(alloc_at);
}

#endif
