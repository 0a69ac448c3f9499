/*
 * The benchmarks' random numbers: xorshift64* (Vigna), a few instructions a
 * draw, reproducible from a seed, and good enough for sizes and victims.
 * Not for anything else. The state must not be 0.
 */
#ifndef COOP_CLI_BENCH_RNG_H
#define COOP_CLI_BENCH_RNG_H

#include <stdint.h>

static inline uint64_t bench_rng_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(2685821657736338717);
}

/* Uniform in [0, 1) from the top 53 bits of a draw. */
static inline double bench_rng_unit(uint64_t *state)
{
    return (double)(bench_rng_next(state) >> 11) / 9007199254740992.0;
}

#endif
