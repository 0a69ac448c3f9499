/* One simulation reduced to its metrics, and the feasibility bisection. */
#include <stdlib.h>

#include "remat/sim.h"

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

sim_outcome sim_run(const sim_program *prog, uint64_t peak, const sim_options *opt, double ratio)
{
    sim_outcome out = {.budget_ratio = ratio};
    /* simrd: int(baseline_memory * ratio) */
    out.budget = (uint64_t)((double)peak * ratio);
    uint64_t limit = (uint64_t)((double)prog->base_compute * (opt->overhead_limit - 1.0));
    sim_stats st;
    out.result = sim_run_ideal(prog, opt->policy, out.budget, limit, &st);
    out.overhead = prog->base_compute ? (double)(prog->base_compute + st.remat_compute) /
                                            (double)prog->base_compute
                                      : 1.0;
    out.evictions = st.evictions;
    out.remat_ops = st.remat_ops;
    out.heuristic_evals = st.heuristic_evals;
    out.frag_failures = st.frag_failures;
    out.frag_at_evict = st.searches ? st.frag_sum / (double)st.searches : 0.0;
    if (st.searches) {
        qsort(st.search_ns, st.searches, sizeof *st.search_ns, cmp_u64);
        out.search_ns_p50 = percentile(st.search_ns, st.searches, 0.50);
        out.search_ns_p99 = percentile(st.search_ns, st.searches, 0.99);
    }
    sim_stats_free(&st);
    return out;
}

double sim_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double tolerance)
{
    double lo = 0.0, hi = 1.0; /* lo fails (nothing fits in 0 bytes), hi is checked */
    if (sim_run(prog, peak, opt, hi).result != SIM_OK)
        return 0.0;
    while (hi - lo > tolerance) {
        double mid = (lo + hi) / 2;
        if (sim_run(prog, peak, opt, mid).result == SIM_OK)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}
