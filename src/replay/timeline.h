/*
 * The --timeline file: memory over time, per trace and policy, read by
 * scripts/plot_replay.py. Plain text, one record a line:
 *
 *   coop-replay-timeline 1
 *   trace NAME EVENTS              a trace; the policies below belong to it
 *   policy NAME                    a policy's series follows
 *   s EVENT LIVE RESERVED          after event EVENT (0-based): live and reserved
 *                                  bytes; written at the first event, where either
 *                                  changes, and at the last (EVENTS - 1, or the
 *                                  last before an oom) even unchanged: it ends
 *                                  the curve. LIVE is 0 throughout for the
 *                                  policy recorded (a snapshot's reservation
 *                                  has no live series of its own)
 *   b OFFSET SIZE START END        a block OFFSET bytes (hex) above the lowest
 *                                  block of the policy's run, of SIZE bytes,
 *                                  placed at event START, freed at END
 *                                  (EVENTS: never). Offsets, not addresses: a
 *                                  policy's range lies wherever mmap put it, and
 *                                  the file repeats to the byte from run to run
 *   oom EVENT                      the policy ran out of memory at EVENT and the
 *                                  run stopped there: its s records end before
 *                                  EVENT, and a block with END = EVENTS was still
 *                                  live when it stopped
 *
 * NAME is UTF-8 without spaces: spaces and control characters are written
 * as '_', bytes that are not UTF-8 as '?'. Fields are separated by ASCII
 * spaces only (a name may hold U+00A0 or other Unicode spaces).
 */
#ifndef COOP_REPLAY_TIMELINE_H
#define COOP_REPLAY_TIMELINE_H

#include <stdbool.h>
#include <stdio.h>

#include "replay/engine.h"

bool replay_timeline_header(FILE *out);
bool replay_timeline_trace(FILE *out, const char *name, uint64_t events);
/* live may be NULL for a policy that has no live series of its own
 * (recorded): the live column is then 0. placements: s->placements. run:
 * the replay the series come from, NULL for recorded; when it ran out of
 * memory the series stop before its oom_event (the engine leaves the
 * entries from there on 0, which are no measurement) and an oom record
 * follows. */
bool replay_timeline_policy(FILE *out, const char *policy, const uint64_t *live,
                            const uint64_t *reserved, uint64_t events,
                            const replay_placement *placements, uint64_t num_placements,
                            const replay_run *run);

#endif
