/* coop's c_live cache (sim_live.h). */
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "remat/sim_internal.h"
#include "remat/sim_live.h"

#define LIVE_NONE UINT32_MAX
#define LIVE_PAGE 4096u /* bytes; a smaller page than the real one only touches more often */

/* Watchers and dependencies live in chunks that never move: a search that
 * needs room gets a new chunk, not a copy of all the others (a doubling
 * realloc of a few hundred KiB inside one search had doubled densenet's
 * p99). */
#define LIVE_W_BITS 14u /* watchers a chunk (12 bytes each) */
#define LIVE_D_BITS 16u /* dependencies a chunk (16 bytes each) */
/* what the cache may hold before it starts over (exact: values are walked
 * again); lists of storages that never change keep stale watchers until
 * then */
#define LIVE_MAX_W_CHUNKS 256u /* 4 Mi watchers, 48 MiB */
#define LIVE_MAX_D_CHUNKS 64u  /* 4 Mi dependencies, 64 MiB */
/* dependencies one value may keep (more: the value is only watched) */
#define LIVE_MAX_DEPS_ONE 4096u

/* "The value cached for storage s by its walk number ver depends on me, as
 * its dependency number dep": stale once s walked again. dep's LIVE_DIFFERS
 * bit: my state differed from what that dependency recorded when I last
 * changed (counted in sim_live_cache.differ[s]). */
typedef struct live_watcher {
    uint32_t s, ver, next, dep;
} live_watcher;

#define LIVE_DIFFERS 0x80000000u

/* What a walk read of a storage it looked at: enough to tell whether a walk
 * now would read the same, and so give the same value. */
typedef struct live_dep {
    uint32_t x;
    uint32_t num_created; /* its created tensors (and so its compute) */
    uint32_t children;    /* its tensors' created consumers (sim_live_cache.children) */
    uint32_t bits;        /* LIVE_MATERIAL, LIVE_HELD, LIVE_SELF */
} live_dep;

#define LIVE_MATERIAL 1u     /* material: the walk stopped there (nothing else read) */
#define LIVE_HELD 2u         /* evicted and held (ref_ext > 0) */
#define LIVE_SELF 4u         /* the storage walked from (its material state not read) */
#define LIVE_SELF_DIFFERS 8u /* with LIVE_SELF: its tensors or consumers changed since */

/* A value's state: exact; a lower bound (invalidated by changes that only
 * add to c_live, sim_live_lower); neither. */
#define LIVE_STALE 0
#define LIVE_VALID 1
#define LIVE_LOWER 2

typedef struct sim_live_cache {
    /* per storage */
    int64_t *value;     /* its c_live, where valid */
    uint8_t *valid;     /* LIVE_VALID, LIVE_LOWER or LIVE_STALE */
    uint32_t *ver;      /* its walks so far: its watchers of older ones are stale */
    uint32_t *head;     /* its list of watchers (LIVE_NONE: empty) */
    uint32_t *children; /* consumers created of its tensors (a count that moves
                         * whenever one is created) */
    uint32_t *dep_first, *dep_len, *dep_cap; /* its value's dependencies (cap 0: none) */
    /* its dependencies whose state now differs from the recorded one (where
     * it keeps them): 0 exactly when a walk now would read what its last one
     * read, and its value is then LIVE_VALID (kept up to date by
     * sim_live_fire, so a search finds revalidated values valid, exact in the
     * window pass's bound, instead of checking every dependency) */
    uint32_t *differ;
    live_watcher **w;                 /* chunks of watchers */
    uint32_t w_chunks, w_len, w_free; /* chunks allocated, entries used; free list */
    live_dep **d;                     /* chunks of dependencies */
    uint32_t d_chunks, d_len;
    size_t w_ptrs_cap, d_ptrs_cap;
    uint32_t *stack; /* walk stack */
    size_t stack_cap;
    live_dep *walk; /* the current walk's dependencies */
    size_t walk_len, walk_cap;
} sim_live_cache;

static live_watcher *watcher(const sim_live_cache *c, uint32_t i)
{
    return &c->w[i >> LIVE_W_BITS][i & ((1u << LIVE_W_BITS) - 1)];
}

static live_dep *deps_of(const sim_live_cache *c, uint32_t s)
{
    uint32_t i = c->dep_first[s];
    return &c->d[i >> LIVE_D_BITS][i & ((1u << LIVE_D_BITS) - 1)];
}

/* Allocates n zeroed items and faults their pages in now, not in a search:
 * a byte of each page written through a volatile pointer (a memset of zeros
 * after malloc is folded into calloc by the compiler, and calloc leaves fresh
 * pages unmapped until first written: lstm's first coop (c_live) search had
 * taken 13 to 20 minor faults, getrusage). */
static void *touched(size_t n, size_t size)
{
    unsigned char *p = calloc(n, size);
    if (p)
        for (size_t i = 0; i < n * size; i += LIVE_PAGE)
            ((volatile unsigned char *)p)[i] = 0;
    return p;
}

/* A chunk of 2^bits items of size bytes: touched when the cache opens;
 * later (inside a search) only allocated, its pages faulting as entries fill
 * it (a memset of the chunk had cost one search tens of microseconds). */
static void *new_chunk(unsigned bits, size_t size, bool touch)
{
    size_t n = (size_t)1 << bits;
    return touch ? touched(n, size) : malloc(n * size);
}

/* Appends a chunk of watchers to c->w (add_dep_chunk: of dependencies to
 * c->d); a function per array, as GROW_ARRAY takes the array's own type. */
static int add_watcher_chunk(sim_live_cache *c, bool touch)
{
    if (GROW_ARRAY(c->w, c->w_ptrs_cap, (size_t)c->w_chunks + 1, SIM_ARRAY_FIRST))
        return -1;
    live_watcher *chunk = new_chunk(LIVE_W_BITS, sizeof *chunk, touch);
    if (!chunk)
        return -1;
    c->w[c->w_chunks++] = chunk;
    return 0;
}

static int add_dep_chunk(sim_live_cache *c, bool touch)
{
    if (GROW_ARRAY(c->d, c->d_ptrs_cap, (size_t)c->d_chunks + 1, SIM_ARRAY_FIRST))
        return -1;
    live_dep *chunk = new_chunk(LIVE_D_BITS, sizeof *chunk, touch);
    if (!chunk)
        return -1;
    c->d[c->d_chunks++] = chunk;
    return 0;
}

int sim_live_open(sim_runtime *rt)
{
    /* dtr-full's e* walks the same storages and reads the same of them:
     * the cache holds it instead of c_live (sim_live_walked) */
    bool live = rt->policy == SIM_POLICY_COOP && rt->cfg.window_cost == SIM_WINDOW_LIVE;
    if (!(live || rt->policy == SIM_POLICY_DTR_FULL) || !rt->cfg.eq_cache)
        return 0;
    size_t n = (size_t)rt->prog->num_storages + 1;
    sim_live_cache *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    rt->live = c;
    c->value = touched(n, sizeof *c->value);
    c->valid = touched(n, sizeof *c->valid);
    c->ver = touched(n, sizeof *c->ver);
    c->head = touched(n, sizeof *c->head);
    c->children = touched(n, sizeof *c->children);
    c->dep_first = touched(n, sizeof *c->dep_first);
    c->dep_len = touched(n, sizeof *c->dep_len);
    c->dep_cap = touched(n, sizeof *c->dep_cap);
    c->differ = touched(n, sizeof *c->differ);
    c->stack_cap = c->walk_cap = 1024;
    c->stack = touched(c->stack_cap, sizeof *c->stack);
    c->walk = touched(c->walk_cap, sizeof *c->walk);
    if (!c->value || !c->valid || !c->ver || !c->head || !c->children || !c->dep_first ||
        !c->dep_len || !c->dep_cap || !c->differ || !c->stack || !c->walk ||
        add_watcher_chunk(c, true) || add_dep_chunk(c, true))
        return -1;
    for (size_t i = 0; i < n; i++)
        c->head[i] = LIVE_NONE;
    c->w_free = LIVE_NONE;
    return 0;
}

void sim_live_close(sim_runtime *rt)
{
    sim_live_cache *c = rt->live;
    if (!c)
        return;
    free(c->value);
    free(c->valid);
    free(c->ver);
    free(c->head);
    free(c->children);
    free(c->dep_first);
    free(c->dep_len);
    free(c->dep_cap);
    free(c->differ);
    for (uint32_t i = 0; i < c->w_chunks; i++)
        free(c->w[i]);
    free(c->w);
    for (uint32_t i = 0; i < c->d_chunks; i++)
        free(c->d[i]);
    free(c->d);
    free(c->stack);
    free(c->walk);
    free(c);
    rt->live = NULL;
}

/* No value keeps dependencies (deps_hold revalidates none); the chunks
 * stay, to be filled again. */
static void forget_deps(sim_runtime *rt)
{
    sim_live_cache *c = rt->live;
    for (uint32_t i = 0; i <= rt->prog->num_storages; i++)
        c->dep_len[i] = c->dep_cap[i] = 0;
    c->d_len = 0;
}

/* Every value invalid, every list empty, no dependencies. */
static void start_over(sim_runtime *rt)
{
    sim_live_cache *c = rt->live;
    for (uint32_t i = 0; i <= rt->prog->num_storages; i++) {
        c->valid[i] = LIVE_STALE;
        c->ver[i]++;
        c->head[i] = LIVE_NONE;
    }
    c->w_len = 0;
    c->w_free = LIVE_NONE;
    forget_deps(rt);
}

/* Whether x's state now is what dependency d (not the LIVE_SELF one)
 * recorded of it: a walk reads it the same. */
static bool dep_same(const sim_runtime *rt, const live_dep *d)
{
    const rt_storage *r = &rt->storages[d->x];
    if (d->bits == LIVE_MATERIAL)
        return r->material;
    return !r->material && r->num_created == d->num_created &&
           rt->live->children[d->x] == d->children && (r->ref_ext ? LIVE_HELD : 0) == d->bits;
}

/* A change of s or of one of its value's dependencies: the value is exact
 * again where it keeps its dependencies and none differs now; else
 * invalidated, still a lower bound where it was one (or exact) and the
 * change only adds. */
static void settle(sim_live_cache *c, uint32_t s, bool shrinks)
{
    if (c->dep_cap[s] && !c->differ[s])
        c->valid[s] = LIVE_VALID;
    else
        c->valid[s] = shrinks || c->valid[s] == LIVE_STALE ? LIVE_STALE : LIVE_LOWER;
}

/* s changed: recounts its own dependency (its created tensors and
 * consumers; its material state is not read) and settles its value. */
static void self_changed(sim_runtime *rt, uint32_t s, bool shrinks)
{
    sim_live_cache *c = rt->live;
    if (c->dep_cap[s]) {
        live_dep *d = deps_of(c, s);
        bool same = rt->storages[s].num_created == d->num_created && c->children[s] == d->children;
        if (same == !!(d->bits & LIVE_SELF_DIFFERS)) {
            d->bits ^= LIVE_SELF_DIFFERS;
            c->differ[s] += same ? (uint32_t)-1 : 1u;
        }
    }
    settle(c, s, shrinks);
}

/* The watchers stay (a value valid again later still depends on s); stale
 * ones (of an older walk) go back to the free list. Each live one compares
 * s's state now with what its value's dependency recorded. */
void sim_live_fire(sim_runtime *rt, uint32_t s, bool shrinks)
{
    sim_live_cache *c = rt->live;
    self_changed(rt, s, shrinks);
    uint32_t *link = &c->head[s];
    while (*link != LIVE_NONE) {
        uint32_t i = *link;
        live_watcher *e = watcher(c, i);
        uint32_t v = e->s;
        if (c->ver[v] == e->ver) {
            if (c->dep_cap[v]) { /* else its dependencies were forgotten */
                const live_dep *d = deps_of(c, v) + (e->dep & ~LIVE_DIFFERS);
#ifdef COOP_SIM_LIVE_CHECK
                if (d->x != s || (e->dep & ~LIVE_DIFFERS) >= c->dep_len[v])
                    abort();
#endif
                bool same = dep_same(rt, d);
                if (same == !!(e->dep & LIVE_DIFFERS)) {
                    e->dep ^= LIVE_DIFFERS;
                    c->differ[v] += same ? (uint32_t)-1 : 1u;
                }
            }
            settle(c, v, shrinks);
            link = &e->next;
            continue;
        }
        *link = e->next;
        e->next = c->w_free;
        c->w_free = i;
    }
}

void sim_live_fire_if_evicted(sim_runtime *rt, uint32_t s, bool shrinks)
{
    if (rt->storages[s].material)
        self_changed(rt, s, shrinks);
    else
        sim_live_fire(rt, s, shrinks);
}

void sim_live_note_op(sim_runtime *rt, uint32_t op_id)
{
    const sim_program *p = rt->prog;
    const sim_op *op = &p->ops[op_id];
    for (uint32_t i = 0; i < op->num_outputs; i++)
        sim_live_fire_if_evicted(rt, p->tensors[op->first_output + i].storage, false);
    for (uint32_t i = 0; i < op->num_inputs; i++) {
        uint32_t x = p->tensors[p->inputs[op->first_input + i]].storage;
        rt->live->children[x]++;
        sim_live_fire_if_evicted(rt, x, false);
    }
}

static live_dep dep_now(const sim_runtime *rt, uint32_t x, uint32_t self)
{
    const rt_storage *r = &rt->storages[x];
    if (x != self && r->material)
        return (live_dep){x, 0, 0, LIVE_MATERIAL};
    return (live_dep){x, r->num_created, rt->live->children[x],
                      x == self    ? LIVE_SELF
                      : r->ref_ext ? LIVE_HELD
                                   : 0};
}

/* Whether a walk from s now would read what its last one read. The walk
 * reads, of a storage it looks at, whether it is material, and of an
 * evicted one (and of s) also its created tensors (their inputs, its
 * compute), its created consumers and whether it is held: with all of
 * them the same, it goes the same way and sums the same. */
static bool deps_hold(const sim_runtime *rt, uint32_t s)
{
    const sim_live_cache *c = rt->live;
    if (!c->dep_cap[s])
        return false;
    const live_dep *d = deps_of(c, s);
    const live_dep *end = d + c->dep_len[s];
    const rt_storage *st = rt->storages;
    /* d[0] is s itself (LIVE_SELF); then the storages looked at */
    if (st[s].num_created != d->num_created || c->children[s] != d->children)
        return false;
    for (d++; d < end; d++)
        if (!dep_same(rt, d))
            return false;
    return true;
}

/* Keeps the walk's dependencies as s's: in its slot if large enough, else
 * in a new one (the old one is not reused: slots only grow, doubling, as
 * sim_policy.c's eq_remember does). */
static void deps_remember(sim_runtime *rt, uint32_t s)
{
    sim_live_cache *c = rt->live;
    size_t k = c->walk_len;
    c->dep_len[s] = 0;
    if (k > LIVE_MAX_DEPS_ONE) {
        c->dep_cap[s] = 0;
        return;
    }
    if (k > c->dep_cap[s]) {
        const uint32_t chunk = 1u << LIVE_D_BITS;
        uint32_t cap = c->dep_cap[s] ? c->dep_cap[s] : 8;
        while (cap < k)
            cap *= 2;
        uint32_t at = c->d_len;
        if ((at & (chunk - 1)) + cap > chunk) /* a slot never spans two chunks */
            at = (at | (chunk - 1)) + 1;
        if ((at + cap - 1) >> LIVE_D_BITS >= LIVE_MAX_D_CHUNKS) {
            forget_deps(rt);
            at = 0;
        }
        if ((at + cap - 1) >> LIVE_D_BITS >= c->d_chunks && add_dep_chunk(c, false)) {
            c->dep_cap[s] = 0; /* out of host memory: not kept */
            return;
        }
        c->dep_first[s] = at;
        c->dep_cap[s] = cap;
        c->d_len = at + cap;
    }
    memcpy(deps_of(c, s), c->walk, k * sizeof *c->walk);
    c->dep_len[s] = (uint32_t)k;
    c->differ[s] = 0; /* all of them read now */
}

/* Adds "s's value depends on x". -1 when full or out of host memory. */
static int watch(sim_runtime *rt, uint32_t x, uint32_t s)
{
    sim_live_cache *c = rt->live;
    uint32_t i = c->w_free;
    if (i != LIVE_NONE) {
        c->w_free = watcher(c, i)->next;
    } else {
        if (c->w_len == c->w_chunks << LIVE_W_BITS &&
            (c->w_chunks == LIVE_MAX_W_CHUNKS || add_watcher_chunk(c, false)))
            return -1;
        i = c->w_len++;
    }
    /* x is the walk's next dependency (depend) */
    *watcher(c, i) = (live_watcher){s, c->ver[s], c->head[x], (uint32_t)c->walk_len};
    c->head[x] = i;
    return 0;
}

/* Records x (state d) as a dependency of the current walk; -1 out of host
 * memory. */
static int depend(sim_live_cache *c, live_dep d)
{
    if (c->walk_len == c->walk_cap &&
        GROW_ARRAY(c->walk, c->walk_cap, c->walk_len + 1, SIM_ARRAY_FIRST))
        return -1;
    c->walk[c->walk_len++] = d;
    return 0;
}

/* sim_policy.c's region_compute (the same storages, the same sum in *out),
 * also recording every storage looked at, once, as a dependency of s's
 * value while *record (a record that fails clears it and the walk goes
 * on). -1 if the walk's stack cannot grow. */
static int region(sim_runtime *rt, uint32_t s, bool forward, bool live_only, bool *record,
                  int64_t *out)
{
    sim_live_cache *c = rt->live;
    uint32_t stamp = sim_next_mark(rt);
    int64_t compute = 0;
    size_t len = 0;
    c->stack[len++] = s; /* stack_cap >= 1 from sim_live_open */
    rt->storages[s].mark = stamp;
    while (len) {
        sim_region_step step = sim_region_step_of(rt, c->stack[--len], forward);
        uint32_t us;
        while (sim_region_step_next(&step, &us)) {
            rt_storage *r = &rt->storages[us];
            if (r->mark == stamp) /* s itself, or looked at already */
                continue;
            r->mark = stamp;
            if (*record) {
                live_dep d = r->material ? (live_dep){us, 0, 0, LIVE_MATERIAL}
                                         : (live_dep){us, r->num_created, c->children[us],
                                                      r->ref_ext ? LIVE_HELD : 0};
                if (watch(rt, us, s) || depend(c, d))
                    *record = false;
            }
            if (r->material)
                continue;
            if (!live_only || r->ref_ext)
                compute += (int64_t)r->compute;
            if (len == c->stack_cap && GROW_ARRAY(c->stack, c->stack_cap, len + 1, SIM_ARRAY_FIRST))
                return -1;
            c->stack[len++] = us;
        }
    }
    *out = compute;
    return 0;
}

/* cfg.check_components (tests): a value read from the cache against the
 * walks (an exact one must equal them, a lower bound must not exceed them),
 * counted in sim_stats.comp_checks and comp_mismatches. Changes nothing the
 * run decides. Returns exact. Not inlined, and tail-called by
 * sim_live_known: inlined, it made that function save and restore
 * registers at every call (4% of the median lstm search's instructions). */
__attribute__((noinline)) static int check_value(sim_runtime *rt, uint32_t s, int64_t value,
                                                 int exact)
{
    int64_t walked = sim_live_walked(rt, s);
    rt->stats.comp_checks++;
    rt->stats.comp_mismatches += exact ? walked != value : walked < value;
    return exact;
}

void sim_live_check(sim_runtime *rt)
{
    const sim_live_cache *c = rt->live;
    for (uint32_t s = 0; s < rt->prog->num_storages; s++) {
        if (c->valid[s] != LIVE_STALE) {
            int64_t walked = sim_live_walked(rt, s);
            rt->stats.cache_checks++;
            rt->stats.cache_mismatches +=
                c->valid[s] == LIVE_VALID ? walked != c->value[s] : walked < c->value[s];
        }
        /* a value whose walk would read the same is valid again
         * (sim_live_fire): else a search walks it for nothing */
        if (c->valid[s] != LIVE_VALID && deps_hold(rt, s)) {
            rt->stats.cache_checks++;
            rt->stats.cache_mismatches++;
        }
    }
}

int sim_live_known(sim_runtime *rt, uint32_t s, int64_t *out)
{
    const sim_live_cache *c = rt->live;
    if (!c || c->valid[s] == LIVE_STALE)
        return -1;
    *out = c->value[s];
    int exact = c->valid[s] == LIVE_VALID;
#ifdef COOP_SIM_LIVE_CHECK
    /* debug builds: walks (or, where valid, walks and compares) */
    int64_t walked = sim_live_compute(rt, s);
    if (exact ? walked != *out : walked < *out)
        abort();
#endif
    if (rt->cfg.check_components)
        return check_value(rt, s, *out, exact);
    return exact;
}

int64_t sim_live_cached(sim_runtime *rt, uint32_t s)
{
    sim_live_cache *c = rt->live;
    if (c->valid[s] == LIVE_VALID) {
        if (rt->cfg.check_components)
            check_value(rt, s, c->value[s], 1);
        return c->value[s];
    }
#ifdef COOP_SIM_LIVE_CHECK
    /* a value whose dependencies all hold is valid (sim_live_fire) */
    if (deps_hold(rt, s))
        abort();
#endif
    c->ver[s]++; /* the last walk's watchers are stale */
    c->walk_len = 0;
    bool record = !depend(c, dep_now(rt, s, s));
    int64_t back = 0, fwd = 0;
    if (region(rt, s, false, false, &record, &back) ||
        region(rt, s, true, rt->policy != SIM_POLICY_DTR_FULL, &record, &fwd)) {
        /* the walk itself ran out of host memory: the runtime's own walk */
        sim_live_close(rt);
        return sim_live_compute(rt, s);
    }
    int64_t v = (int64_t)rt->storages[s].compute + back + fwd;
    if (record) {
        c->value[s] = v;
        c->valid[s] = LIVE_VALID;
        deps_remember(rt, s);
    } else {
        start_over(rt); /* full (of stale watchers, mostly): all of it goes */
    }
    return v;
}
