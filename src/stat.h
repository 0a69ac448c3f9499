/* One torch-style counter: current value, its peak, and the cumulative
 * amounts added ("allocated") and removed ("freed"). The current value and
 * the peak stay below 2^56 (a pool's sizes do), but the cumulative amounts
 * grow with every call: 2^19 malloc / free pairs of 16 TiB reach 2^63. They
 * saturate at INT64_MAX (they wrapped negative before, a signed overflow). */
#ifndef COOP_STAT_H
#define COOP_STAT_H

#include "coop.h"

static inline int64_t stat_saturating_add(int64_t total, int64_t amount)
{
    return total > INT64_MAX - amount ? INT64_MAX : total + amount;
}

/* delta: a size or a count, |delta| < 2^56 */
static inline void stat_add(coop_stat *s, int64_t delta)
{
    s->current += delta;
    if (delta > 0) {
        s->allocated = stat_saturating_add(s->allocated, delta);
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed = stat_saturating_add(s->freed, -delta);
    }
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
