#!/bin/sh
# scripts/gpu/pending_device_checks.sh, the first call of the next GPU
# session, here, so that it cannot rot before a device runs it:
# 1. it parses (bash -n), and refuses a step it does not have;
# 2. without a device (a driver that does not load) it runs nothing, exits
#    77 and its summary.txt says why;
# 3. on the mock driver with a stand-in .gpu/ (as device_tests_script_test.sh
#    builds one), device_tests.sh, teardown_check.py, remap_check.py,
#    reserve_align_check.py, fork_check.py (its pool route) and
#    second_device_check.py (the mock has two devices) run and pass, the torch steps skip (no CUDA torch here) and the three files
#    come back; where a real device is visible the torch steps are left out,
#    since they would measure it while libcoop used the mock;
# 4. a step that cannot run (.gpu/ lacking its files) fails the run without
#    stopping the next step.
set -u
top=$(pwd) # the build: the tests, libcoop.so, the mock driver
src=$(cd "${srcdir:-.}" && pwd) # the sources: the scripts (they differ under make distcheck)
script="$src/scripts/gpu/pending_device_checks.sh"
mock="$top/tests/.libs/libmockcuda.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

bash -n "$script" || fail "bash -n"
STEPS="teardown_check nosuch" OUT="$tmp/bad" bash "$script" >/dev/null 2>&1
[ $? -eq 2 ] || fail "STEPS naming an unknown step was not refused with exit 2"

COOP_CUDA_DRIVER=/nonexistent/libcuda.so.1 OUT="$tmp/none" bash "$script" >"$tmp/none.out" 2>&1
rc=$?
[ "$rc" -eq 77 ] || fail "without a device: exit $rc, not 77"
grep -q '^SKIP all: .*no CUDA device' "$tmp/none/pending/summary.txt" 2>/dev/null ||
    fail "without a device: summary.txt does not say so"
grep -qE ' (ok|fail|skip) rc=' "$tmp/none/pending/summary.txt" && fail "without a device: a step ran"

# python loads the mock (the preflight, teardown_check.py, remap_check.py):
# not an ASan-built one, and not without the shared libcoop.so
if [ -n "${COOP_SANITIZED:-}" ] || [ ! -f "$top/.libs/libcoop.so" ]; then
    [ "$failed" -eq 0 ] || exit 1
    echo "pending_device_checks.sh: no device 77; on the mock: not run (sanitized build, or" \
        "no shared libcoop.so: python cannot load the mock or coop)"
    exit 0
fi

mkdir -p "$tmp/gpu/bin" "$tmp/gpu/lib" "$tmp/gpu/asan/bin" "$tmp/got"
for t in backend_cuda_test backend_cuda_stress_test backend_cuda_fault_test; do
    ln -s "$top/tests/$t" "$tmp/gpu/bin/$t"
    ln -s "$top/tests/$t" "$tmp/gpu/asan/bin/$t"
done
ln -s "$top/tests/cuda_map_cost" "$tmp/gpu/bin/cuda_map_cost"
ln -s "$top/.libs/libcoop.so" "$tmp/gpu/lib/libcoop.so"
steps="device_tests teardown_check remap_check reserve_align_check fork_check second_device_check"
steps="$steps stream_check memory_viz_check oom_check"
torch_steps=skip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    steps="device_tests teardown_check remap_check reserve_align_check second_device_check"
    torch_steps=left-out
fi
COOP_CUDA_DRIVER="$mock" GPU_DIR="$tmp/gpu" OUT="$tmp/out" STEPS="$steps" MAP_COST_REPS=1 \
    COOP_TEST_OPS=3000 bash "$script" >"$tmp/mock.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "on the mock: exit $rc"
summary="$tmp/out/pending/summary.txt"
for want in "device_tests ok" "device_tests tests-ok (6 test runs" "teardown_check ok" \
    "remap_check ok" "reserve_align_check ok" "second_device_check ok"; do
    grep -qF "$want" "$summary" 2>/dev/null || fail "on the mock: summary.txt lacks '$want'"
done
if [ "$torch_steps" = skip ]; then
    for s in stream_check memory_viz_check oom_check; do
        grep -q "^$s skip rc=77 " "$summary" || fail "on the mock: $s did not skip"
    done
    # the pool route runs on the mock; its torch route says it did not run
    grep -q "^fork_check ok rc=0 " "$summary" || fail "on the mock: fork_check not ok"
    grep -q '"check": "fork".*"foreign_init": {"status": "COOP_OK".*"child_malloc_refused": true.*"torch": "skipped: ' \
        "$tmp/out/pending/findings.jsonl" || fail "on the mock: findings.jsonl lacks fork_check's line"
fi
[ "$(ls "$tmp/out/pending" | tr '\n' ' ')" = "findings.jsonl pending.tgz summary.txt " ] ||
    fail "on the mock: \$OUT/pending holds $(ls "$tmp/out/pending" | tr '\n' ' ')"
grep -q '"check": "teardown".*"ran": true' "$tmp/out/pending/findings.jsonl" ||
    fail "on the mock: findings.jsonl lacks teardown_check's line"
grep -q '"check": "reserve_default_alignment".*"all_2mib_aligned": true' \
    "$tmp/out/pending/findings.jsonl" || fail "on the mock: findings.jsonl lacks reserve_align_check's line"
grep -q '"check": "pool_on_device_1".*"ok": true' "$tmp/out/pending/findings.jsonl" ||
    fail "on the mock: findings.jsonl lacks second_device_check's line"
[ "$(grep -c '"check": "remap_kept_handle"' "$tmp/out/pending/findings.jsonl")" -eq 2 ] ||
    fail "on the mock: findings.jsonl lacks remap_check's two lines"
tar xzf "$tmp/out/pending/pending.tgz" -C "$tmp/got" &&
    tar tzf "$tmp/got/device_tests/gpu-tests.tgz" | grep -q 'release-backend_cuda_test.log' ||
    fail "on the mock: pending.tgz lacks device_tests.sh's archive"

COOP_CUDA_DRIVER="$mock" GPU_DIR="$tmp/empty" OUT="$tmp/missing" \
    STEPS="device_tests teardown_check" bash "$script" >"$tmp/missing.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "without .gpu/: exit $rc, not 1"
grep -q '^device_tests missing ' "$tmp/missing/pending/summary.txt" &&
    grep -q '^teardown_check ok ' "$tmp/missing/pending/summary.txt" ||
    fail "without .gpu/: device_tests not missing, or teardown_check not run after it"

if [ "$failed" -ne 0 ]; then
    cat "$tmp/mock.out"
    exit 1
fi
echo "pending_device_checks.sh: no device 77; on the mock ok, torch steps $torch_steps;" \
    "a missing step does not stop the next"
