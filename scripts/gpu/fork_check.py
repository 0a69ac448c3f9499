#!/usr/bin/env python3
"""A CUDA pool across fork(), on the real driver: what libcoop promises in
include/coop.h ("Process lifecycle") for a child forked from a process that
uses a CUDA pool, checked where it matters. tests/lifecycle_cuda_mock_test
checks the same on the mock driver (tests/mock_cuda_driver.c), which, unlike
a real driver, keeps working in a forked child; only a device says whether
the parent's pool and memory come through the child's life unharmed.

Through libcoop's C API (ctypes; COOP_LIBRARY or the build's libcoop.so, as
python/coop/native.py finds it), on device 0:

1. The parent creates a CUDA pool (capacity 256 MiB), allocates 1 MiB,
   fills it with 0x5A (the driver's cuMemsetD8 on the primary context) and
   counts the pool's backend calls.
2. It forks. The child, which must not touch the device:
   - coop_malloc refuses with COOP_ERR_UNSUPPORTED and a message naming
     "forked child" ("child_malloc_refused", "child_message");
   - coop_free of the parent's block refuses likewise and is a no-op
     ("child_free_refused");
   - the pool's backend call count did not move ("child_no_backend_call");
   - coop_pool_create with the CUDA backend refuses
     ("child_cuda_create_refused");
   - a host pool works there ("child_host_pool_works");
   - coop_pool_destroy of the inherited pool returns and says the device
     memory is left to the parent ("child_destroy_message").
   It writes its findings to a pipe, then, as an observation only, asks the
   driver for its free memory in the child ("driver_in_child": the result
   name; coop never makes that call), and exits.
3. The parent, after the child's exit: the block still holds 0x5A
   ("parent_contents_kept"), coop_free and a new coop_malloc of 1 MiB work
   ("parent_usable"), coop_pool_check passes ("parent_check"), and after
   coop_pool_destroy the device's free memory is what it was before the pool
   ("parent_free_restored", within 64 MiB: the driver's own allocations
   move it; an observation, not part of the verdict).

Before all that, as an observation only ("foreign_init"): a child forked
from this process after the driver was initialized here outside coop (the
script's own cuInit, through ctypes; coop has made no driver call yet, so
it does not know) calls coop_pool_create with the CUDA backend on device 0.
Expected: a refusal with a message (COOP_ERR_NO_DRIVER: the child's cuInit
fails), not a hang nor a pool; the line keeps the status's name, the
message and the seconds it took ("foreign_init": {"status", "message",
"seconds", "child_exit"}; "status": "no answer" when the child had to be
killed after --timeout s). The mock driver, which works in a forked child,
answers OK there (the child then destroys the pool).

With --torch, also the PyTorch ABI route, in a fresh process:
coop.torch.install(), a CUDA tensor filled with 3.0, fork; the child's
coop_torch_malloc returns NULL with a message naming the forked child
("torch_child_malloc_refused"), torch itself refuses CUDA there
("torch_child_torch_refused", its message kept); the parent's tensor
doubled sums to 6.0 per element after the child exits ("torch_parent_ok").
Without a CUDA torch that part says why it did not run ("torch": "skipped:
...").

One JSON line; exit 0 when every verdict finding holds, 1 when one does
not or a step failed ("error" names it), 77 with a one-line reason without
a driver or device. COOP_CUDA_DRIVER names the driver library, as for
libcoop. A child that does not report within --timeout seconds (default
30) is killed and counted as failed.

Usage: fork_check.py [--torch] [--timeout S]
"""

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from driver_ctypes import (DriverError, fill, free_bytes, open_driver,  # noqa: E402
                           primary_context, read_back)

BLOCK = 1 << 20
CAPACITY = 256 << 20
FILL = 0x5A
FAULT_ALL = 0x1F  # COOP_FAULT_ALL: every kind of backend call
FREE_SLACK = 64 << 20

# the findings that make the verdict; the rest are observations
CHILD_VERDICT = ("child_malloc_refused", "child_free_refused", "child_no_backend_call",
                 "child_cuda_create_refused", "child_host_pool_works")
PARENT_VERDICT = ("parent_contents_kept", "parent_usable", "parent_check")
TORCH_VERDICT = ("torch_child_malloc_refused", "torch_child_torch_refused", "torch_parent_ok")


def verdict(line):
    """True when every verdict finding present in line is true and the
    child's and parent's (and, if it ran, torch's) are all there."""
    need = list(CHILD_VERDICT + PARENT_VERDICT)
    if isinstance(line.get("torch"), dict):
        need += TORCH_VERDICT
    return "error" not in line and all(line.get(k) is True for k in need)


def coop_api():
    """libcoop with the pool calls' argument types (native.py sets those of
    the statistics and the PyTorch ABI only)."""
    from coop import native

    lib = native.library()
    P = ctypes.c_void_p
    sigs = {
        "coop_config_default": (None, [ctypes.POINTER(native.Config)]),
        "coop_pool_create": (ctypes.c_int, [ctypes.POINTER(native.Config), ctypes.POINTER(P)]),
        "coop_pool_destroy": (None, [P]),
        "coop_malloc": (P, [P, ctypes.c_size_t, P, ctypes.c_uint, ctypes.POINTER(ctypes.c_int)]),
        "coop_free": (ctypes.c_int, [P, P]),
        "coop_backend_calls": (ctypes.c_uint64, [P, ctypes.c_uint]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib, native


def make_pool(lib, native, backend):
    config = native.Config()
    lib.coop_config_default(ctypes.byref(config))
    config.backend, config.device, config.capacity = backend, 0, CAPACITY
    pool = ctypes.c_void_p()
    status = lib.coop_pool_create(ctypes.byref(config), ctypes.byref(pool))
    return status, pool


def last_error(lib):
    return (lib.coop_last_error() or b"").decode(errors="replace")


def child_findings(lib, native, pool, block, calls_before):
    out = {}
    status = ctypes.c_int(-1)
    p = lib.coop_malloc(pool, BLOCK, None, 0, ctypes.byref(status))
    out["child_message"] = last_error(lib)
    out["child_malloc_refused"] = (not p and status.value == native.ERR_UNSUPPORTED
                                   and "forked child" in out["child_message"])
    out["child_free_refused"] = lib.coop_free(pool, block) == native.ERR_UNSUPPORTED
    out["child_no_backend_call"] = lib.coop_backend_calls(pool, FAULT_ALL) == calls_before
    status_create, other = make_pool(lib, native, 1)  # COOP_BACKEND_CUDA
    out["child_create_message"] = last_error(lib)
    out["child_cuda_create_refused"] = status_create == native.ERR_UNSUPPORTED
    if status_create == native.OK:
        lib.coop_pool_destroy(other)
    works = False
    status_host, host = make_pool(lib, native, 0)  # COOP_BACKEND_HOST
    if status_host == native.OK:
        q = lib.coop_malloc(host, BLOCK, None, 0, ctypes.byref(status))
        works = bool(q) and lib.coop_free(host, q) == native.OK
        lib.coop_pool_destroy(host)
    out["child_host_pool_works"] = works
    lib.coop_pool_destroy(pool)
    out["child_destroy_message"] = last_error(lib)
    return out


def wait_child(pid, fd, timeout):
    """The child's JSON findings (None if it sent none in time) and its exit
    status (None if it had to be killed)."""
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    for _ in range(int(max(1, deadline - time.monotonic()) * 10)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = None
    first = data.split(b"\n", 1)[0]
    try:
        found = json.loads(first) if first else None
    except ValueError:
        found = None
    extra = {}
    for raw in data.split(b"\n")[1:]:
        if raw.strip():
            try:
                extra.update(json.loads(raw))
            except ValueError:
                pass
    if found is not None:
        found.update(extra)
    code = None if status is None else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else
                                        -os.WTERMSIG(status))
    return found, code


def status_name(native, status):
    names = {getattr(native, n): n for n in dir(native) if n == "OK" or n.startswith("ERR_")}
    return "COOP_" + names[status] if status in names else f"status {status}"


def foreign_init_observation(line, timeout):
    """A CUDA coop_pool_create in a child forked after this process's own
    cuInit (open_driver), coop not yet initialized: what it answers, and
    how fast (an observation: "foreign_init")."""
    lib, native = coop_api()
    sys.stdout.flush()
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            status, pool = make_pool(lib, native, 1)  # COOP_BACKEND_CUDA
            out = {"status": status_name(native, status), "message": last_error(lib)}
            if status == native.OK:
                lib.coop_pool_destroy(pool)
            os.write(w, (json.dumps(out) + "\n").encode())
        finally:
            os._exit(0)
    os.close(w)
    found, code = wait_child(pid, r, timeout)
    seen = found or {"status": "no answer", "message": f"nothing within {timeout} s"}
    seen.update(seconds=round(time.monotonic() - start, 2), child_exit=code)
    line["foreign_init"] = seen


def pool_check(drv, line, timeout):
    lib, native = coop_api()
    with primary_context(drv):
        free_start = free_bytes(drv)
    status, pool = make_pool(lib, native, 1)
    if status != native.OK:
        raise DriverError(f"coop_pool_create (CUDA, device 0): {last_error(lib)}")
    st = ctypes.c_int(-1)
    block = lib.coop_malloc(pool, BLOCK, None, 0, ctypes.byref(st))
    if not block:
        lib.coop_pool_destroy(pool)
        raise DriverError(f"coop_malloc of 1 MiB in the parent: {last_error(lib)}")
    with primary_context(drv):
        fill(drv, block, FILL, BLOCK)
        drv("cuCtxSynchronize")
    calls = lib.coop_backend_calls(pool, FAULT_ALL)
    sys.stdout.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing but coop's calls, then the observation
        os.close(r)
        try:
            found = child_findings(lib, native, pool, block, calls)
        except Exception as e:  # noqa: BLE001  (reported, not raised, in a child)
            found = {"child_error": repr(e)}
        os.write(w, (json.dumps(found) + "\n").encode())
        try:
            free = ctypes.c_size_t()
            total = ctypes.c_size_t()
            rc = drv.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            os.write(w, (json.dumps({"driver_in_child": drv.error_name(rc)}) + "\n").encode())
        finally:
            os._exit(0)
    os.close(w)
    found, code = wait_child(pid, r, timeout)
    line["child_exit"] = code
    if found is None:
        line["error"] = f"the child sent no findings within {timeout} s (exit {code})"
    else:
        line.update(found)
    with primary_context(drv):
        line["parent_contents_kept"] = read_back(drv, block, BLOCK) == bytes([FILL]) * BLOCK
    freed = lib.coop_free(pool, block)
    again = lib.coop_malloc(pool, BLOCK, None, 0, ctypes.byref(st))
    line["parent_usable"] = freed == native.OK and bool(again)
    if again:
        lib.coop_free(pool, again)
    line["parent_check"] = lib.coop_pool_check(pool) == native.OK
    lib.coop_pool_destroy(pool)
    with primary_context(drv):
        drv("cuCtxSynchronize")
        line["parent_free_restored"] = abs(free_bytes(drv) - free_start) <= FREE_SLACK


TORCH_CHILD = r"""
import ctypes, json, os, sys
try:
    import torch
except ImportError as e:
    print(json.dumps({"skipped": "no torch (" + str(e) + ")"}))
    sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "torch has no CUDA device (torch " + torch.__version__ + ")"}))
    sys.exit(0)
import coop.torch
from coop import native
coop.torch.install()
x = torch.full((1 << 18,), 3.0, device="cuda")
torch.cuda.synchronize()
lib = native.library()
r, w = os.pipe()
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    os.close(r)
    out = {}
    p = lib.coop_torch_malloc(1 << 20, 0, None)
    buf = ctypes.create_string_buffer(1024)
    lib.coop_torch_last_error(buf, len(buf))
    out["torch_child_message"] = buf.value.decode(errors="replace")
    out["torch_child_malloc_refused"] = (not p) and "forked child" in out["torch_child_message"]
    try:
        torch.empty(16, device="cuda")
        out["torch_child_torch_refused"] = False
    except RuntimeError as e:
        out["torch_child_torch_refused"] = True
        out["torch_child_torch_message"] = str(e)[:300]
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = b""
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
out = json.loads(data) if data else {"error": "the child sent nothing"}
out["torch_child_exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
y = x * 2
out["torch_parent_ok"] = float(y.sum().item()) == 6.0 * (1 << 18)
print(json.dumps(out))
"""


def torch_check(line, timeout):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        r = subprocess.run([sys.executable, "-c", TORCH_CHILD], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        line["torch"] = {}
        line["error"] = f"the torch route did not finish within {timeout} s"
        return
    last = r.stdout.strip().splitlines()[-1:] or [""]
    try:
        found = json.loads(last[0])
    except ValueError:
        found = None
    if r.returncode != 0 or found is None:
        line["torch"] = {}
        line["error"] = f"the torch route exited {r.returncode}: {r.stderr.strip()[-400:]}"
        return
    if "skipped" in found:
        line["torch"] = "skipped: " + found["skipped"]
        return
    line["torch"] = found
    for key in TORCH_VERDICT:
        line[key] = found.get(key)
    if "error" in found:
        line["error"] = "torch route: " + found["error"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch", action="store_true", help="also the PyTorch ABI route")
    p.add_argument("--timeout", type=float, default=30.0)
    opts = p.parse_args(argv)
    if opts.timeout <= 0:
        p.error("--timeout must be positive")
    drv = open_driver("fork_check.py")
    line = {"check": "fork", "block_bytes": BLOCK}
    try:
        foreign_init_observation(line, opts.timeout)
        pool_check(drv, line, opts.timeout)
        if opts.torch:
            torch_check(line, opts.timeout * 4)
        else:
            line["torch"] = "skipped: not asked (--torch)"
    except (DriverError, AttributeError, OSError) as e:
        line["error"] = str(e)
    except Exception as e:  # noqa: BLE001  (libcoop not found: native.CoopError)
        line["error"] = f"{type(e).__name__}: {e}"
    line["ok"] = verdict(line)
    print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
