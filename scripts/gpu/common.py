"""Shared by the GPU scripts: CUDA presence, child processes, coop setup,
JSON lines, output files.

An allocator can be chosen only once per process (torch's
change_current_allocator refuses once CUDA's allocator is initialized), so
every measurement runs in its own child process (``--child``) and prints one
JSON line; the parent collects them and prints them again with summaries
(and appends every line to ``--out FILE`` when given).

``--dry-run`` runs the whole orchestration on the CPU: children build the
models on the CPU (or skip the device work) and report fake measurements,
marked ``"dry_run": true``; no CUDA device or CUDA build of torch is needed.

Output files (snapshots) are written through ``replacing`` (the recorders'
writer, scripts/atomic_file.py), so a failed run leaves the previous file,
never a truncated one.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
if os.path.join(TOP, "scripts") not in sys.path:
    sys.path.append(os.path.join(TOP, "scripts"))
import interrupt  # noqa: E402,F401  (Ctrl-C: one line, no traceback)
from atomic_file import replacing  # noqa: E402,F401  (the GPU scripts' output writer)
from json_rows import json_line  # noqa: E402  (their JSON lines)
NO_CUDA_EXIT = 77
ALLOCATORS = ("native", "coop")  # what --allocator takes; parents run both
DEADLINE_MARGIN_S = 5  # a child is not started with less time than this left

_out_path = None  # --out: every emitted line is appended there too
_deadline = None  # time.monotonic() after which no child starts (--deadline)


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
    links no jemalloc, so dlopen needs no GLIBC_TUNABLES), unbuffered
    output, and cuBLAS's deterministic workspace setting (needed by
    torch.use_deterministic_algorithms; must be set before CUDA starts)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(TOP, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if "COOP_LIBRARY" not in env:
        lib = os.path.join(TOP, ".libs", "libcoop.so")
        if os.path.exists(lib):
            env["COOP_LIBRARY"] = lib
    return env


def arg_parser(doc):
    """The parser of a script that measures in --child processes: its
    description (doc's first line), --child (hidden) and --dry-run."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true",
                   help="run everything but the device, on the CPU, with fake measurements")
    return p


def add_parent_options(p):
    """The parent's --conf (given on to coop children), --native-conf (to
    native children), --timeout (seconds a
    child may take), --deadline (seconds after which no child is started, so
    a run fits a bounded device call) and --out (JSON lines file)."""
    p.add_argument("--conf", default=None, help="COOP_ALLOC_CONF for coop runs")
    p.add_argument("--native-conf", default=None, metavar="CONF",
                   help="PYTORCH_CUDA_ALLOC_CONF for the native runs (e.g. "
                        "expandable_segments:True); coop runs never see it")
    p.add_argument("--timeout", type=int, default=300, help="seconds one child may take")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds from the start after which no child is started (0: none)")
    p.add_argument("--out", default=None, help="also append every JSON line to this file")


def start_parent(opts, script):
    """Applies --out and --deadline, and emits the environment line."""
    global _out_path, _deadline
    if opts.out:  # refused at once, in one line: emit's open was a traceback
        try:
            with open(opts.out, "a"):
                pass
        except OSError as e:
            print("%s: error: --out %s: %s" % (script, opts.out, e.strerror or e), file=sys.stderr)
            sys.exit(2)
    _out_path = opts.out
    _deadline = time.monotonic() + opts.deadline if opts.deadline > 0 else None
    emit(dict(environment(opts.dry_run), script=script, summary="environment",
              argv=sys.argv[1:], native_conf=getattr(opts, "native_conf", None)))


def time_left():
    """Seconds before --deadline (None: no deadline)."""
    return None if _deadline is None else _deadline - time.monotonic()


def run_child(script_path, args, opts):
    """Runs script_path --child args (with --conf and --dry-run when set) for
    at most opts.timeout seconds, or what is left before --deadline; returns
    (parsed last JSON line or None, rc, stderr tail). rc is -1 on a timeout
    and -2 when the deadline left no time to start it."""
    timeout = opts.timeout
    left = time_left()
    if left is not None:
        if left < DEADLINE_MARGIN_S:
            return None, -2, "not started: --deadline reached"
        timeout = min(timeout, left)
    args = [str(a) for a in args]
    if opts.conf:
        args += ["--conf", opts.conf]
    if getattr(opts, "native_conf", None):
        args += ["--native-conf", opts.native_conf]
    if opts.dry_run:
        args.append("--dry-run")
    cmd = [sys.executable, script_path, "--child"] + args
    try:
        r = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, -1, f"timeout after {timeout:.0f} s"
    result = None
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                pass
    return result, r.returncode, r.stderr[-2000:]


def run_checks(script_path, opts, runs, failures, summary):
    """The parent of a check script: runs each child of runs, a list of
    (name, child args, COOP_ALLOC_CONF or None, the fields that name the run),
    prints its line (or, when it printed none, the run's fields with "ok":
    false and the exit), collects failures(line) by name, then prints
    {"summary": summary, "ok", "failures"}. Returns the exit status: 1 when
    a run failed a rule, else 0."""
    found = {}
    for name, child_args, conf, fields in runs:
        child_opts = argparse.Namespace(**vars(opts))
        child_opts.conf = conf
        line, rc, err = run_child(script_path, child_args, child_opts)
        if line is None:
            line = dict(fields, ok=False, error="child exit %s: %s" % (rc, err[-300:]))
        emit(line)
        broken = failures(line)
        if broken:
            found[name] = broken
    emit({"summary": summary, "ok": not found, "failures": found})
    return 1 if found else 0


def first_line(e):
    """An exception as one short line: its type and the first line of its
    message (CUDA errors run over several lines; an empty message is fine)."""
    return "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:300])


def emit(obj):
    """Prints obj as one JSON line (sorted keys; a NaN or infinite float, a
    diverged loss say, as null); appends it to --out."""
    line = json_line(obj)  # NaN / Infinity as null: JSON has neither
    print(line, flush=True)
    if _out_path:
        with open(_out_path, "a") as f:
            f.write(line + "\n")


def finish_child(rc):
    """Ends a child at once after its JSON line: skips interpreter and CUDA
    teardown, which can hang or abort after a failed step (a NULL from coop
    ends in an illegal address, which poisons the CUDA context)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def _nvidia_smi(query):
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(dry_run):
    """What the figures were measured on: device, driver, torch, CUDA, date.
    Never initializes CUDA (the parent stays CUDA-free)."""
    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "python": platform.python_version(), "host": platform.node(), "dry_run": dry_run,
           "conf_env": {k: os.environ.get(k) for k in
                        ("COOP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}}
    try:
        import torch

        env.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    except ImportError:
        env.update(torch=None, torch_cuda=None)
    if not dry_run:
        env.update(device=_nvidia_smi("name"), driver=_nvidia_smi("driver_version"),
                   device_memory=_nvidia_smi("memory.total"))
    return env


def install_allocator(kind, conf, native_conf=None):
    """In a child, before any CUDA work: 'native' (with native_conf as its
    PYTORCH_CUDA_ALLOC_CONF when given) or 'coop' (with conf as its
    COOP_ALLOC_CONF). A native_conf replaces whatever PYTORCH_CUDA_ALLOC_CONF
    the environment had; without one the environment's stands."""
    if kind == "coop":
        import coop.torch

        coop.torch.install(conf)
    elif native_conf:
        # read by torch when its allocator starts (the first CUDA allocation)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = native_conf


def coop_settings():
    """coop's configuration in force (COOP_ALLOC_CONF resolved), as text;
    raises coop.torch.CoopConfigError for one that does not parse (a result
    recorded with the error text as its settings would look valid)."""
    import coop.torch

    return coop.torch.settings()


def peak_reserved(kind, device=0):
    """Peak reserved bytes of this process's allocator: torch's
    reserved_bytes.all.peak (max_memory_reserved) for native; coop's own
    statistics for coop (torch's memory_stats raises under a pluggable
    allocator unless coop.torch patched it)."""
    if kind == "coop":
        import coop.torch

        return coop.torch.memory_stats(device)["reserved_bytes.all.peak"]
    import torch

    return torch.cuda.max_memory_reserved(device)


def peak_allocated(kind, device=0):
    if kind == "coop":
        import coop.torch

        return coop.torch.memory_stats(device)["allocated_bytes.all.peak"]
    import torch

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
