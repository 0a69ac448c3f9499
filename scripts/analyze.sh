#!/bin/sh
# Runs the clang static analyzer (scan-build) over a fresh out-of-tree build
# of everything make check compiles: libcoop, the coop command, the tools
# library and the test programs (compiled, not run).
#
# Every finding is keyed "file|function|bug type" and compared with the
# reviewed false positives in scripts/analyze_baseline.txt (one key and the
# reason it is not a bug per line; keys without line numbers, so unrelated
# edits do not move them). Only findings beyond the baseline fail the run;
# baseline entries no longer found are listed so they can be removed.
#
# Exit status: 0 nothing beyond the baseline; 1 new findings (printed, with
# the HTML report directory: open it with scan-view or a browser); 2 the
# build itself failed; 77 scan-build or clang is not installed (automake's SKIP
# code).
#
# A source tree configured in place (scripts/setup.sh does that) refuses
# out-of-tree builds, so then the files git knows (tracked, and untracked
# ones not ignored) are copied to a scratch directory and autoreconf'ed there.
# Environment: ANALYZE_JOBS (default 2) for make -j; ANALYZE_KEEP=1 keeps
# the scratch build.
set -eu

if ! command -v scan-build >/dev/null 2>&1; then
    echo "analyze: SKIP: scan-build not found (Debian: apt-get install clang-tools)"
    exit 77
fi
# scan-build compiles with clang (configure CC=clang below); Debian's
# clang-tools brings scan-build and clang-14, but not the clang command
if ! command -v clang >/dev/null 2>&1; then
    echo "analyze: SKIP: clang not found (Debian: apt-get install clang)"
    exit 77
fi

srcdir=$(cd "$(dirname "$0")/.." && pwd)
baseline=${ANALYZE_BASELINE:-$srcdir/scripts/analyze_baseline.txt}
jobs=${ANALYZE_JOBS:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/coop-analyze.XXXXXX")
report="$work/report"
cleanup() {
    [ "${ANALYZE_KEEP:-0}" = 1 ] || rm -rf "$work/src" "$work/build"
}
trap cleanup EXIT

if [ -f "$srcdir/config.status" ] || [ ! -x "$srcdir/configure" ]; then
    if ! git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
        echo "analyze: $srcdir is configured in place (or has no configure) and is not a" \
            "git checkout to copy from: run 'make distclean' there first" >&2
        exit 2
    fi
    mkdir "$work/src"
    # Files deleted in the working tree but still in the index are skipped.
    git -C "$srcdir" ls-files --cached --others --exclude-standard |
        while IFS= read -r f; do [ -f "$srcdir/$f" ] && printf '%s\n' "$f"; done |
        tar -C "$srcdir" -cf - -T - | tar -C "$work/src" -xf -
    (cd "$work/src" && autoreconf -fi >/dev/null 2>&1) || {
        echo "analyze: autoreconf failed in $work/src" >&2
        exit 2
    }
    srcdir="$work/src"
fi

mkdir "$work/build"
cd "$work/build"
if ! scan-build -o "$report" "$srcdir/configure" CC=clang -q >"$work/configure.log" 2>&1; then
    echo "analyze: configure failed, see $work/configure.log" >&2
    exit 2
fi
# make check with no TESTS builds everything the test suite needs and runs
# nothing. No --status-bugs: the exit status is the build's own, and the
# findings are counted from the report files.
# scripts/libtool_pic_only.sh: each library source compiled, so analysed, once
# (libtool compiles it twice, PIC and non-PIC: the same code analysed twice)
rc=0
scan-build -o "$report" make -j"$jobs" check TESTS= LIBTOOL="$srcdir/scripts/libtool_pic_only.sh" \
    >"$work/build.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "analyze: the build failed (exit $rc), see $work/build.log" >&2
    exit 2
fi
# One key per report, from the metadata comments scan-build writes into it.
for f in $(find "$report" -name 'report-*.html' | sort); do
    file=$(sed -n 's/^<!-- BUGFILE \(.*\) -->$/\1/p' "$f")
    printf '%s|%s|%s\t%s:%s\n' "${file#"$srcdir"/}" \
        "$(sed -n 's/^<!-- FUNCTIONNAME \(.*\) -->$/\1/p' "$f")" \
        "$(sed -n 's/^<!-- BUGTYPE \(.*\) -->$/\1/p' "$f")" \
        "${file#"$srcdir"/}" "$(sed -n 's/^<!-- BUGLINE \(.*\) -->$/\1/p' "$f")"
done | sort >"$work/found.txt"
cut -f1 "$work/found.txt" >"$work/found.keys"
if [ -f "$baseline" ]; then
    grep -v -e '^#' -e '^[[:space:]]*$' "$baseline" | cut -d'|' -f1-3 | sort >"$work/base.keys"
else
    : >"$work/base.keys"
fi
# comm pairs repeated keys one for one, so a second finding of a known kind
# in the same function still counts as new.
comm -23 "$work/found.keys" "$work/base.keys" >"$work/new.keys"
comm -13 "$work/found.keys" "$work/base.keys" >"$work/stale.keys"
found=$(wc -l <"$work/found.keys")
known=$((found - $(wc -l <"$work/new.keys")))
if [ -s "$work/stale.keys" ]; then
    echo "analyze: baseline entries no longer found (remove them from $baseline):"
    sed 's/^/  /' "$work/stale.keys"
fi
if [ -s "$work/new.keys" ]; then
    echo "analyze: $((found - known)) new finding(s) (file|function|bug type, at file:line):" >&2
    sort -u "$work/new.keys" | while IFS= read -r k; do
        grep -F "$k	" "$work/found.txt" | cut -f2 | paste -sd' ' - | sed "s#^#  $k  at #"
    done >&2
    grep 'warning:.*\[' "$work/build.log" | sort -u >&2 || true
    echo "analyze: report: $(dirname "$(find "$report" -name index.html | head -n 1)")"
    exit 1
fi
echo "analyze: scan-build found $found finding(s), all reviewed in $(basename "$baseline")"
rm -rf "$work"
