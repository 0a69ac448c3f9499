/* Ring buffer of ABI events (see history.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"
#include "torch/history.h"

/* Slots of a ring's first allocation: 40 KiB, a few steps of a small model. */
#define HISTORY_FIRST_SLOTS 1024u

void torch_history_resize(torch_history *h, size_t max_entries)
{
    pthread_mutex_lock(&h->lock);
    free(h->ring);
    h->ring = NULL;
    h->slots = 0;
    h->capacity = max_entries;
    h->count = 0;
    h->oldest = 0;
    h->grow_failed = false;
    atomic_store(&h->enabled, max_entries > 0);
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
