/*
 * `ideal`: no placement at all, only the sum of live requested bytes, which
 * must stay within the capacity. Its peak is the lower bound every real
 * policy is measured against. Addresses are distinct but meaningless.
 */
#include <stdlib.h>

#include "replay/policy.h"
#include "status.h"

typedef struct ideal_state {
    uint64_t capacity, live, next_addr, map_bytes, peak;
} ideal_state;

static coop_status ideal_create(uint64_t capacity, uint64_t page, void **state)
{
    (void)page;
    ideal_state *s = calloc(1, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "ideal policy: out of host memory");
    s->capacity = capacity;
    s->next_addr = 1u << 20; /* never 0: 0 means "not live" to replay */
    *state = s;
    return COOP_OK;
}

static coop_status ideal_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    (void)stream;
    ideal_state *s = state;
    if (size > s->capacity - s->live) /* live <= capacity: no wrap */
        return coop_set_error(COOP_ERR_NOMEM, "ideal policy: %llu live + %llu requested > %llu",
                              (unsigned long long)s->live, (unsigned long long)size,
                              (unsigned long long)s->capacity);
    s->live += size;
    if (s->live > s->peak) {
        s->map_bytes += s->live - s->peak; /* memory is "mapped" once, at its first need */
        s->peak = s->live;
    }
    *addr = (uintptr_t)s->next_addr;
    s->next_addr += (size + 511) / 512 * 512;
    if (s->next_addr < 1u << 20) /* wrapped (sizes below 2^56 add up): never 0 */
        s->next_addr = 1u << 20;
    return COOP_OK;
}

static coop_status ideal_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)addr;
    ideal_state *s = state;
    s->live -= size;
    return COOP_OK;
}

static void ideal_stats(void *state, replay_policy_stats *out)
{
    ideal_state *s = state;
    /* reserved memory is exactly the live bytes: nothing free, nothing fragmented */
    *out = (replay_policy_stats){
        .reserved_bytes = s->live,
        .map_bytes = s->map_bytes,
        .active_bytes = s->live,
        .has_free_blocks = true,
    };
}

static void ideal_destroy(void *state)
{
    free(state);
}

const replay_policy_ops replay_policy_ideal = {
    .name = "ideal",
    .summary = "the sum of live bytes (the lower bound: no fragmentation, no rounding)",
    .create = ideal_create,
    .malloc = ideal_malloc,
    .free = ideal_free,
    .stats = ideal_stats,
    .destroy = ideal_destroy,
};
