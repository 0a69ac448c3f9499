/*
 * The remat API: tensor records, access and recomputation, pins, views,
 * in-place ops (include/coop.h, rematerialization section).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "pool_fork.h"
#include "remat/remat_internal.h"
#include "status.h"

#define DEFAULT_CHEAP_THRESHOLD 1e-2 /* ns per byte: see docs/remat.md */
#define REMAT_SCRATCH_BLOCKS 1024    /* blocks a search walks without growing */

/* ---- one thread at a time ----------------------------------------------- */

/* A context is one thread's at a time (coop.h). Each public call claims it
 * for its thread: a compare-and-swap of holder from 0 (acquire: it sees
 * every change of the thread before), cleared when the call returns
 * (release). A second thread finds it claimed and is refused with
 * COOP_ERR_BUSY before it reads any other field, so the holder's state is
 * left to the holder; without the claim the two would interleave over the
 * records, the union-find and the scratch arrays unseen. The holder's own
 * thread finds itself: a call from inside a callback (enter() refuses it;
 * the queries and coop_remat_get_stats answer) or the context's own use of
 * a public call (create_outputs' release of its outputs); it does not
 * claim again, so only the outermost call clears the claim.
 *
 * A thread is told by a token of its own, not by pthread_self: glibc hands
 * a dead thread's stack, and with it its pthread_t, to the next thread
 * created, and in a child forked while another thread held a context that
 * next thread would pass for the holder re-entering and walk records left
 * mid-call. Tokens are drawn once a thread from a counter that only grows
 * (a forked child goes on from the parent's count), so no two threads of a
 * process, living or dead, share one. pthread_self is kept beside, for the
 * message only. */
static _Atomic uintptr_t next_token = 1;
static _Thread_local uintptr_t my_token;

static inline uintptr_t this_thread(void)
{
    if (__builtin_expect(!my_token, 0))
        my_token = atomic_fetch_add_explicit(&next_token, 1, memory_order_relaxed);
    return my_token;
}

_Static_assert(sizeof(pthread_t) <= sizeof(uintptr_t), "pthread_t fits an integer");

static inline uintptr_t this_pthread(void)
{
    return (uintptr_t)pthread_self();
}

/* fn's refusal: another thread, in holder_fn, has the context. Formatted
 * only on failure. The holder's call and pthread_self are read as they
 * stand, and may have changed by the time the message is read. */
static __attribute__((cold, noinline)) coop_status claimed_error(const coop_remat *r,
                                                                 const char *fn)
{
    const char *in = atomic_load_explicit(&r->holder_fn, memory_order_relaxed);
    uintptr_t holder = atomic_load_explicit(&r->holder_self, memory_order_relaxed);
    return coop_set_error(COOP_ERR_BUSY,
                          "%s: the context is in use by another thread (thread %#lx, in %s; "
                          "this is thread %#lx): a coop_remat context is one thread's at a "
                          "time; nothing was done",
                          fn, (unsigned long)holder, in ? in : "one of its calls",
                          (unsigned long)this_pthread());
}

/* Claims r for this thread at the entry of fn: COOP_OK, *taken true when
 * this call took the claim (it must call unclaim), false when this thread
 * already held it (or r is NULL, for enter() to refuse); COOP_ERR_BUSY,
 * nothing done, when another thread holds it. */
static inline coop_status claim(coop_remat *r, const char *fn, bool *taken)
{
    *taken = false;
    if (!r)
        return COOP_OK;
    uintptr_t me = this_thread(), held = 0;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(
                             &r->holder, &held, me, memory_order_acquire, memory_order_relaxed),
                         1)) {
        atomic_store_explicit(&r->holder_fn, fn, memory_order_relaxed);
        atomic_store_explicit(&r->holder_self, this_pthread(), memory_order_relaxed);
        *taken = true;
        return COOP_OK;
    }
    if (held == me)
        return COOP_OK;
    return claimed_error(r, fn);
}

static inline void unclaim(coop_remat *r, bool taken)
{
    if (taken)
        atomic_store_explicit(&r->holder, 0, memory_order_release);
}

/* The queries' claim, on t's context: false (answer nothing) for a NULL t
 * or a context another thread holds. */
static inline bool claim_tensor(const coop_tensor *t, const char *fn, bool *taken)
{
    *taken = false;
    return t && !claim(t->owner, fn, taken);
}

/* Checks the context at the entry of fn. Callbacks run inside the
 * context's calls, in the middle of walks over its records (the window's
 * victims, a chain of recomputations): a call from one would change what
 * the caller is walking, so it is refused rather than left undefined. */
static coop_status enter(const coop_remat *r, const char *fn)
{
    if (!r)
        return coop_set_error(COOP_ERR_INVALID, "%s: the context is NULL", fn);
    if (r->in_callback)
        return coop_set_error(COOP_ERR_BUSY,
                              "%s: called from inside a coop_remat callback (on_evict or "
                              "recompute), which must not call the context's functions",
                              fn);
    /* its every call would map, evict or free in the pool, whose lock a
     * walk of this thread would hold */
    return pool_refuse_change(r->pool, fn);
}

/* The error for a handle check_handle refused, named as there. Formatted
 * only on failure: the checks run at every call. */
static __attribute__((cold, noinline)) coop_status handle_error(const coop_remat *r,
                                                                const coop_tensor *t,
                                                                const char *fn, const char *what,
                                                                size_t index)
{
    char name[48];
    if (index == SIZE_MAX)
        snprintf(name, sizeof name, "%s", what);
    else
        snprintf(name, sizeof name, "%s %zu", what, index);
    if (!t)
        return coop_set_error(COOP_ERR_INVALID, "%s: %s is NULL", fn, name);
    if (t->owner != r)
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: %s (%p) belongs to another coop_remat (%p, not %p)", fn, name,
                              (const void *)t, (const void *)t->owner, (const void *)r);
    if (t->reclaimed)
        return remat_reclaimed_error(fn, name, t);
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: %s (%p) was released (used after coop_tensor_release)", fn, name,
                          (const void *)t);
}

/* Checks a tensor handle given to fn: what names the argument ("tensor",
 * "base", "input"), index its place among the inputs (SIZE_MAX: none). */
static inline coop_status check_handle(const coop_remat *r, const coop_tensor *t, const char *fn,
                                       const char *what, size_t index)
{
    if (t && t->owner == r && !t->reclaimed && !t->released)
        return COOP_OK;
    return handle_error(r, t, fn, what, index);
}

static coop_status check_cost(uint64_t cost_ns, const char *fn)
{
    if (cost_ns > COOP_TENSOR_MAX_COST_NS)
        return coop_set_error(
            COOP_ERR_INVALID, "%s: cost %llu ns is above COOP_TENSOR_MAX_COST_NS (%llu)", fn,
            (unsigned long long)cost_ns, (unsigned long long)COOP_TENSOR_MAX_COST_NS);
    return COOP_OK;
}

coop_status coop_remat_create(coop_pool *pool, const coop_remat_config *config, coop_remat **out)
{
    if (!out)
        return coop_set_error(COOP_ERR_INVALID, "coop_remat_create: out is NULL");
    *out = NULL;
    if (!pool || !config || !config->recompute)
        return coop_set_error(COOP_ERR_INVALID, "coop_remat_create: %s is NULL (required)",
                              !pool     ? "pool"
                              : !config ? "config"
                                        : "config->recompute");
    if (pool_forked(pool))
        return pool_forked_error(pool, "coop_remat_create");
    if ((unsigned)config->policy > COOP_REMAT_COOP_COMP)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_remat_create: config->policy %d is not a coop_remat_policy",
                              (int)config->policy);
    if (isnan(config->cheap_threshold)) /* compares false with every cost per byte */
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_remat_create: cheap_threshold is NaN (< 0 turns "
                              "partitioning off, 0 selects the default)");
    coop_remat *r = calloc(1, sizeof *r);
    if (!r)
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "coop_remat_create: out of host memory for a context (%zu bytes)",
                              sizeof *r);
    atomic_init(&r->holder, 0);
    atomic_init(&r->holder_fn, NULL);
    atomic_init(&r->holder_self, 0);
    r->pool = pool;
    r->cfg = *config;
    if (r->cfg.cheap_threshold == 0)
        r->cfg.cheap_threshold = DEFAULT_CHEAP_THRESHOLD;
    r->clock = 1;
    remat_search_index_open(r);
    if (remat_policy_windowed(r->cfg.policy)) {
        /* the window search's arrays (64 bytes a block), pages touched now
         * rather than grown inside the first searches; larger searches
         * still grow them */
        (void)window_scratch_reserve(&r->scratch, REMAT_SCRATCH_BLOCKS);
    }
    *out = r;
    return COOP_OK;
}

void coop_remat_destroy(coop_remat *r)
{
    /* NULL: nothing to do; from a callback: refused (the call running it
     * still walks the context's records), the message set. On a forked
     * child's copy of a CUDA pool, the records are freed and the blocks
     * left as they are (the pool refuses every change) */
    if (!r)
        return;
    bool taken;
    if (claim(r, "coop_remat_destroy", &taken))
        return; /* another thread is inside it: refused, the message set */
    bool forked = pool_forked(r->pool);
    coop_status st = COOP_OK;
    if (r->in_callback || !forked)
        st = enter(r, "coop_remat_destroy");
    else if (pool_walked_here(r->pool))
        /* a forked child's copy is not refused as forked, but a walk of it
         * (the child forked in a visitor) holds its lock, taken below */
        st = pool_walk_reentry_error("coop_remat_destroy");
    if (st != COOP_OK) {
        unclaim(r, taken);
        return;
    }
    remat_search_index_close(r); /* before the blocks it names are freed */
    pool_lock(r->pool);
    for (coop_tensor *t = r->all, *next; t; t = next) {
        next = t->next_all;
        if (t->base == t && t->ptr && !forked) /* coop_free refuses a tensor's block */
            (void)pool_free_locked(r->pool, t->ptr, NULL);
        free(t->inputs);
        free(t->children);
        free(t);
    }
    pool_unlock(r->pool);
    remat_quarantine_free(r);
    uf_free(&r->uf);
    window_scratch_free(&r->scratch);
    free(r->victims);
    free(r->roots);
    free(r->eq_roots);
    free(r->stack);
    free(r->frames);
    free(r->slots);
    free(r->slot_clocks);
    free(r);
}

void coop_remat_get_stats(const coop_remat *r, coop_remat_stats *out)
{
    if (!out)
        return;
    /* the claim is the context's only mutable part a reader changes: r
     * was allocated by coop_remat_create, never defined const */
    coop_remat *held = (coop_remat *)r;
    bool taken;
    if (!r || claim(held, "coop_remat_get_stats", &taken)) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = r->stats;
    out->clock = r->clock;
    out->records = r->num_records;
    unclaim(held, taken);
}

size_t coop_tensor_size(const coop_tensor *t)
{
    bool taken;
    if (!claim_tensor(t, "coop_tensor_size", &taken))
        return 0;
    size_t size = t->base->size;
    unclaim(t->owner, taken);
    return size;
}

uint32_t coop_tensor_recomputes(const coop_tensor *t)
{
    bool taken;
    if (!claim_tensor(t, "coop_tensor_recomputes", &taken))
        return 0;
    uint32_t remats = t->base->remats;
    unclaim(t->owner, taken);
    return remats;
}

bool coop_tensor_resident(const coop_tensor *t)
{
    bool taken;
    if (!claim_tensor(t, "coop_tensor_resident", &taken))
        return false;
    bool resident = t->base->ptr != NULL;
    unclaim(t->owner, taken);
    return resident;
}

void *coop_tensor_data(const coop_tensor *t)
{
    bool taken;
    if (!claim_tensor(t, "coop_tensor_data", &taken))
        return NULL;
    void *ptr = t->base->ptr;
    unclaim(t->owner, taken);
    return ptr;
}

/* ---- records ---------------------------------------------------------- */

/* Room for `more` children beyond parent's: 0, or -1 out of host memory. */
static int reserve_children(coop_tensor *parent, size_t more)
{
    return GROW_ARRAY(parent->children, parent->cap_children, parent->num_children + more, 4);
}

static int add_child(coop_tensor *parent, coop_tensor *child)
{
    if (reserve_children(parent, 1))
        return -1;
    parent->children[parent->num_children++] = child;
    return 0;
}

/* Takes child's last link out of parent's children (undoing add_child). */
static void remove_last_child(coop_tensor *parent, const coop_tensor *child)
{
    for (size_t i = parent->num_children; i-- > 0;)
        if (parent->children[i] == child) {
            memmove(&parent->children[i], &parent->children[i + 1],
                    (parent->num_children - i - 1) * sizeof *parent->children);
            parent->num_children--;
            return;
        }
}

static coop_tensor *new_record(coop_remat *r)
{
    coop_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->base = t;
    t->owner = r;
    t->uf = REMAT_NONE;
    t->cand_pos = REMAT_NONE;
    t->next_all = r->all;
    r->all = t;
    r->num_records++;
    return t;
}

/* Frees the record of a failed call, which no handle names (it was never
 * returned): its buffer (remat_discard_locked: no eviction), its links
 * from its inputs, the record itself. The call then leaves the records and
 * their count as it found them, rather than an unreachable record for the
 * next collection. */
static void discard_record(coop_remat *r, coop_tensor *t)
{
    pool_lock(r->pool);
    remat_discard_locked(r, t);
    pool_unlock(r->pool);
    for (size_t i = t->num_inputs; i-- > 0;)
        remove_last_child(t->inputs[i], t);
    coop_tensor **link = &r->all; /* the newest records: at the head */
    while (*link != t)
        link = &(*link)->next_all;
    *link = t->next_all;
    r->num_records--;
    free(t->inputs);
    free(t->children);
    free(t);
}

/* Sets t's producer: cost, opaque op and input bases (children links too).
 * first (an in-place op's old value, else NULL) is input 0, and stands for
 * t wherever t itself is among inputs: an in-place op that reads its own
 * target (x.mul_(x)) reads the old value, and t must never be its own
 * input (recomputing it would recurse without end). 0, or -1 out of host
 * memory (nothing changed; the caller, which knows the call, says so). */
static int set_producer(coop_tensor *t, uint64_t cost, void *producer, coop_tensor *first,
                        coop_tensor *const *inputs, size_t n, coop_tensor **in)
{
    /* in: room for the inputs (prepare_in_place's), else allocated here */
    size_t total = n + (first != NULL);
    if (!in && total && !(in = malloc(total * sizeof *in)))
        return -1;
    size_t k = 0;
    if (first)
        in[k++] = first;
    for (size_t i = 0; i < n; i++)
        in[k++] = first && inputs[i]->base == t ? first : inputs[i]->base;
    for (size_t i = 0; i < total; i++)
        if (add_child(in[i], t)) {
            /* the links made so far go too: an input must not keep a
             * consumer whose producer does not read it */
            while (i-- > 0)
                remove_last_child(in[i], t);
            free(in);
            return -1;
        }
    /* edges change: t's c_eq cache goes; its inputs' stay, as t (new, or
     * resident in place) counts in nobody's c_eq until it is evicted, and
     * its eviction forgets them (an evicted t: both neighbourhoods go) */
    if (remat_is_evicted(t))
        remat_eq_forget_around(t);
    t->eq_valid = false;
    /* Components: t is a new record or a resident base (coop_tensor_mutate
     * accesses it first), first a new record (not evicted) and the inputs
     * resident (check_resident), so no edge here joins two evicted tensors
     * and no evicted tensor's cost changes: every label stands. Were t
     * evicted, its component (losing the old edges, t's cost changing)
     * and the inputs' (joined to it) would go. */
    if (remat_is_evicted(t)) {
        remat_comp_forget(t);
        for (size_t i = 0; i < total; i++)
            remat_comp_forget(in[i]);
    }
    free(t->inputs);
    t->inputs = in;
    t->num_inputs = total;
    if (remat_is_evicted(t))
        remat_eq_forget_around(t);
    t->cost = cost;
    t->producer = producer;
    return 0;
}

/* Refuses a NULL inputs array with n > 0. */
static coop_status check_input_array(coop_tensor *const *inputs, size_t n, const char *fn)
{
    if (n && !inputs)
        return coop_set_error(COOP_ERR_INVALID, "%s: inputs is NULL with num_inputs %zu", fn, n);
    return COOP_OK;
}

/* Checks fn's inputs as handles (before anything changes). */
static coop_status check_inputs(const coop_remat *r, coop_tensor *const *inputs, size_t n,
                                const char *fn)
{
    coop_status st = check_input_array(inputs, n, fn);
    if (st)
        return st;
    for (size_t i = 0; i < n && st == COOP_OK; i++)
        st = check_handle(r, inputs[i], fn, "input", i);
    return st;
}

/* Whether fn's inputs (checked handles) are resident; except names a
 * storage left out (mutate's target, made resident after). */
static coop_status check_resident(coop_tensor *const *inputs, size_t n, const coop_tensor *except,
                                  const char *fn)
{
    for (size_t i = 0; i < n; i++)
        if (!inputs[i]->base->ptr && inputs[i]->base != except)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: input %zu (%p) is not resident (access or pin it first)", fn,
                                  i, (const void *)inputs[i]);
    return COOP_OK;
}

/* An op's inputs (handles) stay resident while its outputs are placed:
 * one pin on each input's storage, per input slot, undone by unpin_inputs
 * with the same array. */
static void pin_inputs(coop_remat *r, coop_tensor *const *inputs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        remat_pin(r, inputs[i]->base);
}

static void unpin_inputs(coop_remat *r, coop_tensor *const *inputs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        remat_unpin(r, inputs[i]->base);
}

/* The op read its inputs now (their staleness restarts). Not remat_touch,
 * which marks a tensor for the search index. */
static void mark_inputs_read(coop_remat *r, coop_tensor *const *inputs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        inputs[i]->base->last_access = r->clock;
}

/* fn ran out of host memory recording the output being placed (size
 * bytes; named by remat_describe_new), or linking it to its inputs.
 * coop_set_error here, not remat_host_nomem (another file): a static
 * analyser sees that the status is not COOP_OK, as the caller relies on. */
static __attribute__((cold, noinline)) coop_status
output_host_nomem(const coop_remat *r, const char *fn, size_t size, bool linking, size_t inputs)
{
    char out[REMAT_DESCRIBE_MAX];
    remat_describe_new(r, size, out, sizeof out);
    if (linking)
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "%s: out of host memory linking %s to its %zu %s", fn, out, inputs,
                              inputs == 1 ? "input" : "inputs");
    return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of host memory recording %s", fn, out);
}

/* Refuses outputs whose sizes, rounded up as the pool places them, add up
 * past the pool's capacity: each output stays pinned while the next is
 * placed, so no placement can hold them all, and placing the first ones
 * would evict tensors (on_evict told) only to fail. One output larger than
 * the capacity is remat_alloc's to refuse (nothing evicted either). */
static coop_status check_outputs_fit(coop_remat *r, const char *fn, size_t n, const size_t *sizes)
{
    if (n < 2)
        return COOP_OK;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = sizes[i]; /* rounded short of wrapping; the sum saturates */
        uint64_t rounded = size > UINT64_MAX - (COOP_ALIGN - 1)
                               ? UINT64_MAX
                               : (size + COOP_ALIGN - 1) / COOP_ALIGN * COOP_ALIGN;
        sum = saturating_add_u64(sum, rounded);
    }
    pool_lock(r->pool); /* coop_set_capacity may change it from another thread */
    uint64_t capacity = pool_arena(r->pool)->params.capacity;
    pool_unlock(r->pool);
    if (sum <= capacity)
        return COOP_OK;
    return coop_set_error(COOP_ERR_NOMEM,
                          "%s: the %zu outputs' sizes, each rounded up to %u bytes, add up to "
                          "%s%llu bytes, past the pool's capacity of %llu bytes: no placement "
                          "can hold them all (nothing evicted)",
                          fn, n, (unsigned)COOP_ALIGN, sum == UINT64_MAX ? "at least " : "",
                          (unsigned long long)sum, (unsigned long long)capacity);
}

/* Whether the outs array (n outputs) overlaps the inputs array. Compared
 * as integers: relational operators on unrelated arrays are undefined. */
static bool outs_overlap_inputs(coop_tensor *const *outs, size_t n, coop_tensor *const *inputs,
                                size_t num_inputs)
{
    uintptr_t o = (uintptr_t)outs, in = (uintptr_t)inputs;
    return num_inputs && inputs && o < in + num_inputs * sizeof *inputs &&
           in < o + n * sizeof *outs;
}

/* coop_tensor_create_outputs, its messages naming fn (the public call),
 * the context claimed. single: the call is coop_tensor_create, whose one
 * output and its size are arguments of their own ("out", "size"). */
static coop_status create_outputs_claimed(coop_remat *r, const char *fn, bool single,
                                          size_t num_outputs, const size_t *sizes, uint64_t cost_ns,
                                          void *producer, coop_tensor *const *inputs,
                                          size_t num_inputs, unsigned flags, coop_tensor **outs)
{
    coop_status st = enter(r, fn);
    if (st)
        return st;
    if (!outs || !num_outputs || !sizes)
        return coop_set_error(COOP_ERR_INVALID, "%s: %s", fn,
                              !outs          ? "outs is NULL"
                              : !num_outputs ? "num_outputs is 0"
                                             : "sizes is NULL");
    if ((st = check_input_array(inputs, num_inputs, fn))) /* before the overlap test */
        return st;
    if (outs_overlap_inputs(outs, num_outputs, inputs, num_inputs))
        return coop_set_error(COOP_ERR_INVALID, "%s: %s overlaps inputs", fn,
                              single ? "out" : "outs");
    for (size_t i = 0; i < num_outputs; i++)
        if (!sizes[i]) {
            if (single)
                return coop_set_error(COOP_ERR_INVALID, "%s: size is 0", fn);
            return coop_set_error(COOP_ERR_INVALID, "%s: sizes[%zu] is 0", fn, i);
        }
    const unsigned known = COOP_TENSOR_EVICTABLE | COOP_TENSOR_CHEAP;
    if (flags & ~known)
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: unknown flags %#x in %#x (known: COOP_TENSOR_EVICTABLE %#x, "
                              "COOP_TENSOR_CHEAP %#x)",
                              fn, flags & ~known, flags, (unsigned)COOP_TENSOR_EVICTABLE,
                              (unsigned)COOP_TENSOR_CHEAP);
    if ((st = check_cost(cost_ns, fn)) || (st = check_inputs(r, inputs, num_inputs, fn)))
        return st;
    if ((st = check_resident(inputs, num_inputs, NULL, fn)))
        return st;
    if (!single && (st = check_outputs_fit(r, fn, num_outputs, sizes)))
        return st;
    /* after the checks: a refused call reclaims no record */
    remat_maybe_collect(r);            /* live inputs are kept */
    pin_inputs(r, inputs, num_inputs); /* the op reads them while its outputs are placed */
    size_t made = 0;
    coop_tensor *failed = NULL; /* the output whose record or placement failed */
    for (; made < num_outputs; made++) {
        r->placing_output = made;
        r->placing_outputs = single ? 0 : num_outputs;
        coop_tensor *t = new_record(r);
        if (!t) {
            st = output_host_nomem(r, fn, sizes[made], false, 0);
            break;
        }
        t->size = sizes[made];
        t->flags = flags;
        t->handles = 1;
        if (set_producer(t, cost_ns, producer, NULL, inputs, num_inputs, NULL))
            st = output_host_nomem(r, fn, sizes[made], true, num_inputs);
        else
            st = remat_alloc(r, t);
        if (st) {
            failed = t;
            break;
        }
        remat_pin(r, t); /* placed: placing the next output must not evict it */
        outs[made] = t;
    }
    r->placing_outputs = 0;
    unpin_inputs(r, inputs, num_inputs);
    for (size_t i = 0; i < made; i++)
        remat_unpin(r, outs[i]);
    if (st) {
        /* the op did not run: its records go (newest first), the inputs
         * are not marked read, the clock stays (what was evicted to place
         * the outputs stays evicted, coop.h) */
        if (failed)
            discard_record(r, failed);
        for (size_t i = made; i-- > 0;) {
            discard_record(r, outs[i]);
            outs[i] = NULL;
        }
        return st;
    }
    mark_inputs_read(r, inputs, num_inputs); /* the op read them, at its start */
    remat_advance_clock(r, cost_ns);         /* the op ran once */
    for (size_t i = 0; i < num_outputs; i++)
        outs[i]->last_access = r->clock;
    return COOP_OK;
}

static coop_status create_outputs(coop_remat *r, bool single, size_t num_outputs,
                                  const size_t *sizes, uint64_t cost_ns, void *producer,
                                  coop_tensor *const *inputs, size_t num_inputs, unsigned flags,
                                  coop_tensor **outs)
{
    const char *fn = single ? "coop_tensor_create" : "coop_tensor_create_outputs";
    /* every refusal leaves the outputs NULL, those before the context's
     * checks too (a NULL context, a callback's call, another thread's);
     * outs overlapping inputs is refused without writing the inputs */
    if (outs && !outs_overlap_inputs(outs, num_outputs, inputs, num_inputs))
        for (size_t i = 0; i < num_outputs; i++)
            outs[i] = NULL;
    bool taken;
    coop_status st = claim(r, fn, &taken);
    if (st)
        return st;
    st = create_outputs_claimed(r, fn, single, num_outputs, sizes, cost_ns, producer, inputs,
                                num_inputs, flags, outs);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_create(coop_remat *r, size_t size, uint64_t cost_ns, void *producer,
                               coop_tensor *const *inputs, size_t num_inputs, unsigned flags,
                               coop_tensor **out)
{
    if (!out) /* the rest is create_outputs' to check */
        return coop_set_error(COOP_ERR_INVALID, "coop_tensor_create: out is NULL");
    return create_outputs(r, true, 1, &size, cost_ns, producer, inputs, num_inputs, flags, out);
}

coop_status coop_tensor_create_outputs(coop_remat *r, size_t num_outputs, const size_t *sizes,
                                       uint64_t cost_ns, void *producer, coop_tensor *const *inputs,
                                       size_t num_inputs, unsigned flags, coop_tensor **outs)
{
    return create_outputs(r, false, num_outputs, sizes, cost_ns, producer, inputs, num_inputs,
                          flags, outs);
}

static coop_status tensor_alias(coop_remat *r, coop_tensor *base, coop_tensor **out)
{
    static const char fn[] = "coop_tensor_alias";
    coop_status st = enter(r, fn);
    if (st)
        return st;
    if (!out)
        return coop_set_error(COOP_ERR_INVALID, "%s: out is NULL", fn);
    /* the handle given must be live; its storage's root may have been
     * released while views (this one) still name the storage */
    if ((st = check_handle(r, base, fn, "base", SIZE_MAX)))
        return st;
    remat_maybe_collect(r); /* base is held, so kept */
    coop_tensor *v = new_record(r);
    if (!v)
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "%s: out of host memory for a view of tensor %p (%zu bytes)", fn,
                              (void *)base, base->base->size);
    v->base = base->base;
    v->base->handles++;
    *out = v;
    return COOP_OK;
}

/* ---- recomputation ------------------------------------------------------ */

/* Whether recomputing t, produced in place, may rebuild it inside its old
 * value's buffer (resident now: t's inputs are): as when the op first ran,
 * only if nothing else can observe the old value, i.e. nothing but t's own
 * recomputation pins it (a hidden record has no handles). */
static bool takes_over_old_value(const coop_tensor *t)
{
    if (!t->in_place)
        return false;
    const coop_tensor *old = t->inputs[0];
    uint32_t own = 0;
    for (size_t i = 0; i < t->num_inputs; i++)
        own += t->inputs[i] == old;
    return old->ptr && !old->handles && old->pins == own && old->size == t->size;
}

/* Frame f's slots (NULL before any frame had an input: no array yet, and
 * NULL + 0 is undefined). */
static void **frame_slots(const coop_remat *r, const remat_frame *f)
{
    return r->slots ? r->slots + f->slot : NULL;
}

/* Pins input i of frame f, resident. It is read now, if the frame's
 * recompute callback succeeds: the clock is kept for finish_frame to mark
 * it read (read_inputs), so that a recomputation that fails leaves its
 * inputs' last accesses as they were. Nothing reads a pinned tensor's last
 * access meanwhile (only an eviction candidate's is read). */
static inline void pin_slot(coop_remat *r, const remat_frame *f, size_t i, coop_tensor *in)
{
    remat_pin(r, in);
    r->slots[f->slot + i] = in;
    r->slot_clocks[f->slot + i] = r->clock;
}

/* Frame f's recompute callback succeeded: its inputs were read, each when
 * it was pinned. The latest read stands: a frame above may have read the
 * same input later, and finished first. */
static void read_inputs(coop_remat *r, const remat_frame *f)
{
    const coop_tensor *t = f->t;
    for (size_t i = 0; i < t->num_inputs; i++) {
        uint64_t at = r->slot_clocks[f->slot + i];
        if (t->inputs[i]->last_access < at)
            t->inputs[i]->last_access = at;
    }
}

/* Pushes a frame to make base tensor t (not resident) resident: its
 * resident inputs are pinned at once, so that recomputing a missing one
 * cannot evict them (only to recompute them next), as DTR locks an op's
 * inputs. */
static coop_status push_frame(coop_remat *r, coop_tensor *t)
{
    if (GROW_ARRAY(r->frames, r->cap_frames, r->num_frames + 1, 16) ||
        GROW_ARRAY(r->slots, r->cap_slots, r->num_slots + t->num_inputs, 64) ||
        GROW_ARRAY(r->slot_clocks, r->cap_slot_clocks, r->num_slots + t->num_inputs, 64)) {
        char who[REMAT_DESCRIBE_MAX];
        return remat_host_nomem(r, "recomputing %s, chain depth %zu",
                                remat_describe(r, t, true, who, sizeof who), r->num_frames + 1);
    }
    remat_frame *f = &r->frames[r->num_frames++];
    f->t = t;
    f->slot = r->num_slots;
    f->next = 0;
    void **pinned = frame_slots(r, f);
    r->num_slots += t->num_inputs;
    for (size_t i = 0; i < t->num_inputs; i++) {
        coop_tensor *in = t->inputs[i];
        pinned[i] = NULL;
        if (in->ptr)
            pin_slot(r, f, i, in);
    }
    return COOP_OK;
}

/* The recompute callback failed for t (placed, inputs pinned): t goes back
 * to evicted, its buffer freed (it holds whatever the callback left), so
 * that no access returns it as a value and the next one recomputes it. Its
 * eviction is nobody's news: the owner never had this buffer. refused: a
 * library call the callback made failed (coop_error_count moved), whose
 * message, saying what was refused and why, the new one quotes. */
static coop_status recompute_failed(coop_remat *r, coop_tensor *t, coop_status failed, bool refused)
{
    coop_error_kept inner;
    if (refused)
        coop_error_keep(&inner);
    pool_lock(r->pool);
    remat_evict_locked(r, t); /* a union-find node is kept for every resident tensor */
    pool_unlock(r->pool);
    if (r->num_victims && r->victims[r->num_victims - 1] == t)
        r->num_victims--;
    if (failed == COOP_OK || (unsigned)failed >= COOP_STATUS_COUNT)
        failed = COOP_ERR_BACKEND; /* not a status: the callback's failure all the same */
    /* the call and the tensors (remat_describe): the one whose callback
     * failed may be an input deep in a chain, not the one asked for */
    char who[REMAT_DESCRIBE_MAX];
    return coop_set_error(
        failed,
        "%s: the recompute callback failed (%s) for %s; it stays evicted and is "
        "recomputed at its next access%s%s",
        remat_call_name(r), coop_strerror(failed), remat_describe(r, t, true, who, sizeof who),
        refused ? "; a call it made was refused: " : "", refused ? inner.text : "");
}

/* Ends the top frame: with every input pinned (st COOP_OK), places its
 * tensor and runs the owner's recompute callback, else only unpins what
 * it pinned. A tensor produced in place takes its recomputed old value's
 * buffer, and the old value is evicted again (recomputable in-place, as
 * when the op first ran); the callback then reads and writes that one
 * buffer. Pops the frame; returns the status for the frame below. */
static coop_status finish_frame(coop_remat *r, coop_status st)
{
    remat_frame *f = &r->frames[r->num_frames - 1];
    coop_tensor *t = f->t;
    void **ptrs = frame_slots(r, f); /* non-NULL: input pinned */
    coop_tensor *old = NULL;
    if (!st && takes_over_old_value(t)) {
        if (remat_reserve_evictions(r, 1)) { /* before anything changes */
            char who[REMAT_DESCRIBE_MAX];
            st = remat_host_nomem(r, "recomputing %s in its old value's buffer",
                                  remat_describe(r, t, true, who, sizeof who));
        } else {
            old = t->inputs[0];
            remat_hand_over(r, old, t);
            remat_mark_evicted(r, old);
        }
    } else if (!st) {
        st = remat_alloc(r, t);
    }
    if (st) {
        for (size_t i = 0; i < t->num_inputs; i++)
            if (ptrs[i])
                remat_unpin(r, t->inputs[i]);
    } else { /* every input pinned */
        for (size_t i = 0; i < t->num_inputs; i++)
            ptrs[i] = t->inputs[i] == old ? t->ptr : t->inputs[i]->ptr;
        r->in_callback++;
        uint64_t errors = coop_error_count();
        coop_status done =
            r->cfg.recompute(t, t->producer, ptrs, t->num_inputs, t->ptr, r->cfg.user);
        r->in_callback--;
        if (done == COOP_OK) {
            read_inputs(r, f);
            remat_advance_clock(r, t->cost);
            r->stats.recomputes++;
            /* stops at UINT32_MAX: wrapped, the most recomputed tensor
             * would read as never recomputed (COOP_COMP's window cost) */
            if (t->remats < UINT32_MAX)
                t->remats++;
            /* saturating, as the clock: 2^16 recomputes at the cost cap wrapped it */
            r->stats.recompute_ns = saturating_add_u64(r->stats.recompute_ns, t->cost);
            t->last_access = r->clock;
        } else {
            st = recompute_failed(r, t, done, coop_error_count() != errors);
        }
        for (size_t i = 0; i < t->num_inputs; i++)
            remat_unpin(r, t->inputs[i]);
    }
    r->num_slots = f->slot;
    r->num_frames--;
    return st;
}

/* Makes base tensor t resident: inputs first (each pinned once resident),
 * then a buffer, then the owner's recompute callback; recursively, on an
 * explicit stack of frames (remat_frame). The order of pins, placements
 * and callbacks is that of the recursion it replaces: a frame's inputs are
 * visited in order, each made resident (its own frame, pushed above) and
 * pinned before the next. A failure unwinds every frame, each unpinning
 * what it pinned; tensors already recomputed stay resident (valid). */
static coop_status materialize(coop_remat *r, coop_tensor *root)
{
    if (root->ptr)
        return COOP_OK;
    size_t bottom = r->num_frames;
    coop_status st = push_frame(r, root);
    if (st)
        return st;
    while (r->num_frames > bottom) {
        remat_frame *f = &r->frames[r->num_frames - 1];
        coop_tensor *t = f->t;
        if (st || f->next == t->num_inputs) {
            st = finish_frame(r, st);
            continue;
        }
        size_t i = f->next;
        coop_tensor *in = t->inputs[i];
        void **pinned = frame_slots(r, f);
        if (pinned[i]) {
            f->next++;
        } else if (in->ptr) { /* recomputed by its frame, or by an earlier input's */
            pin_slot(r, f, i, in);
            f->next++;
        } else {
            st = push_frame(r, in); /* moves frames and slots */
        }
    }
    return st;
}

/* Makes base tensor b resident (recomputing it as needed) without marking
 * it read: a call that may still fail marks it at its end. */
static coop_status make_resident(coop_remat *r, coop_tensor *b)
{
    if (!b->ptr) /* it will evict to make room */
        remat_maybe_compact(r);
    return materialize(r, b);
}

/* access without the handle checks: b is a base tensor. */
static coop_status access_storage(coop_remat *r, coop_tensor *b, void **ptr)
{
    coop_status st = make_resident(r, b);
    if (st)
        return st;
    b->last_access = r->clock;
    if (ptr)
        *ptr = b->ptr;
    return COOP_OK;
}

static coop_status tensor_access(coop_remat *r, coop_tensor *t, void **ptr)
{
    static const char fn[] = "coop_tensor_access";
    coop_status st = enter(r, fn);
    if (st || (st = check_handle(r, t, fn, "tensor", SIZE_MAX)))
        return st;
    return access_storage(r, t->base, ptr);
}

static coop_status tensor_pin(coop_remat *r, coop_tensor *t, void **ptr)
{
    static const char fn[] = "coop_tensor_pin";
    coop_status st = enter(r, fn);
    if (st || (st = check_handle(r, t, fn, "tensor", SIZE_MAX)))
        return st;
    /* the storage's count is 64 bits and cannot get there (4 billion
     * pins through each of 4 billion handles) */
    if (t->user_pins == UINT32_MAX) /* the size: its storage's (a view has none) */
        return coop_set_error(COOP_ERR_BUSY,
                              "%s: tensor %p (%zu bytes) is pinned %lu times through this handle "
                              "already, the most one handle holds; unpin it first",
                              fn, (void *)t, t->base->size, (unsigned long)t->user_pins);
    if ((st = access_storage(r, t->base, ptr)))
        return st;
    remat_pin(r, t->base);
    t->user_pins++;
    return COOP_OK;
}

/* A storage nobody names is freed at once (it stays recomputable). */
static void drop_if_unused(coop_remat *r, coop_tensor *b)
{
    if (b->handles || b->pins || !b->ptr)
        return;
    pool_lock(r->pool);
    remat_evict_locked(r, b);
    pool_unlock(r->pool);
    r->num_victims = 0; /* the owner released it: no eviction notice */
}

static coop_status tensor_unpin(coop_remat *r, coop_tensor *t)
{
    static const char fn[] = "coop_tensor_unpin";
    coop_status st = enter(r, fn);
    if (st)
        return st;
    if (!t)
        return coop_set_error(COOP_ERR_INVALID, "%s: tensor is NULL", fn);
    /* a handle's pins outlive its release (a constant stays pinned): the
     * one call a released handle still takes is the unpin of those */
    bool released_pinned = t->owner == r && !t->reclaimed && t->released && t->user_pins;
    if (!released_pinned && (st = check_handle(r, t, fn, "tensor", SIZE_MAX)))
        return st;
    /* pins count per handle: an unpin through a view that never pinned
     * must not take the pin another handle holds */
    if (!t->user_pins)
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: tensor (%p) is not pinned through this handle (its storage has "
                              "%llu pin%s)",
                              fn, (void *)t, (unsigned long long)t->base->pins,
                              t->base->pins == 1 ? "" : "s");
    t->user_pins--;
    remat_unpin(r, t->base);
    drop_if_unused(r, t->base);
    return COOP_OK;
}

static coop_status tensor_release(coop_remat *r, coop_tensor *t)
{
    static const char fn[] = "coop_tensor_release";
    coop_status st = enter(r, fn);
    if (st)
        return st;
    if (!t)
        return coop_set_error(COOP_ERR_INVALID, "%s: tensor is NULL", fn);
    if (t->owner == r && t->released && !t->reclaimed)
        return coop_set_error(COOP_ERR_INVALID, "%s: tensor (%p) was already released", fn,
                              (void *)t);
    if ((st = check_handle(r, t, fn, "tensor", SIZE_MAX)))
        return st;
    t->released = true; /* its pins stay until unpinned through it */
    t->base->handles--;
    remat_touch(r, t->base); /* a released base is evictable */
    drop_if_unused(r, t->base);
    return COOP_OK;
}

/* ---- in-place ops -------------------------------------------------------- */

/* Ops that read b before the mutation read old from now on; so do b's
 * producer's inputs' child links. An input holds one link to b per time
 * b's producer reads it (set_producer), so each of old's input slots moves
 * one link. Searched from the end: b's producer was set after most of its
 * inputs' other consumers (a tensor updated in place by an op reading w
 * links last at every op, while the old values keep their links to w in
 * front), where a search from the front read every earlier link, N^2 / 2
 * over N ops (rev37-C: 2.2 s for 100,000). */
static void redirect(coop_remat *r, coop_tensor *b, coop_tensor *old)
{
    for (size_t i = 0; i < old->num_children; i++) {
        coop_tensor *c = old->children[i];
        for (size_t k = 0; k < c->num_inputs; k++)
            if (c->inputs[k] == b)
                c->inputs[k] = old;
    }
    for (size_t i = 0; i < old->num_inputs; i++) {
        coop_tensor *p = old->inputs[i];
        for (size_t k = p->num_children; k-- > 0;) {
            r->link_scans++;
            if (p->children[k] == b) {
                p->children[k] = old;
                break;
            }
        }
    }
}

/* What an in-place op on b needs from host memory, taken before anything
 * changes so that recording it cannot fail half-way: b's new input array
 * (its old value first) and a child slot in each input (the old value
 * inherits b's children array, so b's own holds its slots). NULL out of
 * host memory. */
static coop_tensor **prepare_in_place(coop_tensor *b, coop_tensor *const *inputs, size_t n)
{
    coop_tensor **in = malloc((n + 1) * sizeof *in);
    if (!in)
        return NULL;
    size_t self = 1; /* the old value's slot for b, plus b among the inputs */
    for (size_t i = 0; i < n; i++)
        self += inputs[i]->base == b;
    bool ok = !reserve_children(b, self);
    for (size_t i = 0; i < n && ok; i++) {
        coop_tensor *p = inputs[i]->base;
        size_t uses = 0;
        for (size_t k = 0; k < n; k++)
            uses += inputs[k]->base == p;
        ok = p == b || !reserve_children(p, uses);
    }
    if (!ok) {
        free(in);
        return NULL;
    }
    return in;
}

/* Undoes a recorded in-place op whose copy-on-write placement failed
 * (b's buffer already handed to old): b takes its buffer, producer and
 * consumers back; old is left with neither (nor a buffer), for
 * discard_record. */
static void undo_in_place(coop_remat *r, coop_tensor *b, coop_tensor *old, uint64_t cost,
                          void *producer, bool in_place, uint32_t remats)
{
    remat_hand_over(r, old, b);
    for (size_t i = 0; i < b->num_inputs; i++)
        remove_last_child(b->inputs[i], b);
    free(b->inputs);
    b->inputs = old->inputs;
    b->num_inputs = old->num_inputs;
    b->children = old->children;
    b->num_children = old->num_children;
    b->cap_children = old->cap_children;
    old->inputs = old->children = NULL;
    old->num_inputs = old->num_children = old->cap_children = 0;
    redirect(r, old, b);
    b->cost = cost;
    b->producer = producer;
    b->in_place = in_place;
    b->remats = remats;
    b->eq_valid = false;
}

static coop_status tensor_mutate(coop_remat *r, coop_tensor *t, uint64_t cost_ns, void *producer,
                                 coop_tensor *const *inputs, size_t num_inputs, void **old_value)
{
    static const char fn[] = "coop_tensor_mutate";
    coop_status st = enter(r, fn);
    if (st || (st = check_handle(r, t, fn, "tensor", SIZE_MAX)) || (st = check_cost(cost_ns, fn)) ||
        (st = check_inputs(r, inputs, num_inputs, fn)))
        return st;
    /* copy-on-write moves t to a new buffer and leaves the old one to the
     * old value, unpinned: the buffer a pin returned would become
     * evictable while the pin is held (outside callbacks, every pin of
     * the storage is a user's) */
    if (r->cfg.copy_on_write && t->base->pins)
        return coop_set_error(
            COOP_ERR_BUSY,
            "%s: the storage of tensor (%p) is pinned (%llu pin%s): copy-on-write "
            "would move it to a new buffer and leave the pinned one evictable; "
            "unpin it first",
            fn, (void *)t, (unsigned long long)t->base->pins, t->base->pins == 1 ? "" : "s");
    coop_tensor *b = t->base;
    /* the inputs other than t's storage must be resident already, and stay
     * so while t is recomputed (create pins its inputs the same way) */
    if ((st = check_resident(inputs, num_inputs, b, fn)))
        return st;
    remat_maybe_collect(r); /* after the checks; t and the inputs are held, so kept */
    for (size_t i = 0; i < num_inputs; i++)
        if (inputs[i]->base != b)
            remat_pin(r, inputs[i]->base);
    st = make_resident(r, b); /* marked read once the op is recorded */
    for (size_t i = 0; i < num_inputs; i++)
        if (inputs[i]->base != b)
            remat_unpin(r, inputs[i]->base);
    if (st)
        return st;
    /* old's eviction below (recomputable in-place) and b's new producer
     * cannot fail half-way: their host memory first */
    coop_tensor **in = prepare_in_place(b, inputs, num_inputs);
    coop_tensor *old = !in || remat_reserve_evictions(r, 1) ? NULL : new_record(r);
    if (!old) {
        free(in);
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "%s: out of host memory recording an in-place op on tensor %p (%zu "
                              "bytes) with %zu %s",
                              fn, (void *)t, b->size, num_inputs,
                              num_inputs == 1 ? "input" : "inputs");
    }
    uint64_t prev_cost = b->cost;
    void *prev_producer = b->producer;
    bool prev_in_place = b->in_place;
    uint32_t prev_remats = b->remats;
    uint64_t prev_seq = b->resident_seq; /* how ties rank it (copy-on-write moves it) */
    /* old inherits b's producer and consumers; b becomes op(old, inputs) */
    old->size = b->size;
    old->flags = b->flags | COOP_TENSOR_EVICTABLE;
    old->released = true;
    old->cost = b->cost;
    old->remats = b->remats; /* the old value's producer's history; b's op is new */
    b->remats = 0;
    old->producer = b->producer;
    old->in_place = b->in_place; /* its producer, b's before: in place on its own old value? */
    old->inputs = b->inputs;
    old->num_inputs = b->num_inputs;
    old->children = b->children;
    old->num_children = b->num_children;
    old->cap_children = b->cap_children;
    b->inputs = NULL;
    b->num_inputs = 0;
    b->children = NULL;
    b->num_children = b->cap_children = 0;
    redirect(r, b, old);
    /* b's neighbours now name old: neither is evicted yet, so their c_eq
     * values and their components stand; old's eviction (in place) forgets
     * their caches and merges their components. Cannot fail: in and the
     * child slots are there. */
    (void)set_producer(b, cost_ns, producer, old, inputs, num_inputs, in);
    b->in_place = !r->cfg.copy_on_write;
    if (b->in_place) {
        /* recomputable in-place: b keeps the buffer, old is evicted */
        remat_mark_evicted(r, old);
    } else {
        /* copy-on-write: old keeps the buffer, b gets a new one */
        remat_hand_over(r, b, old);
        remat_pin(r, old);
        pin_inputs(r, inputs, num_inputs);
        st = remat_alloc(r, b);
        unpin_inputs(r, inputs, num_inputs);
        remat_unpin(r, old);
        if (st) { /* no room (or host memory): as if the op was never recorded */
            undo_in_place(r, b, old, prev_cost, prev_producer, prev_in_place, prev_remats);
            remat_restore_resident_seq(r, b, prev_seq); /* not made resident again */
            discard_record(r, old);
            return st;
        }
        if (old_value)
            *old_value = old->ptr;
    }
    mark_inputs_read(r, inputs, num_inputs);
    remat_advance_clock(r, cost_ns);
    b->last_access = r->clock;
    return COOP_OK;
}

/* ---- the public calls: each claims the context for its thread ----------- */

/* The outputs (ptr, old_value, alias's out; create's in create_outputs)
 * are cleared here, before the claim, so that every refusal, COOP_ERR_BUSY
 * included, leaves them NULL; the functions above set them only on
 * success. */

coop_status coop_tensor_alias(coop_remat *r, coop_tensor *base, coop_tensor **out)
{
    if (out)
        *out = NULL;
    bool taken;
    coop_status st = claim(r, "coop_tensor_alias", &taken);
    if (st)
        return st;
    st = tensor_alias(r, base, out);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_access(coop_remat *r, coop_tensor *t, void **ptr)
{
    if (ptr)
        *ptr = NULL;
    bool taken;
    coop_status st = claim(r, "coop_tensor_access", &taken);
    if (st)
        return st;
    st = tensor_access(r, t, ptr);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_pin(coop_remat *r, coop_tensor *t, void **ptr)
{
    if (ptr)
        *ptr = NULL;
    bool taken;
    coop_status st = claim(r, "coop_tensor_pin", &taken);
    if (st)
        return st;
    st = tensor_pin(r, t, ptr);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_unpin(coop_remat *r, coop_tensor *t)
{
    bool taken;
    coop_status st = claim(r, "coop_tensor_unpin", &taken);
    if (st)
        return st;
    st = tensor_unpin(r, t);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_release(coop_remat *r, coop_tensor *t)
{
    bool taken;
    coop_status st = claim(r, "coop_tensor_release", &taken);
    if (st)
        return st;
    st = tensor_release(r, t);
    unclaim(r, taken);
    return st;
}

coop_status coop_tensor_mutate(coop_remat *r, coop_tensor *t, uint64_t cost_ns, void *producer,
                               coop_tensor *const *inputs, size_t num_inputs, void **old_value)
{
    if (old_value)
        *old_value = NULL;
    bool taken;
    coop_status st = claim(r, "coop_tensor_mutate", &taken);
    if (st)
        return st;
    st = tensor_mutate(r, t, cost_ns, producer, inputs, num_inputs, old_value);
    unclaim(r, taken);
    return st;
}
