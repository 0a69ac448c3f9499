#!/usr/bin/env python3
"""Replays allocation traces on the GPU through PyTorch's native caching
allocator (torch.cuda.caching_allocator_alloc / caching_allocator_delete)
and through coop (the same calls, with coop installed as the allocator),
and prints peak reserved side by side: one JSON line per trace and
allocator, and one summary line per trace.

Traces: coop text traces (traces/*.trace[.gz], see traces/README.md) and
PyTorch snapshots with device_traces (*.pickle[.gz], e.g.
../shared/workloads/torch-snapshots/). With no arguments, both folders.

    scripts/gpu/replay_native_vs_coop.py [TRACE ...] [--conf CONF]

Exits 77 with a message when there is no CUDA device.
"""

import glob
import gzip
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def _open(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


class _PlainUnpickler(pickle.Unpickler):
    """Snapshots hold only plain data: refuse anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a snapshot")


def read_events(path):
    """[(kind, id, size, stream)] with kind 'A' (alloc) or 'F' (free)."""
    events = []
    if ".pickle" in os.path.basename(path):
        with _open(path) as f:
            snap = _PlainUnpickler(f).load()
        trace = snap["device_traces"][0] if isinstance(snap, dict) else []
        live = {}
        next_id = 0
        for e in trace:
            if e["action"] == "alloc":
                live[e["addr"]] = next_id
                events.append(("A", next_id, e["size"], e["stream"]))
                next_id += 1
            elif e["action"] == "free_completed" and e["addr"] in live:
                events.append(("F", live.pop(e["addr"]), 0, 0))
        return events
    with _open(path) as f:
        lines = f.read().decode().splitlines()
    header_seen = False
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if not header_seen:
            if line.split()[:2] != ["coop-trace", "1"]:
                raise ValueError(f"{path}:{number}: expected header 'coop-trace 1'")
            header_seen = True
            continue
        f = line.split()
        if f[0] in ("A", "L"):
            events.append(("A", int(f[1], 0), int(f[2], 0), int(f[3], 0)))
        elif f[0] == "F":
            events.append(("F", int(f[1], 0), 0, 0))
    return events


def child(args):
    common.install_allocator(args.allocator, args.conf)
    import torch

    events = read_events(args.trace[0])
    streams = {0: torch.cuda.default_stream(0)}
    live = {}
    failed = 0
    for kind, ident, size, stream in events:
        if kind == "A":
            if stream not in streams:
                streams[stream] = torch.cuda.Stream(0)
            try:
                live[ident] = torch.cuda.caching_allocator_alloc(size, 0, streams[stream])
            except RuntimeError:
                failed += 1
            if common.oom_happened(args.allocator):
                failed += 1
        elif ident in live:
            torch.cuda.caching_allocator_delete(live.pop(ident))
    torch.cuda.synchronize()
    common.emit({"script": "replay_native_vs_coop", "trace": os.path.basename(args.trace[0]),
                 "allocator": args.allocator, "events": len(events), "failed_allocs": failed,
                 "peak_reserved_bytes": common.peak_reserved(args.allocator)})
    return 0


def default_traces():
    found = []
    for folder in (os.path.join(common.TOP, "traces"),
                   os.path.join(common.TOP, "..", "shared", "workloads", "torch-snapshots")):
        for pattern in ("*.trace", "*.trace.gz", "*.pickle", "*.pickle.gz"):
            found += sorted(glob.glob(os.path.join(folder, pattern)))
    return found


def main():
    p = common.arg_parser(__doc__)
    p.add_argument("--allocator", choices=common.ALLOCATORS, default="native")
    common.add_parent_options(p)
    p.add_argument("trace", nargs="*")
    args = p.parse_args()
    common.require_cuda("replay_native_vs_coop")
    if args.child:
        return child(args)
    traces = args.trace or default_traces()
    if not traces:
        sys.stderr.write("replay_native_vs_coop: no traces given or found\n")
        return 2
    for path in traces:
        results = {}
        for allocator in common.ALLOCATORS:
            r, rc, err = common.run_child(os.path.abspath(__file__),
                                          ["--allocator", allocator, path], args)
            r = r or {"script": "replay_native_vs_coop", "trace": os.path.basename(path),
                      "allocator": allocator, "error": f"child exit {rc}: {err[-300:]}"}
            results[allocator] = r
            common.emit(r)
        n, c = results["native"], results["coop"]
        if "peak_reserved_bytes" in n and "peak_reserved_bytes" in c:
            common.emit({"script": "replay_native_vs_coop", "trace": os.path.basename(path),
                         "summary": "peak_reserved", "native": n["peak_reserved_bytes"],
                         "coop": c["peak_reserved_bytes"],
                         "coop_over_native": c["peak_reserved_bytes"] /
                         max(1, n["peak_reserved_bytes"])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
