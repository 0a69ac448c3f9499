/*
 * The breaker index of a coop context (remat_internal.h): the resident
 * tensors that break windows (pinned, or neither evictable nor released)
 * as maximal runs of their blocks (breaker_index.h), so that coop's window
 * search jumps over them and skips every gap smaller than the request
 * (window_search_indexed), as the simulator's does.
 *
 * Kept lazily: what can change whether a tensor breaks windows (its buffer,
 * its pins going to or from 0, its release) only marks it dirty, and a
 * search first brings the dirty ones up to date under the pool lock. So the
 * index is exact at every search, and an op's pins and unpins pay a flag
 * and a push, not an index update. An allocation that fits also brings
 * them up to date once a batch is waiting (remat_alloc), so that no search
 * pays for more than a batch (the first would otherwise pay for every
 * tensor made before it: 865 on tv_densenet121 at 0.5, 15-18 us). Conservative by construction:
 * blocks the context does not own (plain coop_malloc allocations, pending blocks) are never in it,
 * and a tensor that could not be added (host memory) is simply not: the search checks every block
 * it walks, so a missing breaker costs time, never a different window. A tensor in the index leaves
 * it before its block is freed (remat_breaker_forget_locked), as the index requires; a block that
 * cannot be taken out (no host memory to split its run) drops the whole
 * index, and searches then walk every block.
 */
#include <stdlib.h>

#include "remat/remat_internal.h"

int remat_breakers_open(coop_remat *r)
{
    r->breakers = calloc(1, sizeof *r->breakers);
    return r->breakers ? 0 : -1;
}

void remat_breakers_close(coop_remat *r)
{
    if (!r->breakers)
        return;
    breaker_index_free(r->breakers);
    free(r->breakers);
    r->breakers = NULL;
    free(r->dirty);
    r->dirty = NULL;
    r->num_dirty = r->cap_dirty = 0;
}

void remat_breaker_mark(coop_remat *r, coop_tensor *t)
{
    if (r->num_dirty == r->cap_dirty) {
        size_t cap = r->cap_dirty ? r->cap_dirty * 2 : 256;
        coop_tensor **d = realloc(r->dirty, cap * sizeof *d);
        if (!d) { /* cannot remember the change: no index rather than a wrong one */
            remat_breakers_close(r);
            return;
        }
        r->dirty = d;
        r->cap_dirty = cap;
    }
    t->breaker_dirty = true;
    r->dirty[r->num_dirty++] = t;
}

void remat_breaker_forget_locked(coop_remat *r, coop_tensor *t)
{
    if (!t->breaking)
        return;
    t->breaking = false;
    if (!r->breakers)
        return;
    arena_block *b = arena_lookup(pool_arena(r->pool), (uintptr_t)t->ptr);
    if (!b || breaker_index_remove(r->breakers, b))
        remat_breakers_close(r);
}

void remat_breakers_sync_locked(coop_remat *r)
{
    if (!r->breakers)
        return;
    const arena *a = pool_arena(r->pool);
    size_t n = r->num_dirty;
    r->num_dirty = 0;
    for (size_t i = 0; i < n && r->breakers; i++) {
        coop_tensor *t = r->dirty[i];
        t->breaker_dirty = false;
        bool breaks = t->base == t && t->ptr && !remat_evictable(t);
        if (breaks == t->breaking)
            continue;
        if (!breaks) {
            remat_breaker_forget_locked(r, t);
            continue;
        }
        arena_block *b = arena_lookup(a, (uintptr_t)t->ptr);
        t->breaking = b && !breaker_index_add(r->breakers, b);
    }
}
