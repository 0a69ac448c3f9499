/*
 * Internals of the remat API (include/coop.h, rematerialization section):
 * the context and the tensor records, shared by remat.c (tensor lifecycle,
 * recomputation, in-place) and remat_evict.c (policies, window, placement).
 *
 * Storage: a tensor with base == itself owns a storage (a block of the pool
 * while resident, whose owner field points back at it); views point at their
 * base and never own memory. Only base tensors are evicted, recomputed, or
 * appear in eviction decisions.
 */
#ifndef COOP_REMAT_INTERNAL_H
#define COOP_REMAT_INTERNAL_H

#include "coop.h"
#include "pool_internal.h"
#include "remat/union_find.h"
#include "remat/window.h"

#define REMAT_NONE UINT32_MAX

struct coop_tensor {
    coop_tensor *base; /* storage owner (itself for a base tensor) */
    size_t size;       /* bytes */
    uint64_t cost;     /* ns of the producer */
    void *producer;
    coop_tensor **inputs; /* producer's inputs (base tensors) */
    size_t num_inputs;
    coop_tensor **children; /* base tensors produced from this one */
    size_t num_children, cap_children;
    void *ptr;            /* buffer while resident, else NULL */
    uint64_t last_access; /* logical clock */
    uint32_t handles;     /* base: unreleased tensors on the storage (itself, views) */
    uint32_t pins;        /* base: user pins plus pins of recomputations in progress */
    uint32_t uf;          /* union-find node while evicted, else REMAT_NONE */
    unsigned flags;
    bool released;
    coop_tensor *prev_resident, *next_resident; /* base tensors holding memory */
    coop_tensor *next_all;                      /* every record, for destroy */
};

struct coop_remat {
    coop_pool *pool;
    coop_remat_config cfg;
    uint64_t clock;
    coop_tensor *resident; /* list of resident base tensors */
    coop_tensor *all;
    union_find uf;
    window_scratch scratch;
    coop_tensor **victims; /* evicted by the current allocation, for on_evict */
    size_t num_victims, cap_victims;
    coop_tensor **seen; /* scratch: classes counted by an eq cost */
    size_t cap_seen;
    coop_remat_stats stats;
};

/* ---- remat_evict.c ---- */

/* Gives t (a base tensor) a buffer, evicting per the policy when needed.
 * Call without the pool lock; on_evict callbacks run before it returns. */
coop_status remat_alloc(coop_remat *r, coop_tensor *t);
/* Frees t's buffer (pool lock held) and marks it evicted (a union-find
 * class with its evicted neighbours; queued for on_evict). Returns the free
 * block now covering its range. */
arena_block *remat_evict_locked(coop_remat *r, coop_tensor *t);
/* Marks t evicted without a buffer to free (an in-place op took it). */
void remat_mark_evicted(coop_remat *r, coop_tensor *t);
/* Bookkeeping when t becomes resident again (leaves its class). */
void remat_make_resident(coop_remat *r, coop_tensor *t, void *ptr);
bool remat_evictable(const coop_tensor *t);
/* Moves from's buffer (resident) to to, which must have none. */
void remat_hand_over(coop_remat *r, coop_tensor *from, coop_tensor *to);
/* Runs on_evict for the victims collected, then forgets them. */
void remat_notify_victims(coop_remat *r);

#endif
