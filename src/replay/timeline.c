/* Writing the --timeline file; see timeline.h. */
#include <inttypes.h>

#include "replay/timeline.h"
#include "utf8.h"

/* A name as one field of UTF-8 text, which scripts/plot_replay.py reads:
 * spaces and control characters (a newline or a carriage return started a
 * line; a vertical tab split the field) as '_', bytes that are not UTF-8
 * (the reader refused the whole file) as '?'. */
static void write_name(FILE *out, const char *name)
{
    const unsigned char *p = (const unsigned char *)name;
    while (*p) {
        size_t n = utf8_sequence_length(p);
        if (n == 1)
            fputc(*p <= ' ' || *p == 0x7f ? '_' : *p, out);
        else if (n)
            fwrite(p, 1, n, out);
        else
            fputc('?', out);
        p += n ? n : 1;
    }
}

bool replay_timeline_header(FILE *out)
{
    return fprintf(out, "coop-replay-timeline 1\n") > 0;
}

bool replay_timeline_trace(FILE *out, const char *name, uint64_t events)
{
    fputs("trace ", out);
    write_name(out, name);
    return fprintf(out, " %" PRIu64 "\n", events) > 0;
}

bool replay_timeline_policy(FILE *out, const char *policy, const uint64_t *live,
                            const uint64_t *reserved, uint64_t events,
                            const replay_placement *placements, uint64_t num_placements,
                            const replay_run *run)
{
    fputs("policy ", out);
    write_name(out, policy);
    fputc('\n', out);
    bool oom = run && run->oom;
    uint64_t end = oom && run->oom_event < events ? run->oom_event : events;
    uint64_t last_live = UINT64_MAX, last_reserved = UINT64_MAX;
    for (uint64_t i = 0; i < end; i++) {
        uint64_t l = live ? live[i] : 0;
        /* the last event is written even unchanged: it ends the curve */
        if (l == last_live && reserved[i] == last_reserved && i + 1 < end)
            continue;
        fprintf(out, "s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", i, l, reserved[i]);
        last_live = l;
        last_reserved = reserved[i];
    }
    /* Offsets from the lowest block, not host addresses: a policy's range
     * is wherever mmap put it (ASLR), and the file is to repeat exactly. */
    uint64_t lowest = UINT64_MAX;
    for (uint64_t k = 0; k < num_placements; k++)
        if (placements[k].addr < lowest)
            lowest = placements[k].addr;
    for (uint64_t k = 0; k < num_placements; k++) {
        const replay_placement *p = &placements[k];
        fprintf(out, "b %" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", p->addr - lowest,
                p->size, p->start_event, p->end_event);
    }
    if (oom)
        fprintf(out, "oom %" PRIu64 "\n", run->oom_event);
    return !ferror(out);
}
