#!/usr/bin/env python3
"""Checks `coop replay --json` output against the replay issue's done criteria.

Usage:
  coop replay --json traces/*.trace.gz ../shared/workloads/torch-snapshots/*.gz > main.jsonl
  coop replay --json --page 512 ../shared/workloads/minimalloc/*.csv > minimalloc.jsonl
  scripts/check_replay_criteria.py main.jsonl [--minimalloc minimalloc.jsonl]

Per trace of main.jsonl (each needs coop, torch and jemalloc rows; snapshots, the
.pickle and .pickle.gz files, also a recorded row):
  capacity  coop min_capacity_bytes <= 1.02 x peak_live_bytes
  map       coop map_bytes <= 2 x peak_live_bytes
  vs-torch  coop min_capacity_bytes < torch's (and < recorded's where present)
  speed     coop ns_per_op <= jemalloc's (same run)
  torch-rec torch peak_reserved_bytes within 5% of recorded's (snapshots only; fails
            without comparing when the row's torch_settings_default is false: torch
            emulates PyTorch's default allocator settings only)
Per minimalloc CSV: coop min_capacity_bytes <= jemalloc's, and every policy's figure
against the offline optimum in the file name (A.1048576.csv: 1,048,576 bytes).

A figure a check needs that is null fails that check. Prints one line per check and a
summary; exits 1 if any check fails, 2 on bad input (no rows, a missing row, a zero
recorded peak, a --minimalloc row of a trace that is not a .csv or .csv.gz, a row
that breaks json_rows.REPLAY_ROW: a missing figure, a byte count
that is negative, fractional or past 2^64, a recorded_by_coop that is not a boolean...).
"""
import argparse
import json
import re
import sys

import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import json_rows


def die(message):
    json_rows.die("check_replay_criteria", message)


def load(path):
    """{trace: {policy: row}}, each row held to json_rows.REPLAY_ROW, and
    {(trace, policy): its line number}."""
    rows, lines = {}, {}
    for lineno, r in json_rows.json_rows(path, "check_replay_criteria",
                                         "not a coop replay JSON row", json_rows.replay_row_error):
        mine = rows.setdefault(r["trace"], {})
        if r["policy"] in mine:
            # rows name traces by file name: two folders' traces of one
            # name would overwrite each other
            die(f"{path}:{lineno}: a second {r['policy']} row for {r['trace']} "
                f"({r.get('path') or 'two traces of that name?'}: check them in "
                "separate runs)")
        mine[r["policy"]] = r
        lines[r["trace"], r["policy"]] = lineno
        if not r["peak_live_bytes"]:  # every figure is held to it
            die(f"{path}:{lineno}: peak_live_bytes is 0, nothing to compare with")
    return rows, lines


MINIMALLOC_CSV = re.compile(r"\.csv(\.gz)?$")  # coop reads a .gz transparently


def is_snapshot(trace):
    return trace.endswith(".pickle") or trace.endswith(".pickle.gz")


def ratio(value, base):
    """value / base - 1, or None where value is missing (base is checked nonzero)."""
    return None if value is None else value / base - 1


def need(rows, trace, policy, path):
    if policy not in rows[trace]:
        die(f"{path}: no {policy} row for {trace} (run coop replay with the default policies)")
    return rows[trace][policy]


def main():
    # the criteria and the exit status too, not the first line alone
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("main", help="coop replay --json output for traces and snapshots "
                    "('-': standard input)")
    ap.add_argument("--minimalloc", help="coop replay --json --page 512 output for the CSVs "
                    "('-': standard input)")
    args = ap.parse_args()

    results = []  # (ok, text)

    def check(ok, text):
        results.append((ok, text))
        print(("ok   " if ok else "FAIL ") + text)

    rows, lines = load(args.main)
    if not rows:
        die(f"{args.main}: no rows (run coop replay --json)")
    # --minimalloc read and held to its kind before any verdict: the main
    # file (or a snapshot's rows) given there was checked as CSVs and passed
    mrows = load(args.minimalloc)[0] if args.minimalloc else None
    if mrows is not None and not mrows:
        die(f"{args.minimalloc}: no rows (run coop replay --json --page 512)")
    minimalloc = []  # (trace, coop row, jemalloc row), checked below
    for trace in sorted(mrows or {}):
        if not MINIMALLOC_CSV.search(trace):
            die(f"{args.minimalloc}: {trace} is not a minimalloc CSV (run coop replay --json "
                "--page 512 on minimalloc's .csv files)")
        minimalloc.append((trace, need(mrows, trace, "coop", args.minimalloc),
                           need(mrows, trace, "jemalloc", args.minimalloc)))
    for trace in sorted(rows):  # every row a check needs, before any verdict
        need(rows, trace, "coop", args.main)
        torch = need(rows, trace, "torch", args.main)
        need(rows, trace, "jemalloc", args.main)
        if is_snapshot(trace):
            need(rows, trace, "recorded", args.main)
        if ("recorded" in rows[trace] and not torch.get("recorded_by_coop")
                and torch.get("torch_settings_default") is not False):
            rec = rows[trace]["recorded"]["peak_reserved_bytes"]
            if not rec:  # torch's is compared with it, as a ratio
                die(f"{args.main}:{lines[trace, 'recorded']}: the recorded row of {trace} has no "
                    f"peak_reserved_bytes ({json.dumps(rec)}), which torch's is compared with")
    for trace in sorted(rows):
        coop = rows[trace]["coop"]
        torch, jem = rows[trace]["torch"], rows[trace]["jemalloc"]
        live = coop["peak_live_bytes"]
        cap = coop["min_capacity_bytes"]
        if cap is None:
            check(False, f"{trace}: coop has no minimum capacity (does not fit --capacity)")
            continue
        check(cap <= 1.02 * live, f"{trace}: capacity coop {cap / live:.4f} x peak live (<= 1.02)")
        mapped = coop["map_bytes"]
        check(mapped is not None and mapped <= 2 * live,
              f"{trace}: map coop {'null' if mapped is None else f'{mapped / live:.4f}'}"
              " x peak live (<= 2)")
        rivals = [("torch", torch)]
        # a snapshot coop.torch wrote: its recorded row is coop's own reservation
        by_coop = bool(torch.get("recorded_by_coop"))
        if "recorded" in rows[trace] and not by_coop:
            rivals.append(("recorded", rows[trace]["recorded"]))
        for name, r in rivals:
            other = r["min_capacity_bytes"]
            check(other is not None and cap < other,
                  f"{trace}: vs-{name} coop {cap:,} < {name} {other if other is None else f'{other:,}'}")
        cns, jns = coop["ns_per_op"], jem["ns_per_op"]
        check(cns is not None and jns is not None and cns <= jns,
              f"{trace}: speed coop {cns} <= jemalloc {jns} ns/op")
        if "recorded" in rows[trace] and by_coop:
            check(False, f"{trace}: torch-rec not comparable: recorded by coop, not PyTorch")
        elif "recorded" in rows[trace] and torch.get("torch_settings_default") is False:
            check(False, f"{trace}: torch-rec not comparable: the snapshot's allocator settings "
                         "are not PyTorch's defaults, which torch emulates")
        elif "recorded" in rows[trace]:
            rec = rows[trace]["recorded"]["peak_reserved_bytes"]  # not 0: checked above
            diff = ratio(torch["peak_reserved_bytes"], rec)
            check(diff is not None and abs(diff) <= 0.05,
                  f"{trace}: torch-rec torch peak reserved "
                  f"{'null' if diff is None else f'{diff:+.2%}'} vs recorded (within 5%)")

    for trace, coop, jem in minimalloc:
        m = re.search(r"\.(\d+)\.csv", trace)
        optimum = int(m.group(1)) if m else None
        cap, jcap = coop["min_capacity_bytes"], jem["min_capacity_bytes"]
        check(cap is not None and jcap is not None and cap <= jcap,
              f"{trace}: minimalloc coop {cap} <= jemalloc {jcap}")
        if optimum:
            figures = ", ".join(
                f"{p} {r['min_capacity_bytes'] / optimum:.4f}"
                for p, r in sorted(mrows[trace].items())
                if r.get("min_capacity_bytes") is not None)
            print(f"     {trace}: min capacity / offline optimum {optimum:,}: {figures}")

    failed = sum(1 for ok, _ in results if not ok)
    print(f"{len(results) - failed} checks passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
