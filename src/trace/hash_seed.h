/*
 * What the readers' hash tables (id_map.c, name_table.c) key their hashes
 * with: a seed no file can know in advance, so that a crafted file cannot
 * list keys that all land in one slot and make reading quadratic; and the
 * mixer that spreads every input bit over the low bits the tables mask.
 * Only probe lengths depend on the seed, never what a reader returns.
 */
#ifndef COOP_TRACE_HASH_SEED_H
#define COOP_TRACE_HASH_SEED_H

#include <stdint.h>
#include <time.h>

/* splitmix64's finalizer. */
static inline uint64_t trace_hash_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The clock and owner's address (randomized by ASLR), mixed. */
static inline uint64_t trace_hash_seed(const void *owner)
{
    struct timespec ts = {0};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return trace_hash_mix((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
           trace_hash_mix((uint64_t)(uintptr_t)owner);
}

#endif
