"""COOP_TEST_SEED for the Python tests, read as tests/test_seed.h reads it for
the C ones, so that one value set for the whole of `make check` reaches every
randomized test: a decimal or 0x-hex integer below 2^64, anything else an
error naming the variable and the value (exit status 1, never a silent other
seed); the seed printed on stderr in the C tests' format."""

import os
import re
import sys


def read_seed(name, fallback):
    """COOP_TEST_SEED, or fallback when it is unset; printed."""
    text = os.environ.get("COOP_TEST_SEED")
    if text is None:
        seed = fallback
    else:
        hex_digits = re.fullmatch(r"0[xX]([0-9a-fA-F]+)", text)
        if hex_digits:
            seed = int(hex_digits.group(1), 16)
        elif re.fullmatch(r"[0-9]+", text):
            seed = int(text, 10)
        else:
            seed = None
        if seed is None or seed >= 1 << 64:
            sys.stderr.write(
                '%s: COOP_TEST_SEED="%s" is not a seed: give a decimal or 0x-hex integer '
                "below 2^64 (e.g. 12345 or 0x3039), or unset it\n" % (name, text))
            sys.exit(1)
    sys.stderr.write("%s: seed 0x%x (set COOP_TEST_SEED=0x%x to repeat)\n" % (name, seed, seed))
    sys.stderr.flush()
    return seed
