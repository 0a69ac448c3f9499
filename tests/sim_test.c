/*
 * The simulator on tiny hand-built logs with results computed by hand.
 *
 *
 * The chain log: w (constant, 100 B) -f-> a -g-> b -h-> c -k-> d, then
 * m(a) -> e; every result 100 B; costs f 10, g 20, h 40, k 5, m 7 (base 82).
 * Budgets below are ratios of 500 B (the unlimited peak is 600 B: a lives
 * until the end). At ratio 0.8 (400 B), computing d must
 * evict one of a, b (c is locked as k's input). Clock at that moment: 71;
 * last accesses a 11, b 31.
 *  - dtr family: a scores 10/(100*60) < b's 20/(100*40): evict a. m then
 *    recomputes a (evicting b: 20+10/(100*45) vs d inf (just made) vs c
 *    40/(100*5)), then evicts d (5/(100*10) < c 40/(100*15)) for e.
 *    3 evictions, 1 recompute of 10 ns: overhead 92/82.
 *  - size: all 100 B, ties go to the later in pool order: b, then c
 *    (for e). 2 evictions, no recompute.
 *  - lru: a (at k), then b (for a's recompute), then c (last access 71 < d's
 *    76): 3 evictions, 1 recompute.
 * At ratio 0.3 (150 B) w + a do not fit and nothing is evictable: oom.
 * (The reference check on a shared log is tests/sim_reference_test.c.)
 */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coop.h"
#include "remat/sim.h"
#include "remat/sim_internal.h"
#include "remat/sim_live.h"
#include "status.h"
#include "test_seed.h"

#define CONST(n, m)                                                                                \
    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"" n "\"}\n"                                          \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" n "\",\"MEMORY\":\"" m "\"}\n"
#define CALL1(op, arg, res, t)                                                                     \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" arg "],\"RESULT\":[\"" res          \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"100\"}\n"                       \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"-1\"}\n"
/* CALL1 with the result's MEMORY given */
#define CALL1M(op, arg, res, t, m)                                                                 \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" arg "],\"RESULT\":[\"" res          \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"" m "\"}\n"                     \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"-1\"}\n"
#define RELEASE(n) "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"" n "\"}\n"

static const char chain_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("w", "100")
        CALL1("f", "\"w\"", "a", "10") CALL1("g", "\"a\"", "b", "20") CALL1("h", "\"b\"", "c", "40")
            CALL1("k", "\"c\"", "d", "5") CALL1("m", "\"a\"", "e", "7") RELEASE("a") RELEASE("b")
                RELEASE("c") RELEASE("d") RELEASE("e");

static void load(const char *text, sim_program *p)
{
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("chain.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, p), COOP_OK);
    dtr_log_free(&log);
}

static sim_outcome run_chain(sim_policy policy, double ratio)
{
    sim_program p;
    load(chain_log, &p);
    assert_int_equal(p.base_compute, 82);
    /* unlimited: w a b c d e all live when e is made */
    assert_int_equal(sim_baseline_peak(&p, 1), 600);
    sim_options opt = sim_options_default(policy, SIM_MEMORY_IDEAL);
    sim_outcome o = sim_run(&p, 500, &opt, ratio); /* budgets relative to 500 B */
    sim_program_free(&p);
    return o;
}

/* The chain loaded into p and a runtime over it built by hand: every
 * storage (w a b c d e) material with its op's compute (0, f 10, g 20,
 * h 40, k 5, m 7), in no class, and nothing else set. */
static sim_runtime chain_runtime(sim_program *p, rt_storage st[6])
{
    static const uint64_t compute[6] = {0, 10, 20, 40, 5, 7};
    load(chain_log, p);
    for (uint32_t s = 0; s < 6; s++)
        st[s] = (rt_storage){.compute = compute[s], .material = true, .ecn = SIM_NONE};
    return (sim_runtime){.prog = p, .storages = st, .num_created_tensors = p->num_tensors};
}

/* chain_runtime with each storage's one tensor created and held by a
 * handle (num_created 1, ref_ext 1), the state the cost tests start from. */
static sim_runtime held_chain_runtime(sim_program *p, rt_storage st[6])
{
    sim_runtime rt = chain_runtime(p, st);
    for (uint32_t s = 0; s < 6; s++) {
        st[s].num_created = 1;
        st[s].ref_ext = 1;
    }
    return rt;
}

/* Each storage's distinct neighbours, each with the tensor whose creation
 * makes it one, in creation order: a (tensor and storage 1) has w as its
 * op's input from its own creation on, then its consumers b (2) and e (5). */
static void neighbours_are_distinct_in_creation_order(void **state)
{
    (void)state;
    sim_program p;
    load(chain_log, &p);
    assert_int_equal(p.num_storages, 6);
    const uint32_t expect[6][3][2] = {
        {{1, 1}}, {{0, 1}, {2, 2}, {5, 5}}, {{1, 2}, {3, 3}}, {{2, 3}, {4, 4}}, {{3, 4}}, {{1, 5}},
    };
    const uint32_t count[6] = {1, 3, 2, 2, 1, 1};
    for (uint32_t s = 0; s < 6; s++) {
        assert_int_equal(p.neighbour_first[s + 1] - p.neighbour_first[s], count[s]);
        for (uint32_t i = 0; i < count[s]; i++) {
            const sim_neighbour *n = &p.neighbours[p.neighbour_first[s] + i];
            assert_int_equal(n->storage, expect[s][i][0]);
            assert_int_equal(n->since, expect[s][i][1]);
        }
    }
    sim_program_free(&p);
}

/* coop's window cost c_live counts what evicting a storage makes the
 * program recompute: its own compute, its evicted ancestors (needed to
 * recompute it), and its evicted descendants the program still holds
 * (their recomputation would need it), walking through released ones
 * without counting them. On the chain (w -f-> a -g-> b -h-> c -k-> d,
 * m(a) -> e; f 10, g 20, h 40, k 5, m 7), a, b, c evicted, one component:
 *  - d: 5 + c + b + a = 75, as c_comp;
 *  - e: 7 + a = 17 (b and c hang off its ancestor a: recomputing e needs
 *    neither), where c_comp is 7 + 70.
 * Then a resident, b and c evicted: c_live(a) = 10 + c's 40 while c is held
 * (b released: walked through, not counted), 10 once c is released too;
 * c_comp(a) is 10 + 60 either way. */
static void live_cost_counts_what_recomputation_needs(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = held_chain_runtime(&p, st);
    for (uint32_t s = 1; s <= 3; s++)
        st[s].material = false;
    assert_int_equal(sim_live_compute(&rt, 4), 5 + 40 + 20 + 10);
    assert_int_equal(sim_live_compute(&rt, 5), 7 + 10);
    st[1].material = true; /* a back, b released */
    st[2].ref_ext = 0;
    assert_int_equal(sim_live_compute(&rt, 1), 10 + 40);
    st[3].ref_ext = 0; /* c released too */
    assert_int_equal(sim_live_compute(&rt, 1), 10);
    free(rt.stack);
    sim_program_free(&p);
}

/* coop's window cost c_comp counts the evicted storages actually connected
 * to a storage; c_eq counts its neighbours' union-find classes, which never
 * split. On the chain: a, b, c evicted (one class, 10 + 20 + 40), then b
 * rematerialized (the class keeps a and c, value 50). d's only neighbour is
 * c: c_eq(d) = 5 + 50, but a is cut off from c by the resident b, so
 * c_comp(d) = 5 + 40. e's only neighbour is a: c_eq(e) = 7 + 50, c_comp(e)
 * = 7 + 10. With b evicted again all three are connected: c_comp = c_eq;
 * that component's label then answers d's c_comp until a new tensor on
 * evicted c (its compute grown) makes the runtime forget it. */
static void component_cost_ignores_classes_cut_by_rematerialization(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    /* component labels are forgotten below at each change, as the runtime does */
    sim_runtime rt = chain_runtime(&p, st);
    for (uint32_t s = 1; s <= 3; s++) { /* evict a, b, c: one class */
        st[s].material = false;
        st[s].ecn = uf_make(&rt.uf, (int64_t)st[s].compute);
        assert_int_not_equal(st[s].ecn, SIM_NONE);
        if (s > 1)
            uf_merge(&rt.uf, st[s - 1].ecn, st[s].ecn);
    }
    assert_int_equal(sim_eq_compute(&rt, 4), 5 + 70);
    assert_true(sim_classes_uncut(&rt, 4)); /* c_comp is c_eq, no walk */
    uint64_t walks = rt.stats.eq_walks;
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 70);
    assert_int_equal(rt.stats.eq_walks, walks + 1); /* c_eq's own walk only (no cache) */
    /* b rematerialized: subtracts its compute, leaves its node behind */
    sim_comp_forget(&rt, 2);
    st[2].material = true;
    uf_leave(&rt.uf, st[2].ecn, 20);
    st[2].ecn = SIM_NONE;
    assert_int_equal(sim_eq_compute(&rt, 4), 5 + 50);
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 40);
    assert_int_equal(sim_eq_compute(&rt, 5), 7 + 50);
    assert_int_equal(sim_component_compute(&rt, 5), 7 + 10);
    /* resident b between a and c: two components; with too few stamps left
     * for its two walks the labels start over before it, not halfway */
    rt.comp_stamp = UINT32_MAX - 1;
    assert_int_equal(sim_component_compute(&rt, 2), 20 + 10 + 40);
    assert_int_equal(rt.comp_stamp, 2);
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 40);
    /* b evicted again: one component a-b-c */
    st[2].material = false;
    st[2].ecn = uf_make(&rt.uf, 20);
    uf_merge(&rt.uf, st[1].ecn, st[2].ecn);
    sim_comp_forget(&rt, 1); /* a's and c's components merge */
    sim_comp_forget(&rt, 3);
    assert_int_equal(sim_component_compute(&rt, 5), 7 + 70);
    assert_int_equal(sim_eq_compute(&rt, 5), 7 + 70);
    /* the walk labelled a-b-c: d's c_comp reads the label, no walk */
    assert_false(sim_classes_uncut(&rt, 4)); /* the class stays cut: c_comp walks */
    uint64_t comp_walks = rt.stats.eq_walks;
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 70);
    assert_int_equal(rt.stats.eq_walks, comp_walks + 1); /* c_eq's own walk only */
    /* h's tensor made again on evicted c (as a view of an evicted storage
     * adds its op's cost): c's component grows by 3 and its label goes */
    st[3].compute += 3;
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 70); /* the label, before */
    sim_comp_forget_new_tensors(&rt, &p.ops[p.tensors[3].op]);
    assert_int_equal(sim_component_compute(&rt, 4), 5 + 73);
    uf_free(&rt.uf);
    free(rt.stack);
    sim_program_free(&p);
}

static void dtr_family_evicts_the_cheap_stale_tensor(void **state)
{
    (void)state;
    const sim_policy dtrs[] = {SIM_POLICY_DTR, SIM_POLICY_DTR_FULL, SIM_POLICY_DTR_LOCAL,
                               SIM_POLICY_DTE};
    for (size_t i = 0; i < sizeof dtrs / sizeof dtrs[0]; i++) {
        sim_outcome o = run_chain(dtrs[i], 0.8);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.budget, 400);
        assert_int_equal(o.evictions, 3);
        assert_int_equal(o.remat_ops, 1);
        assert_true(fabs(o.overhead - 92.0 / 82.0) < 1e-12);
    }
}

static void size_and_lru_choose_differently(void **state)
{
    (void)state;
    sim_outcome o = run_chain(SIM_POLICY_SIZE, 0.8);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 2);
    assert_int_equal(o.remat_ops, 0);
    assert_true(o.overhead == 1.0);
    o = run_chain(SIM_POLICY_LRU, 0.8);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 3);
    assert_int_equal(o.remat_ops, 1);
}

static void too_small_is_oom_and_unlimited_needs_nothing(void **state)
{
    (void)state;
    sim_outcome o = run_chain(SIM_POLICY_DTR, 0.3);
    assert_int_equal(o.result, SIM_OOM);
    o = run_chain(SIM_POLICY_DTR, 1.2); /* 600 B: the unlimited peak */
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 0);
    assert_true(o.overhead == 1.0);
}

/* A ratio so small that the budget is 0 bytes: out of memory, and the mean
 * free share at evictions is 0, not 0/0 (it was NaN, printed as -nan in
 * coop sim --json). */
static void zero_byte_budget_is_oom_without_nan(void **state)
{
    (void)state;
    sim_outcome o = run_chain(SIM_POLICY_DTR, 1e-300);
    assert_int_equal(o.budget, 0);
    assert_int_equal(o.result, SIM_OOM);
    assert_true(o.frag_at_evict == 0.0);
}

static void thrash_when_recompute_exceeds_the_limit(void **state)
{
    (void)state;
    sim_program p;
    load(chain_log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    opt.overhead_limit = 1.1; /* 10 ns recompute > 8.2 ns allowed */
    sim_outcome o = sim_run(&p, sim_baseline_peak(&p, 1), &opt, 0.8);
    assert_int_equal(o.result, SIM_THRASH);
    sim_program_free(&p);
}

/* An overhead limit whose recompute budget passes 2^64 ns is no limit: it was
 * converted to uint64_t as is (undefined; on x86-64 a budget near 0), so
 * --overhead-limit 1e12 on a real log, or 1e30 here, made every run thrash. */
static void huge_overhead_limit_saturates(void **state)
{
    (void)state;
    assert_true(sim_remat_limit(82, 1.1) == 8);
    assert_true(sim_remat_limit(82, 1e30) == SIM_REMAT_LIMIT_MAX);
    assert_true(sim_remat_limit(UINT64_MAX, 3.0) == SIM_REMAT_LIMIT_MAX);
    assert_true(sim_remat_limit(0, INFINITY) == SIM_REMAT_LIMIT_MAX);
    assert_true(sim_remat_limit(82, 1.0) == 0);
    sim_program p;
    load(chain_log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    opt.overhead_limit = 1e30;
    sim_outcome o = sim_run(&p, sim_baseline_peak(&p, 1), &opt, 0.8);
    assert_int_equal(o.result, SIM_OK);
    sim_program_free(&p);
}

/* A log of 2^60 ns: a and x (2^59 ns each, 1 MiB) used in turn ROUNDS
 * times by 1-ns ops; a budget for one of them recomputes the other at each
 * use (2 ROUNDS recomputes: x evicts a when it is made). */
/* Appends printf's output to text (cap bytes, len used), which must hold it. */
static void append(char *text, size_t cap, size_t *len, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(text + *len, cap - *len, format, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < cap - *len);
    *len += (size_t)n;
}

static void load_alternating(unsigned rounds, sim_program *p)
{
    size_t cap = 1024 * ((size_t)rounds + 1), len = 0; /* a round's text is under 1 KiB */
    char *text = malloc(cap);
    assert_non_null(text);
    append(text, cap, &len,
           "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("w", "512")
               CALL1M("f", "\"w\"", "a", "576460752303423488", "1048576")
                   CALL1M("g", "\"w\"", "x", "576460752303423488", "1048576"));
    for (unsigned i = 0; i < rounds; i++) /* each name: CALL, MEMORY, ALIAS, RELEASE */
        append(text, cap, &len,
               CALL1M("h", "\"a\"", "o%ua", "1", "512") RELEASE("o%ua")
                   CALL1M("k", "\"x\"", "o%ux", "1", "512") RELEASE("o%ux"),
               i, i, i, i, i, i, i, i);
    append(text, cap, &len, RELEASE("a") RELEASE("x")); /* else both are pinned at the end */
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("alt.log", text, len, &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, p), COOP_OK);
    dtr_log_free(&log);
    free(text);
}

/* The recompute budget is exact for a whole overhead limit and capped at
 * 2^62 ns: a budget above 2^64 - 2^61 let the recompute total wrap, so
 * --overhead-limit 40 on a log of 2^60 ns ended ok with an overhead of 9
 * (80 recomputes of 2^59 ns, 41 in truth) instead of thrashing. */
static void remat_limit_is_exact_and_capped(void **state)
{
    (void)state;
    const uint64_t g = (uint64_t)1 << 60;
    assert_true(sim_remat_limit(g + 1, 2.0) == g + 1);           /* was 2^60: a double's 53 bits */
    assert_true(sim_remat_limit(g + 1, 3.5) == 5 * (g / 2) + 2); /* floor(2.5 + 2.5 x 2^60) */
    assert_true(sim_remat_limit(g, 4.0) == 3 * g);
    assert_true(sim_remat_limit(g, 5.0) == SIM_REMAT_LIMIT_MAX);
    assert_true(sim_remat_limit(g, 40.0) == SIM_REMAT_LIMIT_MAX);
    sim_program p;
    load_alternating(40, &p);
    uint64_t base = p.base_compute, peak = sim_baseline_peak(&p, 1);
    assert_true(base == g + 80);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    opt.overhead_limit = 40.0;
    sim_outcome o = sim_run(&p, peak, &opt, 0.7);
    assert_int_equal(o.result, SIM_THRASH);
    assert_true(o.overhead > 5.0); /* past the cap, not wrapped */
    sim_program_free(&p);
    /* 2 rounds: 4 recomputes (2^61 ns), within the cap: ok, and
     * the overhead counts all of them */
    load_alternating(2, &p);
    base = p.base_compute;
    o = sim_run(&p, sim_baseline_peak(&p, 1), &opt, 0.7);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.remat_ops, 4);
    assert_true(fabs(o.overhead - (double)(base + 2 * g) / (double)base) < 1e-12);
    sim_program_free(&p);
}

static void undefined_names_are_errors_with_lines(void **state)
{
    (void)state;
    static const char text[] = "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CALL1(
        "f", "\"nope\"", "a", "1");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("u.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "u.log:2: argument nope is not defined"));
    dtr_log_free(&log);
}

/* RELEASE left the name bound, so a later use of it was accepted: the
 * simulator brought a dead tensor back (and a second RELEASE dropped a
 * handle another name held). Every use is now an error with both lines;
 * defining the name again stays refused, as simrd refuses it (names are
 * bound once), but says why. A COPY taken before the release lives on. */
static void a_released_name_is_dead(void **state)
{
    (void)state;
#define RELEASED_A CONST("w", "100") CALL1("f", "\"w\"", "a", "10") RELEASE("a") /* line 6 */
    static const struct {
        const char *text, *error;
    } cases[] = {
        {RELEASED_A CALL1("g", "\"a\"", "b", "5"), "r.log:7: argument a was released at line 6"},
        {RELEASED_A "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"add_\",\"ARGS\":[\"w\",\"a\"],"
                    "\"MUTATE\":[0],\"TIME\":\"1\"}\n",
         "r.log:7: argument a was released at line 6"},
        {RELEASED_A "{\"INSTRUCTION\":\"COPY\",\"DST\":\"c\",\"SRC\":\"a\"}\n",
         "r.log:7: COPY source a was released at line 6"},
        {RELEASED_A "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"a\",\"SRC\":\"w\"}\n",
         "r.log:7: COPY_FROM destination a was released at line 6"},
        {RELEASED_A "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"w\",\"SRC\":\"a\"}\n",
         "r.log:7: COPY_FROM source a was released at line 6"},
        {RELEASED_A RELEASE("a"), "r.log:7: RELEASE of a was released at line 6"},
        {RELEASED_A CALL1("g", "\"w\"", "a", "5"),
         "r.log:7: a is defined again after its release at line 6 (a DTR log binds each name "
         "once)"},
        {CONST("w", "100") CALL1("f", "\"w\"", "a", "10") "{\"INSTRUCTION\":\"COPY\",\"DST\":"
                                                          "\"c\",\"SRC\":\"a\"}\n" RELEASE("a")
                                                              CALL1("g", "\"c\"", "b", "5")
                                                                  RELEASE("b") RELEASE("c"),
         NULL},
    };
#undef RELEASED_A
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dtr_log log;
        sim_program p;
        assert_int_equal(dtr_log_parse_buffer("r.log", cases[i].text, strlen(cases[i].text), &log),
                         COOP_OK);
        coop_status st = sim_program_build(&log, &p);
        dtr_log_free(&log);
        if (!cases[i].error) {
            assert_int_equal(st, COOP_OK);
            sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
            assert_int_equal(sim_run(&p, sim_baseline_peak(&p, 1), &opt, 1.0).result, SIM_OK);
            sim_program_free(&p);
            continue;
        }
        assert_int_equal(st, COOP_ERR_INVALID);
        if (!strstr(coop_last_error(), cases[i].error))
            fail_msg("case %zu: '%s', expected '%s'", i, coop_last_error(), cases[i].error);
    }
}

/* A CALL naming one result twice bound the name twice: the first tensor
 * kept its handle with no name to release it (held to the end, unpinned),
 * and the log ran without a word. */
static void a_result_listed_twice_is_an_error(void **state)
{
    (void)state;
    static const char text[] = CONST(
        "w", "100") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"w\"],"
                    "\"RESULT\":[\"a\",\"b\",\"a\"],\"TIME\":\"5\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"100\"}\n"
                    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"-1\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"b\",\"MEMORY\":\"100\"}\n"
                    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"b\",\"ALIAS\":\"-1\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"100\"}\n"
                    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"-1\"}\n" RELEASE("a");
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("d.log", text, strlen(text), &log), COOP_OK);
    assert_int_equal(sim_program_build(&log, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "d.log:3: a is listed twice in RESULT"));
    dtr_log_free(&log);
}

/* A log with nothing to run after START (only annotations, or START after
 * every op: the ops before it are not replayed) ran as a program of 0 bytes,
 * 'ok' at every ratio with min_budget_ratio 0, as an empty file did before
 * the reader refused it. */
static void a_log_without_ops_is_an_error(void **state)
{
    (void)state;
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n",
         "n.log: nothing to simulate: no CONSTANT, CALL or MUTATE after START (line 1)"},
        {CONST("w", "100") CALL1("f", "\"w\"", "a", "10") RELEASE("a")
             RELEASE("x") "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" RELEASE("y"),
         "n.log: nothing to simulate: no CONSTANT, CALL or MUTATE after START (line 8)"},
        {"{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"BACKWARD\"}\n" RELEASE("y"),
         "n.log: nothing to simulate: no CONSTANT, CALL or MUTATE in the log"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dtr_log log;
        sim_program p;
        assert_int_equal(dtr_log_parse_buffer("n.log", cases[i].text, strlen(cases[i].text), &log),
                         COOP_OK);
        coop_status st = sim_program_build(&log, &p);
        dtr_log_free(&log);
        if (st == COOP_OK)
            sim_program_free(&p);
        if (st != COOP_ERR_INVALID || strcmp(coop_last_error(), cases[i].error))
            fail_msg("case %zu: status %d, '%s', expected '%s'", i, (int)st, coop_last_error(),
                     cases[i].error);
    }
}

/* COPY_FROM a onto a (or onto any name already bound to its source's
 * tensor) changes nothing. It was compiled as a release of a, then a get:
 * the release dropped the storage's last handle, so the peak's run banished
 * a and the budgeted runs evicted it, and the next use rematerialized it:
 * oom at ratio 1 (the peak's own budget), no feasible ratio at all, and an
 * overhead of 1.5 on a log without recomputation. */
static void a_copy_from_onto_itself_changes_nothing(void **state)
{
    (void)state;
#define HEAD CONST("w", "100") CALL1("f", "\"w\"", "a", "10")
#define TAIL CALL1("g", "\"a\"", "b", "10")
    static const char plain[] = HEAD TAIL,
                      self[] =
                          HEAD "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"a\",\"SRC\":\"a\"}\n" TAIL,
                      copied[] =
                          HEAD "{\"INSTRUCTION\":\"COPY\",\"DST\":\"c\",\"SRC\":\"a\"}\n"
                               "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"c\",\"SRC\":\"a\"}\n" TAIL;
#undef HEAD
#undef TAIL
    const char *texts[] = {plain, self, copied};
    for (int memory = 0; memory < 2; memory++) {
        sim_memory model = memory ? SIM_MEMORY_ARENA : SIM_MEMORY_IDEAL;
        sim_options opt = sim_options_default(memory ? SIM_POLICY_COOP : SIM_POLICY_DTR, model);
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            dtr_log log;
            sim_program p;
            assert_int_equal(dtr_log_parse_buffer("s.log", texts[i], strlen(texts[i]), &log),
                             COOP_OK);
            assert_int_equal(sim_program_build(&log, &p), COOP_OK);
            dtr_log_free(&log);
            uint64_t peak = sim_peak(&p, model);
            sim_outcome o = sim_run(&p, peak, &opt, 1.0);
            if (o.result != SIM_OK || o.remat_ops || o.overhead != 1.0 ||
                peak != (memory ? 1536u : 300u))
                fail_msg(
                    "case %zu, %s: result %d, %" PRIu64 " remat ops, overhead %g, peak %" PRIu64, i,
                    memory ? "arena" : "ideal", (int)o.result, o.remat_ops, o.overhead, peak);
            assert_true(sim_min_budget_ratio(&p, peak, &opt, 0.005) >= 0);
            sim_program_free(&p);
        }
    }
}

/* An op's (input, output) pairs are its edges, and the program keeps their
 * positions in 32 bits: 2^16 arguments (one name repeated) and 2^15 results,
 * a line of 1 MiB, already give 2^31 pairs. A log with more than 2^32 (a few
 * such lines) wrapped the positions and wrote beyond the edge array; now
 * more than 2^31 - 1 is refused before anything that size is allocated. */
static void too_many_edges_is_an_error(void **state)
{
    (void)state;
    enum { ARGS = 1 << 16, RESULTS = 1 << 15 };
    size_t cap = 64 + (size_t)ARGS * 4 + (size_t)RESULTS * 200, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)snprintf(text + n, cap - n,
                          CONST("w", "100") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[");
    for (int i = 0; i < ARGS; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\"w\"", i ? "," : "");
    n += (size_t)snprintf(text + n, cap - n, "],\"RESULT\":[");
    for (int i = 0; i < RESULTS; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\"r%d\"", i ? "," : "", i);
    n += (size_t)snprintf(text + n, cap - n, "],\"TIME\":\"5\"}\n");
    for (int i = 0; i < RESULTS; i++)
        n += (size_t)snprintf(text + n, cap - n,
                              "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"r%d\",\"MEMORY\":\"4\"}\n"
                              "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"r%d\",\"ALIAS\":\"-1\"}\n",
                              i, i);
    assert_true(n < cap);
    dtr_log log;
    sim_program p;
    assert_int_equal(dtr_log_parse_buffer("e.log", text, n, &log), COOP_OK);
    free(text);
    assert_int_equal(sim_program_build(&log, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "e.log: the ops have 2147483648 (input, output) "
                                              "pairs in all, more than the simulator's 2^31 - 1"));
    dtr_log_free(&log);
}

static void min_budget_ratio_brackets_feasibility(void **state)
{
    (void)state;
    sim_program p;
    load(chain_log, &p);
    uint64_t peak = sim_baseline_peak(&p, 1);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_IDEAL);
    double r = sim_min_budget_ratio(&p, peak, &opt, 0.01);
    assert_true(r > 0 && r <= 1.0);
    assert_int_equal(sim_run(&p, peak, &opt, r).result, SIM_OK);
    assert_int_not_equal(sim_run(&p, peak, &opt, r - 0.011).result, SIM_OK);
    sim_program_free(&p);
}

/* The chain with 4 KiB tensors in the arena model: equal block sizes leave
 * no room for fragmentation, so argmin policies decide exactly as in the
 * ideal model (3 evictions, one recompute of a for dtr; 2 and none for
 * size), and coop's window (one block each time) finds the same room. */
static void arena_model_with_equal_blocks_matches_ideal(void **state)
{
    (void)state;
    char text[sizeof chain_log + 64];
    /* every "100" MEMORY becomes "4096": rebuild the log */
    const char *src = chain_log;
    char *dst = text;
    while (*src) {
        if (!strncmp(src, "\"MEMORY\":\"100\"", 14)) {
            memcpy(dst, "\"MEMORY\":\"4096\"", 15);
            dst += 15;
            src += 14;
        } else {
            *dst++ = *src++;
        }
    }
    *dst = 0;
    sim_program p;
    load(text, &p);
    const sim_policy pols[] = {SIM_POLICY_DTR, SIM_POLICY_SIZE, SIM_POLICY_COOP};
    for (int i = 0; i < 3; i++) {
        sim_options opt = sim_options_default(pols[i], SIM_MEMORY_ARENA);
        opt.inplace = 0;
        opt.cheap_threshold = -1;
        sim_outcome o = sim_run(&p, 5 * 4096, &opt, 0.8); /* 4 blocks */
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.budget, 4 * 4096);
        assert_int_equal(o.frag_failures, 0);
        if (pols[i] == SIM_POLICY_SIZE) {
            assert_int_equal(o.evictions, 2);
            assert_int_equal(o.remat_ops, 0);
        } else {
            assert_int_equal(o.evictions, 3);
            assert_int_equal(o.remat_ops, 1);
        }
    }
    /* 3 blocks: w, then f..k need their input and output: still feasible */
    sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
    assert_int_equal(sim_run(&p, 4 * 4096, &opt, 0.75).result, SIM_OK);
    /* 2 blocks: w and one more cannot hold an op's input and output */
    assert_int_equal(sim_run(&p, 4 * 4096, &opt, 0.5).result, SIM_OOM);
    sim_program_free(&p);
}

/* The held-out vgg16 log (traces/heldout), loaded; returns its arena peak. */
static uint64_t load_heldout_vgg16(sim_program *p)
{
    assert_int_equal(
        sim_program_load(COOP_TEST_SRCDIR "/traces/heldout/vgg16-train-step.ops.jsonl.gz", p),
        COOP_OK);
    return sim_peak(p, SIM_MEMORY_ARENA);
}

/* The held-out vgg16 log at 0.9 (docs/remat.md, section 2c, "Why coop
 * loses vgg16 at 0.9", written when c_comp was coop's cost): coop-comp's
 * first window is conv1_2's output, whose
 * c_comp (1.03 s) is below conv1_1's (1.36 s, of which 0.99 s is conv1_2's
 * released pre-ReLU value); a later window then evicts fc1's weight
 * gradient and recomputes most of the forward pass (overhead 1.297).
 * coop (c_live; coop-live, its name as a candidate, is an alias) costs
 * conv1_1's output 0.37 s, evicts it (as dtr does) and stays near dtr's
 * 1.042. */
static void coop_follows_what_recomputation_needs_on_vgg16(void **state)
{
    (void)state;
    sim_program p;
    uint64_t peak = load_heldout_vgg16(&p);
    sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
    assert_int_equal(opt.window_cost, SIM_WINDOW_LIVE);
    assert_int_equal(sim_options_parse_policy("coop-comp", &opt), 0);
    assert_int_equal(opt.policy, SIM_POLICY_COOP);
    assert_int_equal(opt.window_cost, SIM_WINDOW_COMP);
    sim_outcome comp = sim_run(&p, peak, &opt, 0.9);
    assert_int_equal(sim_options_parse_policy("coop-live", &opt), 0);
    assert_int_equal(opt.policy, SIM_POLICY_COOP);
    assert_int_equal(opt.window_cost, SIM_WINDOW_LIVE);
    assert_int_equal(sim_options_parse_policy("coop", &opt), 0);
    assert_int_equal(opt.policy, SIM_POLICY_COOP);
    assert_int_equal(opt.window_cost, SIM_WINDOW_LIVE);
    sim_outcome live = sim_run(&p, peak, &opt, 0.9);
    assert_int_equal(comp.result, SIM_OK);
    assert_int_equal(live.result, SIM_OK);
    assert_true(comp.overhead > 1.25);
    assert_true(live.overhead < 1.05);
    sim_program_free(&p);
}

/* review2 F2: MUTATE swap_(v, v) mutating arguments 0 and 1, both on x's
 * storage (v is a view of x, x released). Two outputs cannot both take over
 * that one buffer: the first does, the second needs 1 MiB of its own, and
 * y = h(v) then needs v's 1 MiB, y's 1 MiB and the constant resident. The
 * unlimited (copy-on-write) peak is 3 MiB + 512 B, so the smallest feasible
 * ratio is (2 MiB + 512) / (3 MiB + 512) = 0.667; at 0.34 (about 1.07 MiB)
 * every policy is out of memory. Both outputs taking over counted the
 * buffer once for two and reported ok down to 0.336. */
static const char mutate_same_storage_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST(
        "c", "512") "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"g\",\"ARGS\":[\"c\"],\"RESULT\":[\"x\"],"
                    "\"TIME\":\"1000\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"1048576\"}\n"
                    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"x\",\"ALIAS\":-1}\n"
                    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"view\",\"ARGS\":[\"x\"],\"RESULT\":["
                    "\"v\"],\"TIME\":\"10\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v\",\"MEMORY\":\"0\"}\n"
                    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v\",\"ALIAS\":0}\n" RELEASE(
                        "x") "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"swap_\",\"ARGS\":[\"v\",\"v\"]"
                             ",\"MUTATE\":[0,1],"
                             "\"TIME\":\"500\"}\n"
                             "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"h\",\"ARGS\":[\"v\"],\"RESULT\":"
                             "[\"y\"],\"TIME\":\"1000\"}\n"
                             "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"1048576\"}\n"
                             "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":-1}\n";

static void two_outputs_do_not_take_over_one_buffer(void **state)
{
    (void)state;
    sim_program p;
    load(mutate_same_storage_log, &p);
    const struct {
        sim_policy policy;
        sim_memory memory;
    } runs[] = {{SIM_POLICY_DTR, SIM_MEMORY_IDEAL}, {SIM_POLICY_COOP, SIM_MEMORY_ARENA}};
    for (int i = 0; i < 2; i++) {
        uint64_t peak = sim_peak(&p, runs[i].memory);
        assert_int_equal(peak, 3 * 1048576 + 512);
        sim_options opt = sim_options_default(runs[i].policy, runs[i].memory);
        opt.inplace = 1;
        assert_int_equal(sim_run(&p, peak, &opt, 0.34).result, SIM_OOM);
        assert_int_equal(sim_run(&p, peak, &opt, 0.5).result, SIM_OOM);
        double r = sim_min_budget_ratio(&p, peak, &opt, 0.005);
        assert_true(r > 0.665 && r < 0.675);
    }
    sim_program_free(&p);
}

/* A one-result CALL of m bytes. */
#define CALLM(op, arg, res, t, m)                                                                  \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" arg "],\"RESULT\":[\"" res          \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"" m "\"}\n"                     \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"-1\"}\n"

/* review2 F3, tiny_chain: a pinned 512 B constant, then a chain of 2048 B
 * results, each released after the next is made: the peak is 4608 B (the
 * constant and two results). The arena's capacity is the budget rounded
 * down to 512 B, so at ratio 1.0 everything fits, as in the ideal model; it
 * was rounded down to 4 KiB, below the peak, and ratio 1.0 was oom. */
static const char tiny_chain_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("in", "512")
        CALLM("f", "\"in\"", "t0", "1000", "2048") CALLM("f", "\"t0\"", "t1", "1000", "2048")
            RELEASE("t0") CALLM("f", "\"t1\"", "t2", "1000", "2048") RELEASE("t1")
                CALLM("f", "\"t2\"", "t3", "1000", "2048") RELEASE("t2");

/* review2 F3, only_constants: 1000 B and 2000 B of constants (3072 B in
 * 512-byte blocks), never evictable. No ratio below 1 can hold both: at 0.3
 * (921 B, a 512 B arena) it is oom; the arena had a floor of 4 KiB, which
 * made it ok with min_budget_ratio 0.0039. Below one block (ratio 0.1,
 * 307 B) nothing fits at all. */
static const char only_constants_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("c0", "1000")
        CONST("c1", "2000") RELEASE("c0");

static void arena_capacity_is_the_budget_in_blocks(void **state)
{
    (void)state;
    assert_int_equal(sim_capacity(SIM_MEMORY_ARENA, 4608), 4608);
    assert_int_equal(sim_capacity(SIM_MEMORY_ARENA, 4607), 4096);
    assert_int_equal(sim_capacity(SIM_MEMORY_ARENA, 511), 0);
    assert_int_equal(sim_capacity(SIM_MEMORY_IDEAL, 511), 511);
    const sim_policy pols[] = {SIM_POLICY_DTR, SIM_POLICY_COOP};
    sim_program p;
    load(tiny_chain_log, &p);
    uint64_t peak = sim_peak(&p, SIM_MEMORY_ARENA);
    assert_int_equal(peak, 4608);
    for (int i = 0; i < 2; i++) {
        sim_options opt = sim_options_default(pols[i], SIM_MEMORY_ARENA);
        sim_outcome o = sim_run(&p, peak, &opt, 1.0);
        assert_int_equal(o.result, SIM_OK);
        assert_int_equal(o.evictions, 0);
        assert_true(sim_min_budget_ratio(&p, peak, &opt, 0.005) == 1.0);
    }
    sim_program_free(&p);
    load(only_constants_log, &p);
    peak = sim_peak(&p, SIM_MEMORY_ARENA);
    assert_int_equal(peak, 3072);
    for (int i = 0; i < 2; i++) {
        sim_options opt = sim_options_default(pols[i], SIM_MEMORY_ARENA);
        assert_int_equal(sim_run(&p, peak, &opt, 1.0).result, SIM_OK);
        assert_int_equal(sim_run(&p, peak, &opt, 0.3).result, SIM_OOM);
        sim_outcome o = sim_run(&p, peak, &opt, 0.1);
        assert_int_equal(o.result, SIM_OOM);
        assert_true(o.frag_at_evict == 0.0);
        assert_true(sim_min_budget_ratio(&p, peak, &opt, 0.005) == 1.0);
    }
    sim_program_free(&p);
}

/* review2 F5: the bisection took ratio 0 to fail. A log whose tensors are
 * all 0 bytes (peak 0) runs in any budget, and its min_budget_ratio is 0,
 * not the last probe 1/256. */
static const char zero_peak_log[] =
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("c", "0")
        CALLM("f", "\"c\"", "a", "10", "0") CALLM("g", "\"a\"", "b", "10", "0") RELEASE("a");

static int feasible_from(double ratio, void *ctx)
{
    return ratio >= *(const double *)ctx;
}

static void min_ratio_of_a_zero_peak_log_is_zero(void **state)
{
    (void)state;
    double from = 0.0;
    assert_true(sim_bisect_min_ratio(feasible_from, &from, 0.005) == 0.0);
    from = 0.3; /* a failing probe: no run at ratio 0, the answer as before */
    double r = sim_bisect_min_ratio(feasible_from, &from, 0.005);
    assert_true(r >= 0.3 && r < 0.305);
    from = 2.0;
    assert_true(sim_bisect_min_ratio(feasible_from, &from, 0.005) == -1.0);
    sim_program p;
    load(zero_peak_log, &p);
    for (sim_memory m = SIM_MEMORY_IDEAL; m <= SIM_MEMORY_ARENA; m++) {
        uint64_t peak = sim_peak(&p, m);
        assert_int_equal(peak, 0);
        sim_options opt = sim_options_default(SIM_POLICY_DTR, m);
        assert_int_equal(sim_run(&p, peak, &opt, 0.5).result, SIM_OK);
        assert_true(sim_min_budget_ratio(&p, peak, &opt, 0.005) == 0.0);
    }
    sim_program_free(&p);
}

/* A feasibility that is not monotone: ok from 0.9 up, and in [0.3, 0.8)
 * but not in [0.8, 0.9); out of [0.3, 0.8), 0.85 fails too. The bisection
 * probes 1, 0.5 (ok), 0.25 (fails), ... and answers about 0.3, below the
 * failing band; the grid's threshold is 0.9. */
static int feasible_with_a_band(double ratio, void *ctx)
{
    int *runs = ctx;
    ++*runs;
    return ratio >= 0.9 - 1e-9 || (ratio >= 0.3 && ratio < 0.8 - 1e-9);
}

static void stable_min_ratio_is_where_every_grid_ratio_above_succeeds(void **state)
{
    (void)state;
    int runs = 0;
    double bisect = sim_bisect_min_ratio(feasible_with_a_band, &runs, 0.005);
    assert_true(bisect >= 0.3 && bisect < 0.305);
    runs = 0;
    double stable = sim_grid_stable_ratio(feasible_with_a_band, &runs, SIM_STABLE_STEP);
    assert_true(fabs(stable - 0.9) < 1e-9);
    assert_int_equal(runs, 10); /* 1, 0.9875, ..., 0.9 ok, then 0.8875 fails */
    double from = 0.0;          /* always feasible: the grid's last point, one step */
    assert_true(fabs(sim_grid_stable_ratio(feasible_from, &from, 0.25) - 0.25) < 1e-12);
    from = 2.0; /* 1 fails: none */
    assert_true(sim_grid_stable_ratio(feasible_from, &from, SIM_STABLE_STEP) == -1.0);
    from = 0.5; /* monotone: the grid point at or above the threshold */
    assert_true(fabs(sim_grid_stable_ratio(feasible_from, &from, SIM_STABLE_STEP) - 0.5) < 1e-9);
}

/* review2 F1 on a real log: vgg16 (held out) with coop in the arena. The
 * bisection's min_budget_ratio, 0.7773, is feasible, but 0.7875 (oom),
 * 0.8 (thrash) and 0.8875 (oom) above it fail; every grid ratio from 0.9
 * up succeeds. dtr's two measures agree within a step (0.8398, 0.8375), so
 * the stable threshold ranks coop behind dtr on this log. */
static void bisection_lands_below_failing_ratios_on_vgg16(void **state)
{
    (void)state;
    sim_program p;
    uint64_t peak = load_heldout_vgg16(&p);
    sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
    double bisect = sim_min_budget_ratio(&p, peak, &opt, 0.005);
    assert_true(fabs(bisect - 0.77734375) < 1e-9);
    assert_int_equal(sim_run(&p, peak, &opt, bisect).result, SIM_OK);
    assert_int_not_equal(sim_run(&p, peak, &opt, 0.8875).result, SIM_OK);
    assert_true(fabs(sim_stable_min_ratio(&p, peak, &opt, SIM_STABLE_STEP) - 0.9) < 1e-9);
    opt = sim_options_default(SIM_POLICY_DTR, SIM_MEMORY_ARENA);
    assert_true(fabs(sim_stable_min_ratio(&p, peak, &opt, SIM_STABLE_STEP) - 0.8375) < 1e-9);
    sim_program_free(&p);
}

/* A one-result CALL whose result is a view of argument number alias
 * (no bytes of its own: it shares that argument's storage). */
#define CALLV(op, arg, res, t, alias)                                                              \
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" op "\",\"ARGS\":[" arg "],\"RESULT\":[\"" res          \
    "\"],\"TIME\":\"" t "\"}\n"                                                                    \
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"" res "\",\"MEMORY\":\"0\"}\n"                         \
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" res "\",\"ALIAS\":\"" alias "\"}\n"

/* Runs text at ratio of its peak with every cached answer (c_eq's class
 * roots, component labels, c_live) compared with a fresh walk after every
 * command and before every choice or window search (check_caches): a
 * missing invalidation shows there even where no value read is wrong, or
 * none changes a decision (so the run's outcome cannot tell). */
static sim_outcome run_checked(const char *text, const char *policy, sim_memory memory,
                               double ratio)
{
    sim_program p;
    load(text, &p);
    sim_options opt = sim_options_default(SIM_POLICY_DTR, memory);
    assert_int_equal(sim_options_parse_policy(policy, &opt), 0);
    opt.check_caches = 1;
    sim_outcome o = sim_run(&p, sim_peak(&p, memory), &opt, ratio);
    sim_program_free(&p);
    printf("%s %.2f: %s, %llu evictions, %llu remat ops; %llu cached values checked, %llu wrong\n",
           policy, ratio, sim_result_name(o.result), (unsigned long long)o.evictions,
           (unsigned long long)o.remat_ops, (unsigned long long)o.cache_checks,
           (unsigned long long)o.cache_mismatches);
    return o;
}

/* c_eq's cache forgets the neighbours of a rematerialized storage
 * (compute_op's sim_eq_forget_around). n -g-> s -h-> m, every result 100 B;
 * n costs 1 ms (dtr never evicts it), s and m 1 ns, p1..p3 1 us each.
 * Peak 800 B, budget 480 B (w and three results). p1 evicts s, p2 m (one
 * class with s), p3 p1: dtr's argmin there caches n's c_eq with that class's
 * root. u(s) rematerializes s (p2 evicted for it); the class keeps its root
 * (classes never split) and m's 1 ns, but s, n's only way into it, is
 * resident: n's c_eq is 1 ms now, and the argmin placing q (evicting p3)
 * reads it. Without the invalidation n's cache still adds m's 1 ns: 2
 * cached values wrong (found by the check, not by the outcome: the same
 * choices). */
static void eq_cache_forgets_around_a_rematerialized_storage(void **state)
{
    (void)state;
    static const char log[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("w", "100")
            CALL1("f", "\"w\"", "n", "1000000") CALL1("g", "\"n\"", "s", "1")
                CALL1("h", "\"s\"", "m", "1") CALL1("k1", "\"w\"", "p1", "1000")
                    CALL1("k2", "\"w\"", "p2", "1000") CALL1("k3", "\"w\"", "p3", "1000")
                        CALL1("u", "\"s\"", "q", "1") RELEASE("n") RELEASE("s") RELEASE("m")
                            RELEASE("p1") RELEASE("p2") RELEASE("p3") RELEASE("q");
    sim_outcome o = run_checked(log, "dtr", SIM_MEMORY_IDEAL, 0.6);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.evictions, 5);
    assert_int_equal(o.remat_ops, 1); /* s */
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
}

/* e (1 ns), x (100 ns), y: 100 B each; budget 300 B of the 400 B peak. y
 * evicts e; dtr's argmin caches x's c_eq (x's compute alone: w is
 * resident). v = h(e, x) is a view of x (VIEW_OF "1") or of e ("0"):
 *  - of x: x's storage gains a tensor whose input e is evicted, so x's
 *    c_eq now counts e's class; its cache must go (run_compute's
 *    forget_around_new_tensors, the outputs);
 *  - of e: e's storage, evicted, gains a tensor next to x, so x's c_eq
 *    counts e's class again; x's cache must go (the same, the inputs).
 * The argmin that makes room for e's recomputation (evicting y) comes
 * before e's rematerialization forgets x's cache anyway: without the
 * invalidation, x's cached c_eq is 1 ns short there (1 value wrong; x is
 * locked as v's input, so it is not read). */
#define VIEW_LOG(view_of)                                                                          \
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("w", "100")                  \
        CALL1("f", "\"w\"", "e", "1") CALL1("g", "\"w\"", "x", "100")                              \
            CALL1("k", "\"w\"", "y", "50") CALLV("h", "\"e\",\"x\"", "v", "1", view_of)            \
                RELEASE("e") RELEASE("x") RELEASE("y") RELEASE("v")

static void eq_cache_forgets_a_storage_given_a_view(void **state)
{
    (void)state;
    sim_outcome o = run_checked(VIEW_LOG("1"), "dtr", SIM_MEMORY_IDEAL, 0.75);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.remat_ops, 1); /* e */
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
}

static void eq_cache_forgets_the_inputs_of_a_view_of_an_evicted_storage(void **state)
{
    (void)state;
    sim_outcome o = run_checked(VIEW_LOG("0"), "dtr", SIM_MEMORY_IDEAL, 0.75);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.remat_ops, 1); /* e */
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
}

/* coop-comp's component labels go when a view is taken of an evicted
 * storage (run_compute's sim_comp_forget_new_tensors): the view adds its
 * op's compute to the storage, so to its component's sum. Here b (10 ns)
 * and c (1 ns) are evicted, one component, labelled by a search (11 ns)
 * when v = op8(c), a view of c, adds 1 ns: a walk sums 12. Without the
 * invalidation the label's 11 stands for both members until c's
 * rematerialization (for v) forgets it: 2 labels wrong. Reduced from a
 * random search over small logs (calls and releases only). */
static void component_label_forgets_a_view_of_an_evicted_storage(void **state)
{
    (void)state;
    static const char log[] =
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CONST("w", "512")
            CALLM("op0", "\"w\"", "a", "10", "512") CALLM("op2", "\"a\"", "b", "10", "1024")
                CALLM("op3", "\"b\"", "c", "1", "1024") CALLM("op4", "\"b\"", "d", "10", "1024")
                    CALLM("op5", "\"w\"", "e", "1", "512") CALLM("op6", "\"d\"", "f", "10", "1024")
                        CALLM("op7", "\"a\"", "g", "1", "1024") CALLV("op8", "\"c\"", "v", "1", "0")
                            RELEASE("b") RELEASE("f") RELEASE("e") RELEASE("d");
    sim_outcome o = run_checked(log, "coop-comp", SIM_MEMORY_ARENA, 0.5);
    assert_int_equal(o.result, SIM_OK);
    assert_true(o.cache_checks > 0);
    assert_int_equal(o.cache_mismatches, 0);
}

/* dtr-full's score counts the evicted region on both sides of a storage
 * (simrd's e*): on the chain with b and d evicted, c (40 ns, 100 B,
 * staleness 50) scores (40 + b's 20 + d's 5) / (100 x 50); dtr-local its
 * own 40 alone. */
static void dtr_full_counts_both_evicted_regions(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = held_chain_runtime(&p, st);
    st[2].material = false;
    st[4].material = false;
    rt.clock = 100;
    st[3].last_access = 50;
    rt.policy = SIM_POLICY_DTR_FULL;
    assert_true(sim_score(&rt, 3) == (double)(65.0L / 5000.0L));
    rt.policy = SIM_POLICY_DTR_LOCAL;
    assert_true(sim_score(&rt, 3) == (double)(40.0L / 5000.0L));
    free(rt.stack);
    sim_program_free(&p);
}

/* dte's score counts the free blocks on both sides of a storage's block
 * (MegEngine DTE): c's 100 B block between two free 16 KiB blocks of the
 * arena model's pool scores 40 / ((100 + 32 KiB) x 50). */
static void dte_counts_the_free_blocks_on_both_sides(void **state)
{
    (void)state;
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = 64 * 1024;
    c.segment_size = 64 * 1024;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    void *blk[4];
    coop_status status;
    for (int i = 0; i < 4; i++) {
        blk[i] = coop_malloc(pool, 16 * 1024, 0, 0, &status);
        assert_non_null(blk[i]);
    }
    assert_int_equal(coop_free(pool, blk[0]), COOP_OK);
    assert_int_equal(coop_free(pool, blk[2]), COOP_OK);
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    rt.mem_pool = pool;
    st[3].ptr = blk[1];
    assert_int_equal(sim_adjacent_free(&rt, 3), 32 * 1024);
    rt.clock = 100;
    st[3].last_access = 50;
    rt.policy = SIM_POLICY_DTE;
    assert_true(sim_score(&rt, 3) == (double)(40.0L / ((100.0L + 32768.0L) * 50.0L)));
    sim_program_free(&p);
    coop_free(pool, blk[1]);
    coop_free(pool, blk[3]);
    coop_pool_destroy(pool);
}

/* simrd's choice over the pool: the lowest score, ties to the later
 * storage, and the first zero score ends the scan (docs/remat.md, section
 * 1): w and d both cost 0 with dtr-local, and w, earlier in the pool, is
 * chosen; among a and b scoring the same, the later. */
static void the_choice_stops_at_the_first_zero_score(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    st[4].compute = 0;  /* d: as free to recompute as the constant w */
    st[2].compute = 10; /* b: scores as a */
    rt.clock = 100;
    rt.policy = SIM_POLICY_DTR_LOCAL;
    uint32_t pool_zero[4] = {1, 0, 2, 4};
    rt.pool = pool_zero;
    rt.pool_len = 4;
    assert_int_equal(sim_choose(&rt), 0);
    uint32_t pool_tie[3] = {1, 2, 3};
    rt.pool = pool_tie;
    rt.pool_len = 3;
    assert_int_equal(sim_choose(&rt), 2);
    sim_program_free(&p);
}

/* dtr-full's argmin reads an invalidated e* as a lower bound and skips a
 * candidate only when that bound is above the best score known, not at it
 * (mutant L3-159): a bound stale only by an addition of 0 is the score
 * itself, and at a tie the later storage is chosen. b and d cost 20 each
 * (same size, staleness); d's e* is cached, then c between them is evicted
 * at cost 0: d's cached 20 is now a lower bound, equal to its walk. Over
 * the pool {b, d}, b is the seed and d, tying it, must be chosen. */
static void dtr_full_scores_a_stale_bound_equal_to_the_best(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = held_chain_runtime(&p, st);
    st[4].compute = 20; /* d: as b */
    st[3].compute = 0;  /* c: free to recompute */
    rt.policy = SIM_POLICY_DTR_FULL;
    rt.cfg.eq_cache = true;
    assert_int_equal(sim_live_open(&rt), 0);
    assert_non_null(rt.live);
    rt.clock = 100;
    assert_int_equal(sim_live_cached(&rt, 4), 20); /* d's e*: itself */
    st[3].material = false;
    sim_live_flipped(&rt, 3); /* c evicted: adds its 0 to d's region */
    int64_t known = -1;
    assert_int_equal(sim_live_known(&rt, 4, &known), 0); /* a lower bound */
    assert_int_equal(known, 20);
    uint32_t pool[2] = {2, 4};
    rt.pool = pool;
    rt.pool_len = 2;
    assert_int_equal(sim_choose(&rt), 4);
    assert_true(sim_score(&rt, 2) == sim_score(&rt, 4)); /* a tie (walked: after the choice) */
    sim_live_close(&rt);
    free(rt.stack);
    sim_program_free(&p);
}

/* dtr-full's argmin skips the region walks of candidates whose own score
 * (a lower bound) already exceeds a known score (sim_policy.c); it must
 * choose what simrd's plain scan over sim_score chooses (lowest score,
 * ties to the later storage, the first zero ends the scan) and count the
 * same heuristic_evals. Random residency, computes, sizes-by-staleness and
 * pools with holes and repeats on the chain; the seed is printed. */
static uint64_t pruned_rng; /* splitmix64's state: any value */

static int rand_below(int n)
{
    return (int)(test_splitmix64(&pruned_rng) % (uint64_t)n);
}

static void dtr_full_pruned_choice_is_the_plain_scan(void **state)
{
    (void)state;
    /* COOP_TEST_SEED repeats a run (tests/test_seed.h prints the seed) */
    uint64_t seed = test_seed("sim_test", test_seed_from_clock());
    pruned_rng = seed;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    rt.policy = SIM_POLICY_DTR_FULL;
    for (int round = 0; round < 20000; round++) {
        for (uint32_t s = 0; s < 6; s++) {
            st[s].num_created = 1;
            st[s].ref_ext = 1;
            st[s].material = rand_below(3) != 0;
            st[s].compute = (uint64_t)(rand_below(4)) * 10; /* zeros and ties */
            st[s].last_access = rand_below(4) * 25;
        }
        rt.clock = 100;
        uint32_t pool[8];
        uint32_t n = (uint32_t)(rand_below(8));
        for (uint32_t i = 0; i < n; i++)
            pool[i] = rand_below(5) ? (uint32_t)(rand_below(6)) : SIM_NONE;
        rt.pool = pool;
        rt.pool_len = n;
        /* the plain scan */
        double best = INFINITY;
        uint32_t want = SIM_NONE, last = SIM_NONE;
        uint64_t evals = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (pool[i] == SIM_NONE)
                continue;
            last = pool[i];
            evals++;
            double c = sim_score(&rt, pool[i]);
            if (c <= best) {
                best = c;
                want = pool[i];
            }
            if (c == 0)
                break;
        }
        if (want == SIM_NONE)
            want = last;
        rt.stats.heuristic_evals = 0;
        uint32_t got = sim_choose(&rt);
        if (got != want || rt.stats.heuristic_evals != evals)
            fail_msg("seed 0x%" PRIx64 " round %d: chose %u (%llu evals), the scan %u (%llu)", seed,
                     round, got, (unsigned long long)rt.stats.heuristic_evals, want,
                     (unsigned long long)evals);
    }
    free(rt.stack);
    sim_program_free(&p);
}

/* LRU on a clock above 2^53 ns (a log's TIMEs may add up to 2^61): storage
 * a was last used 1 ns before b, and as doubles both last accesses are one
 * number (near 2^60 a double's step is 256). The choice compared them as
 * doubles and the tie went to the later storage in the pool, b, the one
 * used last; it compares them exactly now. Ties that are real still go to
 * the later storage. */
static void lru_orders_accesses_above_2_53(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    const int64_t t = (int64_t)1 << 60;
    assert_true((double)(t + 1) == (double)(t + 2)); /* the premise */
    st[1].last_access = t + 1;                       /* a */
    st[2].last_access = t + 2;                       /* b */
    rt.clock = (uint64_t)t + 10;
    rt.policy = SIM_POLICY_LRU;
    uint32_t pool[2] = {1, 2};
    rt.pool = pool;
    rt.pool_len = 2;
    assert_int_equal(sim_choose(&rt), 1);
    assert_int_equal(rt.stats.heuristic_evals, 2);
    st[2].last_access = t + 1; /* a real tie: the later storage */
    assert_int_equal(sim_choose(&rt), 2);
    sim_program_free(&p);
}

/* choose_lru keeps sim_choose's rules but for exactness: a score of 0 (a
 * last access at clock 0, as every one in a log of TIME 0) cannot be beaten
 * and ends the scan there, the first such storage going, after as many
 * evaluations; choose_lru scanned on and took the last of them (the tie
 * rule of scores above 0). */
static void lru_stops_at_an_access_at_clock_0(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    st[1].last_access = 0;
    st[2].last_access = 0;
    rt.clock = 0;
    rt.policy = SIM_POLICY_LRU;
    uint32_t pool[2] = {1, 2};
    rt.pool = pool;
    rt.pool_len = 2;
    assert_int_equal(sim_choose(&rt), 1);
    assert_int_equal(rt.stats.heuristic_evals, 1);
    sim_program_free(&p);
}

/* The arena model's cheap tensor partitioning: a storage whose op costs
 * less than cheap_threshold ns per byte is placed at the high end of the
 * free space, one at the threshold at the low end, as the library's
 * (include/coop.h). Threshold 0.2 on the chain: b (20 ns, 100 B: exactly
 * 0.2) low at 0, a (0.1) high in the last 512 B block of 4 KiB. */
static void arena_cheap_threshold_is_strict(void **state)
{
    (void)state;
    sim_program p;
    rt_storage st[6];
    sim_runtime rt = chain_runtime(&p, st);
    rt.budget = 4096;
    rt.cfg.cheap_threshold = 0.2;
    rt.cfg.plain_window_walk = true;
    assert_int_equal(sim_arena_open(&rt), 0);
    assert_int_equal(sim_arena_place(&rt, 2), SIM_OK);
    assert_int_equal(sim_arena_place(&rt, 1), SIM_OK);
    assert_int_equal((uintptr_t)st[1].ptr - (uintptr_t)st[2].ptr, 4096 - 512);
    sim_arena_free(&rt, 1);
    sim_arena_free(&rt, 2);
    sim_arena_close(&rt);
    free(rt.victims);
    sim_program_free(&p);
}

/* coop-dte scores each window member as DTE does, its bytes counting its
 * free neighbours'. 512 B blocks: x1 h x2 y1 y2 y3 fill 3 KiB, h is
 * released (a free block between x1 and x2), and a 1.5 KiB result needs a
 * 3-block window. x1, x2 cost 30 ns, the ys 12; a 10^6 ns op between makes
 * their staleness all but equal. Counting h, x1 and x2 each weigh 15, and
 * [h x2 y1] (27) beats [y1 y2 y3] (36): 2 evictions; without it x2 weighs
 * 30 and [y1 y2 y3] wins: 3. */
static void coop_dte_counts_free_neighbours_in_the_window(void **state)
{
    (void)state;
    static const char log[] = "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n" CALL1M(
        "f", "", "x1", "30", "512") CALL1M("g", "", "h", "1", "512")
        CALL1M("f", "", "x2", "30", "512") CALL1M("k", "", "y1", "12", "512")
            CALL1M("k", "", "y2", "12", "512") CALL1M("k", "", "y3", "12", "512") RELEASE("h")
                CALL1M("wait", "", "w", "1000000", "0") CALL1M("z", "", "z", "1", "1536")
                    RELEASE("x1") RELEASE("x2") RELEASE("y1") RELEASE("y2") RELEASE("y3")
                        RELEASE("w") RELEASE("z");
    sim_program p;
    load(log, &p);
    sim_options opt = sim_options_default(SIM_POLICY_COOP, SIM_MEMORY_ARENA);
    assert_int_equal(sim_options_parse_policy("coop-dte", &opt), 0);
    opt.cheap_threshold = -1;
    sim_outcome o = sim_run(&p, 3072, &opt, 1.0);
    assert_int_equal(o.result, SIM_OK);
    assert_int_equal(o.budget, 3072);
    assert_int_equal(o.evictions, 2);
    sim_program_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(neighbours_are_distinct_in_creation_order),
        cmocka_unit_test(component_cost_ignores_classes_cut_by_rematerialization),
        cmocka_unit_test(live_cost_counts_what_recomputation_needs),
        cmocka_unit_test(coop_follows_what_recomputation_needs_on_vgg16),
        cmocka_unit_test(dtr_family_evicts_the_cheap_stale_tensor),
        cmocka_unit_test(size_and_lru_choose_differently),
        cmocka_unit_test(lru_orders_accesses_above_2_53),
        cmocka_unit_test(lru_stops_at_an_access_at_clock_0),
        cmocka_unit_test(too_small_is_oom_and_unlimited_needs_nothing),
        cmocka_unit_test(zero_byte_budget_is_oom_without_nan),
        cmocka_unit_test(thrash_when_recompute_exceeds_the_limit),
        cmocka_unit_test(huge_overhead_limit_saturates),
        cmocka_unit_test(remat_limit_is_exact_and_capped),
        cmocka_unit_test(undefined_names_are_errors_with_lines),
        cmocka_unit_test(a_result_listed_twice_is_an_error),
        cmocka_unit_test(a_released_name_is_dead),
        cmocka_unit_test(a_copy_from_onto_itself_changes_nothing),
        cmocka_unit_test(a_log_without_ops_is_an_error),
        cmocka_unit_test(too_many_edges_is_an_error),
        cmocka_unit_test(min_budget_ratio_brackets_feasibility),
        cmocka_unit_test(arena_model_with_equal_blocks_matches_ideal),
        cmocka_unit_test(two_outputs_do_not_take_over_one_buffer),
        cmocka_unit_test(arena_capacity_is_the_budget_in_blocks),
        cmocka_unit_test(min_ratio_of_a_zero_peak_log_is_zero),
        cmocka_unit_test(stable_min_ratio_is_where_every_grid_ratio_above_succeeds),
        cmocka_unit_test(bisection_lands_below_failing_ratios_on_vgg16),
        cmocka_unit_test(eq_cache_forgets_around_a_rematerialized_storage),
        cmocka_unit_test(eq_cache_forgets_a_storage_given_a_view),
        cmocka_unit_test(eq_cache_forgets_the_inputs_of_a_view_of_an_evicted_storage),
        cmocka_unit_test(component_label_forgets_a_view_of_an_evicted_storage),
        cmocka_unit_test(dtr_full_counts_both_evicted_regions),
        cmocka_unit_test(dte_counts_the_free_blocks_on_both_sides),
        cmocka_unit_test(the_choice_stops_at_the_first_zero_score),
        cmocka_unit_test(dtr_full_pruned_choice_is_the_plain_scan),
        cmocka_unit_test(dtr_full_scores_a_stale_bound_equal_to_the_best),
        cmocka_unit_test(arena_cheap_threshold_is_strict),
        cmocka_unit_test(coop_dte_counts_free_neighbours_in_the_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
