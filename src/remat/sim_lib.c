/* A compiled DTR log replayed through the public remat API (sim_lib.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "remat/sim_internal.h"
#include "remat/sim_lib.h"
#include "status.h"

typedef struct lib_drive {
    const sim_program *prog;
    coop_remat *remat;
    bool inplace;
    coop_tensor **handle;   /* per tensor id: its record (base or view); NULL: none */
    uint32_t *refs;         /* per tensor id: handles the program holds */
    uint32_t *storage_refs; /* per storage: the sum over its tensors */
    bool *pinned;           /* per storage: PINned (constants, the end) */
    /* one op's scratch: input records and which of them it pinned; fresh
     * outputs' sizes and records; what each output is (out_kind) */
    coop_tensor **ins;
    bool *in_pinned;
    size_t ins_cap, in_pinned_cap;
    coop_tensor **outs;
    size_t *sizes;
    uint8_t *out_kind;
    size_t outs_cap, sizes_cap, out_kind_cap;
    uint64_t remat_ns, remat_limit;
    bool thrashed;
    /* each search's thread CPU time as the library measured it, sampled
     * from coop_remat_stats.last_search_ns (note_searches) */
    uint64_t *search_ns;
    size_t num_search_ns, search_ns_cap;
    uint64_t searches_seen; /* coop_remat_stats.searches at the last look */
    bool out_of_memory;     /* the samples could not grow */
    sim_lib_counts counts;
} lib_drive;

/* What an output of an op becomes in the API. */
enum { OUT_FRESH, OUT_VIEW, OUT_IN_PLACE, OUT_NONE };

int sim_lib_policy(const sim_options *opt, coop_remat_policy *policy)
{
    switch (opt->policy) {
    case SIM_POLICY_COOP:
        if (opt->window_cost == SIM_WINDOW_LIVE) {
            *policy = COOP_REMAT_COOP;
            return 0;
        }
        if (opt->window_cost == SIM_WINDOW_EQ) {
            *policy = COOP_REMAT_COOP_EQ;
            return 0;
        }
        if (opt->window_cost == SIM_WINDOW_COMP) {
            *policy = COOP_REMAT_COOP_COMP;
            return 0;
        }
        coop_set_error(COOP_ERR_UNSUPPORTED,
                       "the remat API's window costs c_live (coop), c_comp (coop-comp) or c_eq "
                       "(coop-eq), not coop-sum's or coop-dte's");
        return -1;
    case SIM_POLICY_DTR:
        *policy = COOP_REMAT_DTR;
        return 0;
    case SIM_POLICY_DTR_LOCAL:
        *policy = COOP_REMAT_DTR_LOCAL;
        return 0;
    case SIM_POLICY_DTE:
        *policy = COOP_REMAT_DTE;
        return 0;
    case SIM_POLICY_LRU:
        *policy = COOP_REMAT_LRU;
        return 0;
    case SIM_POLICY_SIZE:
        *policy = COOP_REMAT_SIZE;
        return 0;
    default:
        coop_set_error(COOP_ERR_UNSUPPORTED, "the remat API has no %s policy",
                       sim_policy_name(opt->policy));
        return -1;
    }
}

/* The producer the API hands back to the recompute callback: the op id. */
static void *producer_of(uint32_t op)
{
    return (void *)(uintptr_t)op;
}

/* Recomputation costs what the op costs, in the library's logical clock
 * (which it advances itself) and in the run's overhead, accounted here to
 * stop a thrashing run where the simulator does: once recomputation
 * exceeds the limit. The buffer is never touched (PROT_NONE). */
static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t num_inputs,
                             void *out, void *user)
{
    (void)t;
    (void)inputs;
    (void)num_inputs;
    (void)out;
    lib_drive *d = user;
    d->remat_ns += d->prog->ops[(uintptr_t)producer].cost;
    if (d->remat_ns > d->remat_limit) {
        d->thrashed = true;
        return coop_set_error(COOP_ERR_BUSY, "thrash: recomputation exceeds the limit");
    }
    return COOP_OK;
}

/* Samples the searches the library made since the last look: exactly one
 * since then has its time in last_search_ns; more than one (never seen:
 * on_evict runs after every search that evicted, before the next
 * allocation, and a search that evicted nothing fails the run) leaves
 * their times unsampled, counted. */
static void note_searches(lib_drive *d)
{
    coop_remat_stats rs;
    coop_remat_get_stats(d->remat, &rs);
    uint64_t n = rs.searches - d->searches_seen;
    d->searches_seen = rs.searches;
    if (n > 1)
        d->counts.unsampled_searches += n;
    if (n != 1)
        return;
    if (GROW_ARRAY(d->search_ns, d->search_ns_cap, d->num_search_ns + 1, SIM_ARRAY_FIRST)) {
        d->out_of_memory = true;
        return;
    }
    d->search_ns[d->num_search_ns++] = rs.last_search_ns;
}

/* Runs after each search that evicted, once per victim: the first of a
 * search's calls samples its time. */
static void on_evict(coop_tensor *t, void *user)
{
    (void)t;
    note_searches(user);
}

/* A status of the API as the run's result. */
static sim_result result_of(const lib_drive *d, coop_status st)
{
    if (!st)
        return SIM_OK;
    if (d->thrashed)
        return SIM_THRASH;
    return st == COOP_ERR_NOMEM ? SIM_OOM : SIM_ERROR;
}

static coop_tensor *handle_of(const lib_drive *d, uint32_t t)
{
    return d->handle[t];
}

/* The simulator's can_take_over, in the driver's terms: output `out` of a
 * MUTATE keeps the mutated input's buffer when nothing else can observe
 * the old value (one program handle, the one being rebound; not PINned;
 * the op's own pins are the only ones, as nothing else pins at this
 * level). */
static bool takes_over(const lib_drive *d, const sim_op *op, uint32_t out)
{
    const sim_program *p = d->prog;
    int32_t m = p->tensors[out].mutates;
    if (!d->inplace || m < 0)
        return false;
    uint32_t old_t = p->inputs[op->first_input + (uint32_t)m];
    uint32_t old = p->tensors[old_t].storage;
    return handle_of(d, old_t) && !d->pinned[old] && d->storage_refs[old] <= 1 &&
           d->refs[old_t] == 1;
}

/* Whether an output of op before output i already takes over the storage
 * output i mutates: one record carries on as one output (the simulator's
 * rule, sim_runtime.c materialize), the later ones are fresh. */
static bool taken_before(const lib_drive *d, const sim_op *op, uint32_t i)
{
    const sim_program *p = d->prog;
    uint32_t mine = sim_mutated_storage(p, op, op->first_output + i);
    for (uint32_t j = 0; j < i; j++)
        if (d->out_kind[j] == OUT_IN_PLACE &&
            sim_mutated_storage(p, op, op->first_output + j) == mine)
            return true;
    return false;
}

/* Room in one op's scratch arrays for its inputs and outputs: 0, or -1 when
 * out of host memory (the arrays grown so far stay valid). */
static int grow_scratch(lib_drive *d, uint32_t num_inputs, uint32_t num_outputs)
{
    if (GROW_ARRAY(d->ins, d->ins_cap, num_inputs, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(d->in_pinned, d->in_pinned_cap, num_inputs, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(d->outs, d->outs_cap, num_outputs, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(d->sizes, d->sizes_cap, num_outputs, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(d->out_kind, d->out_kind_cap, num_outputs, SIM_ARRAY_FIRST))
        return -1;
    return 0;
}

/* Pins the op's inputs (d->ins[0 .. n)): the resident ones first, so that
 * recomputing a missing one cannot evict them, then the missing ones. */
static coop_status pin_inputs(lib_drive *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        d->in_pinned[i] = false;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < n; i++) {
            if (d->in_pinned[i] || (pass == 0 && !coop_tensor_resident(d->ins[i])))
                continue;
            coop_status st = coop_tensor_pin(d->remat, d->ins[i], NULL);
            if (st)
                return st;
            d->in_pinned[i] = true;
        }
    }
    return COOP_OK;
}

static void unpin_inputs(lib_drive *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (d->in_pinned[i])
            coop_tensor_unpin(d->remat, d->ins[i]);
}

/* The op's output u as an in-place op on the mutated input's record: the
 * record carries on as u (the library keeps the buffer and makes the old
 * value an evicted tensor), and the program's release of the old tensor,
 * which follows, is already done. ins: the op's input records, n. */
static coop_status mutate_in_place(lib_drive *d, const sim_op *op, uint32_t op_id, uint32_t u,
                                   uint32_t n)
{
    const sim_program *p = d->prog;
    uint32_t m = (uint32_t)p->tensors[u].mutates;
    uint32_t old_t = p->inputs[op->first_input + m];
    coop_tensor *rec = handle_of(d, old_t);
    /* the other inputs: the op's, less the mutated one (records of 0-byte
     * storages were left out of ins, so find it by record) */
    coop_tensor *small[16], **extra = n <= 16 ? small : malloc(n * sizeof *extra);
    if (!extra)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop sim --engine lib: out of host memory");
    uint32_t k = 0;
    bool skipped = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!skipped && d->ins[i] == rec) {
            skipped = true;
            continue;
        }
        extra[k++] = d->ins[i];
    }
    coop_status st =
        coop_tensor_mutate(d->remat, rec, op->cost, producer_of(op_id), extra, k, NULL);
    if (extra != small)
        free(extra);
    if (st)
        return st;
    d->handle[u] = rec;
    d->handle[old_t] = NULL;
    d->refs[old_t] = 0;
    d->storage_refs[p->tensors[old_t].storage]--;
    d->counts.inplace_ops++;
    return COOP_OK;
}

/* An op: its fresh outputs made in one call (the op runs once), then its
 * in-place outputs (coop_tensor_mutate), then its views. */
static coop_status run_compute(lib_drive *d, uint32_t op_id)
{
    const sim_program *p = d->prog;
    const sim_op *op = &p->ops[op_id];
    if (grow_scratch(d, op->num_inputs, op->num_outputs))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop sim --engine lib: out of host memory");
    uint32_t n = 0;
    for (uint32_t i = 0; i < op->num_inputs; i++) {
        coop_tensor *h = handle_of(d, p->inputs[op->first_input + i]);
        if (h)
            d->ins[n++] = h;
    }
    coop_status st = pin_inputs(d, n);
    /* which outputs are fresh (not views, not empty, not taken over) */
    uint32_t fresh = 0, in_place = 0;
    for (uint32_t i = 0; i < op->num_outputs && !st; i++) {
        uint32_t u = op->first_output + i;
        const sim_tensor *t = &p->tensors[u];
        d->out_kind[i] = OUT_FRESH;
        if (t->alias >= 0) {
            d->out_kind[i] = OUT_VIEW;
            d->counts.view_outputs++;
        } else if (!p->storages[t->storage].size) {
            d->out_kind[i] = OUT_NONE;
            d->counts.zero_size++;
        } else if (op->is_mutation && takes_over(d, op, u) && !taken_before(d, op, i)) {
            d->out_kind[i] = OUT_IN_PLACE;
            in_place++;
        } else {
            d->sizes[fresh++] = p->storages[t->storage].size;
        }
    }
    if (!st && fresh) {
        st = coop_tensor_create_outputs(d->remat, fresh, d->sizes, op->cost, producer_of(op_id),
                                        d->ins, n, COOP_TENSOR_EVICTABLE, d->outs);
        for (uint32_t i = 0, k = 0; i < op->num_outputs && !st; i++)
            if (d->out_kind[i] == OUT_FRESH)
                d->handle[op->first_output + i] = d->outs[k++];
    }
    if ((fresh > 0) + in_place > 1)
        d->counts.multi_call_ops++;
    for (uint32_t i = 0; i < op->num_outputs && !st; i++) {
        uint32_t u = op->first_output + i;
        const sim_tensor *t = &p->tensors[u];
        if (d->out_kind[i] == OUT_IN_PLACE) {
            st = mutate_in_place(d, op, op_id, u, n);
        } else if (d->out_kind[i] == OUT_VIEW) {
            coop_tensor *base = handle_of(d, p->inputs[op->first_input + (uint32_t)t->alias]);
            if (base)
                st = coop_tensor_alias(d->remat, base, &d->handle[u]);
        }
    }
    for (uint32_t i = 0; i < op->num_outputs && !st; i++) {
        uint32_t u = op->first_output + i;
        d->refs[u] = 1;
        d->storage_refs[p->tensors[u].storage]++;
    }
    unpin_inputs(d, n);
    return st;
}

static coop_status run_release(lib_drive *d, uint32_t t)
{
    if (!d->refs[t])
        return COOP_OK; /* over-release, or released by an in-place op: as the simulator */
    d->refs[t]--;
    d->storage_refs[d->prog->tensors[t].storage]--;
    if (d->refs[t] || !d->handle[t])
        return COOP_OK;
    coop_status st = coop_tensor_release(d->remat, d->handle[t]);
    d->handle[t] = NULL;
    return st;
}

static coop_status run_pin(lib_drive *d, uint32_t t)
{
    uint32_t s = d->prog->tensors[t].storage;
    if (d->pinned[s] || !d->handle[t])
        return COOP_OK;
    coop_status st = coop_tensor_pin(d->remat, d->handle[t], NULL);
    if (!st)
        d->pinned[s] = true;
    return st;
}

static coop_status run_program(lib_drive *d)
{
    const sim_program *p = d->prog;
    for (size_t i = 0; i < p->num_cmds; i++) {
        const sim_cmd *c = &p->cmds[i];
        coop_status st = COOP_OK;
        switch (c->kind) {
        case SIM_COMPUTE:
            st = run_compute(d, c->arg);
            break;
        case SIM_GET:
            if (d->refs[c->arg]) { /* a name holds it, so its record is live */
                d->refs[c->arg]++;
                d->storage_refs[p->tensors[c->arg].storage]++;
            }
            break;
        case SIM_PIN:
            st = run_pin(d, c->arg);
            break;
        case SIM_RELEASE:
            st = run_release(d, c->arg);
            break;
        }
        if (st)
            return st;
    }
    return COOP_OK;
}

/* Whether any storage of prog needs a block (storages of 0 bytes get none). */
static bool needs_a_block(const sim_program *prog)
{
    for (uint32_t s = 0; s < prog->num_storages; s++)
        if (prog->storages[s].size)
            return true;
    return false;
}

/* 0, or -1 (the error set) where an op of prog costs more than the remat
 * API takes (COOP_TENSOR_MAX_COST_NS): a log's TIMEs may add up to 2^61 ns
 * and the simulator runs them, but the library refuses such an op in the
 * middle of a run, in a message naming the API call and not the line. */
static int costs_fit_the_api(const sim_program *prog)
{
    for (uint32_t i = 0; i < prog->num_ops; i++)
        if (prog->ops[i].cost > COOP_TENSOR_MAX_COST_NS) {
            coop_set_error(COOP_ERR_INVALID,
                           "line %" PRIu32 ": TIME %" PRIu64
                           " ns is above the remat API's largest op cost "
                           "(COOP_TENSOR_MAX_COST_NS, 2^48 ns); --engine sim runs it",
                           prog->ops[i].line, prog->ops[i].cost);
            return -1;
        }
    return 0;
}

sim_outcome sim_lib_run(const sim_program *prog, uint64_t peak, const sim_options *opt,
                        double ratio, sim_lib_counts *counts)
{
    sim_outcome out = {.budget_ratio = ratio, .result = SIM_ERROR};
    out.budget = (uint64_t)((double)peak * ratio); /* as sim_run */
    bool coop = opt->policy == SIM_POLICY_COOP;
    lib_drive d = {
        .prog = prog,
        .inplace = opt->inplace < 0 ? coop : opt->inplace > 0,
        .remat_limit = sim_remat_limit(prog->base_compute, opt->overhead_limit),
    };
    /* the simulator's threshold; 0 (nothing is cheaper than 0 ns/byte) is
     * off, as the library would read 0 as its default */
    double threshold = isnan(opt->cheap_threshold) ? (coop ? SIM_DEFAULT_CHEAP_THRESHOLD : -1.0)
                                                   : opt->cheap_threshold;
    coop_remat_config rc = {
        .cheap_threshold = threshold > 0 ? threshold : -1.0,
        .copy_on_write = false, /* in-place ops that are not taken over are created anew */
        .recompute = recompute,
        .on_evict = on_evict,
        .user = &d,
    };
    if (sim_lib_policy(opt, &rc.policy) || costs_fit_the_api(prog))
        return out;
    uint64_t capacity = sim_arena_capacity(out.budget);
    if (!capacity && needs_a_block(prog)) {
        /* as the simulator: no block fits a budget below 512 bytes (the
         * pool, one page, would hold one) */
        out.result = SIM_OOM;
        out.overhead = 1.0;
        if (counts)
            *counts = (sim_lib_counts){0};
        return out;
    }
    coop_config pc;
    sim_arena_pool_config(out.budget, &pc);
    coop_pool *pool = NULL;
    d.handle = calloc(prog->num_tensors + 1, sizeof *d.handle);
    d.refs = calloc(prog->num_tensors + 1, sizeof *d.refs);
    d.storage_refs = calloc(prog->num_storages + 1, sizeof *d.storage_refs);
    d.pinned = calloc(prog->num_storages + 1, sizeof *d.pinned);
    coop_status st;
    if (!d.handle || !d.refs || !d.storage_refs || !d.pinned)
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "coop sim --engine lib: out of host memory");
    else if (!(st = coop_pool_create(&pc, &pool)) && !(st = coop_remat_create(pool, &rc, &d.remat)))
        st = run_program(&d);
    if (d.remat)
        note_searches(&d); /* a last search that failed evicting nothing */
    if (!st && d.out_of_memory)
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "coop sim --engine lib: out of host memory");
    out.result = result_of(&d, st);
    if (d.remat) {
        coop_remat_stats rs;
        coop_remat_get_stats(d.remat, &rs);
        out.evictions = rs.evictions;
        out.remat_ops = rs.recomputes;
        out.overhead = prog->base_compute ? (double)(prog->base_compute + rs.recompute_ns) /
                                                (double)prog->base_compute
                                          : 1.0;
        out.heuristic_evals = rs.heuristic_evals;
        out.frag_failures = rs.frag_failures;
        /* as the simulator: mean free bytes / the pool's capacity (the
         * budget rounded down to 512 bytes) at the searches */
        out.frag_at_evict = rs.searches && capacity ? (double)rs.search_free_bytes /
                                                          (double)rs.searches / (double)capacity
                                                    : 0.0;
        sim_search_percentiles(d.search_ns, d.num_search_ns, &out.search_ns_p50,
                               &out.search_ns_p99);
        d.counts.searches = rs.searches;
    }
    out.inplace_ops = d.counts.inplace_ops;
    if (counts)
        *counts = d.counts;
    coop_remat_destroy(d.remat);
    coop_pool_destroy(pool);
    free(d.handle);
    free(d.refs);
    free(d.storage_refs);
    free(d.pinned);
    free(d.ins);
    free(d.in_pinned);
    free(d.outs);
    free(d.sizes);
    free(d.out_kind);
    free(d.search_ns);
    return out;
}

static int lib_run_feasible(double ratio, void *ctx)
{
    const sim_run_args *a = ctx;
    return sim_feasibility(sim_lib_run(a->prog, a->peak, a->opt, ratio, NULL).result);
}

double sim_lib_min_budget_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                                double tolerance)
{
    sim_run_args a = {prog, peak, opt};
    return sim_bisect_min_ratio(lib_run_feasible, &a, tolerance);
}

double sim_lib_stable_min_ratio(const sim_program *prog, uint64_t peak, const sim_options *opt,
                                double step)
{
    sim_run_args a = {prog, peak, opt};
    return sim_grid_stable_ratio(lib_run_feasible, &a, step);
}
