/* Sliding-window search over address-ordered blocks (window.h). */
#include <stdlib.h>

#include "remat/window.h"

static int reserve(window_scratch *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap * 2 : 256;
    while (cap < n)
        cap *= 2;
    double *c = realloc(s->costs, cap * sizeof *c);
    if (!c)
        return -1;
    s->costs = c;
    s->cap = cap;
    return 0;
}

int window_search(const arena *a, uint64_t size, window_objective objective, window_cost_fn cost,
                  void *ctx, window_scratch *scratch, window *out)
{
    *out = (window){.cost = -1};
    int found = 0;
    double best_key = 0;
    for (arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        /* run [left, right]: costs[head .. tail) hold its blocks' costs */
        arena_block *left = NULL;
        uint64_t run_size = 0;
        double run_cost = 0;
        size_t head = 0, tail = 0;
        for (arena_block *b = seg->first; b; b = b->next) {
            out->blocks_visited++;
            double c;
            if (b->state == COOP_BLOCK_FREE) {
                c = 0;
            } else if (b->state == COOP_BLOCK_ALLOCATED && b->owner) {
                out->evals++;
                c = cost(b->owner, b, ctx);
            } else {
                c = WINDOW_BLOCKED;
            }
            if (c < 0) { /* breaks every run through b */
                left = NULL;
                run_size = 0;
                run_cost = 0;
                head = tail = 0;
                continue;
            }
            if (!left)
                left = b;
            if (reserve(scratch, tail + 1))
                return -2;
            scratch->costs[tail++] = c;
            run_size += b->size;
            run_cost += c;
            while (run_size - left->size >= size) {
                run_size -= left->size;
                run_cost -= scratch->costs[head++];
                left = left->next;
            }
            double key = objective == WINDOW_PER_BYTE ? run_cost / (double)run_size : run_cost;
            if (run_size >= size && (!found || key < best_key)) {
                best_key = key;
                found = 1;
                out->first = left;
                out->last = b;
                out->addr = left->addr;
                out->size = run_size;
                out->cost = run_cost < 0 ? 0 : run_cost; /* float drift of the running sum */
            }
        }
    }
    return found ? 0 : -1;
}

void window_scratch_free(window_scratch *s)
{
    free(s->costs);
    *s = (window_scratch){0};
}
