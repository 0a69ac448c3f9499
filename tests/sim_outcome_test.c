/*
 * What the simulator reports, case by case: the options each policy name
 * and sim_run give a run, the metrics of stopped runs, the percentiles,
 * the limits at their exact bounds, the bisection's and the grid's last
 * probes, and the bookkeeping of in-place ops, on tiny hand-built logs
 * whose results are worked out in the comments (docs/mutation-testing.md,
 * "simulator, second round").
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "remat/sim.h"
#include "remat/sim_lib.h"
#include "status.h"

#define START "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
#define CONST(n, m)                                                                                \
    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"" n "\"}\n"                                          \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" n "\",\"MEMORY\":\"" m "\"}\n"
/* a one-result CALL of m bytes */
#define CALLM(op, arg, res, t, m)                                                                  \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" arg "],\"RESULT\":[\"" res          \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"" m "\"}\n"                     \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"-1\"}\n"
#define MUTATE1(op, arg, t)                                                                        \
    "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"" op "\",\"ARGS\":[\"" arg "\"],\"MUTATE\":[0],"       \
    "\"TIME\":\"" t "\"}\n"
#define RELEASE(n) "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"" n "\"}\n"

static void load(const char *text, sim_program *p)
{
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("outcome.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, p), COOP_OK);
    dtr_log_free(&log);
}

/* One run in the simulator (lib false) or through the library (true). */
static sim_outcome run_engine(bool lib, const sim_program *p, uint64_t peak, const sim_options *opt,
                              double ratio)
{
    return lib ? sim_lib_run(p, peak, opt, ratio, NULL) : sim_run(p, peak, opt, ratio);
}

/* Nearest rank is the smallest value with at least q of them at or below:
 * of 1..60, p99 is the 60th (59.4 rounds up), p50 the 30th; of 1..3, p50
 * the 2nd (1.5 up). */
static void percentiles_are_nearest_rank(void **state)
{
    (void)state;
    uint64_t ns[60], p50, p99;
    for (int i = 0; i < 60; i++)
        ns[i] = (uint64_t)(60 - i); /* unsorted: the function sorts */
    sim_search_percentiles(ns, 60, &p50, &p99);
    assert_int_equal(p50, 30);
    assert_int_equal(p99, 60);
    uint64_t three[3] = {3, 1, 2};
    sim_search_percentiles(three, 3, &p50, &p99);
    assert_int_equal(p50, 2);
    assert_int_equal(p99, 3);
    sim_search_percentiles(NULL, 0, &p50, &p99);
    assert_int_equal(p50, 0);
    assert_int_equal(p99, 0);
}

/* The recompute budget at the cap's exact bound: base x whole overhead is
 * computed as long as it fits, here 3 x floor(2^62 / 3) = 2^62 - 1. */
static void remat_limit_just_below_the_cap(void **state)
{
    (void)state;
    const uint64_t third = SIM_REMAT_LIMIT_MAX / 3;
    assert_true(sim_remat_limit(third, 4.0) == 3 * third);
    assert_true(3 * third == SIM_REMAT_LIMIT_MAX - 1);
    assert_true(sim_remat_limit(third + 1, 4.0) == SIM_REMAT_LIMIT_MAX);
}

static int feasible_from(double ratio, void *ctx)
{
    return ratio >= *(const double *)ctx;
}

static int always(double ratio, void *ctx)
{
    (void)ratio;
    ++*(int *)ctx;
    return true;
}

/* The bisection stops once the bracket is no wider than the tolerance: with
 * 0.25, probes 1 and 0.5 succeed and 0.25 fails, leaving [0.25, 0.5]: the
 * answer is 0.5, not a further probe's 0.375. The grid walks down to its
 * last ratio above half a step: of step 0.1, the ratio 1 - 9 x 0.1 (a hair
 * under 0.1), ten runs in all. */
static void bisection_and_grid_stop_where_documented(void **state)
{
    (void)state;
    double from = 0.3;
    assert_true(sim_bisect_min_ratio(feasible_from, &from, 0.25) == 0.5);
    int runs = 0;
    double r = sim_grid_stable_ratio(always, &runs, 0.1);
    assert_int_equal(runs, 10);
    assert_true(fabs(r - 0.1) < 1e-9);
}

/* Succeeds from ratio `from` up, until its error_at-th run, which ends in
 * an error (-1: host memory ran out); counts its runs. */
typedef struct erring {
    double from;
    int runs, error_at;
} erring;

static int feasible_until_an_error(double ratio, void *ctx)
{
    erring *e = ctx;
    if (++e->runs == e->error_at)
        return -1;
    return ratio >= e->from;
}

/* A run's error ends either search at once with NaN: it was taken for an
 * infeasible ratio, and coop sim printed a min_budget_ratio (or "none")
 * that host memory running out had moved. Checked at every run of a
 * bisection and a grid, and at the bisection's run of ratio 0 (made when
 * no probe failed: 1, then 7 probes to 0.01). */
static void a_run_error_ends_the_searches_with_nan(void **state)
{
    (void)state;
    for (int at = 1; at <= 9; at++) {
        erring e = {.from = 0.25, .error_at = at};
        double r = sim_bisect_min_ratio(feasible_until_an_error, &e, 0.01);
        assert_true(at <= 8 ? isnan(r) : r >= 0.25 && r < 0.26);
        assert_int_equal(e.runs, at <= 8 ? at : 8);
        e = (erring){.from = 0.25, .error_at = at}; /* 1, 0.9, ..., 0.3 ok, 0.2 fails */
        assert_true(isnan(sim_grid_stable_ratio(feasible_until_an_error, &e, 0.1)));
        assert_int_equal(e.runs, at);
    }
    erring e = {.from = 0.0, .error_at = 9};
    assert_true(isnan(sim_bisect_min_ratio(feasible_until_an_error, &e, 0.01)));
    e = (erring){.from = 0.0, .error_at = 10};
    assert_true(sim_bisect_min_ratio(feasible_until_an_error, &e, 0.01) == 0.0);
    assert_int_equal(e.runs, 9);
}

/* The chain of tests/sim_test.c: w (constant, 100 B) -f-> a -g-> b -h-> c
 * -k-> d, then m(a) -> e; every result 100 B; costs f 10, g 20, h 40, k 5,
 * m 7 (base 82). At 400 B dtr evicts a, then recomputes it (10 ns) for m. */
static const char chain_log[] = START CONST("w", "100") CALLM("f", "\"w\"", "a", "10", "100")
    CALLM("g", "\"a\"", "b", "20", "100") CALLM("h", "\"b\"", "c", "40", "100")
        CALLM("k", "\"c\"", "d", "5", "100") CALLM("m", "\"a\"", "e", "7", "100") RELEASE("a")
            RELEASE("b") RELEASE("c") RELEASE("d") RELEASE("e");

/* A stopped run's overhead is (base + recompute so far) / base, as an ok
 * run's (sim.h): at limit 1.1 the chain thrashes on a's recompute, before
 * m runs, with overhead 92/82; the compute the program did until then
 * (75 ns) is not what it is divided by or added to. */
static void a_stopped_run_counts_the_whole_base(void **state)
{
    (void)state;
    sim_program p;
    load(chain_log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    opt.overhead_limit = 1.1;
    sim_outcome o = sim_run(&p, 500, &opt, 0.8);
    assert_int_equal(o.result, SIM_THRASH);
    assert_int_equal(o.remat_ops, 1);
    assert_true(fabs(o.overhead - 92.0 / 82.0) < 1e-12);
    sim_program_free(&p);
}

/* c (100 B, pinned) -f-> x (100 B), relu_(x) in place, y = g(x) (100 B).
 * The unlimited (copy-on-write) peak is 300 B. In place, relu_ keeps x's
 * buffer; y then needs c, x and y resident: 300 B still. */
static const char inplace_log[] = START CONST("c", "100") CALLM("f", "\"c\"", "x", "10", "100")
    MUTATE1("relu_", "x", "5") CALLM("g", "\"x\"", "y", "1000", "100") RELEASE("x") RELEASE("y");

/* Which runs take the in-place path: coop by default, not coop-cow, not
 * coop with inplace 0; the other policies only when asked (inplace 1). */
static void inplace_follows_the_policy_and_the_option(void **state)
{
    (void)state;
    sim_program p;
    load(inplace_log, &p);
    assert_int_equal(sim_peak(&p, SIM_MEMORY_IDEAL), 300);
    const struct {
        const char *policy;
        int inplace;
        uint64_t ops;
    } runs[] = {{"coop", -1, 1}, {"coop-cow", -1, 0}, {"coop", 0, 0},
                {"dtr", -1, 0},  {"dtr", 1, 1},       {"lru", 0, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
        assert_int_equal(sim_options_parse_policy(runs[i].policy, &opt), 0);
        if (runs[i].inplace >= 0)
            opt.inplace = runs[i].inplace;
        sim_outcome o = sim_run(&p, 300, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.inplace_ops, runs[i].ops);
        assert_int_equal(o.evictions, 0);
    }
    sim_program_free(&p);
}

/* The old value an in-place op leaves is evicted and owns no buffer: it
 * never joins the evictable pool (its unlock after the op must not add
 * it). At 200 B, g(x) needs c (pinned), x (its input) and y: nothing can
 * be evicted, out of memory; evicting the old value again "freed" its 100 B
 * a second time and the run was ok in 200 B. */
static void the_old_value_of_an_inplace_op_frees_nothing(void **state)
{
    (void)state;
    sim_program p;
    load(inplace_log, &p);
    for (sim_memory m = SIM_MEMORY_IDEAL; m <= SIM_MEMORY_ARENA; m++) {
        sim_options opt = sim_options_default(SIM_POLICY_DTR, m);
        opt.inplace = 1;
        uint64_t peak = sim_peak(&p, m);
        sim_outcome o = sim_run(&p, peak, &opt, 2.0 / 3.0);
        assert_int_equal(o.result, SIM_OOM);
        assert_int_equal(o.evictions, 0);
        assert_int_equal(sim_run(&p, peak, &opt, 1.0).result, SIM_OK);
    }
    sim_program_free(&p);
}

/* Cheap tensor partitioning in the arena, by policy: a (1 ns, 512 B: cheap)
 * then b (100 us, 512 B), a released, then c (1 ns, 1 KiB) in 1.5 KiB.
 * Partitioned (coop), a sits at the high end, b at the low end, and a's
 * release leaves 1 KiB in one piece: c fits, nothing evicted. Unpartitioned
 * (coop-nopart, and dtr, whose threshold is off unless given), a and b sit
 * side by side from the low end: a's release leaves two 512 B holes, a
 * fragmentation failure, and b is evicted. */
static const char partition_log[] =
    START CALLM("f", "", "a", "1", "512") CALLM("g", "", "b", "100000", "512") RELEASE("a")
        CALLM("h", "", "c", "1", "1024") RELEASE("b") RELEASE("c");

static void partitioning_follows_the_policy(void **state)
{
    (void)state;
    sim_program p;
    load(partition_log, &p);
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    assert_int_equal(peak, 1536);
    const struct {
        const char *policy;
        uint64_t evictions;
    } runs[] = {{"coop", 0}, {"coop-nopart", 1}, {"dtr", 1}, {"lru", 1}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
        assert_int_equal(sim_options_parse_policy(runs[i].policy, &opt), 0);
        sim_outcome o = sim_run(&p, peak, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, runs[i].evictions);
        assert_int_equal(o.frag_failures, runs[i].evictions);
        assert_int_equal(o.remat_ops, 0);
        /* coop's window search walks the blocks (the others search none) */
        if (o.evictions && opt.policy == SIM_POLICY_COOP)
            assert_true(o.blocks_visited > 0);
        else
            assert_int_equal(o.blocks_visited, 0);
    }
    sim_program_free(&p);
}

/* The ideal model's frag_at_evict is the mean free share over every
 * search. LRU in 300 B: x1, x2 (100 B), then x3 (150 B) with 100 B free
 * (1/3: evicts x1), then x4 (150 B) with 50 B free (1/6: evicts x2). */
static void ideal_frag_at_evict_is_the_mean_over_searches(void **state)
{
    (void)state;
    static const char log[] =
        START CALLM("f", "", "x1", "1", "100") CALLM("f", "", "x2", "1", "100")
            CALLM("f", "", "x3", "1", "150") CALLM("f", "", "x4", "1", "150") RELEASE("x1")
                RELEASE("x2") RELEASE("x3") RELEASE("x4");
    sim_program p;
    load(log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 300, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_true(fabs(o.frag_at_evict - 0.25) < 1e-12);
    sim_program_free(&p);
}

/* The logical clock advances by exactly each op's cost. x (15 ns) then y
 * (10 ns), 100 B each, then an op of 20 ns and no bytes: at z's request
 * (200 B in 300 B) dtr scores x 15 / (100 x 30) and y 10 / (100 x 20),
 * equal, and the tie goes to y, the later. q(x, y) then recomputes y
 * (10 ns; z evicted for it). A clock one tick ahead per op makes x's
 * score the smaller, and recomputes x (15 ns) instead. */
static void dtr_scores_tie_on_the_exact_clock(void **state)
{
    (void)state;
    static const char log[] = START CALLM("f", "", "x", "15", "100")
        CALLM("g", "", "y", "10", "100") CALLM("i", "", "i", "20", "0")
            CALLM("h", "", "z", "1", "200") CALLM("q", "\"x\",\"y\"", "w", "1", "100") RELEASE("x")
                RELEASE("y") RELEASE("i") RELEASE("z") RELEASE("w");
    sim_program p;
    load(log, &p);
    assert_int_equal(p.base_compute, 47);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 300, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_int_equal(o.remat_ops, 1);
    assert_true(fabs(o.overhead - 57.0 / 47.0) < 1e-12);
    sim_program_free(&p);
}

/* The in-place rule's conditions (sim_runtime.c can_take_over), with LRU
 * and inplace on, in the ideal model; counted by inplace_ops.
 *  - copied (300 B): x is also named x2 (COPY), so relu_(x) must not take
 *    x's buffer (x2 would see the new value): x' is fresh. u(x2) (200 B)
 *    evicts x'; z(x2, x') recomputes relu_ while z holds x2's storage
 *    locked: still no take-over (its old value is in use). 0 in place;
 *    2 evictions (x', then u for relu_), 1 recompute.
 *  - both (400 B): swap_(x, y) takes over both buffers (2). v (200 B)
 *    evicts x' (least recently used); w(x', y') recomputes swap_ with y'
 *    resident and locked: x and y come back (u and v evicted for them), x'
 *    takes x's buffer again (3), y' keeps its own. 3 evictions, 3
 *    recomputes (25 ns). */
#define COPY(dst, src) "{\"INSTRUCTION\":\"COPY\",\"DST\":\"" dst "\",\"SRC\":\"" src "\"}\n"
static void inplace_takes_over_only_what_nobody_else_sees(void **state)
{
    (void)state;
    static const char copied[] =
        START CALLM("f", "", "x", "10", "100") COPY("x2", "x") MUTATE1("relu_", "x", "5")
            CALLM("h", "\"x2\"", "u", "5", "200") CALLM("k", "\"x2\",\"x\"", "z", "5", "100")
                RELEASE("x") RELEASE("x2") RELEASE("u") RELEASE("z");
    static const char both[] = START CALLM("f", "", "x", "10", "100")
        CALLM("g", "", "y", "10",
              "100") "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"swap_\",\"ARGS\":[\"x\",\"y\"],"
                     "\"MUTATE\":[0,1],\"TIME\":\"5\"}\n" CALLM("k", "\"y\"", "u", "5", "100")
                         CALLM("k", "\"y\"", "v", "5", "200")
                             CALLM("k2", "\"x\",\"y\"", "w", "5", "100") RELEASE("x") RELEASE("y")
                                 RELEASE("u") RELEASE("v") RELEASE("w");
    const struct {
        const char *log;
        uint64_t budget, evictions, remat_ops, inplace_ops;
    } runs[] = {{copied, 300, 2, 1, 0}, {both, 400, 3, 3, 3}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        sim_program p;
        load(runs[i].log, &p);
        sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_IDEAL);
        opt.inplace = 1;
        sim_outcome o = sim_run(&p, runs[i].budget, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, runs[i].evictions);
        assert_int_equal(o.remat_ops, runs[i].remat_ops);
        assert_int_equal(o.inplace_ops, runs[i].inplace_ops);
        sim_program_free(&p);
    }
}

/* a two-result CALL without arguments, 100 B each */
#define CALL2(op, r1, r2, t)                                                                       \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[],\"RESULT\":[\"" r1 "\",\"" r2       \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" r1 "\",\"MEMORY\":\"100\"}\n"                        \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" r1 "\",\"ALIAS\":\"-1\"}\n"                           \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" r2 "\",\"MEMORY\":\"100\"}\n"                        \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" r2 "\",\"ALIAS\":\"-1\"}\n"

/* An op's outputs join the pool as simrd adds them: the siblings first,
 * then the tensor asked for. LRU in 200 B: (a, b) = f() (a asked for), z
 * ties a and b (both last used when made) and evicts the later, a; w(b)
 * then evicts z: nothing recomputed. An op recomputed once brings back
 * all its outputs: in 300 B, z (200 B) evicts a, y (200 B) b and z;
 * q(a, b) recomputes f for a (evicting y), and b comes with it: one
 * recompute, not two. */
static void an_ops_outputs_join_and_return_together(void **state)
{
    (void)state;
    static const char tie[] = START CALL2("f", "a", "b", "10") CALLM("h", "", "z", "1", "100")
        CALLM("k", "\"b\"", "w", "1", "100") RELEASE("a") RELEASE("b") RELEASE("z") RELEASE("w");
    static const char again[] = START CALL2("f", "a", "b", "10") CALLM("h", "", "z", "1", "200")
        CALLM("h", "", "y", "1", "200") CALLM("q", "\"a\",\"b\"", "w", "1", "100") RELEASE("a")
            RELEASE("b") RELEASE("z") RELEASE("y") RELEASE("w");
    sim_program p;
    load(tie, &p);
    sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 200, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_int_equal(o.remat_ops, 0);
    sim_program_free(&p);
    load(again, &p);
    o = sim_run(&p, 300, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 4);
    assert_int_equal(o.remat_ops, 1);
    assert_true(fabs(o.overhead - 23.0 / 13.0) < 1e-12);
    sim_program_free(&p);
}

/* SIZE evicts the largest: a (100 B), b (200 B), then c (100 B) in 300 B
 * evicts b, and q(b) recomputes it (evicting c, tied with a and later). */
static void size_evicts_the_largest(void **state)
{
    (void)state;
    static const char log[] = START CALLM("f", "", "a", "1", "100") CALLM("g", "", "b", "1", "200")
        CALLM("h", "", "c", "1", "100") CALLM("q", "\"b\"", "d", "1", "0") RELEASE("a") RELEASE("b")
            RELEASE("c") RELEASE("d");
    sim_program p;
    load(log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_SIZE, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 300, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_int_equal(o.remat_ops, 1);
    sim_program_free(&p);
}

/* A score with nothing to divide by is infinite, even over 0 ns: x (5 ns)
 * and y (0 ns) are made with no time between, so at z's request both have
 * staleness 0; both score infinity and the tie goes to y, the later (0/0
 * would be NaN, which the argmin skips: x evicted, and recomputed for w). */
static void a_zero_denominator_scores_infinity(void **state)
{
    (void)state;
    static const char log[] = START CALLM("f", "", "x", "5", "100") CALLM("g", "", "y", "0", "100")
        CALLM("h", "", "z", "1", "100") CALLM("k", "\"x\"", "w", "1", "0") RELEASE("x") RELEASE("y")
            RELEASE("z") RELEASE("w");
    sim_program p;
    load(log, &p);
    const sim_policy pols[] = {SIM_POLICY_DTR, SIM_POLICY_DTR_LOCAL, SIM_POLICY_DTE};
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        sim_options opt = sim_options_default(pols[i], SIM_MEMORY_IDEAL);
        sim_outcome o = sim_run(&p, 200, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 1);
        assert_int_equal(o.remat_ops, 0);
    }
    sim_program_free(&p);
}

/* Releasing an evicted tensor frees nothing more: LRU in 200 B, z evicts
 * x, x is released, and w must still evict y (2 evictions). */
static void releasing_an_evicted_tensor_frees_nothing(void **state)
{
    (void)state;
    static const char log[] = START CALLM("f", "", "x", "1", "100") CALLM("g", "", "y", "1", "100")
        CALLM("h", "", "z", "1", "100") RELEASE("x") CALLM("k", "", "w", "1", "100") RELEASE("y")
            RELEASE("z") RELEASE("w");
    sim_program p;
    load(log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 200, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_int_equal(o.heuristic_evals, 4); /* x and y scored for z, y and z for w */
    /* 300 B, exactly the peak: full, but no search (frag_at_evict has no
     * sample) and nothing evicted */
    o = sim_run(&p, 300, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 0);
    assert_true(o.frag_at_evict == 0.0);
    sim_program_free(&p);
}

/* The chain of 512 B results in the arena, through both engines (the
 * library's on --engine lib): at ratio 0.8 of 2560 B dtr recomputes a once
 * (10 ns). A recompute limit of exactly 10 ns (overhead limit 1.125: 82 x
 * 0.125 rounded down) is not passed: ok. Below it (1.1: 8 ns) the run
 * thrashes; the simulator's row counts the recompute that crossed the
 * limit (overhead 92/82), the library's the ones it did, none here (the
 * callback refused the one that would cross). Stopped rows compare only
 * within an engine (docs/remat.md, section 5). */
static const char chain512_log[] = START CONST("w", "512") CALLM("f", "\"w\"", "a", "10", "512")
    CALLM("g", "\"a\"", "b", "20", "512") CALLM("h", "\"b\"", "c", "40", "512")
        CALLM("k", "\"c\"", "d", "5", "512") CALLM("m", "\"a\"", "e", "7", "512") RELEASE("a")
            RELEASE("b") RELEASE("c") RELEASE("d") RELEASE("e");

static void both_engines_stop_at_the_recompute_limit(void **state)
{
    (void)state;
    sim_program p;
    load(chain512_log, &p);
    for (int lib = 0; lib < 2; lib++) {
        sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
        opt.overhead_limit = 1.125;
        sim_outcome o = run_engine(lib, &p, 2560, &opt, 0.8);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 3);
        assert_int_equal(o.remat_ops, 1);
        assert_true(fabs(o.overhead - 92.0 / 82.0) < 1e-12);
        opt.overhead_limit = 1.1;
        o = run_engine(lib, &p, 2560, &opt, 0.8);
        assert_int_equal(o.result, SIM_THRASH);
        assert_int_equal(o.remat_ops, lib ? 0 : 1);
        assert_true(fabs(o.overhead - (lib ? 1.0 : 92.0 / 82.0)) < 1e-12);
    }
    sim_program_free(&p);
}

/* A cheap threshold of 0 ns/byte partitions nothing (nothing is cheaper),
 * in both engines; the library reads 0 as its own default, so the lib
 * engine must hand it "off". The partition log then evicts b, as
 * unpartitioned. */
static void a_zero_threshold_partitions_nothing_in_either_engine(void **state)
{
    (void)state;
    sim_program p;
    load(partition_log, &p);
    for (int lib = 0; lib < 2; lib++) {
        sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
        opt.cheap_threshold = 0;
        sim_outcome o = run_engine(lib, &p, 1536, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 1);
        assert_int_equal(o.frag_failures, 1);
        opt.cheap_threshold = NAN; /* coop's default: partitioned */
        o = run_engine(lib, &p, 1536, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 0);
    }
    sim_program_free(&p);
}

/* In place in both engines: relu_(x) takes x's block when x is the only
 * handle on it, not when a view v of x shares the storage (v would see the
 * new value). */
static void a_view_keeps_its_base_out_of_place_in_both_engines(void **state)
{
    (void)state;
    static const char alone[] = START CALLM("f", "", "x", "10", "512") MUTATE1("relu_", "x", "5")
        CALLM("g", "\"x\"", "y", "10", "512") RELEASE("x") RELEASE("y");
    static const char viewed[] = START CALLM(
        "f", "", "x", "10",
        "512") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"view\",\"ARGS\":[\"x\"],\"RESULT\":[\"v\"],"
               "\"TIME\":\"1\"}\n"
               "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v\",\"MEMORY\":\"0\"}\n"
               "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v\",\"ALIAS\":\"0\"}\n" MUTATE1(
                   "relu_", "x", "5") CALLM("g", "\"x\",\"v\"", "y", "10", "512") RELEASE("x")
                   RELEASE("v") RELEASE("y");
    const char *logs[] = {alone, viewed};
    for (int i = 0; i < 2; i++) {
        sim_program p;
        load(logs[i], &p);
        uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
        for (int lib = 0; lib < 2; lib++) {
            sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
            sim_outcome o = run_engine(lib, &p, peak, &opt, 1.0);
            assert_int_equal(o.result, SIM_OK);
            assert_int_equal(o.inplace_ops, i == 0);
            assert_int_equal(sim_options_parse_policy("coop-cow", &opt), 0);
            o = run_engine(lib, &p, peak, &opt, 1.0);
            assert_int_equal(o.result, SIM_OK);
            assert_int_equal(o.inplace_ops, 0);
        }
        sim_program_free(&p);
    }
}

/* The lib engine samples a last search that failed without evicting (its
 * time is read after the run): x then y(x), 512 B each, in one block. */
static void the_lib_engine_samples_a_failed_last_search(void **state)
{
    (void)state;
    static const char log[] =
        START CALLM("f", "", "x", "10", "512") CALLM("g", "\"x\"", "y", "10", "512");
    sim_program p;
    load(log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
    sim_lib_counts counts;
    sim_outcome o = sim_lib_run(&p, 1024, &opt, 0.5, &counts);
    assert_int_equal(o.result, SIM_OOM);
    assert_int_equal(counts.searches, 1);
    assert_int_equal(counts.unsampled_searches, 0);
    assert_true(o.search_ns_p50 > 0); /* thread CPU time of a real search */
    sim_program_free(&p);
}

/* The end of a log pins the tensors still named (simrd's output
 * condition), after each COPY, COPY_FROM and MUTATE moved names, LRU in
 * 200 B, 100 B results:
 *  - copied: x2 = x, then relu_(x) (not in place: copied), and both
 *    names released: nothing is named, nothing pinned or recomputed;
 *  - kept: x2 = x, x released, y and z made (z evicts x) and released: x2
 *    still names x, so the end pins x, recomputing it (10 ns);
 *  - moved: x3 = x released, x = y (COPY_FROM releases x's tensor), z, then
 *    all released: x's first tensor is named by none, nothing pinned. */
static void the_end_pins_only_what_is_still_named(void **state)
{
    (void)state;
    static const char copied[] = START CALLM("f", "", "x", "10", "100") COPY("x2", "x")
        MUTATE1("relu_", "x", "5") RELEASE("x2") RELEASE("x");
    static const char kept[] = START CALLM("f", "", "x", "10", "100") COPY("x2", "x") RELEASE("x")
        CALLM("g", "", "y", "1", "100") CALLM("h", "", "z", "1", "100") RELEASE("y") RELEASE("z");
    static const char moved[] = START CALLM("f", "", "x", "10", "100") COPY("x3", "x") RELEASE("x3")
        CALLM("g", "", "y", "1",
              "100") "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"x\",\"SRC\":\"y\"}\n" CALLM("h", "",
                                                                                           "z", "1",
                                                                                           "100")
            RELEASE("x") RELEASE("y") RELEASE("z");
    const struct {
        const char *log;
        uint64_t remat_ops;
    } runs[] = {{copied, 0}, {kept, 1}, {moved, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        sim_program p;
        load(runs[i].log, &p);
        sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_IDEAL);
        opt.inplace = 1;
        sim_outcome o = sim_run(&p, 200, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.remat_ops, runs[i].remat_ops);
        sim_program_free(&p);
    }
}

/* The compiled graph. Instructions before ANNOTATE START (a warm-up op)
 * are not the program: base compute 1 + 20 + 30 (the constant costs 0).
 * x = f(c); y = g(x); v = view2(y, x), a view of y that also reads x;
 * z = h(v). Tensors c 0, x 1, y 2, v 3, z 4; storages c 0, x 1, y 2 (y, v),
 * z 3. Storage y's neighbours: x from y on (the earlier of the two
 * tensors linking them), z from z on; never y itself (v's op reads y). */
static void the_program_starts_at_start_and_lists_neighbours_once(void **state)
{
    (void)state;
    static const char log[] =
        "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"warm\",\"ARGS\":[],"
        "\"RESULT\":[\"p\"],\"TIME\":\"1000\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"p\",\"MEMORY\":\"100\"}\n"
        "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"p\",\"ALIAS\":\"-1\"}\n" START CONST("c", "100")
            CALLM("f", "\"c\"", "x", "1", "100")
                CALLM("g", "\"x\"", "y", "20",
                      "100") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"view2\",\"ARGS\":[\"y\",\"x\"],"
                             "\"RESULT\":[\"v\"],\"TIME\":\"30\"}\n"
                             "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v\",\"MEMORY\":\"0\"}\n"
                             "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v\",\"ALIAS\":\"0\"}\n" CALLM(
                                 "h", "\"v\"", "z", "0", "100");
    sim_program p;
    load(log, &p);
    assert_int_equal(p.base_compute, 51);
    assert_int_equal(p.num_tensors, 5);
    assert_int_equal(p.num_storages, 4);
    assert_int_equal(p.tensors[3].storage, 2);
    assert_int_equal(p.neighbour_first[3] - p.neighbour_first[2], 2);
    const sim_neighbour *n = &p.neighbours[p.neighbour_first[2]];
    assert_int_equal(n[0].storage, 1);
    assert_int_equal(n[0].since, 2);
    assert_int_equal(n[1].storage, 3);
    assert_int_equal(n[1].since, 4);
    sim_program_free(&p);
}

/* A storage's compute counts each op once, however many of its tensors
 * the op made: y (16 ns), x (10 ns), then split(x) -> v1, v2, two views of
 * x (4 ns): x's storage costs 14, not 18. After 1 us, z's request in 200 B
 * scores x 14 / (100 x 1000) under y's 16 / (100 x 1014): x is evicted and
 * k(y) recomputes nothing (at 18, y was evicted and recomputed). */
static void an_op_counts_once_in_its_storage(void **state)
{
    (void)state;
    static const char log[] = START CALLM("g", "", "y", "16", "100")
        CALLM("f", "", "x", "10",
              "100") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"split\",\"ARGS\":[\"x\"],"
                     "\"RESULT\":[\"v1\",\"v2\"],\"TIME\":\"4\"}\n"
                     "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v1\",\"MEMORY\":\"0\"}\n"
                     "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v1\",\"ALIAS\":\"0\"}\n"
                     "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v2\",\"MEMORY\":\"0\"}\n"
                     "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v2\",\"ALIAS\":\"0\"}\n" CALLM(
                         "i", "", "i", "1000", "0") CALLM("h", "", "z", "1", "100")
                         CALLM("k", "\"y\"", "w", "1", "0") RELEASE("y") RELEASE("x") RELEASE("v1")
                             RELEASE("v2") RELEASE("i") RELEASE("z") RELEASE("w");
    sim_program p;
    load(log, &p);
    const sim_policy pols[] = {SIM_POLICY_DTR, SIM_POLICY_DTR_LOCAL};
    for (int i = 0; i < 2; i++) {
        sim_options opt = sim_options_default(pols[i], SIM_MEMORY_IDEAL);
        sim_outcome o = sim_run(&p, 200, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 1);
        assert_int_equal(o.remat_ops, 0);
    }
    sim_program_free(&p);
}

/* A log whose tensors are all 0 bytes runs in a budget of 0 bytes in both
 * engines: no block is needed, so a capacity of 0 is no reason for oom. */
static void a_zero_byte_log_runs_in_no_memory_in_both_engines(void **state)
{
    (void)state;
    static const char log[] = START CONST("c", "0") CALLM("f", "\"c\"", "a", "10", "0")
        CALLM("g", "\"a\"", "b", "10", "0") RELEASE("a");
    sim_program p;
    load(log, &p);
    assert_int_equal(sim_peak(&p, SIM_MEMORY_ARENA), 0);
    for (int lib = 0; lib < 2; lib++) {
        sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
        sim_outcome o = run_engine(lib, &p, 0, &opt, 0.5);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.budget, 0);
    }
    sim_program_free(&p);
}

/* An op's resident inputs are held before its missing ones come back, in
 * both engines: LRU in 1 KiB (two blocks), z evicts a; q(a, b) recomputes
 * a, which must evict z, not b (least recently used, but an input): 2
 * evictions, 1 recompute. */
static void resident_inputs_are_held_first_in_both_engines(void **state)
{
    (void)state;
    static const char log[] =
        START CALLM("f", "", "a", "10", "512") CALLM("g", "", "b", "10", "512")
            CALLM("h", "", "z", "1", "512") CALLM("q", "\"a\",\"b\"", "w", "1", "0") RELEASE("a")
                RELEASE("b") RELEASE("z") RELEASE("w");
    sim_program p;
    load(log, &p);
    for (int lib = 0; lib < 2; lib++) {
        sim_options opt = sim_options_default(SIM_POLICY_LRU, SIM_MEMORY_ARENA);
        sim_outcome o = run_engine(lib, &p, 1024, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 2);
        assert_int_equal(o.remat_ops, 1);
    }
    sim_program_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(percentiles_are_nearest_rank),
        cmocka_unit_test(remat_limit_just_below_the_cap),
        cmocka_unit_test(bisection_and_grid_stop_where_documented),
        cmocka_unit_test(a_run_error_ends_the_searches_with_nan),
        cmocka_unit_test(a_stopped_run_counts_the_whole_base),
        cmocka_unit_test(inplace_follows_the_policy_and_the_option),
        cmocka_unit_test(the_old_value_of_an_inplace_op_frees_nothing),
        cmocka_unit_test(partitioning_follows_the_policy),
        cmocka_unit_test(ideal_frag_at_evict_is_the_mean_over_searches),
        cmocka_unit_test(dtr_scores_tie_on_the_exact_clock),
        cmocka_unit_test(inplace_takes_over_only_what_nobody_else_sees),
        cmocka_unit_test(an_ops_outputs_join_and_return_together),
        cmocka_unit_test(size_evicts_the_largest),
        cmocka_unit_test(a_zero_denominator_scores_infinity),
        cmocka_unit_test(releasing_an_evicted_tensor_frees_nothing),
        cmocka_unit_test(both_engines_stop_at_the_recompute_limit),
        cmocka_unit_test(a_zero_threshold_partitions_nothing_in_either_engine),
        cmocka_unit_test(a_view_keeps_its_base_out_of_place_in_both_engines),
        cmocka_unit_test(the_lib_engine_samples_a_failed_last_search),
        cmocka_unit_test(the_end_pins_only_what_is_still_named),
        cmocka_unit_test(the_program_starts_at_start_and_lists_neighbours_once),
        cmocka_unit_test(an_op_counts_once_in_its_storage),
        cmocka_unit_test(a_zero_byte_log_runs_in_no_memory_in_both_engines),
        cmocka_unit_test(resident_inputs_are_held_first_in_both_engines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
