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
 *
 * The same skeleton also runs over two smaller layouts (32-byte records and
 * 8-byte slots; 16-byte records): the growth a more compact allocator could
 * at best reach on this machine. The table's growth column is each layout's
 * figure over its own at the first live count.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cli/bench_rng.h"
#include "cli/bench_floor.h"
#include "cli/cli_output.h"

#define SKELETON_WORK 20
#define SKELETON_PAIRS 200000
#define SKELETON_BINS 19456 /* 19 powers of two x 1024 sub-bins */
#define HUGE_PAGE ((size_t)2 << 20)

/* A metadata layout: bytes per block record and per address-map slot. A
 * record holds a link (another record's index) and a size in its first 16
 * bytes; a 16-byte slot a key and a record index as two words, an 8-byte
 * slot the same as two 32-bit halves. */
typedef struct skel_layout {
    const char *name;
    size_t record_bytes, slot_bytes;
} skel_layout;

/* coop's layout, and two more compact ones no design here reaches (a
 * best-fit block record with its free-index node, address-order links, size,
 * address and stream in 32 bytes would need 32-bit links and offsets): how
 * far from 1.5x would a smaller allocator be? */
static const skel_layout skel_layouts[] = {
    {"coop", 64, 16},
    {"compact", 32, 8},
    {"minimal", 16, 8},
};
#define SKEL_NUM_LAYOUTS (sizeof skel_layouts / sizeof skel_layouts[0])

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

/* The record at index i of a table of rb-byte records; its link and size. */
static inline uint64_t *skel_record(unsigned char *rec, size_t rb, uint64_t i)
{
    return (uint64_t *)(rec + i * rb);
}

/* The record index in slot i of a table of sb-byte slots, and a store of
 * key to that slot. */
static inline uint64_t skel_slot_record(const unsigned char *map, size_t sb, uint64_t i)
{
    if (sb == 16)
        return ((const uint64_t *)(map + i * 16))[1];
    return ((const uint32_t *)(map + i * 8))[1];
}

static inline void skel_slot_set(unsigned char *map, size_t sb, uint64_t i, uint64_t key,
                                 uint64_t record)
{
    if (sb == 16) {
        uint64_t *s = (uint64_t *)(map + i * 16);
        s[0] = key;
        s[1] = record;
    } else {
        uint32_t *s = (uint32_t *)(map + i * 8);
        s[0] = (uint32_t)key;
        s[1] = (uint32_t)record;
    }
}

/* n skeleton pairs over the tables (rb-byte records, sb-byte slots, slots a
 * power of two), their draws three per pair; a value that depends on every
 * load. Inlined into a call per layout with constant rb and sb, so the
 * offsets are shifts, as in an allocator built for that layout. */
static inline __attribute__((always_inline)) uint64_t skel_pairs(unsigned char *rec, size_t rb,
                                                                 unsigned char *map, size_t sb,
                                                                 size_t slots, const uint64_t *bins,
                                                                 const uint64_t *draws, size_t n)
{
    uint64_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *d = &draws[3 * i];
        uint64_t x = d[0];
        /* free: slot -> record -> neighbour */
        uint64_t r = skel_slot_record(map, sb, x & (slots - 1));
        x = work(x, r);
        uint64_t link = skel_record(rec, rb, r)[0];
        x = work(x, link);
        x = work(x, skel_record(rec, rb, link)[1]);
        /* malloc: best fit, the remainder's bin, the new map slot */
        uint64_t root = bins[d[1] % SKELETON_BINS];
        x = work(x, root);
        uint64_t fit_size = skel_record(rec, rb, root)[1];
        x = work(x, fit_size);
        uint64_t rest_root = bins[(d[2] + fit_size) % SKELETON_BINS];
        x = work(x, rest_root);
        x = work(x, skel_record(rec, rb, rest_root)[1]);
        skel_slot_set(map, sb, (d[2] >> 20) & (slots - 1), i, r);
        sink += x & 1;
    }
    return sink;
}

static uint64_t skel_run(const skel_layout *l, unsigned char *rec, unsigned char *map, size_t slots,
                         const uint64_t *bins, const uint64_t *draws, size_t n)
{
    if (l->record_bytes == 64)
        return skel_pairs(rec, 64, map, 16, slots, bins, draws, n);
    if (l->record_bytes == 32)
        return skel_pairs(rec, 32, map, 8, slots, bins, draws, n);
    return skel_pairs(rec, 16, map, 8, slots, bins, draws, n);
}

/* The address map's slots at a live count: the power of two >= 4 live (its
 * load kept at or below 1/4, as coop's). */
static size_t skel_slots(size_t live)
{
    size_t slots = 1;
    while (slots < 4 * live)
        slots <<= 1;
    return slots;
}

/* Best of five runs of SKELETON_PAIRS skeleton pairs in layout l, ns per
 * pair; -1 without host memory. */
static double skeleton_ns(size_t live, const skel_layout *l)
{
    size_t records = live + live / 5, slots = skel_slots(live);
    unsigned char *rec = skel_buffer(records * l->record_bytes);
    unsigned char *map = skel_buffer(slots * l->slot_bytes);
    uint64_t *bins = skel_buffer(SKELETON_BINS * sizeof *bins);
    uint64_t *draws = malloc(3 * SKELETON_PAIRS * sizeof *draws);
    double best = -1;
    if (!rec || !map || !bins || !draws)
        goto out;
    memset(rec, 0, records * l->record_bytes);
    for (size_t i = 0; i < records; i++) {
        uint64_t *r = skel_record(rec, l->record_bytes, i);
        r[0] = skel_random() % records;
        r[1] = skel_random() % records;
    }
    for (size_t i = 0; i < slots; i++)
        skel_slot_set(map, l->slot_bytes, i, i, skel_random() % records);
    for (size_t i = 0; i < SKELETON_BINS; i++)
        bins[i] = skel_random() % records;
    for (size_t i = 0; i < 3 * SKELETON_PAIRS; i++)
        draws[i] = skel_random();
    uint64_t sink = 0;
    for (int run = 0; run < 5; run++) {
        double t0 = skel_now_ns();
        sink += skel_run(l, rec, map, slots, bins, draws, SKELETON_PAIRS);
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
        printf("%12s %8s %8s %8s %11s %8s %20s %8s\n", "live_blocks", "layout", "record_b",
               "slot_b", "records_mb", "map_mb", "skeleton_ns_per_pair", "growth");
    for (size_t li = 0; li < SKEL_NUM_LAYOUTS; li++) {
        const skel_layout *l = &skel_layouts[li];
        double first = -1;
        for (size_t k = 0; k < num_live; k++) {
            double rec_mb = (double)(live[k] + live[k] / 5) * l->record_bytes / 1e6;
            double map_mb = (double)skel_slots(live[k]) * l->slot_bytes / 1e6;
            double ns = skeleton_ns(live[k], l);
            if (ns < 0) {
                fprintf(stderr,
                        "coop bench: out of host memory for the skeleton at %zu live blocks\n",
                        live[k]);
                return 1;
            }
            if (first < 0)
                first = ns;
            if (json)
                printf("{\"live_blocks\": %zu, \"layout\": \"%s\", \"record_bytes\": %zu, "
                       "\"slot_bytes\": %zu, \"records_mb\": %.2f, \"map_mb\": %.2f, "
                       "\"skeleton_ns_per_pair\": %.1f}\n",
                       live[k], l->name, l->record_bytes, l->slot_bytes, rec_mb, map_mb, ns);
            else
                printf("%12zu %8s %8zu %8zu %11.2f %8.2f %20.1f %7.2fx\n", live[k], l->name,
                       l->record_bytes, l->slot_bytes, rec_mb, map_mb, ns, ns / first);
            if (!cli_stdout_ok()) /* a lost row stops the runs; said at exit */
                return 1;
        }
    }
    return 0;
}
