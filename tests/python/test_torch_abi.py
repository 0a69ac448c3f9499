#!/usr/bin/env python3
"""The PyTorch ABI of libcoop.so, loaded with ctypes the way PyTorch's
CUDAPluggableAllocator loads it (dlopen the path, call the entry points
through C function pointers), on the host backend, without a GPU.

Run by tests/python_tests.sh with COOP_LIBRARY set to the build tree's
libcoop.so. Seeded randomness: COOP_TEST_SEED (printed; tests/coop_test_seed.py).
"""

import atexit
import collections
import ctypes
import inspect
import io
import json
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, ".."))  # tests/coop_test_seed.py

# This process's configuration (once per process, as in PyTorch).
CONF = "backend:host,capacity:1G,page:2M,check:true,history:100000"
os.environ["COOP_ALLOC_CONF"] = CONF

import coop  # noqa: E402
import coop.native as native  # noqa: E402
import coop.torch as ctorch  # noqa: E402
import coop_test_seed  # noqa: E402

LIB_PATH = os.environ.get("COOP_LIBRARY")
SEED = coop_test_seed.read_seed("test_torch_abi", random.randrange(1 << 30))

MIB = 1 << 20
GIB = 1 << 30

try:
    import torch  # noqa: F401
    import torch.cuda._memory_viz as memory_viz

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# The entry points as PyTorch sees them: C function pointers of these types.
MallocFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FreeFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
InitFn = ctypes.CFUNCTYPE(None, ctypes.c_int)
ResetFn = ctypes.CFUNCTYPE(None)
FractionFn = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)
RecordStreamFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

_dl = ctypes.CDLL(LIB_PATH)


def entry(name, ftype):
    return ftype(ctypes.cast(getattr(_dl, name), ctypes.c_void_p).value)


torch_malloc = entry("coop_torch_malloc", MallocFn)
torch_free = entry("coop_torch_free", FreeFn)
torch_reset = entry("coop_torch_empty_cache", ResetFn)
torch_fraction = entry("coop_torch_memory_fraction", FractionFn)
torch_record_stream = entry("coop_torch_record_stream", RecordStreamFn)


# The cases that need a process of their own (COOP_ALLOC_CONF is read once
# per process, a patch or an install is for the whole process, a
# configuration refused after first use) each started an interpreter, and
# each of those imported torch (coop.torch does): about 1 s of CPU apiece,
# most of this test's minute. One server interpreter imports torch once and
# forks a child per case instead. The child is still a process of its own,
# whose libcoop was never loaded (the server loads none): it takes the case's
# environment (putenv: libcoop's getenv sees it), working directory, argv,
# stdout and stderr, runs the code as __main__ (or the script, as
# `python SCRIPT` would) and exits as that interpreter would: its status, a
# traceback on stderr, a signal's death, the interpreter's own finalization.
# What an interpreter reads only as it starts (PYTHON*, LD_*, GLIBC_TUNABLES,
# MALLOC_*, the locale) is the server's: a case whose environment differs
# there gets a real interpreter (python_child below).
FORK_SERVER = r"""
import gc, json, os, runpy, signal, sys, time, types
try:
    import torch  # noqa: F401 (the import each case paid for)
except ImportError:
    pass
# out of the collector's sight: a child's exit then frees torch's modules
# without first walking them (0.5 s a child, 0.2 s frozen)
gc.freeze()
while True:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        break
    # The deadline is kept here too: a child that ignores or blocks SIGALRM
    # (its code may, and so may a library it loads) would keep the suite
    # waiting for good. A poll every 5 ms: a case's time is a second or so.
    deadline = time.monotonic() + req["timeout"] + 1
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(os.waitstatus_to_exitcode(status), flush=True)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print(-signal.SIGALRM, flush=True)
            break
        time.sleep(0.005)
fd = os.open(os.devnull, os.O_RDONLY)
os.dup2(fd, 0)
os.close(fd)
sys.stdin = open(os.devnull)
for path, target in ((req["stdout"], 1), (req["stderr"], 2)):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd, target)
    os.close(fd)
os.environ.clear()
os.environ.update(req["env"])
if req["cwd"]:
    os.chdir(req["cwd"])
signal.alarm(req["timeout"])  # subprocess.run's timeout: SIGALRM ends it (or the server)
if req["script"]:
    sys.argv = [req["script"]] + req["args"]
    sys.path[0] = os.path.dirname(os.path.abspath(req["script"]))
    runpy.run_path(req["script"], run_name="__main__")
else:
    sys.argv = ["-c"] + req["args"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(req["code"], "<string>", "exec"), main.__dict__)
"""

_STARTUP_PREFIXES = ("PYTHON", "LD_", "GLIBC_TUNABLES", "MALLOC_", "LC_", "LANG")
_server = None  # (process, its environment); started by the first case


def _startup_env(env):
    """The part of env an interpreter reads as it starts (PYTHONPATH as the
    absolute paths sys.path gets from it)."""
    got = {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES)}
    if "PYTHONPATH" in got:
        got["PYTHONPATH"] = [os.path.abspath(p) for p in got["PYTHONPATH"].split(os.pathsep)]
    return got


def _close_server():
    if _server:
        _server[0].stdin.close()
        _server[0].wait(timeout=60)


def python_child(code=None, env=None, script=None, args=(), cwd=None, timeout=120):
    """subprocess.run([sys.executable, "-c", code, *args] (or [sys.executable,
    script, *args]), env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout), in a child forked by the server (FORK_SERVER above)
    where the environment lets it, else in a real interpreter."""
    global _server
    env = dict(os.environ if env is None else env)
    argv = [sys.executable] + ([script] if script else ["-c", code]) + list(args)
    if _server is None:
        server_env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        _server = (subprocess.Popen([sys.executable, "-c", FORK_SERVER], env=server_env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True),
                   server_env)
        atexit.register(_close_server)
    if _startup_env(env) != _startup_env(_server[1]):
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):
            open(path, "w").close()
        req = {"code": code, "script": script, "args": list(args), "env": env, "cwd": cwd,
               "stdout": out, "stderr": err, "timeout": int(timeout)}
        proc = _server[0]
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        status = proc.stdout.readline()
        if not status:
            raise RuntimeError("the fork server died (its stderr is in this log)")
        returncode = int(status)
        if returncode == -signal.SIGALRM:
            raise subprocess.TimeoutExpired(argv, timeout)
        with open(out) as f, open(err) as g:
            return subprocess.CompletedProcess(argv, returncode, f.read(), g.read())


def run_child(code, conf, extra_env=None):
    """Runs code in a process of its own with its own COOP_ALLOC_CONF."""
    env = dict(os.environ)
    env["COOP_ALLOC_CONF"] = conf
    env.update(extra_env or {})
    prelude = (
        "import ctypes, sys\n"
        f"sys.path.insert(0, {os.path.join(HERE, '..', '..', 'python')!r})\n"
        "import coop.native as native, coop.torch as ctorch\n"
        "lib = native.library()\n"
    )
    return python_child(prelude + code, env)


def pool(device):
    return native.library().coop_torch_pool(device)


class Abi(unittest.TestCase):
    """One process, CONF above; tests leave every device empty."""

    def tearDown(self):
        for d in range(4):
            p = pool(d)
            if p:
                native.check(p)
                self.assertEqual(native.stats(p).allocation.current, 0, f"device {d} leaked")

    def test_symbols_exported_internals_hidden(self):
        for name in ("coop_torch_malloc", "coop_torch_free", "coop_torch_init",
                     "coop_torch_empty_cache", "coop_torch_memory_fraction",
                     "coop_torch_record_stream", "coop_torch_forget_stream",
                     "coop_torch_snapshot_take",
                     "coop_get_stats", "coop_walk"):
            self.assertTrue(hasattr(_dl, name), name)
        for hidden in ("coop_alloc_conf_parse", "torch_history_record", "coop_set_error"):
            with self.assertRaises(AttributeError):
                getattr(_dl, hidden)

    def test_devices_streams_sizes(self):
        rng = random.Random(SEED)
        live = []
        for i in range(400):
            device = rng.randrange(4)
            stream = rng.randrange(6)
            size = rng.choice([1, 511, 512, 513, 4096, 1 << 20, rng.randrange(1, 8 * MIB)])
            p = torch_malloc(size, device, stream)
            self.assertIsNotNone(p, ctorch.last_error())
            self.assertEqual(p % 512, 0)
            live.append((p, size, device, stream))
        by_device = {}
        for p, size, device, _ in live:
            by_device.setdefault(device, []).append((p, size))
        for device, blocks in by_device.items():
            blocks.sort()
            for (a, sa), (b, _) in zip(blocks, blocks[1:]):
                self.assertLessEqual(a + sa, b, f"overlap on device {device}")
            stats = ctorch.memory_stats(device)
            self.assertEqual(stats["allocation.all.current"], len(blocks))
            self.assertEqual(stats["requested_bytes.all.current"], sum(s for _, s in blocks))
            native.check(pool(device))
        rng.shuffle(live)
        for p, size, device, stream in live:
            torch_free(p, size, device, stream)
        for device in by_device:
            self.assertEqual(ctorch.memory_stats(device)["allocated_bytes.all.current"], 0)

    def test_size_zero(self):
        before = ctorch.last_error()
        self.assertIsNone(torch_malloc(0, 0, 0))
        torch_free(None, 0, 0, 0)
        self.assertEqual(ctorch.last_error(), before)

    def test_bad_pointers_do_not_crash(self):
        p = torch_malloc(4096, 1, 3)
        self.assertIsNotNone(p)
        torch_free(p + 512, 4096, 1, 3)
        self.assertIn("inside", ctorch.last_error())
        local = ctypes.create_string_buffer(64)
        torch_free(ctypes.addressof(local), 64, 1, 0)
        self.assertIn("not allocated by this pool", ctorch.last_error())
        torch_free(p, 4096, 1, 3)
        torch_free(p, 4096, 1, 3)  # double free
        self.assertIn("already", ctorch.last_error())
        torch_free(0x1000, 16, 9, 0)  # device without a pool
        self.assertIn("device 9", ctorch.last_error())
        torch_free(0x1000, 16, -1, 0)
        self.assertIn("device -1", ctorch.last_error())
        self.assertIsNone(torch_malloc(16, 99, 0))
        self.assertIn("device 99", ctorch.last_error())
        before = ctorch.last_error()
        torch_record_stream(ctypes.addressof(local), 5)  # not coop's: ignored, as torch does
        self.assertEqual(ctorch.last_error(), before)
        native.check(pool(1))

    def test_record_stream_and_empty_cache(self):
        p = torch_malloc(6 * MIB, 2, 1)
        q = torch_malloc(1 * MIB, 2, 1)
        torch_record_stream(p, 7)
        torch_free(p, 6 * MIB, 2, 1)
        native.check(pool(2))
        before = ctorch.memory_stats(2)["reserved_bytes.all.current"]
        torch_reset()
        after = ctorch.memory_stats(2)["reserved_bytes.all.current"]
        self.assertLess(after, before)
        self.assertGreaterEqual(after, 1 * MIB)
        torch_free(q, 1 * MIB, 2, 1)
        ctorch.empty_cache()  # the package's call, as the hook
        self.assertEqual(ctorch.memory_stats(2)["reserved_bytes.all.current"], 0)

    def test_oom_and_memory_fraction(self):
        self.assertIsNone(torch_malloc(2 * GIB, 3, 0))
        msg = ctorch.last_error()
        self.assertIn(str(2 * GIB), msg.replace(",", ""))
        with self.assertRaises(ctorch.OutOfMemoryError) as cm:
            ctorch.check_oom(3)
        self.assertIn("device 3", str(cm.exception))
        if HAVE_TORCH:  # caught where torch's own out-of-memory error is
            self.assertIsInstance(cm.exception, torch.cuda.OutOfMemoryError)
        ctorch.check_oom(3)  # already reported: no second raise
        self.assertEqual(ctorch.memory_stats(3)["num_ooms"], 1)

        torch_fraction(0.25, 3)
        self.assertEqual(ctorch.memory_stats(3)["coop.capacity"], GIB // 4)
        self.assertIsNone(torch_malloc(300 * MIB, 3, 0))
        p = torch_malloc(200 * MIB, 3, 0)
        self.assertIsNotNone(p)
        torch_fraction(1.5, 3)
        self.assertIn("1.5", ctorch.last_error())
        torch_fraction(float("nan"), 3)
        torch_free(p, 200 * MIB, 3, 0)
        torch_fraction(1.0, 3)
        self.assertEqual(ctorch.memory_stats(3)["coop.capacity"], GIB)

    def test_devices_as_torch_takes_them(self):
        """Strings and torch.device objects, as torch.cuda's memory functions
        take them ("cuda" and None: the current device, 0 without CUDA).
        Strings used to raise TypeError: str.index was taken for
        torch.device's index."""
        p = torch_malloc(3 * MIB, 1, 0)
        q = torch_malloc(1 * MIB, 0, 0)
        try:
            key = "allocated_bytes.all.current"
            on_1, on_0 = ctorch.memory_stats(1)[key], ctorch.memory_stats(0)[key]
            self.assertNotEqual(on_1, on_0)
            devices = [("cuda:1", on_1), ("cuda:0", on_0), ("cuda", on_0), (None, on_0)]
            if HAVE_TORCH:
                import torch as real

                devices += [(real.device("cuda", 1), on_1), (real.device("cuda:1"), on_1),
                            (real.device("cuda"), on_0)]
            for device, expected in devices:
                self.assertEqual(ctorch.memory_stats(device)[key], expected, repr(device))
                ctorch.check_oom(device)  # no OOM on either: no raise
            for bad in ("cpu", "cuda:x", "cuda:-1", "cuda:", "1"):
                with self.assertRaises(ValueError, msg=bad):
                    ctorch.memory_stats(bad)
            with self.assertRaises(TypeError):
                ctorch.memory_stats(1.5)
        finally:
            torch_free(p, 3 * MIB, 1, 0)
            torch_free(q, 1 * MIB, 0, 0)

    def test_current_device_lets_torch_errors_through(self):
        """Without CUDA (is_available() false) the current device is 0; an
        error of torch's past that is raised, not taken for device 0 (a bare
        except used to swallow it)."""

        def fake(available, current):
            cuda = type("cuda", (), {})()
            cuda.is_available = lambda: available
            cuda.current_device = current
            module = type("torch", (), {})()
            module.cuda = cuda
            return module

        def not_compiled():
            raise AssertionError("Torch not compiled with CUDA enabled")

        def broken():
            raise RuntimeError("CUDA error: initialization error")

        self.assertEqual(ctorch._current_device(fake(False, not_compiled)), 0)
        self.assertEqual(ctorch._current_device(fake(True, lambda: 2)), 2)
        self.assertEqual(ctorch._device_index("cuda", fake(True, lambda: 3)), 3)
        for call in (lambda t: ctorch._current_device(t), lambda t: ctorch._device_index(None, t)):
            with self.assertRaises(RuntimeError) as cm:
                call(fake(True, broken))
            self.assertIn("initialization error", str(cm.exception))

    def test_record_history_huge_bounds(self):
        """Bounds whose byte count wraps size_t (2**62 * 40 is 0 mod 2**64;
        2**64 // 40 + 1 events make 24 bytes), and bounds past size_t,
        which ctypes would wrap to 0 (off): every event is kept."""
        try:
            for n in (1 << 62, (1 << 64) // 40 + 1, 1 << 64, 1 << 70):
                ctorch.record_history(n, clear_history=True)
                p = torch_malloc(4096, 0, 0)
                torch_free(p, 4096, 0, 0)
                trace = ctorch.snapshot()["device_traces"][0]
                self.assertEqual([(e["action"], e["addr"]) for e in trace],
                                 [("alloc", p), ("free_requested", p), ("free_completed", p)],
                                 f"record_history({n})")
            with self.assertRaises(ValueError):
                ctorch.record_history(-1)
        finally:
            ctorch.record_history(100000)  # CONF's

    def test_oom_trace_entry_has_device_free(self):
        self.assertIsNone(torch_malloc(4 * GIB, 2, 5))
        with self.assertRaises(ctorch.OutOfMemoryError):
            ctorch.check_oom(2)
        oom = [e for e in ctorch.snapshot()["device_traces"][2] if e["action"] == "oom"][-1]
        self.assertEqual(set(oom), OOM_TRACE_KEYS)
        stats = ctorch.memory_stats(2)
        self.assertEqual(oom["device_free"],
                         stats["coop.capacity"] - stats["reserved_bytes.all.current"])
        self.assertEqual((oom["size"], oom["stream"]), (4 * GIB, 5))

    def test_check_oom_raises_a_failure_once_for_two_threads(self):
        """Two threads check one failure at once: one raises. The compare and
        the store were apart, so both could see it new and raise. Each
        look-up waits (up to 1 s) for the other thread's, which can only
        come if the compare and store are not one step."""
        self.assertIsNone(torch_malloc(4 * GIB, 2, 0))
        both_looked = threading.Barrier(2, timeout=1.0)

        class Seen(dict):
            def get(self, *args):
                value = super().get(*args)
                try:
                    both_looked.wait()
                except threading.BrokenBarrierError:
                    pass  # alone: the other thread waits for this one
                return value

        saved = ctorch._oom_seen
        ctorch._oom_seen = Seen(saved)
        raised = []

        def check():
            try:
                ctorch.check_oom(2)
            except ctorch.OutOfMemoryError as e:
                raised.append(e)

        try:
            threads = [threading.Thread(target=check) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            saved.update(ctorch._oom_seen)
            ctorch._oom_seen = saved
        self.assertEqual(len(raised), 1, raised)
        self.assertIn("device 2", str(raised[0]))
        ctorch.check_oom(2)  # reported: no raise

    def test_eight_threads(self):
        errors = []
        live_lock = threading.Lock()
        live = {}  # (device, address) -> size

        def worker(index):
            rng = random.Random(SEED * 31 + index)
            mine = []
            try:
                for _ in range(1500):
                    if mine and rng.random() < 0.5:
                        p, size, device, stream = mine.pop(rng.randrange(len(mine)))
                        with live_lock:
                            del live[(device, p)]
                        torch_free(p, size, device, stream)
                    else:
                        device = rng.randrange(4)
                        size = rng.randrange(1, 256 * 1024)
                        stream = index  # each thread its own stream
                        p = torch_malloc(size, device, stream)
                        if p is None:
                            errors.append(ctorch.last_error())
                            return
                        with live_lock:
                            for (d, a), s in live.items():
                                if d == device and a < p + size and p < a + s:
                                    errors.append(f"overlap {a:#x}+{s} / {p:#x}+{size}")
                            live[(device, p)] = size
                        mine.append((p, size, device, stream))
                for p, size, device, stream in mine:
                    with live_lock:
                        del live[(device, p)]
                    torch_free(p, size, device, stream)
            except Exception as e:  # reported below, not swallowed
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for d in range(4):
            native.check(pool(d))

    def test_forget_stream(self):
        p = torch_malloc(1 * MIB, 2, 9)
        with self.assertRaises(native.CoopError) as refused:
            ctorch.forget_stream(9)
        self.assertIn("1 live blocks", str(refused.exception))
        torch_free(p, 1 * MIB, 2, 9)
        on_9 = [b for _, bs in native.walk(pool(2)) for b in bs
                if b["state"] == native.BLOCK_FREE and b["stream"] == 9]
        self.assertTrue(on_9)
        ctorch.forget_stream(9)
        on_9 = [b for _, bs in native.walk(pool(2)) for b in bs
                if b["state"] == native.BLOCK_FREE and b["stream"] == 9]
        self.assertEqual(on_9, [])

        class ExternalStream:
            cuda_stream = 9

        ctorch.forget_stream(ExternalStream())
        for bad in (None, "9", 9.0):
            with self.assertRaises(TypeError) as cm:
                ctorch.forget_stream(bad)
            self.assertIn("coop.torch.forget_stream", str(cm.exception))

    def test_walk_binding_matches_stats(self):
        p = torch_malloc(3 * MIB, 0, 0)
        q = torch_malloc(5000, 0, 1)
        walked = native.walk(pool(0))
        blocks = [b for _, bs in walked for b in bs]
        allocated = [b for b in blocks if b["state"] == native.BLOCK_ALLOCATED]
        stats = native.stats(pool(0))
        self.assertEqual(len(allocated), stats.allocation.current)
        self.assertEqual(sum(b["size"] for b in allocated), stats.allocated_bytes.current)
        self.assertEqual(sum(b["requested_size"] for b in allocated),
                         stats.requested_bytes.current)
        self.assertIn(p, [b["address"] for b in allocated])
        self.assertIn((q, 5120, 5000), [(b["address"], b["size"], b["requested_size"])
                                        for b in allocated])
        addresses = [b["address"] for b in blocks]
        self.assertEqual(addresses, sorted(addresses))
        torch_free(p, 3 * MIB, 0, 0)
        torch_free(q, 5000, 0, 1)

    def test_walk_segments_and_mapped_bytes(self):
        """Each walked segment's num_blocks is its block count; allocated
        blocks are mapped whole, and a free block whose pages empty_cache
        unmapped has fewer mapped bytes than its size."""
        p = torch_malloc(4 * MIB, 0, 0)
        q = torch_malloc(4 * MIB, 0, 0)
        torch_free(p, 4 * MIB, 0, 0)
        torch_reset()
        try:
            walked = native.walk(pool(0))
            for seg, blocks in walked:
                self.assertEqual(seg["num_blocks"], len(blocks))
            blocks = [b for _, bs in walked for b in bs]
            self.assertTrue(any(b["mapped_bytes"] < b["size"] for b in blocks
                                if b["state"] == native.BLOCK_FREE))
            for b in blocks:
                if b["state"] == native.BLOCK_ALLOCATED:
                    self.assertEqual(b["mapped_bytes"], b["size"])
        finally:
            torch_free(q, 4 * MIB, 0, 0)

    def test_bindings_raise_what_the_library_refuses(self):
        """check and walk of no pool, and a snapshot of no device, raise
        CoopError with the library's status and message."""
        for fn, name in ((native.check, "coop_pool_check"), (native.walk, "coop_walk")):
            with self.assertRaises(native.CoopError) as cm:
                fn(None)
            self.assertEqual(cm.exception.status, native.ERR_INVALID)
            self.assertIn(name, str(cm.exception))
        with self.assertRaises(native.CoopError) as cm:
            ctorch._take(-1)
        self.assertEqual(cm.exception.status, native.ERR_INVALID)

    def test_memory_stats_report_the_large_pool_only(self):
        """coop has one pool a device: its counters are under "all" and
        "large_pool", the small pool's stay 0; max_split_size is -1 (none)."""
        p = torch_malloc(1 * MIB, 0, 0)
        try:
            s = ctorch.memory_stats(0)
            for metric in ("current", "peak", "allocated"):
                self.assertGreater(s[f"allocation.all.{metric}"], 0)
                self.assertEqual(s[f"allocation.large_pool.{metric}"],
                                 s[f"allocation.all.{metric}"])
                self.assertEqual(s[f"allocation.small_pool.{metric}"], 0)
                self.assertEqual(s[f"allocated_bytes.small_pool.{metric}"], 0)
            self.assertEqual(s["max_split_size"], -1)
        finally:
            torch_free(p, 1 * MIB, 0, 0)

    def test_map_bytes_count_every_mapping(self):
        """coop.map_bytes is the pool's map_bytes, every byte ever mapped:
        memory mapped again after empty_cache counts again, so it passes the
        peak of reserved bytes."""
        p = torch_malloc(4 * MIB, 2, 0)
        torch_free(p, 4 * MIB, 2, 0)
        torch_reset()
        p = torch_malloc(4 * MIB, 2, 0)
        try:
            s = ctorch.memory_stats(2)
            self.assertEqual(s["coop.map_bytes"], native.stats(pool(2)).map_bytes)
            self.assertGreaterEqual(s["coop.map_bytes"], s["reserved_bytes.all.peak"] + 4 * MIB)
        finally:
            torch_free(p, 4 * MIB, 2, 0)

    def test_snapshots_are_freed(self):
        """_take gives the library's snapshot back (coop_torch_snapshot_free):
        200 snapshots of a pool of 100 blocks leave the C heap as it was."""
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "mallinfo2"):
            self.skipTest("no mallinfo2 (glibc 2.33 or later)")

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]

        libc.mallinfo2.restype = MallInfo2

        def in_use():
            m = libc.mallinfo2()
            return m.uordblks + m.hblkhd

        ptrs = [torch_malloc(4096, 1, 0) for _ in range(100)]
        try:
            ctorch._take(1)
            before = in_use()
            for _ in range(200):
                ctorch._take(1)
            grown = in_use() - before
        finally:
            for p in ptrs:
                torch_free(p, 4096, 1, 0)
        # a leak keeps at least the 100 blocks' records of each snapshot
        self.assertLess(grown, 200 * 100 * ctypes.sizeof(native.BlockInfo) // 4)

    def test_other_device_types_are_refused(self):
        class Device:  # a torch.device of another type
            type, index = "cpu", 0

        for bad in ("cpu:1", "meta:0", Device()):
            with self.assertRaises(ValueError, msg=repr(bad)):
                ctorch.memory_stats(bad)

    def test_strerror_gives_each_status_its_text(self):
        """native.strerror is coop_strerror's text as a str."""
        self.assertEqual(native.strerror(native.OK), "success")
        self.assertEqual(native.strerror(native.ERR_BUSY), "object is in use")
        self.assertEqual(native.strerror(native.ERR_BUSY + 1), "unknown status")

    def test_last_error_binding_returns_the_length(self):
        """native's coop_torch_last_error returns the message's length, so that
        a caller can size its buffer (asking with none)."""
        self.assertIsNone(torch_malloc(16, 99, 0))
        text = ctorch.last_error()
        self.assertIn("device 99", text)
        self.assertEqual(native.library().coop_torch_last_error(None, 0), len(text.encode()))

    def test_forget_stream_takes_every_pointer_value(self):
        ctorch.forget_stream(1 << 63)  # no stream of coop's: nothing to do
        with self.assertRaises(ValueError):
            ctorch.forget_stream(1 << 64)


# Format facts of ../shared/workloads/README.md (torch.cuda.memory._snapshot()).
SEGMENT_KEYS = {"address", "total_size", "allocated_size", "stream", "segment_type", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state"}
TRACE_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
# torch's snapshot writes device_free instead of addr for oom entries
# (memory_snapshot.cpp); torch 2.x's _memory_viz.trace() and MemoryViz.js read it
OOM_TRACE_KEYS = {"action", "device_free", "size", "stream", "time_us", "frames"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}
PLAIN = (dict, list, tuple, str, int, float, bool, type(None))


def assert_plain(test, obj, where="snapshot"):
    test.assertIsInstance(obj, PLAIN, where)
    if isinstance(obj, dict):
        for k, v in obj.items():
            test.assertIsInstance(k, str, where)
            assert_plain(test, v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            assert_plain(test, v, f"{where}[{i}]")


def training_like_sequence(rng, devices=(0, 1)):
    """Parameters that live on, activations freed in reverse, gradients,
    an optimizer state; a few steps. Leaves the parameters allocated."""
    kept = []
    for device in devices:
        params = [(torch_malloc(s, device, 0), s, device, 0)
                  for s in (rng.randrange(1, 4 * MIB) for _ in range(20))]
        kept += params
        for step in range(3):
            acts = [(torch_malloc(s, device, 0), s, device, 0)
                    for s in (rng.randrange(1, 2 * MIB) for _ in range(40))]
            grads = [(torch_malloc(s, device, 1), s, device, 1) for _, s, _, _ in params[:10]]
            for a in reversed(acts):
                torch_free(*a)
            for g in grads:
                torch_free(*g)
    return kept


class Layout(unittest.TestCase):
    """native.py's ctypes mirrors match coop.h, field for field (offsets and
    sizes as tests/ctypes_layout prints them, compiled from coop.h), and so
    do its copies of coop.h's enumerators."""

    MIRRORS = {
        "coop_stat": native.Stat,
        "coop_stats": native.Stats,
        "coop_block_info": native.BlockInfo,
        "coop_segment_info": native.SegmentInfo,
        "coop_config": native.Config,
        "coop_torch_event": native.TorchEvent,
        "coop_torch_range": native.TorchRange,
        "coop_torch_snapshot": native.TorchSnapshot,
    }

    def test_mirrors_match_coop_h(self):
        program = os.environ.get("COOP_LAYOUT_PROGRAM")
        if not program or not os.path.exists(program):
            self.skipTest("COOP_LAYOUT_PROGRAM (tests/ctypes_layout) is not built")
        sizes, fields, values = {}, {}, {}
        for line in subprocess.run([program], check=True, capture_output=True,
                                   text=True).stdout.splitlines():
            name, *rest = line.split()
            if rest[0] == "size":
                sizes[name] = int(rest[1])
            elif rest[0] == "value":
                values[name] = int(rest[1])
            else:
                struct, field = name.split(".")
                fields.setdefault(struct, {})[field] = (int(rest[0]), int(rest[1]))
        self.assertEqual(set(sizes), set(self.MIRRORS))
        for struct, cls in self.MIRRORS.items():
            with self.subTest(struct=struct):
                got = {name: (getattr(cls, name).offset, getattr(cls, name).size)
                       for name, _ in cls._fields_}
                self.assertEqual(got, fields[struct])
                self.assertEqual(ctypes.sizeof(cls), sizes[struct])
        # COOP_OK -> native.OK, COOP_ERR_BUSY -> native.ERR_BUSY, COOP_BLOCK_* alike;
        # COOP_TORCH_FREE_REQUESTED -> TORCH_ACTIONS[1] == "free_requested"
        self.assertEqual(len(values), 19)
        for name, value in values.items():
            short = name[len("COOP_"):]
            with self.subTest(enumerator=name):
                if short.startswith("TORCH_"):
                    self.assertEqual(native.TORCH_ACTIONS[value], short[len("TORCH_"):].lower())
                else:
                    self.assertEqual(getattr(native, short), value)
        self.assertEqual(len(native.TORCH_ACTIONS), 4)


class Snapshot(unittest.TestCase):
    def setUp(self):
        rng = random.Random(SEED + 1)
        ctorch.record_history(100000, clear_history=True)
        self.kept = training_like_sequence(rng)
        torch_reset()
        self.snap = ctorch.snapshot()

    def tearDown(self):
        for b in self.kept:
            torch_free(*b)

    def test_format_facts(self):
        snap = self.snap
        self.assertTrue({"segments", "device_traces", "allocator_settings"} <= set(snap))
        assert_plain(self, snap)
        self.assertGreater(len(snap["segments"]), 0)
        for seg in snap["segments"]:
            self.assertTrue(SEGMENT_KEYS <= set(seg), set(seg))
            self.assertEqual(sum(b["size"] for b in seg["blocks"]), seg["total_size"])
            self.assertEqual(seg["blocks"][0]["address"], seg["address"])
            addr = seg["address"]
            for b in seg["blocks"]:
                self.assertTrue(BLOCK_KEYS <= set(b))
                self.assertEqual(b["address"], addr, "blocks must tile the segment")
                addr += b["size"]
                self.assertIn(b["state"], ("active_allocated", "active_pending_free", "inactive"))
                if b["state"] == "active_allocated":
                    self.assertLessEqual(b["requested_size"], b["size"])
            self.assertEqual(seg["allocated_size"],
                             sum(b["size"] for b in seg["blocks"]
                                 if b["state"] == "active_allocated"))
        # every allocated block of coop's pools appears, and nothing else
        for device in (0, 1):
            stats = ctorch.memory_stats(device)
            allocated = sum(b["size"] for s in snap["segments"] if s["device"] == device
                            for b in s["blocks"] if b["state"] == "active_allocated")
            self.assertEqual(allocated, stats["allocated_bytes.all.current"])
            self.assertEqual(sum(s["total_size"] for s in snap["segments"]
                                 if s["device"] == device),
                             stats["reserved_bytes.all.current"])

    def test_device_traces(self):
        traces = self.snap["device_traces"]
        self.assertGreaterEqual(len(traces), 2)
        live = {}
        for device, trace in enumerate(traces[:2]):
            self.assertGreater(len(trace), 0)
            times = [e["time_us"] for e in trace]
            self.assertEqual(times, sorted(times))
            for e in trace:
                self.assertEqual(set(e), OOM_TRACE_KEYS if e["action"] == "oom" else TRACE_KEYS)
                self.assertIn(e["action"], ACTIONS)
                key = (device, e["addr"])
                if e["action"] == "alloc":
                    live[key] = e["size"]
                elif e["action"] == "free_completed" and key in live:
                    self.assertEqual(live.pop(key), e["size"], "free size = alloc size")
        kept = {(d, p): s for p, s, d, _ in self.kept}
        self.assertEqual({k: v for k, v in live.items() if k in kept}, kept)

    def test_pickle_round_trip(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"coop_snapshot_{os.getpid()}.pickle")
        ctorch.dump_snapshot(path)
        try:
            with open(path, "rb") as f:
                data = pickle.load(f)
        finally:
            os.unlink(path)
        self.assertEqual(len(data["segments"]), len(self.snap["segments"]))

    def test_failed_dump_leaves_the_file_as_it_was(self):
        """dump_snapshot() whose snapshot fails (here a library that cannot be
        loaded) raises and keeps the previous dump (it truncated it first)."""
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"coop_keep_{os.getpid()}.pickle")
        with open(path, "wb") as f:
            f.write(b"earlier dump")
        try:
            env = dict(os.environ, COOP_LIBRARY="/nonexistent/libcoop.so",
                       PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
            code = ("import coop.native as native, coop.torch as ctorch\n"
                    "try:\n    ctorch.dump_snapshot(%r)\n"
                    "except native.CoopError as e:\n    print('raised')\n" % path)
            r = python_child(code, env, timeout=60)
            self.assertEqual(r.stdout.strip(), "raised", r.stderr)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"earlier dump")
        finally:
            os.unlink(path)

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_torch_memory_viz_reads_it(self):
        segments = self.snap["segments"]
        stats = memory_viz.stats(segments)  # asserts blocks add up to total_size
        self.assertEqual(stats["segments"], len(segments))
        self.assertEqual(stats["total_size"].value, sum(s["total_size"] for s in segments))
        self.assertEqual(stats["active_allocated"].value,
                         sum(ctorch.memory_stats(d)["allocated_bytes.all.current"]
                             for d in (0, 1)))
        # segments() and memory() produce flamegraph input; keep it (no download)
        lines = memory_viz.segments(segments, format_flamegraph=lambda text: text)
        self.assertEqual(len(lines.splitlines()), sum(len(s["blocks"]) for s in segments))
        self.assertIn("active_allocated", lines)
        mem = memory_viz.memory(segments, format_flamegraph=lambda text: text)
        total = sum(int(line.rsplit(" ", 1)[1]) for line in mem.splitlines())
        self.assertEqual(total, stats["total_size"].value)


# Checks, after each step of a random alloc / free / empty_cache sequence
# (several streams, so free blocks of different streams do not merge), that
# the snapshot's segments add up to reserved bytes, that blocks tile each
# segment, that active_allocated blocks add up to allocated bytes and that
# segments do not overlap. Prints "ok" or the first problems.
SNAPSHOT_FUZZ = """
import random
rng = random.Random(%d)
live, problems = [], []
for rnd in range(%d):
    for _ in range(rng.randrange(1, 40)):
        if live and rng.random() < 0.45:
            p, size, stream = live.pop(rng.randrange(len(live)))
            lib.coop_torch_free(p, size, 0, stream)
        else:
            size = rng.choice([512, 4096, 100000, 1 << 20, 3 << 20, rng.randrange(1, 16 << 20)])
            stream = rng.randrange(3)
            p = lib.coop_torch_malloc(size, 0, stream)
            if p:
                live.append((p, size, stream))
    if rng.random() < 0.2:
        lib.coop_torch_empty_cache()
    segs = [s for s in ctorch.snapshot()["segments"] if s["device"] == 0]
    stats = ctorch.memory_stats(0)
    for seg in segs:
        at = seg["address"]
        for b in seg["blocks"]:
            if b["address"] != at:
                problems.append(f"round {rnd}: blocks do not tile segment {seg['address']:#x}")
            at += b["size"]
        if at - seg["address"] != seg["total_size"]:
            problems.append(f"round {rnd}: blocks do not add up to total_size")
    total = sum(s["total_size"] for s in segs)
    if total != stats["reserved_bytes.all.current"]:
        problems.append(f"round {rnd}: segments {total} != reserved "
                        f"{stats['reserved_bytes.all.current']}")
    allocated = sum(b["size"] for s in segs for b in s["blocks"]
                    if b["state"] == "active_allocated")
    if allocated != stats["allocated_bytes.all.current"]:
        problems.append(f"round {rnd}: active_allocated {allocated} != allocated "
                        f"{stats['allocated_bytes.all.current']}")
    spans = sorted((s["address"], s["address"] + s["total_size"]) for s in segs)
    if any(b0 < e0 for (_, e0), (b0, _) in zip(spans, spans[1:])):
        problems.append(f"round {rnd}: segments overlap")
    if len(problems) > 3:
        break
print("ok" if not problems else "; ".join(problems[:4]))
"""


class SkipPeriods(unittest.TestCase):
    def test_a_period_starts_at_its_own_microsecond(self):
        """An event recorded in the microsecond a skip_actions period began
        is that period's (its start is read before recording starts), one
        before it the period's before."""
        periods = [(100, frozenset()), (200, frozenset({"free_requested"}))]

        def freed(t):
            return {"time_us": t, "action": "free_requested"}
        self.assertFalse(ctorch._skipped(freed(99), periods))
        self.assertFalse(ctorch._skipped(freed(199), periods))
        self.assertTrue(ctorch._skipped(freed(200), periods))
        self.assertTrue(ctorch._skipped(freed(201), periods))
        self.assertFalse(ctorch._skipped({"time_us": 200, "action": "alloc"}, periods))


class SnapshotSegments(unittest.TestCase):
    """Snapshot segments against reserved bytes, in processes of their own
    (a configuration each)."""

    def test_free_block_mapped_inside(self):
        """A free block whose only mapped page is inside it (a block freed,
        its pages unmapped by empty_cache, a small allocation there mapping
        one page, freed again): the segment holds that page, not the whole
        free block's unmapped pages."""
        r = run_child(
            "a = lib.coop_torch_malloc(4 << 20, 0, None)\n"
            "b = lib.coop_torch_malloc(6 << 20, 0, None)\n"
            "c = lib.coop_torch_malloc(4 << 20, 0, None)\n"
            "lib.coop_torch_free(b, 6 << 20, 0, None)\n"
            "lib.coop_torch_empty_cache()\n"
            "d = lib.coop_torch_malloc(1 << 20, 0, None)\n"
            "lib.coop_torch_free(d, 1 << 20, 0, None)\n"
            "segs = ctorch.snapshot()['segments']\n"
            "print(ctorch.memory_stats(0)['reserved_bytes.all.current'],\n"
            "      sum(s['total_size'] for s in segs))\n"
            "print(' '.join('%d+%d' % (s['address'] - a, s['total_size']) for s in segs))\n"
            "print(' '.join('%d' % len(s['blocks']) for s in segs),\n"
            "      min(b['size'] for s in segs for b in s['blocks']))\n",
            "backend:host,capacity:256M,page:2M")
        self.assertEqual(r.returncode, 0, r.stderr)
        reserved, total = r.stdout.splitlines()[0].split()
        self.assertEqual(total, reserved, r.stdout)
        self.assertEqual(reserved, str(10 << 20))
        # a, then the mapped page of the free block (d's), then c
        self.assertEqual(r.stdout.splitlines()[1].split(),
                         [f"0+{6 << 20}", f"{10 << 20}+{4 << 20}"])
        # a: a and the free page; c: c alone (b, which ends where c's run
        # starts, gives it no empty piece)
        self.assertEqual(r.stdout.splitlines()[2].split(), ["2", "1", str(2 << 20)])

    def test_pending_blocks_devices_and_expandable(self):
        """A block freed while another stream still uses it is active but not
        allocated; its segment keeps the block's stream (5) and, as every
        coop segment, is "large"; every device up to the highest with a pool
        has its trace list; VMM pools are expandable segments, and the
        settings say so."""
        r = run_child(
            "lib.coop_host_hold_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_bool]\n"
            "p = lib.coop_torch_malloc(2 << 20, 0, ctypes.c_void_p(5))\n"
            "q = lib.coop_torch_malloc(2 << 20, 2, None)\n"
            "assert lib.coop_host_hold_stream(lib.coop_torch_pool(0), 7, True) == 0\n"
            "lib.coop_torch_record_stream(p, ctypes.c_void_p(7))\n"
            "lib.coop_torch_free(p, 2 << 20, 0, ctypes.c_void_p(5))\n"
            "snap = ctorch.snapshot()\n"
            "seg = [s for s in snap['segments'] if s['device'] == 0][0]\n"
            "print([b['state'] for b in seg['blocks']][0], seg['allocated_size'],\n"
            "      seg['active_size'], seg['is_expandable'], seg['stream'], seg['segment_type'])\n"
            "print(len(snap['device_traces']), sorted({s['device'] for s in snap['segments']}),\n"
            "      snap['allocator_settings']['expandable_segments'])\n"
            "lib.coop_host_hold_stream(lib.coop_torch_pool(0), 7, False)\n"
            "lib.coop_torch_free(q, 2 << 20, 2, None)\n",
            "backend:host,capacity:256M,page:2M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         [f"active_pending_free 0 {2 << 20} True 5 large", "3 [0, 2] True"])

    def test_coop_convert_reads_a_dump_of_blocks_on_two_streams(self):
        """coop convert reads what dump_snapshot writes, where one segment
        (a run of mapped pages) holds blocks of two streams: PyTorch's
        segments have one stream, and each block was read as on the
        segment's, so a block the trace allocated on the other stream was
        taken for another one overlapping it."""
        program = os.environ.get("COOP_PROGRAM")
        if not program or not os.path.exists(program):
            self.skipTest("COOP_PROGRAM (the coop program) is not built")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.pickle")
            r = run_child(
                "ctorch.record_history(1000, clear_history=True)\n"
                "p = [lib.coop_torch_malloc(1 << 20, 0, ctypes.c_void_p(s)) for s in (0, 5, 0, 5)]\n"
                "lib.coop_torch_free(p[2], 1 << 20, 0, None)\n"
                "seg = ctorch.snapshot()['segments']\n"
                "print(len(seg), sorted({b['address'] - seg[0]['address'] for s in seg\n"
                "                        for b in s['blocks'] if b['state'] != 'inactive'}))\n"
                "ctorch.dump_snapshot(%r)\n" % path,
                "backend:host,capacity:64M,page:2M")
            self.assertEqual(r.returncode, 0, r.stderr)
            # one segment: the blocks of both streams side by side
            self.assertEqual(r.stdout.split(), ["1", "[0,", f"{1 << 20},", f"{3 << 20}]"])
            c = subprocess.run([program, "convert", path, path + ".trace"], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(c.returncode, 0, c.stderr)
            with open(path + ".trace") as f:
                text = f.read()
            # the allocations, each on its stream
            streams = [int(line.split()[3]) for line in text.splitlines() if line.startswith("A ")]
            self.assertEqual(streams, [0, 5, 0, 5], text)

    def test_segments_add_up_to_reserved_bytes(self):
        for conf in ("page:2M", "page:64K", "page:2M,vmm:false"):
            with self.subTest(conf=conf):
                r = run_child(SNAPSHOT_FUZZ % (SEED, 300), "backend:host,capacity:512M," + conf)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.strip(), "ok", f"seed {SEED}")


class Configuration(unittest.TestCase):
    """Each case in its own process: the configuration is read once."""

    def test_unknown_key_is_reported_once_and_malloc_returns_null(self):
        r = run_child("for _ in range(3): assert lib.coop_torch_malloc(64, 0, None) is None\n"
                      "print(ctorch.last_error())\n", "backend:host,colour:red")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("unknown key 'colour'", r.stdout)
        self.assertEqual(r.stderr.count("unknown key 'colour'"), 1, r.stderr)

    def test_bad_value_names_key_and_value(self):
        r = run_child("assert lib.coop_torch_malloc(64, 0, None) is None\n"
                      "print(ctorch.last_error())\n", "backend:host,capacity:12Q")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("'12Q'", r.stdout)
        self.assertIn("'capacity'", r.stdout)

    def test_python_helper_raises_on_bad_conf(self):
        r = run_child("try:\n    ctorch._configure(lib, 'vmm:sometimes')\n"
                      "except ctorch.CoopConfigError as e:\n    print('raised', e)\n",
                      "backend:host")
        self.assertIn("raised COOP_ALLOC_CONF: bad value 'sometimes' for key 'vmm'", r.stdout,
                      r.stderr)

    def test_install_raises_on_a_bad_coop_alloc_conf(self):
        """install() with no conf checks COOP_ALLOC_CONF before torch gets the
        allocator: a key that does not parse raises CoopConfigError naming it,
        and torch's allocator stays as it was."""
        # test_torch_abi's import sets COOP_ALLOC_CONF: the bad one is set after it
        r = run_child("import os\n"
                      "sys.path.insert(0, %r)\n"
                      "from test_torch_abi import FakeTorch\n"
                      "os.environ['COOP_ALLOC_CONF'] = 'backend:host,colour:red'\n"
                      "fake = FakeTorch()\n"
                      "try:\n    ctorch.install(torch_module=fake)\n"
                      "except ctorch.CoopConfigError as e:\n    print('raised', e)\n"
                      "print(ctorch.installed(), fake.calls)\n" % HERE, "backend:host")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised COOP_ALLOC_CONF: unknown key 'colour'", r.stdout)
        self.assertEqual(r.stdout.splitlines()[-1], "None []")

    def test_snapshot_raises_on_bad_conf(self):
        """snapshot() names a COOP_ALLOC_CONF that does not parse; it used to
        drop the status and put the error text among the settings."""
        r = run_child("try:\n    ctorch.snapshot()\n"
                      "except ctorch.CoopConfigError as e:\n    print('raised', e)\n"
                      "else:\n    print('no error')\n", "backend:host,colour:red")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised", r.stdout)
        self.assertIn("unknown key 'colour'", r.stdout)

    def test_settings_names_the_configuration_or_raises(self):
        r = run_child("print(ctorch.settings())\n", "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("capacity", r.stdout)
        self.assertIn("67108864", r.stdout)
        r = run_child("try:\n    ctorch.settings()\n"
                      "except ctorch.CoopConfigError as e:\n    print('raised', e)\n"
                      "else:\n    print('no error')\n", "backend:host,colour:red")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised", r.stdout)
        self.assertIn("unknown key 'colour'", r.stdout)

    def test_no_cuda_driver_fails_cleanly(self):
        r = run_child("assert lib.coop_torch_malloc(64, 0, None) is None\n"
                      "print(ctorch.last_error())\n", "backend:cuda",
                      {"COOP_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue("no CUDA driver" in r.stdout or "without CUDA" in r.stdout, r.stdout)

    def test_init_limits_devices(self):
        r = run_child("lib.coop_torch_init(2)\n"
                      "assert lib.coop_torch_malloc(64, 1, None)\n"
                      "assert lib.coop_torch_malloc(64, 2, None) is None\n"
                      "print(ctorch.last_error())\n", "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("devices are 0..1", r.stdout)

    def test_fraction_key_and_pending_hook(self):
        r = run_child("lib.coop_torch_memory_fraction(0.5, 1)\n"
                      "assert lib.coop_torch_malloc(64, 0, None)\n"
                      "assert lib.coop_torch_malloc(64, 1, None)\n"
                      "print(ctorch.memory_stats(0)['coop.capacity'],"
                      " ctorch.memory_stats(1)['coop.capacity'])\n",
                      "backend:host,fraction:0.25,page:2M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(20 * GIB), str(40 * GIB)])

    def test_rejected_configuration_keeps_the_one_in_force(self):
        r = run_child("ctorch._configure(lib, 'backend:host,capacity:64M')\n"
                      "try:\n    ctorch._configure(lib, 'backend:host,capacity:12Q')\n"
                      "except ctorch.CoopConfigError as e:\n    print('raised', e)\n"
                      "assert lib.coop_torch_malloc(4096, 0, None)\n"
                      "print(ctorch.memory_stats(0)['coop.capacity'])\n", "backend:host")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.splitlines()
        self.assertIn("'12Q'", out[0])
        self.assertEqual(out[1], str(64 * MIB))

    def test_check_oom_raises_for_a_pool_that_cannot_be_made(self):
        """min_split above the page parses but no pool can be made: every
        malloc fails (device 1's here: .device names it), and check_oom says
        why (no pool has a num_ooms), as an AllocationError with the status,
        not an out-of-memory (it was OutOfMemoryError for any failure)."""
        r = run_child("assert lib.coop_torch_malloc(64, 1, None) is None\n"
                      "try:\n    ctorch.check_oom()\n"
                      "except ctorch.OutOfMemoryError as e:\n    print('oom', e)\n"
                      "except ctorch.AllocationError as e:\n"
                      "    print('raised', e.status, e.device, isinstance(e, native.CoopError), e)\n"
                      "ctorch.check_oom()  # once per failure\n"
                      "print('quiet')\n", "backend:host,page:2M,min_split:4M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised %d 1 True coop: allocation failed on device 1:" % native.ERR_INVALID,
                      r.stdout)
        self.assertIn("min_split", r.stdout)
        self.assertNotIn("oom", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("quiet"), r.stdout)

    def test_check_oom_raises_address_space_for_a_pool_apart_from_out_of_memory(self):
        """A pool whose address space cannot be reserved (RLIMIT_AS below
        the 4 x capacity it reserves): coop_pool_create's COOP_ERR_NOMEM is
        no out-of-memory a caller can retry (the device has no pool, so no
        tensor of coop's to free): the ABI records COOP_ERR_BACKEND and
        check_oom raises AllocationError (it was OutOfMemoryError)."""
        r = run_child("import resource\n"
                      "vm = [int(l.split()[1]) for l in open('/proc/self/status')\n"
                      "      if l.startswith('VmSize:')][0] * 1024\n"
                      "resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 30), resource.RLIM_INFINITY))\n"
                      "assert lib.coop_torch_malloc(64, 0, None) is None\n"
                      "try:\n    ctorch.check_oom()\n"
                      "except ctorch.OutOfMemoryError as e:\n    print('oom', e)\n"
                      "except ctorch.AllocationError as e:\n    print('raised', e.status, e)\n"
                      # the limit lifted: the pool is made, and its first real
                      # out-of-memory is still printed (rev37-J: the refused
                      # reservation used up the one 'out of memory' print)
                      "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)\n"
                      "assert lib.coop_torch_malloc(32 << 30, 0, None) is None\n",
                      "backend:host,capacity:16G")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised %d coop: allocation failed on device 0:" % native.ERR_BACKEND,
                      r.stdout)
        self.assertIn("address space", r.stdout)
        self.assertNotIn("oom", r.stdout)
        self.assertIn("coop: coop torch: malloc of 34359738368 bytes on device 0:", r.stderr)

    def test_check_oom_raises_no_driver_apart_from_out_of_memory(self):
        """The CUDA backend where no driver loads: the malloc fails with
        COOP_ERR_NO_DRIVER, which check_oom raises as AllocationError (it
        was OutOfMemoryError, caught by code that retries with a smaller
        batch); AllocationError is no OutOfMemoryError."""
        r = run_child("assert lib.coop_torch_malloc(64, 0, None) is None\n"
                      "try:\n    ctorch.check_oom()\n"
                      "except ctorch.OutOfMemoryError as e:\n    print('oom', e)\n"
                      "except ctorch.AllocationError as e:\n    print('raised', e.status, e)\n"
                      "print(issubclass(ctorch.AllocationError, ctorch.OutOfMemoryError))\n",
                      "backend:cuda", {"COOP_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised %d coop: allocation failed on device 0:" % native.ERR_NO_DRIVER,
                      r.stdout)
        self.assertIn("no CUDA driver", r.stdout)
        self.assertEqual(r.stdout.splitlines()[-1], "False")

    def test_record_memory_history_bounds(self):
        """_record_memory_history's bounds as the settings show them: 100000
        by default, at least 1, the other form's name taken, a negative
        bound refused; enabled False stops recording."""
        r = run_child(
            "record = ctorch._record_history_compat\n"
            "def bound():\n"
            "    return [kv for kv in ctorch.settings().split(',') if kv.startswith('history:')][0]\n"
            "out = []\n"
            "record('all', max_entries=7); out.append(bound())\n"
            "record('all'); out.append(bound())\n"
            "record('all', max_entries=0); out.append(bound())\n"
            "record('all', trace_alloc_max_entries=9); out.append(bound())\n"
            "record(True, max_entries=11); out.append(bound())\n"
            "try:\n"
            "    record('all', max_entries=-1)\n"
            "except ValueError:\n"
            "    out.append('refused')\n"
            "record(False)\n"
            "lib.coop_torch_free(lib.coop_torch_malloc(512, 0, None), 512, 0, None)\n"
            "out.append(len(ctorch.snapshot()['device_traces'][0]))\n"
            "print(*out)\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["history:7", "history:100000", "history:1", "history:9",
                                            "history:11", "refused", "0"])

    def test_refused_install_then_install(self):
        """After torch refused install(): conf None puts back nothing (a
        COOP_ALLOC_CONF changed since is not read again), and the conf of a
        refused install(conf) is applied by the next install(conf)."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "import os\n"
            "def capacity():\n"
            "    return [kv for kv in ctorch.settings().split(',') if kv.startswith('capacity:')][0]\n"
            "print(capacity())\n"
            "os.environ['COOP_ALLOC_CONF'] = 'backend:host,capacity:5G'\n"
            "try:\n"
            "    ctorch.install(torch_module=FakeTorch(refuse=True), patch=False)\n"
            "except RuntimeError:\n"
            "    print(capacity())\n"
            "try:\n"
            "    ctorch.install('backend:host,capacity:2G', torch_module=FakeTorch(refuse=True),\n"
            "                   patch=False)\n"
            "except RuntimeError:\n"
            "    print(capacity())\n"
            "ctorch.install('backend:host,capacity:2G', torch_module=FakeTorch(), patch=False)\n"
            "print(capacity())\n" % HERE, "backend:host,capacity:1G")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [f"capacity:{1 << 30}", f"capacity:{1 << 30}",
                                            f"capacity:{5 << 30}", f"capacity:{2 << 30}"])

    def test_install_tells_coop_the_device_count(self):
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "ctorch.install(torch_module=FakeTorch(), patch=False)  # 2 devices\n"
            "p = lib.coop_torch_malloc(64, 1, None)\n"
            "print(p is not None, lib.coop_torch_malloc(64, 2, None) is None)\n"
            "lib.coop_torch_free(p, 64, 1, None)\n" % HERE, "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["True", "True"])

    def test_a_device_count_past_the_slots_keeps_the_slots_bound(self):
        """torch counting more devices than the ABI's 64 slots: init refuses
        the count, and device indices stay bounded by the slots, not by it."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "fake.cuda.device_count = lambda: 100\n"
            "ctorch.install(torch_module=fake, patch=False)\n"
            "try:\n"
            "    ctorch._device_index(70)\n"
            "    print('accepted')\n"
            "except ctorch.DeviceError as e:\n"
            "    print('refused', '64 device slots' in str(e))\n" % HERE,
            "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["refused", "True"])

    def test_reset_accumulated_counts_frees_too(self):
        r = run_child(
            "p = lib.coop_torch_malloc(4 << 20, 0, None)\n"
            "lib.coop_torch_free(p, 4 << 20, 0, None)\n"
            "lib.coop_torch_empty_cache()\n"
            "s = ctorch.memory_stats(0)\n"
            "keys = ('allocation.all.freed', 'allocated_bytes.all.freed', 'num_device_free')\n"
            "print(*(s[k] > 0 for k in keys))\n"
            "ctorch.reset_accumulated_memory_stats(0)\n"
            "s = ctorch.memory_stats(0)\n"
            "print(*(s[k] for k in keys))\n", "backend:host,capacity:256M,page:2M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["True True True", "0 0 0"])

    def test_reset_peak_without_torch(self):
        """coop.torch.reset_peak_memory_stats(), as reset_accumulated: every
        peak becomes its current value, the cumulative counters stay."""
        r = run_child(
            "p = lib.coop_torch_malloc(4 << 20, 0, None)\n"
            "lib.coop_torch_free(p, 4 << 20, 0, None)\n"
            "s = ctorch.memory_stats(0)\n"
            "print(s['allocated_bytes.all.peak'], s['allocated_bytes.all.allocated'])\n"
            "ctorch.reset_peak_memory_stats('cuda:0')\n"
            "ctorch.reset_peak_memory_stats(5)  # no pool there: nothing\n"
            "s = ctorch.memory_stats(0)\n"
            "print(*(s[k + '.all.peak'] == s[k + '.all.current'] for k in native.STAT_NAMES))\n"
            "print(s['allocated_bytes.all.peak'], s['allocated_bytes.all.allocated'])\n",
            "backend:host,capacity:256M,page:2M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), [str(4 << 20)] * 2)
        self.assertEqual(lines[1].split(), ["True"] * 9)
        self.assertEqual(lines[2].split(), ["0", str(4 << 20)])

    def test_failed_mallocs_count_past_255(self):
        """The failure count is a uint64_t: 300 failures read as 300 (a
        narrower restype would wrap, and check_oom would miss failures)."""
        r = run_child(
            "for _ in range(300):\n"
            "    assert lib.coop_torch_malloc(1 << 40, 0, None) is None\n"
            "buf = ctypes.create_string_buffer(1024)\n"
            "print(lib.coop_torch_failed_mallocs(0, buf, len(buf)))\n", "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["300"])

    def test_check_oom_without_a_device_looks_at_every_device(self):
        r = run_child(
            "assert lib.coop_torch_malloc(1 << 40, 3, None) is None\n"
            "try:\n    ctorch.check_oom()\n"
            "except ctorch.OutOfMemoryError as e:\n    print('raised', e)\n",
            "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised coop: out of memory on device 3:", r.stdout)

    def test_check_oom_raises_out_of_memory_as_out_of_memory(self):
        """A real out-of-memory stays OutOfMemoryError, not AllocationError."""
        r = run_child(
            "assert lib.coop_torch_malloc(1 << 40, 0, None) is None\n"
            "try:\n    ctorch.check_oom(0)\n"
            "except ctorch.AllocationError as e:\n    print('other', e)\n"
            "except ctorch.OutOfMemoryError as e:\n    print('raised', e)\n",
            "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised coop: out of memory on device 0:", r.stdout)

    def test_check_oom_names_its_own_devices_failure(self):
        """An out-of-memory on device 1, then a double free on device 0: the
        message is device 1's, not the latest error of the process."""
        r = run_child("assert lib.coop_torch_malloc(1 << 40, 1, None) is None\n"
                      "p = lib.coop_torch_malloc(4096, 0, None)\n"
                      "lib.coop_torch_free(p, 4096, 0, None)\n"
                      "lib.coop_torch_free(p, 4096, 0, None)\n"
                      "try:\n    ctorch.check_oom(1)\n"
                      "except ctorch.OutOfMemoryError as e:\n    print('raised', e)\n",
                      "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("raised coop: out of memory on device 1:", r.stdout)
        self.assertNotIn("already freed", r.stdout)

    def test_wrong_types_and_values_are_refused_by_name(self):
        # a lone surrogate: an undecodable byte of the environment or the
        # command line (os.environ, sys.argv) raised UnicodeEncodeError,
        # which names neither coop nor the configuration
        for conf, error in ((b"backend:host", TypeError), (123, TypeError),
                            ("backend:host\0capacity:12Q", ValueError),
                            ("backend:host,capacity:\udcff", ValueError)):
            with self.subTest(conf=conf):
                with self.assertRaises(error) as cm:
                    ctorch._conf_bytes(conf)
                self.assertIn("configuration", str(cm.exception))
                self.assertNotIsInstance(cm.exception, UnicodeError)
        for entries, error in ((1.7, TypeError), ("12", TypeError), (-1, ValueError)):
            with self.subTest(max_entries=entries):
                with self.assertRaises(error):
                    ctorch.record_history(entries)
        with self.assertRaises(ValueError):
            ctorch._record_history_compat("all", None, "all", -3)
        with self.assertRaises(TypeError):
            ctorch._record_history_compat("all", max_entries=2.5)
        with self.assertRaises(ValueError) as cm:
            ctorch.forget_stream(1 << 64)
        self.assertIn("not a pointer", str(cm.exception))

    def test_device_indexes_outside_the_slots_are_refused(self):
        for bad in (2 ** 32, "cuda:4294967296", -1, 64):
            with self.subTest(device=bad):
                with self.assertRaises(ValueError) as cm:
                    ctorch.memory_stats(bad)
                self.assertIn("outside 0..63", str(cm.exception))
        self.assertEqual(ctorch._device_index(63), 63)

    def test_pool_handles_above_4_gib_pass_through_the_binding(self):
        """coop_torch_pool returns a pointer, not an int: with every malloc
        mmap'ed (handles high in the address space, as a PIE interpreter's
        heap gives them), the handle still reaches coop_get_stats."""
        env = dict(os.environ, COOP_ALLOC_CONF="backend:host,capacity:64M",
                   GLIBC_TUNABLES="glibc.malloc.mmap_threshold=0",
                   PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        # coop.native alone: torch's imports would use up the mappings a
        # process may have, and malloc would fall back to its heap
        code = ("import coop.native as native\n"
                "lib = native.library()\n"
                "p = lib.coop_torch_malloc(4096, 0, None)\n"
                "handle = lib.coop_torch_pool(0)\n"
                "print(handle > 1 << 32, native.stats(handle).allocation.current)\n"
                "lib.coop_torch_free(p, 4096, 0, None)\n")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["True", "1"])

    def test_configure_after_first_use_is_refused(self):
        r = run_child("assert lib.coop_torch_malloc(64, 0, None)\n"
                      "print(lib.coop_torch_configure(b'backend:host'))\n", "backend:host")
        self.assertEqual(r.stdout.strip(), str(native.ERR_BUSY), r.stderr)


class FakeTorch:
    """Just enough of the torch package for install() without a GPU."""

    def __init__(self, initialized=False, pluggable=True, refuse=False, cuda_build="12.8"):
        self.calls = []
        self.__version__ = "fake"
        self.version = type("version", (), {"cuda": cuda_build})()
        outer = self

        class Handle:
            def __getattr__(self, name):
                if name.startswith("set_"):
                    return lambda address: outer.calls.append((name, address))
                raise AttributeError(name)

        class Pluggable:
            def __init__(self, path, malloc, free):
                outer.calls.append(("CUDAPluggableAllocator", path, malloc, free))

            def allocator(self):
                return Handle()

        memory = type("memory", (), {})()
        if pluggable:
            memory.CUDAPluggableAllocator = Pluggable
            def change(allocator):
                if refuse:
                    raise RuntimeError("fake torch refuses the allocator")
                outer.calls.append(("change",))

            memory.change_current_allocator = change
        cuda = type("cuda", (), {})()
        cuda.memory = memory
        cuda.is_initialized = lambda: initialized
        cuda.device_count = lambda: 2
        self.cuda = cuda


# torch.cuda.memory's and torch.accelerator.memory's functions with the
# signatures of PyTorch's main branch as stored (torch/cuda/memory.py at
# 00b65a04, torch/accelerator/memory.py at 0726cc33; 2.11's are the same or a
# subset), for the replacements to copy. The readers torch builds on
# memory_stats call it through their module's globals, as torch's do; the
# functions coop replaces raise if they run.
_STAND_IN_CUDA_MEMORY = """
import sys
from inspect import signature


def _torch_own(*args, **kwargs):
    raise AssertionError("the stand-in's own function ran: coop did not replace it")


def memory_stats(device=None):
    _torch_own()


def memory_stats_as_nested_dict(device=None):
    _torch_own()


def reset_accumulated_memory_stats(device=None):
    _torch_own()


def reset_peak_memory_stats(device=None):
    _torch_own()


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


def mem_get_info(device=None):
    return (1, 2)


def empty_cache():
    pass


def memory_snapshot(mempool_id=None, include_traces=True):
    _torch_own()


def _snapshot(device=None, augment_with_fx_traces=False):
    _torch_own()


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    _torch_own()


def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                  trace_alloc_record_context=False, device=None,
                                  record_context_cpp=False, clear_history=False,
                                  compile_context=False, global_record_annotations=False,
                                  skip_actions=None, record_pinned_host_memory=False,
                                  record_cuda=True):
    _torch_own()


def _record_memory_history(enabled="all", *args, **kwargs):
    _torch_own()


def _record_memory_history_impl(enabled="all", context="all", stacks="all",
                                max_entries=sys.maxsize, device=None, clear_history=False,
                                compile_context=False, global_record_annotations=False,
                                skip_actions=None, record_pinned_host_memory=False,
                                record_cuda=True):
    _torch_own()


_record_memory_history.__signature__ = signature(_record_memory_history_impl)
"""

_STAND_IN_ACCELERATOR_MEMORY = """
def _torch_own(*args, **kwargs):
    raise AssertionError("the stand-in's own function ran: coop did not replace it")


def memory_stats(device_index=None, /):
    _torch_own()


def reset_accumulated_memory_stats(device_index=None, /):
    _torch_own()


def reset_peak_memory_stats(device_index=None, /):
    _torch_own()


def memory_allocated(device_index=None, /):
    return memory_stats(device_index).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device_index=None, /):
    return memory_stats(device_index).get("allocated_bytes.all.peak", 0)


def get_memory_info(device_index=None, /):
    return (1, 2)
"""

# torch.cuda's names for torch.cuda.memory's functions (torch re-exports them)
_STAND_IN_CUDA_NAMES = ("memory_stats", "memory_stats_as_nested_dict",
                        "reset_accumulated_memory_stats", "reset_peak_memory_stats",
                        "memory_allocated", "max_memory_allocated", "memory_reserved",
                        "mem_get_info", "empty_cache", "memory_snapshot")


def torch_stand_in():
    """A torch package with main-branch torch.cuda.memory and
    torch.accelerator.memory functions (no CUDA: is_available() is false,
    so None and "cuda" mean device 0), for patch_torch without torch 2.11."""
    import types

    def module(name, source):
        m = types.ModuleType(name)
        exec(compile(source, "<%s stand-in>" % name, "exec"), m.__dict__)
        return m

    memory = module("torch.cuda.memory", _STAND_IN_CUDA_MEMORY)
    cuda = types.ModuleType("torch.cuda")
    cuda.memory = memory
    for name in _STAND_IN_CUDA_NAMES:
        setattr(cuda, name, getattr(memory, name))
    cuda.is_available = lambda: False
    cuda.is_initialized = lambda: False
    cuda.device_count = lambda: 0

    class device:  # torch.cuda.device, the context manager
        def __init__(self, idx):
            self.idx = idx

    cuda.device = device
    accel_memory = module("torch.accelerator.memory", _STAND_IN_ACCELERATOR_MEMORY)
    accelerator = types.ModuleType("torch.accelerator")
    accelerator.memory = accel_memory
    for name in ("memory_stats", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
                 "memory_allocated", "max_memory_allocated", "get_memory_info"):
        setattr(accelerator, name, getattr(accel_memory, name))
    torch = types.ModuleType("torch")
    torch.__version__ = "stand-in"
    torch.cuda, torch.accelerator = cuda, accelerator
    return torch


def torch_copy(real):
    """The real torch's cuda (and accelerator, where it has one) as copies:
    patch_torch replaces functions in the copies and leaves the process's
    torch as it was; the copies hold torch's own functions."""
    import types

    def copy(module):
        c = types.ModuleType(module.__name__)
        c.__dict__.update(vars(module))
        return c

    cuda = copy(real.cuda)
    cuda.memory = copy(real.cuda.memory)
    torch = types.SimpleNamespace(cuda=cuda, device=real.device, __version__=real.__version__)
    accel = getattr(real, "accelerator", None)
    if accel is not None and hasattr(accel, "memory"):
        torch.accelerator = copy(accel)
        torch.accelerator.memory = copy(accel.memory)
    return torch


def parameters(fn):
    """What a caller sees of fn's signature: each parameter's name, kind and
    default (annotations aside: coop copies torch's, they need not match)."""
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


class Install(unittest.TestCase):
    def test_refuses_when_cuda_initialized(self):
        with self.assertRaises(RuntimeError) as cm:
            ctorch.install(torch_module=FakeTorch(initialized=True))
        self.assertIn("already initialized", str(cm.exception))

    def test_refuses_without_pluggable_allocator(self):
        with self.assertRaises(RuntimeError) as cm:
            ctorch.install(torch_module=FakeTorch(pluggable=False))
        self.assertIn("CUDAPluggableAllocator", str(cm.exception))

    def test_refuses_a_torch_built_without_cuda(self):
        # a CPU-only build has the Python class, not the binding it calls
        for call in (ctorch.install, ctorch.mem_pool):
            fake = FakeTorch(cuda_build=None)
            fake.cuda.MemPool = object
            with self.assertRaises(RuntimeError) as cm:
                call(torch_module=fake)
            self.assertIn("was built without CUDA (torch.version.cuda is None)", str(cm.exception))
            self.assertEqual(fake.calls, [])  # torch was not asked for anything
        self.assertIsNone(ctorch.installed())

    def test_a_stand_in_without_version_cuda_is_not_taken_for_a_cpu_build(self):
        # only torch.version.cuda None says so: a stand-in may have no
        # version.cuda, or no version; the next check (CUDA initialized) speaks
        for version in (type("version", (), {})(), None):
            fake = FakeTorch(initialized=True)
            fake.version = version
            with self.assertRaises(RuntimeError) as cm:
                ctorch.install(torch_module=fake)
            self.assertIn("already initialized", str(cm.exception))

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_real_torch(self):
        import torch as real

        if hasattr(real.cuda, "memory") and hasattr(real.cuda.memory, "CUDAPluggableAllocator"):
            self.skipTest("this torch has CUDAPluggableAllocator: covered on GPU machines")
        with self.assertRaises(RuntimeError) as cm:
            ctorch.install(torch_module=real)
        self.assertIn("PyTorch >= 2.0", str(cm.exception))

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_patched_torch_reports_coop(self):
        """torch's own memory_allocated() & co. (which call memory_stats) and
        _snapshot() read coop's pools once patched (done in a child: the
        patch is for the whole process)."""
        r = run_child(
            "import torch\n"
            "names = ctorch.patch_torch(torch)\n"
            "p = lib.coop_torch_malloc(3 << 20, 0, None)\n"
            "q = lib.coop_torch_malloc(1000, 0, None)\n"
            "print(torch.cuda.memory_allocated(0), torch.cuda.max_memory_reserved(0))\n"
            "lib.coop_torch_free(q, 1000, 0, None)\n"
            "torch.cuda.reset_peak_memory_stats(0)\n"
            "print(torch.cuda.max_memory_allocated(0))\n"
            "torch.cuda.memory._record_memory_history(True)  # 1.13's (enabled, device)\n"
            "lib.coop_torch_free(lib.coop_torch_malloc(512, 0, None), 512, 0, None)\n"
            "snap = torch.cuda.memory._snapshot()\n"
            "print(len(snap['device_traces'][0]), len(torch.cuda.memory_snapshot()))\n"
            "print(' '.join(sorted(names)))\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(lines[0].split(), [str((3 << 20) + 1024), str(4 << 20)])
        self.assertEqual(lines[1], str(3 << 20))
        self.assertEqual(lines[2].split(), ["3", "1"])
        self.assertIn("memory_stats", lines[3])

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_readers_left_as_torchs_report_coop(self):
        """torch's functions patch_torch leaves alone read coop's pools
        through the replaced memory_stats / reset_peak_memory_stats:
        memory_summary() (a table torch formats from memory_stats' keys),
        the deprecated memory_cached() and reset_max_memory_allocated()."""
        r = run_child(
            "import torch, warnings\n"
            "warnings.simplefilter('ignore')  # the deprecated ones warn\n"
            "ctorch.patch_torch(torch)\n"
            "p = lib.coop_torch_malloc(3 << 20, 0, None)\n"
            "q = lib.coop_torch_malloc(1 << 20, 0, None)\n"
            "lib.coop_torch_free(q, 1 << 20, 0, None)\n"
            "summary = torch.cuda.memory_summary(0, abbreviated=True)\n"
            "print([l.split('|')[2].split() for l in summary.splitlines()\n"
            "       if 'Allocated memory' in l][0])\n"
            "print(torch.cuda.memory_cached(0), torch.cuda.max_memory_allocated(0))\n"
            "torch.cuda.reset_max_memory_allocated(0)\n"
            "print(torch.cuda.max_memory_allocated(0))\n"
            "lib.coop_torch_free(p, 3 << 20, 0, None)\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertIn(lines[0], ("['3072', 'KB']", "['3072', 'KiB']"))  # 1.13: KB
        self.assertEqual(lines[1].split(), [str(4 << 20), str(4 << 20)])
        self.assertEqual(lines[2], str(3 << 20))

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_patched_torch_takes_device_strings(self):
        """torch documents its memory functions as taking "cuda:N" strings:
        once patched they do too (they raised TypeError)."""
        r = run_child(
            "import torch\n"
            "ctorch.patch_torch(torch)\n"
            "p = lib.coop_torch_malloc(3 << 20, 1, None)\n"
            "c = torch.cuda\n"
            "print(c.memory_stats('cuda:1')['allocated_bytes.all.current'],\n"
            "      c.memory_allocated('cuda:1'), c.memory_reserved('cuda:1'),\n"
            "      c.memory_allocated('cuda'))\n"
            "lib.coop_torch_free(p, 3 << 20, 1, None)\n"
            "c.reset_peak_memory_stats('cuda:1')\n"
            "print(c.max_memory_allocated(torch.device('cuda', 1)))\n",
            "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(3 << 20), str(3 << 20), str(4 << 20), "0", "0"])

    def test_accumulated_stats_reset_and_nested_dict(self):
        """reset_accumulated_memory_stats() and memory_stats_as_nested_dict(),
        as torch has them (a child: the reset is per process)."""
        r = run_child(
            "p = lib.coop_torch_malloc(3 << 20, 0, None)\n"
            "assert lib.coop_torch_malloc(1 << 40, 0, None) is None\n"
            "s = ctorch.memory_stats(0)\n"
            "print(s['allocation.all.allocated'], s['num_ooms'], s['num_device_alloc'])\n"
            "ctorch.reset_accumulated_memory_stats(0)\n"
            "s = ctorch.memory_stats(0)\n"
            "print(s['allocation.all.allocated'], s['allocated_bytes.all.freed'], s['num_ooms'],\n"
            "      s['num_device_alloc'], s['allocation.all.current'])\n"
            "lib.coop_torch_free(p, 3 << 20, 0, None)\n"
            "q = lib.coop_torch_malloc(1 << 20, 0, None)\n"
            "s = ctorch.memory_stats('cuda:0')\n"
            "print(s['allocation.all.allocated'], s['allocation.all.freed'])\n"
            "n = ctorch.memory_stats_as_nested_dict(0)\n"
            "print(n['allocation']['all']['allocated'], n['allocated_bytes']['all']['current'],\n"
            "      n['num_ooms'], n['coop']['capacity'])\n"
            "lib.coop_torch_free(q, 1 << 20, 0, None)\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line.split() for line in r.stdout.splitlines()],
                         [["1", "1", "1"], ["0", "0", "0", "0", "1"], ["1", "1"],
                          ["1", str(1 << 20), "0", str(256 << 20)]])

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_patched_accumulated_and_nested(self):
        """torch.cuda.reset_accumulated_memory_stats and
        memory_stats_as_nested_dict are patched too (torch 1.13 raised
        AttributeError for the first; the pluggable route raises for both)."""
        r = run_child(
            "import torch\n"
            "names = ctorch.patch_torch(torch)\n"
            "p = lib.coop_torch_malloc(3 << 20, 0, None)\n"
            "torch.cuda.reset_accumulated_memory_stats('cuda:0')\n"
            "n = torch.cuda.memory_stats_as_nested_dict(0)\n"
            "print(n['allocation']['all']['allocated'], n['allocation']['all']['current'],\n"
            "      torch.cuda.memory_stats(0)['allocation.all.allocated'])\n"
            "print(' '.join(sorted(names)))\n"
            "lib.coop_torch_free(p, 3 << 20, 0, None)\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["0", "1", "0"])
        self.assertIn("reset_accumulated_memory_stats", lines[1].split())
        self.assertIn("memory_stats_as_nested_dict", lines[1].split())

    def test_record_memory_history_as_torch(self):
        """The replacement of torch.cuda.memory._record_memory_history takes
        torch 2.x's arguments (max_entries by position, clear_history) and
        the legacy ones, and does what torch does: events stay unless
        clear_history, "state" keeps one, None drops them."""
        r = run_child(
            "record = ctorch._record_history_compat\n"
            "def pairs(n):\n"
            "    for _ in range(n):\n"
            "        lib.coop_torch_free(lib.coop_torch_malloc(512, 0, None), 512, 0, None)\n"
            "def events():\n"
            "    return len(ctorch.snapshot()['device_traces'][0])\n"
            "out = []\n"
            "record('all', 'all', 'all', 5)\n"
            "pairs(3); out.append(events())\n"
            "record('all', max_entries=100)\n"
            "out.append(events()); pairs(1); out.append(events())\n"
            "record('all', None, 'python', 100, None, True)\n"
            "out.append(events()); pairs(1); out.append(events())\n"
            "record('state')\n"
            "out.append(events()); pairs(1); out.append(events())\n"
            "record(None)\n"
            "pairs(1); out.append(events())\n"
            "record(True, True, 7)\n"
            "pairs(3); out.append(events())\n"
            "record(True, trace_alloc_max_entries=20, clear_history=True)\n"
            "out.append(events())\n"
            "record(False)\n"
            "out.append(events())\n"
            "try:\n"
            "    record('bogus')\n"
            "except ValueError as e:\n"
            "    out.append('refused')\n"
            "print(*out)\n", "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(),
                         ["5", "5", "8", "0", "3", "1", "1", "0", "7", "0", "0", "refused"])

    def test_patched_functions_take_torch_2_11_arguments(self):
        """torch 2.11 calls _snapshot(augment_with_fx_traces=...) from its
        _dump_snapshot and memory_snapshot(mempool_id, include_traces=...):
        on a torch with those signatures (the stand-in) the replacements take
        those arguments, and _dump_snapshot writes the pickle
        coop.torch.snapshot() gives. (Before, the replacements took
        *args/**kwargs; test_signatures_match_the_installed_torch checks
        that torch 1.13's own refuses these arguments and so do coop's.)"""
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"coop_dump_{os.getpid()}.pickle")
        r = run_child(
            "import pickle\n"
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import torch_stand_in\n"
            "torch = torch_stand_in()\n"
            "ctorch.patch_torch(torch)\n"
            "p = lib.coop_torch_malloc(3 << 20, 0, None)\n"
            "mem = torch.cuda.memory\n"
            "a = mem._snapshot(None, augment_with_fx_traces=False)\n"
            "b = mem._snapshot(augment_with_fx_traces=True)\n"
            "c = mem.memory_snapshot(None, include_traces=False)\n"
            "d = torch.cuda.memory_snapshot(mempool_id=(0, 0), include_traces=True)\n"
            "mem._dump_snapshot(%r, augment_with_fx_traces=False)\n"
            "e = pickle.load(open(%r, 'rb'))\n"
            "print(len(a['segments']), len(b['segments']), len(c), len(d), len(e['segments']))\n"
            "lib.coop_torch_free(p, 3 << 20, 0, None)\n" % (HERE, path, path),
            "backend:host,capacity:256M")
        try:
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["1"] * 5)
        finally:
            if os.path.exists(path):
                os.unlink(path)

    def test_patched_dump_snapshot_writes_torchs_default_file(self):
        """_dump_snapshot() without a name writes dump_snapshot.pickle, as
        torch's does."""
        r = run_child(
            "import os, pickle, shutil, tempfile\n"
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "ctorch.patch_torch(fake)\n"
            "d = tempfile.mkdtemp()\n"
            "os.chdir(d)\n"
            "try:\n"
            "    fake.cuda.memory._dump_snapshot()\n"
            "    with open('dump_snapshot.pickle', 'rb') as f:\n"
            "        print(os.listdir(d), 'segments' in pickle.load(f))\n"
            "finally:\n"
            "    shutil.rmtree(d)\n" % HERE, "backend:host,capacity:256M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "['dump_snapshot.pickle'] True")

    def test_mem_pool_route(self):
        fake = FakeTorch()
        with self.assertRaises(RuntimeError) as cm:
            ctorch.mem_pool(torch_module=fake)
        self.assertIn("MemPool", str(cm.exception))
        made = []
        fake.cuda.MemPool = lambda handle, **options: made.append((handle, options)) or "pool"
        self.assertEqual(ctorch.mem_pool(torch_module=fake), "pool")
        self.assertEqual(len(made), 1)
        self.assertEqual(made[0][1], {})
        # torch.cuda.MemPool's own options (use_on_oom, no_split) reach it (mem_pool
        # raised TypeError for them)
        self.assertEqual(ctorch.mem_pool(torch_module=fake, use_on_oom=True, no_split=True),
                         "pool")
        self.assertEqual(made[1][1], {"use_on_oom": True, "no_split": True})
        self.assertIn(("CUDAPluggableAllocator", native.library_path(), "coop_torch_malloc",
                       "coop_torch_free"), fake.calls)

    def test_install_that_torch_refuses_keeps_the_configuration_in_force(self):
        """install(conf) whose allocator torch refuses raises torch's error and
        leaves the configuration as it was: COOP_ALLOC_CONF's, then an
        earlier mem_pool(conf)'s; the next install() applies the right one."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "def settings():\n"
            "    b = ctypes.create_string_buffer(512)\n"
            "    lib.coop_torch_settings(b, 512)\n"
            "    return b.value.decode()\n"
            "refusing = FakeTorch(refuse=True)\n"
            "refusing.cuda.MemPool = lambda handle: 'pool'\n"
            "for conf in ('backend:host,capacity:2G', 'backend:host,capacity:2G'):\n"
            "    try:\n"
            "        ctorch.install(conf, torch_module=refusing, patch=False)\n"
            "    except RuntimeError as e:\n"
            "        print('raised', e)\n"
            "    print(settings())\n"
            "    ctorch.mem_pool('backend:host,capacity:3G', torch_module=refusing)\n"
            "ok = FakeTorch()\n"
            "ctorch.install(torch_module=ok, patch=False)\n"
            "print(settings())\n"
            "p = lib.coop_torch_malloc(4096, 0, None)\n"
            "print('malloc', p is not None)\n"
            "lib.coop_torch_free(p, 4096, 0, None)\n" % HERE,
            "backend:host,capacity:1G")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 6, r.stdout + r.stderr)
        self.assertEqual(lines[0], "raised fake torch refuses the allocator")
        self.assertTrue(lines[1].startswith("backend:host,capacity:1073741824,"), lines[1])
        self.assertEqual(lines[2], "raised fake torch refuses the allocator")
        self.assertTrue(lines[3].startswith("backend:host,capacity:3221225472,"), lines[3])
        self.assertTrue(lines[4].startswith("backend:host,capacity:3221225472,"), lines[4])
        self.assertEqual(lines[5], "malloc True")

    def test_install_failing_after_torch_took_coop_says_so(self):
        """A step after change_current_allocator raising (device_count, the
        patching) left install() unrecorded while torch already allocated
        with coop: installed() said None and a retry asked torch to swap a
        used allocator. The error now says torch uses coop; install() is
        recorded, and a later install() patches what the failed one did not."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "def broken():\n"
            "    raise RuntimeError('device_count broke')\n"
            "for step in ('count', 'patch'):\n"
            "    fake = FakeTorch()\n"
            "    if step == 'count':\n"
            "        fake.cuda.device_count = broken\n"
            "        patch = False\n"
            "    else:\n"
            "        real_patch, patch = ctorch.patch_torch, True\n"
            "        def failing(torch):\n"
            "            raise RuntimeError('patching broke')\n"
            "        ctorch.patch_torch = failing\n"
            "    try:\n"
            "        ctorch.install(torch_module=fake, patch=patch)\n"
            "        print('no error')\n"
            "    except RuntimeError as e:\n"
            "        print(e)\n"
            "    print(ctorch.installed() is not None, fake.calls.count(('change',)))\n"
            "    if step == 'patch':\n"
            "        ctorch.patch_torch = real_patch\n"
            "        ctorch.install(torch_module=fake)\n"
            "        print(fake.calls.count(('change',)),\n"
            "              fake.cuda.memory._dump_snapshot.__module__)\n"
            "    ctorch._installed = None  # the next step's fake torch\n" % HERE,
            "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 5, r.stdout)
        for line, cause in ((lines[0], "device_count broke"), (lines[2], "patching broke")):
            self.assertIn("torch now allocates with coop", line)
            self.assertIn(cause, line)
        self.assertEqual(lines[1], "True 1")
        self.assertEqual(lines[3], "True 1")
        self.assertEqual(lines[4], "1 coop.torch")

    def test_install_after_a_failed_device_count_counts_the_devices(self):
        """install() again after device_count() raised (torch already took
        coop) patched torch but never counted the devices: the device check
        stayed at coop's 64 slots for good, so memory_stats(5) on 2 devices
        gave empty statistics, not the DeviceError torch raises."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "def broken():\n"
            "    fake.cuda.device_count = lambda: 2  # the next call works\n"
            "    raise RuntimeError('device_count broke')\n"
            "fake.cuda.device_count = broken\n"
            "try:\n"
            "    ctorch.install(torch_module=fake)\n"
            "except RuntimeError as e:\n"
            "    print('device_count broke' in str(e))\n"
            "ctorch.install(torch_module=fake)\n"
            "try:\n"
            "    ctorch.memory_stats(5)\n"
            "    print('no error')\n"
            "except ctorch.DeviceError as e:\n"
            "    print(e)\n"
            "print(fake.calls.count(('change',)))\n" % HERE,
            "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(lines[0], "True", r.stdout)
        self.assertIn("torch counted 2 CUDA devices", lines[1])
        self.assertEqual(lines[2], "1")

    def test_mem_pool_that_torch_refuses_keeps_the_configuration_in_force(self):
        """mem_pool(conf) whose MemPool torch refuses (an option it does not
        take) raises torch's error and leaves the configuration as it was,
        as a refused install(conf) does (conf stayed in force, and a later
        install() used it instead of COOP_ALLOC_CONF)."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "def settings():\n"
            "    b = ctypes.create_string_buffer(512)\n"
            "    lib.coop_torch_settings(b, 512)\n"
            "    return b.value.decode()\n"
            "fake = FakeTorch()\n"
            "def pool(handle, **options):\n"
            "    if options:\n"
            "        raise TypeError('MemPool() got an unexpected keyword argument')\n"
            "    return 'pool'\n"
            "fake.cuda.MemPool = pool\n"
            "try:\n"
            "    ctorch.mem_pool('backend:host,capacity:3G', torch_module=fake, bogus=1)\n"
            "except TypeError as e:\n"
            "    print('raised', e)\n"
            "print(settings())\n"
            "ctorch.mem_pool('backend:host,capacity:2G', torch_module=fake)\n"
            "try:\n"
            "    ctorch.mem_pool('backend:host,capacity:3G', torch_module=fake, bogus=1)\n"
            "except TypeError as e:\n"
            "    print('raised', e)\n"
            "print(settings())\n" % HERE,
            "backend:host,capacity:1G")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 4, r.stdout + r.stderr)
        self.assertEqual(lines[0], "raised MemPool() got an unexpected keyword argument")
        self.assertTrue(lines[1].startswith("backend:host,capacity:1073741824,"), lines[1])
        self.assertEqual(lines[2], lines[0])
        self.assertTrue(lines[3].startswith("backend:host,capacity:2147483648,"), lines[3])

    def test_a_later_install_patches_what_an_earlier_one_did_not(self):
        """install(patch=False), then install(): the second call patches torch
        (it returned the hooks and left torch unpatched). A second
        install(patch=False) still leaves torch as it was."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "hooks = ctorch.install(torch_module=fake, patch=False)\n"
            "assert ctorch.install(torch_module=fake, patch=False) == hooks\n"
            "print(hasattr(fake.cuda.memory, '_dump_snapshot'))\n"
            "assert ctorch.install(torch_module=fake) == hooks\n"
            "f = fake.cuda.memory._dump_snapshot\n"
            "print(f.__module__ + '.' + f.__name__)\n" % HERE,
            "backend:host,capacity:1G")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["False", "coop.torch._dump_snapshot"])

    def test_install_limits_devices_to_torchs_count(self):
        """After install(), a device index past those torch counted raises
        DeviceError (a RuntimeError, as torch's "Invalid device argument", and
        a ValueError) naming the count; before, devices 2..63 of a 2-device
        process gave zeros."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "ctorch.install(torch_module=FakeTorch(), patch=False)\n"
            "print(ctorch.memory_stats(1)['allocation.all.current'])\n"
            "for bad in (2, 'cuda:5', -1):\n"
            "    try:\n"
            "        ctorch.memory_stats(bad)\n"
            "    except RuntimeError as e:\n"
            "        print(isinstance(e, ValueError), e)\n" % HERE, "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 4, r.stdout)
        self.assertEqual(lines[0], "0")
        for line, bad in zip(lines[1:], ("2", "'cuda:5'", "-1")):
            self.assertTrue(line.startswith("True coop.torch: device %s: " % bad), line)
            self.assertIn("outside 0..1 (torch counted 2 CUDA devices", line)

    def test_a_bad_conf_after_first_use_is_named_bad(self):
        """install(conf) / mem_pool(conf) with a conf that does not parse,
        once coop has allocated, raise CoopConfigError naming the key or the
        value, as before the first allocation: it was a RuntimeError saying
        only that the configuration in force is fixed, as if the string were
        good but late."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "fake.cuda.MemPool = lambda handle: 'pool'\n"
            "ctorch.install(torch_module=fake, patch=False)\n"
            "p = lib.coop_torch_malloc(4096, 0, None)\n"
            "for call in (lambda: ctorch.install('bogus:1', torch_module=fake),\n"
            "             lambda: ctorch.mem_pool('backend:host,capacity:12Q', torch_module=fake)):\n"
            "    try:\n"
            "        call()\n"
            "    except ctorch.CoopConfigError as e:\n"
            "        print('bad', e)\n"
            "    except RuntimeError as e:\n"
            "        print('refused', e)\n"
            "lib.coop_torch_free(p, 4096, 0, None)\n" % HERE,
            "backend:host,capacity:1G")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 2, r.stdout + r.stderr)
        self.assertEqual(lines[0], "bad COOP_ALLOC_CONF: unknown key 'bogus' at byte 0 (known: "
                         "backend, capacity, fraction, page, vmm, segment, placement, "
                         "min_split, check, history, wait)")
        self.assertTrue(lines[1].startswith("bad COOP_ALLOC_CONF: bad value '12Q' for key "
                                            "'capacity' at byte 22"), lines[1])

    def test_install_conf_stays_until_replaced(self):
        """mem_pool() after install(conf) keeps install's configuration (it
        used to re-read COOP_ALLOC_CONF, here one that cannot work); a second
        install() with another conf applies it before the first allocation
        and raises after it, as mem_pool(conf) does."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "import os\n"
            "os.environ['COOP_ALLOC_CONF'] = 'backend:cuda'  # the test module set its own\n"
            "fake = FakeTorch()\n"
            "fake.cuda.MemPool = lambda handle: 'pool'\n"
            "def settings():\n"
            "    b = ctypes.create_string_buffer(512)\n"
            "    lib.coop_torch_settings(b, 512)\n"
            "    return b.value.decode()\n"
            "hooks = ctorch.install('backend:host,capacity:1G', torch_module=fake, patch=False)\n"
            "ctorch.mem_pool(torch_module=fake)\n"
            "print(settings())\n"
            "assert ctorch.install(torch_module=fake, patch=False) == hooks\n"
            "assert ctorch.install('backend:host,capacity:2G', torch_module=fake) == hooks\n"
            "print(settings())\n"
            "p = lib.coop_torch_malloc(4096, 0, None)\n"
            "print('malloc', p is not None, ctorch.last_error())\n"
            "ctorch.mem_pool(torch_module=fake)\n"
            "ctorch.mem_pool('backend:host,capacity:2G', torch_module=fake)\n"
            "# the same configuration spelt otherwise is the same: no refusal\n"
            "ctorch.install('capacity:2048M,backend:host,vmm:true', torch_module=fake)\n"
            "for call in (lambda: ctorch.install('backend:host,capacity:3G', torch_module=fake),\n"
            "             lambda: ctorch.mem_pool('backend:host', torch_module=fake)):\n"
            "    try:\n"
            "        call()\n"
            "    except RuntimeError as e:\n"
            "        print('refused', e)\n"
            "lib.coop_torch_free(p, 4096, 0, None)\n" % HERE,
            "backend:cuda", {"COOP_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 5, r.stdout + r.stderr)
        self.assertTrue(lines[0].startswith("backend:host,capacity:1073741824,"), lines[0])
        self.assertTrue(lines[1].startswith("backend:host,capacity:2147483648,"), lines[1])
        self.assertEqual(lines[2], "malloc True ", lines[2])
        for line, who in zip(lines[3:], ("install", "mem_pool")):
            self.assertIn(f"refused coop.torch.{who}: cannot apply", line)
            self.assertIn("capacity:2147483648", line)

    def test_conf_equal_to_coop_alloc_conf_is_accepted_after_first_use(self):
        """install(conf) / mem_pool(conf) with the configuration COOP_ALLOC_CONF
        put in force, however spelt, is no change once coop has allocated (it
        raised RuntimeError "cannot apply" when no earlier install(conf) set
        one); another configuration still raises."""
        r = run_child(
            "p = lib.coop_torch_malloc(4096, 0, None)  # before the import sets its own\n"
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "fake.cuda.MemPool = lambda handle: 'pool'\n"
            "print(ctorch.mem_pool('capacity:64M,backend:host', torch_module=fake))\n"
            "ctorch.install('backend:host,capacity:65536K', torch_module=fake, patch=False)\n"
            "try:\n"
            "    ctorch.mem_pool('backend:host,capacity:128M', torch_module=fake)\n"
            "except RuntimeError as e:\n"
            "    print('refused', e)\n"
            "# record_history's bound overrides the history key: the same\n"
            "# configuration is still the same (it raised, its history:0 against 1000)\n"
            "ctorch.record_history(1000)\n"
            "ctorch.install('backend:host,capacity:64M', torch_module=fake, patch=False)\n"
            "lib.coop_torch_free(p, 4096, 0, None)\n" % HERE, "backend:host,capacity:64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(lines[0], "pool", r.stdout)
        self.assertEqual(len(lines), 2, r.stdout)
        self.assertIn("refused coop.torch.mem_pool: cannot apply", lines[1])

    def test_memory_stats_keys(self):
        """torch.cuda.memory_stats()'s keys, in its order (sorted)."""
        keys = ctorch.memory_stats(0).keys()
        self.assertEqual(list(keys), sorted(keys))
        for stat in native.STAT_NAMES:
            for pool_kind in ("all", "large_pool", "small_pool"):
                for metric in ("current", "peak", "allocated", "freed"):
                    self.assertIn(f"{stat}.{pool_kind}.{metric}", keys)
        for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                    "num_sync_all_streams", "max_split_size", "oversize_allocations.current",
                    "oversize_segments.freed"):
            self.assertIn(key, keys)
        self.assertEqual(ctorch.memory_stats(17)["allocation.all.current"], 0)

    def test_install_wires_entry_points_and_hooks(self):
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import FakeTorch\n"
            "fake = FakeTorch()\n"
            "hooks = ctorch.install(torch_module=fake)\n"
            "assert ctorch.install(torch_module=fake) == hooks\n"
            "addr = lambda n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value\n"
            "expected = {n: addr(n) for n in ('coop_torch_init', 'coop_torch_empty_cache',\n"
            "                                 'coop_torch_memory_fraction',\n"
            "                                 'coop_torch_record_stream')}\n"
            "import json\n"
            "print(json.dumps([hooks, fake.calls, native.library_path(), expected]))\n" % HERE,
            "backend:host")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json

        hooks, calls, path, expected = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(hooks, ["set_init_fn", "set_reset_fn", "set_memory_fraction_fn",
                                 "set_record_stream_fn"])
        self.assertEqual(calls[0], ["CUDAPluggableAllocator", path, "coop_torch_malloc",
                                    "coop_torch_free"])
        self.assertEqual(calls[-1], ["change"])
        addresses = {c[0]: c[1] for c in calls[1:-1]}
        # each hook gets its own entry point (a swap would pass a count check)
        self.assertEqual(addresses, {
            "set_init_fn": expected["coop_torch_init"],
            "set_reset_fn": expected["coop_torch_empty_cache"],
            "set_memory_fraction_fn": expected["coop_torch_memory_fraction"],
            "set_record_stream_fn": expected["coop_torch_record_stream"]})


# What patch_torch replaces: torch.cuda.memory's names (torch.cuda's too, where
# torch re-exports them) and torch.accelerator.memory's.
PATCHED = ("memory_stats", "memory_stats_as_nested_dict", "reset_peak_memory_stats",
           "reset_accumulated_memory_stats", "memory_snapshot", "_snapshot", "_dump_snapshot",
           "_record_memory_history")
PATCHED_ACCELERATOR = ("memory_stats", "reset_peak_memory_stats",
                       "reset_accumulated_memory_stats")
# torch's functions that stay torch's: they read the allocator through the
# replaced memory_stats (the readers), or do not read it (mem_get_info asks
# the driver; empty_cache and set_per_process_memory_fraction reach coop
# through install()'s hooks)
LEFT_AS_TORCHS = ("memory_allocated", "max_memory_allocated", "memory_reserved",
                  "max_memory_reserved", "memory_summary", "mem_get_info", "empty_cache",
                  "set_per_process_memory_fraction", "reset_max_memory_allocated",
                  "memory_cached", "max_memory_cached", "caching_allocator_alloc",
                  "get_per_process_memory_fraction", "list_gpu_processes")


class TorchSignatures(unittest.TestCase):
    """patch_torch's replacements against the torch functions they replace:
    the same parameters (names, kinds, defaults: inspect.signature), the same
    calls taken and refused, the device forms torch takes and its errors for
    the others. The process's own torch is never patched: a copy
    (torch_copy) or the stand-in with main-branch signatures is."""

    def check_signatures(self, torch, accelerator):
        memory = torch.cuda.memory
        originals = {n: getattr(memory, n, None) for n in PATCHED}
        cuda_originals = {n: getattr(torch.cuda, n, None) for n in PATCHED}
        accel_originals = {n: getattr(torch.accelerator.memory, n) for n in PATCHED_ACCELERATOR} \
            if accelerator else {}
        kept = {n: getattr(memory, n) for n in LEFT_AS_TORCHS if hasattr(memory, n)}
        names = ctorch.patch_torch(torch)
        for name, original in originals.items():
            with self.subTest(name=name):
                replacement = getattr(memory, name)
                self.assertIsNot(replacement, original)
                self.assertEqual(replacement.__module__, "coop.torch")
                if original is not None:
                    self.assertEqual(parameters(replacement), parameters(original))
                else:  # torch 1.13's lacks _dump_snapshot: 2.11's signature
                    self.assertEqual(parameters(replacement),
                                     parameters(ctorch._fallback_dump_snapshot))
                if cuda_originals[name] is not None:
                    self.assertIs(getattr(torch.cuda, name), replacement)
                self.assertIn(name, names)
        for name, original in accel_originals.items():
            with self.subTest(accelerator=name):
                replacement = getattr(torch.accelerator.memory, name)
                self.assertIsNot(replacement, original)
                self.assertEqual(parameters(replacement), parameters(original))
                self.assertIn("accelerator." + name, names)
        for name, original in kept.items():
            with self.subTest(left=name):
                self.assertIs(getattr(memory, name), original)
        # an argument torch's function refuses is refused before anything is
        # read, with Python's message naming the function
        for name, original in originals.items():
            if original is None:
                continue
            args = ("all",) if name == "_record_memory_history" else ()  # enabled
            with self.subTest(refused=name):
                with self.assertRaises(TypeError):
                    inspect.signature(original).bind(*args, no_such_argument=1)
                with self.assertRaises(TypeError) as cm:
                    getattr(memory, name)(*args, no_such_argument=1)
                self.assertIn(name + "()", str(cm.exception))
                self.assertIn("no_such_argument", str(cm.exception))
        return names

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_signatures_match_the_installed_torch(self):
        """Debian's torch 1.13: memory_snapshot() and _snapshot(device) take
        no 2.x arguments, _record_memory_history is (enabled, device): the
        replacements took *args/**kwargs (anything, silently) and now refuse
        what 1.13 refuses."""
        import torch as real

        self.check_signatures(torch_copy(real), accelerator=hasattr(real, "accelerator"))
        copy = torch_copy(real)
        ctorch.patch_torch(copy)
        memory = copy.cuda.memory
        if "mempool_id" not in inspect.signature(real.cuda.memory.memory_snapshot).parameters:
            with self.assertRaises(TypeError):
                memory.memory_snapshot(None, include_traces=False)
        if "augment_with_fx_traces" not in inspect.signature(real.cuda.memory._snapshot).parameters:
            with self.assertRaises(TypeError):
                memory._snapshot(augment_with_fx_traces=True)

    def test_signatures_match_torch_2_11(self):
        """The stand-in's main-branch signatures (2.11's), torch.accelerator's
        positional-only device_index included, whatever torch is installed."""
        names = self.check_signatures(torch_stand_in(), accelerator=True)
        self.assertEqual(len(names), len(PATCHED) + len(PATCHED_ACCELERATOR))

    def test_skip_actions_must_be_a_list_of_names(self):
        """torch passes skip_actions to a binding taking a list of strings,
        which refuses a str (TypeError); coop's iterated "alloc" by
        character, skipping nothing, without a word. Refused before the
        history is touched, naming the argument."""
        torch = torch_stand_in()
        ctorch.patch_torch(torch)
        record = torch.cuda.memory._record_memory_history
        for bad in ("alloc", b"alloc", ["alloc", 3], 7):
            with self.subTest(skip_actions=bad):
                with self.assertRaises(TypeError) as cm:
                    record("all", skip_actions=bad)
                self.assertIn("skip_actions", str(cm.exception))

    def test_skip_actions_must_be_a_sequence(self):
        """torch's binding takes skip_actions as a sequence (a std::vector
        through pybind11, which refuses what is not a sequence): a set (no
        order) and a generator or iterator (read once) are refused as there,
        naming their type, not taken as coop took them; a tuple is taken as
        there, and skips its actions."""
        torch = torch_stand_in()
        ctorch.patch_torch(torch)
        record = torch.cuda.memory._record_memory_history
        for bad, kind in (({"alloc"}, "set"), (frozenset({"alloc"}), "frozenset"),
                          ((a for a in ["alloc"]), "generator"), (iter(["alloc"]), "list_iterator"),
                          ({"alloc": 1}, "dict")):
            with self.subTest(skip_actions=kind):
                with self.assertRaises(TypeError) as cm:
                    record("all", skip_actions=bad)
                self.assertIn("skip_actions", str(cm.exception))
                self.assertIn("not a %s" % kind, str(cm.exception))
        self.assertEqual(ctorch._skip_actions(("alloc", "free_requested")),
                         ("alloc", "free_requested"))

    def test_calls_as_torch_2_11_takes_them(self):
        """On the stand-in: the readers torch builds on memory_stats report
        coop's pools; torch.accelerator's take device_index by position only;
        _record_memory_history takes each form's own arguments and refuses
        the other form's, honours skip_actions and record_cuda=False;
        memory_snapshot of another pool is empty (a child: history settings
        are per process)."""
        r = run_child(
            "sys.path.insert(0, %r)\n"
            "from test_torch_abi import torch_stand_in\n"
            "torch = torch_stand_in()\n"
            "ctorch.patch_torch(torch)\n"
            "mem, acc = torch.cuda.memory, torch.accelerator\n"
            "p = lib.coop_torch_malloc(3 << 20, 1, None)\n"
            "print(mem.memory_allocated('cuda:1'), torch.cuda.memory_allocated(device=1),\n"
            "      acc.memory_allocated(1), acc.memory.max_memory_allocated('cuda:1'),\n"
            "      mem.memory_allocated(0))\n"
            "def refused(call):\n"
            "    try:\n"
            "        call()\n"
            "    except TypeError as e:\n"
            "        return str(e)\n"
            "    return 'taken'\n"
            "print(refused(lambda: acc.memory_stats(device_index=1)))\n"
            "print(refused(lambda: mem.memory_stats(devcie=1)))\n"
            "print(refused(lambda: mem._record_memory_history(True, max_entries=5)))\n"
            "print(refused(lambda: mem._record_memory_history('all', trace_alloc_max_entries=5)))\n"
            "def pairs(n):\n"
            "    for _ in range(n):\n"
            "        lib.coop_torch_free(lib.coop_torch_malloc(512, 0, None), 512, 0, None)\n"
            "def actions():\n"
            "    return [e['action'] for e in ctorch.snapshot()['device_traces'][0]]\n"
            "mem._record_memory_history('all', 'all', 'all', 4, None, True)\n"
            "pairs(3); print(len(actions()))\n"
            "mem._record_memory_history(True, True, 9, clear_history=True)\n"
            "pairs(4); print(len(actions()))\n"
            "mem._record_memory_history(max_entries=50, clear_history=True,\n"
            "                           skip_actions=['free_requested'])\n"
            "pairs(2); print(' '.join(actions()))\n"
            "mem._record_memory_history(None, record_cuda=False)  # CUDA's history left as is\n"
            "pairs(1); print(len(actions()))\n"
            "mem._record_memory_history('all')  # skip_actions is per call, as torch's\n"
            "pairs(1); print(len(actions()))\n"
            "mem._record_memory_history(None)\n"
            "pairs(1); print(len(actions()))\n"
            "print(len(mem.memory_snapshot()), len(mem.memory_snapshot((0, 0))),\n"
            "      len(torch.cuda.memory_snapshot(mempool_id=(1, 2))))\n"
            "lib.coop_torch_free(p, 3 << 20, 1, None)\n" % HERE,
            "backend:host,capacity:256M,history:false")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 12, r.stdout)
        self.assertEqual(lines[0].split(), [str(3 << 20)] * 4 + ["0"])
        self.assertIn("memory_stats()", lines[1])
        self.assertIn("device_index", lines[1])
        self.assertIn("devcie", lines[2])
        self.assertIn("_record_memory_history()", lines[3])
        self.assertIn("max_entries", lines[3])
        self.assertIn("trace_alloc_max_entries", lines[4])
        self.assertEqual(lines[5], "4")  # a bound of 4 events
        self.assertEqual(lines[6], "9")  # the legacy bound by position, cleared first
        self.assertEqual(lines[7], "alloc free_completed alloc free_completed")
        self.assertEqual(lines[8], "6")  # record_cuda=False: still recording, 2 more
        # 3 more, free_requested too; the 2 skipped when recorded stay out
        self.assertEqual(lines[9], "9")
        self.assertEqual(lines[10], "0")
        self.assertEqual(lines[11].split(), ["2", "2", "0"])  # devices 0 and 1; pool (1, 2)

    @unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed for this interpreter")
    def test_device_forms_and_errors(self):
        """Each replacement that takes a device takes every form torch's
        _get_device_index(device, optional=True) takes, by position and by
        name, and refuses what torch refuses with an exception of torch's
        type (DeviceError is both ValueError and RuntimeError) naming the
        value. Deliberate difference: torch takes 1.5 or object() for the
        current device; coop raises TypeError."""
        import torch as real
        from torch.cuda._utils import _get_device_index

        copy = torch_copy(real)
        ctorch.patch_torch(copy)
        memory = copy.cuda.memory
        p = torch_malloc(3 * MIB, 1, 0)
        q = torch_malloc(1 * MIB, 0, 0)
        try:
            key = "allocated_bytes.all.current"
            on_1, on_0 = 3 * MIB, 1 * MIB
            forms = [(None, on_0), (0, on_0), (1, on_1), (True, on_1), ("cuda", on_0),
                     ("cuda:0", on_0), ("cuda:1", on_1), (real.device("cuda", 1), on_1),
                     (real.device("cuda:1"), on_1), (real.device("cuda"), on_0),
                     (real.cuda.device(1), on_1)]
            for device, expected in forms:
                with self.subTest(device=device):
                    self.assertEqual(memory.memory_stats(device)[key], expected)
                    self.assertEqual(memory.memory_stats(device=device)[key], expected)
                    nested = memory.memory_stats_as_nested_dict(device=device)
                    self.assertEqual(nested["allocated_bytes"]["all"]["current"], expected)
                    self.assertIsNone(memory.reset_peak_memory_stats(device))
                    self.assertIsNone(memory.reset_accumulated_memory_stats(device=device))
            self.assertEqual(type(memory.memory_stats(0)), collections.OrderedDict)
            device_functions = (memory.memory_stats, memory.memory_stats_as_nested_dict,
                                memory.reset_peak_memory_stats,
                                memory.reset_accumulated_memory_stats)
            for bad in ("cpu", "meta", "cuda:x", "1", "cuda:-1", "cuda:", "CUDA:1", "cuda:01",
                        " cuda:1", "cuda:\u00b2", real.device("cpu"), real.device("meta")):
                with self.assertRaises(Exception) as torchs:
                    _get_device_index(bad, optional=True)
                for fn in device_functions:
                    with self.subTest(device=bad, fn=fn.__name__):
                        with self.assertRaises(ctorch.DeviceError) as cm:
                            fn(bad)
                        self.assertIsInstance(cm.exception, type(torchs.exception))
                        self.assertIn(str(bad), str(cm.exception))
            # torch checks an index in C++ (RuntimeError "Invalid device
            # argument"); coop against its 64 slots here (install() narrows
            # them to torch's device count)
            for bad in (-1, 64, 2 ** 32, "cuda:64"):
                for fn in device_functions:
                    with self.subTest(device=bad, fn=fn.__name__):
                        with self.assertRaises(RuntimeError) as cm:
                            fn(bad)
                        self.assertIsInstance(cm.exception, ValueError)
                        self.assertIn("outside 0..63", str(cm.exception))
            for bad in (1.5, object(), [1]):
                for fn in device_functions:
                    with self.subTest(device=bad, fn=fn.__name__):
                        with self.assertRaises(TypeError) as cm:
                            fn(bad)
                        self.assertIn(repr(bad), str(cm.exception))
        finally:
            torch_free(p, 3 * MIB, 1, 0)
            torch_free(q, 1 * MIB, 0, 0)


class Run(unittest.TestCase):
    def test_libcoop_loads_without_tunables(self):
        """libcoop.so links no jemalloc: a running interpreter dlopens it as is."""
        env = dict(os.environ)
        env.pop("GLIBC_TUNABLES", None)
        env.pop("LD_PRELOAD", None)
        env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python")
        code = "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loaded')"
        r = subprocess.run([sys.executable, "-c", code, LIB_PATH], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("loaded", r.stdout)
        # coop.run stays for compatibility and passes the environment through
        r = subprocess.run([sys.executable, "-m", "coop.run", "-c", code, LIB_PATH], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("loaded", r.stdout)

    def test_usage(self):
        """No program is a usage error: exit 2, the usage on stderr only;
        --help prints it on stdout and exits 0."""
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        r = subprocess.run([sys.executable, "-m", "coop.run"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("no program given", r.stderr)
        for flag in ("--help", "-h"):
            r = subprocess.run([sys.executable, "-m", "coop.run", flag], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual((r.returncode, r.stderr), (0, ""), flag)
            self.assertIn("python -m coop.run train.py", r.stdout)

    def test_interpreter_options_reach_the_program(self):
        """python -O -X dev -W error -m coop.run prog runs prog with -O, -X dev
        and -W error, as python -O -X dev -W error prog does (the re-executed
        interpreter dropped them: optimize 0, no dev mode, no warning filter)."""
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        code = "import sys; print(sys.flags.optimize, sys.flags.dev_mode, sys.warnoptions)"
        # (options, how coop.run is named after them): "-OOm coop.run" and
        # "-OOmcoop.run" are "-OO" (the second's -OO was dropped)
        for opts, run in ((["-O", "-X", "dev", "-W", "error"], ["-m", "coop.run"]),
                          (["-O"], ["-mcoop.run"]), ([], ["-OOm", "coop.run"]),
                          ([], ["-OOmcoop.run"])):
            direct = opts or ["-OO"]
            want = subprocess.run([sys.executable] + direct + ["-c", code], env=env,
                                  capture_output=True, text=True, timeout=60).stdout
            r = subprocess.run([sys.executable] + opts + run + ["-c", code], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), want.strip(), opts + run)


class ForkServer(unittest.TestCase):
    def test_a_child_that_ignores_sigalrm_still_times_out(self):
        # the server ends it 1 s past its timeout (the child's alarm is ignored)
        code = "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(600)"
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        with self.assertRaises(subprocess.TimeoutExpired):
            python_child(code, env, timeout=1)
        self.assertEqual(_startup_env(env), _startup_env(_server[1]))  # it was the server's child
        self.assertEqual(python_child("print(6 * 7)", env).stdout, "42\n")  # the server still serves


class Library(unittest.TestCase):
    def test_coop_library_naming_another_library_is_refused_by_name(self):
        """COOP_LIBRARY pointing at a library that is not libcoop (or an older
        one) raises CoopError naming the file and what it lacks, the first
        three names (it raised a bare AttributeError from ctypes)."""
        self.assertIn("raised coop: cannot load libcoop.so; tried: libm.so.6 (not this "
                      "package's libcoop.so: it lacks coop_version, coop_strerror, "
                      "coop_last_error, ...)", self.library_error(COOP_LIBRARY="libm.so.6"))

    def library_error(self, prelude="", **env):
        """What a fresh interpreter prints when native.library() raises
        ("raised" and the CoopError), with env's variables set and the
        Python code prelude run first; it must exit 0."""
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"), **env)
        code = (prelude + "import coop.native as native\n"
                "try:\n    native.library()\n"
                "except native.CoopError as e:\n    print('raised', e)\n")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_library_of_another_version_is_refused_by_name(self):
        """A libcoop.so whose coop_version() is not this package's version is
        refused, naming both (it was used, its structures read through mirrors
        that may not match them)."""
        _dl.coop_version.restype = ctypes.c_char_p
        self.assertIn(f"tried: {os.path.abspath(LIB_PATH)} (libcoop "
                      f"{_dl.coop_version().decode()}; this package is 0.0.9, ",
                      self.library_error("import coop\ncoop.__version__ = '0.0.9'\n"))

    def test_library_of_another_layout_is_refused_by_name(self):
        """A libcoop.so of this version whose structures differ in size from
        the package's ctypes mirrors (another build's headers) is refused,
        naming the structure and both sizes (it was used: a mirror shorter
        than the structure is a buffer overrun in every coop_get_stats)."""
        _dl.coop_abi_size.restype = ctypes.c_size_t
        _dl.coop_abi_size.argtypes = [ctypes.c_char_p]
        theirs = _dl.coop_abi_size(b"coop_stats")
        self.assertGreater(theirs, 8)
        prelude = ("import ctypes, coop.native\n"
                   "class Short(ctypes.Structure):\n"
                   "    _fields_ = [('x', ctypes.c_uint64)]\n"
                   "coop.native.MIRRORS['coop_stats'] = Short\n")
        self.assertIn(f"tried: {os.path.abspath(LIB_PATH)} (libcoop {coop.__version__}, but its "
                      f"coop_stats is {theirs} bytes, this package's mirror 8: use the package "
                      "of the same build)", self.library_error(prelude))
        # a mirror longer than the library's structure is refused too: the
        # package would read and write past what the library fills
        prelude = ("import ctypes, coop.native\n"
                   "class Long(ctypes.Structure):\n"
                   f"    _fields_ = [('x', ctypes.c_char * {theirs + 8})]\n"
                   "coop.native.MIRRORS['coop_stats'] = Long\n")
        self.assertIn(f"but its coop_stats is {theirs} bytes, this package's mirror "
                      f"{theirs + 8}: use the package", self.library_error(prelude))

    def test_library_with_fields_elsewhere_is_refused_by_name(self):
        """A libcoop.so whose structures have the mirrors' sizes but a field
        at another offset (two fields swapped, another build's headers) is
        refused, naming the structure, the field and both offsets (it was
        used: the size check alone let it through, and every read of that
        field took another's bytes). A mirrored field the library lacks is
        refused by name."""
        prelude = ("import ctypes, coop.native\n"
                   "class Swapped(ctypes.Structure):\n"
                   "    _fields_ = [('size', ctypes.c_uint64), ('address', ctypes.c_size_t)]\n"
                   "coop.native.MIRRORS['coop_torch_range'] = Swapped\n")
        self.assertIn(f"tried: {os.path.abspath(LIB_PATH)} (libcoop {coop.__version__}, but its "
                      "coop_torch_range.size is at offset 8, this package's mirror's at 0: use "
                      "the package of the same build)", self.library_error(prelude))
        prelude = ("import ctypes, coop.native\n"
                   "class Renamed(ctypes.Structure):\n"
                   "    _fields_ = [('address', ctypes.c_size_t), ('length', ctypes.c_uint64)]\n"
                   "coop.native.MIRRORS['coop_torch_range'] = Renamed\n")
        self.assertIn("but its coop_torch_range has no field length (this package's mirror "
                      "has it at offset 8): use the package", self.library_error(prelude))

    def test_every_mirror_matches_the_built_library(self):
        """Each ctypes mirror is as large as the structure of the library
        built beside it, each of its fields at that structure's offset, and
        coop_abi_size and coop_abi_offset know every mirrored name."""
        _dl.coop_abi_size.restype = ctypes.c_size_t
        _dl.coop_abi_size.argtypes = [ctypes.c_char_p]
        _dl.coop_abi_offset.restype = ctypes.c_size_t
        _dl.coop_abi_offset.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        for name, mirror in native.MIRRORS.items():
            self.assertEqual(_dl.coop_abi_size(name.encode()), ctypes.sizeof(mirror), name)
            for field, _ in mirror._fields_:
                self.assertEqual(_dl.coop_abi_offset(name.encode(), field.encode()),
                                 getattr(mirror, field).offset, f"{name}.{field}")
        self.assertEqual(_dl.coop_abi_size(b"coop_pool"), 0)
        self.assertEqual(_dl.coop_abi_offset(b"coop_pool", b"size"), ctypes.c_size_t(-1).value)

    def test_every_structure_is_mirrored(self):
        """Every ctypes structure coop.native defines is in MIRRORS, checked
        against the library when it loads: one left out would be used
        unchecked."""
        defined = {v for v in vars(native).values() if isinstance(v, type) and
                   issubclass(v, ctypes.Structure) and v.__module__ == native.__name__}
        self.assertGreater(len(defined), 0)
        self.assertEqual(sorted(c.__name__ for c in defined - set(native.MIRRORS.values())), [])

    def test_the_version_is_one_in_every_place(self):
        """configure.ac's AC_INIT, coop.h's COOP_VERSION_STRING, the package's
        __version__ and the built library's coop_version() agree: the package
        refuses a library of another version, so a release that moved one and
        not the others would refuse its own library."""
        root = os.path.join(HERE, "..", "..")
        with open(os.path.join(root, "configure.ac")) as f:
            ac = re.search(r"AC_INIT\(\[coop\], \[([^]]+)\]", f.read())
        with open(os.path.join(root, "include", "coop.h")) as f:
            h = re.search(r'#define COOP_VERSION_STRING "([^"]+)"', f.read())
        _dl.coop_version.restype = ctypes.c_char_p
        self.assertIsNotNone(ac)
        self.assertIsNotNone(h)
        self.assertEqual({ac.group(1), h.group(1), coop.__version__, _dl.coop_version().decode()},
                         {coop.__version__})

    def test_star_import_keeps_the_torch_name(self):
        """from coop import * binds no name "torch" (it bound coop.torch over
        the torch module a program had imported)."""
        ns = {}
        exec("from coop import *", ns)
        self.assertNotIn("torch", sorted(k for k in ns if k != "__builtins__"))
        self.assertIs(ns["native"], native)

    def test_star_import_of_coop_torch_gives_its_public_functions(self):
        """from coop.torch import * gives every public function and class
        coop.torch defines (forget_stream and settings, both in
        docs/pytorch.md's summary, were missing from __all__)."""
        public = {name for name, obj in vars(ctorch).items()
                  if not name.startswith("_") and callable(obj)
                  and getattr(obj, "__module__", None) == ctorch.__name__}
        ns = {}
        exec("from coop.torch import *", ns)
        self.assertEqual(sorted(public - set(ns)), [])
        self.assertIn("forget_stream", public)

    def test_absent_coop_library_is_named_absent(self):
        self.assertIn("tried: /nonexistent/libcoop.so (absent) (set COOP_LIBRARY",
                      self.library_error(COOP_LIBRARY="/nonexistent/libcoop.so"))

    def test_without_coop_library_the_source_trees_library_is_used(self):
        """Without COOP_LIBRARY, the package of a built source tree loads that
        tree's .libs/libcoop.so, the first place it looks."""
        top = os.path.normpath(os.path.join(HERE, "..", ".."))
        lib = os.path.join(top, ".libs", "libcoop.so")
        if not os.path.exists(lib):
            self.skipTest(f"{lib} is absent (built outside the source tree)")
        env = dict(os.environ, PYTHONPATH=os.path.join(top, "python"))
        env.pop("COOP_LIBRARY", None)
        code = "import coop.native as native\nprint(native.library_path())\n"
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), lib)

    def test_relative_coop_library_is_kept_as_an_absolute_path(self):
        """A relative COOP_LIBRARY (.libs/libcoop.so) gives an absolute
        library_path(): install() and mem_pool() hand it to PyTorch, which
        dlopens it later, perhaps after the program changed directory."""
        top = os.path.dirname(os.path.dirname(os.path.abspath(LIB_PATH)))
        env = dict(os.environ, COOP_LIBRARY=os.path.join(".libs", "libcoop.so"),
                   PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        code = ("import os, coop.native as native\n"
                "native.library()\n"
                "os.chdir('/')\n"
                "print(native.library_path())\n")
        r = subprocess.run([sys.executable, "-c", code], env=env, cwd=top, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), os.path.join(top, ".libs", "libcoop.so"))


class GpuScripts(unittest.TestCase):
    """scripts/gpu/ exit with a clear message where there is no CUDA device."""

    def test_scripts_refuse_without_cuda(self):
        if HAVE_TORCH:
            import torch as real

            if real.cuda.is_available():
                self.skipTest("a CUDA device exists: the scripts would measure for real")
        top = os.path.normpath(os.path.join(HERE, "..", ".."))
        for script in ("train_compare.py", "replay_native_vs_coop.py"):
            r = python_child(script=os.path.join(top, "scripts", "gpu", script))
            self.assertEqual(r.returncode, 77, script + r.stderr)
            self.assertIn("no CUDA device", r.stderr)


class ReplayReader(unittest.TestCase):
    """The replay script's trace readers run on CPU."""

    def setUp(self):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "gpu"))
        import replay_native_vs_coop

        self.replay = replay_native_vs_coop

    def test_text_trace(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"coop_replay_{os.getpid()}.trace")
        with open(path, "w") as f:
            f.write("# test\ncoop-trace 1\nL 7 4096 0\nA 1 512 0 t=5\nR 1\nF 1\n"
                    "S 0x1000 2097152 0\nA 2 0x100 3\nF 7\n")
        try:
            events = self.replay.read_events(path)
        finally:
            os.unlink(path)
        self.assertEqual(events, [("A", 7, 4096, 0), ("A", 1, 512, 0), ("F", 1, 0, 0),
                                  ("A", 2, 256, 3), ("F", 7, 0, 0)])

    def test_torch_snapshot(self):
        folder = os.path.join(HERE, "..", "..", "..", "shared", "workloads", "torch-snapshots")
        path = os.path.join(folder, "cs336-transformer-ctx128-forward.pickle.gz")
        if not os.path.exists(path):
            self.skipTest(f"{path} is absent")
        events = self.replay.read_events(path)
        allocs = [e for e in events if e[0] == "A"]
        self.assertGreater(len(allocs), 100)
        frees = {e[1] for e in events if e[0] == "F"}
        self.assertTrue(frees <= {e[1] for e in allocs})


if __name__ == "__main__":
    unittest.main(verbosity=2)
