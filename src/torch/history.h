/*
 * Allocation history for snapshots' device_traces: a ring buffer per device
 * of the last N alloc / free / OOM events at the PyTorch ABI. Recording
 * costs one uncontended lock per event while on, one atomic load while off.
 */
#ifndef COOP_TORCH_HISTORY_H
#define COOP_TORCH_HISTORY_H

#include <pthread.h>
#include <stdatomic.h>

#include "coop.h"

typedef struct torch_history {
    pthread_mutex_t lock;
    atomic_bool enabled;
    coop_torch_event *ring; /* capacity slots; the oldest at (next - count) */
    size_t capacity;
    size_t next;
    size_t count;
} torch_history;

#define TORCH_HISTORY_INIT                                                                         \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, false, NULL, 0, 0, 0                                            \
    }

/* Drops what was recorded and keeps the last max_entries events from now
 * on (0 = off). COOP_ERR_HOST_NOMEM leaves recording off. */
coop_status torch_history_resize(torch_history *h, size_t max_entries);

/* Records one event (time filled in here) if recording is on. */
void torch_history_record(torch_history *h, coop_torch_action action, uintptr_t address,
                          uint64_t size, uintptr_t stream, int device);

/* Copies the events, oldest first, into a malloc'ed array. */
coop_status torch_history_copy(torch_history *h, coop_torch_event **out, size_t *count);

#endif
