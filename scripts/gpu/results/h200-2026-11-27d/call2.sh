#!/bin/bash
# Session 17's second device call: coop against PyTorch's allocator with
# expandable_segments:True (its own remedy for fragmentation: one growing
# virtual range per stream and pool, mapped in 2 / 20 MiB pages), which the
# earlier sessions never measured. train_compare.py --native-conf: 50 steps
# of GPT-2-small and ResNet-50, then the largest batch under a memory
# fraction of 0.2, both allocators in the same run; then 5 steps again with
# --snapshot, for host replays of the expandable runs' histories.
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
R=/tmp/d2 && mkdir -p $R/hist
timeout 360 python3 scripts/gpu/train_compare.py --native-conf expandable_segments:True \
    --steps 50 --fraction 0.2 --deadline 300 --timeout 90 --out $R/train_expandable.jsonl \
    >/dev/null 2>$R/train_expandable.err
echo "train_compare (expandable) rc=$? at $(($(date +%s) - t0)) s"
grep summary $R/train_expandable.jsonl | grep -v environment | cut -c1-900
grep -h native_settings $R/train_expandable.jsonl | grep -o '"native_settings": {[^}]*}' | head -2
tail -3 $R/train_expandable.err
timeout 130 python3 scripts/gpu/train_compare.py --native-conf expandable_segments:True \
    --model gpt2_small --model resnet50 --steps 5 --no-max-batch --snapshot $R/hist \
    --deadline 100 --timeout 60 --out $R/hist/train.jsonl >/dev/null 2>$R/hist/train.err
echo "train_compare --snapshot (expandable) rc=$? at $(($(date +%s) - t0)) s"
grep -v environment $R/hist/train.jsonl | cut -c1-500
tail -3 $R/hist/train.err
tar czf "$OUT/d2.tgz" -C $R .
echo "total $(($(date +%s) - t0)) s"
