/*
 * Internals of the remat API (include/coop.h, rematerialization section):
 * the context and the tensor records, shared by remat.c (tensor lifecycle,
 * recomputation, in-place), remat_evict.c (policies, window, placement),
 * remat_cost.c (c_eq and c_comp over the tensor graph) and remat_live.c
 * (c_live, COOP_REMAT_COOP's cost).
 *
 * Storage: a tensor with base == itself owns a storage (a block of the pool
 * while resident, whose owner field points back at it); views point at their
 * base and never own memory. Only base tensors are evicted, recomputed, or
 * appear in eviction decisions.
 */
#ifndef COOP_REMAT_INTERNAL_H
#define COOP_REMAT_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "coop.h"
#include "pool_internal.h"
#include "saturating.h"
#include "remat/union_find.h"
#include "remat/window.h"

#define REMAT_NONE UINT32_MAX

struct coop_tensor {
    coop_tensor *base; /* storage owner (itself for a base tensor) */
    coop_remat *owner; /* the context that made it: a handle of another is refused */
    size_t size;       /* bytes */
    uint64_t cost;     /* ns of the producer */
    void *producer;
    coop_tensor **inputs; /* producer's inputs (base tensors) */
    size_t num_inputs;
    coop_tensor **children; /* base tensors produced from this one */
    size_t num_children, cap_children;
    void *ptr;            /* buffer while resident, else NULL */
    uint64_t last_access; /* logical clock */
    /* base: user pins (up to UINT32_MAX through each handle) plus those of
     * recomputations and creates in progress (one per input slot of each
     * frame: as many as host memory holds). 64 bits, so that no count of
     * either can wrap it to 0, which would make a pinned storage evictable */
    uint64_t pins;
    uint32_t handles;   /* base: unreleased tensors on the storage (itself, views) */
    uint32_t user_pins; /* coop_tensor_pin calls through this handle not yet unpinned */
    uint32_t uf;        /* union-find node while evicted, else REMAT_NONE */
    uint32_t remats;    /* base: recompute callbacks run for it (coop's window cost) */
    /* its producer is a recomputable in-place op: inputs[0] is its old value
     * (a hidden record), whose buffer a recomputation takes over */
    bool in_place;
    /* c_comp's components of evicted tensors (remat_cost.c): the walk that
     * found it stamped it comp_stamp (0: never) with the component's first-
     * walked tensor, comp_label. Valid while that label still carries the
     * same stamp (remat_comp_label_valid); the label's comp_sum is then
     * the component's summed cost. */
    uint32_t comp_stamp;
    coop_tensor *comp_label;
    int64_t comp_sum;
    uint32_t mark; /* traversal stamp (coop_remat.mark_epoch) */
    /* c_eq cache (remat_cost.c): the distinct class roots of the evicted
     * neighbours its last walk found, coop_remat.eq_roots[eq_first ..
     * +eq_num_roots) (a slot of eq_cap), while eq_valid */
    uint32_t eq_first;
    uint16_t eq_num_roots, eq_cap;
    bool eq_valid;
    /* remat_search_index.c: its block is in the breaker index; its place
     * in the evictable set (REMAT_NONE: not in it); when it was last made
     * resident (the resident list's order); whether it may have changed
     * since the last search */
    bool breaking, dirty;
    uint32_t cand_pos;
    uint64_t resident_seq;
    unsigned flags;
    bool released;
    /* the record was reclaimed: it waits in the quarantine (its memory
     * still valid), so that a stale handle gets an error, not a crash */
    bool reclaimed;
    coop_tensor *prev_resident, *next_resident; /* base tensors holding memory */
    coop_tensor *next_all; /* every live record (for destroy), or the quarantine's order */
};

/* One tensor being rematerialized (remat.c's materialize): its inputs are
 * made resident one after the other, each pinned once it is; slots[slot ..
 * + num_inputs) of the context say which (non-NULL: pinned). An explicit
 * stack rather than recursion: a chain of evicted tensors can be as long as
 * the program, and the C stack is not. */
typedef struct remat_frame {
    coop_tensor *t;
    size_t slot; /* first of its slots in coop_remat.slots */
    size_t next; /* the input looked at next */
} remat_frame;

struct coop_remat {
    /* One thread at a time (remat.c, "One thread at a time"): the thread
     * inside one of the context's public calls (its token; 0: none),
     * claimed by compare-and-swap at the call's entry and cleared at its
     * return, and, for the message a second thread gets, that call's name
     * and the holder's pthread_self. Every other field is the holder's
     * alone. */
    _Atomic uintptr_t holder;
    _Atomic(const char *) holder_fn;
    _Atomic uintptr_t holder_self;
    coop_pool *pool;
    coop_remat_config cfg;
    uint64_t clock;
    /* a callback (on_evict, recompute) is running: the context's functions
     * refuse to run inside it (they would change what the caller walks) */
    uint32_t in_callback;
    remat_frame *frames; /* materialize's stack */
    size_t num_frames, cap_frames;
    /* coop_tensor_create_outputs is placing output placing_output (from 0)
     * of placing_outputs (0: it is not), which its messages name, counting
     * from 1 ("output 1 of 2") */
    size_t placing_output, placing_outputs;
    void **slots;
    size_t num_slots, cap_slots;
    /* the clock when each slot's input was pinned: when the frame's op
     * read it, if its recompute callback succeeds (remat.c's read_inputs) */
    uint64_t *slot_clocks;
    size_t cap_slot_clocks;
    coop_tensor *resident; /* list of resident base tensors */
    /* its length; the union-find always has room for that many more
     * nodes, so that evicting any of them (a release included, which
     * cannot fail) always finds one for its class */
    size_t num_resident;
    coop_tensor *all;
    /* remat_collect.c: live records, and how many trigger the next
     * collection; reclaimed records waiting to be freed (oldest first) */
    size_t num_records, collect_at;
    size_t collect_min; /* records before a collection at the least (0: the default) */
    /* union-find nodes at which remat_maybe_compact tries again (0: the
     * default minimum) */
    size_t compact_at;
    coop_tensor *quarantine, *quarantine_last;
    size_t num_quarantined;
    union_find uf;
    window_scratch scratch;
    coop_tensor **victims; /* evicted by the current allocation, for on_evict */
    size_t num_victims, cap_victims;
    /* the distinct class roots of the evicted neighbours the last c_eq
     * counted (complete unless host memory ran out) */
    uint32_t *roots;
    size_t num_roots, cap_roots;
    bool roots_complete;
    /* tensors' cached c_eq roots (coop_tensor.eq_first); slots only grow */
    uint32_t *eq_roots;
    size_t eq_roots_len, eq_roots_cap;
    bool eq_cache_off; /* walk at every c_eq (tests compare the two) */
    /* what searches skip (remat_search_index.c): coop policies, the blocks
     * that break windows, as runs (NULL: none kept, or dropped when host
     * memory ran out); argmin policies, the evictable tensors (cands_on,
     * else the resident list is walked); the tensors that may have changed
     * since the last search (tracked while either is kept) */
    breaker_index *breakers;
    coop_tensor **cands;
    size_t num_cands, cap_cands;
    bool cands_on, track;
    coop_tensor **dirty;
    size_t num_dirty, cap_dirty;
    uint64_t resident_seq; /* made resident so far */
    uint32_t comp_stamp;   /* the last component walk's (coop_tensor.comp_stamp) */
    uint32_t mark_epoch;
    coop_tensor **stack; /* traversal stack of the component walks */
    size_t cap_stack;
    uint64_t comp_walks; /* components walked (each again only once forgotten) */
    /* child links an in-place op read to move its target's producer links
     * to the old value (remat.c's redirect; tests: linear in the ops) */
    uint64_t link_scans;
    coop_remat_stats stats;
};

/* The policies that evict a window of blocks (remat_evict.c's
 * alloc_in_window, the breaker index) rather than one argmin at a time. */
static inline bool remat_policy_windowed(coop_remat_policy policy)
{
    return policy == COOP_REMAT_COOP || policy == COOP_REMAT_COOP_EQ ||
           policy == COOP_REMAT_COOP_COMP;
}

/* Evicted and in a union-find class: what c_eq and c_comp count. (A tensor
 * without a buffer and without a class is either a record whose creation
 * failed or an evicted one whose class could not be made for lack of host
 * memory: counted by neither.) */
static inline bool remat_is_evicted(const coop_tensor *t)
{
    return !t->ptr && t->uf != REMAT_NONE;
}

/* t's graph neighbours: its producer's inputs, then the tensors produced
 * from it (base tensors; repeats possible). */
static inline size_t remat_num_neighbours(const coop_tensor *t)
{
    return t->num_inputs + t->num_children;
}

static inline coop_tensor *remat_neighbour(const coop_tensor *t, size_t i)
{
    return i < t->num_inputs ? t->inputs[i] : t->children[i - t->num_inputs];
}

/* ---- remat_cost.c ---- */

/* Whether t's component label is current: t was stamped by the walk whose
 * stamp its label still carries. Every walk takes a new stamp, so members
 * a later walk did not reach (a split component) stay stale even when
 * their label heads a new component. */
static inline bool remat_comp_label_valid(const coop_tensor *t)
{
    return t->comp_stamp && t->comp_stamp == t->comp_label->comp_stamp;
}
/* Forgets the label of evicted tensor t's component (every member then
 * stale): call when the component changes, i.e. t is rematerialized (the
 * component may split), a neighbour of t is evicted (components merge), or
 * t's cost or edges change. A stale t is left alone: its label may head
 * another component by now. */
static inline void remat_comp_forget(coop_tensor *t)
{
    if (remat_comp_label_valid(t))
        t->comp_label->comp_stamp = 0;
}
/* c_eq (ns): t's cost plus its evicted neighbours' distinct union-find
 * classes (DTR-eq). From t's cached class roots when still valid (O(roots)
 * instead of a walk over its neighbours with a uf_find each), else by a
 * walk that caches them; the same value either way. */
int64_t remat_eq_compute(coop_remat *r, coop_tensor *t);
/* c_eq from t's cache alone: false (nothing computed) without a valid one
 * or when a cached root has joined another class since. The cache stays
 * right while no neighbour of t is evicted or rematerialized and t's edges
 * do not change (remat_eq_forget_around at each), and each cached root is
 * still a root (checked here): class values are read fresh. */
static inline bool remat_eq_cached(const coop_remat *r, const coop_tensor *t, int64_t *out)
{
    if (!t->eq_valid)
        return false;
    int64_t c = (int64_t)t->cost;
    for (uint32_t j = 0; j < t->eq_num_roots; j++) {
        uint32_t root = r->eq_roots[t->eq_first + j];
        if (!uf_is_root(&r->uf, root))
            return false;
        c = uf_value_add(c, r->uf.value[root]);
    }
    *out = c;
    return true;
}
/* Whether c_comp is c_eq for t: none of the classes its c_eq counts (its
 * valid cache, else the last walk's) had a member rematerialized. Call
 * right after remat_eq_compute(r, t) or a true remat_eq_cached. */
bool remat_classes_uncut(const coop_remat *r, const coop_tensor *t);
/* Forgets the cached c_eq of t and of its neighbours: call when t is
 * evicted or rematerialized, or its edges change. */
void remat_eq_forget_around(coop_tensor *t);
/* c_comp (ns): t's cost plus the cost of the evicted tensors connected to t
 * through evicted tensors. Equal to c_eq where none of t's neighbour
 * classes has had a member rematerialized (uf_is_cut), and then answered
 * by it; otherwise each evicted component walked is labelled and answered
 * by its label until remat_comp_forget is called for one of its members,
 * so one window search walks none twice. */
int64_t remat_component_compute(coop_remat *r, coop_tensor *t);

/* A new traversal stamp (coop_tensor.mark): every record's mark differs
 * from it (all are reset when the counter wraps). */
uint32_t remat_next_mark(coop_remat *r);
/* Pushes t on the traversal stack (r->stack, *len entries in use); -1 when
 * host memory runs out (nothing pushed). */
int remat_stack_push(coop_remat *r, size_t *len, coop_tensor *t);

/* ---- remat_live.c ---- */

/* c_live (ns), COOP_REMAT_COOP's cost (include/coop.h): t's cost plus
 * its evicted ancestors reached through evicted tensors plus its evicted
 * descendants reached through evicted tensors whose storage is still held
 * (handles > 0). Two walks at every call (no cache); t's own cost <= c_live
 * <= c_comp. Out of host memory a walk stops early and the value is a
 * lower bound. */
int64_t remat_live_compute(coop_remat *r, coop_tensor *t);
/* remat_live_compute as far as needed to tell whether c_live x weight is at
 * most limit: c_live with *complete set when it is; otherwise perhaps a
 * partial sum, with *complete false, whose product with weight is above
 * limit (the walks stop there: one tensor's walk through a long evicted
 * chain need not finish to lose). weight > 0, or limit INFINITY. */
int64_t remat_live_compute_upto(coop_remat *r, coop_tensor *t, double weight, double limit,
                                bool *complete);
/* A lower bound of c_live from t's neighbours alone (O(neighbours), no
 * walk): t's cost plus its distinct evicted inputs and its distinct held
 * evicted children. *exact when t has no evicted neighbour, where c_live
 * is t's cost. */
int64_t remat_live_bound(coop_remat *r, coop_tensor *t, bool *exact);

/* ---- remat_search_index.c ---- */

/* The breaker index (coop policies) or the evictable set (argmin
 * policies) of a new context; without memory for one, searches walk every
 * block or every resident tensor. */
void remat_search_index_open(coop_remat *r);
/* Frees both (also how they are dropped: searches walk everything). */
void remat_search_index_close(coop_remat *r);
void remat_mark_dirty(coop_remat *r, coop_tensor *t);
/* Whether t breaks windows or may be evicted may have changed (its buffer,
 * pins, release): the next search looks at it. */
static inline void remat_touch(coop_remat *r, coop_tensor *t)
{
    if (r->track && !t->dirty)
        remat_mark_dirty(r, t);
}
/* Takes t out of both (pool lock held) before its buffer is freed or
 * handed over. */
void remat_search_index_forget_locked(coop_remat *r, coop_tensor *t);
/* Takes t out of both and out of the tensors touched (pool lock held):
 * t's record is about to be freed (remat_discard_locked). */
void remat_search_index_drop_locked(coop_remat *r, coop_tensor *t);
/* Brings both up to date with the tensors touched (pool lock held): call
 * before a search. */
void remat_search_index_sync_locked(coop_remat *r);

/* A pin of base tensor t; pins going to or from 0 touch its breaking. */
static inline void remat_pin(coop_remat *r, coop_tensor *t)
{
    if (!t->pins++)
        remat_touch(r, t);
}

static inline void remat_unpin(coop_remat *r, coop_tensor *t)
{
    if (!--t->pins)
        remat_touch(r, t);
}

/* Advances the logical clock by ns, saturating (costs are at most
 * COOP_TENSOR_MAX_COST_NS, so only an absurdly long run gets there). */
static inline void remat_advance_clock(coop_remat *r, uint64_t ns)
{
    r->clock = saturating_add_u64(r->clock, ns);
}

/* ---- remat_collect.c ---- */

/* Reclaims the records no recomputation can need any more, once enough
 * records were made since the last collection (amortized O(1) a record):
 * call at the start of an API call that makes records. */
void remat_maybe_collect(coop_remat *r);
/* Compacts the union-find once enough nodes were made since the last
 * compaction (amortized O(1) a node): every eviction makes one and a
 * recomputation frees none, so a loop that only reads held tensors, which
 * makes no record and so triggers no collection, would otherwise grow it
 * by a node per eviction. Call where no node number is held across it:
 * at the start of an API call that may evict. */
void remat_maybe_compact(coop_remat *r);
/* Error for an API call on a reclaimed record (fn names the call). */
coop_status remat_reclaimed_error(const char *fn, const char *what, const coop_tensor *t);
/* Frees the quarantine's records (destroy). */
void remat_quarantine_free(coop_remat *r);

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
/* Undoes t's placement (pool lock held), as if it had never been made
 * resident: its buffer freed without an eviction (no union-find class, no
 * notice, no count), t out of the search index. For a record a failed
 * call made and no handle names, freed next (remat.c's discard_record). */
void remat_discard_locked(coop_remat *r, coop_tensor *t);

/* Room in the union-find for n more nodes beyond one for every resident
 * tensor (num_resident): 0, or -1 when host memory ran out. */
int remat_reserve_nodes(coop_remat *r, size_t n);
/* Room for n more evictions (victim slots and union-find nodes), taken
 * before the first of them so that none can fail half-way: 0, or -1 when
 * host memory ran out (remat_evict.c). */
int remat_reserve_evictions(coop_remat *r, size_t n);

/* Bookkeeping when t becomes resident again (leaves its class). */
void remat_make_resident(coop_remat *r, coop_tensor *t, void *ptr);
/* The API call this thread is serving on r (the claim's name), for the
 * messages of failures deep inside it; "coop_remat" outside any call. */
static inline const char *remat_call_name(const coop_remat *r)
{
    const char *fn = atomic_load_explicit(&r->holder_fn, memory_order_relaxed);
    return fn ? fn : "coop_remat";
}
/* Names t for a message of the call serving r: "a tensor of N bytes" for
 * a new one (not recomputing), else "tensor P (N bytes)", with ", an input
 * recomputed for tensor Q" when Q, the tensor the owner asked for, is
 * another (recomputing: materialize's stack holds Q at the bottom, or t is
 * to be pushed as the first frame). Returns buf. */
const char *remat_describe(const coop_remat *r, const coop_tensor *t, bool recomputing, char *buf,
                           size_t size);
/* How the call serving r names a new tensor of bytes (no record needed:
 * a failed one has none): "output I of N (BYTES bytes)" while
 * coop_tensor_create_outputs places output I (from 1) of N, else "a tensor
 * of BYTES bytes". remat_describe's words when not recomputing. Returns
 * buf. */
const char *remat_describe_new(const coop_remat *r, size_t bytes, char *buf, size_t size);
/* The length remat_describe and remat_describe_new need. */
#define REMAT_DESCRIBE_MAX 128
/* host memory ran out while the call serving r was doing what: the
 * message "<call>: out of host memory <what...>", formatted. */
coop_status remat_host_nomem(const coop_remat *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), cold));
/* The pool refused (st: host memory, metadata or backend; not room) to
 * place t for the call serving r: the pool's message, prefixed with the
 * call and t (remat_describe, recomputing when materialize runs). */
coop_status remat_placing_failed(const coop_remat *r, const coop_tensor *t, coop_status st)
    __attribute__((cold));
bool remat_evictable(const coop_tensor *t);
/* Gives resident t back the order of being made resident it had as seq
 * (its resident_seq then), which ties between equal scores follow: after
 * a hand-over undone (a copy-on-write coop_tensor_mutate that failed), as
 * if t had never moved. O(resident tensors): failure paths only. */
void remat_restore_resident_seq(coop_remat *r, coop_tensor *t, uint64_t seq);
/* Moves from's buffer (resident) to to, which must have none; to is made
 * resident now (the newest: a new resident_seq). */
void remat_hand_over(coop_remat *r, coop_tensor *from, coop_tensor *to);
/* Runs on_evict for the victims collected, then forgets them. */
void remat_notify_victims(coop_remat *r);

#endif
