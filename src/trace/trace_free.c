/* Releasing a trace loaded by any reader. */
#include <stdlib.h>

#include "trace/event.h"
#include "trace/trace.h"

void trace_free(trace *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->source);
    free(t->events);
    free(t->live_at_start);
    free(t->final_segments);
    free(t->segment_where);
    *t = (trace){0};
}
