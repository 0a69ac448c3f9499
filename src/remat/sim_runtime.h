/*
 * The rematerialization runtime of the simulator: executes a sim_program
 * under a memory budget, evicting and recomputing storages.
 *
 * Semantics follow the DTR authors' simulator, runtime "V2 eager" (simrd
 * RuntimeV2EagerOptimized), which the reference figures came from:
 *  - a storage whose last external handle is released is evicted at once
 *    but stays recomputable (no banishing);
 *  - constants are pinned (never evicted);
 *  - computing an op locks its inputs' storages (rematerializing missing
 *    inputs first, recursively), evicts until the outputs fit, computes,
 *    unlocks; a storage is evictable when material, unlocked and unpinned;
 *  - staleness = clock - last access, the clock being the sum of the costs of
 *    the ops executed so far (it starts at 1);
 *  - a heuristic eviction takes the argmin of the policy's score over the
 *    evictable pool, in pool order, ties going to the later one, stopping
 *    at the first zero score (simrd Heuristic.choose);
 *  - the run thrashes when recomputation exceeds the base compute.
 */
#ifndef COOP_REMAT_SIM_RUNTIME_H
#define COOP_REMAT_SIM_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/sim_program.h"
#include "remat/union_find.h"

typedef enum sim_policy {
    SIM_POLICY_DTR,       /* c_eq / (m * s): evicted neighbourhood via union-find */
    SIM_POLICY_DTR_FULL,  /* (c + c(e*)) / (m * s): exact evicted neighbourhood */
    SIM_POLICY_DTR_LOCAL, /* c / (m * s) */
    SIM_POLICY_DTE,       /* c / (m' * s), m' = m + adjacent free bytes (arena model) */
    SIM_POLICY_LRU,       /* least recently accessed */
    SIM_POLICY_SIZE,      /* largest first */
    SIM_POLICY_COOP,      /* sliding window (arena model) */
    SIM_POLICY_COUNT
} sim_policy;

typedef enum sim_result { SIM_OK = 0, SIM_OOM, SIM_THRASH, SIM_ERROR } sim_result;

/* What the coop policy sums over a window's evictable blocks. */
typedef enum sim_window_cost {
    SIM_WINDOW_LIVE = 0, /* sum of c_live * (1 + remats / 10) / staleness per byte of
                          * the window (default since docs/remat.md section 2's round 5;
                          * c_live: sim_live_compute, what recomputation needs) */
    SIM_WINDOW_COMP,     /* ablation coop-comp: the same with c_comp
                          * (sim_component_compute), the default before round 5 */
    SIM_WINDOW_EQ,       /* ablation: sum of c_eq / staleness per byte (the default
                          * until the component cost; see docs/remat.md) */
    SIM_WINDOW_SUM,      /* sum of c_eq / staleness (Coop's literal objective) */
    SIM_WINDOW_DTE       /* ablation: sum of DTE's score c / (m' * staleness) */
} sim_window_cost;

typedef struct sim_config {
    sim_policy policy;
    bool arena;             /* place storages with libcoop (fragmentation is real) */
    bool inplace;           /* MUTATE keeps its buffer (recomputable in-place) where
                             * the old value has no other user; else copy-on-write */
    double cheap_threshold; /* ns per byte below which a storage is placed high; < 0 off */
    sim_window_cost window_cost;
    bool plain_window_walk; /* arena coop: walk every block, no breaker index
                             * (same windows, slower: for tests and timing) */
    bool eq_cache;          /* cache c_eq's class roots per storage, and coop's
                             * c_live (sim_live.h) (same values) */
    bool check_components;  /* tests: check every c_comp, and every c_live read
                             * from its cache, against a fresh walk
                             * (sim_stats.comp_checks, comp_mismatches) */
    bool check_caches;      /* tests: after every command and before every
                             * search, every cached c_eq, component label and
                             * c_live against a fresh walk (sim_check_caches;
                             * sim_stats.cache_checks, cache_mismatches) */
    uint64_t budget;        /* bytes; UINT64_MAX = unlimited */
    uint64_t remat_limit;   /* ns of recomputation allowed (thrash beyond) */
} sim_config;

const char *sim_policy_name(sim_policy p);
int sim_policy_parse(const char *name, sim_policy *out); /* 0 ok, -1 unknown */
const char *sim_result_name(sim_result r);

typedef struct sim_stats {
    uint64_t base_compute;  /* ns */
    uint64_t model_compute; /* ns actually executed as model ops */
    uint64_t remat_compute; /* ns spent recomputing */
    uint64_t evictions;     /* evictions chosen by the policy (not eager releases) */
    uint64_t remat_ops;     /* ops recomputed */
    uint64_t searches;      /* eviction searches */
    uint64_t heuristic_evals;
    uint64_t blocks_visited;   /* arena coop: blocks the window searches looked at */
    uint64_t eq_walks;         /* c_eq evaluations that walked the neighbours (cache misses) */
    uint64_t eq_neighbours;    /* neighbours those walks visited */
    uint64_t comp_checks;      /* cfg.check_components: c_comp evaluations checked */
    uint64_t comp_mismatches;  /* and those whose labels gave another value */
    uint64_t cache_checks;     /* cfg.check_caches: cached values checked */
    uint64_t cache_mismatches; /* and those wrong (or left invalid for nothing) */
    uint64_t peak_memory;      /* most resident bytes */
    double frag_sum;           /* sum over searches of free bytes / budget */
    uint64_t frag_failures;    /* searches although free bytes >= request */
    uint64_t inplace_ops;      /* mutations that kept their buffer */
    uint64_t *search_ns;       /* the searching thread's CPU time per search, ns
                                * (sim_now_ns; searches entries) */
    size_t search_ns_cap;
} sim_stats;

typedef struct rt_storage {
    uint64_t compute;     /* ns: unique ops among the created tensors on it */
    int64_t last_access;  /* clock of the last access */
    uint32_t ref_int;     /* locks */
    uint32_t ref_ext;     /* external handles */
    uint32_t num_created; /* tensors created so far (prefix of its tensor list) */
    uint32_t pool_pos;    /* index in the pool, UINT32_MAX if not evictable */
    uint32_t ecn;         /* union-find node while evicted, else UINT32_MAX */
    uint32_t mark;        /* traversal stamp */
    void *ptr;            /* arena model: the block's address (NULL: none) */
    uint64_t placed;      /* arena model: bytes allocated for it (rounded) */
    uint32_t remats;      /* times its producer was recomputed (coop's window cost) */
    /* c_comp's components of evicted storages (sim_policy.c): the walk that
     * found it stamped it comp_stamp (0: never) with the component's first-
     * walked storage, comp_label. Valid while that label still carries the
     * same stamp (sim_comp_label_valid); the label's comp_sum is then the
     * component's summed compute. */
    uint32_t comp_stamp, comp_label;
    int64_t comp_sum;
    bool material, pinned;
    bool breaking; /* arena model: its block is in the breaker index */
    /* c_eq cache: the distinct class roots of its evicted neighbours,
     * eq_roots[eq_first .. +eq_num_roots) of the runtime (a slot of eq_cap).
     * Valid while no neighbour was evicted or rematerialized, no tensor was
     * created on it or next to an evicted one, and every root is still a
     * root; the classes' values are read fresh. */
    bool eq_valid;
    uint16_t eq_num_roots, eq_cap;
    uint32_t eq_first;
} rt_storage;

struct coop_pool;
struct window_scratch;
struct breaker_index;
struct arena_block;
struct sim_live_cache;

typedef struct sim_runtime {
    const sim_program *prog;
    sim_config cfg;
    sim_policy policy;          /* cfg.policy */
    uint64_t budget;            /* bytes (arena model: rounded down to 512) */
    uint64_t remat_limit;       /* cfg.remat_limit */
    uint64_t align;             /* a storage occupies its size rounded up to this (1: as logged) */
    bool baseline;              /* unlimited reference run: a released storage is freed
                                 * even when pinned (simrd V1 banishing) */
    bool uses_eq;               /* keep union-find classes of evicted storages */
    struct coop_pool *mem_pool; /* arena model: libcoop's pool */
    struct window_scratch *scratch;
    struct breaker_index *breakers; /* arena model: resident blocks not evictable */
    struct arena_block *last_freed; /* arena model: free block the last eviction left */
    uint32_t *victims;              /* arena model: a window's storages */
    uint32_t victims_cap;
    uint64_t clock;
    uint64_t memory; /* resident bytes */
    uint32_t num_created_tensors;
    rt_storage *storages;
    bool *defined;         /* per tensor */
    uint32_t *tensor_refs; /* per tensor: external handles */
    uint32_t *pool;        /* evictable storages in order; UINT32_MAX = hole */
    uint32_t pool_len, pool_live, pool_cap;
    union_find uf;
    uint32_t comp_stamp; /* the last component walk's stamp (rt_storage.comp_stamp) */
    uint32_t mark_epoch;
    uint32_t *eq_roots; /* storages' cached class roots (rt_storage.eq_first) */
    size_t eq_roots_len, eq_roots_cap;
    struct sim_live_cache *live; /* coop's c_live cache (sim_live.h), or NULL */
    uint32_t *stack;             /* traversal stack */
    uint32_t stack_len;
    size_t stack_cap;
    sim_stats stats;
} sim_runtime;

/* Runs prog under cfg (budget, policy, memory model). stats receives the
 * counters (free its search_ns with sim_stats_free). */
sim_result sim_execute(const sim_program *prog, const sim_config *cfg, sim_stats *stats);

/* The unlimited run's peak of resident bytes (simrd V1, budget infinite),
 * each storage's size rounded up to align bytes (1: as logged). 0 with
 * coop_last_error() set when host memory runs out; a run that succeeds
 * leaves the last error empty (a log that allocates nothing: 0 too). */
uint64_t sim_baseline_peak(const sim_program *prog, uint64_t align);

void sim_stats_free(sim_stats *s);

#endif
