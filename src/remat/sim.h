/*
 * One simulation: a program, a policy, a memory model and a budget ratio,
 * reduced to the metrics `coop sim` reports.
 */
#ifndef COOP_REMAT_SIM_H
#define COOP_REMAT_SIM_H

#include "remat/sim_program.h"
#include "remat/sim_runtime.h"

typedef enum sim_memory { SIM_MEMORY_IDEAL, SIM_MEMORY_ARENA } sim_memory;

typedef struct sim_options {
    sim_policy policy;
    sim_memory memory;
    double overhead_limit; /* thrash when total / base compute exceeds it (2.0) */
} sim_options;

typedef struct sim_outcome {
    sim_result result;
    double budget_ratio;
    uint64_t budget; /* bytes */
    double overhead; /* (base + recompute) / base */
    uint64_t evictions, remat_ops, heuristic_evals, frag_failures;
    double frag_at_evict; /* mean free bytes / budget at eviction searches */
    uint64_t search_ns_p50, search_ns_p99;
} sim_outcome;

/* Runs prog at budget = ratio x peak (peak: sim_baseline_peak). */
sim_outcome sim_run(const sim_program *prog, uint64_t peak, const sim_options *opt, double ratio);

/* Smallest ratio in (0, 1] at which the run succeeds, by bisection to
 * within tolerance (e.g. 0.005); 0 if even ratio 1 fails. */
double sim_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                            double tolerance);

#endif
