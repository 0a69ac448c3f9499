/*
 * Coop's sliding-window eviction search over the pool's address-ordered
 * blocks (call under the pool lock).
 *
 * A window is a run of address-adjacent blocks inside one segment, each
 * either free and usable on the allocating stream (cost 0) or allocated
 * with an evictable owner (cost >= 0 from the caller's cost function). An
 * allocated block without an owner, one whose owner is not evictable (cost
 * function returns WINDOW_BLOCKED: pinned, locked, in use), a pending
 * block, and a free block tagged with another stream break runs: that
 * block cannot merge with the evicted blocks (free blocks of different
 * streams stay apart), so a window through it could not take the request,
 * and the tensors evicted for it would be evicted for nothing. The caller
 * settles streams first (the pool's out-of-memory path retags the free
 * blocks of every stream seen finished "any stream"), so the tags left
 * name streams still busy; the search reads the tag in the block record it
 * already loads and asks the backend nothing. The search returns the
 * window covering at least `size` bytes with the smallest summed cost (or
 * summed cost per byte of the window), ties to the lowest address among
 * minimal windows (a run that still covers without its first block is
 * never chosen, even where that block costs nothing), in one pass over the
 * blocks: for every right end
 * the left end advances while the window without its leftmost block still
 * covers the request, so each block's cost is evaluated at most once and
 * each block enters and leaves the window once (two pointers). Non-negative costs make
 * the shrunk window never dearer, so for WINDOW_SUM the minimum over right
 * ends is the minimum over all covering runs. WINDOW_PER_BYTE compares the
 * same minimal windows by cost / bytes (free bytes included): the window
 * analogue of DTR's c / (m * s), which prefers windows that free more memory
 * per unit of recompute for the requests that follow; it is a heuristic
 * over the minimal windows, not an exact minimum over all runs.
 */
#ifndef COOP_REMAT_WINDOW_H
#define COOP_REMAT_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "remat/breaker_index.h"

#define WINDOW_BLOCKED (-1.0)

typedef enum window_objective {
    WINDOW_SUM,     /* smallest sum of block costs */
    WINDOW_PER_BYTE /* smallest sum of block costs / window bytes */
} window_objective;

/* Cost of evicting the owner of an allocated block, or WINDOW_BLOCKED. */
typedef double (*window_cost_fn)(void *owner, const arena_block *block, void *ctx);

/* A cheap lower bound of that cost, or WINDOW_BLOCKED exactly when the cost
 * is. Sets *exact (false on entry) when the value returned is the cost
 * itself, known cheaply (cached): the block is then never evaluated. */
typedef double (*window_bound_fn)(void *owner, const arena_block *block, void *ctx, bool *exact);

typedef struct window {
    arena_block *first, *last; /* inclusive, address order, same segment */
    uintptr_t addr;            /* first->addr */
    uint64_t size;             /* bytes of the blocks first..last */
    double cost;
    uint64_t blocks_visited; /* blocks the pass looked at */
    uint64_t evals;          /* cost function calls */
    uint64_t runs_skipped;   /* breaker runs jumped over (indexed search) */
} window;

/* A minimal covering window found by the pass: blocks[head .. tail) of
 * the scratch arrays, its bytes and the sum of its blocks' lower bounds
 * (exact where every block's bound was). */
typedef struct window_candidate {
    size_t head, tail;
    uint64_t size;
    double lower_sum;
} window_candidate;

/* The cost of evicting the owner of an allocated block, computed only as
 * far as a search needs it: the cost itself with *complete set, when it is
 * at most limit (always when limit is INFINITY); otherwise it may stop
 * early and return, with *complete false, a value above limit and at most
 * the cost. For costs that walk a tensor graph (c_live), where one
 * expensive tensor's walk can be the whole search. */
typedef double (*window_cost_upto_fn)(void *owner, const arena_block *block, void *ctx,
                                      double limit, bool *complete);

/* Scratch memory reused across searches (the blocks walked, their sizes,
 * bounds and exact costs, the candidate windows; for window_search_lazy
 * how often each block's evaluation was cut).
 * Zero-initialize; window_scratch_free at end. */
typedef struct window_scratch {
    double *costs, *lower;
    arena_block **blocks;
    uint64_t *sizes;
    window_candidate *cands;
    uint8_t *cuts;
    size_t cap;
} window_scratch;

/* Makes room in s for searches that walk up to n blocks, so that searches
 * allocate nothing (and touch no fresh page) until they walk more. 0, or -1
 * when host memory runs out. */
int window_scratch_reserve(window_scratch *s, size_t n);

/* 0 and *out on success; -1 when no run covers size bytes (out->blocks_visited
 * and out->evals still count the work); -2 when host memory runs out.
 * bound (may be NULL) is a cheap lower bound of cost that also says which
 * blocks are blocked: the pass then records every minimal covering window
 * with its summed bound; the window with the smallest bound is evaluated
 * exactly first, then only windows whose bound can still reach the best
 * exact key (each block at most once, blocks whose bound was exact never),
 * which gives the same window as evaluating every block. out->evals counts
 * calls of cost only. stream: the one the request is for (free blocks
 * tagged with it or COOP_STREAM_ANY are usable; others break runs). */
int window_search(const arena *a, uint64_t size, coop_stream stream, window_objective objective,
                  window_cost_fn cost, window_bound_fn bound, void *ctx, window_scratch *scratch,
                  window *out);

/* window_search, skipping the blocks of breakers' runs (each in O(1)) and
 * every gap between runs smaller than size without visiting it: the same
 * window and result as window_search when every block inside breakers' runs
 * breaks windows (blocked by bound, or by cost without bound). NULL
 * breakers: window_search. */
int window_search_indexed(const arena *a, uint64_t size, coop_stream stream,
                          window_objective objective, window_cost_fn cost, window_bound_fn bound,
                          void *ctx, const breaker_index *breakers, window_scratch *scratch,
                          window *out);

/* window_search_indexed with a cost that can stop early, for costs whose
 * evaluation is a walk that can be long (c_live): rounds of the same
 * choice, the first reaching keys up to CUT_HEADROOM (window.c) times the
 * smallest bound key, the next that again times, the last without limit;
 * in each, every block is evaluated only as far as its window could still
 * reach the round's limit or the best exact key found (a cut walk that is
 * needed again goes at least twice as far, and in full after MAX_CUTS
 * cuts). A round decides when the best window it knows exactly is within
 * its reach: no window cut or left out can then beat it. The same window
 * as window_search_indexed with cost_upto's full value as the cost; only a
 * window's exact sum may differ in its last bits where a block cut earlier
 * is added later (tests/window_test compares both with a brute force).
 * out->evals counts every call of cost_upto, cut ones included. */
int window_search_lazy(const arena *a, uint64_t size, coop_stream stream,
                       window_objective objective, window_cost_upto_fn cost_upto,
                       window_bound_fn bound, void *ctx, const breaker_index *breakers,
                       window_scratch *scratch, window *out);

void window_scratch_free(window_scratch *s);

#endif
