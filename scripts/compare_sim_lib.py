#!/usr/bin/env python3
"""Runs `coop sim` with both engines on the same logs and tabulates them.

For each log and policy: `coop sim --engine lib` (the remat API driven by
the log) and `coop sim --memory arena` (the simulator's arena model), both
with --no-min-ratio unless --min-ratio, each one process over every budget
ratio, timed by wall clock around the process. Prints a Markdown table: per
ratio "lib / sim", each the result or overhead/evictions, or "= X" where
both read X; with --min-ratio then the min_budget_ratio of each engine
(same bisection, tolerance 0.005; "-" where even ratio 1 fails); then the
seconds each engine's process took for the log and policy (with
--min-ratio, the bisection's runs included).

Usage: compare_sim_lib.py [--coop PATH] [--policy LIST] [--budget LIST]
       [--min-ratio] [--jsonl OUT] LOG ...
--jsonl writes every row (both engines, with "engine" and "wall_s").
"""
import argparse
import json
import os
import subprocess
import sys
import time


def run(coop, engine, policy, budget, log, min_ratio):
    args = [coop, "sim", "--json", "--policy", policy, "--budget", budget]
    args += ["--engine", "lib"] if engine == "lib" else ["--memory", "arena"]
    if not min_ratio:
        args.append("--no-min-ratio")
    t0 = time.monotonic()
    out = subprocess.run(args + [log], check=True, capture_output=True, text=True).stdout
    wall = time.monotonic() - t0
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    for r in rows:
        r["engine"] = engine
        r["wall_s"] = wall
    return rows, wall


def cell(r):
    if r["result"] != "ok":
        return r["result"]
    return "%.3f/%d" % (r["overhead"], r["evictions"])


def min_cell(r):
    m = r["min_budget_ratio"]
    return "-" if m is None else "%.4f" % m


def short(name):
    """resnet32 for a DTR log, resnet50 (own) for the project's traces."""
    if name.endswith("-train-step.ops.jsonl.gz"):
        return name[: -len("-train-step.ops.jsonl.gz")] + " (own)"
    return name.split("-")[0] if name.endswith("-default.log.gz") else name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coop", default=os.path.join(os.path.dirname(__file__), "..", "coop"))
    ap.add_argument("--policy", default="coop,coop-comp,coop-eq,dtr,dte")
    ap.add_argument("--budget", default="0.9,0.7,0.5,0.3")
    ap.add_argument("--min-ratio", action="store_true",
                    help="also bisect min_budget_ratio with each engine")
    ap.add_argument("--jsonl")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    ratios = a.budget.split(",")
    mins = " min ratio lib | min ratio sim |" if a.min_ratio else ""
    print("| log | policy | " + " | ".join(ratios) + " |" + mins + " lib s | sim s |")
    print("|---|---|" + "---|" * len(ratios) + ("---|---|" if a.min_ratio else "") + "---|---|")
    every = []
    for log in a.logs:
        for policy in a.policy.split(","):
            lib, lib_s = run(a.coop, "lib", policy, a.budget, log, a.min_ratio)
            sim, sim_s = run(a.coop, "sim", policy, a.budget, log, a.min_ratio)
            every += lib + sim
            cells = []
            for x, y in zip(lib, sim):
                same = cell(x) == cell(y)
                cells.append("= " + cell(x) if same else "%s / %s" % (cell(x), cell(y)))
            if a.min_ratio:
                cells += [min_cell(lib[0]), min_cell(sim[0])]
            print("| %s | %s | %s | %.2f | %.2f |"
                  % (short(lib[0]["log"]), policy, " | ".join(cells), lib_s, sim_s))
            sys.stdout.flush()
    if a.jsonl:
        with open(a.jsonl, "w") as f:
            for r in every:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
