"""Tests that need torch import this first: it makes sure torch is there.

The python3 on PATH may not be Debian's (pyenv, venv) and then lacks Debian's
python3-torch: the test is started again under /usr/bin/python3. Where that
has no torch either, the test exits 77 (automake's SKIP) with one line.
"""
import os
import sys

try:
    import torch  # noqa: F401
except ImportError:
    DEBIAN = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN) and os.path.exists(DEBIAN):
        os.execv(DEBIAN, [DEBIAN] + sys.argv)
    print("SKIP: python3-torch is not installed", file=sys.stderr)
    sys.exit(77)
