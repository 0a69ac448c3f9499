#!/usr/bin/env bash
# Runs each libFuzzer harness built by `make fuzz` for a given time and prints
# its executions per second and the coverage it reached (libFuzzer's cov:
# edges and ft: features). A crash, hang (-timeout), leak or out-of-memory
# stops that fuzzer; the script then exits non-zero and names the input that
# triggered it (under WORK/NAME/, replay it with BIN/fuzz_NAME FILE).
#
#   scripts/fuzz.sh SECONDS [NAME...]     (default: every fuzzer in BIN)
#
# Environment: FUZZ_BIN (the built harnesses; default tests/fuzz/bin),
# FUZZ_WORK (corpora the runs grow and logs; default fuzz-work), FUZZ_SEEDS
# (seed corpora; default the source tree's tests/fuzz/corpus).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:?usage: scripts/fuzz.sh SECONDS [NAME...]}
shift
bin=${FUZZ_BIN:-tests/fuzz/bin}
work=${FUZZ_WORK:-fuzz-work}
seeds=${FUZZ_SEEDS:-$here/tests/fuzz/corpus}
if [ $# -eq 0 ]; then
    for f in "$bin"/fuzz_*; do [ -x "$f" ] && set -- "$@" "${f##*/fuzz_}"; done
fi
[ $# -gt 0 ] || { echo "fuzz.sh: no fuzzers in $bin (run make fuzz first)" >&2; exit 2; }
bad=0
printf '%-12s %8s %10s %8s %8s %6s  %s\n' fuzzer seconds execs execs/s cov ft result
for name in "$@"; do
    exe=$bin/fuzz_$name
    [ -x "$exe" ] || { echo "fuzz.sh: $exe missing (run make fuzz)" >&2; bad=1; continue; }
    mkdir -p "$work/$name/corpus"
    log=$work/$name/fuzz.log
    dirs=("$work/$name/corpus")
    [ -d "$seeds/$name" ] && dirs+=("$seeds/$name")
    start=$(date +%s)
    # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: a runaway allocation
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/$name/" "${dirs[@]}" >"$log" 2>&1
    rc=$?
    elapsed=$(($(date +%s) - start))
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    if [ "$rc" -eq 0 ]; then
        result=ok
    else
        bad=1
        result="FAILED (rc $rc): $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log"); input: $(ls "$work/$name"/{crash,leak,timeout,oom}-* 2>/dev/null | head -1)"
    fi
    printf '%-12s %8s %10s %8s %8s %6s  %s\n' "$name" "$elapsed" "${execs:-?}" "${rate:-?}" \
        "${cov:-?}" "${ft:-?}" "$result"
done
exit $bad
