/*
 * coop bench: median time of one malloc+free pair on the host backend, for
 * sizes log-uniform in [512 B, 256 MiB], in the steady state of 1k, 10k and
 * 100k live blocks, against jemalloc's mallocx/dallocx on the same sizes in
 * the same run.
 *
 * Each pair frees a random live block and allocates a new random size in its
 * place, so the live count stays constant. Sizes and victims are drawn
 * before timing (identical streams for both allocators). Pairs are timed in
 * batches of 1000 and the median batch is reported, which discards batches
 * hit by interrupts or page-table work.
 *
 * jemalloc gets a private arena whose extent hooks hand out MAP_NORESERVE
 * read-write address space: jemalloc writes its own metadata into extents
 * (metadata_use_hooks is on by default in 5.3), so PROT_NONE would fault; we
 * never touch the blocks, so the untouched pages cost nothing. It also gets
 * an explicit tcache (jemalloc's default setup; it caches sizes up to
 * opt.tcache_max, 32 KiB in 5.3), as docs/measured-host.md ("Speed") says.
 * Its footprint is counted from what the hooks hand out (retained extents
 * included); coop's is its reserved (mapped) bytes. The table's ratio is
 * coop's time over jemalloc's.
 */
#include <getopt.h>
#include <jemalloc/jemalloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cli/bench_median.h"
#include "cli/bench_rng.h"
#include "cli/bench_floor.h"
#include "cli/cli_getopt.h"
#include "cli/cli_list.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "coop.h"
#include "trace/text_number.h"

#define BATCH 1000
#define MIN_SIZE 512.0
#define MAX_SIZE (256.0 * 1024 * 1024)
#define MAX_LIVE_COUNTS 8 /* --live takes at most this many counts */

/* The most the capacity reaches, automatic or --capacity-gib: 32 TiB, so
 * that its address space (twice that) fits a 47-bit user address space
 * (the largest mapping measured was 85 TiB, 70 TiB under ASan). */
#define AUTO_CAPACITY_MAX (UINT64_C(32) << 40)

/* Options a run uses, to refuse those it would ignore (bench_opts.given). */
enum {
    GIVEN_LIVE = 1,
    GIVEN_BATCHES = 2,
    GIVEN_SEED = 4,
    GIVEN_ONLY = 8,
    GIVEN_CAPACITY = 16,
};

typedef struct bench_opts {
    unsigned given; /* GIVEN_* of the options on the command line */
    bool json;
    bool latency; /* --latency: the memory-latency table instead */
    bool floor;   /* --floor: the skeleton pair instead (bench_floor.c) */
    bool run_coop, run_jemalloc;
    uint64_t capacity; /* 0: from the live count */
    size_t batches;
    uint64_t seed;
    size_t live[MAX_LIVE_COUNTS];
    size_t num_live;
} bench_opts;

/* ---- Workload: sizes and victims drawn up front ---- */

static uint64_t rng;

static uint64_t next_random(void)
{
    return bench_rng_next(&rng);
}

static double uniform01(void)
{
    return bench_rng_unit(&rng);
}

static size_t log_uniform_size(void)
{
    size_t size = (size_t)exp(log(MIN_SIZE) + uniform01() * (log(MAX_SIZE) - log(MIN_SIZE)));
    /* a draw of exactly 0 gives exp(log(512)), which rounds to 511.99...:
     * never below the documented 512 */
    return size < (size_t)MIN_SIZE ? (size_t)MIN_SIZE : size;
}

typedef struct workload {
    size_t live;
    size_t *initial; /* live sizes */
    size_t pairs;
    size_t *victim; /* slot freed by pair i */
    size_t *size;   /* size allocated by pair i */
} workload;

static void workload_free(workload *w)
{
    free(w->initial);
    free(w->victim);
    free(w->size);
}

/* false: out of host memory, and nothing is left allocated. */
static bool workload_make(workload *w, size_t live, size_t pairs)
{
    w->live = live;
    w->pairs = pairs;
    w->initial = malloc(live * sizeof *w->initial);
    w->victim = malloc(pairs * sizeof *w->victim);
    w->size = malloc(pairs * sizeof *w->size);
    if (!w->initial || !w->victim || !w->size) {
        workload_free(w);
        return false;
    }
    for (size_t i = 0; i < live; i++)
        w->initial[i] = log_uniform_size();
    for (size_t i = 0; i < pairs; i++) {
        w->victim[i] = (size_t)(next_random() % live);
        w->size[i] = log_uniform_size();
    }
    return true;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The allocator under test, as two calls. */
typedef struct allocator {
    void *(*alloc)(void *ctx, size_t size);
    void (*release)(void *ctx, void *ptr, size_t size);
    uint64_t (*footprint)(void *ctx); /* device bytes held now */
    void *ctx;
} allocator;

/* A live block as the harness tracks it: pointer and size side by side, so
 * picking a random victim costs the harness one cache miss, not two. */
typedef struct live_slot {
    void *ptr;
    size_t size;
} live_slot;

/* One malloc+free pair: frees the victim's block and allocates pair i's size
 * in its slot. Also starts loading the next pair's victim slot: that is the
 * harness's own bookkeeping (the allocator touches none of it), and its
 * cache miss would otherwise be charged to the allocator at large live
 * counts. False if the allocation failed. */
static inline bool one_pair(const allocator *a, const workload *w, live_slot *slot, size_t i)
{
    live_slot *s = &slot[w->victim[i]];
    if (i + 1 < w->pairs)
        __builtin_prefetch(&slot[w->victim[i + 1]], 1);
    a->release(a->ctx, s->ptr, s->size);
    s->size = w->size[i];
    s->ptr = a->alloc(a->ctx, s->size);
    return s->ptr != NULL;
}

/* Fills the live set, warms up with the pairs before the timed ones, then
 * times batches of BATCH pairs (the clock is read only around each batch,
 * no per-pair bookkeeping inside). Returns the median ns per pair, -1 when
 * the allocator failed, or RUN_NO_HOST_MEMORY when the harness had no host
 * memory for its own arrays (an allocator failing with an empty reason was
 * said before); *footprint gets the allocator's footprint at
 * the end of the steady state, *live_bytes the bytes asked for by the live
 * blocks then. */
#define RUN_NO_HOST_MEMORY (-2.0)

static double run_pairs(const allocator *a, const workload *w, size_t batches, uint64_t *footprint,
                        uint64_t *live_bytes)
{
    live_slot *slot = calloc(w->live, sizeof *slot);
    double *batch_ns = malloc(batches * sizeof *batch_ns);
    double result = RUN_NO_HOST_MEMORY;
    if (!slot || !batch_ns)
        goto out;
    result = -1;
    for (size_t i = 0; i < w->live; i++) {
        slot[i].size = w->initial[i];
        if (!(slot[i].ptr = a->alloc(a->ctx, slot[i].size)))
            goto out;
    }
    size_t warmup = w->pairs - batches * BATCH;
    for (size_t i = 0; i < warmup; i++)
        if (!one_pair(a, w, slot, i))
            goto out;
    for (size_t b = 0; b < batches; b++) {
        size_t first = warmup + b * BATCH;
        double t0 = now_ns();
        for (size_t i = first; i < first + BATCH; i++)
            if (!one_pair(a, w, slot, i))
                goto out;
        batch_ns[b] = now_ns() - t0;
    }
    result = bench_median(batch_ns, batches) / BATCH;
    *footprint = a->footprint(a->ctx);
    *live_bytes = 0;
    for (size_t i = 0; i < w->live; i++)
        *live_bytes += slot[i].size;
out:
    for (size_t i = 0; slot && i < w->live; i++)
        if (slot[i].ptr)
            a->release(a->ctx, slot[i].ptr, slot[i].size);
    free(slot);
    free(batch_ns);
    return result;
}

/* ---- coop ---- */

static void *coop_alloc_cb(void *ctx, size_t size)
{
    return coop_malloc(ctx, size, 0, 0, NULL);
}

static void coop_release_cb(void *ctx, void *ptr, size_t size)
{
    (void)size;
    coop_free(ctx, ptr);
}

static uint64_t coop_footprint_cb(void *ctx)
{
    coop_stats s;
    coop_get_stats(ctx, &s);
    return (uint64_t)s.reserved_bytes.current;
}

/* ---- jemalloc peer: a private arena over NORESERVE address space ---- */

static uint64_t je_mapped; /* bytes the hooks handed out and did not get back */

static void *hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                        bool *zero, bool *commit, unsigned arena_ind)
{
    (void)h;
    (void)arena_ind;
    size_t len = size + alignment;
    char *p = mmap(new_addr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t start = (uintptr_t)p, aligned = (start + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (new_addr && aligned != (uintptr_t)new_addr) {
        munmap(p, len);
        return NULL;
    }
    if (aligned > start)
        munmap(p, aligned - start);
    if (start + len > aligned + size)
        munmap((void *)(aligned + size), start + len - (aligned + size));
    *zero = true;
    *commit = true;
    je_mapped += size;
    return (void *)aligned;
}

/* Opting out of dalloc makes jemalloc retain the range for reuse, as its
 * default hooks do on Linux (opt.retain): no munmap / mmap churn. */
static bool hook_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
                        unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)arena_ind;
    return true;
}

static void hook_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
                         unsigned arena_ind)
{
    (void)h, (void)committed, (void)arena_ind;
    munmap(addr, size);
    je_mapped -= size;
}

/* Split and merge are plain bookkeeping for anonymous mappings. */
static bool hook_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
                       bool committed, unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed;
    (void)arena_ind;
    return false;
}

static bool hook_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
                       bool committed, unsigned arena_ind)
{
    (void)h, (void)addr_a, (void)size_a, (void)addr_b, (void)size_b, (void)committed;
    (void)arena_ind;
    return false;
}

static extent_hooks_t noreserve_hooks = {
    .alloc = hook_alloc,
    .dalloc = hook_dalloc,
    .destroy = hook_destroy,
    .split = hook_split,
    .merge = hook_merge,
};

typedef struct je_peer {
    int flags;
    unsigned arena, tcache;
} je_peer;

static bool je_peer_create(je_peer *p)
{
    extent_hooks_t *hooks = &noreserve_hooks;
    size_t len = sizeof p->arena;
    if (mallctl("arenas.create", &p->arena, &len, &hooks, sizeof hooks))
        return false;
    len = sizeof p->tcache;
    if (mallctl("tcache.create", &p->tcache, &len, NULL, 0))
        return false;
    p->flags = MALLOCX_ARENA(p->arena) | MALLOCX_TCACHE(p->tcache);
    return true;
}

static void je_peer_destroy(je_peer *p)
{
    mallctl("tcache.destroy", NULL, NULL, &p->tcache, sizeof p->tcache);
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", p->arena);
    mallctl(name, NULL, NULL, NULL, 0);
}

static void *je_alloc_cb(void *ctx, size_t size)
{
    return mallocx(size, ((je_peer *)ctx)->flags);
}

/* dallocx, not sdallocx: coop_free is not told the size either, and the
 * issue and README.md name dallocx (sdallocx lets jemalloc take the size
 * class from the size instead of looking the pointer up). */
static void je_release_cb(void *ctx, void *ptr, size_t size)
{
    (void)size;
    dallocx(ptr, ((je_peer *)ctx)->flags);
}

static uint64_t je_footprint_cb(void *ctx)
{
    (void)ctx;
    return je_mapped;
}

/* ---- Memory latency: what a cache miss on metadata costs here ---- */

/* Nanoseconds per dependent load over a random cyclic permutation of the
 * cache lines of a bytes-sized buffer: each load's address comes from the
 * previous one, so nothing overlaps (as in a tree walk or a chain of
 * block -> neighbour -> index node). -1 without host memory. */
static double dependent_load_ns(size_t bytes)
{
    size_t lines = bytes / 64;
    size_t *buf = aligned_alloc(64, lines * 64), *order = malloc(lines * sizeof *order);
    double ns = -1;
    if (!buf || !order)
        goto out;
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = (size_t)(next_random() % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        buf[order[i] * 8] = order[(i + 1) % lines] * 8;
    size_t at = 0, loads = 4 * 1000 * 1000;
    for (size_t i = 0; i < lines; i++) /* warm the caches and the TLB */
        at = buf[at];
    double t0 = now_ns();
    for (size_t i = 0; i < loads; i++)
        at = buf[at];
    ns = (now_ns() - t0) / (double)loads;
    if (at == SIZE_MAX) /* keeps the chain live */
        ns = -1;
out:
    free(buf);
    free(order);
    return ns;
}

static int run_latency(const bench_opts *o)
{
    rng = bench_rng_seed(o->seed * UINT64_C(0x9E3779B97F4A7C15));
    if (!o->json)
        printf("%12s %16s\n", "buffer_bytes", "ns_per_load");
    for (size_t kib = 256; kib <= 64 * 1024; kib *= 2) {
        double ns = dependent_load_ns(kib * 1024);
        if (ns < 0) {
            fprintf(stderr, "coop bench: out of host memory for a %zu KiB buffer\n", kib);
            return 1;
        }
        if (o->json)
            printf("{\"buffer_bytes\": %zu, \"ns_per_load\": %.2f}\n", kib * 1024, ns);
        else
            printf("%12zu %16.1f\n", kib * 1024, ns);
        if (!cli_stdout_ok())
            return 1;
    }
    return 0;
}

/* ---- Command ---- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: coop bench [--json] [--batches N] [--live N[,N...]] [--seed N]\n"
            "                  [--only coop|jemalloc] [--capacity-gib N]\n"
            "       coop bench --latency [--json] [--seed N]\n"
            "       coop bench --floor [--json] [--live N[,N...]]\n"
            "\n"
            "Times malloc+free pairs (sizes log-uniform 512 B .. 256 MiB) on coop's host\n"
            "backend and on jemalloc (mallocx/dallocx, private arena) in the steady state\n"
            "of N live blocks (default 1000,10000,100000). Reports the median of batches\n"
            "of %d pairs (default 200 batches).\n"
            "\n"
            "  --json       one JSON object per live count: live_blocks, coop_ns_per_pair,\n"
            "               jemalloc_ns_per_pair, and each one's footprint over the live\n"
            "               bytes at the end (coop: mapped pages; jemalloc: extents held)\n"
            "  --batches N  timed batches per live count, 1..100000 (default 200); each\n"
            "               batch is %d pairs per allocator and 16 KB of workload in\n"
            "               host memory per live count: 10000 batches took about 10 s\n"
            "               and 160 MB at 1000 live blocks on a 2-core VM, 100000 about\n"
            "               ten times that\n"
            "  --live LIST  comma-separated live-block counts (at most 8), each of whose\n"
            "               expected live bytes fit the capacity (up to about 1.7 million)\n"
            "  --seed N     random seed (default 1)\n"
            "  --only WHICH time only coop or only jemalloc (profiling; the other\n"
            "               column reads 0)\n"
            "  --capacity-gib N  simulated device size, 1 to 32768 (default: 8 x the\n"
            "               expected live bytes, from 1 TiB to 32 TiB, which holds about\n"
            "               1.6 million live blocks; valgrind needs 16 or less, enough for\n"
            "               about 600 live blocks: the mean size is about 20 MB)\n"
            "  --latency    instead: nanoseconds per dependent load over random cache\n"
            "               lines of buffers of 256 KiB .. 64 MiB (what a cache miss on\n"
            "               allocator metadata of that size costs on this machine)\n"
            "  --floor      instead: ns per skeleton pair that only makes the metadata\n"
            "               accesses a pair cannot avoid (map slot, freed record, a\n"
            "               neighbour, two bins' records) over arrays sized as coop's\n"
            "               metadata at each live count, with bookkeeping work after\n"
            "               each load; its growth is a floor for coop's. Also over\n"
            "               32- and 16-byte records with 8-byte slots: the floor\n"
            "               of a more compact allocator\n"
            "  -h, --help   this text\n"
            "\n"
            "Columns: live_blocks; coop_ns_per_pair, jemalloc_ns_per_pair, the median ns of\n"
            "one malloc+free pair; ratio, coop's over jemalloc's (below 1: coop is faster);\n"
            "coop_footprint, jemalloc_footprint, bytes held at the end over the live bytes\n"
            "(1: nothing held beyond them). --latency: buffer_bytes, ns_per_load. --floor:\n"
            "layout (coop's 64-byte records and 16-byte slots, compact 32 and 8, minimal\n"
            "16 and 8), record_b, slot_b, records_mb and map_mb (the arrays' sizes),\n"
            "skeleton_ns_per_pair, and growth over the layout's first live count. Lower is\n"
            "better in the timings, ratio, footprints and growth. Exit status: 0 ok, 1 the\n"
            "run failed (host memory, an allocation) or the results could not be written,\n"
            "2 usage error.\n",
            BATCH, BATCH);
}

/* The bytes live blocks hold on average: live x the mean of the log-uniform
 * sizes, about 20.4 MB. */
static double expected_live_bytes(size_t live)
{
    return (MAX_SIZE - MIN_SIZE) / (log(MAX_SIZE) - log(MIN_SIZE)) * (double)live;
}

/* Whether every --live count's expected live bytes fit the capacity: coop's
 * pool's (--capacity-gib, else the automatic one, at most 32 TiB) and, for
 * jemalloc, the same 32 TiB of address space. Beyond, the run could only
 * run out at run time (exit 1 after the table's header: --live 2000000
 * after 3 s, --live 100 --capacity-gib 1 at once; jemalloc at --live
 * 5000000 mapped for minutes). Below, a capacity close to the expected
 * bytes can still run out (fragmentation, the draws): an allocation failure
 * with the pool's numbers. Says which count does not fit. */
static bool live_fits_capacity(const bench_opts *o)
{
    bool given = o->run_coop && o->capacity;
    uint64_t capacity = given ? o->capacity : AUTO_CAPACITY_MAX;
    for (size_t k = 0; k < o->num_live; k++) {
        double bytes = expected_live_bytes(o->live[k]);
        if (bytes <= (double)capacity)
            continue;
        bool tib = bytes >= (double)(UINT64_C(1) << 40);
        char why[64];
        if (given)
            snprintf(why, sizeof why, "--capacity-gib %llu", (unsigned long long)(capacity >> 30));
        else
            snprintf(why, sizeof why,
                     "the most, for coop's pool and jemalloc's address space alike");
        fprintf(stderr,
                "coop bench: --live %zu expects about %.1f %s live (blocks of 20.4 MB on "
                "average), more than the capacity of %llu %s (%s)\n",
                o->live[k], bytes / (tib ? 1099511627776.0 : 1073741824.0), tib ? "TiB" : "GiB",
                (unsigned long long)(capacity >> (given ? 30 : 40)), given ? "GiB" : "TiB", why);
        return false;
    }
    return true;
}

/* A count from 1 to max, the whole field (decimal or 0x hex): strtoull took
 * leading spaces and signs, and wrapped "-18446744073709551615" to 1. */
static bool parse_count(const char *s, uint64_t max, uint64_t *out)
{
    return text_parse_u64(s, out) == TEXT_NUMBER_OK && *out >= 1 && *out <= max;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.batches = 200,
                      .seed = 1,
                      .live = {1000, 10000, 100000},
                      .num_live = 3,
                      .run_coop = true,
                      .run_jemalloc = true};
    /* getopt_long, as the other commands: --opt=value, "--" and the same
     * messages for an unknown option or a missing value */
    static const struct option longopts[] = {
        {"json", no_argument, 0, 'j'},          {"latency", no_argument, 0, 'L'},
        {"floor", no_argument, 0, 'F'},         {"only", required_argument, 0, 'o'},
        {"batches", required_argument, 0, 'b'}, {"capacity-gib", required_argument, 0, 'c'},
        {"seed", required_argument, 0, 's'},    {"live", required_argument, 0, 'l'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    optind = 1;
    opterr = 0; /* getopt would name the program "bench": the messages are ours */
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'j':
            o->json = true;
            break;
        case 'L':
            o->latency = true;
            break;
        case 'F':
            o->floor = true;
            break;
        case 'o':
            o->given |= GIVEN_ONLY;
            o->run_coop = !strcmp(optarg, "coop");
            o->run_jemalloc = !strcmp(optarg, "jemalloc");
            if (!o->run_coop && !o->run_jemalloc) {
                fprintf(stderr, "coop bench: --only wants coop or jemalloc, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b': {
            o->given |= GIVEN_BATCHES;
            uint64_t n;
            if (!parse_count(optarg, 100000, &n)) {
                fprintf(stderr, "coop bench: --batches wants 1..100000, got '%s'\n", optarg);
                return 2;
            }
            o->batches = (size_t)n;
            break;
        }
        case 'c': {
            o->given |= GIVEN_CAPACITY;
            uint64_t n;
            /* at most AUTO_CAPACITY_MAX: the pool reserves twice its
             * capacity (pool_config), and 32769 to 1048576 GiB passed here
             * to fail as "cannot reserve" (exit 1) */
            if (!parse_count(optarg, AUTO_CAPACITY_MAX >> 30, &n)) {
                fprintf(stderr,
                        "coop bench: --capacity-gib wants 1..32768 (coop's pool reserves twice "
                        "the capacity of address space, and a process has 128 TiB), got '%s'\n",
                        optarg);
                return 2;
            }
            o->capacity = n << 30;
            break;
        }
        case 's':
            o->given |= GIVEN_SEED;
            /* whole field, decimal or 0x hex, below 2^64: strtoull took ""
             * as 0, wrapped -1 and saturated overflow without a word */
            if (text_parse_u64(optarg, &o->seed) != TEXT_NUMBER_OK) {
                fprintf(stderr,
                        "coop bench: --seed wants a number from 0 to 2^64-1 (decimal or 0x "
                        "hex), got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'l': {
            o->given |= GIVEN_LIVE;
            char *items[MAX_LIVE_COUNTS];
            int n = cli_split_list(optarg, items, MAX_LIVE_COUNTS, "coop bench", "--live");
            if (n < 0)
                return 2;
            o->num_live = 0;
            for (int k = 0; k < n; k++) {
                uint64_t v;
                if (!parse_count(items[k], 10000000, &v)) {
                    fprintf(stderr,
                            "coop bench: --live wants counts 1..10^7 like 1000,10000, got '%s'\n",
                            items[k]);
                    return 2;
                }
                o->live[o->num_live++] = (size_t)v;
            }
            break;
        }
        case ':':
            cli_getopt_error("coop bench", c, argv, longopts);
            usage(stderr);
            return 2;
        default:
            cli_getopt_error("coop bench", c, argv, longopts);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coop bench: takes no arguments, got '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    /* --latency and --floor are other runs than the pairs: each takes only
     * some options, and an ignored one would have been dropped silently */
    static const struct {
        unsigned flag;
        const char *name;
    } names[] = {{GIVEN_LIVE, "--live"},
                 {GIVEN_BATCHES, "--batches"},
                 {GIVEN_SEED, "--seed"},
                 {GIVEN_ONLY, "--only"},
                 {GIVEN_CAPACITY, "--capacity-gib"}};
    if (o->latency && o->floor) {
        fprintf(stderr, "coop bench: --latency and --floor are two different runs: give one\n");
        return 2;
    }
    /* the capacity sizes coop's pool: jemalloc alone has none to size */
    if (!o->latency && !o->floor && (o->given & GIVEN_CAPACITY) && !o->run_coop) {
        fprintf(stderr, "coop bench: --capacity-gib sizes coop's pool, and --only jemalloc runs "
                        "none\n");
        return 2;
    }
    unsigned takes = o->latency ? GIVEN_SEED : o->floor ? GIVEN_LIVE : ~0u;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (o->given & names[k].flag & ~takes) {
            fprintf(stderr, "coop bench: %s does not take %s\n",
                    o->latency ? "--latency" : "--floor", names[k].name);
            return 2;
        }
    if (!o->latency && !o->floor && !live_fits_capacity(o))
        return 2;
    return -1;
}

/* The capacity without --capacity-gib: 8 x the expected live bytes (mean
 * size ~20.4 MB), at least 1 TiB and at most AUTO_CAPACITY_MAX, whose 2x of
 * address space fits x86-64's 128 TiB of user space (8 x beyond ~430k live
 * blocks did not: 'cannot reserve'). */
static uint64_t auto_capacity(size_t live)
{
    uint64_t cap = (uint64_t)(8.0 * expected_live_bytes(live));
    if (cap < (UINT64_C(1) << 40))
        return UINT64_C(1) << 40;
    return cap > AUTO_CAPACITY_MAX ? AUTO_CAPACITY_MAX : cap;
}

/* The pool configuration of the run at `live` blocks. */
static void pool_config(const bench_opts *o, size_t live, coop_config *c)
{
    coop_config_default(c);
    c->capacity = o->capacity ? o->capacity : auto_capacity(live);
    c->va_size = 2 * c->capacity;
}

/* Creates and destroys each run's pool before anything is printed, so that
 * a capacity this machine cannot reserve (a smaller address space than
 * x86-64's 128 TiB, as --capacity-gib 1048576 was before it was refused) is
 * one error line, not a table header and then the error. */
static bool pools_can_be_made(const bench_opts *o)
{
    for (size_t k = 0; k < o->num_live; k++) {
        coop_config c;
        pool_config(o, o->live[k], &c);
        coop_pool *pool;
        if (coop_pool_create(&c, &pool) != COOP_OK) {
            fprintf(stderr, "coop bench: %zu live blocks: %s\n", o->live[k], coop_last_error());
            return false;
        }
        coop_pool_destroy(pool);
    }
    return true;
}

/* jemalloc's first timed run in a process measured slower than a repeat on
 * a fresh private arena, while coop's first run matches its repeats:
 * process-wide set-up (its base allocator, the tcache's bins) is charged to
 * whichever run comes first. Alone (--only jemalloc --live 1000,1000,1000,
 * 2026-11-27) 478-491 ns first, 435-459 after; in the default run, where
 * coop's run comes first and warms part of it, 395-412 first against
 * 383-394. An untimed run of the same kind beforehand takes that cost off
 * the figures: after one of the default 200 batches the first run was
 * 392-405 against 381-401 (one of 20 batches left most of it). Returns
 * false, said, if it could not run (host memory running out was said as
 * the warm-up failing). */
static bool jemalloc_warm_process(void)
{
    enum { WARM_LIVE = 1000, WARM_BATCHES = 200 };
    workload w;
    double ns = RUN_NO_HOST_MEMORY;
    if (!workload_make(&w, WARM_LIVE, WARM_BATCHES * BATCH + 20000)) {
        fprintf(stderr, "coop bench: out of host memory for jemalloc's warm-up workload\n");
        return false;
    }
    je_peer jp;
    if (je_peer_create(&jp)) {
        allocator ja = {je_alloc_cb, je_release_cb, je_footprint_cb, &jp};
        uint64_t footprint, live_bytes;
        ns = run_pairs(&ja, &w, WARM_BATCHES, &footprint, &live_bytes);
        je_peer_destroy(&jp);
    } else {
        ns = -1;
    }
    workload_free(&w);
    if (ns == RUN_NO_HOST_MEMORY)
        fprintf(stderr, "coop bench: out of host memory for jemalloc's warm-up run\n");
    else if (ns < 0)
        fprintf(stderr, "coop bench: jemalloc's untimed warm-up run failed\n");
    return ns >= 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (o.latency)
        return run_latency(&o);
    if (o.floor)
        return bench_floor_run(o.live, o.num_live, o.json);
    /* Before the first timed run; its draws come from a seed of their own,
     * so the timed workloads are the same with or without it. */
    if (o.run_coop && !pools_can_be_made(&o))
        return 1;
    rng = bench_rng_seed(~o.seed);
    if (o.run_jemalloc && !jemalloc_warm_process())
        return 1;
    if (!o.json)
        printf("%12s %16s %20s %8s %14s %18s\n", "live_blocks", "coop_ns_per_pair",
               "jemalloc_ns_per_pair", "ratio", "coop_footprint", "jemalloc_footprint");
    for (size_t k = 0; k < o.num_live; k++) {
        size_t live = o.live[k];
        rng = bench_rng_seed(o.seed * UINT64_C(0x9E3779B97F4A7C15) + live);
        workload w;
        /* Warm-up: at least one replacement per live block, then the timed pairs. */
        size_t timed = o.batches * BATCH;
        if (!workload_make(&w, live, timed + (live > 20000 ? live : 20000))) {
            fprintf(stderr, "coop bench: out of host memory for the workload\n");
            return 1;
        }
        double coop_ns = 0, je_ns = 0;
        uint64_t coop_bytes = 0, je_bytes = 0, live_bytes = 0;
        coop_config c;
        pool_config(&o, live, &c);
        coop_pool *pool;
        if (o.run_coop) {
            if (coop_pool_create(&c, &pool) != COOP_OK) {
                fprintf(stderr, "coop bench: %s\n", coop_last_error());
                workload_free(&w);
                return 1;
            }
            allocator ca = {coop_alloc_cb, coop_release_cb, coop_footprint_cb, pool};
            coop_ns = run_pairs(&ca, &w, o.batches, &coop_bytes, &live_bytes);
            coop_pool_destroy(pool);
        }
        je_peer jp;
        if (o.run_jemalloc) {
            je_ns = -1;
            if (je_peer_create(&jp)) {
                allocator ja = {je_alloc_cb, je_release_cb, je_footprint_cb, &jp};
                je_ns = run_pairs(&ja, &w, o.batches, &je_bytes, &live_bytes);
                je_peer_destroy(&jp);
            }
        }
        workload_free(&w);
        if (coop_ns == RUN_NO_HOST_MEMORY || je_ns == RUN_NO_HOST_MEMORY) {
            fprintf(stderr, "coop bench: out of host memory for the runs at %zu live blocks\n",
                    live);
            return 1;
        }
        if (coop_ns < 0 || je_ns < 0) {
            fprintf(stderr, "coop bench: an allocation failed at %zu live blocks (%s)\n", live,
                    coop_ns < 0 ? coop_last_error() : "jemalloc");
            return 1;
        }
        /* Footprint over the bytes the live blocks asked for, at the end. */
        double coop_fp = live_bytes ? (double)coop_bytes / (double)live_bytes : 0;
        double je_fp = live_bytes ? (double)je_bytes / (double)live_bytes : 0;
        if (o.json)
            printf("{\"live_blocks\": %zu, \"coop_ns_per_pair\": %.1f, "
                   "\"jemalloc_ns_per_pair\": %.1f, \"coop_footprint_over_live\": %.3f, "
                   "\"jemalloc_footprint_over_live\": %.3f}\n",
                   live, coop_ns, je_ns, coop_fp, je_fp);
        else
            printf("%12zu %16.1f %20.1f %8.2f %14.3f %18.3f\n", live, coop_ns, je_ns,
                   je_ns > 0 ? coop_ns / je_ns : 0, coop_fp, je_fp);
        if (!cli_stdout_ok()) /* a lost row stops the runs; said at exit */
            return 1;
    }
    return 0;
}
