#!/usr/bin/python3
"""Plot `coop sim --json` results: overhead vs budget ratio, one line per
policy, one panel per log (and memory model). Runs that thrashed, ran out
of memory or failed (result "error") are drawn as crosses at the top of the
panel. A row that is not a coop sim row (json_rows.SIM_ROW), or a second row
of one log, memory model, policy and ratio, is refused.
Exits 2, with one line, on bad input or an OUT that cannot be written or is
the results file itself; 1 when the python3 running it has no matplotlib.

usage: coop sim --json ... > sim.jsonl
       scripts/plot_sim.py sim.jsonl out.png [--title TEXT]
"""
import argparse
import math
import os

import atomic_file
import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import json_rows
import pyplot_agg

plt = pyplot_agg.pyplot("plot_sim.py")


def die(message):
    json_rows.die("plot_sim", message)


def load(path):
    """The rows of path, each held to json_rows.SIM_ROW. Two rows of one
    log, memory model, policy and ratio (to 4 places, as
    check_sim_criteria.py) would both be drawn, the line zigzagging between
    them: refused, as are rows of both engines (compare_sim_lib.py --jsonl),
    whose lines would share a policy's name."""
    rows, seen, first = [], {}, None
    for n, row in json_rows.json_rows(path, "plot_sim", "not a coop sim --json row",
                                      json_rows.sim_row_error, table_of="coop sim"):
        engine = row.get("engine", "sim")  # as check_sim_criteria.py
        first = first or (engine, n)
        if engine != first[0]:
            die(f"{path}:{n}: rows of both engines (a {engine} row, {first[0]} at line "
                f"{first[1]}): plot one at a time")
        key = (row["log"], row["memory"], row["policy"], round(row["budget_ratio"], 4))
        if key in seen:
            die(f"{path}:{n}: a second row for {' '.join(key[:3])} at {key[3]:g} "
                f"(the first: line {seen[key]})")
        seen[key] = n
        rows.append(row)
    if not rows:
        die(f"{path}: no results")
    return rows


def short(log):
    """resnet32-56-9000000000.0-...log.gz -> resnet32; lstm-train-step.ops.jsonl.gz ->
    lstm-train-step (the project's op traces keep their full stem)."""
    if ".ops." in log:
        return log.split(".ops.")[0]
    return log.split("-")[0] if "-" in log else log.split(".")[0]


def plot(rows, out, title=None):
    panels = sorted({(r["log"], r["memory"]) for r in rows})
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.8 * nrows), squeeze=False)
    policies = sorted({r["policy"] for r in rows})
    styles = {p: ("-o" if p == "coop" else "--.") for p in policies}
    for ax, (log, memory) in zip(axes.flat, panels):
        sel = [r for r in rows if r["log"] == log and r["memory"] == memory]
        top = max([r["overhead"] for r in sel if r["result"] == "ok"] + [1.05]) * 1.02
        for p in policies:
            pts = sorted((r["budget_ratio"], r["overhead"], r["result"]) for r in sel
                         if r["policy"] == p)
            if not pts:
                continue
            ok = [(x, y) for x, y, res in pts if res == "ok"]
            bad = [x for x, _, res in pts if res != "ok"]
            line, = ax.plot([x for x, _ in ok], [y for _, y in ok], styles[p], label=p)
            if bad:
                ax.plot(bad, [top] * len(bad), "x", color=line.get_color())
        ax.set_title(f"{short(log)} ({memory})")
        ax.set_xlabel("budget / unlimited peak")
        ax.set_ylabel("overhead (total / base compute)")
        ax.invert_xaxis()
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_file.save_figure(fig, out, dpi=110)  # a failed save keeps the old image


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("results", help="coop sim --json output ('-' for stdin)")
    ap.add_argument("out", help="PNG to write")
    ap.add_argument("--title")
    args = ap.parse_args()
    if (args.results != "-" and os.path.exists(args.out) and os.path.exists(args.results)
            and os.path.samefile(args.out, args.results)):
        # OUT named without an extension is drawn as PNG: it replaced the rows
        die(f"{args.out}: is the results file {args.results}: the image would replace it")
    rows = load(args.results)
    try:
        plot(rows, args.out, args.title)
    except OSError as e:
        die(f"{args.out}: {e.strerror or e}")
    except ValueError as e:  # an extension matplotlib cannot write
        die(f"{args.out}: {e}")


if __name__ == "__main__":
    main()
