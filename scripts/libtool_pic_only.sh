#!/bin/sh
# `make LIBTOOL=/path/to/scripts/libtool_pic_only.sh ...` (from the top of a
# configured build tree): libtool, but each library source compiled once.
# libtool compiles a library's sources twice, PIC objects for the shared
# library and non-PIC ones for the static archive; given -shared in compile
# mode it builds the PIC object alone, and the archive then takes that. For
# builds whose objects are only checked, never shipped (.ci/run's sanitizer
# and -O3 builds, scripts/analyze.sh): half the library's compiles.
case " $* " in
*" --mode=compile "*) set -- "$@" -shared ;;
esac
exec /bin/sh ./libtool "$@"
