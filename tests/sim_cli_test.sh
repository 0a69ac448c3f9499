#!/bin/sh
# coop sim's --json rows: both engines print every field the issue names
# (the lib engine may add its own), --no-min-ratio prints min_budget_ratio as
# null, and without it the bisection's ratio is a number in (0, 1].
# stable_min_ratio is printed only with --stable-min-ratio (the simulator's
# default rows have exactly the names).
set -u
coop=./coop
log="${srcdir:-.}/traces/unet-train-step.ops.jsonl.gz"
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
keys() { grep -o '"[a-z_0-9]*":' | tr -d '":' | LC_ALL=C sort -u; }
for engine in sim lib; do
    row=$($coop sim --engine $engine --json --memory arena --policy coop --budget 0.9 "$log") ||
        fail "$engine: coop sim exited $?"
    for key in log policy memory budget_ratio result overhead evictions remat_ops \
        search_ns_p50 search_ns_p99 heuristic_evals frag_at_evict frag_failures min_budget_ratio; do
        printf '%s\n' "$row" | keys | grep -qx "$key" || fail "$engine: no '$key' in $row"
    done
    printf '%s\n' "$row" | grep -q '"min_budget_ratio":0\.[0-9]*[1-9]' ||
        printf '%s\n' "$row" | grep -q '"min_budget_ratio":1\.0*}' ||
        fail "$engine: min_budget_ratio not in (0, 1]: $row"
    row=$($coop sim --engine $engine --json --no-min-ratio --memory arena --policy coop \
        --budget 0.9 "$log") || fail "$engine --no-min-ratio: exited $?"
    printf '%s\n' "$row" | grep -q '"min_budget_ratio":null' ||
        fail "$engine --no-min-ratio: $row"
    printf '%s\n' "$row" | grep -q stable_min_ratio && fail "$engine: stable_min_ratio unasked: $row"
    row=$($coop sim --engine $engine --json --no-min-ratio --stable-min-ratio=0.05 --memory arena \
        --policy coop --budget 0.9 "$log") || fail "$engine --stable-min-ratio: exited $?"
    printf '%s\n' "$row" | grep -q '"min_budget_ratio":null,"stable_min_ratio":[01]\.[0-9]*}$' ||
        fail "$engine --stable-min-ratio: $row"
    [ "$failures" -eq 0 ] && echo "ok: $engine"
done
# the simulator's default row: the names and no others
row=$($coop sim --json --memory arena --policy coop --budget 0.9 "$log") || fail "exited $?"
got=$(printf '%s\n' "$row" | keys | tr '\n' ' ')
want="budget_ratio evictions frag_at_evict frag_failures heuristic_evals log memory min_budget_ratio overhead policy remat_ops result search_ns_p50 search_ns_p99 "
[ "$got" = "$want" ] || fail "default row's names: $got"
[ "$failures" -eq 0 ] && echo "ok: default names"
# Metrics against values computed by hand on two small logs (tests/data):
# - sim_evict_once: a (1024 B), b (1024), d (512) live at h's output, the peak
#   of 2560 B. Ideal at 0.9 (2304 B): h's 512 B find 2048 live, so one eviction
#   with 256 B free: frag_at_evict 256 / 2304 = 0.111111; recomputing it adds
#   10 of 100 ns, overhead 1.1.
# - sim_two_holes: a, b, c of 512 B, a and c freed: two 512 B holes around b.
#   Arena at 1.0 (1536 B): w's 1024 B do not fit although 1024 B are free, a
#   fragmentation failure (free >= request counts: > would miss it);
#   frag_at_evict 1024 / 1536 = 0.666667.
data="${srcdir:-.}/tests/data"
check_row() { # LABEL ROW KEY:VALUE...
    label=$1 row=$2
    shift 2
    for kv in "$@"; do
        printf '%s\n' "$row" | grep -qF "\"${kv%%:*}\":${kv#*:}," ||
            printf '%s\n' "$row" | grep -qF "\"${kv%%:*}\":${kv#*:}}" ||
            fail "$label: expected ${kv%%:*} ${kv#*:}: $row"
    done
}
row=$($coop sim --json --no-min-ratio --memory ideal --policy dtr --budget 0.9 \
    "$data/sim_evict_once.jsonl") || fail "sim_evict_once: exited $?"
check_row "evict once, ideal 0.9" "$row" result:'"ok"' overhead:1.100000 evictions:1 \
    remat_ops:1 frag_at_evict:0.111111 frag_failures:0
row=$($coop sim --json --no-min-ratio --memory arena --policy dtr --budget 1 \
    "$data/sim_two_holes.jsonl") || fail "sim_two_holes: exited $?"
check_row "two holes, arena 1.0" "$row" result:'"ok"' evictions:1 frag_at_evict:0.666667 \
    frag_failures:1
# ratios given apart print apart (%.4g printed 0.30001 as 0.3)
rows=$($coop sim --json --no-min-ratio --memory arena --policy dtr --budget 1,0.99999 \
    "$data/sim_two_holes.jsonl") || fail "two close ratios: exited $?"
printf '%s\n' "$rows" | grep -qF '"budget_ratio":0.99999,' || fail "0.99999 printed as: $rows"
[ "$failures" -eq 0 ] && echo "ok: hand-computed metrics"
# The log's file name is printed as a JSON string: quotes, backslashes and
# control characters escaped, bytes that are not UTF-8 replaced (it was
# printed as is, and the row did not parse).
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-sim-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
name=$(printf 'q"u\\o\tx\377\303\251.jsonl')
gzip -dc "$log" | head -5 >"$tmp/$name"
row=$($coop sim --json --no-min-ratio --policy dtr --budget 0.5 "$tmp/$name") ||
    fail "a quoted name: exited $?"
want=$(printf '"log":"q\\"u\\\\o\\u0009x\\ufffd\303\251.jsonl"')
printf '%s\n' "$row" | grep -qF -- "$want" || fail "the name is not escaped as $want: $row"
[ "$failures" -eq 0 ] && echo "ok: file names escaped"
[ "$failures" -eq 0 ]
