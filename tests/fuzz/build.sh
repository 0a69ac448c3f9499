#!/bin/sh
# Builds the libFuzzer harnesses (make fuzz runs this; see fuzz.mk).
#   build.sh CC SRCDIR OUTDIR "CFLAGS" "LIBS" LIBRARY_SOURCES...
# Every library source is compiled once into OUTDIR/obj with coverage
# instrumentation and ASan+UBSan (recompiled when the source or a header is
# newer than its object), then each tests/fuzz/fuzz_*.c is linked with them
# into OUTDIR/fuzz_NAME.
set -eu
cc=$1 srcdir=$2 out=$3 cflags=$4 libs=$5
shift 5
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
common="-g -O1 -std=c11 -D_GNU_SOURCE $san -I$srcdir/include -I$srcdir/src $cflags"
mkdir -p "$out/obj"
newest_header=$(ls -t "$srcdir"/include/*.h "$srcdir"/src/*.h "$srcdir"/src/*/*.h \
    "$srcdir/tests/fuzz/coverage_ignore.txt" | head -1)
objs=
for src in "$@"; do
    case $src in *.c) ;; *) continue ;; esac
    obj=$out/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
    objs="$objs $obj"
    if [ ! -f "$obj" ] || [ "$srcdir/$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then
        echo "  FUZZCC   $src"
        $cc $common -fsanitize=fuzzer-no-link \
            -fsanitize-coverage-ignorelist="$srcdir/tests/fuzz/coverage_ignore.txt" \
            -c "$srcdir/$src" -o "$obj"
    fi
done
for harness in "$srcdir"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$harness" .c)
    echo "  FUZZLD   $out/$name"
    $cc $common -fsanitize=fuzzer -I"$srcdir/tests/fuzz" "$harness" $objs $libs -lm -o "$out/$name"
done
