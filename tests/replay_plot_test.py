#!/usr/bin/python3
"""scripts/plot_replay.py draws a small timeline and refuses a malformed one."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "plot_replay.py")

TIMELINE = """coop-replay-timeline 1
trace tiny 4
policy torch
s 0 1572864 20971520
s 1 0 20971520
s 2 1000 23068672
s 3 0 23068672
b 7f0000000000 1572864 0 1
b 7f0001400000 1000 2 3
policy ideal
s 0 1572864 1572864
s 1 0 0
s 2 1000 1000
s 3 0 0
b 100000 1572864 0 1
b 280000 1000 2 3
"""


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not installed")
        return 77
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "t.txt")
        with open(good, "w") as f:
            f.write(TIMELINE)
        png = os.path.join(d, "t.png")
        r = subprocess.run([sys.executable, SCRIPT, good, "-o", png], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        bad = os.path.join(d, "bad.txt")
        with open(bad, "w") as f:
            f.write(TIMELINE.replace("s 2 1000", "s two 1000"))
        r = subprocess.run([sys.executable, SCRIPT, bad, "-o", png], capture_output=True, text=True)
        assert r.returncode == 2, r.returncode
        assert "bad.txt:6:" in r.stderr, r.stderr
    print("plot_replay: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
