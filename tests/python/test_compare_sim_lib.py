#!/usr/bin/env python3
"""Tests scripts/compare_sim_lib.py against a stand-in for coop that prints
given rows (or fails as told): rows are paired by budget ratio, a missing
row shows as missing, and a failing coop gives one line and exit 2 (bad
input) or 1. Standard library only; one check uses the built ./coop when
there is one."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "compare_sim_lib.py")

FAKE = """#!%s
import json, os, sys
spec = json.load(open(os.environ["FAKE_COOP_SPEC"]))
engine = "lib" if "--engine" in sys.argv else "sim"
s = spec[engine]
if "argv_file" in spec:
    with open(spec["argv_file"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stdout.write(s.get("stdout", "".join(json.dumps(r) + "\\n" for r in s.get("rows", []))))
sys.stderr.write(s.get("stderr", ""))
sys.exit(s.get("rc", 0))
""" % sys.executable


def row(ratio, result="ok", overhead=1.0, evictions=0, min_ratio=0.5):
    return {"log": "m-train-step.ops.jsonl.gz", "policy": "coop", "memory": "arena", "budget_ratio": ratio,
            "result": result, "overhead": overhead, "evictions": evictions, "min_budget_ratio": min_ratio}


class CompareSimLib(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.coop = os.path.join(self.dir.name, "coop")
        with open(self.coop, "w") as f:
            f.write(FAKE)
        os.chmod(self.coop, 0o755)

    def run_script(self, lib, sim, *extra, coop=None, budget="0.9,0.7,0.5"):
        spec = os.path.join(self.dir.name, "spec.json")
        self.argv_file = os.path.join(self.dir.name, "argv.jsonl")
        with open(spec, "w") as f:
            json.dump({"lib": lib, "sim": sim, "argv_file": self.argv_file}, f)
        env = dict(os.environ, FAKE_COOP_SPEC=spec)
        p = subprocess.run([sys.executable, SCRIPT, "--coop", coop or self.coop, "--policy", "coop",
                            "--budget", budget, *extra, "m-train-step.ops.jsonl.gz"],
                           capture_output=True, text=True, env=env)
        table = [line for line in p.stdout.splitlines() if line.startswith("| m (own)")]
        return p.returncode, table, p.stderr

    def test_rows_are_paired_by_ratio(self):
        lib = {"rows": [row(0.9, overhead=1.1, evictions=3), row(0.7, overhead=1.2, evictions=5), row(0.5, "oom")]}
        sim = {"rows": [row(0.5, "oom"), row(0.9, overhead=1.1, evictions=3), row(0.7, overhead=1.3, evictions=6)]}
        jsonl = os.path.join(self.dir.name, "rows.jsonl")
        rc, table, err = self.run_script(lib, sim, "--jsonl", jsonl)
        self.assertEqual((rc, err), (0, ""))
        cells = table[0].split(" | ")[2:5]
        self.assertEqual(cells, ["= 1.100/3", "1.200/5 / 1.300/6", "= oom"])
        with open(jsonl) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(sorted((r["engine"], r["budget_ratio"]) for r in rows),
                         [("lib", 0.5), ("lib", 0.7), ("lib", 0.9), ("sim", 0.5), ("sim", 0.7), ("sim", 0.9)])
        # each row carries its engine process's wall time, as the table's last columns
        walls = {e: {r["wall_s"] for r in rows if r["engine"] == e} for e in ("lib", "sim")}
        self.assertEqual([len(w) for w in walls.values()], [1, 1])
        lib_s, sim_s = (float(c) for c in table[0].rstrip(" |").split(" | ")[-2:])
        self.assertGreater(min(walls["lib"]), 0)
        self.assertAlmostEqual(min(walls["lib"]), lib_s, delta=0.006)
        self.assertAlmostEqual(min(walls["sim"]), sim_s, delta=0.006)
        # one process per engine, each given every ratio, without min ratios unless asked
        with open(self.argv_file) as f:
            runs = [json.loads(line) for line in f]
        self.assertEqual(len(runs), 2)
        for argv in runs:
            self.assertEqual(argv[argv.index("--budget") + 1], "0.9,0.7,0.5")
            self.assertIn("--no-min-ratio", argv)
        self.assertIn("--engine", runs[0])
        self.assertIn("arena", runs[1])

    def test_unwritable_jsonl_is_refused_before_any_run(self):
        # a FileNotFoundError traceback after every run before
        jsonl = os.path.join(self.dir.name, "none", "rows.jsonl")
        rc, table, err = self.run_script({"rows": [row(0.9)]}, {"rows": [row(0.9)]}, "--jsonl", jsonl)
        self.assertEqual((rc, table), (2, []))
        self.assertIn("--jsonl %s: No such file or directory" % jsonl, err)
        self.assertNotIn("Traceback", err)

    def test_missing_row_shows_as_missing(self):
        lib = {"rows": [row(0.9, overhead=1.1, evictions=3), row(0.7, overhead=1.2, evictions=5), row(0.5, "oom")]}
        sim = {"rows": [row(0.9, overhead=1.1, evictions=3), row(0.5, "oom")]}
        rc, table, err = self.run_script(lib, sim)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(table[0].split(" | ")[2:5], ["= 1.100/3", "1.200/5 / missing", "= oom"])
        # a ratio neither engine has a row for is missing on both sides
        rc, table, err = self.run_script(lib, sim, budget="0.9,0.3")
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(table[0].split(" | ")[2:4], ["= 1.100/3", "missing / missing"])

    def test_min_ratio_columns(self):
        lib = {"rows": [row(r, min_ratio=0.4) for r in (0.9, 0.7, 0.5)]}
        sim = {"rows": [row(r, min_ratio=None) for r in (0.5, 0.7, 0.9)]}
        rc, table, _ = self.run_script(lib, sim, "--min-ratio")
        self.assertEqual(rc, 0)
        self.assertEqual(table[0].split(" | ")[5:7], ["0.4000", "-"])
        with open(self.argv_file) as f:
            self.assertFalse(any("--no-min-ratio" in json.loads(line) for line in f))

    def assertOneLine(self, err, *fragments):
        self.assertNotIn("Traceback", err)
        self.assertEqual(len(err.splitlines()), 1, err)
        for f in fragments:
            self.assertIn(f, err)

    def test_coop_refuses_the_log(self):
        refuse = {"rc": 2, "stderr": "coop sim: m-train-step.ops.jsonl.gz:3: field ARGS is not an array\n"}
        rc, table, err = self.run_script(refuse, {"rows": [row(0.9)]})
        self.assertEqual((rc, table), (2, []))
        self.assertOneLine(err, "compare_sim_lib.py: coop sim (lib engine, policy coop) on m-train-step.ops.jsonl.gz",
                           "failed (exit 2)", ":3: field ARGS is not an array")

    def test_coop_run_fails(self):
        jsonl = os.path.join(self.dir.name, "rows.jsonl")
        rc, _, err = self.run_script({"rows": [row(0.9)]},
                                     {"rc": 1, "stderr": "coop sim: reading\ncoop sim: out of memory\n"},
                                     "--jsonl", jsonl)
        self.assertEqual(rc, 1)
        self.assertOneLine(err, "sim engine", "failed (exit 1): coop sim: out of memory")
        self.assertFalse(os.path.exists(jsonl))  # no rows of a run that failed
        self.assertEqual(os.listdir(self.dir.name).count("rows.jsonl"), 0)

    def test_a_failed_run_keeps_the_previous_jsonl(self):
        # it was emptied at the start and removed at the end
        jsonl = os.path.join(self.dir.name, "rows.jsonl")
        with open(jsonl, "w") as f:
            f.write("the previous rows\n")
        before = sorted(os.listdir(self.dir.name))
        rc, _, err = self.run_script({"rows": [row(0.9)]}, {"rc": 1, "stderr": "coop sim: out of memory\n"},
                                     "--jsonl", jsonl)
        self.assertEqual(rc, 1, err)
        with open(jsonl) as f:
            self.assertEqual(f.read(), "the previous rows\n")
        # no temporary file left (the stand-in's argv file is new)
        self.assertEqual(sorted(set(os.listdir(self.dir.name)) - {"spec.json", "argv.jsonl"}),
                         sorted(set(before) - {"spec.json", "argv.jsonl"}))
        # a run that succeeds replaces it
        rc, _, err = self.run_script({"rows": [row(0.9)]}, {"rows": [row(0.9)]}, "--jsonl", jsonl,
                                     budget="0.9")
        self.assertEqual(rc, 0, err)
        with open(jsonl) as f:
            self.assertEqual([json.loads(line)["engine"] for line in f], ["lib", "sim"])

    def test_a_nan_row_is_not_passed_on(self):
        # json.loads reads NaN, and json.dumps wrote it into --jsonl: not JSON
        jsonl = os.path.join(self.dir.name, "rows.jsonl")
        nan_row = json.dumps(row(0.9)).replace('"overhead": 1.0', '"overhead": NaN') + "\n"
        rc, _, err = self.run_script({"stdout": nan_row}, {"rows": [row(0.9)]}, "--jsonl", jsonl,
                                     budget="0.9")
        self.assertEqual(rc, 1)
        self.assertOneLine(err, "output line 1 is not a coop sim --json row (NaN is not JSON)")
        self.assertFalse(os.path.exists(jsonl))

    def test_bad_budget_is_refused(self):
        rc, table, err = self.run_script({"rows": [row(0.9)]}, {"rows": [row(0.9)]}, budget="0.9,half")
        self.assertEqual((rc, table), (2, []))
        self.assertIn("--budget: not a list of numbers: '0.9,half'", err)
        self.assertFalse(os.path.exists(self.argv_file))  # before any run

    def test_log_names_in_the_table(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        try:
            import compare_sim_lib
        finally:
            sys.path.pop(0)
        self.assertEqual(compare_sim_lib.short("resnet32-default.log.gz"), "resnet32")
        self.assertEqual(compare_sim_lib.short("gpt-train-step.ops.jsonl.gz"), "gpt (own)")
        self.assertEqual(compare_sim_lib.short("lstm-b.log.gz"), "lstm-b.log.gz")

    def test_no_coop_binary(self):
        rc, _, err = self.run_script({}, {}, coop=os.path.join(self.dir.name, "nothing"))
        self.assertEqual(rc, 2)
        self.assertOneLine(err, "cannot run")

    def test_output_not_rows(self):
        for lib, fragment in (({"stdout": "log policy ratio\n"}, "output line 1 is not a coop sim --json row"),
                              ({"stdout": json.dumps({"result": "ok"}) + "\n"},
                               "output line 1: missing log, policy, memory, budget_ratio, overhead"),
                              ({"rows": [row(0.9), row(0.9)]}, "two rows for budget ratio 0.9"),
                              ({"rows": []}, "printed no rows")):
            with self.subTest(lib=lib):
                rc, _, err = self.run_script(lib, {"rows": [row(0.9)]})
                self.assertEqual(rc, 1)
                self.assertOneLine(err, fragment)

    def test_rows_coop_sim_never_prints_are_refused(self):
        # each was a KeyError traceback in the table's cells, or (a result of
        # "banana") a cell drawn from it
        no_evictions = row(0.9)
        del no_evictions["evictions"]
        no_min = row(0.9)
        del no_min["min_budget_ratio"]
        for lib, extra, fragment in (
                ([dict(row(0.9), result="banana")], (), 'result is "banana", not one of'),
                ([dict(row(0.9), overhead="1.0")], (), 'overhead is "1.0", not a number'),
                ([dict(row(0.9), log=7)], (), "log is 7, not a non-empty string"),
                ([no_evictions], (), "missing evictions"),
                ([no_min], ("--min-ratio",), "missing min_budget_ratio")):
            with self.subTest(fragment=fragment):
                rc, table, err = self.run_script({"rows": lib}, {"rows": [row(0.9)]}, *extra,
                                                 budget="0.9")
                self.assertEqual((rc, table), (1, []))
                self.assertOneLine(err, "(lib engine, policy coop)", "output line 1: " + fragment)

    def test_real_coop_refuses_a_missing_log(self):
        coop = next((c for c in (os.path.join(os.getcwd(), "coop"), os.path.join(HERE, "..", "..", "coop"))
                     if os.access(c, os.X_OK)), None)
        if coop is None:
            self.skipTest("no built coop")
        missing = os.path.join(self.dir.name, "missing.ops.jsonl.gz")
        p = subprocess.run([sys.executable, SCRIPT, "--coop", coop, "--policy", "coop", missing],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertOneLine(p.stderr, "missing.ops.jsonl.gz", "failed (exit 2)")


if __name__ == "__main__":
    unittest.main(verbosity=1)
