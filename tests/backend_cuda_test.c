/*
 * The allocator's essential sequence on the real CUDA backend (libcuda.so.1
 * and a device), with virtual memory management and with cuMemAlloc
 * segments. Exits 77 (skip) with the reason when no driver or device exists.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "pool_sequence.h"

static void run_on_cuda(bool use_vmm)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.device = 0;
    config.capacity = 256 * SEQ_MIB;
    config.use_vmm = use_vmm;
    config.check = true;
    coop_pool *pool = NULL;
    coop_status st = coop_pool_create(&config, &pool);
    if (st != COOP_OK)
        fail_msg("coop_pool_create (vmm=%d): %s", use_vmm, coop_last_error());
    run_pool_sequence(pool);
    coop_pool_destroy(pool);
}

static void test_cuda_vmm(void **state)
{
    (void)state;
    run_on_cuda(true);
}

static void test_cuda_segments(void **state)
{
    (void)state;
    run_on_cuda(false);
}

int main(void)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 64 * SEQ_MIB;
    coop_pool *probe = NULL;
    coop_status st = coop_pool_create(&config, &probe);
    if (st == COOP_ERR_NO_DRIVER || st == COOP_ERR_UNSUPPORTED) {
        printf("SKIP backend_cuda_test: %s\n", coop_last_error());
        return 77;
    }
    if (st != COOP_OK) {
        fprintf(stderr, "backend_cuda_test: cannot create a CUDA pool: %s\n", coop_last_error());
        return 1;
    }
    coop_pool_destroy(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_vmm),
        cmocka_unit_test(test_cuda_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
