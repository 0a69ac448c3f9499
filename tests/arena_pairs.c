/*
 * arena_pairs: coop bench's workload (sizes log-uniform 512 B .. MAX, a random
 * live block freed and a new one allocated per pair) run directly on the
 * arena over a fake VMM backend that reserves and maps nothing, so that
 * valgrind, which cannot reserve the bench's terabytes of address space,
 * can count the cache misses of a pair at 100k live blocks. A measuring
 * tool, built by make check (so that it keeps compiling), not a test. From a
 * built tree (docs/measured-host.md, "Speed"):
 *
 *   make check   # or: make tests/arena_pairs
 *   for p in 100000 300000; do
 *     valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=2097152,16,64 \
 *       --cachegrind-out-file=/tmp/cg.$p tests/arena_pairs 100000 $p 268435456
 *   done
 *   cg_diff /tmp/cg.100000 /tmp/cg.300000 > /tmp/cg.diff
 *   cg_annotate --show=D1mr,D1mw --sort=D1mr /tmp/cg.diff   # / 200000 = per pair
 *   cg_annotate --show=D1mr,D1mw --sort=D1mr --auto=yes /tmp/cg.300000   # by line
 *
 * D1 stands for the 2 MiB L2: cachegrind 3.19 replaces --LL by the L3 it
 * detects. Arguments: live blocks, timed pairs (after 2 x live warm-up
 * pairs), largest size in bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "arena.h"
#include "cli/bench_rng.h"

static uint64_t rng;

static uint64_t next_random(void)
{
    return bench_rng_next(&rng);
}

static double max_size;

/* A size as coop bench draws it, rounded up to 512 as coop_malloc does. */
static uint64_t draw_size(void)
{
    double u = bench_rng_unit(&rng);
    size_t s = (size_t)exp(log(512.0) + u * (log(max_size) - log(512.0)));
    return (s + 511) & ~(uint64_t)511;
}

static coop_status fake_reserve(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    (void)be, (void)size;
    *addr = (uintptr_t)1 << 44;
    return COOP_OK;
}

static coop_status fake_range(coop_backend *be, uintptr_t addr, uint64_t size)
{
    (void)be, (void)addr, (void)size;
    return COOP_OK;
}

static coop_status fake_unmap(coop_backend *be, uintptr_t addr, uint64_t size, uint64_t *unmapped)
{
    (void)be, (void)addr;
    *unmapped = size;
    return COOP_OK;
}

static coop_status fake_sync(coop_backend *be)
{
    (void)be;
    return COOP_OK;
}

static const coop_backend_ops fake_ops = {.reserve = fake_reserve,
                                          .release = fake_range,
                                          .map = fake_range,
                                          .unmap = fake_unmap,
                                          .synchronize = fake_sync};
static coop_backend fake = {.ops = &fake_ops,
                            .name = "fake",
                            .has_vmm = true,
                            .page_size = 2u << 20,
                            .device_memory = (uint64_t)1 << 43};

/* n pairs: free a random live block, allocate a new size in its place. */
__attribute__((noinline)) static void run_pairs(arena *a, uintptr_t *live_addr, size_t live,
                                                size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t v = next_random() % live;
        uint64_t size = draw_size();
        arena_release(a, arena_lookup_to_release(a, live_addr[v]), 0);
        arena_block *b;
        bool reclaimed;
        if (arena_alloc(a, size, 0, false, &b, &reclaimed) != COOP_OK) {
            fprintf(stderr, "arena_pairs: allocation failed\n");
            exit(1);
        }
        live_addr[v] = b->addr;
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: arena_pairs LIVE PAIRS MAX_SIZE\n");
        return 2;
    }
    size_t live = strtoul(argv[1], NULL, 10), pairs = strtoul(argv[2], NULL, 10);
    max_size = atof(argv[3]);
    if (live == 0 || max_size < 512) {
        fprintf(stderr, "arena_pairs: LIVE > 0 and MAX_SIZE >= 512 wanted\n");
        return 2;
    }
    rng = UINT64_C(0x9E3779B97F4A7C15) + live;
    meta_heap heap;
    meta_heap_init(&heap);
    arena a;
    arena_params p = {.vmm = true,
                      .page_size = 2u << 20,
                      .va_size = (uint64_t)1 << 43,
                      .capacity = (uint64_t)1 << 42,
                      .min_split = 512};
    if (arena_init(&a, &fake, &heap, &p) != COOP_OK)
        return 1;
    uintptr_t *live_addr = calloc(live, sizeof *live_addr);
    if (!live_addr)
        return 1;
    for (size_t i = 0; i < live; i++) {
        arena_block *b;
        bool reclaimed;
        if (arena_alloc(&a, draw_size(), 0, false, &b, &reclaimed) != COOP_OK)
            return 1;
        live_addr[i] = b->addr;
    }
    run_pairs(&a, live_addr, live, 2 * live + pairs);
    fprintf(stderr, "live %zu, free blocks %zu, records %zu, map slots %zu\n", live, a.index.count,
            a.records.live, a.map.mask + 1);
    arena_fini(&a);
    free(live_addr);
    meta_heap_fini(&heap);
    return 0;
}
