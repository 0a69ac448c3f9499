/*
 * Allocation history for snapshots' device_traces: a ring buffer per device
 * of the last N alloc / free / OOM events at the PyTorch ABI. Recording
 * costs one uncontended lock per event while on, one atomic load while off.
 *
 * The ring's memory grows with the events recorded (doubling, up to N), as
 * PyTorch's own trace buffer does: N is a bound, not a reservation, so any
 * N is accepted (torch 2.x's _record_memory_history defaults to
 * sys.maxsize), and a device that records nothing holds nothing.
 */
#ifndef COOP_TORCH_HISTORY_H
#define COOP_TORCH_HISTORY_H

#include <pthread.h>
#include <stdatomic.h>

#include "coop.h"

typedef struct torch_history {
    pthread_mutex_t lock;
    atomic_bool enabled;
    coop_torch_event *ring; /* slots events allocated (more than capacity only
                             * if a shrinking realloc failed) */
    size_t slots;
    size_t bound;    /* most events kept, as asked (torch_history_resize) */
    size_t capacity; /* most events kept now: bound, or the slots the ring
                      * had when it could not grow (until it is cleared) */
    /* Filling (count < capacity): the events are ring[0, count), oldest
     * first, and oldest is 0. Full (count == capacity): the ring wraps and
     * oldest is also where the next event goes. */
    size_t count;
    size_t oldest;
    bool grow_failed; /* reported once (torch_history_record's result) */
} torch_history;

#define TORCH_HISTORY_INIT                                                                         \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, false, NULL, 0, 0, 0, 0, 0, false                               \
    }

/* Whether recording is on (an event recorded now would be kept). */
static inline bool torch_history_on(torch_history *h)
{
    return atomic_load_explicit(&h->enabled, memory_order_relaxed);
}

/* Keeps the last max_entries events from now on, and of those recorded
 * (as PyTorch's _record_memory_history does without clear_history); 0 turns
 * recording off and drops them. Allocates nothing, so it cannot fail. */
void torch_history_resize(torch_history *h, size_t max_entries);

/* Drops what was recorded; recording stays as it was. A ring that could not
 * grow gets its bound back: it grows again as events come (and a failure is
 * reported again). */
void torch_history_clear(torch_history *h);

/* Records one event (time filled in here) if recording is on. Returns true
 * the first time the ring could not grow for lack of host memory: the ring
 * then keeps the last events it has room for (its capacity drops to its
 * size until torch_history_clear or _resize; the caller reports it with
 * coop_last_error's message). */
bool torch_history_record(torch_history *h, coop_torch_action action, uintptr_t address,
                          uint64_t size, uintptr_t stream, int device);

/* Copies the events, oldest first, into a malloc'ed array. */
coop_status torch_history_copy(torch_history *h, coop_torch_event **out, size_t *count);

#endif
