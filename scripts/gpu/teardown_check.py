#!/usr/bin/env python3
"""What the CUDA driver answers at teardown, where the CUDA backend
(src/backend_cuda.c) assumes what no device has said yet: its destroy
(cuda_destroy, teardown_reservation) and its event cache (cuda_event_destroy)
were written from the documentation alone (commits 525636e and 67c6234).

Through the driver API alone (ctypes, no torch, no coop), on device 0's
primary context, in this order:

A. cuMemRelease of a handle still mapped (destroy releases every handle,
   mapped or not, and counts on the memory going with the last mapping):
   one handle of PAGES pages mapped at two addresses, filled, released
   while both mappings remain ("release_mapped": the result's name), read
   back ("readable_after_release"), then unmapped one mapping at a time
   (read back again between: "readable_after_first_unmap"). The device's free memory (cuMemGetInfo) is read after
   each step: "kept_after_release" and "kept_after_first_unmap" say it did
   not come back yet, "back_after_last_unmap" that it did (each within half
   the handle's size: other allocations of the driver move it by a little).
B. cuMemUnmap, cuMemRelease and cuMemAddressFree on a thread with no
   context current (their documented errors do not list
   CUDA_ERROR_INVALID_CONTEXT; the backend makes no call without its
   context): each on a fresh thread ("no_context_on_thread" says
   cuCtxGetCurrent found none there), its precondition made true first (the
   page idle and mapped; the handle unmapped; the range empty), and its
   result's name is the finding ("unmap_no_context", ...). What a call
   refused is done again with the context ("..._with_context"), so nothing
   is left behind.
C. cuEventDestroy of a recorded, completed event on a thread with no
   context ("event_destroy_no_context"; the backend keeps such an event
   rather than destroy it there), then with the context if refused.
B, last. cuMemAddressFree of a range with a page still mapped in it (the
   backend never does it: destroy keeps such a range), with the context
   ("address_free_mapped"). Then the page is unmapped, its handle released
   and, if the range was not freed, the range freed, each answer kept
   ("after_address_free_mapped"), and the device is used again: a new
   mapping filled and read back ("device_usable_after": true, or the call
   that failed). "free_restored": the free memory at the end equals that
   at the start.

One JSON line, each finding a value (true / false / the driver's result
name; a read back that failed: "failed: " and the call). The findings are observations, not a verdict: exit 0 when the check
ran, 1 when a step it needs failed (a mapping it could not make: "error"
names it), 77 with a one-line reason without a driver or device.
COOP_CUDA_DRIVER names the driver library, as for libcoop (default
libcuda.so.1).

On the mock driver (tests/mock_cuda_driver.c; tests/python/test_gpu_scripts.py)
A follows the documentation of cuMemRelease; B and C answer
CUDA_ERROR_INVALID_CONTEXT and address_free_mapped CUDA_ERROR_INVALID_VALUE,
the mock's stricter choices where the documentation is silent: there only a
device's answer says anything.

Usage: teardown_check.py [--pages N]    (default 16: 32 MiB with 2 MiB pages)
"""

import argparse
import ctypes
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_ctypes import (CU_EVENT_DISABLE_TIMING, CUDA_SUCCESS, DriverError,  # noqa: E402
                           Vmm, current_context, fill, free_bytes, open_driver, primary_context,
                           read_back)

PROBE = 4096  # bytes read back at each end of a mapping


def on_fresh_thread(fn, *args):
    """fn(*args) on a new thread, which has no context current; its result,
    or what it raised, raised here."""
    out = {}

    def body():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - given to the caller
            out["error"] = e

    t = threading.Thread(target=body, name="no-context")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def without_context(drv, call, *args):
    """call(*args) on a fresh thread, with whether that thread had no
    context: (no context there, call's result)."""
    return on_fresh_thread(lambda: (current_context(drv) is None, call(*args)))


def reads(drv, addr, size, byte):
    """Whether both ends of [addr, +size) hold byte; a failed read is a
    finding too (after a release or an odd free the driver may refuse it):
    "failed: " and the error."""
    probe = min(PROBE, size)
    want = bytes([byte]) * probe
    try:
        return (read_back(drv, addr, probe) == want
                and read_back(drv, addr + size - probe, probe) == want)
    except DriverError as e:
        return f"failed: {e}"


def release_while_mapped(drv, vmm, pages, line):
    """A: the handle's memory stays while any mapping does."""
    size = pages * vmm.page
    tolerance = size // 2
    line["step"] = "A: map one handle twice"
    free = {"before": free_bytes(drv)}
    base = vmm.reserve(2 * size)
    h = vmm.create(size)
    mapped, released = [], False
    try:
        for addr in (base, base + size):
            vmm.map(addr, size, h)
            mapped.append(addr)
        vmm.set_access(base, 2 * size)
        fill(drv, base, 0x5A, size)
        drv("cuCtxSynchronize")
        free["created"] = free_bytes(drv)
        line["step"] = "A: release mapped"
        line["release_mapped"] = vmm.release(h, raises=False)
        released = line["release_mapped"] == CUDA_SUCCESS
        free["released"] = free_bytes(drv)
        # read where it was written (the mock keeps what was written by
        # address, not by handle), so the second mapping goes first
        line["readable_after_release"] = reads(drv, base, size, 0x5A)
        line["step"] = "A: unmap"
        vmm.unmap(mapped.pop(), size)
        free["first_unmapped"] = free_bytes(drv)
        line["readable_after_first_unmap"] = reads(drv, base, size, 0x5A)
        vmm.unmap(mapped.pop(), size)
        free["last_unmapped"] = free_bytes(drv)
    finally:
        for addr in mapped:
            vmm.unmap(addr, size, raises=False)
        if not released:
            vmm.release(h, raises=False)
        vmm.address_free(base, 2 * size, raises=False)
    line["free_bytes"] = free
    line["kept_after_release"] = free["released"] < free["created"] + tolerance
    line["kept_after_first_unmap"] = free["first_unmapped"] < free["created"] + tolerance
    line["back_after_last_unmap"] = free["last_unmapped"] > free["before"] - tolerance
    line["release_mapped_as_documented"] = (
        released and line["kept_after_release"] and line["kept_after_first_unmap"]
        and line["back_after_last_unmap"])


def releases_without_context(drv, vmm, line):
    """B: each releasing VMM call on a thread without a context; what it
    refused, done again with the context."""
    page = vmm.page
    line["step"] = "B: map a page"
    base = vmm.reserve(page)
    h = vmm.create(page)
    vmm.map(base, page, h)
    vmm.set_access(base, page)
    fill(drv, base, 0x33, page)
    drv("cuCtxSynchronize")  # idle: an unmap could not race a kernel
    line["step"] = "B: no context"
    alone = []
    for key, call, args in (("unmap", vmm.unmap, (base, page)), ("release", vmm.release, (h,)),
                            ("address_free", vmm.address_free, (base, page))):
        none, line[key + "_no_context"] = without_context(drv, call, *args, False)
        alone.append(none)
        if line[key + "_no_context"] != CUDA_SUCCESS:
            line[key + "_with_context"] = call(*args, False)
    line["no_context_on_thread"] = all(alone)


def event_destroy_without_context(drv, line):
    """C: cuEventDestroy on a thread without a context."""
    line["step"] = "C: event"
    ev = ctypes.c_void_p()
    drv("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
    try:
        drv("cuEventRecord", ev, None)
        drv("cuEventSynchronize", ev)
    except DriverError:
        drv.status("cuEventDestroy_v2", ev)
        raise
    none, line["event_destroy_no_context"] = without_context(
        drv, drv.status, "cuEventDestroy_v2", ev)
    line["no_context_on_thread"] = line["no_context_on_thread"] and none
    if line["event_destroy_no_context"] != CUDA_SUCCESS:
        line["event_destroy_with_context"] = drv.status("cuEventDestroy_v2", ev)


def address_free_with_mapping(drv, vmm, line):
    """B, last: cuMemAddressFree of a range with a page mapped in it, then
    everything given back whatever it answered."""
    page = vmm.page
    line["step"] = "B: address free with a mapping"
    base = vmm.reserve(2 * page)
    h = vmm.create(page)
    vmm.map(base, page, h)
    vmm.set_access(base, page)
    drv("cuCtxSynchronize")
    line["address_free_mapped"] = vmm.address_free(base, 2 * page, raises=False)
    after = {"unmap": vmm.unmap(base, page, raises=False),
             "release": vmm.release(h, raises=False)}
    if line["address_free_mapped"] != CUDA_SUCCESS:
        after["address_free"] = vmm.address_free(base, 2 * page, raises=False)
    line["after_address_free_mapped"] = after


def device_usable(drv, vmm, line):
    """A new mapping, filled and read back, after all of the above: true, or
    the call that failed (a finding: the steps before may have broken the
    context)."""
    line["step"] = "device usable after"
    page = vmm.page
    base, h, mapped = None, None, False
    try:
        base = vmm.reserve(page)
        h = vmm.create(page)
        vmm.map(base, page, h)
        mapped = True
        vmm.set_access(base, page)
        fill(drv, base, 0xC3, page)
        drv("cuCtxSynchronize")
        line["device_usable_after"] = reads(drv, base, page, 0xC3)
    except DriverError as e:
        line["device_usable_after"] = f"failed: {e}"
    finally:
        if mapped:
            vmm.unmap(base, page, raises=False)
        if h is not None:
            vmm.release(h, raises=False)
        if base is not None:
            vmm.address_free(base, page, raises=False)


def check(drv, pages, line):
    with primary_context(drv) as dev:
        vmm = Vmm(drv, dev)
        line["page_bytes"] = vmm.page
        start = free_bytes(drv)
        release_while_mapped(drv, vmm, pages, line)
        releases_without_context(drv, vmm, line)
        event_destroy_without_context(drv, line)
        address_free_with_mapping(drv, vmm, line)
        device_usable(drv, vmm, line)
        line["free_restored"] = free_bytes(drv) == start
    del line["step"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=16,
                   help="pages of the handle released while mapped (A)")
    opts = p.parse_args(argv)
    if opts.pages < 1:
        p.error("--pages must be at least 1")
    drv = open_driver("teardown_check.py")
    line = {"check": "teardown", "pages": opts.pages}
    try:
        check(drv, opts.pages, line)
        line["ran"] = True
    except (DriverError, AttributeError) as e:  # AttributeError: an entry point missing
        line["ran"] = False
        line["error"] = f"{line.pop('step', 'setup')}: {e}"
    print(json.dumps(line), flush=True)
    return 0 if line["ran"] else 1


if __name__ == "__main__":
    sys.exit(main())
