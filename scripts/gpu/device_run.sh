#!/bin/bash
# Every GPU measurement of scripts/gpu/README.md in one call of about 5
# minutes, for a lent H100/H200 whose device time is 15 minutes in all
# (machine start included). Run from the repository root with .gpu/ built
# as README.md's step 0 says; results go to $OUT (default ./gpu-out).
#
# Phase 1 runs alone, since it measures step times: the native/coop
# training comparison of both models. Phase 2 runs five jobs at once, none
# of which measures time: the C backend tests, the snapshot recordings, the
# trace replays and the two largest-batch searches. The searches use
# --fraction 0.2 so that their two limits (2 x 0.2 of the device), the
# replay of the largest trace (about 55 GB live) and the recordings fit the
# H200's 141 GiB together. Every step has its own timeout.
#
# The device tool brings back at most 8 files from $OUT, so everything is
# written to a work folder and packed into $OUT/gpu-results.tgz at the end
# (on 2026-11-27 a first version wrote 15 files to $OUT, and the JSON lines
# of the training comparison and the replays did not come back). The
# snapshots recorded are in the archive too, under snap/.
set -u
DEST=${OUT:-$PWD/gpu-out}
OUT=$(mktemp -d /tmp/gpu-results.XXXXXX)
mkdir -p "$DEST"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so
lib=$PWD/.gpu/lib
stamp() { echo "$(date -u +%T) $*" >>"$OUT/phases.log"; }

stamp start
bash scripts/gpu/device_env.sh >"$OUT/env.txt" 2>&1

timeout 90 python3 -c '
import coop.torch as c
print(c.install())
import torch
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print(float(x.sum()), c.memory_stats(0)["reserved_bytes.all.current"], torch.cuda.max_memory_reserved(0))
' >"$OUT/smoke.txt" 2>&1
echo "smoke rc=$?" >>"$OUT/smoke.txt"
stamp smoke finished

timeout 200 python3 scripts/gpu/train_compare.py --no-max-batch --deadline 150 --timeout 90 \
    --out "$OUT/train_compare.jsonl" >/dev/null 2>"$OUT/train_compare.err"
stamp phase 1 finished rc=$?

(
    LD_LIBRARY_PATH=$lib timeout 220 .gpu/bin/backend_cuda_test >"$OUT/backend_cuda_test.log" 2>&1
    echo "backend_cuda_test rc=$?" >>"$OUT/backend_cuda_test.log"
    stamp backend_cuda_test finished
) &
(
    timeout 200 python3 scripts/record_cuda_snapshot.py --out-dir "$OUT/snap" \
        --out "$OUT/snapshots.jsonl" >/dev/null 2>"$OUT/snapshots.err"
    echo "record rc=$?" >>"$OUT/snapshots.err"
    stamp snapshots finished
) &
(
    timeout 250 python3 scripts/gpu/replay_native_vs_coop.py --deadline 215 --timeout 100 \
        --out "$OUT/replay.jsonl" .gpu/snapshots/*.pickle.gz traces/*.trace.gz \
        >/dev/null 2>"$OUT/replay.err"
    stamp replay finished rc=$?
) &
for model in resnet50 gpt2_small; do
    (
        timeout 250 python3 scripts/gpu/train_compare.py --model $model --no-compare \
            --fraction 0.2 --deadline 215 --timeout 60 --out "$OUT/max_batch_$model.jsonl" \
            >/dev/null 2>"$OUT/max_batch_$model.err"
        stamp max_batch $model finished rc=$?
    ) &
done
wait
stamp end
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >>"$OUT/env.txt" 2>&1
tar czf "$DEST/gpu-results.tgz" -C "$OUT" .
cat "$OUT/phases.log" "$OUT/smoke.txt"
tail -n 15 "$OUT/backend_cuda_test.log"
grep -h summary "$OUT"/*.jsonl | cut -c1-400
tail -c 600 "$OUT"/*.err
