/*
 * What the searches of a context skip, kept per policy (remat_internal.h):
 *
 * - the window policies (coop, coop-eq, coop-comp): the breaker index. The resident tensors that
 * break windows (pinned, or not evictable and still held) as maximal runs of their blocks
 * (breaker_index.h), so that the window search jumps over them and skips every gap smaller than the
 * request (window_search_indexed), as the simulator's does.
 * - the argmin policies (dtr, dte, ...): the evictable set, an unordered
 *   array of the resident tensors that may be evicted, so that a round
 *   scores those instead of walking every resident tensor (pinned
 *   parameters are most of them on the densenet logs: 1,090 resident and
 *   295 evictable per round on tv_densenet121 at 0.5). The argmin does not
 *   depend on the order: ties go to the tensor made resident earliest
 *   (resident_seq), the one the resident list's scan ended on.
 *
 * Kept lazily: what can change whether a tensor breaks windows or may be
 * evicted (its buffer, its pins going to or from 0, its release) only marks
 * it dirty, and a search first brings the dirty ones up to date under the
 * pool lock. So both are exact at every search, and an op's pins and
 * unpins pay a flag and a push, not an index update. An allocation that
 * fits also brings them up to date once a batch is waiting (remat_alloc),
 * so that no search pays for more than a batch (the first would otherwise
 * pay for every tensor made before it: 865 on tv_densenet121 at 0.5, 15-18
 * us). A tensor leaves both before its buffer is freed or handed over.
 *
 * The breaker index is conservative by construction: blocks the context
 * does not own (plain coop_malloc allocations, pending blocks) are never in
 * it, and a tensor that could not be added (host memory) is simply not:
 * the search checks every block it walks, so a missing breaker costs time,
 * never a different window. A block that cannot be taken out (no host
 * memory to split its run) drops the whole index, and searches then walk
 * every block; likewise the evictable set, whose searches then walk the
 * resident list, and both when a change cannot be remembered.
 */
#include <stdlib.h>
#include <string.h>

#include "remat/remat_internal.h"

void remat_search_index_open(coop_remat *r)
{
    if (remat_policy_windowed(r->cfg.policy))
        r->breakers = calloc(1, sizeof *r->breakers);
    else
        r->cands_on = true;
    r->track = r->breakers || r->cands_on;
}

static void drop_breakers(coop_remat *r)
{
    if (!r->breakers)
        return;
    breaker_index_free(r->breakers);
    free(r->breakers);
    r->breakers = NULL;
}

static void drop_cands(coop_remat *r)
{
    for (size_t i = 0; i < r->num_cands; i++)
        r->cands[i]->cand_pos = REMAT_NONE;
    free(r->cands);
    r->cands = NULL;
    r->num_cands = r->cap_cands = 0;
    r->cands_on = false;
}

void remat_search_index_close(coop_remat *r)
{
    drop_breakers(r);
    drop_cands(r);
    free(r->dirty);
    r->dirty = NULL;
    r->num_dirty = r->cap_dirty = 0;
    r->track = false;
}

void remat_mark_dirty(coop_remat *r, coop_tensor *t)
{
    if (r->num_dirty == r->cap_dirty) {
        size_t cap = r->cap_dirty ? r->cap_dirty * 2 : 256;
        coop_tensor **d = realloc(r->dirty, cap * sizeof *d);
        if (!d) { /* cannot remember the change: none rather than a wrong one */
            remat_search_index_close(r);
            return;
        }
        r->dirty = d;
        r->cap_dirty = cap;
    }
    t->dirty = true;
    r->dirty[r->num_dirty++] = t;
}

static void cand_remove(coop_remat *r, coop_tensor *t)
{
    coop_tensor *last = r->cands[--r->num_cands];
    r->cands[t->cand_pos] = last;
    last->cand_pos = t->cand_pos;
    t->cand_pos = REMAT_NONE;
}

static void cand_add(coop_remat *r, coop_tensor *t)
{
    if (r->num_cands == r->cap_cands) {
        size_t cap = r->cap_cands ? r->cap_cands * 2 : 256;
        coop_tensor **c = cap <= REMAT_NONE ? realloc(r->cands, cap * sizeof *c) : NULL;
        if (!c) {
            drop_cands(r);
            return;
        }
        r->cands = c;
        r->cap_cands = cap;
    }
    t->cand_pos = (uint32_t)r->num_cands;
    r->cands[r->num_cands++] = t;
}

void remat_search_index_forget_locked(coop_remat *r, coop_tensor *t)
{
    if (t->cand_pos != REMAT_NONE)
        cand_remove(r, t);
    if (!t->breaking)
        return;
    t->breaking = false;
    if (!r->breakers)
        return;
    arena_block *b = arena_lookup(pool_arena(r->pool), (uintptr_t)t->ptr);
    if (!b || breaker_index_remove(r->breakers, b))
        drop_breakers(r);
}

void remat_search_index_drop_locked(coop_remat *r, coop_tensor *t)
{
    remat_search_index_forget_locked(r, t);
    if (!t->dirty)
        return;
    /* a failed call's record, rare: the list keeps its order */
    for (size_t i = 0; i < r->num_dirty; i++)
        if (r->dirty[i] == t) {
            memmove(&r->dirty[i], &r->dirty[i + 1], (r->num_dirty - i - 1) * sizeof *r->dirty);
            r->num_dirty--;
            break;
        }
    t->dirty = false;
}

void remat_search_index_sync_locked(coop_remat *r)
{
    const arena *a = pool_arena(r->pool);
    size_t n = r->num_dirty;
    r->num_dirty = 0;
    for (size_t i = 0; i < n; i++) {
        coop_tensor *t = r->dirty[i];
        t->dirty = false;
        if (t->base != t)
            continue;
        bool evictable = t->ptr && remat_evictable(t);
        if (r->cands_on && evictable != (t->cand_pos != REMAT_NONE)) {
            if (evictable)
                cand_add(r, t);
            else
                cand_remove(r, t);
        }
        bool breaks = t->ptr && !evictable;
        if (!r->breakers || breaks == t->breaking)
            continue;
        if (!breaks) {
            remat_search_index_forget_locked(r, t);
            continue;
        }
        arena_block *b = arena_lookup(a, (uintptr_t)t->ptr);
        t->breaking = b && !breaker_index_add(r->breakers, b);
    }
}
