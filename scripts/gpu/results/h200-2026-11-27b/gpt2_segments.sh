# Call 2's last part: GPT-2-small, 50 steps, batch 8, alone and alternating
# native / coop on cuMemAlloc segments (vmm:false) / coop with VMM, twice,
# to see whether session 14's single comparison (segments 1.047 x native's
# step time) repeats. Appends to $1/gpt2_segments.jsonl.
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so CUBLAS_WORKSPACE_CONFIG=:4096:8
R=$1
for round in 1 2; do
    for a in native coop:vmm:false coop:vmm:true; do
        alloc=${a%%:*} conf=${a#*:}
        set -- --child --model gpt2_small --allocator "$alloc" --batch 8 --steps 50 --seed 1234 --fraction 0
        [ "$alloc" = coop ] && set -- "$@" --conf "$conf"
        timeout 60 python3 scripts/gpu/train_compare.py "$@" >>"$R/gpt2_segments.jsonl" 2>>"$R/gpt2_segments.err"
    done
done
