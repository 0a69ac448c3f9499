#!/bin/bash
# Session 19's fourth device call (carry: .gpu). Call 3 was this command without
# the carry and without the mkdir: both children failed at once (libcoop.so
# absent; /tmp/viz missing), nothing measured.
mkdir -p /tmp/viz && PYTHONPATH=$PWD/python COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so timeout 120 python3 scripts/gpu/memory_viz_check.py --dir /tmp/viz --out /tmp/viz.jsonl > /tmp/viz.out 2>&1; echo rc=$?; grep -h summary /tmp/viz.jsonl | grep -v environment | cut -c1-900; tail -3 /tmp/viz.out | cut -c1-600; tar czf $OUT/viz.tgz -C /tmp viz.jsonl viz.out
