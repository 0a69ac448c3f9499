#!/bin/sh
# coop bench's output, not its speed (benchmarks are never timed in tests):
# --json prints one object per live count with the fields of the "Speed" table
# of docs/measured-host.md (and the footprints) and positive times; --floor --json prints every layout at every live count, each
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

# options in getopt_long's --name=value form, as every command takes them
out=$($coop bench --json --batches=2 --live=1500 --only=coop) || fail "coop bench --live=1500 exited $?"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s\n' "$out" | grep -q '"live_blocks": 1500,' &&
    printf '%s\n' "$out" | grep -q '"jemalloc_ns_per_pair": 0' ||
    fail "bench --live=1500 --only=coop: want one coop-only row of 1500: $out"

# the sizes at 1024 and 10000 live blocks: records for live + live / 5
# blocks; 2^k >= 4 x live map slots (4096 and 65536: 4 x 1024 itself is one)
out=$($coop bench --floor --json --live 1024,10000) || fail "coop bench --floor exited $?"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 6 ] || fail "floor: want 6 lines: $out"
for layout in coop:64:16:0.08:0.07:0.77:1.05 compact:32:8:0.04:0.03:0.38:0.52 \
    minimal:16:8:0.02:0.03:0.19:0.52; do
    set -- $(printf '%s\n' "$layout" | tr ':' ' ')
    name=$1 record=$2 slot=$3
    shift 3
    for live in 1024 10000; do
        row=$(printf '%s\n' "$out" | grep "\"live_blocks\": $live, \"layout\": \"$name\"") ||
            fail "floor: no $name row at $live"
        printf '%s\n' "$row" | grep -q "\"record_bytes\": $record, \"slot_bytes\": $slot," ||
            fail "floor: $name sizes in $row"
        printf '%s\n' "$row" | grep -q "\"records_mb\": $1, \"map_mb\": $2," ||
            fail "floor: $name megabytes, want $1 and $2: $row"
        shift 2
        positive "$row" skeleton_ns_per_pair || fail "floor: time not > 0 in $row"
    done
done
# the table's growth is each layout's time over its own at the first count
got=$($coop bench --floor --live 1000 | awk 'NR > 1 { print $2, $NF }' | tr '\n' ' ')
[ "$got" = "coop 1.00x compact 1.00x minimal 1.00x " ] || fail "floor's growth column: $got"
# ... at a later count too: its time over the first (both as printed, to rounding)
$coop bench --floor --live 1000,100000 | awk 'NR > 1 {
        if (!($2 in first)) first[$2] = $7
        d = $8 - $7 / first[$2]; if (d > 0.015 || d < -0.015) bad = 1 }
    END { exit bad }' || fail "floor's growth at 100000: $($coop bench --floor --live 1000,100000)"
# Beyond ~430k live blocks the automatic capacity (8 x the live bytes) and
# its 2x of address space passed x86-64's 128 TiB: coop's column failed
# with 'cannot reserve'. It is capped at 32 TiB (one batch: under a second).
out=$($coop bench --json --only coop --batches 1 --live 450000) ||
    fail "coop bench --live 450000 exited $?"
positive "$out" coop_ns_per_pair || fail "bench at 450000 live blocks: $out"
[ "$failures" -eq 0 ] && echo "ok: bench and floor rows"
# --only: the other allocator's columns read 0
out=$($coop bench --json --only coop --batches 1 --live 100) || fail "--only coop exited $?"
positive "$out" coop_ns_per_pair && positive "$out" coop_footprint_over_live &&
    printf '%s\n' "$out" | grep -q '"jemalloc_ns_per_pair": 0\.0, .*"jemalloc_footprint_over_live": 0\.000}' ||
    fail "--only coop: $out"
out=$($coop bench --json --only jemalloc --batches 1 --live 100) || fail "--only jemalloc exited $?"
positive "$out" jemalloc_ns_per_pair && positive "$out" jemalloc_footprint_over_live &&
    printf '%s\n' "$out" | grep -q '"coop_ns_per_pair": 0\.0, "jemalloc_ns_per_pair": [^,]*, "coop_footprint_over_live": 0\.000,' ||
    fail "--only jemalloc: $out"
# the seed draws the workload: coop's footprint (its mapped bytes over the
# live bytes, no timing in it) is the same for the same seed, not another
footprint() {
    $coop bench --json --only coop --batches 1 --live 100 --seed "$1" |
        grep -o '"coop_footprint_over_live": [0-9.]*'
}
a=$(footprint 1) && b=$(footprint 1) && c=$(footprint 2) || fail "--seed: exited $?"
[ "$a" = "$b" ] && [ "$a" != "$c" ] || fail "--seed 1, 1, 2: $a / $b / $c"
# without --seed and --batches: seed 1 and 200 batches (the pairs drawn)
a=$($coop bench --json --only coop --live 100 | grep -o '"coop_footprint_over_live": [0-9.]*') &&
    b=$($coop bench --json --only coop --live 100 --seed 1 --batches 200 |
        grep -o '"coop_footprint_over_live": [0-9.]*') || fail "defaults: exited $?"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "default seed and batches: $a, not $b"
# without --live: 1000, 10000 and 100000 live blocks
got=$($coop bench --json --only coop --batches 1 | grep -o '"live_blocks": [0-9]*' | cut -d' ' -f2 |
    tr '\n' ' ') || fail "default live counts: exited $?"
[ "$got" = "1000 10000 100000 " ] || fail "default live counts: $got"
# --capacity-gib is GiB: 16 of them hold 10 blocks of up to 256 MiB
out=$($coop bench --json --only coop --capacity-gib 16 --batches 1 --live 10) ||
    fail "--capacity-gib 16 exited $?"
positive "$out" coop_ns_per_pair || fail "--capacity-gib 16: $out"
# the largest capacity, 32 TiB, is taken (twice that of address space fits
# 128 TiB; cli_errors_test refuses one GiB more)
out=$($coop bench --json --only coop --capacity-gib 32768 --batches 1 --live 10) ||
    fail "--capacity-gib 32768 exited $?"
positive "$out" coop_ns_per_pair || fail "--capacity-gib 32768: $out"
# ... which --only jemalloc does not make: it has no pool to size, so a
# --capacity-gib there is refused as ignored (it ran, the capacity dropped)
$coop bench --json --only jemalloc --capacity-gib 32768 --batches 1 --live 10 >/dev/null 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--only jemalloc with --capacity-gib: exited $rc, expected 2"
# the table's ratio is coop's time over jemalloc's
$coop bench --batches 1 --live 100 >"${TMPDIR:-/tmp}/coop-bench-$$" || fail "table exited $?"
awk 'NR == 2 { d = $4 - $2 / $3; exit !(d < 0.015 && d > -0.015) }' "${TMPDIR:-/tmp}/coop-bench-$$" ||
    fail "table's ratio: $(cat "${TMPDIR:-/tmp}/coop-bench-$$")"
rm -f "${TMPDIR:-/tmp}/coop-bench-$$"
# --help prints the usage and runs nothing
out=$($coop bench --help) || fail "--help exited $?"
printf '%s\n' "$out" | head -1 | grep -q '^usage: coop bench' || fail "--help: $out"
printf '%s\n' "$out" | grep -q '^ *live_blocks ' && fail "--help ran a benchmark: $out"
# --batches' range and what a large one costs (it said neither)
printf '%s\n' "$out" | grep -q -- '--batches N  timed batches per live count, 1\.\.100000' ||
    fail "--help does not give --batches' range: $out"
printf '%s\n' "$out" | grep -q 'host memory per live count' ||
    fail "--help does not say what --batches costs: $out"
[ "$failures" -eq 0 ] && echo "ok: --only, --seed, --capacity-gib, the ratio and --help"
[ "$failures" -eq 0 ]
