#!/usr/bin/python3
"""Writes a long synthetic trace by repeating a shipped trace's steady state.

For measuring how `coop replay`, `coop sim` and `coop convert` scale with the
number of events (tests/README.md, "Scaling with trace size"). Standard library
only. Each repetition of the base step gets fresh ids (names) and addresses, and
frees at its end whatever it left live, so live memory stays that of one step
whatever the length:

  long_trace.py text EVENTS OUT        from traces/unet-train-step.trace.gz
  long_trace.py pickle EVENTS OUT      from traces/unet-train-step.cuda.pickle.gz
                                       (entries keep their 16 stack frames)
  long_trace.py minimalloc EVENTS OUT  the text trace's step as CSV buffers
  long_trace.py dtr EVENTS OUT         from traces/unet-train-step.ops.jsonl.gz

EVENTS counts trace events (allocs and frees; DTR: lines of the log) and is
rounded up to whole steps. OUT ending in .gz is gzip-compressed (level 1).
OUT appears whole or not at all (scripts/atomic_file.py): a failed write
keeps the previous file. Exits 2 on a bad argument or an OUT that cannot be
made (a directory, a missing directory) or is the shipped trace FORMAT
repeats, 1 when a write fails.
"""
import argparse
import contextlib
import gzip
import json
import os
import pickle
import struct
import sys

import atomic_file
import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "traces")
ADDR_STRIDE = 1 << 36  # each repetition's addresses are shifted by this


@contextlib.contextmanager
def open_out(path):
    """OUT through atomic_file.replacing: a write that fails part-way (a full
    disk) or is interrupted leaves the previous file, or none, never a cut
    one (opened in place, a failure left a trace its readers refuse as
    truncated, or a step short). Compressed here, at level 1: replacing's
    own compression is level 9, slow for 10M events."""
    with atomic_file.replacing(path) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1,
                               mtime=0) as f:
                yield f
        else:
            yield raw


def text_step():
    """The unet step's A/F events as (kind, id, size, addr); frees of blocks
    live before the step are dropped and the step's survivors freed at its end."""
    step, live = [], {}
    with gzip.open(os.path.join(TRACES, "unet-train-step.trace.gz"), "rt") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0] not in ("A", "F"):
                continue
            i = int(fields[1])
            if fields[0] == "A":
                addr = int(fields[4].split("=")[1], 16)
                live[i] = (int(fields[2]), addr)
                step.append(("A", i, live[i][0], addr))
            elif i in live:
                step.append(("F", i) + live.pop(i))
    step += [("F", i) + v for i, v in live.items()]
    return step


def write_text(events, out):
    step = text_step()
    reps = -(-events // len(step))
    span = max(e[1] for e in step) + 1
    with open_out(out) as f:
        f.write(b"coop-trace 1\n")
        t = 0
        for k in range(reps):
            lines = []
            for kind, i, size, addr in step:
                t += 1
                if kind == "A":
                    lines.append("A %d %d 0 addr=0x%x t=%d\n" % (i + k * span, size, addr + k * ADDR_STRIDE, t))
                else:
                    lines.append("F %d\n" % (i + k * span))
            f.write("".join(lines).encode())
    return reps * len(step)


def write_minimalloc(events, out):
    step = text_step()
    reps = -(-events // len(step))
    span = max(e[1] for e in step) + 1
    lower = {}
    for t, (kind, i, size, _) in enumerate(step):
        if kind == "A":
            lower[i] = (t, size)
    rows = []
    for t, (kind, i, _, _) in enumerate(step):
        if kind == "F":
            rows.append((i, lower[i][0], t + 1, lower[i][1]))
    with open_out(out) as f:
        f.write(b"id,lower,upper,size\n")
        for k in range(reps):
            base = k * len(step)
            f.write("".join("%d,%d,%d,%d\n" % (i + k * span, lo + base, up + base, size)
                            for i, lo, up, size in rows).encode())
    return reps * len(step)


# ---- pickle: written opcode by opcode, as PyTorch's pickler lays a snapshot out ----

class PickleOut:
    def __init__(self, f):
        self.f, self.memo, self.buf = f, {}, []

    def raw(self, b):
        self.buf.append(b)
        if len(self.buf) > 4096:
            self.flush()

    def flush(self):
        self.f.write(b"".join(self.buf))
        self.buf = []

    def string(self, s):
        """A str, memoized on first use (PyTorch's repeated names and file
        names are one object each, so its pickles BINGET them)."""
        if s in self.memo:
            n = self.memo[s]
            self.raw(b"h" + bytes([n]) if n < 256 else b"j" + struct.pack("<I", n))
            return
        b = s.encode()
        self.raw((b"\x8c" + bytes([len(b)]) if len(b) < 256 else b"X" + struct.pack("<I", len(b))) + b)
        n = self.memo[s] = len(self.memo)
        self.raw(b"q" + bytes([n]) if n < 256 else b"r" + struct.pack("<I", n))

    def integer(self, v):
        if 0 <= v < 256:
            self.raw(b"K" + bytes([v]))
        elif -(1 << 31) <= v < (1 << 31):
            self.raw(b"J" + struct.pack("<i", v))
        else:
            self.raw(b"\x8a\x08" + struct.pack("<q", v))

    def value(self, v):
        if isinstance(v, bool):
            self.raw(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            self.integer(v)
        elif isinstance(v, str):
            self.string(v)
        elif isinstance(v, dict):
            self.raw(b"}(")
            for key, item in v.items():
                self.string(key)
                self.value(item)
            self.raw(b"u")
        elif isinstance(v, list):
            self.raw(b"]")
            if v:
                self.raw(b"(")
                for item in v:
                    self.value(item)
                self.raw(b"e")
        else:
            raise TypeError(type(v))


def write_pickle(events, out):
    with gzip.open(os.path.join(TRACES, "unet-train-step.cuda.pickle.gz"), "rb") as f:
        snap = pickle.load(f)
    entries = next(t for t in snap["device_traces"] if t)
    step, live = [], {}
    for e in entries:
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e
            step.append(e)
        elif a in ("free_requested", "free_completed") and e["addr"] in live:
            step.append(e)
            if a == "free_completed":
                del live[e["addr"]]
    for e in live.values():
        for a in ("free_requested", "free_completed"):
            step.append(dict(e, action=a, frames=[]))
    reps = -(-events // len(step))
    with open_out(out) as f:
        p = PickleOut(f)
        p.raw(b"\x80\x04}(")
        p.string("segments")
        p.raw(b"]")
        p.string("device_traces")
        p.raw(b"](](")
        t = 0
        for k in range(reps):
            for e in step:
                t += 1
                p.value(dict(e, addr=e["addr"] + k * ADDR_STRIDE, time_us=t))
                if t % 1000 == 0:
                    p.raw(b"e(")
        p.raw(b"eeu.")  # close the batch, device 0's list, device_traces; the dict
        p.flush()
    return reps * len(step)


def write_dtr(events, out):
    """Constants once, then the step's instructions repeated: names defined in
    the step get a per-repetition suffix, RELEASEs of constants and ANNOTATE
    lines are dropped from repetitions, and each repetition releases what it
    left live."""
    with gzip.open(os.path.join(TRACES, "unet-train-step.ops.jsonl.gz"), "rt") as f:
        lines = [json.loads(line) for line in f]
    head_end = next(i for i, o in enumerate(lines) if o["INSTRUCTION"] in ("CALL", "MUTATE"))
    head, body = lines[:head_end], lines[head_end:]
    constants = {o["NAME"] for o in head if o["INSTRUCTION"] == "CONSTANT"}
    step, live = [], set()
    for o in body:
        ins = o["INSTRUCTION"]
        if ins == "ANNOTATE" or (ins == "RELEASE" and o["NAME"] in constants):
            continue
        if ins == "CALL":
            live.update(o["RESULT"])
        if ins == "RELEASE":
            live.discard(o["NAME"])
        step.append(o)
    step += [{"INSTRUCTION": "RELEASE", "NAME": n} for n in sorted(live)]

    def rename(n, k):
        return n if n in constants else "%s_%d" % (n, k)

    reps = max(1, -(-(events - len(head)) // len(step)))
    with open_out(out) as f:
        f.write("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in head).encode())
        for k in range(reps):
            chunk = []
            for o in step:
                o = dict(o)
                for key in ("NAME",):
                    if key in o and o["INSTRUCTION"] not in ("CALL", "MUTATE"):
                        o[key] = rename(o[key], k)
                for key in ("ARGS", "RESULT"):
                    if key in o:
                        o[key] = [rename(n, k) for n in o[key]]
                chunk.append(json.dumps(o, separators=(",", ":")) + "\n")
            f.write("".join(chunk).encode())
    return len(head) + reps * len(step)


# the shipped trace each format repeats (read whole before OUT is written)
BASES = {"text": "unet-train-step.trace.gz", "minimalloc": "unet-train-step.trace.gz",
         "pickle": "unet-train-step.cuda.pickle.gz", "dtr": "unet-train-step.ops.jsonl.gz"}

WRITERS = {"text": write_text, "pickle": write_pickle, "minimalloc": write_minimalloc,
           "dtr": write_dtr}


def event_count(text):
    """argparse type of EVENTS: a whole number from 1 (int() took '1_000'
    and failed with a traceback on 'abc'; 0 or less wrote a trace of no
    events, which its readers refuse as empty)."""
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("%r is not a whole number of 1 or more" % text)
    return int(text)


def unwritable(path):
    """Why OUT cannot be written, checked before any work, or None."""
    if os.path.isdir(path):
        return "Is a directory"
    parent = os.path.dirname(os.path.realpath(path))
    try:
        os.stat(parent)
    except OSError as e:
        return e.strerror
    if not os.path.isdir(parent):
        return "Not a directory"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("format", metavar="FORMAT", choices=sorted(WRITERS),
                    help="text, pickle, minimalloc or dtr")
    ap.add_argument("events", metavar="EVENTS", type=event_count)
    ap.add_argument("out", metavar="OUT")
    args = ap.parse_args(argv)
    why = unwritable(args.out)
    if why:
        ap.error("%s: %s" % (args.out, why))
    base = os.path.join(TRACES, BASES[args.format])
    if os.path.exists(args.out) and os.path.exists(base) and os.path.samefile(args.out, base):
        # it was read whole, then replaced by its repetition
        ap.error("%s: is the shipped trace %s repeats" % (args.out, args.format))
    try:
        n = WRITERS[args.format](args.events, args.out)
    except OSError as e:  # a full disk part-way: the previous OUT is kept
        # a base trace that cannot be read names itself (e.filename)
        print("long_trace.py: %s: %s" % (e.filename or args.out, e.strerror or e), file=sys.stderr)
        return 1
    print("%s: %d %s" % (args.out, n, "lines" if args.format == "dtr" else "events"),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
