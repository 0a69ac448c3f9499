"""Runs a Python program (kept for compatibility; no longer needed):

    python -m coop.run train.py [args...]
    python -m coop.run -m package.module [args...]

Earlier libcoop.so linked libjemalloc.so.2, whose initial-exec thread-local
storage did not fit a running process, and this wrapper re-executed Python
with GLIBC_TUNABLES set. libcoop no longer links jemalloc (its metadata comes
from its own record slabs), so it loads with a plain dlopen; this simply
re-executes the same interpreter with the given arguments and environment.
"""

import os
import sys


def main(argv):
    if not argv:  # a usage error: the usage goes to stderr
        sys.stderr.write("coop.run: no program given\n" + __doc__)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0
    os.execv(sys.executable, [sys.executable] + argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
