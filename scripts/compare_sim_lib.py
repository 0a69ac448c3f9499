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
--jsonl writes every row (both engines, with "engine" and "wall_s"); the
file appears only when every run succeeded (scripts/atomic_file.py), so a
failed run leaves the one that was there.

The two engines' rows are paired by budget_ratio; a ratio that one engine
has no row for shows "missing" on that side. Each row is held to
json_rows.SIM_ROW, with its evictions (and min_budget_ratio with
--min-ratio): a --coop that prints other rows fails in one line, exit 1. When coop fails (a log it
refuses, a missing binary) or prints what is not one row per ratio, the
script says so in one line on stderr (with coop's own last line) and exits
2 when the input was bad (coop's status 2, a missing binary), 1 otherwise.
"""
import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time

import atomic_file
import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import json_rows


class Discard(Exception):
    """Ends a run whose rows are not written; status is the exit status."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


class Failure(Exception):
    """A run that gave no usable rows; status is the script's exit status."""

    def __init__(self, msg, status):
        super().__init__(msg)
        self.status = status


def run(coop, engine, policy, budget, log, min_ratio):
    """coop sim's rows, keyed by budget ratio (rounded to 6 places), and
    the process's wall seconds; raises Failure."""
    args = [coop, "sim", "--json", "--policy", policy, "--budget", budget]
    args += ["--engine", "lib"] if engine == "lib" else ["--memory", "arena"]
    if not min_ratio:
        args.append("--no-min-ratio")
    what = "coop sim (%s engine, policy %s) on %s" % (engine, policy, log)
    t0 = time.monotonic()
    try:
        p = subprocess.run(args + [log], capture_output=True, text=True)
    except OSError as e:
        raise Failure("cannot run %s: %s" % (coop, e), 2)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise Failure("%s failed (exit %d): %s" % (what, p.returncode, last), 2 if p.returncode == 2 else 1)
    rows = {}
    # the table reads evictions, and with min_ratio the min_budget_ratio
    need = ["evictions"] + (["min_budget_ratio"] if min_ratio else [])
    for n, line in enumerate(p.stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            # NaN and Infinity are not JSON (RFC 8259): no row to pass on into --jsonl
            r = json.loads(line, parse_constant=json_rows.no_constant)
        except (ValueError, RecursionError) as e:
            raise Failure("%s: output line %d is not a coop sim --json row (%s)" % (what, n, e), 1)
        if not isinstance(r, dict):
            why = "a JSON %s, not an object" % type(r).__name__
        else:
            why = json_rows.sim_row_error(r) or next(("missing %s" % k for k in need if k not in r), None)
        if why:
            raise Failure("%s: output line %d: %s" % (what, n, why), 1)
        ratio = round(r["budget_ratio"], 6)
        if ratio in rows:
            raise Failure("%s: two rows for budget ratio %g" % (what, ratio), 1)
        r["engine"] = engine
        r["wall_s"] = wall
        rows[ratio] = r
    if not rows:
        raise Failure("%s printed no rows" % what, 1)
    return rows, wall


def cell(r):
    if r is None:
        return "missing"
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


def ratio_key(text):
    try:
        return round(float(text), 6)
    except ValueError:
        return None


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
    if any(ratio_key(r) is None for r in ratios):
        ap.error("--budget: not a list of numbers: %r" % a.budget)
    if not a.jsonl:
        with open(os.devnull, "w") as out:
            return compare(a, ratios, out)
    # the rows go to a temporary file beside --jsonl, renamed over it only
    # when every run succeeded: a failed run leaves the previous file (it
    # was emptied at the start, then removed)
    try:
        with contextlib.ExitStack() as stack:
            try:  # now, not after minutes of runs
                raw = stack.enter_context(atomic_file.replacing(a.jsonl))
            except OSError as e:
                ap.error("--jsonl %s: %s" % (a.jsonl, e.strerror or e))
            out = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            status = compare(a, ratios, out)
            out.flush()
            out.detach()  # raw is replacing's to close
            if status:
                raise Discard(status)
    except Discard as d:
        return d.status
    except OSError as e:  # writing or renaming --jsonl
        print("compare_sim_lib.py: --jsonl %s: %s" % (a.jsonl, e.strerror or e), file=sys.stderr)
        return 1
    return status


def compare(a, ratios, jsonl):
    """Runs and tabulates; writes every row to jsonl; the exit status."""
    mins = " min ratio lib | min ratio sim |" if a.min_ratio else ""
    print("| log | policy | " + " | ".join(ratios) + " |" + mins + " lib s | sim s |")
    print("|---|---|" + "---|" * len(ratios) + ("---|---|" if a.min_ratio else "") + "---|---|")
    every = []
    for log in a.logs:
        for policy in a.policy.split(","):
            try:
                lib, lib_s = run(a.coop, "lib", policy, a.budget, log, a.min_ratio)
                sim, sim_s = run(a.coop, "sim", policy, a.budget, log, a.min_ratio)
            except Failure as e:
                sys.stdout.flush()
                print("compare_sim_lib.py: %s" % e, file=sys.stderr)
                return e.status
            every += list(lib.values()) + list(sim.values())
            cells = []
            for ratio in map(ratio_key, ratios):
                x, y = lib.get(ratio), sim.get(ratio)
                same = x is not None and y is not None and cell(x) == cell(y)
                cells.append("= " + cell(x) if same else "%s / %s" % (cell(x), cell(y)))
            # every row of one run carries the log's name and min_budget_ratio
            lib_any, sim_any = next(iter(lib.values())), next(iter(sim.values()))
            if a.min_ratio:
                cells += [min_cell(lib_any), min_cell(sim_any)]
            print("| %s | %s | %s | %.2f | %.2f |"
                  % (short(lib_any["log"]), policy, " | ".join(cells), lib_s, sim_s))
            sys.stdout.flush()
    for r in every:
        jsonl.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
