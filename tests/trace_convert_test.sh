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
# IN '-' is standard input; a pipe there is read once, whole (spool.h): the
# same trace as the file's, but for the '# from' line that names the input
$coop convert "$data/example.trace" "$tmp/file.trace" 2>"$tmp/err" || fail "convert: $(cat "$tmp/err")"
cat "$data/example.trace" | $coop convert - "$tmp/stdin.trace" 2>"$tmp/err" ||
    fail "IN '-': $(cat "$tmp/err")"
grep -v '^# from' "$tmp/file.trace" >"$tmp/file.body"
grep -v '^# from' "$tmp/stdin.trace" >"$tmp/stdin.body"
cmp -s "$tmp/file.body" "$tmp/stdin.body" && [ -s "$tmp/file.body" ] || fail "IN '-': another trace than the file's"
grep -q '^# from stdin' "$tmp/stdin.trace" || fail "IN '-': not named stdin: $(head -3 "$tmp/stdin.trace")"
expect_exit 2 $coop convert --bogus "$data/example.trace" "$tmp/x"
expect_exit 2 $coop convert a b c
grep -q "too many arguments" "$tmp/err" || fail "a b c: $(cat "$tmp/err")"
expect_exit 2 $coop convert --device "$data/example.trace" "$tmp/x"
expect_exit 2 $coop convert --device 0 "$data/example.trace" "$tmp/x"
grep -q "applies to PyTorch snapshots only" "$tmp/err" || fail "--device on text"
# getopt's conventions, as the other commands: --device=N, and -- ending the
# options before a path that starts with '-' (both were unknown options)
expect_exit 2 $coop convert --device=0 "$data/example.trace" "$tmp/x"
grep -q "applies to PyTorch snapshots only" "$tmp/err" || fail "--device=0: $(cat "$tmp/err")"
expect_exit 0 $coop convert --device=0 "${srcdir:-.}/traces/unet-train-step.cuda.pickle.gz" "$tmp/dev0.trace"
cp "$data/example.trace" "$tmp/-in.trace"
(cd "$tmp" && "$OLDPWD/$coop" convert -- -in.trace -out.trace) >"$tmp/out" 2>"$tmp/err" ||
    fail "-- -in.trace -out.trace: $(cat "$tmp/err")"
head -n 1 "$tmp/-out.trace" | grep -qx "coop-trace 1" || fail "-- -in.trace -out.trace wrote no trace"

# plain, compressed and standard output; converting a converted trace
# changes nothing, not even the '# from' comment: it still names the
# recording, not the intermediate file (it named a.trace.gz)
expect_exit 0 $coop convert "$data/example.trace" "$tmp/a.trace"
expect_exit 0 $coop convert "$data/example.trace" "$tmp/a.trace.gz"
gzip -t "$tmp/a.trace.gz" || fail "a.trace.gz is not gzip"
expect_exit 0 $coop convert "$tmp/a.trace.gz" -
head -n 1 "$tmp/out" | grep -qx "coop-trace 1" || fail "stdout lacks the header"
cmp -s "$tmp/out" "$tmp/a.trace" ||
    fail "converting a converted trace changed it: $(diff "$tmp/a.trace" "$tmp/out" | head -5)"
[ "$(grep -c '^[LASRFUMNOE] ' "$tmp/out")" -eq 7 ] || fail "expected 7 event lines"
# so does a snapshot's, converted twice (from standard input the second time)
expect_exit 0 $coop convert - "$tmp/dev0-again.trace" <"$tmp/dev0.trace"
sed -n 2p "$tmp/dev0-again.trace" | grep -qx '# from unet-train-step.cuda.pickle.gz' ||
    fail "a converted snapshot converted again: $(sed -n 2p "$tmp/dev0-again.trace")"
# only the line after the header names the source: a '# from' further on is
# a comment like any other
sed '3i # from elsewhere.trace' "$data/example.trace" >"$tmp/later-from.trace"
expect_exit 0 $coop convert "$tmp/later-from.trace" -
sed -n 2p "$tmp/out" | grep -qx '# from later-from.trace' || fail "a later '# from': $(sed -n 2p "$tmp/out")"
# the file is written to a hidden .a.trace.XXXXXX beside it and renamed: none is left
leftover=$(ls -A "$tmp" | grep '^\.a\.trace\.' || true)
[ -z "$leftover" ] || fail "temporary file left behind: $leftover"
# --verbose (and -v) say what was converted, one line; quiet without it
expect_exit 0 $coop convert "$data/example.trace" "$tmp/a.trace"
[ ! -s "$tmp/err" ] || fail "a quiet convert said: $(cat "$tmp/err")"
for v in --verbose -v; do
    expect_exit 0 $coop convert $v "$data/example.trace" "$tmp/a.trace"
    grep -q "example.trace (text): 6 events, 2 ids, 1 live at start, 1 final segments -> $tmp/a.trace" \
        "$tmp/err" || fail "$v: $(cat "$tmp/err")"
done
# the '# from' comment is valid UTF-8 (text readers decode it): a long name is
# cut between characters, a byte that is no UTF-8 written as '?'
long=$(printf '%0199d' 0 | tr 0 a)é.trace
cp "$data/example.trace" "$tmp/$long"
expect_exit 0 $coop convert "$tmp/$long" "$tmp/long.trace"
sed -n 2p "$tmp/long.trace" | iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1 ||
    fail "a long name cut inside a character: $(sed -n 2p "$tmp/long.trace" | od -c | tail -2)"
cp "$data/example.trace" "$tmp/$(printf 'bad\377\303name.trace')"
expect_exit 0 $coop convert "$tmp/$(printf 'bad\377\303name.trace')" "$tmp/bad-name.trace"
grep -qx '# from bad??name.trace' "$tmp/bad-name.trace" ||
    fail "a name that is no UTF-8: $(sed -n 2p "$tmp/bad-name.trace" | od -c | head -2)"
# a device is written in place (no /dev/null.tmp)
expect_exit 0 $coop convert "$data/example.trace" /dev/null

# a symbolic link OUT stays a link and its target gets the trace (the rename
# replaced the link with a file); a file named OUT.tmp is not OUT's
# temporary (it was overwritten, then renamed away); a new OUT gets the
# umask's permissions, a replaced one keeps its own
echo old >"$tmp/target.trace"
chmod 640 "$tmp/target.trace"
ln -s target.trace "$tmp/link.trace"
echo mine >"$tmp/link.trace.tmp"
expect_exit 0 $coop convert "$data/example.trace" "$tmp/link.trace"
[ -L "$tmp/link.trace" ] || fail "the symbolic link OUT was replaced by a file"
head -n 1 "$tmp/target.trace" | grep -qx "coop-trace 1" || fail "the link's target was not written"
grep -qx mine "$tmp/link.trace.tmp" || fail "OUT.tmp was overwritten"
[ "$(stat -c %a "$tmp/target.trace")" = 640 ] || fail "the replaced file's mode changed"
[ -z "$(find "$tmp" -name '.?*')" ] || fail "a temporary file was left: $(find "$tmp" -name '.?*')"
(umask 027 && $coop convert "$data/example.trace" "$tmp/fresh.trace") || fail "convert to a new file"
# OUT's name says whether to compress, not its link's target's
echo old >"$tmp/target.bin"
ln -s target.bin "$tmp/zlink.trace.gz"
expect_exit 0 $coop convert "$data/example.trace" "$tmp/zlink.trace.gz"
gzip -t "$tmp/target.bin" 2>/dev/null || fail "a link OUT ending in .gz: its target is not gzip"
[ "$(stat -c %a "$tmp/fresh.trace")" = 640 ] || fail "a new OUT ignores the umask: $(stat -c %a "$tmp/fresh.trace")"
ln -s nowhere.trace "$tmp/dangling.trace"
expect_exit 2 $coop convert "$data/example.trace" "$tmp/dangling.trace"
grep -q "dangling.trace: cannot write: a symbolic link to a file that does not exist" "$tmp/err" ||
    fail "dangling link: $(cat "$tmp/err")"

# a link that cannot be followed for another reason says that reason
ln -s loop.trace "$tmp/loop.trace"
expect_exit 2 $coop convert "$data/example.trace" "$tmp/loop.trace"
grep -q "loop.trace: cannot write: Too many levels of symbolic links" "$tmp/err" ||
    fail "a link to itself: $(cat "$tmp/err")"

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

# a snapshot coop.torch wrote stays one through convert (P coop): its recorded
# row is coop's reservation, and replay says so (convert dropped the flag)
if command -v python3 >/dev/null; then
    python3 -c '
import pickle, sys
a = 0x7f0000000000
ev = lambda act, size: {"action": act, "addr": a, "size": size, "stream": 0}
snap = {"segments": [{"address": a, "total_size": 2 << 20, "stream": 0, "blocks": []}],
        "device_traces": [[ev("segment_alloc", 2 << 20), ev("alloc", 512), ev("free_completed", 512)]],
        "allocator_settings": {"allocator": "coop", "expandable_segments": True}}
sys.stdout.buffer.write(pickle.dumps(snap, protocol=2))' >"$tmp/by-coop.pickle" ||
        fail "cannot write by-coop.pickle"
    expect_exit 0 $coop convert "$tmp/by-coop.pickle" "$tmp/by-coop.trace"
    grep -qx "P coop" "$tmp/by-coop.trace" || fail "no 'P coop' line: $(head -5 "$tmp/by-coop.trace")"
    expect_exit 0 $coop replay --json --policy recorded "$tmp/by-coop.trace"
    grep -q '"recorded_by_coop":true' "$tmp/out" || fail "converted: $(cat "$tmp/out")"
    grep -q "recorded by coop" "$tmp/err" || fail "converted, no note: $(cat "$tmp/err")"
    # a snapshot of several devices: the one read is said (the first with
    # events, device 1 here), and the others with events are not dropped silently
    python3 -c '
import pickle, sys
ev = lambda a: {"action": "alloc", "addr": a, "size": 512, "stream": 0}
snap = {"segments": [], "device_traces": [[], [ev(0x1000)], [ev(0x2000), ev(0x3000)]]}
sys.stdout.buffer.write(pickle.dumps(snap, protocol=2))' >"$tmp/devices.pickle" ||
        fail "cannot write devices.pickle"
    expect_exit 0 $coop convert -v "$tmp/devices.pickle" "$tmp/devices.trace"
    grep -q "devices.pickle (pickle, device 1 of 3): 1 events" "$tmp/err" || fail "-v, 3 devices: $(cat "$tmp/err")"
    expect_exit 0 $coop convert "$tmp/devices.pickle" "$tmp/devices.trace"
    grep -q "devices.pickle: read device 1, the first with events; 1 other device has events too (--device N reads another)" \
        "$tmp/err" || fail "3 devices, no note: $(cat "$tmp/err")"
    expect_exit 0 $coop convert --device 2 "$tmp/devices.pickle" "$tmp/devices.trace"
    [ ! -s "$tmp/err" ] || fail "--device 2 said: $(cat "$tmp/err")"
    # replay reads the same device, and says so too (its rows are one device's)
    expect_exit 0 $coop replay --json --policy ideal "$tmp/devices.pickle"
    grep -q '"events":1,' "$tmp/out" || fail "replay of 3 devices: $(cat "$tmp/out")"
    grep -q "devices.pickle: read device 1, the first with events; 1 other device has events too (--device N replays another)" \
        "$tmp/err" || fail "replay of 3 devices, no note: $(cat "$tmp/err")"
    # --device picks the device replayed (convert's --device, shared), and says nothing
    expect_exit 0 $coop replay --json --policy ideal --device 2 "$tmp/devices.pickle"
    grep -q '"events":2,' "$tmp/out" || fail "replay --device 2: $(cat "$tmp/out")"
    [ ! -s "$tmp/err" ] || fail "replay --device 2 said: $(cat "$tmp/err")"
    expect_exit 0 $coop replay --json --policy ideal --device=1 "$tmp/devices.pickle"
    grep -q '"events":1,' "$tmp/out" || fail "replay --device=1: $(cat "$tmp/out")"
    # a device the snapshot does not have: refused naming those it has
    expect_exit 2 $coop replay --policy ideal --device 3 "$tmp/devices.pickle"
    grep -q "devices.pickle: device 3 has no device_traces: the snapshot records devices 0 to 2" \
        "$tmp/err" || fail "replay --device 3: $(cat "$tmp/err")"
    expect_exit 2 $coop convert --device 3 "$tmp/devices.pickle" "$tmp/x.trace"
    grep -q "devices.pickle: device 3 has no device_traces: the snapshot records devices 0 to 2" \
        "$tmp/err" || fail "convert --device 3: $(cat "$tmp/err")"
    expect_exit 0 $coop replay --json --policy ideal "$tmp/devices.trace"
    [ ! -s "$tmp/err" ] || fail "replay of one device's trace said: $(cat "$tmp/err")"
    expect_exit 0 $coop convert -v "$tmp/by-coop.pickle" "$tmp/by-coop.trace"
    grep -q "by-coop.pickle (pickle, device 0 of 1): 3 events" "$tmp/err" || fail "-v, 1 device: $(cat "$tmp/err")"
fi

# missing input; an OUT that cannot be opened (exit 2, a bad argument as
# replay's --timeline; a write that fails is 1, below)
expect_exit 2 $coop convert "$tmp/none" "$tmp/x"
grep -q "none: cannot open" "$tmp/err" || fail "message: $(cat "$tmp/err")"
expect_exit 2 $coop convert "$data/example.trace" "$tmp/no/such/dir/x.trace"
grep -q "cannot write" "$tmp/err" || fail "message: $(cat "$tmp/err")"
# --verbose says what was converted only when it was
expect_exit 2 $coop convert --verbose "$data/example.trace" "$tmp/no/such/dir/x.trace"
! grep -q "events" "$tmp/err" || fail "--verbose on a failed write: $(cat "$tmp/err")"
# a write that fails (a file size limit of 0) removes its temporary file
mkdir "$tmp/limited"
{ (trap '' XFSZ; ulimit -f 0 && exec $coop convert "$data/example.trace" "$tmp/limited/x.trace") \
    2>&1; echo "exit $?"; } | cat >"$tmp/limited.out" # a pipe: the limit is on files
# (OUT is named, not the temporary file hidden beside it, which is gone)
grep -q "limited/x\.trace: write failed: File too large" "$tmp/limited.out" &&
    grep -qx "exit 1" "$tmp/limited.out" ||
    fail "a file size limit of 0: $(cat "$tmp/limited.out")"
[ -z "$(ls -A "$tmp/limited")" ] || fail "a failed write left: $(ls -A "$tmp/limited")"
if [ -w /dev/full ]; then
    expect_exit 1 $coop convert "$data/example.trace" /dev/full
    grep -q "/dev/full: write failed" "$tmp/err" || fail "message: $(cat "$tmp/err")"
fi
exit 0
