/*
 * minimalloc CSV (google/minimalloc): a header naming the columns, then one
 * buffer per row, live over the half-open logical interval [lower, upper).
 * Columns as minimalloc's own reader takes them, in any order: the buffer's
 * name `id` (or `buffer`, `buffer_id`; any text), `lower` (or `begin`,
 * `start`), `upper`, or `end` (inclusive: upper = end + 1), `size`; and,
 * optional, `alignment` (read and not used: every replayed block is
 * 512-byte aligned), `offset` (a solution's placement: read and not used)
 * and `gaps`, which must be empty (a buffer absent during part of its
 * lifespan keeps its offset in minimalloc; a malloc / free replay has no
 * such thing).
 *
 * Replayed as an alloc at lower and a free at upper; at equal times frees
 * come first (a buffer ending at t and one starting at t may share bytes),
 * then names in ascending order (as numbers when both are, numbers first).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "trace/builder.h"
#include "trace/input.h"
#include "trace/name_table.h"
#include "trace/text_number.h"
#include "trace/trace.h"

typedef enum csv_column {
    COL_ID,
    COL_LOWER,
    COL_UPPER,
    COL_SIZE,
    COL_ALIGNMENT,
    COL_OFFSET,
    COL_GAPS,
    NUM_COLUMNS
} csv_column;

/* The column names minimalloc reads, each with the column it fills. */
static const struct {
    const char *name;
    csv_column column;
} column_names[] = {
    {"id", COL_ID},         {"buffer", COL_ID},
    {"buffer_id", COL_ID},  {"lower", COL_LOWER},
    {"begin", COL_LOWER},   {"start", COL_LOWER},
    {"upper", COL_UPPER},   {"end", COL_UPPER},
    {"size", COL_SIZE},     {"alignment", COL_ALIGNMENT},
    {"offset", COL_OFFSET}, {"gaps", COL_GAPS},
};

typedef struct csv_header {
    int field_of[NUM_COLUMNS]; /* -1: absent */
    size_t num_fields;
    bool end_inclusive; /* the upper column is `end` */
} csv_header;

typedef struct csv_buffer {
    uint64_t lower, upper, size, id_number;
    uint64_t line;
    bool id_is_number;
} csv_buffer;

/* One alloc or free, sorted into replay order, with its buffer's name. */
typedef struct csv_event {
    uint64_t time;
    uint64_t id_number;
    const char *id_text; /* the name as interned (names.names) */
    uint32_t row;
    uint8_t is_alloc; /* frees (0) sort before allocs (1) at equal times */
    uint8_t id_is_number;
} csv_event;

typedef struct csv_reader {
    const char *path;
    trace_input in;
    csv_header header;
    csv_buffer *rows;
    size_t num_rows, cap_rows;
    name_table names; /* buffer name -> row */
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

/* Splits line in place at its commas into at most max fields; returns the
 * count, or max + 1 when there are more. */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    for (char *p = line;; p++) {
        if (n == max)
            return max + 1;
        fields[n++] = p;
        p = strchr(p, ',');
        if (!p)
            break;
        *p = '\0';
    }
    for (size_t i = 0; i < n; i++) /* once cut: trim sees each field's own end */
        fields[i] = trim(fields[i]);
    return n;
}

#define MAX_FIELDS 16

static coop_status read_header(csv_reader *r, char *line)
{
    csv_header *h = &r->header;
    for (int c = 0; c < NUM_COLUMNS; c++)
        h->field_of[c] = -1;
    char *fields[MAX_FIELDS];
    size_t n = split_fields(line, fields, MAX_FIELDS);
    if (n > MAX_FIELDS)
        return trace_input_error(&r->in, "header has more than %d columns", MAX_FIELDS);
    for (size_t f = 0; f < n; f++) {
        size_t k = 0, count = sizeof column_names / sizeof column_names[0];
        while (k < count && strcmp(fields[f], column_names[k].name) != 0)
            k++;
        if (k == count)
            return trace_input_error(&r->in,
                                     "unknown column '%s' (expected a header such as "
                                     "'id,lower,upper,size': id|buffer|buffer_id, "
                                     "lower|begin|start, upper|end, size, and optionally "
                                     "alignment, offset, gaps)",
                                     fields[f]);
        csv_column c = column_names[k].column;
        if (h->field_of[c] >= 0)
            return trace_input_error(&r->in, "column '%s' repeats column %d", fields[f],
                                     h->field_of[c] + 1);
        h->field_of[c] = (int)f;
        if (c == COL_UPPER)
            h->end_inclusive = !strcmp(fields[f], "end");
    }
    static const char *const required[] = {"id", "lower", "upper", "size"};
    for (int c = COL_ID; c <= COL_SIZE; c++)
        if (h->field_of[c] < 0)
            return trace_input_error(&r->in,
                                     "no %s column (expected a header such as "
                                     "'id,lower,upper,size')",
                                     required[c]);
    h->num_fields = n;
    return COOP_OK;
}

static coop_status read_row(csv_reader *r, char *line)
{
    const csv_header *h = &r->header;
    char *fields[MAX_FIELDS];
    size_t n = split_fields(line, fields, h->num_fields);
    if (n != h->num_fields) {
        if (n > h->num_fields)
            return trace_input_error(&r->in, "more than %zu fields (the header has %zu columns)",
                                     h->num_fields, h->num_fields);
        return trace_input_error(&r->in, "%zu field%s, expected %zu (the header's columns)", n,
                                 n == 1 ? "" : "s", h->num_fields);
    }
    csv_buffer b = {.line = r->in.line};
    const char *id = fields[h->field_of[COL_ID]];
    if (!*id)
        return trace_input_error(&r->in, "id is empty");
    b.id_is_number = text_parse_u64(id, &b.id_number) == TEXT_NUMBER_OK;
    coop_status st;
    if ((st = trace_input_u64(&r->in, "lower", fields[h->field_of[COL_LOWER]], &b.lower)) ||
        (st = trace_input_u64(&r->in, h->end_inclusive ? "end" : "upper",
                              fields[h->field_of[COL_UPPER]], &b.upper)) ||
        (st = trace_input_size(&r->in, "size", fields[h->field_of[COL_SIZE]], &b.size)))
        return st;
    uint64_t ignored;
    if (h->field_of[COL_ALIGNMENT] >= 0 &&
        (st = trace_input_u64(&r->in, "alignment", fields[h->field_of[COL_ALIGNMENT]], &ignored)))
        return st;
    if (h->field_of[COL_OFFSET] >= 0 &&
        (st = trace_input_u64(&r->in, "offset", fields[h->field_of[COL_OFFSET]], &ignored)))
        return st;
    if (h->field_of[COL_GAPS] >= 0 && *fields[h->field_of[COL_GAPS]])
        return trace_input_error(&r->in,
                                 "gaps '%s' are not supported (a buffer absent during part of "
                                 "its lifespan keeps its place in minimalloc; a malloc / free "
                                 "replay cannot)",
                                 fields[h->field_of[COL_GAPS]]);
    if (h->end_inclusive) {
        if (b.upper == UINT64_MAX)
            return trace_input_error(&r->in, "end '%s' is out of range (at most 2^64-2)",
                                     fields[h->field_of[COL_UPPER]]);
        b.upper++;
        if (b.upper <= b.lower)
            return trace_input_error(&r->in, "end %llu must be at least lower %llu",
                                     (unsigned long long)(b.upper - 1),
                                     (unsigned long long)b.lower);
    } else if (b.upper <= b.lower) {
        return trace_input_error(&r->in, "upper %llu must be greater than lower %llu",
                                 (unsigned long long)b.upper, (unsigned long long)b.lower);
    }
    /* numbers by value ("07" is 7), other names as written */
    char number[24];
    if (b.id_is_number) {
        snprintf(number, sizeof number, "%llu", (unsigned long long)b.id_number);
        id = number;
    }
    uint32_t dense;
    if (name_table_find(&r->names, id, &dense) == 0)
        return trace_input_error(&r->in, "id %s%s%s repeated (first at line %llu)",
                                 b.id_is_number ? "" : "'", id, b.id_is_number ? "" : "'",
                                 (unsigned long long)r->rows[dense].line);
    if (r->num_rows == r->cap_rows) {
        size_t cap = r->cap_rows ? r->cap_rows * 2 : 256;
        csv_buffer *rows = cap < UINT32_MAX ? realloc(r->rows, cap * sizeof *rows) : NULL;
        if (!rows)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
        r->rows = rows;
        r->cap_rows = cap;
    }
    int interned = name_table_intern(&r->names, id, &dense);
    if (interned == NAME_TABLE_FULL)
        return trace_input_error(&r->in, "more than %lu buffers", (unsigned long)NAME_TABLE_MAX);
    if (interned != 0)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    r->rows[r->num_rows++] = b; /* dense == the row's index: names are unique */
    return COOP_OK;
}

/* Names in ascending order: as numbers when both are, numbers first. */
static int by_name(const csv_event *a, const csv_event *b)
{
    if (a->id_is_number && b->id_is_number)
        return (a->id_number > b->id_number) - (a->id_number < b->id_number);
    if (a->id_is_number != b->id_is_number)
        return a->id_is_number ? -1 : 1;
    return strcmp(a->id_text, b->id_text);
}

static int by_replay_order(const void *pa, const void *pb)
{
    const csv_event *a = pa, *b = pb;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    if (a->is_alloc != b->is_alloc)
        return a->is_alloc < b->is_alloc ? -1 : 1;
    return by_name(a, b);
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
        csv_event e = {.time = b->lower,
                       .id_number = b->id_number,
                       .id_text = r->names.names[i],
                       .row = (uint32_t)i,
                       .is_alloc = 1,
                       .id_is_number = b->id_is_number};
        events[2 * i] = e;
        e.time = b->upper;
        e.is_alloc = 0;
        events[2 * i + 1] = e;
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
    bool seen_header = false;
    while (st == COOP_OK) {
        char *line;
        size_t len;
        st = trace_input_line(&r.in, &line, &len);
        if (st != COOP_OK || !line)
            break;
        if (*trim(line) == '\0')
            continue; /* blank lines (a trailing one is common; detection skips leading ones) */
        if (!seen_header) {
            st = read_header(&r, line);
            seen_header = true;
            continue;
        }
        st = read_row(&r, line);
    }
    if (st == COOP_OK && !seen_header)
        st = coop_set_error(COOP_ERR_INVALID,
                            "%s:%llu: empty file: no header (such as 'id,lower,upper,size')", path,
                            (unsigned long long)r.in.line + 1);
    if (st == COOP_OK)
        st = build(&r, out);
    trace_input_close(&r.in);
    name_table_free(&r.names);
    free(r.rows);
    return st;
}
