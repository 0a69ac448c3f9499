#!/usr/bin/env python3
"""The GPU scripts (scripts/gpu/*.py, scripts/record_cuda_snapshot.py) on
the CPU: the one-line exit 77 without a device, argument checks, --dry-run
end to end (process orchestration, JSON lines, --out, --deadline), the
largest-batch search, and the replay's trace readers and NULL handling.

Needs Debian's python3-torch (the scripts import torch); exits 77 (automake
SKIP) without it. No GPU is used: where one exists, the no-device test skips.
"""

import argparse
import contextlib
import ctypes
import gzip
import importlib.util
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import types
import time
import unittest
from unittest import mock

# The sanitized build (.ci/run's ASan run sets COOP_SANITIZED): python cannot
# load the ASan-built libcoop or mock driver, so the tests here that would run
# coop's C code skip there, and the rest is Python alone, exactly what the plain
# run runs (about 60 CPU s of CI for nothing the sanitizers could see).
if os.environ.get("COOP_SANITIZED"):
    print("SKIP: sanitized build: these tests run no sanitized code (the plain make check runs them)")
    sys.exit(77)

import debian_torch  # noqa: E402,F401  (torch, or a restart under Debian's python, or SKIP)
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
GPU = os.path.join(TOP, "scripts", "gpu")
TRAIN = os.path.join(GPU, "train_compare.py")
REPLAY = os.path.join(GPU, "replay_native_vs_coop.py")
RECORD = os.path.join(TOP, "scripts", "record_cuda_snapshot.py")
VIZ = os.path.join(GPU, "memory_viz_check.py")
STREAM = os.path.join(GPU, "stream_check.py")
OOM = os.path.join(GPU, "oom_check.py")
REMAP = os.path.join(GPU, "remap_check.py")
TEARDOWN = os.path.join(GPU, "teardown_check.py")
FORK = os.path.join(GPU, "fork_check.py")
RESERVE_ALIGN = os.path.join(GPU, "reserve_align_check.py")
SECOND_DEVICE = os.path.join(GPU, "second_device_check.py")
sys.path.insert(0, GPU)

import common  # noqa: E402
import fork_check  # noqa: E402
import memory_viz_check  # noqa: E402
import replay_native_vs_coop as replay  # noqa: E402
import oom_check  # noqa: E402
import remap_check  # noqa: E402
import reserve_align_check  # noqa: E402
import second_device_check  # noqa: E402
import stream_check  # noqa: E402
import teardown_check  # noqa: E402
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
        for script in (TRAIN, REPLAY, RECORD, VIZ, STREAM, OOM, REMAP, TEARDOWN, RESERVE_ALIGN,
                       SECOND_DEVICE):
            r = run(script, timeout=120)
            name = os.path.basename(script)
            self.assertEqual(r.returncode, 77, name + r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, name + r.stderr)
            self.assertIn("no CUDA device", r.stderr)
            self.assertEqual(r.stdout, "", name)


def mock_driver():
    """tests/.libs/libmockcuda.so of the build (cwd) or the source tree, or None."""
    for top in (os.getcwd(), TOP):
        path = os.path.join(top, "tests", ".libs", "libmockcuda.so")
        if os.path.exists(path):
            return path
    return None


# tests/cuda_mock_counters.h, every field in its order: mock_cuda_counters
# copies the whole struct, so a shorter one here would be written past
class MockCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_long) for name in (
        "mapped_bytes", "live_handles", "live_events", "live_segments", "syncs",
        "unsafe_releases", "no_context", "retained", "accessible_bytes", "access_calls",
        "event_creates", "live_reservations", "live_streams", "deadlocks", "event_waits",
        "refused_address_frees", "entry_calls")]


class MockCountersLayout(unittest.TestCase):
    def test_every_field_of_the_header_in_its_order(self):
        with open(os.path.join(TOP, "tests", "cuda_mock_counters.h")) as f:
            header = re.findall(r"^\s*long (\w+);", f.read(), re.M)
        self.assertEqual([name for name, _ in MockCounters._fields_], header)


def libcoop_or_skip(test):
    """The build's (or the source tree's) shared libcoop.so; skips test without one."""
    for top in (os.getcwd(), TOP):
        path = os.path.join(top, ".libs", "libcoop.so")
        if os.path.exists(path):
            return path
    test.skipTest("no shared libcoop.so in this build")


class OnMockDriver(unittest.TestCase):
    """A driver-API script (SCRIPT) on the mock driver
    (tests/mock_cuda_driver.c), which checks the driver API's rules (maps
    inside a reservation, access set before use, nothing leaked)."""

    SCRIPT = None

    def setUp(self):
        self.mock = mock_driver()
        if self.mock is None:
            self.skipTest("tests/.libs/libmockcuda.so is not built (make check builds it)")

    def run_script(self, *args, **env):
        full = dict(os.environ, COOP_CUDA_DRIVER=self.mock, PYTHONDONTWRITEBYTECODE="1")
        full.update(env)
        return subprocess.run([sys.executable, self.SCRIPT] + list(args), env=full,
                              capture_output=True, text=True, timeout=60)

    @contextlib.contextmanager
    def in_process(self):
        """The mock as this process loaded it (one dlopen handle per path, so
        a failure armed here reaches the script's calls), and the driver
        named for the script's main() run here."""
        lib = ctypes.CDLL(self.mock)
        old = os.environ.get("COOP_CUDA_DRIVER")
        os.environ["COOP_CUDA_DRIVER"] = self.mock
        try:
            yield lib
        finally:
            if old is None:
                del os.environ["COOP_CUDA_DRIVER"]
            else:
                os.environ["COOP_CUDA_DRIVER"] = old

    def main_line(self, main, args=()):
        """(exit status, the one JSON line) of main(args), run here."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(list(args))
        (line,) = lines(out.getvalue())
        return rc, line

    def assert_driver_clean(self, lib):
        counters = MockCounters()
        lib.mock_cuda_counters(ctypes.byref(counters))
        self.assertEqual((counters.live_handles, counters.live_reservations,
                          counters.mapped_bytes, counters.retained, counters.live_events),
                         (0, 0, 0, 0, 0))

    def check_no_device_exits_77(self):
        for env in ({"COOP_CUDA_DRIVER": "/nonexistent/libcuda.so.1"},
                    {"MOCK_CUDA_NO_DEVICE": "1"}):
            r = self.run_script(**env)
            self.assertEqual(r.returncode, 77, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("no CUDA device", r.stderr)
            self.assertIn(os.path.basename(self.SCRIPT), r.stderr)
            self.assertEqual(r.stdout, "")


class RemapCheck(OnMockDriver):
    """remap_check.py's own logic, on the mock driver."""

    SCRIPT = REMAP

    def test_passes_on_the_mock(self):
        for args in ((), ("--pages", "9", "--half", "9"), ("--pages", "1", "--half", "1")):
            r = self.run_script(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            (line,) = lines(r.stdout)
            self.assertTrue(line["ok"] and line["remapped"] and line["kept_contents"]
                            and line["rewritten"] and line["free_restored"], line)
            self.assertNotIn("step", line)

    def test_no_device_exits_77(self):
        self.check_no_device_exits_77()

    def test_bad_arguments(self):
        for args in (("--half", "0"), ("--pages", "2", "--half", "3"), ("--pages", "0")):
            self.assertEqual(self.run_script(*args).returncode, 2, args)

    def test_a_failed_remap_is_named_and_nothing_leaks(self):
        with self.in_process() as lib:
            # 4 pages mapped, 2 unmapped: the 5th cuMemMap is the first remap
            lib.mock_cuda_fail_nth(b"cuMemMap", 5, 2)  # CUDA_ERROR_OUT_OF_MEMORY
            rc, line = self.main_line(remap_check.main)
            self.assertEqual(rc, 1)
            self.assertFalse(line["ok"])
            self.assertFalse(line["remapped"])
            self.assertIn("map kept handles again: cuMemMap returned 2 "
                          "(CUDA_ERROR_OUT_OF_MEMORY)", line["error"])
            self.assert_driver_clean(lib)
            self.assertEqual(self.main_line(remap_check.main)[0], 0)  # nothing armed now


class ReserveAlignCheck(OnMockDriver):
    """reserve_align_check.py (mutant Q2-25) on the mock, whose default
    alignment is its granularity (2 MiB): every offset 0."""

    SCRIPT = RESERVE_ALIGN

    def test_runs_on_the_mock(self):
        with self.in_process() as lib:
            rc, line = self.main_line(reserve_align_check.main)
            self.assertEqual(rc, 0, line)
            self.assertEqual([r["bytes"] >> 21 for r in line["reservations"]],
                             list(reserve_align_check.MULTIPLES))
            self.assertTrue(line["all_2mib_aligned"] and line["ran"], line)
            self.assertEqual(line["granularity"], 2 << 20)
            self.assert_driver_clean(lib)

    def test_no_device_exits_77(self):
        self.check_no_device_exits_77()

    def test_a_failed_reserve_is_named_and_nothing_leaks(self):
        with self.in_process() as lib:
            lib.mock_cuda_fail_nth(b"cuMemAddressReserve", 3, 2)  # CUDA_ERROR_OUT_OF_MEMORY
            rc, line = self.main_line(reserve_align_check.main)
            self.assertEqual(rc, 1)
            self.assertIn("cuMemAddressReserve returned 2", line["error"])
            self.assertEqual(len(line["reservations"]), 2)
            self.assert_driver_clean(lib)


class SecondDeviceCheck(OnMockDriver):
    """second_device_check.py on the mock's two devices (the mock ties
    memory to a device), and its skip on one GPU."""

    SCRIPT = SECOND_DEVICE

    def test_passes_on_the_mock(self):
        lib = libcoop_or_skip(self)
        r = self.run_script(COOP_LIBRARY=lib)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        (line,) = lines(r.stdout)
        self.assertEqual([p["use_vmm"] for p in line["pools"]], [True, False])
        for pool in line["pools"]:
            self.assertEqual(pool["device0_grew_by"], 0, pool)
            self.assertGreaterEqual(pool["device1_grew_by"], 4 << 20, pool)
            self.assertTrue(pool["device1_restored"], pool)

    def test_no_device_exits_77(self):
        self.check_no_device_exits_77()

    def test_one_gpu_skips_with_a_line(self):
        class OneDevice:
            def __call__(self, name, count_ref):
                count_ref._obj.value = 1

        err = io.StringIO()
        with mock.patch.object(second_device_check, "open_driver", return_value=OneDevice()), \
                contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit_:
            second_device_check.main([])
        self.assertEqual(exit_.exception.code, 77)
        self.assertIn("one GPU: the driver counts 1 device(s)", err.getvalue())


class TeardownCheck(OnMockDriver):
    """teardown_check.py on the mock driver: its findings there are the
    mock's answers (A as cuMemRelease is documented; B and C the mock's
    stricter choices), and it leaves nothing behind whatever the driver
    answers."""

    SCRIPT = TEARDOWN
    MOCK_FINDINGS = {
        "release_mapped": "CUDA_SUCCESS", "readable_after_release": True,
        "readable_after_first_unmap": True, "kept_after_release": True,
        "kept_after_first_unmap": True, "back_after_last_unmap": True,
        "release_mapped_as_documented": True, "no_context_on_thread": True,
        "unmap_no_context": "CUDA_ERROR_INVALID_CONTEXT", "unmap_with_context": "CUDA_SUCCESS",
        "release_no_context": "CUDA_ERROR_INVALID_CONTEXT",
        "release_with_context": "CUDA_SUCCESS",
        "address_free_no_context": "CUDA_ERROR_INVALID_CONTEXT",
        "address_free_with_context": "CUDA_SUCCESS",
        "event_destroy_no_context": "CUDA_ERROR_INVALID_CONTEXT",
        "event_destroy_with_context": "CUDA_SUCCESS",
        "address_free_mapped": "CUDA_ERROR_INVALID_VALUE",
        "after_address_free_mapped": {"unmap": "CUDA_SUCCESS", "release": "CUDA_SUCCESS",
                                      "address_free": "CUDA_SUCCESS"},
        "device_usable_after": True, "free_restored": True, "ran": True}

    def test_findings_on_the_mock(self):
        for pages in ("16", "1"):
            r = self.run_script("--pages", pages)
            self.assertEqual(r.returncode, 0, r.stderr)
            (line,) = lines(r.stdout)
            self.assertEqual({k: line.get(k) for k in self.MOCK_FINDINGS}, self.MOCK_FINDINGS)
            size = int(pages) * line["page_bytes"]
            free = line["free_bytes"]
            # the mock's free memory moves by the handle's size exactly
            self.assertEqual((free["before"] - free["created"], free["released"],
                              free["first_unmapped"], free["last_unmapped"]),
                             (size, free["created"], free["created"], free["before"]))
            self.assertNotIn("step", line)
            self.assertNotIn("error", line)

    def test_no_device_exits_77(self):
        self.check_no_device_exits_77()

    def test_bad_arguments(self):
        self.assertEqual(self.run_script("--pages", "0").returncode, 2)

    def test_a_refused_release_is_a_finding_and_nothing_leaks(self):
        """Another driver answer is reported, not a failure of the check; what
        was refused is given back later."""
        with self.in_process() as lib:
            lib.mock_cuda_fail_nth(b"cuMemRelease", 1, 999)  # CUDA_ERROR_UNKNOWN
            rc, line = self.main_line(teardown_check.main)
            self.assertEqual(rc, 0)
            self.assertTrue(line["ran"])
            self.assertEqual(line["release_mapped"], "CUDA_ERROR_UNKNOWN")
            self.assertFalse(line["release_mapped_as_documented"])
            self.assertTrue(line["free_restored"])
            self.assert_driver_clean(lib)

    def test_a_failed_read_or_reuse_is_a_finding(self):
        """A read back after the release, or the device's use at the end,
        that fails is what the driver did there, not the check failing."""
        with self.in_process() as lib:
            lib.mock_cuda_fail_nth(b"cuMemcpyDtoH", 1, 999)  # the read after the release
            rc, line = self.main_line(teardown_check.main)
            self.assertEqual((rc, line["ran"]), (0, True))
            self.assertEqual(line["readable_after_release"],
                             "failed: cuMemcpyDtoH_v2 returned 999 (CUDA_ERROR_UNKNOWN)")
            self.assertIs(line["readable_after_first_unmap"], True)
            self.assert_driver_clean(lib)
            # the last cuMemMap: the device's use after everything
            lib.mock_cuda_fail_nth(b"cuMemMap", 5, 2)
            rc, line = self.main_line(teardown_check.main)
            self.assertEqual((rc, line["ran"]), (0, True))
            self.assertEqual(line["device_usable_after"],
                             "failed: cuMemMap returned 2 (CUDA_ERROR_OUT_OF_MEMORY)")
            self.assertTrue(line["free_restored"])
            self.assert_driver_clean(lib)

    def test_a_step_that_cannot_run_is_named_and_nothing_leaks(self):
        for entry_point, nth, step in (("cuMemMap", 2, "A: map one handle twice"),
                                       ("cuEventRecord", 1, "C: event")):
            with self.in_process() as lib:
                lib.mock_cuda_fail_nth(entry_point.encode(), nth, 2)  # CUDA_ERROR_OUT_OF_MEMORY
                rc, line = self.main_line(teardown_check.main)
                self.assertEqual(rc, 1, entry_point)
                self.assertFalse(line["ran"])
                self.assertEqual(line["error"], "%s: %s returned 2 (CUDA_ERROR_OUT_OF_MEMORY)"
                                 % (step, entry_point))
                self.assert_driver_clean(lib)


class ForkCheck(OnMockDriver):
    """fork_check.py's pool route on the mock driver (which, unlike a real
    driver, keeps working in a forked child: a child that reached the
    driver would go unnoticed there but for the backend call count), and
    its verdict, which must fail on any finding missing or false."""

    SCRIPT = FORK

    def test_passes_on_the_mock(self):
        lib = libcoop_or_skip(self)
        r = self.run_script("--torch", "--timeout", "20", COOP_LIBRARY=lib)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        (line,) = lines(r.stdout)
        for key in fork_check.CHILD_VERDICT + fork_check.PARENT_VERDICT:
            self.assertIs(line[key], True, key)
        self.assertEqual(line["child_exit"], 0)
        self.assertIn("cannot be used in a forked child", line["child_message"])
        self.assertIn("device memory left to process", line["child_destroy_message"])
        self.assertTrue(line["torch"].startswith("skipped: "), line["torch"])
        # the foreign-init observation: the mock works in a forked child, so
        # the child's pool is made (and destroyed); a device answers otherwise
        seen = line["foreign_init"]
        self.assertEqual((seen["status"], seen["child_exit"]), ("COOP_OK", 0), seen)
        self.assertIsInstance(seen["seconds"], float)

    def test_a_silent_foreign_init_child_is_an_observation_not_a_hang(self):
        # a child that sends nothing (as one stuck in a real driver's cuInit
        # would) is killed after the timeout and noted, not waited for
        line = {}
        lib = libcoop_or_skip(self)
        with mock.patch.dict(os.environ, COOP_LIBRARY=lib), \
                mock.patch.object(fork_check, "make_pool", side_effect=lambda *a: time.sleep(30)):
            fork_check.foreign_init_observation(line, 0.5)
        seen = line["foreign_init"]
        self.assertEqual(seen["status"], "no answer")
        self.assertIsNone(seen["child_exit"])  # killed
        self.assertLess(seen["seconds"], 10)
        self.assertEqual(fork_check.status_name(fork_check.coop_api()[1], 7), "COOP_ERR_NO_DRIVER")

    def test_no_device_exits_77(self):
        self.check_no_device_exits_77()

    def test_bad_arguments(self):
        self.assertEqual(self.run_script("--timeout", "0").returncode, 2)

    def test_verdict_needs_every_finding(self):
        good = {k: True for k in fork_check.CHILD_VERDICT + fork_check.PARENT_VERDICT}
        self.assertTrue(fork_check.verdict(dict(good, torch="skipped: not asked")))
        for key in good:
            self.assertFalse(fork_check.verdict(dict(good, **{key: False})), key)
            missing = dict(good)
            del missing[key]
            self.assertFalse(fork_check.verdict(missing), key)
        self.assertFalse(fork_check.verdict(dict(good, error="the child sent nothing")))
        ran = dict(good, torch={})
        self.assertFalse(fork_check.verdict(ran))  # the torch route ran: its findings count
        self.assertTrue(fork_check.verdict(dict(ran, **{k: True for k in fork_check.TORCH_VERDICT})))


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
        # a --batch of 0 was the default batch; a folder that cannot be
        # made was a traceback
        with tempfile.NamedTemporaryFile() as f, tempfile.TemporaryDirectory() as d:
            for args, says in ((["--batch", "0", "--out-dir", d], "--batch: 0 is not a batch size"),
                               (["--out-dir", os.path.join(f.name, "sub")], "Not a directory")):
                r = run(RECORD, "--dry-run", *args, timeout=60)
                self.assertEqual(r.returncode, 2, args)
                self.assertIn(says, r.stderr, args)
                self.assertNotIn("Traceback", r.stderr, args)
            # --out in a missing folder or a folder: a traceback after the
            # recording (minutes on a GPU) and its snapshot; now refused
            # before torch is imported, nothing written
            for out, says in ((os.path.join(d, "none", "x.jsonl"), "No such file or directory"),
                              (d, "Is a directory"), (os.path.join(f.name, "x"), "Not a directory")):
                r = run(RECORD, "--dry-run", "--out-dir", d, "--out", out, timeout=60)
                self.assertEqual((r.returncode, r.stdout), (2, ""), (out, r.stderr))
                self.assertTrue(r.stderr.endswith("error: --out %s: %s\n" % (out, says)), r.stderr)
                self.assertEqual(os.listdir(d), [])

    def test_an_out_that_cannot_be_written_is_one_line(self):
        # every parent script: a traceback from the first JSON line before
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "none", "x.jsonl")
            r = run(TRAIN, "--dry-run", "--out", out, timeout=60)
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            self.assertEqual(r.stderr, "train_compare: error: --out %s: No such file or "
                             "directory\n" % out)

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


class SnapshotWriter(unittest.TestCase):
    def test_failed_write_keeps_the_old_snapshot(self):
        """record_cuda_snapshot.py wrote in place: a failed write (a full
        disk, an interrupt) left a truncated snapshot where a good one was."""
        sys.path.insert(0, os.path.join(TOP, "scripts"))  # what main() does for models
        spec = importlib.util.spec_from_file_location("record_cuda_snapshot", RECORD)
        record = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(record)
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
            record.dry_run(d, None)
            path = os.path.join(d, "dry-run.cuda.pickle.gz")
            with open(path, "rb") as f:
                good = f.read()
            with mock.patch.object(gzip.GzipFile, "write", side_effect=OSError(28, "No space left on device")):
                with self.assertRaises(OSError):
                    record.dry_run(d, None)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), good)
            self.assertEqual(os.listdir(d), [os.path.basename(path)])

    def test_a_torch_without_the_allocation_trace_is_refused_before_any_model(self):
        """torch 1.13 has _record_memory_history(enabled, device) and no
        allocation trace: start_history refused it, but only after the model
        was built and its warm-up step run (minutes). A stand-in torch (a
        GPU, that signature) and models (build must not be called)."""
        spec = importlib.util.spec_from_file_location("record_cuda_snapshot", RECORD)
        record = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(record)

        def history_1_13(enabled, device=None):
            raise AssertionError("history started")

        cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                     memory=types.SimpleNamespace(
                                         _record_memory_history=history_1_13))
        torch = types.SimpleNamespace(__version__="1.13.1", cuda=cuda,
                                      version=types.SimpleNamespace(cuda="11.7"))

        def build(*args, **kwargs):
            raise AssertionError("a model was built")

        models = types.SimpleNamespace(check_recording=lambda *a: None, ALL=["resnet50"],
                                       build=build)
        err = io.StringIO()
        with mock.patch.dict(sys.modules, {"torch": torch, "models": models}), \
                contextlib.redirect_stderr(err):
            with self.assertRaises(SystemExit) as e:
                record.main(["--out-dir", tempfile.gettempdir()])
        # SystemExit(message): the interpreter prints it and exits 1
        self.assertEqual(e.exception.code, "record_cuda_snapshot.py: torch 1.13.1 has no "
                         "allocation trace in its memory history (needs torch >= 2.0)")
        self.assertEqual(err.getvalue(), "")
        # 2.0's and 2.1's signatures pass (2.1+ takes enabled="all", *args, **kwargs)
        for history in (lambda enabled, record_context=True, trace_alloc_max_entries=1: None,
                        lambda enabled="all", *args, **kwargs: None):
            cuda.memory._record_memory_history = history
            record.check_history_api(torch)

    def test_gpu_scripts_keep_the_old_snapshot(self):
        """train_compare.py --snapshot and memory_viz_check.py wrote their
        snapshots in place too: a run failing while writing (a full disk on
        the device machine) left a truncated file where the previous run's
        was. They now write through common.replacing, the recorders' writer."""
        full = OSError(28, "No space left on device")
        with tempfile.TemporaryDirectory() as d:
            args = argparse.Namespace(snapshot=d, model="resnet50", allocator="coop")
            path = train_compare.write_snapshot(args, {"segments": [], "run": 1})
            with open(path, "rb") as f:
                good = f.read()
            with mock.patch.object(gzip.GzipFile, "write", side_effect=full):
                with self.assertRaises(OSError):
                    train_compare.write_snapshot(args, {"segments": [], "run": 2})
            with open(path, "rb") as f:
                self.assertEqual(f.read(), good)
            self.assertEqual(os.listdir(d), [os.path.basename(path)])

        def dump_part(obj, f, protocol=None):
            f.write(pickle.dumps(obj, protocol=protocol)[:10])
            raise full

        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()), \
                mock.patch.object(common, "finish_child", side_effect=SystemExit):
            args = argparse.Namespace(dir=d, allocator="coop", dry_run=True)
            with self.assertRaises(SystemExit):
                memory_viz_check.child(args)
            path = os.path.join(d, "coop.pickle")
            with open(path, "rb") as f:
                good = f.read()
            self.assertEqual(pickle.loads(good), memory_viz_check.synthetic_snapshot("coop"))
            with mock.patch.object(pickle, "dump", dump_part):
                with self.assertRaises(OSError):
                    memory_viz_check.child(args)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), good)
            self.assertEqual(os.listdir(d), [os.path.basename(path)])


HAVE_TORCHVISION = importlib.util.find_spec("torchvision") is not None


class TrainDryRun(unittest.TestCase):
    _full = None

    @classmethod
    def full_run(cls):
        """(the run, its --out file's lines or None) of one whole --dry-run
        (resnet50, the compare and both searches) with --out and --native-conf,
        PYTORCH_CUDA_ALLOC_CONF unset: the two tests below read the same run
        (each whole run is two children training on the CPU, ~13 s)."""
        if cls._full is None:
            env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "lines.jsonl")
                r = subprocess.run([sys.executable, TRAIN, "--dry-run", "--model", "resnet50",
                                    "--steps", "4", "--out", out,
                                    "--native-conf", "expandable_segments:True"],
                                   env=env, capture_output=True, text=True, timeout=300)
                written = None
                if os.path.exists(out):
                    with open(out) as f:
                        written = [json.loads(x) for x in f]
            cls._full = (r, written)
        return cls._full

    @unittest.skipUnless(HAVE_TORCHVISION, "python3-torchvision is not installed (resnet50 needs "
                         "it; scripts/setup.sh installs it)")
    def test_whole_run_lines_and_out_file(self):
        r, written = self.full_run()
        self.assertEqual(r.returncode, 0, r.stderr)
        got = lines(r.stdout)
        self.assertEqual(written, got)
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
        self.assertEqual((mb_native["hint"], mb_coop["hint"]), (None, 409))
        self.assertLess(len(mb_coop["probes"]), len(mb_native["probes"]))
        for mb, first in ((mb_native, 64), (mb_coop, 409)):
            self.assertTrue(mb["complete"])
            self.assertEqual(mb["fraction"], 0.5)
            self.assertEqual(mb["probes"][0]["batch"], first)
            ok = {p["batch"] for p in mb["probes"] if p["ok"]}
            self.assertEqual(max(ok), mb["max_batch"])

    @unittest.skipUnless(HAVE_TORCHVISION, "python3-torchvision is not installed (resnet50 needs "
                         "it; scripts/setup.sh installs it)")
    def test_snapshot_option_writes_one_snapshot_per_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            snaps = os.path.join(tmp, "snaps")  # made by the parent
            r = run(TRAIN, "--dry-run", "--model", "resnet50", "--steps", "4", "--no-max-batch",
                    "--snapshot", snaps)
            self.assertEqual(r.returncode, 0, r.stderr)
            runs = [x for x in lines(r.stdout) if "allocator" in x and "summary" not in x]
            self.assertEqual([x["allocator"] for x in runs], ["native", "coop"])
            for x in runs:
                self.assertEqual(x["snapshot"],
                                 os.path.join(snaps, "resnet50-%s.pickle.gz" % x["allocator"]))
                with gzip.open(x["snapshot"], "rb") as f:
                    self.assertEqual(pickle.load(f)["segments"], [])

    def test_native_conf_reaches_the_native_children_only(self):
        r, _ = self.full_run()
        self.assertEqual(r.returncode, 0, r.stderr)
        got = lines(r.stdout)
        self.assertEqual(got[0]["native_conf"], "expandable_segments:True")
        runs = {x["allocator"]: x for x in got if "allocator" in x and "summary" not in x}
        # the native child's environment had it, the coop child's did not
        self.assertEqual(runs["native"]["dry_alloc_conf_env"], "expandable_segments:True")
        self.assertEqual(runs["native"]["native_conf"], "expandable_segments:True")
        self.assertIsNone(runs["coop"]["dry_alloc_conf_env"])
        self.assertNotIn("native_conf", runs["coop"])
        (cmp,) = [x for x in got if x.get("summary") == "native_vs_coop"]
        self.assertEqual(cmp["native_conf"], "expandable_segments:True")
        searches = {x["allocator"]: x for x in got if x.get("summary") == "max_batch"}
        self.assertEqual(searches["native"]["native_conf"], "expandable_segments:True")
        self.assertIsNone(searches["coop"]["native_conf"])

    def test_snapshot_folder_that_cannot_be_made_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            blocker = os.path.join(tmp, "file")
            open(blocker, "w").close()
            r = run(TRAIN, "--dry-run", "--model", "resnet50", "--no-max-batch",
                    "--snapshot", os.path.join(blocker, "snaps"), timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(r.stdout, "")
            self.assertIn("--snapshot " + os.path.join(blocker, "snaps"), r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_deadline_stops_before_starting_children(self):
        r = run(TRAIN, "--dry-run", "--model", "resnet50", "--no-compare", "--deadline", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = lines(r.stdout)
        self.assertEqual(len(got), 3)
        for mb in got[1:]:
            self.assertEqual((mb["summary"], mb["complete"], mb["max_batch"], mb["probes"]),
                             ("max_batch", False, 0, []))

    def test_search_one_allocator_from_a_hint(self):
        r = run(TRAIN, "--dry-run", "--model", "resnet50", "--no-compare", "--search", "coop",
                "--hint", "420")
        self.assertEqual(r.returncode, 0, r.stderr)
        (env, mb) = lines(r.stdout)
        self.assertEqual((mb["allocator"], mb["hint"], mb["max_batch"], mb["probes"][0]["batch"]),
                         ("coop", 420, 430, 420))

    def test_gpt_builds_with_the_batch_asked(self):
        loss_fn, opt, shapes = train_compare.build("gpt2_small", 2, "cpu", 7, ctx=8)
        self.assertEqual(shapes, {"tokens": [2, 9]})
        loss = loss_fn()
        loss.backward()
        opt.step()
        self.assertTrue(torch.isfinite(loss).item())


class MaxBatchSearch(unittest.TestCase):
    """train_compare.max_batch against a stand-in for the child runs."""

    def search(self, limit, model="resnet50", stop_after=None, hint=None):
        calls = []

        def fake_run(args, model, allocator, batch, steps, fraction):
            calls.append(batch)
            if stop_after is not None and len(calls) > stop_after:
                return {"ok": False, "not_run": True, "error": "deadline"}
            return {"ok": batch <= limit}

        saved = train_compare.run
        train_compare.run = fake_run
        try:
            args = type("Args", (), {"dry_run": True, "native_conf": None})()
            return train_compare.max_batch(args, model, "native", 0.5, hint=hint), calls
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
            self.assertGreaterEqual(min(calls), 1, f"a batch of 0 probed: {calls}")
            # doubling to a bracket, then bisection: logarithmic in the cap
            self.assertLessEqual(len(calls), 2 * cap.bit_length() + 2, calls)

    def test_hint_from_the_other_allocator(self):
        """coop's search starts at native's result and gallops from there:
        exact, and fewer probes when the two are close."""
        cap = train_compare.MODELS["resnet50"][1]
        for limit, hint in ((430, 409), (409, 430), (409, 409), (5, 409), (cap, 409),
                            (0, 409), (1000, 1)):
            r, calls = self.search(limit, hint=hint)
            self.assertEqual(r["max_batch"], limit, (limit, hint))
            self.assertEqual(r["first_failing_batch"], None if limit == cap else limit + 1)
            self.assertEqual(calls[0], hint)
            self.assertEqual(len(calls), len(set(calls)), f"a batch probed twice: {calls}")
        # a hint above the cap starts at the cap
        r, calls = self.search(cap + 100, hint=cap + 100)
        self.assertEqual((calls[0], r["max_batch"], r["capped"]), (cap, cap, True))
        _, without = self.search(430)
        _, with_hint = self.search(430, hint=409)
        self.assertLess(len(with_hint), len(without))

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
        # stopped on the way up (512 not run): no failing batch known, and not the cap either
        r, calls = self.search(409, stop_after=3)
        self.assertEqual((r["max_batch"], r["first_failing_batch"], r["capped"], r["complete"]),
                         (256, None, False, False))


class CompareSummary(unittest.TestCase):
    """train_compare.compare: the native_vs_coop line of two runs."""

    @staticmethod
    def runs(native_losses, coop_losses, ok=(True, True)):
        def one(ok, losses, reserved, ms):
            return {"ok": ok, "batch": 8, "steps": len(losses), "losses": losses, "step_time_ms_median": ms,
                    "peak_reserved_bytes": reserved, "peak_allocated_bytes": reserved // 2}

        return {"native": one(ok[0], native_losses, 1000, 20.0), "coop": one(ok[1], coop_losses, 800, 25.0)}

    def test_figures(self):
        s = train_compare.compare("gpt2_small", self.runs([3.0, 2.5, 2.0], [3.0, 2.25, 2.0]))
        self.assertEqual(s["loss_max_abs_diff"], 0.25)  # the largest difference, not the last
        self.assertFalse(s["losses_identical"])
        self.assertEqual(s["peak_reserved_coop_over_native"], 0.8)
        self.assertEqual(s["step_time_ratio_coop_over_native"], 1.25)
        self.assertEqual((s["peak_allocated_native"], s["peak_allocated_coop"]), (500, 400))
        s = train_compare.compare("gpt2_small", self.runs([3.0, 2.5], [3.0, 2.5]))
        self.assertTrue(s["losses_identical"])
        self.assertEqual(s["loss_max_abs_diff"], 0)

    def test_a_diverged_run_emits_valid_json(self):
        # a NaN loss made loss_max_abs_diff NaN, and json.dumps wrote the
        # line with NaN in it: no JSON reader takes it (RFC 8259)
        nan, inf = float("nan"), float("inf")
        # (max() skipped the NaN after 0.0: the summary said 0)
        s = train_compare.compare("gpt2_small", self.runs([3.0, nan], [3.0, nan]))
        s["extra"] = {"ratio": inf, "list": [-inf, 1.5]}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            common.emit(s)

        def refuse(name):
            raise ValueError(name)
        line = json.loads(out.getvalue(), parse_constant=refuse)
        self.assertIsNone(line["loss_max_abs_diff"])
        self.assertEqual(line["extra"], {"ratio": None, "list": [None, 1.5]})
        self.assertEqual(line["step_time_ratio_coop_over_native"], 1.25)

    def test_a_failed_run_gives_no_summary(self):
        for ok in ((True, False), (False, True), (False, False)):
            self.assertIsNone(train_compare.compare("gpt2_small", self.runs([1.0], [1.0], ok)), ok)


class ReplayReaders(unittest.TestCase):
    def test_snapshot_blocks_from_before_the_recording_come_first(self):
        mib = 1 << 20
        snap = {
            "segments": [{"stream": 0, "blocks": [
                {"address": 100, "size": 4 * mib, "requested_size": 3 * mib,
                 "state": "active_allocated"},  # allocated before, never freed
                {"address": 200, "size": mib, "state": "active_allocated"},  # in the trace
                {"address": 300, "size": mib, "state": "inactive"},
            ]}],
            "device_traces": [[
                {"action": "free_requested", "addr": 50, "size": 2 * mib, "stream": 0},
                {"action": "free_completed", "addr": 50, "size": 2 * mib, "stream": 0},
                {"action": "alloc", "addr": 200, "size": mib, "stream": 7},
                {"action": "alloc", "addr": 60, "size": 5 * mib, "stream": 0},
                {"action": "free_requested", "addr": 60, "size": 5 * mib, "stream": 0},
                {"action": "alloc", "addr": 70, "size": 6 * mib, "stream": 0},
                {"action": "free_completed", "addr": 60, "size": 5 * mib, "stream": 0},
                {"action": "free_completed", "addr": 70, "size": 6 * mib, "stream": 0},
            ]],
        }
        ev = replay.snapshot_events(snap)
        self.assertEqual(ev, [
            ("A", 0, 2 * mib, 0),  # freed by the trace, allocated before it
            ("A", 4, 3 * mib, 0),  # live at the end, never in the trace
            ("F", 0, 0, 0),
            ("A", 1, mib, 7),
            ("A", 2, 5 * mib, 0),
            ("F", 2, 0, 0),  # at free_requested; its free_completed is skipped
            ("A", 3, 6 * mib, 0),
            ("F", 3, 0, 0),
        ])

    def test_requested_frees_and_pending_blocks(self):
        """A free at free_requested skips that block's free_completed only:
        the address, reused, frees again at free_completed. A block freed
        (requested) but still pending in the final segments is not live
        before the trace; one pending there that the trace never saw is."""
        mib = 1 << 20
        snap = {
            "segments": [{"stream": 3, "blocks": [
                {"address": 80, "size": mib, "state": "active_pending_free"},  # requested below
                {"address": 90, "size": 2 * mib, "state": "active_pending_free"},  # not in the trace
            ]}],
            "device_traces": [[
                {"action": "alloc", "addr": 60, "size": mib, "stream": 0},
                {"action": "free_requested", "addr": 60, "size": mib, "stream": 0},
                {"action": "free_completed", "addr": 60, "size": mib, "stream": 0},
                {"action": "alloc", "addr": 60, "size": mib, "stream": 0},
                {"action": "free_completed", "addr": 60, "size": mib, "stream": 0},
                {"action": "alloc", "addr": 80, "size": mib, "stream": 0},
                {"action": "free_requested", "addr": 80, "size": mib, "stream": 0},
            ], [
                {"action": "alloc", "addr": 70, "size": 9 * mib, "stream": 0},  # device 1: not replayed
            ]],
        }
        self.assertEqual(replay.snapshot_events(snap), [
            ("A", 3, 2 * mib, 3),
            ("A", 0, mib, 0), ("F", 0, 0, 0),
            ("A", 1, mib, 0), ("F", 1, 0, 0),
            ("A", 2, mib, 0), ("F", 2, 0, 0),
        ])

    def test_text_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.trace")
            with open(path, "w") as f:
                # record_traces.py's files open with comment lines
                f.write("# one step\n# config: x\ncoop-trace 1\nL 0 100 0 addr=0x10\n"
                        "A 1 0x200 5 t=3  # a comment\nF 1\n")
            self.assertEqual(replay.read_events(path), [("A", 0, 100, 0), ("A", 1, 512, 5), ("F", 1, 0, 0)])
            with open(path, "w") as f:
                f.write("coop-trace 2\nA 1 100 0\n")
            with self.assertRaisesRegex(ValueError, "t.trace:1: expected header 'coop-trace 1'"):
                replay.read_events(path)

    def test_the_first_failure_is_reported(self):
        def alloc(size, stream):
            raise RuntimeError("out of memory asking for %d\nsecond line" % size)

        failed, error = replay.replay([("A", 1, 10, 0), ("A", 2, 20, 0)], alloc, None)
        self.assertEqual((failed, error), (2, "out of memory asking for 10"))

    def test_shipped_snapshot_matches_coop_reader(self):
        """Peak live bytes as coop replay reports for this file (19352504320)."""
        path = os.path.join(TOP, "..", "shared", "workloads", "torch-snapshots",
                            "cs336-transformer-ctx128-forward.pickle.gz")
        if not os.path.exists(path):
            self.skipTest(f"{path} is absent")
        live, sizes, peak = 0, {}, 0
        for kind, ident, size, _ in replay.read_events(path):
            if kind == "A":
                sizes[ident] = size
                live += size
                peak = max(peak, live)
            else:
                live -= sizes.pop(ident)
        self.assertEqual(peak, 19352504320)

    def test_null_is_counted_and_never_freed(self):
        """As torch's CUDAPluggableAllocator: a NULL is recorded once and a
        second delete of it raises; unknown pointers raise."""
        handed, next_ptr = set(), [4096]
        deleted = []

        def alloc(size, stream):
            if size == 0 or size >= 1000:
                return 0  # NULL: size 0 (as coop), or out of memory
            next_ptr[0] += 4096
            handed.add(next_ptr[0])
            return next_ptr[0]

        def delete(ptr):
            if ptr not in handed:
                raise RuntimeError("Trying to free a pointer not allocated here")
            handed.remove(ptr)
            deleted.append(ptr)

        events = [("A", 1, 10, 0), ("A", 2, 5000, 0), ("A", 3, 6000, 0), ("A", 4, 0, 0),
                  ("F", 2, 0, 0), ("F", 3, 0, 0), ("F", 4, 0, 0), ("A", 5, 20, 0)]
        failed, error = replay.replay(events, alloc, delete)
        self.assertEqual(failed, 2)
        self.assertIn("5000", error)
        self.assertEqual(handed, set())  # what stayed live is freed at the end
        self.assertEqual(len(deleted), 2)

    def test_exceptions_count_as_failures(self):
        def alloc(size, stream):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")

        failed, error = replay.replay([("A", 1, 10, 0), ("F", 1, 0, 0)], alloc, None)
        self.assertEqual((failed, error), (1, "CUDA out of memory. Tried to allocate 2.00 GiB"))


class ReplayDryRun(unittest.TestCase):
    def test_two_children_per_trace_and_a_summary(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.trace.gz")
            with gzip.open(trace, "wt") as f:
                f.write("coop-trace 1\nL 1 3000000 0\nA 2 1000 0\nF 2\nA 3 5000000 5\nF 1\nF 3\n")
            snap = os.path.join(tmp, "s.pickle")
            with open(snap, "wb") as f:
                pickle.dump({"segments": [], "device_traces": [[
                    {"action": "alloc", "addr": 1, "size": 512, "stream": 0},
                    {"action": "free_completed", "addr": 1, "size": 512, "stream": 0}]]}, f)
            out = os.path.join(tmp, "lines.jsonl")
            r = run(REPLAY, "--dry-run", "--out", out, trace, snap)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = lines(r.stdout)
            with open(out) as f:
                self.assertEqual([json.loads(x) for x in f], got)
        self.assertEqual(len(got), 1 + 2 * 3)
        native, coop, summary = got[1:4]
        self.assertEqual((native["allocator"], coop["allocator"]), ("native", "coop"))
        self.assertEqual((native["events"], native["allocations"], native["failed_allocs"]),
                         (6, 3, 0))
        # fake: native rounds to 2 MiB pages, coop to 512 B; peak: blocks 1 and 3
        self.assertEqual(native["peak_reserved_bytes"], (4 + 6) << 20)
        self.assertEqual(coop["peak_reserved_bytes"], 3000320 + 5000192)
        self.assertEqual(summary["summary"], "peak_reserved")
        self.assertAlmostEqual(summary["coop_over_native"], 8000512 / (10 << 20))
        self.assertEqual(got[4]["trace"], "s.pickle")

    def test_one_allocator_with_a_native_conf(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.trace")
            with open(trace, "w") as f:
                f.write("coop-trace 1\nA 1 1000 0\nF 1\n")
            r = run(REPLAY, "--dry-run", "--only", "native", "--native-conf",
                    "expandable_segments:True", trace, trace)
            both = run(REPLAY, "--dry-run", "--native-conf", "expandable_segments:True", trace)
        self.assertEqual(both.returncode, 0, both.stderr)
        runs = {x["allocator"]: x for x in lines(both.stdout)[1:3]}
        self.assertEqual(runs["native"]["dry_alloc_conf_env"], "expandable_segments:True")
        self.assertIsNone(runs["coop"]["dry_alloc_conf_env"])  # coop children never see it
        self.assertEqual(r.returncode, 0, r.stderr)
        got = lines(r.stdout)
        self.assertEqual(got[0]["native_conf"], "expandable_segments:True")
        # one native line per trace, no coop run and so no summary; the
        # children's environment had the setting
        self.assertEqual([(x["allocator"], x["native_conf"], x["dry_alloc_conf_env"])
                          for x in got[1:]], [("native", "expandable_segments:True",
                                               "expandable_segments:True")] * 2)

    def test_missing_trace_is_an_error(self):
        r = run(REPLAY, "--dry-run", "/nonexistent/x.trace")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such trace", r.stderr)


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


class StreamCheck(unittest.TestCase):
    def test_dry_run_runs_native_coop_and_coop_on_segments(self):
        r = run(STREAM, "--dry-run", "--conf", "page:8M", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = lines(r.stdout)
        runs = [(x["allocator"], x["conf"]) for x in out if "allocator" in x]
        self.assertEqual(runs, [("native", None), ("coop", "page:8M"), ("coop", "vmm:false"),
                                ("coop", "wait:false")])
        self.assertEqual(out[-1], {"summary": "stream_check", "ok": True, "failures": {}})

    def test_a_run_the_conf_names_is_not_repeated(self):
        r = run(STREAM, "--dry-run", "--conf", "vmm:false", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        runs = [(x["allocator"], x["conf"]) for x in lines(r.stdout) if "allocator" in x]
        self.assertEqual(runs, [("native", None), ("coop", "vmm:false"), ("coop", "wait:false")])

    def test_each_broken_rule_is_a_failure(self):
        good = stream_check.fake_line("coop", None)
        self.assertEqual(stream_check.failures(good), [])
        breaks = {
            "had finished": ("side_busy", False),
            "control": ("control", {"same_address": False, "y_intact": True}),
            "handed out again": ("record", {"same_address": True, "y_intact": True}),
            "late write": ("record", {"same_address": False, "y_intact": False}),
            "not reused": ("reused_after_sync", False),
            "empty_cache: illegal": ("empty_cache", {"error": "illegal address",
                                                      "side_busy_before": True,
                                                      "side_busy_after": True}),
            "before it": ("empty_cache", {"error": None, "side_busy_before": False,
                                          "side_busy_after": False}),
            "failed": ("ok", False),
        }
        for words, (key, value) in breaks.items():
            line = dict(good, **{key: value})
            found = stream_check.failures(line)
            self.assertEqual(len(found), 1, (key, found))
            self.assertIn(words, found[0], key)
        history = {
            "finished before the snapshot": ("side_busy", False),
            "trace was ['alloc', 'free_requested', 'free_completed'], not alloc, "
            "free_requested": ("while_busy", ["alloc", "free_requested", "free_completed"]),
            "the block was inactive": ("block_state_while_busy", "inactive"),
            "had finished the block's trace was ['alloc', 'free_requested']":
                ("after", ["alloc", "free_requested"]),
            "timed before": ("completed_after_seen_busy", False),
        }
        foreign = {
            "copied": ("zero_copy", False),
            "raised RuntimeError: x": ("raised", "RuntimeError: x"),
            "printed: coop: no pool": ("stderr", "coop: no pool\n"),
            "last error": ("last_error_changed", True),
            "allocated bytes": ("allocated_changed", True),
            "did not read back": ("read_back", False),
        }
        for part, cases in (("history", history), ("foreign_record_stream", foreign)):
            for words, (key, value) in cases.items():
                line = dict(good, **{part: dict(good[part], **{key: value})})
                found = stream_check.failures(line)
                self.assertEqual(len(found), 1, (part, key, found))
                self.assertIn(words, found[0], (part, key))
        # native's lines (the reference) carry None where coop's state is asked
        native = stream_check.fake_line("native", None)
        native["foreign_record_stream"].update(last_error_changed=None, allocated_changed=None)
        self.assertEqual(stream_check.failures(native), [])

    def test_stderr_of_catches_the_c_librarys_stderr(self):
        """foreign_round's witness of a report from coop: what is written on
        file descriptor 2 (where C's stderr goes), not only Python's."""
        def write_and_raise(text):
            os.write(2, text.encode())
            raise RuntimeError("no\nmore")

        self.assertEqual(stream_check.stderr_of(os.write, 2, b"coop: x\n"), ("coop: x\n", None))
        self.assertEqual(stream_check.stderr_of(write_and_raise, "y"), ("y", "RuntimeError: no"))
        self.assertEqual(stream_check.stderr_of(len, ()), ("", None))

    def test_history_as_coop_snapshots_it(self):
        """history_round's reading of a snapshot, on coop's own snapshots of a
        record_stream free waiting for a busy stream (the host backend, a
        held stream standing for the busy side stream): alloc and
        free_requested while busy, the block active_pending_free, then
        free_completed at the next allocation, timed after the stream was
        last seen busy. Without that allocation the free has not completed,
        and the check says so."""
        lib = None
        for top in (os.getcwd(), TOP):
            path = os.path.join(top, ".libs", "libcoop.so")
            if os.path.exists(path):
                lib = path
                break
        if lib is None:
            self.skipTest("no libcoop.so that python can load in this build")
        code = """if True:
            import ctypes, json, sys, time
            import coop.native as native, coop.torch as ctorch
            import stream_check
            lib = native.library()
            lib.coop_host_hold_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_bool]
            main, side, size = 1, 7, 16 << 20
            p = lib.coop_torch_malloc(size, 0, main)
            pool = lib.coop_torch_pool(0)
            lib.coop_host_hold_stream(pool, side, True)  # the side stream is busy
            lib.coop_torch_record_stream(p, side)
            lib.coop_torch_free(p, size, 0, main)
            busy_snap = ctorch.snapshot()
            seen_busy_us = time.time() * 1e6
            time.sleep(0.002)
            lib.coop_host_hold_stream(pool, side, False)  # it finishes
            early = ctorch.snapshot()  # no allocation yet: nothing processed the free
            q = lib.coop_torch_malloc(4096, 0, main)
            after_snap = ctorch.snapshot()
            lib.coop_torch_free(q, 4096, 0, main)
            print(json.dumps([stream_check.history_finding(p, busy_snap, True, seen_busy_us, s)
                              for s in (after_snap, early)]))
        """
        env = dict(os.environ, COOP_LIBRARY=lib, PYTHONDONTWRITEBYTECODE="1",
                   COOP_ALLOC_CONF="backend:host,capacity:256M,history:1000",
                   PYTHONPATH=os.pathsep.join([os.path.join(TOP, "python"), GPU]))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        done, early = json.loads(r.stdout)
        # the next allocation takes the block back (its alloc ends the trace)
        self.assertEqual(done, {"side_busy": True, "while_busy": ["alloc", "free_requested"],
                                "block_state_while_busy": "active_pending_free",
                                "after": ["alloc", "free_requested", "free_completed", "alloc"],
                                "completed_after_seen_busy": True})
        self.assertEqual(stream_check.history_failures(done), [])
        self.assertEqual(early["after"], ["alloc", "free_requested"])
        (failure,) = stream_check.history_failures(early)
        self.assertIn("once the side stream had finished", failure)
        # wait:false: empty_cache must not wait for the busy stream
        nowait = stream_check.fake_line("coop", "wait:false")
        self.assertEqual(stream_check.failures(nowait), [])
        waited = dict(nowait, empty_cache=dict(nowait["empty_cache"], side_busy_after=False))
        self.assertIn("although wait:false", stream_check.failures(waited)[0])
        self.assertTrue(stream_check.never_waits("page:8M, wait:false"))
        self.assertFalse(stream_check.never_waits("wait:true"))


class RunChecks(unittest.TestCase):
    def test_a_child_that_prints_nothing_is_a_failed_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "silent.py")
            with open(script, "w") as f:
                f.write("import sys\nsys.stderr.write('boom\\n')\nsys.exit(3)\n")
            opts = argparse.Namespace(timeout=60, conf=None, dry_run=False)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = common.run_checks(script, opts, [("x", [], "vmm:false", {"route": "x"})],
                                       lambda line: [] if line["ok"] else ["broken"], "t")
        self.assertEqual(rc, 1)
        run_line, summary = lines(out.getvalue())
        self.assertEqual((run_line["route"], run_line["ok"]), ("x", False))
        self.assertIn("child exit 3", run_line["error"])
        self.assertIn("boom", run_line["error"])
        self.assertEqual(summary, {"summary": "t", "ok": False, "failures": {"x": ["broken"]}})


    def test_first_line_of_an_exception(self):
        self.assertEqual(common.first_line(RuntimeError("CUDA error: x\nmore")),
                         "RuntimeError: CUDA error: x")
        self.assertEqual(common.first_line(RuntimeError("")), "RuntimeError: ")


class OomCheck(unittest.TestCase):
    def test_conf_reaches_the_children(self):
        r = run(OOM, "--dry-run", "--capacity", "512M", "--conf", "vmm:false", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([x["conf"] for x in lines(r.stdout) if "route" in x],
                         ["capacity:536870912,vmm:false"] * 2)
        self.assertEqual(oom_check.child_conf(512 << 20, "vmm:false"),
                         "capacity:536870912,vmm:false")
        self.assertEqual(oom_check.child_conf(512 << 20, None), "capacity:536870912")

    def test_dry_run_runs_both_routes(self):
        r = run(OOM, "--dry-run", "--capacity", "512M", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = lines(r.stdout)
        self.assertEqual([x["route"] for x in out if "route" in x], ["pluggable", "mem_pool"])
        self.assertEqual(out[-1], {"summary": "oom_check", "ok": True, "failures": {}})

    def test_bad_capacity_is_refused(self):
        for cap in ("lots", "1X", "32M"):
            r = run(OOM, "--dry-run", "--capacity", cap, timeout=60)
            self.assertEqual(r.returncode, 2, cap)
            self.assertIn("--capacity", r.stderr)

    def test_each_route_is_held_to_what_the_docs_say(self):
        for route in oom_check.ROUTES:
            self.assertEqual(oom_check.failures(oom_check.fake_line(route)), [], route)
        plug = dict(oom_check.fake_line("pluggable"), check_oom=None)
        self.assertIn("check_oom", oom_check.failures(plug)[0])
        pool = dict(oom_check.fake_line("mem_pool"), is_torch_oom=False, torch_raised=None)
        self.assertIn("did not raise", oom_check.failures(pool)[0])
        pool = dict(oom_check.fake_line("mem_pool"), small_ok=False)
        self.assertIn("read back", oom_check.failures(pool)[0])
        for route in oom_check.ROUTES:
            broken = dict(oom_check.fake_line(route), after_ok=False)
            self.assertIn("next allocation", oom_check.failures(broken)[0])
        self.assertIn("failed", oom_check.failures({"route": "mem_pool", "ok": False})[0])
        # the oom history entry: its size rounded up to 512, as torch's, and device_free
        good = oom_check.fake_line("pluggable")
        for entry, words in ((None, "no oom entry"),
                             ({"size": 513, "requested": 513, "has_device_free": True},
                              "is 513, not 1024"),
                             ({"size": 1024, "requested": 513, "has_device_free": False},
                              "no device_free")):
            (found,) = oom_check.failures(dict(good, oom_entry=entry))
            self.assertIn(words, found)
        self.assertEqual(oom_check.oom_entry_failures(
            {"size": 1 << 31, "requested": 1 << 31, "has_device_free": True}), [])


class MemoryVizDryRun(unittest.TestCase):
    def test_both_snapshots_read_and_compared(self):
        with tempfile.TemporaryDirectory() as tmp:
            # a --dir that does not exist yet, as pending_device_checks.sh passes it (on the
            # H200 on 2026-11-27 both children failed there: the writer's temporary file
            # had no folder)
            snaps = os.path.join(tmp, "viz")
            r = run(VIZ, "--dry-run", "--dir", snaps, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout[-600:])
            out = lines(r.stdout)
            viz = [x for x in out if x.get("summary") == "memory_viz"]
            self.assertEqual([x["allocator"] for x in viz], ["native", "coop"])
            for x in viz:
                self.assertEqual(x["calls_failed"], {})
                self.assertIn("segments", x["calls_ok"])  # torch 1.13 has segments and memory
                self.assertEqual(x["segments_lines"], x["blocks"])  # 1.13: one per block
                self.assertEqual(x["segments_bytes"], x["total_bytes"])
                self.assertTrue(x["memory_bytes_add_up"])
                self.assertIn("peak_reserved_bytes", x)  # None in a dry run
            (cmp,) = [x for x in out if x.get("summary") == "structure_coop_vs_native"]
            self.assertEqual(cmp["block_coop_lacks"], [])
            self.assertEqual(sorted(os.listdir(snaps)), ["coop.pickle", "native.pickle"])

    def test_a_snapshot_that_does_not_add_up_is_reported(self):
        snap = memory_viz_check.synthetic_snapshot("coop")
        snap["segments"][0]["total_size"] += 512  # blocks no longer tile the segment
        checks = memory_viz_check.viewer_checks(snap)
        self.assertIn("memory", checks["calls_ok"], checks)
        self.assertIs(checks["memory_bytes_add_up"], False)

    def test_structure_differences_are_named(self):
        coop = memory_viz_check.synthetic_snapshot("coop")
        native = memory_viz_check.synthetic_snapshot("native")
        del coop["segments"][0]["blocks"][0]["requested_size"]
        coop["device_traces"][0][0]["extra"] = 1
        a, b = memory_viz_check.key_sets(coop), memory_viz_check.key_sets(native)
        self.assertEqual(b["block"] - a["block"], set())  # the other block still has it
        del coop["segments"][0]["blocks"][1]["requested_size"]
        a = memory_viz_check.key_sets(coop)
        self.assertEqual(b["block"] - a["block"], {"requested_size"})
        self.assertEqual(a["trace_entry"] - b["trace_entry"], {"extra"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
