/* One torch-style counter: current value, its peak, and the cumulative
 * amounts added ("allocated") and removed ("freed"). The current value and
 * the peak stay below 2^56 (a pool's sizes do), but the cumulative amounts
 * grow with every call: 2^19 malloc / free pairs of 16 TiB reach 2^63. They
 * saturate at INT64_MAX (they wrapped negative before, a signed overflow). */
#ifndef COOP_STAT_H
#define COOP_STAT_H

#include "coop.h"
#include "saturating.h"

/* The counter grows by amount (a size or a count, 0 <= amount < 2^56). The
 * hot paths know the direction, so they call this or stat_shrink and branch
 * on no sign. */
static inline void stat_grow(coop_stat *s, int64_t amount)
{
    s->current += amount;
    s->allocated = saturating_add_i64(s->allocated, amount);
    if (s->current > s->peak)
        s->peak = s->current;
}

/* The counter shrinks by amount (0 <= amount < 2^56). */
static inline void stat_shrink(coop_stat *s, int64_t amount)
{
    s->current -= amount;
    s->freed = saturating_add_i64(s->freed, amount);
}

/* Counters of calls (allocations, segments) move by one: their cumulative
 * amounts would need 2^63 calls (centuries) to overflow, so they skip the
 * saturation the byte counters need. */
static inline void stat_count_up(coop_stat *s)
{
    s->current++;
    s->allocated++;
    if (s->current > s->peak)
        s->peak = s->current;
}

static inline void stat_count_down(coop_stat *s)
{
    s->current--;
    s->freed++;
}

/* delta of either sign, |delta| < 2^56 */
static inline void stat_add(coop_stat *s, int64_t delta)
{
    if (delta > 0)
        stat_grow(s, delta);
    else
        stat_shrink(s, -delta);
}

static inline void stat_reset_peak(coop_stat *s)
{
    s->peak = s->current;
}

/* What stat_add and stat_reset_peak keep (checker): the current value is
 * what was added less what was removed (once the added amount saturated,
 * only no more than it), and the peak is at least it. */
static inline bool stat_sound(const coop_stat *s)
{
    if (s->peak < s->current)
        return false;
    if (s->allocated == INT64_MAX)
        return s->freed <= s->allocated && s->current <= s->allocated;
    return s->current == s->allocated - s->freed;
}

#endif
