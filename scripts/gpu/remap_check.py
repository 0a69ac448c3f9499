#!/usr/bin/env python3
"""Whether the CUDA driver maps a kept physical handle again at the address
it was unmapped from: what the CUDA backend's undo of an interrupted unmap
relies on (src/backend_cuda.c, cuda_unmap and map_run).

When cuMemUnmap fails part way through a range, the backend maps the pages
it had already unmapped back, with the handles it kept (it releases no
handle before every page is unmapped), so that the pool's page map, which
keeps the range mapped on failure, stays true without asking the device
for new memory. The mock driver (tests/mock_cuda.c) lets a test fail the
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
import ctypes
import json
import os
import sys

NO_CUDA_EXIT = 77
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class DriverError(Exception):
    pass


class Driver:
    def __init__(self, lib):
        self.lib = lib

    def __call__(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise DriverError(f"{name} returned {rc} ({(text.value or b'?').decode()})")


def no_device(reason):
    sys.stderr.write(f"remap_check.py: no CUDA device: {reason}; nothing checked\n")
    sys.exit(NO_CUDA_EXIT)


def open_driver():
    name = os.environ.get("COOP_CUDA_DRIVER", "libcuda.so.1")
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        no_device(f"no CUDA driver ({e})")
    drv = Driver(lib)
    try:
        drv("cuInit", 0)
        count = ctypes.c_int()
        drv("cuDeviceGetCount", ctypes.byref(count))
    except (DriverError, AttributeError) as e:
        no_device(f"the driver {name} offers none ({e})")
    if count.value < 1:
        no_device(f"the driver {name} counts no device")
    return drv


def free_bytes(drv):
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    drv("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    return free.value


def read_back(drv, addr, size):
    buf = (ctypes.c_ubyte * size)()
    drv("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(addr), ctypes.c_size_t(size))
    return bytes(buf)


def check(drv, pages, half, line):
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    drv("cuDeviceGet", ctypes.byref(dev), 0)
    drv("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    drv("cuCtxPushCurrent_v2", ctx)
    try:
        check_in_context(drv, dev, pages, half, line)
    finally:
        drv("cuCtxPopCurrent_v2", ctypes.byref(ctx))
        drv("cuDevicePrimaryCtxRelease_v2", dev)


def fill(drv, addr, value, size):
    drv("cuMemsetD8Async", ctypes.c_uint64(addr), ctypes.c_ubyte(value), ctypes.c_size_t(size),
        None)


def check_in_context(drv, dev, pages, half, line):
    prop = AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location = Location(CU_MEM_LOCATION_TYPE_DEVICE, dev.value)
    gran = ctypes.c_size_t()
    drv("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop),
        CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    page = gran.value
    line["page_bytes"] = page
    access = AccessDesc(Location(CU_MEM_LOCATION_TYPE_DEVICE, dev.value),
                        CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    size = pages * page
    free_before = free_bytes(drv)
    base = ctypes.c_uint64()
    drv("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(size), ctypes.c_size_t(page),
        ctypes.c_uint64(0), ctypes.c_ulonglong(0))
    handles, mapped = [], []
    line["step"] = "map"
    try:
        for i in range(pages):
            h = ctypes.c_ulonglong()
            drv("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(page), ctypes.byref(prop),
                ctypes.c_ulonglong(0))
            handles.append(h)
            drv("cuMemMap", ctypes.c_uint64(base.value + i * page), ctypes.c_size_t(page),
                ctypes.c_size_t(0), h, ctypes.c_ulonglong(0))
            mapped.append(i)
        drv("cuMemSetAccess", base, ctypes.c_size_t(size), ctypes.byref(access),
            ctypes.c_size_t(1))
        for i in range(pages):
            fill(drv, base.value + i * page, 0x10 + i, page)
        drv("cuCtxSynchronize")
        line["step"] = "unmap"
        for i in range(half):
            drv("cuMemUnmap", ctypes.c_uint64(base.value + i * page), ctypes.c_size_t(page))
            mapped.remove(i)
        line["step"] = "map kept handles again"
        for i in range(half):
            drv("cuMemMap", ctypes.c_uint64(base.value + i * page), ctypes.c_size_t(page),
                ctypes.c_size_t(0), handles[i], ctypes.c_ulonglong(0))
            mapped.append(i)
        drv("cuMemSetAccess", base, ctypes.c_size_t(half * page), ctypes.byref(access),
            ctypes.c_size_t(1))
        line["remapped"] = True
        data = read_back(drv, base.value, size)
        line["kept_contents"] = all(
            data[i * page:(i + 1) * page] == bytes([0x10 + i]) * page for i in range(pages))
        line["step"] = "rewrite"
        fill(drv, base.value, 0xA5, size)
        drv("cuCtxSynchronize")
        line["rewritten"] = read_back(drv, base.value, size) == b"\xa5" * size
        line["step"] = "release"
    finally:
        # an error here replaces one raised above only if none was
        for i in sorted(mapped):
            drv("cuMemUnmap", ctypes.c_uint64(base.value + i * page), ctypes.c_size_t(page))
        for h in handles:
            drv("cuMemRelease", h)
        drv("cuMemAddressFree", base, ctypes.c_size_t(size))
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
    drv = open_driver()
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
