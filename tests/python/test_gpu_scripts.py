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


class Arguments(unittest.TestCase):
    def test_bad_values_are_refused(self):
        for args in (["--fraction", "1.5"], ["--fraction", "0"], ["--steps", "0"],
                     ["--model", "alexnet"]):
            r = run(TRAIN, "--dry-run", *args, timeout=60)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("error", r.stderr)
        r = run(RECORD, "--dry-run", "nosuchmodel", timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown model 'nosuchmodel'", r.stderr)

    def test_children_take_fraction_zero(self):
        """Full runs are children with --fraction 0.0 (no limit)."""
        args = train_compare.parse(["--child", "--model", "resnet50", "--batch", "4",
                                    "--fraction", "0.0", "--allocator", "coop"])
        self.assertEqual((args.fraction, args.allocator, args.model), (0.0, "coop", ["resnet50"]))

    def test_child_environment(self):
        env = common.child_env()
        self.assertEqual(env["CUBLAS_WORKSPACE_CONFIG"], ":4096:8")
        self.assertEqual(env["PYTHONUNBUFFERED"], "1")
        self.assertTrue(env["PYTHONPATH"].startswith(os.path.join(TOP, "python")))


class TrainDryRun(unittest.TestCase):
    def test_whole_run_lines_and_out_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "lines.jsonl")
            r = run(TRAIN, "--dry-run", "--model", "resnet50", "--steps", "4", "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = lines(r.stdout)
            with open(out) as f:
                self.assertEqual([json.loads(x) for x in f], got)
        env, native, coop, summary, mb_native, mb_coop = got
        self.assertEqual((env["summary"], env["dry_run"]), ("environment", True))
        self.assertIn("torch", env)
        for rec, kind in ((native, "native"), (coop, "coop")):
            self.assertEqual((rec["allocator"], rec["ok"], rec["batch"], rec["model"]),
                             (kind, True, 64, "resnet50"))
            self.assertEqual(rec["batch_shapes"], {"input": [1, 3, 224, 224], "target": [1]})
            self.assertEqual(len(rec["losses"]), 2)
            self.assertEqual(len(rec["step_times_ms"]), 2)
            for key in ("peak_reserved_bytes", "peak_allocated_bytes", "step_time_ms_median"):
                self.assertGreater(rec[key], 0, key)
        # same seed, deterministic CPU step: the two children's losses agree
        self.assertEqual(native["losses"], coop["losses"])
        self.assertEqual(summary["summary"], "native_vs_coop")
        self.assertEqual(summary["loss_max_abs_diff"], 0.0)
        self.assertTrue(summary["losses_identical"])
        for key in ("step_time_ratio_coop_over_native", "peak_reserved_native",
                    "peak_reserved_coop", "peak_reserved_coop_over_native"):
            self.assertIn(key, summary)
        # the fake device: 40 GiB at fraction 0.5, 100 MiB a sample; coop 5% more
        self.assertEqual((mb_native["allocator"], mb_native["max_batch"],
                          mb_native["first_failing_batch"]), ("native", 409, 410))
        self.assertEqual((mb_coop["allocator"], mb_coop["max_batch"]), ("coop", 430))
        for mb in (mb_native, mb_coop):
            self.assertTrue(mb["complete"])
            self.assertEqual(mb["fraction"], 0.5)
            self.assertEqual(mb["probes"][0]["batch"], 64)
            ok = {p["batch"] for p in mb["probes"] if p["ok"]}
            self.assertEqual(max(ok), mb["max_batch"])

    def test_deadline_stops_before_starting_children(self):
        r = run(TRAIN, "--dry-run", "--model", "resnet50", "--no-compare", "--deadline", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = lines(r.stdout)
        self.assertEqual(len(got), 3)
        for mb in got[1:]:
            self.assertEqual((mb["summary"], mb["complete"], mb["max_batch"], mb["probes"]),
                             ("max_batch", False, 0, []))

    def test_gpt_builds_with_the_batch_asked(self):
        loss_fn, opt, shapes = train_compare.build("gpt2_small", 2, "cpu", 7, ctx=8)
        self.assertEqual(shapes, {"tokens": [2, 9]})
        loss = loss_fn()
        loss.backward()
        opt.step()
        self.assertTrue(torch.isfinite(loss).item())


class MaxBatchSearch(unittest.TestCase):
    """train_compare.max_batch against a stand-in for the child runs."""

    def search(self, limit, model="resnet50", stop_after=None):
        calls = []

        def fake_run(args, model, allocator, batch, steps, fraction):
            calls.append(batch)
            if stop_after is not None and len(calls) > stop_after:
                return {"ok": False, "not_run": True, "error": "deadline"}
            return {"ok": batch <= limit}

        saved = train_compare.run
        train_compare.run = fake_run
        try:
            args = type("Args", (), {"dry_run": True})()
            return train_compare.max_batch(args, model, "native", 0.5), calls
        finally:
            train_compare.run = saved

    def test_finds_the_exact_limit(self):
        cap = train_compare.MODELS["resnet50"][1]
        for limit in (0, 1, 2, 3, 50, 63, 64, 65, 100, 409, 1000, cap - 1):
            r, calls = self.search(limit)
            self.assertEqual((r["max_batch"], r["first_failing_batch"]), (limit, limit + 1),
                             limit)
            self.assertTrue(r["complete"])
            self.assertEqual(len(calls), len(set(calls)), f"a batch probed twice: {calls}")

    def test_capped(self):
        cap = train_compare.MODELS["resnet50"][1]
        r, _ = self.search(10 * cap)
        self.assertEqual((r["max_batch"], r["first_failing_batch"], r["capped"]),
                         (cap, None, True))

    def test_deadline_gives_a_lower_bound(self):
        r, calls = self.search(409, stop_after=4)
        self.assertFalse(r["complete"])
        self.assertEqual(len(r["probes"]), 4)
        self.assertEqual(r["max_batch"], 256)  # 64, 128, 256 fit; 512 did not


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
