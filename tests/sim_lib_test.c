/*
 * `coop sim --engine lib` (src/remat/sim_lib.c): operator logs replayed
 * through the public remat API, against the simulator's arena model on the
 * same log, policy and budget.
 *  - a small log with the shapes the API maps specially: a constant, an op
 *    with two results (coop_tensor_create_outputs), a view of a view whose
 *    base was released, an in-place op reading its own target, a chain of
 *    in-place ops (coop_tensor_mutate);
 *  - the project's own traces (traces/, in the repository): unet and
 *    resnet50's train steps at budgets 0.9 and 0.7, where the two engines
 *    evict the same number of tensors (and count the same fragmentation
 *    failures); the search metrics the library reports (coop_remat_stats:
 *    times, cost evaluations, free bytes at searches); min_budget_ratio by
 *    the simulator's bisection over the lib engine.
 * The recompute callback never touches memory (the host backend maps the
 * pool PROT_NONE: a touch would fault).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "remat/sim.h"
#include "remat/sim_lib.h"
#include "status.h"

#define FRESH(n, m)                                                                                \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" n "\",\"MEMORY\":\"" m "\"}\n"                       \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" n "\",\"ALIAS\":\"-1\"}\n"
#define VIEW(n)                                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" n "\",\"MEMORY\":\"0\"}\n"                           \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" n "\",\"ALIAS\":\"0\"}\n"
#define CALL(op, args, results, t)                                                                 \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" args "],\"RESULT\":[" results       \
    "],\"TIME\":\"" t "\"}\n"
#define MUTATE(op, args, t)                                                                        \
    "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"" op "\",\"ARGS\":[" args "],\"MUTATE\":[0],"          \
    "\"TIME\":\"" t "\"}\n"
#define RELEASE(n) "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"" n "\"}\n"
#define M64K "65536"

/* Every storage 64 KiB. bn has two results; bvv views bv views b, b and bv
 * released before; mul_(bvv, bvv) reads its own target; d is mutated twice
 * in a row. z alone is named at the end. */
static const char shapes_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"}\n"
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"" M64K
    "\"}\n" CALL("f", "\"w\"", "\"a\"", "100") FRESH("a", M64K)
        CALL("bn", "\"a\",\"w\"", "\"b\",\"c\"", "50") FRESH("b", M64K) FRESH("c", M64K)
            CALL("view", "\"b\"", "\"bv\"", "0") VIEW("bv") RELEASE("b")
                CALL("view", "\"bv\"", "\"bvv\"", "0") VIEW("bvv") RELEASE("bv")
                    MUTATE("mul_", "\"bvv\",\"bvv\"", "30") CALL("h", "\"c\"", "\"d\"", "200")
                        FRESH("d", M64K) MUTATE("mul_", "\"d\"", "20") MUTATE("add_", "\"d\",\"w\"",
                                                                              "20")
                            CALL("k", "\"a\",\"bvv\"", "\"e\"", "80") FRESH("e", M64K) RELEASE("a")
                                CALL("m", "\"d\",\"e\"", "\"g\"", "60") FRESH("g", M64K)
                                    CALL("n", "\"g\",\"c\",\"bvv\"", "\"y\"", "40") FRESH("y", M64K)
                                        RELEASE("e") CALL("p", "\"y\",\"d\"", "\"z\"", "10")
                                            FRESH("z", M64K) RELEASE("c") RELEASE("d") RELEASE("g")
                                                RELEASE("y") RELEASE("bvv");

static void load(sim_program *p)
{
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("shapes.log", shapes_log, strlen(shapes_log), &log),
                     COOP_OK);
    assert_int_equal(sim_program_build(&log, p), COOP_OK);
    dtr_log_free(&log);
}

static sim_options options(const char *policy)
{
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
    assert_int_equal(sim_options_parse_policy(policy, &opt), 0);
    return opt;
}

/* At the full budget nothing is evicted; coop's and coop-comp's
 * recomputable in-place takes over three buffers (mul_ on the view, both
 * of d's), dtr's copy-on-write none. At 0.9 both engines evict the same
 * two tensors. */
static void shapes_run_as_the_simulator(void **state)
{
    (void)state;
    sim_program p;
    load(&p);
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    const char *policies[] = {"coop", "coop-comp", "dtr"};
    for (int i = 0; i < 3; i++) {
        sim_options opt = options(policies[i]);
        sim_lib_counts n;
        sim_outcome lib = sim_lib_run(&p, peak, &opt, 1.0, &n);
        assert_int_equal(lib.result, SIM_OK);
        assert_int_equal(lib.evictions, 0);
        assert_true(lib.overhead == 1.0);
        assert_int_equal(n.inplace_ops, i < 2 ? 3 : 0);
        assert_int_equal(n.view_outputs, 2);
        assert_int_equal(n.multi_call_ops, 0); /* bn's two results: one call */
        lib = sim_lib_run(&p, peak, &opt, 0.9, &n);
        sim_outcome sim = sim_run(&p, peak, &opt, 0.9);
        printf("%s 0.9: lib %s %.4f/%llu, sim %s %.4f/%llu\n", policies[i],
               sim_result_name(lib.result), lib.overhead, (unsigned long long)lib.evictions,
               sim_result_name(sim.result), sim.overhead, (unsigned long long)sim.evictions);
        assert_int_equal(lib.result, SIM_OK);
        assert_int_equal(lib.result, sim.result);
        assert_int_equal(lib.evictions, sim.evictions);
        assert_true(lib.overhead == sim.overhead);
    }
    sim_program_free(&p);
}

/* A documented difference (docs/remat.md, section 4): recomputing one
 * result of a two-result op, the simulator rematerializes the other
 * (missing) one too, as simrd does, and at 0.8 that does not fit beside
 * op n's three inputs: oom. The library recomputes the result asked for
 * alone and completes. */
static void one_result_recomputed_alone(void **state)
{
    (void)state;
    sim_program p;
    load(&p);
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    sim_options opt = options("dtr");
    sim_outcome lib = sim_lib_run(&p, peak, &opt, 0.8, NULL);
    sim_outcome sim = sim_run(&p, peak, &opt, 0.8);
    assert_int_equal(sim.result, SIM_OOM);
    assert_int_equal(lib.result, SIM_OK);
    assert_true(lib.remat_ops > 0);
    sim_program_free(&p);
}

/* What the API cannot run is refused with a reason, before anything runs. */
static void unsupported_policies_are_named(void **state)
{
    (void)state;
    const char *policies[] = {"dtr-full", "coop-sum", "coop-dte"};
    for (int i = 0; i < 3; i++) {
        sim_options opt = options(policies[i]);
        coop_remat_policy pol;
        assert_int_equal(sim_lib_policy(&opt, &pol), -1);
        assert_true(strlen(coop_last_error()) > 0);
        sim_program p;
        load(&p);
        sim_outcome o = sim_lib_run(&p, sim_peak(&p, SIM_MEMORY_ARENA), &opt, 0.9, NULL);
        assert_int_equal(o.result, SIM_ERROR);
        sim_program_free(&p);
    }
}

/* An op costing more than the API takes (2^49 ns; the simulator runs it):
 * an error naming the line and the limit before anything runs, where the
 * library's refusal came in the middle of the run naming only its call. */
static void a_cost_above_the_api_limit_names_its_line(void **state)
{
    (void)state;
    static const char text[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CALL("f", "", "\"a\"", "10")
            FRESH("a", M64K) CALL("g", "\"a\"", "\"b\"", "562949953421312") FRESH("b", M64K)
                RELEASE("a") RELEASE("b");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("huge.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_OK);
    dtr_log_free(&log);
    sim_options opt = options("dtr");
    sim_outcome o = sim_lib_run(&p, sim_peak(&p, SIM_MEMORY_ARENA), &opt, 1.0, NULL);
    assert_int_equal(o.result, SIM_ERROR);
    printf("%s\n", coop_last_error());
    assert_string_equal(coop_last_error(),
                        "line 5: TIME 562949953421312 ns is above the remat API's largest op cost "
                        "(COOP_TENSOR_MAX_COST_NS, 2^48 ns); --engine sim runs it");
    o = sim_run(&p, sim_peak(&p, SIM_MEMORY_ARENA), &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    sim_program_free(&p);
}

/* A log whose TIMEs are all 0: no base compute to divide the overhead by
 * and a logical clock that never moves (every staleness 0). At 0.6 of its
 * peak every policy of both engines evicts (the library's argmin policies
 * also recompute a tensor, at 0 ns), reports overhead 1.0 (not 0/0) and
 * does not thrash (a limit of 0 ns that nothing recomputed exceeds); the
 * same numbers in a second run. */
static void a_log_of_zero_times_has_overhead_one(void **state)
{
    (void)state;
    static const char text[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CALL("f", "", "\"a\"", "0")
            FRESH("a", M64K) CALL("g", "\"a\"", "\"b\"", "0") FRESH("b", M64K)
                CALL("h", "\"b\"", "\"c\"", "0") FRESH("c", M64K) CALL("k", "\"c\"", "\"d\"", "0")
                    FRESH("d", M64K) CALL("m", "\"a\",\"d\"", "\"e\"", "0") FRESH("e", M64K)
                        RELEASE("a") RELEASE("b") RELEASE("c") RELEASE("d") RELEASE("e");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("zero.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_OK);
    dtr_log_free(&log);
    assert_int_equal(p.base_compute, 0);
    const char *policies[] = {"coop", "coop-comp", "dtr", "dtr-local", "dte", "lru", "size"};
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA), recomputed = 0;
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
        sim_options opt = options(policies[i]);
        for (int lib = 0; lib < 2; lib++) {
            sim_outcome o[2];
            for (int run = 0; run < 2; run++)
                o[run] =
                    lib ? sim_lib_run(&p, peak, &opt, 0.6, NULL) : sim_run(&p, peak, &opt, 0.6);
            printf("%s %s: %s, %llu evictions, %llu remat ops, overhead %g\n", policies[i],
                   lib ? "lib" : "sim", sim_result_name(o[0].result),
                   (unsigned long long)o[0].evictions, (unsigned long long)o[0].remat_ops,
                   o[0].overhead);
            assert_int_equal(o[0].result, SIM_OK);
            assert_true(o[0].evictions > 0);
            assert_true(o[0].overhead == 1.0);
            assert_int_equal(o[1].result, o[0].result);
            assert_int_equal(o[1].evictions, o[0].evictions);
            assert_int_equal(o[1].remat_ops, o[0].remat_ops);
            recomputed += o[0].remat_ops;
        }
    }
    assert_true(recomputed > 0);
    sim_program_free(&p);
}

/* The own traces where both engines make the same evictions. Overheads
 * differ a little (below 0.01): the simulator also recomputes views' ops (a
 * view is a tensor of its own there, a record sharing its base's storage in
 * the library), and recomputes all missing results of an op in one run
 * where the library reruns the op for each result it needs. */
static void own_traces_evict_as_the_simulator(void **state)
{
    (void)state;
    const char *logs[] = {COOP_TEST_SRCDIR "/traces/unet-train-step.ops.jsonl.gz",
                          COOP_TEST_SRCDIR "/traces/resnet50-train-step.ops.jsonl.gz"};
    const char *policies[] = {"coop", "dtr"};
    const double ratios[] = {0.9, 0.7};
    for (int l = 0; l < 2; l++) {
        sim_program p;
        if (sim_program_load(logs[l], &p))
            fail_msg("%s", coop_last_error());
        uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < 2; k++) {
                /* unet's dtr at 0.7: the library thrashes where the
                 * simulator does not (docs/remat.md, section 4) */
                if (l == 0 && i == 1 && k == 1)
                    continue;
                sim_options opt = options(policies[i]);
                sim_outcome lib = sim_lib_run(&p, peak, &opt, ratios[k], NULL);
                sim_outcome sim = sim_run(&p, peak, &opt, ratios[k]);
                printf("%s %s %.1f: lib %s %.6f/%llu, sim %s %.6f/%llu\n", p.name, policies[i],
                       ratios[k], sim_result_name(lib.result), lib.overhead,
                       (unsigned long long)lib.evictions, sim_result_name(sim.result), sim.overhead,
                       (unsigned long long)sim.evictions);
                assert_int_equal(lib.result, SIM_OK);
                assert_int_equal(lib.result, sim.result);
                assert_int_equal(lib.evictions, sim.evictions);
                assert_true(fabs(sim.overhead - lib.overhead) < 0.01);
                /* the same evictions from the same pool states: the same
                 * searches begin with the same free bytes, over the same
                 * capacity (sim_arena_capacity) */
                assert_int_equal(lib.frag_failures, sim.frag_failures);
                assert_true(fabs(sim.frag_at_evict - lib.frag_at_evict) < 1e-12);
            }
        }
        sim_program_free(&p);
    }
}

/* coop (c_live) in the library (COOP_REMAT_COOP) as in the simulator on
 * the held-out vgg16 at 0.9, the cell that motivated c_live (docs/remat.md,
 * section 2c): two evictions and 1.034 in both engines, below the
 * library's coop-comp there (COOP_REMAT_COOP_COMP: its c_comp counts the
 * released pre-ReLU value next to conv1_1's output). */
static void coop_evicts_as_the_simulator_on_vgg16(void **state)
{
    (void)state;
    sim_program p;
    if (sim_program_load(COOP_TEST_SRCDIR "/traces/heldout/vgg16-train-step.ops.jsonl.gz", &p))
        fail_msg("%s", coop_last_error());
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    sim_options live = options("coop"), coop = options("coop-comp");
    coop_remat_policy pol;
    assert_int_equal(sim_lib_policy(&live, &pol), 0);
    assert_int_equal(pol, COOP_REMAT_COOP);
    assert_int_equal(sim_lib_policy(&coop, &pol), 0);
    assert_int_equal(pol, COOP_REMAT_COOP_COMP);
    sim_outcome lib = sim_lib_run(&p, peak, &live, 0.9, NULL);
    sim_outcome sim = sim_run(&p, peak, &live, 0.9);
    sim_outcome lib_coop = sim_lib_run(&p, peak, &coop, 0.9, NULL);
    printf("vgg16 0.9: coop lib %s %.6f/%llu, sim %s %.6f/%llu; coop-comp lib %.6f/%llu\n",
           sim_result_name(lib.result), lib.overhead, (unsigned long long)lib.evictions,
           sim_result_name(sim.result), sim.overhead, (unsigned long long)sim.evictions,
           lib_coop.overhead, (unsigned long long)lib_coop.evictions);
    assert_int_equal(lib.result, SIM_OK);
    assert_int_equal(sim.result, SIM_OK);
    assert_int_equal(lib.evictions, sim.evictions);
    assert_true(fabs(lib.overhead - sim.overhead) < 0.005);
    assert_int_equal(lib_coop.result, SIM_OK);
    assert_true(lib.overhead < lib_coop.overhead - 0.01);
    sim_program_free(&p);
}

/* The library's search metrics in the lib engine's outcome: every search
 * timed (p50 <= p99, both > 0 once anything was searched), each sampled
 * (none left unsampled), its cost evaluations counted, fragmentation
 * failures among the searches. With nothing searched (the small log at the
 * full budget) all of them are 0. */
static void search_metrics_come_from_the_library(void **state)
{
    (void)state;
    const char *logs[] = {COOP_TEST_SRCDIR "/traces/unet-train-step.ops.jsonl.gz",
                          COOP_TEST_SRCDIR "/traces/resnet50-train-step.ops.jsonl.gz"};
    const char *policies[] = {"coop", "coop-eq", "coop-comp", "dtr", "dte", "lru"};
    sim_program shapes;
    load(&shapes);
    uint64_t shapes_peak = sim_peak(&shapes, SIM_MEMORY_ARENA);
    for (int l = 0; l < 2; l++) {
        sim_program p;
        if (sim_program_load(logs[l], &p))
            fail_msg("%s", coop_last_error());
        uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
        for (int i = 0; i < 6; i++) {
            sim_options opt = options(policies[i]);
            sim_lib_counts n;
            sim_outcome o = sim_lib_run(&shapes, shapes_peak, &opt, 1.0, &n);
            assert_int_equal(o.result, SIM_OK);
            assert_int_equal(n.searches, 0);
            assert_int_equal(o.search_ns_p50, 0);
            assert_int_equal(o.search_ns_p99, 0);
            assert_int_equal(o.heuristic_evals, 0);
            assert_int_equal(o.frag_failures, 0);
            assert_true(o.frag_at_evict == 0.0);
            o = sim_lib_run(&p, peak, &opt, 0.7, &n);
            printf("%s %s 0.7: %s, %llu searches, p50 %llu p99 %llu ns, %llu evals, frag %.4f, "
                   "%llu frag failures\n",
                   p.name, policies[i], sim_result_name(o.result), (unsigned long long)n.searches,
                   (unsigned long long)o.search_ns_p50, (unsigned long long)o.search_ns_p99,
                   (unsigned long long)o.heuristic_evals, o.frag_at_evict,
                   (unsigned long long)o.frag_failures);
            assert_int_not_equal(o.result, SIM_ERROR);
            assert_true(n.searches > 0);
            assert_int_equal(n.unsampled_searches, 0);
            assert_true(o.search_ns_p50 > 0);
            assert_true(o.search_ns_p50 <= o.search_ns_p99);
            /* each search evaluates at least one tensor's cost */
            assert_true(o.heuristic_evals >= n.searches);
            assert_true(o.frag_failures <= n.searches);
            assert_true(o.frag_at_evict > 0.0 && o.frag_at_evict < 1.0);
        }
        sim_program_free(&p);
    }
    sim_program_free(&shapes);
}

/* min_budget_ratio by the simulator's bisection over the lib engine: in
 * (0, 1], the run just above it succeeds and one 0.02 below fails.
 * (Feasibility is not monotone near the thrash limit: on unet, coop-comp at
 * the min ratio + 0.01 thrashes, and on resnet50 coop (c_live) succeeds
 * 0.02 below its min ratio 0.383; coop-comp and dtr on resnet50 are
 * checked here.) */
static void min_ratio_bisects_the_lib_engine(void **state)
{
    (void)state;
    sim_program p;
    if (sim_program_load(COOP_TEST_SRCDIR "/traces/resnet50-train-step.ops.jsonl.gz", &p))
        fail_msg("%s", coop_last_error());
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    const char *policies[] = {"coop-comp", "dtr"};
    for (int i = 0; i < 2; i++) {
        sim_options opt = options(policies[i]);
        double min = sim_lib_min_budget_ratio(&p, peak, &opt, 0.005);
        sim_outcome above = sim_lib_run(&p, peak, &opt, min + 0.01, NULL);
        sim_outcome below = sim_lib_run(&p, peak, &opt, min - 0.02, NULL);
        printf("%s %s: min ratio %.4f, at +0.01 %s, at -0.02 %s\n", p.name, policies[i], min,
               sim_result_name(above.result), sim_result_name(below.result));
        assert_true(min > 0.0 && min <= 1.0);
        assert_true(min < 0.9); /* resnet50 runs at 0.5 with both */
        assert_int_equal(sim_lib_run(&p, peak, &opt, min, NULL).result, SIM_OK);
        assert_int_equal(above.result, SIM_OK);
        assert_int_not_equal(below.result, SIM_OK);
        assert_int_not_equal(below.result, SIM_ERROR);
    }
    sim_program_free(&p);
}

/* review2 F3 in the lib engine, whose pool is the arena model's
 * (sim_arena_pool_config): tiny_chain (a 512 B constant, then 2048 B
 * results made one from the other: peak 4608 B) fits at ratio 1.0, where
 * a capacity rounded down to 4 KiB was oom; only_constants (1000 B and
 * 2000 B, 3072 B in blocks) is oom at 0.3 (a 512 B pool), where a 4 KiB
 * floor made it ok, and at 0.1 (307 B: no block fits). */
static void small_budgets_are_the_arena_models(void **state)
{
    (void)state;
    static const char tiny_chain[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"in\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"in\",\"MEMORY\":\"512\"}\n" CALL(
            "f", "\"in\"", "\"t0\"", "1000") FRESH("t0", "2048")
            CALL("f", "\"t0\"", "\"t1\"", "1000") FRESH("t1", "2048") RELEASE("t0")
                CALL("f", "\"t1\"", "\"t2\"", "1000") FRESH("t2", "2048") RELEASE("t1");
    static const char only_constants[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c0\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c0\",\"MEMORY\":\"1000\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c1\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c1\",\"MEMORY\":\"2000\"}\n" RELEASE("c0");
    const char *texts[] = {tiny_chain, only_constants};
    for (int l = 0; l < 2; l++) {
        dtr_log log;
        sim_program p;
        assert_int_equal(dtr_log_parse_buffer("small.log", texts[l], strlen(texts[l]), &log),
                         COOP_OK);
        assert_int_equal(sim_program_build(&log, &p), COOP_OK);
        dtr_log_free(&log);
        uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
        assert_int_equal(peak, l ? 3072 : 4608);
        const char *policies[] = {"coop", "dtr"};
        for (int i = 0; i < 2; i++) {
            sim_options opt = options(policies[i]);
            sim_lib_counts n;
            assert_int_equal(sim_lib_run(&p, peak, &opt, 1.0, &n).result, SIM_OK);
            assert_true(sim_lib_min_budget_ratio(&p, peak, &opt, 0.005) == 1.0);
            if (l) {
                assert_int_equal(sim_lib_run(&p, peak, &opt, 0.3, &n).result, SIM_OOM);
                assert_int_equal(sim_lib_run(&p, peak, &opt, 0.1, &n).result, SIM_OOM);
                assert_int_equal(n.searches, 0);
            }
        }
        sim_program_free(&p);
    }
}

/* review2 F2 in the lib engine: swap_(v, v) mutating arguments 0 and 1, v
 * a view of the released x. The first output takes x's record over, the
 * second is a fresh tensor; both taking it over passed a NULL record to
 * coop_tensor_mutate (an error row). As the simulator: ok at 1.0, oom at
 * 0.34, min ratio (2 MiB + 512) / (3 MiB + 512). */
static void two_outputs_do_not_take_over_one_record(void **state)
{
    (void)state;
    static const char text[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c\",\"MEMORY\":\"512\"}\n" CALL("g", "\"c\"",
                                                                                "\"x\"", "1000")
            FRESH("x", "1048576") CALL("view", "\"x\"", "\"v\"", "10") VIEW("v") RELEASE(
                "x") "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"swap_\",\"ARGS\":[\"v\",\"v\"],"
                     "\"MUTATE\":[0,1],\"TIME\":\"500\"}\n" CALL("h", "\"v\"", "\"y\"", "1000")
                         FRESH("y", "1048576");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("mutate.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_OK);
    dtr_log_free(&log);
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    sim_options opt = options("coop");
    sim_lib_counts n;
    sim_outcome o = sim_lib_run(&p, peak, &opt, 1.0, &n);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(n.inplace_ops, 1);
    assert_int_equal(sim_lib_run(&p, peak, &opt, 0.34, NULL).result, SIM_OOM);
    double lib = sim_lib_min_budget_ratio(&p, peak, &opt, 0.005);
    assert_true(lib > 0.665 && lib < 0.675);
    assert_true(lib == sim_min_budget_ratio(&p, peak, &opt, 0.005));
    sim_program_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shapes_run_as_the_simulator),
        cmocka_unit_test(one_result_recomputed_alone),
        cmocka_unit_test(unsupported_policies_are_named),
        cmocka_unit_test(a_cost_above_the_api_limit_names_its_line),
        cmocka_unit_test(a_log_of_zero_times_has_overhead_one),
        cmocka_unit_test(own_traces_evict_as_the_simulator),
        cmocka_unit_test(coop_evicts_as_the_simulator_on_vgg16),
        cmocka_unit_test(search_metrics_come_from_the_library),
        cmocka_unit_test(min_ratio_bisects_the_lib_engine),
        cmocka_unit_test(small_budgets_are_the_arena_models),
        cmocka_unit_test(two_outputs_do_not_take_over_one_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
