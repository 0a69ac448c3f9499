/* Measuring one trace under several policies; see measure.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay/engine.h"
#include "replay/measure.h"
#include "replay/recorded.h"
#include "replay/timeline.h"
#include "status.h"

/* A write to the timeline failed: an error of the run, not of the policy
 * measured (replay_measure stops there rather than skip it), with the
 * reason the failed write left in errno. */
static coop_status timeline_failed(void)
{
    int err = errno;
    return coop_set_error(COOP_ERR_INVALID, "cannot write the timeline%s%s", err ? ": " : "",
                          err ? strerror(err) : "");
}

typedef struct progress_ctx {
    const char *trace, *policy, *phase;
} progress_ctx;

static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    const progress_ctx *p = ctx;
    fprintf(stderr, "\r\033[K%s: %s: %s %3.0f%%", p->trace, p->policy, p->phase,
            total ? 100.0 * (double)done / (double)total : 100.0);
}

static coop_status measure_recorded(const trace *t, const replay_measure_options *opt,
                                    replay_row *row, bool *filled)
{
    *filled = false;
    uint64_t *curve = NULL;
    if (opt->timeline && t->num_events) {
        curve = calloc(t->num_events, sizeof *curve);
        if (!curve)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "replay: out of host memory");
    }
    replay_recorded rec;
    coop_status st = replay_recorded_compute(t, &rec, curve);
    if (st == COOP_OK && rec.available) {
        *filled = true;
        row->peak_reserved = rec.peak_reserved;
        /* the recorded run completed within its peak: that is its capacity
         * need, and what it mapped is its map_bytes. Above --capacity the
         * recording does not fit, and both are null as for a policy that
         * ran out of memory (nothing was replayed, so there is no
         * oom_event). */
        bool fits = rec.peak_reserved <= opt->capacity;
        row->has_min_capacity = fits;
        row->min_capacity = rec.peak_reserved;
        row->has_map_bytes = fits;
        row->map_bytes = rec.map_bytes;
        if (curve && !replay_timeline_policy(opt->timeline, "recorded", NULL, curve, t->num_events,
                                             NULL, 0, NULL))
            st = timeline_failed();
    }
    free(curve);
    return st;
}

static coop_status measure_policy(const replay_prepared *p, const replay_policy_ops *ops,
                                  const replay_measure_options *opt, replay_row *row)
{
    const trace *t = p->trace;
    progress_ctx pc = {.trace = t->name ? t->name : "trace", .policy = ops->name};
    replay_series series;
    replay_run_options ro = {.series = opt->timeline ? &series : NULL};
    if (opt->progress) {
        pc.phase = "replay";
        ro.progress = show_progress;
        ro.progress_ctx = &pc;
    }
    replay_run main_run;
    coop_status st = replay_run_trace(p, ops, opt->capacity, opt->page, &ro, &main_run);
    if (st != COOP_OK)
        return st;
    row->peak_reserved = main_run.peak_reserved;
    row->peak_active = main_run.peak_active;
    row->has_frag = main_run.has_frag;
    row->frag_mean = main_run.frag_mean;
    row->frag_max = main_run.frag_max;
    row->oom = main_run.oom;
    row->oom_event = main_run.oom_event;
    if (opt->timeline) {
        bool ok = replay_timeline_policy(opt->timeline, ops->name, series.live, series.reserved,
                                         t->num_events, series.placements, series.num_placements,
                                         &main_run);
        replay_series_free(&series);
        if (!ok)
            return timeline_failed();
    }
    /* Timing: separate runs that read nothing between calls (engine.h). */
    replay_run_options timed = {.measure_time = true, .timed_passes = REPLAY_TIMED_PASSES};
    if (opt->progress) {
        pc.phase = "timing";
        timed.progress = show_progress;
        timed.progress_ctx = &pc;
    }
    replay_run timed_run;
    st = replay_run_trace(p, ops, opt->capacity, opt->page, &timed, &timed_run);
    if (st != COOP_OK)
        return st;
    row->has_ns = timed_run.num_timed > 0; /* an empty trace times nothing */
    row->ns_per_op = timed_run.ns_per_op;
    if (main_run.oom)
        return COOP_OK; /* needs more than --capacity: no minimum within it */

    if (opt->progress) {
        pc.phase = "bisecting";
        show_progress(&pc, 0, 1);
    }
    /* The main run's peak is an upper bound that usually passes; a policy
     * whose placement depends on the capacity may need the full capacity. */
    uint64_t hi = main_run.peak_reserved > p->peak_live ? main_run.peak_reserved : p->peak_live;
    if (hi > opt->capacity)
        hi = opt->capacity;
    replay_run at_min;
    st = replay_min_capacity(p, ops, opt->page, p->peak_live, hi, &row->min_capacity, &at_min);
    if (st == COOP_ERR_NOMEM && hi < opt->capacity)
        st = replay_min_capacity(p, ops, opt->page, p->peak_live, opt->capacity, &row->min_capacity,
                                 &at_min);
    if (st != COOP_OK)
        return st;
    row->has_min_capacity = true;
    row->has_map_bytes = true;
    row->map_bytes = at_min.map_bytes;
    return COOP_OK;
}

coop_status replay_measure(const trace *t, const replay_choice *choices, size_t count,
                           const replay_measure_options *opt, replay_row *rows, size_t *filled,
                           size_t *failed)
{
    *filled = 0;
    replay_prepared p;
    coop_status st = replay_prepare(t, &p);
    if (st != COOP_OK)
        return st;
    if (opt->timeline &&
        !replay_timeline_trace(opt->timeline, t->name ? t->name : "trace", t->num_events)) {
        replay_prepared_free(&p);
        return timeline_failed();
    }
    for (size_t i = 0; i < count && st == COOP_OK; i++) {
        replay_row *row = &rows[*filled];
        *row = (replay_row){
            .trace = t->name ? t->name : "trace",
            .policy = choices[i].name,
            .events = t->num_events,
            .peak_live = p.peak_live,
            .has_torch_settings = t->has_torch_settings,
            .torch_settings_default = !t->torch_settings,
            .recorded_by_coop = t->recorded_by_coop,
        };
        bool have = true;
        if (choices[i].ops)
            st = measure_policy(&p, choices[i].ops, opt, row);
        else /* a snapshot whose segment events do not add up is skipped too */
            st = measure_recorded(t, opt, row, &have);
        if (st == COOP_OK) {
            *filled += have;
        } else if (st != COOP_ERR_HOST_NOMEM && !(opt->timeline && ferror(opt->timeline))) {
            /* one policy failing (e.g. a --page its backend refuses) leaves
             * the others' figures standing: say so and go on */
            fprintf(stderr, "%scoop replay: %s: %s skipped: %s\n", opt->progress ? "\r\033[K" : "",
                    row->trace, choices[i].name, coop_last_error());
            (*failed)++;
            st = COOP_OK;
        }
    }
    if (opt->progress)
        fprintf(stderr, "\r\033[K");
    replay_prepared_free(&p);
    return st;
}
