/*
 * coop's cache of c_live (sim_live_compute) per storage: exact, the
 * value a walk would give at every evaluation (docs/remat.md, section 2c,
 * "The c_live cache").
 *
 * A storage's c_live is read from its walks' dependencies: the storages the
 * two walks looked at (the evicted ones they went through, and the material
 * ones they stopped at). While each of them is material, only its being
 * material matters; while evicted, also its tensors, its compute, its
 * handles and its created consumers. So a cached value stays valid until
 * one of its dependencies changes material state, or changes otherwise
 * while evicted (or, for the storage itself, changes at all). Each storage
 * keeps the list of cached values that depend on it (watchers) and
 * invalidates them when it changes; the runtime reports the changes
 * (sim_live_flipped, sim_live_changed, sim_live_created).
 *
 * An invalidated value is often right again (a storage rematerialized and
 * evicted again between two searches): each value also keeps what its walk
 * read of each dependency (material or not; if evicted, its created
 * tensors, created consumers and whether it is held), and is valid again,
 * without a walk, where all of it is the same now (the walk would go the
 * same way). Debug builds with -DCOOP_SIM_LIVE_CHECK compare every cached
 * value with a walk (abort on a difference).
 *
 * Under dtr-full the cache holds e* instead (simrd's regions: the forward
 * one counted whole, sim_live_walked): the same walks read the same of the
 * same storages, and e* too only grows while none of them is
 * rematerialized, so the same invalidation keeps it exact and its lower
 * bounds sound (docs/remat.md, section 3, "dtr-full's argmin").
 *
 * Not for use outside src/remat/sim_*.c.
 */
#ifndef COOP_REMAT_SIM_LIVE_H
#define COOP_REMAT_SIM_LIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/sim_runtime.h"

struct sim_live_cache;

/* Allocates rt->live when the run scores with c_live (coop, coop-live) or
 * e* (dtr-full) and caches costs (cfg.eq_cache); else leaves it NULL. 0,
 * or -1 out of host memory. */
int sim_live_open(sim_runtime *rt);
void sim_live_close(sim_runtime *rt);

/* c_live of s (sim_live_compute's value), from the cache when valid, else
 * walked and remembered. Needs rt->live. */
int64_t sim_live_cached(sim_runtime *rt, uint32_t s);

/* What the cache knows of s's c_live without a walk (the window pass's
 * bound): 1 and *out its c_live where its value is valid; 0 and *out a
 * lower bound where its invalidated value is one (c_live only grows while
 * no storage its last walk looked at is rematerialized or released:
 * evictions, new tensors and consumers, new handles only add to its
 * regions); -1 where neither. */
int sim_live_known(sim_runtime *rt, uint32_t s, int64_t *out);

/* cfg.check_caches (tests): every value the cache holds against the walks
 * (a valid one must equal them, a lower bound must not exceed them), and
 * every value whose dependencies all read as recorded must be valid;
 * counted in sim_stats.cache_checks and cache_mismatches. Changes nothing
 * the run decides. */
void sim_live_check(sim_runtime *rt);

/* Invalidates the values depending on s and s's own value; where shrinks
 * (s rematerialized or released), they stop being lower bounds too. */
void sim_live_fire(sim_runtime *rt, uint32_t s, bool shrinks);
/* The same where s is evicted, else only s's own value. */
void sim_live_fire_if_evicted(sim_runtime *rt, uint32_t s, bool shrinks);

/* s became material or evicted (the runtime calls it right after the change). */
static inline void sim_live_flipped(sim_runtime *rt, uint32_t s)
{
    if (rt->live)
        sim_live_fire(rt, s, rt->storages[s].material);
}

/* s's tensors, compute, handles (ref_ext) or created consumers changed;
 * shrinks where it lost a handle. */
static inline void sim_live_changed(sim_runtime *rt, uint32_t s, bool shrinks)
{
    if (rt->live)
        sim_live_fire_if_evicted(rt, s, shrinks);
}

/* Op op's tensors were created (after num_created, compute, ref_ext and
 * num_created_tensors were updated): its outputs' storages changed, its
 * inputs' storages gained consumers. */
void sim_live_note_op(sim_runtime *rt, uint32_t op);
static inline void sim_live_created(sim_runtime *rt, uint32_t op)
{
    if (rt->live)
        sim_live_note_op(rt, op);
}

#endif
