/*
 * Shared by the remat tests that lay tensors out block by block in a small
 * host-backend pool (remat_cost_test, remat_live_test): the block size, a
 * pool of a number of blocks (one segment, no VMM, so blocks never move), a
 * remat context of a policy with partitioning off, and a recompute
 * callback that does nothing (the host backend's memory is never touched).
 */
#ifndef COOP_TESTS_REMAT_BLOCK_FIXTURE_H
#define COOP_TESTS_REMAT_BLOCK_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "coop.h"

#define U (8u * 1024u) /* one block of the layouts */
#define EV COOP_TENSOR_EVICTABLE

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

static coop_pool *pool_of(unsigned units)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = (uint64_t)units * U;
    c.segment_size = (uint64_t)units * U;
    coop_pool *p;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

static coop_remat *context(coop_pool *pool, coop_remat_policy policy)
{
    coop_remat_config cfg = {.policy = policy, .cheap_threshold = -1, .recompute = recompute};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    return r;
}

#endif
