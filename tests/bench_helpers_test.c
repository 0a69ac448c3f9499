/* coop bench's helpers (src/cli/bench_rng.h, bench_median.h), never its
 * speed: a seed that maps to a zero state still draws, so that no --seed
 * turns the workload into one size and one victim, or --latency's chase into
 * a sequential walk; the generator is xorshift64* and its units fill [0, 1);
 * the median of an even count is the mean of the two middle values, and its
 * sort's comparison is a three-way one, as qsort asks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cli/bench_median.h"
#include "cli/bench_rng.h"

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

static void a_zero_seed_still_draws(void **state)
{
    (void)state;
    /* --latency --seed 0, and the --seed that makes 1000 live blocks' state
     * (seed x GOLDEN + live) wrap to 0 */
    uint64_t zeros[] = {0 * GOLDEN, UINT64_C(3660536723699784120) * GOLDEN + 1000};
    for (size_t k = 0; k < sizeof zeros / sizeof zeros[0]; k++) {
        assert_int_equal(zeros[k], 0);
        uint64_t rng = bench_rng_seed(zeros[k]), seen = 0;
        assert_int_not_equal(rng, 0);
        for (int i = 0; i < 64; i++)
            seen |= bench_rng_next(&rng);
        assert_int_not_equal(seen, 0);
    }
}

static void other_seeds_are_kept(void **state)
{
    (void)state;
    /* the workloads of every other seed stay as they were */
    assert_int_equal(bench_rng_seed(1), 1);
    assert_int_equal(bench_rng_seed(GOLDEN + 1000), GOLDEN + 1000);
    assert_int_equal(bench_rng_seed(UINT64_MAX), UINT64_MAX);
}

/* Vigna's xorshift64* (shifts 12, 25, 27; multiplier 2685821657736338717),
 * as the header says: its first draws from state 1, computed apart from this
 * code. */
static void draws_are_xorshift64_star(void **state)
{
    (void)state;
    uint64_t rng = 1;
    assert_int_equal(bench_rng_next(&rng), UINT64_C(0x47e4ce4b896cdd1d));
    assert_int_equal(bench_rng_next(&rng), UINT64_C(0xabcfa6a8e079651d));
    assert_int_equal(bench_rng_next(&rng), UINT64_C(0xb9d10d8feb731f57));
}

/* Units fill [0, 1): sizes reach 256 MiB and never pass it. */
static void units_fill_zero_to_one(void **state)
{
    (void)state;
    uint64_t rng = 1;
    double lo = 1, hi = 0;
    for (int i = 0; i < 1000; i++) {
        double u = bench_rng_unit(&rng);
        assert_true(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    assert_true(lo < 0.01);
    assert_true(hi > 0.99);
}

static void median_of_odd_and_even_counts(void **state)
{
    (void)state;
    double one[] = {7};
    assert_true(bench_median(one, 1) == 7);
    double three[] = {9, 1, 5};
    assert_true(bench_median(three, 3) == 5);
    double two[] = {300, 100};
    assert_true(bench_median(two, 2) == 200);
    double four[] = {40, 10, 1000, 20}; /* middle 20 and 40, not 40 alone */
    assert_true(bench_median(four, 4) == 30);
}

/* qsort's contract: negative, zero or positive as the first is less than,
 * equal to or greater than the second (a comparison that never says "less"
 * sorts right only where the library happens to ask "greater" alone). */
static void the_sort_compares_three_ways(void **state)
{
    (void)state;
    double one = 1, two = 2;
    assert_true(bench_cmp_double(&one, &two) < 0);
    assert_true(bench_cmp_double(&two, &one) > 0);
    assert_true(bench_cmp_double(&one, &one) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_zero_seed_still_draws),
        cmocka_unit_test(other_seeds_are_kept),
        cmocka_unit_test(draws_are_xorshift64_star),
        cmocka_unit_test(units_fill_zero_to_one),
        cmocka_unit_test(median_of_odd_and_even_counts),
        cmocka_unit_test(the_sort_compares_three_ways),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
