#!/bin/sh
# coop bench's output, not its speed (benchmarks are never timed in tests):
# --json prints one object per live count with the fields the README names and
# positive times; --floor --json prints every layout at every live count, each
# record and slot size as its layout says.
set -u
coop=./coop
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
positive() { # the number after "$2": in line $1 is > 0
    printf '%s\n' "$1" | grep -q "\"$2\": [0-9]*[1-9][0-9]*\.[0-9]*" ||
        printf '%s\n' "$1" | grep -q "\"$2\": 0\.[0-9]*[1-9]"
}

out=$($coop bench --json --batches 3 --live 1000,2000) || fail "coop bench --json exited $?"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] || fail "bench: want 2 lines: $out"
for live in 1000 2000; do
    row=$(printf '%s\n' "$out" | grep "\"live_blocks\": $live,") || fail "bench: no row for $live"
    for key in coop_ns_per_pair jemalloc_ns_per_pair coop_footprint_over_live \
        jemalloc_footprint_over_live; do
        positive "$row" "$key" || fail "bench: $key not > 0 in $row"
    done
done

out=$($coop bench --floor --json --live 1000,2000) || fail "coop bench --floor exited $?"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 6 ] || fail "floor: want 6 lines: $out"
for layout in coop:64:16 compact:32:8 minimal:16:8; do
    name=${layout%%:*}
    sizes=${layout#*:}
    for live in 1000 2000; do
        row=$(printf '%s\n' "$out" | grep "\"live_blocks\": $live, \"layout\": \"$name\"") ||
            fail "floor: no $name row at $live"
        printf '%s\n' "$row" |
            grep -q "\"record_bytes\": ${sizes%:*}, \"slot_bytes\": ${sizes#*:}," ||
            fail "floor: $name sizes in $row"
        positive "$row" skeleton_ns_per_pair || fail "floor: time not > 0 in $row"
    done
done
# Beyond ~430k live blocks the automatic capacity (8 x the live bytes) and
# its 2x of address space passed x86-64's 128 TiB: coop's column failed
# with 'cannot reserve'. It is capped at 32 TiB (one batch: under a second).
out=$($coop bench --json --only coop --batches 1 --live 450000) ||
    fail "coop bench --live 450000 exited $?"
positive "$out" coop_ns_per_pair || fail "bench at 450000 live blocks: $out"
[ "$failures" -eq 0 ] && echo "ok: bench and floor rows"
[ "$failures" -eq 0 ]
