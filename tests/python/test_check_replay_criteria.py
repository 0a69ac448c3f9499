#!/usr/bin/env python3
"""Tests scripts/check_replay_criteria.py on hand-made replay rows: each
criterion passes and fails where it should, and bad input is refused with
the file and line (exit 2). Standard library only."""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jsonl_script import run_on_missing_file, run_on_rows  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check_replay_criteria.py")
GIB = 1 << 30


def row(trace, policy, live=10 * GIB, cap=None, mapped=None, ns=40.0, reserved=None):
    return {"trace": trace, "policy": policy, "events": 100, "peak_live_bytes": live,
            "peak_reserved_bytes": reserved if reserved is not None else cap,
            "reserved_over_live": 1.0, "min_capacity_bytes": cap, "map_bytes": mapped,
            "frag_mean": 0.1, "frag_max": 0.2, "ns_per_op": ns}


def good_trace(name="t.trace.gz"):
    return [row(name, "coop", cap=int(10.1 * GIB), mapped=int(10.2 * GIB), ns=40.0),
            row(name, "torch", cap=11 * GIB, mapped=11 * GIB, ns=60.0),
            row(name, "jemalloc", cap=12 * GIB, mapped=12 * GIB, ns=41.0)]


class CheckReplayCriteria(unittest.TestCase):
    def run_script(self, rows, *extra, raw=None):
        return run_on_rows(self, SCRIPT, rows, *extra, raw=raw)

    def test_help_says_the_criteria_exit_status_and_stdin(self):
        # --help showed the docstring's first line only
        import subprocess
        out = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True,
                             text=True).stdout
        for says in ("capacity  coop min_capacity_bytes <= 1.02 x", "exits 1 if any check fails, 2 on",
                     "('-': standard input)"):
            self.assertIn(says, out)

    def test_all_met(self):
        rc, out, _, _ = self.run_script(good_trace())
        self.assertEqual(rc, 0, out)
        self.assertIn("4 checks passed, 0 failed", out)

    def test_each_criterion_fails(self):
        cases = {
            "capacity": lambda rs: rs[0].update(min_capacity_bytes=int(10.3 * GIB)),
            "map": lambda rs: rs[0].update(map_bytes=21 * GIB),
            "vs-torch": lambda rs: rs[1].update(min_capacity_bytes=int(10.05 * GIB)),
            "speed": lambda rs: rs[2].update(ns_per_op=39.0),
        }
        for name, spoil in cases.items():
            rows = good_trace()
            spoil(rows)
            rc, out, _, _ = self.run_script(rows)
            self.assertEqual(rc, 1, name)
            failing = [l for l in out.splitlines() if l.startswith("FAIL")]
            self.assertEqual(len(failing), 1, out)
            self.assertIn(f": {name} ", failing[0])

    def test_bounds(self):
        # capacity 1.02 x, map 2 x and speed are met at equality; vs-torch is strict
        rows = good_trace()
        rows[0].update(peak_live_bytes=100 * GIB, min_capacity_bytes=102 * GIB,
                       map_bytes=200 * GIB, ns_per_op=41.0)
        rows[1]["min_capacity_bytes"] = 103 * GIB
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 0, out)
        self.assertIn("4 checks passed, 0 failed", out)
        rows[1]["min_capacity_bytes"] = 102 * GIB
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1, out)
        failing = [l for l in out.splitlines() if l.startswith("FAIL")]
        self.assertEqual(len(failing), 1, out)
        self.assertIn(": vs-torch coop 109,521,666,048 < torch 109,521,666,048", failing[0])

    def test_no_minimum_capacity_fails(self):
        rows = good_trace()
        rows[0]["min_capacity_bytes"] = None
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL t.trace.gz: coop has no minimum capacity", out)
        self.assertIn("0 checks passed, 1 failed", out)

    def test_recorded_rows(self):
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=11 * GIB, ns=None))
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 0, out)
        self.assertIn("vs-recorded", out)
        self.assertIn("torch-rec torch peak reserved +0.00%", out)
        rows[-1]["peak_reserved_bytes"] = 12 * GIB  # torch 8.3% below recorded
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1)
        self.assertIn("FAIL s.pickle.gz: torch-rec", out)

    def test_torch_rec_needs_default_settings(self):
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=11 * GIB, ns=None))
        for r in rows:
            r["torch_settings_default"] = True
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 0, out)
        # recorded under expandable segments, say: torch's figure is not comparable
        for r in rows:
            r["torch_settings_default"] = False
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1, out)
        failing = [l for l in out.splitlines() if l.startswith("FAIL")]
        self.assertEqual(len(failing), 1, out)
        self.assertIn("torch-rec not comparable", failing[0])

    def test_a_snapshot_coop_recorded_is_no_pytorch_reference(self):
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=10 * GIB, ns=None))  # coop's, below coop
        for r in rows:
            r["recorded_by_coop"] = True
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1, out)
        failing = [l for l in out.splitlines() if l.startswith("FAIL")]
        # neither compared with coop's capacity nor with torch's peak
        self.assertEqual(len(failing), 1, out)
        self.assertIn("torch-rec not comparable: recorded by coop", failing[0])
        self.assertNotIn("vs-recorded", out)

    def test_two_rows_of_one_trace_and_policy_are_refused(self):
        rc, _, err, _ = self.run_script(good_trace() + [good_trace()[0]])
        self.assertEqual(rc, 2)
        self.assertIn(":4: a second coop row for t.trace.gz", err)

    def test_a_snapshot_needs_its_recorded_row(self):
        rc, _, err, _ = self.run_script(good_trace("s.pickle.gz"))
        self.assertEqual(rc, 2)
        self.assertIn("no recorded row for s.pickle.gz", err)

    def test_null_figures_fail_their_check(self):
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=11 * GIB, ns=None))
        rows[0]["map_bytes"] = None
        rows[1]["peak_reserved_bytes"] = None
        rc, out, _, _ = self.run_script(rows)
        self.assertEqual(rc, 1, out)
        failing = [l for l in out.splitlines() if l.startswith("FAIL")]
        self.assertEqual(len(failing), 2, out)
        self.assertIn("map coop null", failing[0])
        self.assertIn("torch-rec torch peak reserved null", failing[1])

    def test_zero_recorded_peak_and_empty_input_are_bad_input(self):
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=11 * GIB, ns=None, reserved=0))
        rc, _, err, _ = self.run_script(rows)
        self.assertEqual(rc, 2)
        self.assertIn(":4: the recorded row of s.pickle.gz has no peak_reserved_bytes (0)", err)
        rc, _, err, _ = self.run_script([])
        self.assertEqual(rc, 2)
        self.assertIn("no rows", err)
        # found before any verdict, the line named: after a good snapshot's
        # six verdicts were printed, the second's zero came out as exit 2
        first = good_trace("a.pickle.gz") + [row("a.pickle.gz", "recorded", cap=11 * GIB, ns=None)]
        rc, out, err, path = self.run_script(first + rows)
        self.assertEqual((rc, out), (2, ""))
        self.assertEqual(err, f"check_replay_criteria: {path}:8: the recorded row of s.pickle.gz "
                              "has no peak_reserved_bytes (0), which torch's is compared with\n")

    def test_minimalloc(self):
        mm = [row("A.1048576.csv", "coop", live=900000, cap=1048576, mapped=1048576),
              row("A.1048576.csv", "jemalloc", live=900000, cap=1200000, mapped=1200000)]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("".join(json.dumps(r) + "\n" for r in mm))
        self.addCleanup(os.unlink, f.name)
        rc, out, _, _ = self.run_script(good_trace(), "--minimalloc", f.name)
        self.assertEqual(rc, 0, out)
        self.assertIn("coop 1.0000, jemalloc 1.1444", out)
        # coop equal to jemalloc is met; above it fails
        for jcap, want in ((1048576, 0), (1048575, 1)):
            mm[1]["min_capacity_bytes"] = jcap
            with open(f.name, "w") as g:
                g.write("".join(json.dumps(r) + "\n" for r in mm))
            rc, out, _, _ = self.run_script(good_trace(), "--minimalloc", f.name)
            self.assertEqual(rc, want, out)
        # a minimalloc file without rows is bad input
        with open(f.name, "w") as g:
            g.write("\n")
        rc, _, err, _ = self.run_script(good_trace(), "--minimalloc", f.name)
        self.assertEqual(rc, 2)
        self.assertIn(f"{f.name}: no rows", err)

    def test_minimalloc_rows_of_other_traces_are_refused(self):
        # the main file (or a snapshot's rows) given as --minimalloc was
        # checked as CSVs, coop against jemalloc, and passed (exit 0); a
        # missing jemalloc row came after the main checks' verdicts
        cases = [(good_trace(), "t.trace.gz is not a minimalloc CSV"),
                 (good_trace("s.pickle.gz"), "s.pickle.gz is not a minimalloc CSV"),
                 ([row("A.1048576.csv", "coop", live=900000, cap=1048576, mapped=1048576)],
                  "no jemalloc row for A.1048576.csv")]
        for mm, says in cases:
            with self.subTest(says=says):
                with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
                    f.write("".join(json.dumps(r) + "\n" for r in mm))
                self.addCleanup(os.unlink, f.name)
                rc, out, err, _ = self.run_script(good_trace(), "--minimalloc", f.name)
                self.assertEqual((rc, out), (2, ""), err)
                self.assertIn(f"{f.name}: {says}", err)
        # gzip-compressed CSVs are read as they are
        mm = [row("A.1048576.csv.gz", "coop", live=900000, cap=1048576, mapped=1048576),
              row("A.1048576.csv.gz", "jemalloc", live=900000, cap=1200000, mapped=1200000)]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("".join(json.dumps(r) + "\n" for r in mm))
        self.addCleanup(os.unlink, f.name)
        rc, out, err, _ = self.run_script(good_trace(), "--minimalloc", f.name)
        self.assertEqual(rc, 0, err)
        self.assertIn("coop 1.0000, jemalloc 1.1444", out)

    def refused(self, rows, *says, raw=None):
        """rows (or raw) are refused in one line that says each of says."""
        rc, out, err, _ = self.run_script(rows, raw=raw)
        self.assertEqual((rc, out), (2, ""), err)
        for text in says:
            self.assertIn(text, err)
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_a_missing_figure_is_named(self):
        # map_bytes, min_capacity_bytes: read as coop[key], a KeyError traceback
        for key in ("map_bytes", "min_capacity_bytes", "peak_live_bytes"):
            with self.subTest(key=key):
                rows = good_trace()
                del rows[0][key]
                self.refused(rows, f":1: missing {key}: not a coop replay --json row")

    def test_byte_counts_out_of_range_are_refused(self):
        # each passed its checks: a negative or fractional capacity is below
        # any peak, a negative peak failed them with a negative ratio
        for key, value in (("min_capacity_bytes", -5), ("min_capacity_bytes", 1.5),
                           ("peak_live_bytes", -5), ("map_bytes", 2.0 ** 65),
                           ("peak_reserved_bytes", "11")):
            with self.subTest(key=key, value=value):
                rows = good_trace()
                rows[0][key] = value
                self.refused(rows, f":1: {key} is {json.dumps(value)}, not a")
        rows = good_trace()
        rows[2]["ns_per_op"] = -1.0
        self.refused(rows, ":3: ns_per_op is -1.0, negative")

    def test_numbers_no_float_holds_are_refused(self):
        # a peak live of 1e400 (infinity) passed capacity and map; 400
        # digits were an OverflowError traceback
        for key, big in (("peak_live_bytes", "1e400"), ("peak_live_bytes", "9" * 400),
                         ("min_capacity_bytes", "1e400")):
            with self.subTest(key=key, big=big[:8]):
                rows = good_trace()
                rows[0][key] = "BIG"
                text = "".join(json.dumps(r) + "\n" for r in rows).replace('"BIG"', big)
                self.refused(None, f":1: {key} is ", "out of range (no float holds it)", raw=text)

    def test_flags_that_are_not_booleans_are_refused(self):
        # recorded_by_coop "false" was true (bool("false")): the recorded row
        # skipped as coop's own
        rows = good_trace("s.pickle.gz")
        rows.append(row("s.pickle.gz", "recorded", cap=11 * GIB, ns=None))
        for key, value in (("recorded_by_coop", "false"), ("recorded_by_coop", None),
                           ("torch_settings_default", 0)):
            with self.subTest(key=key, value=value):
                bad = [dict(r) for r in rows]
                bad[1][key] = value
                self.refused(bad, f":2: {key} is {json.dumps(value)}, not true or false")

    def test_rows_of_other_tools_are_named(self):
        sim = {"log": "a.log.gz", "policy": "coop", "memory": "arena", "budget_ratio": 0.9,
               "result": "ok", "overhead": 1.0}
        self.refused(good_trace() + [sim], ":4: a coop sim --json row, not a coop replay --json row")
        gpu = {"script": "replay_native_vs_coop", "trace": "t.trace.gz", "allocator": "native"}
        self.refused([gpu], ":1: a scripts/gpu results row, not a coop replay --json row")

    def test_bad_input(self):
        rc, _, err, path = self.run_script(None, raw=json.dumps(good_trace()[0]) + "\n{oops\n")
        self.assertEqual(rc, 2)
        self.assertIn(f"{path}:2:", err)
        bad = good_trace()
        bad[0]["ns_per_op"] = "fast"
        rc, _, err, path = self.run_script(bad)
        self.assertEqual(rc, 2)
        self.assertIn(f'{path}:1: ns_per_op is "fast", not a number', err)
        rc, _, err, _ = self.run_script(good_trace()[:2])  # no jemalloc row
        self.assertEqual(rc, 2)
        self.assertIn("no jemalloc row for t.trace.gz", err)
        bad = good_trace()
        bad[0]["trace"] = 5  # sorted with the other rows' names: a TypeError before
        rc, _, err, path = self.run_script(bad)
        self.assertEqual(rc, 2)
        self.assertIn(f"{path}:1: trace is 5, not a non-empty string", err)
        self.assertNotIn("Traceback", err)
        bad = good_trace()
        bad[2]["ns_per_op"] = True  # a bool is an int to Python, not a figure
        rc, _, err, path = self.run_script(bad)
        self.assertEqual(rc, 2)
        self.assertIn(f"{path}:3: ns_per_op is true, not a number, nor null", err)
        bad = good_trace()
        bad[1]["peak_live_bytes"] = 0
        rc, _, err, path = self.run_script(bad)
        self.assertEqual(rc, 2)
        self.assertIn(f"{path}:2: peak_live_bytes is 0, nothing to compare with", err)
        rc, err = run_on_missing_file(SCRIPT)
        self.assertEqual(rc, 2)
        self.assertIn("/nonexistent.jsonl", err)
        # NaN and Infinity are Python's, not JSON: a NaN figure was read as a
        # number (every comparison with it false)
        for constant in ("NaN", "Infinity", "-Infinity"):
            text = "\n".join(json.dumps(r) for r in good_trace()) + "\n"
            text = text.replace('"ns_per_op": 60.0', '"ns_per_op": ' + constant, 1)
            rc, _, err, path = self.run_script(None, raw=text)
            self.assertEqual(rc, 2, constant)
            self.assertIn(f"{path}:2: not a coop replay JSON row ({constant} is not JSON)", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
