#!/bin/sh
# make check's stand-in for the C unit tests where configure found no cmocka:
# a skip with the reason, in place of programs that cannot be built.
echo "SKIP: cmocka was not found by configure: the C unit tests are not built (install libcmocka-dev, then run configure again)"
exit 77
