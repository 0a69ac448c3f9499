/*
 * Not a test: how often a multi-stream workload runs out of memory on the
 * host backend, one JSON line per pool kind (VMM, segments). Deterministic
 * for a seed (no timing), so two builds compare exactly: a figure for the
 * stream rules (which free blocks of which stream another stream may use),
 * measured in docs/measured-host.md.
 *
 * Workload: stream 1 is a training stream whose work runs ahead of the
 * host, in two kinds of run: "waited", busy again after each of its ops
 * (coop_host_busy_stream) until the pool waits for it (the out-of-memory
 * path does, as PyTorch's does); "held", blocked on the host for 1,500 ops
 * of every 2,000 (coop_host_hold_stream: waits for it fail, as under
 * coop_config.never_wait). Streams 2 and 3 are side streams whose work
 * finishes at once;
 * each op picks a stream (1: 60%, 2 and 3: 20% each) and allocates on it
 * (sizes log-uniform 512 B .. 4 MiB) or frees one of its live blocks, with
 * about 1,000 live blocks (about 470 MiB) in a pool of CAPACITY MiB, OPS ops
 * in all. A refused allocation is counted and the op goes on. Free blocks
 * change hands between streams only when the pool settles streams: on a
 * refused allocation (and coop_empty_cache, not called here).
 *
 * Usage: tests/stream_reuse_measure [OPS [SEED [CAPACITY]]] (defaults
 * 200000, 1, 640).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "coop.h"

#define MAX_LIVE 4096

static uint64_t rng_state;

static uint64_t next_random(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static double uniform(void)
{
    return (double)(next_random() >> 11) / 9007199254740992.0;
}

typedef struct live_block {
    void *ptr;
    coop_stream stream;
} live_block;

static int measure(bool vmm, bool held, unsigned long ops, uint64_t seed, uint64_t capacity_mib)
{
    coop_config c;
    coop_config_default(&c);
    c.capacity = capacity_mib << 20;
    c.use_vmm = vmm;
    if (!vmm)
        c.segment_size = 32ull << 20;
    coop_pool *pool;
    if (coop_pool_create(&c, &pool) != COOP_OK) {
        fprintf(stderr, "stream_reuse_measure: %s\n", coop_last_error());
        return 1;
    }
    static live_block live[MAX_LIVE];
    size_t n = 0;
    unsigned long ooms[4] = {0}, allocs[4] = {0};
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (unsigned long i = 0; i < ops; i++) {
        if (held && (i % 2000 == 0 || i % 2000 == 1500))
            coop_host_hold_stream(pool, 1, i % 2000 == 0);
        double u = uniform();
        coop_stream s = u < 0.6 ? 1 : u < 0.8 ? 2 : 3;
        if (!held && s == 1) /* more work queued, until a wait */
            coop_host_busy_stream(pool, 1);
        bool alloc = n < 900 || (n < MAX_LIVE && uniform() < 0.5 * 1000.0 / (double)n);
        if (alloc) {
            size_t size = (size_t)exp(log(512.0) + uniform() * (log(4194304.0) - log(512.0)));
            coop_status st;
            void *p = coop_malloc(pool, size, s, 0, &st);
            allocs[s]++;
            if (p)
                live[n++] = (live_block){p, s};
            else if (st == COOP_ERR_NOMEM)
                ooms[s]++;
            else {
                fprintf(stderr, "stream_reuse_measure: %s\n", coop_last_error());
                return 1;
            }
        } else {
            /* a live block of this stream, if the first few tries find one */
            for (int k = 0; k < 8; k++) {
                size_t j = (size_t)(next_random() % n);
                if (live[j].stream != s)
                    continue;
                coop_free(pool, live[j].ptr);
                live[j] = live[--n];
                break;
            }
        }
    }
    coop_stats st;
    coop_get_stats(pool, &st);
    printf("{\"pool\": \"%s\", \"stream1\": \"%s\", \"capacity_mib\": %" PRIu64
           ", \"ops\": %lu, \"seed\": %" PRIu64 ", \"allocs\": %lu, \"ooms\": %lu, "
           "\"ooms_stream1\": %lu, \"ooms_side\": %lu, \"num_ooms\": %lld, "
           "\"reserved_peak\": %lld, \"allocated_peak\": %lld}\n",
           vmm ? "vmm" : "segments", held ? "held" : "waited", capacity_mib, ops, seed,
           allocs[1] + allocs[2] + allocs[3], ooms[1] + ooms[2] + ooms[3], ooms[1],
           ooms[2] + ooms[3], (long long)st.num_ooms, (long long)st.reserved_bytes.peak,
           (long long)st.allocated_bytes.peak);
    while (n)
        coop_free(pool, live[--n].ptr);
    coop_host_hold_stream(pool, 1, false);
    coop_pool_destroy(pool);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    uint64_t capacity_mib = argc > 3 ? strtoull(argv[3], NULL, 10) : 640;
    for (int held = 0; held < 2; held++)
        for (int vmm = 1; vmm >= 0; vmm--)
            if (measure(vmm, held, ops, seed, capacity_mib))
                return 1;
    return 0;
}
