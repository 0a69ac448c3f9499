#!/usr/bin/env python3
"""A CUDA pool on device 1 used from a thread where device 0's primary
context is current (as PyTorch leaves it after work on device 0), on a real
driver with two GPUs: what tests/backend_cuda_mock_test's
test_pool_on_the_second_device checks on the mock (mutant Q2-75,
docs/mutation-testing.md: pages made on device 0 whatever the pool's
device).

Through libcoop's C API (ctypes, as fork_check.py), for the VMM pool then
the segment pool (use_vmm 1, then 0), capacity 64 MiB, with device 0's
primary context current throughout: coop_pool_create on device 1,
coop_malloc of 4 MiB, the block filled with 0x3C and read back in device
1's context, coop_free, coop_pool_check, coop_pool_destroy. Per pool:
"device1_grew" (device 1's used bytes grew by at least the block),
"device0_unmoved" (device 0's by less than the block; used bytes are
total - free from cuMemGetInfo in each device's context, or the mock's own
count), "context_kept" (device 0's context still current after each coop
call), "contents" (the read-back), "check", "device1_restored" (after
destroy, within 64 MiB of the start: an observation). One JSON line; exit
0 when every verdict finding holds, 1 otherwise ("error" names a failed
step), 77 with a one-line reason without a driver, device, or a second
device ("one GPU: ..."). COOP_CUDA_DRIVER names the driver library.

Usage: second_device_check.py
"""

import argparse
import ctypes
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from driver_ctypes import (DriverError, current_context, fill, no_device,  # noqa: E402
                           open_driver, primary_context, read_back)
from fork_check import coop_api, last_error  # noqa: E402

BLOCK = 4 << 20
CAPACITY = 64 << 20
FILL = 0x3C
SLACK = 64 << 20
VERDICT = ("device1_grew", "device0_unmoved", "context_kept", "contents", "check")


def used_bytes(drv, ordinal):
    """Device ordinal's used bytes: the mock's own count where the driver
    is the mock (its cuMemGetInfo is not per device), else total - free in
    that device's primary context."""
    mock = getattr(drv.lib, "mock_cuda_device_bytes", None)
    if mock is not None:
        mock.restype = ctypes.c_long
        return mock(ordinal)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    with primary_context(drv, ordinal):
        drv("cuCtxSynchronize")
        drv("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    return total.value - free.value


def one_pool(drv, lib, native, vmm, ctx0):
    out = {"use_vmm": bool(vmm)}
    kept = []
    start0, start1 = used_bytes(drv, 0), used_bytes(drv, 1)
    config = native.Config()
    lib.coop_config_default(ctypes.byref(config))
    config.backend, config.device, config.capacity, config.use_vmm = 1, 1, CAPACITY, vmm
    pool = ctypes.c_void_p()
    if lib.coop_pool_create(ctypes.byref(config), ctypes.byref(pool)) != native.OK:
        raise DriverError(f"coop_pool_create (CUDA, device 1, use_vmm {vmm}): {last_error(lib)}")
    kept.append(current_context(drv) == ctx0)
    try:
        st = ctypes.c_int(-1)
        block = lib.coop_malloc(pool, BLOCK, None, 0, ctypes.byref(st))
        kept.append(current_context(drv) == ctx0)
        if not block:
            raise DriverError(f"coop_malloc of 4 MiB on device 1: {last_error(lib)}")
        grew0, grew1 = used_bytes(drv, 0) - start0, used_bytes(drv, 1) - start1
        out.update(device0_grew_by=grew0, device1_grew_by=grew1,
                   device1_grew=grew1 >= BLOCK, device0_unmoved=grew0 < BLOCK)
        with primary_context(drv, 1):
            fill(drv, block, FILL, BLOCK)
            drv("cuCtxSynchronize")
            out["contents"] = read_back(drv, block, BLOCK) == bytes([FILL]) * BLOCK
        out["free_ok"] = lib.coop_free(pool, block) == native.OK
        kept.append(current_context(drv) == ctx0)
        out["check"] = lib.coop_pool_check(pool) == native.OK and out["free_ok"]
    finally:
        lib.coop_pool_destroy(pool)
    kept.append(current_context(drv) == ctx0)
    out["context_kept"] = all(kept)
    out["device1_restored"] = abs(used_bytes(drv, 1) - start1) <= SLACK
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv)
    drv = open_driver("second_device_check.py")
    count = ctypes.c_int()
    drv("cuDeviceGetCount", ctypes.byref(count))
    if count.value < 2:
        no_device("second_device_check.py",
                  f"one GPU: the driver counts {count.value} device(s), this check needs two")
    line = {"check": "pool_on_device_1", "devices": count.value, "pools": []}
    try:
        lib, native = coop_api()
        with primary_context(drv, 0):
            ctx0 = current_context(drv)
            for vmm in (1, 0):
                line["pools"].append(one_pool(drv, lib, native, vmm, ctx0))
    except (DriverError, AttributeError, OSError) as e:
        line["error"] = str(e)
    except Exception as e:  # noqa: BLE001  (libcoop not found: native.CoopError)
        line["error"] = f"{type(e).__name__}: {e}"
    line["ok"] = ("error" not in line and len(line["pools"]) == 2
                  and all(pool.get(k) is True for pool in line["pools"] for k in VERDICT))
    print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
