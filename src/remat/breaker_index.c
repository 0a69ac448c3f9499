/* Maximal runs of window-breaking blocks (breaker_index.h). */
#include <stdlib.h>
#include <string.h>

#include "remat/breaker_index.h"

static int reserve(breaker_index *x, size_t n)
{
    if (n <= x->cap)
        return 0;
    size_t cap = x->cap ? x->cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    breaker_run *r = realloc(x->runs, cap * sizeof *r);
    if (!r)
        return -1;
    x->runs = r;
    x->cap = cap;
    return 0;
}

/* Index of the first run starting above addr (len if none). */
static size_t first_above(const breaker_index *x, uintptr_t addr)
{
    size_t lo = 0, hi = x->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->runs[mid].start > addr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static void erase(breaker_index *x, size_t i)
{
    memmove(&x->runs[i], &x->runs[i + 1], (x->len - i - 1) * sizeof *x->runs);
    x->len--;
}

static int insert(breaker_index *x, size_t i, breaker_run r)
{
    if (reserve(x, x->len + 1))
        return -1;
    memmove(&x->runs[i + 1], &x->runs[i], (x->len - i) * sizeof *x->runs);
    x->runs[i] = r;
    x->len++;
    return 0;
}

int breaker_index_add(breaker_index *x, arena_block *b)
{
    size_t i = first_above(x, b->addr);
    /* adjacency through the block links: address contiguity alone could
     * join the end of one segment to the start of the next */
    breaker_run *left = i ? &x->runs[i - 1] : NULL;
    breaker_run *right = i < x->len ? &x->runs[i] : NULL;
    int joins_left = left && left->last->next == b;
    int joins_right = right && b->next == right->first;
    if (joins_left && joins_right) {
        left->end = right->end;
        left->last = right->last;
        erase(x, i);
    } else if (joins_left) {
        left->end = b->addr + b->size;
        left->last = b;
    } else if (joins_right) {
        right->start = b->addr;
        right->first = b;
    } else if (insert(x, i, (breaker_run){b->addr, b->addr + b->size, b, b})) {
        return -1;
    }
    x->blocks++;
    return 0;
}

int breaker_index_remove(breaker_index *x, arena_block *b)
{
    size_t i = first_above(x, b->addr);
    if (!i)
        return 0; /* not indexed: nothing to do */
    breaker_run *r = &x->runs[i - 1];
    if (b->addr >= r->end)
        return 0;
    if (r->first == b && r->last == b) {
        erase(x, i - 1);
    } else if (r->first == b) {
        r->first = b->next;
        r->start = b->next->addr;
    } else if (r->last == b) {
        r->last = b->prev;
        r->end = b->addr;
    } else {
        breaker_run right = {b->next->addr, r->end, b->next, r->last};
        if (insert(x, i, right))
            return -1;
        r = &x->runs[i - 1]; /* insert may have moved the array */
        r->end = b->addr;
        r->last = b->prev;
    }
    x->blocks--;
    return 0;
}

void breaker_index_free(breaker_index *x)
{
    free(x->runs);
    *x = (breaker_index){0};
}
