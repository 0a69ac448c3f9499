#!/usr/bin/env python3
"""Mutant Q2-25 (docs/mutation-testing.md), on the real driver: is the
address cuMemAddressReserve gives with alignment 0 (the driver's default)
always a multiple of 2 MiB? The CUDA backend (cuda_reserve) asks for the
page (the minimum granularity) explicitly; the mutant passes 0, and no
test on the mock can tell the two apart, since the mock's default is the
granularity. Only a device says whether its default is smaller.

Through the driver API alone (driver_ctypes.py), on device 0 with its
primary context current: reserves 2 MiB x k for k in 1, 3, 2, 5, 1, 4, 1
(odd sizes between even ones, so that a default smaller than 2 MiB has a
chance to show), each with alignment 0 and no address hint, all kept until
the end, then frees them all. Prints one JSON line: "granularity" (the
minimum, as libcoop asks), "reservations" [{"bytes", "ptr_mod_2mib"}],
"all_2mib_aligned". An observation: exit 0 when it ran (whatever the
offsets), 1 when a driver call failed ("error" names it), 77 with a
one-line reason without a driver or device. COOP_CUDA_DRIVER names the
driver library, as for libcoop.

Usage: reserve_align_check.py
"""

import argparse
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_ctypes import DriverError, Vmm, open_driver, primary_context  # noqa: E402

MIB2 = 2 << 20
MULTIPLES = (1, 3, 2, 5, 1, 4, 1)


def reserve_default_alignment(drv, size):
    base = ctypes.c_uint64()
    drv("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(size), ctypes.c_size_t(0),
        ctypes.c_uint64(0), ctypes.c_ulonglong(0))
    return base.value


def check(drv, line):
    with primary_context(drv) as dev:
        line["granularity"] = Vmm(drv, dev).page
        held = []
        try:
            for k in MULTIPLES:
                ptr = reserve_default_alignment(drv, MIB2 * k)
                held.append((ptr, MIB2 * k))
                line["reservations"].append({"bytes": MIB2 * k, "ptr_mod_2mib": ptr % MIB2})
        finally:
            for ptr, size in held:
                drv("cuMemAddressFree", ctypes.c_uint64(ptr), ctypes.c_size_t(size))
    line["all_2mib_aligned"] = all(r["ptr_mod_2mib"] == 0 for r in line["reservations"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv)
    drv = open_driver("reserve_align_check.py")
    line = {"check": "reserve_default_alignment", "reservations": []}
    try:
        check(drv, line)
    except (DriverError, AttributeError) as e:
        line["error"] = str(e)
    line["ran"] = "error" not in line
    print(json.dumps(line), flush=True)
    return 0 if line["ran"] else 1


if __name__ == "__main__":
    sys.exit(main())
