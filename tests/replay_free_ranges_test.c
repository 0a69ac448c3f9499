/* The free-range set behind the jemalloc policy's fragmentation figures,
 * against a byte-map model. Randomized: prints its seed, takes
 * COOP_TEST_SEED. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay/free_ranges.h"
#include "test_seed.h"

static void known_answers(void **unused)
{
    (void)unused;
    free_ranges set = {0};
    free_ranges_add(&set, 1000, 100); /* [1000, 1100) */
    free_ranges_add(&set, 1200, 50);  /* [1200, 1250) */
    assert_int_equal(set.total, 150);
    assert_int_equal(free_ranges_largest(&set), 100);
    free_ranges_add(&set, 1100, 100); /* joins both: [1000, 1250) */
    assert_int_equal(set.total, 250);
    assert_int_equal(free_ranges_largest(&set), 250);
    free_ranges_remove(&set, 1050, 10); /* [1000,1050) [1060,1250) */
    assert_int_equal(set.total, 240);
    assert_int_equal(free_ranges_largest(&set), 190);
    free_ranges_remove(&set, 900, 1000); /* everything */
    assert_int_equal(set.total, 0);
    assert_int_equal(free_ranges_largest(&set), 0);
    free_ranges_add(&set, 10, 5);
    free_ranges_add(&set, 12, 10); /* overlaps: counted once */
    assert_int_equal(set.total, 12);
    assert_int_equal(free_ranges_largest(&set), 12);
    free_ranges_clear(&set);
}

enum { SPACE = 4096 };

/* Largest run of 1s in the model. */
static uint64_t model_largest(const unsigned char *m)
{
    uint64_t best = 0, run = 0;
    for (int i = 0; i < SPACE; i++) {
        run = m[i] ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return best;
}

static void random_against_model(void **unused)
{
    (void)unused;
    uint64_t seed = test_seed("replay_free_ranges_test", 12345);
    /* libc's rand(), as before test_seed.h, so that a seed from an older
     * log repeats its run (srand takes the seed's low 32 bits) */
    srand((unsigned)seed);
    unsigned char model[SPACE] = {0};
    free_ranges set = {0};
    for (int step = 0; step < 5000; step++) {
        uint64_t addr = (uint64_t)(rand() % SPACE), size = (uint64_t)(rand() % 64) + 1;
        if (addr + size > SPACE)
            size = SPACE - addr;
        bool add = rand() % 2;
        if (add)
            free_ranges_add(&set, addr + 100000, size);
        else
            free_ranges_remove(&set, addr + 100000, size);
        memset(model + addr, add, size);
        uint64_t total = 0;
        for (int i = 0; i < SPACE; i++)
            total += model[i];
        if (set.total != total || free_ranges_largest(&set) != model_largest(model))
            fail_msg("seed 0x%llx step %d: total %llu vs %llu, largest %llu vs %llu",
                     (unsigned long long)seed, step, (unsigned long long)set.total,
                     (unsigned long long)total, (unsigned long long)free_ranges_largest(&set),
                     (unsigned long long)model_largest(model));
    }
    assert_false(set.failed);
    free_ranges_clear(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_answers),
        cmocka_unit_test(random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
