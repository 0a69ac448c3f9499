export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so CUBLAS_WORKSPACE_CONFIG=:4096:8
R=/tmp/r4; mkdir -p $R
for a in native native coop coop; do
  timeout 60 python3 scripts/gpu/train_compare.py --child --model gpt2_small --allocator $a --batch 8 --steps 50 --seed 1234 --fraction 0 >>$R/gpt2_repeat.jsonl 2>>$R/gpt2_repeat.err
done
timeout 150 python3 scripts/gpu/train_compare.py --model resnet50 --model gpt2_small --no-max-batch --conf vmm:false --deadline 120 --timeout 60 --out $R/train_compare_segments.jsonl >/dev/null 2>$R/train_compare_segments.err
tar czf $OUT/r4.tgz -C /tmp r4
python3 -c '
import json
rows=[json.loads(l) for l in open("/tmp/r4/gpt2_repeat.jsonl")]
for r in rows: print(r["allocator"], r.get("ok"), r.get("error"), r.get("losses",[None])[-1], r.get("step_time_ms_median"))
ls=[r.get("losses") for r in rows]
print("native-native identical", ls[0]==ls[1], "coop-coop", ls[2]==ls[3], "native-coop", ls[0]==ls[2])
'
sort -u $R/gpt2_repeat.err | cut -c1-300 | head -20
grep -h summary $R/train_compare_segments.jsonl | cut -c1-700
tail -c 800 $R/train_compare_segments.err
