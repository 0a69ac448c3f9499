/* One simulation reduced to its metrics, and the feasibility bisection. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "remat/sim.h"
#include "remat/sim_internal.h"

sim_options sim_options_default(sim_policy policy, sim_memory memory)
{
    return (sim_options){.policy = policy,
                         .memory = memory,
                         .overhead_limit = 2.0,
                         .inplace = -1,
                         .cheap_threshold = NAN,
                         .window_cost = SIM_WINDOW_LIVE};
}

int sim_options_parse_policy(const char *name, sim_options *out)
{
    static const struct {
        const char *name;
        int inplace;
        double threshold;
        sim_window_cost cost;
    } variants[] = {
        {"coop-nopart", -1, -1.0, SIM_WINDOW_LIVE},
        {"coop-cow", 0, NAN, SIM_WINDOW_LIVE},
        {"coop-dte", -1, NAN, SIM_WINDOW_DTE},
        {"coop-sum", -1, NAN, SIM_WINDOW_SUM},
        {"coop-eq", -1, NAN, SIM_WINDOW_EQ},
        {"coop-comp", -1, NAN, SIM_WINDOW_COMP},
        /* coop's former name for its default cost, kept for scripts */
        {"coop-live", -1, NAN, SIM_WINDOW_LIVE},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        if (!strcmp(name, variants[i].name)) {
            out->policy = SIM_POLICY_COOP;
            out->inplace = variants[i].inplace;
            out->cheap_threshold = variants[i].threshold;
            out->window_cost = variants[i].cost;
            return 0;
        }
    }
    sim_policy p;
    if (sim_policy_parse(name, &p))
        return -1;
    out->policy = p;
    out->inplace = -1;
    out->cheap_threshold = NAN;
    out->window_cost = SIM_WINDOW_LIVE;
    return 0;
}

uint64_t sim_peak(const sim_program *prog, sim_memory memory)
{
    return sim_baseline_peak(prog, memory == SIM_MEMORY_ARENA ? 512 : 1);
}

uint64_t sim_capacity(sim_memory memory, uint64_t budget)
{
    return memory == SIM_MEMORY_ARENA ? sim_arena_capacity(budget) : budget;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values. */
static uint64_t percentile(const uint64_t *sorted, size_t n, double q)
{
    if (!n)
        return 0;
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

uint64_t sim_remat_limit(uint64_t base_compute, double overhead_limit)
{
    double extra = overhead_limit - 1.0;
    if (!(extra > 0)) /* a limit of 1 (or less): no recomputation at all */
        return 0;
    if (extra >= (double)SIM_REMAT_LIMIT_MAX)
        return SIM_REMAT_LIMIT_MAX;
    /* the whole part in integers: a base above 2^53 ns lost its low bits
     * in a double, so at the default limit 2 the budget could fall below
     * the base compute itself */
    uint64_t whole = (uint64_t)extra;
    if (whole && base_compute > SIM_REMAT_LIMIT_MAX / whole)
        return SIM_REMAT_LIMIT_MAX;
    uint64_t ns = base_compute * whole; /* at most the cap */
    double part = (double)base_compute * (extra - (double)whole);
    if (!(part < (double)SIM_REMAT_LIMIT_MAX)) /* converted below only when it fits */
        return SIM_REMAT_LIMIT_MAX;
    uint64_t more = (uint64_t)part;
    return more > SIM_REMAT_LIMIT_MAX - ns ? SIM_REMAT_LIMIT_MAX : ns + more;
}

sim_outcome sim_run(const sim_program *prog, uint64_t peak, const sim_options *opt, double ratio)
{
    sim_outcome out = {.budget_ratio = ratio};
    /* simrd: int(baseline_memory * ratio) */
    out.budget = (uint64_t)((double)peak * ratio);
    uint64_t limit = sim_remat_limit(prog->base_compute, opt->overhead_limit);
    bool coop = opt->policy == SIM_POLICY_COOP;
    sim_config cfg = {
        .policy = opt->policy,
        .arena = opt->memory == SIM_MEMORY_ARENA,
        .inplace = opt->inplace < 0 ? coop : opt->inplace > 0,
        .cheap_threshold = isnan(opt->cheap_threshold) ? (coop ? SIM_DEFAULT_CHEAP_THRESHOLD : -1.0)
                                                       : opt->cheap_threshold,
        .window_cost = opt->window_cost,
        .plain_window_walk = opt->plain_window_walk != 0,
        .eq_cache = !opt->no_eq_cache,
        .check_components = opt->check_components != 0,
        .check_caches = opt->check_caches != 0,
        .budget = out.budget,
        .remat_limit = limit,
    };
    sim_stats st;
    out.result = sim_execute(prog, &cfg, &st);
    out.overhead = prog->base_compute ? (double)(prog->base_compute + st.remat_compute) /
                                            (double)prog->base_compute
                                      : 1.0;
    out.evictions = st.evictions;
    out.remat_ops = st.remat_ops;
    out.heuristic_evals = st.heuristic_evals;
    out.frag_failures = st.frag_failures;
    out.inplace_ops = st.inplace_ops;
    out.blocks_visited = st.blocks_visited;
    out.eq_walks = st.eq_walks;
    out.eq_neighbours = st.eq_neighbours;
    out.comp_checks = st.comp_checks;
    out.comp_mismatches = st.comp_mismatches;
    out.cache_checks = st.cache_checks;
    out.cache_mismatches = st.cache_mismatches;
    out.frag_at_evict = st.searches ? st.frag_sum / (double)st.searches : 0.0;
    sim_search_percentiles(st.search_ns, st.searches, &out.search_ns_p50, &out.search_ns_p99);
    sim_stats_free(&st);
    return out;
}

void sim_search_percentiles(uint64_t *ns, size_t n, uint64_t *p50, uint64_t *p99)
{
    *p50 = *p99 = 0;
    if (!n)
        return;
    qsort(ns, n, sizeof *ns, cmp_u64);
    *p50 = percentile(ns, n, 0.50);
    *p99 = percentile(ns, n, 0.99);
}

double sim_bisect_min_ratio(sim_feasible_fn feasible, void *ctx, double tolerance)
{
    /* lo is taken to fail (nothing fits in 0 bytes), hi is checked */
    double lo = 0.0, hi = 1.0;
    int ok = feasible(hi, ctx);
    if (ok <= 0)
        return ok < 0 ? NAN : -1.0;
    while (hi - lo > tolerance) {
        double mid = (lo + hi) / 2;
        if ((ok = feasible(mid, ctx)) < 0)
            return NAN;
        if (ok)
            hi = mid;
        else
            lo = mid;
    }
    /* no probe failed: ratio 0 may not fail either (a log whose peak is 0
     * bytes runs in any budget), and then the answer is 0, not hi. Checked
     * only here, so logs with a failing probe cost no extra run */
    if (lo == 0.0 && (ok = feasible(0.0, ctx)) != 0)
        return ok < 0 ? NAN : 0.0;
    return hi;
}

static int sim_run_feasible(double ratio, void *ctx)
{
    const sim_run_args *a = ctx;
    return sim_feasibility(sim_run(a->prog, a->peak, a->opt, ratio).result);
}

double sim_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double tolerance)
{
    sim_run_args a = {prog, peak, opt};
    return sim_bisect_min_ratio(sim_run_feasible, &a, tolerance);
}

double sim_grid_stable_ratio(sim_feasible_fn feasible, void *ctx, double step)
{
    double stable = -1.0;
    /* each grid ratio computed from 1 (no drift from repeated subtraction);
     * the walk ends before a ratio within half a step of 0, which is ratio
     * 0 itself where step divides 1 */
    for (uint64_t k = 0;; k++) {
        double r = 1.0 - (double)k * step;
        if (r < step / 2)
            break;
        int ok = feasible(r, ctx);
        if (ok < 0)
            return NAN;
        if (!ok)
            break;
        stable = r;
    }
    return stable;
}

double sim_stable_min_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double step)
{
    sim_run_args a = {prog, peak, opt};
    return sim_grid_stable_ratio(sim_run_feasible, &a, step);
}
