#!/bin/bash
# Session 16's third device call (57072b8): stream_check.py (record_stream
# through PyTorch under native, coop and coop on segments), then coop on
# cuMemAlloc segments' largest batch under a memory fraction of 0.2, from
# native's results of the first session (GPT-2-small 39, ResNet-50 339).
set -u
t0=$(date +%s)
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
export CUBLAS_WORKSPACE_CONFIG=:4096:8
R=/tmp/c3 && mkdir -p $R
timeout 120 python3 scripts/gpu/stream_check.py --timeout 60 --out $R/stream_check.jsonl \
    >/dev/null 2>$R/stream_check.err
echo "stream_check rc=$? at $(($(date +%s) - t0)) s"
cut -c1-700 $R/stream_check.jsonl | grep -v environment
for mh in gpt2_small:39 resnet50:339; do
    timeout 130 python3 scripts/gpu/train_compare.py --model ${mh%%:*} --no-compare --search coop \
        --hint ${mh#*:} --fraction 0.2 --conf vmm:false --deadline 105 --timeout 60 \
        --out $R/max_batch_segments.jsonl >/dev/null 2>>$R/max_batch.err
    echo "max batch ${mh%%:*} rc=$? at $(($(date +%s) - t0)) s"
done
grep max_batch $R/max_batch_segments.jsonl | cut -c1-300
tail -3 $R/*.err
tar czf "$OUT/call3.tgz" -C $R .
