#!/usr/bin/python3
"""Records DTR-format operator logs of one real training step.

Every aten operator of the step is captured with a TorchDispatchMode (the
Python dispatch key, below autograd, so the forward, the backward pass run by
the autograd engine and the optimizer's in-place updates are all seen), with
its tensor inputs, fresh outputs, storage aliasing, in-place mutations,
measured time, and the moment each tensor dies.

Output: one JSON object per line, the instruction set of the DTR prototype's
logs (uwsampl/dtr-prototype; ../shared/workloads/README.md):

  ANNOTATE  ANNOTATION=START before the step, BACKWARD before loss.backward()
  CONSTANT  NAME, then MEMORY: a tensor alive before the step (parameters,
            buffers, optimizer state, the batch), or first seen as an input
  CALL      NAME (aten op), ARGS (tensor names), RESULT (fresh tensor names),
            TIME (ns, measured: CPU time of the recording thread during the
            op, see --clock); each result is followed by MEMORY (bytes of
            its storage, a string) and ALIAS ("-1": fresh storage, "k": shares
            the storage of ARGS[k])
  MUTATE    NAME, ARGS, MUTATE (indices into ARGS that the op writes: those
            the schema's alias annotations mark written, e.g. Tensor(a!),
            and any other tensor argument whose contents the op changed,
            see "Writes" below), TIME
  RELEASE   NAME: the tensor died (its TensorImpl was freed; PyTorch keeps a
            tensor's Python object alive while C++, e.g. autograd, holds it)

An op that both returns fresh tensors and writes an argument gives a CALL
(with the time) then a MUTATE with TIME "0". Ops with no tensor result and no
written argument (e.g. .item()) are not logged. Names are "x<N>".

Writes: some ops write an argument that their schema does not mark. In
torch 1.13, native_batch_norm in training mode updates running_mean and
running_var in place (schema: "Tensor? running_mean"), and rrelu_with_noise
fills its noise argument. Their _version counters do not move either (below
autograd nothing bumps them, and these kernels never do), so the recorder
copies every tensor argument that the schema neither marks written nor
aliases (a view's input), and that shares no storage with a marked one,
before the op, and compares after it (bitwise, NaN equal to NaN): a changed
argument is written. A write that leaves every value as it was is not seen.
This check is on with --writes content and off by default (--writes
schema: the marked writes only). The default follows the DTR authors' logs
(../shared/workloads/dtr-logs: cudnn_batch_norm's running statistics are
ARGS of its CALL, never MUTATEd) and the shipped traces/, so logs stay
comparable with both. There is a modelling reason too: a MUTATE with TIME
"0" turns a running statistic, a pinned persistent buffer, into an
evictable tensor that looks free to evict but can only be rebuilt by
re-running the batch norm; measured on resnet18 and unet, that alone moved
dtr's stable minimum ratio in the arena from 0.863 to 0.925 and 0.625 to
0.725, coop's not at all (traces/README.md). The copies are taken outside
the timed interval, but they read the arguments just before the op, which
may leave small ones warmer in the cache than they would have been.

Timing: intra-op parallelism is set to one thread and TIME is the thread's
CPU time (CLOCK_THREAD_CPUTIME_ID), which on a shared machine excludes time
the scheduler gave to other processes; --clock wall measures wall time
instead (then use all threads you like, on a quiet machine).

Usage:
  record_ops.py [--out-dir DIR] [--batch N] [--clock thread|wall]
                [--writes content|schema] MODEL ...
  record_ops.py [--out-dir DIR] [--batch N] --workload FILE.py:FUNC ...
  record_ops.py --check LOG ...                           validate logs

Your own model (see README.md, "Simulating your own model"):
  record_ops.py --workload my_model.py:make_workload --out-dir /tmp/x
  ./coop sim --memory arena --policy coop,dtr,dte --budget 0.9,0.7,0.5 /tmp/x/my_model-train-step.ops.jsonl.gz

--workload FILE.py:FUNC imports FILE, which runs your code (on purpose: it is
yours) as python3 FILE would, with FILE's folder first on sys.path (its own
models.py or utils.py is what import finds, in FILE, in FUNC and in the step;
each FILE its own, apart from another's of the same name), and calls
FUNC(device, batch): device is torch.device("cpu"), batch the --batch value
or None. FUNC returns a models.Workload, or a tuple (model, inputs, target,
loss_fn, optimizer[, name]), or a dict with those keys: model a
torch.nn.Module, inputs a tensor or a tuple / list of the model's
arguments, loss_fn(model(*inputs), target) the loss, optimizer a
torch.optim.Optimizer over the model's parameters; name (default: FILE's
stem) names the log. Give --workload several times for several models, with
MODEL names or without. A missing file, no such FUNC, a FUNC, import or
warm-up step that raises or calls sys.exit (the message and, where it is in
FILE, the line), a FUNC not callable as FUNC(device, batch), a loss_fn returning
more than one value, an optimizer over none of the model's parameters, a
return of another shape or type, two workloads of one name, or a step
that logs no operator: one line on stderr, "record_ops.py: error:
--workload FILE.py:FUNC: why", exit 2, and no log for it. With --workload,
DIR defaults to the current directory (traces/ holds coop's own logs, which
its tests check).

--check prints "LOG: ok {summary}" for a valid log and "LOG: line N: what"
(or why it cannot be read) on stderr for another; exit status 0 when every
log is valid, 2 when one is not.

Writes DIR/<model>-train-step.ops.jsonl.gz (default DIR: traces/ beside this
script's folder; with --workload, the current directory) and prints
instruction counts, peak live bytes and timing.
"""

import argparse
import gc
import gzip
import io
import json
import os
import re
import sys
import time
import weakref
import zlib

# One BLAS thread unless told otherwise: the default thread clock measures only
# the recording thread (OpenBLAS reads this when torch loads it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import interrupt  # noqa: E402,F401  (Ctrl-C: one line, no traceback)
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402


def _dumps(record):
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _storage_key_and_bytes(t):
    """(identity of t's storage, its size in bytes); tensors without a
    storage (opaque layouts) get a key of their own."""
    try:
        s = t._storage()
        return ("s", s._cdata), s.nbytes()
    except Exception:  # noqa: BLE001 - mkldnn / sparse tensors have no plain storage
        return ("t", id(t)), t.numel() * t.element_size()


# torch.profiler.record_function bookkeeping (optimizer.step() opens one):
# its handle "tensor" holds no data, so these are not operators of the model.
PROFILER_OPS = ("_record_function_enter", "_record_function_enter_new", "_record_function_exit")


class OpRecorder(TorchDispatchMode):
    """Dispatch mode that writes DTR-format instructions to `sink` (a
    callable taking one line, without the newline)."""

    def __init__(self, sink, clock=time.thread_time_ns, detect_writes=True):
        super().__init__()
        self.sink = sink
        self.clock = clock
        self.detect_writes = detect_writes  # compare arguments before / after (see "Writes")
        self.attr = "_coop_op_name_%x" % id(self)  # per recorder: two recorders never mix
        self.next_id = 0
        self.active = True
        self.pending = []  # RELEASE records from finalizers, written before the next instruction
        self.counts = {}
        self.late_constants = {}  # op name -> inputs first seen there (not persistent, not produced by an op)
        self.skipped_ops = {}
        self.unannotated_writes = {}  # op name -> arguments written without a schema annotation
        self.time_ns = 0

    # -- naming -------------------------------------------------------
    def _name(self, t):
        return getattr(t, self.attr, None)

    def _new_name(self, t):
        name = "x%d" % self.next_id
        self.next_id += 1
        setattr(t, self.attr, name)
        # Fires when the tensor's Python object is freed; PyTorch preserves the
        # object while C++ (autograd's saved tensors) still owns the tensor.
        weakref.finalize(t, self._released, name)
        return name

    def _released(self, name):
        if self.active:
            self.pending.append({"INSTRUCTION": "RELEASE", "NAME": name})

    def _emit(self, records):
        # Releases first: they happened before the instruction being written.
        # A finalizer firing inside this loop lands in pending, not between a
        # CALL and its MEMORY / ALIAS lines.
        pending, self.pending = self.pending, []
        for r in pending + records:
            self.counts[r["INSTRUCTION"]] = self.counts.get(r["INSTRUCTION"], 0) + 1
            self.sink(_dumps(r))

    def constant(self, t):
        """Names tensor t as a CONSTANT (alive before the step)."""
        name = self._name(t)
        if name is None:
            name = self._new_name(t)
            _, nbytes = _storage_key_and_bytes(t)
            self._emit(
                [
                    {"INSTRUCTION": "CONSTANT", "NAME": name},
                    {"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(nbytes)},
                ]
            )
        return name

    def annotate(self, what):
        self._emit([{"INSTRUCTION": "ANNOTATE", "ANNOTATION": what}])

    def stop(self):
        """Writes the releases seen so far and ignores later deaths."""
        self._emit([])
        self.active = False

    # -- dispatch -----------------------------------------------------
    def _tensor_args(self, func, args, kwargs):
        """[(tensor, written, aliased)] in schema order, tensor lists
        flattened: written when the schema marks the argument written
        (Tensor(a!)), aliased when it has any alias annotation (a view's
        input, Tensor(a), included)."""
        out = []
        pos = 0
        for a in func._schema.arguments:
            if a.kwarg_only or pos >= len(args):
                if a.name not in kwargs:
                    continue
                v = kwargs[a.name]
            else:
                v = args[pos]
                pos += 1
            written = bool(a.alias_info is not None and a.alias_info.is_write)
            aliased = a.alias_info is not None
            for t in tree_flatten(v)[0]:
                if isinstance(t, torch.Tensor):
                    out.append((t, written, aliased))
        return out

    def _snapshot(self, targs):
        """Copies of the arguments an unannotated write could change: not
        marked written, not aliased, on no storage of a marked argument
        (whose change the mark explains). None for the others, and for all
        without detect_writes."""
        snaps = [None] * len(targs)
        if not self.detect_writes:
            return snaps
        # the storages before the op (one may change it, e.g. set_)
        arg_storage = [_storage_key_and_bytes(t)[0] for t, _, _ in targs]
        marked = {arg_storage[k] for k, (_, w, _) in enumerate(targs) if w}
        copies = {}
        with torch.no_grad():
            for k, (t, w, aliased) in enumerate(targs):
                if w or aliased or arg_storage[k] in marked:
                    continue
                if id(t) not in copies:
                    try:
                        copies[id(t)] = t.clone() if t.numel() else None
                    except Exception:  # noqa: BLE001 - layouts without clone: not checked
                        copies[id(t)] = None
                snaps[k] = copies[id(t)]
        return snaps

    @staticmethod
    def _changed(t, before):
        """Whether t's values differ from the copy `before` (NaN == NaN)."""
        try:
            with torch.no_grad():
                if t.shape != before.shape or t.dtype != before.dtype:
                    return True
                if torch.equal(t, before):
                    return False
                if t.is_floating_point() or t.is_complex():
                    return not bool(((t == before) | (t.isnan() & before.isnan())).all())
                return True
        except Exception:  # noqa: BLE001 - not comparable: not counted as written
            return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__
        if op in PROFILER_OPS:
            return func(*args, **kwargs)
        targs = self._tensor_args(func, args, kwargs)
        for t, _, _ in targs:
            if self._name(t) is None:
                self.late_constants[op] = self.late_constants.get(op, 0) + 1
                self.constant(t)
        snaps = self._snapshot(targs)

        t0 = self.clock()
        out = func(*args, **kwargs)
        dt = self.clock() - t0
        self.time_ns += dt

        arg_names = [self._name(t) for t, _, _ in targs]
        arg_storage = [_storage_key_and_bytes(t)[0] for t, _, _ in targs]
        unannotated = [k for k, b in enumerate(snaps) if b is not None and self._changed(targs[k][0], b)]
        del snaps
        if unannotated:
            self.unannotated_writes[op] = self.unannotated_writes.get(op, 0) + len(unannotated)
        written = sorted([k for k, (_, w, _) in enumerate(targs) if w] + unannotated)

        results = []
        result_lines = []
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or self._name(t) is not None:
                continue  # in-place / out= ops return their (named) argument
            name = self._new_name(t)
            key, nbytes = _storage_key_and_bytes(t)
            alias = arg_storage.index(key) if key in arg_storage else -1
            results.append(name)
            result_lines.append({"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(nbytes)})
            result_lines.append({"INSTRUCTION": "ALIAS", "NAME": name, "ALIAS": str(alias)})

        records = []
        if results:
            records.append({"INSTRUCTION": "CALL", "NAME": op, "ARGS": arg_names, "RESULT": results, "TIME": str(dt)})
            records.extend(result_lines)
        if written:
            records.append(
                {
                    "INSTRUCTION": "MUTATE",
                    "NAME": op,
                    "ARGS": arg_names,
                    "MUTATE": written,
                    "TIME": "0" if results else str(dt),
                }
            )
        if records:
            self._emit(records)
        else:
            self.skipped_ops[op] = self.skipped_ops.get(op, 0) + 1
        return out


CLOCKS = {"thread": time.thread_time_ns, "wall": time.perf_counter_ns}


def record_step(workload, sink, clock="thread", detect_writes=False):
    """Records one steady-state training step of `workload` (models.Workload)
    into `sink`; returns the recorder (for its counters). detect_writes:
    see "Writes" in the module's docstring. A user's workload whose warm-up
    step raises raises models.WorkloadError."""
    workload.warm_up()
    gc.collect()
    rec = OpRecorder(sink, CLOCKS[clock], detect_writes)

    def step():
        with rec:
            rec.annotate("START")
            for _, t in workload.persistent_tensors():
                rec.constant(t)
            loss = workload.forward_loss()
            rec.annotate("BACKWARD")
            workload.backward(loss)
            del loss
            workload.optimizer_step()

    step()
    gc.collect()  # tensors in reference cycles die here, still recorded
    rec.stop()
    return rec


# ---------------------------------------------------------------- checking


class LogError(Exception):
    pass


def check_log(lines):
    """Validates a DTR-format log given as an iterable of text lines.

    Checks: every line is a JSON object with a known INSTRUCTION; CONSTANT is
    followed by its MEMORY; CALL by MEMORY and ALIAS for each RESULT, in
    order; blank lines are skipped, and a log of none but them refused, as
    coop's reader does; every ARG, MUTATE index, COPY source and RELEASE names a tensor
    that is defined and not yet released; names are defined once; ALIAS
    indices are in range; every field has its type (names: strings; ARGS,
    RESULT: lists of names; MUTATE: a list of integers; TIME, MEMORY: a
    non-negative integer, ALIAS an integer, each as a decimal string or a
    JSON integer, as coop's reader takes them). Returns a summary dict
    (instruction counts, peak and final live bytes with aliases sharing
    their storage's bytes); raises LogError naming the line on the first
    violation."""
    live = {}  # name -> storage id
    storage_bytes = {}  # storage id -> bytes
    storage_refs = {}  # storage id -> live names
    defined = set()
    counts = {}
    live_bytes = 0
    peak = 0
    next_storage = [0]
    expect = []  # (instruction, name) lines that must come next

    def fail(n, msg):
        raise LogError("line %d: %s" % (n, msg))

    def field(n, r, key):
        if key not in r:
            fail(n, "%s without %s" % (r["INSTRUCTION"], key))
        return r[key]

    def name_field(n, r, key="NAME"):
        v = field(n, r, key)
        if not isinstance(v, str):
            fail(n, "%s is not a string: %s" % (key, json.dumps(v)))
        return v

    def names_field(n, r, key):
        v = field(n, r, key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            fail(n, "%s is not a list of names: %s" % (key, json.dumps(v)))
        return v

    def int_field(n, r, key, signed=False):
        v = field(n, r, key)
        if isinstance(v, int) and not isinstance(v, bool) and (signed or v >= 0):
            return v
        if isinstance(v, str) and re.fullmatch(r"-?[0-9]+" if signed else r"[0-9]+", v):
            return int(v)
        fail(n, "%s is not %s integer: %s" % (key, "an" if signed else "a non-negative", json.dumps(v)))

    def need_live(n, name, what):
        if name not in live:
            fail(n, "%s %r is %s" % (what, name, "released" if name in defined else "not defined"))

    def define(n, name, sid):
        nonlocal live_bytes, peak
        if name in defined:
            fail(n, "name %r defined twice" % name)
        defined.add(name)
        live[name] = sid
        if storage_refs.get(sid, 0) == 0:
            live_bytes += storage_bytes[sid]
            peak = max(peak, live_bytes)
        storage_refs[sid] = storage_refs.get(sid, 0) + 1

    def release(name):
        nonlocal live_bytes
        sid = live.pop(name)
        storage_refs[sid] -= 1
        if storage_refs[sid] == 0:
            live_bytes -= storage_bytes[sid]

    def fresh_storage(nbytes):
        next_storage[0] += 1
        storage_bytes[next_storage[0]] = nbytes
        return next_storage[0]

    pending_call = None  # (args, results, index of next result, memory of it)
    n = 0
    instructions = 0
    for n, line in enumerate(lines, 1):
        if not line.rstrip("\r\n"):
            continue  # blank lines carry nothing, as in coop's reader (reader_dtr.c)
        instructions += 1
        try:
            r = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: brackets nested too deep
            fail(n, "not JSON: %s" % e)
        if not isinstance(r, dict) or "INSTRUCTION" not in r:
            fail(n, "not an object with INSTRUCTION")
        ins = r["INSTRUCTION"]
        if not isinstance(ins, str):
            fail(n, "INSTRUCTION is not a string: %s" % json.dumps(ins))
        counts[ins] = counts.get(ins, 0) + 1
        if expect:
            want, wname = expect.pop(0)
            if ins != want or r.get("NAME") != wname:
                fail(n, "expected %s for %s, got %s" % (want, wname, ins))
        elif ins in ("MEMORY", "ALIAS"):
            fail(n, "%s without a CONSTANT or CALL before it" % ins)
        if ins == "CONSTANT":
            expect.append(("MEMORY", name_field(n, r)))
        elif ins == "MEMORY":
            nbytes = int_field(n, r, "MEMORY")
            if pending_call is None:  # a CONSTANT's
                define(n, r["NAME"], fresh_storage(nbytes))
            else:
                pending_call[3] = nbytes
        elif ins == "ALIAS":
            if pending_call is None:
                fail(n, "ALIAS outside a CALL")
            args, results, i, nbytes = pending_call
            k = int_field(n, r, "ALIAS", signed=True)
            if k == -1:
                sid = fresh_storage(nbytes)
            elif 0 <= k < len(args):
                sid = live[args[k]]
            else:
                fail(n, "ALIAS %d out of range for %d ARGS" % (k, len(args)))
            define(n, results[i], sid)
            pending_call = None if i + 1 == len(results) else [args, results, i + 1, None]
        elif ins == "CALL":
            name_field(n, r)
            args = names_field(n, r, "ARGS")
            for a in args:
                need_live(n, a, "ARG")
            results = names_field(n, r, "RESULT")
            if not results:
                fail(n, "CALL without RESULT")
            int_field(n, r, "TIME")
            for res in results:
                expect.append(("MEMORY", res))
                expect.append(("ALIAS", res))
            pending_call = [args, results, 0, None]
        elif ins == "MUTATE":
            name_field(n, r)
            args = names_field(n, r, "ARGS")
            for a in args:
                need_live(n, a, "ARG")
            mutate = field(n, r, "MUTATE")
            if not isinstance(mutate, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in mutate):
                fail(n, "MUTATE is not a list of integers: %s" % json.dumps(mutate))
            for k in mutate:
                if not 0 <= k < len(args):
                    fail(n, "MUTATE index %d out of range" % k)
            int_field(n, r, "TIME")
        elif ins == "RELEASE":
            name = name_field(n, r)
            need_live(n, name, "RELEASE of")
            release(name)
        elif ins == "COPY":
            src, dst = name_field(n, r, "SRC"), name_field(n, r, "DST")
            need_live(n, src, "COPY source")
            define(n, dst, live[src])
        elif ins == "COPY_FROM":
            src, dst = name_field(n, r, "SRC"), name_field(n, r, "DST")
            need_live(n, src, "COPY_FROM source")
            need_live(n, dst, "COPY_FROM destination")
            sid = live[src]
            release(dst)
            live[dst] = sid
            storage_refs[sid] += 1
        elif ins == "ANNOTATE":
            if r.get("ANNOTATION") not in ("START", "BACKWARD"):
                fail(n, "unknown ANNOTATION %r" % r.get("ANNOTATION"))
        else:
            fail(n, "unknown INSTRUCTION %r" % ins)
    if expect:
        fail(n, "log ends inside an instruction (expected %s for %s)" % expect[0])
    if not instructions:  # coop refuses such a log; --check called it "ok"
        raise LogError("no instructions: the log is empty or blank")
    return {"lines": n, "counts": counts, "peak_live_bytes": peak, "final_live_bytes": live_bytes}


def _open_text(path):
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "models",
        nargs="*",
        help="models to record (default, without --workload: %s; also: %s), or logs with --check"
        % (", ".join(models.ALL), ", ".join(models.HELDOUT)),
    )
    ap.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="FILE.py:FUNC",
        help="record your own model: imports FILE (runs your code) and calls FUNC(device, batch), which returns "
        "a models.Workload or (model, inputs, target, loss_fn, optimizer[, name]) as a tuple or dict; "
        "repeatable (see the description above)",
    )
    ap.add_argument("--out-dir", default=None, help="where logs go (default: traces/; with --workload: .)")
    ap.add_argument("--batch", type=models.batch_size, default=None, help="override the model's batch size")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="thread", help="how TIME is measured (default: thread)")
    ap.add_argument(
        "--writes",
        choices=("content", "schema"),
        default="schema",
        help="which written arguments MUTATE names: the ones the schema marks (schema, the default, as "
        "the DTR authors' logs and traces/), or those plus any other whose contents changed (content)",
    )
    ap.add_argument("--check", action="store_true", help="validate the given log files instead of recording")
    opts = ap.parse_args(argv)

    if opts.check:
        if not opts.models:  # exit 0 having checked nothing before
            ap.error("--check: no log given")
        if opts.workload:
            ap.error("--check validates logs; it takes no --workload")
        status = 0
        for path in opts.models:
            try:
                with _open_text(path) as f:
                    s = check_log(f)
                print("%s: ok %s" % (path, json.dumps(s, sort_keys=True)))
            except (LogError, OSError, ValueError, EOFError, zlib.error) as e:  # unreadable, not UTF-8, bad gzip
                print("%s: %s" % (path, e), file=sys.stderr)
                status = 2
        return status

    if opts.out_dir is None:  # a user's logs stay out of coop's traces/ (its tests check every log there)
        opts.out_dir = "." if opts.workload else os.path.join(here, "..", "traces")
    models.check_recording(ap, opts.models, opts.out_dir)
    jobs = [(name, None) for name in (opts.models or ([] if opts.workload else models.ALL))]
    for spec in opts.workload:  # each file imported and FUNC found before any model is built
        try:
            jobs.append((spec, models.workload_function(spec)))
        except models.WorkloadError as e:
            models.refuse(ap, e)
    if opts.clock == "thread":
        torch.set_num_threads(1)  # the thread clock sees only this thread's work
    recorded = {}  # log name -> what it was recorded from
    for label, fn in jobs:
        buf = []
        try:
            if fn is None:
                w = models.build(label, batch=opts.batch)
            else:
                w = models.user_workload(label, fn, torch.device("cpu"), opts.batch)
            name = label if fn is None else w.name
            models.claim_name(recorded, name, label, "log")
            t0 = time.time()
            rec = record_step(w, buf.append, opts.clock, opts.writes == "content")
            if not (rec.counts.get("CALL") or rec.counts.get("MUTATE")):
                raise models.WorkloadError(
                    "%s: its training step logged no tensor operator (no CALL or MUTATE; does it compute with "
                    "torch tensors, on this thread?): nothing for coop sim to replay, no log written" % label
                )
        except models.WorkloadError as e:
            models.refuse(ap, e)
        path = os.path.join(opts.out_dir, "%s-train-step.ops.jsonl.gz" % name)
        elapsed = time.time() - t0
        text = "\n".join(buf) + "\n"
        models.write_gz(path, text.encode())
        summary = check_log(text.splitlines())
        print(
            "%s: %d lines, %d bytes gz, peak live %d bytes, op time %.2f s (%s clock), recorded in %.1f s "
            "(incl. warm-up step), counts %s, late constants %s, unlogged ops %s, "
            "unannotated writes %s, config %s"
            % (
                path,
                summary["lines"],
                os.path.getsize(path),
                summary["peak_live_bytes"],
                rec.time_ns / 1e9,
                opts.clock,
                elapsed,
                json.dumps(summary["counts"], sort_keys=True),
                json.dumps(rec.late_constants, sort_keys=True),
                json.dumps(rec.skipped_ops, sort_keys=True),
                json.dumps(rec.unannotated_writes, sort_keys=True),
                json.dumps(w.config, sort_keys=True),
            ),
            flush=True,
        )
        del w, rec, buf, text
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
