/*
 * tests/random_model_test.c on the CUDA backend over the mock driver: the
 * same randomized operations, model and checks, with VMM (reserve, one
 * cuMemCreate + cuMemMap per page, cuMemSetAccess, unmap once the pages'
 * streams are seen finished) and with cuMemAlloc segments. The mock reports
 * a 64 KiB granularity so that the program's 64 KiB pages and capacities
 * stay what they are on the host backend; its streams are created in the
 * mock and held there, and every block allocated or recorded gets a kernel
 * over it (see cuda_stream_map.h). After the pool is destroyed the driver
 * must be clean: no handle, reservation, segment or event left, no unmap or
 * free of memory unfinished work uses, no call without a context.
 *
 * What it cannot show: anything a real device does differently from the
 * mock (latencies, the driver's own limits, real asynchronous completion).
 *
 * COOP_TEST_SEED as for the host program; COOP_TEST_OPS defaults to 10^5
 * here (the host program's default is 10^6).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <cuda.h>

#include "coop.h"
#include "cuda_mock.h"
#include "cuda_stream_map.h"

#define main random_model_main
int random_model_main(void);
#include "random_model_test.c"
#undef main

int main(void)
{
    cuda_mock_load("cuda_mock_model_test", COOP_TEST_BUILDDIR);
    cuda_mock.set_granularity(64 * KiB);
    cuda_mock_streams_create();
    setenv("COOP_TEST_OPS", "100000", 0);
    int failed = random_model_main();
    cuda_mock_streams_destroy();
    return failed;
}
