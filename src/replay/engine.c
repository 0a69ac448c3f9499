/* Replay engine: one trace through one policy; see engine.h. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/engine.h"
#include "status.h"

/* ---- Preparing a trace ---- */

/* Live bytes stay below 2^63, so that every byte figure of a run (peaks,
 * capacities, JSON integers) fits a signed 64-bit integer. Readers keep each
 * size below 2^56: only 128 or more of the largest live at once get here. */
#define REPLAY_LIVE_LIMIT ((uint64_t)1 << 63)

coop_status replay_prepare(const trace *t, replay_prepared *out)
{
    *out = (replay_prepared){.trace = t};
    size_t n = t->num_ids ? t->num_ids : 1;
    uint64_t *size = calloc(n, sizeof *size);
    unsigned char *live = calloc(n, 1);
    coop_status st = COOP_OK;
    if (!size || !live) {
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "replay: out of host memory for %u ids",
                            t->num_ids);
        goto done;
    }
    uint64_t live_bytes = 0;
    for (size_t i = 0; i < t->num_events; i++) {
        const trace_event *e = &t->events[i];
        if (e->kind != TRACE_ALLOC && e->kind != TRACE_FREE)
            continue;
        if (e->id >= t->num_ids) {
            st = coop_set_error(COOP_ERR_INVALID, "event %zu names id %u, beyond %u ids", i, e->id,
                                t->num_ids);
            goto done;
        }
        if (e->kind == TRACE_ALLOC) {
            if (live[e->id]) {
                st = coop_set_error(COOP_ERR_INVALID,
                                    "event %zu allocates id %u, which is already live", i, e->id);
                goto done;
            }
            if (e->size == 0)
                continue; /* nothing to place; its free is skipped too */
            if (e->size >= REPLAY_LIVE_LIMIT - live_bytes) {
                st = coop_set_error(COOP_ERR_INVALID,
                                    "event %zu (id %u, %llu bytes) brings the live bytes to 2^63 "
                                    "or more",
                                    i, e->id, (unsigned long long)e->size);
                goto done;
            }
            live[e->id] = 1;
            size[e->id] = e->size;
            live_bytes += e->size;
            out->num_ops++;
            if (live_bytes > out->peak_live)
                out->peak_live = live_bytes;
        } else if (!live[e->id]) {
            out->unknown_frees++;
        } else {
            live[e->id] = 0;
            live_bytes -= size[e->id];
            out->num_ops++;
        }
    }
done:
    free(size);
    free(live);
    return st;
}

void replay_prepared_free(replay_prepared *p)
{
    (void)p; /* nothing owned today; kept so callers need not change */
}

/* ---- Running ---- */

typedef struct run_state {
    const replay_prepared *p;
    const replay_policy_ops *ops;
    void *policy;
    const replay_run_options *opt;
    replay_run *out;
    uintptr_t *addr;     /* per id: placed address, 0 = not live */
    uint64_t *size;      /* per id: requested bytes */
    uint64_t *placement; /* per id: index into series placements */
    uint32_t *op_ns;     /* per timed call: nanoseconds (timed runs only) */
    uint64_t num_timed, timed_cap;
    uint64_t live;
    double frag_weighted; /* sum of frag x events it held for */
    double frag_last;
    uint64_t frag_since; /* event index of the last sample */
    uint64_t frag_first; /* event index of the first sample */
    bool frag_started;
} run_state;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record_time(run_state *r, uint64_t ns)
{
    if (r->op_ns && r->num_timed < r->timed_cap)
        r->op_ns[r->num_timed++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

/* Fragmentation faced by an allocation at event index `at`: sampled before
 * placing it, and held (weighted) until the next allocation. */
static void sample_fragmentation(run_state *r, uint64_t at)
{
    replay_policy_stats st;
    r->ops->stats(r->policy, &st);
    if (!st.has_free_blocks)
        return;
    double frag = st.free_bytes ? 1.0 - (double)st.largest_free / (double)st.free_bytes : 0.0;
    if (r->frag_started)
        r->frag_weighted += r->frag_last * (double)(at - r->frag_since);
    else
        r->frag_first = at;
    r->frag_started = true;
    r->frag_last = frag;
    r->frag_since = at;
    if (frag > r->out->frag_max)
        r->out->frag_max = frag;
}

static void track_peaks(run_state *r)
{
    replay_policy_stats st;
    r->ops->stats(r->policy, &st);
    /* a policy's own peak also holds what it reserved inside a call and
     * released before returning (torch-expandable's retry path) */
    uint64_t reserved =
        st.peak_reserved_bytes > st.reserved_bytes ? st.peak_reserved_bytes : st.reserved_bytes;
    if (reserved > r->out->peak_reserved)
        r->out->peak_reserved = reserved;
    if (st.active_bytes > r->out->peak_active)
        r->out->peak_active = st.active_bytes;
}

static coop_status place(run_state *r, uint32_t id, uint64_t size, uint64_t stream, uint64_t at)
{
    if (!r->op_ns)
        sample_fragmentation(r, at);
    uintptr_t addr = 0;
    uint64_t t0 = r->op_ns ? now_ns() : 0;
    coop_status st = r->ops->malloc(r->policy, size, stream, &addr);
    if (r->op_ns)
        record_time(r, now_ns() - t0);
    if (st == COOP_ERR_NOMEM) {
        r->out->oom = true;
        r->out->oom_event = at;
        return COOP_OK;
    }
    if (st != COOP_OK)
        return st;
    r->addr[id] = addr;
    r->size[id] = size;
    r->live += size;
    replay_series *s = r->opt ? r->opt->series : NULL;
    if (s) {
        if (s->num_placements == s->cap_placements) {
            uint64_t cap = s->cap_placements ? 2 * s->cap_placements : 1024;
            replay_placement *grown = realloc(s->placements, cap * sizeof *grown);
            if (!grown)
                return coop_set_error(COOP_ERR_HOST_NOMEM, "replay: out of host memory");
            s->placements = grown;
            s->cap_placements = cap;
        }
        r->placement[id] = s->num_placements;
        s->placements[s->num_placements++] = (replay_placement){
            .addr = addr, .size = size, .start_event = at, .end_event = r->p->trace->num_events};
    }
    return COOP_OK;
}

static coop_status release(run_state *r, uint32_t id, uint64_t at)
{
    uint64_t t0 = r->op_ns ? now_ns() : 0;
    coop_status st = r->ops->free(r->policy, r->addr[id], r->size[id]);
    if (r->op_ns)
        record_time(r, now_ns() - t0);
    if (st != COOP_OK)
        return st;
    r->live -= r->size[id];
    r->addr[id] = 0;
    replay_series *s = r->opt ? r->opt->series : NULL;
    if (s)
        s->placements[r->placement[id]].end_event = at;
    return COOP_OK;
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static coop_status run_events(run_state *r)
{
    const trace *t = r->p->trace;
    coop_status st;
    replay_series *s = r->opt ? r->opt->series : NULL;
    for (size_t i = 0; i < t->num_events; i++) {
        const trace_event *e = &t->events[i];
        bool timed = r->op_ns != NULL; /* timed runs read no statistics */
        if (e->kind == TRACE_ALLOC && e->size > 0) {
            st = place(r, e->id, e->size, e->stream, i);
            if (st != COOP_OK || r->out->oom)
                return st;
            if (!timed)
                track_peaks(r);
        } else if (e->kind == TRACE_FREE && r->addr[e->id]) {
            st = release(r, e->id, i);
            if (st != COOP_OK)
                return st;
            if (!timed)
                track_peaks(r);
        }
        if (s) {
            replay_policy_stats ps;
            r->ops->stats(r->policy, &ps);
            s->live[i] = r->live;
            s->reserved[i] = ps.reserved_bytes;
        }
        if (r->opt && r->opt->progress && (i & 0xfff) == 0)
            r->opt->progress(r->opt->progress_ctx, i, t->num_events);
    }
    return COOP_OK;
}

/* Creates the policy, runs the events and destroys it; r's per-id arrays
 * must be clear. */
static coop_status run_once(run_state *r, uint64_t capacity, uint64_t page)
{
    const replay_policy_ops *ops = r->ops;
    coop_status st = ops->create(capacity, page, &r->policy);
    if (st != COOP_OK)
        return st;
    st = run_events(r);
    if (st == COOP_OK && !r->op_ns) {
        replay_run *out = r->out;
        replay_policy_stats ps;
        ops->stats(r->policy, &ps);
        out->final_reserved = ps.reserved_bytes;
        out->map_bytes = ps.map_bytes;
        uint64_t end = out->oom ? out->oom_event : r->p->trace->num_events;
        /* a run that failed its first allocation took its only sample of an
         * empty pool (0 by convention) and spans no event: no measurement,
         * where 0.0 read as "no fragmentation" */
        if (r->frag_started && end > r->frag_first) {
            /* the last sample holds until the end of the run: without its
             * weight the events after the last allocation would count as 0 */
            r->frag_weighted += r->frag_last * (double)(end - r->frag_since);
            out->frag_mean = r->frag_weighted / (double)(end - r->frag_first);
            out->has_frag = true;
        }
    }
    ops->destroy(r->policy);
    r->policy = NULL;
    return st;
}

coop_status replay_run_trace(const replay_prepared *p, const replay_policy_ops *ops,
                             uint64_t capacity, uint64_t page, const replay_run_options *opt,
                             replay_run *out)
{
    const trace *t = p->trace;
    *out = (replay_run){0};
    run_state r = {.p = p, .ops = ops, .opt = opt, .out = out};
    bool timed = opt && opt->measure_time;
    if (timed && opt->series)
        return coop_set_error(COOP_ERR_INVALID, "replay: a timed run keeps no series");
    unsigned passes = timed && opt->timed_passes > 1 ? opt->timed_passes : 1;
    size_t n = t->num_ids ? t->num_ids : 1;
    r.addr = calloc(n, sizeof *r.addr);
    r.size = calloc(n, sizeof *r.size);
    bool want_series = opt && opt->series;
    if (want_series) {
        replay_series *s = opt->series;
        *s = (replay_series){0};
        r.placement = calloc(n, sizeof *r.placement);
        s->live = calloc(t->num_events ? t->num_events : 1, sizeof *s->live);
        s->reserved = calloc(t->num_events ? t->num_events : 1, sizeof *s->reserved);
    }
    uint64_t timed_cap = (uint64_t)(p->num_ops ? p->num_ops : 1) * passes;
    if (timed)
        r.op_ns = malloc(timed_cap * sizeof *r.op_ns);
    r.timed_cap = timed_cap;
    coop_status st = COOP_OK;
    if (!r.addr || !r.size ||
        (want_series && (!r.placement || !opt->series->live || !opt->series->reserved)) ||
        (timed && !r.op_ns)) {
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "replay: out of host memory");
        goto done;
    }
    for (unsigned pass = 0; pass < passes && st == COOP_OK && !out->oom; pass++) {
        if (pass) {
            memset(r.addr, 0, n * sizeof *r.addr);
            memset(r.size, 0, n * sizeof *r.size);
            r.live = 0;
        }
        st = run_once(&r, capacity, page);
    }
    out->num_timed = r.num_timed;
    if (st == COOP_OK && r.op_ns && r.num_timed) {
        uint64_t mid = r.num_timed / 2;
        qsort(r.op_ns, r.num_timed, sizeof *r.op_ns, compare_u32);
        out->ns_per_op =
            r.num_timed % 2 ? r.op_ns[mid] : ((double)r.op_ns[mid - 1] + r.op_ns[mid]) / 2;
    }
done:
    free(r.addr);
    free(r.size);
    free(r.placement);
    free(r.op_ns);
    if (st != COOP_OK && want_series)
        replay_series_free(opt->series);
    return st;
}

void replay_series_free(replay_series *s)
{
    if (!s)
        return;
    free(s->live);
    free(s->reserved);
    free(s->placements);
    *s = (replay_series){0};
}

/* ---- Minimum capacity ---- */

coop_status replay_min_capacity(const replay_prepared *p, const replay_policy_ops *ops,
                                uint64_t page, uint64_t lo, uint64_t hi, uint64_t *min_capacity,
                                replay_run *at_min)
{
    replay_run run;
    coop_status st = replay_run_trace(p, ops, hi, page, NULL, &run);
    if (st != COOP_OK)
        return st;
    if (run.oom)
        return coop_set_error(COOP_ERR_NOMEM, "%s does not fit in %llu bytes under %s",
                              p->trace->name ? p->trace->name : "trace", (unsigned long long)hi,
                              ops->name);
    *at_min = run;
    if (lo > hi)
        lo = hi;
    /* Invariant: hi passes. lo is tried first: often the answer (ideal, VMM). */
    if (lo < hi) {
        st = replay_run_trace(p, ops, lo, page, NULL, &run);
        if (st != COOP_OK)
            return st;
        if (!run.oom) {
            hi = lo;
            *at_min = run;
        }
    }
    /* lo fails from here on (unless lo == hi). The probes are multiples of
     * the policy's capacity step, where its limit acts (a capacity allows
     * what it allows rounded down to one), so the search ends where no
     * multiple lies between lo and hi: hi is then the step's multiple that
     * runs with the one below failing, exact where the policy is stepped.
     * Stopping at 0.1% of hi instead left answers up to 0.1% above that
     * (4 MiB of a 4 GiB trace), in fewer probes than a search to the byte
     * would need (twice the whole run's time on the bundled traces). */
    uint64_t step = ops->capacity_step ? ops->capacity_step(page) : 1;
    for (;;) {
        uint64_t mid = lo + (hi - lo) / 2;
        mid -= mid % step;
        if (mid <= lo) /* the first multiple above lo */
            mid = lo - lo % step + step;
        if (mid >= hi)
            break;
        st = replay_run_trace(p, ops, mid, page, NULL, &run);
        if (st != COOP_OK)
            return st;
        if (run.oom) {
            lo = mid;
        } else {
            hi = mid;
            *at_min = run;
        }
    }
    *min_capacity = hi;
    return COOP_OK;
}
