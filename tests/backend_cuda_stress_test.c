/*
 * tests/stress_test.c on the real CUDA backend (tests/cuda_device.h): four
 * threads share one pool on device 0, each allocating and freeing on its own
 * created stream and recording uses on the others', with coop_pool_check from
 * every thread along the way. Every block allocated gets a memset over it on
 * its stream, and every recorded use one over its first 512 bytes on the
 * recorded stream (tests/cuda_stream_map.h), so that a page unmapped while
 * still in use faults on the device. The threads have no current context:
 * each backend call must make the primary context current and restore the
 * thread's state. Pages are the device's (2 MiB on an H100 / H200), not the
 * host program's 64 KiB. Exits 77 (skip) with the reason when no driver or
 * device exists.
 *
 * What it adds to tests/cuda_mock_stress_test: a real driver's own locking,
 * its per-thread context handling and real asynchronous completion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "coop.h"

#define CUDA_MAP_STREAMS 8 /* stress_test.c uses streams 1 .. 4 */
#include "cuda_device.h"
#include "cuda_stream_map.h"

#define main stress_main
int stress_main(void);
#include "stress_test.c"
#undef main

int main(void)
{
    int open = cuda_device_open("backend_cuda_stress_test");
    if (open != 0)
        return open;
    int failed = 77;
    if (cuda_map_streams_setup("backend_cuda_stress_test"))
        failed = stress_main();
    cuda_map_streams_teardown();
    cuda_device_close();
    return failed;
}
