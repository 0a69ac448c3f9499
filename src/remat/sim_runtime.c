/* The simulator's rematerialization runtime, ideal memory model (sim_runtime.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remat/sim_runtime.h"

#define NONE UINT32_MAX

static const char *const policy_names[SIM_POLICY_COUNT] = {
    [SIM_POLICY_DTR] = "dtr",
    [SIM_POLICY_DTR_FULL] = "dtr-full",
    [SIM_POLICY_DTR_LOCAL] = "dtr-local",
    [SIM_POLICY_DTE] = "dte",
    [SIM_POLICY_LRU] = "lru",
    [SIM_POLICY_SIZE] = "size",
    [SIM_POLICY_COOP] = "coop",
};

const char *sim_policy_name(sim_policy p)
{
    return (unsigned)p < SIM_POLICY_COUNT ? policy_names[p] : "?";
}

int sim_policy_parse(const char *name, sim_policy *out)
{
    for (int i = 0; i < SIM_POLICY_COUNT; i++) {
        if (!strcmp(name, policy_names[i])) {
            *out = (sim_policy)i;
            return 0;
        }
    }
    return -1;
}

const char *sim_result_name(sim_result r)
{
    switch (r) {
    case SIM_OK:
        return "ok";
    case SIM_OOM:
        return "oom";
    case SIM_THRASH:
        return "thrash";
    default:
        return "error";
    }
}

void sim_stats_free(sim_stats *s)
{
    free(s->search_ns);
    s->search_ns = NULL;
    s->search_ns_cap = 0;
}

/* ---- the evictable pool: insertion order kept, holes compacted lazily -- */

static int pool_add(sim_runtime *rt, uint32_t s)
{
    if (rt->storages[s].pool_pos != NONE)
        return 0;
    if (rt->pool_len == rt->pool_cap) {
        if (rt->pool_live * 2 < rt->pool_len) {
            uint32_t n = 0;
            for (uint32_t i = 0; i < rt->pool_len; i++) {
                uint32_t x = rt->pool[i];
                if (x != NONE) {
                    rt->storages[x].pool_pos = n;
                    rt->pool[n++] = x;
                }
            }
            rt->pool_len = n;
        } else {
            uint32_t cap = rt->pool_cap ? rt->pool_cap * 2 : 1024;
            uint32_t *pool = realloc(rt->pool, cap * sizeof *pool);
            if (!pool)
                return -1;
            rt->pool = pool;
            rt->pool_cap = cap;
        }
    }
    rt->storages[s].pool_pos = rt->pool_len;
    rt->pool[rt->pool_len++] = s;
    rt->pool_live++;
    return 0;
}

static void pool_remove(sim_runtime *rt, uint32_t s)
{
    uint32_t pos = rt->storages[s].pool_pos;
    if (pos == NONE)
        return;
    rt->pool[pos] = NONE;
    rt->storages[s].pool_pos = NONE;
    rt->pool_live--;
    while (rt->pool_len && rt->pool[rt->pool_len - 1] == NONE)
        rt->pool_len--;
}

/* ---- locks ---------------------------------------------------------------- */

static void lock(sim_runtime *rt, uint32_t s)
{
    if (rt->storages[s].ref_int++ == 0)
        pool_remove(rt, s);
}

static int unlock(sim_runtime *rt, uint32_t s)
{
    if (--rt->storages[s].ref_int == 0)
        return pool_add(rt, s);
    return 0;
}

/* ---- neighbourhoods -------------------------------------------------------- */

static uint32_t next_mark(sim_runtime *rt)
{
    if (++rt->mark_epoch == 0) {
        for (uint32_t i = 0; i < rt->prog->num_storages; i++)
            rt->storages[i].mark = 0;
        rt->mark_epoch = 1;
    }
    return rt->mark_epoch;
}

static int push(sim_runtime *rt, uint32_t s)
{
    if (rt->stack_len == rt->stack_cap) {
        uint32_t cap = rt->stack_cap ? rt->stack_cap * 2 : 1024;
        uint32_t *st = realloc(rt->stack, cap * sizeof *st);
        if (!st)
            return -1;
        rt->stack = st;
        rt->stack_cap = cap;
    }
    rt->stack[rt->stack_len++] = s;
    return 0;
}

/* Calls visit(rt, n, ctx) for every storage adjacent to s (through the
 * parents and created children of s's created tensors), duplicates included. */
#define FOR_EACH_NEIGHBOUR(rt, s, n, body)                                                         \
    do {                                                                                           \
        const sim_program *p_ = (rt)->prog;                                                        \
        const sim_storage *ss_ = &p_->storages[s];                                                 \
        for (uint32_t k_ = 0; k_ < (rt)->storages[s].num_created; k_++) {                          \
            const sim_tensor *t_ = &p_->tensors[p_->storage_tensors[ss_->first_tensor + k_]];      \
            const sim_op *op_ = &p_->ops[t_->op];                                                  \
            for (uint32_t i_ = 0; i_ < op_->num_inputs; i_++) {                                    \
                uint32_t n = p_->tensors[p_->inputs[op_->first_input + i_]].storage;               \
                body;                                                                              \
            }                                                                                      \
            for (uint32_t i_ = 0; i_ < t_->num_children; i_++) {                                   \
                uint32_t c_ = p_->children[t_->first_child + i_];                                  \
                if (c_ >= (rt)->num_created_tensors)                                               \
                    break;                                                                         \
                uint32_t n = p_->tensors[c_].storage;                                              \
                body;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Compute (ns) of the evicted storages reachable from s through evicted
 * storages, in one direction (children if forward, else parents): simrd's
 * Region, whose interior is e*. */
static int64_t region_compute(sim_runtime *rt, uint32_t s, bool forward)
{
    const sim_program *p = rt->prog;
    uint32_t mark = next_mark(rt);
    int64_t compute = 0;
    rt->stack_len = 0;
    push(rt, s);
    while (rt->stack_len) {
        uint32_t x = rt->stack[--rt->stack_len];
        const sim_storage *xs = &p->storages[x];
        for (uint32_t k = 0; k < rt->storages[x].num_created; k++) {
            const sim_tensor *t = &p->tensors[p->storage_tensors[xs->first_tensor + k]];
            const sim_op *op = &p->ops[t->op];
            uint32_t n = forward ? t->num_children : op->num_inputs;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t u =
                    forward ? p->children[t->first_child + i] : p->inputs[op->first_input + i];
                if (forward && u >= rt->num_created_tensors)
                    break;
                uint32_t us = p->tensors[u].storage;
                rt_storage *r = &rt->storages[us];
                if (r->material || us == s || r->mark == mark)
                    continue;
                r->mark = mark;
                compute += (int64_t)r->compute;
                if (push(rt, us))
                    return compute;
            }
        }
    }
    return compute;
}

/* c_eq: s's compute plus the values of the distinct classes of its evicted
 * neighbours. */
static int64_t eq_compute(sim_runtime *rt, uint32_t s)
{
    int64_t compute = (int64_t)rt->storages[s].compute;
    rt->stack_len = 0; /* roots seen, to count each class once */
    FOR_EACH_NEIGHBOUR(rt, s, n, {
        rt_storage *r = &rt->storages[n];
        if (!r->material && n != s && r->ecn != NONE) {
            uint32_t root = uf_find(&rt->uf, r->ecn);
            bool seen = false;
            for (uint32_t j = 0; j < rt->stack_len && !seen; j++)
                seen = rt->stack[j] == root;
            if (!seen) {
                push(rt, root);
                compute += rt->uf.value[root];
            }
        }
    });
    return compute;
}

/* ---- scores -------------------------------------------------------------- */

/* compute / (size * staleness) with the exactness of simrd's Python ints:
 * the product is formed in long double (64-bit mantissa). */
static double ratio_score(int64_t compute, uint64_t size, uint64_t staleness)
{
    long double denom = (long double)size * (long double)staleness;
    if (denom <= 0)
        return INFINITY;
    return (double)((long double)compute / denom);
}

static double score(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    uint64_t size = rt->prog->storages[s].size;
    uint64_t stale = rt->clock - (uint64_t)r->last_access;
    rt->stats.heuristic_evals++;
    switch (rt->policy) {
    case SIM_POLICY_DTR:
        return ratio_score(eq_compute(rt, s), size, stale);
    case SIM_POLICY_DTR_FULL:
        return ratio_score((int64_t)r->compute + region_compute(rt, s, true) +
                               region_compute(rt, s, false),
                           size, stale);
    case SIM_POLICY_LRU:
        return (double)r->last_access;
    case SIM_POLICY_SIZE:
        return size ? 1.0 / (double)size : INFINITY;
    case SIM_POLICY_DTR_LOCAL:
    case SIM_POLICY_DTE: /* ideal model: no neighbouring free blocks, so DTR-local */
    default:
        return ratio_score((int64_t)r->compute, size, stale);
    }
}

/* simrd Heuristic.choose: argmin in pool order, ties to the later, stop at 0. */
static uint32_t choose(sim_runtime *rt)
{
    double best = INFINITY;
    uint32_t best_s = NONE;
    for (uint32_t i = 0; i < rt->pool_len; i++) {
        uint32_t s = rt->pool[i];
        if (s == NONE)
            continue;
        double c = score(rt, s);
        if (c <= best) {
            best = c;
            best_s = s;
        }
        if (c == 0)
            break;
    }
    if (best_s == NONE) /* every score NaN: take the last, as simrd would fail */
        for (uint32_t i = 0; i < rt->pool_len; i++)
            if (rt->pool[i] != NONE)
                best_s = rt->pool[i];
    return best_s;
}

/* ---- eviction ------------------------------------------------------------- */

static int evict(sim_runtime *rt, uint32_t s)
{
    const sim_program *p = rt->prog;
    rt_storage *r = &rt->storages[s];
    r->material = false;
    rt->memory -= p->storages[s].size;
    pool_remove(rt, s);
    for (uint32_t k = 0; k < r->num_created; k++)
        rt->defined[p->storage_tensors[p->storages[s].first_tensor + k]] = false;
    if (rt->policy == SIM_POLICY_DTR) {
        r->ecn = uf_make(&rt->uf, (int64_t)r->compute);
        if (r->ecn == NONE)
            return -1;
        FOR_EACH_NEIGHBOUR(rt, s, n, {
            rt_storage *q = &rt->storages[n];
            if (!q->material && n != s && q->ecn != NONE)
                uf_merge(&rt->uf, q->ecn, r->ecn);
        });
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int record_search(sim_stats *st, uint64_t ns)
{
    if (st->searches == st->search_ns_cap) {
        size_t cap = st->search_ns_cap ? st->search_ns_cap * 2 : 1024;
        uint64_t *a = realloc(st->search_ns, cap * sizeof *a);
        if (!a)
            return -1;
        st->search_ns = a;
        st->search_ns_cap = cap;
    }
    st->search_ns[st->searches++] = ns;
    return 0;
}

/* Evicts until size more bytes fit under the budget. */
static sim_result make_room(sim_runtime *rt, uint64_t size)
{
    while (rt->memory + size > rt->budget) {
        if (!rt->pool_live)
            return SIM_OOM;
        rt->stats.frag_sum += (double)(rt->budget - rt->memory) / (double)rt->budget;
        uint64_t t0 = now_ns();
        uint32_t s = choose(rt);
        if (record_search(&rt->stats, now_ns() - t0) || evict(rt, s))
            return SIM_ERROR;
        rt->stats.evictions++;
    }
    return SIM_OK;
}

/* ---- computing ------------------------------------------------------------- */

/* simrd _compute: runs t's op, materializing its missing siblings too. */
static int compute_op(sim_runtime *rt, uint32_t t, bool remat)
{
    const sim_program *p = rt->prog;
    const sim_op *op = &p->ops[p->tensors[t].op];
    uint32_t first = op->first_output, n = op->num_outputs;
    /* state before: which outputs were defined, which storages missing */
    bool small_was_defined[8];
    bool *was_defined = n <= 8 ? small_was_defined : malloc(n * sizeof *was_defined);
    bool small_missing[8];
    bool *missing = n <= 8 ? small_missing : malloc(n * sizeof *missing);
    if (!was_defined || !missing)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        was_defined[i] = rt->defined[first + i];
        missing[i] = !rt->storages[p->tensors[first + i].storage].material;
    }
    rt->clock += op->cost;
    rt->memory += op->total_size;
    if (rt->memory > rt->stats.peak_memory)
        rt->stats.peak_memory = rt->memory;
    if (remat) {
        rt->stats.remat_compute += op->cost;
        rt->stats.remat_ops++;
    } else {
        rt->stats.model_compute += op->cost;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u = first + i;
        if (u != t && was_defined[i]) {
            rt->memory -= p->tensors[u].size; /* recomputed duplicate, dropped */
            continue;
        }
        rt->storages[p->tensors[u].storage].material = true;
        rt->defined[u] = true;
    }
    int err = 0;
    /* simrd order: siblings first, then t */
    for (uint32_t pass = 0; pass < 2 && !err; pass++) {
        for (uint32_t i = 0; i < n && !err; i++) {
            uint32_t u = first + i;
            if ((pass == 0) == (u == t) || !missing[i])
                continue;
            uint32_t s = p->tensors[u].storage;
            rt_storage *r = &rt->storages[s];
            if (r->ecn != NONE) {
                uf_add(&rt->uf, r->ecn, -(int64_t)r->compute);
                r->ecn = NONE;
            }
            err = pool_add(rt, s);
        }
    }
    if (was_defined != small_was_defined)
        free(was_defined);
    if (missing != small_missing)
        free(missing);
    return err;
}

/* simrd _materialize: brings t into memory, recomputing inputs first. */
static sim_result materialize(sim_runtime *rt, uint32_t t, bool remat)
{
    const sim_program *p = rt->prog;
    const sim_op *op = &p->ops[p->tensors[t].op];
    const uint32_t *in = p->inputs + op->first_input;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        rt->storages[p->tensors[in[i]].storage].last_access = (int64_t)rt->clock;
    /* lock the inputs present, then bring the others in and lock them */
    bool small_present[16];
    bool *present = op->num_inputs <= 16 ? small_present : malloc(op->num_inputs);
    if (!present)
        return SIM_ERROR;
    for (uint32_t i = 0; i < op->num_inputs; i++) {
        present[i] = rt->defined[in[i]];
        if (present[i])
            lock(rt, p->tensors[in[i]].storage);
    }
    sim_result res = SIM_OK;
    for (uint32_t i = 0; i < op->num_inputs && res == SIM_OK; i++) {
        if (present[i])
            continue;
        if (!rt->defined[in[i]])
            res = materialize(rt, in[i], true);
        if (res == SIM_OK)
            lock(rt, p->tensors[in[i]].storage);
    }
    if (present != small_present)
        free(present);
    if (res != SIM_OK)
        return res;
    if (rt->memory + op->total_size > rt->budget && (res = make_room(rt, op->total_size)))
        return res;
    if (compute_op(rt, t, remat))
        return SIM_ERROR;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        if (unlock(rt, p->tensors[in[i]].storage))
            return SIM_ERROR;
    if (rt->stats.remat_compute > rt->remat_limit)
        return SIM_THRASH;
    return SIM_OK;
}

/* simrd compute(): creates an op's tensors and materializes them. */
static sim_result run_compute(sim_runtime *rt, uint32_t op_id)
{
    const sim_program *p = rt->prog;
    const sim_op *op = &p->ops[op_id];
    for (uint32_t i = 0; i < op->num_outputs; i++) {
        uint32_t t = op->first_output + i;
        const sim_tensor *st = &p->tensors[t];
        rt_storage *r = &rt->storages[st->storage];
        const sim_storage *ss = &p->storages[st->storage];
        /* a storage's compute sums the distinct ops of its tensors; outputs of
         * one op are consecutive, so comparing with the previous suffices */
        bool same_op =
            r->num_created &&
            p->tensors[p->storage_tensors[ss->first_tensor + r->num_created - 1]].op == op_id;
        if (!same_op)
            r->compute += op->cost;
        r->num_created++;
        r->ref_ext++;
        rt->tensor_refs[t] = 1;
    }
    rt->num_created_tensors = op->first_output + op->num_outputs;
    sim_result res = materialize(rt, op->first_output, false);
    if (res)
        return res;
    for (uint32_t i = 0; i < op->num_outputs; i++)
        rt->storages[p->tensors[op->first_output + i].storage].last_access = (int64_t)rt->clock;
    return SIM_OK;
}

static sim_result run_release(sim_runtime *rt, uint32_t t)
{
    uint32_t s = rt->prog->tensors[t].storage;
    rt_storage *r = &rt->storages[s];
    if (!r->ref_ext || !rt->tensor_refs[t])
        return SIM_OK; /* over-release: simrd would assert; ignore */
    r->ref_ext--;
    rt->tensor_refs[t]--;
    if (r->ref_ext || !r->material)
        return SIM_OK;
    if (rt->baseline) {
        /* V1 banishing: gone for good, pinned or not */
        r->material = false;
        rt->memory -= rt->prog->storages[s].size;
        pool_remove(rt, s);
        return SIM_OK;
    }
    if (!r->pinned && evict(rt, s))
        return SIM_ERROR;
    return SIM_OK;
}

static sim_result run_pin(sim_runtime *rt, uint32_t t)
{
    if (!rt->defined[t]) {
        sim_result res = materialize(rt, t, true);
        if (res)
            return res;
    }
    rt_storage *r = &rt->storages[rt->prog->tensors[t].storage];
    if (r->pinned)
        return SIM_OK;
    lock(rt, rt->prog->tensors[t].storage);
    r->pinned = true;
    return SIM_OK;
}

static sim_result run(sim_runtime *rt)
{
    const sim_program *p = rt->prog;
    for (size_t i = 0; i < p->num_cmds; i++) {
        const sim_cmd *c = &p->cmds[i];
        sim_result res = SIM_OK;
        switch (c->kind) {
        case SIM_COMPUTE:
            res = run_compute(rt, c->arg);
            break;
        case SIM_GET:
            rt->tensor_refs[c->arg]++;
            rt->storages[p->tensors[c->arg].storage].ref_ext++;
            break;
        case SIM_PIN:
            res = run_pin(rt, c->arg);
            break;
        case SIM_RELEASE:
            res = run_release(rt, c->arg);
            break;
        }
        if (res)
            return res;
    }
    return SIM_OK;
}

static int runtime_init(sim_runtime *rt, const sim_program *prog, sim_policy policy,
                        uint64_t budget, uint64_t remat_limit)
{
    *rt = (sim_runtime){
        .prog = prog, .policy = policy, .budget = budget, .remat_limit = remat_limit, .clock = 1};
    rt->storages = calloc(prog->num_storages + 1, sizeof *rt->storages);
    rt->defined = calloc(prog->num_tensors + 1, sizeof *rt->defined);
    rt->tensor_refs = calloc(prog->num_tensors + 1, sizeof *rt->tensor_refs);
    if (!rt->storages || !rt->defined || !rt->tensor_refs)
        return -1;
    for (uint32_t s = 0; s < prog->num_storages; s++) {
        rt->storages[s].pool_pos = NONE;
        rt->storages[s].ecn = NONE;
        rt->storages[s].last_access = INT64_MIN;
    }
    rt->stats.base_compute = prog->base_compute;
    return 0;
}

static void runtime_free(sim_runtime *rt)
{
    free(rt->storages);
    free(rt->defined);
    free(rt->tensor_refs);
    free(rt->pool);
    free(rt->stack);
    uf_free(&rt->uf);
}

sim_result sim_run_ideal(const sim_program *prog, sim_policy policy, uint64_t budget,
                         uint64_t remat_limit, sim_stats *stats)
{
    sim_runtime rt;
    sim_result res = SIM_ERROR;
    if (!runtime_init(&rt, prog, policy, budget, remat_limit))
        res = run(&rt);
    *stats = rt.stats;
    rt.stats.search_ns = NULL;
    runtime_free(&rt);
    return res;
}

uint64_t sim_baseline_peak(const sim_program *prog)
{
    sim_runtime rt;
    uint64_t peak = 0;
    if (!runtime_init(&rt, prog, SIM_POLICY_LRU, UINT64_MAX, UINT64_MAX)) {
        rt.baseline = true;
        if (run(&rt) == SIM_OK)
            peak = rt.stats.peak_memory;
    }
    sim_stats_free(&rt.stats);
    runtime_free(&rt);
    return peak;
}
