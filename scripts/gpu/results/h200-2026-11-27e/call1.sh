#!/bin/bash
# Session 19's device call: what session 18 changed in the C code without a
# device (the OOM fallback to a mapped free block after stream settling; the
# unmap that unmaps every page before releasing any handle and maps its own
# handles back on failure). First the short checks: remap_check.py (the
# driver maps a kept handle again at its old address, which that undo relies
# on), oom_check.py (VMM, the default, and vmm:false), stream_check.py, and
# 5 training steps of both models recorded as histories (coop's peak must
# replay here to the byte). Then device_tests.sh: coop bench, cuda_map_cost,
# and the allocator's tests as built and under ASan+UBSan.
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
R=/tmp/e1 && mkdir -p $R/hist
at() { echo "$1 rc=$2 at $(($(date +%s) - t0)) s"; }
bash scripts/gpu/device_env.sh >$R/env.txt 2>&1
head -5 $R/env.txt
for shape in "4 2" "64 33"; do
    set -- $shape
    timeout 60 python3 scripts/gpu/remap_check.py --pages $1 --half $2 >>$R/remap_check.jsonl \
        2>>$R/remap_check.err
    at "remap_check $shape" $?
done
cat $R/remap_check.jsonl
tail -3 $R/remap_check.err
timeout 100 python3 scripts/gpu/oom_check.py --timeout 45 --out $R/oom_check.jsonl \
    >/dev/null 2>$R/oom_check.err
at oom_check $?
timeout 100 python3 scripts/gpu/oom_check.py --timeout 45 --conf vmm:false \
    --out $R/oom_check_segments.jsonl >/dev/null 2>$R/oom_check_segments.err
at "oom_check vmm:false" $?
grep -h summary $R/oom_check*.jsonl | cut -c1-600
timeout 180 python3 scripts/gpu/stream_check.py --timeout 60 --out $R/stream_check.jsonl \
    >/dev/null 2>$R/stream_check.err
at stream_check $?
grep -h summary $R/stream_check.jsonl | cut -c1-900
timeout 200 python3 scripts/gpu/train_compare.py --model gpt2_small --model resnet50 --steps 5 \
    --no-max-batch --snapshot $R/hist --timeout 90 --out $R/hist/train.jsonl \
    >/dev/null 2>$R/hist/train.err
at "train_compare --snapshot" $?
grep summary $R/hist/train.jsonl | cut -c1-500
tail -3 $R/hist/train.err
OUT=$R/tests timeout 330 bash scripts/gpu/device_tests.sh >$R/device_tests.out 2>&1
at device_tests $?
cat $R/device_tests.out | cut -c1-400
tar czf "$OUT/e1.tgz" -C $R .
echo "total $(($(date +%s) - t0)) s"
