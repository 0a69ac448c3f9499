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
    uint8_t *cu = realloc(s->cuts, cap * sizeof *cu);
    if (!cu)
        return -1;
    s->cuts = cu;
    /* write the new parts once: their pages are then mapped before a
     * search walks into them */
    size_t old = s->cap;
    memset(s->lower + old, 0, (cap - old) * sizeof *s->lower);
    memset(s->costs + old, 0, (cap - old) * sizeof *s->costs);
    memset(s->blocks + old, 0, (cap - old) * sizeof *s->blocks);
    memset(s->cands + old, 0, (cap - old) * sizeof *s->cands);
    memset(s->sizes + old, 0, (cap - old) * sizeof *s->sizes);
    memset(s->cuts + old, 0, (cap - old) * sizeof *s->cuts);
    s->cap = cap;
    return 0;
}

static double key_of(window_objective objective, double cost, uint64_t bytes)
{
    return objective == WINDOW_PER_BYTE ? cost / (double)bytes : cost;
}

/* key_of(sum, bytes) > limit without dividing. */
static bool key_above(window_objective objective, double sum, uint64_t bytes, double limit)
{
    return objective == WINDOW_PER_BYTE ? sum > limit * (double)bytes : sum > limit;
}

/* How many times a block's evaluation may be cut in one search before it is
 * evaluated in full: a cut walk is walked again from the start when its
 * window comes back into reach (each time at least twice as far), so this
 * bounds a block's walks at nine. */
#define MAX_CUTS 8

/* window_search_lazy's first round reaches this multiple of the smallest
 * bound key, and each further round this multiple of the last; MAX_ROUNDS
 * rounds with a finite reach come before one without. A reach too short
 * fails rounds whose cut walks are then walked again; one too long walks
 * dear tensors far. 16 and 2 against 8 and 3, 4 and 4, 32 and 2, 8 and 1,
 * 64 and 1: the fewest instructions in searches over five runs of `coop
 * sim --engine lib` (docs/remat.md, section 4b, "Lazy evaluation"). */
#define CUT_HEADROOM 16.0
#define MAX_ROUNDS 2

/* One search: the blocks walked (blocks[0 .. n), bounds in lower[], exact
 * costs or NAN in costs[]) and the minimal covering windows found
 * (cands[0 .. num_cands), in the order of their right ends; cands[seed]
 * the first with the smallest bound key). */
typedef struct search {
    uint64_t size;
    coop_stream stream; /* free blocks usable: tagged it or COOP_STREAM_ANY */
    window_objective objective;
    window_cost_fn cost;
    window_cost_upto_fn cost_upto; /* window_search_lazy's, else NULL */
    window_bound_fn bound;
    void *ctx;
    window_scratch *scratch;
    window *out;
    size_t n, num_cands, seed;
} search;

/* The whole cost of b's owner, from whichever cost function the search has. */
static double full_cost(const search *q, const arena_block *b)
{
    if (q->cost)
        return q->cost(b->owner, b, q->ctx);
    bool complete = true;
    return q->cost_upto(b->owner, b, q->ctx, INFINITY, &complete);
}

/* The two-pointer pass over the blocks from first up to stop (exclusive,
 * NULL: the segment's end), a run starting empty at first: records, for
 * every right end, the shortest run ending there that covers the request.
 * One loop (walking, bounding and the two pointers interleave: the walk is
 * a chain of dependent loads that the rest overlaps), its state in locals:
 * stores to the scratch arrays could alias the search's fields as far as
 * the compiler knows. 0, or -2 when host memory runs out. */
static int scan(search *q, arena_block *first, const arena_block *stop)
{
    window_scratch *s = q->scratch;
    const uint64_t want = q->size;
    const bool per_byte = q->objective == WINDOW_PER_BYTE;
    const window_bound_fn bound = q->bound;
    const coop_stream stream = q->stream;
    uint64_t run_size = 0, visited = 0, evals = 0;
    double run_lower = 0;
    /* for the rounding error of run_lower: its largest partial sum since
     * the run was last empty (the additions and subtractions since then
     * number at most twice the blocks recorded, n) */
    double run_peak = 0;
    size_t n = q->n, num_cands = q->num_cands, seed = q->seed;
    size_t head = n; /* the run: blocks[head .. n) */
    /* the seed's bound sum and bytes, for the cross-multiplied comparison */
    double seed_lower = num_cands ? s->cands[seed].lower_sum : 0;
    double seed_bytes = num_cands ? (double)s->cands[seed].size : 0;
    size_t cap = s->cap;
    arena_block **blocks = s->blocks;
    uint64_t *sizes = s->sizes;
    double *lower = s->lower, *costs = s->costs;
    window_candidate *cands = s->cands;
    int err = 0;
    for (arena_block *b = first; b != stop; b = b->next) {
        visited++;
        /* the next block's owner (its record may span two lines): its loads
         * start while this block's work runs (for a free block the field is
         * a tree link, harmless to prefetch) */
        if (b->next && b->next != stop && b->next->owner) {
            /* NULL checked first: offsetting a null pointer is undefined
             * (UBSan and the api fuzzer flagged it) */
            __builtin_prefetch(b->next->owner);
            __builtin_prefetch((char *)b->next->owner + 64);
        }
        double lb, ex = NAN;
        if (b->state == COOP_BLOCK_FREE) {
            /* a busy stream's free block would not merge with the window */
            lb = ex = arena_tags_mergeable(b->stream, stream) ? 0 : WINDOW_BLOCKED;
        } else if (b->state == COOP_BLOCK_ALLOCATED && b->owner) {
            if (bound) {
                bool exact = false;
                lb = bound(b->owner, b, q->ctx, &exact);
                if (exact)
                    ex = lb;
            } else {
                evals++;
                lb = ex = full_cost(q, b);
            }
        } else {
            lb = WINDOW_BLOCKED;
        }
        if (lb < 0) { /* breaks every run through b */
            run_size = 0;
            run_lower = 0;
            run_peak = 0;
            head = n;
            continue;
        }
        if (n == cap) {
            if (window_scratch_reserve(s, n + 1)) {
                err = -2;
                break;
            }
            cap = s->cap;
            blocks = s->blocks;
            sizes = s->sizes;
            lower = s->lower;
            costs = s->costs;
            cands = s->cands;
        }
        uint64_t bytes = b->size;
        blocks[n] = b;
        sizes[n] = bytes;
        lower[n] = lb;
        costs[n] = ex;
        n++;
        /* A plain running sum: compensating it cost lstm's median search
         * 25%. Once a bound far above the others has left the run, the
         * rounding error it caused stays in the sum and could exceed
         * BOUND_SLACK, so the sum recorded is lowered by a bound on that
         * error (each addition or subtraction errs by at most half an ulp
         * of the largest partial sum): a lower bound again, which can no
         * longer prune the best window (tests/window_test: 1e16, 3, then
         * windows of cost 1.9 and 4, per byte). Without such a bound the
         * error term is far below BOUND_SLACK and changes nothing. */
        run_size += bytes;
        run_lower += lb;
        run_peak = run_lower > run_peak ? run_lower : run_peak;
        while (run_size - sizes[head] >= want) {
            run_size -= sizes[head];
            run_lower -= lower[head];
            head++;
        }
        if (run_size < want)
            continue;
        double sum = run_lower - (double)(2 * n) * 0x1p-53 * run_peak;
        sum = sum < 0 ? 0 : sum;
        cands[num_cands] =
            (window_candidate){.head = head, .tail = n, .size = run_size, .lower_sum = sum};
        /* key(this) < key(seed) without dividing (a division's latency per
         * candidate had been a third of the pass); only orders the
         * evaluation: choices use key_of */
        if (!num_cands ||
            (per_byte ? sum * seed_bytes < seed_lower * (double)run_size : sum < seed_lower)) {
            seed = num_cands;
            seed_lower = sum;
            seed_bytes = (double)run_size;
        }
        num_cands++;
    }
    q->out->blocks_visited += visited;
    q->out->evals += evals;
    q->n = n;
    q->num_cands = num_cands;
    q->seed = seed;
    return err;
}

/* Exact cost of block i, evaluated at most once per search. */
static double block_cost(search *q, size_t i)
{
    window_scratch *s = q->scratch;
    if (isnan(s->costs[i])) {
        q->out->evals++;
        s->costs[i] = full_cost(q, s->blocks[i]);
        if (s->costs[i] < s->lower[i]) /* inconsistent callbacks: trust the bound */
            s->costs[i] = s->lower[i];
    }
    return s->costs[i];
}

/* A running sum that survives adding and later subtracting terms of very
 * different sizes (Neumaier's compensated summation): a window's costs span
 * c / staleness from below 1e-6 to above 1e9, and a plain running sum that
 * once held a large cost keeps its rounding error after subtracting it,
 * enough to misorder the small windows that follow. */
typedef struct exact_sum {
    double sum, error;
} exact_sum;

static void exact_add(exact_sum *e, double x)
{
    double t = e->sum + x;
    e->error += fabs(e->sum) >= fabs(x) ? (e->sum - t) + x : (x - t) + e->sum;
    e->sum = t;
}

static double exact_value(const exact_sum *e)
{
    double v = e->sum + e->error;
    return v < 0 ? 0 : v; /* costs are >= 0; what rounding is left stays at 0 */
}

/* Evaluates block i for a window that can take at most room more cost
 * (INFINITY: no limit): true with costs[i] set when its cost is known,
 * false when the evaluation was cut (cost_upto stopped above room; a walk
 * cut before goes at least twice as far again), lower[i] then raised to
 * the value reached. */
static bool block_cost_within(search *q, size_t i, double room)
{
    window_scratch *s = q->scratch;
    if (!isnan(s->costs[i]))
        return true;
    /* !(room < INFINITY): also a NaN room (an infinite cost taken from an
     * infinite one), which no limit could be compared with: in full, so the
     * last round, whose rooms start infinite, always knows its seed */
    if (!q->cost_upto || !(room < INFINITY) || s->cuts[i] >= MAX_CUTS) {
        block_cost(q, i);
        return true;
    }
    double limit = s->cuts[i] && room < 2 * s->lower[i] ? 2 * s->lower[i] : room;
    bool complete = true;
    const arena_block *b = s->blocks[i];
    double v = q->cost_upto(b->owner, b, q->ctx, limit, &complete);
    q->out->evals++;
    if (complete) {
        s->costs[i] = v < s->lower[i] ? s->lower[i] : v; /* inconsistent: trust the bound */
        return true;
    }
    s->cuts[i]++;
    if (v > s->lower[i])
        s->lower[i] = v;
    return false;
}

/* The cost a window of bytes may reach under the key limit. */
static double room_of(window_objective objective, double limit, uint64_t bytes)
{
    return objective == WINDOW_PER_BYTE ? limit * (double)bytes : limit; /* INFINITY stays */
}

/* One round of choose under reach, a key no window above which is worth
 * knowing exactly in this round (INFINITY: every window the bounds allow,
 * each block evaluated in full). The seed candidate is evaluated first and
 * sets the best key; then one pass over the candidates in order evaluates
 * only those whose bound can still reach the best key or reach, keeping
 * the exact sum of [head, tail) incrementally (heads and tails only
 * advance), so each block is evaluated once unless cut. A block whose
 * evaluation was cut (reach finite, window_search_lazy) is a hole: its
 * window is out of reach; later windows holding it count its raised bound,
 * and try it again only while they are within reach. true and *best_k
 * when the best window known exactly is within reach (then no window cut
 * or skipped can beat it). */
static bool choose_within(search *q, double reach, size_t *best_k, double *best_cost)
{
    window_scratch *s = q->scratch;
    const window_candidate *cands = s->cands;
    const size_t num_cands = q->num_cands;
    const window_objective objective = q->objective;
    double *lower = s->lower, *costs = s->costs;
    const window_candidate *seed = &cands[q->seed];
    double best_key = INFINITY, limit = reach * (1 + BOUND_SLACK);
    size_t best_tail = SIZE_MAX;
    *best_k = SIZE_MAX;
    /* the seed, its blocks at their bounds until evaluated */
    double run = 0, plain = 0;
    bool known = true;
    for (size_t i = seed->head; i < seed->tail; i++)
        run += isnan(costs[i]) ? lower[i] : costs[i];
    for (size_t i = seed->head; i < seed->tail && known; i++) {
        double before = isnan(costs[i]) ? lower[i] : costs[i];
        known = block_cost_within(q, i, room_of(objective, limit, seed->size) - (run - before));
        run += (known ? costs[i] : lower[i]) - before;
        plain += known ? costs[i] : 0;
    }
    if (known) {
        *best_cost = plain;
        best_key = key_of(objective, plain, seed->size);
        best_tail = seed->tail;
        *best_k = q->seed;
        limit = (best_key < reach ? best_key : reach) * (1 + BOUND_SLACK);
    }
    /* the loop's state in locals (the evaluations could alias it as far as
     * the compiler knows); most candidates only take the first test */
    size_t ev_head = 0, ev_tail = 0; /* sum = exact costs of blocks[ev_head .. ev_tail) */
    exact_sum sum = {0, 0};
    size_t holes = 0; /* blocks of [ev_head, ev_tail) whose cost is unknown */
    /* their bounds, summed as sum is: a cut raises a hole's bound to the
     * value its walk reached, which can be far above the window's room, and
     * a plain sum that held one kept its rounding error after it left */
    exact_sum hole_sum = {0, 0};
    for (size_t k = 0; k < num_cands; k++) {
        const window_candidate *c = &cands[k];
        if (key_above(objective, c->lower_sum, c->size, limit))
            continue;
        if (c->head >= ev_tail) {
            ev_head = ev_tail = c->head;
            sum = (exact_sum){0, 0};
            holes = 0;
            hole_sum = (exact_sum){0, 0};
        }
        for (; ev_head < c->head; ev_head++) {
            if (isnan(costs[ev_head])) {
                holes--;
                exact_add(&hole_sum, -lower[ev_head]);
            } else {
                exact_add(&sum, -costs[ev_head]);
            }
        }
        double room = room_of(objective, limit, c->size);
        for (; ev_tail < c->tail; ev_tail++) {
            double left =
                q->cost_upto ? room - (exact_value(&sum) + exact_value(&hole_sum)) : INFINITY;
            if (block_cost_within(q, ev_tail, left)) {
                exact_add(&sum, costs[ev_tail]);
            } else {
                holes++;
                exact_add(&hole_sum, lower[ev_tail]);
            }
        }
        /* holes left by earlier windows or just now: tried again while
         * the window is within reach */
        for (size_t i = c->head; holes && i < c->tail; i++) {
            if (!isnan(costs[i]))
                continue;
            double before = lower[i], taken = exact_value(&sum) + exact_value(&hole_sum);
            if (taken > room)
                break;
            exact_add(&hole_sum, -before);
            if (block_cost_within(q, i, room - (taken - before))) {
                holes--;
                exact_add(&sum, costs[i]);
            } else {
                exact_add(&hole_sum, lower[i]);
            }
        }
        if (holes)
            continue;
        double cost = exact_value(&sum);
        double key = key_of(objective, cost, c->size);
        if (key < best_key || (key == best_key && c->tail < best_tail)) {
            best_key = key;
            limit = (best_key < reach ? best_key : reach) * (1 + BOUND_SLACK);
            *best_cost = cost;
            *best_k = k;
            best_tail = c->tail;
        }
    }
    /* a window known exactly but above reach may lose to one cut under it */
    return *best_k != SIZE_MAX && best_key <= reach * (1 + BOUND_SLACK);
}

/* The candidate with the smallest exact key, ties to the earliest right end
 * (the plain pass's choice): one round of choose_within with no reach. With
 * a cost that can stop early (window_search_lazy), rounds with a growing
 * reach, from CUT_HEADROOM times the seed's bound key, the last one
 * without: a window whose exact key is within a round's reach is the best
 * of all (those above it cannot beat it), so the first round that knows one
 * decides. -1 if there is no candidate. */
static int choose(search *q, window_candidate *best, double *best_cost)
{
    window_scratch *s = q->scratch;
    if (!q->num_cands)
        return -1;
    size_t best_k = SIZE_MAX;
    if (q->cost_upto) {
        for (size_t i = 0; i < q->n; i++)
            s->cuts[i] = 0;
        const window_candidate *seed = &s->cands[q->seed];
        double reach = CUT_HEADROOM * key_of(q->objective, seed->lower_sum, seed->size);
        for (int round = 0; round < MAX_ROUNDS && reach > 0 && reach < INFINITY; round++) {
            if (choose_within(q, reach, &best_k, best_cost))
                break;
            best_k = SIZE_MAX; /* none, or one a window cut may beat */
            reach *= CUT_HEADROOM;
        }
    }
    if (best_k == SIZE_MAX)
        choose_within(q, INFINITY, &best_k, best_cost);
    *best = s->cands[best_k];
    return 0;
}

/* The pass over every segment (over the gaps between breakers' runs when
 * breakers is not NULL), then the choice; window_search_indexed's result. */
static int run_search(search *q, const arena *a, const breaker_index *breakers)
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
    double best_cost = 0;
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

int window_search(const arena *a, uint64_t size, coop_stream stream, window_objective objective,
                  window_cost_fn cost, window_bound_fn bound, void *ctx, window_scratch *scratch,
                  window *out)
{
    return window_search_indexed(a, size, stream, objective, cost, bound, ctx, NULL, scratch, out);
}

int window_search_indexed(const arena *a, uint64_t size, coop_stream stream,
                          window_objective objective, window_cost_fn cost, window_bound_fn bound,
                          void *ctx, const breaker_index *breakers, window_scratch *scratch,
                          window *out)
{
    *out = (window){.cost = -1};
    search q = {.size = size,
                .stream = stream,
                .objective = objective,
                .cost = cost,
                .bound = bound,
                .ctx = ctx,
                .scratch = scratch,
                .out = out};
    return run_search(&q, a, breakers);
}

int window_search_lazy(const arena *a, uint64_t size, coop_stream stream,
                       window_objective objective, window_cost_upto_fn cost_upto,
                       window_bound_fn bound, void *ctx, const breaker_index *breakers,
                       window_scratch *scratch, window *out)
{
    *out = (window){.cost = -1};
    search q = {.size = size,
                .stream = stream,
                .objective = objective,
                .cost_upto = cost_upto,
                .bound = bound,
                .ctx = ctx,
                .scratch = scratch,
                .out = out};
    return run_search(&q, a, breakers);
}

void window_scratch_free(window_scratch *s)
{
    free(s->costs);
    free(s->lower);
    free(s->blocks);
    free(s->cands);
    free(s->sizes);
    free(s->cuts);
    *s = (window_scratch){0};
}
