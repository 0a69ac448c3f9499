#!/usr/bin/env python3
"""Tests scripts/record_ops.py and scripts/record_traces.py on small real
models (CPU, a few seconds): the op log's structure and semantics, the
validator's rejection of broken logs, and the allocation-trace pairing.

Needs Debian's python3-torch; exits 77 (automake SKIP) without it.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")

import debian_torch  # noqa: E402,F401  (torch, or a restart under Debian's python, or SKIP)
import torch  # noqa: E402

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, SCRIPTS)
import models  # noqa: E402
import record_ops  # noqa: E402
import record_traces  # noqa: E402


class SmallNet(nn.Module):
    """Conv + batch norm + in-place ReLU + a self-attention layer: views,
    aliases, in-place ops and saved tensors, as in the real models."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.attn = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)), inplace=True)  # (b, 8, 4, 4)
        h = h.flatten(2).transpose(1, 2)  # (b, 16, 8)
        h = self.attn(h)
        return self.fc(h.mean(1))


def small_workload(optimizer="sgd"):
    torch.manual_seed(0)
    m = SmallNet()
    x = torch.randn(4, 3, 4, 4)
    y = torch.randint(0, 5, (4,))
    if optimizer == "sgd":
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    return models.Workload("small", m, (x,), y, F.cross_entropy, opt, {"batch": 4})


def record(optimizer="sgd"):
    w = small_workload(optimizer)
    lines = []
    rec = record_ops.record_step(w, lines.append)
    return w, rec, lines


class RecordOpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w, cls.rec, cls.lines = record("sgd")
        cls.records = [record_ops.json.loads(line) for line in cls.lines]
        cls.summary = record_ops.check_log(cls.lines)

    def test_starts_with_start_and_has_backward(self):
        self.assertEqual(self.records[0], {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"})
        anns = [r["ANNOTATION"] for r in self.records if r["INSTRUCTION"] == "ANNOTATE"]
        self.assertEqual(anns, ["START", "BACKWARD"])

    def test_persistent_tensors_are_constants_with_their_bytes(self):
        persistent = self.w.persistent_tensors()
        consts = [r for r in self.records if r["INSTRUCTION"] == "CONSTANT"]
        self.assertEqual(len(consts), len(persistent))
        mem = {r["NAME"]: int(r["MEMORY"]) for r in self.records if r["INSTRUCTION"] == "MEMORY"}
        conv_w = self.w.model.conv.weight
        name = getattr(conv_w, self.rec.attr)
        self.assertEqual(mem[name], conv_w.numel() * 4)
        self.assertEqual(self.rec.late_constants, {})

    def test_calls_have_measured_time(self):
        calls = [r for r in self.records if r["INSTRUCTION"] == "CALL"]
        self.assertGreater(len(calls), 30)
        self.assertTrue(all(int(r["TIME"]) > 0 for r in calls))
        names = {r["NAME"] for r in calls}
        for op in ("convolution", "native_batch_norm", "bmm", "convolution_backward"):
            self.assertTrue(any(op in n for n in names), "%s missing from %s" % (op, sorted(names)))

    def test_views_alias_their_input(self):
        seen = 0
        for i, r in enumerate(self.records):
            if r["INSTRUCTION"] == "CALL" and r["NAME"] in ("t", "transpose", "view", "detach"):
                alias = self.records[i + 2]
                self.assertEqual(alias["INSTRUCTION"], "ALIAS")
                self.assertEqual(alias["ALIAS"], "0", r)
                seen += 1
        self.assertGreater(seen, 5)

    def test_inplace_relu_and_optimizer_updates_are_mutations(self):
        muts = [r for r in self.records if r["INSTRUCTION"] == "MUTATE"]
        self.assertTrue(any(r["NAME"] == "relu_" and r["MUTATE"] == [0] for r in muts))
        mutated = {r["ARGS"][k] for r in muts for k in r["MUTATE"]}
        for p in self.w.model.parameters():
            self.assertIn(getattr(p, self.rec.attr), mutated)

    def test_releases_follow_the_step(self):
        self.assertGreater(self.summary["counts"].get("RELEASE", 0), 20)
        # Activations die during backward: less is live at the end than at the peak.
        self.assertLess(self.summary["final_live_bytes"], self.summary["peak_live_bytes"])

    def test_adamw_step_records(self):
        _, rec, lines = record("adamw")
        s = record_ops.check_log(lines)
        self.assertGreater(s["counts"]["MUTATE"], 10)
        self.assertEqual(rec.late_constants, {})


class CheckLogTest(unittest.TestCase):
    GOOD = [
        '{"INSTRUCTION":"ANNOTATE","ANNOTATION":"START"}',
        '{"INSTRUCTION":"CONSTANT","NAME":"x0"}',
        '{"INSTRUCTION":"MEMORY","NAME":"x0","MEMORY":"64"}',
        '{"INSTRUCTION":"CALL","NAME":"t","ARGS":["x0"],"RESULT":["x1"],"TIME":"5"}',
        '{"INSTRUCTION":"MEMORY","NAME":"x1","MEMORY":"64"}',
        '{"INSTRUCTION":"ALIAS","NAME":"x1","ALIAS":"0"}',
        '{"INSTRUCTION":"CALL","NAME":"mul","ARGS":["x1","x0"],"RESULT":["x2"],"TIME":"9"}',
        '{"INSTRUCTION":"MEMORY","NAME":"x2","MEMORY":"64"}',
        '{"INSTRUCTION":"ALIAS","NAME":"x2","ALIAS":"-1"}',
        '{"INSTRUCTION":"RELEASE","NAME":"x1"}',
    ]

    def test_good_log_peak(self):
        s = record_ops.check_log(self.GOOD)
        self.assertEqual(s["peak_live_bytes"], 128)  # x1 shares x0's storage
        self.assertEqual(s["final_live_bytes"], 128)

    def assertRejects(self, lines, fragment):
        with self.assertRaises(record_ops.LogError) as cm:
            record_ops.check_log(lines)
        self.assertIn(fragment, str(cm.exception))

    def test_use_after_release(self):
        bad = self.GOOD + ['{"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["x1"],"MUTATE":[0],"TIME":"1"}']
        self.assertRejects(bad, "line 11: ARG 'x1' is released")

    def test_undefined_arg(self):
        bad = self.GOOD[:3] + ['{"INSTRUCTION":"CALL","NAME":"t","ARGS":["x7"],"RESULT":["x1"],"TIME":"5"}']
        self.assertRejects(bad, "line 4: ARG 'x7' is not defined")

    def test_double_release(self):
        self.assertRejects(self.GOOD + ['{"INSTRUCTION":"RELEASE","NAME":"x1"}'], "RELEASE of 'x1' is released")

    def test_truncated_call(self):
        self.assertRejects(self.GOOD[:4], "log ends inside an instruction")

    def test_not_json(self):
        self.assertRejects(self.GOOD[:2] + ["{oops"], "line 3: not JSON")


class RecordTracesTest(unittest.TestCase):
    def test_pairing(self):
        # before the step: 0x10 allocated (lives on), 0x20 allocated and freed
        events = [(1, 0x10, 100), (2, 0x20, 50), (3, 0x20, -50), (10, 0x30, 8), (11, 0x30, -8), (12, 0x10, -100)]
        lines, stats = record_traces.to_trace(events, (5, 20), ["# test"])
        self.assertEqual(
            lines, ["# test", "coop-trace 1", "L 0 100 0 addr=0x10", "A 1 8 0 addr=0x30 t=0", "F 1", "F 0"]
        )
        self.assertEqual(stats["peak_live_bytes"], 108)
        self.assertEqual(stats["events"], 4)

    def test_real_profile(self):
        events, marker, w = record_traces.profile_step(small_workload)
        lines, stats = record_traces.to_trace(events, marker, [])
        self.assertEqual(stats["unpaired_frees"], 0)
        self.assertGreater(stats["A"], 20)
        # every parameter's storage was live before the step began
        self.assertGreaterEqual(stats["live_at_start_bytes"], sum(p.numel() * 4 for p in w.model.parameters()))
        self.assertGreater(stats["peak_live_bytes"], stats["live_at_start_bytes"])
        live = set()
        for line in lines[1:]:
            f = line.split()
            if f[0] in ("A", "L"):
                self.assertNotIn(f[1], live)
                live.add(f[1])
            else:
                self.assertEqual(f[0], "F")
                live.remove(f[1])


TRACES = os.path.join(HERE, "..", "..", "traces")


def shipped(suffix):
    """Files in traces/, traces/heldout/ and traces/heldout2/ (the held-out op
    logs) ending in suffix."""
    out = []
    for d in (TRACES, os.path.join(TRACES, "heldout"), os.path.join(TRACES, "heldout2")):
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in os.listdir(d) if f.endswith(suffix)]
    return sorted(out)


class ShippedTracesTest(unittest.TestCase):
    """The logs and traces committed in traces/ are well formed."""

    def test_op_logs(self):
        logs = shipped(".ops.jsonl.gz")
        self.assertGreaterEqual(len(logs), 3)
        for path in logs:
            with record_ops._open_text(path) as f:
                lines = f.read().splitlines()
            s = record_ops.check_log(lines)  # raises on a broken log
            self.assertEqual(lines[0], '{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}', path)
            self.assertEqual(s["counts"]["ANNOTATE"], 2, path)
            self.assertGreater(s["counts"]["CALL"], 200, path)
            self.assertGreater(s["counts"]["RELEASE"], 200, path)
            self.assertLess(os.path.getsize(path), 5 << 20, path)

    def test_allocation_traces(self):
        traces = shipped(".trace.gz")
        self.assertGreaterEqual(len(traces), 6)
        for path in traces:
            with record_ops._open_text(path) as f:
                lines = [ln for ln in f.read().splitlines() if ln and not ln.startswith("#")]
            self.assertEqual(lines[0], "coop-trace 1", path)
            live = {}
            in_step = False
            for n, line in enumerate(lines[1:], 2):
                f = line.split()
                if f[0] == "L":
                    self.assertFalse(in_step, "%s:%d: L after A/F" % (path, n))
                if f[0] in ("A", "L"):
                    in_step |= f[0] == "A"
                    self.assertNotIn(f[1], live, "%s:%d" % (path, n))
                    self.assertEqual(f[3], "0")
                    self.assertTrue(f[4].startswith("addr=0x"))
                    live[f[1]] = int(f[2])
                else:
                    self.assertEqual(f[0], "F", "%s:%d" % (path, n))
                    self.assertIn(f[1], live, "%s:%d: F of a dead id" % (path, n))
                    del live[f[1]]
            self.assertTrue(in_step, path)


if __name__ == "__main__":
    unittest.main(verbosity=1)
