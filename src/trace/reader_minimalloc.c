/*
 * minimalloc CSV (google/minimalloc): "id,lower,upper,size", one buffer per
 * row, live over the half-open logical interval [lower, upper). Replayed as
 * an alloc at lower and a free at upper; at equal times frees come first
 * (a buffer ending at t and one starting at t may share bytes), then ids in
 * ascending order.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "trace/builder.h"
#include "trace/id_map.h"
#include "trace/input.h"
#include "trace/text_number.h"
#include "trace/trace.h"

typedef struct csv_buffer {
    uint64_t id, lower, upper, size;
} csv_buffer;

/* One alloc or free, sorted into replay order. */
typedef struct csv_event {
    uint64_t time;
    uint64_t file_id;
    uint32_t row;
    uint8_t is_alloc; /* frees (0) sort before allocs (1) at equal times */
} csv_event;

typedef struct csv_reader {
    const char *path;
    trace_input in;
    csv_buffer *rows;
    size_t num_rows, cap_rows;
    id_map seen; /* file id -> line of its row */
} csv_reader;

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

static coop_status read_row(csv_reader *r, char *line)
{
    char *fields[4];
    size_t n = 0;
    for (char *p = line;; p++) {
        if (n == 4)
            return trace_input_error(&r->in, "more than 4 fields (expected id,lower,upper,size)");
        fields[n++] = p;
        p = strchr(p, ',');
        if (!p)
            break;
        *p = '\0';
    }
    if (n < 4)
        return trace_input_error(&r->in, "%zu field%s, expected 4: id,lower,upper,size", n,
                                 n == 1 ? "" : "s");
    static const char *const names[] = {"id", "lower", "upper", "size"};
    csv_buffer b;
    uint64_t *dst[] = {&b.id, &b.lower, &b.upper, &b.size};
    coop_status st;
    for (int i = 0; i < 3; i++)
        if ((st = trace_input_u64(&r->in, names[i], trim(fields[i]), dst[i])) != COOP_OK)
            return st;
    if ((st = trace_input_size(&r->in, names[3], trim(fields[3]), dst[3])) != COOP_OK)
        return st;
    if (b.upper <= b.lower)
        return trace_input_error(&r->in, "upper %llu must be greater than lower %llu",
                                 (unsigned long long)b.upper, (unsigned long long)b.lower);
    id_map_slot *s = id_map_find(&r->seen, b.id, 0);
    if (s)
        return trace_input_error(&r->in, "id %llu repeated (first at line %llu)",
                                 (unsigned long long)b.id, (unsigned long long)s->where);
    if (!(s = id_map_insert(&r->seen, b.id, 0)))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    s->where = r->in.line;
    if (r->num_rows == r->cap_rows) {
        size_t cap = r->cap_rows ? r->cap_rows * 2 : 256;
        csv_buffer *rows = cap < UINT32_MAX ? realloc(r->rows, cap * sizeof *rows) : NULL;
        if (!rows)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
        r->rows = rows;
        r->cap_rows = cap;
    }
    r->rows[r->num_rows++] = b;
    return COOP_OK;
}

static int by_replay_order(const void *pa, const void *pb)
{
    const csv_event *a = pa, *b = pb;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    if (a->is_alloc != b->is_alloc)
        return a->is_alloc < b->is_alloc ? -1 : 1;
    return (a->file_id > b->file_id) - (a->file_id < b->file_id);
}

/* Sorts the rows' allocs and frees into replay order and builds the trace. */
static coop_status build(csv_reader *r, trace *out)
{
    size_t n = r->num_rows * 2;
    csv_event *events = malloc((n ? n : 1) * sizeof *events);
    uint32_t *ids = malloc((r->num_rows ? r->num_rows : 1) * sizeof *ids);
    if (!events || !ids) {
        free(events);
        free(ids);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    }
    for (size_t i = 0; i < r->num_rows; i++) {
        const csv_buffer *b = &r->rows[i];
        events[2 * i] = (csv_event){b->lower, b->id, (uint32_t)i, 1};
        events[2 * i + 1] = (csv_event){b->upper, b->id, (uint32_t)i, 0};
    }
    qsort(events, n, sizeof *events, by_replay_order);

    trace_builder tb;
    trace_builder_init(&tb, r->path);
    coop_status st = COOP_OK;
    for (size_t i = 0; i < r->num_rows && st == COOP_OK; i++)
        st = trace_builder_new_id(&tb, &ids[i]);
    for (size_t i = 0; i < n && st == COOP_OK; i++) {
        const csv_event *e = &events[i];
        trace_event ev = {.kind = e->is_alloc ? TRACE_ALLOC : TRACE_FREE,
                          .id = ids[e->row],
                          .size = r->rows[e->row].size,
                          .time_us = e->time > INT64_MAX ? INT64_MAX : (int64_t)e->time};
        st = trace_builder_push(&tb, &ev);
    }
    if (st == COOP_OK)
        st = trace_builder_finish(&tb, out);
    trace_builder_discard(&tb);
    free(events);
    free(ids);
    return st;
}

coop_status trace_read_minimalloc(const char *path, trace *out)
{
    *out = (trace){0};
    csv_reader r = {.path = path};
    coop_status st = trace_input_open(&r.in, path);
    int seen_header = 0;
    while (st == COOP_OK) {
        char *line;
        size_t len;
        st = trace_input_line(&r.in, &line, &len);
        if (st != COOP_OK || !line)
            break;
        if (!seen_header) {
            if (strcmp(trim(line), "id,lower,upper,size") != 0)
                st = trace_input_error(&r.in, "expected the header 'id,lower,upper,size'");
            seen_header = 1;
            continue;
        }
        if (*trim(line) == '\0')
            continue; /* blank lines (a trailing one is common) */
        st = read_row(&r, line);
    }
    if (st == COOP_OK && !seen_header)
        st = coop_set_error(COOP_ERR_INVALID, "%s:1: empty file: no 'id,lower,upper,size' header",
                            path);
    if (st == COOP_OK)
        st = build(&r, out);
    trace_input_close(&r.in);
    id_map_free(&r.seen);
    free(r.rows);
    return st;
}
