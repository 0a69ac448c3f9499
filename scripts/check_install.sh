#!/bin/sh
# Checks what `make install` promises, on a build of this tree into a
# temporary prefix: the library (shared and static), coop.h, coop.pc, the
# coop command, the bundled traces and the Python package. The README's C
# example, taken from the README itself so the two cannot drift, is built
# with pkg-config against the installed copy (shared, then static) and run;
# coop.h compiles as C99 and as C++17 (g++, clang++) with -pedantic -Werror,
# and the header's, the library's and coop.pc's versions agree; libcoop.so
# exports only what coop.h declares; the installed coop replays a bundled
# trace, and with no TRACE replays the bundled traces it installed in
# share/coop/traces (the source tree moved away); the Python package loads
# the installed library, and its record of the library's directory follows
# the libdir make is given; `make uninstall` leaves no file, and none of coop's
# own directories, behind.
#
# Usage: scripts/check_install.sh
#   Builds a copy of the tracked sources (the working tree's, as git lists
#   them) in a temporary directory, so the tree itself is left as it is.
# Exit status 0 when every check passes, 1 otherwise; prints one line per check.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
failures=0

check() { # description, command...
    what=$1
    shift
    if out=$("$@" 2>&1); then
        echo "ok: $what"
    else
        echo "FAIL: $what"
        printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
        failures=$((failures + 1))
    fi
}

mkdir "$work/src"
if ! (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 cp --parents -t "$work/src") ||
    ! (cd "$work/src" && autoreconf -fi && ./configure --prefix="$prefix" &&
        make -j"$(nproc)" install) >"$work/build.log" 2>&1; then
    echo "FAIL: build and make install into a temporary prefix"
    tail -30 "$work/build.log" | sed 's/^/    /'
    exit 1
fi
echo "ok: build and make install into a temporary prefix"

libdir=$prefix/lib
check "coop.h, libcoop.so, libcoop.a, coop.pc and bin/coop are installed" \
    test -f "$prefix/include/coop.h" -a -e "$libdir/libcoop.so" -a -f "$libdir/libcoop.a" \
    -a -f "$libdir/pkgconfig/coop.pc" -a -x "$prefix/bin/coop"

# the README's first ```c block after "## Using libcoop from C"
awk '/^## Using libcoop from C/ { section = 1 }
     section && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$src/README.md" >"$work/example.c"
check "the README's C example is found" test -s "$work/example.c"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
run_example() { # binary [libdir, the installed one's by default]
    LD_LIBRARY_PATH=${2:-$libdir} "$1" >"$work/example.out" &&
        grep -q '^expected OOM: .*' "$work/example.out" &&
        grep -q '^allocated 314572800 B' "$work/example.out" &&
        grep -q '^second free: ' "$work/example.out" &&
        ! grep -q '^second free: ok' "$work/example.out"
}
check "the example builds with pkg-config against the installed library" \
    sh -c "cc -std=c11 -Wall -Wextra -Werror '$work/example.c' -o '$work/example' \
           \$(pkg-config --cflags --libs coop)"
check "the example runs: OOM reported, statistics, double free refused" run_example "$work/example"
check "the example links statically (pkg-config --static)" \
    sh -c "cc -std=c11 '$work/example.c' -o '$work/example-static' \
           \$(pkg-config --cflags coop) '$libdir/libcoop.a' \$(pkg-config --static --libs-only-l coop | sed 's/-lcoop//')"
check "the static example runs" run_example "$work/example-static"

# `make install prefix=DIR` (another prefix than configure's, the GNU way):
# coop.pc names DIR, so plain pkg-config builds the example against DIR's copy
# (coop.pc was configure's, naming the configured prefix); DESTDIR stages the
# files without entering coop.pc, whose prefix stays the one installed to
moved=$work/moved
moved_example() {
    (cd "$work/src" && make install prefix="$moved") >"$work/moved.log" 2>&1 &&
        got=$(PKG_CONFIG_PATH=$moved/lib/pkgconfig pkg-config --variable=libdir coop) &&
        echo "coop.pc's libdir: $got" && test "$got" = "$moved/lib" &&
        cc -std=c11 "$work/example.c" -o "$work/example-moved" \
            $(PKG_CONFIG_PATH=$moved/lib/pkgconfig pkg-config --cflags --libs coop) &&
        run_example "$work/example-moved" "$moved/lib"
}
check "make install prefix=DIR: coop.pc names DIR; the example builds against it and runs" \
    moved_example
check "coop.pc keeps a prefix with sed's special characters (&, |, \\) as given" \
    sh -c "cd '$work/src' && make -s coop.pc prefix='/opt/a&b|c\\d' >/dev/null &&
           grep -qxF 'prefix=/opt/a&b|c\\d' coop.pc && make -s coop.pc >/dev/null"
# libtool's install breaks on a space or a ' in a path (after installing part):
# make install and configure refuse such a path with a message, first
refused_quote() {
    (cd "$work/src" && ! make install prefix="$work/it's here" >"$work/quote.log" 2>&1) &&
        grep -q "coop.pc: cannot install under a path with a space or '" "$work/quote.log" &&
        test ! -e "$work/it's here" &&
        (cd "$work/src" && ! ./configure --prefix="$work/a b" >"$work/quote.log" 2>&1) &&
        grep -q "configure: error: cannot install under a path with a space" "$work/quote.log" &&
        test -f "$work/src/config.status" && (cd "$work/src" && make -s coop.pc >/dev/null)
}
check "make install prefix=DIR and configure refuse a DIR with a ' or a space, installing nothing" \
    refused_quote
# and its other paths stay relative to the prefix, for --define-prefix
check "make install DESTDIR=D: coop.pc under D names the configured prefix" \
    sh -c "cd '$work/src' && make install-pkgconfigDATA DESTDIR='$work/dest' >/dev/null &&
           pc='$work/dest$libdir/pkgconfig/coop.pc' && grep -qx 'prefix=$prefix' \"\$pc\" &&
           grep -qxF 'exec_prefix=\${prefix}' \"\$pc\" &&
           grep -qxF 'libdir=\${exec_prefix}/lib' \"\$pc\" &&
           grep -qxF 'includedir=\${prefix}/include' \"\$pc\""

# coop.h as a C99 or C++ user includes it: first (self-contained), twice
# (guarded), -pedantic -Werror; the C++ program (extern "C") links the
# installed library and prints the versions of the header, the library and
# coop.pc, which must agree
cat >"$work/header.c" <<'EOF_C'
#include <coop.h>
#include <coop.h>
#include <stdio.h>
int main(void)
{
    coop_config cfg;
    coop_config_default(&cfg);
    printf("%d.%d.%d %s %s %d\n", COOP_VERSION_MAJOR, COOP_VERSION_MINOR,
           COOP_VERSION_PATCH, COOP_VERSION_STRING, coop_version(), (int)cfg.backend);
    return 0;
}
EOF_C
check "coop.h compiles as C99 with -pedantic -Werror" \
    sh -c "cc -std=c99 -pedantic -Wall -Wextra -Werror -Wstrict-prototypes -c '$work/header.c' \
           -o /dev/null \$(pkg-config --cflags coop)"
cxx_header() { # compiler: builds header.c as C++17, runs it, compares versions
    "$1" -std=c++17 -pedantic -Wall -Wextra -Werror -x c++ "$work/header.c" -o "$work/header-cxx" \
        $(pkg-config --cflags --libs coop) &&
        v=$(pkg-config --modversion coop) && echo "coop.pc's Version: $v" &&
        LD_LIBRARY_PATH=$libdir "$work/header-cxx" | tee /dev/stderr | grep -qx "$v $v $v 0"
}
for cxx in c++ clang++; do
    command -v $cxx >/dev/null &&
        check "coop.h compiles as C++17 ($cxx); header, libcoop.so and coop.pc versions agree" \
            cxx_header $cxx
done
# the shared library exports the functions coop.h declares (lines that begin
# with a type), nothing else: internal names would clash with the user's
exports_declared() {
    nm -D --defined-only "$libdir/libcoop.so" | awk '{ print $3 }' | sort >"$work/exports" &&
        grep -E '^[a-z]' "$prefix/include/coop.h" | grep -v '^typedef' |
        grep -oE '\bcoop_[a-z0-9_]+\(' | tr -d '(' | sort -u >"$work/declared" &&
        test -s "$work/exports" && comm -23 "$work/exports" "$work/declared" | tee /dev/stderr |
        awk 'END { exit NR != 0 }'
}
check "libcoop.so exports only functions coop.h declares" exports_declared

trace=$(ls "$src"/traces/*.trace.gz 2>/dev/null | head -1)
check "the installed coop replays a bundled trace" \
    sh -c "LD_LIBRARY_PATH='$libdir' '$prefix/bin/coop' replay --json --policy coop '$trace' | grep -q '\"min_capacity_bytes\":[0-9]'"

# without a TRACE, the installed coop replays the bundled traces it installed:
# the source tree (which a build's binary also looks in) is moved away meanwhile
bundled=$(ls "$src"/traces/*.trace.gz "$src"/traces/*.cuda.pickle.gz | wc -l)
mv "$work/src" "$work/src-away"
check "the installed coop replays its $bundled bundled traces without the source tree" \
    sh -c "'$prefix/bin/coop' replay --json --policy coop >'$work/bundled.out' &&
           test \$(grep -c '\"min_capacity_bytes\":[0-9]' '$work/bundled.out') -eq $bundled"
# and the coop that `make install prefix=DIR` put in DIR finds DIR's copies,
# share/coop/traces beside its bin/, the configured prefix's moved away too
mv "$prefix/share/coop" "$work/share-away"
check "the coop installed with prefix=DIR replays DIR's bundled traces without the source tree" \
    sh -c "'$moved/bin/coop' replay --json --policy coop >'$work/bundled.out' &&
           test \$(grep -c '\"min_capacity_bytes\":[0-9]' '$work/bundled.out') -eq $bundled"
mv "$work/share-away" "$prefix/share/coop"
mv "$work/src-away" "$work/src"

pkg=$(find "$prefix" -name native.py -path '*/coop/*' | head -1)
if [ -n "$pkg" ] && command -v python3 >/dev/null; then
    pydir=$(dirname "$(dirname "$pkg")")
    check "the installed Python package loads the installed library" \
        sh -c "cd '$work' && env -u COOP_LIBRARY PYTHONPATH='$pydir' python3 -c 'import coop.native as n; print(n.library_path())' | grep -qx '$libdir/libcoop.so'"
    # where the package looks for libcoop.so follows the libdir of the make
    # that installs it: written at every install, not kept from an earlier one
    # (a `make install prefix=DIR` before a plain `make install` left DIR in the
    # package the second one installed)
    check "the Python package's record of libdir follows the libdir make is given" \
        sh -c "cd '$work/src' && make -s python/coop/_build_config.py libdir='$work/elsewhere' &&
               grep -qx 'LIBDIR = \"$work/elsewhere\"' python/coop/_build_config.py"
else
    echo "skip: no Python package installed (configure found no python3)"
fi

(cd "$work/src" && make uninstall) >"$work/uninstall.log" 2>&1
# files, and the directories of coop's own (share/coop, site-packages/coop)
left=$(find "$prefix" \( -type f ! -name '*.pyc' \) -o \
    \( -type d \( -name coop -o -path '*/coop/*' \) \) | sed "s|$prefix/||")
check "make uninstall removes every installed file and coop's directories" test -z "$left"
[ -z "$left" ] || printf '    left: %s\n' $left

echo "check_install: $failures failed"
[ "$failures" -eq 0 ]
