#!/usr/bin/env python3
"""Checks issue 3's arena criteria on `coop sim --json` output.

A cell is (log, budget ratio) or (log, "min"). It is violated when:
  - coop fails (oom / thrash) where dtr or dte succeeds, or coop's overhead
    is above dtr's or dte's + 0.005 where they succeed;
  - "min": coop's min_budget_ratio is above dtr's or dte's where theirs
    exists (coop having none while they have one counts too).

Usage: check_sim_criteria.py RESULTS.jsonl [BASELINE.jsonl]
       [--policy P] (the policy checked, default coop, whose cost is c_live;
       coop-comp for its former cost c_comp, coop-eq, ...)
       [--no-min] (check the budget cells alone: for a --no-min-ratio run)
Only arena rows count (ideal ones are skipped). Cells are per log file (two
logs whose model names agree stay two cells). A cell where dtr or dte has
a row and the checked policy has none is violated ("missing"), so a partial
run or a misspelt --policy cannot pass; a log the checked policy ran but dtr
or dte did not is bad input, as is a file where no row has a
min_budget_ratio (unless --no-min: coop sim prints null both for "not
computed" and for "infeasible even at 1") or rows of both engines (sim and
lib). Prints every violated cell; with a baseline, also the cells that
started or stopped failing. Exit status 1 when any cell is violated, or
(with a baseline) when a cell passing in the baseline fails; 2 on bad input
(an unreadable file, a malformed or duplicate row, no arena rows, or none of
the checked policy). A row is malformed when it breaks json_rows.SIM_ROW: a
result other than ok, oom, thrash and error (an error row counts as a
failure, as oom), a memory model other than ideal and arena, a budget ratio
outside (0, 1], an overhead below 1, a min_budget_ratio outside [0, 1], ...

The results come from, e.g.:
  ./coop sim --json --memory arena --policy coop,dtr,dte \\
      --budget 0.9,0.8,0.7,0.6,0.5,0.4,0.3 ../shared/workloads/dtr-logs/*.gz \\
      traces/*.ops.jsonl.gz
"""
import argparse
import sys

import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import json_rows

SLACK = 0.005
RIVALS = ("dtr", "dte")


def die(message):
    json_rows.die("check_sim_criteria", message)


def load(path):
    """{(log, policy, ratio): row} of the arena rows; every row, ideal ones
    too, is held to json_rows.SIM_ROW."""
    rows, first = {}, None
    for n, r in json_rows.json_rows(path, "check_sim_criteria", "not a coop sim --json row",
                                    json_rows.sim_row_error, table_of="coop sim"):
        # named here, before the second row of a cell the other engine gives
        engine = r.get("engine", "sim")
        first = first or (engine, n)
        if engine != first[0]:
            die(f"{path}:{n}: rows of both engines (a {engine} row, {first[0]} at line "
                f"{first[1]}): check one at a time")
        if r["memory"] != "arena":
            continue
        key = (r["log"], r["policy"], round(r["budget_ratio"], 4))
        if key in rows:
            die(f"{path}:{n}: a second row for {key[0]} {key[1]} at {key[2]:g}")
        rows[key] = r
    if not rows:
        die(f"{path}: no arena rows")
    return rows


def short(log):
    """The model's name; the project's own traces marked (own), since both
    sets have an lstm."""
    name = log.split("/")[-1].split("-")[0]
    return name + " (own)" if log.endswith(".ops.jsonl.gz") else name


def fmt(r):
    return f"{r['overhead']:.3f}" if r["result"] == "ok" else r["result"]


def label(log, logs):
    """How a cell's log is printed: the model's name, or the whole log name
    where two logs of the run share it."""
    name = short(log)
    return name if sum(short(other) == name for other in logs) == 1 else log


def violations(rows, policy, check_min=True):
    """{(log, ratio or "min"): description} of the violated cells."""
    out = {}
    logs = sorted({k[0] for k in rows if k[1] in (policy,) + RIVALS})
    for log in logs:
        if any(k[0] == log and k[1] == policy for k in rows):
            for rival in RIVALS:
                if not any(k[0] == log and k[1] == rival for k in rows):
                    die(f"{log}: {policy} ran it, {rival} did not: the criteria compare "
                        f"{policy} with {' and '.join(RIVALS)} (a partial run cannot pass)")
        ratios = sorted({k[2] for k in rows if k[0] == log and k[1] in (policy,) + RIVALS},
                        reverse=True)
        for ratio in ratios:
            me = rows.get((log, policy, ratio))
            why = []
            for rival in RIVALS:
                r = rows.get((log, rival, ratio))
                if not r:
                    continue
                if me is None:  # whatever the rival's result: a partial run cannot pass
                    why.append(f"{policy} missing vs {rival} {fmt(r)}")
                elif r["result"] != "ok":
                    continue
                elif me["result"] != "ok" or me["overhead"] > r["overhead"] + SLACK:
                    why.append(f"{policy} {fmt(me)} vs {rival} {fmt(r)}")
            if why:
                out[(log, f"{ratio:g}")] = "; ".join(why)
        if not check_min:
            continue
        mine = min_ratio(rows, log, policy)
        why = []
        for rival in RIVALS:
            theirs = min_ratio(rows, log, rival)
            if theirs is None:
                continue
            if mine is None or mine > theirs:
                why.append(f"{policy} min {mine} vs {rival} {theirs}")
        if why:
            out[(log, "min")] = "; ".join(why)
    return out


def min_ratio(rows, log, policy):
    """policy's min_budget_ratio on log, from any of its rows (one run gives
    every row the same); None where no row has one."""
    found = [r["min_budget_ratio"] for k, r in rows.items()
             if k[0] == log and k[1] == policy and r.get("min_budget_ratio") is not None]
    return min(found) if found else None


def check_has_min(rows, path, no_min):
    """Unless no_min: some row must carry a min_budget_ratio, or the min
    criterion would pass unchecked."""
    if not no_min and all(r.get("min_budget_ratio") is None for r in rows.values()):
        die(f"{path}: no row has a min_budget_ratio (a --no-min-ratio run?): pass --no-min "
            "to check the budget cells alone")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("baseline", nargs="?")
    ap.add_argument("--policy", default="coop")
    ap.add_argument("--no-min", action="store_true",
                    help="skip the min_budget_ratio criterion (a --no-min-ratio run)")
    a = ap.parse_args()
    rows = load(a.results)
    if not any(k[1] == a.policy for k in rows):
        die(f"{a.results}: no arena rows of policy {a.policy}")
    check_has_min(rows, a.results, a.no_min)
    now = violations(rows, a.policy, not a.no_min)
    logs = {k[0] for k in rows}
    if a.baseline:
        base_rows = load(a.baseline)
        check_has_min(base_rows, a.baseline, a.no_min)
        base = violations(base_rows, a.policy, not a.no_min)
        logs |= {k[0] for k in base_rows}

    def name(cell):
        return f"{label(cell[0], logs)} {cell[1]}"

    for cell, why in sorted(now.items(), key=lambda c: name(c[0])):
        print(f"violation {name(cell)}: {why}")
    print(f"{len(now)} violations")
    worse = False
    if a.baseline:
        fixed = sorted(set(base) - set(now), key=name)
        new = sorted(set(now) - set(base), key=name)
        for cell in fixed:
            print(f"fixed {name(cell)}")
        for cell in new:
            print(f"NEW {name(cell)}: {now[cell]}")
        worse = bool(new)
    return 1 if now or worse else 0


if __name__ == "__main__":
    sys.exit(main())
