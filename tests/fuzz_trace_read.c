/*
 * libFuzzer harness for every trace reader: an input is written to a
 * scratch file and read with trace_read (format detection, then the
 * pickle, text, minimalloc or DTR reader). It must never crash, leak or
 * misbehave under ASan/UBSan; an accepted input must round-trip through
 * the text writer unchanged.
 *
 * Not part of make: build and run from the source root with clang, e.g.
 *   clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
 *     -Iinclude -Isrc tests/fuzz_trace_read.c src/trace/[a-z]*.c src/status.c \
 *     -lz -ljansson -o fuzz-out/fuzz_trace_read
 *   fuzz-out/fuzz_trace_read -max_total_time=120 -max_len=4096 fuzz-out/corpus \
 *     tests/data/fuzz
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coop.h"
#include "trace/trace.h"

static char in_path[64], out_path[64];

static void same_or_abort(const trace *a, const trace *b)
{
    int same = a->num_events == b->num_events && a->num_ids == b->num_ids &&
               a->num_live_at_start == b->num_live_at_start &&
               a->num_final_segments == b->num_final_segments &&
               a->has_segment_events == b->has_segment_events;
    for (size_t i = 0; same && i < a->num_events; i++) {
        const trace_event *x = &a->events[i], *y = &b->events[i];
        same = x->kind == y->kind && x->id == y->id && x->size == y->size && x->addr == y->addr &&
               x->stream == y->stream && x->time_us == y->time_us && x->cost_ns == y->cost_ns;
    }
    if (!same) {
        fprintf(stderr, "round trip changed the trace\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    if (!in_path[0]) {
        snprintf(in_path, sizeof in_path, "/tmp/coop-fuzz-%d.in", (int)getpid());
        snprintf(out_path, sizeof out_path, "/tmp/coop-fuzz-%d.trace", (int)getpid());
    }
    FILE *f = fopen(in_path, "wb");
    if (!f)
        abort();
    if (len)
        fwrite(data, 1, len, f);
    fclose(f);
    trace t, back;
    if (trace_read(in_path, &t) != COOP_OK) {
        if (!coop_last_error()[0] || t.events)
            abort(); /* a failure says why and leaves nothing behind */
        return 0;
    }
    if (trace_write_text(&t, out_path) != COOP_OK || trace_read_text(out_path, &back) != COOP_OK)
        abort();
    same_or_abort(&t, &back);
    trace_free(&t);
    trace_free(&back);
    return 0;
}
