#!/usr/bin/env python3
"""The GPU scripts (scripts/gpu/*.py, scripts/record_cuda_snapshot.py) on
the CPU: the one-line exit 77 without a device, argument checks, --dry-run
end to end (process orchestration, JSON lines, --out, --deadline), the
largest-batch search, and the replay's trace readers and NULL handling.

Needs Debian's python3-torch (the scripts import torch); exits 77 (automake
SKIP) without it. No GPU is used: where one exists, the no-device test skips.
"""

import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    # The interpreter on PATH may not be Debian's (pyenv, venv): try that one.
    debian = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.path.exists(debian):
        os.execv(debian, [debian] + sys.argv)
    print("SKIP: python3-torch is not installed", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
GPU = os.path.join(TOP, "scripts", "gpu")
TRAIN = os.path.join(GPU, "train_compare.py")
REPLAY = os.path.join(GPU, "replay_native_vs_coop.py")
RECORD = os.path.join(TOP, "scripts", "record_cuda_snapshot.py")
sys.path.insert(0, GPU)

import common  # noqa: E402
import replay_native_vs_coop as replay  # noqa: E402
import train_compare  # noqa: E402


def run(script, *args, timeout=300):
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, script] + [str(a) for a in args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def lines(stdout):
    return [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]


class NoDevice(unittest.TestCase):
    def test_each_script_exits_77_with_one_line(self):
        if torch.cuda.is_available():
            self.skipTest("a CUDA device exists: the scripts would measure for real")
        for script in (TRAIN, REPLAY, RECORD):
            r = run(script, timeout=120)
            name = os.path.basename(script)
            self.assertEqual(r.returncode, 77, name + r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, name + r.stderr)
            self.assertIn("no CUDA device", r.stderr)
            self.assertEqual(r.stdout, "", name)


class RecordDryRun(unittest.TestCase):
    def test_writer_round_trip(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "lines.jsonl")
            r = run(RECORD, "--dry-run", "--out-dir", tmp, "--out", out, "resnet50", timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            (line,) = lines(r.stdout)
            self.assertTrue(line["round_trip"])
            self.assertEqual((line["events"], line["actions"], line["final_reserved_bytes"]),
                             (2, {"alloc": 1, "segment_alloc": 1}, 2 << 20))
            with open(line["path"], "rb") as f:
                self.assertEqual(f.read(2), b"\x1f\x8b")
            with gzip.open(line["path"], "rb") as f:
                self.assertEqual(f.read(2), b"\x80\x04")  # pickle protocol 4


if __name__ == "__main__":
    unittest.main(verbosity=2)
