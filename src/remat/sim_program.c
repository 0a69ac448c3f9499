/* Compiling a DTR log into a static op graph and a schedule (sim_program.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "remat/sim_program.h"
#include "status.h"

#define UNBOUND UINT32_MAX

typedef struct builder {
    const dtr_log *log;
    sim_program *p;
    size_t ops_cap, tensors_cap, storages_cap, inputs_cap, cmds_cap, refs_cap;
    size_t num_inputs;
    uint32_t *binding;    /* name id -> tensor id, UNBOUND */
    uint32_t *released;   /* name id -> line of its RELEASE, 0 while usable */
    int64_t *refs;        /* tensor id -> names bound to it (simrd's _ref) */
    uint32_t *bind_order; /* names in order of first binding */
    uint32_t num_bound;
} builder;

static coop_status nomem(void)
{
    return coop_set_error(COOP_ERR_HOST_NOMEM, "out of host memory compiling a DTR log");
}

static coop_status push_cmd(builder *b, sim_cmd_kind kind, uint32_t arg)
{
    sim_program *p = b->p;
    if (GROW_ARRAY(p->cmds, b->cmds_cap, p->num_cmds + 1, SIM_ARRAY_FIRST))
        return nomem();
    p->cmds[p->num_cmds++] = (sim_cmd){kind, arg};
    return COOP_OK;
}

static void bind(builder *b, uint32_t name, uint32_t tensor)
{
    if (b->binding[name] == UNBOUND)
        b->bind_order[b->num_bound++] = name;
    b->binding[name] = tensor;
}

static const char *path_of(const builder *b)
{
    return b->log->path ? b->log->path : "log";
}

/* The tensor a name is bound to, or an error naming the line. A released
 * name keeps its binding (simrd's tensor_map does; the end pins by it), but
 * a use of it is a use of a dead tensor: the simulator rematerialized it
 * silently. */
static coop_status lookup(builder *b, const dtr_instr *in, uint32_t name, const char *role,
                          uint32_t *tensor)
{
    *tensor = b->binding[name];
    if (*tensor == UNBOUND)
        return coop_set_error(COOP_ERR_INVALID, "%s:%" PRIu32 ": %s %s is not defined", path_of(b),
                              in->line, role, b->log->names[name]);
    if (b->released[name])
        return coop_set_error(COOP_ERR_INVALID,
                              "%s:%" PRIu32 ": %s %s was released at line %" PRIu32, path_of(b),
                              in->line, role, b->log->names[name], b->released[name]);
    return COOP_OK;
}

/* A name is bound once, released or not (simrd asserts it; DTR's logger
 * numbers every tensor afresh). */
static coop_status check_unbound(builder *b, const dtr_instr *in, uint32_t name)
{
    if (b->binding[name] == UNBOUND)
        return COOP_OK;
    if (b->released[name])
        return coop_set_error(COOP_ERR_INVALID,
                              "%s:%" PRIu32 ": %s is defined again after its release at line "
                              "%" PRIu32 " (a DTR log binds each name once)",
                              path_of(b), in->line, b->log->names[name], b->released[name]);
    return coop_set_error(COOP_ERR_INVALID, "%s:%" PRIu32 ": %s is already defined", path_of(b),
                          in->line, b->log->names[name]);
}

/* Creates an op over input tensors args with nout outputs; output i has
 * sizes[i] bytes of fresh storage, or aliases input aliases[i] (>= 0). */
static coop_status add_op(builder *b, const dtr_instr *in, const uint32_t *args, uint32_t nargs,
                          const uint64_t *sizes, const int32_t *aliases, const int32_t *mutates,
                          uint32_t nout, bool constant, bool mutation)
{
    sim_program *p = b->p;
    if (GROW_ARRAY(p->ops, b->ops_cap, p->num_ops + 1, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(p->tensors, b->tensors_cap, p->num_tensors + nout, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(p->storages, b->storages_cap, p->num_storages + nout, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(p->inputs, b->inputs_cap, b->num_inputs + nargs, SIM_ARRAY_FIRST) ||
        GROW_ARRAY(b->refs, b->refs_cap, p->num_tensors + nout, SIM_ARRAY_FIRST))
        return nomem();
    uint32_t op_id = p->num_ops++;
    sim_op *op = &p->ops[op_id];
    *op = (sim_op){.cost = constant ? 0 : in->time_ns,
                   .first_input = (uint32_t)b->num_inputs,
                   .num_inputs = nargs,
                   .first_output = p->num_tensors,
                   .num_outputs = nout,
                   .line = in->line,
                   .name = constant ? UINT32_MAX : in->op,
                   .is_constant = constant,
                   .is_mutation = mutation};
    if (nargs) /* constants have no inputs (memcpy with NULL is undefined) */
        memcpy(p->inputs + b->num_inputs, args, nargs * sizeof *args);
    b->num_inputs += nargs;
    p->base_compute += op->cost;
    for (uint32_t i = 0; i < nout; i++) {
        uint32_t t = p->num_tensors++;
        sim_tensor *st = &p->tensors[t];
        *st = (sim_tensor){
            .op = op_id, .index = i, .alias = aliases[i], .mutates = mutates ? mutates[i] : -1};
        if (aliases[i] >= 0) {
            st->storage = p->tensors[args[aliases[i]]].storage;
            st->size = 0;
        } else {
            st->storage = p->num_storages++;
            st->size = sizes[i];
            p->storages[st->storage] = (sim_storage){.size = sizes[i], .root = t};
            op->total_size += sizes[i];
        }
        b->refs[t] = 1;
    }
    return push_cmd(b, SIM_COMPUTE, op_id);
}

static coop_status compile_instr(builder *b, const dtr_instr *in)
{
    const dtr_log *log = b->log;
    sim_program *p = b->p;
    coop_status st = COOP_OK;
    uint32_t t, src;
    switch (in->kind) {
    case DTR_CONSTANT: {
        if ((st = check_unbound(b, in, in->name)))
            return st;
        int32_t fresh = -1;
        if ((st = add_op(b, in, NULL, 0, &in->memory, &fresh, NULL, 1, true, false)))
            return st;
        t = p->num_tensors - 1;
        bind(b, in->name, t);
        return push_cmd(b, SIM_PIN, t);
    }
    case DTR_CALL:
    case DTR_MUTATE: {
        uint32_t nargs = in->num_args;
        uint32_t nout = in->kind == DTR_CALL ? in->num_results : in->num_mutates;
        /* an op without outputs has nothing to compute or rematerialize */
        if (nout == 0)
            return coop_set_error(COOP_ERR_INVALID, "%s:%" PRIu32 ": %s with no %s", path_of(b),
                                  in->line, in->kind == DTR_CALL ? "CALL" : "MUTATE",
                                  in->kind == DTR_CALL ? "RESULT" : "mutated argument");
        uint32_t *args = malloc((nargs + 1) * sizeof *args);
        uint64_t *sizes = malloc((nout + 1) * sizeof *sizes);
        int32_t *aliases = malloc((nout + 1) * sizeof *aliases);
        if (!args || !sizes || !aliases) {
            st = nomem();
            goto call_out;
        }
        for (uint32_t i = 0; i < nargs && !st; i++)
            st = lookup(b, in, log->args[in->first_arg + i], "argument", &args[i]);
        if (st)
            goto call_out;
        if (in->kind == DTR_CALL) {
            /* each result is bound as it is checked (to the output id
             * add_op gives it), so that a name listed twice in RESULT is
             * refused: it was bound twice, its first tensor held forever */
            uint32_t first_out = p->num_tensors;
            for (uint32_t i = 0; i < nout && !st; i++) {
                const dtr_result *r = &log->results[in->first_result + i];
                if (b->binding[r->name] != UNBOUND && b->binding[r->name] >= first_out)
                    st = coop_set_error(COOP_ERR_INVALID,
                                        "%s:%" PRIu32 ": %s is listed twice in RESULT", path_of(b),
                                        in->line, log->names[r->name]);
                else if (!(st = check_unbound(b, in, r->name)))
                    bind(b, r->name, first_out + i);
                aliases[i] = r->alias;
                sizes[i] = r->alias == DTR_FRESH ? r->memory : 0;
            }
            if (st || (st = add_op(b, in, args, nargs, sizes, aliases, NULL, nout, false, false)))
                goto call_out;
        } else {
            for (uint32_t i = 0; i < nout; i++) {
                uint32_t arg = args[log->mutates[in->first_mutate + i]];
                sizes[i] = p->storages[p->tensors[arg].storage].size;
                aliases[i] = -1;
            }
            if ((st =
                     add_op(b, in, args, nargs, sizes, aliases,
                            (const int32_t *)(log->mutates + in->first_mutate), nout, false, true)))
                goto call_out;
            uint32_t first_out = p->ops[p->num_ops - 1].first_output;
            for (uint32_t i = 0; i < nout && !st; i++) {
                uint32_t name = log->args[in->first_arg + log->mutates[in->first_mutate + i]];
                uint32_t old = b->binding[name];
                bind(b, name, first_out + i);
                b->refs[old]--;
                st = push_cmd(b, SIM_RELEASE, old);
            }
        }
    call_out:
        free(args);
        free(sizes);
        free(aliases);
        return st;
    }
    case DTR_COPY:
        if ((st = check_unbound(b, in, in->name)) ||
            (st = lookup(b, in, in->src, "COPY source", &src)))
            return st;
        bind(b, in->name, src);
        b->refs[src]++;
        return push_cmd(b, SIM_GET, src);
    case DTR_COPY_FROM:
        if ((st = lookup(b, in, in->name, "COPY_FROM destination", &t)) ||
            (st = lookup(b, in, in->src, "COPY_FROM source", &src)))
            return st;
        /* onto the tensor it holds (a onto a): nothing changes. Released
         * first, then got, the tensor lost its last handle in between: the
         * peak's run banished it, the budgeted runs evicted it, and its next
         * use rematerialized it (oom at ratio 1) */
        if (t == src)
            return COOP_OK;
        bind(b, in->name, src);
        b->refs[t]--;
        b->refs[src]++;
        if ((st = push_cmd(b, SIM_RELEASE, t)))
            return st;
        return push_cmd(b, SIM_GET, src);
    case DTR_RELEASE:
        if (b->binding[in->name] == UNBOUND)
            return COOP_OK; /* simrd ignores releases of undefined names */
        /* a second release dropped a handle another name held */
        if ((st = lookup(b, in, in->name, "RELEASE of", &t)))
            return st;
        b->released[in->name] = in->line;
        b->refs[t]--;
        return push_cmd(b, SIM_RELEASE, t);
    case DTR_ANNOTATE:
        return COOP_OK;
    }
    return COOP_OK;
}

/* Children (consumer outputs) and storage membership, as flat arrays.
 * Their positions are 32-bit, and build_neighbours lists every edge twice
 * (once from each end): more than 2^31 - 1 (input, output) pairs over all
 * ops is refused (path: the log, for the message). */
static coop_status build_edges(sim_program *p, const char *path)
{
    uint32_t *child_count = calloc(p->num_tensors + 1, sizeof *child_count);
    uint32_t *tensor_count = calloc(p->num_storages + 1, sizeof *tensor_count);
    if (!child_count || !tensor_count) {
        free(child_count);
        free(tensor_count);
        return nomem();
    }
    size_t num_children = 0;
    for (uint32_t o = 0; o < p->num_ops; o++) {
        const sim_op *op = &p->ops[o];
        for (uint32_t i = 0; i < op->num_inputs; i++)
            child_count[p->inputs[op->first_input + i]] += op->num_outputs;
        num_children += (size_t)op->num_inputs * op->num_outputs;
    }
    /* one op line of 2^16 arguments and 2^15 results (1 MiB) has 2^31;
     * past 2^32 in all, the uint32_t positions below wrapped and wrote
     * beyond children */
    if (num_children > UINT32_MAX / 2) {
        free(child_count);
        free(tensor_count);
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: the ops have %zu (input, output) pairs in all, more than "
                              "the simulator's 2^31 - 1",
                              path, num_children);
    }
    for (uint32_t t = 0; t < p->num_tensors; t++)
        tensor_count[p->tensors[t].storage]++;
    p->children = malloc((num_children + 1) * sizeof *p->children);
    p->storage_tensors = malloc((p->num_tensors + 1) * sizeof *p->storage_tensors);
    if (!p->children || !p->storage_tensors) {
        free(child_count);
        free(tensor_count);
        return nomem();
    }
    uint32_t pos = 0;
    for (uint32_t t = 0; t < p->num_tensors; t++) {
        p->tensors[t].first_child = pos;
        pos += child_count[t];
    }
    pos = 0;
    for (uint32_t s = 0; s < p->num_storages; s++) {
        p->storages[s].first_tensor = pos;
        pos += tensor_count[s];
    }
    /* fill in creation order: ops in order, so children are in order too */
    for (uint32_t o = 0; o < p->num_ops; o++) {
        const sim_op *op = &p->ops[o];
        for (uint32_t i = 0; i < op->num_inputs; i++) {
            sim_tensor *parent = &p->tensors[p->inputs[op->first_input + i]];
            for (uint32_t k = 0; k < op->num_outputs; k++)
                p->children[parent->first_child + parent->num_children++] = op->first_output + k;
        }
    }
    for (uint32_t t = 0; t < p->num_tensors; t++) {
        sim_storage *s = &p->storages[p->tensors[t].storage];
        p->storage_tensors[s->first_tensor + s->num_tensors++] = t;
    }
    free(child_count);
    free(tensor_count);
    return COOP_OK;
}

static int by_storage_then_since(const void *a, const void *b)
{
    const sim_neighbour *x = a, *y = b;
    if (x->storage != y->storage)
        return x->storage < y->storage ? -1 : 1;
    return (x->since > y->since) - (x->since < y->since);
}

static int by_since_then_storage(const void *a, const void *b)
{
    const sim_neighbour *x = a, *y = b;
    if (x->since != y->since)
        return x->since < y->since ? -1 : 1;
    return (x->storage > y->storage) - (x->storage < y->storage);
}

/* Each storage's distinct neighbours with the tensor whose creation first
 * makes them neighbours: via tensor t's op inputs, from t on; via t's
 * consumer u, from u on (u > t). Sorted by that tensor, so a walk over
 * what exists stops at the first entry not yet created. */
static coop_status build_neighbours(sim_program *p)
{
    size_t total = 0;
    for (uint32_t t = 0; t < p->num_tensors; t++)
        total += (size_t)p->ops[p->tensors[t].op].num_inputs + p->tensors[t].num_children;
    p->neighbour_first = malloc(((size_t)p->num_storages + 1) * sizeof *p->neighbour_first);
    p->neighbours = malloc((total + 1) * sizeof *p->neighbours);
    if (!p->neighbour_first || !p->neighbours || total > UINT32_MAX)
        return nomem();
    uint32_t len = 0;
    for (uint32_t s = 0; s < p->num_storages; s++) {
        p->neighbour_first[s] = len;
        uint32_t first = len;
        const sim_storage *ss = &p->storages[s];
        for (uint32_t k = 0; k < ss->num_tensors; k++) {
            uint32_t t = p->storage_tensors[ss->first_tensor + k];
            const sim_tensor *tt = &p->tensors[t];
            const sim_op *op = &p->ops[tt->op];
            for (uint32_t i = 0; i < op->num_inputs; i++) {
                uint32_t n = p->tensors[p->inputs[op->first_input + i]].storage;
                if (n != s)
                    p->neighbours[len++] = (sim_neighbour){n, t};
            }
            for (uint32_t i = 0; i < tt->num_children; i++) {
                uint32_t u = p->children[tt->first_child + i];
                if (p->tensors[u].storage != s)
                    p->neighbours[len++] = (sim_neighbour){p->tensors[u].storage, u};
            }
        }
        /* distinct storages, each with its earliest tensor */
        qsort(p->neighbours + first, len - first, sizeof *p->neighbours, by_storage_then_since);
        uint32_t out = first;
        for (uint32_t i = first; i < len; i++)
            if (out == first || p->neighbours[out - 1].storage != p->neighbours[i].storage)
                p->neighbours[out++] = p->neighbours[i];
        len = out;
        qsort(p->neighbours + first, len - first, sizeof *p->neighbours, by_since_then_storage);
    }
    p->neighbour_first[p->num_storages] = len;
    return COOP_OK;
}

coop_status sim_program_build(const dtr_log *log, sim_program *out)
{
    *out = (sim_program){0};
    builder b = {.log = log, .p = out};
    b.binding = malloc((log->num_names + 1) * sizeof *b.binding);
    b.bind_order = malloc((log->num_names + 1) * sizeof *b.bind_order);
    b.released = calloc(log->num_names + 1, sizeof *b.released);
    const char *path = log->path ? log->path : "log";
    const char *slash = strrchr(path, '/');
    out->name = strdup(slash ? slash + 1 : path);
    coop_status st = COOP_OK;
    if (!b.binding || !b.bind_order || !b.released || !out->name)
        st = nomem();
    for (uint32_t i = 0; !st && i < log->num_names; i++)
        b.binding[i] = UNBOUND;
    for (size_t i = log->start; !st && i < log->num_instrs; i++)
        st = compile_instr(&b, &log->instrs[i]);
    /* only annotations and releases to replay (or START after every op):
     * a program of 0 bytes ran 'ok' at every ratio, as an empty file did */
    if (!st && !out->num_ops) {
        if (log->start)
            st = coop_set_error(COOP_ERR_INVALID,
                                "%s: nothing to simulate: no CONSTANT, CALL or MUTATE after "
                                "START (line %" PRIu32 ")",
                                path, log->instrs[log->start - 1].line);
        else
            st = coop_set_error(COOP_ERR_INVALID,
                                "%s: nothing to simulate: no CONSTANT, CALL or MUTATE in the log",
                                path);
    }
    /* simrd's REMATERIALIZE output condition: pin what is still named */
    for (uint32_t i = 0; !st && i < b.num_bound; i++) {
        uint32_t t = b.binding[b.bind_order[i]];
        if (b.refs[t] > 0)
            st = push_cmd(&b, SIM_PIN, t);
    }
    if (!st)
        st = build_edges(out, path);
    if (!st)
        st = build_neighbours(out);
    free(b.binding);
    free(b.bind_order);
    free(b.released);
    free(b.refs);
    if (st)
        sim_program_free(out);
    return st;
}

coop_status sim_program_load(const char *path, sim_program *out)
{
    dtr_log log;
    coop_status st = dtr_log_read(path, &log);
    if (st) {
        *out = (sim_program){0};
        return st;
    }
    st = sim_program_build(&log, out);
    dtr_log_free(&log);
    return st;
}

void sim_program_free(sim_program *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->ops);
    free(p->tensors);
    free(p->storages);
    free(p->inputs);
    free(p->children);
    free(p->storage_tensors);
    free(p->neighbour_first);
    free(p->neighbours);
    free(p->cmds);
    *p = (sim_program){0};
}
