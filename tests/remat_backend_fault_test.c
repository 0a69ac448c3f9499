/*
 * A backend call failing after the remat layer evicted for a tensor: the
 * placement that follows a window's eviction (Coop) or an argmin eviction
 * (DTR) maps pages the eviction joined to a hole that coop_empty_cache had
 * unmapped, and that map is made to fail (coop_inject_fault). The refusal
 * must be COOP_ERR_BACKEND with the remat call's words around the pool's
 * ("coop_tensor_create: placing a tensor of N bytes: injected fault: map
 * call #K failed"), the pool must pass coop_pool_check, the victim stays
 * evicted (its owner was told) and is recomputed on access, the same call
 * succeeds once the fault is spent, and nothing leaks.
 *
 * Mutants B8 and B10 of docs/mutation-testing.md: the window's and the
 * argmin loop's failure passed on with the pool's words alone. Host
 * backend, VMM, 8 blocks of 8 KiB; milliseconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"

#include "host_alloc_fault.h"

#define U (8u * 1024u) /* one block */
#define EV COOP_TENSOR_EVICTABLE
#define BLOCKS 8

/* the host backend's memory is never touched */
static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

static size_t evictions_told;

static void on_evict(coop_tensor *t, void *user)
{
    (void)t, (void)user;
    evictions_told++;
}

/* VMM, capacity and address range of BLOCKS blocks: one-block tensors
 * t[0..7] fill it, then t[0] is released and its pages unmapped. t[1]
 * (cost 1) is the cheapest victim by far (the others cost 1,000): evicting
 * it joins its mapped block to the unmapped hole, a free run of 2 blocks
 * of which 1 must be mapped, which the capacity allows (7 of 8 mapped).
 * A 2-block request fits nowhere before that: no free run of 2 blocks. */
static coop_remat *scene(coop_remat_policy policy, coop_pool **pool, coop_tensor *t[BLOCKS])
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = true;
    c.page_size = 4096;
    c.capacity = BLOCKS * U;
    c.va_size = BLOCKS * U;
    assert_int_equal(coop_pool_create(&c, pool), COOP_OK);
    coop_remat_config cfg = {
        .policy = policy, .cheap_threshold = -1, .recompute = recompute, .on_evict = on_evict};
    coop_remat *r;
    assert_int_equal(coop_remat_create(*pool, &cfg, &r), COOP_OK);
    for (int i = 0; i < BLOCKS; i++)
        assert_int_equal(coop_tensor_create(r, U, i == 1 ? 1 : 1000, "op", NULL, 0, EV, &t[i]),
                         COOP_OK);
    assert_int_equal(coop_tensor_release(r, t[0]), COOP_OK);
    t[0] = NULL;
    assert_int_equal(coop_empty_cache(*pool), COOP_OK);
    return r;
}

static void a_failed_map_after_eviction_names_the_call(coop_remat_policy policy)
{
    long live = host_fault_live();
    coop_pool *pool;
    coop_tensor *t[BLOCKS];
    evictions_told = 0;
    coop_remat *r = scene(policy, &pool, t);
    uint64_t maps = coop_backend_calls(pool, COOP_FAULT_MAP);
    assert_int_equal(coop_inject_fault(pool, COOP_FAULT_MAP, 1), COOP_OK);
    coop_tensor *x = NULL;
    coop_status st = coop_tensor_create(r, 2 * U, 10, "x", NULL, 0, EV, &x);
    assert_int_equal(st, COOP_ERR_BACKEND);
    assert_null(x);
    char want[200];
    snprintf(want, sizeof want,
             "coop_tensor_create: placing a tensor of %u bytes: injected fault: map call #%llu "
             "failed",
             2 * U, (unsigned long long)maps + 1);
    assert_string_equal(coop_last_error(), want);
    /* the eviction happened and was told; nothing else was evicted */
    coop_remat_stats rs;
    coop_remat_get_stats(r, &rs);
    assert_int_equal(rs.evictions, 1);
    assert_int_equal(evictions_told, 1);
    assert_false(coop_tensor_resident(t[1]));
    for (int i = 2; i < BLOCKS; i++)
        assert_true(coop_tensor_resident(t[i]));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    /* the victim comes back on access, into the run its eviction freed */
    void *p;
    assert_int_equal(coop_tensor_access(r, t[1], &p), COOP_OK);
    assert_true(coop_tensor_resident(t[1]));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    /* with the fault spent, the same call succeeds */
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "x", NULL, 0, EV, &x), COOP_OK);
    assert_true(coop_tensor_resident(x));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
    assert_int_equal(host_fault_live(), live);
}

/* Coop: the window [hole, t[1]] is evicted, then placed in (B8) */
static void window_placement_map_fails(void **state)
{
    (void)state;
    a_failed_map_after_eviction_names_the_call(COOP_REMAT_COOP);
}

/* DTR: t[1] is evicted, then the allocation tried again (B10) */
static void argmin_allocation_map_fails(void **state)
{
    (void)state;
    a_failed_map_after_eviction_names_the_call(COOP_REMAT_DTR);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_placement_map_fails),
        cmocka_unit_test(argmin_allocation_map_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
