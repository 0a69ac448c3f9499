#!/bin/bash
# Every device check pending since the last GPU session, in one call: the
# first call of the next session (scripts/gpu/README.md, "Pending: the first
# call of the next GPU session"). Run from anywhere in the checkout, with
# .gpu/ rebuilt as README.md's step 0 says (it carries the C code to test:
# the binaries, the sanitized tests and libcoop.so).
#
# In order of value, each step with its own timeout, none stopping the next:
#   device_tests     device_tests.sh with SKIP_BENCH=1 (the allocator's tests
#                    as built and sanitized; VARIANTS=release alone when
#                    BUDGET_S is under 300): the CUDA backend's changes
#                    1011a2b, 67c6234, 8e21082, c7f2a18, 525636e, 18cc715, da5e217
#   teardown_check   what those changes assume of the driver (A, B, C)
#   remap_check      4 pages with 2 unmapped, 64 with 33
#   reserve_align_check  mutant Q2-25: cuMemAddressReserve's default
#                    alignment (0) against 2 MiB (an observation; ~1 s)
#   fork_check       a CUDA pool and the PyTorch ABI in a forked child
#                    (331a4f2, 776b29f: checked on the mock driver only);
#                    first, as an observation, a CUDA coop_pool_create in a
#                    child forked after a cuInit outside coop (~1 s; at most
#                    a sixth of the step if the child hangs)
#   second_device_check  two GPUs only (skips on one, ~1 s): a pool on device
#                    1 with device 0's context current (mutant Q2-75; ~5 s)
#   stream_check     record_stream's history and foreign pointers, with the
#                    earlier rules (0340dfd, 224d627)
#   memory_viz_check coop's snapshot in torch's own viewer
#   oom_check        both OOM routes; the oom history entry (2b4572f)
# A step starts only with at least its minimum left of BUDGET_S (default 360
# seconds, the steps' time; packing takes a few more) and runs at most its
# timeout or what is left. Expected about 200 s on an H200: on 2026-11-27
# device_tests.sh took 128 s with a 21 s bench, and oom_check, stream_check
# and memory_viz_check 74 s with a smoke test (results/h200-2026-11-27e/);
# the driver checks take seconds.
#
# Writes $OUT/pending/ (default ./gpu-out/pending): summary.txt (one line per
# step: name, status, exit, seconds), findings.jsonl (the driver checks'
# lines and every script's summary lines) and pending.tgz (every log and
# JSON lines file, device_tests.sh's archive inside; the viewer check's
# snapshots are left out, their figures are in its lines): three files, as
# the device tool brings back at most 8. A status is ok, skip (the script
# found no device or torch: exit 77), fail, timeout, no-time (not started:
# too little budget left) or missing (.gpu/ lacks what the step needs).
#
# Exit: 0 when every step was ok or skipped, 1 otherwise, 77 (with
# summary.txt saying so) when the driver offers no device: nothing is run.
# STEPS (default: all nine) names the steps to run, e.g. STEPS="teardown_check
# oom_check" for a later call that repeats what failed. PYTHON (default
# python3) runs the scripts; COOP_CUDA_DRIVER and GPU_DIR are given on
# (tests/pending_checks_script_test.sh runs this on the mock driver with a
# stand-in .gpu/).
set -u
cd "$(dirname "$0")/../.." || exit 2
top=$PWD
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-360}
all_steps="device_tests teardown_check remap_check reserve_align_check fork_check"
all_steps="$all_steps second_device_check stream_check memory_viz_check oom_check"
STEPS=${STEPS:-$all_steps}
for name in $STEPS; do
    case " $all_steps " in
    *" $name "*) ;;
    *)
        echo "pending_device_checks.sh: STEPS: no step '$name' (steps: $all_steps)" >&2
        exit 2
        ;;
    esac
done
gpu=${GPU_DIR:-$top/.gpu}
DEST=${OUT:-$top/gpu-out}/pending
mkdir -p "$DEST" || exit 2
W=$(mktemp -d /tmp/pending.XXXXXX) || exit 2
trap 'rm -rf "$W"' EXIT
summary=$W/summary.txt
t0=$(date +%s)
failed=0

note() { echo "$*" >>"$summary"; }
left() { echo $((BUDGET_S - ($(date +%s) - t0))); }
finish() { # copies what comes back, prints it, exits with $1
    cp "$summary" "$DEST/summary.txt"
    touch "$W/findings.jsonl"
    cp "$W/findings.jsonl" "$DEST/findings.jsonl"
    rm -rf "$W/viz" # the snapshots: megabytes each, their figures are in viz.jsonl
    tar czf "$DEST/pending.tgz" -C "$W" --exclude=pending.tgz .
    echo "=== summary ($DEST)"
    cat "$summary"
    echo "=== findings"
    cut -c1-1500 "$W/findings.jsonl"
    exit "$1"
}

note "pending_device_checks.sh $(date -u +%FT%TZ) budget ${BUDGET_S} s steps: $STEPS;" \
    "commit $(cat "$gpu/commit" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# No device: nothing to run, said once.
if ! "$PY" -c 'import sys; sys.path.insert(0, "scripts/gpu"); import driver_ctypes
driver_ctypes.open_driver("pending_device_checks.sh")' 2>"$W/preflight.err"; then
    note "SKIP all: $(head -c 300 "$W/preflight.err")"
    cat "$W/preflight.err" >&2
    finish 77
fi
timeout 60 bash scripts/gpu/device_env.sh >"$W/env.txt" 2>&1

# step NAME TIMEOUT MINIMUM NEEDS CMD...: runs CMD (stdout to NAME.out,
# stderr to NAME.err) for at most TIMEOUT s or what is left, if MINIMUM s
# are left and every path of NEEDS (space-separated) exists; notes the
# status. CMD finds the limit it runs under in STEP_LIMIT.
step() {
    local name=$1 max=$2 min=$3 needs=$4 status rc start path limit
    shift 4
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    for path in $needs; do
        if [ ! -e "$path" ]; then
            note "$name missing rc=- seconds=0 ($path absent: scripts/gpu/README.md step 0)"
            failed=1
            return
        fi
    done
    limit=$(left)
    if [ "$limit" -lt "$min" ]; then
        note "$name no-time rc=- seconds=0 (${limit} s left, needs ${min})"
        failed=1
        return
    fi
    [ "$limit" -gt "$max" ] && limit=$max
    start=$(date +%s)
    STEP_LIMIT=$limit timeout -k 10 "$limit" "$@" >"$W/$name.out" 2>"$W/$name.err"
    rc=$?
    case $rc in
    0) status=ok ;;
    77) status=skip ;;
    124 | 137) status=timeout ;;
    *) status=fail ;;
    esac
    note "$name $status rc=$rc seconds=$(($(date +%s) - start)) (limit $limit)"
    case $status in ok | skip) ;; *) failed=1 ;; esac
    if [ "$status" = skip ]; then tail -n 1 "$W/$name.err" | sed 's/^/    /' >>"$summary"; fi
    return 0
}

export PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export COOP_LIBRARY=${COOP_LIBRARY:-$gpu/lib/libcoop.so} CUBLAS_WORKSPACE_CONFIG=:4096:8
tests="backend_cuda_test backend_cuda_stress_test backend_cuda_fault_test"
needs_tests="$gpu/bin/cuda_map_cost"
for t in $tests; do needs_tests="$needs_tests $gpu/bin/$t"; done
variants=${VARIANTS:-release asan}
if [ -z "${VARIANTS:-}" ] && [ "$BUDGET_S" -lt 300 ]; then variants=release; fi
for v in $variants; do
    [ "$v" = asan ] && for t in $tests; do needs_tests="$needs_tests $gpu/asan/bin/$t"; done
done

mkdir -p "$W/device_tests"
step device_tests 210 60 "$needs_tests" \
    env OUT="$W/device_tests" GPU_DIR="$gpu" SKIP_BENCH=1 VARIANTS="$variants" \
    bash scripts/gpu/device_tests.sh
# device_tests.sh exits 0 whatever its tests did: each test's own line says
if [ -s "$W/device_tests.out" ]; then
    runs=$(grep -cE '^(release|asan) backend_cuda_[a-z_]+ rc=' "$W/device_tests.out")
    bad=$(grep -E '^(release|asan) backend_cuda_[a-z_]+ rc=' "$W/device_tests.out" |
        grep -v ' rc=0 ')
    want=$((3 * $(echo "$variants" | wc -w)))
    if [ -n "$bad" ] || [ "$runs" -ne "$want" ]; then
        note "device_tests tests-failed ($runs of $want test runs reported; not rc=0:" \
            "$(echo "$bad" | tr '\n' ';'))"
        failed=1
    else
        note "device_tests tests-ok ($runs test runs, rc=0 each: $variants)"
    fi
fi

step teardown_check 60 10 "" "$PY" scripts/gpu/teardown_check.py
step remap_check 60 10 "" bash -c "$PY scripts/gpu/remap_check.py --pages 4 --half 2; a=\$?
    $PY scripts/gpu/remap_check.py --pages 64 --half 33; b=\$?; exit \$((a ? a : b))"
step reserve_align_check 30 10 "" "$PY" scripts/gpu/reserve_align_check.py
cat "$W/teardown_check.out" "$W/remap_check.out" "$W/reserve_align_check.out" 2>/dev/null |
    grep '^{' >>"$W/findings.jsonl"
# the two children (the foreign-init observation's, the pool route's) get
# (STEP_LIMIT - 5) / 6 s each, the torch route four times that
step fork_check 75 15 "$COOP_LIBRARY" bash -c "$PY scripts/gpu/fork_check.py --torch \
    --timeout \$(((STEP_LIMIT - 5) / 6))"
step second_device_check 60 15 "$COOP_LIBRARY" "$PY" scripts/gpu/second_device_check.py
cat "$W/fork_check.out" "$W/second_device_check.out" 2>/dev/null | grep '^{' >>"$W/findings.jsonl"

# --deadline STEP_LIMIT - 10: the parents start no child after it and cut
# each child's time to it, so they print their summary inside the step's limit
step stream_check 200 60 "$COOP_LIBRARY" bash -c "$PY scripts/gpu/stream_check.py --timeout 60 \
    --deadline \$((STEP_LIMIT - 10)) --out $W/stream_check.jsonl"
step memory_viz_check 150 40 "$COOP_LIBRARY" bash -c "$PY scripts/gpu/memory_viz_check.py \
    --timeout 90 --deadline \$((STEP_LIMIT - 10)) --dir $W/viz --out $W/viz.jsonl"
step oom_check 100 30 "$COOP_LIBRARY" bash -c "$PY scripts/gpu/oom_check.py --timeout 45 \
    --deadline \$((STEP_LIMIT - 10)) --out $W/oom_check.jsonl"
cat "$W"/stream_check.jsonl "$W"/viz.jsonl "$W"/oom_check.jsonl 2>/dev/null |
    grep '"summary"' | grep -v '"environment"' >>"$W/findings.jsonl"

note "total $(($(date +%s) - t0)) s"
finish "$failed"
