/*
 * coop's c_live cache (src/remat/sim_live.c) decides exactly as the
 * walk at every evaluation: the project's own traces (traces/, in the
 * repository; and the DTR logs of lstm and tv_densenet121 where the shared
 * workloads are) at seven budgets, coop with the cache (the default)
 * against `--no-eq-cache` (no cache), field by field: result, overhead,
 * evictions, recomputed ops, in-place ops, fragmentation failures and
 * fraction, blocks visited. A value left valid after a change it depends on
 * (a missing invalidation) changes a window somewhere on these runs: with
 * the invalidation of storages rematerialized (sim_live_flipped in
 * compute_op) removed, 12 of the 49 runs differ (10 without the shared
 * logs); without the one at evictions, 39 (docs/remat.md, section
 * 2c, "The c_live cache"). Cost evaluations are not compared: with the cache,
 * the window pass's bound reads valid values exactly (counted as
 * evaluations, as coop's cached c_eq is).
 *
 * A wrong value that changes no window is caught by the second test: every
 * value the cache gives (exact, or a lower bound for the window pass) is
 * compared with the walks (sim_options.check_components). With a release
 * counted as a change that only adds (run_release's sim_live_changed with
 * shrinks false), which no window of the first test shows, 1 of its runs
 * has wrong bounds. Dropping the invalidation when a handle is taken
 * (SIM_GET: run's sim_live_changed) is caught by neither: in a valid log a
 * storage without handles takes one only in COPY_FROM x x, right after
 * losing it, so no value read is wrong without it. The last two tests
 * check every value the cache holds after every command and before every
 * search (sim_options.check_caches), not only those read: on a program
 * (not a log) that takes a handle on a released storage, where a value
 * stays exact and wrong, and on a log with COPY_FROM x x, where a value
 * stays invalid although a walk would read what it read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "remat/sim.h"
#include "status.h"

static const char *const traces[] = {
    COOP_TEST_SRCDIR "/traces/lstm-train-step.ops.jsonl.gz",
    COOP_TEST_SRCDIR "/traces/densenet121-train-step.ops.jsonl.gz",
    COOP_TEST_SRCDIR "/traces/unet-train-step.ops.jsonl.gz",
    COOP_TEST_SRCDIR "/traces/heldout/vgg16-train-step.ops.jsonl.gz",
    COOP_TEST_SRCDIR "/traces/heldout/mobilenet_v2-train-step.ops.jsonl.gz",
};

/* The DTR logs of the search-cost figures, where the shared workloads are
 * (beside the checkout, or beside the worktrees' parent); skipped if absent. */
#define DTR_LOGS "/shared/workloads/dtr-logs/"
#define DTR_LSTM "lstm-128-11000000000.0-2020-10-1-16-38-52-default.log.gz"
#define DTR_DENSE "tv_densenet121-84-10000000000.0-2020-10-1-13-41-18-default.log.gz"
static const char *const shared_logs[] = {
    COOP_TEST_SRCDIR "/.." DTR_LOGS DTR_LSTM,
    COOP_TEST_SRCDIR "/../.." DTR_LOGS DTR_LSTM,
    COOP_TEST_SRCDIR "/.." DTR_LOGS DTR_DENSE,
    COOP_TEST_SRCDIR "/../.." DTR_LOGS DTR_DENSE,
};

static const double ratios[] = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3};

/* 1 where the two runs differ in a decision or its outcome (printed). */
static int differ(const char *trace, double ratio, const sim_outcome *cached,
                  const sim_outcome *walked)
{
    int same = cached->result == walked->result && cached->overhead == walked->overhead &&
               cached->evictions == walked->evictions && cached->remat_ops == walked->remat_ops &&
               cached->inplace_ops == walked->inplace_ops &&
               cached->frag_failures == walked->frag_failures &&
               cached->frag_at_evict == walked->frag_at_evict &&
               cached->blocks_visited == walked->blocks_visited;
    printf("%s %s %.1f: cached %s %.6f, %llu evictions, %llu remat ops; walked %s %.6f, %llu, "
           "%llu\n",
           same ? "same" : "DIFFERENT", trace, ratio, sim_result_name(cached->result),
           cached->overhead, (unsigned long long)cached->evictions,
           (unsigned long long)cached->remat_ops, sim_result_name(walked->result), walked->overhead,
           (unsigned long long)walked->evictions, (unsigned long long)walked->remat_ops);
    return !same;
}

/* Both runs of one log at every ratio: the differences. */
static int compare_log(const char *path, int *searched)
{
    sim_program p;
    if (sim_program_load(path, &p))
        fail_msg("%s: %s", path, coop_last_error());
    int differences = 0;
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    for (size_t i = 0; i < sizeof ratios / sizeof *ratios; i++) {
        sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
        assert_int_equal(sim_options_parse_policy("coop", &opt), 0);
        sim_outcome cached = sim_run(&p, peak, &opt, ratios[i]);
        opt.no_eq_cache = 1;
        sim_outcome walked = sim_run(&p, peak, &opt, ratios[i]);
        assert_int_not_equal(cached.result, SIM_ERROR);
        differences += differ(p.name, ratios[i], &cached, &walked);
        *searched += cached.evictions > 0;
    }
    sim_program_free(&p);
    return differences;
}

static void cache_decides_as_the_walk(void **state)
{
    (void)state;
    int differences = 0, searched = 0;
    for (size_t t = 0; t < sizeof traces / sizeof *traces; t++)
        differences += compare_log(traces[t], &searched);
    /* the runs must search (else nothing was compared): most budgets do */
    assert_true(searched >= 20);
    for (size_t t = 0; t < sizeof shared_logs / sizeof *shared_logs; t++) {
        FILE *f = fopen(shared_logs[t], "rb");
        if (!f)
            continue;
        fclose(f);
        differences += compare_log(shared_logs[t], &searched);
    }
    assert_int_equal(differences, 0);
}

/* Every cached value read on the own traces at every ratio agrees with the
 * walks: the mismatches of the runs (printed per run). */
static void check_log(const char *path, uint64_t *checks, uint64_t *mismatches)
{
    sim_program p;
    if (sim_program_load(path, &p))
        fail_msg("%s: %s", path, coop_last_error());
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    for (size_t i = 0; i < sizeof ratios / sizeof *ratios; i++) {
        sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
        assert_int_equal(sim_options_parse_policy("coop", &opt), 0);
        opt.check_components = 1;
        sim_outcome o = sim_run(&p, peak, &opt, ratios[i]);
        assert_int_not_equal(o.result, SIM_ERROR);
        printf("%s %.1f: %llu cached values checked, %llu wrong\n", p.name, ratios[i],
               (unsigned long long)o.comp_checks, (unsigned long long)o.comp_mismatches);
        *checks += o.comp_checks;
        *mismatches += o.comp_mismatches;
    }
    sim_program_free(&p);
}

static void cached_values_match_the_walks(void **state)
{
    (void)state;
    uint64_t checks = 0, mismatches = 0;
    for (size_t t = 0; t < sizeof traces / sizeof *traces; t++)
        check_log(traces[t], &checks, &mismatches);
    assert_true(checks > 1000); /* the cache was used */
    for (size_t t = 0; t < sizeof shared_logs / sizeof *shared_logs; t++) {
        FILE *f = fopen(shared_logs[t], "rb");
        if (!f)
            continue;
        fclose(f);
        check_log(shared_logs[t], &checks, &mismatches);
    }
    assert_int_equal(mismatches, 0);
}

/* dtr-full keeps its e* in the same cache (sim_live_open), and its argmin
 * reads valid values as scores and invalidated ones as lower bounds
 * (sim_policy.c, choose_dtr_full). In the ideal model on the own traces
 * and the DTR logs at every ratio: the same run as without the cache
 * (--no-eq-cache: every e* walked), heuristic_evals included, and every
 * value read (check_components) and every value held after every command
 * and before every search (check_caches) equal to the walks, or for a
 * lower bound not above them. The shared logs at 0.9 to 0.5 only (their
 * checked runs walk every cached value after every command). */
static void dtr_full_cache_is_the_walk(void **state)
{
    (void)state;
    uint64_t checks = 0, mismatches = 0;
    int differences = 0, searched = 0;
    /* the checked runs walk every cached value: under the sanitizers the
     * whole sweep took 168 s of CI's ASan build, so there two ratios at
     * which every log evicts (the plain build runs them all): the shared
     * logs' 0.9 and 0.5, the traces' 0.7 and 0.6 (2.4M values checked; 0.9
     * and 0.4 checked 5.8M, 60 s under ASan: densenet121 at 0.4 2.9M, 33 s,
     * lstm at 0.9 1.3M, 20 s) */
    bool quick = getenv("COOP_SANITIZED") != NULL;
    for (size_t t = 0;
         t < sizeof traces / sizeof *traces + sizeof shared_logs / sizeof *shared_logs; t++) {
        bool shared = t >= sizeof traces / sizeof *traces;
        const char *path = shared ? shared_logs[t - sizeof traces / sizeof *traces] : traces[t];
        sim_program p;
        if (shared) {
            FILE *f = fopen(path, "rb");
            if (!f)
                continue;
            fclose(f);
        }
        if (sim_program_load(path, &p))
            fail_msg("%s: %s", path, coop_last_error());
        uint64_t peak = sim_peak(&p, SIM_MEMORY_IDEAL);
        for (size_t i = 0; i < sizeof ratios / sizeof *ratios; i++) {
            if ((shared && ratios[i] < 0.5) ||
                (quick && ratios[i] != (shared ? 0.9 : 0.7) && ratios[i] != (shared ? 0.5 : 0.6)))
                continue;
            sim_options opt = sim_options_default(SIM_POLICY_DTR_FULL, SIM_MEMORY_IDEAL);
            sim_outcome cached = sim_run(&p, peak, &opt, ratios[i]);
            opt.check_components = 1;
            opt.check_caches = !shared;
            sim_outcome checked = sim_run(&p, peak, &opt, ratios[i]);
            opt.check_components = opt.check_caches = 0;
            opt.no_eq_cache = 1;
            sim_outcome walked = sim_run(&p, peak, &opt, ratios[i]);
            assert_int_not_equal(cached.result, SIM_ERROR);
            differences += differ(p.name, ratios[i], &cached, &walked);
            differences += cached.heuristic_evals != walked.heuristic_evals;
            differences += differ(p.name, ratios[i], &checked, &walked);
            searched += cached.evictions > 0;
            checks += checked.comp_checks + checked.cache_checks;
            mismatches += checked.comp_mismatches + checked.cache_mismatches;
            printf("dtr-full %s %.1f: %llu heuristic evals (walked: %llu); %llu values checked, "
                   "%llu wrong\n",
                   p.name, ratios[i], (unsigned long long)cached.heuristic_evals,
                   (unsigned long long)walked.heuristic_evals,
                   (unsigned long long)(checked.comp_checks + checked.cache_checks),
                   (unsigned long long)(checked.comp_mismatches + checked.cache_mismatches));
        }
        sim_program_free(&p);
    }
    assert_true(searched >= (quick ? 8 : 20));
    assert_true(checks > 1000); /* the cache was used */
    assert_int_equal(differences, 0);
    assert_int_equal(mismatches, 0);
}

#define LINE(text) "{" text "}\n"
#define CALL(op, args, res, ns, bytes)                                                             \
    LINE("\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" args "],\"RESULT\":[\"" res     \
         "\"],\"TIME\":\"" ns "\"")                                                                \
    LINE("\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"" bytes "\"")               \
    LINE("\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"-1\"")
#define RELEASE(n) LINE("\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"" n "\"")

/* Runs prog in the arena at ratio of its peak, coop with every c_live its
 * cache holds compared with its walks after every command and before every
 * search (check_caches), and every value read with them (check_components):
 * the outcome (printed). */
static sim_outcome run_checked(const char *name, const sim_program *p, double ratio)
{
    sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
    assert_int_equal(sim_options_parse_policy("coop", &opt), 0);
    opt.check_components = 1;
    opt.check_caches = 1;
    sim_outcome o = sim_run(p, sim_peak(p, SIM_MEMORY_ARENA), &opt, ratio);
    printf("%s %.1f: %s, %llu evictions; %llu values read checked, %llu wrong; %llu cached "
           "values checked, %llu wrong\n",
           name, ratio, sim_result_name(o.result), (unsigned long long)o.evictions,
           (unsigned long long)o.comp_checks, (unsigned long long)o.comp_mismatches,
           (unsigned long long)o.cache_checks, (unsigned long long)o.cache_mismatches);
    return o;
}

/* x = op1(w) and its consumer h = op2(x), released at once (evicted, no
 * handle); then y and z; 1 KiB and 1 ns each. The arena holds 5 of the
 * peak's 7 blocks: z's search evicts x, caching its c_live, 1 ns (its
 * forward region goes through h without counting it: nobody holds h). Then a
 * handle is taken to h (a SIM_GET): recomputing h would now need x, so
 * x's c_live is 2 ns and its cached 1 must stop being exact (it stays a
 * lower bound). Without the invalidation at SIM_GET (run's
 * sim_live_changed), the cache keeps 1 as exact until that handle goes
 * again: 4 checks find it wrong. A log cannot express this: only COPY takes a handle, and its
 * source must be a live name (the builder refuses a released one:
 * GET_LOG("h"), checked below; a storage loses its last handle and takes
 * one again only in COPY_FROM x x, with no search between), so the
 * program is built from GET_LOG("y") and the COPY's two commands (its
 * GET, and the later RELEASE of y's tensor) are pointed at h. */
/* one instruction (or call) a line */
/* clang-format off */
#define GET_LOG(copied)                                                     \
    LINE("\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"")           \
    LINE("\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"")                    \
    LINE("\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"512\"")   \
    CALL("op1", "\"w\"", "x", "1", "1024")                                  \
    CALL("op2", "\"x\"", "h", "1", "1024")                                  \
    RELEASE("h")                                                            \
    CALL("op3", "\"w\"", "y", "1", "1024")                                  \
    CALL("op4", "\"w\"", "z", "1", "1024")                                  \
    LINE("\"INSTRUCTION\":\"COPY\",\"DST\":\"c\",\"SRC\":\"" copied "\"")   \
    RELEASE("x") RELEASE("y") RELEASE("z") RELEASE("c")
/* clang-format on */

static void handle_taken_on_an_evicted_storage(void **state)
{
    (void)state;
    static const char released[] = GET_LOG("h"), valid[] = GET_LOG("y");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("get.log", released, strlen(released), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "get.log:17: COPY source h was released at line 10"));
    dtr_log_free(&log);
    assert_int_equal(dtr_log_parse_buffer("get.log", valid, strlen(valid), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_OK);
    dtr_log_free(&log);
    /* tensors in order of creation: w, x, h, y, z */
    const uint32_t h = 2, y = 3;
    size_t get = p.num_cmds, release_c = p.num_cmds;
    for (size_t i = 0; i < p.num_cmds; i++) {
        if (p.cmds[i].kind == SIM_GET)
            get = i;
        if (p.cmds[i].kind == SIM_RELEASE && p.cmds[i].arg == y)
            release_c = i; /* the later of RELEASE y and RELEASE c */
    }
    assert_true(get < release_c && release_c < p.num_cmds && p.cmds[get].arg == y);
    p.cmds[get].arg = h;
    p.cmds[release_c].arg = h;
    assert_int_equal(sim_peak(&p, SIM_MEMORY_ARENA), 7 * 512);
    sim_outcome o = run_checked("get.log", &p, 0.8);
    sim_program_free(&p);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 1); /* x, for z */
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
    assert_int_equal(o.comp_mismatches, 0);
}

/* The same invalidation in a valid log: x = op1(w), h = op2(x), y, z, 1 KiB
 * each, the arena 6 of the peak's 9 blocks. y's search evicts h (held),
 * z's evicts y; c_live(x) is walked through h, evicted and held. COPY_FROM
 * h h releases h's only handle (x's value goes: h no longer counts) and
 * takes it again (a SIM_GET): a walk from x now reads what it read, so its
 * value is exact again without one (sim_live_fire compares each dependency
 * when it changes). Without the invalidation at SIM_GET it stays invalid
 * (the next search walks x for nothing): 2 values left invalid. */
static void handle_taken_back_revalidates(void **state)
{
    (void)state;
    static const char text[] = LINE("\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"")
        LINE("\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"")
            LINE("\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"512\"")
                CALL("op1", "\"w\"", "x", "1", "1024") CALL("op2", "\"x\"", "h", "1", "1024")
                    CALL("op3", "\"w\"", "y", "1", "1024") CALL("op4", "\"w\"", "z", "1", "1024")
                        LINE("\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"h\",\"SRC\":\"h\"")
                            RELEASE("x") RELEASE("h") RELEASE("y") RELEASE("z");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("copy_from.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_OK);
    dtr_log_free(&log);
    assert_int_equal(sim_peak(&p, SIM_MEMORY_ARENA), 9 * 512);
    sim_outcome o = run_checked("copy_from.log", &p, 0.7);
    sim_program_free(&p);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2); /* h, then y */
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cache_decides_as_the_walk),
        cmocka_unit_test(cached_values_match_the_walks),
        cmocka_unit_test(dtr_full_cache_is_the_walk),
        cmocka_unit_test(handle_taken_on_an_evicted_storage),
        cmocka_unit_test(handle_taken_back_revalidates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
