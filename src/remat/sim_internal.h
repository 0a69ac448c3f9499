/*
 * Internals shared by the simulator's files: the runtime (sim_runtime.c),
 * the policies' scores (sim_policy.c) and the arena memory model
 * (sim_arena.c). Not for use outside src/remat/sim_*.c.
 */
#ifndef COOP_REMAT_SIM_INTERNAL_H
#define COOP_REMAT_SIM_INTERNAL_H

#include "remat/sim_runtime.h"

#define SIM_NONE UINT32_MAX

/* ---- runtime (sim_runtime.c) ---- */

/* Marks s evicted (not material, its tensors undefined, out of the pool,
 * in a union-find class with its evicted neighbours); frees nothing. */
int sim_mark_evicted(sim_runtime *rt, uint32_t s);
/* Evicts s: sim_mark_evicted plus releasing its memory. */
int sim_evict(sim_runtime *rt, uint32_t s);
uint64_t sim_now_ns(void);
int sim_record_search(sim_stats *st, uint64_t ns);

/* ---- policies (sim_policy.c) ---- */

/* The policy's score of evictable storage s (lower: evict first). */
double sim_score(sim_runtime *rt, uint32_t s);
/* simrd Heuristic.choose over the pool; SIM_NONE if the pool is empty. */
uint32_t sim_choose(sim_runtime *rt);
/* c_eq: s's compute plus its evicted neighbours' distinct classes (ns). */
int64_t sim_eq_compute(sim_runtime *rt, uint32_t s);
/* Bytes of the free blocks adjacent to s's block (arena model; 0 otherwise). */
uint64_t sim_adjacent_free(sim_runtime *rt, uint32_t s);

/* ---- arena model (sim_arena.c) ---- */

int sim_arena_open(sim_runtime *rt);
void sim_arena_close(sim_runtime *rt);
/* Places storage s (size bytes), evicting per the policy when it does not
 * fit. SIM_OK, SIM_OOM or SIM_ERROR. */
sim_result sim_arena_place(sim_runtime *rt, uint32_t s);
/* Hands from's block to storage to (recomputable in-place). */
void sim_arena_transfer(sim_runtime *rt, uint32_t from, uint32_t to);
/* Keeps the breaker index in step after s's residency or evictability
 * changed: a resident storage outside the evictable pool breaks windows.
 * Without host memory the index degrades safely (see sim_arena.c). */
void sim_arena_sync(sim_runtime *rt, uint32_t s);
/* Frees s's block. */
void sim_arena_free(sim_runtime *rt, uint32_t s);

#endif
