#!/usr/bin/env python3
"""Tests scripts/atomic_file.py, the scripts' one writer, without torch:
compressed output is reproducible, a failed write leaves the old file and
no temporary one, a symbolic link stays one, and modes are kept or follow
the umask. Standard library only."""

import gzip
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import atomic_file  # noqa: E402


class Replacing(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "out.gz")

    def write(self, data, path=None, compress=True):
        with atomic_file.replacing(path or self.path, compress=compress) as f:
            f.write(data)
        with open(path or self.path, "rb") as f:
            return f.read()

    def test_compressed_output_is_reproducible(self):
        first = self.write(b"trace " * 1000)
        second = self.write(b"trace " * 1000)
        self.assertEqual(first, second)
        self.assertEqual(first[3], 0)  # FLG: no file name stored
        self.assertEqual(first[4:8], b"\0\0\0\0")  # MTIME 0
        self.assertEqual(gzip.decompress(first), b"trace " * 1000)

    def test_failed_write_keeps_the_old_file(self):
        good = self.write(b"good")
        with self.assertRaises(OSError):
            with atomic_file.replacing(self.path, compress=True) as f:
                f.write(b"half")
                raise OSError(28, "No space left on device")
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), good)
        self.assertEqual(os.listdir(self.dir.name), ["out.gz"])

    def test_link_and_modes(self):
        self.write(b"x", compress=False)
        os.chmod(self.path, 0o640)
        self.write(b"y", compress=False)  # the replaced file's mode stays
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o640)
        link = os.path.join(self.dir.name, "link")
        os.symlink("out.gz", link)
        self.assertEqual(self.write(b"z", path=link, compress=False), b"z")
        self.assertTrue(os.path.islink(link))
        old = os.umask(0o022)
        try:
            fresh = os.path.join(self.dir.name, "fresh")
            self.write(b"new", path=fresh, compress=False)
        finally:
            os.umask(old)
        self.assertEqual(stat.S_IMODE(os.stat(fresh).st_mode), 0o644)

    def test_a_fifo_is_written_directly(self):
        # renamed over, a FIFO became a regular file and its reader waited
        # for ever; so did a device (/dev/null, for root: not tried here, as
        # this test on the old writer would have replaced the machine's)
        fifo = os.path.join(self.dir.name, "fifo")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
        reader.start()
        with atomic_file.replacing(fifo) as f:
            f.write(b"through the pipe")
        reader.join(10)
        self.assertEqual(got, [b"through the pipe"])
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["fifo"])

    def test_a_terminated_write_leaves_no_temporary_file(self):
        # SIGTERM (kill, a batch system's time limit) and SIGHUP (a closed
        # terminal) end Python at once by default: no finally ran, and the
        # hidden temporary file (a whole trace, 100 MB) stayed beside OUT
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with open(self.path, "wb") as f:
                f.write(b"old")
            # the child starts with both at their default action: under nohup
            # (CI's runner) SIGHUP is inherited ignored, and an ignored signal
            # stays ignored (atomic_file leaves it so), which is not this case
            child = subprocess.Popen([sys.executable, "-c", (
                "import signal, sys; sys.path.insert(0, %r)\n"
                "for s in (signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
                "import atomic_file\n"
                "with atomic_file.replacing(%r) as f:\n"
                "    f.write(b'half')\n"
                "    f.flush()\n"
                "    print('writing', flush=True)\n"
                "    sys.stdin.read()\n" % (atomic_file.__file__.rsplit("/", 1)[0], self.path))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.assertEqual(child.stdout.readline(), b"writing\n")
            self.assertEqual(len(os.listdir(self.dir.name)), 2)  # out.gz and the temporary
            child.send_signal(sig)
            child.stdin.close()  # the write's end, were the signal ignored
            self.assertEqual(child.wait(10), -sig)  # still ended by that signal
            child.stdout.close()
            with open(self.path, "rb") as f:
                self.assertEqual(f.read(), b"old")
            self.assertEqual(os.listdir(self.dir.name), ["out.gz"], signal.Signals(sig).name)

    def test_a_folder_is_refused_before_any_write(self):
        folder = os.path.join(self.dir.name, "folder")
        os.mkdir(folder)
        entered = []
        with self.assertRaises(IsADirectoryError):
            with atomic_file.replacing(folder) as f:
                entered.append(f)  # the work (a whole recording) never starts
        self.assertEqual(entered, [])
        self.assertEqual(os.listdir(folder), [])
        self.assertEqual(os.listdir(self.dir.name), ["folder"])


class FakeFigure:
    """What save_figure asks of a matplotlib figure: savefig(file, format=...)."""

    def __init__(self, fail=False):
        self.fail = fail
        self.calls = []

    def savefig(self, f, format=None, **kwargs):
        self.calls.append((format, kwargs))
        f.write(b"image as " + format.encode())
        if self.fail:
            raise ValueError("Format %r is not supported" % format)


class SaveFigure(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_format_from_the_extension(self):
        for name, fmt in (("a.png", "png"), ("b.SVG", "svg"), ("c", "png"), ("d.pdf", "pdf")):
            fig = FakeFigure()
            path = os.path.join(self.dir.name, name)
            atomic_file.save_figure(fig, path, dpi=110)
            self.assertEqual(fig.calls, [(fmt, {"dpi": 110})])
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"image as " + fmt.encode())

    def test_a_failed_save_keeps_the_old_image(self):
        path = os.path.join(self.dir.name, "plot.xyz")
        with open(path, "wb") as f:
            f.write(b"old image")
        with self.assertRaises(ValueError):
            atomic_file.save_figure(FakeFigure(fail=True), path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old image")
        self.assertEqual(os.listdir(self.dir.name), ["plot.xyz"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
