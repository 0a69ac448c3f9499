/*
 * Fault-injection wrapper: every pool's backend goes through it. It counts
 * calls per kind (COOP_FAULT_*) and fails the Nth armed call once with
 * COOP_ERR_BACKEND, so tests can make every step of a sequence fail in turn.
 * release, event_destroy and destroy cannot report failure usefully and are
 * neither counted nor failed.
 *
 * It is also where a CUDA pool's copy in a forked child is cut off from the
 * driver (coop_backend_fault_forked): the pool's entry points refuse such
 * calls first, with their own names; this catches every path below them
 * (the remat layer's, the arena's at destroy), so that no driver call is
 * made in the child whatever the caller.
 */
#include <stdlib.h>

#include "backend.h"
#include "status.h"

enum { KIND_RESERVE, KIND_MAP, KIND_UNMAP, KIND_EVENT, KIND_SEGMENT, NUM_KINDS };

typedef struct fault_backend {
    coop_backend base;
    coop_backend *inner;
    uint64_t calls[NUM_KINDS];
    unsigned armed_kinds;
    uint64_t countdown; /* armed calls left until the failing one */
    /* nonzero: a forked child's copy (coop_backend_fault_forked), made in
     * process created_pid; nothing reaches inner */
    int created_pid, child_pid;
} fault_backend;

static fault_backend *fault_of(coop_backend *be)
{
    return (fault_backend *)be;
}

static const char *const kind_name[NUM_KINDS] = {"reserve", "map", "unmap", "event", "segment"};

/* A call of a forked child's copy: refused, in the words of the pool's
 * entry points (pool_forked_error). */
static coop_status forked_refusal(const fault_backend *f, const char *op)
{
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "%s backend %s: this CUDA pool was created in process %d; CUDA cannot "
                          "be used in a forked child (process %d)",
                          f->inner->name, op, f->created_pid, f->child_pid);
}

/* Returns the refusal from the op it is in when f is a forked child's copy. */
#define REFUSE_IF_FORKED(f, op)                                                                    \
    do {                                                                                           \
        if (__builtin_expect((f)->child_pid != 0, 0))                                              \
            return forked_refusal(f, op);                                                          \
    } while (0)

/* Counts a call of kind; true when this call must fail. */
static bool should_fail(fault_backend *f, int kind)
{
    f->calls[kind]++;
    if (!(f->armed_kinds & (1u << kind)))
        return false;
    if (--f->countdown > 0)
        return false;
    f->armed_kinds = 0;
    coop_set_error(COOP_ERR_BACKEND, "injected fault: %s call #%llu failed", kind_name[kind],
                   (unsigned long long)f->calls[kind]);
    return true;
}

static coop_status fault_reserve(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "reserve");
    if (should_fail(f, KIND_RESERVE))
        return COOP_ERR_BACKEND;
    return f->inner->ops->reserve(f->inner, size, addr);
}

static coop_status fault_release(coop_backend *be, uintptr_t addr, uint64_t size)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "release");
    return f->inner->ops->release(f->inner, addr, size);
}

static coop_status fault_map(coop_backend *be, uintptr_t addr, uint64_t size)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "map");
    if (should_fail(f, KIND_MAP))
        return COOP_ERR_BACKEND;
    return f->inner->ops->map(f->inner, addr, size);
}

static coop_status fault_unmap(coop_backend *be, uintptr_t addr, uint64_t size, uint64_t *unmapped)
{
    fault_backend *f = fault_of(be);
    *unmapped = 0;
    REFUSE_IF_FORKED(f, "unmap");
    if (should_fail(f, KIND_UNMAP))
        return COOP_ERR_BACKEND;
    return f->inner->ops->unmap(f->inner, addr, size, unmapped);
}

/* Not a fault kind: it only waits (its failure is the backend's own). */
static coop_status fault_synchronize(coop_backend *be)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "synchronize");
    return f->inner->ops->synchronize(f->inner);
}

static coop_status fault_segment_alloc(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "segment_alloc");
    if (should_fail(f, KIND_SEGMENT))
        return COOP_ERR_BACKEND;
    return f->inner->ops->segment_alloc(f->inner, size, addr);
}

static coop_status fault_segment_free(coop_backend *be, uintptr_t addr, uint64_t size)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "segment_free");
    if (should_fail(f, KIND_SEGMENT))
        return COOP_ERR_BACKEND;
    return f->inner->ops->segment_free(f->inner, addr, size);
}

static coop_status fault_event_record(coop_backend *be, coop_stream stream, coop_event *ev)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "event_record");
    if (should_fail(f, KIND_EVENT))
        return COOP_ERR_BACKEND;
    return f->inner->ops->event_record(f->inner, stream, ev);
}

static coop_status fault_event_query(coop_backend *be, coop_event ev, bool *done)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "event_query");
    if (should_fail(f, KIND_EVENT))
        return COOP_ERR_BACKEND;
    return f->inner->ops->event_query(f->inner, ev, done);
}

static coop_status fault_event_wait(coop_backend *be, coop_event ev)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "event_wait");
    if (should_fail(f, KIND_EVENT))
        return COOP_ERR_BACKEND;
    return f->inner->ops->event_wait(f->inner, ev);
}

static void fault_event_destroy(coop_backend *be, coop_event ev)
{
    fault_backend *f = fault_of(be);
    if (f->child_pid) /* the parent's event */
        return;
    f->inner->ops->event_destroy(f->inner, ev);
}

static coop_status fault_hold_stream(coop_backend *be, coop_stream stream, bool hold, bool busy)
{
    fault_backend *f = fault_of(be);
    REFUSE_IF_FORKED(f, "hold_stream");
    if (!f->inner->ops->hold_stream)
        return coop_set_error(COOP_ERR_UNSUPPORTED, "the %s backend cannot hold streams",
                              f->inner->name);
    return f->inner->ops->hold_stream(f->inner, stream, hold, busy);
}

static void fault_forget_stream(coop_backend *be, coop_stream stream)
{
    fault_backend *f = fault_of(be);
    if (!f->child_pid && f->inner->ops->forget_stream)
        f->inner->ops->forget_stream(f->inner, stream);
}

static void fault_destroy(coop_backend *be)
{
    fault_backend *f = fault_of(be);
    if (f->child_pid && f->inner->ops->abandon)
        f->inner->ops->abandon(f->inner);
    else
        coop_backend_destroy(f->inner);
    free(f);
}

static const coop_backend_ops fault_ops = {
    .reserve = fault_reserve,
    .release = fault_release,
    .map = fault_map,
    .unmap = fault_unmap,
    .synchronize = fault_synchronize,
    .segment_alloc = fault_segment_alloc,
    .segment_free = fault_segment_free,
    .event_record = fault_event_record,
    .event_query = fault_event_query,
    .event_wait = fault_event_wait,
    .event_destroy = fault_event_destroy,
    .hold_stream = fault_hold_stream,
    .forget_stream = fault_forget_stream,
    .destroy = fault_destroy,
};

coop_status coop_backend_fault_create(coop_backend *inner, coop_backend **out)
{
    *out = NULL;
    fault_backend *f = calloc(1, sizeof *f);
    if (!f) {
        coop_backend_destroy(inner);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "out of host memory for the backend");
    }
    f->base = *inner;
    f->base.ops = &fault_ops;
    f->inner = inner;
    *out = &f->base;
    return COOP_OK;
}

void coop_backend_fault_adopt_page(coop_backend *be, uint64_t page_size)
{
    fault_backend *f = fault_of(be);
    f->base.page_size = page_size;
    f->inner->page_size = page_size;
}

void coop_backend_fault_arm(coop_backend *be, unsigned kinds, uint64_t nth)
{
    fault_backend *f = fault_of(be);
    f->armed_kinds = nth ? (kinds & COOP_FAULT_ALL) : 0;
    f->countdown = nth;
}

uint64_t coop_backend_fault_calls(const coop_backend *be, unsigned kinds)
{
    const fault_backend *f = (const fault_backend *)be;
    uint64_t n = 0;
    for (int k = 0; k < NUM_KINDS; k++)
        if (kinds & (1u << k))
            n += f->calls[k];
    return n;
}

void coop_backend_fault_forked(coop_backend *be, int created_pid, int child_pid)
{
    fault_backend *f = fault_of(be);
    f->created_pid = created_pid;
    f->child_pid = child_pid;
}

coop_backend *coop_backend_fault_inner(coop_backend *be)
{
    return fault_of(be)->inner;
}
