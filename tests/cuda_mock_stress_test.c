/*
 * tests/stress_test.c on the CUDA backend over the mock driver: four threads
 * share one pool, each allocating and freeing on its own stream (created in
 * the mock) and recording uses on the others'. None of the threads has a
 * current context: every backend call makes the primary context current and
 * restores the thread's state (the mock refuses calls without one and counts
 * them). After the pool is destroyed the driver must be clean.
 *
 * What it cannot show: a real driver's own locking and per-thread costs.
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

#define main stress_main
int stress_main(void);
#include "stress_test.c"
#undef main

int main(void)
{
    cuda_mock_load("cuda_mock_stress_test", COOP_TEST_BUILDDIR);
    cuda_mock.set_granularity(64 * 1024);
    cuda_mock_streams_create();
    int failed = stress_main();
    cuda_mock_streams_destroy();
    return failed;
}
