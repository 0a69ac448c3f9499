/*
 * Reclaiming tensor records (remat_internal.h).
 *
 * A record outlives its release: an evicted tensor may be needed to
 * recompute others. Without reclamation every record ever made stays until
 * the context is destroyed, so a training loop's host memory (records,
 * child lists, union-find nodes, cached roots) grows with every step. This
 * file frees the records no recomputation can need, by marking from the
 * roots:
 *
 *   - roots: storages the owner still holds (handles: the tensor or a view
 *     unreleased), pinned ones, and resident ones (a resident released
 *     tensor may be evicted later and then recomputed for a held one);
 *   - a marked tensor needs its producer's inputs (recomputing it reads
 *     them);
 *   - everything unmarked is reclaimed: released views, and base records
 *     that are released, unpinned and evicted.
 *
 * Nothing is cut short: a tensor updated in place keeps its old value,
 * which keeps its own producer's inputs, and so on, while the tensor is
 * held, because a later in-place update can turn its current value into
 * an evicted one that readers still recompute. A parameter updated with
 * coop_tensor_mutate at every step therefore keeps every step's graph;
 * include/coop.h says how to keep such tensors out of it.
 *
 * What stays is everything any recomputation the owner can still ask for
 * can reach, so no decision of the default policy changes (checked by
 * tests/remat_collect_test): c_live counts evicted ancestors (all marked)
 * and held evicted descendants (reached only through marked tensors, as a
 * held tensor's ancestors are marked). c_eq and c_comp lose the reclaimed
 * tensors from their walks (DTR's own implementation drops them too);
 * union-find class values keep their cost, as before. Collections are
 * amortized: one runs when the records have doubled since the last (at
 * least REMAT_COLLECT_MIN), in O(records + edges).
 *
 * Reclaimed records wait in a quarantine before their memory is freed, so
 * that a stale handle (a tensor used after its release) gets an error
 * rather than a crash for a while: a collection's records all stay until
 * the next collection, which then frees the oldest beyond REMAT_QUARANTINE
 * before adding its own (trimming while adding would free first the
 * records of the same call, possibly one released just before it). Beyond
 * that, using a released tensor is undefined, like a pointer after free.
 */
#include <stdlib.h>

#include "remat/remat_internal.h"
#include "status.h"

#define REMAT_COLLECT_MIN 4096 /* records before the first collection */
/* union-find nodes made since the last compaction before one is tried
 * outside a collection (at least; else the records' number) */
#define REMAT_COMPACT_MIN 4096
#define REMAT_QUARANTINE 4096 /* reclaimed records kept before freeing */

coop_status remat_reclaimed_error(const char *fn, const char *what, const coop_tensor *t)
{
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: %s (%p) was released and its record reclaimed (use after release)",
                          fn, what, (const void *)t);
}

static bool is_root(const coop_tensor *t)
{
    return t->handles || t->pins || t->ptr;
}

/* Marks the roots and what they need; -1 when host memory runs out (the
 * marking is then incomplete and nothing may be reclaimed). */
static int mark_needed(coop_remat *r, uint32_t mark)
{
    size_t len = 0;
    for (coop_tensor *t = r->all; t; t = t->next_all) {
        if (t->base != t) {
            if (!t->released || t->user_pins)
                t->mark = mark; /* a live or pinned view; its base is held (handles, pins) */
            continue;
        }
        if (t->mark == mark || !is_root(t))
            continue;
        t->mark = mark;
        if (remat_stack_push(r, &len, t))
            return -1;
        while (len) {
            coop_tensor *x = r->stack[--len];
            for (size_t i = 0; i < x->num_inputs; i++) {
                coop_tensor *in = x->inputs[i];
                if (in->mark == mark)
                    continue;
                in->mark = mark;
                if (remat_stack_push(r, &len, in))
                    return -1;
            }
        }
    }
    return 0;
}

static void quarantine(coop_remat *r, coop_tensor *t)
{
    free(t->inputs);
    free(t->children);
    t->inputs = t->children = NULL;
    t->num_inputs = t->num_children = t->cap_children = 0;
    t->base = t; /* a view's base may be reclaimed too */
    t->released = t->reclaimed = true;
    t->handles = t->pins = 0;
    t->uf = REMAT_NONE;
    t->comp_stamp = 0;
    t->eq_valid = false;
    t->next_all = NULL;
    if (r->quarantine_last)
        r->quarantine_last->next_all = t;
    else
        r->quarantine = t;
    r->quarantine_last = t;
    r->num_quarantined++;
}

/* Frees the oldest quarantined records beyond REMAT_QUARANTINE. */
static void trim_quarantine(coop_remat *r)
{
    while (r->num_quarantined > REMAT_QUARANTINE && r->quarantine) {
        coop_tensor *oldest = r->quarantine;
        r->quarantine = oldest->next_all;
        if (!r->quarantine)
            r->quarantine_last = NULL;
        free(oldest);
        r->num_quarantined--;
    }
}

/* Node numbers down to the classes the records still in an evicted state
 * name, and every cached c_eq root set forgotten (they hold node numbers;
 * their slots are freed for reuse). Skipped when host memory runs out:
 * the union-find then only keeps growing until the next collection. */
static void compact_classes(coop_remat *r)
{
    size_t n = 0;
    for (coop_tensor *t = r->all; t; t = t->next_all)
        n += t->uf != REMAT_NONE;
    if (r->uf.count < 2 * n + 1024)
        return;
    uint32_t **nodes = n ? malloc(n * sizeof *nodes) : NULL;
    if (n && !nodes)
        return;
    size_t k = 0;
    for (coop_tensor *t = r->all; t; t = t->next_all)
        if (t->uf != REMAT_NONE)
            nodes[k++] = &t->uf;
    /* room kept for every resident tensor's eviction (num_resident) */
    int failed =
        r->num_resident >= UINT32_MAX || uf_compact(&r->uf, nodes, n, (uint32_t)r->num_resident);
    free(nodes);
    if (failed)
        return;
    for (coop_tensor *t = r->all; t; t = t->next_all) {
        t->eq_valid = false;
        t->eq_first = 0;
        t->eq_num_roots = t->eq_cap = 0;
    }
    r->eq_roots_len = 0;
    r->num_roots = 0;
}

/* Compacts the union-find if it holds more than twice the classes named
 * (compact_classes), and sets when to try next: after as many new nodes
 * as there are records (at least REMAT_COMPACT_MIN), so that the O(records
 * + nodes) walk is paid for by the evictions that made the nodes. */
static void compact_and_rearm(coop_remat *r)
{
    compact_classes(r);
    size_t gap = r->num_records > REMAT_COMPACT_MIN ? r->num_records : REMAT_COMPACT_MIN;
    r->compact_at = r->uf.count + gap;
}

static void collect(coop_remat *r)
{
    uint32_t mark = remat_next_mark(r);
    if (mark_needed(r, mark))
        return; /* out of host memory: reclaim nothing this time */
    /* edges from what stays to what goes */
    for (coop_tensor *t = r->all; t; t = t->next_all) {
        if (t->mark != mark || t->base != t)
            continue;
        size_t k = 0;
        for (size_t i = 0; i < t->num_children; i++)
            if (t->children[i]->mark == mark)
                t->children[k++] = t->children[i];
        t->num_children = k;
        t->comp_stamp = 0; /* components may have lost members */
    }
    size_t dirty = 0; /* searches must not meet a reclaimed record */
    for (size_t i = 0; i < r->num_dirty; i++)
        if (r->dirty[i]->mark == mark)
            r->dirty[dirty++] = r->dirty[i];
    r->num_dirty = dirty;
    trim_quarantine(r); /* the previous collections' records, before this one's join */
    coop_tensor **link = &r->all;
    while (*link) {
        coop_tensor *t = *link;
        if (t->mark == mark) {
            link = &t->next_all;
            continue;
        }
        *link = t->next_all;
        quarantine(r, t);
        r->num_records--;
        r->stats.records_reclaimed++;
    }
    compact_and_rearm(r);
}

void remat_maybe_collect(coop_remat *r)
{
    size_t floor = r->collect_min ? r->collect_min : REMAT_COLLECT_MIN;
    if (r->num_records < (r->collect_at ? r->collect_at : floor)) {
        remat_maybe_compact(r); /* evictions without new records */
        return;
    }
    collect(r);
    r->collect_at = 2 * r->num_records;
    if (r->collect_at < floor)
        r->collect_at = floor;
}

void remat_maybe_compact(coop_remat *r)
{
    if (r->uf.count >= (r->compact_at ? r->compact_at : REMAT_COMPACT_MIN))
        compact_and_rearm(r);
}

void remat_quarantine_free(coop_remat *r)
{
    for (coop_tensor *t = r->quarantine, *next; t; t = next) {
        next = t->next_all;
        free(t);
    }
    r->quarantine = r->quarantine_last = NULL;
    r->num_quarantined = 0;
}
