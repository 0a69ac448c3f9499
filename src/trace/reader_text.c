/* The coop text trace format (traces/README.md), read as a stream of lines. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "trace/builder.h"
#include "trace/id_map.h"
#include "trace/input.h"
#include "trace/segment_overlap.h"
#include "trace/text_number.h"
#include "trace/trace.h"

#define MAX_FIELDS 12

enum { ID_ALLOCATED = 1, ID_RELEASED = 2 };

/* Optional key=value fields, as a mask of what a line may carry. */
enum { KEY_ADDR = 1, KEY_T = 2, KEY_COST = 4 };

typedef struct line_kind {
    char letter;
    int kind;       /* trace_event_kind, or -1 for E (a final segment) */
    int min_fields; /* numbers after the letter */
    int max_fields;
    unsigned keys;
    const char *usage; /* for messages */
} line_kind;

static const line_kind line_kinds[] = {
    {'A', TRACE_ALLOC, 3, 3, KEY_ADDR | KEY_T | KEY_COST,
     "A id size stream [addr=A] [t=T] [cost=C]"},
    {'L', TRACE_ALLOC, 3, 3, KEY_ADDR | KEY_T | KEY_COST,
     "L id size stream [addr=A] [t=T] [cost=C]"},
    {'R', TRACE_FREE_REQUESTED, 1, 1, KEY_T, "R id [t=T]"},
    {'F', TRACE_FREE, 1, 1, KEY_T, "F id [t=T]"},
    {'S', TRACE_SEGMENT_ALLOC, 2, 3, KEY_T, "S addr size [stream] [t=T]"},
    {'U', TRACE_SEGMENT_FREE, 2, 3, KEY_T, "U addr size [stream] [t=T]"},
    {'M', TRACE_SEGMENT_MAP, 2, 3, KEY_T, "M addr size [stream] [t=T]"},
    {'N', TRACE_SEGMENT_UNMAP, 2, 3, KEY_T, "N addr size [stream] [t=T]"},
    {'O', TRACE_OOM, 1, 2, KEY_T, "O size [stream] [t=T]"},
    {'E', -1, 2, 3, 0, "E addr size [stream]"},
};

/* The initial capacity (items) of text_reader.e_lines, doubled when full. */
#define E_LINES_FIRST 16

typedef struct text_reader {
    const char *path;
    trace_input in;
    trace_builder b;
    id_map ids; /* (file id, 0) -> live allocation */
    int seen_header;
    uint64_t header_line;        /* its line number */
    char *source;                /* the '# from' line's name (trace.source) */
    int seen_event;              /* an event other than L was read */
    int has_torch_settings;      /* a P torch line was read */
    int recorded_by_coop;        /* a P coop line was read */
    unsigned torch_settings;     /* its TRACE_TORCH_* bits */
    trace_segment_seen *e_lines; /* the E lines (order: line), for check_e_lines */
    size_t num_e_lines, cap_e_lines;
} text_reader;

/* Splits line at spaces and tabs, up to a '#' that starts a field. */
static int split(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            return n;
        if (n == max)
            return max + 1;
        fields[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p)
            *p++ = '\0';
    }
}

static coop_status read_keys(const text_reader *r, const line_kind *k, char **fields, int n,
                             trace_event *ev)
{
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        char *eq = strchr(fields[i], '=');
        if (!eq)
            return trace_input_error(&r->in, "unexpected '%s' (usage: %s)", fields[i], k->usage);
        *eq = '\0';
        const char *key = fields[i], *value = eq + 1;
        unsigned bit = !strcmp(key, "addr")   ? KEY_ADDR
                       : !strcmp(key, "t")    ? KEY_T
                       : !strcmp(key, "cost") ? KEY_COST
                                              : 0;
        if (!(bit & k->keys))
            return trace_input_error(&r->in, "unknown key '%s' on a %c line (usage: %s)", key,
                                     k->letter, k->usage);
        if (seen & bit)
            return trace_input_error(&r->in, "key '%s' given twice", key);
        seen |= bit;
        coop_status st = COOP_OK;
        if (bit == KEY_ADDR) {
            st = trace_input_u64(&r->in, "addr", value, &ev->addr);
        } else if (bit == KEY_COST) {
            st = trace_input_u64(&r->in, "cost", value, &ev->cost_ns);
        } else {
            enum text_number_result res = text_parse_i64(value, &ev->time_us);
            if (res == TEXT_NUMBER_OVERFLOW)
                return trace_input_error(&r->in, "t '%s' is out of range", value);
            if (res != TEXT_NUMBER_OK)
                return trace_input_error(&r->in, "t '%s' is not a number", value);
        }
        if (st != COOP_OK)
            return st;
    }
    return COOP_OK;
}

static coop_status on_alloc(text_reader *r, const line_kind *k, uint64_t file_id, trace_event *ev)
{
    id_map_slot *s = id_map_find(&r->ids, file_id, 0);
    if (s)
        return trace_input_error(&r->in,
                                 "id %llu is already live (allocated at line %llu, not freed)",
                                 (unsigned long long)file_id, (unsigned long long)s->where);
    coop_status st = trace_builder_new_id(&r->b, &ev->id);
    if (st != COOP_OK)
        return st;
    if (!(s = id_map_insert(&r->ids, file_id, 0)))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    s->id = ev->id;
    s->state = ID_ALLOCATED;
    s->where = r->in.line;
    return k->letter == 'L' ? trace_builder_push_live(&r->b, ev) : trace_builder_push(&r->b, ev);
}

static coop_status on_free(text_reader *r, const line_kind *k, uint64_t file_id, trace_event *ev)
{
    id_map_slot *s = id_map_find(&r->ids, file_id, 0);
    if (!s)
        return trace_input_error(
            &r->in, "%c of id %llu, which is not live (never allocated, or already freed)",
            k->letter, (unsigned long long)file_id);
    if (k->letter == 'R' && s->state == ID_RELEASED)
        return trace_input_error(&r->in, "second R of id %llu (allocated at line %llu)",
                                 (unsigned long long)file_id, (unsigned long long)s->where);
    ev->id = s->id;
    if (k->letter == 'R')
        s->state = ID_RELEASED;
    else
        id_map_remove(&r->ids, s);
    return trace_builder_push(&r->b, ev);
}

static coop_status read_header(text_reader *r, char **fields, int n)
{
    if (strcmp(fields[0], "coop-trace") != 0)
        return trace_input_error(&r->in, "expected the header 'coop-trace 1' before '%s'",
                                 fields[0]);
    if (n != 2 || strcmp(fields[1], "1") != 0)
        return trace_input_error(&r->in, "unsupported header (this coop reads 'coop-trace 1')");
    r->seen_header = 1;
    r->header_line = r->in.line;
    return COOP_OK;
}

/* "P torch [SETTING ...]": the recorded PyTorch allocator's settings that
 * were not its defaults (none: all default), as a snapshot's
 * allocator_settings give them (trace.torch_settings). "P coop": a snapshot
 * coop.torch wrote (trace.recorded_by_coop: its segments are coop's). At
 * most one. */
static coop_status read_settings(text_reader *r, char **fields, int n)
{
    if (r->has_torch_settings || r->recorded_by_coop)
        return trace_input_error(&r->in, "a second P line (one per trace)");
    if (n == 2 && !strcmp(fields[1], "coop")) {
        r->recorded_by_coop = 1;
        return COOP_OK;
    }
    if (n < 2 || strcmp(fields[1], "torch") != 0)
        return trace_input_error(&r->in, "expected 'P torch [SETTING ...]' or 'P coop'");
    unsigned bits = 0;
    for (int i = 2; i < n; i++) {
        unsigned bit = trace_torch_setting_bit(fields[i]);
        if (!bit) {
            char known[160] = "";
            for (unsigned b = 1; trace_torch_setting_name(b); b <<= 1)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                         b == 1 ? "" : ", ", trace_torch_setting_name(b));
            return trace_input_error(&r->in, "unknown PyTorch setting '%s' (known: %s)", fields[i],
                                     known);
        }
        bits |= bit;
    }
    r->has_torch_settings = 1;
    r->torch_settings = bits;
    return COOP_OK;
}

static coop_status read_line(text_reader *r, char *line)
{
    /* "# from NAME" right after the header, as the writer puts it: the
     * trace this one was converted from, which a new conversion names in
     * turn (trace.source). Elsewhere it is a comment like any other. */
    static const char from[] = "# from ";
    if (r->seen_header && r->in.line == r->header_line + 1 &&
        !strncmp(line, from, sizeof from - 1) && line[sizeof from - 1]) {
        if (!(r->source = strdup(line + sizeof from - 1)))
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
        return COOP_OK;
    }
    char *fields[MAX_FIELDS + 1];
    int n = split(line, fields, MAX_FIELDS);
    if (n == 0)
        return COOP_OK;
    if (n > MAX_FIELDS)
        return trace_input_error(&r->in, "more than %d fields", MAX_FIELDS);
    if (!r->seen_header)
        return read_header(r, fields, n);

    if (!strcmp(fields[0], "P"))
        return read_settings(r, fields, n);
    const line_kind *k = NULL;
    if (strlen(fields[0]) == 1)
        for (size_t i = 0; i < sizeof line_kinds / sizeof line_kinds[0]; i++)
            if (line_kinds[i].letter == fields[0][0])
                k = &line_kinds[i];
    if (!k)
        return trace_input_error(
            &r->in, "unknown line '%s' (expected one of A L R F S U M N O E P, or # comment)",
            fields[0]);
    int positional = 0;
    while (1 + positional < n && !strchr(fields[1 + positional], '='))
        positional++;
    if (positional < k->min_fields || positional > k->max_fields)
        return trace_input_error(&r->in, "%s fields on a %c line (usage: %s)",
                                 positional < k->min_fields ? "missing" : "too many", k->letter,
                                 k->usage);

    uint64_t nums[3] = {0, 0, 0};
    static const char *const names_alloc[] = {"id", "size", "stream"};
    static const char *const names_segment[] = {"addr", "size", "stream"};
    static const char *const names_oom[] = {"size", "stream"};
    const char *const *names =
        k->letter == 'O' ? names_oom
        : (k->kind == TRACE_ALLOC || k->kind == TRACE_FREE_REQUESTED || k->kind == TRACE_FREE)
            ? names_alloc
            : names_segment;
    coop_status st;
    for (int i = 0; i < positional; i++) {
        st = strcmp(names[i], "size") == 0 && k->letter != 'O' /* see TRACE_SIZE_LIMIT */
                 ? trace_input_size(&r->in, names[i], fields[1 + i], &nums[i])
                 : trace_input_u64(&r->in, names[i], fields[1 + i], &nums[i]);
        if (st != COOP_OK)
            return st;
    }
    trace_event ev = {.time_us = -1};
    if ((st = read_keys(r, k, fields + 1 + positional, n - 1 - positional, &ev)) != COOP_OK)
        return st;

    if (k->letter == 'L' && r->seen_event)
        return trace_input_error(&r->in, "L lines must come before every other event");
    if (k->letter != 'L' && k->letter != 'E')
        r->seen_event = 1;
    if (k->kind < 0) {
        trace_segment seg = {.addr = nums[0], .size = nums[1], .stream = nums[2]};
        /* a reservation of the device's memory, as the snapshot reader
         * holds the segments it reads (check_e_lines: nor two sharing a
         * byte) */
        if (seg.size > UINT64_MAX - seg.addr)
            return trace_input_error(
                &r->in,
                "E segment 0x%llx (%llu bytes) runs past the end of the 64-bit address space",
                (unsigned long long)seg.addr, (unsigned long long)seg.size);
        if (GROW_ARRAY(r->e_lines, r->cap_e_lines, r->num_e_lines + 1, E_LINES_FIRST))
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
        r->e_lines[r->num_e_lines++] =
            (trace_segment_seen){.addr = seg.addr, .size = seg.size, .order = r->in.line};
        return trace_builder_push_segment(&r->b, &seg);
    }
    ev.kind = (trace_event_kind)k->kind;
    switch (ev.kind) {
    case TRACE_ALLOC:
        ev.size = nums[1];
        ev.stream = nums[2];
        return on_alloc(r, k, nums[0], &ev);
    case TRACE_FREE_REQUESTED:
    case TRACE_FREE:
        return on_free(r, k, nums[0], &ev);
    case TRACE_OOM:
        ev.size = nums[0];
        ev.stream = nums[1];
        return trace_builder_push(&r->b, &ev);
    default:
        ev.addr = nums[0];
        ev.size = nums[1];
        ev.stream = nums[2];
        return trace_builder_push(&r->b, &ev);
    }
}

/* The E lines against each other (segment_overlap.h): replay's recorded
 * figure adds their sizes (two overlapping counted the shared bytes twice). */
static coop_status check_e_lines(text_reader *r)
{
    const trace_segment_seen *prev, *g = trace_segments_overlap(r->e_lines, r->num_e_lines, &prev);
    if (!g)
        return COOP_OK;
    return coop_set_error(
        COOP_ERR_INVALID,
        "%s:%llu: E segment [0x%llx, 0x%llx) overlaps [0x%llx, 0x%llx), line %llu: two "
        "reservations of the device's memory never share a byte",
        r->path, (unsigned long long)g->order, (unsigned long long)g->addr,
        (unsigned long long)(g->addr + g->size), (unsigned long long)prev->addr,
        (unsigned long long)(prev->addr + prev->size), (unsigned long long)prev->order);
}

coop_status trace_read_text(const char *path, trace *out)
{
    *out = (trace){0};
    text_reader r = {.path = path};
    trace_builder_init(&r.b, path);
    r.b.where_kind = TRACE_WHERE_LINE;
    coop_status st = trace_input_open(&r.in, path);
    while (st == COOP_OK) {
        char *line;
        size_t len;
        st = trace_input_line(&r.in, &line, &len);
        if (st != COOP_OK || !line)
            break;
        r.b.where = r.in.line;
        st = read_line(&r, line);
    }
    if (st == COOP_OK && !r.seen_header)
        st = coop_set_error(COOP_ERR_INVALID, "%s:%llu: no 'coop-trace 1' header (empty trace)",
                            path, (unsigned long long)r.in.line + 1);
    if (st == COOP_OK)
        st = check_e_lines(&r);
    if (st == COOP_OK)
        st = trace_builder_finish(&r.b, out);
    if (st == COOP_OK) {
        out->has_torch_settings = r.has_torch_settings;
        out->torch_settings = r.torch_settings;
        out->recorded_by_coop = r.recorded_by_coop;
        out->source = r.source;
        r.source = NULL;
    }
    free(r.source);
    free(r.e_lines);
    trace_builder_discard(&r.b);
    trace_input_close(&r.in);
    id_map_free(&r.ids);
    return st;
}
