#!/bin/sh
# The tests meant for a real GPU (tests/backend_cuda_test,
# tests/backend_cuda_stress_test, tests/backend_cuda_fault_test) run against
# the mock driver (tests/.libs/libmockcuda.so) so that their own logic is exercised
# in every build: the pool sequence, the cross-stream free with an
# asynchronous memset read back, the randomized model with holds made of
# cuStreamWaitValue32 on host-mapped words, four threads without a current
# context, and the fault sweeps with the driver's free memory checked after
# each drain. The mock implements those calls as the driver API documents
# them; it cannot show a device's timing or scheduling. A skip (exit 77)
# counts as a failure here: the mock is always there.
set -u
COOP_CUDA_DRIVER="$(pwd)/tests/.libs/libmockcuda.so"
export COOP_CUDA_DRIVER
for t in backend_cuda_test backend_cuda_stress_test backend_cuda_fault_test; do
    echo "== tests/$t on the mock driver"
    ./tests/$t
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL tests/$t on the mock driver: exit status $rc"
        exit 1
    fi
done
