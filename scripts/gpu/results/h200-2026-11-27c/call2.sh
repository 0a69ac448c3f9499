#!/bin/bash
# Session 16's second device call, after 200705d (without VMM, a request of
# half a segment or more gets a segment of its own size). The allocator's
# tests again (the CUDA backend's segments path changed), then 50 training
# steps of GPT-2-small and ResNet-50, native and coop on cuMemAlloc segments
# (vmm:false), histories kept, as README's table measured them before.
set -u
t0=$(date +%s)
SKIP_BENCH=1 MAP_COST_REPS=1 bash scripts/gpu/device_tests.sh | grep -v '"figure": "map"'
echo "device_tests.sh: $(($(date +%s) - t0)) s"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
S=/tmp/seg && mkdir -p $S
timeout 240 python3 scripts/gpu/train_compare.py --model gpt2_small --model resnet50 --steps 50 \
    --no-max-batch --conf vmm:false --snapshot $S --timeout 90 --out $S/train.jsonl \
    >/dev/null 2>$S/train.err
echo "train_compare rc=$? at $(($(date +%s) - t0)) s"
grep -h summary $S/train.jsonl | grep -v environment | cut -c1-600
tail -3 $S/train.err
tar czf "$OUT/segments.tgz" -C $S .
