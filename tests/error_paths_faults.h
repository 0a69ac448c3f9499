/*
 * The three kinds of failure the error-path tests inject (error_paths_test,
 * error_paths_torch_test): the N-th host allocation (the allocation wraps,
 * host_alloc_fault.h), the N-th allocation of pool metadata (meta.c), the
 * N-th call into a pool's backend (coop_inject_fault). Included after
 * cmocka.h, coop.h, meta.h and host_alloc_fault.h, by one file each.
 */
#ifndef COOP_TESTS_ERROR_PATHS_FAULTS_H
#define COOP_TESTS_ERROR_PATHS_FAULTS_H

typedef enum fault_kind { FAULT_HOST, FAULT_META, FAULT_BACKEND } fault_kind;
static const char *const kind_names[] = {"host", "meta", "backend"};

static uint64_t backend_calls_at_arm;

/* Fails the n-th allocation or call of kind from now on. FAULT_BACKEND
 * arms pool's backend; with no pool yet (coop_pool_create arms through its
 * config) nothing is armed here. */
static void fault_arm(fault_kind kind, uint64_t n, coop_pool *pool)
{
    switch (kind) {
    case FAULT_HOST:
        host_fault_arm((long)n);
        break;
    case FAULT_META:
        meta_fail_nth(n);
        break;
    case FAULT_BACKEND:
        backend_calls_at_arm = pool ? coop_backend_calls(pool, COOP_FAULT_ALL) : 0;
        if (pool)
            assert_int_equal(coop_inject_fault(pool, COOP_FAULT_ALL, n), COOP_OK);
        break;
    }
}

/* Stops injecting; whether the armed allocation or call was reached. A
 * backend fault with no pool counts as reached: coop_pool_create refused,
 * and its backend is gone. */
static bool fault_disarm(fault_kind kind, uint64_t n, coop_pool *pool)
{
    switch (kind) {
    case FAULT_HOST:
        return host_fault_disarm();
    case FAULT_META: {
        bool hit = meta_fail_remaining() == 0;
        meta_fail_nth(0);
        return hit;
    }
    case FAULT_BACKEND: {
        if (!pool)
            return true;
        bool hit = coop_backend_calls(pool, COOP_FAULT_ALL) - backend_calls_at_arm >= n;
        coop_inject_fault(pool, 0, 0);
        return hit;
    }
    }
    return false;
}

#endif
