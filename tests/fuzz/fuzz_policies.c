/*
 * libFuzzer harness: every placement policy of `coop replay` (coop,
 * coop-segments, torch, torch-expandable, jemalloc, ideal) driven through the
 * same malloc / free sequence read from the input, at a capacity the input
 * picks, as replay drives them (frees only of live blocks, with their sizes).
 *
 * Checked after every call, for each policy: malloc returns COOP_OK with a
 * non-zero address or COOP_ERR_NOMEM, and free COOP_OK; live blocks never
 * overlap over their requested bytes; reserved bytes never pass the capacity
 * (each policy enforces it itself); active bytes cover the live requested
 * bytes; the largest free block fits in the free bytes; for the two torch
 * emulations every reserved byte is active or free; and the policy's own
 * check (replay_policy_ops.check), where it has one. At the end, with every
 * block freed, no active byte is left.
 *
 * Input layout: bytes 0-1 pick the capacity (1 MiB to 4 GiB), then each step
 * is an opcode byte (bit 7: free, else malloc; bit 6: stream 1; low bits: the
 * slot) and, for a malloc, three size bytes (an exponent and a mantissa:
 * 1 byte to 256 MiB).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "coop.h"
#include "fuzz_input.h"
#include "replay/policy.h"

#define MiB (UINT64_C(1) << 20)
#define SLOTS 32
#define MAX_STEPS 512
#define MAX_POLICIES 8

/* A slot is live or not under each policy separately: a malloc one policy
 * refused (out of memory) and another placed leaves them apart. */
typedef struct slot {
    uintptr_t addr[MAX_POLICIES]; /* 0: not live under that policy */
    uint64_t size[MAX_POLICIES];
} slot;

static void fail(const char *policy, const char *what)
{
    fprintf(stderr, "policy %s: %s (%s)\n", policy, what, coop_last_error());
    abort();
}

static void check_stats(const replay_policy_ops *ops, void *state, uint64_t capacity,
                        uint64_t live_requested)
{
    replay_policy_stats s;
    ops->stats(state, &s);
    if (s.reserved_bytes > capacity)
        fail(ops->name, "reserved bytes above the capacity");
    if (s.active_bytes < live_requested)
        fail(ops->name, "active bytes below the live requested bytes");
    if (s.has_free_blocks && s.largest_free > s.free_bytes)
        fail(ops->name, "largest free block above the free bytes");
    if ((ops == &replay_policy_torch || ops == &replay_policy_torch_expandable) &&
        s.reserved_bytes != s.active_bytes + s.free_bytes)
        fail(ops->name, "reserved bytes neither active nor free");
    if (ops->check && ops->check(state) != COOP_OK)
        fail(ops->name, "its own check failed");
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_input in = {data, len, 0};
    unsigned lo = fuzz_byte(&in);
    uint64_t capacity = (UINT64_C(1) + ((lo | fuzz_byte(&in) << 8) & 4095)) * MiB;
    size_t count;
    const replay_policy_ops *const *all = replay_policy_all(&count);
    if (count > MAX_POLICIES)
        abort();
    void *state[MAX_POLICIES] = {0};
    for (size_t p = 0; p < count; p++)
        if (all[p]->create(capacity, 2 * MiB, &state[p]) != COOP_OK)
            fail(all[p]->name, "create failed");
    static slot slots[SLOTS];
    for (size_t i = 0; i < SLOTS; i++)
        slots[i] = (slot){0};
    uint64_t live[MAX_POLICIES] = {0}; /* requested bytes live under each policy */
    for (int step = 0; step < MAX_STEPS && in.pos < in.len; step++) {
        unsigned op = fuzz_byte(&in);
        slot *sl = &slots[op % SLOTS];
        if (op & 0x80) {
            for (size_t p = 0; p < count; p++) {
                if (!sl->addr[p])
                    continue;
                if (all[p]->free(state[p], sl->addr[p], sl->size[p]) != COOP_OK)
                    fail(all[p]->name, "free of a live block refused");
                sl->addr[p] = 0;
                live[p] -= sl->size[p];
                check_stats(all[p], state[p], capacity, live[p]);
            }
            continue;
        }
        unsigned e = fuzz_byte(&in) % 29, m0 = fuzz_byte(&in), m1 = fuzz_byte(&in);
        uint64_t size = (UINT64_C(1) << e) + ((uint64_t)(m0 | m1 << 8) << e >> 16);
        uint64_t stream = (op >> 6) & 1;
        for (size_t p = 0; p < count; p++) {
            if (sl->addr[p]) /* live there: a malloc needs a free slot */
                continue;
            uintptr_t addr = 0;
            coop_status st = all[p]->malloc(state[p], size, stream, &addr);
            if (st == COOP_ERR_NOMEM) {
                check_stats(all[p], state[p], capacity, live[p]);
                continue;
            }
            if (st != COOP_OK || !addr)
                fail(all[p]->name, "malloc neither placed nor refused the block");
            for (size_t j = 0; j < SLOTS; j++)
                if (slots[j].addr[p] && !(addr + size <= slots[j].addr[p] ||
                                          slots[j].addr[p] + slots[j].size[p] <= addr))
                    fail(all[p]->name, "overlapping live blocks");
            sl->addr[p] = addr;
            sl->size[p] = size;
            live[p] += size;
            check_stats(all[p], state[p], capacity, live[p]);
        }
    }
    for (size_t p = 0; p < count; p++) {
        for (size_t i = 0; i < SLOTS; i++)
            if (slots[i].addr[p] &&
                all[p]->free(state[p], slots[i].addr[p], slots[i].size[p]) != COOP_OK)
                fail(all[p]->name, "final free refused");
        replay_policy_stats s;
        all[p]->stats(state[p], &s);
        if (s.active_bytes)
            fail(all[p]->name, "active bytes left after every block was freed");
        all[p]->destroy(state[p]);
    }
    return 0;
}
