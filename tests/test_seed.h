/*
 * The seed of a randomized test, and the generators the tests draw from.
 *
 * Project rule: a randomized test prints its seed and takes one from
 * COOP_TEST_SEED, so that any run, a failing one in a CI log included, can
 * be repeated exactly. test_seed() is the one place that does both:
 *
 * - COOP_TEST_SEED, when set, is the seed: a decimal or 0x-hex integer
 *   below 2^64 (nothing else: no sign, no spaces, no octal). Anything else
 *   ends the program with a message naming the variable and the value and
 *   exit status 1: a typo must not silently test another seed.
 * - Otherwise the seed is the caller's fallback: a fixed one for the unit
 *   tests (the same run in every build, so their statistical assertions
 *   hold), test_seed_from_clock() for the model and stress tests meant to
 *   explore a new run each time.
 * - Either way one line goes to stderr (unbuffered, so that it survives a
 *   crash or a sanitizer abort that loses buffered stdout):
 *
 *       NAME: seed 0x3039 (set COOP_TEST_SEED=0x3039 to repeat)
 *
 * The variable is read, and the line printed, once per program: later calls
 * return the first call's seed. Call it from one thread; threads of a
 * stress test take seeds derived from the one printed.
 *
 * The generators are the three the tests used before this header, kept bit
 * for bit, so that a seed from an older log still gives the same run.
 */
#ifndef COOP_TESTS_TEST_SEED_H
#define COOP_TESTS_TEST_SEED_H

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Marsaglia's xorshift64 with shifts (13, 7, 17). The state must not be 0
 * (it would stay 0). */
static inline uint64_t test_xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* xorshift64* (shifts 12, 25, 27, then a multiply that fixes the low bits'
 * weakness). The state must not be 0. */
static inline uint64_t test_xorshift64star(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * UINT64_C(2685821657736338717);
}

/* splitmix64: any state, 0 included; consecutive states give unrelated
 * outputs, which also makes it a way to derive seeds from one seed. */
static inline uint64_t test_splitmix64(uint64_t *state)
{
    *state += UINT64_C(0x9e3779b97f4a7c15);
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The whole of text as a seed: "0x" or "0X" and hex digits, or decimal
 * digits, below 2^64. strtoull alone would also take a sign, leading
 * spaces, octal, a second "0x" and trailing junk. */
static inline bool test_seed_parse(const char *text, uint64_t *seed)
{
    bool hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
    const char *digits = hex ? text + 2 : text;
    if (!*digits)
        return false;
    for (const char *c = digits; *c; c++)
        if (!(hex ? isxdigit((unsigned char)*c) : isdigit((unsigned char)*c)))
            return false;
    errno = 0;
    unsigned long long v = strtoull(digits, NULL, hex ? 16 : 10);
    if (errno == ERANGE)
        return false;
    *seed = (uint64_t)v;
    return true;
}

/* A seed that differs from run to run (nanosecond clock and pid, mixed so
 * that nearby runs do not get nearby seeds). */
static inline uint64_t test_seed_from_clock(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t z =
        ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) ^ ((uint64_t)getpid() << 40);
    return test_splitmix64(&z);
}

/* The program's seed: COOP_TEST_SEED, or fallback; printed (see above). */
static inline uint64_t test_seed(const char *name, uint64_t fallback)
{
    static bool chosen;
    static uint64_t seed;
    if (chosen)
        return seed;
    const char *text = getenv("COOP_TEST_SEED");
    if (!text) {
        seed = fallback;
    } else if (!test_seed_parse(text, &seed)) {
        fprintf(stderr,
                "%s: COOP_TEST_SEED=\"%s\" is not a seed: give a decimal or 0x-hex integer "
                "below 2^64 (e.g. 12345 or 0x3039), or unset it\n",
                name, text);
        exit(EXIT_FAILURE);
    }
    chosen = true;
    fprintf(stderr, "%s: seed 0x%" PRIx64 " (set COOP_TEST_SEED=0x%" PRIx64 " to repeat)\n", name,
            seed, seed);
    return seed;
}

#endif
