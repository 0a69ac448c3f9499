/*
 * One simulation: a program, a policy, a memory model and a budget ratio,
 * reduced to the metrics `coop sim` reports.
 */
#ifndef COOP_REMAT_SIM_H
#define COOP_REMAT_SIM_H

#include "remat/sim_program.h"
#include "remat/sim_runtime.h"

typedef enum sim_memory { SIM_MEMORY_IDEAL, SIM_MEMORY_ARENA } sim_memory;

/* Cheap tensor partitioning threshold (ns of producer time per byte) used by
 * coop unless told otherwise; see docs/remat.md for the measurement. */
#define SIM_DEFAULT_CHEAP_THRESHOLD 1e-2

typedef struct sim_options {
    sim_policy policy;
    sim_memory memory;
    double overhead_limit;  /* thrash when total / base compute exceeds it (2.0) */
    int inplace;            /* recomputable in-place: -1 policy default (coop on), 0, 1 */
    double cheap_threshold; /* NAN: policy default (coop SIM_DEFAULT_CHEAP_THRESHOLD,
                             * others off); < 0: off */
    sim_window_cost window_cost;
    int plain_window_walk; /* coop in the arena: walk every block instead of
                            * skipping breaker runs (same windows; 0 default) */
    int no_eq_cache;       /* dtr and coop: recompute c_eq by walking the
                            * neighbours at every evaluation, coop's c_live
                            * by walking its regions (same values; 0 default:
                            * cached class roots and c_live, see sim_runtime.h) */
    int check_components;  /* coop-comp (tests): compare every c_comp walk-free
                            * answer with a fresh walk (sim_outcome.comp_mismatches);
                            * coop: every c_live read from its cache */
    int check_caches;      /* tests: after every command and before every
                            * search, every cached c_eq, component label and
                            * c_live against a fresh walk (a missing
                            * invalidation shows even where no read value is
                            * wrong; sim_outcome.cache_mismatches). Slow:
                            * every storage walked at every step */
} sim_options;

/* Options with the policy's defaults. */
sim_options sim_options_default(sim_policy policy, sim_memory memory);

/* Parses a policy name, including coop's ablation variants: coop-nopart
 * (no cheap tensor partitioning), coop-cow (copy-on-write instead of
 * recomputable in-place), coop-dte (DTE's score inside the window),
 * coop-sum (the window's plain sum of costs instead of cost per byte),
 * coop-eq (c_eq, union-find classes, instead of c_live with the
 * recompute history: the default before docs/remat.md section 2's
 * component cost), coop-comp (c_comp instead of c_live: coop's cost until
 * docs/remat.md section 2's round 5). coop-live is accepted as another name
 * of coop (its name while c_live was a candidate, section 2c).
 * 0 and *out filled (memory, overhead limit untouched), -1 unknown. */
int sim_options_parse_policy(const char *name, sim_options *out);

typedef struct sim_outcome {
    sim_result result;
    double budget_ratio;
    uint64_t budget; /* bytes */
    double overhead; /* (base + recompute) / base */
    uint64_t evictions, remat_ops, heuristic_evals, frag_failures, inplace_ops;
    uint64_t blocks_visited; /* coop in the arena: blocks its window searches visited */
    uint64_t eq_walks;       /* c_eq evaluations that walked the neighbours */
    uint64_t eq_neighbours;  /* neighbours those walks visited */
    /* with check_components: c_comp evaluations checked, and those whose
     * component labels disagreed with a fresh walk (a stale label: a bug) */
    uint64_t comp_checks, comp_mismatches;
    /* with check_caches: cached values checked, and those a fresh walk
     * disagreed with, or left invalid although still right */
    uint64_t cache_checks, cache_mismatches;
    double frag_at_evict; /* mean over eviction searches of free bytes / budget (arena:
                           * / the pool's capacity, the budget rounded down to 512 B) */
    uint64_t search_ns_p50, search_ns_p99;
} sim_outcome;

/* The unlimited run's peak for the memory model (arena: sizes rounded to
 * the pool's 512-byte granularity). For the arena it is still the ideal
 * (copy-on-write, V1) run's live bytes, with no placement: every policy and
 * both models get the same bytes, and an arena of that size already has
 * to evict where fragmentation leaves no hole (ratio 1 is not free).
 * 0 with coop_last_error() set when host memory runs out (the last error is
 * cleared on success, so a log that allocates nothing reads 0 and ""). */
uint64_t sim_peak(const sim_program *prog, sim_memory memory);

/* The bytes a budget gives the memory model: ideal, the budget; arena, the
 * pool's capacity, the budget rounded down to the 512-byte block
 * granularity (0: no block fits, every run that places one is oom). */
uint64_t sim_capacity(sim_memory memory, uint64_t budget);

/* The most recomputation any run may do, in ns (2^62, 146 years): a run
 * stops once it passes its limit, at most one op (below 2^61 ns, the log
 * reader's cap on a log's TIME total) later, so its recompute stays below
 * 2^62 + 2^61 and its logical clock (1 + compute + recompute, stored in
 * int64 last-access times) below 2^63. Uncapped, a large --overhead-limit
 * on a log of 2^60 ns let the recompute total wrap past 2^64: such a run
 * ended ok with a small overhead instead of thrashing. */
#define SIM_REMAT_LIMIT_MAX ((uint64_t)1 << 62)

/* The recompute budget in ns of an overhead limit: base_compute x
 * (overhead_limit - 1), rounded down (exact for a whole overhead_limit,
 * such as the default 2), capped at SIM_REMAT_LIMIT_MAX (converting a
 * double of 2^64 or more to uint64_t is undefined, and on x86-64 gave a
 * limit near 0, so a large --overhead-limit made every run thrash). */
uint64_t sim_remat_limit(uint64_t base_compute, double overhead_limit);

/* Runs prog at budget = ratio x peak. */
sim_outcome sim_run(const sim_program *prog, uint64_t peak, const sim_options *opt, double ratio);

/* Smallest ratio in [0, 1] at which the run succeeds, by bisection to
 * within tolerance (e.g. 0.005); -1 if even ratio 1 fails; 0 for a log
 * that runs in 0 bytes (its peak is 0); NaN when a run ended in an error
 * (SIM_ERROR: host memory ran out; coop_last_error says why). Feasibility is
 * not monotone near the thrash limit, so this is one feasible ratio whose
 * neighbour tolerance below failed, not a guarantee for all ratios above. */
double sim_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double tolerance);

/* Whether one run at budget ratio succeeds: 1 (result ok), 0 (oom or
 * thrash), or -1 when the run ended in an error (SIM_ERROR, its message in
 * coop_last_error), which ends the search: taken for a failure, host memory
 * running out moved the ratio found without a word. */
typedef int (*sim_feasible_fn)(double ratio, void *ctx);

/* A run's result as sim_feasible_fn's answer. */
static inline int sim_feasibility(sim_result r)
{
    return r == SIM_OK ? 1 : r == SIM_ERROR ? -1 : 0;
}

/* sim_min_budget_ratio's bisection over any engine: the smallest ratio in
 * [0, 1] that feasible accepts, to within tolerance; -1 if 1 fails; 0 when
 * every probe and ratio 0 itself succeed (a log whose peak is 0 bytes); NaN
 * as soon as feasible returns -1. */
double sim_bisect_min_ratio(sim_feasible_fn feasible, void *ctx, double tolerance);

/* The default grid step of sim_stable_min_ratio (`coop sim
 * --stable-min-ratio`): 80 runs at most per log and policy. */
#define SIM_STABLE_STEP 0.0125

/* The smallest ratio of the grid 1, 1 - step, 1 - 2 step, ... (above 0)
 * from which every grid ratio up to 1 succeeds: the grid walked down from
 * 1 until the first failure (at most 1/step runs); -1 if 1 fails; NaN as
 * soon as feasible returns -1 (a run's error).
 * Feasibility is not monotone in the budget near the thrash limit (a
 * larger budget can lead the policy to evictions it then recomputes more
 * often), so the bisection's min_budget_ratio can land on a feasible ratio
 * below failing ones; this threshold does not depend on where probes land
 * (review2 F1: vgg16 coop in the arena, bisection 0.777, oom or thrash at
 * 0.7875, 0.8 and 0.8875, every ratio ok from 0.9). */
double sim_grid_stable_ratio(sim_feasible_fn feasible, void *ctx, double step);

/* sim_grid_stable_ratio over sim_run. */
double sim_stable_min_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double step);

/* What an engine's feasibility callback needs to run one budget ratio: the
 * program, its unlimited peak and the options (the ctx of both engines'
 * bisections). */
typedef struct sim_run_args {
    const sim_program *prog;
    uint64_t peak;
    const sim_options *opt;
} sim_run_args;

/* Nearest-rank p50 and p99 (ns) of n search times, which it sorts in
 * place; both 0 when n is 0. */
void sim_search_percentiles(uint64_t *ns, size_t n, uint64_t *p50, uint64_t *p99);

#endif
