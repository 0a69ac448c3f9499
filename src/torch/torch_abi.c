/*
 * The CUDAPluggableAllocator ABI (see coop.h, "PyTorch integration").
 *
 * State: one slot per device holding its pool (published with release
 * semantics once created, so the allocation path reads it with one acquire
 * load), its memory fraction (pending until the pool exists) and a limit
 * waiting for frees, and its history ring. Creation, the
 * configuration and fraction changes happen under state_lock; the pools do
 * their own locking for malloc / free.
 *
 * The configuration is parsed once, at first use (or by coop_torch_configure
 * before any pool exists), and never changes while a pool exists.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fork.h"
#include "pool_internal.h"
#include "status.h"
#include "torch/alloc_conf.h"
#include "torch/c_numeric.h"
#include "torch/torch_abi.h"

typedef struct device_slot {
    _Atomic(coop_pool *) pool;
    bool has_fraction;      /* set_per_process_memory_fraction was called (under state_lock) */
    double fraction;        /* its value; pending until the pool exists */
    uint64_t full_capacity; /* capacity a fraction applies to */
    /* A limit (bytes) below what live blocks keep mapped, 0 if none: torch
     * applies a fraction to later allocations and frees nothing in use, so
     * the capacity is held at the mapped bytes and lowered to the limit as
     * soon as frees allow (apply_limit_locked). */
    _Atomic uint64_t pending_limit;
    atomic_bool freed_since_try; /* a free since the limit was last tried */
    torch_history history;
    /* Held around a pool call and the history events it records, while
     * recording is on: otherwise a free's events could land after another
     * thread's malloc of the same address, and the trace would show it
     * allocated twice. (PyTorch records under its allocator's lock.) */
    pthread_mutex_t order_lock;
    /* mallocs that returned NULL on this device, for any reason (out of
     * memory, a configuration or pool that failed, no driver), and the last
     * one's message (under error_lock): coop.torch.check_oom reads them, so
     * a pool that could not be created is not silent. The message in full,
     * as coop_last_error keeps it: an out-of-memory with a GPU's figures
     * and a held limit's note runs past 512 bytes, which cut the note */
    _Atomic uint64_t failed_mallocs;
    char failure[COOP_ERROR_MAX];
    coop_status failure_status; /* the last failure's, with its message */
} device_slot;

static device_slot slots[COOP_TORCH_MAX_DEVICES];
static pthread_once_t slots_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static bool conf_loaded; /* under state_lock */
static coop_status conf_status;
static coop_alloc_conf conf;
static char conf_error[512];
/* History bound in force, and whether coop_torch_record_history set it: the
 * API's setting outlasts the configuration, which is loaded lazily and may
 * be set again until the first pool (under state_lock). */
static size_t history_entries;
static bool history_by_api;
static atomic_int device_limit = COOP_TORCH_MAX_DEVICES;

void (*torch_limit_refused_hook)(int device);
void (*torch_malloc_gap_hook)(int device);
void (*torch_free_gap_hook)(int device);

static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];     /* as coop_last_error's */
static atomic_uint printed_kinds; /* bit per coop_status already printed */

/* fork() (pool_fork.h): this layer's locks are taken around the pools', in
 * the order its threads take them (state_lock, then an order lock, before a
 * pool call; a history lock, then error_lock, under one), so the child
 * finds them unlocked: a DataLoader worker forked while another thread was
 * in coop_torch_malloc would otherwise block forever on its first call. */
static void fork_outer_prepare(void)
{
    pthread_mutex_lock(&state_lock);
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        pthread_mutex_lock(&slots[i].order_lock);
}

static void fork_outer_release(bool child)
{
    (void)child; /* the forking thread owns them on both sides */
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        pthread_mutex_unlock(&slots[i].order_lock);
    pthread_mutex_unlock(&state_lock);
}

static void fork_inner_prepare(void)
{
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        pthread_mutex_lock(&slots[i].history.lock);
    pthread_mutex_lock(&error_lock);
}

static void fork_inner_release(bool child)
{
    (void)child;
    pthread_mutex_unlock(&error_lock);
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        pthread_mutex_unlock(&slots[i].history.lock);
}

static const pool_fork_hooks fork_hooks = {
    .outer_prepare = fork_outer_prepare,
    .outer_release = fork_outer_release,
    .inner_prepare = fork_inner_prepare,
    .inner_release = fork_inner_release,
};

static void init_slots(void)
{
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++) {
        pthread_mutex_init(&slots[i].history.lock, NULL);
        pthread_mutex_init(&slots[i].order_lock, NULL);
        atomic_init(&slots[i].history.enabled, false);
        atomic_init(&slots[i].pool, NULL);
        atomic_init(&slots[i].pending_limit, 0);
        atomic_init(&slots[i].freed_since_try, false);
        atomic_init(&slots[i].failed_mallocs, 0);
    }
    pool_fork_set_hooks(&fork_hooks);
}

static device_slot *slot(int device)
{
    pthread_once(&slots_once, init_slots);
    return &slots[device];
}

torch_history *torch_abi_history(int device)
{
    return &slot(device)->history;
}

pthread_mutex_t *torch_abi_order_lock(int device)
{
    return &slot(device)->order_lock;
}

/* Copies a message into buf (size bytes, at least 1), cut between UTF-8
 * characters: a message may quote COOP_ALLOC_CONF's text, and coop/torch.py
 * decodes what it reads. */
static void copy_message(char *buf, size_t size, const char *text)
{
    coop_format_message(buf, size, "%s", text);
}

/* Keeps the thread's message (coop_last_error) for coop_torch_last_error. */
static void remember(void)
{
    pthread_mutex_lock(&error_lock);
    copy_message(last_error, sizeof last_error, coop_last_error());
    pthread_mutex_unlock(&error_lock);
}

/* remember, and prints the first error of each kind: PyTorch gives no
 * other channel. */
static void report(coop_status st)
{
    const char *msg = coop_last_error();
    remember();
    unsigned bit = 1u << ((unsigned)st % 32u);
    if (!(atomic_fetch_or(&printed_kinds, bit) & bit))
        fprintf(stderr, "coop: %s [further '%s' errors are not printed]\n", msg, coop_strerror(st));
}

/* The device whose pool this thread is walking (its innermost such walk),
 * else -1: one thread-local read while it walks nothing, as almost always
 * (coop_torch_record_stream asks on every call; asking each device's pool,
 * 64 loads, cost three quarters of that call), then each walk's pool
 * against the devices'. */
static int walked_device(void)
{
    for (const pool_walk_frame *f = pool_fork_walks(); f; f = f->outer) {
        const device_slot *all = slot(0); /* initialized once: then the array as it is */
        for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
            if (atomic_load_explicit(&all[i].pool, memory_order_acquire) == f->pool)
                return i;
    }
    return -1;
}

/* fn's refusal from inside a coop_walk visitor of any device's pool
 * (walked_device), asked before state_lock: another thread may hold
 * state_lock while it waits for the walked pool (a memory fraction or a
 * limit's retry on that device, which change it; a fork's prepare), so
 * taking it here could wait forever, whichever device fn is for. step
 * (of device, if >= 0): what needs the lock, for the message. COOP_OK,
 * nothing set, when this thread walks no device's pool. */
static coop_status refuse_state_lock_in_walk(const char *fn, const char *step, int device)
{
    int walked = walked_device();
    if (walked < 0)
        return COOP_OK;
    char of[32] = "";
    if (device >= 0)
        snprintf(of, sizeof of, " of device %d", device);
    return coop_set_error(COOP_ERR_BUSY,
                          "%s: called from inside a coop_walk visitor of device %d's pool, which "
                          "the walk holds: %s%s takes the ABI's state lock, which another thread "
                          "may hold while it waits for the walk; nothing changed (call it after "
                          "coop_walk returns)",
                          fn, walked, step, of);
}

size_t coop_torch_last_error(char *buf, size_t size)
{
    pthread_mutex_lock(&error_lock);
    size_t n = strlen(last_error);
    if (buf && size)
        copy_message(buf, size, last_error);
    pthread_mutex_unlock(&error_lock);
    return n;
}

/* ------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------- */

static bool any_pool_locked(void)
{
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        if (atomic_load(&slot(i)->pool))
            return true;
    return false;
}

/* Sets every device's history bound. Caller holds state_lock. */
static void set_history_locked(size_t max_entries)
{
    history_entries = max_entries;
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        torch_history_resize(&slot(i)->history, max_entries);
}

/* Makes parsed the configuration in force. Caller holds state_lock. */
static void apply_conf_locked(const coop_alloc_conf *parsed)
{
    conf_loaded = true;
    conf_status = COOP_OK;
    conf = *parsed;
    if (!history_by_api)
        set_history_locked(conf.history);
}

/* Loads COOP_ALLOC_CONF on first use; re-sets the thread's error if bad. A
 * bad environment variable is kept as the state (every malloc reports it):
 * there is no configuration before it to fall back to. */
static coop_status ensure_conf_locked(void)
{
    if (!conf_loaded) {
        coop_alloc_conf parsed;
        coop_status st = coop_alloc_conf_parse(getenv("COOP_ALLOC_CONF"), &parsed);
        if (st == COOP_OK) {
            apply_conf_locked(&parsed);
        } else {
            conf_loaded = true;
            conf_status = st;
            copy_message(conf_error, sizeof conf_error, coop_last_error());
        }
    }
    if (conf_status != COOP_OK)
        return coop_set_error(conf_status, "%s", conf_error);
    return COOP_OK;
}

coop_status coop_torch_configure(const char *text)
{
    coop_status st = refuse_state_lock_in_walk("coop_torch_configure", "it", -1);
    if (st != COOP_OK)
        return st;
    pthread_mutex_lock(&state_lock);
    if (any_pool_locked())
        st = coop_set_error(COOP_ERR_BUSY, "coop torch: configure before the first allocation "
                                           "(a pool already exists)");
    else {
        /* a string that does not parse changes nothing: the configuration
         * in force (and its status) stays */
        coop_alloc_conf parsed;
        st = coop_alloc_conf_parse(text ? text : getenv("COOP_ALLOC_CONF"), &parsed);
        if (st == COOP_OK)
            apply_conf_locked(&parsed);
    }
    pthread_mutex_unlock(&state_lock);
    return st;
}

/* A byte key's value as format_conf writes it into buf: "default" for 0
 * (unset), which the parser reads back as unset, where "0" would be
 * refused. Returns buf. */
static const char *bytes_or_default(uint64_t bytes, char *buf, size_t size)
{
    if (bytes)
        snprintf(buf, size, "%ju", (uintmax_t)bytes);
    else
        snprintf(buf, size, "default");
    return buf;
}

/* c as key:value text, every key, in one order and spelling (history: the
 * bound given, which for the settings in force is the one in force); it
 * parses back as c (coop_torch_configure takes it). */
static void format_conf(const coop_alloc_conf *c, size_t history, char *buf, size_t size)
{
    char fraction[sizeof ",fraction:" + C_NUMERIC_G_MAX] = "";
    if (c->fraction > 0.0)
        c_numeric_format_g(fraction, sizeof fraction, ",fraction:", c->fraction);
    char capacity[24], page[24], segment[24], min_split[24]; /* 2^64 has 20 digits */
    snprintf(buf, size,
             "backend:%s,capacity:%s%s,page:%s,vmm:%s,segment:%s,placement:%s,"
             "min_split:%s,check:%s,history:%zu,wait:%s",
             c->backend == COOP_BACKEND_HOST ? "host" : "cuda",
             bytes_or_default(c->capacity, capacity, sizeof capacity), fraction,
             bytes_or_default(c->page_size, page, sizeof page), c->use_vmm ? "true" : "false",
             bytes_or_default(c->segment_size, segment, sizeof segment),
             c->placement == COOP_ALLOC_HIGH ? "high" : "low",
             bytes_or_default(c->min_split, min_split, sizeof min_split),
             c->check ? "true" : "false", history, c->never_wait ? "false" : "true");
}

coop_status coop_torch_normalize_conf(const char *text, char *buf, size_t size)
{
    coop_alloc_conf parsed;
    coop_status st = coop_alloc_conf_parse(text, &parsed);
    if (buf && size) {
        if (st == COOP_OK)
            format_conf(&parsed, parsed.history, buf, size);
        else
            copy_message(buf, size, coop_last_error());
    }
    return st;
}

coop_status coop_torch_settings(char *buf, size_t size)
{
    coop_status st = refuse_state_lock_in_walk("coop_torch_settings", "it", -1);
    if (st != COOP_OK) {
        if (buf && size)
            copy_message(buf, size, coop_last_error());
        return st;
    }
    pthread_mutex_lock(&state_lock);
    st = ensure_conf_locked();
    if (st == COOP_OK && buf && size) {
        format_conf(&conf, history_entries, buf, size);
    } else if (buf && size) {
        copy_message(buf, size, coop_last_error());
    }
    pthread_mutex_unlock(&state_lock);
    return st;
}

void coop_torch_record_history(size_t max_entries)
{
    coop_status st = refuse_state_lock_in_walk("coop_torch_record_history", "it", -1);
    if (st != COOP_OK) {
        report(st);
        return;
    }
    pthread_mutex_lock(&state_lock);
    history_by_api = true;
    set_history_locked(max_entries);
    pthread_mutex_unlock(&state_lock);
}

void coop_torch_clear_history(void)
{
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        torch_history_clear(&slot(i)->history);
}

/* Records an event in device's history; reports the ring's first failure to
 * grow (it then keeps fewer events, and says so). */
static void history_record(int device, coop_torch_action action, uintptr_t address, uint64_t size,
                           void *stream)
{
    if (torch_history_record(&slot(device)->history, action, address, size, (uintptr_t)stream,
                             device))
        report(COOP_ERR_HOST_NOMEM);
}

/* A block freed while other streams used it became reusable: torch records
 * free_completed then (its process_events), not at the free. ctx: the
 * device, as an integer. */
static void pending_released(void *ctx, uintptr_t addr, uint64_t requested, coop_stream stream)
{
    history_record((int)(intptr_t)ctx, COOP_TORCH_FREE_COMPLETED, addr, requested, (void *)stream);
}

/* ------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------- */

/* The error for a device outside init's count (limit: that count); what:
 * the call, as "free of PTR" (detail: more to say, such as owner_of's). */
static coop_status bad_device(int device, int limit, const char *what, const char *detail)
{
    return coop_set_error(COOP_ERR_INVALID, "coop torch: %s on device %d: devices are 0..%d%s",
                          what, device, limit - 1, detail);
}

static bool device_ok(int device, const char *what, const char *detail)
{
    int limit = atomic_load(&device_limit);
    if (device >= 0 && device < limit)
        return true;
    report(bad_device(device, limit, what, detail));
    return false;
}

/* Puts "coop torch: WHAT on device D: " before the thread's message (st's),
 * and detail after it: the pool's own messages do not know their device,
 * and with more than one a report (stderr, coop_torch_last_error) must say
 * which. The whole is at most COOP_ERROR_MAX - 1 bytes: the pool's message
 * is cut to make room for detail (a held limit's note, which says why the
 * capacity quoted is not the limit set), "..." where it is cut; cut at the
 * end, a long out-of-memory (pending frees, bytes kept for other streams)
 * lost the note. */
static coop_status on_device(coop_status st, int device, const char *what, const char *detail)
{
    char prefix[128];
    coop_format_message(prefix, sizeof prefix, "coop torch: %s on device %d: ", what, device);
    size_t fixed = strlen(prefix) + strlen(detail);
    size_t room = fixed < COOP_ERROR_MAX - 1 ? COOP_ERROR_MAX - 1 - fixed : 0;
    static const char cut[] = "...";
    char msg[COOP_ERROR_MAX];
    const char *pool_msg = coop_last_error();
    if (strlen(pool_msg) <= room) {
        copy_message(msg, sizeof msg, pool_msg);
    } else if (room >= sizeof cut) {
        copy_message(msg, room - (sizeof cut - 1) + 1, pool_msg); /* between UTF-8 characters */
        memcpy(msg + strlen(msg), cut, sizeof cut);
    } else {
        msg[0] = '\0';
    }
    return coop_set_error(st, "%s%s%s", prefix, msg, detail);
}

coop_status torch_forked_device(const coop_pool *pool, int device, const char *fn)
{
    if (!pool || !pool_forked(pool))
        return COOP_OK;
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "%s: device %d's CUDA pool was created in process %d; CUDA cannot be "
                          "used in a forked child (process %d)",
                          fn, device, pool->created_pid, pool->forked_pid);
}

/* A coop_walk visitor calling the ABI for the device whose pool it walks
 * (coop.h, coop_walk): the walk holds the pool's lock, which this layer
 * takes itself (a free, a snapshot) or waits for behind its own locks
 * (state_lock, an order lock) that other threads may hold while they wait
 * for the walk. So each such call asks first, with the pool's one relaxed
 * load (pool_walked_here), and fails before taking any lock. */
coop_status torch_walked_error(const char *fn, int device)
{
    return coop_set_error(COOP_ERR_BUSY,
                          "%s: called from inside a coop_walk visitor of device %d's pool, which "
                          "the walk holds: nothing changed (call it after coop_walk returns)",
                          fn, device);
}

coop_pool *coop_torch_pool(int device)
{
    if (device < 0 || device >= COOP_TORCH_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&slot(device)->pool, memory_order_acquire);
}

/* "; device N's pool holds it" into buf if a pool other than device's has
 * ptr in one of its blocks (a free given the wrong device number), else "".
 * For error messages only: it takes each pool's lock in turn, but for one
 * this thread is walking (a free from a coop_walk visitor). */
static void owner_of(const void *ptr, int device, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++) {
        coop_pool *pool = i == device ? NULL : coop_torch_pool(i);
        if (!pool)
            continue;
        /* a pool this thread walks: read as it stands, under the walk's
         * lock (arena_find_containing changes nothing the walk follows) */
        bool locked = pool_lock_read(pool);
        bool held = arena_find_containing(pool_arena(pool), (uintptr_t)ptr) != NULL;
        pool_unlock_read(pool, locked);
        if (held) {
            snprintf(buf, size, "; device %d's pool holds it", i);
            return;
        }
    }
}

/* Capacity for fraction of the full capacity, never 0 (the pool's smallest
 * capacity is one page, which fraction 0 gets). */
static uint64_t fraction_of(uint64_t full, double fraction)
{
    uint64_t cap = (uint64_t)((double)full * fraction);
    return cap ? cap : 1;
}

static coop_status create_pool_locked(int device, coop_pool **out)
{
    coop_status st = ensure_conf_locked();
    if (st != COOP_OK)
        return st;
    device_slot *s = slot(device);
    coop_config config;
    coop_alloc_conf_to_config(&conf, device, &config);
    coop_pool *pool = NULL;
    st = coop_pool_create(&config, &pool);
    if (st != COOP_OK)
        return st;
    pool_set_pending_release_hook(pool, pending_released, (void *)(intptr_t)device);
    coop_config resolved;
    coop_pool_config(pool, &resolved);
    s->full_capacity = resolved.capacity;
    double fraction = s->has_fraction ? s->fraction : conf.fraction;
    if (s->has_fraction || fraction > 0.0) {
        st = coop_set_capacity(pool, fraction_of(s->full_capacity, fraction));
        if (st != COOP_OK) {
            coop_pool_destroy(pool);
            return st;
        }
    }
    atomic_store_explicit(&s->pool, pool, memory_order_release);
    *out = pool;
    return COOP_OK;
}

/* Device's pool, created on first use; NULL (reported) on failure, its
 * status in *failed (set on failure only: check_oom tells out of memory
 * from the rest by it). A pool that cannot be made is never out of memory
 * there: making one maps no device memory, so its COOP_ERR_NOMEM is the
 * address space it reserves (or the driver refusing the reservation or
 * context), and with no pool the device holds no block of coop's whose
 * free could help; *failed is COOP_ERR_BACKEND for it (the message says
 * what was refused). fn: the ABI call, for a refusal from inside a walk. */
static coop_pool *pool_for(int device, const char *what, const char *fn, coop_status *failed)
{
    if (!device_ok(device, what, "")) {
        *failed = COOP_ERR_INVALID;
        return NULL;
    }
    coop_pool *pool = coop_torch_pool(device);
    if (pool)
        return pool;
    coop_status busy = refuse_state_lock_in_walk(fn, "making the pool", device);
    if (busy != COOP_OK) {
        report(busy);
        *failed = busy;
        return NULL;
    }
    pthread_mutex_lock(&state_lock);
    pool = coop_torch_pool(device);
    coop_status st = COOP_OK;
    int limit = atomic_load(&device_limit); /* init may have lowered it since */
    if (!pool && device >= limit)
        st = bad_device(device, limit, what, "");
    else if (!pool && (st = create_pool_locked(device, &pool)) != COOP_OK)
        st = on_device(st, device, what, "");
    pthread_mutex_unlock(&state_lock);
    if (st != COOP_OK) {
        /* only creation gives NOMEM; printed as what it is recorded as, so
         * that it does not use up the first real out-of-memory's print */
        *failed = st == COOP_ERR_NOMEM ? COOP_ERR_BACKEND : st;
        report(*failed);
        return NULL;
    }
    return pool;
}

/* Applies a memory limit (bytes) to device's pool. If live blocks and
 * pending frees keep more mapped than that (coop_set_capacity refuses; it
 * releases the cache first only where that could reach the limit), the
 * limit waits in pending_limit and the capacity is held at the bytes
 * mapped now, cache included, so the pool stops growing; allocations
 * after frees try the limit again. Not an error, so nothing is reported:
 * torch's fraction too applies to later allocations only and empties no
 * cache. Caller holds state_lock. */
static coop_status apply_limit_locked(device_slot *s, coop_pool *pool, uint64_t limit)
{
    /* Pending before the try: a free after the try's hold of the pool's lock
     * then sees the limit and flags itself (a free before it is seen by the
     * try). Published after a refusal, a free in between found no limit to
     * flag, or had its flag cleared here, and the limit waited for a later
     * free that might never come. */
    atomic_store(&s->pending_limit, limit);
    atomic_store(&s->freed_since_try, false);
    coop_status st = coop_set_capacity(pool, limit);
    if (st != COOP_ERR_NOMEM) {
        atomic_store(&s->pending_limit, 0);
        return st;
    }
    if (torch_limit_refused_hook)
        torch_limit_refused_hook((int)(s - slots));
    /* a few tries: other threads may map pages between the read and the set */
    for (int tries = 0; tries < 3; tries++) {
        coop_stats stats;
        coop_get_stats(pool, &stats);
        uint64_t mapped = (uint64_t)stats.reserved_bytes.current;
        if (mapped <= limit || mapped >= stats.capacity)
            break; /* freed meanwhile (flagged: tried again at the next malloc), or held */
        st = coop_set_capacity(pool, mapped);
        if (st != COOP_ERR_NOMEM)
            return st;
    }
    return COOP_OK;
}

/* Tries device's pending limit again if blocks were freed since the last
 * try (force: regardless, after empty_cache); its failure is reported.
 * COOP_ERR_BUSY (not reported, the try left for later) where it would
 * take state_lock from inside a walk: fn's refusal. */
static coop_status retry_limit(int device, coop_pool *pool, bool force, const char *fn)
{
    device_slot *s = slot(device);
    if (!atomic_load_explicit(&s->pending_limit, memory_order_relaxed))
        return COOP_OK;
    if (!force && !atomic_load_explicit(&s->freed_since_try, memory_order_relaxed))
        return COOP_OK;
    /* before the flag is taken: the limit is tried after the walk */
    coop_status st = refuse_state_lock_in_walk(fn, "the memory limit waiting for frees", device);
    if (st != COOP_OK)
        return st;
    if (!atomic_exchange(&s->freed_since_try, false) && !force)
        return COOP_OK;
    pthread_mutex_lock(&state_lock);
    uint64_t limit = atomic_load(&s->pending_limit); /* may have changed meanwhile */
    st = limit ? apply_limit_locked(s, pool, limit) : COOP_OK;
    pthread_mutex_unlock(&state_lock);
    if (st != COOP_OK)
        report(on_device(st, device, "memory limit", ""));
    return COOP_OK;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

/* Counts a NULL from coop_torch_malloc on device and keeps its message
 * (coop_last_error, set by whatever failed). Both change under error_lock,
 * so coop_torch_failed_mallocs never pairs the newest message with the
 * count before it. */
static void count_failure(int device, coop_status st)
{
    if (device < 0 || device >= COOP_TORCH_MAX_DEVICES)
        return;
    device_slot *s = slot(device);
    pthread_mutex_lock(&error_lock);
    copy_message(s->failure, sizeof s->failure, coop_last_error());
    s->failure_status = st;
    atomic_fetch_add(&s->failed_mallocs, 1);
    pthread_mutex_unlock(&error_lock);
}

uint64_t coop_torch_failed_malloc_status(int device, char *buf, size_t size, coop_status *status)
{
    if (buf && size)
        buf[0] = '\0';
    if (status)
        *status = COOP_OK;
    if (device < 0 || device >= COOP_TORCH_MAX_DEVICES)
        return 0;
    device_slot *s = slot(device);
    pthread_mutex_lock(&error_lock);
    uint64_t n = atomic_load(&s->failed_mallocs);
    if (buf && size)
        copy_message(buf, size, s->failure);
    if (status)
        *status = s->failure_status;
    pthread_mutex_unlock(&error_lock);
    return n;
}

uint64_t coop_torch_failed_mallocs(int device, char *buf, size_t size)
{
    return coop_torch_failed_malloc_status(device, buf, size, NULL);
}

/* An out-of-memory's detail while a memory limit waits for frees (or ""):
 * the capacity the message quotes is the one held, and without a word the
 * limit behind it, which the caller set and will get once blocks are
 * freed, reads as if it had been lost. Failure path only. */
static void held_limit(coop_status st, device_slot *s, coop_pool *pool, char *buf, size_t size)
{
    buf[0] = '\0';
    uint64_t limit = atomic_load(&s->pending_limit);
    if (st != COOP_ERR_NOMEM || !limit)
        return;
    coop_stats stats;
    coop_get_stats(pool, &stats);
    snprintf(buf, size,
             "; a memory limit of %llu bytes (coop_torch_memory_fraction) is pending: live "
             "blocks and pending frees keep more mapped, so the capacity is held at %llu "
             "until frees let the limit apply",
             (unsigned long long)limit, (unsigned long long)stats.capacity);
}

void *coop_torch_malloc(size_t size, int device, void *stream)
{
    if (size == 0)
        return NULL;
    coop_status failed = COOP_OK;
    coop_pool *pool = pool_for(device, "malloc", "coop_torch_malloc", &failed);
    coop_status forked = torch_forked_device(pool, device, "coop_torch_malloc");
    if (forked == COOP_OK && torch_walked_here(pool))
        forked = torch_walked_error("coop_torch_malloc", device);
    if (forked != COOP_OK) /* before retry_limit, which would change the pool */
        report(forked);
    if (!pool || forked != COOP_OK) {
        count_failure(device, pool ? forked : failed);
        return NULL;
    }
    device_slot *s = slot(device);
    /* asked here, the call only with a limit pending (rare), so that the
     * hot path pays one load for it, as before retry_limit could refuse */
    if (atomic_load_explicit(&s->pending_limit, memory_order_relaxed)) {
        coop_status busy = retry_limit(device, pool, false, "coop_torch_malloc");
        if (busy != COOP_OK) {
            report(busy);
            count_failure(device, busy);
            return NULL;
        }
    }
    bool ordered = torch_history_on(&s->history);
    if (ordered)
        pthread_mutex_lock(&s->order_lock);
    coop_status st = COOP_OK;
    void *ptr = coop_malloc(pool, size, (coop_stream)stream, conf.placement, &st);
    if (!ptr) {
        /* reported and counted first: recording may set an error of its own */
        char what[64];
        snprintf(what, sizeof what, "malloc of %zu bytes", size);
        if (st == COOP_OK)
            st = coop_set_error(COOP_ERR_NOMEM, "returned nothing");
        char held[256];
        held_limit(st, s, pool, held, sizeof held);
        report(on_device(st, device, what, held));
        count_failure(device, st);
        if (torch_history_on(&s->history)) {
            /* torch's OOM entry carries the device's free memory
             * (device_free), where coop's counterpart is what the pool may
             * still map, and the size as its allocator rounded it
             * (params.size(); allocations carry the size asked for) */
            coop_stats stats;
            coop_get_stats(pool, &stats);
            uint64_t mapped = (uint64_t)stats.reserved_bytes.current;
            /* COOP_ALIGN: coop's rounding, as torch's round_size is to
             * its 512-byte minimum block */
            size_t rounded = size > SIZE_MAX - (COOP_ALIGN - 1)
                                 ? size
                                 : (size + COOP_ALIGN - 1) / COOP_ALIGN * COOP_ALIGN;
            history_record(device, COOP_TORCH_OOM,
                           stats.capacity > mapped ? stats.capacity - mapped : 0, rounded, stream);
        }
        if (ordered)
            pthread_mutex_unlock(&s->order_lock);
        return NULL;
    }
    if (torch_malloc_gap_hook)
        torch_malloc_gap_hook(device);
    /* only under the order lock: a malloc that began before recording did
     * holds no lock a snapshot takes, so a snapshot between its pool call
     * and here saw the block allocated and no event, and an alloc event now
     * would allocate it a second time for a reader going on from that
     * snapshot (torch_abi_test, test_history_switched_on_inside_a_malloc);
     * a block allocated before the recording is one a snapshot reader
     * expects frees of without allocs */
    if (ordered) {
        history_record(device, COOP_TORCH_ALLOC, (uintptr_t)ptr, size, stream);
        pthread_mutex_unlock(&s->order_lock);
    }
    return ptr;
}

void coop_torch_free(void *ptr, size_t size, int device, void *stream)
{
    if (!ptr)
        return;
    char what[64], owner[64];
    if (device < 0 || device >= atomic_load(&device_limit) || !coop_torch_pool(device)) {
        snprintf(what, sizeof what, "free of %p", ptr);
        owner_of(ptr, device, owner, sizeof owner);
        if (!device_ok(device, what, owner))
            return;
        report(coop_set_error(COOP_ERR_FOREIGN_PTR,
                              "coop torch: free of %p on device %d, which has no coop pool%s", ptr,
                              device, owner));
        return;
    }
    coop_pool *pool = coop_torch_pool(device);
    /* an inherited tensor dropped in a DataLoader worker: its memory is
     * the parent's, so the free is a no-op, its message kept
     * (coop_torch_last_error) but not printed, as a worker dropping the
     * tensors it inherited is no mistake */
    if (torch_forked_device(pool, device, "coop_torch_free") != COOP_OK) {
        remember();
        return;
    }
    if (torch_walked_here(pool)) { /* before the order lock and the pool's */
        report(torch_walked_error("coop_torch_free", device));
        return;
    }
    device_slot *s = slot(device);
    bool ordered = torch_history_on(&s->history);
    if (ordered)
        pthread_mutex_lock(&s->order_lock);
    if (torch_free_gap_hook)
        torch_free_gap_hook(device);
    /* coop_free under the pool's lock, so that a block that goes pending
     * has its free_requested recorded before any thread can complete it
     * (pending_released records that, as torch's process_events does) */
    pool_lock(pool);
    /* the events carry the block's requested size and stream, as torch's
     * (and pending_released's) do, whatever the caller passed: torch passes
     * its malloc's, another caller may not, and a free event that does not
     * match its alloc misleads a trace reader; read before the free, which
     * may merge the block away */
    uint64_t requested = size;
    coop_stream block_stream = (coop_stream)stream;
    if (torch_history_on(&s->history)) {
        const arena_block *b = arena_lookup(pool_arena(pool), (uintptr_t)ptr);
        if (b) {
            requested = b->requested;
            block_stream = b->stream;
        }
    }
    arena_block *merged = NULL;
    coop_status st = pool_free_user_locked(pool, ptr, &merged);
    if (st == COOP_OK) {
        history_record(device, COOP_TORCH_FREE_REQUESTED, (uintptr_t)ptr, requested,
                       (void *)block_stream);
        if (merged) /* reusable at once: no other stream used it */
            history_record(device, COOP_TORCH_FREE_COMPLETED, (uintptr_t)ptr, requested,
                           (void *)block_stream);
    }
    pool_after_op_locked(pool, "free");
    pool_unlock(pool);
    if (ordered)
        pthread_mutex_unlock(&s->order_lock);
    if (st != COOP_OK) {
        snprintf(what, sizeof what, "free of %p", ptr);
        owner_of(ptr, device, owner, sizeof owner);
        report(on_device(st, device, what, owner));
        return;
    }
    if (atomic_load_explicit(&s->pending_limit, memory_order_relaxed))
        atomic_store_explicit(&s->freed_since_try, true, memory_order_relaxed);
}

void coop_torch_init(int device_count)
{
    coop_status st = refuse_state_lock_in_walk("coop_torch_init", "it", -1);
    if (st != COOP_OK) {
        report(st);
        return;
    }
    /* under state_lock, as pool creation, which checks the count again
     * there: a count can never leave out a pool made meanwhile */
    pthread_mutex_lock(&state_lock);
    int has_pool = -1; /* the highest device with a pool */
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++)
        if (coop_torch_pool(i))
            has_pool = i;
    if (device_count < 0 || device_count > COOP_TORCH_MAX_DEVICES)
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop torch: init with a device count of %d: it must be 1..%d; "
                            "devices stay 0..%d",
                            device_count, COOP_TORCH_MAX_DEVICES, atomic_load(&device_limit) - 1);
    else if (device_count > 0 && device_count <= has_pool) /* its blocks could not be freed */
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop torch: init with a device count of %d: device %d has a pool, "
                            "whose blocks could not be freed; devices stay 0..%d",
                            device_count, has_pool, atomic_load(&device_limit) - 1);
    else if (device_count > 0) /* 0: torch's first call, before it counts */
        atomic_store(&device_limit, device_count);
    if (st != COOP_OK) /* before the configuration's error replaces the message */
        report(st);
    st = ensure_conf_locked();
    pthread_mutex_unlock(&state_lock);
    if (st != COOP_OK)
        report(st);
}

void coop_torch_empty_cache(void)
{
    int walked = walked_device();
    if (walked >= 0) {
        report(torch_walked_error("coop_torch_empty_cache", walked));
        return;
    }
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++) {
        coop_pool *pool = coop_torch_pool(i);
        coop_status forked = torch_forked_device(pool, i, "coop_torch_empty_cache");
        if (forked != COOP_OK) {
            report(forked);
        } else if (pool) {
            coop_status st = coop_empty_cache(pool);
            if (st != COOP_OK)
                report(on_device(st, i, "empty_cache", ""));
            /* not refused: no walk, asked above */
            (void)retry_limit(i, pool, true, "coop_torch_empty_cache");
        }
    }
}

coop_status coop_torch_forget_stream(void *stream)
{
    if ((coop_stream)stream == COOP_STREAM_ANY) /* refused whether or not a pool exists */
        return reserved_stream("coop_torch_forget_stream");
    int walked = walked_device();
    if (walked >= 0)
        return torch_walked_error("coop_torch_forget_stream", walked);
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++) {
        coop_pool *pool = coop_torch_pool(i);
        coop_status st = torch_forked_device(pool, i, "coop_torch_forget_stream");
        if (st == COOP_OK && pool)
            st = coop_forget_stream(pool, (coop_stream)stream);
        if (st != COOP_OK)
            return st;
    }
    return COOP_OK;
}

void coop_torch_memory_fraction(double fraction, int device)
{
    /* torch's set_per_process_memory_fraction accepts [0, 1] */
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
        report(coop_set_error(COOP_ERR_INVALID,
                              "coop torch: memory fraction %g for device %d is not in [0, 1]",
                              fraction, device));
        return;
    }
    if (!device_ok(device, "set_per_process_memory_fraction", ""))
        return;
    coop_status st = torch_walked_here(coop_torch_pool(device)) /* before state_lock */
                         ? torch_walked_error("coop_torch_memory_fraction", device)
                         : refuse_state_lock_in_walk("coop_torch_memory_fraction",
                                                     "setting the memory fraction", device);
    if (st != COOP_OK) {
        report(st);
        return;
    }
    pthread_mutex_lock(&state_lock);
    device_slot *s = slot(device);
    coop_pool *pool = coop_torch_pool(device);
    /* refused with the fraction as it was: nothing changed */
    st = torch_forked_device(pool, device, "coop_torch_memory_fraction");
    if (st != COOP_OK) {
        pthread_mutex_unlock(&state_lock);
        report(st);
        return;
    }
    s->has_fraction = true;
    s->fraction = fraction;
    if (pool)
        st = apply_limit_locked(s, pool, fraction_of(s->full_capacity, fraction));
    pthread_mutex_unlock(&state_lock);
    if (st != COOP_OK)
        report(on_device(st, device, "set_per_process_memory_fraction", ""));
}

/* A pointer no pool allocated is skipped, as PyTorch's own allocator skips
 * tensors it did not allocate (shared from another process, imported with
 * DLPack): the pluggable route passes every tensor's pointer here, and
 * reporting it would also use up the one stderr line that a real foreign
 * free gets. */
void coop_torch_record_stream(void *ptr, void *stream)
{
    if (!ptr)
        return;
    int walked = walked_device(); /* ptr's device is not known */
    if (walked >= 0) {
        report(torch_walked_error("coop_torch_record_stream", walked));
        return;
    }
    for (int i = 0; i < COOP_TORCH_MAX_DEVICES; i++) {
        coop_pool *pool = coop_torch_pool(i);
        if (!pool)
            continue;
        coop_status st = torch_forked_device(pool, i, "coop_torch_record_stream");
        if (st != COOP_OK) {
            report(st);
            return;
        }
        st = coop_record_stream(pool, ptr, (coop_stream)stream);
        if (st == COOP_OK)
            return;
        if (st != COOP_ERR_FOREIGN_PTR) {
            report(on_device(st, i, "record_stream", ""));
            return;
        }
    }
}
