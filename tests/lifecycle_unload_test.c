/*
 * dlclose of libcoop (ctypes, or a Python process dropping the allocator's
 * library): this program does not link libcoop; it loads the built shared
 * library with dlopen, as ctypes does, and unloads it. Pinned: the library
 * really unloads; the fork handlers it registered go with it (a fork after
 * dlclose would otherwise call into unmapped code); a thread that set its
 * last error (thread-local) may outlive the unload; loading and unloading
 * again and again leaves no mappings behind. A pool still alive at dlclose
 * is leaked (coop.h, "Process lifecycle"); fork still works after it.
 * Each case runs in a child (cases_in_children.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cases_in_children.h"
#include "lifecycle_child.h"
#include "coop.h" /* types only: the functions come from dlsym */

typedef struct lib {
    void *handle;
    void (*config_default)(coop_config *);
    coop_status (*pool_create)(const coop_config *, coop_pool **);
    void (*pool_destroy)(coop_pool *);
    void *(*malloc)(coop_pool *, size_t, coop_stream, unsigned, coop_status *);
    coop_status (*free)(coop_pool *, void *);
    const char *(*last_error)(void);
} lib;

static void *sym(void *handle, const char *name)
{
    void *p = dlsym(handle, name);
    if (!p) {
        fail_msg("dlsym %s: %s", name, dlerror());
        abort(); /* fail_msg does not return; the static analyser cannot tell */
    }
    return p;
}

static lib load(void)
{
    lib l = {.handle = dlopen(COOP_LIB_PATH, RTLD_NOW | RTLD_LOCAL)};
    if (!l.handle)
        fail_msg("dlopen %s: %s", COOP_LIB_PATH, dlerror());
    *(void **)&l.config_default = sym(l.handle, "coop_config_default");
    *(void **)&l.pool_create = sym(l.handle, "coop_pool_create");
    *(void **)&l.pool_destroy = sym(l.handle, "coop_pool_destroy");
    *(void **)&l.malloc = sym(l.handle, "coop_malloc");
    *(void **)&l.free = sym(l.handle, "coop_free");
    *(void **)&l.last_error = sym(l.handle, "coop_last_error");
    return l;
}

static void unload(lib *l)
{
    assert_int_equal(dlclose(l->handle), 0);
    /* gone, not merely dropped a reference (nothing made it NODELETE) */
    void *again = dlopen(COOP_LIB_PATH, RTLD_NOW | RTLD_NOLOAD);
    if (again)
        dlclose(again);
    assert_null(again);
}

/* A pool with a live block (registers the fork handlers). */
static coop_pool *pool_with_block(const lib *l, void **block)
{
    coop_config c;
    l->config_default(&c);
    c.backend = COOP_BACKEND_HOST;
    c.capacity = 64u << 20;
    coop_pool *pool = NULL;
    assert_int_equal(l->pool_create(&c, &pool), COOP_OK);
    coop_status st;
    *block = l->malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(*block);
    return pool;
}

static int exit_7(void *arg)
{
    (void)arg;
    return 7;
}

static void assert_fork_works(void)
{
    assert_exited(in_fork(exit_7, NULL), 7);
}

static void test_fork_after_unload(void **state)
{
    (void)state;
    lib l = load();
    void *block;
    coop_pool *pool = pool_with_block(&l, &block);
    assert_int_equal(l.free(pool, block), COOP_OK);
    l.pool_destroy(pool);
    unload(&l);
    assert_fork_works();
}

static void test_fork_after_unload_with_a_pool_alive(void **state)
{
    (void)state;
    lib l = load();
    void *block;
    pool_with_block(&l, &block); /* leaked: its memory stays mapped */
    unload(&l);
    assert_fork_works();
}

/* A thread that set its last error outlives the unload, then exits. */
typedef struct waiter {
    const lib *l;
    atomic_int step; /* 1: message set; 2: library unloaded */
    int ok;
} waiter;

static void *set_error_then_wait(void *arg)
{
    waiter *w = arg;
    coop_pool *pool;
    coop_config c;
    w->l->config_default(&c);
    c.page_size = 3; /* refused, with a message */
    w->ok = w->l->pool_create(&c, &pool) != COOP_OK && w->l->last_error()[0] != '\0';
    atomic_store(&w->step, 1);
    while (atomic_load(&w->step) != 2)
        ;
    return NULL;
}

static void test_thread_with_an_error_outlives_the_unload(void **state)
{
    (void)state;
    lib l = load();
    waiter w = {.l = &l};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_error_then_wait, &w), 0);
    while (atomic_load(&w.step) != 1)
        ;
    unload(&l);
    atomic_store(&w.step, 2);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(w.ok);
}

static void cycle(void)
{
    lib l = load();
    void *block;
    coop_pool *pool = pool_with_block(&l, &block);
    assert_int_equal(l.free(pool, block), COOP_OK);
    l.pool_destroy(pool);
    unload(&l);
}

static void test_load_and_unload_repeatedly(void **state)
{
    (void)state;
    /* the sanitizers' runtimes keep memory and mappings of their own
     * (ASan's quarantine of freed blocks, shadow pages): a count of growth
     * measures them, not coop (.ci/run sets COOP_SANITIZED) */
    if (getenv("COOP_SANITIZED"))
        skip();
    cycle();
    long before = mappings();
    for (int i = 0; i < 50; i++)
        cycle();
    long after = mappings();
    printf("mappings %ld -> %ld over 50 loads and unloads\n", before, after);
    assert_true(after <= before + 2);
    assert_fork_works();
}

int main(void)
{
    if (access(COOP_LIB_PATH, R_OK) != 0) { /* configured --disable-shared */
        printf("lifecycle_unload_test: skipped: no %s\n", COOP_LIB_PATH);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_after_unload),
        cmocka_unit_test(test_fork_after_unload_with_a_pool_alive),
        cmocka_unit_test(test_thread_with_an_error_outlives_the_unload),
        cmocka_unit_test(test_load_and_unload_repeatedly),
    };
    return cases_in_children("lifecycle_unload_test", tests, sizeof tests / sizeof tests[0], 60);
}
