/*
 * segment_pressure: a pool of fixed segments (no VMM) growing to many
 * segments, then full. SEGMENTS allocations of 1 MiB each get a segment of
 * their own (half a segment_size of 2 MiB or more) on the host backend,
 * which carves each segment just below the one before, in a pool of exactly
 * their bytes; then REFUSED requests of 4 MiB fail (each one's arena_alloc,
 * the pool's retry and the out-of-memory message). It prints the time per
 * growing malloc and per refused one. A measuring tool, built by make check
 * (so that it keeps compiling), not a test. From a built tree
 * (docs/measured-host.md, "A full pool under eviction"):
 *
 *   make tests/segment_pressure
 *   tests/segment_pressure 16000 1000
 *   valgrind --tool=callgrind tests/segment_pressure 4000 200
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "coop.h"

#define MiB (UINT64_C(1) << 20)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    char *end1 = "", *end2 = "";
    unsigned long segments = argc == 3 ? strtoul(argv[1], &end1, 10) : 0;
    unsigned long refused = argc == 3 ? strtoul(argv[2], &end2, 10) : 0;
    if (argc != 3 || *end1 || *end2 || !segments) {
        fprintf(stderr, "usage: segment_pressure SEGMENTS(>=1) REFUSED\n");
        return 2;
    }
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.segment_size = 2 * MiB;
    c.capacity = (uint64_t)segments * MiB;
    c.single_thread = true;
    coop_pool *pool;
    if (coop_pool_create(&c, &pool) != COOP_OK) {
        fprintf(stderr, "segment_pressure: pool: %s\n", coop_last_error());
        return 1;
    }
    coop_status st;
    double t0 = now_ns();
    for (unsigned long i = 0; i < segments; i++)
        if (!coop_malloc(pool, MiB, 0, 0, &st)) {
            fprintf(stderr, "segment_pressure: filling: %s\n", coop_last_error());
            return 1;
        }
    double t1 = now_ns();
    for (unsigned long i = 0; i < refused; i++)
        if (coop_malloc(pool, 4 * MiB, 0, 0, &st) || st != COOP_ERR_NOMEM) {
            fprintf(stderr, "segment_pressure: a 4 MiB request did not fail for room\n");
            return 1;
        }
    double t2 = now_ns();
    printf("segments %lu: %.0f ns per growing malloc, %.0f ns per refused malloc\n", segments,
           (t1 - t0) / (double)segments, refused ? (t2 - t1) / (double)refused : 0.0);
    coop_pool_destroy(pool); /* frees the blocks with the segments */
    return 0;
}
