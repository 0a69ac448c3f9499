#!/bin/sh
# make check: replays each fuzzer's seed corpus and the inputs that once
# crashed it (tests/fuzz/regressions/NAME) through the harness built without
# libFuzzer (tests/fuzz/replay_NAME). Any crash, sanitizer report or broken
# harness property fails the test.
srcdir=${srcdir:-.}
status=0
for name in pickle text minimalloc dtr trace_read alloc_conf api sim policies; do
    set -- "$srcdir/tests/fuzz/corpus/$name"
    [ -d "$srcdir/tests/fuzz/regressions/$name" ] && set -- "$@" "$srcdir/tests/fuzz/regressions/$name"
    if ./tests/fuzz/replay_$name "$@" > "tests/fuzz/replay_$name.out" 2>&1; then
        echo "ok: $name ($(wc -l < "tests/fuzz/replay_$name.out") inputs)"
    else
        echo "FAIL: $name"; tail -20 "tests/fuzz/replay_$name.out"; status=1
    fi
done
# An empty directory (a regressions/NAME a fuzz run created and found nothing
# for) replays nothing and succeeds; the sanitized build catches a harness
# driver that hands its empty name list to qsort as NULL.
empty=tests/fuzz/replay_empty.d
rm -rf "$empty" && mkdir "$empty"
if ./tests/fuzz/replay_text "$empty" > tests/fuzz/replay_empty.out 2>&1; then
    echo "ok: an empty directory"
else
    echo "FAIL: an empty directory"; tail -20 tests/fuzz/replay_empty.out; status=1
fi
rmdir "$empty"
exit $status
