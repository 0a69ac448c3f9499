/*
 * The CUDA driver library stays loaded once a pool has loaded it: unloading
 * libcuda at every pool destruction and loading it again at the next pool
 * has crashed programs on some systems (the CUDA runtime never unloads it).
 * This program, unlike the other mock tests, holds no handle of its own on
 * the mock driver, so dlopen(RTLD_NOLOAD) sees only what coop keeps.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "coop.h"

static char mock_path[4096];

static void create_and_destroy(void)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 64u << 20;
    coop_pool *pool = NULL;
    if (coop_pool_create(&config, &pool) != COOP_OK)
        fail_msg("coop_pool_create: %s", coop_last_error());
    void *p = coop_malloc(pool, 1 << 20, 0, 0, NULL);
    assert_non_null(p);
    assert_int_equal(coop_free(pool, p), COOP_OK);
    coop_pool_destroy(pool);
}

static void test_driver_stays_loaded(void **state)
{
    (void)state;
    assert_null(dlopen(mock_path, RTLD_NOW | RTLD_NOLOAD)); /* nobody loaded it yet */
    create_and_destroy();
    void *h = dlopen(mock_path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);   /* still loaded after the pool is gone */
    dlclose(h);           /* (the reference NOLOAD took) */
    create_and_destroy(); /* and a second pool uses it again */
}

/* A library that loads but lacks the driver's entry points is no driver:
 * nothing of it was used, so it is unloaded again rather than kept for the
 * life of the process as the driver is (libm stands in, loaded by nobody
 * else in this static program). */
static void test_a_library_that_is_no_driver_is_unloaded(void **state)
{
    (void)state;
    assert_null(dlopen("libm.so.6", RTLD_NOW | RTLD_NOLOAD)); /* nobody loaded it yet */
    setenv("COOP_CUDA_DRIVER", "libm.so.6", 1);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    coop_pool *pool = NULL;
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_NO_DRIVER);
    setenv("COOP_CUDA_DRIVER", mock_path, 1);
    void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        dlclose(h); /* (the reference NOLOAD took) */
        fail_msg("libm.so.6 stays loaded after coop found it is no CUDA driver");
    }
}

int main(void)
{
    const char *builddir = getenv("COOP_TEST_BUILDDIR");
    snprintf(mock_path, sizeof mock_path, "%s/tests/.libs/libmockcuda.so",
             builddir ? builddir : COOP_TEST_BUILDDIR);
    setenv("COOP_CUDA_DRIVER", mock_path, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_stays_loaded),
        cmocka_unit_test(test_a_library_that_is_no_driver_is_unloaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
