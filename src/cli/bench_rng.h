/*
 * The benchmarks' random numbers: xorshift64* (Vigna), a few instructions a
 * draw, reproducible from a seed, and good enough for sizes and victims.
 * Not for anything else. The state must not be 0.
 */
#ifndef COOP_CLI_BENCH_RNG_H
#define COOP_CLI_BENCH_RNG_H

#include <stdint.h>

/* A state from x: x itself, or a fixed non-zero state for 0 (a zero state
 * would draw nothing but zeros: every size the smallest, every victim slot 0,
 * --latency's chase a sequential walk). Callers derive x from --seed, so some
 * seed gives 0 for each of them (0 itself for --latency). */
static inline uint64_t bench_rng_seed(uint64_t x)
{
    return x ? x : UINT64_C(0x9E3779B97F4A7C15);
}

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
