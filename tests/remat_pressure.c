/*
 * remat_pressure: the remat API on a full pool, every search evicting many
 * small tensors for one large one. TENSORS evictable tensors of 4 KiB fill a
 * pool of exactly their bytes (VMM, or segments of 2 MiB without), then 50
 * rounds each create a 4 MiB tensor (a search that evicts 1,024), release
 * it, and refill its space with small tensors, so that the next search must
 * evict again. It prints the searches, evictions and the searches' CPU time
 * per search. A measuring tool, built by make check (so that it keeps
 * compiling), not a test. From a built tree (docs/measured-host.md,
 * "Speed"):
 *
 *   make tests/remat_pressure
 *   tests/remat_pressure vmm 4096 dtr      # or segments; coop, dtr, ...
 *   valgrind --tool=callgrind tests/remat_pressure vmm 1024 dtr
 *   tests/remat_pressure vmm 4096 dtr 2097152   # pages of 2 MiB
 *
 * Arguments: vmm or segments, TENSORS (at least 1,024), a policy: coop,
 * dtr, dtr-local, dte, lru, size, coop-eq or coop-comp; optionally the
 * page size (a power of two, 4 KiB by default; CUDA's is 2 MiB), which
 * must divide the pool's TENSORS x 4 KiB.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"

#define SMALL 4096u
#define LARGE (4u << 20)
#define ROUNDS 50

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

static int fail(const char *what)
{
    fprintf(stderr, "remat_pressure: %s: %s\n", what, coop_last_error());
    return 1;
}

static int create_small(coop_remat *r, size_t i)
{
    coop_tensor *t;
    return coop_tensor_create(r, SMALL, 10 + i % 7, "small", NULL, 0, COOP_TENSOR_EVICTABLE, &t) !=
           COOP_OK;
}

static const struct {
    const char *name;
    coop_remat_policy policy;
} policies[] = {{"coop", COOP_REMAT_COOP},
                {"dtr", COOP_REMAT_DTR},
                {"dtr-local", COOP_REMAT_DTR_LOCAL},
                {"dte", COOP_REMAT_DTE},
                {"lru", COOP_REMAT_LRU},
                {"size", COOP_REMAT_SIZE},
                {"coop-eq", COOP_REMAT_COOP_EQ},
                {"coop-comp", COOP_REMAT_COOP_COMP}};

int main(int argc, char **argv)
{
    int policy = -1;
    bool args = argc == 4 || argc == 5;
    for (size_t i = 0; args && i < sizeof policies / sizeof *policies; i++)
        if (!strcmp(argv[3], policies[i].name))
            policy = (int)policies[i].policy;
    char *end = "", *page_end = "";
    unsigned long tensors = args ? strtoul(argv[2], &end, 10) : 0;
    unsigned long long page = argc == 5 ? strtoull(argv[4], &page_end, 10) : SMALL;
    if (!args || (strcmp(argv[1], "vmm") && strcmp(argv[1], "segments")) || *end || *page_end ||
        tensors < LARGE / SMALL || policy < 0 || !page || (page & (page - 1)) ||
        (uint64_t)tensors * SMALL % page) {
        fprintf(stderr, "usage: remat_pressure vmm|segments TENSORS(>=1024) POLICY [PAGE]\n");
        return 2;
    }
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = !strcmp(argv[1], "vmm");
    c.page_size = page;
    c.segment_size = 2u << 20;
    c.capacity = (uint64_t)tensors * SMALL;
    c.single_thread = true;
    coop_pool *pool;
    if (coop_pool_create(&c, &pool) != COOP_OK)
        return fail("pool");
    coop_remat_config rc = {
        .policy = (coop_remat_policy)policy, .cheap_threshold = -1, .recompute = recompute};
    coop_remat *r;
    if (coop_remat_create(pool, &rc, &r) != COOP_OK)
        return fail("context");
    for (size_t i = 0; i < tensors; i++)
        if (create_small(r, i))
            return fail("filling the pool");
    coop_remat_stats before, after;
    coop_remat_get_stats(r, &before);
    for (int round = 0; round < ROUNDS; round++) {
        coop_tensor *large;
        if (coop_tensor_create(r, LARGE, 1000, "large", NULL, 0, COOP_TENSOR_EVICTABLE, &large) !=
            COOP_OK)
            return fail("the large tensor");
        if (coop_tensor_release(r, large) != COOP_OK)
            return fail("releasing it");
        for (size_t i = 0; i < LARGE / SMALL; i++)
            if (create_small(r, i))
                return fail("refilling");
    }
    coop_remat_get_stats(r, &after);
    uint64_t searches = after.searches - before.searches;
    printf("%s %lu %s: searches %llu, evictions %llu, search CPU time %.0f ns per search\n",
           argv[1], tensors, argv[3], (unsigned long long)searches,
           (unsigned long long)(after.evictions - before.evictions),
           searches ? (double)(after.search_ns - before.search_ns) / (double)searches : 0.0);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
    return 0;
}
