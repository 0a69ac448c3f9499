/*
 * The property every trace-reader fuzzer checks: a reader given any bytes
 * either fails cleanly (a status, a message saying why, *out zeroed, nothing
 * leaked: LeakSanitizer reports leaks at exit) or yields a trace that the
 * text writer writes and the text reader reads back field for field.
 */
#ifndef COOP_FUZZ_READER_H
#define COOP_FUZZ_READER_H

#include "coop.h"
#include "fuzz_scratch.h"
#include "trace/trace.h"

typedef coop_status (*fuzz_trace_reader)(const char *path, trace *out);

/* Whether a and b hold the same events; prints the first difference. */
static inline int fuzz_same_trace(const trace *a, const trace *b)
{
    if (a->num_events != b->num_events || a->num_ids != b->num_ids ||
        a->num_live_at_start != b->num_live_at_start ||
        a->num_final_segments != b->num_final_segments ||
        a->has_segment_events != b->has_segment_events) {
        fprintf(stderr, "counts differ: events %zu/%zu ids %zu/%zu live %zu/%zu segments %zu/%zu\n",
                (size_t)a->num_events, (size_t)b->num_events, (size_t)a->num_ids,
                (size_t)b->num_ids, (size_t)a->num_live_at_start, (size_t)b->num_live_at_start,
                (size_t)a->num_final_segments, (size_t)b->num_final_segments);
        return 0;
    }
    for (size_t i = 0; i < a->num_events; i++) {
        const trace_event *x = &a->events[i], *y = &b->events[i];
        if (x->kind != y->kind || x->id != y->id || x->size != y->size || x->addr != y->addr ||
            x->stream != y->stream || x->time_us != y->time_us || x->cost_ns != y->cost_ns) {
            fprintf(stderr,
                    "event %zu differs: kind %d/%d id %llu/%llu size %llu/%llu addr %llx/%llx "
                    "stream %llx/%llx time %lld/%lld cost %llu/%llu\n",
                    i, (int)x->kind, (int)y->kind, (unsigned long long)x->id,
                    (unsigned long long)y->id, (unsigned long long)x->size,
                    (unsigned long long)y->size, (unsigned long long)x->addr,
                    (unsigned long long)y->addr, (unsigned long long)x->stream,
                    (unsigned long long)y->stream, (long long)x->time_us, (long long)y->time_us,
                    (unsigned long long)x->cost_ns, (unsigned long long)y->cost_ns);
            return 0;
        }
    }
    return 1;
}

static inline void fuzz_reader_check(fuzz_trace_reader read, const unsigned char *data, size_t len)
{
    const char *in = fuzz_write_scratch("in", data, len);
    trace t, back;
    coop_status st = read(in, &t);
    if (st != COOP_OK) {
        static const trace zero;
        if (!coop_last_error()[0] || memcmp(&t, &zero, sizeof t) != 0) {
            fprintf(stderr, "a failing reader must say why and zero *out (%s)\n",
                    coop_last_error());
            abort();
        }
        return;
    }
    const char *out = fuzz_scratch_path("trace");
    if (trace_write_text(&t, out) != COOP_OK || trace_read_text(out, &back) != COOP_OK) {
        fprintf(stderr, "an accepted trace must round-trip: %s\n", coop_last_error());
        abort();
    }
    if (!fuzz_same_trace(&t, &back)) {
        fprintf(stderr, "the text round trip changed the trace\n");
        abort();
    }
    trace_free(&t);
    trace_free(&back);
}

#endif
