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
 * life of the process as the driver is. The stand-in is the first of a few
 * glibc libraries that nobody in this process loaded yet: a sanitized build
 * loads libm (the ASan runtime needs it), which once made this test fail
 * on its own precondition. */
static void test_a_library_that_is_no_driver_is_unloaded(void **state)
{
    (void)state;
    static const char *const stand_ins[] = {"libanl.so.1", "libutil.so.1", "libm.so.6"};
    const char *lib = NULL;
    for (size_t i = 0; i < sizeof stand_ins / sizeof stand_ins[0] && !lib; i++) {
        void *loaded = dlopen(stand_ins[i], RTLD_NOW | RTLD_NOLOAD);
        if (loaded)
            dlclose(loaded); /* (the reference NOLOAD took) */
        else
            lib = stand_ins[i];
    }
    if (!lib) {
        print_message("every stand-in library is loaded already: nothing to check\n");
        skip();
        return; /* skip() longjmps; the analyser does not know it */
    }
    setenv("COOP_CUDA_DRIVER", lib, 1);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    coop_pool *pool = NULL;
    coop_status st = coop_pool_create(&config, &pool);
    setenv("COOP_CUDA_DRIVER", mock_path, 1);
    assert_int_equal(st, COOP_ERR_NO_DRIVER);
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        dlclose(h); /* (the reference NOLOAD took) */
        fail_msg("%s stays loaded after coop found it is no CUDA driver", lib);
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
