#!/bin/bash
# Session 17's fourth device call: the recorded traces replayed through
# PyTorch's own allocator with expandable_segments:True
# (torch.cuda.caching_allocator_alloc/delete), for the torch-expandable
# emulation of coop replay to be checked against, trace by trace.
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
timeout 200 python3 scripts/gpu/replay_native_vs_coop.py --only native \
    --native-conf expandable_segments:True --deadline 170 --timeout 80 \
    --out "$OUT/replay_expandable.jsonl" .gpu/snapshots/*.pickle.gz traces/*.trace.gz \
    traces/*.cuda.pickle.gz >/dev/null 2>"$OUT/replay_expandable.err"
echo "replay_native_vs_coop (native, expandable) rc=$? at $(($(date +%s) - t0)) s"
grep -v environment "$OUT/replay_expandable.jsonl" | cut -c1-330
tail -3 "$OUT/replay_expandable.err"
