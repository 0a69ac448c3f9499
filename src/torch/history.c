/* Ring buffer of ABI events (see history.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"
#include "torch/history.h"

coop_status torch_history_resize(torch_history *h, size_t max_entries)
{
    coop_torch_event *ring = NULL;
    if (max_entries) {
        ring = malloc(max_entries * sizeof *ring);
        if (!ring)
            return coop_set_error(COOP_ERR_HOST_NOMEM,
                                  "coop torch: no host memory for %zu history entries",
                                  max_entries);
    }
    pthread_mutex_lock(&h->lock);
    free(h->ring);
    h->ring = ring;
    h->capacity = max_entries;
    h->next = 0;
    h->count = 0;
    atomic_store(&h->enabled, max_entries > 0);
    pthread_mutex_unlock(&h->lock);
    return COOP_OK;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void torch_history_record(torch_history *h, coop_torch_action action, uintptr_t address,
                          uint64_t size, uintptr_t stream, int device)
{
    if (!atomic_load_explicit(&h->enabled, memory_order_relaxed))
        return;
    coop_torch_event ev = {now_us(), address, size, stream, (int32_t)action, (int32_t)device};
    pthread_mutex_lock(&h->lock);
    if (h->capacity) {
        h->ring[h->next] = ev;
        h->next = (h->next + 1) % h->capacity;
        if (h->count < h->capacity)
            h->count++;
    }
    pthread_mutex_unlock(&h->lock);
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
    size_t oldest = (h->next + h->capacity - n) % (h->capacity ? h->capacity : 1);
    for (size_t i = 0; i < n; i++)
        events[i] = h->ring[(oldest + i) % h->capacity];
    pthread_mutex_unlock(&h->lock);
    *out = events;
    *count = n;
    return COOP_OK;
}
