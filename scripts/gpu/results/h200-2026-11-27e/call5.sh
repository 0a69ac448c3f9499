#!/bin/bash
# Session 19's fifth device call (carry: .gpu, libcoop.so rebuilt at 806559b
# plus the merged review fixes): the Python package's fixes on a real torch
# (install(conf) equal to COOP_ALLOC_CONF after first use; dump_snapshot
# taking the snapshot before opening the file), then the smoke test,
# oom_check.py, stream_check.py and memory_viz_check.py again.
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
R=/tmp/e5 && mkdir -p $R/viz
at() { echo "$1 rc=$2 at $(($(date +%s) - t0)) s"; }
COOP_ALLOC_CONF=capacity:8G timeout 90 python3 -c '
import coop.torch as c, torch, os, tempfile
print(c.install())
x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
print("sum", float(x.sum()))
c.install("capacity:8G")  # the configuration in force: accepted after first use
try:
    c.install("capacity:4G"); print("different conf accepted: WRONG")
except RuntimeError as e:
    print("different conf refused:", str(e)[:160])
p = os.path.join(tempfile.mkdtemp(), "s.pickle")
c.dump_snapshot(p); print("dump bytes", os.path.getsize(p))
print("reserved", c.memory_stats(0)["reserved_bytes.all.current"])
' >$R/python_fixes.txt 2>&1
at python_fixes $?
cat $R/python_fixes.txt | cut -c1-300
timeout 100 python3 scripts/gpu/oom_check.py --timeout 45 --out $R/oom_check.jsonl >/dev/null 2>$R/oom_check.err
at oom_check $?
timeout 150 python3 scripts/gpu/stream_check.py --timeout 60 --out $R/stream_check.jsonl >/dev/null 2>$R/stream_check.err
at stream_check $?
timeout 100 python3 scripts/gpu/memory_viz_check.py --dir $R/viz --out $R/viz.jsonl >/dev/null 2>$R/viz.err
at memory_viz_check $?
rm -f $R/viz/*.pickle*
grep -h '"summary"' $R/*.jsonl | grep -v environment | cut -c1-400
tar czf "$OUT/e5.tgz" -C $R .
echo "total $(($(date +%s) - t0)) s"
