#!/usr/bin/python3
"""coop sim still gives the rows docs/remat.md records: every row of the
docs/remat_*.jsonl files below is run again (one coop sim per log and
memory model, --no-min-ratio) and its deterministic fields (result, overhead,
evictions, remat_ops, heuristic_evals, frag_at_evict, frag_failures) must be
the recorded ones exactly. Search times and the bisection's min_budget_ratio
are not compared. Logs of the shared workloads (docs/remat_ideal.jsonl,
docs/remat_arena.jsonl) are compared only where ../shared/workloads/dtr-logs
sits beside the source tree. A change that moves these results must
regenerate the files (docs/remat.md, section 5) and say why."""
import json
import os
import subprocess
import sys

SRC = os.environ.get("srcdir", ".")
COOP = os.environ.get("COOP", "./coop")
SHARED = os.path.join(SRC, "..", "shared", "workloads", "dtr-logs")
# docs file -> folder of its logs
FILES = [
    ("remat_arena_own.jsonl", os.path.join(SRC, "traces")),
    ("remat_heldout.jsonl", os.path.join(SRC, "traces", "heldout")),
    ("remat_heldout2.jsonl", os.path.join(SRC, "traces", "heldout2")),
    ("remat_ideal.jsonl", SHARED),
    ("remat_arena.jsonl", SHARED),
]
FIELDS = ["result", "overhead", "evictions", "remat_ops", "heuristic_evals", "frag_at_evict",
          "frag_failures"]


def main():
    failures = compared = 0
    for name, folder in FILES:
        with open(os.path.join(SRC, "docs", name)) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        groups = {}
        for r in rows:
            groups.setdefault((r["log"], r["memory"]), []).append(r)
        for (log, memory), want in sorted(groups.items()):
            path = os.path.join(folder, log)
            if not os.path.exists(path):
                if folder == SHARED:
                    continue  # the shared workloads are not everywhere
                print("FAIL: %s: no log %s" % (name, path))
                failures += 1
                continue
            policies = sorted({r["policy"] for r in want})
            budgets = sorted({r["budget_ratio"] for r in want})
            cmd = [COOP, "sim", "--json", "--no-min-ratio", "--memory", memory, "--policy",
                   ",".join(policies), "--budget", ",".join(repr(b) for b in budgets), path]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print("FAIL: %s exited %d: %s" % (" ".join(cmd), run.returncode, run.stderr.strip()))
                failures += 1
                continue
            got = {(r["policy"], r["budget_ratio"]): r
                   for r in map(json.loads, run.stdout.splitlines())}
            for w in want:
                g = got.get((w["policy"], w["budget_ratio"]))
                diff = [f for f in FIELDS if g is None or g[f] != w[f]]
                compared += 1
                if diff:
                    failures += 1
                    print("FAIL: %s %s %s %s: %s" % (name, log, w["policy"], w["budget_ratio"],
                          ", ".join("%s %s, recorded %s" % (f, g and g[f], w[f]) for f in diff)))
    print("%d recorded rows compared, %d differ" % (compared, failures))
    return 1 if failures or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
