#!/usr/bin/env python3
"""What PyTorch makes of coop's out-of-memory, on both routes, on a real GPU.

coop returns NULL when a request does not fit its capacity. Two children,
each with coop's capacity set to --capacity (default 1G):

- pluggable: coop.torch.install(), then torch.empty of twice the capacity
  plus one byte. docs/pytorch.md says, from reading PyTorch's source, that
  CUDAPluggableAllocator does not check the NULL: the tensor comes back
  without memory and only coop.torch.check_oom() reports the failure. The
  line says whether torch raised (and what), the tensor's data_ptr, what
  check_oom() raised, and whether a small allocation still works after.
  The allocation history is on: its oom entry ("oom_entry") must carry
  the size rounded up to 512 bytes, as PyTorch's carries its rounded size
  (2b4572f), and device_free where the others carry addr.
- mem_pool: coop.torch.mem_pool() under torch.cuda.use_mem_pool: a tensor
  of a quarter of the capacity is written and read back, then one of twice
  the capacity must raise torch.cuda.OutOfMemoryError (PyTorch's caching
  allocator asks coop for a segment and checks the answer), and the pool
  must still serve the next allocation.

Lines: per child {"route", "ok", ...}; then {"summary": "oom_check", "ok",
"failures"}: a failure is a route that did not do what docs/pytorch.md
says (pluggable: check_oom() raises coop's OutOfMemoryError; mem_pool:
torch raises its OutOfMemoryError and the pool keeps working). Exit 1 on a
failure.

Usage: oom_check.py [--capacity 1G] [--conf CONF] [--out FILE] [--timeout S] [--dry-run]
--conf adds COOP_ALLOC_CONF keys after the capacity (e.g. vmm:false); each
line's "conf" is the configuration its child used.
--dry-run runs the parent's logic on fake child lines. Exits 77 with a
one-line reason without a CUDA device.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCRIPT = os.path.abspath(__file__)
ROUTES = ("pluggable", "mem_pool")


def parse_capacity(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def fake_line(route):
    if route == "pluggable":
        return {"route": route, "ok": True, "dry_run": True, "torch_raised": None,
                "data_ptr": 0, "check_oom": "OutOfMemoryError: dry run", "after_ok": True,
                "oom_entry": {"size": 1024, "requested": 513, "has_device_free": True}}
    return {"route": route, "ok": True, "dry_run": True, "small_ok": True,
            "torch_raised": "OutOfMemoryError: dry run", "is_torch_oom": True, "after_ok": True}


def child_conf(capacity, conf):
    """coop's configuration for a child: the capacity, then --conf's keys."""
    return "capacity:%d" % capacity + ("," + conf if conf else "")


def child_pluggable(capacity, conf, line):
    import coop.torch

    coop.torch.install(child_conf(capacity, conf))
    import torch

    torch.empty(1 << 20, device="cuda").fill_(1.0)  # the pool exists and works
    torch.cuda.synchronize()
    coop.torch.record_history()
    requested = 2 * capacity + 1  # bytes: not a multiple of 512
    try:
        big = torch.empty(requested, dtype=torch.uint8, device="cuda")
        line.update(torch_raised=None, data_ptr=big.data_ptr())  # never touched
        del big
    except Exception as e:  # noqa: BLE001 - what torch raises is the finding
        line.update(torch_raised=common.first_line(e), data_ptr=None)
    ooms = [e for e in coop.torch.snapshot()["device_traces"][0] if e["action"] == "oom"]
    line["oom_entry"] = {"size": ooms[-1]["size"], "requested": requested,
                         "has_device_free": "device_free" in ooms[-1]} if ooms else None
    coop.torch.record_history(0)
    try:
        coop.torch.check_oom()
        line["check_oom"] = None
    except coop.torch.OutOfMemoryError as e:
        line["check_oom"] = common.first_line(e)
    small = torch.ones(1 << 20, device="cuda")
    line["after_ok"] = float(small.sum().item()) == float(1 << 20)


def child_mem_pool(capacity, conf, line):
    import coop.torch
    import torch

    pool = coop.torch.mem_pool(child_conf(capacity, conf))
    with torch.cuda.use_mem_pool(pool):
        quarter = torch.ones(capacity // 16, device="cuda")  # a quarter, in float32
        line["small_ok"] = float(quarter.sum().item()) == float(capacity // 16)
        try:
            big = torch.empty(2 * capacity // 4, dtype=torch.float32, device="cuda")
            line.update(torch_raised=None, is_torch_oom=False, data_ptr=big.data_ptr())
            del big
        except Exception as e:  # noqa: BLE001
            line.update(torch_raised=common.first_line(e),
                        is_torch_oom=isinstance(e, torch.cuda.OutOfMemoryError))
        again = torch.ones(capacity // 16, device="cuda")
        line["after_ok"] = float(again.sum().item()) == float(capacity // 16)
    line["coop_reserved_bytes"] = coop.torch.memory_stats(0)["reserved_bytes.all.current"]


def child(args):
    if args.dry_run:
        common.emit(dict(fake_line(args.route), conf=child_conf(args.capacity_bytes, args.conf)))
        common.finish_child(0)
    common.require_cuda("oom_check.py")
    line = {"route": args.route, "ok": True, "capacity": args.capacity_bytes,
            "conf": child_conf(args.capacity_bytes, args.conf)}
    try:
        run = child_pluggable if args.route == "pluggable" else child_mem_pool
        run(args.capacity_bytes, args.conf, line)
    except Exception as e:  # noqa: BLE001
        line.update(ok=False, error=common.first_line(e))
    common.emit(line)
    common.finish_child(0)


def failures(line):
    if not line.get("ok"):
        return ["failed: %s" % line.get("error")]
    out = []
    if line["route"] == "pluggable":
        if not (line.get("check_oom") or "").startswith("OutOfMemoryError"):
            out.append("check_oom() did not raise coop's OutOfMemoryError")
        out += oom_entry_failures(line.get("oom_entry"))
    else:
        if not line.get("small_ok"):
            out.append("a tensor in the pool did not read back what was written")
        if not line.get("is_torch_oom"):
            out.append("torch did not raise torch.cuda.OutOfMemoryError: %s"
                       % line.get("torch_raised"))
    if not line.get("after_ok"):
        out.append("the next allocation after the failure did not work")
    return out


def oom_entry_failures(entry):
    """The pluggable route's oom history entry against PyTorch's: its size
    rounded up to 512 bytes, device_free present."""
    if not entry:
        return ["no oom entry in coop's allocation history"]
    out = []
    rounded = -(-entry["requested"] // 512) * 512
    if entry["size"] != rounded:
        out.append("the oom entry's size is %d, not %d (%d rounded up to 512)"
                   % (entry["size"], rounded, entry["requested"]))
    if not entry["has_device_free"]:
        out.append("the oom entry has no device_free")
    return out


def main():
    p = common.arg_parser(__doc__)
    common.add_parent_options(p)
    p.add_argument("--route", choices=ROUTES, help=argparse.SUPPRESS)
    p.add_argument("--capacity", default="1G", help="coop's capacity (default 1G)")
    args = p.parse_args()
    try:
        args.capacity_bytes = parse_capacity(args.capacity)
    except ValueError:
        p.error("--capacity: %r is not a size (a number with K, M or G)" % args.capacity)
    if args.capacity_bytes < (64 << 20):
        p.error("--capacity: at least 64M")
    if args.child:
        child(args)
    if not args.dry_run:
        common.require_cuda("oom_check.py")
    common.start_parent(args, "oom_check")
    return common.run_checks(
        SCRIPT, args,
        [(r, ["--route", r, "--capacity", args.capacity], args.conf, {"route": r})
         for r in ROUTES],
        failures, "oom_check")


if __name__ == "__main__":
    sys.exit(main())
