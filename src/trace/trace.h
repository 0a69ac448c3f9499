/*
 * Trace readers: one per format, each producing a struct trace (event.h).
 * Errors name the file and the position (line, byte offset or opcode).
 */
#ifndef COOP_TRACE_H
#define COOP_TRACE_H

#include "coop.h"
#include "trace/event.h"

/* Releases everything a reader allocated in *t and zeroes it. */
void trace_free(trace *t);

/* ---- DTR operator logs (remat work: src/trace/dtr_events.c) ---- */

/* Reads a DTR JSONL op log (plain or gzip) as the allocations the logged
 * program makes with no budget: fresh CALL results and constants allocate,
 * views and in-place mutations do not, a storage is freed with the last name
 * bound to it. cost_ns carries the producing op's time. Errors name
 * PATH:LINE. */
coop_status trace_read_dtr(const char *path, trace *out);

/* ---- end DTR operator logs ---- */

#endif
