#!/usr/bin/env python3
"""Whether the CUDA driver maps a kept physical handle again at the address
it was unmapped from: what the CUDA backend's undo of an interrupted unmap
relies on (src/backend_cuda.c, cuda_unmap and map_run).

When cuMemUnmap fails part way through a range, the backend maps the pages
it had already unmapped back, with the handles it kept (it releases no
handle before every page is unmapped), so that the pool's page map, which
keeps the range mapped on failure, stays true without asking the device
for new memory. The mock driver (tests/mock_cuda_driver.c) lets a test fail the
Nth unmap, but only a real driver says whether mapping a handle again at
its old address works. This script does that through the driver API alone
(ctypes, no torch, no coop):

1. reserve PAGES granularity-sized pages of virtual address space, create
   one handle per page, map each at its page, cuMemSetAccess on the range,
   and fill page i with the byte 0x10 + i (cuMemsetD8Async on the
   legacy stream, then cuCtxSynchronize);
2. unmap the first HALF pages, keeping their handles (an interrupted
   unmap);
3. map each kept handle at its old address again, cuMemSetAccess on those
   pages;
4. read the whole range back (cuMemcpyDtoH): "kept_contents" says whether
   every page still holds its byte (the physical memory is the handle's;
   the backend needs only step 3 to work, not this);
5. fill the range with 0xA5 and read it back ("rewritten");
6. unmap every page, release every handle, free the reservation; the
   device's free memory after equals that before ("free_restored"; other
   processes on the device would change it).

One JSON line per run; exit 0 when every step worked, 1 when one failed
(the line names the call and the driver's error), 77 with a one-line reason
without a driver or device. COOP_CUDA_DRIVER names the driver library, as
for libcoop (default libcuda.so.1).

Usage: remap_check.py [--pages N] [--half N]    (default 4 and 2)
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_ctypes import (DriverError, Vmm, fill, free_bytes, open_driver,  # noqa: E402
                           primary_context, read_back)


def check(drv, pages, half, line):
    with primary_context(drv) as dev:
        check_in_context(drv, Vmm(drv, dev), pages, half, line)


def check_in_context(drv, vmm, pages, half, line):
    page = vmm.page
    line["page_bytes"] = page
    size = pages * page
    free_before = free_bytes(drv)
    base = vmm.reserve(size)
    handles, mapped = [], []
    line["step"] = "map"
    try:
        for i in range(pages):
            h = vmm.create(page)
            handles.append(h)
            vmm.map(base + i * page, page, h)
            mapped.append(i)
        vmm.set_access(base, size)
        for i in range(pages):
            fill(drv, base + i * page, 0x10 + i, page)
        drv("cuCtxSynchronize")
        line["step"] = "unmap"
        for i in range(half):
            vmm.unmap(base + i * page, page)
            mapped.remove(i)
        line["step"] = "map kept handles again"
        for i in range(half):
            vmm.map(base + i * page, page, handles[i])
            mapped.append(i)
        vmm.set_access(base, half * page)
        line["remapped"] = True
        data = read_back(drv, base, size)
        line["kept_contents"] = all(
            data[i * page:(i + 1) * page] == bytes([0x10 + i]) * page for i in range(pages))
        line["step"] = "rewrite"
        fill(drv, base, 0xA5, size)
        drv("cuCtxSynchronize")
        line["rewritten"] = read_back(drv, base, size) == b"\xa5" * size
        line["step"] = "release"
    finally:
        # an error here replaces one raised above only if none was
        for i in sorted(mapped):
            vmm.unmap(base + i * page, page)
        for h in handles:
            vmm.release(h)
        vmm.address_free(base, size)
    line["free_before"] = free_before
    line["free_after"] = free_bytes(drv)
    line["free_restored"] = line["free_after"] == free_before
    del line["step"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=4)
    p.add_argument("--half", type=int, default=2)
    opts = p.parse_args(argv)
    if opts.pages < 1 or not 0 < opts.half <= opts.pages:
        p.error("--pages must be at least 1 and --half between 1 and --pages")
    drv = open_driver("remap_check.py")
    line = {"check": "remap_kept_handle", "pages": opts.pages, "half": opts.half,
            "remapped": False}
    try:
        check(drv, opts.pages, opts.half, line)
        line["ok"] = bool(line["remapped"] and line["kept_contents"] and line["rewritten"])
    except (DriverError, AttributeError) as e:  # AttributeError: an entry point missing
        line["ok"] = False
        line["error"] = f"{line.get('step', 'setup')}: {e}"
    print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
