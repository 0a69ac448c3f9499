"""The CUDA driver API through ctypes, for the GPU scripts that ask the
driver itself what the CUDA backend (src/backend_cuda.c) relies on:
remap_check.py and teardown_check.py. Standard library only: no torch, no
coop, so that they also run on the project's mock driver
(tests/mock_cuda_driver.c) in `make check`.

Entry points are called by the names cuda.h maps them to (cuMemGetInfo_v2,
cuCtxPushCurrent_v2, ...): the mock exports those alone, as libcoop loads
them. COOP_CUDA_DRIVER names the driver library, as for libcoop (default
libcuda.so.1).
"""

import contextlib
import ctypes
import os
import sys

# scripts/, for interrupt (Ctrl-C: one line, no traceback), as common.py
# finds it for the other GPU scripts
_SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _SCRIPTS not in sys.path:
    sys.path.append(_SCRIPTS)
import interrupt  # noqa: E402,F401

NO_CUDA_EXIT = 77
CUDA_SUCCESS = "CUDA_SUCCESS"
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_EVENT_DISABLE_TIMING = 2


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
    """Calls entry points by name: drv(name, *args) raises DriverError on a
    failure; drv.status(name, *args) returns the result's name instead, for
    a check whose finding is what the driver answers."""

    def __init__(self, lib):
        self.lib = lib

    def error_name(self, rc):
        text = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(text)) != 0 or not text.value:
            return "CUresult %d" % rc  # a code this driver has no name for
        return text.value.decode()

    def status(self, name, *args):
        return self.error_name(getattr(self.lib, name)(*args))

    def __call__(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise DriverError(f"{name} returned {rc} ({self.error_name(rc)})")


def no_device(script, reason):
    sys.stderr.write(f"{script}: no CUDA device: {reason}; nothing checked\n")
    sys.exit(NO_CUDA_EXIT)


def open_driver(script):
    """The initialized driver, or exit 77 with one line naming script and
    why: no library, a driver that offers no device, or none counted."""
    name = os.environ.get("COOP_CUDA_DRIVER", "libcuda.so.1")
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        no_device(script, f"no CUDA driver ({e})")
    drv = Driver(lib)
    try:
        drv("cuInit", 0)
        count = ctypes.c_int()
        drv("cuDeviceGetCount", ctypes.byref(count))
    except (DriverError, AttributeError) as e:
        no_device(script, f"the driver {name} offers none ({e})")
    if count.value < 1:
        no_device(script, f"the driver {name} counts no device")
    return drv


@contextlib.contextmanager
def primary_context(drv, ordinal=0):
    """Device ordinal's primary context, retained and current on this
    thread inside the block (as libcoop runs every driver call); yields the
    CUdevice."""
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    drv("cuDeviceGet", ctypes.byref(dev), ordinal)
    drv("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    drv("cuCtxPushCurrent_v2", ctx)
    try:
        yield dev
    finally:
        drv("cuCtxPopCurrent_v2", ctypes.byref(ctx))
        drv("cuDevicePrimaryCtxRelease_v2", dev)


def current_context(drv):
    """The context current on the calling thread (None: none)."""
    ctx = ctypes.c_void_p()
    drv("cuCtxGetCurrent", ctypes.byref(ctx))
    return ctx.value


def free_bytes(drv):
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    drv("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    return free.value


def read_back(drv, addr, size):
    buf = (ctypes.c_ubyte * size)()
    drv("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(addr), ctypes.c_size_t(size))
    return bytes(buf)


def fill(drv, addr, value, size):
    """cuMemsetD8Async on the legacy stream (the caller synchronizes)."""
    drv("cuMemsetD8Async", ctypes.c_uint64(addr), ctypes.c_ubyte(value), ctypes.c_size_t(size),
        None)


class Vmm:
    """The VMM calls as libcoop makes them (pinned device memory, one
    read-write access descriptor for the device, the minimum granularity as
    the page), on the device dev (a CUdevice) whose context is current.
    Each releasing call raises on failure, or with raises=False returns the
    result's name (a finding)."""

    def __init__(self, drv, dev):
        self.drv = drv
        self.prop = AllocationProp()
        self.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location = Location(CU_MEM_LOCATION_TYPE_DEVICE, dev.value)
        self.access = AccessDesc(Location(CU_MEM_LOCATION_TYPE_DEVICE, dev.value),
                                 CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        gran = ctypes.c_size_t()
        drv("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(self.prop),
            CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        self.page = gran.value

    def _call(self, raises, name, *args):
        if raises:
            self.drv(name, *args)
            return CUDA_SUCCESS
        return self.drv.status(name, *args)

    def reserve(self, size):
        base = ctypes.c_uint64()
        self.drv("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(size),
                 ctypes.c_size_t(self.page), ctypes.c_uint64(0), ctypes.c_ulonglong(0))
        return base.value

    def create(self, size):
        h = ctypes.c_ulonglong()
        self.drv("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(self.prop),
                 ctypes.c_ulonglong(0))
        return h

    def map(self, addr, size, handle):
        self.drv("cuMemMap", ctypes.c_uint64(addr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                 handle, ctypes.c_ulonglong(0))

    def set_access(self, addr, size):
        self.drv("cuMemSetAccess", ctypes.c_uint64(addr), ctypes.c_size_t(size),
                 ctypes.byref(self.access), ctypes.c_size_t(1))

    def unmap(self, addr, size, raises=True):
        return self._call(raises, "cuMemUnmap", ctypes.c_uint64(addr), ctypes.c_size_t(size))

    def release(self, handle, raises=True):
        return self._call(raises, "cuMemRelease", handle)

    def address_free(self, base, size, raises=True):
        return self._call(raises, "cuMemAddressFree", ctypes.c_uint64(base),
                          ctypes.c_size_t(size))
