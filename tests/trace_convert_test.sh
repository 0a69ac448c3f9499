#!/bin/sh
# coop convert: help, exit codes, output formats, and that a failed
# conversion leaves no half-written (or clobbered) output behind.
set -u
coop=./coop
data="${srcdir:-.}/tests/data"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-convert-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
# expect_exit CODE CMD...: runs CMD (stderr to $tmp/err), checks its status
expect_exit() {
    want=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want: $(cat "$tmp/err")"
}

expect_exit 0 $coop convert --help
grep -q "usage: coop convert" "$tmp/out" || fail "--help prints no usage"
expect_exit 2 $coop convert
grep -q "missing IN and OUT" "$tmp/err" || fail "no IN nor OUT: $(cat "$tmp/err")"
expect_exit 2 $coop convert "$data/example.trace"
grep -q "missing OUT" "$tmp/err" || fail "no OUT: $(cat "$tmp/err")"
expect_exit 2 $coop convert - "$tmp/x"
grep -q "IN cannot be '-': standard input is not read" "$tmp/err" || fail "IN '-': $(cat "$tmp/err")"
expect_exit 2 $coop convert --bogus "$data/example.trace" "$tmp/x"
expect_exit 2 $coop convert a b c
expect_exit 2 $coop convert --device "$data/example.trace" "$tmp/x"
expect_exit 2 $coop convert --device 0 "$data/example.trace" "$tmp/x"
grep -q "applies to PyTorch snapshots only" "$tmp/err" || fail "--device on text"

# plain, compressed and standard output; converting a converted trace
# changes nothing but the comment naming the source
expect_exit 0 $coop convert "$data/example.trace" "$tmp/a.trace"
expect_exit 0 $coop convert "$data/example.trace" "$tmp/a.trace.gz"
gzip -t "$tmp/a.trace.gz" || fail "a.trace.gz is not gzip"
expect_exit 0 $coop convert "$tmp/a.trace.gz" -
head -n 1 "$tmp/out" | grep -qx "coop-trace 1" || fail "stdout lacks the header"
grep -v '^#' "$tmp/out" >"$tmp/b"
grep -v '^#' "$tmp/a.trace" >"$tmp/c"
cmp -s "$tmp/b" "$tmp/c" || fail "converting a converted trace changed it"
[ "$(grep -c '^[LASRFUMNOE] ' "$tmp/c")" -eq 7 ] || fail "expected 7 event lines"
[ ! -e "$tmp/a.trace.tmp" ] || fail "a.trace.tmp left behind"
# a device is written in place (no /dev/null.tmp)
expect_exit 0 $coop convert "$data/example.trace" /dev/null

# bad input: exit 2, message with the position, no output, old output kept
printf 'coop-trace 1\nA 1 2\n' >"$tmp/bad.trace"
expect_exit 2 $coop convert "$tmp/bad.trace" "$tmp/new.trace"
grep -q "bad.trace:2: missing fields" "$tmp/err" || fail "message: $(cat "$tmp/err")"
[ ! -e "$tmp/new.trace" ] && [ ! -e "$tmp/new.trace.tmp" ] || fail "output written on bad input"
echo keep >"$tmp/keep.trace"
expect_exit 2 $coop convert "$tmp/bad.trace" "$tmp/keep.trace"
grep -qx keep "$tmp/keep.trace" || fail "existing output clobbered"

# a pickle that would run code
printf '\200\002cos\nsystem\n.' >"$tmp/evil.pickle"
expect_exit 2 $coop convert "$tmp/evil.pickle" "$tmp/evil.trace"
grep -q "evil.pickle: byte 2: pickle opcode GLOBAL (0x63) is not allowed" "$tmp/err" ||
    fail "message: $(cat "$tmp/err")"
[ ! -e "$tmp/evil.trace" ] || fail "output written for a refused pickle"

# missing input; output that cannot be written (exit 1)
expect_exit 2 $coop convert "$tmp/none" "$tmp/x"
grep -q "none: cannot open" "$tmp/err" || fail "message: $(cat "$tmp/err")"
expect_exit 1 $coop convert "$data/example.trace" "$tmp/no/such/dir/x.trace"
grep -q "cannot write" "$tmp/err" || fail "message: $(cat "$tmp/err")"
if [ -w /dev/full ]; then
    expect_exit 1 $coop convert "$data/example.trace" /dev/full
    grep -q "/dev/full: write failed" "$tmp/err" || fail "message: $(cat "$tmp/err")"
fi
exit 0
