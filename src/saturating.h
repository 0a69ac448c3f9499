/*
 * Additions that stop at the type's maximum instead of wrapping: running
 * totals (bytes ever allocated or mapped, summed costs) grow with every call
 * and a long run can take them past 2^63 or 2^64. Both operands are at
 * least 0. The builtin is an add and a rarely taken jump; a compare against
 * MAX - amount cost several instructions more on the malloc / free path.
 */
#ifndef COOP_SATURATING_H
#define COOP_SATURATING_H

#include <stdint.h>

static inline uint64_t saturating_add_u64(uint64_t total, uint64_t amount)
{
    uint64_t sum;
    return __builtin_add_overflow(total, amount, &sum) ? UINT64_MAX : sum;
}

static inline int64_t saturating_add_i64(int64_t total, int64_t amount)
{
    int64_t sum;
    return __builtin_add_overflow(total, amount, &sum) ? INT64_MAX : sum;
}

#endif
