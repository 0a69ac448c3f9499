/* The simulator's rematerialization runtime, ideal memory model (sim_runtime.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "growable.h"
#include "remat/sim_internal.h"
#include "remat/sim_live.h"
#include "status.h"

#define NONE SIM_NONE

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
    if (rt->mem_pool)
        sim_arena_sync(rt, s);
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
    if (rt->mem_pool)
        sim_arena_sync(rt, s);
}

/* ---- locks ---------------------------------------------------------------- */

static void lock(sim_runtime *rt, uint32_t s)
{
    if (rt->storages[s].ref_int++ == 0)
        pool_remove(rt, s);
}

/* A storage whose buffer an in-place op took over is no longer material:
 * it stays out of the pool. */
static int unlock(sim_runtime *rt, uint32_t s)
{
    if (--rt->storages[s].ref_int == 0 && rt->storages[s].material)
        return pool_add(rt, s);
    return 0;
}

/* ---- eviction ------------------------------------------------------------- */

int sim_mark_evicted(sim_runtime *rt, uint32_t s)
{
    const sim_program *p = rt->prog;
    rt_storage *r = &rt->storages[s];
    r->material = false;
    sim_comp_forget(rt, s); /* no-op: a material storage's label is stale */
    sim_live_flipped(rt, s);
    pool_remove(rt, s);
    for (uint32_t k = 0; k < r->num_created; k++)
        rt->defined[p->storage_tensors[p->storages[s].first_tensor + k]] = false;
    if (!rt->uses_eq)
        return 0;
    /* simrd RuntimeV2Optimized._evict: a class of its own, merged with the
     * classes of its evicted neighbours. Their components merge with s
     * into one: their labels go (components not next to s are unchanged) */
    r->ecn = uf_make(&rt->uf, (int64_t)r->compute);
    if (r->ecn == SIM_NONE)
        return -1;
    r->eq_valid = false;
    sim_neighbours it = sim_neighbours_of(rt, s);
    uint32_t n;
    while (sim_neighbours_next(&it, &n)) {
        rt_storage *q = &rt->storages[n];
        q->eq_valid = false; /* s now counts in its c_eq */
        if (!q->material && n != s && q->ecn != SIM_NONE) {
            uf_merge(&rt->uf, q->ecn, r->ecn);
            sim_comp_forget(rt, n);
        }
    }
    return 0;
}

static uint64_t footprint(const sim_runtime *rt, uint32_t s)
{
    uint64_t size = rt->prog->storages[s].size;
    return (size + rt->align - 1) / rt->align * rt->align;
}

int sim_evict(sim_runtime *rt, uint32_t s)
{
    if (sim_mark_evicted(rt, s))
        return -1;
    if (rt->mem_pool) {
        rt->memory -= rt->storages[s].placed;
        sim_arena_free(rt, s);
    } else {
        rt->memory -= footprint(rt, s);
    }
    return 0;
}

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    /* the searching thread's CPU time: on a shared machine, wall clock
     * would charge preemption to whichever search it hit */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

sim_result sim_evict_choice(sim_runtime *rt)
{
    if (!rt->pool_live)
        return SIM_OOM;
    if (rt->cfg.check_caches)
        sim_check_caches(rt); /* what the choice is about to read */
    if (sim_evict(rt, sim_choose(rt)))
        return SIM_ERROR;
    rt->stats.evictions++;
    return SIM_OK;
}

int sim_record_search(sim_stats *st, uint64_t ns)
{
    if (GROW_ARRAY(st->search_ns, st->search_ns_cap, (size_t)st->searches + 1, SIM_ARRAY_FIRST))
        return -1;
    st->search_ns[st->searches++] = ns;
    return 0;
}

/* Ideal model: evicts (policy argmin, one at a time) until size more bytes
 * fit under the budget. All the argmins for one request are one search. */
static sim_result make_room(sim_runtime *rt, uint64_t size)
{
    if (rt->memory + size <= rt->budget)
        return SIM_OK;
    /* free share of the budget; a budget of 0 bytes has none (not 0/0) */
    if (rt->budget)
        rt->stats.frag_sum += (double)(rt->budget - rt->memory) / (double)rt->budget;
    uint64_t t0 = sim_now_ns();
    sim_result res = SIM_OK;
    while (res == SIM_OK && rt->memory + size > rt->budget)
        res = sim_evict_choice(rt);
    if (sim_record_search(&rt->stats, sim_now_ns() - t0))
        return SIM_ERROR;
    return res;
}

/* ---- computing ------------------------------------------------------------- */

/* Recomputable in-place: output i of a MUTATE takes over the mutated input's
 * storage (buffer and address) when nothing else can observe the old value:
 * no external handle besides the one being rebound, no lock besides this
 * op's own, not pinned. The old value becomes an evicted storage that keeps
 * its producer; the output's producer is the mutation applied to it. */
static bool can_take_over(const sim_runtime *rt, const sim_op *op, uint32_t out)
{
    const sim_program *p = rt->prog;
    int32_t m = p->tensors[out].mutates;
    if (!rt->cfg.inplace || m < 0 || rt->storages[p->tensors[out].storage].material)
        return false;
    uint32_t old = sim_mutated_storage(p, op, out);
    const rt_storage *r = &rt->storages[old];
    uint32_t own_locks = 0;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        own_locks += p->tensors[p->inputs[op->first_input + i]].storage == old;
    return r->material && !r->pinned && r->ref_ext <= 1 && r->ref_int == own_locks &&
           footprint(rt, old) == footprint(rt, p->tensors[out].storage);
}

/* Brings the missing output storages of t's op into memory: ideal model,
 * room under the budget; arena model, a block each. Outputs that take over
 * their mutated input's buffer (take_over[i]) need nothing. */
static sim_result place_outputs(sim_runtime *rt, const sim_op *op, const bool *take_over)
{
    const sim_program *p = rt->prog;
    if (!rt->mem_pool) {
        uint64_t need = op->total_size;
        if (rt->align > 1) {
            need = 0;
            for (uint32_t i = 0; i < op->num_outputs; i++)
                if (p->tensors[op->first_output + i].alias < 0)
                    need += footprint(rt, p->tensors[op->first_output + i].storage);
        }
        for (uint32_t i = 0; i < op->num_outputs; i++)
            if (take_over[i])
                need -= footprint(rt, p->tensors[op->first_output + i].storage);
        return make_room(rt, need);
    }
    for (uint32_t i = 0; i < op->num_outputs; i++) {
        const sim_tensor *u = &p->tensors[op->first_output + i];
        rt_storage *r = &rt->storages[u->storage];
        if (u->alias >= 0 || take_over[i] || r->material || r->ptr || !p->storages[u->storage].size)
            continue;
        sim_result res = sim_arena_place(rt, u->storage);
        if (res)
            return res;
    }
    return SIM_OK;
}

/* simrd _compute: runs t's op, materializing its missing siblings too. */
static int compute_op(sim_runtime *rt, uint32_t t, bool remat, const bool *take_over)
{
    const sim_program *p = rt->prog;
    const sim_op *op = &p->ops[p->tensors[t].op];
    uint32_t first = op->first_output, n = op->num_outputs;
    bool small_was_defined[8], small_missing[8];
    bool *was_defined = n <= 8 ? small_was_defined : malloc(n * sizeof *was_defined);
    bool *missing = n <= 8 ? small_missing : malloc(n * sizeof *missing);
    if (!was_defined || !missing) {
        if (was_defined != small_was_defined)
            free(was_defined);
        if (missing != small_missing)
            free(missing);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        was_defined[i] = rt->defined[first + i];
        missing[i] = !rt->storages[p->tensors[first + i].storage].material;
    }
    int err = 0;
    rt->clock += op->cost;
    if (!rt->mem_pool) {
        /* simrd adds every output's bytes, then drops recomputed duplicates */
        for (uint32_t i = 0; i < n; i++)
            if (p->tensors[first + i].alias < 0)
                rt->memory += rt->align > 1 ? footprint(rt, p->tensors[first + i].storage)
                                            : p->tensors[first + i].size;
    }
    for (uint32_t i = 0; i < n && !err; i++) {
        if (!take_over[i])
            continue;
        uint32_t s = p->tensors[first + i].storage;
        uint32_t old = sim_mutated_storage(p, op, first + i);
        if (rt->mem_pool)
            sim_arena_transfer(rt, old, s);
        if (!rt->mem_pool)
            rt->memory -= footprint(rt, old);
        err = sim_mark_evicted(rt, old);
        rt->stats.inplace_ops++;
    }
    if (rt->memory > rt->stats.peak_memory)
        rt->stats.peak_memory = rt->memory;
    if (remat) {
        rt->stats.remat_compute += op->cost;
        rt->stats.remat_ops++;
        /* stops at UINT32_MAX, as the library's count (remat.c): wrapped,
         * the most recomputed storage would read as never recomputed */
        if (rt->storages[p->tensors[t].storage].remats < UINT32_MAX)
            rt->storages[p->tensors[t].storage].remats++;
    } else {
        rt->stats.model_compute += op->cost;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u = first + i;
        if (u != t && was_defined[i]) {
            if (!rt->mem_pool && p->tensors[u].alias < 0) /* recomputed duplicate, dropped */
                rt->memory -=
                    rt->align > 1 ? footprint(rt, p->tensors[u].storage) : p->tensors[u].size;
            continue;
        }
        /* an evicted storage back: its component may split (a storage
         * never evicted, ecn SIM_NONE, was in none) */
        sim_comp_forget(rt, p->tensors[u].storage);
        rt->storages[p->tensors[u].storage].material = true;
        sim_live_flipped(rt, p->tensors[u].storage);
        rt->defined[u] = true;
    }
    /* simrd order: siblings first, then t */
    for (uint32_t pass = 0; pass < 2 && !err; pass++) {
        for (uint32_t i = 0; i < n && !err; i++) {
            uint32_t u = first + i;
            if ((pass == 0) == (u == t) || !missing[i])
                continue;
            uint32_t s = p->tensors[u].storage;
            rt_storage *r = &rt->storages[s];
            if (r->ecn != SIM_NONE) {
                uf_leave(&rt->uf, r->ecn, (int64_t)r->compute);
                r->ecn = SIM_NONE;
                sim_eq_forget_around(rt, s); /* s no longer counts in their c_eq */
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
    /* p->inputs is NULL when no op of the program has inputs: no offset then */
    const uint32_t *in = op->num_inputs ? p->inputs + op->first_input : NULL;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        rt->storages[p->tensors[in[i]].storage].last_access = (int64_t)rt->clock;
    /* lock the inputs present, then bring the others in and lock them */
    uint32_t nflags = op->num_inputs > op->num_outputs ? op->num_inputs : op->num_outputs;
    bool small_flags[16];
    bool *flags = nflags <= 16 ? small_flags : malloc(nflags);
    if (!flags)
        return SIM_ERROR;
    for (uint32_t i = 0; i < op->num_inputs; i++) {
        flags[i] = rt->defined[in[i]];
        if (flags[i])
            lock(rt, p->tensors[in[i]].storage);
    }
    sim_result res = SIM_OK;
    for (uint32_t i = 0; i < op->num_inputs && res == SIM_OK; i++) {
        if (flags[i])
            continue;
        if (!rt->defined[in[i]])
            res = materialize(rt, in[i], true);
        if (res == SIM_OK)
            lock(rt, p->tensors[in[i]].storage);
    }
    /* flags now say which outputs take over their mutated input's buffer.
     * One buffer holds one output: a MUTATE naming a storage twice (its
     * arguments v, v or mutated indices 0, 0) gives the later outputs fresh
     * storage, else the old buffer would count once for two outputs */
    for (uint32_t i = 0; i < op->num_outputs && res == SIM_OK; i++) {
        flags[i] = can_take_over(rt, op, op->first_output + i);
        for (uint32_t j = 0; j < i && flags[i]; j++)
            flags[i] = !flags[j] || sim_mutated_storage(p, op, op->first_output + j) !=
                                        sim_mutated_storage(p, op, op->first_output + i);
    }
    if (res == SIM_OK)
        res = place_outputs(rt, op, flags);
    if (res == SIM_OK && compute_op(rt, t, remat, flags))
        res = SIM_ERROR;
    if (flags != small_flags)
        free(flags);
    if (res != SIM_OK)
        return res;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        if (unlock(rt, p->tensors[in[i]].storage))
            return SIM_ERROR;
    if (rt->stats.remat_compute > rt->remat_limit)
        return SIM_THRASH;
    return SIM_OK;
}

/* The op's new tensors give their storages new neighbours (the op's
 * inputs), and the inputs' storages a new neighbour each (the outputs'
 * storages): c_eq caches around them go, except that an output storage not
 * evicted (a fresh one, usually) counts in nobody's c_eq, so the inputs'
 * caches stay; its later eviction forgets them (sim_mark_evicted). */
static void forget_around_new_tensors(sim_runtime *rt, const sim_op *op)
{
    const sim_program *p = rt->prog;
    bool evicted_output = false;
    for (uint32_t i = 0; i < op->num_outputs; i++) {
        rt_storage *r = &rt->storages[p->tensors[op->first_output + i].storage];
        r->eq_valid = false;
        evicted_output |= !r->material && r->ecn != SIM_NONE;
    }
    if (!evicted_output)
        return;
    for (uint32_t i = 0; i < op->num_inputs; i++)
        rt->storages[p->tensors[p->inputs[op->first_input + i]].storage].eq_valid = false;
}

void sim_comp_forget_new_tensors(sim_runtime *rt, const sim_op *op)
{
    const sim_program *p = rt->prog;
    for (uint32_t i = 0; i < op->num_outputs; i++) {
        uint32_t s = p->tensors[op->first_output + i].storage;
        const rt_storage *r = &rt->storages[s];
        if (r->material || r->ecn == SIM_NONE)
            continue;
        sim_comp_forget(rt, s);
        for (uint32_t k = 0; k < op->num_inputs; k++)
            sim_comp_forget(rt, p->tensors[p->inputs[op->first_input + k]].storage);
    }
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
    sim_comp_forget_new_tensors(rt, op);
    sim_live_created(rt, op_id);
    if (rt->uses_eq)
        forget_around_new_tensors(rt, op);
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
    sim_live_changed(rt, s, true);
    if (r->ref_ext || !r->material)
        return SIM_OK;
    if (rt->baseline) {
        /* V1 banishing: gone for good, pinned or not */
        r->material = false;
        sim_live_flipped(rt, s);
        rt->memory -= footprint(rt, s);
        pool_remove(rt, s);
        return SIM_OK;
    }
    if (!r->pinned && sim_evict(rt, s))
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
            sim_live_changed(rt, p->tensors[c->arg].storage, false);
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
        if (rt->cfg.check_caches)
            sim_check_caches(rt);
    }
    return SIM_OK;
}

static int runtime_init(sim_runtime *rt, const sim_program *prog, const sim_config *cfg)
{
    *rt = (sim_runtime){.prog = prog,
                        .cfg = *cfg,
                        .policy = cfg->policy,
                        .budget = cfg->budget,
                        .remat_limit = cfg->remat_limit,
                        .align = 1,
                        .clock = 1};
    rt->uses_eq = cfg->policy == SIM_POLICY_DTR || cfg->policy == SIM_POLICY_COOP;
    rt->storages = calloc(prog->num_storages + 1, sizeof *rt->storages);
    rt->defined = calloc(prog->num_tensors + 1, sizeof *rt->defined);
    rt->tensor_refs = calloc(prog->num_tensors + 1, sizeof *rt->tensor_refs);
    if (!rt->storages || !rt->defined || !rt->tensor_refs) {
        coop_set_error_message("simulator: out of host memory for %" PRIu32 " storages",
                               prog->num_storages);
        return -1;
    }
    for (uint32_t s = 0; s < prog->num_storages; s++) {
        rt->storages[s].pool_pos = SIM_NONE;
        rt->storages[s].ecn = SIM_NONE;
        rt->storages[s].last_access = INT64_MIN;
    }
    rt->stats.base_compute = prog->base_compute;
    if (cfg->arena && sim_arena_open(rt))
        return -1;
    if (sim_live_open(rt))
        return -1;
    return 0;
}

static void runtime_free(sim_runtime *rt)
{
    sim_arena_close(rt);
    sim_live_close(rt);
    free(rt->storages);
    free(rt->defined);
    free(rt->tensor_refs);
    free(rt->pool);
    free(rt->stack);
    free(rt->eq_roots);
    free(rt->victims);
    uf_free(&rt->uf);
}

sim_result sim_execute(const sim_program *prog, const sim_config *cfg, sim_stats *stats)
{
    sim_runtime rt;
    sim_result res = SIM_ERROR;
    /* The run's SIM_ERROR paths are allocation failures that return -1
     * through several layers (growable arrays, scratch flags, the live
     * cache); the few others set their own message. So a SIM_ERROR that
     * comes back without a message ran out of host memory. */
    coop_clear_error();
    if (!runtime_init(&rt, prog, cfg))
        res = run(&rt);
    if (res == SIM_ERROR && !coop_last_error()[0])
        coop_set_error_message("simulator: out of host memory");
    *stats = rt.stats;
    rt.stats.search_ns = NULL;
    runtime_free(&rt);
    return res;
}

uint64_t sim_baseline_peak(const sim_program *prog, uint64_t align)
{
    sim_runtime rt;
    sim_config cfg = {.policy = SIM_POLICY_LRU, .budget = UINT64_MAX, .remat_limit = UINT64_MAX};
    uint64_t peak = 0;
    bool ran = false;
    if (!runtime_init(&rt, prog, &cfg)) {
        rt.baseline = true;
        rt.align = align ? align : 1;
        if (run(&rt) == SIM_OK) {
            peak = rt.stats.peak_memory;
            ran = true;
        }
    }
    /* a budget without limit fails only for want of host memory (see
     * sim_execute); the caller tells it from a log that allocates nothing */
    if (ran)
        coop_clear_error(); /* a cache that could not grow on the way is no failure */
    else
        coop_set_error(COOP_ERR_HOST_NOMEM,
                       "simulator: out of host memory in the unlimited run that gives the peak "
                       "(budgets are ratios of it)");
    sim_stats_free(&rt.stats);
    runtime_free(&rt);
    return peak;
}
