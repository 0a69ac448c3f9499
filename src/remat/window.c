/* Sliding-window search over address-ordered blocks (window.h). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "remat/window.h"

/* Relative slack when comparing a lower bound (a running sum, which drifts
 * by rounding) with an exact key: a window within it is evaluated rather
 * than pruned, so near-ties are decided on exact sums. */
#define BOUND_SLACK 1e-9

int window_scratch_reserve(window_scratch *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap * 2 : 256;
    while (cap < n)
        cap *= 2;
    double *lb = realloc(s->lower, cap * sizeof *lb);
    if (!lb)
        return -1;
    s->lower = lb;
    double *ex = realloc(s->costs, cap * sizeof *ex);
    if (!ex)
        return -1;
    s->costs = ex;
    arena_block **bl = realloc(s->blocks, cap * sizeof *bl);
    if (!bl)
        return -1;
    s->blocks = bl;
    window_candidate *wc = realloc(s->cands, cap * sizeof *wc);
    if (!wc)
        return -1;
    s->cands = wc;
    uint64_t *sz = realloc(s->sizes, cap * sizeof *sz);
    if (!sz)
        return -1;
    s->sizes = sz;
    /* write the new parts once: their pages are then mapped before a
     * search walks into them */
    size_t old = s->cap;
    memset(s->lower + old, 0, (cap - old) * sizeof *s->lower);
    memset(s->costs + old, 0, (cap - old) * sizeof *s->costs);
    memset(s->blocks + old, 0, (cap - old) * sizeof *s->blocks);
    memset(s->cands + old, 0, (cap - old) * sizeof *s->cands);
    memset(s->sizes + old, 0, (cap - old) * sizeof *s->sizes);
    s->cap = cap;
    return 0;
}

/* (double)bytes, through a signed conversion when the value allows (one
 * instruction on x86-64, where an unsigned one is a branchy sequence; byte
 * counts are far below 2^63, so the branch always goes the same way). */
static inline double bytes_to_double(uint64_t bytes)
{
    return bytes <= INT64_MAX ? (double)(int64_t)bytes : (double)bytes;
}

static double key_of(window_objective objective, double cost, uint64_t bytes)
{
    return objective == WINDOW_PER_BYTE ? cost / bytes_to_double(bytes) : cost;
}

/* key_of(sum, bytes) > limit without dividing. */
static bool key_above(window_objective objective, double sum, uint64_t bytes, double limit)
{
    return objective == WINDOW_PER_BYTE ? sum > limit * bytes_to_double(bytes) : sum > limit;
}

/* One search: the blocks walked (blocks[0 .. n) with their sizes, bounds
 * in lower[], exact costs or NAN in costs[]; blocks that break windows are
 * kept too, with a negative bound) and the minimal covering windows found
 * (cands[0 .. num_cands), in the order of their right ends; cands[seed]
 * the first with the smallest bound key). */
typedef struct search {
    uint64_t size;
    window_objective objective;
    window_cost_fn cost;
    window_bound_fn bound;
    window_bounds_fn bounds;
    void *ctx;
    window_scratch *scratch;
    window *out;
    size_t n, num_cands, seed;
} search;

/* lower[] and costs[] of blocks[from .. to) one block at a time, from the
 * per-block callbacks (what a window_bounds_fn does in one call). */
static void bound_each(search *q, size_t from, size_t to)
{
    window_scratch *s = q->scratch;
    for (size_t i = from; i < to; i++) {
        arena_block *b = s->blocks[i];
        double lb, ex = NAN;
        if (b->state == COOP_BLOCK_FREE) {
            lb = ex = 0;
        } else if (b->state == COOP_BLOCK_ALLOCATED && b->owner) {
            if (q->bound) {
                bool exact = false;
                lb = q->bound(b->owner, b, q->ctx, &exact);
                if (exact)
                    ex = lb;
            } else {
                q->out->evals++;
                lb = ex = q->cost(b->owner, b, q->ctx);
            }
        } else {
            lb = WINDOW_BLOCKED;
        }
        s->lower[i] = lb;
        s->costs[i] = ex;
    }
}

/* The two-pointer pass's state inside one gap: the run blocks[head .. i]
 * with its bytes and summed bounds, and the search's candidates so far
 * with the seed's bound sum and bytes (for the cross-multiplied
 * comparison). */
typedef struct pass {
    uint64_t run_size;
    double run_lower;
    size_t head, num_cands, seed;
    double seed_lower, seed_bytes;
} pass;

/* The two-pointer pass over blocks[from .. to) (their bounds known):
 * records, for every right end, the shortest run ending there that covers
 * the request. */
static inline void pass_blocks(search *q, pass *p, size_t from, size_t to)
{
    window_scratch *s = q->scratch;
    /* in locals (stores to the arrays could alias them as far as the
     * compiler knows), written back at the end */
    const uint64_t want = q->size;
    const uint64_t *sizes = s->sizes;
    const double *lower = s->lower;
    window_candidate *cands = s->cands;
    const bool per_byte = q->objective == WINDOW_PER_BYTE;
    uint64_t run_size = p->run_size;
    double run_lower = p->run_lower;
    size_t head = p->head, num_cands = p->num_cands, seed = p->seed;
    double seed_lower = p->seed_lower, seed_bytes = p->seed_bytes;
    for (size_t i = from; i < to; i++) {
        double lb = lower[i];
        if (lb < 0) { /* breaks every run through this block */
            run_size = 0;
            run_lower = 0;
            head = i + 1;
            continue;
        }
        run_size += sizes[i];
        run_lower += lb;
        while (run_size - sizes[head] >= want) {
            run_size -= sizes[head];
            run_lower -= lower[head];
            head++;
        }
        if (run_size < want)
            continue;
        double sum = run_lower < 0 ? 0 : run_lower;
        cands[num_cands] =
            (window_candidate){.head = head, .tail = i + 1, .size = run_size, .lower_sum = sum};
        /* key_less(this, seed) */
        if (!num_cands || (per_byte ? sum * seed_bytes < seed_lower * bytes_to_double(run_size)
                                    : sum < seed_lower)) {
            seed = num_cands;
            seed_lower = sum;
            seed_bytes = bytes_to_double(run_size);
        }
        num_cands++;
    }
    *p = (pass){run_size, run_lower, head, num_cands, seed, seed_lower, seed_bytes};
}

/* Blocks walked before their bounds and pass: few enough that the walk of
 * the next ones proceeds while the processor still works on these (the
 * walk is a chain of dependent loads; bounds and pass are independent
 * work), enough to amortize the bounds call. */
#define WINDOW_CHUNK 8

/* The pass over the blocks from first up to stop (exclusive, NULL: the
 * segment's end), a run starting empty at first: walks WINDOW_CHUNK blocks
 * at a time, collecting them and their sizes, bounds them (one callback
 * call) and runs the two-pointer pass over them. 0, or -2 when host memory
 * runs out. */
static int scan(search *q, arena_block *first, const arena_block *stop)
{
    window_scratch *s = q->scratch;
    size_t from = q->n, n = q->n;
    pass p = {0, 0, n, q->num_cands, q->seed, 0, 0};
    if (p.num_cands) {
        p.seed_lower = s->cands[p.seed].lower_sum;
        p.seed_bytes = bytes_to_double(s->cands[p.seed].size);
    }
    int err = 0;
    arena_block *b = first;
    while (b != stop) {
        /* make room for a chunk: the arrays do not move inside it */
        if (n + WINDOW_CHUNK > s->cap && window_scratch_reserve(s, n + WINDOW_CHUNK)) {
            err = -2;
            break;
        }
        size_t chunk = n;
        arena_block **blocks = s->blocks;
        uint64_t *sizes = s->sizes;
        for (size_t k = 0; k < WINDOW_CHUNK && b != stop; k++, b = b->next) {
            blocks[n] = b;
            sizes[n] = b->size;
            n++;
        }
        if (q->bounds)
            q->bounds(blocks + chunk, n - chunk, s->lower + chunk, s->costs + chunk, q->ctx);
        else
            bound_each(q, chunk, n);
        pass_blocks(q, &p, chunk, n);
    }
    q->out->blocks_visited += n - from;
    q->n = n;
    q->num_cands = p.num_cands;
    q->seed = p.seed;
    return err;
}

/* Exact cost of block i, evaluated at most once per search. */
static double block_cost(search *q, size_t i)
{
    window_scratch *s = q->scratch;
    if (isnan(s->costs[i])) {
        q->out->evals++;
        s->costs[i] = q->cost(s->blocks[i]->owner, s->blocks[i], q->ctx);
        if (s->costs[i] < s->lower[i]) /* inconsistent callbacks: trust the bound */
            s->costs[i] = s->lower[i];
    }
    return s->costs[i];
}

/* The candidate with the smallest exact key, ties to the earliest right end
 * (the plain pass's choice). The candidate with the smallest bound is
 * evaluated first and sets the best key; then one pass over the candidates
 * in order evaluates only those whose bound can still reach the best key,
 * keeping the exact sum of [head, tail) incrementally (heads and tails
 * only advance), so each block's cost is evaluated at most once. -1 if
 * there is no candidate. */
static int choose(search *q, window_candidate *best, double *best_cost)
{
    window_scratch *s = q->scratch;
    if (!q->num_cands)
        return -1;
    *best = s->cands[q->seed];
    *best_cost = 0;
    for (size_t i = best->head; i < best->tail; i++)
        *best_cost += block_cost(q, i);
    double best_key = key_of(q->objective, *best_cost, best->size);
    /* the loop's state in locals (the block_cost calls could alias it as far
     * as the compiler knows); most candidates only take the first test */
    const window_candidate *cands = s->cands;
    const size_t num_cands = q->num_cands;
    const window_objective objective = q->objective;
    double limit = best_key * (1 + BOUND_SLACK);
    size_t best_k = q->seed, best_tail = best->tail;
    size_t ev_head = 0, ev_tail = 0; /* sum = exact costs of blocks[ev_head .. ev_tail) */
    double sum = 0;
    for (size_t k = 0; k < num_cands; k++) {
        const window_candidate *c = &cands[k];
        if (key_above(objective, c->lower_sum, c->size, limit))
            continue;
        if (c->head >= ev_tail) {
            ev_head = ev_tail = c->head;
            sum = 0;
        }
        for (; ev_head < c->head; ev_head++)
            sum -= s->costs[ev_head];
        for (; ev_tail < c->tail; ev_tail++)
            sum += block_cost(q, ev_tail);
        double cost = sum < 0 ? 0 : sum; /* float drift of the running sum */
        double key = key_of(objective, cost, c->size);
        if (key < best_key || (key == best_key && c->tail < best_tail)) {
            best_key = key;
            limit = best_key * (1 + BOUND_SLACK);
            *best_cost = cost;
            best_k = k;
            best_tail = c->tail;
        }
    }
    *best = cands[best_k];
    return 0;
}

int window_search(const arena *a, uint64_t size, window_objective objective, window_cost_fn cost,
                  window_bound_fn bound, void *ctx, window_scratch *scratch, window *out)
{
    return window_search_indexed(a, size, objective, cost, bound, ctx, NULL, scratch, out);
}

/* The search behind the entry points: per-block bound, or bounds per gap. */
static int search_gaps(search *q, const arena *a, const breaker_index *breakers)
{
    window *out = q->out;
    uint64_t size = q->size;
    size_t r = 0; /* next breaker run, address order (segments are too) */

    for (arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        if (!breakers) {
            if (scan(q, seg->first, NULL))
                return -2;
            continue;
        }
        uintptr_t seg_end = seg->base + seg->top;
        while (r < breakers->len && breakers->runs[r].start < seg->base)
            r++; /* below this segment: none while the runs' blocks are allocated */
        /* the gaps between the segment's runs: [gap_start, gap_end) */
        uintptr_t gap_start = seg->base;
        arena_block *gap_first = seg->first;
        for (;;) {
            int last_gap = r >= breakers->len || breakers->runs[r].start >= seg_end;
            uintptr_t gap_end = last_gap ? seg_end : breakers->runs[r].start;
            const arena_block *stop = last_gap ? NULL : breakers->runs[r].first;
            out->runs_skipped += !last_gap;
            if (gap_end - gap_start >= size && gap_first && gap_first != stop &&
                scan(q, gap_first, stop))
                return -2;
            if (last_gap)
                break;
            gap_start = breakers->runs[r].end;
            gap_first = breakers->runs[r].last->next;
            r++;
        }
    }
    window_candidate best;
    double best_cost;
    if (choose(q, &best, &best_cost))
        return -1;
    window_scratch *scratch = q->scratch;
    out->first = scratch->blocks[best.head];
    out->last = scratch->blocks[best.tail - 1];
    out->addr = out->first->addr;
    out->size = best.size;
    out->cost = best_cost;
    return 0;
}

int window_search_indexed(const arena *a, uint64_t size, window_objective objective,
                          window_cost_fn cost, window_bound_fn bound, void *ctx,
                          const breaker_index *breakers, window_scratch *scratch, window *out)
{
    *out = (window){.cost = -1};
    search q = {size, objective, cost, bound, NULL, ctx, scratch, out, 0, 0, 0};
    return search_gaps(&q, a, breakers);
}

int window_search_batched(const arena *a, uint64_t size, window_objective objective,
                          window_cost_fn cost, window_bounds_fn bounds, void *ctx,
                          const breaker_index *breakers, window_scratch *scratch, window *out)
{
    *out = (window){.cost = -1};
    search q = {size, objective, cost, NULL, bounds, ctx, scratch, out, 0, 0, 0};
    return search_gaps(&q, a, breakers);
}

void window_scratch_free(window_scratch *s)
{
    free(s->costs);
    free(s->lower);
    free(s->blocks);
    free(s->cands);
    free(s->sizes);
    *s = (window_scratch){0};
}
