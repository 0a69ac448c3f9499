#!/bin/sh
# tests/backend_cuda_test, the test meant for a real GPU, run against the mock
# driver (tests/libmockcuda.so) so that its own logic is exercised in every
# build: the pool sequence, the cross-stream free with an asynchronous memset
# read back, and the randomized model with holds made of cuStreamWaitValue32
# on host-mapped words. The mock implements those calls as the driver API
# documents them; it cannot show a device's timing or scheduling.
set -u
exec env COOP_CUDA_DRIVER="$(pwd)/tests/.libs/libmockcuda.so" ./tests/backend_cuda_test
