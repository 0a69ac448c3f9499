/*
 * Replay results: one row per (trace, policy), written as an aligned table
 * for people or as JSON (one object per line) for machines.
 */
#ifndef COOP_REPLAY_REPORT_H
#define COOP_REPLAY_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct replay_row {
    const char *trace, *policy; /* borrowed: outlive the row */
    uint64_t events, peak_live, peak_reserved, peak_active;
    bool has_min_capacity; /* false: does not fit in --capacity, or unknown */
    uint64_t min_capacity;
    bool has_map_bytes; /* map_bytes at the minimum capacity */
    uint64_t map_bytes;
    bool has_frag;
    double frag_mean, frag_max;
    bool has_ns;
    double ns_per_op;
    bool oom;                    /* ran out of memory at --capacity ... */
    uint64_t oom_event;          /* ... at this event */
    bool has_torch_settings;     /* the trace (a snapshot) recorded PyTorch's settings ... */
    bool torch_settings_default; /* ... and they are the defaults torch emulates */
    bool recorded_by_coop;       /* a snapshot coop.torch wrote: its recorded row is coop's */
    const char *path;            /* the trace's path as given (JSON "path"); NULL: not known */
} replay_row;

/* JSON: the keys (trace, policy, events, peak_live_bytes,
 * peak_reserved_bytes, reserved_over_live, min_capacity_bytes, map_bytes,
 * frag_mean, frag_max, ns_per_op) plus gmlake_frag, oom_event,
 * torch_settings_default, recorded_by_coop and path (properties of the trace,
 * on every row: "trace" is the file's name, "path" the path as given); null
 * where a figure does not apply. A row that ran out of memory at --capacity has
 * its oom_event, and null for the ratios that would compare a truncated run
 * with the whole trace (reserved_over_live, gmlake_frag). Returns false when
 * the row cannot be encoded or written. */
bool replay_report_json(FILE *out, const replay_row *row);

/* The aligned table with a header; sizes in MiB, or KiB when all are under 64 MiB. */
void replay_report_table(FILE *out, const replay_row *rows, size_t count);

#endif
