/* Ring buffer of ABI events (see history.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"
#include "torch/history.h"

/* Slots of a ring's first allocation: 40 KiB, a few steps of a small model. */
#define HISTORY_FIRST_SLOTS 1024u

/* Reverses ring[first, end) in place. */
static void reverse_events(coop_torch_event *ring, size_t first, size_t end)
{
    while (first + 1 < end) {
        coop_torch_event t = ring[first];
        ring[first++] = ring[--end];
        ring[end] = t;
    }
}

/* Drops every event and the ring's memory. Caller holds h->lock. */
static void drop_events(torch_history *h)
{
    free(h->ring);
    h->ring = NULL;
    h->slots = 0;
    h->count = 0;
    h->oldest = 0;
}

void torch_history_resize(torch_history *h, size_t max_entries)
{
    pthread_mutex_lock(&h->lock);
    if (max_entries == 0) {
        drop_events(h);
    } else {
        /* oldest first from ring[0] (a rotation in place: nothing to
         * allocate), then the last max_entries of them */
        reverse_events(h->ring, 0, h->oldest);
        reverse_events(h->ring, h->oldest, h->count);
        reverse_events(h->ring, 0, h->count);
        h->oldest = 0;
        size_t kept = h->count < max_entries ? h->count : max_entries;
        if (kept && kept < h->count)
            memmove(h->ring, h->ring + (h->count - kept), kept * sizeof *h->ring);
        h->count = kept;
        if (h->slots > max_entries) { /* give back what the bound no longer allows */
            coop_torch_event *ring = realloc(h->ring, max_entries * sizeof *ring);
            if (ring) {
                h->ring = ring;
                h->slots = max_entries;
            }
        }
    }
    h->bound = h->capacity = max_entries;
    h->grow_failed = false;
    atomic_store(&h->enabled, max_entries > 0);
    pthread_mutex_unlock(&h->lock);
}

void torch_history_clear(torch_history *h)
{
    pthread_mutex_lock(&h->lock);
    drop_events(h);
    /* the host may have memory again: a failed growth capped the ring for
     * the events it held, not for good */
    h->capacity = h->bound;
    h->grow_failed = false;
    pthread_mutex_unlock(&h->lock);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Doubles the ring (up to capacity); false if the host has no memory for it.
 * Caller holds h->lock. slots < capacity. */
static bool history_grow(torch_history *h)
{
    size_t slots = h->slots ? h->slots * 2 : HISTORY_FIRST_SLOTS;
    if (slots > h->capacity || slots < h->slots)
        slots = h->capacity;
    /* the byte count must not wrap (capacity can be anything up to SIZE_MAX) */
    if (slots > SIZE_MAX / sizeof *h->ring)
        slots = SIZE_MAX / sizeof *h->ring;
    if (slots <= h->slots)
        return false;
    coop_torch_event *ring = realloc(h->ring, slots * sizeof *ring);
    if (!ring)
        return false;
    h->ring = ring;
    h->slots = slots;
    return true;
}

bool torch_history_record(torch_history *h, coop_torch_action action, uintptr_t address,
                          uint64_t size, uintptr_t stream, int device)
{
    if (!atomic_load_explicit(&h->enabled, memory_order_relaxed))
        return false;
    coop_torch_event ev = {now_us(), address, size, stream, (int32_t)action, (int32_t)device};
    bool first_failure = false;
    pthread_mutex_lock(&h->lock);
    if (h->count < h->capacity && h->count == h->slots && !history_grow(h)) {
        /* keep the last events there is room for rather than none */
        first_failure = !h->grow_failed;
        h->grow_failed = true;
        if (first_failure)
            coop_set_error(COOP_ERR_HOST_NOMEM,
                           "coop torch: no host memory to grow device %d's history past %zu "
                           "events; it keeps the last %zu",
                           device, h->slots, h->slots);
        h->capacity = h->slots;
    }
    if (h->count < h->capacity) {
        h->ring[h->count++] = ev;
    } else if (h->capacity) {
        h->ring[h->oldest] = ev;
        h->oldest = h->oldest + 1 == h->capacity ? 0 : h->oldest + 1;
    }
    pthread_mutex_unlock(&h->lock);
    return first_failure;
}

coop_status torch_history_copy(torch_history *h, coop_torch_event **out, size_t *count)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->count;
    coop_torch_event *events = malloc((n ? n : 1) * sizeof *events);
    if (!events) {
        pthread_mutex_unlock(&h->lock);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop torch: no host memory to copy history");
    }
    /* oldest < n when n > 0: the two pieces of the ring, oldest first */
    size_t head = n - h->oldest;
    if (n) {
        memcpy(events, h->ring + h->oldest, head * sizeof *events);
        memcpy(events + head, h->ring, h->oldest * sizeof *events);
    }
    pthread_mutex_unlock(&h->lock);
    *out = events;
    *count = n;
    return COOP_OK;
}
