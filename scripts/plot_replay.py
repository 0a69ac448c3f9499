#!/usr/bin/python3
"""Draw a `coop replay --timeline FILE` as PNG: live vs reserved bytes per
policy over the trace's events, and an address map of every block over time
for each placement policy.

usage: scripts/plot_replay.py TIMELINE [-o OUT.png] [--policy LIST] [--max-blocks N]

With several traces in the timeline, one PNG per trace is written
(OUT-<trace>.png; OUT-<trace>-2.png for a second trace of that name). Each
image appears whole or not at all (scripts/atomic_file.py): a failed save
keeps the previous one. The timeline format is documented in
src/replay/timeline.h.
Exits 2, with one line on stderr, on a bad timeline or option (a --policy
the timeline lacks, an output that is the timeline itself) or an output
that cannot be written. A bad timeline:
a record with fields too many or too few, a number that is not unsigned
or is past 2^64 - 1, a policy twice in one trace, s records out of order
or past the trace's events, a block that ends before it starts or past
the trace, a second or misplaced oom record.
Exits 1, with one line, when the python3 running it has no matplotlib.
"""
import argparse
import bisect
import os
import re
import sys

import atomic_file
import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import pyplot_agg

plt = pyplot_agg.pyplot("plot_replay.py")
from matplotlib.collections import PolyCollection  # noqa: E402

MiB = 1024.0 * 1024.0
ASCII_SPACES = re.compile(r"[ \t\n\r\f\v]+")


# fields of each record (src/replay/timeline.h); every number is unsigned
FIELDS = {"trace": 2, "policy": 1, "s": 3, "b": 4, "oom": 1}
DIGITS = {10: re.compile(r"[0-9]+"), 16: re.compile(r"[0-9a-fA-F]+")}


class TimelineError(Exception):
    pass


def number(text, what, base=10):
    """text as the unsigned 64-bit count coop writes: digits only (int()
    also took '-4', '+4' and '1_000', and drew them), below 2^64 (a longer
    number, which no float holds, was an OverflowError traceback in the
    drawing)."""
    if not DIGITS[base].fullmatch(text):
        raise ValueError(f"{what} {text!r} is not a {'hex' if base == 16 else 'decimal'} "
                         "number of 0 or more")
    value = int(text, base)
    if value >= 1 << 64:
        shown = text if len(text) <= 24 else text[:20] + "..."
        raise ValueError(f"{what} {shown} is past 2^64 - 1 (coop writes 64-bit counts)")
    return value


def read_timeline(path):
    """Returns [(trace_name, events, {policy: {"s": [...], "b": [...], "oom": EVENT or None}})]."""
    try:
        return _read_timeline(path)
    except UnicodeDecodeError as e:
        raise TimelineError(f"{path}: not UTF-8 text ({e})") from None


def _read_timeline(path):
    traces = []
    policy = None
    with open(path, encoding="utf-8") as f:
        header = ASCII_SPACES.split(f.readline().strip(" \t\n\r\f\v"))
        if header != ["coop-replay-timeline", "1"]:
            raise TimelineError(f"{path}:1: not a coop replay timeline (version 1)")
        for lineno, line in enumerate(f, start=2):
            # ASCII spaces only: str.split() also splits at U+00A0, U+2028 and
            # other Unicode spaces, which a trace's name may hold
            fields = ASCII_SPACES.split(line.strip(" \t\n\r\f\v"))
            if fields == [""]:
                fields = []
            if not fields:
                continue
            try:
                kind = fields[0]
                if kind in FIELDS and len(fields) != FIELDS[kind] + 1:
                    raise ValueError(f"'{kind}' record of {len(fields) - 1} fields, not "
                                     f"{FIELDS[kind]}")
                if kind == "trace":
                    traces.append((fields[1], number(fields[2], "EVENTS"), {}))
                    policy = None
                elif kind == "policy":
                    if not traces:
                        raise ValueError("policy before any trace")
                    if fields[1] in traces[-1][2]:  # the second replaced the first
                        raise ValueError(f"a second policy {fields[1]} in trace {traces[-1][0]}")
                    policy = {"s": [], "b": [], "oom": None}
                    traces[-1][2][fields[1]] = policy
                elif kind in ("s", "b", "oom") and policy is None:
                    raise ValueError(f"'{kind}' record before any policy")
                elif kind == "s":
                    sample = tuple(number(f, what) for f, what in
                                   zip(fields[1:], ("EVENT", "LIVE", "RESERVED")))
                    if sample[0] >= traces[-1][1]:
                        raise ValueError(f"s event {sample[0]} is past the trace's "
                                         f"{traces[-1][1]} events")
                    if policy["s"] and sample[0] <= policy["s"][-1][0]:  # steps() draws in order
                        raise ValueError(f"s event {sample[0]} is not after the previous s "
                                         f"(event {policy['s'][-1][0]})")
                    policy["s"].append(sample)
                elif kind == "b":
                    block = (number(fields[1], "OFFSET", 16),) + tuple(
                        number(f, what) for f, what in zip(fields[2:], ("SIZE", "START", "END")))
                    if not block[2] <= block[3] <= traces[-1][1]:
                        raise ValueError(f"b from event {block[2]} to {block[3]}: not START <= "
                                         f"END <= the trace's {traces[-1][1]} events")
                    policy["b"].append(block)
                elif kind == "oom":
                    oom = number(fields[1], "EVENT")
                    if policy["oom"] is not None:
                        raise ValueError(f"a second oom record (the first at event {policy['oom']})")
                    if oom > traces[-1][1] or (policy["s"] and policy["s"][-1][0] >= oom):
                        raise ValueError(f"oom at event {oom}: not after the s records and "
                                         f"within the trace's {traces[-1][1]} events")
                    policy["oom"] = oom
                else:
                    raise ValueError(f"unknown record '{kind}'")
            except (ValueError, IndexError, TypeError) as e:
                raise TimelineError(f"{path}:{lineno}: {e}") from None
    return traces


def steps(samples, events):
    """Step-curve x/y lists from change-point samples, held until `events`
    (the trace's end, or the OOM that stopped the run)."""
    xs, live, reserved = [], [], []
    for i, (event, l, r) in enumerate(samples):
        xs.append(event)
        live.append(l / MiB)
        reserved.append(r / MiB)
    if xs and xs[-1] < events:
        xs.append(events)
        live.append(live[-1])
        reserved.append(reserved[-1])
    return xs, live, reserved


def cut_gaps(blocks, keep=None):
    """A map from addresses to plotted offsets (bytes from the lowest block)
    that shortens every stretch of address space no block ever touched to
    keep bytes (default: 1/50 of the span the blocks cover, at least
    1 MiB): torch-expandable reserves 9/8 of the device per stream and pool,
    so its small pool's blocks sit ~90 GiB above the large pool's. Returns
    (offset(addr), [offsets where a stretch was cut])."""
    spans = sorted((a, a + s) for a, s, _, _ in blocks)
    covered = []  # disjoint [lo, hi) in address order
    for lo, hi in spans:
        if covered and lo <= covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], hi)
        else:
            covered.append([lo, hi])
    used = sum(hi - lo for lo, hi in covered)
    if keep is None:
        keep = max(MiB, used // 50)
    starts, shifts, cuts, shift = [], [], [], 0
    for i, (lo, hi) in enumerate(covered):
        if i:
            gap = lo - covered[i - 1][1]
            if gap > keep:
                shift += gap - keep
                cuts.append(covered[i - 1][1] - covered[0][0] - shift + gap - keep // 2)
        starts.append(lo)
        shifts.append(shift)
    base = covered[0][0] if covered else 0

    def offset(addr):
        i = max(0, bisect.bisect_right(starts, addr) - 1)
        return addr - base - shifts[i]

    return offset, cuts


def address_map(ax, name, blocks, events, max_blocks, oom=None):
    if oom is not None:
        # the run stopped at the OOM: blocks still live then (END = events)
        # end there, not at the end of a trace the policy never reached
        blocks = [(a, s, start, min(end, oom)) for a, s, start, end in blocks]
    if len(blocks) > max_blocks:
        # keep the largest blocks: they dominate the picture
        blocks = sorted(blocks, key=lambda b: b[1], reverse=True)[:max_blocks]
    if not blocks:
        ax.set_title(f"{name}: no blocks")
        return
    offset, cuts = cut_gaps(blocks)
    polys = []
    for addr, size, start, end in blocks:
        y0 = offset(addr) / MiB
        y1 = y0 + size / MiB
        polys.append([(start, y0), (end, y0), (end, y1), (start, y1)])
    coll = PolyCollection(polys, linewidths=0, alpha=0.7)
    coll.set_array([b[1] for b in blocks])
    coll.set_cmap("viridis")
    ax.add_collection(coll)
    ax.set_xlim(0, max(events, 1))
    ax.set_ylim(0, max(p[2][1] for p in polys) * 1.02)
    if oom is not None:
        ax.axvline(oom, color="red", linestyle="--", linewidth=1)
    for y in cuts:  # unused address space left out here
        ax.axhline(y / MiB, color="grey", linestyle=":", linewidth=1)
    title = f"{name}: address map ({len(blocks)} blocks)"
    if cuts:
        title += f", {len(cuts)} unused stretch{'es' if len(cuts) > 1 else ''} cut (dotted)"
    ax.set_title(title if oom is None else f"{title}, OOM at event {oom}")
    ax.set_xlabel("event")
    ax.set_ylabel("offset (MiB)")


def plot_trace(name, events, policies, out, wanted, max_blocks):
    names = [p for p in policies if not wanted or p in wanted]
    # address maps: policies that place blocks at real addresses
    mapped = [p for p in names if policies[p]["b"] and p != "ideal"]
    rows = 1 + len(mapped)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 3.2 * rows), squeeze=False)
    ax = axes[0][0]
    curves = {}
    for p in names:
        oom = policies[p]["oom"]
        curves[p] = steps(policies[p]["s"], events if oom is None else oom)
    # live bytes are the trace's, the same under every policy, but a run
    # that ran out of memory has them only up to its OOM: prefer a whole one
    with_live = [p for p in names if any(curves[p][1])]
    whole = [p for p in with_live if policies[p]["oom"] is None]
    if with_live:
        xs, live, _ = curves[(whole or with_live)[0]]
        ax.step(xs, live, where="post", color="black", linewidth=1.2, label="live")
    for p in names:
        xs, _, reserved = curves[p]
        oom = policies[p]["oom"]
        if oom is not None:
            # where the run stopped: nothing after it was measured
            ax.axvline(oom, color="red", linestyle="--", linewidth=1, label=f"{p} OOM at {oom}")
        if xs and p != "ideal":
            ax.step(xs, reserved, where="post", linewidth=1, label=f"{p} reserved")
    ax.set_title(f"{name}: live vs reserved")
    ax.set_xlabel("event")
    ax.set_ylabel("MiB")
    ax.legend(fontsize="small", loc="upper left")
    for k, p in enumerate(mapped, start=1):
        address_map(axes[k][0], p, policies[p]["b"], events, max_blocks, policies[p]["oom"])
    fig.tight_layout()
    try:
        atomic_file.save_figure(fig, out, dpi=110)  # a failed save keeps the old image
    finally:
        plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("-o", "--output", help="PNG path (default: TIMELINE.png)")
    ap.add_argument("--policy", help="comma-separated policies to draw (default: all)")
    ap.add_argument("--max-blocks", type=int, default=20000,
                    help="most blocks per address map (largest kept)")
    args = ap.parse_args(argv)
    if args.max_blocks < 1:
        ap.error(f"--max-blocks: {args.max_blocks} is not a positive count")
    try:
        traces = read_timeline(args.timeline)
    except OSError as e:  # 'PATH: reason', as every other script says it
        print(f"plot_replay: {args.timeline}: {e.strerror or e}", file=sys.stderr)
        return 2
    except TimelineError as e:
        print(f"plot_replay: {e}", file=sys.stderr)
        return 2
    if not traces:
        print(f"plot_replay: {args.timeline}: no traces", file=sys.stderr)
        return 2
    out = args.output or args.timeline + ".png"
    wanted = set(args.policy.split(",")) if args.policy else None
    if wanted and "" in wanted:
        ap.error(f"--policy {args.policy}: an empty name (a comma too many?)")
    absent = sorted((wanted or set()) - {p for _, _, policies in traces for p in policies})
    if absent:
        # drawn as nothing before: a misspelt name gave an empty figure
        print(f"plot_replay: --policy: {', '.join(absent)} not in {args.timeline}", file=sys.stderr)
        return 2
    stem, ext = os.path.splitext(out)
    paths = []
    for name, events, policies in traces:
        path = out if len(traces) == 1 else f"{stem}-{name}{ext or '.png'}"
        # two traces of one name (from two folders) drew over each other
        k = 2
        while path in paths:
            path = f"{stem}-{name}-{k}{ext or '.png'}"
            k += 1
        paths.append(path)
        if os.path.exists(path) and os.path.samefile(path, args.timeline):
            # -o TIMELINE (or a link to it): the image replaced the timeline
            print(f"plot_replay: -o {path}: is the timeline {args.timeline}: the image would "
                  "replace it", file=sys.stderr)
            return 2
    for (name, events, policies), path in zip(traces, paths):
        try:
            plot_trace(name, events, policies, path, wanted, args.max_blocks)
        except OSError as e:
            print(f"plot_replay: {path}: {e.strerror or e}", file=sys.stderr)
            return 2
        except ValueError as e:  # an extension matplotlib cannot write
            print(f"plot_replay: {path}: {e}", file=sys.stderr)
            return 2
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
