#!/usr/bin/python3
"""Plot `coop sim --json` results: overhead vs budget ratio, one line per
policy, one panel per log (and memory model). Runs that thrashed or ran out
of memory are drawn as crosses at the top of the panel.

usage: coop sim --json ... > sim.jsonl   (exit 2 on bad input or an unwritable OUT)
       scripts/plot_sim.py sim.jsonl out.png [--title TEXT]
"""
import argparse
import json
import math

import matplotlib

import atomic_file
import json_rows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REQUIRED = ("log", "policy", "memory", "budget_ratio", "result", "overhead")


def die(message):
    json_rows.die("plot_sim", message)


def load(path):
    rows = []
    for n, row in json_rows.json_rows(path, "plot_sim", "not a coop sim --json row"):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            die(f"{path}:{n}: missing {', '.join(missing)}")
        numbers = ["budget_ratio"] + (["overhead"] if row["result"] == "ok" else [])
        for key in numbers:  # plotted and compared: a string or null is no figure
            if isinstance(row[key], bool) or not isinstance(row[key], (int, float)):
                die(f"{path}:{n}: {key} is {json.dumps(row[key])}, not a number")
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
    rows = load(args.results)
    try:
        plot(rows, args.out, args.title)
    except OSError as e:
        die(f"{args.out}: {e.strerror or e}")
    except ValueError as e:  # an extension matplotlib cannot write
        die(f"{args.out}: {e}")


if __name__ == "__main__":
    main()
