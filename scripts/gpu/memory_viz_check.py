#!/usr/bin/env python3
"""Reads coop's memory snapshot of a real training step with PyTorch's own viewer code, next to a native one.

Two children (an allocator is chosen once per process): native and coop.
Each builds a model of scripts/models.py on the GPU, runs its warm-up step,
starts recording the allocation history (native: record_cuda_snapshot.py's
start_history, torch.cuda.memory._record_memory_history; coop:
coop.torch.record_history),
runs one step and writes the snapshot (native: torch.cuda.memory._snapshot();
coop: coop.torch.snapshot()) as DIR/<allocator>.pickle.

The parent then gives each snapshot to the installed torch's
torch.cuda._memory_viz, as a user looking at it would: segments() and
memory() (flamegraph input, kept as text: nothing is downloaded), and
segment_plot() and trace_plot() (the HTML pages that embed the web viewer's
data), each where this torch has it. Per snapshot one JSON line: which of
them ran, the error of any that raised, segments()'s lines and bytes against
the blocks and the segments' total, whether memory()'s bytes add up to
that total, and the child's peak reserved and allocated bytes (warm-up and
recorded step). Then one line
comparing coop's structure with native's: keys of the snapshot, of its
segments, blocks and trace entries, and the trace's actions, each as what
coop lacks and what it adds.

Usage: memory_viz_check.py [--model resnet50] [--batch N] [--dir DIR]
                           [--out FILE] [--timeout S] [--dry-run]
--dry-run writes a small synthetic snapshot per allocator on the CPU and
runs the parent's checks on it (the viewer's calls only where torch is
installed). Exits 77 with a one-line reason without a CUDA device.
"""

import argparse
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCRIPT = os.path.abspath(__file__)
VIEWER_CALLS = ("segments", "memory", "segment_plot", "trace_plot")


def synthetic_snapshot(allocator):
    """A two-block snapshot with a three-event trace (--dry-run)."""
    base = 1 << 30
    blocks = [{"address": base, "size": 4096, "requested_size": 4000, "state": "active_allocated",
               "frames": []},
              {"address": base + 4096, "size": (2 << 20) - 4096, "requested_size": 0,
               "state": "inactive", "frames": []}]
    trace = [{"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0,
              "time_us": 0, "frames": []},
             {"action": "alloc", "addr": base, "size": 4096, "stream": 0, "time_us": 1,
              "frames": []},
             {"action": "free_requested", "addr": base, "size": 4096, "stream": 0, "time_us": 2,
              "frames": []}]
    return {"segments": [{"device": 0, "address": base, "total_size": 2 << 20, "stream": 0,
                          "segment_type": "large", "allocated_size": 4096, "active_size": 4096,
                          "requested_size": 4000, "blocks": blocks}],
            "device_traces": [trace],
            "allocator_settings": {"allocator": allocator}}


def child(args):
    """Records one step under args.allocator and writes the snapshot."""
    path = os.path.join(args.dir, args.allocator + ".pickle")
    if args.dry_run:
        snap = synthetic_snapshot(args.allocator)
    else:
        common.require_cuda("memory_viz_check.py")
        common.install_allocator(args.allocator, args.conf)
        import torch

        sys.path.insert(0, os.path.join(common.TOP, "scripts"))
        import models
        import record_cuda_snapshot

        w = models.build(args.model, device="cuda:0", batch=args.batch)
        w.warm_up()
        torch.cuda.synchronize()
        if args.allocator == "coop":
            import coop.torch

            coop.torch.record_history()
            w.recorded_step()
            torch.cuda.synchronize()
            snap = coop.torch.snapshot()
        else:
            record_cuda_snapshot.start_history()  # as the shipped snapshots were recorded
            w.recorded_step()
            torch.cuda.synchronize()
            snap = torch.cuda.memory._snapshot()
    # the process's peaks (warm-up and recorded step): what a replay of the
    # snapshot here, which sees only the recorded step, is compared with
    peaks = ({"peak_reserved_bytes": None, "peak_allocated_bytes": None} if args.dry_run else
             {"peak_reserved_bytes": common.peak_reserved(args.allocator),
              "peak_allocated_bytes": common.peak_allocated(args.allocator)})
    with common.replacing(path) as f:  # a failed write keeps the last good snapshot
        pickle.dump(snap, f, protocol=4)
    common.emit(dict(peaks, allocator=args.allocator, path=path, ok=True,
                     segments=len(snap["segments"]),
                     events=sum(len(t) for t in snap.get("device_traces", []))))
    common.finish_child(0)


def viewer_checks(snap):
    """What the installed torch's _memory_viz makes of snap."""
    result = {"calls_ok": [], "calls_failed": {}, "calls_missing": []}
    try:
        import torch.cuda._memory_viz as viz
    except ImportError as e:
        result["viewer"] = "not importable: %s" % e
        return result
    total = sum(s["total_size"] for s in snap["segments"])
    blocks = sum(len(s["blocks"]) for s in snap["segments"])
    keep = dict(format_flamegraph=lambda text: text)
    for name in VIEWER_CALLS:
        fn = getattr(viz, name, None)
        if fn is None:
            result["calls_missing"].append(name)
            continue
        try:
            try:
                out = fn(snap, **keep) if name in ("segments", "memory") else fn(snap)
            except (TypeError, KeyError, AttributeError):
                if name not in ("segments", "memory"):
                    raise
                out = fn(snap["segments"], **keep)  # torch 1.13 takes the segment list
        except Exception as e:  # noqa: BLE001 - any failure of the viewer is the finding
            result["calls_failed"][name] = "%s: %s" % (type(e).__name__, str(e)[:300])
            continue
        result["calls_ok"].append(name)
        if name == "segments":
            # facts, not a verdict: torch 1.13 writes one line per block, 2.x
            # may split a block into its frames' part and the rest
            result.update(segments_lines=len(out.splitlines()), blocks=blocks,
                          segments_bytes=sum(int(line.rsplit(" ", 1)[1])
                                             for line in out.splitlines()),
                          total_bytes=total)
        elif name == "memory":
            result["memory_bytes_add_up"] = (
                sum(int(line.rsplit(" ", 1)[1]) for line in out.splitlines()) == total)
        else:
            result[name + "_html_bytes"] = len(out)
    return result


def key_sets(snap):
    segs = snap["segments"]
    entries = [e for t in snap.get("device_traces", []) for e in t]
    return {"top": set(snap), "segment": set().union(*(set(s) for s in segs)) if segs else set(),
            "block": set().union(*(set(b) for s in segs for b in s["blocks"])) if segs else set(),
            "trace_entry": set().union(*(set(e) for e in entries)) if entries else set(),
            "action": {e["action"] for e in entries}}


def main():
    p = common.arg_parser(__doc__)
    common.add_parent_options(p)
    p.add_argument("--allocator", choices=common.ALLOCATORS, help=argparse.SUPPRESS)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dir", default=None, help="where the snapshots go (default: a new temporary one)")
    args = p.parse_args()
    if args.child:
        child(args)
    if not args.dry_run:
        common.require_cuda("memory_viz_check.py")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)  # the writer puts its temporary file beside the target
    else:
        args.dir = tempfile.mkdtemp(prefix="memory-viz-")
    common.start_parent(args, "memory_viz_check")
    snaps, failed = {}, False
    for allocator in common.ALLOCATORS:
        line, rc, err = common.run_child(SCRIPT, ["--allocator", allocator, "--model", args.model,
                                                  "--batch", args.batch, "--dir", args.dir], args)
        if not line or rc != 0:
            common.emit({"allocator": allocator, "ok": False, "rc": rc, "error": err[-600:]})
            failed = True
            continue
        with open(line["path"], "rb") as f:
            snaps[allocator] = pickle.load(f)
        common.emit(dict(viewer_checks(snaps[allocator]), allocator=allocator,
                         summary="memory_viz", segments=line["segments"], events=line["events"],
                         peak_reserved_bytes=line.get("peak_reserved_bytes"),
                         peak_allocated_bytes=line.get("peak_allocated_bytes")))
    if len(snaps) == 2:
        coop_keys, native_keys = key_sets(snaps["coop"]), key_sets(snaps["native"])
        common.emit({"summary": "structure_coop_vs_native",
                     **{k + "_coop_lacks": sorted(native_keys[k] - coop_keys[k]) for k in coop_keys},
                     **{k + "_coop_adds": sorted(coop_keys[k] - native_keys[k]) for k in coop_keys}})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
