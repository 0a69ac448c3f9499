#!/bin/sh
# COOP_TEST_SEED as the randomized C tests read it (tests/test_seed.h):
# - a malformed value makes every one of them fail (exit 1) with a message
#   on stderr naming the variable and the value, before it tests anything
#   with another seed;
# - a valid one, decimal or 0x hex, is the seed the test runs with and
#   prints, and without it the test prints the seed it chose;
# - the Python tests' reader (tests/coop_test_seed.py) takes and refuses the
#   same values with the same lines, so that one COOP_TEST_SEED for the
#   whole of make check reaches every randomized test.
set -u
programs="addr_map breaker_index free_index live_ranges page_map pool random_model remat_cache remat_claim remat_collect remat_threads
remat_values replay_free_ranges replay_max_treap replay_policy sim steady_state stress stress_torch_abi torch_abi torch_devices
trace_id_map threads_api trace_pickle trace_read window"
for p in $programs; do
    if [ ! -x "tests/${p}_test" ]; then
        echo "SKIP test_seed_test: tests/${p}_test is not built (no cmocka?)"
        exit 77
    fi
done
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
# every test that includes the header is in the list
for f in $(grep -l '^#include "test_seed.h"' "${srcdir:-.}"/tests/*_test.c); do
    name=$(basename "$f" _test.c)
    case " $(echo $programs) " in
    *" $name "*) ;;
    *) fail "tests/${name}_test.c includes test_seed.h: add $name to \$programs in $0" ;;
    esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-test-seed-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# refused SEED PROGRAM: PROGRAM fails with SEED, saying why (status 1; any
# failure but a skip is taken, as a sanitizer may change it at exit)
refused() {
    COOP_TEST_SEED=$1 "tests/$2_test" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -eq 0 ] || [ "$got" -eq 77 ]; then
        fail "COOP_TEST_SEED='$1' tests/$2_test exited $got, expected a failure: $(tail -1 "$tmp/err")"
    elif ! grep -qF "COOP_TEST_SEED=\"$1\" is not a seed" "$tmp/err"; then
        fail "COOP_TEST_SEED='$1' tests/$2_test: stderr does not name the value: $(head -3 "$tmp/err")"
    else
        echo "ok: COOP_TEST_SEED='$1' tests/$2_test -> $got: $(head -1 "$tmp/err")"
    fi
}

# echoed SEED PRINTED: breaker_index_test (a fraction of a second) passes
# with SEED and prints it as PRINTED; SEED "-" leaves the variable unset
echoed() {
    if [ "$1" = - ]; then
        (unset COOP_TEST_SEED && tests/breaker_index_test) >"$tmp/out" 2>"$tmp/err"
    else
        COOP_TEST_SEED=$1 tests/breaker_index_test >"$tmp/out" 2>"$tmp/err"
    fi
    got=$?
    line="breaker_index_test: seed $2 (set COOP_TEST_SEED=$2 to repeat)"
    if [ "$got" -ne 0 ]; then
        fail "COOP_TEST_SEED='$1' tests/breaker_index_test exited $got: $(tail -3 "$tmp/err")"
    elif ! grep -qxF "$line" "$tmp/err"; then
        fail "COOP_TEST_SEED='$1': stderr lacks '$line': $(head -3 "$tmp/err")"
    else
        echo "ok: COOP_TEST_SEED=${1#-} -> $line"
    fi
}

for p in $programs; do
    refused abc "$p"
    refused 12x "$p"
done
for bad in "" -1 +5 " 7" "7 " 0x 0x1g 0x0x5 1e5 18446744073709551616 0x10000000000000000; do
    refused "$bad" trace_id_map
done

echoed 12345 0x3039
echoed 0x3039 0x3039
echoed 0XABCdef 0xabcdef
echoed 010 0xa # decimal, not octal
echoed 0 0x0
echoed 18446744073709551615 0xffffffffffffffff
echoed - 0x7 # the test's own seed

# same_in_python SEED: the Python reader's status and stderr line are the C one's
same_in_python() {
    COOP_TEST_SEED=$1 tests/trace_id_map_test >"$tmp/out" 2>"$tmp/err"
    c_status=$? c_line=$(head -1 "$tmp/err")
    COOP_TEST_SEED=$1 $python -B -c "import sys; sys.path.insert(0, sys.argv[1]); \
import coop_test_seed; coop_test_seed.read_seed('trace_id_map_test', 7)" \
        "${srcdir:-.}/tests" >"$tmp/out" 2>"$tmp/err"
    py_status=$? py_line=$(head -1 "$tmp/err")
    c_ok=$([ "$c_status" -eq 0 ] && echo yes) py_ok=$([ "$py_status" -eq 0 ] && echo yes)
    if [ "$c_ok" != "$py_ok" ] || [ "$c_line" != "$py_line" ]; then
        fail "COOP_TEST_SEED='$1': C exited $c_status ('$c_line'), Python $py_status ('$py_line')"
    else
        echo "ok: COOP_TEST_SEED='$1' -> the same in Python: $py_line"
    fi
}

python=$(command -v python3 || command -v /usr/bin/python3 || true)
if [ -n "$python" ]; then
    for value in abc 12x "" -1 " 7" 0x 0x0x5 1e5 18446744073709551616 12345 0XABCdef 010 \
        18446744073709551615; do
        same_in_python "$value"
    done
else
    echo "note: no python3, the Python reader is not compared"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_seed_test: $failures failure(s)"
    exit 1
fi
echo "test_seed_test: all passed"
