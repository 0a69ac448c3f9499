/*
 * Host allocation fault sweeps: every malloc / calloc / realloc / strdup
 * call an operation makes is failed in turn (host_alloc_fault.h: the n-th
 * call after arming returns NULL, n = 1, 2, ... until the operation runs
 * without reaching it). Each failing run must return a clear status
 * (COOP_ERR_HOST_NOMEM, or SIM_ERROR for a simulation) with a message,
 * never crash, leave its output zeroed where the API promises so, and once
 * its owner has cleaned up, leave as many live blocks as before: a leak
 * check that works without ASan. A run the fault did not stop must give the
 * unfaulted run's answer.
 *
 * Operations: each trace reader on a small input (pickle, text, gzip text,
 * minimalloc CSV, DTR log, and trace_read's detection), a DTR log compiled
 * into a simulator program, simulations at a budget that evicts (ideal and
 * arena memory, several policies), the remat library driven by a program
 * (sim_lib_run), and two remat API sequences on a small pool (remat_test's
 * shapes; many small tensors, so that a search evicts dozens) that must
 * stay valid (coop_pool_check) after every refused call, with every tensor
 * still accessible and every eviction told to the owner (on_evict). The
 * pool is made inside each run so that its metadata's growth is freed
 * with it.
 *
 * Not reached: allocations inside shared libraries (zlib's inflate state,
 * libc's stdio buffers); see host_alloc_fault.h. jansson's blocks are
 * counted (json_set_alloc_funcs) but not failed: it reports a failure in its
 * lexer as a syntax error, which no reader could tell from bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "coop.h"
#include "host_alloc_fault.h"
#include "remat/sim.h"
#include "remat/sim_lib.h"
#include "remat/sim_program.h"
#include "status.h"
#include "trace/dtr_log.h"
#include "trace/trace.h"

#define CORPUS COOP_TEST_SRCDIR "/tests/fuzz/corpus/"

/* Bounds one sweep: an operation making more allocation calls than this is
 * a bad pick of input for a test that must stay seconds long. */
#define MAX_CALLS 20000

/* One operation under test: run() does it (faults armed), returning its
 * status; cleanup() releases what a successful run() produced (faults
 * disarmed); check_failed() (optional) checks the state a refused run
 * left. */
typedef struct operation {
    const char *name;
    coop_status (*run)(void *ctx);
    void (*cleanup)(void *ctx);
    void (*check_failed)(void *ctx);
    void *ctx;
} operation;

/* Sweeps op; returns the number of allocation calls it makes (= runs that
 * were failed). */
static long current_call; /* the call being failed, for messages */

static long sweep(const operation *op)
{
    for (long n = 1; n <= MAX_CALLS + 1; n++) {
        current_call = n;
        long before = host_fault_live();
        coop_clear_error();
        host_fault_arm(n);
        coop_status st = op->run(op->ctx);
        bool hit = host_fault_disarm();
        if (st == COOP_OK) {
            op->cleanup(op->ctx);
        } else {
            if (!hit)
                fail_msg("%s: failed without a fault (call %ld): %s: %s", op->name, n,
                         coop_strerror(st), coop_last_error());
            if (st != COOP_ERR_HOST_NOMEM)
                fail_msg("%s: allocation call %ld failed: status %s, not host-nomem: %s", op->name,
                         n, coop_strerror(st), coop_last_error());
            if (!coop_last_error()[0])
                fail_msg("%s: allocation call %ld failed without a message", op->name, n);
            if (op->check_failed)
                op->check_failed(op->ctx);
        }
        long after = host_fault_live();
        if (after != before)
            fail_msg("%s: allocation call %ld failed: %ld blocks leaked (status %s)", op->name, n,
                     after - before, coop_strerror(st));
        if (!hit) {
            if (st != COOP_OK)
                fail_msg("%s: unreachable", op->name);
            return n - 1;
        }
    }
    fail_msg("%s: more than %d allocation calls", op->name, MAX_CALLS);
    return -1;
}

static void report(const char *what, long calls)
{
    printf("%-40s %5ld allocation calls failed in turn\n", what, calls);
}

/* ---- trace readers ---- */

typedef struct read_ctx {
    coop_status (*read)(const char *path, trace *out);
    const char *path;
    trace t;
    size_t events; /* the unfaulted read's count */
} read_ctx;

static coop_status read_run(void *ctx)
{
    read_ctx *c = ctx;
    return c->read(c->path, &c->t);
}

static void read_cleanup(void *ctx)
{
    read_ctx *c = ctx;
    if (c->t.num_events != c->events)
        fail_msg("%s: %zu events after a recovered fault, not %zu", c->path, c->t.num_events,
                 c->events);
    trace_free(&c->t);
}

static void read_check_failed(void *ctx)
{
    read_ctx *c = ctx;
    static const trace zero;
    if (memcmp(&c->t, &zero, sizeof zero) != 0)
        fail_msg("%s: the output is not zeroed after a failed read", c->path);
}

static void sweep_reader(const char *name, coop_status (*read)(const char *, trace *),
                         const char *path)
{
    read_ctx c = {.read = read, .path = path};
    assert_int_equal(read(path, &c.t), COOP_OK);
    c.events = c.t.num_events;
    assert_true(c.events > 0);
    trace_free(&c.t);
    operation op = {name, read_run, read_cleanup, read_check_failed, &c};
    report(name, sweep(&op));
}

static void readers(void **state)
{
    (void)state;
    sweep_reader("pickle (snapshot3.pickle)", trace_read_pickle, CORPUS "pickle/snapshot3.pickle");
    sweep_reader("pickle (cs336-forward-head.p2)", trace_read_pickle,
                 CORPUS "pickle/cs336-forward-head.p2.pickle");
    sweep_reader("pickle (cs336-forward-head.p4)", trace_read_pickle,
                 CORPUS "pickle/cs336-forward-head.p4.pickle");
    sweep_reader("text (unet-head.trace)", trace_read_text, CORPUS "text/unet-head.trace");
    sweep_reader("minimalloc (buffers.csv)", trace_read_minimalloc,
                 CORPUS "trace_read/buffers.csv");
    sweep_reader("dtr (unet-head.jsonl)", trace_read_dtr, CORPUS "dtr/unet-head.jsonl");
    sweep_reader("detect+read (ops.jsonl)", trace_read, CORPUS "dtr/ops.jsonl");
    sweep_reader("detect+read (snapshot.pickle)", trace_read, CORPUS "trace_read/snapshot.pickle");
    sweep_reader("detect+read (example.trace)", trace_read, CORPUS "text/example.trace");
}

/* The text reader on gzip input: a gzip copy of unet-head.trace written
 * with the text writer (itself swept: a refused write removes nothing it
 * should not and leaks nothing). */
typedef struct write_ctx {
    const trace *t;
    const char *path;
} write_ctx;

static coop_status write_run(void *ctx)
{
    write_ctx *c = ctx;
    return trace_write_text_to(c->t, c->path, true);
}

static void write_cleanup(void *ctx)
{
    (void)ctx;
}

static void gzip_text(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(trace_read_text(CORPUS "text/unet-head.trace", &t), COOP_OK);
    char path[] = "/tmp/coop-host-fault-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_ctx w = {&t, path};
    operation op = {"write text (gzip)", write_run, write_cleanup, NULL, &w};
    report(op.name, sweep(&op));
    assert_int_equal(trace_write_text_to(&t, path, true), COOP_OK);
    trace_free(&t);
    sweep_reader("text (gzip unet-head)", trace_read_text, path);
    unlink(path);
}

/* ---- simulator ---- */

/* Appends printf-style text to a buffer of cap bytes. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < cap - *len);
    *len += (size_t)n;
}

static void put_call(char *buf, size_t cap, size_t *len, const char *args, int first, int count,
                     int alias, unsigned time)
{
    put(buf, cap, len, "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"op%d\",\"ARGS\":[%s],\"RESULT\":[",
        first % 7, args);
    for (int i = 0; i < count; i++)
        put(buf, cap, len, "%s\"t%d\"", i ? "," : "", first + i);
    put(buf, cap, len, "],\"TIME\":\"%u\"}\n", time);
    for (int i = 0; i < count; i++)
        put(buf, cap, len,
            "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"t%d\",\"MEMORY\":\"%d\"}\n"
            "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"t%d\",\"ALIAS\":\"%d\"}\n",
            first + i, 4096 * (1 + (first + i) % 3), first + i, alias);
}

/* A small training-step-like log that evicts under a budget: a constant, a
 * forward chain of 24 ops (one with 10 outputs, more than the simulator's
 * inline output slots; one view; one in-place op; one copy), then a
 * backward pass reading the forward tensors in reverse, then releases. */
static size_t make_log(char *buf, size_t cap)
{
    size_t len = 0;
    put(buf, cap, &len,
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"4096\"}\n");
    char args[64];
    int next = 0, last = -1;
    for (int i = 0; i < 24; i++) {
        if (last < 0)
            snprintf(args, sizeof args, "\"w\"");
        else
            snprintf(args, sizeof args, "\"t%d\",\"w\"", last);
        int count = i == 12 ? 10 : 1;
        put_call(buf, cap, &len, args, next, count, -1, 10u + 37u * (unsigned)i % 101u);
        last = next;
        next += count;
        if (i == 6) { /* a view of the last result */
            snprintf(args, sizeof args, "\"t%d\"", last);
            put_call(buf, cap, &len, args, next, 1, 0, 1);
            next++;
        }
        if (i == 8)
            put(buf, cap, &len,
                "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"add_\",\"ARGS\":[\"t%d\",\"w\"],"
                "\"MUTATE\":[0],\"TIME\":\"3\"}\n",
                last);
        if (i == 10)
            put(buf, cap, &len, "{\"INSTRUCTION\":\"COPY\",\"DST\":\"c\",\"SRC\":\"t%d\"}\n", last);
    }
    for (int t = last, g = 0; t >= 0; t -= 2, g++) {
        snprintf(args, sizeof args, "\"t%d\",\"w\"", t);
        put(buf, cap, &len,
            "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"grad\",\"ARGS\":[%s],\"RESULT\":[\"g%d\"],"
            "\"TIME\":\"5\"}\n"
            "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"g%d\",\"MEMORY\":\"2048\"}\n"
            "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"g%d\",\"ALIAS\":\"-1\"}\n"
            "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"g%d\"}\n",
            args, g, g, g, g);
    }
    for (int t = 0; t < next; t++)
        put(buf, cap, &len, "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"t%d\"}\n", t);
    put(buf, cap, &len, "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"c\"}\n");
    return len;
}

typedef struct parse_ctx {
    const char *path;
    dtr_log log;
} parse_ctx;

static coop_status parse_run(void *ctx)
{
    parse_ctx *c = ctx;
    return dtr_log_read(c->path, &c->log);
}

static void parse_cleanup(void *ctx)
{
    dtr_log_free(&((parse_ctx *)ctx)->log);
}

typedef struct build_ctx {
    const dtr_log *log;
    sim_program prog;
} build_ctx;

static coop_status build_run(void *ctx)
{
    build_ctx *c = ctx;
    return sim_program_build(c->log, &c->prog);
}

static void build_cleanup(void *ctx)
{
    sim_program_free(&((build_ctx *)ctx)->prog);
}

typedef struct load_ctx {
    const char *path;
    sim_program prog;
} load_ctx;

static coop_status load_run(void *ctx)
{
    load_ctx *c = ctx;
    return sim_program_load(c->path, &c->prog);
}

static void load_cleanup(void *ctx)
{
    sim_program_free(&((load_ctx *)ctx)->prog);
}

typedef struct run_ctx {
    const sim_program *prog;
    uint64_t peak;
    sim_options opt;
    double ratio;
    bool lib; /* sim_lib_run instead of sim_run */
    sim_outcome want;
    long degraded; /* lib runs the fault changed without failing them */
} run_ctx;

static sim_outcome simulate(const run_ctx *c)
{
    return c->lib ? sim_lib_run(c->prog, c->peak, &c->opt, c->ratio, NULL)
                  : sim_run(c->prog, c->peak, &c->opt, c->ratio);
}

/* SIM_ERROR reads as host-nomem; a run that went through must match the
 * unfaulted one (a fault must not silently change the answer). */
static coop_status sim_run_op(void *ctx)
{
    run_ctx *c = ctx;
    sim_outcome got = simulate(c);
    if (got.result == SIM_ERROR)
        return COOP_ERR_HOST_NOMEM;
    bool same = got.result == c->want.result && got.evictions == c->want.evictions &&
                got.remat_ops == c->want.remat_ops;
    if (!same && c->lib) {
        /* The remat library evicts inside calls that cannot fail halfway
         * (a release, making room): when the union-find class of an evicted
         * tensor cannot be allocated (remat_evict.c join_evicted_neighbours)
         * or a cost walk runs short (remat_cost.c), it goes on with a worse
         * cost estimate, so later choices may differ. Degraded, not wrong. */
        c->degraded++;
        return COOP_OK;
    }
    if (!same)
        fail_msg("result %d, %llu evictions, %llu remats after failing allocation call %ld; "
                 "unfaulted: %d, %llu, %llu",
                 (int)got.result, (unsigned long long)got.evictions,
                 (unsigned long long)got.remat_ops, current_call, (int)c->want.result,
                 (unsigned long long)c->want.evictions, (unsigned long long)c->want.remat_ops);
    return COOP_OK;
}

static void nothing(void *ctx)
{
    (void)ctx;
}

static void simulator(void **state)
{
    (void)state;
    static char text[64 * 1024];
    size_t len = make_log(text, sizeof text);
    char path[] = "/tmp/coop-host-fault-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    parse_ctx pc = {.path = path};
    operation parse = {"dtr_log_read (generated log)", parse_run, parse_cleanup, NULL, &pc};
    report(parse.name, sweep(&parse));

    /* the same log gzip-compressed: the DTR reader's own gzip path, and
     * sim_program_load (read and compile in one) */
    char gz_path[] = "/tmp/coop-host-fault-XXXXXX";
    fd = mkstemp(gz_path);
    assert_true(fd >= 0);
    gzFile gz = gzdopen(fd, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, text, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
    parse_ctx gc = {.path = gz_path};
    operation parse_gz = {"dtr_log_read (generated log, gzip)", parse_run, parse_cleanup, NULL,
                          &gc};
    report(parse_gz.name, sweep(&parse_gz));
    load_ctx lc = {.path = gz_path};
    operation load = {"sim_program_load (generated log, gzip)", load_run, load_cleanup, NULL, &lc};
    report(load.name, sweep(&load));
    unlink(gz_path);

    assert_int_equal(dtr_log_read(pc.path, &pc.log), COOP_OK);
    unlink(path);
    build_ctx bc = {.log = &pc.log};
    operation build = {"sim_program_build (generated log)", build_run, build_cleanup, NULL, &bc};
    report(build.name, sweep(&build));
    assert_int_equal(sim_program_build(&pc.log, &bc.prog), COOP_OK);
    dtr_log_free(&pc.log);

    static const struct {
        sim_policy policy;
        sim_memory memory;
        bool lib;
        const char *name;
    } runs[] = {
        {SIM_POLICY_DTR, SIM_MEMORY_IDEAL, false, "sim_run dtr ideal"},
        {SIM_POLICY_DTR_FULL, SIM_MEMORY_IDEAL, false, "sim_run dtr-full ideal"},
        {SIM_POLICY_LRU, SIM_MEMORY_IDEAL, false, "sim_run lru ideal"},
        {SIM_POLICY_DTR, SIM_MEMORY_ARENA, false, "sim_run dtr arena"},
        {SIM_POLICY_DTE, SIM_MEMORY_ARENA, false, "sim_run dte arena"},
        {SIM_POLICY_COOP, SIM_MEMORY_ARENA, false, "sim_run coop arena"},
        {SIM_POLICY_DTR, SIM_MEMORY_ARENA, true, "sim_lib_run dtr (remat API)"},
        {SIM_POLICY_COOP, SIM_MEMORY_ARENA, true, "sim_lib_run coop (remat API)"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run_ctx rc = {.prog = &bc.prog,
                      .opt = sim_options_default(runs[i].policy, runs[i].memory),
                      .ratio = 0.6,
                      .lib = runs[i].lib};
        rc.peak = sim_peak(&bc.prog, runs[i].memory);
        rc.want = simulate(&rc);
        if (rc.want.result != SIM_OK || rc.want.evictions == 0)
            fail_msg("%s: the unfaulted run must succeed and evict (result %d, %llu evictions)",
                     runs[i].name, (int)rc.want.result, (unsigned long long)rc.want.evictions);
        operation op = {runs[i].name, sim_run_op, nothing, NULL, &rc};
        report(op.name, sweep(&op));
        if (rc.degraded)
            printf("%-40s %5ld of them went on with another outcome (degraded)\n", "", rc.degraded);
    }
    sim_program_free(&bc.prog);
}

/* ---- the remat API ---- */

#define KiB 1024u
#define EV COOP_TENSOR_EVICTABLE
#define TENSORS 16

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

typedef struct api_ctx {
    coop_remat_policy policy;
    bool cow;
    coop_pool *pool;
    coop_remat *r;
    coop_tensor *t[TENSORS];
    int steps;           /* calls that went through, for the unfaulted run's count */
    uint64_t notices;    /* on_evict calls */
    bool counts_notices; /* many_run: on_evict counts them */
} api_ctx;

static void count_notice(coop_tensor *t, void *user)
{
    (void)t;
    ((api_ctx *)user)->notices++;
}

/* One 64 KiB segment, host backend (remat_test's pool). Made inside each
 * run, so that what the pool's metadata grows by is freed with it. */
static coop_status small_pool(coop_pool **out)
{
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = false;
    cfg.page_size = 4096;
    cfg.capacity = 64 * KiB;
    cfg.segment_size = 64 * KiB;
    return coop_pool_create(&cfg, out);
}

/* One call of the sequence: through, or refused for host memory with the
 * pool still valid. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        coop_status st_ = (call);                                                                  \
        if (st_ != COOP_OK) {                                                                      \
            if (c->pool && coop_pool_check(c->pool) != COOP_OK)                                    \
                fail_msg("pool broken after %s failed: %s", #call, coop_last_error());             \
            return st_;                                                                            \
        }                                                                                          \
        c->steps++;                                                                                \
    } while (0)

/* remat_test's shapes on one 64 KiB pool: a constant, a chain that fills
 * the pool and is evicted by unevictable tensors, releases, recomputation
 * by access, an op with three outputs, a view, pins, an in-place op. */
static coop_status api_run(void *ctx)
{
    api_ctx *c = ctx;
    coop_tensor **t = c->t;
    memset(t, 0, sizeof c->t);
    c->pool = NULL;
    c->r = NULL;
    c->steps = 0;
    coop_remat_config cfg = {.policy = c->policy,
                             .cheap_threshold = -1,
                             .copy_on_write = c->cow,
                             .recompute = recompute};
    STEP(small_pool(&c->pool));
    STEP(coop_remat_create(c->pool, &cfg, &c->r));
    coop_remat *r = c->r;
    STEP(coop_tensor_create(r, 8 * KiB, 0, "W", NULL, 0, 0, &t[0]));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "A", &t[0], 1, EV, &t[1]));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "B", &t[1], 1, EV, &t[2]));
    STEP(coop_tensor_alias(r, t[2], &t[3]));
    STEP(coop_tensor_create(r, 8 * KiB, 10, "C", &t[2], 1, EV, &t[4]));
    const size_t sizes[3] = {8 * KiB, 4 * KiB, 4 * KiB};
    STEP(coop_tensor_create_outputs(r, 3, sizes, 500, "O", &t[4], 1, EV, &t[5]));
    STEP(coop_tensor_pin(r, t[4], NULL));
    for (int i = 8; i < 11; i++) /* unevictable: the chain is evicted */
        STEP(coop_tensor_create(r, 8 * KiB, 10, "G", &t[0], 1, 0, &t[i]));
    STEP(coop_tensor_unpin(r, t[4]));
    STEP(coop_tensor_release(r, t[8]));
    t[8] = NULL;
    STEP(coop_tensor_release(r, t[9]));
    t[9] = NULL;
    STEP(coop_tensor_access(r, t[3], NULL)); /* recomputes A, B through the view */
    void *old = NULL;
    STEP(coop_tensor_mutate(r, t[2], 20, "M", &t[0], 1, &old));
    STEP(coop_tensor_create(r, 16 * KiB, 10, "H", &t[2], 1, EV, &t[11]));
    STEP(coop_tensor_access(r, t[1], NULL));
    STEP(coop_tensor_access(r, t[6], NULL));
    STEP(coop_tensor_release(r, t[3]));
    t[3] = NULL;
    STEP(coop_tensor_access(r, t[2], NULL));
    return COOP_OK;
}

/* Many small tensors, then big ones: a search evicts dozens at once (coop's
 * window collects more victims than its 32 inline slots; the on_evict list
 * grows past its first 16). */
static coop_status many_run(void *ctx)
{
    api_ctx *c = ctx;
    coop_tensor **t = c->t;
    memset(t, 0, sizeof c->t);
    c->pool = NULL;
    c->r = NULL;
    c->steps = 0;
    c->notices = 0;
    c->counts_notices = true;
    coop_remat_config cfg = {.policy = c->policy,
                             .cheap_threshold = -1,
                             .copy_on_write = c->cow,
                             .on_evict = count_notice,
                             .recompute = recompute,
                             .user = c};
    STEP(small_pool(&c->pool));
    STEP(coop_remat_create(c->pool, &cfg, &c->r));
    coop_remat *r = c->r;
    for (int i = 0; i < 120; i++) {
        coop_tensor *small;
        STEP(coop_tensor_create(c->r, 512, 1 + (uint64_t)i % 7, "S", NULL, 0, EV, &small));
    } /* 60 KiB of the 64 resident, held until coop_remat_destroy */
    STEP(coop_tensor_create(r, 24 * KiB, 10, "B", NULL, 0, 0, &t[0]));
    STEP(coop_tensor_create(r, 24 * KiB, 10, "C", NULL, 0, 0, &t[1]));
    return COOP_OK;
}

static void api_cleanup(void *ctx)
{
    api_ctx *c = ctx;
    if (c->r && c->counts_notices) {
        /* every eviction was told to the owner, faults or not */
        coop_remat_stats st;
        coop_remat_get_stats(c->r, &st);
        if (c->notices != st.evictions)
            fail_msg("allocation call %ld failed: %llu evictions, %llu on_evict notices",
                     current_call, (unsigned long long)st.evictions,
                     (unsigned long long)c->notices);
    }
    if (c->r) {
        /* whatever a refused call left must still be usable */
        for (int i = 0; i < TENSORS; i++)
            if (c->t[i]) {
                coop_status st = coop_tensor_access(c->r, c->t[i], NULL);
                if (st != COOP_OK && st != COOP_ERR_NOMEM)
                    fail_msg("tensor %d unusable after a refused call: %s", i, coop_last_error());
            }
        coop_remat_destroy(c->r);
        c->r = NULL;
    }
    if (!c->pool)
        return;
    if (coop_pool_check(c->pool) != COOP_OK)
        fail_msg("pool broken after the sequence: %s", coop_last_error());
    coop_stats ps;
    coop_get_stats(c->pool, &ps);
    if (ps.allocated_bytes.current != 0)
        fail_msg("%llu bytes left allocated after coop_remat_destroy",
                 (unsigned long long)ps.allocated_bytes.current);
    coop_pool_destroy(c->pool);
    c->pool = NULL;
}

static void remat_api(void **state)
{
    (void)state;
    static const struct {
        coop_remat_policy policy;
        bool cow;
        const char *name;
    } runs[] = {
        {COOP_REMAT_DTR, false, "remat API dtr"},
        {COOP_REMAT_DTR, true, "remat API dtr copy-on-write"},
        {COOP_REMAT_COOP, false, "remat API coop"},
    };
    static const struct {
        coop_remat_policy policy;
        const char *name;
    } many[] = {
        {COOP_REMAT_DTR, "remat API dtr, many small"},
        {COOP_REMAT_COOP, "remat API coop, many small"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        api_ctx c = {.policy = runs[i].policy, .cow = runs[i].cow};
        assert_int_equal(api_run(&c), COOP_OK);
        coop_remat_stats st;
        coop_remat_get_stats(c.r, &st);
        if (st.evictions == 0 || st.recomputes == 0)
            fail_msg("%s: the unfaulted sequence must evict and recompute", runs[i].name);
        api_cleanup(&c);
        operation op = {runs[i].name, api_run, api_cleanup, api_cleanup, &c};
        report(op.name, sweep(&op));
    }
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) {
        api_ctx c = {.policy = many[i].policy};
        assert_int_equal(many_run(&c), COOP_OK);
        coop_remat_stats st;
        coop_remat_get_stats(c.r, &st);
        if (st.evictions < 48 || c.notices != st.evictions)
            fail_msg("%s: %llu evictions, %llu notices", many[i].name,
                     (unsigned long long)st.evictions, (unsigned long long)c.notices);
        api_cleanup(&c);
        operation op = {many[i].name, many_run, api_cleanup, api_cleanup, &c};
        report(op.name, sweep(&op));
    }
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(readers),
        cmocka_unit_test(gzip_text),
        cmocka_unit_test(simulator),
        cmocka_unit_test(remat_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
