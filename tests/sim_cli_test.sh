#!/bin/sh
# coop sim's --json rows: both engines print every field the issue names
# (the lib engine may add its own), --no-min-ratio prints min_budget_ratio as
# null, and without it the bisection's ratio is a number in (0, 1].
# stable_min_ratio is printed only with --stable-min-ratio (the simulator's
# default rows have exactly the issue's names).
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
# the simulator's default row: the issue's names and no others
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
rows=$($coop sim --json --no-min-ratio --memory arena --policy dtr --budget 1,0.99999,0.9999999 \
    "$data/sim_two_holes.jsonl") || fail "two close ratios: exited $?"
printf '%s\n' "$rows" | grep -qF '"budget_ratio":0.99999,' || fail "0.99999 printed as: $rows"
printf '%s\n' "$rows" | grep -qF '"budget_ratio":0.9999999,' || fail "0.9999999 printed as: $rows"
[ "$failures" -eq 0 ] && echo "ok: hand-computed metrics"
# - sim_evict_once's smallest feasible ratio: 2048 of its 2560 B (h's output
#   with a and b), 0.8; the bisection to 0.005 stops at 0.80078125, printed
#   with 4 decimals (both engines). Its grid of step 0.5 is 1 alone (0.5 fails),
#   the default step reaches 0.8.
for engine in sim lib; do
    row=$($coop sim --engine $engine --json --memory arena --policy dtr --budget 0.9 \
        "$data/sim_evict_once.jsonl") || fail "$engine: sim_evict_once: exited $?"
    check_row "evict once, $engine's min ratio" "$row" min_budget_ratio:0.8008
done
row=$($coop sim --json --no-min-ratio --stable-min-ratio=0.5 --policy dtr --budget 1 \
    "$data/sim_evict_once.jsonl") || fail "step 0.5: exited $?"
check_row "evict once, step 0.5" "$row" stable_min_ratio:1.0000
row=$($coop sim --json --no-min-ratio --stable-min-ratio --policy dtr --budget 1 \
    "$data/sim_evict_once.jsonl") || fail "default step: exited $?"
check_row "evict once, default step" "$row" stable_min_ratio:0.8000
# the step's bounds, 0.0001 and 1, are steps; so is an overhead limit of 1
$coop sim --json --no-min-ratio --stable-min-ratio=0.0001 --overhead-limit 1 --policy dtr \
    --budget 1 "$data/sim_evict_once.jsonl" >/dev/null || fail "step 0.0001, limit 1: exited $?"
$coop sim --json --no-min-ratio --stable-min-ratio=1 --policy dtr --budget 1 \
    "$data/sim_evict_once.jsonl" >/dev/null || fail "step 1: exited $?"
# evict once's overhead of 1.1 crosses a limit of 1.05: both engines stop there
for engine in sim lib; do
    row=$($coop sim --engine $engine --json --no-min-ratio --overhead-limit 1.05 --policy dtr \
        --budget 0.9 "$data/sim_evict_once.jsonl") || fail "limit 1.05, $engine: exited $?"
    check_row "limit 1.05, $engine" "$row" result:'"thrash"'
done
[ "$failures" -eq 0 ] && echo "ok: min_budget_ratio and stable_min_ratio"
# The log's file name is printed as a JSON string: quotes, backslashes and
# control characters escaped, bytes that are not UTF-8 replaced (it was
# printed as is, and the row did not parse); a space is kept.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-sim-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
name=$(printf 'q"u\\o\tx \377\303\251.jsonl')
gzip -dc "$log" | head -5 >"$tmp/$name"
row=$($coop sim --json --no-min-ratio --policy dtr --budget 0.5 "$tmp/$name") ||
    fail "a quoted name: exited $?"
want=$(printf '"log":"q\\"u\\\\o\\u0009x \\ufffd\303\251.jsonl"')
printf '%s\n' "$row" | grep -qF -- "$want" || fail "the name is not escaped as $want: $row"
[ "$failures" -eq 0 ] && echo "ok: file names escaped"
# Every UTF-8 rule at its bounds: U+001F escaped; overlong forms (C0 80,
# E0 80 80, F0 8F BF BF), surrogates (ED A0 80), code points beyond
# U+10FFFF (F4 90 80 80, F5 80 80 80) and a sequence cut by an ASCII byte
# (E2 82 '(') replaced byte by byte; the smallest and largest of each length (U+0080, U+0800, U+D7FF,
# U+10000, U+10FFFF) copied.
name=$(printf 'u\037v-\300\200-\340\200\200-\360\217\277\277-\355\240\200-\364\220\200\200-\365\200\200\200-\342\202(-\302\200\340\240\200\355\237\277\360\220\200\200\364\217\277\277.jsonl')
gzip -dc "$log" | head -5 >"$tmp/$name"
row=$($coop sim --json --no-min-ratio --policy dtr --budget 0.5 "$tmp/$name") ||
    fail "a name at UTF-8's bounds: exited $?"
r='\ufffd'
want=$(printf '"log":"u\\u001fv-%s%s-%s%s%s-%s%s%s%s-%s%s%s-%s%s%s%s-%s%s%s%s-%s%s(-\302\200\340\240\200\355\237\277\360\220\200\200\364\217\277\277.jsonl"' \
    $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r $r)
printf '%s\n' "$row" | LC_ALL=C grep -qF -- "$want" || fail "not escaped as $want: $row"
[ "$failures" -eq 0 ] && echo "ok: UTF-8 bounds in file names"

# Small logs written here: call NAME BYTES TIME [ARGS] is a CALL with one
# output, release NAME... frees them.
call() {
    printf '{"ARGS":[%s],"INSTRUCTION":"CALL","NAME":"f","RESULT":["%s"],"TIME":"%s"}\n' "${4:-}" "$1" "$3"
    printf '{"INSTRUCTION":"MEMORY","MEMORY":"%s","NAME":"%s"}\n' "$2" "$1"
    printf '{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"%s"}\n' "$1"
}
release() {
    for t in "$@"; do printf '{"INSTRUCTION":"RELEASE","NAME":"%s"}\n' "$t"; done
}
# four: a, b, c, d of 512 B, peak 2048. At 0.75 (1536 B) d's allocation
# evaluates the three evictable tensors once each and evicts one.
{ call a 512 10; call b 512 10; call c 512 10; call d 512 10; release a b c d; } >"$tmp/four.jsonl"
for engine in sim lib; do
    row=$($coop sim --engine $engine --json --no-min-ratio --policy dtr --budget 0.75 \
        "$tmp/four.jsonl") || fail "four, $engine: exited $?"
    check_row "four, $engine" "$row" result:'"ok"' evictions:1 heuristic_evals:3
done
check_row "four, lib" "$row" searches:1 inplace_ops:0 zero_size:0
# zero: one tensor of 0 bytes, a peak of 0: every ratio runs, so the smallest
# is 0 (a number, not null); the lib engine counts the zero-size output
{ call a 0 10; release a; } >"$tmp/zero.jsonl"
row=$($coop sim --json --policy dtr --budget 1 "$tmp/zero.jsonl") || fail "zero: exited $?"
check_row "zero" "$row" result:'"ok"' min_budget_ratio:0.0000
row=$($coop sim --engine lib --json --no-min-ratio --policy dtr --budget 1 "$tmp/zero.jsonl") ||
    fail "zero, lib: exited $?"
check_row "zero, lib" "$row" zero_size:1 view_outputs:0 searches:0
# pinned: a, b, c of 512 B, a and c freed, then w (1024 B) from b: in the
# arena at 1.0 (3 blocks) w fits in neither hole and b is pinned: oom at every
# ratio, min_budget_ratio null (the table's "none"; "-" when not computed)
{ call a 512 10; call b 512 10; call c 512 10; release a c; call w 1024 10 '"b"'; release b w; } \
    >"$tmp/pinned.jsonl"
row=$($coop sim --json --memory arena --policy dtr --budget 1 "$tmp/pinned.jsonl") ||
    fail "pinned: exited $?"
check_row "pinned" "$row" result:'"oom"' frag_failures:1 min_budget_ratio:null
last_column() { awk 'NR > 1 { print $NF }' | tr '\n' ' '; }
got=$($coop sim --memory arena --policy dtr --budget 1 "$tmp/pinned.jsonl" | last_column)
[ "$got" = "none " ] || fail "pinned's table min_ratio: '$got'"
got=$($coop sim --no-min-ratio --policy dtr --budget 1 "$data/sim_evict_once.jsonl" | last_column)
[ "$got" = "- " ] || fail "--no-min-ratio's table min_ratio: '$got'"
# with --stable-min-ratio both ratios end the same line
got=$($coop sim --stable-min-ratio=0.5 --policy dtr --budget 1,0.9 "$data/sim_evict_once.jsonl" |
    awk 'NR > 1 { print $(NF - 1), $NF }' | tr '\n' ' ')
[ "$got" = "0.8008 1.0000 0.8008 1.0000 " ] || fail "the table's min_ratio and stable: '$got'"
# every table row has its header's columns (the lib engine's has no memory)
for engine in sim lib; do
    got=$($coop sim --engine $engine --memory arena --policy dtr --budget 1,0.75 \
        "$tmp/four.jsonl" | awk '{ print NF }' | sort -u | tr '\n' ' ')
    [ "$got" = "$([ $engine = sim ] && echo 16 || echo 19) " ] ||
        fail "$engine table: fields per line $got"
done
# the table's figures: the ratio with 2 decimals, overhead 4, frag 3; a log
# name longer than the log column's 28 characters widens it (it was cut
# there), and every row's policy starts where the header's does
got=$($coop sim --no-min-ratio --policy dtr --budget 0.9 "$data/sim_evict_once.jsonl" |
    awk 'NR == 2 { print $4, $6, $14 }')
[ "$got" = "0.90 1.1000 0.111" ] || fail "evict once's table: '$got'"
cp "$tmp/four.jsonl" "$tmp/four-tensors-of-512-bytes-each.jsonl"
$coop sim --no-min-ratio --policy dtr --budget 1 "$tmp/four-tensors-of-512-bytes-each.jsonl" \
    "$data/sim_evict_once.jsonl" >"$tmp/table" || fail "the log column: exited $?"
got=$(awk 'NR == 2 { print $1 }' "$tmp/table")
[ "$got" = "four-tensors-of-512-bytes-each.jsonl" ] || fail "the log column: '$got'"
got=$(awk '{ print index($0, $2) }' "$tmp/table" | sort -u | tr '\n' ' ')
[ "$got" = "38 " ] || fail "the policy column starts at $got: $(cat "$tmp/table")"
# --stable-min-ratio adds its column to the header too
got=$($coop sim --stable-min-ratio=0.5 --policy dtr --budget 1 "$data/sim_evict_once.jsonl" |
    awk 'NR == 1 { print NF, $NF }')
[ "$got" = "17 stable" ] || fail "the header with stable: '$got'"
# each row is out when its run ends: before a later log's error, where
# stdout and stderr meet
printf '{"type": "call", "op"\n' >"$tmp/bad.jsonl"
$coop sim --json --no-min-ratio --policy dtr --budget 0.9 "$data/sim_evict_once.jsonl" \
    "$tmp/bad.jsonl" >"$tmp/both" 2>&1
head -1 "$tmp/both" | grep -q '^{"log":"sim_evict_once.jsonl"' &&
    tail -1 "$tmp/both" | grep -q 'bad.jsonl:1' || fail "a row and a later error: $(cat "$tmp/both")"
# a table whose only log cannot be read is no table: no header without a
# row (it printed one, then the error; rev33-I), and a good log after a bad
# one gets the header once, above its rows
$coop sim --policy dtr --budget 0.9 "$tmp/bad.jsonl" >"$tmp/out" 2>/dev/null
[ ! -s "$tmp/out" ] || fail "a header for a log that was not read: $(cat "$tmp/out")"
got=$($coop sim --no-min-ratio --policy dtr --budget 0.9 "$tmp/bad.jsonl" \
    "$data/sim_evict_once.jsonl" 2>/dev/null | awk '{ print $1 }' | tr '\n' ' ')
[ "$got" = "log sim_evict_once.jsonl " ] || fail "a bad log, then a good one: '$got'"
[ "$failures" -eq 0 ] && echo "ok: small logs"
# mutate: add_ writes a (1024 B) in place from b (1024 B). Copy-on-write
# needs a third buffer, the peak of 3072 B; in place the two fit in 0.7 of
# it. --inplace overrides each policy's default (coop: in place, dtr: copy).
{ call a 1024 10; call b 1024 10
  printf '{"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["a","b"],"MUTATE":[0],"TIME":"20"}\n'
  release a b; } >"$tmp/mutate.jsonl"
results() { grep -o '"policy":"[a-z]*"\|"result":"[a-z]*"' | tr -d '"' | tr '\n' ' '; }
got=$($coop sim --json --no-min-ratio --memory arena --policy coop,dtr --budget 0.7 \
    "$tmp/mutate.jsonl" | results)
[ "$got" = "policy:coop result:ok policy:dtr result:oom " ] || fail "mutate, defaults: $got"
got=$($coop sim --json --no-min-ratio --memory arena --inplace on --policy coop,dtr \
    --budget 0.7 "$tmp/mutate.jsonl" | results)
[ "$got" = "policy:coop result:ok policy:dtr result:ok " ] || fail "mutate, --inplace on: $got"
got=$($coop sim --json --no-min-ratio --memory arena --inplace off --policy coop,dtr \
    --budget 0.7 "$tmp/mutate.jsonl" | results)
[ "$got" = "policy:coop result:oom policy:dtr result:oom " ] || fail "mutate, --inplace off: $got"
# the lib engine counts the in-place op under its own name
row=$($coop sim --engine lib --json --no-min-ratio --policy coop --budget 1 "$tmp/mutate.jsonl") ||
    fail "mutate, lib: exited $?"
check_row "mutate, lib" "$row" inplace_ops:1 multi_call_ops:0
# cheap: x, c, y of 512 B, c cheap (1 ns: 0.002 ns/byte), then c freed and w
# (1024 B) made from x and y. In the arena at 1.0 (4 blocks), c placed at
# the high end leaves one 1024 B hole for w; placed between x and y, two
# holes of 512 B and an oom. coop partitions by default (1e-2); dtr and
# coop-nopart (coop's ablation without it) do not, unless --partition says so.
{ call x 512 1000; call c 512 1; call y 512 1000; release c; call w 1024 1000 '"x","y"'
  release x y w; } >"$tmp/cheap.jsonl"
for part in "" "--partition 1e-2:ok ok ok" "--partition off:oom oom oom" \
    "--partition 0:oom oom oom"; do
    want=${part#*:}
    [ -n "$part" ] || want="ok oom oom"
    part=${part%%:*}
    got=$($coop sim --json --no-min-ratio --memory arena $part --policy coop,dtr,coop-nopart --budget 1 \
        "$tmp/cheap.jsonl" | grep -o '"result":"[a-z]*"' | cut -d'"' -f4 | tr '\n' ' ')
    [ "$got" = "$want " ] || fail "cheap, '$part': $got, not $want"
done
[ "$failures" -eq 0 ] && echo "ok: --inplace and --partition"
# --json prints JSON lines only (no table header), each one object; the lib
# engine's rows name it second
for engine in sim lib; do
    $coop sim --engine $engine --json --memory arena --budget 1,0.75 "$tmp/four.jsonl" \
        "$data/sim_two_holes.jsonl" >"$tmp/rows" || fail "$engine rows: exited $?"
    [ "$(wc -l <"$tmp/rows")" -ge 4 ] || fail "$engine rows: $(cat "$tmp/rows")"
    if [ $engine = sim ]; then pattern='^{"log":"[^"]*","policy":'; else pattern='^{"log":"[^"]*","engine":"lib","policy":'; fi
    bad=$(grep -v "$pattern.*}\$" "$tmp/rows")
    [ -z "$bad" ] || fail "$engine: not a row: $bad"
done
# the default policies, in order: DTR's own in the ideal model, the
# paper's comparison in the arena
got=$($coop sim --json --no-min-ratio --budget 1 "$tmp/four.jsonl" |
    grep -o '"policy":"[a-z-]*"' | cut -d'"' -f4 | tr '\n' ' ')
[ "$got" = "dtr dtr-full lru " ] || fail "sim's default policies, ideal: $got"
got=$($coop sim --json --no-min-ratio --memory arena --budget 1 "$tmp/four.jsonl" |
    grep -o '"policy":"[a-z-]*"' | cut -d'"' -f4 | tr '\n' ' ')
[ "$got" = "coop dtr dte " ] || fail "sim's default policies, arena: $got"
got=$($coop sim --engine lib --json --no-min-ratio --budget 1 "$tmp/four.jsonl" |
    grep -o '"policy":"[a-z-]*"' | cut -d'"' -f4 | tr '\n' ' ')
[ "$got" = "coop coop-eq dtr dte " ] || fail "lib's default policies: $got"
[ "$failures" -eq 0 ] && echo "ok: JSON rows"
# --plain-walk and --no-eq-cache change no result, only the work the table
# counts: coop's window search visits more blocks, dtr walks more classes
table() {
    $coop sim --no-min-ratio --memory arena "$@" --policy coop,dtr --budget 0.5 "$log" |
        awk 'NR > 1 { print $2, $6, $7, $8, $12, $13 }'
}
base=$(table)
for opt in --plain-walk --no-eq-cache; do
    other=$(table $opt)
    [ "$(printf '%s\n' "$base" | cut -d' ' -f1-4)" = "$(printf '%s\n' "$other" | cut -d' ' -f1-4)" ] ||
        fail "$opt changed the results: $base / $other"
    printf '%s\n%s\n' "$base" "$other" | awk -v opt=$opt '
        $1 == "coop" { blocks[n1++] = $6 } $1 == "dtr" { walks[n2++] = $5 }
        END { exit !(opt == "--plain-walk" ? blocks[1] > blocks[0] && walks[1] == walks[0] \
                                           : walks[1] > walks[0] && blocks[1] == blocks[0]) }' ||
        fail "$opt: counters $base / $other"
done
[ "$failures" -eq 0 ] && echo "ok: --plain-walk and --no-eq-cache"
[ "$failures" -eq 0 ]
