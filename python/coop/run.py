"""Runs a Python program with room to load libcoop.so:

    python -m coop.run train.py [args...]
    python -m coop.run -m package.module [args...]

libcoop.so links libjemalloc.so.2, whose initial-exec thread-local storage
needs static TLS that glibc only sets aside at process start; PyTorch loads
the allocator library with dlopen, long after. This re-executes the same
interpreter with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 (kept
if already set) and the given arguments.
"""

import os
import sys

TUNABLE = "glibc.rtld.optional_static_tls=16384"


def environment(env):
    """env with the tunable added (other tunables kept)."""
    env = dict(env)
    current = env.get("GLIBC_TUNABLES", "")
    if "glibc.rtld.optional_static_tls" not in current:
        env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}" if current else TUNABLE
    return env


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0 if argv else 2
    os.execve(sys.executable, [sys.executable] + argv, environment(os.environ))
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
