/*
 * Trace readers: one per format, each producing a struct trace (event.h).
 * Errors name the file and the position (line, byte offset or opcode).
 */
#ifndef COOP_TRACE_H
#define COOP_TRACE_H

#include "trace/event.h"

/* Releases everything a reader allocated in *t and zeroes it. */
void trace_free(trace *t);

#endif
