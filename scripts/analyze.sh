#!/bin/sh
# Runs the clang static analyzer (scan-build) over a fresh out-of-tree build
# of everything make check compiles: libcoop, the coop command, the tools
# library and the test programs (compiled, not run).
#
# Exit status: 0 no findings; 1 findings (the HTML report directory is
# printed: open it with scan-view or a browser); 2 the build itself failed;
# 77 scan-build is not installed (the automake SKIP code).
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

srcdir=$(cd "$(dirname "$0")/.." && pwd)
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
rc=0
scan-build -o "$report" make -j"$jobs" check TESTS= >"$work/build.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "analyze: the build failed (exit $rc), see $work/build.log" >&2
    exit 2
fi
reports=$(find "$report" -name 'report-*.html' 2>/dev/null | wc -l)
if [ "$reports" -gt 0 ]; then
    grep 'warning:.*\[' "$work/build.log" | sort -u >&2 || true
    echo "analyze: $reports finding(s); report: $(dirname "$(find "$report" -name index.html | head -n 1)")"
    exit 1
fi
echo "analyze: scan-build found nothing"
rm -rf "$work"
