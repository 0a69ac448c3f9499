#!/usr/bin/python3
"""Records one training step as two op logs of the same run: one with every
write record_ops.py logs (the schema's marked writes and the arguments whose
contents changed, see "Writes" in record_ops.py), and one with the marked
writes only, as record_ops.py logged them before it compared contents (the
logs shipped in traces/ were recorded that way).

Both logs come from one recording, so their instructions and TIMEs are the
same but for the MUTATE records of unannotated writes (batch norm's running
statistics): `coop sim` on the two measures what those records change, free
of run-to-run timing noise.

Usage: record_ops_writes_effect.py [--out-dir DIR] [--batch N] MODEL
Writes DIR/<model>-train-step.ops.jsonl.gz (all writes) and
DIR/<model>-train-step.schema-writes.ops.jsonl.gz (marked writes only).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import interrupt  # noqa: E402,F401  (Ctrl-C: one line, no traceback)
import record_ops  # noqa: E402  (sets OPENBLAS_NUM_THREADS before torch loads)
import models  # noqa: E402
import torch  # noqa: E402


class TeeRecorder(record_ops.OpRecorder):
    """A recorder whose sink also gets a second log: each MUTATE restricted
    to the current op's schema-marked arguments (dropped when none is)."""

    def __init__(self, sink, clock, detect_writes=True):  # sink: unused, the two logs are kept here
        self.all_lines, self.schema_lines = [], []
        self._marked = []
        super().__init__(self._tee, clock, detect_writes)

    def _tensor_args(self, func, args, kwargs):
        targs = super()._tensor_args(func, args, kwargs)
        self._marked = [k for k, (_, w, _) in enumerate(targs) if w]
        return targs

    def _tee(self, line):
        self.all_lines.append(line)
        r = json.loads(line)
        if r["INSTRUCTION"] == "MUTATE" and r["MUTATE"] != self._marked:
            if not self._marked:
                return
            r["MUTATE"] = self._marked
            line = record_ops._dumps(r)
        self.schema_lines.append(line)


def write_gz(path, lines):
    text = "\n".join(lines) + "\n"
    models.write_gz(path, text.encode())
    return record_ops.check_log(text.splitlines())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--batch", type=models.batch_size, default=None)
    opts = ap.parse_args(argv)
    models.check_recording(ap, [opts.model], opts.out_dir)
    torch.set_num_threads(1)  # the thread clock sees only this thread's work
    w = models.build(opts.model, batch=opts.batch)
    orig, record_ops.OpRecorder = record_ops.OpRecorder, TeeRecorder  # record_step's recorder
    try:
        rec = record_ops.record_step(w, None, detect_writes=True)
    finally:
        record_ops.OpRecorder = orig
    base = os.path.join(opts.out_dir, "%s-train-step" % opts.model)
    for path, lines in ((base + ".ops.jsonl.gz", rec.all_lines),
                        (base + ".schema-writes.ops.jsonl.gz", rec.schema_lines)):
        s = write_gz(path, lines)
        print("%s: %d lines, peak live %d bytes, counts %s"
              % (path, s["lines"], s["peak_live_bytes"], json.dumps(s["counts"], sort_keys=True)))
    print("unannotated writes: %s; config %s"
          % (json.dumps(rec.unannotated_writes, sort_keys=True), json.dumps(w.config, sort_keys=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
