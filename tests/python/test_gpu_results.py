#!/usr/bin/env python3
"""Holds coop's host-side figures to what a real GPU measured
(scripts/gpu/results/*/): the torch policy of `coop replay` (the emulation
of PyTorch's caching allocator) must give, to the byte, the peak reserved
that PyTorch's native allocator reached on the device for the same trace
(replay.jsonl), and the recorded policy must read, from each snapshot
recorded there (traces/*.cuda.pickle.gz), the peak reserved that PyTorch
itself reported while recording it (snapshots.jsonl). A training run's
whole allocation history (train_compare.py --snapshot), replayed through
the torch, coop and coop-segments policies, must give to the byte the peak
reserved each allocator reached in that training on the device
(histories.jsonl pairs a history and a policy with the run's line). Traces of
../shared/workloads are skipped, with the reason, where that folder is
absent (COOP_WORKLOADS names another). Standard library only; needs the
built ./coop."""

import glob
import json
import os
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
RESULTS = sorted(glob.glob(os.path.join(TOP, "scripts", "gpu", "results", "*")))
WORKLOADS = os.environ.get("COOP_WORKLOADS") or os.path.join(TOP, "..", "shared", "workloads")


def find_coop():
    for c in (os.path.join(os.getcwd(), "coop"), os.path.join(TOP, "coop")):
        if os.access(c, os.X_OK):
            return c
    return None


def result_rows(filename):
    """(results folder name, row) for every JSON line of filename in each
    results folder, at its top or in a call's subfolder."""
    for res in RESULTS:
        for path in sorted(glob.glob(os.path.join(res, "**", filename), recursive=True)):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        yield os.path.basename(res), json.loads(line)


def trace_path(name):
    """Where a trace of a results file is here: traces/ or the shared
    snapshots (None when absent)."""
    for d in (os.path.join(TOP, "traces"), os.path.join(WORKLOADS, "torch-snapshots")):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


class GpuResults(unittest.TestCase):
    def setUp(self):
        self.coop = find_coop()
        if self.coop is None:
            self.skipTest("no built ./coop")
        if not RESULTS:
            self.skipTest("no scripts/gpu/results/*")

    def replay(self, policy, *traces):
        """The rows of `coop replay --json --policy policy traces...`."""
        p = subprocess.run([self.coop, "replay", "--json", "--policy", policy, *traces],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]

    def test_torch_emulation_matches_the_native_allocator_on_the_device(self):
        checked = 0
        rows = list(result_rows("replay.jsonl"))
        native = [(res, r) for res, r in rows if r.get("allocator") == "native"]
        for res in {res for res, _ in rows}:
            self.assertIn(res, {n for n, _ in native}, f"{res}/replay.jsonl: no native rows")
        for res, r in native:
            with self.subTest(results=res, trace=r["trace"]):
                self.assertEqual(r["failed_allocs"], 0)
                trace = trace_path(r["trace"])
                if trace is None:
                    print(f"skip {r['trace']}: not in traces/ nor {WORKLOADS}/torch-snapshots")
                    continue
                (row,) = self.replay("torch", trace)
                self.assertEqual(row["peak_reserved_bytes"], r["peak_reserved_bytes"],
                                 f"{r['trace']}: torch emulation vs the device's native allocator")
                checked += 1
        print(f"{checked} traces: torch emulation equals the device's peak reserved")
        self.assertGreater(checked, 0)

    def test_expandable_emulation_matches_expandable_segments_on_the_device(self):
        """Traces replayed on the device through PyTorch's allocator with
        expandable_segments:True (replay_native_vs_coop.py --native-conf) give
        the torch-expandable emulation's peaks."""
        checked = 0
        for res in RESULTS:
            for path in sorted(glob.glob(os.path.join(res, "**", "replay_expandable.jsonl"),
                                         recursive=True)):
                with open(path) as f:
                    rows = [json.loads(x) for x in f if x.strip()]
                for r in rows:
                    if r.get("summary") or r.get("allocator") != "native":
                        continue
                    with self.subTest(results=os.path.basename(res), trace=r["trace"]):
                        self.assertIn("expandable_segments:true", r["native_conf"].lower())
                        self.assertEqual(r["failed_allocs"], 0)
                        trace = trace_path(r["trace"])
                        if trace is None:
                            print(f"skip {r['trace']}: not in traces/ nor "
                                  f"{WORKLOADS}/torch-snapshots")
                            continue
                        (row,) = self.replay("torch-expandable", trace)
                        self.assertEqual(row["peak_reserved_bytes"], r["peak_reserved_bytes"],
                                         f"{r['trace']}: emulation vs expandable segments")
                        checked += 1
        print(f"{checked} traces: torch-expandable equals the device's peak reserved")
        self.assertGreater(checked, 0)

    def test_training_histories_replay_to_the_devices_peaks(self):
        # the coop settings a policy stands for: the defaults but vmm
        settings = {"coop": "page:0,vmm:true,segment:0,placement:low,min_split:0",
                    "coop-segments": "page:0,vmm:false,segment:0,placement:low,min_split:0"}
        checked = 0
        for res in RESULTS:
            manifest = os.path.join(res, "histories.jsonl")
            if not os.path.exists(manifest):
                continue
            with open(manifest) as f:
                pairs = [json.loads(line) for line in f if line.strip()]
            for p in pairs:
                with self.subTest(results=os.path.basename(res), history=p["history"],
                                  policy=p["policy"]):
                    with open(os.path.join(res, p["run"])) as f:
                        runs = [r for r in map(json.loads, filter(str.strip, f))
                                if "summary" not in r and r.get("model") == p["model"]
                                and r.get("allocator") == p["allocator"]]
                    self.assertEqual(len(runs), 1, f"{p['run']}: one {p['model']} "
                                     f"{p['allocator']} run")
                    (run,) = runs
                    self.assertTrue(run["ok"])
                    if p["allocator"] == "native":
                        # the emulation of the settings the run had
                        expandable = "expandable_segments:true" in (run.get("native_conf")
                                                                    or "").lower()
                        self.assertEqual(p["policy"],
                                         "torch-expandable" if expandable else "torch")
                    else:
                        # a default was written 0 before it was written "default"
                        self.assertIn(settings[p["policy"]],
                                      run["coop_settings"].replace(":default", ":0"))
                    (row,) = self.replay(p["policy"], os.path.join(res, p["history"]))
                    self.assertEqual(row["peak_reserved_bytes"], run["peak_reserved_bytes"],
                                     f"{p['policy']} replay vs {p['allocator']} on the device")
                    checked += 1
        print(f"{checked} (history, policy) pairs: replay equals the device's peak reserved")
        self.assertGreater(checked, 0)

    def test_recorded_snapshots_read_back_as_recorded(self):
        checked = 0
        for res, r in result_rows("snapshots.jsonl"):
            name = os.path.basename(r["path"])
            with self.subTest(results=res, snapshot=name):
                trace = os.path.join(TOP, "traces", name)
                self.assertTrue(os.path.exists(trace), f"{name} is not in traces/")
                (row,) = self.replay("recorded", trace)
                self.assertEqual(row["peak_reserved_bytes"], r["max_reserved_bytes"])
                self.assertLessEqual(row["peak_live_bytes"], r["max_allocated_bytes"])
                checked += 1
        print(f"{checked} snapshots: recorded peak reserved equals PyTorch's own")
        self.assertGreater(checked, 0)

    def test_the_main_job_replays_the_gpu_snapshots_too(self):
        """`coop replay` with no trace: the CPU traces, then the GPU snapshots."""
        replayed = [row["trace"] for row in self.replay("ideal")]
        def bundled(pattern):
            return sorted(os.path.basename(f) for f in glob.glob(os.path.join(TOP, "traces", pattern)))

        cpu, gpu = bundled("*.trace.gz"), bundled("*.cuda.pickle.gz")
        self.assertTrue(cpu and gpu)
        self.assertEqual(replayed, cpu + gpu)


if __name__ == "__main__":
    unittest.main()
