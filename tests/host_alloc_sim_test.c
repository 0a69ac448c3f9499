/*
 * Host allocation fault sweeps (host_alloc_sweep.h) through the simulator:
 * a generated DTR log (an op with more than 8 outputs, a view, a mutation,
 * a copy, a backward pass) read plain and gzip'ed, compiled into a program,
 * and simulated at a budget that evicts (ideal and arena memory, several
 * policies), and the remat library driven by the program (sim_lib_run).
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
#include "remat/sim.h"
#include "remat/sim_lib.h"
#include "remat/sim_program.h"
#include "status.h"
#include "trace/dtr_log.h"

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"

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
    if (!same)
        fail_msg("result %d, %llu evictions, %llu remats after failing allocation call %ld; "
                 "unfaulted: %d, %llu, %llu",
                 (int)got.result, (unsigned long long)got.evictions,
                 (unsigned long long)got.remat_ops, host_alloc_sweep_call(), (int)c->want.result,
                 (unsigned long long)c->want.evictions, (unsigned long long)c->want.remat_ops);
    return COOP_OK;
}

static void nothing(void *ctx)
{
    (void)ctx;
}

typedef struct peak_ctx {
    const sim_program *prog;
    sim_memory memory;
    uint64_t want;
} peak_ctx;

/* sim_peak: the unfaulted peak, or 0 with the last error set (returned as
 * COOP_ERR_HOST_NOMEM, the sweep's rule for a refused run). */
static coop_status peak_run(void *ctx)
{
    peak_ctx *pk = ctx;
    uint64_t got = sim_peak(pk->prog, pk->memory);
    if (got == pk->want && !coop_last_error()[0])
        return COOP_OK;
    if (got != 0 || !coop_last_error()[0])
        fail_msg("sim_peak gave %llu (want %llu or 0 with an error), last error '%s'",
                 (unsigned long long)got, (unsigned long long)pk->want, coop_last_error());
    return COOP_ERR_HOST_NOMEM;
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
    host_alloc_report(parse.name, host_alloc_sweep(&parse));

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
    host_alloc_report(parse_gz.name, host_alloc_sweep(&parse_gz));
    load_ctx lc = {.path = gz_path};
    operation load = {"sim_program_load (generated log, gzip)", load_run, load_cleanup, NULL, &lc};
    host_alloc_report(load.name, host_alloc_sweep(&load));
    unlink(gz_path);

    assert_int_equal(dtr_log_read(pc.path, &pc.log), COOP_OK);
    unlink(path);
    build_ctx bc = {.log = &pc.log};
    operation build = {"sim_program_build (generated log)", build_run, build_cleanup, NULL, &bc};
    host_alloc_report(build.name, host_alloc_sweep(&build));
    assert_int_equal(sim_program_build(&pc.log, &bc.prog), COOP_OK);
    dtr_log_free(&pc.log);

    /* the unlimited run that gives the peak: a failure is an error, not a
     * peak of 0 (coop sim then printed oom rows for every budget) */
    for (int m = 0; m < 2; m++) {
        peak_ctx pk = {.prog = &bc.prog, .memory = m ? SIM_MEMORY_ARENA : SIM_MEMORY_IDEAL};
        pk.want = sim_peak(pk.prog, pk.memory);
        assert_true(pk.want > 0);
        assert_string_equal(coop_last_error(), "");
        operation peak = {m ? "sim_peak (arena)" : "sim_peak (ideal)", peak_run, nothing, NULL,
                          &pk};
        host_alloc_report(peak.name, host_alloc_sweep(&peak));
    }

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
        host_alloc_report(op.name, host_alloc_sweep(&op));
    }
    sim_program_free(&bc.prog);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(simulator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
