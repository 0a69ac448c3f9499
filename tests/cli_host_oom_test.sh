#!/bin/sh
# The coop command when host memory runs out (tests/README.md, "Host out of
# memory in the CLI"). Each case runs once clean under
# tests/fail_malloc_shim.c (an LD_PRELOAD module counting every malloc,
# calloc, realloc, aligned_alloc of the process from main on, the C
# library's, zlib's and jansson's included), then again with its N-th
# allocation failing (once), for N over all of them where there are up to
# 100, else the first and last 30 and a stride between (about 100 runs a
# case; a process and its checks cost about 5 ms). For every N:
# - no signal (status below 128);
# - status 0: standard output, standard error and the output file exactly
#   the clean run's (a failure the command recovered from changes nothing);
# - else: status 1 (the work failed; 2 would say the input was bad),
#   standard error one line that says host memory ran out, and the
#   output file as it was before the run (a previous one kept, a new one
#   not created), no temporary file beside it.
# Then, less densely, with every allocation from the N-th on failing
# (COOP_FAIL_MALLOC_FROM, 12 points a case): the cleanup and the message
# after the first failure get no memory either.
# COOP_HOST_OOM_FULL=1 sweeps every N of both kinds and adds the slow bench
# cases (about 5 minutes); COOP_HOST_OOM_ONLY=TEXT runs the cases whose name
# holds TEXT. Skipped under a sanitizer (COOP_SANITIZED, set by .ci/run).
set -u
coop=./coop
top="${srcdir:-.}"
data="$top/tests/data"
traces="$top/traces"
shim="$(pwd)/tests/.libs/fail_malloc_shim.so"
if [ -n "${COOP_SANITIZED:-}" ]; then
    echo "SKIP: a sanitizer's allocator cannot be replaced through LD_PRELOAD"
    exit 77
fi
[ -f "$shim" ] || { echo "SKIP: $shim not built (make check builds it)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-host-oom-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# the module must reach the command's allocations, or every check passes
# for nothing
LD_PRELOAD="$shim" COOP_FAIL_MALLOC_REPORT="$tmp/report" $coop --version >/dev/null 2>&1
if ! grep -q '^calls=[1-9]' "$tmp/report" 2>/dev/null; then
    echo "SKIP: $shim counted no allocation of coop (LD_PRELOAD not honoured here)"
    exit 77
fi

# what says host memory ran out (check_one): "out of host memory" and "no
# host memory" are coop's words; the C library's strerror(ENOMEM) ("Cannot
# allocate memory") and zlib's "out of memory" where they are the reason

# the clock's figures, which no two runs share: ns/op (the replay table's
# last column), ns_per_op, search_ns_p50 / _p99 (the sim table's 9th and
# 10th columns), bench's *_ns_per_pair and ns_per_load; the rest must match
# to the byte
mask_times() {
    case "$1" in
    none) cat ;;
    replay-table) awk 'NR > 1 { $NF = "T" } { print }' ;;
    sim-table) awk 'NR > 1 { $9 = "T"; $10 = "T" } { print }' ;;
    *) sed -E 's/"([a-z_]*ns_per_[a-z]+|search_ns_p50|search_ns_p99)": ?[^,}]*/"\1":T/g' ;;
    esac
}

# the names in $tmp/work, hidden ones too, into $names (no process: a run
# costs one process and its checks as few as can be)
entries() {
    names=
    for f in "$tmp/work"/* "$tmp/work"/.*; do
        case "${f##*/}" in . | ..) continue ;; esac
        [ -e "$f" ] || [ -L "$f" ] || continue
        names="$names${f##*/} "
    done
}

# run_case NAME MASK OUT CMD...: MASK is how to mask_times the output; OUT is
# the output file the command writes ("" for none: standard output only),
# in $tmp/work, which the case holds alone; CMD's arguments name it as @OUT@.
run_case() {
    name=$1
    mask=$2
    out=$3
    shift 3
    case "$name" in *"${COOP_HOST_OOM_ONLY:-}"*) ;; *) return ;; esac
    rm -rf "$tmp/work"
    mkdir "$tmp/work"
    # the command line, with @OUT@ replaced (no eval: names stay as given)
    set -- "$@" --
    while [ "$1" != -- ]; do
        arg=$1
        shift
        [ "$arg" = @OUT@ ] && arg="$tmp/work/$out"
        set -- "$@" "$arg"
    done
    shift
    LD_PRELOAD="$shim" COOP_FAIL_MALLOC_REPORT="$tmp/report" "$@" \
        >"$tmp/clean.raw" 2>"$tmp/clean.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$name: the clean run exited $rc: $(head -3 "$tmp/clean.err")"
        return
    fi
    mask_times "$mask" <"$tmp/clean.raw" >"$tmp/clean.out"
    total=$(sed -n 's/^calls=\([0-9]*\).*/\1/p' "$tmp/report")
    [ -n "$out" ] && mv "$tmp/work/$out" "$tmp/clean.file"
    # the N to fail: all, or the first and last 30 and a stride between
    # that keeps about 100 runs a case
    if [ -n "${COOP_HOST_OOM_FULL:-}" ] || [ "$total" -le 100 ]; then
        list=$(seq 1 "$total")
        step=1
    else
        step=$(((total - 60 + 39) / 40))
        list=$( (seq 1 30; seq 31 "$step" $((total - 30)); seq $((total - 29)) "$total") | uniq)
    fi
    errors=0
    failed_runs=0
    runs=0
    # an existing output must survive a failed run (put back after each)
    [ -n "$out" ] && printf 'the previous file\n' >"$tmp/work/$out"
    for n in $list; do
        check_one once "$n" "$@" || errors=$((errors + 1))
    done
    # from N on: fewer points (the cleanup after the first failure, and
    # the message, get no memory either)
    from_step=$(((total + 11) / 12))
    [ -n "${COOP_HOST_OOM_FULL:-}" ] && from_step=1
    for n in $(seq 1 "$from_step" "$total"); do
        check_one from "$n" "$@" || errors=$((errors + 1))
    done
    if [ "$errors" -eq 0 ]; then
        echo "ok: $name: $total allocations; $runs runs (failed once: stride $step, the first and last 30; from there on: stride $from_step), $failed_runs of them exit non-zero"
    fi
}

# check_one MODE N CMD...: one run of the current case, its checks; false
# when wrong
check_one() {
    mode=$1 n=$2
    shift 2
    runs=$((runs + 1))
    : >"$tmp/report"
    if [ "$mode" = once ]; then
        COOP_FAIL_MALLOC_AT=$n LD_PRELOAD="$shim" COOP_FAIL_MALLOC_REPORT="$tmp/report" "$@" \
            >"$tmp/run.raw" 2>"$tmp/run.err"
    else
        COOP_FAIL_MALLOC_FROM=$n LD_PRELOAD="$shim" COOP_FAIL_MALLOC_REPORT="$tmp/report" "$@" \
            >"$tmp/run.raw" 2>"$tmp/run.err"
    fi
    rc=$?
    what="$name: allocation $n failing ($mode)"
    if [ "$rc" -ge 128 ]; then
        fail "$what: killed by signal $((rc - 128)): $(head -3 "$tmp/run.err")"
        return 1
    fi
    report=
    read -r report <"$tmp/report"
    case "$report" in
    calls=*" failed="[1-9]*) ;;
    *)
        fail "$what: the allocation was not reached ($report)"
        return 1
        ;;
    esac
    files=
    [ -n "$out" ] && entries && files=$names
    if [ "$rc" -eq 0 ]; then
        mask_times "$mask" <"$tmp/run.raw" >"$tmp/run.out"
        if ! cmp -s "$tmp/run.out" "$tmp/clean.out" || ! cmp -s "$tmp/run.err" "$tmp/clean.err"; then
            fail "$what: exit 0, output not the clean run's: $(diff "$tmp/clean.out" "$tmp/run.out" | head -3) $(head -2 "$tmp/run.err")"
            return 1
        fi
        if [ -n "$out" ] && { ! cmp -s "$tmp/work/$out" "$tmp/clean.file" || [ "$files" != "$out " ]; }; then
            fail "$what: exit 0, $out not the clean run's (files: $files)"
            return 1
        fi
        [ -n "$out" ] && printf 'the previous file\n' >"$tmp/work/$out"
        return 0
    fi
    failed_runs=$((failed_runs + 1))
    if [ "$rc" -ne 1 ]; then # 2 is a usage or input error: not this
        fail "$what: exit $rc, not 1 (the work failed): $(head -2 "$tmp/run.err")"
        return 1
    fi
    line1= line2= more=
    {
        IFS= read -r line1
        if IFS= read -r line2 || [ -n "$line2" ]; then more=1; fi
    } <"$tmp/run.err"
    if [ -n "$more" ]; then
        fail "$what: exit $rc, more than one line on stderr: $(head -4 "$tmp/run.err")"
        return 1
    fi
    case "$line1" in
    *"out of host memory"* | *"no host memory"* | *"Cannot allocate memory"* | *"out of memory"*) ;;
    *)
        fail "$what: exit $rc, stderr does not say host memory ran out: '$line1'"
        return 1
        ;;
    esac
    if [ -n "$out" ]; then
        read -r kept <"$tmp/work/$out" || kept=
        if [ "$kept" != "the previous file" ] || [ "$files" != "$out " ]; then
            fail "$what: exit $rc, $out changed or a file left beside it (files: $files)"
            rm -rf "$tmp/work"
            mkdir "$tmp/work"
            printf 'the previous file\n' >"$tmp/work/$out"
            return 1
        fi
    fi
    return 0
}

run_case "replay table" replay-table "" $coop replay "$data/example.trace"
run_case "replay --json" json "" $coop replay --json --policy ideal,coop,coop-segments,torch \
    "$data/example.trace"
run_case "replay --timeline" replay-table tl $coop replay --policy ideal,coop,jemalloc --timeline @OUT@ \
    "$data/example.trace"
run_case "replay snapshot" replay-table "" $coop replay --policy ideal,torch,torch-expandable,recorded \
    "$traces/lstm-train-step.cuda.pickle.gz"
run_case "replay DTR log" replay-table "" $coop replay --policy ideal,coop "$data/sim_evict_once.jsonl"
run_case "sim" sim-table "" $coop sim --budget 0.9,0.5 "$data/sim_evict_once.jsonl"
run_case "sim --json arena" json "" $coop sim --json --memory arena --policy coop,dtr --budget 0.9,0.5 \
    --stable-min-ratio=0.25 "$data/sim_evict_once.jsonl"
run_case "sim --engine lib" sim-table "" $coop sim --engine lib --policy coop,dtr --budget 0.9 \
    "$data/sim_evict_once.jsonl"
run_case "convert text" none o.trace $coop convert "$data/example.trace" @OUT@
run_case "convert snapshot .gz" none o.trace.gz $coop convert "$traces/lstm-train-step.cuda.pickle.gz" @OUT@
run_case "convert DTR log" none o.trace $coop convert "$data/sim_evict_once.jsonl" @OUT@
run_case "convert to stdout" none "" $coop convert "$data/example.trace" -
run_case "bench coop" json "" $coop bench --json --only coop --live 100,200 --batches 3
# a third of a second and more a run (jemalloc's warm-up, --floor's arrays,
# --latency's buffers up to 64 MiB): with COOP_HOST_OOM_FULL only
if [ -n "${COOP_HOST_OOM_FULL:-}" ]; then
    run_case "bench jemalloc" json "" $coop bench --json --only jemalloc --live 100 --batches 3
    run_case "bench --floor" json "" $coop bench --json --floor --live 100
    run_case "bench --latency" json "" $coop bench --json --latency
fi

[ "$failures" -eq 0 ] || { echo "$failures failed"; exit 1; }
