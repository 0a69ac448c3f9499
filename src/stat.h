/* One torch-style counter: current value, its peak, and the cumulative
 * amounts added ("allocated") and removed ("freed"). */
#ifndef COOP_STAT_H
#define COOP_STAT_H

#include "coop.h"

static inline void stat_add(coop_stat *s, int64_t delta)
{
    s->current += delta;
    if (delta > 0) {
        s->allocated += delta;
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed -= delta;
    }
}

static inline void stat_reset_peak(coop_stat *s)
{
    s->peak = s->current;
}

/* What stat_add and stat_reset_peak keep (checker): the current value is
 * what was added less what was removed, and the peak is at least it. */
static inline bool stat_sound(const coop_stat *s)
{
    return s->peak >= s->current && s->current == s->allocated - s->freed;
}

#endif
