/*
 * `jemalloc`: the real jemalloc placing the trace's sizes in a simulated
 * device range. A private arena gets custom extent hooks that hand out
 * address ranges from one MAP_NORESERVE reservation, so jemalloc's own
 * placement (size classes, slabs, extent reuse) decides every address.
 *
 * Footprint ("reserved") is what the hooks hold committed: bytes handed out
 * committed or committed later, minus bytes decommitted. The purge hooks are
 * left out, so jemalloc returns memory only by decommitting (which a later
 * reuse must commit again, through the hook, where the capacity is enforced);
 * a purged-but-committed range would otherwise come back without a hook call.
 * Decay is off (dirty pages stay cached, like a caching GPU allocator, and the
 * figures do not depend on the wall clock); on out-of-memory the policy purges
 * the arena (decommitting every cached page) and retries once.
 *
 * Fragmentation figures need the free space, which jemalloc does not expose:
 * the policy keeps it itself (free_ranges.h) from the hooks (committed and
 * decommitted ranges) and the allocations (their usable sizes), applying the
 * changes only when the figures are read so that timing sees jemalloc alone.
 *
 * Large blocks are asked for with MALLOCX_ALIGN(page): jemalloc built with
 * cache_oblivious (Debian's is, and 5.3 cannot turn it off at run time) puts
 * a large block at a random multiple of the cache line inside the first page
 * of its extent, from a per-thread generator seeded with an address, so the
 * free ranges around it (the largest free block, frag_mean, frag_max) moved
 * from run to run with ASLR. A page-aligned request takes the same extent
 * (the same size class, its extra page included: reserved figures do not
 * change) and puts the block at its start, the offset the draw can give. CPU
 * cache sets are nothing to a device range. Small sizes keep no alignment
 * (it would round them up to a page).
 *
 * jemalloc's metadata goes to host memory where the build offers
 * experimental.arenas_create_ext with metadata_use_hooks = false; otherwise
 * it is written through the hooks into the range (hence read/write) and
 * counted as reserved.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <jemalloc/jemalloc.h>

#include "replay/free_ranges.h"
#include "replay/policy.h"
#include "status.h"

typedef struct jemalloc_state {
    extent_hooks_t hooks; /* first member: the hooks pointer leads back to the state */
    unsigned arena;
    /* mallocx/dallocx flags: this arena, no thread cache (a cached block
     * would be free to the replay but not to the arena) */
    int flags;
    /* flags for sizes above small_max (jemalloc's largest small size
     * class): the same, page-aligned (see above) */
    int large_flags;
    size_t small_max;
    char *range;
    uint64_t range_size, range_used; /* bump pointer over the reservation */
    uint64_t capacity, committed, map_bytes, active;
    free_ranges free; /* committed bytes no allocation covers */
    /* Free-space changes are logged in order and applied when the figures
     * are read, so that the timed malloc / free calls cost jemalloc's work
     * plus an append, not the bookkeeping replay adds around jemalloc. */
    struct space_change *log;
    size_t log_len, log_cap;
    bool log_failed;
} jemalloc_state;

typedef enum space_change_kind {
    RANGE_FREED,     /* [addr, addr+size) became committed: free until allocated */
    RANGE_TAKEN,     /* [addr, addr+size) decommitted or destroyed */
    BLOCK_ALLOCATED, /* jemalloc returned addr for size requested bytes */
    BLOCK_RELEASED,  /* the block at addr (size requested bytes) was freed */
} space_change_kind;

typedef struct space_change {
    space_change_kind kind;
    uint64_t addr, size;
} space_change;

static void log_change(jemalloc_state *s, space_change_kind kind, uint64_t addr, uint64_t size)
{
    if (s->log_len == s->log_cap) {
        size_t cap = s->log_cap ? 2 * s->log_cap : 256;
        space_change *grown = realloc(s->log, cap * sizeof *grown);
        if (!grown) {
            s->log_failed = true;
            return;
        }
        s->log = grown;
        s->log_cap = cap;
    }
    s->log[s->log_len++] = (space_change){.kind = kind, .addr = addr, .size = size};
}

/* The mallocx / nallocx / sdallocx flags for a request of size bytes. */
static int flags_for(const jemalloc_state *s, uint64_t size)
{
    return size > s->small_max ? s->large_flags : s->flags;
}

/* Applies the logged changes to the free-range set and the active bytes. */
static void apply_log(jemalloc_state *s)
{
    for (size_t i = 0; i < s->log_len; i++) {
        const space_change *c = &s->log[i];
        /* nallocx: the usable size jemalloc gives a request, as sallocx would */
        uint64_t usable;
        switch (c->kind) {
        case RANGE_FREED:
            free_ranges_add(&s->free, c->addr, c->size);
            break;
        case RANGE_TAKEN:
            free_ranges_remove(&s->free, c->addr, c->size);
            break;
        case BLOCK_ALLOCATED:
            usable = nallocx(c->size, flags_for(s, c->size));
            s->active += usable;
            free_ranges_remove(&s->free, c->addr, usable);
            break;
        case BLOCK_RELEASED:
            usable = nallocx(c->size, flags_for(s, c->size));
            s->active -= usable;
            free_ranges_add(&s->free, c->addr, usable);
            break;
        }
    }
    s->log_len = 0;
}

static jemalloc_state *state_of(extent_hooks_t *hooks)
{
    return (jemalloc_state *)hooks;
}

/* Counts bytes becoming committed; false beyond the capacity. */
static bool commit_bytes(jemalloc_state *s, size_t size)
{
    if (s->committed + size > s->capacity)
        return false;
    s->committed += size;
    s->map_bytes = saturating_add_u64(s->map_bytes, size);
    return true;
}

static void *hook_alloc(extent_hooks_t *hooks, void *new_addr, size_t size, size_t alignment,
                        bool *zero, bool *commit, unsigned arena_ind)
{
    (void)arena_ind;
    jemalloc_state *s = state_of(hooks);
    if (new_addr)
        return NULL; /* in-place growth at a given address: not offered */
    uint64_t align = alignment ? alignment : 4096;
    /* aligned as an address, not only as an offset into the range */
    uint64_t base = (uint64_t)(uintptr_t)s->range;
    uint64_t start = (base + s->range_used + align - 1) / align * align - base;
    if (start + size > s->range_size)
        return NULL;
    if (*commit && !commit_bytes(s, size))
        return NULL;
    if (*commit)
        log_change(s, RANGE_FREED, (uint64_t)(uintptr_t)(s->range + start), size);
    s->range_used = start + size;
    *zero = true; /* never-touched MAP_NORESERVE pages read as zero */
    return s->range + start;
}

/* Refusing dalloc makes jemalloc keep the range (retained, decommitted first). */
static bool hook_dalloc(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
                        unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)committed, (void)arena_ind;
    return true;
}

static void hook_destroy(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
                         unsigned arena_ind)
{
    (void)arena_ind;
    jemalloc_state *s = state_of(hooks);
    if (committed) {
        s->committed -= size;
        log_change(s, RANGE_TAKEN, (uint64_t)(uintptr_t)addr, size);
    }
}

static bool hook_commit(extent_hooks_t *hooks, void *addr, size_t size, size_t offset,
                        size_t length, unsigned arena_ind)
{
    (void)size, (void)arena_ind;
    jemalloc_state *s = state_of(hooks);
    if (!commit_bytes(s, length))
        return true;
    log_change(s, RANGE_FREED, (uint64_t)(uintptr_t)addr + offset, length);
    return false;
}

static bool hook_decommit(extent_hooks_t *hooks, void *addr, size_t size, size_t offset,
                          size_t length, unsigned arena_ind)
{
    (void)size, (void)arena_ind;
    jemalloc_state *s = state_of(hooks);
    s->committed -= length;
    log_change(s, RANGE_TAKEN, (uint64_t)(uintptr_t)addr + offset, length);
    return false;
}

/* Split and merge need no work: the range is one mapping. */
static bool hook_split(extent_hooks_t *hooks, void *addr, size_t size, size_t size_a, size_t size_b,
                       bool committed, unsigned arena_ind)
{
    (void)hooks, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed;
    (void)arena_ind;
    return false;
}

static bool hook_merge(extent_hooks_t *hooks, void *addr_a, size_t size_a, void *addr_b,
                       size_t size_b, bool committed, unsigned arena_ind)
{
    (void)hooks, (void)addr_a, (void)size_a, (void)addr_b, (void)size_b, (void)committed;
    (void)arena_ind;
    return false;
}

/* jemalloc's experimental arena config (internal to jemalloc 5.3): the hooks,
 * then whether metadata goes through them. */
typedef struct jemalloc_arena_config {
    extent_hooks_t *extent_hooks;
    bool metadata_use_hooks;
} jemalloc_arena_config;

static coop_status create_arena(jemalloc_state *s)
{
    extent_hooks_t *hooks = &s->hooks;
    size_t len = sizeof s->arena;
    jemalloc_arena_config config = {.extent_hooks = hooks, .metadata_use_hooks = false};
    /* the control takes the config struct itself as its new value */
    int err = mallctl("experimental.arenas_create_ext", &s->arena, &len, &config, sizeof config);
    if (err)
        err = mallctl("arenas.create", &s->arena, &len, &hooks, sizeof hooks);
    if (err)
        return coop_set_error(COOP_ERR_BACKEND, "jemalloc policy: arenas.create failed (errno %d)",
                              err);
    /* no time-based purging: deterministic figures, pages cached until OOM */
    char name[64];
    ssize_t never = -1;
    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", s->arena);
    mallctl(name, NULL, NULL, &never, sizeof never);
    snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", s->arena);
    mallctl(name, NULL, NULL, &never, sizeof never);
    s->flags = MALLOCX_ARENA(s->arena) | MALLOCX_TCACHE_NONE;
    unsigned nbins = 0;
    size_t page = 0, ulen = sizeof nbins, zlen = sizeof page;
    err = mallctl("arenas.nbins", &nbins, &ulen, NULL, 0);
    if (!err)
        err = mallctl("arenas.page", &page, &zlen, NULL, 0);
    if (!err && nbins) {
        snprintf(name, sizeof name, "arenas.bin.%u.size", nbins - 1);
        err = mallctl(name, &s->small_max, &zlen, NULL, 0);
    }
    if (err || !nbins || !page || (page & (page - 1))) {
        snprintf(name, sizeof name, "arena.%u.destroy", s->arena);
        mallctl(name, NULL, NULL, NULL, 0);
        return coop_set_error(COOP_ERR_BACKEND,
                              "jemalloc policy: cannot read jemalloc's page and size classes "
                              "(errno %d)",
                              err);
    }
    s->large_flags = s->flags | MALLOCX_ALIGN(page);
    return COOP_OK;
}

static coop_status jemalloc_create(uint64_t capacity, uint64_t page, void **state)
{
    (void)page; /* jemalloc's own page size decides its granularity */
    jemalloc_state *s = calloc(1, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "jemalloc policy: out of host memory");
    s->hooks = (extent_hooks_t){
        .alloc = hook_alloc,
        .dalloc = hook_dalloc,
        .destroy = hook_destroy,
        .commit = hook_commit,
        .decommit = hook_decommit,
        .split = hook_split,
        .merge = hook_merge,
    };
    s->capacity = capacity;
    /* room for jemalloc's growing retained extents beyond what is committed */
    s->range_size = 4 * capacity + (1ull << 30);
    s->range = mmap(NULL, s->range_size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s->range == MAP_FAILED) {
        free(s);
        return coop_set_error(COOP_ERR_BACKEND, "jemalloc policy: cannot reserve %llu bytes: %s",
                              (unsigned long long)(4 * capacity), strerror(errno));
    }
    coop_status st = create_arena(s);
    if (st != COOP_OK) {
        munmap(s->range, s->range_size);
        free(s);
        return st;
    }
    *state = s;
    return COOP_OK;
}

static coop_status jemalloc_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    (void)stream; /* jemalloc has no streams */
    jemalloc_state *s = state;
    int flags = flags_for(s, size);
    void *p = mallocx(size, flags);
    if (!p) {
        char name[64];
        snprintf(name, sizeof name, "arena.%u.purge", s->arena);
        mallctl(name, NULL, NULL, NULL, 0);
        p = mallocx(size, flags);
    }
    if (!p)
        return coop_set_error(COOP_ERR_NOMEM,
                              "jemalloc policy: %llu bytes do not fit (committed %llu of %llu)",
                              (unsigned long long)size, (unsigned long long)s->committed,
                              (unsigned long long)s->capacity);
    log_change(s, BLOCK_ALLOCATED, (uint64_t)(uintptr_t)p, size);
    *addr = (uintptr_t)p;
    return COOP_OK;
}

static coop_status jemalloc_free(void *state, uintptr_t addr, uint64_t size)
{
    jemalloc_state *s = state;
    void *p = (void *)addr;
    /* sdallocx: the size is known, as a sized delete would pass it */
    log_change(s, BLOCK_RELEASED, (uint64_t)addr, size); /* before: dallocx may decommit */
    sdallocx(p, size, flags_for(s, size));
    return COOP_OK;
}

static void jemalloc_stats(void *state, replay_policy_stats *out)
{
    jemalloc_state *s = state;
    apply_log(s);
    /* free space as tracked through the hooks and the allocations: committed
     * bytes outside every allocation's usable size (slab regions included) */
    *out = (replay_policy_stats){
        .reserved_bytes = s->committed,
        .map_bytes = s->map_bytes,
        .active_bytes = s->active,
        .free_bytes = s->free.total,
        .largest_free = free_ranges_largest(&s->free),
        .has_free_blocks = !s->free.failed && !s->log_failed,
    };
}

static void jemalloc_destroy(void *state)
{
    jemalloc_state *s = state;
    if (!s)
        return;
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", s->arena);
    mallctl(name, NULL, NULL, NULL, 0);
    munmap(s->range, s->range_size);
    free_ranges_clear(&s->free);
    free(s->log);
    free(s);
}

/* Commits are multiples of jemalloc's page (4 KiB on x86-64 Linux), so a
 * 4 KiB step would be exact; but its search takes about 10 more probes per
 * trace than 2 MiB (0.65 s for `coop replay` on the bundled traces against
 * 0.51 s, 2026-11-29), so jemalloc's min_capacity is to within 2 MiB. */
static uint64_t jemalloc_capacity_step(uint64_t page)
{
    (void)page;
    return 2u << 20;
}

const replay_policy_ops replay_policy_jemalloc = {
    .name = "jemalloc",
    .summary = "jemalloc 5 in a private arena whose extent hooks hand out the device range",
    .create = jemalloc_create,
    .malloc = jemalloc_malloc,
    .free = jemalloc_free,
    .stats = jemalloc_stats,
    .destroy = jemalloc_destroy,
    .capacity_step = jemalloc_capacity_step,
};
