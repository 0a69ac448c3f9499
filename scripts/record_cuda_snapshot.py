#!/usr/bin/env python3
"""Records real CUDA memory snapshots of one training step of the models in
models.py, with PyTorch's native caching allocator (no PYTORCH_CUDA_ALLOC_CONF
needed; whatever is set is recorded in the snapshot's allocator_settings when
the torch version writes them).

For each model: build it on the GPU, run one warm-up step (so optimizer state
and the allocator's cached segments exist, as in a running job), synchronize,
start torch.cuda.memory._record_memory_history, run the recorded step,
synchronize, and dump the snapshot (the pickle PyTorch writes: `segments`,
`device_traces`, ...) gzip-compressed to DIR/<model>-train-step.cuda.pickle.gz.
Weights and optimizer state allocated before recording show up as allocated
blocks in the final `segments` never seen in the trace: a reader treats them as
live from the start.

Handles both history APIs: torch >= 2.1 (_record_memory_history(enabled="all",
context=..., stacks=..., max_entries=...), _dump_snapshot) and torch 2.0
(_record_memory_history(True, trace_alloc_max_entries=...), _snapshot()); torch
1.13's allocator has no allocation trace (device_traces), so it is refused
(exit 1) before any model is built.

Prints one JSON line per model (path, events by action, peaks, sizes, torch,
GPU, the model's configuration); --out FILE appends them there too.

--dry-run does everything but the device on the CPU: it checks the model
names and the output folder, and writes and reads back a small synthetic
snapshot with the same writer (DIR/dry-run.cuda.pickle.gz).

Usage:
  record_cuda_snapshot.py [--out-dir DIR] [--batch N] [--device cuda:0]
                          [--out FILE] [--dry-run] [MODEL ...]
Exits 77 with a one-line message when no CUDA device is present (as the
scripts in scripts/gpu/), 2 on bad arguments (an unknown model, --batch below
1, an --out-dir that cannot be made, an --out in a missing folder or that is
a folder), all found before any model is built.
"""

import argparse
import gc
import gzip
import json
import os
import pickle
import sys
import time

import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)

MAX_ENTRIES = 2_000_000  # ring-buffer size: far above one step's events
NO_CUDA_EXIT = 77
# Pickle protocol of the files written: coop's reader (src/trace/pickle.c)
# takes 2 to 5; torch's own _dump_snapshot writes Python's default (4 on the
# Pythons torch supports today). Fixed so a newer Python changes nothing.
PICKLE_PROTOCOL = 4


def check_history_api(torch):
    """Refuses, before any model is built (a build and a warm-up step take
    minutes), a torch whose _record_memory_history takes neither the 2.1+
    keywords nor 2.0's trace_alloc_max_entries: 1.13's (enabled, device)
    records no allocation trace. A signature that cannot be read, or one
    taking **kwargs (2.1+ passes a bool on to its legacy form), is left to
    start_history."""
    import inspect

    record = getattr(torch.cuda.memory, "_record_memory_history", None)
    try:
        params = inspect.signature(record).parameters if record else {}
    except (TypeError, ValueError):
        return
    if record and (any(p.kind == p.VAR_KEYWORD for p in params.values())
                   or "max_entries" in params or "trace_alloc_max_entries" in params):
        return
    raise SystemExit(
        "record_cuda_snapshot.py: torch %s has no allocation trace in its memory history "
        "(needs torch >= 2.0)" % torch.__version__
    )


def start_history():
    import torch

    record = torch.cuda.memory._record_memory_history
    try:  # torch >= 2.1
        record(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
        return "2.1+"
    except TypeError:
        pass
    try:  # torch 2.0
        record(True, record_context=True, trace_alloc_max_entries=MAX_ENTRIES, trace_alloc_record_context=True)
        return "2.0"
    except TypeError:
        raise SystemExit(
            "record_cuda_snapshot.py: torch %s has no allocation trace in its memory history "
            "(needs torch >= 2.0)" % torch.__version__
        )


def stop_history():
    import torch

    record = torch.cuda.memory._record_memory_history
    try:
        record(enabled=None)
    except TypeError:
        record(False)


def snapshot_bytes():
    import torch

    mem = torch.cuda.memory
    if hasattr(mem, "_snapshot"):
        return pickle.dumps(mem._snapshot(), protocol=PICKLE_PROTOCOL)
    raise SystemExit("record_cuda_snapshot.py: torch %s has no torch.cuda.memory._snapshot" % torch.__version__)


def summarize(snap):
    traces = snap.get("device_traces", [])
    events = sum(len(t) for t in traces)
    actions = {}
    for t in traces:
        for e in t:
            actions[e["action"]] = actions.get(e["action"], 0) + 1
    reserved = sum(s["total_size"] for s in snap.get("segments", []))
    return {"events": events, "actions": actions, "final_reserved_bytes": reserved}


def not_appendable(path):
    """Why JSON lines cannot be appended to path, checked before any work
    (no torch import, no recording), or None. The file is not created here:
    a run that records nothing leaves none."""
    if os.path.isdir(path):
        return "Is a directory"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else "Permission denied"
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.stat(parent)
    except OSError as e:
        return e.strerror
    if not os.path.isdir(parent):
        return "Not a directory"
    return None if os.access(parent, os.W_OK) else "Permission denied"


def emit(obj, out):
    line = json.dumps(obj, sort_keys=True)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def dry_run(out_dir, out):
    """The writer and the summary on a synthetic two-event snapshot."""
    import models

    snap = {
        "segments": [{"device": 0, "address": 1 << 30, "total_size": 2 << 20, "stream": 0,
                      "segment_type": "large", "allocated_size": 4096, "active_size": 4096,
                      "blocks": [{"address": 1 << 30, "size": 4096, "requested_size": 4000,
                                  "state": "active_allocated", "frames": []}]}],
        "device_traces": [[{"action": "alloc", "addr": 1 << 30, "size": 4096, "stream": 0,
                            "time_us": 1, "frames": []},
                           {"action": "segment_alloc", "addr": 1 << 30, "size": 2 << 20,
                            "stream": 0, "time_us": 0, "frames": []}]],
    }
    path = os.path.join(out_dir, "dry-run.cuda.pickle.gz")
    models.write_gz(path, pickle.dumps(snap, protocol=PICKLE_PROTOCOL))
    with gzip.open(path, "rb") as f:
        back = pickle.load(f)
    stats = summarize(back)
    stats.update(path=path, bytes_gz=os.path.getsize(path), dry_run=True,
                 round_trip=back == snap)
    emit(stats, out)


def record(name, batch, device, out_dir, out=None):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models

    t0 = time.time()
    w = models.build(name, device=device, batch=batch)
    w.warm_up()
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    api = start_history()
    w.recorded_step()
    torch.cuda.synchronize(device)
    data = snapshot_bytes()
    stop_history()
    path = os.path.join(out_dir, "%s-train-step.cuda.pickle.gz" % name)
    models.write_gz(path, data)
    stats = summarize(pickle.loads(data))
    stats.update(
        {
            "model": name,
            "path": path,
            "max_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "bytes_gz": os.path.getsize(path),
            "seconds": round(time.time() - t0, 1),
            "history_api": api,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(device),
            "config": w.config,
        }
    )
    emit(stats, out)
    del w
    gc.collect()
    torch.cuda.empty_cache()


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="models to record (default: all of models.ALL)")
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "traces"))
    ap.add_argument("--batch", type=int, default=None, help="override the model's batch size")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", default=None, help="also append every JSON line to this file")
    ap.add_argument("--dry-run", action="store_true",
                    help="everything but the device: names, folder, the writer (CPU)")
    opts = ap.parse_args(argv)
    if opts.batch is not None and opts.batch < 1:
        # the builders read 0 as "the default"; a negative one failed in torch
        ap.error("--batch: %d is not a batch size (1 or more)" % opts.batch)
    why = opts.out and not_appendable(opts.out)
    if why:
        # found by emit's open(out, "a"): a traceback after the recording
        ap.error("--out %s: %s" % (opts.out, why))

    sys.path.insert(0, here)
    try:
        import torch
    except ImportError as e:
        print("record_cuda_snapshot.py: no CUDA device: PyTorch is not importable (%s)" % e,
              file=sys.stderr)
        return NO_CUDA_EXIT
    import models

    models.check_recording(ap, opts.models, opts.out_dir)
    if opts.dry_run:
        dry_run(opts.out_dir, opts.out)
        return 0
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(
            "record_cuda_snapshot.py: no CUDA device present (torch %s, built with CUDA: %s); "
            "run it on a machine with an NVIDIA GPU and a CUDA build of PyTorch >= 2.0"
            % (torch.__version__, torch.version.cuda or "no"),
            file=sys.stderr,
        )
        return NO_CUDA_EXIT
    check_history_api(torch)
    for name in opts.models or models.ALL:
        record(name, opts.batch, opts.device, opts.out_dir, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
