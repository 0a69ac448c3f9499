#!/bin/bash
# Session 16's fourth device call: oom_check.py, what torch 2.11 makes of
# coop's NULL on the pluggable route and on the MemPool route.
set -u
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
R=/tmp/c4 && mkdir -p $R
timeout 150 python3 scripts/gpu/oom_check.py --timeout 60 --out $R/oom_check.jsonl >/dev/null \
    2>$R/oom_check.err
echo "oom_check rc=$?"
grep -v environment $R/oom_check.jsonl | cut -c1-900
tail -5 $R/oom_check.err
cp $R/* "$OUT/"
