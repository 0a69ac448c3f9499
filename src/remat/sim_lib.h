/*
 * `coop sim --engine lib`: a compiled DTR log (sim_program.h) replayed
 * through libcoop's public remat API (include/coop.h, rematerialization
 * section) instead of the simulator's own runtime, so that what a user's
 * runtime would see from the library can be compared with what `coop sim
 * --memory arena` reports for the same log, policy and budget.
 *
 * The pool is the arena model's (sim_arena_pool_config: host backend, no
 * VMM, one segment of the budget in 512-byte blocks), the budget ratio x
 * sim_peak(prog, SIM_MEMORY_ARENA): the fragmentation-free live-byte peak
 * of the ideal unlimited run, sizes in 512-byte blocks. The schedule maps onto the API as follows
 * (the semantic differences this leaves are listed in docs/remat.md, section 4):
 *  - COMPUTE of a constant: coop_tensor_create (cost 0), then its PIN;
 *  - COMPUTE of an op: its inputs pinned (resident ones first, then the
 *    missing ones, recomputed, as the simulator locks them); its fresh
 *    results made by one coop_tensor_create_outputs (the op's cost, its
 *    inputs as producer inputs: the op runs once); an in-place op
 *    (coop_tensor_mutate) for a MUTATE result where the simulator's
 *    recomputable in-place would take the buffer over (the record carries
 *    on as the new tensor); a view (coop_tensor_alias) for an aliasing
 *    result; then the inputs unpinned;
 *  - GET, RELEASE: the program's handle counts per tensor, and
 *    coop_tensor_release when a tensor's count reaches 0;
 *  - PIN: coop_tensor_pin, never unpinned (recomputing first if evicted).
 * Storages of 0 bytes have no tensor (the API has none of 0 bytes; the
 * arena model gives them no block either): ops reading them lose that edge.
 * The recompute callback only advances the accounting (the library
 * advances its logical clock by the op's cost); it never touches the
 * buffer, which the host backend maps PROT_NONE.
 */
#ifndef COOP_REMAT_SIM_LIB_H
#define COOP_REMAT_SIM_LIB_H

#include "remat/sim.h"

/* What the remat API cannot express of a sim_options: 0 if the lib engine
 * runs it (*policy filled), else -1 with a message naming the reason
 * (coop_last_error). */
int sim_lib_policy(const sim_options *opt, coop_remat_policy *policy);

/* Shapes of the program the API maps only approximately (docs/remat.md,
 * section 4), and the library's count of searches, for one run. */
typedef struct sim_lib_counts {
    uint64_t multi_call_ops;     /* ops that took more than one clock-advancing call
                                  * (fresh outputs and in-place ones, or several
                                  * in-place ones): the clock counts them more than once */
    uint64_t zero_size;          /* fresh outputs of 0 bytes (no tensor) */
    uint64_t view_outputs;       /* aliasing results (views) */
    uint64_t inplace_ops;        /* mutations done with coop_tensor_mutate */
    uint64_t searches;           /* allocations that had to evict (coop_remat_stats) */
    uint64_t unsampled_searches; /* searches whose time was not sampled (0: see
                                  * note_searches in sim_lib.c) */
} sim_lib_counts;

/* Runs prog through the remat API at budget = ratio x peak (peak:
 * sim_peak(prog, SIM_MEMORY_ARENA)). Fills the outcome's result, budget,
 * overhead, evictions, remat_ops, inplace_ops, and from the library's
 * coop_remat_stats the search metrics: search_ns_p50/p99 (nearest rank
 * over each search's thread CPU time, as the library timed it),
 * heuristic_evals, frag_failures, frag_at_evict (mean pool free bytes /
 * budget at the searches). blocks_visited, eq_walks and eq_neighbours stay
 * 0. counts may be NULL. */
sim_outcome sim_lib_run(const sim_program *prog, uint64_t peak, const sim_options *opt,
                        double ratio, sim_lib_counts *counts);

/* sim_min_budget_ratio with sim_lib_run as the run: the same bisection
 * (sim_bisect_min_ratio), feasible where the result is ok. */
double sim_lib_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                                double tolerance);

/* sim_stable_min_ratio with sim_lib_run as the run (sim_grid_stable_ratio). */
double sim_lib_stable_min_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                                double step);

#endif
