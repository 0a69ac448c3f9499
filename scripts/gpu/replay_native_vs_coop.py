#!/usr/bin/env python3
"""Replays allocation traces on the GPU through PyTorch's native caching
allocator (torch.cuda.caching_allocator_alloc / caching_allocator_delete)
and through coop (the same calls, with coop installed as the allocator),
and prints peak reserved side by side: one JSON line per trace and
allocator, and one summary line per trace.

Traces: coop text traces (traces/*.trace[.gz], see traces/README.md) and
PyTorch snapshots with device_traces (*.pickle[.gz], e.g.
../shared/workloads/torch-snapshots/). With no arguments, both folders.
A snapshot's blocks that were allocated before recording started (freed
during the trace, or still allocated in its final segments) are allocated
first, as the `L` lines of a text trace: both allocators see the same
live bytes as coop replay does.

    scripts/gpu/replay_native_vs_coop.py [TRACE ...] [--conf CONF]
        [--native-conf CONF] [--only native|coop] [--out FILE] [--deadline S]
        [--dry-run]

--native-conf CONF replays the native runs under PYTORCH_CUDA_ALLOC_CONF=CONF
(e.g. expandable_segments:True; their lines carry "native_conf"), and
--only replays through one allocator (no summary lines then).

Exits 77 with a one-line message when there is no CUDA device (unless
--dry-run: then the children replay into a fake allocator on the CPU).
"""

import glob
import gzip
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def _open(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


class _PlainUnpickler(pickle.Unpickler):
    """Snapshots hold only plain data: refuse anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a snapshot")


def snapshot_events(snap):
    """[(kind, id, size, stream)] of a snapshot's first device trace, as
    coop's reader (src/trace/reader_pickle.c) sees it: a block is freed at
    its free_requested (the program's free; the allocator's own stream
    waits are its business), else at free_completed; blocks allocated
    before recording started come first: those the trace frees without
    allocating them, and those allocated (or pending free) in the final
    segments that the trace did not allocate (size: requested_size)."""
    trace = snap.get("device_traces", [[]])[0] if isinstance(snap, dict) else []
    trace = trace or []
    events, before = [], []
    live = {}  # address -> id, allocated and not freed yet
    requested = set()  # addresses freed at free_requested, free_completed to come
    next_id = 0
    for e in trace:
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = next_id
            events.append(("A", next_id, e["size"], e.get("stream", 0)))
            next_id += 1
        elif action in ("free_requested", "free_completed"):
            if action == "free_completed" and addr in requested:
                requested.discard(addr)
                continue
            if addr in live:
                events.append(("F", live.pop(addr), 0, 0))
            else:  # allocated before recording started
                before.append(("A", next_id, e["size"], e.get("stream", 0)))
                events.append(("F", next_id, 0, 0))
                next_id += 1
            if action == "free_requested":
                requested.add(addr)
    for seg in snap.get("segments", []) if isinstance(snap, dict) else []:
        for b in seg.get("blocks", []):
            if (b.get("state") in ("active_allocated", "active_pending_free")
                    and b["address"] not in live and b["address"] not in requested):
                size = b.get("requested_size") or b["size"]
                before.append(("A", next_id, size, seg.get("stream", 0)))
                next_id += 1
    return before + events


def read_events(path):
    """[(kind, id, size, stream)] with kind 'A' (alloc) or 'F' (free)."""
    if ".pickle" in os.path.basename(path):
        with _open(path) as f:
            snap = _PlainUnpickler(f).load()
        return snapshot_events(snap)
    events = []
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


def replay(events, alloc, delete):
    """Runs events through alloc(size, stream_id) -> address (0 or an
    exception: failed) and delete(address), then frees what is left. A
    failed allocation is counted and its later free skipped: a NULL is never
    handed back (PyTorch's pluggable allocator records a NULL once and
    refuses a second delete of it: "Trying to free a pointer not allocated
    here"). Returns (failed, first failure message or None)."""
    live = {}
    failed, first_error = 0, None
    for kind, ident, size, stream in events:
        if kind == "A":
            try:
                ptr = alloc(size, stream)
            except Exception as e:  # torch.cuda.OutOfMemoryError
                ptr, first_error = 0, first_error or (str(e).splitlines() or [""])[0][:300]
            if ptr:
                live[ident] = ptr
            elif size:
                failed += 1
                first_error = first_error or f"allocation of {size} bytes returned NULL"
        elif ident in live:
            delete(live.pop(ident))
    for ptr in live.values():
        delete(ptr)
    return failed, first_error


class FakeAllocator:
    """--dry-run's device: a bump allocator whose 'reserved' peak is the
    live bytes' peak rounded up to 2 MiB pages (coop: 512 B rounding)."""

    def __init__(self, kind):
        self.round = 2 << 20 if kind == "native" else 512
        self.next, self.live, self.current, self.peak = 1 << 20, {}, 0, 0

    def alloc(self, size, stream):
        if size == 0:
            return 0
        size = -(-size // self.round) * self.round
        ptr, self.next = self.next, self.next + size
        self.live[ptr] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        return ptr

    def delete(self, ptr):
        self.current -= self.live.pop(ptr)


def child(args):
    path = args.trace[0]
    record = {"script": "replay_native_vs_coop", "trace": os.path.basename(path),
              "allocator": args.allocator, "dry_run": args.dry_run}
    if args.allocator == "native":
        record["native_conf"] = args.native_conf
        # sets PYTORCH_CUDA_ALLOC_CONF (before any CUDA work): a dry run checks it arrived
        common.install_allocator("native", None, args.native_conf)
    if args.dry_run:  # what torch would read here
        record["dry_alloc_conf_env"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    events = read_events(path)
    t0 = time.perf_counter()
    if args.dry_run:
        fake = FakeAllocator(args.allocator)
        failed, error = replay(events, fake.alloc, fake.delete)
        peak = fake.peak
    else:
        if args.allocator == "coop":
            common.install_allocator("coop", args.conf)  # before any CUDA work
        import torch

        if args.allocator == "coop":
            record["coop_settings"] = common.coop_settings()
        streams = {}

        def alloc(size, stream):
            if stream not in streams:  # trace stream ids -> streams (0: the default)
                streams[stream] = (torch.cuda.default_stream(0) if stream == 0
                                   else torch.cuda.Stream(0))
            return torch.cuda.caching_allocator_alloc(size, 0, streams[stream])

        failed, error = replay(events, alloc, torch.cuda.caching_allocator_delete)
        common.oom_happened(args.allocator)  # clears coop's OOM count (failed has them)
        torch.cuda.synchronize()
        peak = common.peak_reserved(args.allocator)
        record["peak_allocated_bytes"] = common.peak_allocated(args.allocator)
    record.update(events=len(events), allocations=sum(1 for e in events if e[0] == "A"),
                  failed_allocs=failed, first_error=error, peak_reserved_bytes=peak,
                  seconds=round(time.perf_counter() - t0, 3))
    common.emit(record)
    return 0


def default_traces():
    found = []
    for folder in (os.path.join(common.TOP, "traces"),
                   os.path.join(common.TOP, "..", "shared", "workloads", "torch-snapshots")):
        for pattern in ("*.trace", "*.trace.gz", "*.pickle", "*.pickle.gz"):
            found += sorted(glob.glob(os.path.join(folder, pattern)))
    return found


def main(argv=None):
    p = common.arg_parser(__doc__)
    p.add_argument("--allocator", choices=common.ALLOCATORS, default="native")
    p.add_argument("--only", choices=common.ALLOCATORS, default=None,
                   help="replay through this allocator alone")
    common.add_parent_options(p)
    p.add_argument("trace", nargs="*")
    args = p.parse_args(argv)
    if args.child:
        if len(args.trace) != 1:
            p.error("a child replays exactly one trace")
        return common.finish_child(child(args))
    if not args.dry_run:
        common.require_cuda("replay_native_vs_coop")
    traces = args.trace or default_traces()
    if not traces:
        sys.stderr.write("replay_native_vs_coop: no traces given or found\n")
        return 2
    missing = [t for t in traces if not os.path.exists(t)]
    if missing:
        sys.stderr.write(f"replay_native_vs_coop: no such trace: {missing[0]}\n")
        return 2
    common.start_parent(args, "replay_native_vs_coop")
    for path in traces:
        results = {}
        for allocator in [args.only] if args.only else common.ALLOCATORS:
            r, rc, err = common.run_child(os.path.abspath(__file__),
                                          ["--allocator", allocator, path], args)
            r = r or {"script": "replay_native_vs_coop", "trace": os.path.basename(path),
                      "allocator": allocator, "error": f"child exit {rc}: {err[-300:]}"}
            results[allocator] = r
            common.emit(r)
        n, c = results.get("native", {}), results.get("coop", {})
        if "peak_reserved_bytes" in n and "peak_reserved_bytes" in c:
            common.emit({"script": "replay_native_vs_coop", "trace": os.path.basename(path),
                         "summary": "peak_reserved", "native": n["peak_reserved_bytes"],
                         "coop": c["peak_reserved_bytes"],
                         "coop_over_native": c["peak_reserved_bytes"] /
                         max(1, n["peak_reserved_bytes"]),
                         "failed_allocs_native": n.get("failed_allocs"),
                         "failed_allocs_coop": c.get("failed_allocs"),
                         "dry_run": args.dry_run})
    return 0


if __name__ == "__main__":
    sys.exit(main())
