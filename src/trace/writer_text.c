/* Writing a trace in the coop text format (traces/README.md). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "status.h"
#include "trace/trace.h"
#include "utf8.h"

#define OUT_BUF ((size_t)1 << 16)

typedef struct writer {
    gzFile gz;
    const char *path;
    char buf[OUT_BUF];
    size_t len;
    int failed;
} writer;

static void flush(writer *w)
{
    if (w->len && !w->failed && gzwrite(w->gz, w->buf, (unsigned)w->len) != (int)w->len)
        w->failed = 1;
    w->len = 0;
}

static void put(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends one formatted line fragment (lines are far below OUT_BUF). */
static void put(writer *w, const char *fmt, ...)
{
    if (OUT_BUF - w->len < 512)
        flush(w);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, OUT_BUF - w->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->len += (size_t)n < OUT_BUF - w->len ? (size_t)n : OUT_BUF - w->len - 1;
}

static void put_time(writer *w, int64_t time_us)
{
    if (time_us != -1) /* -1: unknown */
        put(w, " t=%" PRId64, time_us);
}

static const char segment_letter[] = {
    [TRACE_SEGMENT_ALLOC] = 'S',
    [TRACE_SEGMENT_FREE] = 'U',
    [TRACE_SEGMENT_MAP] = 'M',
    [TRACE_SEGMENT_UNMAP] = 'N',
};

static void put_event(writer *w, const trace_event *e, int live)
{
    switch (e->kind) {
    case TRACE_ALLOC:
        put(w, "%c %" PRIu32 " %" PRIu64 " %" PRIu64, live ? 'L' : 'A', e->id, e->size, e->stream);
        if (e->addr)
            put(w, " addr=0x%" PRIx64, e->addr);
        put_time(w, e->time_us);
        if (e->cost_ns)
            put(w, " cost=%" PRIu64, e->cost_ns);
        break;
    case TRACE_FREE_REQUESTED:
    case TRACE_FREE:
        put(w, "%c %" PRIu32, e->kind == TRACE_FREE ? 'F' : 'R', e->id);
        put_time(w, e->time_us);
        break;
    case TRACE_OOM:
        put(w, "O %" PRIu64 " %" PRIu64, e->size, e->stream);
        put_time(w, e->time_us);
        break;
    default:
        put(w, "%c 0x%" PRIx64 " %" PRIu64 " %" PRIu64, segment_letter[e->kind], e->addr, e->size,
            e->stream);
        put_time(w, e->time_us);
        break;
    }
    put(w, "\n");
}

/* The trace's name in the '# from' comment, at most 200 bytes: valid UTF-8
 * (readers of text, Python's among them, decode the line), so the cut falls
 * between characters and a byte of no character is '?'; a control
 * character is '?' too, so a newline in the name starts no line. */
static void put_name(writer *w, const char *name)
{
    const unsigned char *c = (const unsigned char *)name;
    size_t written = 0;
    while (*c) {
        size_t n = utf8_sequence_length(c); /* 0: a byte of no character */
        if (written + (n ? n : 1) > 200)
            break;
        if (n <= 1)
            put(w, "%c", n && *c >= 0x20 && *c != 0x7f ? *c : '?');
        else
            put(w, "%.*s", (int)n, (const char *)c);
        written += n ? n : 1;
        c += n ? n : 1;
    }
}

/* The writer relies on the canonical form: live-at-start allocations are
 * the first events, in live_at_start order. */
static coop_status check_canonical(const trace *t, const char *path)
{
    if (t->num_live_at_start > t->num_events)
        return coop_set_error(COOP_ERR_INVALID, "%s: trace has more live-at-start ids than events",
                              path);
    for (size_t i = 0; i < t->num_events; i++) {
        const trace_event *e = &t->events[i];
        if ((unsigned)e->kind > TRACE_OOM)
            return coop_set_error(COOP_ERR_INVALID, "%s: event %zu has unknown kind %d", path, i,
                                  (int)e->kind);
        if (i < t->num_live_at_start && (e->kind != TRACE_ALLOC || e->id != t->live_at_start[i]))
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: event %zu is not the alloc of live-at-start id %" PRIu32,
                                  path, i, t->live_at_start[i]);
    }
    return COOP_OK;
}

static gzFile open_output(const char *path, bool gzip)
{
    const char *mode = gzip ? "wb6" : "wbT"; /* T: plain, uncompressed */
    if (strcmp(path, "-") != 0)
        return gzopen(path, mode);
    int fd = dup(STDOUT_FILENO);
    if (fd < 0)
        return NULL;
    gzFile gz = gzdopen(fd, mode);
    if (!gz)
        close(fd);
    return gz;
}

coop_status trace_write_text_to(const trace *t, const char *path, bool gzip)
{
    coop_status st = check_canonical(t, path);
    if (st != COOP_OK)
        return st;
    writer *w = malloc(sizeof *w);
    if (!w)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    *w = (writer){.path = path};
    errno = 0;
    if (!(w->gz = open_output(path, gzip))) {
        free(w);
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot write: %s", path,
                              errno ? strerror(errno) : "out of memory");
    }

    put(w, "coop-trace 1\n");
    const char *from = t->source ? t->source : t->name; /* the recording's */
    if (from) {
        put(w, "# from ");
        put_name(w, from);
        put(w, "\n");
    }
    put(w, "# %zu events, %" PRIu32 " ids, %zu live at start, %zu final segments\n", t->num_events,
        t->num_ids, t->num_live_at_start, t->num_final_segments);
    if (t->recorded_by_coop) /* coop.torch's snapshot: its segments are coop's, not PyTorch's */
        put(w, "P coop\n");
    else if (t->has_torch_settings) { /* the snapshot's settings that were not PyTorch's defaults */
        put(w, "P torch");
        for (unsigned bit = 1; trace_torch_setting_name(bit); bit <<= 1)
            if (t->torch_settings & bit)
                put(w, " %s", trace_torch_setting_name(bit));
        put(w, "\n");
    }
    for (size_t i = 0; i < t->num_events; i++)
        put_event(w, &t->events[i], i < t->num_live_at_start);
    for (size_t i = 0; i < t->num_final_segments; i++) {
        const trace_segment *s = &t->final_segments[i];
        put(w, "E 0x%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", s->addr, s->size, s->stream);
    }
    flush(w);
    char why[160] = "";
    if (w->failed) {
        int err = Z_OK;
        const char *msg = gzerror(w->gz, &err); /* freed by gzclose: copy */
        snprintf(why, sizeof why, "%s", err == Z_ERRNO ? strerror(errno) : msg);
    }
    errno = 0;
    int rc = gzclose(w->gz);
    if (!w->failed && rc != Z_OK)
        snprintf(why, sizeof why, "%s", rc == Z_ERRNO && errno ? strerror(errno) : "gzip error");
    int failed = w->failed || rc != Z_OK;
    free(w);
    if (failed)
        return coop_set_error(COOP_ERR_INVALID, "%s: write failed: %s", path, why);
    return COOP_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

coop_status trace_write_text(const trace *t, const char *path_or_dash)
{
    return trace_write_text_to(t, path_or_dash,
                               strcmp(path_or_dash, "-") != 0 && ends_with(path_or_dash, ".gz"));
}
