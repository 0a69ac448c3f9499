#!/usr/bin/env python3
"""Tests scripts/long_trace.py's command line and output: a bad argument or
an output that cannot be written is one line naming it and a non-zero
status, never a traceback, and a failed write leaves the previous OUT (or
none) and no temporary file. Standard library only (the script reads the
shipped traces/unet-train-step.* files)."""

import gzip
import os
import resource
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "long_trace.py")


def limit_file_size():
    """A full disk for one process: writes past 4 KiB fail (EFBIG)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


class LongTrace(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.out = os.path.join(self.dir.name, "t.trace")

    def run_script(self, *args, preexec_fn=None):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                              preexec_fn=preexec_fn, timeout=120)

    def assert_refused(self, r, status, *says):
        self.assertEqual(r.returncode, status, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        for s in says:
            self.assertIn(s, r.stderr)

    def test_bad_arguments_are_named(self):
        cases = [
            ((), "usage"),  # no arguments
            (("text", "100"), "usage"),
            (("txt", "100", self.out), "'txt'"),
            (("text", "abc", self.out), "EVENTS: 'abc' is not"),
            (("text", "1e3", self.out), "EVENTS: '1e3' is not"),
            (("text", "0", self.out), "EVENTS: '0' is not"),  # wrote a header, 'ok'
            (("text", "-5", self.out), "EVENTS: '-5' is not"),
        ]
        for args, says in cases:
            with self.subTest(args=args):
                self.assert_refused(self.run_script(*args), 2, says)
                self.assertFalse(os.path.exists(self.out))

    def test_unwritable_outputs_are_named(self):
        missing = os.path.join(self.dir.name, "no", "t.trace")
        under_file = os.path.join(SCRIPT, "t.trace")
        for out, why in [(self.dir.name, "Is a directory"), (missing, "No such file or directory"),
                         (under_file, "Not a directory")]:
            with self.subTest(out=out):
                self.assert_refused(self.run_script("text", "100", out), 2, out + ": " + why)
        self.assertEqual(os.listdir(self.dir.name), [])
        # a device that refuses every write: named, status 1
        r = self.run_script("dtr", "100", "/dev/full")
        self.assert_refused(r, 1, "/dev/full: No space left on device")

    def test_the_base_trace_is_not_an_output(self):
        # OUT the shipped trace a format repeats (or a link to it): read
        # whole, then replaced by its repetition. In-process, the writers
        # stood in for: a failure here writes nothing.
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import contextlib
        import io
        from unittest import mock
        import long_trace
        link = os.path.join(self.dir.name, "link.gz")
        base = os.path.join(long_trace.TRACES, "unet-train-step.trace.gz")
        os.symlink(base, link)
        wrote = []
        fakes = {f: lambda events, out: wrote.append(out) or 1 for f in long_trace.WRITERS}
        for fmt, out in (("text", base), ("minimalloc", link),
                         ("pickle", os.path.join(long_trace.TRACES, "unet-train-step.cuda.pickle.gz")),
                         ("dtr", os.path.join(long_trace.TRACES, "unet-train-step.ops.jsonl.gz"))):
            with self.subTest(fmt=fmt), mock.patch.dict(long_trace.WRITERS, fakes):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
                    long_trace.main([fmt, "100", out])
                self.assertEqual(e.exception.code, 2)
                self.assertIn("error: %s: is the shipped trace %s repeats\n" % (out, fmt),
                              err.getvalue())
        self.assertEqual(wrote, [])

    def test_a_failed_write_keeps_the_previous_output(self):
        for fmt, name in [("text", "t.trace"), ("minimalloc", "t.csv"), ("dtr", "t.ops.jsonl.gz"),
                          ("pickle", "t.pickle")]:
            with self.subTest(fmt=fmt):
                out = os.path.join(self.dir.name, name)
                with open(out, "wb") as f:
                    f.write(b"the previous trace")
                r = self.run_script(fmt, "20000", out, preexec_fn=limit_file_size)
                self.assert_refused(r, 1, out + ": File too large")
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), b"the previous trace")
                self.assertEqual(sorted(os.listdir(self.dir.name)), [name])
                os.unlink(out)

    def test_outputs_are_whole(self):
        r = self.run_script("text", "2000", self.out + ".gz")
        self.assertEqual(r.returncode, 0, r.stderr)
        with gzip.open(self.out + ".gz", "rt") as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "coop-trace 1")
        events = sum(1 for line in lines if line[:2] in ("A ", "F "))
        self.assertGreaterEqual(events, 2000)
        self.assertIn("%d events" % events, r.stderr)
        umask = os.umask(0)
        os.umask(umask)
        self.assertEqual(os.stat(self.out + ".gz").st_mode & 0o777, 0o666 & ~umask)
        self.assertEqual(os.listdir(self.dir.name), ["t.trace.gz"])


if __name__ == "__main__":
    unittest.main()
