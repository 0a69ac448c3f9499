#!/bin/sh
# Bad command lines of every coop command: each must exit with its documented
# status (2 for usage errors and bad input, 1 where the command says so) and
# print one message on stderr that names what was wrong (the option, the
# value or the file), never crash. Complements trace_convert_test.sh (convert)
# and replay_cli_test.c (replay), which cover those commands' own cases.
set -u
coop=./coop
traces="${srcdir:-.}/traces"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-cli-errors-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
# expect CODE FRAGMENT CMD...: CMD exits CODE and its stderr contains FRAGMENT
expect() {
    want=$1 fragment=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: '$*' exited $got, expected $want: $(head -3 "$tmp/err")"
        failures=$((failures + 1))
    elif ! grep -qF -- "$fragment" "$tmp/err"; then
        echo "FAIL: '$*': stderr does not say '$fragment': $(head -3 "$tmp/err")"
        failures=$((failures + 1))
    else
        echo "ok: '$*' -> $got: $(head -1 "$tmp/err")"
    fi
}
printf 'coop-trace 1\nA 0 512 0\nX what\n' >"$tmp/bad.trace"
printf '{"type": "call", "op"\n' >"$tmp/bad.jsonl"
# damaged gzip: cut short, and garbage after a valid start
head -c 3000 "$traces/unet-train-step.trace.gz" >"$tmp/cut.trace.gz"
# a DTR log cut inside its first line, and just before its gzip trailer
head -c 125 "$traces/unet-train-step.ops.jsonl.gz" >"$tmp/cut125.ops.jsonl.gz"
head -c 12537 "$traces/unet-train-step.ops.jsonl.gz" >"$tmp/cut12537.ops.jsonl.gz"
{ head -c 100 "$traces/unet-train-step.trace.gz"; head -c 3000 "$traces/unet-train-step.ops.jsonl.gz" | tail -c 2000; } >"$tmp/garbled.trace.gz"

expect 2 "usage: coop COMMAND" $coop
# -h is --help's short form (usage on stdout, 0); --version names the program
if $coop -h >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: coop COMMAND" "$tmp/out" && [ ! -s "$tmp/err" ]; then
    echo "ok: coop -h"
else
    echo "FAIL: coop -h: $(cat "$tmp/out" "$tmp/err")"; failures=$((failures + 1))
fi
# the usage lists every command, and says how to get the version
grep -qF "'coop --version' prints the version." "$tmp/out" || { echo "FAIL: coop -h does not name --version: $(cat "$tmp/out")"; failures=$((failures + 1)); }
for command in replay sim convert bench; do
    grep -q "^  $command " "$tmp/out" || { echo "FAIL: coop -h does not list $command: $(cat "$tmp/out")"; failures=$((failures + 1)); }
done
if $coop --version >"$tmp/out" 2>"$tmp/err" && grep -qx "coop [0-9][0-9a-z.+-]*" "$tmp/out"; then
    echo "ok: coop --version: $(cat "$tmp/out")"
else
    echo "FAIL: coop --version: $(cat "$tmp/out" "$tmp/err")"; failures=$((failures + 1))
fi
# one line, ended by its newline (wc -l counts newlines)
[ "$(wc -l <"$tmp/out")" -eq 1 ] || { echo "FAIL: coop --version is not one line: '$(cat "$tmp/out")'"; failures=$((failures + 1)); }
expect 2 "unknown command 'bogus'" $coop bogus
grep -q "^usage: coop COMMAND" "$tmp/err" || { echo "FAIL: no usage after an unknown command: $(cat "$tmp/err")"; failures=$((failures + 1)); }
# 'coop help [COMMAND]' is --help's other spelling (git's and pip's)
if $coop help >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: coop COMMAND" "$tmp/out" && [ ! -s "$tmp/err" ]; then
    echo "ok: coop help"
else
    echo "FAIL: coop help: $(cat "$tmp/out" "$tmp/err")"; failures=$((failures + 1))
fi
for command in replay sim convert bench; do
    $coop "$command" --help >"$tmp/want" 2>&1
    if $coop help "$command" >"$tmp/out" 2>"$tmp/err" && cmp -s "$tmp/out" "$tmp/want" && [ ! -s "$tmp/err" ]; then
        echo "ok: coop help $command"
    else
        echo "FAIL: coop help $command is not coop $command --help: $(head -3 "$tmp/out" "$tmp/err")"; failures=$((failures + 1))
    fi
done
expect 2 "coop help: unknown command 'bogus'" $coop help bogus
expect 2 "coop help: one command at most, got 'sim' and 'bench'" $coop help sim bench

expect 2 "coop sim: unknown option '--bogus'" $coop sim --bogus
expect 2 "coop sim: unknown option '-x'" $coop sim -xyz
expect 2 "coop replay: unknown option '-x'" $coop replay -xyz
# a cluster after a valid option: the letter, not the option before it
expect 2 "coop sim: unknown option '-x'" $coop sim --json -xh
expect 2 "coop replay: unknown option '-z'" $coop replay --json -zq
# a value given to an option that takes none is said so (it read "unknown
# option '--json=1'", an option the user had spelled right)
expect 2 "coop sim: option '--json' takes no value, got '--json=1'" $coop sim --json=1
# the argument after it is a path, not a short cluster, though it holds the option's letter
expect 2 "coop sim: option '--json' takes no value, got '--json=1'" $coop sim --json=1 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "coop convert: option '--verbose' takes no value, got '--verb=1'" $coop convert --verb=1 "$traces/unet-train-step.trace.gz" "$tmp/x"
# a prefix of two options is named with both (it read "unknown option '--p'")
expect 2 "coop replay: option '--p' is ambiguous: --policy or --page" $coop replay --p coop "$traces/unet-train-step.trace.gz"
# a misspelt option gets the nearest one
expect 2 "coop bench: unknown option '--jsn'; did you mean '--json'?" $coop bench --jsn
expect 2 "coop replay: unknown option '--polcy'; did you mean '--policy'?" $coop replay --polcy=coop
expect 2 "coop sim: unknown option '--budgets'; did you mean '--budget'?" $coop sim --budgets 0.5
# two edits from a name of 4 letters: still near enough to name it
expect 2 "coop sim: unknown option '--jsno'; did you mean '--json'?" $coop sim --jsno
# --help is the usage on stdout (0); an unknown option's message is followed by it
if $coop sim --help >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: coop sim" "$tmp/out" && [ ! -s "$tmp/err" ]; then
    echo "ok: coop sim --help"
else
    echo "FAIL: coop sim --help: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
expect 2 "coop sim: unknown option '--bogus'" $coop sim --bogus "$traces/unet-train-step.ops.jsonl.gz"
grep -q "^usage: coop sim" "$tmp/err" || { echo "FAIL: no usage after an unknown option: $(cat "$tmp/err")"; failures=$((failures + 1)); }
# an unknown long option leaves optopt 0: named whole, even before a short cluster
expect 2 "coop sim: unknown option '--bogus'" $coop sim --bogus -n
expect 2 "coop replay: unknown option '--bogus'" $coop replay --bogus -j
expect 2 "coop sim: no LOG given" $coop sim --policy dtr
expect 2 "coop sim: --budget needs a value" $coop sim --budget
expect 2 "budget ratio 'x'" $coop sim --budget x "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "budget ratio ' 0.5' is not a number" $coop sim --budget " 0.5" "$traces/unet-train-step.ops.jsonl.gz"
# strtod skips leading spaces: --budget and --partition refused them, these took them
expect 2 "--overhead-limit must be a finite number >= 1, not ' 2'" $coop sim --overhead-limit " 2" "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--stable-min-ratio's step must be a number in [0.0001, 1], not ' 0.5'" $coop sim "--stable-min-ratio= 0.5" "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "budget ratio '0.5' is listed twice" $coop sim --budget 0.5,0.5 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "policy 'dtr' is listed twice" $coop sim --policy dtr,dtr "$traces/unet-train-step.ops.jsonl.gz"
# one policy under two names (coop-live is coop's former name) gave two identical
# rows, as a policy listed twice did
expect 2 "coop sim: policies 'coop' and 'coop-live' are one policy (two names of it): their rows would be the same" $coop sim --memory arena --policy coop,coop-live "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "coop sim: policies 'coop-live' and 'coop' are one policy (two names of it)" $coop sim --memory arena --policy coop-live,dtr,coop "$traces/unet-train-step.ops.jsonl.gz"
# compared as named: --inplace and --partition apply to both alike (and coop with
# coop-nopart under --partition stays allowed: sim_cli_test runs it)
expect 2 "coop sim: policies 'coop' and 'coop-live' are one policy" $coop sim --memory arena --inplace off --partition 0.5 --policy coop,coop-live "$traces/unet-train-step.ops.jsonl.gz"
# one ratio written two ways (0.5, 0.50, 0x1p-1; or apart by less than the
# rows' 10 digits) gave two rows alike, which plot_sim.py then refused
expect 2 "budget ratios '0.5' and '0.50' are one ratio (0.5 in the rows)" $coop sim --budget 0.5,0.7,0.50 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "budget ratios '0x1p-1' and '0.50000000001' are one ratio (0.5 in the rows)" $coop sim --budget 0x1p-1,0.50000000001 "$traces/unet-train-step.ops.jsonl.gz"
# a ratio of 0 is outside (0, 1] (not a budget of 0 bytes), and a number must fill the item
expect 2 "budget ratio '0' is not a number in (0, 1]" $coop sim --budget 0 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "budget ratio '0.5x' is not a number in (0, 1]" $coop sim --budget 0.5x "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--inplace takes on or off, not 'yes'" $coop sim --inplace yes "$traces/unet-train-step.ops.jsonl.gz"
# an allocation trace given to sim (the bundled ones sit beside the op
# logs): the parser's line, then what the file is and which command reads it
printf 'id,lower,upper,size\n0,0,2,512\n' >"$tmp/buffers.csv"
expect 2 "is a coop text trace, an allocation trace: coop replay reads it" $coop sim "$traces/unet-train-step.trace.gz"
expect 2 "is a PyTorch memory snapshot, an allocation trace" $coop sim "$traces/unet-train-step.cuda.pickle.gz"
expect 2 "buffers.csv is a minimalloc CSV, an allocation trace" $coop sim "$tmp/buffers.csv"
expect 2 "bad.jsonl:1:" $coop sim "$tmp/bad.jsonl"
grep -q "allocation trace" "$tmp/err" && { echo "FAIL: a bad op log called an allocation trace: $(cat "$tmp/err")"; failures=$((failures + 1)); }
expect 2 "--partition takes off or a threshold >= 0 (ns/byte), not ' 1'" $coop sim --partition " 1" "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "policy coop needs --memory arena" $coop sim --policy coop "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--partition takes off or a threshold >= 0 (ns/byte), not ''" $coop sim --partition "" "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "unet-train-step.ops.jsonl.gz: budget ratio '1e-300' gives a budget of 0 bytes" $coop sim --json --no-min-ratio --policy dtr --budget 1e-300 "$traces/unet-train-step.ops.jsonl.gz"
[ ! -s "$tmp/out" ] || { echo "FAIL: a refused budget printed a row: $(cat "$tmp/out")"; failures=$((failures + 1)); }
# every ratio of the list is checked, not the first one again
expect 2 "budget ratio '1e-300' gives a budget of 0 bytes" $coop sim --json --no-min-ratio --policy dtr --budget 0.5,1e-300 "$traces/unet-train-step.ops.jsonl.gz"
[ ! -s "$tmp/out" ] || { echo "FAIL: a refused budget printed a row: $(cat "$tmp/out")"; failures=$((failures + 1)); }
# the arena's capacity is the budget in whole 512-byte blocks: below one, no block fits
expect 2 "budget ratio '1e-7' gives an arena of 0 bytes (175 of the peak's 1757318144 bytes, below one 512-byte block)" $coop sim --json --no-min-ratio --memory arena --policy dtr --budget 1e-7 "$traces/unet-train-step.ops.jsonl.gz"
[ ! -s "$tmp/out" ] || { echo "FAIL: a refused budget printed a row: $(cat "$tmp/out")"; failures=$((failures + 1)); }
expect 2 "--stable-min-ratio's step must be a number in [0.0001, 1], not '0'" $coop sim --stable-min-ratio=0 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--stable-min-ratio's step must be a number in [0.0001, 1], not 'x'" $coop sim --stable-min-ratio=x "$traces/unet-train-step.ops.jsonl.gz"
# the step is optional, so it takes '=': given after a space it became a LOG
# that "cannot open", which did not say why
expect 2 "'0.1' is read as a LOG: give the step as --stable-min-ratio=0.1" $coop sim --stable-min-ratio 0.1 "$traces/unet-train-step.ops.jsonl.gz"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: the step's hint is not the only line: $(cat "$tmp/err")"; failures=$((failures + 1)); }
# only a bare --stable-min-ratio, only a number, only a file that is not
# there gets the hint: a file named 0.1 is a LOG (mutants S01, S04, S05,
# S07, docs/mutation-testing.md)
expect 2 "coop sim: 0.2: cannot open" $coop sim --stable-min-ratio=0.1 0.2
expect 2 "coop sim: nosuch.log: cannot open" $coop sim --stable-min-ratio nosuch.log
: >"$tmp/0.1"
case $coop in /*) abs_coop=$coop ;; *) abs_coop=$PWD/$coop ;; esac
expect 2 "coop sim: 0.1: no instructions" sh -c 'cd "$1" && exec "$2" sim --stable-min-ratio 0.1' sh "$tmp" "$abs_coop"
# a number must fill the value, for the step and the threshold as for the others
expect 2 "--stable-min-ratio's step must be a number in [0.0001, 1], not '0.05x'" $coop sim --stable-min-ratio=0.05x "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--partition takes off or a threshold >= 0 (ns/byte), not '1e-2x'" $coop sim --partition 1e-2x "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--overhead-limit must be a finite number >= 1, not '3x'" $coop sim --overhead-limit 3x "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--overhead-limit must be a finite number >= 1, not 'inf'" $coop sim --overhead-limit inf "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "unknown policy 'nope'" $coop sim --policy nope "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "'weird'" $coop sim --memory weird "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--engine must be sim or lib, not 'gpu'" $coop sim --engine gpu "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--memory arena only, not 'ideal'" $coop sim --engine lib --memory ideal "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "cannot run policy 'dtr-full'" $coop sim --engine lib --policy dtr-full "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "$tmp/none.jsonl: cannot open" $coop sim --engine lib "$tmp/none.jsonl"
expect 2 "$tmp/none.jsonl: cannot open" $coop sim "$tmp/none.jsonl"
expect 2 "bad.jsonl:1" $coop sim "$tmp/bad.jsonl"
: >"$tmp/empty.jsonl"
printf '\n\n' >"$tmp/blank.jsonl"
expect 2 "empty.jsonl: no instructions: the log is empty or blank" $coop sim --no-min-ratio "$tmp/empty.jsonl"
expect 2 "blank.jsonl: no instructions" $coop sim --no-min-ratio "$tmp/blank.jsonl"
expect 2 "/dev/null: no instructions" $coop sim --no-min-ratio /dev/null
# a use of a released name: refused with both lines (the simulator brought the dead tensor back)
{ printf '{"INSTRUCTION":"CONSTANT","NAME":"w"}\n{"INSTRUCTION":"MEMORY","NAME":"w","MEMORY":"512"}\n'
  printf '{"INSTRUCTION":"RELEASE","NAME":"w"}\n{"INSTRUCTION":"COPY","DST":"v","SRC":"w"}\n'; } >"$tmp/released.jsonl"
expect 2 "released.jsonl:4: COPY source w was released at line 3" $coop sim --no-min-ratio "$tmp/released.jsonl"
mkdir "$tmp/dir.jsonl"
expect 2 "dir.jsonl: cannot open: Is a directory" $coop sim --no-min-ratio "$tmp/dir.jsonl"
# every path is checked before the work: a missing or directory path after a
# good log or trace stops the command before its first row (stdout empty),
# and each bad path is named
for cmd in "sim --no-min-ratio --budget 0.9 --policy dtr $traces/unet-train-step.ops.jsonl.gz" \
           "replay --policy coop $traces/unet-train-step.trace.gz"; do
    expect 2 "$tmp/none.jsonl: cannot open: No such file or directory" $coop $cmd "$tmp/none.jsonl" "$tmp/dir.jsonl"
    if [ -s "$tmp/out" ] || ! grep -qF "dir.jsonl: cannot open: Is a directory" "$tmp/err"; then
        echo "FAIL: 'coop $cmd' with a missing and a directory path after it: stdout not empty or the directory not named: $(head -3 "$tmp/out")"
        failures=$((failures + 1))
    fi
done
# a path too long for the 1024-byte message keeps its start and end around
# "...", and the reason after it (it was cut off: the message ended inside
# the path)
long=$tmp
for i in 1 2 3 4 5 6 7; do long=$long/$(printf "%0200d" "$i"); done
for cmd in "sim --no-min-ratio" "replay --policy coop" "convert"; do
    out=; [ "$cmd" = convert ] && out=$tmp/out.trace
    expect 2 "$(printf '%0200d' 7)/none.jsonl: cannot open: No such file or directory" \
        $coop $cmd "$long/none.jsonl" $out
    if ! grep -qF ": $tmp/$(printf '%0200d' 1)/" "$tmp/err" || ! grep -qF "..." "$tmp/err"; then
        echo "FAIL: 'coop $cmd' with a long path: its start or the '...' is missing: $(head -c 300 "$tmp/err")"
        failures=$((failures + 1))
    fi
done
# replay and convert open a trace twice (its format, then its events): a
# pipe is read once, whole, into an unlinked temporary file in $TMPDIR that
# both then read (src/trace/spool.h). Before, the reader got only what the
# format's peek left ('empty file', 'no header'), and then a pipe was
# refused. sim opens a log once, and reads one as it comes.
mkfifo "$tmp/log.fifo"
mkdir "$tmp/spool"
unet="$traces/unet-train-step.trace.gz"
# the same rows as the file's, but for the name (and the timing)
rows() { sed 's/"trace":"[^"]*"//; s/"ns_per_op":[0-9.]*//; s/"path":"[^"]*"//' "$1"; }
$coop replay --json --policy coop,torch "$unet" >"$tmp/file.json" 2>"$tmp/err" ||
    { echo "FAIL: replay of $unet: $(head -3 "$tmp/err")"; failures=$((failures + 1)); }
cat "$unet" >"$tmp/log.fifo" &
if TMPDIR="$tmp/spool" $coop replay --json --policy coop,torch "$tmp/log.fifo" >"$tmp/fifo.json" 2>"$tmp/err" &&
    [ "$(rows "$tmp/fifo.json")" = "$(rows "$tmp/file.json")" ] && [ -s "$tmp/file.json" ] &&
    grep -qF '"trace":"log.fifo"' "$tmp/fifo.json" && [ -z "$(ls -A "$tmp/spool")" ]; then
    echo "ok: coop replay reads a FIFO (gzip through it), the file's rows, nothing left in TMPDIR"
else
    echo "FAIL: coop replay of a FIFO: $(head -3 "$tmp/err") $(head -c 300 "$tmp/fifo.json")"
    failures=$((failures + 1))
fi
kill $! 2>/dev/null; wait # a writer the command never read would wait for ever
if gzip -dc "$unet" | $coop replay --json --policy coop,torch - >"$tmp/stdin.json" 2>"$tmp/err" &&
    [ "$(rows "$tmp/stdin.json")" = "$(rows "$tmp/file.json")" ] && grep -qF '"trace":"stdin"' "$tmp/stdin.json"; then
    echo "ok: coop replay - reads standard input"
else
    echo "FAIL: coop replay - : $(head -3 "$tmp/err") $(head -c 300 "$tmp/stdin.json")"
    failures=$((failures + 1))
fi
# a pipe named twice is refused before any output (rev30-D): the first read
# took all of it, and the second open of a named FIFO waited for ever for a
# writer that was gone ('-' twice: "empty file" after the first's rows)
cat "$unet" >"$tmp/log.fifo" 2>/dev/null &
expect 2 "log.fifo: a pipe named twice (as $tmp/log.fifo before it): a pipe can be read once" \
    timeout 60 $coop replay --policy coop "$tmp/log.fifo" "$unet" "$tmp/log.fifo"
[ ! -s "$tmp/out" ] || { echo "FAIL: rows printed before a pipe named twice was refused"; failures=$((failures + 1)); }
expect 2 "/dev/stdin: a pipe named twice (as /dev/stdin before it)" \
    sh -c "cat '$unet' | timeout 60 $coop replay --policy coop - -"
expect 2 "/dev/stdin: a pipe named twice (as /dev/stdin before it)" \
    sh -c "gzip -dc '$traces/unet-train-step.ops.jsonl.gz' | timeout 60 $coop sim --budget 0.9 - /dev/stdin"
kill $! 2>/dev/null; wait
# '-' on a terminal is refused (rev30-D): the format's peek and then the
# reader each read the terminal, so what was typed first was lost and the
# command waited for more. script(1) gives the command a terminal.
if command -v script >/dev/null 2>&1; then
    for cmd in "replay --policy coop -" "convert - $tmp/tty.trace" "sim --budget 0.9 -"; do
        timeout 60 script -qec "$coop $cmd" /dev/null </dev/null >"$tmp/out" 2>&1
        got=$?
        if [ "$got" -eq 2 ] && grep -qF "'-' is standard input, a terminal here: pipe a trace in, or give a file" "$tmp/out"; then
            echo "ok: coop $cmd on a terminal -> 2: $(head -1 "$tmp/out")"
        else
            echo "FAIL: coop $cmd on a terminal exited $got: $(head -3 "$tmp/out")"
            failures=$((failures + 1))
        fi
    done
    [ ! -e "$tmp/tty.trace" ] || { echo "FAIL: convert wrote $tmp/tty.trace from a terminal"; failures=$((failures + 1)); }
else
    echo "skip: no script(1) to give '-' a terminal"
fi
# bad content through a pipe is named by the pipe's name and its line
cat "$tmp/bad.trace" >"$tmp/log.fifo" &
expect 2 "$tmp/log.fifo:3: " $coop replay --policy coop "$tmp/log.fifo"
kill $! 2>/dev/null; wait
# no room for the copy: named, status 2, no OUT (that the writer is released
# rather than left waiting for a reader: trace_read_test)
cat "$unet" >"$tmp/log.fifo" 2>/dev/null &
expect 2 "log.fifo: cannot keep a copy of the pipe in $tmp/none: No such file or directory; set TMPDIR to a writable directory with room, or give the trace as a file" \
    env TMPDIR="$tmp/none" $coop convert "$tmp/log.fifo" "$tmp/out.trace"
kill $! 2>/dev/null; wait
[ ! -e "$tmp/out.trace" ] || { echo "FAIL: convert left $tmp/out.trace after the copy failed"; failures=$((failures + 1)); }
expect 2 "dir.jsonl: cannot open: Is a directory" $coop convert "$tmp/dir.jsonl" "$tmp/out.trace"
gzip -dc "$traces/unet-train-step.ops.jsonl.gz" >"$tmp/log.fifo" &
if $coop sim --no-min-ratio --budget 0.9 --policy dtr --json "$tmp/log.fifo" >"$tmp/out" 2>"$tmp/err" &&
    grep -q '"result":' "$tmp/out"; then
    echo "ok: coop sim reads a FIFO"
else
    echo "FAIL: coop sim on a FIFO: $(head -3 "$tmp/err")"
    failures=$((failures + 1))
fi
wait
# input errors are 2 in every command: a bad log among good ones too
expect 2 "bad.jsonl:1" $coop sim --no-min-ratio --budget 0.9 --policy dtr "$traces/unet-train-step.ops.jsonl.gz" "$tmp/bad.jsonl"

expect 2 "'--bogus'" $coop bench --bogus
expect 2 "--batches wants 1..100000, got 'x'" $coop bench --batches x
expect 2 "got '-3'" $coop bench --live -3
# strtoull wrapped these to 1 and took leading spaces and signs
expect 2 "--batches wants 1..100000, got '-18446744073709551615'" \
    $coop bench --batches -18446744073709551615
expect 2 "got ' 5'" $coop bench --batches ' 5'
expect 2 "got '+5'" $coop bench --batches +5
expect 2 "--capacity-gib wants 1..32768 (coop's pool reserves twice the capacity of address space, and a process has 128 TiB), got '-18446744073709551615'" \
    $coop bench --capacity-gib -18446744073709551615
expect 2 "--live wants counts 1..10^7 like 1000,10000, got ' -18446744073709551615'" \
    $coop bench --live ' -18446744073709551615'
expect 2 "--latency and --floor are two different runs" $coop bench --latency --floor
expect 2 "--latency does not take --live" $coop bench --latency --live 1000
expect 2 "--floor does not take --batches" $coop bench --floor --batches 3
expect 2 "--seed wants a number from 0 to 2^64-1 (decimal or 0x hex), got ''" $coop bench --seed ''
# counts from 1 to their maximum: 0 and one past it refused, the maximum itself taken
# (--latency and --floor refuse it only after parsing: no run starts)
expect 2 "--batches wants 1..100000, got '0'" $coop bench --batches 0
expect 2 "--live wants counts 1..10^7 like 1000,10000, got '0'" $coop bench --live 0
expect 2 "--batches wants 1..100000, got '100001'" $coop bench --batches 100001
expect 2 "--latency does not take --batches" $coop bench --latency --batches 100000
expect 2 "--live wants counts 1..10^7 like 1000,10000, got '10000001'" $coop bench --live 10000001
expect 2 "--latency does not take --live" $coop bench --latency --live 10000000
# coop's pool reserves twice its capacity of address space, and a process has
# 2^47 bytes: 32769 to 1048576 GiB passed, then "cannot reserve" (exit 1)
expect 2 "--capacity-gib wants 1..32768 (coop's pool reserves twice the capacity of address space, and a process has 128 TiB), got '32769'" $coop bench --capacity-gib 32769
expect 2 "--capacity-gib wants 1..32768" $coop bench --capacity-gib 65536 --live 1 --batches 1
expect 2 "--capacity-gib wants 1..32768 (coop's pool reserves twice the capacity of address space, and a process has 128 TiB), got '1048576'" $coop bench --capacity-gib 1048576 --live 1 --batches 1
expect 2 "--floor does not take --capacity-gib" $coop bench --floor --capacity-gib 32768
# a live count whose expected live bytes (count x the 20.4 MB mean size) exceed the
# capacity ran out of it at run time (exit 1 after the table's header: --live 2000000
# with the automatic 32 TiB after 3 s, --live 100 --capacity-gib 1 at once)
expect 2 "coop bench: --live 2000000 expects about 37.1 TiB live (blocks of 20.4 MB on average), more than the capacity of 32 TiB (the most, for coop's pool and jemalloc's address space alike)" $coop bench --batches 1 --live 2000000
expect 2 "coop bench: --live 100 expects about 1.9 GiB live (blocks of 20.4 MB on average), more than the capacity of 1 GiB (--capacity-gib 1)" $coop bench --batches 1 --live 1,100 --capacity-gib 1
# from 1 TiB up, the expected bytes are said in TiB (1.1, not 1126.4 GiB)
expect 2 "coop bench: --live 60000 expects about 1.1 TiB live (blocks of 20.4 MB on average), more than the capacity of 1024 GiB (--capacity-gib 1024)" $coop bench --batches 1 --live 60000 --capacity-gib 1024
expect 2 "coop bench: --live 5000000 expects about 92.7 TiB live" $coop bench --only jemalloc --batches 1 --live 5000000
[ -s "$tmp/out" ] && { echo "FAIL: --live 5000000 printed: $(head -2 "$tmp/out")"; failures=$((failures + 1)); }
expect 2 "--floor does not take --seed" $coop bench --floor --seed 3
expect 2 "--floor does not take --only" $coop bench --floor --only coop
expect 2 "--latency does not take --capacity-gib" $coop bench --latency --capacity-gib 1
expect 2 "--only wants coop or jemalloc, got 'both'" $coop bench --only both
# the capacity is coop's pool's: with --only jemalloc it was dropped without a word
expect 2 "--capacity-gib sizes coop's pool, and --only jemalloc runs none" $coop bench --only jemalloc --capacity-gib 16
expect 2 "--capacity-gib sizes coop's pool, and --only jemalloc runs none" $coop bench --capacity-gib 16 --only=jemalloc --live 1
# getopt_long's conventions, as the other commands (its parser was bench's
# own: "--batches=2" was an unknown option, and a stray word one too)
expect 2 "coop bench: --batches needs a value" $coop bench --batches
for option in --only --seed --live --capacity-gib; do
    expect 2 "coop bench: $option needs a value" $coop bench $option
done
expect 2 "--batches wants 1..100000, got '0'" $coop bench --batches=0
expect 2 "--floor does not take --seed" $coop bench --floor --seed=3
expect 2 "coop bench: takes no arguments, got 'extra'" $coop bench extra
expect 2 "coop bench: takes no arguments, got 'extra'" $coop bench -- extra
expect 2 "coop bench: unknown option '-x'" $coop bench -x
# --help names every form the parser takes: --latency takes --seed, convert -v
$coop bench --help >"$tmp/out" 2>&1
grep -qF -- "coop bench --latency [--json] [--seed N]" "$tmp/out" ||
    { echo "FAIL: bench --help omits --latency's --seed"; failures=$((failures + 1)); }
$coop convert --help >"$tmp/out" 2>&1
grep -qF -- "-v, --verbose" "$tmp/out" ||
    { echo "FAIL: convert --help omits -v"; failures=$((failures + 1)); }
# -h is --help's short form: the usage on stdout, nothing run
if $coop bench -h >"$tmp/out" 2>"$tmp/err" && head -1 "$tmp/out" | grep -q "^usage: coop bench" && [ ! -s "$tmp/err" ]; then
    echo "ok: coop bench -h"
else
    echo "FAIL: coop bench -h: $(cat "$tmp/out" "$tmp/err")"; failures=$((failures + 1))
fi
# --latency takes --seed: the next option is the one named
expect 2 "--latency does not take --only" $coop bench --latency --seed 3 --only coop
expect 2 "got '-1'" $coop bench --seed -1
expect 2 "got '99999999999999999999999'" $coop bench --seed 99999999999999999999999
expect 2 "got '010x'" $coop bench --seed 010x
# comma lists: an empty item is an error in every command, never skipped
expect 2 "--live: item 2 of '1000,' is empty" $coop bench --live 1000,
expect 2 "--live: more than 8 items" $coop bench --live 1,2,3,4,5,6,7,8,9
# a long list is shown cut, with its count: 5000 ratios made a 39 KB line
long=$(awk 'BEGIN { for (i = 0; i < 100; i++) printf "%s0.5", (i ? "," : "") }')
expect 2 "coop sim: --budget: more than 64 items in '$(echo "$long" | cut -c1-80)...' (100 items)" $coop sim --budget "$long" "$traces/unet-train-step.ops.jsonl.gz"
[ "$(wc -c <"$tmp/err")" -lt 200 ] || { echo "FAIL: a 100-item --budget: $(wc -c <"$tmp/err") bytes on stderr"; failures=$((failures + 1)); }
name=$(awk 'BEGIN { for (i = 0; i < 100; i++) printf "x" }')
expect 2 "coop sim: --policy: item 2 of '$(echo "$name" | cut -c1-80)...' (3 items) is empty" $coop sim --policy "$name,,dtr" "$traces/unet-train-step.ops.jsonl.gz"
# 8 items are the most, not too many (refused only after parsing: no run starts)
expect 2 "--latency does not take --live" $coop bench --latency --live 1,2,3,4,5,6,7,8
expect 2 "--policy: item 2 of 'dtr,,lru' is empty" $coop sim --policy dtr,,lru "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--budget: item 1 of ',0.5' is empty" $coop sim --budget ,0.5 "$traces/unet-train-step.ops.jsonl.gz"
expect 2 "--policy: item 1 of '' is empty" $coop replay --policy '' "$traces/unet-train-step.trace.gz"
expect 2 "--policy: item 2 of 'coop,,torch' is empty" $coop replay --policy coop,,torch "$traces/unet-train-step.trace.gz"

expect 2 "--capacity '12QB' is not a byte count" $coop replay --capacity 12QB "$traces/unet-train-step.trace.gz"
# the message says what a byte count is (it said only "not a byte count", for 0 too)
expect 2 "--capacity '0' is not a byte count above 0 such as 40G or 512MiB (decimal or 0x hex; units K, M, G, T" $coop replay --capacity 0 "$traces/unet-train-step.trace.gz"
expect 2 "--capacity '1.5G' is not a byte count above 0 such as" $coop replay --capacity 1.5G "$traces/unet-train-step.trace.gz"
# 2^64 bytes or more is too large, not malformed (it said "not a byte count", as
# if the G were misspelt; COOP_ALLOC_CONF tells the two apart since rev35-A)
expect 2 "coop replay: --capacity '99999999999999999999G' is too large: it must be below 2^54 bytes (16 PiB)" $coop replay --capacity 99999999999999999999G "$traces/unet-train-step.trace.gz"
expect 2 "coop replay: --capacity '16777216T' is too large: it must be below 2^54 bytes (16 PiB)" $coop replay --capacity 16777216T "$traces/unet-train-step.trace.gz"
expect 2 "coop replay: --page '99999999999999999999G' is too large: it must be at most 2^44 bytes (16 TiB)" $coop replay --policy coop --page 99999999999999999999G "$traces/unet-train-step.trace.gz"
# --page and --capacity are checked where they are parsed (they were
# refused later as a skipped policy, exit 1, naming other values)
expect 2 "--page '1' is not a power of two from 512 bytes" $coop replay --policy coop --page 1 "$traces/unet-train-step.trace.gz"
expect 2 "--page '256' is not a power of two from 512 bytes" $coop replay --policy coop --page 256 "$traces/unet-train-step.trace.gz"
expect 2 "--page '0x8000000000000000' is too large" $coop replay --policy coop --page 0x8000000000000000 "$traces/unet-train-step.trace.gz"
# not a power of two, though above 512 (coop's pool refused it later, as a bad trace)
expect 2 "--page '3000' is not a power of two from 512 bytes to 2^44" $coop replay --policy coop --page 3000 "$traces/unet-train-step.trace.gz"
# the bounds themselves: a page above 2^44 is refused (2^45 to 2^53 passed the check,
# then coop's pool could not reserve 5 pages of address space: exit 1), 2^54 for the
# capacity; a page of 512 bytes and a capacity of 2^54 - 1 taken
expect 2 "--page '0x40000000000000' is too large: it must be at most 2^44 bytes (16 TiB)" $coop replay --policy coop --page 0x40000000000000 "$traces/unet-train-step.trace.gz"
expect 2 "coop replay: --page '9007199254740992' is too large: it must be at most 2^44 bytes (16 TiB)" $coop replay --policy coop --page 9007199254740992 "$traces/unet-train-step.trace.gz"
expect 2 "coop replay: --page '32T' is too large: it must be at most 2^44 bytes (16 TiB)" $coop replay --policy coop-segments --page 32T "$traces/unet-train-step.trace.gz"
# 16 TiB itself is taken (coop-segments here: coop's 80 TiB reservation does not fit
# the address space ASan leaves)
if $coop replay --json --policy coop-segments --page 16T --capacity 16T "$traces/unet-train-step.trace.gz" >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: --page 16T is taken"
else
    echo "FAIL: --page 16T: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
expect 2 "--capacity '0x40000000000000' is too large" $coop replay --policy ideal --capacity 0x40000000000000 "$traces/unet-train-step.trace.gz"
if $coop replay --json --policy coop --page 512 "$traces/unet-train-step.trace.gz" >"$tmp/out" 2>"$tmp/err" &&
    $coop replay --json --policy ideal --capacity 0x3fffffffffffff "$traces/unet-train-step.trace.gz" >>"$tmp/out" 2>>"$tmp/err"; then
    echo "ok: --page 512 and --capacity 2^54-1 are taken"
else
    echo "FAIL: --page 512 or --capacity 2^54-1: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
expect 2 "--capacity '18446744073709551615' is too large: it must be below 2^54" $coop replay --policy coop,torch --capacity 18446744073709551615 "$traces/unet-train-step.trace.gz"
# coop and jemalloc reserve 4 x the capacity of address space in one mmap, and a
# process has 2^47 bytes: above 2^44 (16 TiB) they passed the check, then each run
# skipped them (exit 1, "cannot reserve 140737488355328 bytes"); refused when parsed,
# naming the chosen policies that reserve. The others take it (their ranges are lazy).
expect 2 "coop replay: --capacity '32T' is too large for coop: it reserves 4 times the capacity of address space" $coop replay --policy coop --capacity 32T "$traces/unet-train-step.trace.gz"
expect 2 "--capacity '17T' is too large for jemalloc: it reserves 4 times" $coop replay --policy ideal,jemalloc --capacity 17T "$traces/unet-train-step.trace.gz"
expect 2 "--capacity '0x100000000001' is too large for coop and jemalloc: they reserve 4 times the capacity of address space and a process has 2^47 bytes: at most 2^44 bytes (16 TiB) with them" $coop replay --capacity 0x100000000001 "$traces/unet-train-step.trace.gz"
if $coop replay --json --policy ideal,torch,torch-expandable,coop-segments --capacity 32T "$traces/unet-train-step.trace.gz" >"$tmp/out" 2>"$tmp/err" &&
    $coop replay --json --policy coop,jemalloc --capacity 16T "$traces/unet-train-step.trace.gz" >>"$tmp/out" 2>>"$tmp/err"; then
    echo "ok: --capacity 32T without coop and jemalloc, 16T with them, are taken"
else
    echo "FAIL: --capacity 32T without coop and jemalloc or 16T with them: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
# decimal, not octal: 08 was 'not a byte count', 010 was 8
if $coop replay --json --policy ideal --capacity 08 "$traces/unet-train-step.trace.gz" >"$tmp/out" 2>"$tmp/err" &&
    $coop replay --json --policy ideal --capacity 0x10M "$traces/unet-train-step.trace.gz" >>"$tmp/out" 2>>"$tmp/err"; then
    echo "ok: --capacity 08 and 0x10M are byte counts"
else
    echo "FAIL: --capacity 08 or 0x10M: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
expect 2 "unknown policy 'nope'" $coop replay --policy nope "$traces/unet-train-step.trace.gz"
# without a trace, the bundled ones: every allocation trace, then every GPU snapshot
if $coop replay --json --policy ideal >"$tmp/out" 2>"$tmp/err"; then
    got=$(grep -o '"path":"[^"]*"' "$tmp/out" | sed -e 's/.*\.cuda\.pickle\.gz"$/cuda.pickle/' -e 's/.*\.trace\.gz"$/trace/' | uniq -c | awk '{ print $1, $2 }' | tr '\n' ' ')
    want="$(ls "$traces"/*.trace.gz | wc -l | tr -d ' ') trace $(ls "$traces"/*.cuda.pickle.gz | wc -l | tr -d ' ') cuda.pickle "
    [ "$got" = "$want" ] || { echo "FAIL: the bundled traces: $got, not $want"; failures=$((failures + 1)); }
else
    echo "FAIL: coop replay without a trace: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
# a policy listed twice gave two identical rows (coop sim refuses it too)
expect 2 "coop replay: policy 'coop' is listed twice" $coop replay --policy coop,ideal,coop "$traces/unet-train-step.trace.gz"
expect 2 "coop replay: policy 'ideal' is listed twice" $coop replay --policy coop,ideal,ideal "$traces/unet-train-step.trace.gz"
# --page with no policy that has pages was dropped without a word
expect 2 "coop replay: --page '4K' applies to coop and coop-segments only" $coop replay --policy torch,ideal --page 4K "$traces/unet-train-step.trace.gz"
if $coop replay --json --policy coop-segments --page 4K "$traces/unet-train-step.trace.gz" >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: --page applies to coop-segments"
else
    echo "FAIL: --policy coop-segments --page 4K: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
# a --timeline naming a trace emptied it before it was read
printf 'coop-trace 1\nA 0 512 0\nF 0\n' >"$tmp/keep.trace"
cp "$tmp/keep.trace" "$tmp/keep.orig"
expect 2 "coop replay: --timeline $tmp/keep.trace is the trace $tmp/keep.trace" $coop replay --policy ideal --timeline "$tmp/keep.trace" "$tmp/keep.trace"
cmp -s "$tmp/keep.trace" "$tmp/keep.orig" || { echo "FAIL: --timeline overwrote the trace it names"; failures=$((failures + 1)); }
ln -s keep.trace "$tmp/keep-link.trace"
expect 2 "is the trace $tmp/keep-link.trace" $coop replay --policy ideal --timeline "$tmp/keep.trace" "$tmp/keep-link.trace"
expect 2 "coop replay: cannot write --timeline $tmp/no/such/dir/t" $coop replay --policy ideal --timeline "$tmp/no/such/dir/t" "$tmp/keep.trace"
# '-' is not standard output for --timeline (the rows are there), nor a file
# named '-' made in the current directory without a word
expect 2 "coop replay: --timeline -: standard output carries the rows" $coop replay --policy ideal --timeline - "$tmp/keep.trace"
[ ! -e ./- ] || { echo "FAIL: --timeline - wrote a file named '-'"; failures=$((failures + 1)); rm -f ./-; }
expect 2 "$tmp/none: cannot open" $coop replay "$tmp/none"
# the message is one line, ended by its newline
[ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: not one line: '$(cat "$tmp/err")'"; failures=$((failures + 1)); }
# a bad trace is named when its turn comes and the others are replayed (one
# rule with coop sim, README); the table, which needs every row for its
# widths, comes at the end: it held keep.trace alone before (rev35-I)
$coop replay --policy ideal "$tmp/keep.trace" "$tmp/bad.trace" "$tmp/keep.trace" >"$tmp/both" 2>&1
if head -1 "$tmp/both" | grep -q "bad.trace:3" && sed -n 2p "$tmp/both" | grep -q "^trace " &&
    [ "$(grep -c "^keep.trace " "$tmp/both")" -eq 2 ]; then
    echo "ok: the error, then the table of both good traces"
else
    echo "FAIL: the table and the error: $(cat "$tmp/both")"; failures=$((failures + 1))
fi
# --json: each row is out before the next trace's error, where they meet in
# one file (stdout is buffered there: the error came first, rev35-K mutant)
$coop replay --json --policy ideal "$tmp/keep.trace" "$tmp/bad.trace" "$tmp/keep.trace" >"$tmp/both" 2>&1
if sed -n 1p "$tmp/both" | grep -q '^{"trace":"keep.trace"' && sed -n 2p "$tmp/both" | grep -q "bad.trace:3" &&
    sed -n 3p "$tmp/both" | grep -q '^{"trace":"keep.trace"' && [ "$(wc -l <"$tmp/both")" -eq 3 ]; then
    echo "ok: --json: a row, the error, a row"
else
    echo "FAIL: --json rows and the error: $(cat "$tmp/both")"; failures=$((failures + 1))
fi
# JSON rows are out as each trace is measured: before the next trace's note
$coop replay --json --policy ideal,recorded "$tmp/keep.trace" "$tmp/keep.trace" >"$tmp/both" 2>&1
if sed -n 1p "$tmp/both" | grep -q "no recorded row" && sed -n 2p "$tmp/both" | grep -q '^{' &&
    sed -n 3p "$tmp/both" | grep -q "no recorded row"; then
    echo "ok: each trace's rows before the next trace's note"
else
    echo "FAIL: rows and notes: $(cat "$tmp/both")"; failures=$((failures + 1))
fi
expect 2 "bad.trace:3" $coop replay "$tmp/bad.trace"
# live bytes that reach 2^63 (128 blocks of 2^56 - 1, then one more): the
# replay refuses the trace as bad input (2), not as a failed policy
{ echo "coop-trace 1"; i=0; while [ $i -le 128 ]; do echo "A $i 72057594037927935 0"; i=$((i + 1)); done; } >"$tmp/huge.trace"
expect 2 "huge.trace: event 128 (id 128, 72057594037927935 bytes) brings the live bytes to 2^63 or more" $coop replay --json --policy ideal "$tmp/huge.trace"
# a first trace that stops the run measured nothing: no table (a header alone came)
expect 2 "brings the live bytes to 2^63 or more" $coop replay --policy ideal "$tmp/huge.trace"
[ ! -s "$tmp/out" ] || { echo "FAIL: a table for no row: $(cat "$tmp/out")"; failures=$((failures + 1)); }
printf 'coop-trace 1\nA 0 18446744073709551615 0\nF 0\n' >"$tmp/big.trace"
expect 2 "big.trace:2: size 18446744073709551615 is too large (sizes must be below 2^56)" $coop replay --json --policy torch,ideal "$tmp/big.trace"

expect 2 "--device '-5' is not a device number" $coop convert --device -5 "$traces/unet-train-step.trace.gz" "$tmp/x"
expect 2 "--device 'x1' is not a device number" $coop convert --device x1 "$traces/unet-train-step.trace.gz" "$tmp/x"
# 65536 is the last device number (the snapshot then has none); '' is no number
expect 2 "device 65536 has no device_traces" $coop convert --device 65536 "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
expect 2 "--device '65537' is not a device number" $coop convert --device 65537 "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
expect 2 "--device '' is not a device number" $coop convert --device '' "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
# the whole field, as bench's counts: strtol took leading spaces and a sign
expect 2 "--device ' 1' is not a device number" $coop convert --device ' 1' "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
expect 2 "--device '+1' is not a device number" $coop convert --device +1 "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
expect 2 "--device '-0' is not a device number" $coop convert --device -0 "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
expect 2 "device 1 has no device_traces: the snapshot records device 0 only" $coop convert --device 1 "$traces/unet-train-step.cuda.pickle.gz" "$tmp/x"
# replay's --device is convert's: the same refusals, worded the same
expect 2 "coop replay: --device '+1' is not a device number (0 to 65536, decimal or 0x hex)" $coop replay --policy ideal --device +1 "$traces/unet-train-step.cuda.pickle.gz"
expect 2 "coop replay: --device '' is not a device number" $coop replay --policy ideal --device '' "$traces/unet-train-step.cuda.pickle.gz"
expect 2 "coop replay: --device needs a value" $coop replay --policy ideal --device
expect 2 "device 1 has no device_traces: the snapshot records device 0 only" $coop replay --policy ideal --device 1 "$traces/unet-train-step.cuda.pickle.gz"
expect 2 "coop replay: --device 0 applies to PyTorch snapshots only, and $traces/unet-train-step.trace.gz is a text trace" $coop replay --policy ideal --device 0 "$traces/unet-train-step.trace.gz"
# checked for every TRACE before the first row: a snapshot then a text trace
# printed the snapshot's rows, then stopped at the text trace
expect 2 "coop replay: --device 0 applies to PyTorch snapshots only, and $traces/unet-train-step.trace.gz is a text trace, not a snapshot" $coop replay --json --policy ideal --device 0 "$traces/unet-train-step.cuda.pickle.gz" "$traces/unet-train-step.trace.gz"
[ -s "$tmp/out" ] && { echo "FAIL: --device 0 with a text trace printed rows: $(head -2 "$tmp/out")"; failures=$((failures + 1)); }
# without TRACE the bundled traces, allocation traces among them: refused by
# what it is (it stopped at the first bundled trace, naming a file nobody gave)
expect 2 "coop replay: --device 0 applies to PyTorch snapshots only, and without TRACE the bundled traces are replayed, allocation traces among them: name snapshots" $coop replay --json --policy ideal --device 0
expect 2 "bad.trace:3" $coop convert "$tmp/bad.trace" "$tmp/x"
# OUT the file IN names (by another path too, or IN as standard input): the
# converted text replaced the input, a snapshot pickle lost for good
cp "$traces/unet-train-step.trace.gz" "$tmp/same.trace.gz"
expect 2 "same.trace.gz is the input $tmp/same.trace.gz" $coop convert "$tmp/same.trace.gz" "$tmp/same.trace.gz"
expect 2 "is the input" $coop convert "$tmp/same.trace.gz" "$tmp/../$(basename "$tmp")/same.trace.gz"
expect 2 "is the input" sh -c '"$0" convert - "$1" <"$1"' "$coop" "$tmp/same.trace.gz"
cmp -s "$traces/unet-train-step.trace.gz" "$tmp/same.trace.gz" ||
    { echo "FAIL: convert IN IN changed IN"; failures=$((failures + 1)); }

expect 2 "cut.trace.gz:" $coop convert "$tmp/cut.trace.gz" "$tmp/x"
expect 2 "truncated" $coop convert "$tmp/cut.trace.gz" "$tmp/x"
expect 2 "garbled.trace.gz: read error" $coop convert "$tmp/garbled.trace.gz" "$tmp/x"
[ "$(grep -o 'garbled.trace.gz' "$tmp/err" | wc -l)" -eq 1 ] ||
    { echo "FAIL: the message names the file more than once: $(cat "$tmp/err")"; failures=$((failures + 1)); }
expect 2 "truncated" $coop replay "$tmp/cut.trace.gz"
expect 2 "cut125.ops.jsonl.gz:1: read error: file is truncated" $coop sim --no-min-ratio --budget 0.9 "$tmp/cut125.ops.jsonl.gz"
expect 2 "cut125.ops.jsonl.gz:1: read error: file is truncated" $coop convert "$tmp/cut125.ops.jsonl.gz" "$tmp/x"
expect 2 "cut12537.ops.jsonl.gz:2103: read error: file is truncated" $coop replay --policy ideal "$tmp/cut12537.ops.jsonl.gz"
[ ! -e "$tmp/x" ] || { echo "FAIL: a failed convert left $tmp/x behind"; failures=$((failures + 1)); }

# Segment events that do not add up: the recorded row is skipped (status 1,
# as any failed policy) with the line and the event; the other rows print,
# and the file is named once.
printf 'coop-trace 1\nA 0 4096 0\nS 0x1000 4096 0\nF 0\n' >"$tmp/segbad.trace"
expect 1 "segbad.trace: recorded skipped: line 3: segment_alloc of 4096 bytes at 0x1000 (event 1): segment events and final segments disagree" $coop replay --json --policy ideal,recorded "$tmp/segbad.trace"
grep -q '"policy":"ideal"' "$tmp/out" || { echo "FAIL: no ideal row beside the skipped recorded one"; failures=$((failures + 1)); }
[ "$(grep -o 'segbad.trace' "$tmp/err" | wc -l)" -eq 1 ] ||
    { echo "FAIL: the message names the file more than once: $(cat "$tmp/err")"; failures=$((failures + 1)); }

# --policy recorded on a trace without segments: no row, and a note why;
# every policy asked for having no row on every trace is an input error (2,
# no table: a header alone, exit 0, read as a run that measured nothing);
# one row anywhere keeps 0 (rev37-I: exit 0 with a header alone)
expect 2 "unet-train-step.trace.gz: no recorded row: the trace holds no recorded segments" $coop replay --policy recorded "$traces/unet-train-step.trace.gz"
grep -qF "no row: no policy asked for" "$tmp/err" && [ ! -s "$tmp/out" ] ||
    { echo "FAIL: no rows: $(cat "$tmp/out" "$tmp/err")"; failures=$((failures + 1)); }
expect 2 "no row: no policy asked for" $coop replay --json --policy recorded "$traces/unet-train-step.trace.gz" "$traces/unet-train-step.trace.gz"
expect 0 "no recorded row" $coop replay --policy ideal,recorded "$traces/unet-train-step.trace.gz"
grep -q "^unet-train-step.trace.gz " "$tmp/out" || { echo "FAIL: no ideal row: $(cat "$tmp/out")"; failures=$((failures + 1)); }
# a trace with no allocation or free (a snapshot dumped without
# _record_memory_history(): only its live blocks): rows, and a note how to
# record one; the empty trace too
printf 'coop-trace 1\nL 0 4096 0\nL 1 8192 0\n' >"$tmp/liveonly.trace"
expect 0 "liveonly.trace: no allocation or free recorded after the 2 blocks live at the start" $coop replay --policy ideal "$tmp/liveonly.trace"
grep -qF "_record_memory_history()" "$tmp/err" || { echo "FAIL: no hint how to record a history: $(cat "$tmp/err")"; failures=$((failures + 1)); }
# frees alone after them are a history: no note
printf 'coop-trace 1\nL 0 4096 0\nF 0\n' >"$tmp/livefreed.trace"
if $coop replay --policy ideal "$tmp/livefreed.trace" >"$tmp/out" 2>"$tmp/err" &&
    ! grep -q "no allocation or free recorded" "$tmp/err"; then
    echo "ok: a trace that frees its live blocks gets no note"
else
    echo "FAIL: a trace that frees its live blocks: $(cat "$tmp/err")"; failures=$((failures + 1))
fi
printf 'coop-trace 1\n' >"$tmp/noevents.trace"
expect 0 "noevents.trace: no allocation or free recorded after the 0 blocks" $coop replay --policy ideal "$tmp/noevents.trace"

# Results that cannot be written are a failure (1), not a silent success.
# expect_full MESSAGE CMD...: CMD with stdout on /dev/full exits 1 and says
# so, its message naming the command.
expect_full() {
    message=$1
    shift
    "$@" >/dev/full 2>"$tmp/err"
    got=$?
    if [ "$got" -ne 1 ] || ! grep -qF -- "$message" "$tmp/err"; then
        echo "FAIL: '$* >/dev/full' exited $got: $(head -3 "$tmp/err")"
        failures=$((failures + 1))
    else
        echo "ok: '$* >/dev/full' -> 1: $(head -1 "$tmp/err")"
    fi
}
if [ -w /dev/full ]; then
    printf 'coop-trace 1\nA 0 4096 0\nF 0\n' >"$tmp/small.trace"
    expect_full "coop replay: writing standard output failed" $coop replay --json --policy ideal "$tmp/small.trace"
    expect_full "coop replay: writing standard output failed" $coop replay --policy ideal "$tmp/small.trace"
    expect_full "coop sim: writing standard output failed" $coop sim --no-min-ratio --policy dtr --budget 0.5 "$traces/unet-train-step.ops.jsonl.gz"
    expect_full "coop bench: writing standard output failed" $coop bench --live 10 --batches 1
    # with the reason, where the failed flush is the first write
    expect_full "coop: writing standard output failed: No space left on device" $coop --help
    expect_full "coop: writing standard output failed: No space left on device" $coop --version
    # a command that failed keeps its own status (2: bad input) when its
    # output is lost too, and a --timeline that cannot be written is 1
    $coop replay --policy ideal "$tmp/small.trace" "$tmp/bad.trace" >/dev/full 2>"$tmp/err"
    got=$?
    if [ "$got" -eq 2 ] && grep -q "bad.trace:3" "$tmp/err"; then
        echo "ok: a bad trace with stdout on /dev/full -> 2"
    else
        echo "FAIL: a bad trace with stdout on /dev/full exited $got: $(cat "$tmp/err")"; failures=$((failures + 1))
    fi
    expect 1 "coop replay: writing --timeline /dev/full failed" $coop replay --policy ideal --timeline /dev/full "$tmp/small.trace"
    # ... but a bad trace's 2 stands
    expect 2 "bad.trace:3" $coop replay --policy ideal --timeline /dev/full "$tmp/small.trace" "$tmp/bad.trace"
    # rows of one trace beyond stdio's buffer (a long path in each) fail in the
    # middle of the trace's rows: said there, and the run stops
    long="$tmp"
    for i in 1 2 3 4 5 6 7 8 9 10; do
        long="$long/$(printf '%0200d' "$i")"
    done
    mkdir -p "$long" && cp "$tmp/small.trace" "$long/small.trace"
    $coop replay --json --policy ideal,torch,coop "$long/small.trace" >/dev/full 2>"$tmp/err"
    got=$?
    if [ "$got" -eq 1 ] && grep -q "coop replay: writing standard output failed: No space left on device" "$tmp/err" &&
        [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
        echo "ok: JSON rows beyond the buffer on /dev/full -> 1: $(head -1 "$tmp/err")"
    else
        echo "FAIL: JSON rows beyond the buffer on /dev/full exited $got: $(cat "$tmp/err")"; failures=$((failures + 1))
    fi
else
    echo "skipped: no writable /dev/full"
fi

# A --budget list of 512 characters or more was cut to 511 without a word:
# its last ratio was cut (0.25 ran as 0.2, or was refused).
long_ratio="0.5$(printf '%0505d' 0)"
$coop sim --json --no-min-ratio --policy lru --budget "$long_ratio,0.25" \
    "$traces/unet-train-step.ops.jsonl.gz" >"$tmp/out" 2>"$tmp/err"
if [ "$(grep -o '"budget_ratio":[0-9.]*' "$tmp/out" | tr '\n' ' ')" = '"budget_ratio":0.5 "budget_ratio":0.25 ' ]; then
    echo "ok: a 513-character --budget list is read whole"
else
    echo "FAIL: a 513-character --budget list: $(cat "$tmp/out" "$tmp/err")"
    failures=$((failures + 1))
fi

[ "$failures" -eq 0 ]
