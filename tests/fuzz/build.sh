#!/bin/sh
# Builds the libFuzzer harnesses (make fuzz runs this; see fuzz.mk).
#   build.sh CC SRCDIR OUTDIR "CFLAGS" "LIBS" LIBRARY_SOURCES...
# Every library source is compiled once into OUTDIR/obj with coverage
# instrumentation and ASan+UBSan (recompiled when the source or a header is
# newer than its object), then each tests/fuzz/fuzz_*.c is linked with them
# into OUTDIR/fuzz_NAME. Compiles and links run FUZZ_JOBS at a time (default:
# the number of processors; .ci/run's fuzz section waited on one core for
# them before).
set -eu
cc=$1 srcdir=$2 out=$3 cflags=$4 libs=$5
shift 5
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
common="-g -O1 -std=c11 -D_GNU_SOURCE $san -I$srcdir/include -I$srcdir/src $cflags"
mkdir -p "$out/obj"
newest_header=$(ls -t "$srcdir"/include/*.h "$srcdir"/src/*.h "$srcdir"/src/*/*.h \
    "$srcdir/tests/fuzz/coverage_ignore.txt" | head -1)
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
export cc common srcdir
objs= stale=
for src in "$@"; do
    case $src in *.c) ;; *) continue ;; esac
    obj=$out/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
    objs="$objs $obj"
    if [ ! -f "$obj" ] || [ "$srcdir/$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then
        stale="$stale $src $obj"
    fi
done
# xargs exits non-zero (and set -e stops here) when any compile failed
[ -z "$stale" ] || printf '%s %s\n' $stale | xargs -n 2 -P "$jobs" sh -c '
    echo "  FUZZCC   $0"
    $cc $common -fsanitize=fuzzer-no-link \
        -fsanitize-coverage-ignorelist="$srcdir/tests/fuzz/coverage_ignore.txt" \
        -c "$srcdir/$0" -o "$1"'
export objs libs out
ls "$srcdir"/tests/fuzz/fuzz_*.c | xargs -n 1 -P "$jobs" sh -c '
    name=$(basename "$0" .c)
    echo "  FUZZLD   $out/$name"
    $cc $common -fsanitize=fuzzer -I"$srcdir/tests/fuzz" "$0" $objs $libs -lm -o "$out/$name"'
