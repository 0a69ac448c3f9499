/*
 * DTR log -> allocation events (trace_read_dtr), for replay and convert.
 *
 * What a real run of the logged program allocates, with no budget: every
 * CONSTANT and every CALL result with fresh storage (ALIAS -1) allocates its
 * MEMORY bytes; views (ALIAS k) allocate nothing; MUTATE writes in place
 * (no allocation; the simulator's copy-on-write is a remat policy, not what
 * the program did). A storage is freed when the last name bound to it or to
 * one of its views is released or rebound (COPY_FROM, in which case dst's old
 * storage loses a handle). Storages still named at the end stay allocated.
 * Allocation ids are storages in order of allocation; cost_ns is the
 * producing op's measured time; a free carries its allocation's size, as
 * the other readers' frees do (trace_builder_finish). Instructions before
 * ANNOTATE START are skipped, as the simulator does.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "trace/dtr_log.h"
#include "trace/trace.h"

#define UNBOUND UINT32_MAX

typedef struct events_builder {
    const dtr_log *log;
    trace *t;
    size_t cap;
    uint32_t *binding; /* name -> storage id */
    uint32_t *handles; /* storage id -> names bound to it */
    uint64_t *sizes;   /* storage id -> bytes allocated */
    size_t handles_cap;
} events_builder;

static coop_status push(events_builder *b, trace_event_kind kind, uint32_t id, uint64_t size,
                        uint64_t cost)
{
    trace *t = b->t;
    if (t->num_events == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        trace_event *e = realloc(t->events, cap * sizeof *e);
        if (!e)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory", b->log->path);
        t->events = e;
        b->cap = cap;
    }
    t->events[t->num_events++] =
        (trace_event){.kind = kind, .id = id, .size = size, .time_us = -1, .cost_ns = cost};
    return COOP_OK;
}

static coop_status new_storage(events_builder *b, uint64_t size, uint32_t *id)
{
    if (b->t->num_ids == b->handles_cap) {
        size_t cap = b->handles_cap ? b->handles_cap * 2 : 1024;
        uint32_t *h = realloc(b->handles, cap * sizeof *h);
        if (h)
            b->handles = h;
        uint64_t *sz = h ? realloc(b->sizes, cap * sizeof *sz) : NULL;
        if (!sz)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory", b->log->path);
        b->sizes = sz;
        b->handles_cap = cap;
    }
    *id = b->t->num_ids++;
    b->handles[*id] = 0;
    b->sizes[*id] = size;
    return COOP_OK;
}

static coop_status undefined(events_builder *b, const dtr_instr *in, uint32_t name)
{
    return coop_set_error(COOP_ERR_INVALID, "%s:%" PRIu32 ": %s is not defined", b->log->path,
                          in->line, b->log->names[name]);
}

/* Drops one handle on storage s, freeing it with the last. */
static coop_status drop(events_builder *b, uint32_t s)
{
    if (b->handles[s] && --b->handles[s] == 0)
        return push(b, TRACE_FREE, s, b->sizes[s], 0);
    return COOP_OK;
}

/* Binds name to storage s, dropping the storage name held before. The
 * handle on s is taken first: the old and new storage may be one (x = view(x),
 * COPY x x), and its last handle must not go in between. */
static coop_status bind(events_builder *b, uint32_t name, uint32_t s)
{
    b->handles[s]++;
    uint32_t old = b->binding[name];
    b->binding[name] = s;
    return old == UNBOUND ? COOP_OK : drop(b, old);
}

static coop_status convert(events_builder *b, const dtr_instr *in)
{
    const dtr_log *log = b->log;
    coop_status st = COOP_OK;
    uint32_t s = 0; /* set by new_storage before use; -O3 cannot see it */
    switch (in->kind) {
    case DTR_CONSTANT:
        if ((st = new_storage(b, in->memory, &s)) || (st = push(b, TRACE_ALLOC, s, in->memory, 0)))
            return st;
        return bind(b, in->name, s);
    case DTR_CALL:
        for (uint32_t i = 0; i < in->num_args; i++)
            if (b->binding[log->args[in->first_arg + i]] == UNBOUND)
                return undefined(b, in, log->args[in->first_arg + i]);
        for (uint32_t i = 0; i < in->num_results; i++) {
            const dtr_result *r = &log->results[in->first_result + i];
            if (r->alias == DTR_FRESH) {
                if ((st = new_storage(b, r->memory, &s)) ||
                    (st = push(b, TRACE_ALLOC, s, r->memory, in->time_ns)))
                    return st;
            } else {
                s = b->binding[log->args[in->first_arg + (uint32_t)r->alias]];
            }
            if ((st = bind(b, r->name, s)))
                return st;
        }
        return COOP_OK;
    case DTR_MUTATE:
        for (uint32_t i = 0; i < in->num_args; i++)
            if (b->binding[log->args[in->first_arg + i]] == UNBOUND)
                return undefined(b, in, log->args[in->first_arg + i]);
        return COOP_OK;
    case DTR_COPY:
    case DTR_COPY_FROM:
        if (b->binding[in->src] == UNBOUND)
            return undefined(b, in, in->src);
        return bind(b, in->name, b->binding[in->src]);
    case DTR_RELEASE:
        s = b->binding[in->name];
        if (s == UNBOUND)
            return COOP_OK;
        b->binding[in->name] = UNBOUND;
        return drop(b, s);
    case DTR_ANNOTATE:
        return COOP_OK;
    }
    return COOP_OK;
}

coop_status trace_read_dtr(const char *path, trace *out)
{
    *out = (trace){0};
    dtr_log log;
    coop_status st = dtr_log_read(path, &log);
    if (st)
        return st;
    events_builder b = {.log = &log, .t = out};
    b.binding = malloc((log.num_names + 1) * sizeof *b.binding);
    const char *slash = strrchr(path, '/');
    out->name = strdup(slash ? slash + 1 : path);
    if (!b.binding || !out->name)
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory", path);
    for (uint32_t i = 0; !st && i < log.num_names; i++)
        b.binding[i] = UNBOUND;
    for (size_t i = log.start; !st && i < log.num_instrs; i++)
        st = convert(&b, &log.instrs[i]);
    free(b.binding);
    free(b.handles);
    free(b.sizes);
    dtr_log_free(&log);
    if (st)
        trace_free(out);
    return st;
}
