"""Runs a Python program (kept for compatibility; no longer needed):

    python -m coop.run train.py [args...]
    python -m coop.run -m package.module [args...]

Earlier libcoop.so linked libjemalloc.so.2, whose initial-exec thread-local
storage did not fit a running process, and this wrapper re-executed Python
with GLIBC_TUNABLES set. libcoop no longer links jemalloc (its metadata comes
from its own record slabs), so it loads with a plain dlopen; this simply
re-executes the same interpreter with its own options (-O, -u, -X dev, -W
...), the given arguments and the environment.
"""

import os
import sys


# Options of the interpreter that take no value and may cluster before an
# "m" (python -Om coop.run, python -Omcoop.run): "-Om" is "-O" then "-m".
_NO_VALUE = set("bBdEiIOPqRsSuvx")


def interpreter_options():
    """The options this interpreter was started with, before "-m coop.run"
    (or "run.py"): a program run through coop.run gets them as it would
    when run directly (the re-executed interpreter otherwise drops them)."""
    orig, argv = getattr(sys, "orig_argv", None), sys.argv
    if orig is None or len(orig) < len(argv) or orig[len(orig) - len(argv) + 1:] != argv[1:]:
        import subprocess  # Python < 3.10 or an edited sys.argv: sys.flags' view

        return subprocess._args_from_interpreter_flags()
    opts = list(orig[1:len(orig) - len(argv)])
    # "-OOmcoop.run": the module is in the same word as the options before
    # it, which is where argv[0] stands, not among opts
    named = orig[len(orig) - len(argv)]
    flags = named[1:].split("m", 1)[0] if named.startswith("-") else ""
    if flags and set(flags) <= _NO_VALUE and named[1 + len(flags):].startswith("m"):
        opts.append("-" + flags)
    if opts and opts[-1] == "-m":
        opts.pop()
    elif opts and len(opts[-1]) > 2 and opts[-1][0] == "-" and opts[-1][-1] == "m" \
            and set(opts[-1][1:-1]) <= _NO_VALUE:
        opts[-1] = opts[-1][:-1]
    return opts


def main(argv):
    if not argv:  # a usage error: the usage goes to stderr
        sys.stderr.write("coop.run: no program given\n" + __doc__)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0
    if not sys.executable:
        sys.stderr.write("coop.run: sys.executable is empty: no interpreter to run\n")
        return 1
    os.execv(sys.executable, [sys.executable] + interpreter_options() + argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
