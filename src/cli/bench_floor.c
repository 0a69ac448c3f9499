/*
 * coop bench --floor: what the metadata accesses a malloc+free pair cannot
 * avoid cost at a live-block count, with no allocator around them.
 *
 * A skeleton pair over arrays sized as coop's metadata at L live blocks
 * (64-byte records for L live and L / 5 free blocks, as coop bench's steady
 * state holds; an address map of 16-byte slots, the power of two >= 4 L;
 * 19,456 bin roots, the bins sizes of 512 B .. 256 MiB fall in) does:
 *   free:   map slot -> the freed block's record -> a neighbour's record
 *   malloc: bin root -> best-fit record -> remainder's bin root -> record;
 *           a store to the new block's map slot
 * Each load is followed by SKELETON_WORK steps of arithmetic that depends on
 * it (a pair's bookkeeping: about 100 ns a pair when everything is in the
 * L1/L2 cache, as coop's own pair at 1k live blocks), and the next address
 * depends on the load, not on the arithmetic. Pairs are independent of each
 * other: how far the core overlaps one pair's misses with the next pair's is
 * up to the hardware, as for coop. Metadata is advised for huge pages as
 * coop's is (meta.c). The growth of this figure from 1k to 100k is a floor
 * for any allocator that reads those lines on each pair.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cli/bench_rng.h"
#include "cli/bench_floor.h"

#define SKELETON_WORK 20
#define SKELETON_PAIRS 200000
#define SKELETON_BINS 19456 /* 19 powers of two x 1024 sub-bins */
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct skel_record {
    uint64_t link, size, pad[6];
} skel_record;

typedef struct skel_slot {
    uint64_t key, record;
} skel_slot;

static uint64_t skel_rng = UINT64_C(88172645463325252);

static uint64_t skel_random(void)
{
    return bench_rng_next(&skel_rng);
}

static double skel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A huge-page aligned, advised buffer of bytes (rounded up), or NULL. */
static void *skel_buffer(size_t bytes)
{
    bytes = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, bytes);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

/* SKELETON_WORK dependent steps mixing v into x; the empty asm keeps the
 * compiler from folding the chain. */
static inline uint64_t work(uint64_t x, uint64_t v)
{
    x ^= v;
    for (int j = 0; j < SKELETON_WORK; j++) {
        x = x * UINT64_C(0x9E3779B97F4A7C15) + (x >> 29);
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* Best of five runs of SKELETON_PAIRS skeleton pairs, ns per pair; -1
 * without host memory. */
static double skeleton_ns(size_t live)
{
    size_t records = live + live / 5, slots = 1;
    while (slots < 4 * live)
        slots <<= 1;
    skel_record *rec = skel_buffer(records * sizeof *rec);
    skel_slot *map = skel_buffer(slots * sizeof *map);
    uint64_t *bins = skel_buffer(SKELETON_BINS * sizeof *bins);
    uint64_t *draws = malloc(3 * SKELETON_PAIRS * sizeof *draws);
    double best = -1;
    if (!rec || !map || !bins || !draws)
        goto out;
    for (size_t i = 0; i < records; i++)
        rec[i] = (skel_record){.link = skel_random() % records, .size = skel_random() % records};
    for (size_t i = 0; i < slots; i++)
        map[i] = (skel_slot){.key = i, .record = skel_random() % records};
    for (size_t i = 0; i < SKELETON_BINS; i++)
        bins[i] = skel_random() % records;
    for (size_t i = 0; i < 3 * SKELETON_PAIRS; i++)
        draws[i] = skel_random();
    uint64_t sink = 0;
    for (int run = 0; run < 5; run++) {
        double t0 = skel_now_ns();
        for (size_t i = 0; i < SKELETON_PAIRS; i++) {
            const uint64_t *d = &draws[3 * i];
            uint64_t x = d[0];
            /* free: slot -> record -> neighbour */
            const skel_slot *s = &map[x & (slots - 1)];
            x = work(x, s->record);
            const skel_record *b = &rec[s->record];
            x = work(x, b->link);
            x = work(x, rec[b->link].size);
            /* malloc: best fit, the remainder's bin, the new map slot */
            uint64_t root = bins[d[1] % SKELETON_BINS];
            x = work(x, root);
            const skel_record *fit = &rec[root];
            x = work(x, fit->size);
            uint64_t rest_root = bins[(d[2] + fit->size) % SKELETON_BINS];
            x = work(x, rest_root);
            x = work(x, rec[rest_root].size);
            map[(d[2] >> 20) & (slots - 1)].key = i;
            sink += x & 1;
        }
        double ns = (skel_now_ns() - t0) / SKELETON_PAIRS;
        if (best < 0 || ns < best)
            best = ns;
    }
    if (sink == UINT64_MAX) /* keeps the work live */
        best = -1;
out:
    free(rec);
    free(map);
    free(bins);
    free(draws);
    return best;
}

int bench_floor_run(const size_t *live, size_t num_live, bool json)
{
    if (!json)
        printf("%12s %14s %14s %20s\n", "live_blocks", "records_mb", "map_mb",
               "skeleton_ns_per_pair");
    for (size_t k = 0; k < num_live; k++) {
        size_t slots = 1;
        while (slots < 4 * live[k])
            slots <<= 1;
        double rec_mb = (double)(live[k] + live[k] / 5) * sizeof(skel_record) / 1e6;
        double map_mb = (double)slots * sizeof(skel_slot) / 1e6;
        double ns = skeleton_ns(live[k]);
        if (ns < 0) {
            fprintf(stderr, "coop bench: out of host memory for the skeleton at %zu live blocks\n",
                    live[k]);
            return 1;
        }
        if (json)
            printf("{\"live_blocks\": %zu, \"records_mb\": %.2f, \"map_mb\": %.2f, "
                   "\"skeleton_ns_per_pair\": %.1f}\n",
                   live[k], rec_mb, map_mb, ns);
        else
            printf("%12zu %14.2f %14.2f %20.1f\n", live[k], rec_mb, map_mb, ns);
    }
    return 0;
}
