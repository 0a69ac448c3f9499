#!/usr/bin/env python3
"""Tests scripts/check_sim_criteria.py on hand-made coop sim rows: each
criterion is violated where it should be and nowhere else, missing rows and
rows of another memory model cannot make a run pass, and bad input is exit 2
with one line. Standard library only."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jsonl_script import run_on_missing_file, run_on_rows  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check_sim_criteria.py")


def row(policy, ratio, result="ok", overhead=1.1, min_ratio=0.3, log="a.log.gz", memory="arena"):
    r = {"log": log, "policy": policy, "memory": memory, "budget_ratio": ratio,
         "result": result, "min_budget_ratio": min_ratio}
    if overhead is not None:
        r["overhead"] = overhead
    return r


def met():
    """coop at or below both rivals everywhere."""
    return [row("coop", 0.9, overhead=1.01), row("dtr", 0.9, overhead=1.02),
            row("dte", 0.9, overhead=1.03), row("coop", 0.5, overhead=1.2),
            row("dtr", 0.5, result="thrash", overhead=2.0), row("dte", 0.5, overhead=1.2)]


class CheckSimCriteria(unittest.TestCase):
    def run_script(self, rows, *extra, raw=None):
        return run_on_rows(self, SCRIPT, rows, *extra, raw=raw)[:3]

    def violated(self, rows, count):
        rc, out, err = self.run_script(rows)
        self.assertEqual(rc, 1 if count else 0, out + err)
        self.assertIn(f"{count} violations", out)
        return out

    def test_met(self):
        self.violated(met(), 0)

    def test_slack(self):
        rows = met()
        rows[0]["overhead"] = 1.02 + 0.005  # at the slack: met
        self.violated(rows, 0)
        rows[0]["overhead"] = 1.02 + 0.0051
        self.assertIn("a.log.gz 0.9: coop 1.025 vs dtr 1.020", self.violated(rows, 1))

    def test_coop_fails_where_a_rival_succeeds(self):
        rows = met()
        rows[3].update(result="oom")
        self.assertIn("coop oom vs dte 1.200", self.violated(rows, 1))

    def test_min_ratio(self):
        rows = met()
        for r in rows:
            if r["policy"] == "coop":
                r["min_budget_ratio"] = 0.31
        self.assertIn("coop min 0.31 vs dtr 0.3", self.violated(rows, 1))
        for r in rows:
            if r["policy"] == "coop":
                r["min_budget_ratio"] = None
        self.violated(rows, 1)

    def test_rival_min_ratio_from_any_of_its_rows(self):
        rows = met() + [row("dtr", 0.2, result="thrash", min_ratio=0.2),
                        row("coop", 0.2, result="thrash")]
        for r in rows:
            if r["policy"] == "dtr" and r["budget_ratio"] != 0.2:
                r["min_budget_ratio"] = None
        self.assertIn("coop min 0.3 vs dtr 0.2", self.violated(rows, 1))

    def test_missing_rows_are_violations(self):
        rows = [r for r in met() if not (r["policy"] == "coop" and r["budget_ratio"] == 0.9)]
        self.assertIn("coop missing vs dtr 1.020", self.violated(rows, 1))
        other_log = [row("dtr", 0.9, log="b.log.gz"), row("dte", 0.9, log="b.log.gz")]
        out = self.violated(met() + other_log, 2)  # b 0.9 and b min
        self.assertIn("b.log.gz 0.9: coop missing", out)
        # a ratio where the rivals failed still needs coop's row (the
        # docstring's "a partial run cannot pass"): it used to pass
        rows = [r for r in met() if not (r["policy"] == "coop" and r["budget_ratio"] == 0.5)]
        rows = [dict(r, result="oom") if r["budget_ratio"] == 0.5 else r for r in rows]
        out = self.violated(rows, 1)
        self.assertIn("a.log.gz 0.5: coop missing vs dtr oom; coop missing vs dte oom", out)

    def test_logs_sharing_a_model_name_stay_two_cells(self):
        rows = []
        for log in ("lstm-128-a.gz", "lstm-64-b.gz"):
            rows += [row("coop", 0.5, result="thrash", log=log), row("dtr", 0.5, log=log),
                     row("dte", 0.5, log=log)]
        out = self.violated(rows, 2)
        self.assertIn("violation lstm-128-a.gz 0.5", out)
        self.assertIn("violation lstm-64-b.gz 0.5", out)
        # one fixed and the other broken: a NEW cell, not the same one
        base = rows[:3] + [row("coop", 0.5, log="lstm-64-b.gz")] + rows[4:]
        fixed = [row("coop", 0.5, log="lstm-128-a.gz")] + rows[1:]
        base_path = run_on_rows(self, SCRIPT, base)[3]  # the baseline's file, kept till the end
        rc, out, err = run_on_rows(self, SCRIPT, fixed, base_path)[:3]
        self.assertEqual(rc, 1, out + err)
        self.assertIn("NEW lstm-64-b.gz 0.5", out)
        self.assertIn("fixed lstm-128-a.gz 0.5", out)

    def test_runs_that_cannot_check_a_criterion_are_refused(self):
        no_dte = [r for r in met() if r["policy"] != "dte"]
        rc, out, err = self.run_script(no_dte)
        self.assertEqual(rc, 2, out)
        self.assertIn("dte did not", err)
        no_min = [dict(r, min_budget_ratio=None) for r in met()]
        rc, out, err = self.run_script(no_min)
        self.assertEqual(rc, 2, out)
        self.assertIn("--no-min", err)
        rc, out, err = self.run_script(no_min, "--no-min")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("0 violations", out)
        mixed = met()
        mixed[0]["engine"] = "lib"
        rc, out, err = self.run_script(mixed)
        self.assertEqual(rc, 2, out)
        self.assertIn("both engines", err)

    def test_no_min_skips_the_min_cells(self):
        rows = met()
        for r in rows:
            if r["policy"] == "coop":
                r["min_budget_ratio"] = 0.31  # worse than dtr's 0.3
        rc, out, err = self.run_script(rows, "--no-min")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("0 violations", out)

    def test_baseline(self):
        bad = met()
        bad[0]["overhead"] = 1.3
        base_path = run_on_rows(self, SCRIPT, bad)[3]
        # fixed since the baseline, nothing new: passes
        rc, out, err = run_on_rows(self, SCRIPT, met(), base_path)[:3]
        self.assertEqual(rc, 0, out + err)
        self.assertIn("fixed a.log.gz 0.9", out)
        # a baseline that cannot check the min criterion is refused like the results
        no_min = run_on_rows(self, SCRIPT, [dict(r, min_budget_ratio=None) for r in met()])[3]
        rc, out, err = run_on_rows(self, SCRIPT, met(), no_min)[:3]
        self.assertEqual(rc, 2, out + err)
        self.assertIn(f"{no_min}: no row has a min_budget_ratio", err)

    def test_ideal_rows_do_not_count(self):
        rows = met() + [row("coop", 0.9, overhead=1.5, memory="ideal")]
        self.violated(rows, 0)
        rows = met()
        rows[0]["overhead"] = 1.3
        rows.append(row("coop", 0.9, overhead=1.0, memory="ideal"))  # used to overwrite it
        self.violated(rows, 1)

    def test_bad_input(self):
        cases = {
            "not json": (None, "{oops\n", ":1: not a coop sim --json row"),
            "ok without overhead": ([row("coop", 0.9, overhead=None)], None, ":1: missing overhead"),
            "duplicate": ([row("coop", 0.9), row("coop", 0.9)], None, ":2: a second row"),
            "no arena rows": ([row("coop", 0.9, memory="ideal")], None, "no arena rows"),
            "empty": ([], None, "no arena rows"),
            # compared with other rows' numbers: tracebacks (TypeError) before
            "overhead a string": ([row("coop", 0.9, overhead="1.0")], None,
                                  ':1: overhead is "1.0", not a number'),
            "min ratio a string": ([row("coop", 0.9, min_ratio="0.3")], None,
                                   'min_budget_ratio is "0.3", not a number'),
            "overhead a bool": ([row("coop", 0.9, overhead=True)], None,
                                "overhead is true, not a number"),
        }
        for name, (rows, raw, says) in cases.items():
            rc, out, err = self.run_script(rows, raw=raw)
            self.assertEqual(rc, 2, name)
            self.assertIn(says, err, name)
            self.assertNotIn("Traceback", err, name)
        rc, _, err = self.run_script(met(), "--policy", "coop-lve")  # misspelt
        self.assertEqual(rc, 2)
        self.assertIn("no arena rows of policy coop-lve", err)
        rc, err = run_on_missing_file(SCRIPT)
        self.assertEqual(rc, 2)
        self.assertIn("/nonexistent.jsonl: No such file", err)

    def refused(self, rows, *says, raw=None):
        """rows (or raw) are refused in one line that says each of says."""
        rc, out, err = self.run_script(rows, raw=raw)
        self.assertEqual((rc, out), (2, ""), err)
        for text in says:
            self.assertIn(text, err)
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_fields_of_the_wrong_json_type_are_named(self):
        # each was a traceback (a log sorted with names, a dict as a key) or,
        # a ratio as a string, read as the number (float("0.9"))
        for key, value, says in (("log", 5, ":1: log is 5, not a non-empty string"),
                                 ("log", None, ":1: log is null"),
                                 ("policy", {"a": 1}, ':1: policy is {"a": 1}, not a non-empty'),
                                 ("memory", [1], ":1: memory is [1], not one of ideal, arena"),
                                 ("budget_ratio", "0.9", ':1: budget_ratio is "0.9", not a number'),
                                 ("min_budget_ratio", [0.3], ":1: min_budget_ratio is [0.3], not a "
                                  "number, nor null")):
            with self.subTest(key=key, value=value):
                self.refused([dict(met()[0], **{key: value})] + met()[1:], says)

    def test_unknown_results_and_memory_models_are_refused(self):
        # a result of 3 or "banana" counted as a failure, a memory model of
        # "Arena" as an ideal row: a verdict on a file coop never wrote
        for key, value in (("result", 3), ("result", "banana"), ("memory", "Arena"),
                           ("engine", "gpu")):
            with self.subTest(key=key, value=value):
                self.refused([dict(met()[0], **{key: value})] + met()[1:],
                             f":1: {key} is {json.dumps(value)}, not one of")

    def test_values_out_of_range_are_refused(self):
        # each was checked as given: a ratio of 5 or -0.5 was a cell, an
        # overhead of 0.5 beat every rival, a min ratio of -1 beat theirs
        for key, value, says in (("budget_ratio", 5, "not a ratio in (0, 1]"),
                                 ("budget_ratio", -0.5, "not a ratio in (0, 1]"),
                                 ("budget_ratio", 0, "not a ratio in (0, 1]"),
                                 ("overhead", 0.5, "below 1"),
                                 ("min_budget_ratio", -1, "not a ratio in [0, 1]"),
                                 ("min_budget_ratio", 1.5, "not a ratio in [0, 1]")):
            with self.subTest(key=key, value=value):
                self.refused([dict(met()[0], **{key: value})] + met()[1:],
                             f":1: {key} is {json.dumps(value)}, {says}")

    def test_numbers_no_float_holds_are_refused(self):
        # 1e400 reads as infinity (a cell of its own); 400 digits were an
        # OverflowError traceback in float()
        text = "".join(json.dumps(r) + "\n" for r in met())
        for key, big in (("budget_ratio", "1e400"), ("budget_ratio", "9" * 400),
                         ("overhead", "1e400"), ("min_budget_ratio", "-1e400")):
            with self.subTest(key=key, big=big[:8]):
                first, rest = text.split("\n", 1)
                first = json.dumps(dict(json.loads(first), **{key: "BIG"})).replace('"BIG"', big)
                self.refused(None, f":1: {key} is ", "out of range (no float holds it)",
                             raw=first + "\n" + rest)

    def test_rows_of_other_tools_are_named(self):
        replay = {"trace": "t.trace.gz", "policy": "coop", "peak_live_bytes": 10}
        self.refused(met() + [replay], ":7: a coop replay --json row, not a coop sim --json row")
        gpu = {"script": "oom_check", "summary": "environment"}
        self.refused([gpu] + met(), ":1: a scripts/gpu results row, not a coop sim --json row")
        # both engines: named at the first row of the second, not as a
        # second row of a cell
        self.refused([dict(r, engine="lib") for r in met()] + met()[:1],
                     ":7: rows of both engines (a sim row, lib at line 1)")

    def test_bytes_not_utf8_and_deep_nesting_are_bad_lines(self):
        # json_rows.py, shared with check_replay_criteria.py and plot_sim.py:
        # both used to end in a traceback (UnicodeDecodeError, RecursionError)
        good = ('{"log": "a.log.gz", "policy": "coop", "memory": "arena", '
                '"budget_ratio": 0.9, "result": "ok", "overhead": 1.0}\n').encode()
        for name, second, says in (("not utf-8", b'{"log": "\xff"}\n', "utf-8"),
                                   ("deep", b"[" * 100000 + b"\n", "recursion")):
            with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
                f.write(good + second)
            self.addCleanup(os.unlink, f.name)
            p = subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, name)
            self.assertIn(f"{f.name}:2: not a coop sim --json row", p.stderr, name)
            self.assertIn(says, p.stderr, name)
            self.assertNotIn("Traceback", p.stderr, name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
