/*
 * Two remat contexts on one pool, each driven by its own thread, beside a
 * third thread using the pool directly (include/coop.h: a context is one
 * thread's; the pool stays thread-safe for other users, and a context
 * evicts only its own tensors). .ci/run also runs it under ThreadSanitizer.
 *
 * Each context thread runs a seeded random program of creates (inputs
 * pinned), accesses (which recompute), pins and unpins, releases and
 * in-place ops (one context recomputable in place, the other
 * copy-on-write), under a capacity small enough that both evict all the
 * time, so that each context's searches walk blocks of the other's tensors
 * and of the third thread's. The third thread mallocs and frees plain
 * blocks and reads coop_get_stats and coop_pool_check while they do.
 *
 * Values are checked as in remat_values_test: the host backend's memory is
 * never touched, a shadow map from each 512-byte granule's address to a
 * value (behind a mutex: the three threads write it) stands for it. Each
 * tensor's value is a hash of its op and its inputs' values, written over
 * the buffer by the test at creation and by the recompute callback from its
 * inputs' shadow values; each plain block holds its own value. So a
 * recomputation that reads the wrong buffer, or a buffer handed out over
 * another thread's live tensor or block, shows as a wrong value.
 *
 * Checked: every access, pin and pinned input holds its value; every
 * callback runs on its context's own thread; every plain block still holds
 * its value when freed; the pool's statistics stay coherent while the
 * contexts work; at the end coop_pool_check passes, every resident storage
 * holds its value, each context's on_evict notices and recompute callbacks
 * are its evictions and recomputes, the pool's requested bytes are the
 * contexts' resident bytes and the plain blocks', and, everything released
 * and destroyed, nothing is allocated.
 *
 * A failed check prints what and where and aborts (cmocka's assertions are
 * not for other threads). COOP_TEST_SEED sets the seed (printed); each run
 * (VMM, then segments) and each thread derives its own from it. No timing
 * is assumed: the interleaving varies, what is checked holds under any.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"
#include "shadow_values.h"
#include "test_seed.h"

#define KiB 1024u
#define UNIT (4 * KiB)
#define MAX_HANDLES 8192
#define MAX_INPUTS 3
#define MAX_PLAIN 6
#define OPS 12000       /* per context thread */
#define PLAIN_OPS 16000 /* the third thread's */

static void failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "remat_threads_test: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            failf(__VA_ARGS__);                                                                    \
    } while (0)
#define CHECK_OK(st, what) CHECK((st) == COOP_OK, "%s: %s", what, coop_last_error())

/* ---- Shadow memory: granule address -> value, shared by the threads ---- */

static shadow_slot *shadow;
static pthread_mutex_t shadow_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start_line; /* the three threads start together */

static void shadow_write(const void *ptr, size_t size, uint64_t value)
{
    pthread_mutex_lock(&shadow_lock);
    bool stored = shadow_store(shadow, ptr, size, value);
    pthread_mutex_unlock(&shadow_lock);
    CHECK(stored, "shadow map full");
}

/* The value at ptr (its first granule); 0 if never written. */
static uint64_t shadow_read(const void *ptr)
{
    uint64_t v = 0;
    pthread_mutex_lock(&shadow_lock);
    bool loaded = shadow_load(shadow, ptr, &v);
    pthread_mutex_unlock(&shadow_lock);
    CHECK(loaded, "shadow map full");
    return v;
}

/* Every granule of [ptr, ptr + size) holds value. */
static void check_shadow(const void *ptr, size_t size, uint64_t value, const char *who,
                         const char *what)
{
    for (uintptr_t a = (uintptr_t)ptr; a < (uintptr_t)ptr + size; a += GRANULE) {
        uint64_t v = shadow_read((const void *)a);
        CHECK(v == value, "%s: %s at %p: granule +%lu holds %#llx, not %#llx", who, what, ptr,
              (unsigned long)(a - (uintptr_t)ptr), (unsigned long long)v,
              (unsigned long long)value);
    }
}

/* ---- One context's world (its thread's alone) ---- */

typedef struct world {
    const char *name;
    coop_pool *pool;
    coop_remat *r;
    bool cow;
    pthread_t self; /* the thread driving it (set by that thread) */
    uint64_t rng, op_ids;
    coop_tensor *h[MAX_HANDLES];
    bool live[MAX_HANDLES];
    int live_list[MAX_HANDLES], live_pos[MAX_HANDLES]; /* the live handles, unordered */
    size_t num_live;
    uint32_t pins[MAX_HANDLES];
    void *pinned_at[MAX_HANDLES];
    uint64_t value[MAX_HANDLES];
    size_t size[MAX_HANDLES];
    size_t n;
    /* callbacks seen, and what the program did */
    uint64_t evict_notices, recomputes, mutates, nomem, value_checks;
} world;

static uint64_t next(world *w)
{
    return test_xorshift64(&w->rng);
}

static void on_evict(coop_tensor *t, void *user)
{
    world *w = user;
    CHECK(t != NULL, "%s: on_evict without a tensor", w->name);
    CHECK(pthread_equal(pthread_self(), w->self), "%s: on_evict ran on another thread", w->name);
    w->evict_notices++;
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    world *w = user;
    CHECK(pthread_equal(pthread_self(), w->self), "%s: recompute ran on another thread", w->name);
    CHECK(n <= MAX_INPUTS + 1, "%s: recompute with %zu inputs", w->name, n);
    uint64_t in[MAX_INPUTS + 1];
    for (size_t i = 0; i < n; i++)
        in[i] = shadow_read(inputs[i]);
    shadow_write(out, coop_tensor_size(t), op_value((uint64_t)(uintptr_t)producer, in, n));
    w->recomputes++;
    return COOP_OK;
}

static void check_value(world *w, int i, const void *ptr, const char *what)
{
    check_shadow(ptr, w->size[i], w->value[i], w->name, what);
    w->value_checks++;
}

/* A random live handle, or -1. */
static int pick(world *w)
{
    return w->num_live ? w->live_list[next(w) % w->num_live] : -1;
}

static void set_live(world *w, int i, bool live)
{
    if (live) {
        w->live_pos[i] = (int)w->num_live;
        w->live_list[w->num_live++] = i;
    } else {
        int last = w->live_list[--w->num_live];
        w->live_list[w->live_pos[i]] = last;
        w->live_pos[last] = w->live_pos[i];
    }
    w->live[i] = live;
}

/* Pins idx[0 .. k) (each checked); on a failure unpins those pinned. */
static coop_status pin_inputs(world *w, const int *idx, size_t k, coop_tensor **in)
{
    for (size_t j = 0; j < k; j++) {
        void *p;
        coop_status st = coop_tensor_pin(w->r, w->h[idx[j]], &p);
        if (st) {
            CHECK(st == COOP_ERR_NOMEM, "%s: pin: %s", w->name, coop_last_error());
            w->nomem++;
            while (j--)
                CHECK_OK(coop_tensor_unpin(w->r, w->h[idx[j]]), "unpin");
            return st;
        }
        check_value(w, idx[j], p, "a pinned input");
        in[j] = w->h[idx[j]];
    }
    return COOP_OK;
}

static void unpin_inputs(world *w, const int *idx, size_t k)
{
    for (size_t j = 0; j < k; j++)
        CHECK_OK(coop_tensor_unpin(w->r, w->h[idx[j]]), "unpin");
}

static void op_create(world *w, const int *idx, size_t k)
{
    if (w->n == MAX_HANDLES)
        return;
    size_t size = (1 + next(w) % 8) * UNIT - (next(w) % 2) * GRANULE;
    unsigned flags = next(w) % 10 ? COOP_TENSOR_EVICTABLE : 0;
    uint64_t id = ++w->op_ids, cost = 1 + next(w) % 1000;
    coop_tensor *in[MAX_INPUTS];
    uint64_t vals[MAX_INPUTS];
    if (pin_inputs(w, idx, k, in))
        return;
    for (size_t j = 0; j < k; j++)
        vals[j] = w->value[idx[j]];
    size_t i = w->n;
    coop_status st =
        coop_tensor_create(w->r, size, cost, (void *)(uintptr_t)id, in, k, flags, &w->h[i]);
    unpin_inputs(w, idx, k);
    if (st == COOP_ERR_NOMEM) {
        w->nomem++;
        return;
    }
    CHECK_OK(st, "coop_tensor_create");
    set_live(w, (int)i, true);
    w->size[i] = size;
    w->value[i] = op_value(id, vals, k);
    shadow_write(coop_tensor_data(w->h[i]), size, w->value[i]);
    w->n++;
}

/* An in-place op on target reading k handles (the target among them reads
 * its old value). */
static void op_mutate(world *w, int target, const int *idx, size_t k)
{
    coop_tensor *in[MAX_INPUTS];
    uint64_t vals[MAX_INPUTS + 1];
    if (pin_inputs(w, idx, k, in))
        return;
    bool pinned = w->pins[target] > 0; /* copy-on-write refuses a pinned storage */
    for (size_t j = 0; j < k; j++)
        pinned = pinned || idx[j] == target;
    vals[0] = w->value[target];
    for (size_t j = 0; j < k; j++)
        vals[j + 1] = w->value[idx[j]];
    uint64_t id = ++w->op_ids, cost = 1 + next(w) % 1000;
    void *old = NULL;
    coop_status st =
        coop_tensor_mutate(w->r, w->h[target], cost, (void *)(uintptr_t)id, in, k, &old);
    unpin_inputs(w, idx, k);
    if (w->cow && pinned) {
        CHECK(st == COOP_ERR_BUSY, "%s: copy-on-write of a pinned storage: %d", w->name, st);
        return;
    }
    if (st == COOP_ERR_NOMEM) {
        w->nomem++;
        return;
    }
    CHECK_OK(st, "coop_tensor_mutate");
    void *now = coop_tensor_data(w->h[target]);
    CHECK(now != NULL, "%s: the mutated tensor is not resident", w->name);
    check_value(w, target, w->cow ? old : now, "an in-place op's old value");
    w->value[target] = op_value(id, vals, k + 1);
    shadow_write(now, w->size[target], w->value[target]);
    w->mutates++;
}

static void release(world *w, int i)
{
    for (; w->pins[i]; w->pins[i]--)
        CHECK_OK(coop_tensor_unpin(w->r, w->h[i]), "unpin");
    CHECK_OK(coop_tensor_release(w->r, w->h[i]), "coop_tensor_release");
    set_live(w, i, false);
}

/* Every live handle's storage, if resident, holds its value; a pinned one
 * stays where its pin returned. */
static void check_resident(world *w)
{
    for (size_t i = 0; i < w->n; i++) {
        if (!w->live[i])
            continue;
        void *p = coop_tensor_data(w->h[i]);
        if (w->pins[i])
            CHECK(p == w->pinned_at[i], "%s: handle %zu pinned at %p moved to %p", w->name, i,
                  w->pinned_at[i], p);
        if (p)
            check_value(w, (int)i, p, "a resident storage");
    }
}

static void step(world *w)
{
    unsigned what = (unsigned)(next(w) % 100);
    int idx[MAX_INPUTS];
    size_t k = next(w) % (MAX_INPUTS + 1);
    for (size_t j = 0; j < k; j++)
        if ((idx[j] = pick(w)) < 0)
            k = j;
    int target = pick(w);
    void *p;
    coop_status st;
    if (what < 35 || target < 0) {
        op_create(w, idx, k);
    } else if (what < 60) {
        release(w, target);
    } else if (what < 80) { /* access: recomputes an evicted storage */
        if ((st = coop_tensor_access(w->r, w->h[target], &p)) == COOP_ERR_NOMEM) {
            w->nomem++;
            return;
        }
        CHECK_OK(st, "coop_tensor_access");
        check_value(w, target, p, "an access");
    } else if (what < 88) { /* pin (at most two per handle), or unpin */
        if (w->pins[target] && (w->pins[target] == 2 || next(w) % 2)) {
            CHECK_OK(coop_tensor_unpin(w->r, w->h[target]), "unpin");
            w->pins[target]--;
        } else if ((st = coop_tensor_pin(w->r, w->h[target], &p)) == COOP_ERR_NOMEM) {
            w->nomem++;
        } else {
            CHECK_OK(st, "coop_tensor_pin");
            check_value(w, target, p, "a pin");
            w->pinned_at[target] = p;
            w->pins[target]++;
        }
    } else {
        op_mutate(w, target, idx, k);
    }
}

static void *context_thread(void *arg)
{
    world *w = arg;
    w->self = pthread_self();
    pthread_barrier_wait(&start_line);
    for (int op = 0; op < OPS; op++) {
        step(w);
        if (op % 64 == 63)
            check_resident(w);
    }
    return NULL;
}

/* ---- The third thread: plain blocks, statistics, checks ---- */

typedef struct plain_world {
    coop_pool *pool;
    uint64_t rng;
    void *ptr[MAX_PLAIN];
    size_t size[MAX_PLAIN];
    uint64_t value[MAX_PLAIN];
    uint64_t mallocs, nomem, checks;
} plain_world;

static void *plain_thread(void *arg)
{
    plain_world *p = arg;
    pthread_barrier_wait(&start_line);
    for (int op = 0; op < PLAIN_OPS; op++) {
        size_t slot = test_xorshift64(&p->rng) % MAX_PLAIN;
        if (p->ptr[slot]) {
            check_shadow(p->ptr[slot], p->size[slot], p->value[slot], "plain",
                         "a block before coop_free");
            CHECK_OK(coop_free(p->pool, p->ptr[slot]), "coop_free");
            p->ptr[slot] = NULL;
        } else {
            size_t size = (1 + test_xorshift64(&p->rng) % 4) * UNIT;
            coop_status st;
            void *ptr = coop_malloc(p->pool, size, 0, COOP_ALLOC_LOW, &st);
            if (!ptr) {
                CHECK(st == COOP_ERR_NOMEM, "plain: coop_malloc: %s", coop_last_error());
                p->nomem++;
            } else {
                p->ptr[slot] = ptr;
                p->size[slot] = size;
                p->value[slot] = (uint64_t)op << 8 | 0xb1;
                shadow_write(ptr, size, p->value[slot]);
                p->mallocs++;
            }
        }
        coop_stats s;
        coop_get_stats(p->pool, &s); /* one copy under the pool's lock: coherent */
        CHECK(s.requested_bytes.current <= s.allocated_bytes.current &&
                  s.allocated_bytes.current <= s.reserved_bytes.current &&
                  (uint64_t)s.reserved_bytes.current <= s.capacity,
              "plain: incoherent statistics: requested %lld, allocated %lld, reserved %lld, "
              "capacity %llu",
              (long long)s.requested_bytes.current, (long long)s.allocated_bytes.current,
              (long long)s.reserved_bytes.current, (unsigned long long)s.capacity);
        if (op % 16 == 0) {
            CHECK_OK(coop_pool_check(p->pool), "coop_pool_check (while the contexts work)");
            p->checks++;
        }
    }
    return NULL;
}

/* ---- A run: two contexts and the plain thread on one pool ---- */

static void run(const char *kind, bool vmm, coop_remat_policy p0, coop_remat_policy p1,
                uint64_t seed)
{
    coop_config pc;
    coop_config_default(&pc);
    pc.page_size = UNIT;
    pc.capacity = 96 * UNIT;
    pc.use_vmm = vmm;
    pc.segment_size = 8 * UNIT;
    coop_pool *pool;
    CHECK_OK(coop_pool_create(&pc, &pool), "coop_pool_create");
    memset(shadow, 0, SHADOW_SLOTS * sizeof *shadow);

    static world w[2];
    static plain_world pw;
    memset(w, 0, sizeof w);
    memset(&pw, 0, sizeof pw);
    const coop_remat_policy policy[2] = {p0, p1};
    for (int c = 0; c < 2; c++) {
        w[c].name = c ? "context 1" : "context 0";
        w[c].pool = pool;
        w[c].cow = c == 1;
        w[c].rng = (seed ^ (UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(c + 1))) | 1;
        coop_remat_config rc = {.policy = policy[c],
                                .copy_on_write = w[c].cow,
                                .on_evict = on_evict,
                                .recompute = recompute,
                                .user = &w[c]};
        CHECK_OK(coop_remat_create(pool, &rc, &w[c].r), "coop_remat_create");
        /* op ids of the two contexts never meet: values stay distinct */
        w[c].op_ids = (uint64_t)(c + 1) << 40;
    }
    pw.pool = pool;
    pw.rng = (seed ^ UINT64_C(0xD1B54A32D192ED03)) | 1;

    pthread_t t[3];
    CHECK(pthread_barrier_init(&start_line, NULL, 3) == 0, "pthread_barrier_init");
    for (int c = 0; c < 2; c++)
        CHECK(pthread_create(&t[c], NULL, context_thread, &w[c]) == 0, "pthread_create");
    CHECK(pthread_create(&t[2], NULL, plain_thread, &pw) == 0, "pthread_create");
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);

    /* Quiet now: the pool and both contexts as they were left. */
    CHECK_OK(coop_pool_check(pool), "coop_pool_check (at the end)");
    uint64_t plain_bytes = 0;
    for (int i = 0; i < MAX_PLAIN; i++)
        if (pw.ptr[i]) {
            check_shadow(pw.ptr[i], pw.size[i], pw.value[i], "plain", "a block at the end");
            plain_bytes += pw.size[i];
        }
    coop_remat_stats rs[2];
    for (int c = 0; c < 2; c++) {
        w[c].self = pthread_self(); /* the callbacks now run on this thread */
        check_resident(&w[c]);
        coop_remat_get_stats(w[c].r, &rs[c]);
        CHECK(rs[c].evictions == w[c].evict_notices, "%s: %llu evictions, %llu on_evict notices",
              w[c].name, (unsigned long long)rs[c].evictions,
              (unsigned long long)w[c].evict_notices);
        CHECK(rs[c].recomputes == w[c].recomputes, "%s: %llu recomputes, %llu callbacks", w[c].name,
              (unsigned long long)rs[c].recomputes, (unsigned long long)w[c].recomputes);
        uint64_t live_resident = 0;
        for (size_t i = 0; i < w[c].n; i++)
            if (w[c].live[i] && coop_tensor_resident(w[c].h[i]))
                live_resident += w[c].size[i];
        /* hidden records (old values recomputed as inputs) may add to it */
        CHECK(rs[c].resident_bytes >= live_resident,
              "%s: resident_bytes %llu below its live resident tensors' %llu", w[c].name,
              (unsigned long long)rs[c].resident_bytes, (unsigned long long)live_resident);
    }
    coop_stats s;
    coop_get_stats(pool, &s);
    CHECK((uint64_t)s.requested_bytes.current ==
              rs[0].resident_bytes + rs[1].resident_bytes + plain_bytes,
          "requested bytes %lld, not the contexts' resident %llu + %llu and the plain blocks' "
          "%llu",
          (long long)s.requested_bytes.current, (unsigned long long)rs[0].resident_bytes,
          (unsigned long long)rs[1].resident_bytes, (unsigned long long)plain_bytes);
    printf("remat_threads_test %s: context 0 (in place) %llu evictions, %llu recomputes, %llu "
           "in-place ops, %llu refused for room; context 1 (copy-on-write) %llu evictions, %llu "
           "recomputes, %llu in-place ops, %llu refused for room; plain: %llu mallocs, %llu "
           "refused, %llu pool checks; %llu values checked\n",
           kind, (unsigned long long)rs[0].evictions, (unsigned long long)rs[0].recomputes,
           (unsigned long long)w[0].mutates, (unsigned long long)w[0].nomem,
           (unsigned long long)rs[1].evictions, (unsigned long long)rs[1].recomputes,
           (unsigned long long)w[1].mutates, (unsigned long long)w[1].nomem,
           (unsigned long long)pw.mallocs, (unsigned long long)pw.nomem,
           (unsigned long long)pw.checks,
           (unsigned long long)(w[0].value_checks + w[1].value_checks));
    /* the program did what the checks are about, whatever the interleaving
     * (60 seeds: at least 134 evictions, 65 recomputes and 44 in-place ops
     * a context) */
    for (int c = 0; c < 2; c++)
        CHECK(rs[c].evictions > 20 && rs[c].recomputes > 10 && w[c].mutates > 5,
              "%s: too little exercised", w[c].name);

    /* Everything released and destroyed: nothing left allocated. */
    for (int c = 0; c < 2; c++) {
        for (size_t i = 0; i < w[c].n; i++)
            if (w[c].live[i])
                release(&w[c], (int)i);
        coop_remat_destroy(w[c].r);
    }
    for (int i = 0; i < MAX_PLAIN; i++)
        if (pw.ptr[i])
            CHECK_OK(coop_free(pool, pw.ptr[i]), "coop_free");
    CHECK_OK(coop_pool_check(pool), "coop_pool_check (all freed)");
    coop_get_stats(pool, &s);
    CHECK(s.allocated_bytes.current == 0 && s.allocation.current == 0,
          "%lld bytes in %lld blocks left allocated", (long long)s.allocated_bytes.current,
          (long long)s.allocation.current);
    coop_pool_destroy(pool);
}

int main(void)
{
    uint64_t seed = test_seed("remat_threads_test", 0x7e57ab1e5eedull);
    shadow = calloc(SHADOW_SLOTS, sizeof *shadow);
    CHECK(shadow != NULL, "out of host memory");
    run("vmm (coop, dtr)", true, COOP_REMAT_COOP, COOP_REMAT_DTR, seed);
    run("segments (coop-eq, dte)", false, COOP_REMAT_COOP_EQ, COOP_REMAT_DTE, seed + 1);
    free(shadow);
    return 0;
}
