"""ctypes binding of libcoop: statistics, walk, and the PyTorch ABI.

The structures mirror include/coop.h field by field; keep them in step.
The library is found, in order, at:

1. ``$COOP_LIBRARY`` (a path to libcoop.so),
2. the source tree this package sits in (``<top>/.libs/libcoop.so``),
3. the directory ``make install`` put it in (``_build_config.LIBDIR``),
4. the system's library path (``ctypes.util.find_library("coop")``).
"""

import ctypes
import ctypes.util
import os
import threading

from . import __version__ as _PACKAGE_VERSION

__all__ = [
    "CoopError",
    "Stat",
    "Stats",
    "BlockInfo",
    "SegmentInfo",
    "Config",
    "TorchEvent",
    "TorchSnapshot",
    "library",
    "library_path",
    "stats",
    "walk",
    "check",
    "strerror",
]

# ---- status values (coop_status) ----
OK = 0
ERR_NOMEM = 1
ERR_INVALID = 2
ERR_FOREIGN_PTR = 3
ERR_DOUBLE_FREE = 4
ERR_INTERIOR_PTR = 5
ERR_BACKEND = 6
ERR_NO_DRIVER = 7
ERR_UNSUPPORTED = 8
ERR_CORRUPT = 9
ERR_HOST_NOMEM = 10
ERR_BUSY = 11

BLOCK_FREE, BLOCK_ALLOCATED, BLOCK_PENDING = 0, 1, 2
TORCH_ACTIONS = {0: "alloc", 1: "free_requested", 2: "free_completed", 3: "oom"}


class CoopError(RuntimeError):
    """A libcoop call failed; .status is the coop_status value."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("current", "peak", "allocated", "freed")]


STAT_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)


class Stats(ctypes.Structure):
    _fields_ = [(n, Stat) for n in STAT_NAMES] + [
        (n, ctypes.c_uint64)
        for n in (
            "num_alloc_retries",
            "num_ooms",
            "num_maps",
            "num_unmaps",
            "map_bytes",
            "capacity",
            "free_bytes",
            "largest_free_block",
            "num_free_blocks",
        )
    ] + [("fragmentation", ctypes.c_double), ("reserved_over_allocated", ctypes.c_double)]


class BlockInfo(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_size_t),
        ("size", ctypes.c_uint64),
        ("requested_size", ctypes.c_uint64),
        ("state", ctypes.c_int),
        ("stream", ctypes.c_size_t),
        ("mapped_bytes", ctypes.c_uint64),
    ]


class SegmentInfo(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_size_t),
        ("size", ctypes.c_uint64),
        ("mapped_bytes", ctypes.c_uint64),
        ("num_blocks", ctypes.c_size_t),
    ]


class Config(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("capacity", ctypes.c_uint64),
        ("page_size", ctypes.c_uint64),
        ("va_size", ctypes.c_uint64),
        ("segment_size", ctypes.c_uint64),
        ("min_split", ctypes.c_uint64),
        ("use_vmm", ctypes.c_bool),
        ("check", ctypes.c_bool),
        ("single_thread", ctypes.c_bool),
        ("never_wait", ctypes.c_bool),
        ("fault_kinds", ctypes.c_uint),
        ("fault_nth", ctypes.c_uint64),
    ]


class TorchEvent(ctypes.Structure):
    _fields_ = [
        ("time_us", ctypes.c_uint64),
        ("address", ctypes.c_size_t),
        ("size", ctypes.c_uint64),
        ("stream", ctypes.c_size_t),
        ("action", ctypes.c_int32),
        ("device", ctypes.c_int32),
    ]


class TorchRange(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_size_t),
        ("size", ctypes.c_uint64),
    ]


class TorchSnapshot(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("vmm", ctypes.c_bool),
        ("num_segments", ctypes.c_size_t),
        ("segments", ctypes.POINTER(SegmentInfo)),
        ("num_blocks", ctypes.c_size_t),
        ("blocks", ctypes.POINTER(BlockInfo)),
        ("num_events", ctypes.c_size_t),
        ("events", ctypes.POINTER(TorchEvent)),
        ("num_ranges", ctypes.c_size_t),
        ("ranges", ctypes.POINTER(TorchRange)),
    ]


SegmentVisitor = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(SegmentInfo), ctypes.c_void_p)
BlockVisitor = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(BlockInfo), ctypes.c_void_p)

_P = ctypes.c_void_p
_SIGNATURES = {
    # name: (restype, argtypes)
    "coop_version": (ctypes.c_char_p, []),
    "coop_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "coop_last_error": (ctypes.c_char_p, []),
    "coop_abi_size": (ctypes.c_size_t, [ctypes.c_char_p]),
    "coop_abi_offset": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_char_p]),
    "coop_get_stats": (None, [_P, ctypes.POINTER(Stats)]),
    "coop_reset_peak_stats": (None, [_P]),
    "coop_pool_config": (None, [_P, ctypes.POINTER(Config)]),
    "coop_pool_check": (ctypes.c_int, [_P]),
    "coop_walk": (ctypes.c_int, [_P, SegmentVisitor, BlockVisitor, _P]),
    "coop_torch_malloc": (_P, [ctypes.c_size_t, ctypes.c_int, _P]),
    "coop_torch_free": (None, [_P, ctypes.c_size_t, ctypes.c_int, _P]),
    "coop_torch_init": (None, [ctypes.c_int]),
    "coop_torch_empty_cache": (None, []),
    "coop_torch_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
    "coop_torch_record_stream": (None, [_P, _P]),
    "coop_torch_forget_stream": (ctypes.c_int, [_P]),
    "coop_torch_configure": (ctypes.c_int, [ctypes.c_char_p]),
    "coop_torch_settings": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
    "coop_torch_last_error": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "coop_torch_normalize_conf": (ctypes.c_int,
                                  [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "coop_torch_failed_mallocs": (ctypes.c_uint64,
                                  [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
    "coop_torch_failed_malloc_status": (ctypes.c_uint64,
                                        [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_int)]),
    "coop_torch_pool": (_P, [ctypes.c_int]),
    "coop_torch_record_history": (None, [ctypes.c_size_t]),
    "coop_torch_clear_history": (None, []),
    "coop_torch_snapshot_take": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.POINTER(TorchSnapshot))]),
    "coop_torch_snapshot_free": (None, [ctypes.POINTER(TorchSnapshot)]),
}

TLS_HINT = (
    "libcoop.so should not need static TLS (it links no jemalloc); "
    "a copy built before that change may: rebuild it")

_lock = threading.Lock()
_lib = None
_lib_gil = None
_path = None


def _candidates():
    env = os.environ.get("COOP_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.normpath(os.path.join(here, "..", "..", ".libs", "libcoop.so"))
    try:
        from . import _build_config  # written by make

        yield os.path.join(_build_config.LIBDIR, "libcoop.so")
    except ImportError:
        pass
    found = ctypes.util.find_library("coop")
    if found:
        yield found


def library_path():
    """Path of the libcoop.so this package uses (PyTorch loads the same)."""
    library()
    return _path


# The structures this package mirrors, by their C names: a library whose
# coop_abi_size differs for one of them, or whose coop_abi_offset differs for
# one of their fields, was built from other headers.
MIRRORS = {
    "coop_config": Config,
    "coop_stat": Stat,
    "coop_stats": Stats,
    "coop_block_info": BlockInfo,
    "coop_segment_info": SegmentInfo,
    "coop_torch_event": TorchEvent,
    "coop_torch_range": TorchRange,
    "coop_torch_snapshot": TorchSnapshot,
}


_NO_OFFSET = ctypes.c_size_t(-1).value  # coop_abi_offset's "no such field"


def _layout_mismatch(lib):
    """The first mirror whose size, or the first of its fields whose offset,
    differs from lib's structure, as text, or None. Sizes alone miss two
    fields of one width swapped."""
    for fn in ("coop_abi_size", "coop_abi_offset"):
        getattr(lib, fn).restype, getattr(lib, fn).argtypes = _SIGNATURES[fn]
    for name, mirror in MIRRORS.items():
        theirs, ours = lib.coop_abi_size(name.encode()), ctypes.sizeof(mirror)
        if theirs != ours:
            return f"its {name} is {theirs} bytes, this package's mirror {ours}"
        for field, _ in mirror._fields_:
            theirs = lib.coop_abi_offset(name.encode(), field.encode())
            ours = getattr(mirror, field).offset
            if theirs == _NO_OFFSET:
                return (f"its {name} has no field {field} (this package's mirror has it "
                        f"at offset {ours})")
            if theirs != ours:
                return (f"its {name}.{field} is at offset {theirs}, this package's "
                        f"mirror's at {ours}")
    return None


def library():
    """The loaded libcoop (ctypes.CDLL), with argument types set."""
    global _lib, _lib_gil, _path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for cand in _candidates():
            if os.sep in cand:  # PyTorch dlopens _path later, maybe from another directory
                cand = os.path.abspath(cand)
            if os.sep in cand and not os.path.exists(cand):
                tried.append(f"{cand} (absent)")
                continue
            try:
                lib = ctypes.CDLL(cand)
            except OSError as e:
                if "static TLS" in str(e):
                    raise CoopError(ERR_NO_DRIVER, f"coop: cannot load {cand}: {e}. " + TLS_HINT)
                tried.append(f"{cand} ({e})")
                continue
            missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
            if missing:  # another library, or a libcoop older than this package
                tried.append(f"{cand} (not this package's libcoop.so: it lacks "
                             f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
                continue
            lib.coop_version.restype = ctypes.c_char_p
            version = (lib.coop_version() or b"?").decode(errors="replace")
            if version != _PACKAGE_VERSION:  # its structures may not be these mirrors
                tried.append(f"{cand} (libcoop {version}; this package is {_PACKAGE_VERSION}, "
                             "whose structures may not match it: use the package of "
                             "the same build)")
                continue
            mismatch = _layout_mismatch(lib)
            if mismatch:  # same version string, other headers (another build)
                tried.append(f"{cand} (libcoop {version}, but {mismatch}: use the package of "
                             "the same build)")
                continue
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            # coop_walk calls back into Python under the pool's lock: keep the
            # GIL across it (PyDLL), so no Python thread can wait on that lock
            # while holding the GIL the callbacks need.
            gil = ctypes.PyDLL(cand)
            gil.coop_walk.restype = ctypes.c_int
            gil.coop_walk.argtypes = _SIGNATURES["coop_walk"][1]
            _lib, _lib_gil, _path = lib, gil, cand
            return lib
        raise CoopError(
            ERR_NO_DRIVER,
            "coop: cannot load libcoop.so; tried: " + "; ".join(tried) +
            " (set COOP_LIBRARY to its path, e.g. <build>/.libs/libcoop.so)",
        )


def strerror(status):
    return library().coop_strerror(status).decode()


def stats(pool):
    """coop_get_stats of a pool handle (an int or c_void_p)."""
    out = Stats()
    library().coop_get_stats(pool, ctypes.byref(out))
    return out


def config(pool):
    out = Config()
    library().coop_pool_config(pool, ctypes.byref(out))
    return out


def check(pool):
    """coop_pool_check; raises CoopError naming the broken invariant."""
    lib = library()
    st = lib.coop_pool_check(pool)
    if st != OK:
        raise CoopError(st, lib.coop_last_error().decode())


def walk(pool):
    """[(segment dict, [block dict, ...]), ...] in address order."""
    library()
    result = []

    def on_segment(seg, _ctx):
        s = seg.contents
        result.append(({"address": s.address, "size": s.size, "mapped_bytes": s.mapped_bytes,
                        "num_blocks": s.num_blocks}, []))
        return 0

    def on_block(blk, _ctx):
        b = blk.contents
        result[-1][1].append({"address": b.address, "size": b.size,
                              "requested_size": b.requested_size, "state": b.state,
                              "stream": b.stream, "mapped_bytes": b.mapped_bytes})
        return 0

    seg_cb, blk_cb = SegmentVisitor(on_segment), BlockVisitor(on_block)
    st = _lib_gil.coop_walk(pool, seg_cb, blk_cb, None)
    if st != OK:
        raise CoopError(st, _lib.coop_last_error().decode())
    return result
