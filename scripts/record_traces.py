#!/usr/bin/python3
"""Records real allocation traces of one training step, from PyTorch's own
allocator events, as coop text traces (traces/README.md, format version 1).

Source of the events: torch.profiler with profile_memory=True. With it on,
c10's CPU allocator reports every tensor-storage allocation and free
(pointer, bytes; frees carry negative bytes) to the profiler, which keeps
them as "[memory]" Allocation events with nanosecond timestamps
(kineto_results.experimental_event_tree() in torch 1.13). Nothing here
models PyTorch: the addresses, sizes and order are the allocator's.

The profiler is started before the model is built, because the CPU allocator
only reports the free of a block whose allocation it saw while profiling.
The model is built, one warm-up step runs (so optimizer state exists), and
then the recorded step runs inside a record_function("coop::recorded_step")
range. Allocations and frees inside that range become `A` / `F` lines; blocks
allocated before it and still live at its start (weights, optimizer state,
the batch, ...) become `L` lines at the top. Allocations and frees are paired
by address. Every line carries addr= (the recorded address) and A lines t=
(microseconds since the step began). One stream: 0 (CPU).

Usage:
  record_traces.py [--out-dir DIR] [--batch N] MODEL ...     (models.ALL)
  record_traces.py [--out-dir DIR] [--batch N] --workload FILE.py:FUNC ...
Writes DIR/<model>-train-step.trace.gz and prints events, peak live bytes and
how long recording took. --workload records your own model, as
record_ops.py --workload does (it imports FILE, running your code; see
record_ops.py --help for what FUNC returns and the errors). With
--workload, DIR defaults to the current directory. Then: ./coop replay DIR/NAME-train-step.trace.gz
"""

import argparse
import datetime
import gc
import os
import sys
import time

# One BLAS thread by default: gentle on a shared machine; allocations do not depend on it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import interrupt  # noqa: E402,F401  (Ctrl-C: one line, no traceback)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

MARKER = "coop::recorded_step"


def _walk(nodes):
    """Pre-order walk of the profiler's event tree, without recursion."""
    stack = list(reversed(nodes))
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def allocation_events(prof):
    """[(t_ns, ptr, nbytes)] of all CPU allocator events (nbytes < 0: free)
    in time order, and the marker's (start_ns, end_ns)."""
    tree = prof.profiler.kineto_results.experimental_event_tree()
    events = []
    marker = None
    seq = 0
    for n in _walk(tree):
        ef = n.extra_fields
        if type(ef).__name__ == "_ExtraFields_Allocation":
            if ef.device.type == "cpu":
                events.append((n.start_time_ns, seq, ef.ptr, ef.alloc_size))
                seq += 1
        elif n.name == MARKER:
            marker = (n.start_time_ns, n.end_time_ns)
    if marker is None:
        raise RuntimeError("profiler tree has no %s range" % MARKER)
    events.sort()  # by time; tree order breaks ties
    return [(t, p, b) for t, _, p, b in events], marker


def to_trace(events, marker, header):
    """Turns allocator events into coop text trace lines. Returns (lines,
    stats)."""
    start, end = marker
    live = {}  # ptr -> (id, size)
    stats = {"A": 0, "F": 0, "L": 0, "unpaired_frees_before": 0, "unpaired_frees": 0, "realloc_live": 0}
    pre = {}  # ptr -> size, live before the step
    for t, ptr, nbytes in events:
        if t >= start:
            break
        if nbytes > 0:
            if ptr in pre:
                stats["realloc_live"] += 1
            pre[ptr] = nbytes
        elif pre.pop(ptr, None) is None:
            stats["unpaired_frees_before"] += 1

    lines = list(header)
    lines.append("coop-trace 1")
    next_id = 0
    cur = 0
    for ptr, size in sorted(pre.items()):
        live[ptr] = (next_id, size)
        lines.append("L %d %d 0 addr=0x%x" % (next_id, size, ptr))
        next_id += 1
        cur += size
        stats["L"] += 1
    peak = cur
    step_events = [e for e in events if start <= e[0] <= end]
    for t, ptr, nbytes in step_events:
        if nbytes > 0:
            if ptr in live:  # never expected: the allocator handed out a live address
                stats["realloc_live"] += 1
                lines.append("F %d" % live[ptr][0])
                cur -= live[ptr][1]
            live[ptr] = (next_id, nbytes)
            lines.append("A %d %d 0 addr=0x%x t=%d" % (next_id, nbytes, ptr, (t - start) // 1000))
            next_id += 1
            cur += nbytes
            peak = max(peak, cur)
            stats["A"] += 1
        else:
            entry = live.pop(ptr, None)
            if entry is None:
                # A free of a block allocated before profiling: the CPU
                # allocator drops those, so this does not happen; keep count.
                stats["unpaired_frees"] += 1
                continue
            lines.append("F %d" % entry[0])
            cur -= entry[1]
            stats["F"] += 1
    stats["events"] = stats["A"] + stats["F"] + stats["L"]
    stats["peak_live_bytes"] = peak
    stats["live_at_start_bytes"] = sum(s for s in pre.values())
    stats["live_at_end_bytes"] = cur
    return lines, stats


def profile_step(build):
    """Runs build() (returning a models.Workload), a warm-up step and the
    recorded step under the memory profiler. Returns (events, marker,
    workload) as allocation_events() gives them."""
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        w = build()
        w.warm_up()
        gc.collect()

        with record_function(MARKER):
            w.recorded_step()
    events, marker = allocation_events(prof)
    return events, marker, w


def record(build, out_dir, argv, recorded=None, name=None):
    """Profiles the workload that build() returns and writes its trace,
    named name (default: the workload's). recorded: {trace name: label} of
    the traces this run wrote, to refuse a second workload of the same
    name; label: what build is from."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import models

    t0 = time.time()
    events, marker, w = profile_step(build)
    t_run = time.time() - t0
    name = name or w.name
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "# %s: one training step (forward, loss, backward, optimizer step), steady state" % name,
        "# config: %s" % ", ".join("%s=%s" % kv for kv in sorted(w.config.items())),
        "# recorded %s with torch %s (CPU) by scripts/record_traces.py %s" % (date, torch.__version__, " ".join(argv)),
        "# source: torch.profiler profile_memory=True allocator events (c10 CPU allocator), paired by address",
        "# L: storages live when the step began (weights, optimizer state, batch); A/F: the step",
    ]
    lines, stats = to_trace(events, marker, header)
    label = w.source or name
    if recorded is not None:
        models.claim_name(recorded, name, label, "trace")
    path = os.path.join(out_dir, "%s-train-step.trace.gz" % name)
    models.write_gz(path, ("\n".join(lines) + "\n").encode())
    stats["profiled_events"] = len(events)
    stats["seconds"] = round(time.time() - t0, 1)
    stats["run_seconds"] = round(t_run, 1)
    stats["bytes_gz"] = os.path.getsize(path)
    print("%s: %s config %s" % (path, stats, w.config), flush=True)
    return stats


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="models to record (without --workload: %s)" % ", ".join(models.ALL))
    ap.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="FILE.py:FUNC",
        help="record your own model: imports FILE (runs your code) and calls FUNC(device, batch); "
        "repeatable (record_ops.py --help says what FUNC returns)",
    )
    ap.add_argument("--out-dir", default=None, help="where traces go (default: traces/; with --workload: .)")
    ap.add_argument("--batch", type=models.batch_size, default=None, help="override the model's batch size")
    opts = ap.parse_args(argv)
    if opts.out_dir is None:  # a user's traces stay out of coop's traces/ (its tests check every trace there)
        opts.out_dir = "." if opts.workload else os.path.join(here, "..", "traces")
    models.check_recording(ap, opts.models, opts.out_dir)
    builds = [(lambda n=name: models.build(n, batch=opts.batch), name) for name in
              (opts.models or ([] if opts.workload else models.ALL))]
    try:
        for spec in opts.workload:  # each file imported and FUNC found before any model is built
            fn = models.workload_function(spec)
            builds.append((lambda s=spec, f=fn: models.user_workload(s, f, torch.device("cpu"), opts.batch), None))
        recorded = {}
        for build, name in builds:
            record(build, opts.out_dir, argv, recorded, name)
            gc.collect()
    except models.WorkloadError as e:
        models.refuse(ap, e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
