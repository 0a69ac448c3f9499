"""Use coop as PyTorch's CUDA allocator.

    import coop.torch
    coop.torch.install("capacity:70G,history:true")   # before any CUDA work
    ...
    coop.torch.memory_stats(0)        # torch.cuda.memory_stats() keys
    coop.torch.dump_snapshot("s.pickle")  # opens in PyTorch's memory viewer

Configuration: the ``conf`` argument, else the COOP_ALLOC_CONF environment
variable (``key:value,key:value``; see docs/pytorch.md).
"""

import collections
import collections.abc
import ctypes
import inspect
import operator
import pickle
import re
import sys
import threading
import time

from . import native

__all__ = [
    "CoopConfigError",
    "DeviceError",
    "OutOfMemoryError",
    "AllocationError",
    "install",
    "installed",
    "patch_torch",
    "mem_pool",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "snapshot",
    "dump_snapshot",
    "record_history",
    "last_error",
    "check_oom",
    "empty_cache",
    "forget_stream",
    "settings",
]

# The ABI entry points and the CUDAPluggableAllocator setters they go to.
MALLOC, FREE = "coop_torch_malloc", "coop_torch_free"
HOOKS = (
    ("set_init_fn", "coop_torch_init"),
    ("set_reset_fn", "coop_torch_empty_cache"),
    ("set_memory_fraction_fn", "coop_torch_memory_fraction"),
    ("set_record_stream_fn", "coop_torch_record_stream"),
)

_state_lock = threading.Lock()
_installed = None  # {"route": ..., "hooks": [...], "allocator": ...}
_applied_conf = None  # the conf text install() / mem_pool() last set (under _state_lock)
_oom_seen = {}  # device -> failed mallocs already raised for (under _state_lock)
# record_history() / _record_memory_history() was called: its bound, not a
# configuration's history key, is the one in force from then on (as in C)
_history_by_api = False
_MAX_DEVICES = 64  # the ABI's device slots (src/torch/torch_abi.h)
_device_limit = 0  # the CUDA devices torch counted when install() ran (0: not installed)


class CoopConfigError(ValueError):
    """COOP_ALLOC_CONF (or install's conf) has an unknown key or a bad value."""


class DeviceError(ValueError, RuntimeError):
    """A device argument names no device coop serves: another device type, a
    malformed string, an index past the devices. torch raises ValueError for
    the first and RuntimeError for the others; this is both, so code written
    for either catches it."""


def _torch_oom_base():
    try:
        import torch

        return getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    except ImportError:
        return RuntimeError


class OutOfMemoryError(_torch_oom_base()):
    """coop could not satisfy an allocation; the message has the numbers."""


class AllocationError(native.CoopError):
    """An allocation failed for a reason other than out of memory: no CUDA
    driver, a configuration the device refuses when the pool is made, the
    address space the pool reserves refused (.status ERR_BACKEND), a call
    from a coop_walk visitor. check_oom() raises it; .status is the
    coop_status (coop.native.ERR_*), .device the device. Not an
    OutOfMemoryError: code that frees memory or shrinks a batch on
    out-of-memory has nothing to retry here."""

    def __init__(self, status, device, message):
        super().__init__(status, message)
        self.device = device


def last_error():
    """The most recent error of the ABI (any thread), '' if none."""
    lib = native.library()
    buf = ctypes.create_string_buffer(1024)
    lib.coop_torch_last_error(buf, len(buf))
    return buf.value.decode(errors="replace")


def _conf_bytes(conf):
    """conf as the C side takes it: a str without NUL (which would cut it
    short there) or lone surrogates (bytes that were not UTF-8), else
    TypeError / ValueError naming it."""
    if not isinstance(conf, str):
        raise TypeError("coop.torch: the configuration must be a str such as "
                        "'capacity:8G,page:2M', not %s" % type(conf).__name__)
    if "\0" in conf:
        raise ValueError("coop.torch: the configuration %r holds a NUL character" % conf)
    try:
        return conf.encode()
    except UnicodeEncodeError as e:  # a lone surrogate: os.environ's or sys.argv's for a byte
        raise ValueError("coop.torch: the configuration %r holds %r at index %d, an undecodable "
                         "byte (not UTF-8 text)" % (conf, conf[e.start], e.start)) from None


def _configure(lib, conf):
    st = lib.coop_torch_configure(_conf_bytes(conf) if conf is not None else None)
    if st == native.ERR_INVALID:
        raise CoopConfigError(lib.coop_last_error().decode())
    if st != native.OK:
        raise native.CoopError(st, lib.coop_last_error().decode())


def _normalize(lib, conf):
    """(True, conf as the library writes a configuration: every key, one
    spelling), or (False, the error naming the key or value) if it does not
    parse: one native call for both. 1024 bytes hold a whole message (two
    quoted tokens of up to 256 bytes each and their words)."""
    buf = ctypes.create_string_buffer(1024)
    st = lib.coop_torch_normalize_conf(_conf_bytes(conf), buf, len(buf))
    return st == native.OK, buf.value.decode(errors="replace")


def _normalized(lib, conf):
    """conf as _normalize writes it, or None if it does not parse."""
    ok, text = _normalize(lib, conf)
    return text if ok else None


def _settings(lib):
    """(status, text): the configuration in force, loading COOP_ALLOC_CONF if
    nothing set one yet (never re-reading it); text is the error if bad."""
    buf = ctypes.create_string_buffer(512)
    st = lib.coop_torch_settings(buf, len(buf))
    return st, buf.value.decode(errors="replace")


def _settings_in_force(lib):
    """The configuration in force as text (as _settings); CoopConfigError
    naming the bad key or value if it does not parse, native.CoopError for
    another failure."""
    st, text = _settings(lib)
    if st == native.ERR_INVALID:
        raise CoopConfigError(text)
    if st != native.OK:
        raise native.CoopError(st, text)
    return text


def _comparable(text):
    """A normalized configuration (or the settings in force) as compared:
    without its history item once record_history() set the bound, which
    then outlasts any configuration's (the settings' text has that bound,
    so the very COOP_ALLOC_CONF string did not match it)."""
    if text is None or not _history_by_api:
        return text
    return ",".join(item for item in text.split(",") if not item.startswith("history:"))


def _apply_conf_locked(lib, conf, who):
    """Makes conf the configuration for install() / mem_pool() (who). None
    keeps the one in force (an earlier install(conf)'s, else COOP_ALLOC_CONF,
    which is read once) and only checks it. The configuration cannot change
    once a pool exists: a conf other than the one applied then raises
    RuntimeError instead of being ignored. A conf that does not parse
    raises CoopConfigError, before or after. Caller holds _state_lock."""
    global _applied_conf
    if conf is None:
        _settings_in_force(lib)
        return
    _conf_bytes(conf)  # its type and characters, before any comparison
    ok, normalized = _normalize(lib, conf)
    if not ok:  # named as such even where a pool exists (not "fixed")
        raise CoopConfigError(normalized)
    normalized = _comparable(normalized)
    if conf == _applied_conf or (_applied_conf is not None
                                 and normalized == _comparable(_normalized(lib, _applied_conf))):
        return  # the same configuration, however spelt
    if _devices():
        in_force = _settings(lib)
        if in_force[0] == native.OK and normalized == _comparable(in_force[1]):
            return  # the configuration in force (COOP_ALLOC_CONF's), however spelt
        raise RuntimeError(
            "coop.torch.%s: cannot apply %r: coop has allocated already, so the "
            "configuration in force (%s) is fixed" % (who, conf, _settings(lib)[1]))
    _configure(lib, conf)
    _applied_conf = conf


def _restore_conf_locked(lib, previous):
    """Puts back the configuration an install(conf) or mem_pool(conf) found
    in force (previous: the _applied_conf it found), when the call fails
    after applying conf: an earlier install(conf)'s or mem_pool(conf)'s again,
    else COOP_ALLOC_CONF's, read again (what the caller gave, rather than
    the settings' normalized text, which would parse too). A COOP_ALLOC_CONF
    that does not parse cannot be put back (a configuration that does not
    parse is never set), so conf stays in force then. Caller holds
    _state_lock."""
    global _applied_conf
    if _applied_conf is previous:
        return  # nothing was applied (conf None, or the one in force)
    if previous is not None:
        _configure(lib, previous)
    elif lib.coop_torch_configure(None) != native.OK:
        return
    _applied_conf = previous


def _fn_address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def _current_device(torch=None):
    """torch's current CUDA device (torch: the module, else the one loaded),
    0 without torch or where torch has no CUDA (torch.cuda.is_available()
    false: a CPU-only build, no driver, no device). torch's errors past that
    propagate: a device torch says it has but cannot reach is not device 0,
    and reading another device's statistics would hide the error."""
    if torch is None:
        torch = sys.modules.get("torch")  # not imported: nobody chose a device
        if torch is None:
            return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.current_device())


# torch.cuda.memory._record_memory_history's arguments after enabled, by
# position: torch 2.1+ (enabled "all" / "state" / None) and the legacy form
# (enabled True / False, torch 2.0; 2.1+ route a bool to it)
_HISTORY_ARGS = ("context", "stacks", "max_entries", "device", "clear_history")
_LEGACY_HISTORY_ARGS = ("record_context", "trace_alloc_max_entries",
                        "trace_alloc_record_context", "device", "record_context_cpp",
                        "clear_history")


def _history_settings(enabled, names, given):
    """(bound, clear_history) for _apply_history from _record_memory_history's
    arguments: enabled, the names of the parameters max_entries may come by
    (its own, then the legacy one, as the previous version took either) and
    the arguments given. None or False stop recording; "state" keeps one
    event (torch keeps max_entries only for "all"); without max_entries coop
    keeps 100000 events, where torch's bound is sys.maxsize (legacy: 1)."""
    if enabled is None or enabled is False:
        return 0, False
    if not isinstance(enabled, bool) and enabled not in ("state", "all"):
        raise ValueError("coop.torch: _record_memory_history: enabled is %r, expected 'state', "
                         "'all', or None" % (enabled,))
    entries = None
    for name in names:
        entries = given.get(name)
        if entries is not None:
            break
    if entries is None:
        entries = 100000
    if enabled == "state":
        entries = 1
    try:
        entries = operator.index(entries)
    except TypeError:
        raise TypeError("coop.torch: _record_memory_history: max_entries must be an int, not %s"
                        % type(entries).__name__) from None
    if entries < 0:  # torch's size_t refuses it too
        raise ValueError("coop.torch: _record_memory_history: max_entries is %d, expected 0 or "
                         "more" % entries)
    return max(entries, 1), bool(given.get("clear_history", False))


def _record_history_compat(enabled="all", *args, **kwargs):
    """torch.cuda.memory._record_memory_history's meaning for coop, taking
    either form's arguments by position or name, unchecked (the function
    patch_torch installs checks them against torch's signature first): None
    or False stop recording and drop the events; "state" keeps one event;
    otherwise the events recorded so far stay unless clear_history.
    max_entries (legacy: trace_alloc_max_entries) bounds the events kept.
    coop records no stack frames: context and stacks change nothing."""
    legacy = isinstance(enabled, bool)
    given = dict(zip(_LEGACY_HISTORY_ARGS if legacy else _HISTORY_ARGS, args))
    given.update(kwargs)
    names = ("trace_alloc_max_entries", "max_entries") if legacy else \
        ("max_entries", "trace_alloc_max_entries")
    _apply_history(*_history_settings(enabled, names, given), skip=())


# The actions a snapshot's device_traces leave out (_record_memory_history's
# skip_actions, where the torch installed has it), as periods: (from when, in
# the events' microseconds, which actions), one per call that started
# recording, each applying to the events recorded from then on. coop's
# history records every action; a snapshot filters each event by the period
# it was recorded in, so an event skipped then stays skipped, as in torch
# (whose ring never holds it: coop's holds it and counts it in max_entries).
_skip_periods = []  # under _state_lock


def _apply_history(bound, clear_history, skip):
    """record_history(bound, clear_history), and skip for the events from
    now on (recording stopped, or the events cleared: the periods go)."""
    global _skip_periods
    skip = frozenset(skip)
    now = time.time_ns() // 1000  # the history's clock (CLOCK_REALTIME), before it records
    with _state_lock:
        _record(bound, clear_history)
        if bound == 0 or clear_history:
            _skip_periods = []
        if bound and (skip or _skip_periods):
            _skip_periods = _skip_periods + [(now, skip)]


def _skip_actions(value):
    """skip_actions as a tuple of action names, checked as torch's binding
    checks it (a sequence of str, list or tuple): a str alone is refused
    (TypeError), not taken letter by letter, which skipped nothing without a
    word; so are a set, a generator or another iterator, and a dict, which
    coop took (torch refuses them)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError("coop.torch: _record_memory_history: skip_actions must be a list of "
                        "action names, not a %s (%r; one action: [%r])"
                        % (type(value).__name__, value, value if isinstance(value, str)
                           else value.decode(errors="replace")))
    if not isinstance(value, collections.abc.Sequence):
        # torch's binding (a std::vector through pybind11) takes sequences
        # only: a set has no order, an iterator can be read once
        raise TypeError("coop.torch: _record_memory_history: skip_actions must be a list of "
                        "action names, not a %s (as torch's: pass list(...) or sorted(...))"
                        % type(value).__name__)
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError("coop.torch: _record_memory_history: skip_actions holds %r (%s), "
                            "expected action names (str)" % (name, type(name).__name__))
    return names


def _skipped(event, periods):
    """Whether the period event was recorded in skips its action."""
    skip = frozenset()
    for since, actions in periods:
        if event["time_us"] < since:
            break
        skip = actions
    return event["action"] in skip


# Where torch lacks a function patch_torch replaces, the replacement takes
# these signatures: torch 2.11's for the snapshot functions (its documented
# memory_snapshot; _snapshot and _dump_snapshot as its own _dump_snapshot
# calls them), and for _record_memory_history the parameters every torch
# since 2.1 has (later ones add more after them).
def _fallback_memory_snapshot(mempool_id=None, include_traces=True):
    pass


def _fallback_snapshot(device=None, augment_with_fx_traces=False):
    pass


def _fallback_dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    pass


def _fallback_record_history(enabled="all", context="all", stacks="all",
                             max_entries=sys.maxsize, device=None, clear_history=False):
    pass


def _fallback_record_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                    trace_alloc_record_context=False, device=None,
                                    record_context_cpp=False, clear_history=False):
    pass


def _signature(fn, fallback):
    """inspect.signature of torch's function fn (the one a replacement takes
    the place of), else of coop's fallback (torch lacks fn, or it has no
    signature Python can read)."""
    if fn is not None:
        try:
            return inspect.signature(fn)
        except (TypeError, ValueError):
            pass
    return inspect.signature(fallback)


def _bind(name, sig, args, kwargs):
    """sig.bind(*args, **kwargs), its TypeError naming the function as
    Python's own does ("memory_snapshot() got an unexpected keyword ...")."""
    try:
        return sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError("%s() %s" % (name, e)) from None


def _replacement(name, sig, call, doc):
    """A function with torch's signature sig that binds its arguments as
    torch's function would (TypeError for an unknown keyword, a missing or
    an extra argument, as Python gives it), then returns call(arguments),
    every parameter of sig in it, defaults included."""

    def replacement(*args, **kwargs):
        bound = _bind(name, sig, args, kwargs)
        bound.apply_defaults()
        return call(bound.arguments)

    replacement.__signature__ = sig
    replacement.__name__ = replacement.__qualname__ = name
    replacement.__doc__ = doc
    replacement.__module__ = __name__
    return replacement


def _device_argument(arguments):
    """The device a stats function was given: its parameter is device in
    torch.cuda, device_index in torch.accelerator (None where neither)."""
    return arguments.get("device", arguments.get("device_index"))


def _history_replacement(memory, original):
    """torch.cuda.memory._record_memory_history for coop. As in torch 2.1+,
    a bool enabled takes the legacy function's arguments and anything else
    the current ones, each checked against the installed torch's own
    signature (_record_memory_history_legacy / _impl; a torch without them,
    such as 2.0 or 1.13, against _record_memory_history's own)."""
    outer = _signature(original, _fallback_record_history)
    current = _signature(getattr(memory, "_record_memory_history_impl", None),
                         _fallback_record_history if original is None else original)
    legacy = _signature(getattr(memory, "_record_memory_history_legacy", None),
                        _fallback_record_history_legacy if original is None else original)

    def replacement(*args, **kwargs):
        enabled = args[0] if args else kwargs.get("enabled", "all")
        sig = legacy if isinstance(enabled, bool) else current
        bound = _bind("_record_memory_history", sig, args, kwargs)
        given = bound.arguments  # those given: torch's defaults are not coop's bound
        if given.get("record_cuda", True) is False:
            return  # torch leaves the CUDA allocator's history as it is
        names = [n for n in ("max_entries", "trace_alloc_max_entries") if n in sig.parameters]
        bound_, clear = _history_settings(given.get("enabled", enabled), names, given)
        _apply_history(bound_, clear, _skip_actions(given.get("skip_actions")))

    replacement.__signature__ = outer
    replacement.__name__ = replacement.__qualname__ = "_record_memory_history"
    replacement.__doc__ = _record_history_compat.__doc__
    replacement.__module__ = __name__
    return replacement


def _mempool_segments(arguments):
    """memory_snapshot(mempool_id): torch reads (0, 0) or None as every
    pool; coop's segments are all in that default pool, so another pool
    has none."""
    pool = arguments.get("mempool_id")
    if pool is not None and tuple(pool) != (0, 0):
        return []
    return snapshot()["segments"]


def patch_torch(torch):
    """Points torch.cuda's memory statistics and snapshot functions at coop,
    so code that calls torch.cuda.memory_allocated(), memory_stats(),
    memory_stats_as_nested_dict(), max_memory_reserved(),
    reset_peak_memory_stats(), reset_accumulated_memory_stats(),
    memory_snapshot(), torch.cuda.memory._snapshot() / _dump_snapshot() or
    _record_memory_history() keeps working (the pluggable route raises for
    them), and so do torch.accelerator.memory's statistics where torch has
    them. Each replacement has the signature of the torch function it
    replaces (inspect.signature gives the same parameters) and checks its
    arguments against it, so a call torch takes works and one it refuses
    raises TypeError; where torch lacks the function (_dump_snapshot before
    2.1) it has torch 2.11's signature. Returns the names replaced."""
    memory = torch.cuda.memory
    accel = getattr(getattr(torch, "accelerator", None), "memory", None)

    def stats(a):
        return memory_stats(_device_index(_device_argument(a), torch))

    def nested(a):
        return memory_stats_as_nested_dict(_device_index(_device_argument(a), torch))

    def reset_peak(a):
        reset_peak_memory_stats(_device_index(_device_argument(a), torch))

    def reset_accumulated(a):
        reset_accumulated_memory_stats(_device_index(_device_argument(a), torch))

    def dump(a):
        dump_snapshot(a.get("filename", "dump_snapshot.pickle"))

    # name: (what it does, the signature where torch lacks it); coop has one
    # pool per device and no frames, so include_traces, augment_with_fx_traces
    # and _snapshot's device (unused by torch too) change nothing
    replacements = {
        "memory_stats": (stats, memory_stats),
        "memory_stats_as_nested_dict": (nested, memory_stats_as_nested_dict),
        "reset_peak_memory_stats": (reset_peak, reset_peak_memory_stats),
        "reset_accumulated_memory_stats": (reset_accumulated, reset_accumulated_memory_stats),
        "memory_snapshot": (_mempool_segments, _fallback_memory_snapshot),
        "_snapshot": (lambda a: snapshot(), _fallback_snapshot),
        "_dump_snapshot": (dump, _fallback_dump_snapshot),
        "_record_memory_history": (None, _fallback_record_history),
    }
    always = ("_dump_snapshot",)  # torch 1.13 lacks it; coop provides it anyway
    done = []
    for name, (call, fallback) in replacements.items():
        present = [m for m in (memory, torch.cuda) if hasattr(m, name)]
        if not present and name not in always:
            continue
        original = getattr(memory, name, None) or getattr(torch.cuda, name, None)
        if name == "_record_memory_history":
            fn = _history_replacement(memory, original)
        else:
            fn = _replacement(name, _signature(original, fallback), call,
                              "torch.cuda.%s for coop's pools (coop.torch.patch_torch)" % name)
        for module in present or [memory]:
            setattr(module, name, fn)
        done.append(name)
    # torch.accelerator.memory (torch 2.9+) reads the allocator from C++,
    # which torch.cuda's replacements do not reach; its memory_allocated()
    # and the other readers call these three
    accelerated = {"memory_stats": stats, "reset_peak_memory_stats": reset_peak,
                   "reset_accumulated_memory_stats": reset_accumulated}
    for name, call in (accelerated.items() if accel is not None else ()):
        original = getattr(accel, name, None)
        if original is None:
            continue
        fn = _replacement(name, _signature(original, replacements[name][1]), call,
                          "torch.accelerator.%s for coop's pools (coop.torch.patch_torch)"
                          % name)
        for module in (accel, torch.accelerator):
            if getattr(module, name, None) is original:
                setattr(module, name, fn)
        done.append("accelerator." + name)
    return done


def _require_cuda_build(torch, fn):
    """A torch built without CUDA (CPU-only, ROCm) has the Python class
    CUDAPluggableAllocator but not the binding it calls: its AttributeError
    about torch._C would not say what is wrong."""
    version = getattr(torch, "version", None)  # a stand-in may have none
    if version is not None and getattr(version, "cuda", "?") is None:
        raise RuntimeError(
            "coop.torch.%s: this torch (%s) was built without CUDA (torch.version.cuda is "
            "None): coop replaces PyTorch's CUDA allocator; install a CUDA build of PyTorch "
            "(to study allocations without a GPU, see scripts/record_traces.py --workload "
            "and coop replay)" % (fn, getattr(torch, "__version__", "?")))


def install(conf=None, *, torch_module=None, patch=True):
    """Makes coop PyTorch's CUDA allocator (CUDAPluggableAllocator route).

    Must run before CUDA is initialized in this process (before the first
    CUDA tensor, stream, or torch.cuda call that creates a context): PyTorch
    cannot swap an allocator that has been used. Raises CoopConfigError for
    a bad configuration, RuntimeError if CUDA is already initialized or this
    torch lacks CUDAPluggableAllocator. Returns the names of the hooks set.
    conf None keeps the configuration in force (COOP_ALLOC_CONF unless one
    was set). Called again, it returns the same hooks (and patches torch if
    asked to where an earlier call did not); a different conf is
    applied if coop has not allocated yet, else RuntimeError. If torch
    refuses the allocator (CUDAPluggableAllocator or change_current_allocator
    raises), its error is raised and the configuration in force before the
    call is put back. If a step after torch took coop fails (device_count,
    the patching), install() counts as done (installed() says so) and
    raises RuntimeError saying torch now allocates with coop; a later
    install() retries the step that failed and those after it.
    With patch (default), torch.cuda's memory statistics and snapshot
    functions report coop's pools (see patch_torch). torch_module is for
    tests (a stand-in for the torch package).
    """
    global _installed
    if torch_module is None:
        import torch as torch_module
    torch = torch_module
    with _state_lock:
        if _installed is not None:
            _apply_conf_locked(native.library(), conf, "install")
            # what an earlier call did not do: patch=False, or a failure
            # after torch took coop (device_count, the patching)
            _finish_install_locked(torch, patch)
            return list(_installed["hooks"])
        memory = getattr(torch.cuda, "memory", None)
        if memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
            raise RuntimeError(
                "coop.torch.install: this torch (%s) has no "
                "torch.cuda.memory.CUDAPluggableAllocator (PyTorch >= 2.0 needed)"
                % getattr(torch, "__version__", "?"))
        _require_cuda_build(torch, "install")
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "coop.torch.install: CUDA is already initialized in this process, so PyTorch "
                "cannot switch allocators; call coop.torch.install() first, before any CUDA "
                "tensor or stream is created")
        lib = native.library()
        previous = _applied_conf
        _apply_conf_locked(lib, conf, "install")
        try:
            allocator = memory.CUDAPluggableAllocator(native.library_path(), MALLOC, FREE)
            hooks = []
            handle = allocator.allocator() if hasattr(allocator, "allocator") else None
            for setter, symbol in HOOKS:
                fn = getattr(handle, setter, None)
                if callable(fn):
                    fn(_fn_address(lib, symbol))
                    hooks.append(setter)
            memory.change_current_allocator(allocator)
        except BaseException:
            _restore_conf_locked(lib, previous)  # torch did not take coop
            raise
        # torch allocates with coop from here on, whatever fails next: record
        # it, so installed() says so and a later install() does not ask torch
        # to swap an allocator again (it does what this call did not)
        _installed = {"route": "allocator", "hooks": hooks, "allocator": allocator,
                      "counted": False, "patched": False}
        _finish_install_locked(torch, patch)
        return list(hooks)


def _finish_install_locked(torch, patch):
    """install()'s steps after torch took coop, those not done yet: tell
    coop the device count, patch torch if asked to. A failure raises
    RuntimeError saying torch allocates with coop; install() again retries."""
    global _device_limit
    step = "torch.cuda.device_count()"
    try:
        if not _installed["counted"]:
            # torch's _cuda_customAllocator calls init (with a device count
            # of 0) before any hook can be set; CUDA's lazy init calls the
            # init hook again later (coop_torch_init is idempotent). Tell
            # coop the device count now (a count query creates no CUDA
            # context).
            count = int(torch.cuda.device_count())
            native.library().coop_torch_init(count)
            _device_limit = count if 0 < count <= _MAX_DEVICES else 0
            _installed["counted"] = True
        if patch and not _installed["patched"]:
            step = "patching torch.cuda's memory functions"
            patch_torch(torch)
            _installed["patched"] = True
    except Exception as e:
        raise RuntimeError(
            "coop.torch.install: torch now allocates with coop (change_current_allocator "
            "succeeded), but %s then failed (%s: %s); install() again retries it"
            % (step, type(e).__name__, e)) from e


def installed():
    """The installation's route and hooks, or None."""
    return None if _installed is None else {k: _installed[k] for k in ("route", "hooks")}


def mem_pool(conf=None, *, torch_module=None, **options):
    """A torch.cuda.MemPool whose segments come from coop, where torch has it.

    Use with ``with torch.cuda.use_mem_pool(pool): ...``. PyTorch's caching
    allocator keeps managing blocks inside the pool and raises its own
    torch.cuda.OutOfMemoryError when coop returns NULL. conf as install's:
    None keeps the configuration in force (install's, else COOP_ALLOC_CONF).
    options go to torch.cuda.MemPool after the allocator (use_on_oom,
    no_split where the installed torch has them; it refuses others). If
    torch refuses the pool (CUDAPluggableAllocator or MemPool raises), its
    error is raised and the configuration in force before the call is put
    back, as install() does.
    """
    if torch_module is None:
        import torch as torch_module
    torch = torch_module
    if not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError("coop.torch.mem_pool: this torch (%s) has no torch.cuda.MemPool"
                           % getattr(torch, "__version__", "?"))
    _require_cuda_build(torch, "mem_pool")
    lib = native.library()
    with _state_lock:
        previous = _applied_conf
        _apply_conf_locked(lib, conf, "mem_pool")
        try:
            allocator = torch.cuda.memory.CUDAPluggableAllocator(native.library_path(), MALLOC,
                                                                 FREE)
            return torch.cuda.MemPool(allocator.allocator(), **options)
        except BaseException:
            _restore_conf_locked(lib, previous)  # torch made no pool of coop's
            raise


def _pool(device):
    return native.library().coop_torch_pool(int(device))


def _devices():
    lib = native.library()
    return [d for d in range(_MAX_DEVICES) if lib.coop_torch_pool(d)]


def _device_index(device, torch=None):
    """The index of device as torch.cuda's memory functions take it: an int,
    a string ("cuda", "cuda:1"), a torch.device or a torch.cuda.device;
    None, "cuda" and torch.device("cuda") mean the current device, as in
    torch.cuda._get_device_index(device, optional=True). DeviceError (a
    ValueError and a RuntimeError, torch's two types for these) for another
    device type, a malformed string, or an index outside the devices: those
    torch counted when install() ran, else the ABI's 64 slots (a C int would
    wrap a larger one). TypeError for other values (torch takes them for the
    current device)."""
    index = _device_index_unchecked(device, torch)
    limit = _device_limit or _MAX_DEVICES
    if not 0 <= index < limit:
        why = ("torch counted %d CUDA devices when coop.torch.install ran" % limit
               if _device_limit else "coop has %d device slots" % limit)
        raise DeviceError("coop.torch: device %r: index %d is outside 0..%d (%s)"
                          % (device, index, limit - 1, why))
    return index


# "cuda" or "cuda:N" as torch.device parses them (no sign, space or leading
# zero; ASCII digits: str.isdigit takes "²", which int() refuses)
_CUDA_STRING = re.compile(r"cuda(?::(0|[1-9][0-9]*))?\Z")


def _device_index_unchecked(device, torch):
    """_device_index before the range check. (Strings are tested first: str
    has an index method, which a look-up of torch.device's index attribute
    would find.)"""
    if device is None:
        return _current_device(torch)
    if isinstance(device, str):
        m = _CUDA_STRING.match(device)
        if m is None:
            raise DeviceError("coop.torch: device %r: expected 'cuda' or 'cuda:N' (N a device "
                              "index)" % device)
        return _current_device(torch) if m.group(1) is None else int(m.group(1))
    if torch is None:
        torch = sys.modules.get("torch")
    context = getattr(getattr(torch, "cuda", None), "device", None)
    if isinstance(context, type) and isinstance(device, context):  # with torch.cuda.device(1)
        return operator.index(device.idx)
    kind = getattr(device, "type", None)
    if isinstance(kind, str):  # torch.device
        if kind != "cuda":
            raise DeviceError("coop.torch: device %r is not a CUDA device" % (device,))
        index = getattr(device, "index", None)
        return _current_device(torch) if index is None else int(index)
    try:
        return operator.index(device)  # int, numpy integers
    except TypeError:
        raise TypeError("coop.torch: device %r: expected an int, a string such as 'cuda:1', "
                        "a torch.device or a torch.cuda.device" % (device,)) from None


def memory_stats(device=None):
    """torch.cuda.memory_stats()'s keys for coop's pool on device.

    coop has one pool per device: every counter is under "all" and
    "large_pool"; "small_pool" counters are zero. coop's own figures are
    under "coop.*" keys. A device without a pool gives zeros. device: an
    int, a string ("cuda:1"), a torch.device or a torch.cuda.device; None
    and "cuda" mean the current device, as in torch (see _device_index for
    what is refused). An OrderedDict, sorted by key, as torch's.
    """
    device = _device_index(device)
    out = _raw_stats(device)
    # the accumulated counters count from the last reset_accumulated_memory_stats
    for key, base in _accumulated_base.get(device, {}).items():
        out[key] -= base
    return collections.OrderedDict(out)  # torch's type (sorted keys, as torch's)


# torch's accumulated counters (reset_accumulated_memory_stats): every
# counter's "allocated" and "freed", and these
_ACCUMULATED = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")
_accumulated_base = {}  # device -> {key: value at the last reset}


def reset_accumulated_memory_stats(device=None):
    """torch.cuda.reset_accumulated_memory_stats() for coop's pool: the
    "allocated" and "freed" counters, num_alloc_retries, num_ooms,
    num_device_alloc and num_device_free of memory_stats() count from 0
    again. (coop's own counters go on; memory_stats() subtracts what they
    were at the reset. check_oom() is not affected.)"""
    device = _device_index(device)
    raw = _raw_stats(device)
    base = {k: v for k, v in raw.items()
            if k.endswith((".allocated", ".freed")) or k in _ACCUMULATED}
    with _state_lock:
        _accumulated_base[device] = base


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats() for coop's pool on device: every
    "peak" of memory_stats() becomes its "current" (coop_reset_peak_stats).
    The "allocated" / "freed" counters are reset_accumulated_memory_stats()'s.
    A device without a pool: nothing to reset."""
    pool = _pool(_device_index(device))
    if pool:
        native.library().coop_reset_peak_stats(pool)


def memory_stats_as_nested_dict(device=None):
    """memory_stats() nested at its dots, as
    torch.cuda.memory_stats_as_nested_dict() returns it:
    {"allocated_bytes": {"all": {"current": ...}}, ..., "num_ooms": ...}."""
    nested = {}
    for key, value in memory_stats(device).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _raw_stats(device):
    """memory_stats()'s keys and coop's counters as they are (no reset)."""
    pool = _pool(device)
    s = native.stats(pool) if pool else native.Stats()
    out = {}
    for name in native.STAT_NAMES:
        stat = getattr(s, name)
        for metric in ("current", "peak", "allocated", "freed"):
            value = getattr(stat, metric)
            out[f"{name}.all.{metric}"] = value
            out[f"{name}.large_pool.{metric}"] = value
            out[f"{name}.small_pool.{metric}"] = 0
    for metric in ("current", "peak", "allocated", "freed"):
        out[f"oversize_allocations.{metric}"] = 0
        out[f"oversize_segments.{metric}"] = 0
    out["num_alloc_retries"] = s.num_alloc_retries
    out["num_ooms"] = s.num_ooms
    out["num_sync_all_streams"] = 0
    out["num_device_alloc"] = s.num_maps
    out["num_device_free"] = s.num_unmaps
    out["max_split_size"] = -1
    out["coop.capacity"] = s.capacity
    out["coop.free_bytes"] = s.free_bytes
    out["coop.largest_free_block"] = s.largest_free_block
    out["coop.num_free_blocks"] = s.num_free_blocks
    out["coop.fragmentation"] = s.fragmentation
    out["coop.reserved_over_allocated"] = s.reserved_over_allocated
    out["coop.map_bytes"] = s.map_bytes
    return dict(sorted(out.items()))


_STATES = {
    native.BLOCK_FREE: "inactive",
    native.BLOCK_ALLOCATED: "active_allocated",
    native.BLOCK_PENDING: "active_pending_free",
}


def _block_dict(b):
    # "stream", which PyTorch's blocks lack (its segments have one stream
    # each): one of coop's segments, a run of mapped pages, holds blocks of
    # any stream, and coop convert reads each block's from here
    return {
        "address": b.address,
        "size": b.size,
        "stream": b.stream,
        "requested_size": b.requested_size if b.state != native.BLOCK_FREE else 0,
        "state": _STATES.get(b.state, "inactive"),
        "frames": [],
    }


def _segment_dict(device, blocks, vmm):
    used = [b for b in blocks if b.state != native.BLOCK_FREE]
    streams = [b.stream for b in used]
    return {
        "device": device,
        "address": blocks[0].address,
        "total_size": sum(b.size for b in blocks),
        "allocated_size": sum(b.size for b in used if b.state == native.BLOCK_ALLOCATED),
        "active_size": sum(b.size for b in used),
        "requested_size": sum(b.requested_size for b in used),
        "stream": streams[0] if streams else 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": bool(vmm),
        "frames": [],
        "blocks": [_block_dict(b) for b in blocks],
    }


def _piece(b, address, size):
    """The part [address, address + size) of block b (a free one: pieces of
    allocated blocks are never needed, as their pages are all mapped)."""
    piece = native.BlockInfo.from_buffer_copy(b)
    piece.address, piece.size, piece.mapped_bytes = address, size, size
    return piece


def _torch_segments(device, walk_segments, vmm, ranges):
    """torch segments from coop's. Without VMM: one each. With VMM: one per
    run of mapped pages (ranges, from the page map), as PyTorch reports
    expandable segments, so that total_size adds up to reserved (mapped)
    bytes: free blocks are cut to the run's pages, and the mapped space
    above the arena's top (where it grows) is a free block of its own."""
    if not vmm:
        return [_segment_dict(device, blocks, vmm) for _, blocks in walk_segments if blocks]
    blocks = [b for _, bs in walk_segments for b in bs]  # address order
    out, i = [], 0
    for r in ranges:
        start, end = r.address, r.address + r.size
        while i < len(blocks) and blocks[i].address + blocks[i].size <= start:
            i += 1
        pieces, at = [], start
        while at < end:
            b = blocks[i] if i < len(blocks) and blocks[i].address < end else None
            lo = max(b.address, at) if b else end
            if lo > at:  # no block here: the top of the arena
                top = native.BlockInfo(address=at, size=lo - at, state=native.BLOCK_FREE)
                pieces.append(_piece(top, at, lo - at))
                at = lo
                continue
            hi = min(b.address + b.size, end)
            whole = (lo, hi) == (b.address, b.address + b.size)
            pieces.append(b if whole else _piece(b, lo, hi - lo))
            at = hi
            if b.address + b.size <= end:
                i += 1  # else it goes on into the next run
        out.append(_segment_dict(device, pieces, vmm))
    return out


def _trace_entry(e):
    action = native.TORCH_ACTIONS.get(e.action, "alloc")
    # torch's oom entries carry device_free (free device memory) where the
    # others carry addr, and torch 2.x's _memory_viz.trace() and MemoryViz.js
    # read it; coop records what the pool could still map (capacity - mapped)
    return {
        "action": action,
        "device_free" if action == "oom" else "addr": e.address,
        "size": e.size,
        "stream": e.stream,
        "time_us": e.time_us,
        "frames": [],
    }


def _take(device):
    lib = native.library()
    ptr = ctypes.POINTER(native.TorchSnapshot)()
    st = lib.coop_torch_snapshot_take(device, ctypes.byref(ptr))
    if st != native.OK:
        raise native.CoopError(st, lib.coop_last_error().decode())
    try:
        snap = ptr.contents
        segs, k = [], 0
        for i in range(snap.num_segments):
            seg = snap.segments[i]
            blocks = [native.BlockInfo.from_buffer_copy(snap.blocks[k + j])
                      for j in range(seg.num_blocks)]
            k += seg.num_blocks
            segs.append((native.SegmentInfo.from_buffer_copy(seg), blocks))
        events = [_trace_entry(snap.events[i]) for i in range(snap.num_events)]
        ranges = [native.TorchRange.from_buffer_copy(snap.ranges[i])
                  for i in range(snap.num_ranges)]
        return bool(snap.vmm), segs, ranges, events
    finally:
        lib.coop_torch_snapshot_free(ptr)


def settings():
    """coop's configuration in force as text (COOP_ALLOC_CONF resolved, the
    form snapshots record as allocator_settings). Raises CoopConfigError,
    naming the key or value, if COOP_ALLOC_CONF does not parse."""
    return _settings_in_force(native.library())


def snapshot():
    """torch.cuda.memory._snapshot()'s structure for coop's pools:
    {"segments": [...], "device_traces": [[...] per device],
     "allocator_settings": {...}}. device_traces are empty unless history
    is on (COOP_ALLOC_CONF history:true, or record_history()), less the
    actions the last _record_memory_history(skip_actions=...) named. Raises
    CoopConfigError, naming the key or value, if the configuration in force
    (COOP_ALLOC_CONF) does not parse."""
    lib = native.library()
    conf_text = _settings_in_force(lib)
    devices = _devices()
    ndev = max(devices) + 1 if devices else 1
    segments, traces = [], []
    vmm_any = False
    with _state_lock:
        periods = _skip_periods
    for d in range(ndev):
        vmm, segs, ranges, events = _take(d)
        vmm_any = vmm_any or vmm
        segments.extend(_torch_segments(d, segs, vmm, ranges))
        traces.append([e for e in events if not _skipped(e, periods)] if periods else events)
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "COOP_ALLOC_CONF": conf_text,
        "allocator": "coop",
        "expandable_segments": vmm_any,
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
    }
    return {"segments": segments, "device_traces": traces, "allocator_settings": settings}


def dump_snapshot(path):
    """Writes snapshot() as a pickle, as torch.cuda.memory._dump_snapshot does
    (taken first: a snapshot that fails leaves the file as it was)."""
    snap = snapshot()
    with open(path, "wb") as f:
        pickle.dump(snap, f)


# The largest size_t: ctypes would wrap a larger bound (2**64 becomes 0, off).
_SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


def record_history(max_entries=100000, clear_history=False):
    """Starts recording alloc/free events for snapshots, keeping the last
    max_entries per device, of those recorded so far too unless
    clear_history; 0 stops recording and drops them. The ring grows as
    events come, so a large bound (torch 2.x's default is sys.maxsize)
    costs nothing until it is used; bounds past size_t mean "no bound"."""
    try:
        n = operator.index(max_entries)  # an int: 1.7 or "12" is a mistake, not a bound
    except TypeError:
        raise TypeError("coop.torch.record_history: max_entries must be an int, not %s"
                        % type(max_entries).__name__) from None
    if n < 0:
        raise ValueError("coop.torch.record_history: max_entries is %d, expected 0 or more" % n)
    _apply_history(n, clear_history, ())


def _record(n, clear_history):
    global _history_by_api
    lib = native.library()
    _history_by_api = True
    if clear_history:
        lib.coop_torch_clear_history()
    lib.coop_torch_record_history(min(n, _SIZE_MAX))


def empty_cache():
    native.library().coop_torch_empty_cache()


def forget_stream(stream):
    """Call before destroying a stream of your own (a torch.cuda.ExternalStream
    or a raw cudaStream_t handle) that coop has allocated on or recorded: coop
    keeps stream handles in its cached blocks and records events on them
    later. Waits for the stream's work and hands its cached blocks to every
    stream. Raises native.CoopError (COOP_ERR_BUSY) while live tensors were
    allocated on the stream or recorded on it. PyTorch's own streams come from
    a pool that is never destroyed and need no call."""
    try:
        handle = operator.index(getattr(stream, "cuda_stream", stream))
    except TypeError:
        raise TypeError("coop.torch.forget_stream: %r is not a stream (a torch.cuda.Stream, "
                        "ExternalStream or an integer handle)" % (stream,)) from None
    if not 0 <= handle < 1 << 64:  # a pointer-sized value: a larger one would wrap
        raise ValueError("coop.torch.forget_stream: stream handle %d is not a pointer" % handle)
    lib = native.library()
    st = lib.coop_torch_forget_stream(ctypes.c_void_p(handle))
    if st != 0:
        raise native.CoopError(st, lib.coop_last_error().decode())


def check_oom(device=None):
    """Raises if an allocation on device (None = any) failed since the last
    check, with that device's last failure: OutOfMemoryError for out of
    memory (COOP_ERR_NOMEM), AllocationError (a native.CoopError, .status
    and .device set) for any other failure, such as a pool that could not
    be made (a configuration the device refuses, no CUDA driver, its
    address space refused: .status ERR_BACKEND, as no tensor's free could
    help where the device has no pool yet). With the
    CUDAPluggableAllocator route PyTorch does not check the allocator's
    result, so call this where a failed allocation would otherwise go
    unnoticed (e.g. after each step). Threads may call it at once: each
    failure is raised in one of them."""
    lib = native.library()
    devices = range(_MAX_DEVICES) if device is None else [_device_index(device)]
    buf = ctypes.create_string_buffer(1024)
    status = ctypes.c_int(0)
    for d in devices:
        # the count read, compared and stored in one step: threads checking
        # at once raise a failure once, and never store an older count over
        # a newer one (which would raise its failures again); the status
        # is read with the count and the message (one call, one lock)
        with _state_lock:
            n = lib.coop_torch_failed_malloc_status(d, buf, len(buf), ctypes.byref(status))
            if n <= _oom_seen.get(d, 0):
                continue
            _oom_seen[d] = n
            what = buf.value.decode(errors="replace")
        if status.value == native.ERR_NOMEM:
            raise OutOfMemoryError("coop: out of memory on device %d: %s" % (d, what))
        raise AllocationError(status.value, d,
                              "coop: allocation failed on device %d: %s" % (d, what))
