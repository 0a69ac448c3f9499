#!/bin/bash
# The allocator's own tests and costs on a lent GPU, in one call of about 4
# minutes (issue 2's "the CUDA backend passes the same allocator tests on
# it"). Run from the repository root with .gpu/ built as README.md's step 0
# says (binaries from make check, and the same tests built with
# AddressSanitizer + UndefinedBehaviorSanitizer in .gpu/asan/); results go
# to $OUT/gpu-tests.tgz (default ./gpu-out). GPU_DIR names another folder
# of that layout (tests/device_tests_script_test.sh runs the script on the
# mock driver with one); MAP_COST_REPS (default 5) and COOP_TEST_OPS (default
# 10^6) shorten it, and VARIANTS=release (default "release asan") leaves the
# sanitized runs out (pending_device_checks.sh does when its budget is short).
#
# Phase 1 runs alone, since it times: `coop bench` (the host backend, on the
# device machine's CPU: three runs, then --latency and --floor; SKIP_BENCH=1
# leaves it out) and tests/cuda_map_cost (the driver's mapping and freeing
# costs with VMM pages of 2, 8, 32 and 128 MiB, and whether a free waits for
# a held stream). Phase 2 runs four test processes at once: the as-built and
# the sanitized tests/backend_cuda_test (10^6 operations of the randomized
# model, COOP_TEST_OPS) and tests/backend_cuda_stress_test. Phase 3 runs
# tests/backend_cuda_fault_test, as built then sanitized, each alone with
# COOP_TEST_DEVICE_ALONE=1, since it also reads the device's free memory
# (on 2026-11-27, run beside the five others, it read up to 629 MB less).
# Each test prints its seed.
#
# ASan runs with protect_shadow_gap=0, which the CUDA driver needs (it maps
# memory where ASan's shadow gap would be), and detect_leaks=0: the driver's
# own allocations at exit are not the allocator's (make check's ASan build
# checks leaks on the host and mock backends).
set -u
variants=${VARIANTS:-release asan}
for variant in $variants; do
    case $variant in
    release | asan) ;;
    *)
        echo "device_tests.sh: VARIANTS: '$variant' is not release or asan" >&2
        exit 2
        ;;
    esac
done
DEST=${OUT:-$PWD/gpu-out}
W=$(mktemp -d /tmp/gpu-tests.XXXXXX)
mkdir -p "$DEST"
gpu=${GPU_DIR:-$PWD/.gpu}
lib=$gpu/lib
stamp() { echo "$(date -u +%T) $*" >>"$W/phases.log"; }

stamp start
bash "$(dirname "$0")/device_env.sh" >"$W/env.txt" 2>&1

if [ "${SKIP_BENCH:-0}" != 1 ]; then
    for i in 1 2 3; do
        LD_LIBRARY_PATH=$lib timeout 60 "$gpu/bin/coop" bench --json >>"$W/bench.jsonl" \
            2>>"$W/bench.err"
        echo "bench run $i rc=$?" >>"$W/bench.err"
    done
    LD_LIBRARY_PATH=$lib timeout 60 "$gpu/bin/coop" bench --latency --json \
        >"$W/bench_latency.jsonl" 2>>"$W/bench.err"
    LD_LIBRARY_PATH=$lib timeout 60 "$gpu/bin/coop" bench --floor --json >"$W/bench_floor.jsonl" \
        2>>"$W/bench.err"
    stamp bench finished
fi
touch "$W/bench.jsonl" "$W/bench.err"
LD_LIBRARY_PATH=$lib timeout 150 "$gpu/bin/cuda_map_cost" "${MAP_COST_REPS:-5}" 2,8,32,128 \
    >"$W/map_cost.jsonl" 2>"$W/map_cost.err"
echo "cuda_map_cost rc=$?" >>"$W/map_cost.err"
stamp phase 1 finished

run_test() { # VARIANT NAME TIMEOUT [ALONE]
    local variant=$1 name=$2 limit=$3 dir=$gpu/bin libs=$lib
    if [ "$variant" = asan ]; then
        dir=$gpu/asan/bin libs=$gpu/asan/lib:$lib
    fi
    (
        export LD_LIBRARY_PATH=$libs COOP_TEST_OPS=${COOP_TEST_OPS:-1000000} COOP_TEST_DEVICE_ALONE=${4:-0}
        export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        start=$(date +%s)
        timeout "$limit" "$dir/$name" >"$W/$variant-$name.log" 2>&1
        rc=$?
        echo "$variant $name rc=$rc seconds=$(($(date +%s) - start))" >>"$W/$variant-$name.log"
        stamp "$variant $name finished rc=$rc"
    )
}
for variant in $variants; do
    run_test $variant backend_cuda_test 300 &
    run_test $variant backend_cuda_stress_test 200 &
done
wait
stamp phase 2 finished
for variant in $variants; do
    run_test $variant backend_cuda_fault_test 120 1
done
stamp end
tar czf "$DEST/gpu-tests.tgz" -C "$W" .
cat "$W/phases.log"
cat "$W/bench.jsonl" "$W/map_cost.jsonl"
tail -n 3 "$W/bench.err" "$W/map_cost.err"
grep -h -e 'rc=' -e 'seed' -e 'random_model:' -e 'stress:' -e 'fault_sweep' \
    -e 'backend_cuda_fault_test:' -e 'FAILED' -e 'ERROR' -e 'runtime error' "$W"/*-*.log |
    cut -c1-300
rm -rf "$W"
