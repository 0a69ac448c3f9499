#!/usr/bin/env python3
"""Cross-stream frees through PyTorch on a real GPU: record_stream keeps a block from reuse.

The hazard record_stream exists for: a tensor allocated on the current
stream M is written by a side stream S (queued behind a spin kernel, so it
runs late) and deleted on the host at once. Without record_stream the
allocator may hand its block to the next allocation on M, which S then
overwrites; with x.record_stream(S) it must not, until S has finished.

One child per allocator run (native; coop with --conf; coop on cuMemAlloc
segments, vmm:false; coop that never waits for a stream, wait:false; a run
that --conf already names is not repeated), each on the device:

- control: the hazard without record_stream. The next allocation of the
  same size takes x's address (same_address) and S's late write lands in
  it (y_intact false): this shows the check can see the hazard.
- record: the same with x.record_stream(S). The allocation must not take
  x's address while S is busy, and must read back what M wrote.
- reused_after_sync: once S has finished, the block is free again, so two
  allocations of its size (the other free block of that size is the record
  round's y) take it back (coop: the pending free's event completed; a pool
  that kept such blocks for good would leak).
- empty_cache: a block pending on a busy S, then torch.cuda.empty_cache();
  S's late write must not fault (coop must not unmap or free memory a
  stream still writes) and nothing may fail at the synchronize. S must
  still be busy when empty_cache starts (side_busy_before). With the
  default wait:true coop waits for S first, as native does; only the
  wait:false run releases while S is busy, and it must return without
  waiting (side_busy_after).

Each child prints one line {"allocator", "conf", "side_busy", "control",
"record", "reused_after_sync", "empty_cache", ...}; the parent prints a
summary {"summary": "stream_check", "ok", "failures"} and exits 1 when a run
of coop breaks a rule (native's lines are the reference). "side_busy" says
the spin kernel was still running when each check allocated; without it a
check proves nothing and counts as a failure.

Usage: stream_check.py [--conf CONF] [--out FILE] [--timeout S] [--dry-run]
--dry-run runs the parent's logic on fake child lines (no device). Exits 77
with a one-line reason without a CUDA device.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCRIPT = os.path.abspath(__file__)
FLOATS = 4 << 20  # 16 MiB blocks: a large-pool size for both allocators
SPIN_CYCLES = 400_000_000  # torch.cuda._sleep: about 0.2 s at the H200's 1.98 GHz


def never_waits(conf):
    """Whether a coop configuration is wait:false (coop_config.never_wait)."""
    return "wait:false" in (conf or "").replace(" ", "").split(",")


def fake_line(allocator, conf):
    """A dry-run child's line: what a correct allocator reports."""
    return {"allocator": allocator, "conf": conf, "ok": True, "dry_run": True,
            "side_busy": True,
            "control": {"same_address": True, "y_intact": False},
            "record": {"same_address": False, "y_intact": True},
            "reused_after_sync": True,
            "empty_cache": {"error": None, "side_busy_before": True,
                            "side_busy_after": never_waits(conf)}}


def hazard(torch, record, spin):
    """One round of the hazard; returns what it saw."""
    dev = torch.device("cuda", 0)
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    x = torch.zeros(FLOATS, device=dev)
    ptr = x.data_ptr()
    side.wait_stream(main)  # x's zeros are written before the side stream's write
    with torch.cuda.stream(side):
        torch.cuda._sleep(spin)
        x.fill_(7.0)
    if record:
        x.record_stream(side)
    del x
    y = torch.empty(FLOATS, device=dev)  # on the main stream, at once
    busy = not side.query()
    same = y.data_ptr() == ptr
    y.fill_(2.0)
    torch.cuda.synchronize()
    intact = bool((y == 2.0).all().item())
    del y
    return {"same_address": same, "y_intact": intact, "side_busy": busy, "ptr": ptr}


def child(args):
    if args.dry_run:
        common.emit(fake_line(args.allocator, args.conf))
        common.finish_child(0)
    common.require_cuda("stream_check.py")
    common.install_allocator(args.allocator, args.conf)
    import torch

    line = {"allocator": args.allocator, "conf": args.conf, "ok": True}
    try:
        torch.cuda.synchronize()
        control = hazard(torch, False, SPIN_CYCLES)
        rec = hazard(torch, True, SPIN_CYCLES)
        # S has finished (hazard synchronized): the recorded block is free
        # again. The free blocks of this size are now the recorded one and
        # the record round's y (best fit may take either first), so two
        # allocations take both unless the recorded block stayed held.
        z = [torch.empty(FLOATS, device="cuda") for _ in range(2)]
        reused = rec["ptr"] in [t.data_ptr() for t in z]
        del z
        # a block pending on a busy stream, then empty_cache
        dev = torch.device("cuda", 0)
        side = torch.cuda.Stream()
        x = torch.zeros(FLOATS, device=dev)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(SPIN_CYCLES)
            x.fill_(7.0)
        x.record_stream(side)
        del x
        before = not side.query()
        torch.cuda.empty_cache()
        after = not side.query()
        err = None
        try:
            torch.cuda.synchronize()
        except RuntimeError as e:  # an illegal address from a released page
            err = common.first_line(e)
        line.update(side_busy=control["side_busy"] and rec["side_busy"],
                    control={k: control[k] for k in ("same_address", "y_intact")},
                    record={k: rec[k] for k in ("same_address", "y_intact")},
                    reused_after_sync=reused,
                    empty_cache={"error": err, "side_busy_before": before,
                                 "side_busy_after": after})
        if args.allocator == "coop":
            line["coop_settings"] = common.coop_settings()
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        line.update(ok=False, error=common.first_line(e))
    common.emit(line)
    common.finish_child(0)


def failures(line):
    """What a child's line breaks (empty: nothing)."""
    if not line.get("ok"):
        return ["failed: %s" % line.get("error")]
    out = []
    if not line["side_busy"]:
        out.append("the side stream had finished before the allocation: nothing was checked")
    if not (line["control"]["same_address"] and not line["control"]["y_intact"]):
        out.append("control: the hazard did not show (same_address %s, y_intact %s)"
                   % (line["control"]["same_address"], line["control"]["y_intact"]))
    if line["record"]["same_address"]:
        out.append("record: a block recorded on a busy stream was handed out again")
    if not line["record"]["y_intact"]:
        out.append("record: the side stream's late write reached the new allocation")
    if not line["reused_after_sync"]:
        out.append("the recorded block was not reused once its stream had finished")
    ec = line["empty_cache"]
    if not ec.get("side_busy_before"):
        out.append("empty_cache: the side stream had finished before it: nothing was checked")
    if ec["error"]:
        out.append("empty_cache: " + ec["error"])
    if never_waits(line.get("conf")) and not ec["side_busy_after"]:
        out.append("empty_cache: waited for the busy stream although wait:false")
    return out


def main():
    p = common.arg_parser(__doc__)
    common.add_parent_options(p)
    p.add_argument("--allocator", choices=common.ALLOCATORS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
    if not args.dry_run:
        common.require_cuda("stream_check.py")
    common.start_parent(args, "stream_check")
    runs = []
    for run in [("native", None), ("coop", args.conf), ("coop", "vmm:false"),
                ("coop", "wait:false")]:
        if run not in runs:
            runs.append(run)
    return common.run_checks(
        SCRIPT, args,
        [(a + ":" + (c or "default"), ["--allocator", a], c, {"allocator": a, "conf": c})
         for a, c in runs],
        # native's lines are the reference: only a native child that failed counts
        lambda line: failures(line) if line.get("allocator") == "coop" or not line.get("ok")
        else [],
        "stream_check")


if __name__ == "__main__":
    sys.exit(main())
