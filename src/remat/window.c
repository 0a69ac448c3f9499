/* Sliding-window search over address-ordered blocks (window.h). */
#include <math.h>
#include <stdlib.h>

#include "remat/window.h"

static int reserve(window_scratch *s, size_t n)
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
    s->cap = cap;
    return 0;
}

static double key_of(window_objective objective, double cost, uint64_t bytes)
{
    return objective == WINDOW_PER_BYTE ? cost / (double)bytes : cost;
}

/* The state of one search: the best window so far. */
typedef struct search {
    uint64_t size;
    window_objective objective;
    window_cost_fn cost, bound;
    void *ctx;
    window_scratch *scratch;
    window *out;
    int found;
    double best_key;
} search;

/* The two-pointer pass over the blocks from first up to stop (exclusive,
 * NULL: the segment's end), a run starting empty at first. 0, or -2 when
 * host memory runs out. */
static int scan(search *q, arena_block *first, const arena_block *stop)
{
    window_scratch *scratch = q->scratch;
    window *out = q->out;
    uint64_t size = q->size;
    /* the run: blocks[head .. tail), lower bounds in lower[], exact costs
     * in costs[] for indices below evaluated (a prefix of every run:
     * exact costs are filled left to right) */
    uint64_t run_size = 0;
    double run_lower = 0, run_exact = 0;
    size_t head = 0, tail = 0, evaluated = 0;
    for (arena_block *b = first; b != stop; b = b->next) {
        out->blocks_visited++;
        double lb, ex = NAN;
        if (b->state == COOP_BLOCK_FREE) {
            lb = ex = 0;
        } else if (b->state == COOP_BLOCK_ALLOCATED && b->owner) {
            if (q->bound) {
                lb = q->bound(b->owner, b, q->ctx);
            } else {
                out->evals++;
                lb = ex = q->cost(b->owner, b, q->ctx);
            }
        } else {
            lb = WINDOW_BLOCKED;
        }
        if (lb < 0) { /* breaks every run through b */
            run_size = 0;
            run_lower = run_exact = 0;
            head = tail = evaluated = 0;
            continue;
        }
        if (reserve(scratch, tail + 1))
            return -2;
        scratch->blocks[tail] = b;
        scratch->lower[tail] = lb;
        scratch->costs[tail] = ex;
        tail++;
        run_size += b->size;
        run_lower += lb;
        while (run_size - scratch->blocks[head]->size >= size) {
            run_size -= scratch->blocks[head]->size;
            run_lower -= scratch->lower[head];
            if (head < evaluated)
                run_exact -= scratch->costs[head];
            head++;
        }
        if (evaluated < head) {
            evaluated = head;
            run_exact = 0;
        }
        if (run_size < size)
            continue;
        /* a window whose lower bound cannot beat the best needs no exact costs */
        if (q->found && key_of(q->objective, run_lower, run_size) >= q->best_key)
            continue;
        for (; evaluated < tail; evaluated++) {
            double *c = &scratch->costs[evaluated];
            if (isnan(*c)) {
                out->evals++;
                *c = q->cost(scratch->blocks[evaluated]->owner, scratch->blocks[evaluated], q->ctx);
                if (*c < scratch->lower[evaluated]) /* inconsistent callbacks: trust the bound */
                    *c = scratch->lower[evaluated];
            }
            run_exact += *c;
        }
        double key = key_of(q->objective, run_exact, run_size);
        if (!q->found || key < q->best_key) {
            q->best_key = key;
            q->found = 1;
            out->first = scratch->blocks[head];
            out->last = b;
            out->addr = out->first->addr;
            out->size = run_size;
            out->cost = run_exact < 0 ? 0 : run_exact; /* float drift of the running sum */
        }
    }
    return 0;
}

int window_search(const arena *a, uint64_t size, window_objective objective, window_cost_fn cost,
                  window_cost_fn bound, void *ctx, window_scratch *scratch, window *out)
{
    return window_search_indexed(a, size, objective, cost, bound, ctx, NULL, scratch, out);
}

int window_search_indexed(const arena *a, uint64_t size, window_objective objective,
                          window_cost_fn cost, window_cost_fn bound, void *ctx,
                          const breaker_index *breakers, window_scratch *scratch, window *out)
{
    *out = (window){.cost = -1};
    search q = {size, objective, cost, bound, ctx, scratch, out, 0, 0};
    size_t r = 0; /* next breaker run, address order (segments are too) */
    for (arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        if (!breakers) {
            if (scan(&q, seg->first, NULL))
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
                scan(&q, gap_first, stop))
                return -2;
            if (last_gap)
                break;
            gap_start = breakers->runs[r].end;
            gap_first = breakers->runs[r].last->next;
            r++;
        }
    }
    return q.found ? 0 : -1;
}

void window_scratch_free(window_scratch *s)
{
    free(s->costs);
    free(s->lower);
    free(s->blocks);
    *s = (window_scratch){0};
}
