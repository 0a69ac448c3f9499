"""Shared by the GPU scripts: CUDA presence, child processes, coop setup.

An allocator can be chosen only once per process, so every measurement runs
in its own child process (``--child``) and prints one JSON line; the parent
collects them and prints them again with summaries.
"""

import argparse
import json
import os
import subprocess
import sys

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
NO_CUDA_EXIT = 77
ALLOCATORS = ("native", "coop")  # what --allocator takes; parents run both


def require_cuda(script):
    """Exits 77 with a one-line reason unless a CUDA device is usable."""
    try:
        import torch
    except ImportError as e:
        sys.stderr.write(f"{script}: no CUDA device: torch is not importable ({e})\n")
        sys.exit(NO_CUDA_EXIT)
    if not torch.cuda.is_available():
        sys.stderr.write(f"{script}: no CUDA device (torch {torch.__version__}: "
                         "torch.cuda.is_available() is False); nothing measured\n")
        sys.exit(NO_CUDA_EXIT)


def child_env():
    """The environment for children: coop's package and library (libcoop.so
    links no jemalloc, so dlopen needs no GLIBC_TUNABLES)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(TOP, "python") + os.pathsep + env.get("PYTHONPATH", "")
    if "COOP_LIBRARY" not in env:
        lib = os.path.join(TOP, ".libs", "libcoop.so")
        if os.path.exists(lib):
            env["COOP_LIBRARY"] = lib
    return env


def arg_parser(doc):
    """The parser of a script that measures in --child processes: its
    description (doc's first line) and --child (hidden)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def add_parent_options(p):
    """The parent's --conf (given on to coop children) and --timeout (seconds
    a child may take), as run_child takes them."""
    p.add_argument("--conf", default=None, help="COOP_ALLOC_CONF for coop runs")
    p.add_argument("--timeout", type=int, default=1800)


def run_child(script_path, args, opts):
    """Runs script_path --child args (and --conf opts.conf if set) for at most
    opts.timeout seconds; returns (parsed last JSON line or None, rc, stderr tail)."""
    if opts.conf:
        args = list(args) + ["--conf", opts.conf]
    cmd = [sys.executable, script_path, "--child"] + [str(a) for a in args]
    try:
        r = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=opts.timeout)
    except subprocess.TimeoutExpired:
        return None, -1, "timeout"
    result = None
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                pass
    return result, r.returncode, r.stderr[-2000:]


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def install_allocator(kind, conf):
    """In a child, before any CUDA work: 'native' or 'coop'."""
    if kind == "coop":
        import coop.torch

        coop.torch.install(conf)


def peak_reserved(kind, device=0):
    import torch

    if kind == "coop":
        import coop.torch

        return coop.torch.memory_stats(device)["reserved_bytes.all.peak"]
    return torch.cuda.max_memory_reserved(device)


def peak_allocated(kind, device=0):
    import torch

    if kind == "coop":
        import coop.torch

        return coop.torch.memory_stats(device)["allocated_bytes.all.peak"]
    return torch.cuda.max_memory_allocated(device)


def oom_happened(kind):
    """coop returns NULL on OOM and PyTorch's pluggable route does not check
    it: ask coop. The native allocator raises by itself."""
    if kind != "coop":
        return False
    import coop.torch

    try:
        coop.torch.check_oom()
    except coop.torch.OutOfMemoryError:
        return True
    return False
