#!/bin/sh
# make check runs each *.py test through this (PY_LOG_COMPILER in Makefile.am):
# by its own #! line where that interpreter exists, else by a python3 that
# does (the line names /usr/bin/python3, Debian's; env python3 needs one on
# PATH), else it skips with the reason instead of failing on a missing
# interpreter.
test=$1
shift
line=$(head -n 1 "$test")
case $line in
"#!/usr/bin/env python3"*) command -v python3 >/dev/null 2>&1 && exec "$test" "$@" ;;
"#!"*)
    interp=${line#\#!}
    interp=${interp%% *}
    [ -x "$interp" ] && exec "$test" "$@"
    ;;
esac
for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 && exec "$py" "$test" "$@"
done
echo "SKIP: $test: no python3 on PATH or at /usr/bin/python3 (install python3)"
exit 77
