"""Ctrl-C in a script: one line on stderr ("record_ops.py: interrupted")
instead of Python's KeyboardInterrupt traceback, which said nothing the user
did not know and hid the script's earlier messages. Importing this module is
all a script does: every script under scripts/ imports it before its slow
imports (torch takes seconds), the GPU scripts through scripts/gpu/common.py
or driver_ctypes.py. Standard library only.

Only what is printed changes. The KeyboardInterrupt still unwinds the script,
so atomic_file.replacing removes its temporary file and leaves the previous
output (or none), and the process still ends by SIGINT after the line (Python
does so for an unhandled KeyboardInterrupt): a shell's status is 130, and a
shell loop or make running the script stops too, which an exit(130) would not
tell it (bash reads a normal exit as "the child handled the signal").

A Ctrl-C during `import torch` (most of its first second) arrives as
RuntimeError("KeyboardInterrupt: <EMPTY MESSAGE>"): torch's C++ module init
turns the pending interrupt into a RuntimeError. It is reported the same way,
and since Python re-raises SIGINT only for a KeyboardInterrupt, the process
then kills itself by SIGINT, its standard streams flushed first.
"""

import os
import signal
import sys


def _converted(kind, value):
    """Whether value is a KeyboardInterrupt that C++ code (torch's import)
    turned into a RuntimeError: the message is the original's name first."""
    try:
        return issubclass(kind, RuntimeError) and str(value).startswith("KeyboardInterrupt")
    except Exception:  # noqa: BLE001 - a __str__ that fails: not ours to report
        return False


def _report(kind, value, traceback, previous=sys.excepthook):
    converted = _converted(kind, value)
    if not converted and not issubclass(kind, KeyboardInterrupt):
        previous(kind, value, traceback)
        return
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python3"
    try:
        sys.stderr.write("%s: interrupted\n" % name)
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or gone: nothing to tell
        pass
    if converted:  # Python would exit 1: die by SIGINT as it does for a KeyboardInterrupt
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


sys.excepthook = _report
