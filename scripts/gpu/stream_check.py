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

- history: with the allocation history on, a block written late by S,
  record_stream(S) and deleted, then a snapshot while S is busy: its trace
  for the block must be alloc, free_requested, no free_completed yet (the
  block not reusable: PyTorch records that in process_events, once S is
  done; coop since 0340dfd), and the block "active_pending_free". Once S
  has finished, the next allocation completes the free: the next snapshot
  has free_completed after free_requested, timed after S was last seen
  busy (time_us, the host's real-time clock for both).
- foreign_record_stream: record_stream of a tensor over memory coop did not
  allocate (cuMemAlloc through the driver, wrapped with
  __cuda_array_interface__), while S writes it: PyTorch's own allocator
  skips such pointers and coop must too since 224d627 (nothing raised,
  nothing printed on stderr, coop's last error and allocated bytes as
  they were), and the tensor reads back what S wrote.

Each child prints one line {"allocator", "conf", "side_busy", "control",
"record", "reused_after_sync", "history", "foreign_record_stream",
"empty_cache", ...}; the parent prints a
summary {"summary": "stream_check", "ok", "failures"} and exits 1 when a run
of coop breaks a rule (native's lines are the reference). "side_busy" says
the spin kernel was still running when each check allocated; without it a
check proves nothing and counts as a failure.

Usage: stream_check.py [--conf CONF] [--out FILE] [--timeout S] [--dry-run]
--dry-run runs the parent's logic on fake child lines (no device). Exits 77
with a one-line reason without a CUDA device.
"""

import argparse
import ctypes
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import driver_ctypes  # noqa: E402

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
            "history": {"side_busy": True, "while_busy": ["alloc", "free_requested"],
                        "block_state_while_busy": "active_pending_free",
                        "after": ["alloc", "free_requested", "free_completed"],
                        "completed_after_seen_busy": True},
            "foreign_record_stream": {"zero_copy": True, "raised": None, "stderr": "",
                                      "last_error_changed": False, "allocated_changed": False,
                                      "read_back": True},
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


BLOCK_ACTIONS = ("alloc", "free_requested", "free_completed")


def block_trace(snap, ptr):
    """The alloc / free actions of the block at ptr in snap's device 0
    trace, in order, and the time_us of each."""
    entries = [e for e in (snap.get("device_traces") or [[]])[0]
               if e.get("addr") == ptr and e.get("action") in BLOCK_ACTIONS]
    return [e["action"] for e in entries], [e.get("time_us") for e in entries]


def block_state(snap, ptr):
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["address"] == ptr:
                return b["state"]
    return None


def history_calls(torch, allocator):
    """(start, stop, snapshot) of the allocation history: coop's own, or
    torch's as record_cuda_snapshot.py records the shipped snapshots."""
    if allocator == "coop":
        import coop.torch

        return coop.torch.record_history, lambda: coop.torch.record_history(0), \
            coop.torch.snapshot
    sys.path.insert(0, os.path.join(common.TOP, "scripts"))
    import record_cuda_snapshot

    return (record_cuda_snapshot.start_history, record_cuda_snapshot.stop_history,
            torch.cuda.memory._snapshot)


def history_round(torch, allocator, spin):
    """A record_stream free on a busy side stream, in the history: what a
    snapshot shows while the stream is busy, and after."""
    start, stop, snapshot = history_calls(torch, allocator)
    dev = torch.device("cuda", 0)
    side = torch.cuda.Stream()
    start()
    try:
        x = torch.zeros(FLOATS, device=dev)
        ptr = x.data_ptr()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(spin)
            x.fill_(7.0)
        x.record_stream(side)
        del x
        busy_snap = snapshot()
        busy = not side.query()  # after the snapshot: busy all through it
        seen_busy_us = time.time() * 1e6
        side.synchronize()
        y = torch.empty(FLOATS, device=dev)  # processes the finished stream's frees
        after_snap = snapshot()
        del y
    finally:
        stop()
    return history_finding(ptr, busy_snap, busy, seen_busy_us, after_snap)


def history_finding(ptr, busy_snap, busy, seen_busy_us, after_snap):
    """What history_round saw of the block at ptr: busy_snap taken while the
    side stream was busy (busy: still so after it), seen_busy_us the host's
    time (us since the epoch) when it was last seen busy, after_snap taken
    once it had finished and an allocation came."""
    while_busy, _ = block_trace(busy_snap, ptr)
    after, times = block_trace(after_snap, ptr)
    done = [t for a, t in zip(after, times) if a == "free_completed"]
    return {"side_busy": busy, "while_busy": while_busy,
            "block_state_while_busy": block_state(busy_snap, ptr), "after": after,
            "completed_after_seen_busy": bool(done) and done[0] is not None
            and done[0] >= seen_busy_us}


class ForeignMemory:
    """Device memory from the driver (cuMemAlloc), none of the allocator's,
    as torch.as_tensor takes it (__cuda_array_interface__)."""

    def __init__(self, drv, floats):
        self.drv = drv
        ptr = ctypes.c_uint64()
        drv("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(4 * floats))
        self.ptr = ptr.value
        self.__cuda_array_interface__ = {"shape": (floats,), "typestr": "<f4",
                                         "data": (self.ptr, False), "version": 2}

    def free(self):
        self.drv("cuMemFree_v2", ctypes.c_uint64(self.ptr))


def stderr_of(fn, *args):
    """What fn(*args) wrote on file descriptor 2 (the C library's stderr,
    where coop reports a bad pointer), and what it raised, as text or None."""
    sys.stderr.flush()
    saved = os.dup(2)
    raised = None
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - what it raised is the finding
            raised = common.first_line(e)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")[:300], raised


def foreign_round(torch, allocator, spin):
    """record_stream of a tensor over memory no allocator of torch's has,
    while a side stream writes it."""
    # the primary context torch made current on this thread serves cuMemAlloc
    drv = driver_ctypes.open_driver("stream_check.py")
    mem = ForeignMemory(drv, FLOATS)
    try:
        coop_torch = None
        if allocator == "coop":
            import coop.torch as coop_torch
        before = ((coop_torch.last_error(),
                   coop_torch.memory_stats(0)["allocated_bytes.all.current"])
                  if coop_torch else None)
        t = torch.as_tensor(mem, device="cuda")
        zero_copy = t.data_ptr() == mem.ptr  # a copy would be the allocator's
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(spin)
            t.fill_(3.0)
        printed, raised = stderr_of(t.record_stream, side)
        del t
        side.synchronize()
        after = ((coop_torch.last_error(),
                  coop_torch.memory_stats(0)["allocated_bytes.all.current"])
                 if coop_torch else None)
        again = torch.as_tensor(mem, device="cuda")
        read_back = bool((again == 3.0).all().item())
        del again
        torch.cuda.synchronize()
    finally:
        mem.free()
    return {"zero_copy": zero_copy, "raised": raised, "stderr": printed,
            "last_error_changed": before[0] != after[0] if before else None,
            "allocated_changed": before[1] != after[1] if before else None,
            "read_back": read_back}


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
        history = history_round(torch, args.allocator, SPIN_CYCLES)
        foreign = foreign_round(torch, args.allocator, SPIN_CYCLES)
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
                    reused_after_sync=reused, history=history,
                    foreign_record_stream=foreign,
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
    out += history_failures(line["history"]) + foreign_failures(line["foreign_record_stream"])
    ec = line["empty_cache"]
    if not ec.get("side_busy_before"):
        out.append("empty_cache: the side stream had finished before it: nothing was checked")
    if ec["error"]:
        out.append("empty_cache: " + ec["error"])
    if never_waits(line.get("conf")) and not ec["side_busy_after"]:
        out.append("empty_cache: waited for the busy stream although wait:false")
    return out


def history_failures(h):
    if not h["side_busy"]:
        return ["history: the side stream had finished before the snapshot: nothing was checked"]
    out = []
    if h["while_busy"] != ["alloc", "free_requested"]:
        out.append("history: while the side stream was busy the block's trace was %s, not "
                   "alloc, free_requested" % h["while_busy"])
    if h["block_state_while_busy"] != "active_pending_free":
        out.append("history: the block was %s while its free waited for the side stream"
                   % h["block_state_while_busy"])
    if h["after"][:3] != ["alloc", "free_requested", "free_completed"]:
        out.append("history: once the side stream had finished the block's trace was %s, not "
                   "alloc, free_requested, free_completed" % h["after"])
    elif not h["completed_after_seen_busy"]:
        out.append("history: free_completed is timed before the side stream was last seen busy")
    return out


def foreign_failures(f):
    if not f["zero_copy"]:
        return ["foreign record_stream: torch copied the memory into its allocator's: nothing "
                "was checked"]
    out = []
    if f["raised"]:
        out.append("foreign record_stream raised " + f["raised"])
    if f["stderr"]:
        out.append("foreign record_stream printed: " + f["stderr"].strip()[:200])
    if f["last_error_changed"]:
        out.append("foreign record_stream set coop's last error")
    if f["allocated_changed"]:
        out.append("foreign record_stream changed coop's allocated bytes")
    if not f["read_back"]:
        out.append("the foreign tensor did not read back what the side stream wrote")
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
