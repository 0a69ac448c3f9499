#!/bin/sh
# scripts/gpu/device_tests.sh, the one device call that runs the allocator's
# tests on a GPU, run here on the mock driver so that it cannot rot between
# the sessions that have a GPU: a folder laid out as .gpu/ (the tests as
# built, standing in for the sanitized ones too), no bench, one repetition of
# the cost measurements, 3,000 random-model operations. Every test it runs
# must end with rc=0 in the archive it packs, and the archive must hold the
# cost figures and the phases' log.
set -u
top=$(pwd) # the build: the tests and the mock driver
src=$(cd "${srcdir:-.}" && pwd) # the sources: the script (they differ under make distcheck)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/gpu/bin" "$tmp/gpu/lib" "$tmp/gpu/asan/bin" "$tmp/gpu/asan/lib" "$tmp/out" "$tmp/got"
tests="backend_cuda_test backend_cuda_stress_test backend_cuda_fault_test"
for t in $tests; do
    ln -s "$top/tests/$t" "$tmp/gpu/bin/$t"
    ln -s "$top/tests/$t" "$tmp/gpu/asan/bin/$t"
done
ln -s "$top/tests/cuda_map_cost" "$tmp/gpu/bin/cuda_map_cost"
if ! COOP_CUDA_DRIVER="$top/tests/.libs/libmockcuda.so" GPU_DIR="$tmp/gpu" OUT="$tmp/out" \
    SKIP_BENCH=1 MAP_COST_REPS=1 COOP_TEST_OPS=3000 \
    bash "$src/scripts/gpu/device_tests.sh" >"$tmp/printed" 2>&1; then
    cat "$tmp/printed"
    echo "FAIL: device_tests.sh exited non-zero"
    exit 1
fi
tar xzf "$tmp/out/gpu-tests.tgz" -C "$tmp/got" || exit 1
failed=0
for variant in release asan; do
    for t in $tests; do
        log="$tmp/got/$variant-$t.log"
        if ! grep -q "^$variant $t rc=0 " "$log" 2>/dev/null; then
            echo "FAIL: $variant $t did not end with rc=0:"
            tail -20 "$log" 2>/dev/null
            failed=1
        fi
    done
done
held=$(grep -c '"figure": "held"' "$tmp/got/map_cost.jsonl")
calls=$(grep -c '"figure": "vmm_calls"' "$tmp/got/map_cost.jsonl")
maps=$(grep -c '"figure": "map"' "$tmp/got/map_cost.jsonl")
if [ "$held" -ne 3 ] || [ "$calls" -ne 2 ] || [ "$maps" -lt 1 ]; then
    echo "FAIL: map_cost.jsonl has $held held, $calls vmm_calls and $maps map lines (want 3, 2, 1+)"
    cat "$tmp/got/map_cost.jsonl" "$tmp/got/map_cost.err"
    failed=1
fi
grep -q ' end$' "$tmp/got/phases.log" || { echo "FAIL: phases.log has no end"; failed=1; }
# VARIANTS=release (pending_device_checks.sh's short budget): the three
# tests as built, none sanitized; a variant it does not know is refused
mkdir -p "$tmp/out1" "$tmp/got1"
if ! COOP_CUDA_DRIVER="$top/tests/.libs/libmockcuda.so" GPU_DIR="$tmp/gpu" OUT="$tmp/out1" \
    SKIP_BENCH=1 MAP_COST_REPS=1 COOP_TEST_OPS=3000 VARIANTS=release \
    bash "$src/scripts/gpu/device_tests.sh" >"$tmp/printed1" 2>&1; then
    cat "$tmp/printed1"
    echo "FAIL: device_tests.sh VARIANTS=release exited non-zero"
    failed=1
fi
tar xzf "$tmp/out1/gpu-tests.tgz" -C "$tmp/got1" || exit 1
for t in $tests; do
    grep -q "^release $t rc=0 " "$tmp/got1/release-$t.log" 2>/dev/null ||
        { echo "FAIL: VARIANTS=release: release $t did not end with rc=0"; failed=1; }
done
if ls "$tmp/got1"/asan-* >/dev/null 2>&1; then
    echo "FAIL: VARIANTS=release ran sanitized tests"
    failed=1
fi
VARIANTS=tsan bash "$src/scripts/gpu/device_tests.sh" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: VARIANTS=tsan was not refused with exit 2"; failed=1; }
[ "$failed" -eq 0 ] && echo "device_tests.sh on the mock: 6 test runs, rc=0 each; $maps map lines;" \
    "VARIANTS=release: 3"
exit "$failed"
