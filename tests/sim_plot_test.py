#!/usr/bin/python3
"""scripts/plot_sim.py draws overhead vs budget from coop sim --json lines and
refuses a malformed file, naming the line."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "plot_sim.py")

ROW = ('{"log":"tiny.log","policy":"%s","memory":"arena","budget_ratio":%s,"result":"%s",'
       '"overhead":%s,"evictions":3,"remat_ops":3,"search_ns_p50":1,"search_ns_p99":2,'
       '"heuristic_evals":4,"frag_at_evict":0.1,"frag_failures":0,"min_budget_ratio":0.4}\n')


def main():
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "sim.jsonl")
        with open(good, "w") as f:
            for pol, ratio, res, ovh in [("coop", 0.9, "ok", 1.01), ("coop", 0.5, "ok", 1.2),
                                         ("dtr", 0.9, "ok", 1.02), ("dtr", 0.5, "thrash", 2.0)]:
                f.write(ROW % (pol, ratio, res, ovh))
        png = os.path.join(d, "out.png")
        r = subprocess.run([sys.executable, SCRIPT, good, png], capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL: plot_sim.py failed:", r.stderr)
            return 1
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                print("FAIL: output is not a PNG")
                return 1
        bad = os.path.join(d, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(ROW % ("coop", 0.9, "ok", 1.01))
            f.write('{"log": "x"}\n')
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        if r.returncode != 2 or "bad.jsonl:2: missing" not in r.stderr:
            print("FAIL: malformed input accepted or unnamed:", r.returncode, r.stderr)
            return 1
        for line, reason in (("{oops", "bad.jsonl:2: not a coop sim --json row"),
                             ("1", "bad.jsonl:2: not a coop sim --json row (a JSON int")):
            with open(bad, "w") as f:
                f.write(ROW % ("coop", 0.9, "ok", 1.01) + line + "\n")
            r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
            if r.returncode != 2 or reason not in r.stderr or "Traceback" in r.stderr:
                print("FAIL: line %r accepted or not named:" % line, r.returncode, r.stderr)
                return 1
        # each used to end in a traceback
        with open(bad, "w") as f:
            f.write(ROW % ("coop", 0.9, "ok", "null"))
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        if r.returncode != 2 or "bad.jsonl:1: overhead is null, not a number" not in r.stderr:
            print("FAIL: an ok row without an overhead accepted:", r.returncode, r.stderr)
            return 1
        r = subprocess.run([sys.executable, SCRIPT, good, os.path.join(d, "none", "out.png")],
                           capture_output=True, text=True)
        if r.returncode != 2 or "none/out.png: No such file" not in r.stderr or "Traceback" in r.stderr:
            print("FAIL: an unwritable output is not one line with exit 2:", r.returncode, r.stderr)
            return 1
        r = subprocess.run([sys.executable, SCRIPT, os.path.join(d, "absent.jsonl"), png],
                           capture_output=True, text=True)
        if r.returncode != 2 or "absent.jsonl: No such file" not in r.stderr or "Traceback" in r.stderr:
            print("FAIL: a missing file is not one line with exit 2:", r.returncode, r.stderr)
            return 1
    print("PASS: plot_sim.py draws and validates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
