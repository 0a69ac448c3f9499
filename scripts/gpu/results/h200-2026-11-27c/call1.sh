#!/bin/bash
# Session 16's device call, from the repository root with .gpu/ built
# (scripts/gpu/README.md step 0). First the allocator's own tests
# (device_tests.sh; the stress test's 48 MiB capacity has not run on a device
# before), then 5 training steps of GPT-2-small and ResNet-50, native and coop
# on cuMemAlloc segments (vmm:false), each run's whole allocation history kept
# (train_compare.py --snapshot), to find on the host where segments' 4.7% over
# native on GPT-2 comes from. Everything lands in $OUT.
set -u
t0=$(date +%s)
SKIP_BENCH=1 MAP_COST_REPS=3 bash scripts/gpu/device_tests.sh
echo "device_tests.sh: $(($(date +%s) - t0)) s"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
S=/tmp/seg && mkdir -p $S
timeout 200 python3 scripts/gpu/train_compare.py --model gpt2_small --model resnet50 --steps 5 \
    --no-max-batch --conf vmm:false --snapshot $S --timeout 90 --out $S/train.jsonl \
    >/dev/null 2>$S/train.err
echo "train_compare rc=$? at $(($(date +%s) - t0)) s"
grep -h summary $S/train.jsonl | grep -v environment | cut -c1-400
tail -3 $S/train.err
tar czf "$OUT/segments.tgz" -C $S .
ls -la "$OUT"
