#!/bin/sh
# Runs the Python tests of the PyTorch integration against this build tree's
# libcoop.so (make check runs tests from the top build directory; automake
# exports srcdir). Picks an interpreter that has torch when there is one
# (Debian's python3-torch lives in /usr/bin/python3's site packages).
srcdir=${srcdir:-.}
lib="$(pwd)/.libs/libcoop.so"
if [ -n "${COOP_SANITIZED:-}" ]; then
    echo "SKIP python_tests: sanitized build (python cannot load an ASan libcoop.so)"
    exit 77
fi
if [ ! -f "$lib" ]; then
    echo "SKIP python_tests: no shared library at $lib (built with --disable-shared?)"
    exit 77
fi
py=""
for cand in python3 /usr/bin/python3; do
    command -v "$cand" >/dev/null 2>&1 || continue
    [ -n "$py" ] || py=$cand
    # find_spec finds the package without importing it (an import is 1 s)
    if "$cand" -c "import importlib.util, sys; sys.exit(not importlib.util.find_spec('torch'))" \
        >/dev/null 2>&1; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "SKIP python_tests: no python3"
    exit 77
fi
echo "python_tests: $("$py" --version 2>&1) ($py), $lib"
COOP_LIBRARY="$lib" COOP_LAYOUT_PROGRAM="$(pwd)/tests/ctypes_layout" COOP_PROGRAM="$(pwd)/coop" \
    PYTHONPATH="$srcdir/python" PYTHONDONTWRITEBYTECODE=1 \
    exec "$py" "$srcdir/tests/python/test_torch_abi.py"
