/*
 * Coop's window cost of one evictable tensor, shared by `coop sim`'s coop
 * policy (sim_arena.c) and the remat API's COOP_REMAT_COOP (remat_evict.c),
 * so that both weigh a window the same way:
 *
 *     c_live x (1 + COOP_COST_REMAT_WEIGHT x remats) / staleness
 *
 * summed over the window's tensors and divided by the window's bytes.
 * c_live (ns) is what evicting the tensor makes the program recompute
 * (docs/remat.md, section 2c; the default since section 2's round 5); the
 * ablation coop-comp (COOP_REMAT_COOP_COMP) uses c_comp instead, the
 * tensor's own compute plus the compute of the evicted tensors connected
 * to it through evicted tensors (its exact evicted component; docs/remat.md,
 * section 2, "The component cost"). remats is how
 * often its producer has been recomputed so far, staleness the logical time
 * since its last access.
 */
#ifndef COOP_REMAT_COOP_COST_H
#define COOP_REMAT_COOP_COST_H

#include <stdint.h>

/* How much a recomputation raises a tensor's window cost. An online memory
 * of where recomputation happened (no lookahead): a tensor recomputed before
 * tends to be needed again. Chosen by the criteria over 0.1, 0.25,
 * 0.5, 1 and 4 on the logs they are checked on (docs/remat.md, section 2);
 * a later sweep found 0.05 meets them too, and on four held-out logs any
 * weight from 0 to 0.25 gives the same violations (section 2c): only
 * "0.5 and more is worse" carries over. */
#define COOP_COST_REMAT_WEIGHT 0.1

/* Logical time since last_access, at least 1: a tensor just used is
 * dearest, but finite so sums stay ordered. */
static inline uint64_t coop_cost_staleness(uint64_t clock, uint64_t last_access)
{
    uint64_t stale = clock - last_access;
    return stale ? stale : 1;
}

/* What the cost multiplies c_live (or c_comp) by. One expression for the cost and its
 * lower bounds (own compute times this), so that a bound known exact is
 * the very value the cost would return. */
static inline double coop_cost_weight(uint32_t remats, uint64_t staleness)
{
    return (1.0 + COOP_COST_REMAT_WEIGHT * remats) / (double)staleness;
}

#endif
