#!/bin/bash
# Session 17's device call: the three things session 16 wrote after its device
# time ran out. stream_check.py with its two later rules (the side stream must
# still be busy when empty_cache starts; a fourth run, coop with wait:false,
# must return from empty_cache without waiting and must not fault);
# oom_check.py with --conf vmm:false (each line names its configuration); and
# train_compare.py --snapshot, whose native line now says snapshot_complete.
# The C code is that of 200705d (later commits changed comments only), which
# passed its tests on the device in session 16.
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
R=/tmp/d1 && mkdir -p $R/hist
bash scripts/gpu/device_env.sh >$R/env.txt 2>&1
head -5 $R/env.txt
timeout 180 python3 scripts/gpu/stream_check.py --timeout 60 --out $R/stream_check.jsonl \
    >/dev/null 2>$R/stream_check.err
echo "stream_check rc=$? at $(($(date +%s) - t0)) s"
grep -v environment $R/stream_check.jsonl | cut -c1-1200
tail -5 $R/stream_check.err
timeout 100 python3 scripts/gpu/oom_check.py --timeout 45 --conf vmm:false \
    --out $R/oom_check_segments.jsonl >/dev/null 2>$R/oom_check_segments.err
echo "oom_check --conf vmm:false rc=$? at $(($(date +%s) - t0)) s"
grep -v environment $R/oom_check_segments.jsonl | cut -c1-900
tail -5 $R/oom_check_segments.err
timeout 200 python3 scripts/gpu/train_compare.py --model gpt2_small --model resnet50 --steps 5 \
    --no-max-batch --snapshot $R/hist --timeout 90 --out $R/hist/train.jsonl \
    >/dev/null 2>$R/hist/train.err
echo "train_compare --snapshot rc=$? at $(($(date +%s) - t0)) s"
grep -v environment $R/hist/train.jsonl | cut -c1-700
tail -3 $R/hist/train.err
ls -la $R/hist
tar czf "$OUT/d1.tgz" -C $R .
echo "total $(($(date +%s) - t0)) s"
