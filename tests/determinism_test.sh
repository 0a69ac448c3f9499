#!/bin/sh
# The same command gives the same figures: coop replay --json and --timeline,
# coop sim --json (ideal and arena memory, the simulator and the library
# engine), coop bench --json's footprints (fixed --seed) and coop convert,
# each run again, without ASLR (setarch -R, where it works), under another
# TZ, under a locale whose decimal point is ',' (de_DE.UTF-8 built with
# localedef into a temporary LOCPATH, where it can be), from another
# directory with absolute paths, and with the traces or logs in the other
# order. Every JSON field must agree except the wall-clock ones
# (ns_per_op, search_ns_p50, search_ns_p99, coop_ns_per_pair,
# jemalloc_ns_per_pair) and `path`, which is the path as given; timelines
# and converted traces must agree to the byte. Under the ',' locale it also
# runs tests/alloc_conf_test, whose fraction_ignores_the_host_locale needs
# one. tests/README.md, "Determinism", has the table.
set -u
py=/usr/bin/python3
[ -x "$py" ] || { echo "skipped: no $py"; exit 77; }
src=$(cd "${srcdir:-.}" && pwd)
build=$(pwd)
coop="$build/coop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

text="traces/unet-train-step.trace.gz"
pickle="traces/lstm-train-step.cuda.pickle.gz"
ops="traces/unet-train-step.ops.jsonl.gz"
ops2="tests/data/sim_evict_once.jsonl"

# runs DIR [PREFIX...]: every command once, from $src with relative paths
# (or, with PATHS=abs, from $tmp with absolute ones), outputs under DIR.
runs() {
    out=$1
    shift
    mkdir -p "$out"
    if [ "${PATHS:-rel}" = abs ]; then at=$src/ here=$tmp; else at= here=$src; fi
    (
        cd "$here" || exit 1
        "$@" "$coop" replay --json "$at$text" "$at$pickle" >"$out/replay" &&
            "$@" "$coop" replay --json --page 512 --capacity 3G --policy coop,torch,jemalloc \
                --timeline "$out/timeline" "$at$text" >"$out/replay_timeline" &&
            "$@" "$coop" sim --json --memory ideal --policy dtr,dtr-full,lru,size \
                --budget 0.9,0.5 "$at$ops" "$at$ops2" >"$out/sim_ideal" &&
            "$@" "$coop" sim --json --memory arena --policy coop,dtr,dte --budget 0.7,0.4 \
                --no-min-ratio "$at$ops" "$at$ops2" >"$out/sim_arena" &&
            "$@" "$coop" sim --json --engine lib --policy coop,lru --budget 0.7 \
                "$at$ops" >"$out/sim_lib" &&
            "$@" "$coop" bench --json --seed 7 --live 300,600 --batches 3 \
                --capacity-gib 16 >"$out/bench" &&
            "$@" "$coop" convert "$at$pickle" "$out/convert_pickle" &&
            "$@" "$coop" convert "$at$ops" "$out/convert_ops"
    ) 2>"$out/stderr" || fail "${*:-plain} ${PATHS:-rel}: a command failed: $(cat "$out/stderr")"
}

# same NAME A B: A's and B's outputs agree (rows matched by their names,
# so that traces given in another order compare too).
same() {
    "$py" - "$@" <<'EOF' || failures=$((failures + 1))
import json, os, sys
WALL = {"ns_per_op", "search_ns_p50", "search_ns_p99",
        "coop_ns_per_pair", "jemalloc_ns_per_pair", "path"}
name, a, b = sys.argv[1:4]
bad = []
for f in sorted(os.listdir(a)):
    if f == "stderr":
        continue
    da = open(os.path.join(a, f), "rb").read()
    try:
        db = open(os.path.join(b, f), "rb").read()
    except FileNotFoundError:
        bad.append(f"{f}: missing")
        continue
    if f in ("timeline",) or f.startswith("convert"):
        if da != db:
            bad.append(f"{f}: the files differ")
        continue
    def rows(data):
        out = {}
        for line in data.decode().splitlines():
            r = json.loads(line)
            key = (r.get("trace") or r.get("log"), r.get("policy"), r.get("budget_ratio"),
                   r.get("live_blocks"))
            out[key] = {k: v for k, v in r.items() if k not in WALL}
        return out
    ra, rb = rows(da), rows(db)
    if ra.keys() != rb.keys():
        bad.append(f"{f}: other rows: {sorted(map(str, ra.keys() ^ rb.keys()))}")
    for k in sorted(ra.keys() & rb.keys(), key=str):
        diff = {x: (ra[k].get(x), rb[k].get(x)) for x in ra[k].keys() | rb[k].keys()
                if ra[k].get(x) != rb[k].get(x)}
        if diff:
            bad.append(f"{f} {k}: {diff}")
for line in bad:
    print(f"FAIL: {name}: {line}")
if not bad:
    print(f"ok: {name}")
sys.exit(1 if bad else 0)
EOF
}

runs "$tmp/base"
runs "$tmp/again"
same "run again" "$tmp/base" "$tmp/again"

if setarch "$(uname -m)" -R true 2>/dev/null; then
    runs "$tmp/no_aslr" setarch "$(uname -m)" -R
    same "ASLR off (setarch -R)" "$tmp/base" "$tmp/no_aslr"
else
    echo "skipped: ASLR off: setarch -R does not run here"
fi

runs "$tmp/tz" env TZ=Asia/Kathmandu
same "TZ=Asia/Kathmandu" "$tmp/base" "$tmp/tz"

PATHS=abs runs "$tmp/abs"
same "absolute paths from another directory" "$tmp/base" "$tmp/abs"

# the traces and logs in the other order: the same row for each
(cd "$src" && "$coop" replay --json "$pickle" "$text" >"$tmp/again/replay" &&
    "$coop" sim --json --memory ideal --policy dtr,dtr-full,lru,size --budget 0.9,0.5 \
        "$ops2" "$ops" >"$tmp/again/sim_ideal" &&
    "$coop" sim --json --memory arena --policy coop,dtr,dte --budget 0.7,0.4 --no-min-ratio \
        "$ops2" "$ops" >"$tmp/again/sim_arena") || fail "other order: a command failed"
same "traces in the other order" "$tmp/base" "$tmp/again"

# a locale whose decimal point is ',': the CLI sets none (C), and libcoop
# converts COOP_ALLOC_CONF's fraction in C whatever the host program set
locales="$tmp/locales"
if command -v localedef >/dev/null && mkdir -p "$locales" &&
    localedef -i de_DE -f UTF-8 "$locales/de_DE.UTF-8" >/dev/null 2>&1 &&
    LOCPATH="$locales" LC_ALL=de_DE.UTF-8 "$py" -c \
        'import locale, sys; locale.setlocale(locale.LC_ALL, ""); sys.exit(locale.localeconv()["decimal_point"] != ",")'; then
    runs "$tmp/de" env LOCPATH="$locales" LC_ALL=de_DE.UTF-8
    same "LC_ALL=de_DE.UTF-8" "$tmp/base" "$tmp/de"
    if [ -x "$build/tests/alloc_conf_test" ]; then
        if LOCPATH="$locales" COOP_TEST_LOCALE=de_DE.UTF-8 "$build/tests/alloc_conf_test" \
            >"$tmp/conf.log" 2>&1 && ! grep -q SKIPPED "$tmp/conf.log"; then
            echo "ok: COOP_ALLOC_CONF under de_DE.UTF-8 (tests/alloc_conf_test)"
        else
            fail "tests/alloc_conf_test under de_DE.UTF-8:"
            cat "$tmp/conf.log"
        fi
    else
        echo "skipped: COOP_ALLOC_CONF under de_DE.UTF-8: tests/alloc_conf_test is not built"
    fi
else
    echo "skipped: the ',' locale: localedef could not build de_DE.UTF-8 (Debian: locales)"
fi

[ "$failures" -eq 0 ]
