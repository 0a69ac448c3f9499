# Call 4 (after a3cea8d: one cuMemCreate per pool page): the pool's mapping
# costs with 2, 8 and 32 MiB pages; ResNet-50 and GPT-2-small trained 50
# steps natively and under coop with page:32M (train_compare.py's parent,
# native first), then coop with the default page alone per model; the CUDA
# tests once more (10^5 operations), the fault test alone. Results in $R.
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=$PWD/.gpu/lib/libcoop.so CUBLAS_WORKSPACE_CONFIG=:4096:8
R=$1
mkdir -p "$R"
LD_LIBRARY_PATH=.gpu/lib timeout 100 .gpu/bin/cuda_map_cost 5 2,8,32 >"$R/map_cost_pages.jsonl" 2>&1
timeout 200 python3 scripts/gpu/train_compare.py --model resnet50 --model gpt2_small --no-max-batch \
    --conf page:32M --deadline 170 --timeout 60 --out "$R/train_page32.jsonl" >/dev/null 2>"$R/train_page32.err"
for m in resnet50 gpt2_small; do
    b=64; [ $m = gpt2_small ] && b=8
    timeout 60 python3 scripts/gpu/train_compare.py --child --model $m --allocator coop --batch $b \
        --steps 50 --seed 1234 --fraction 0 >>"$R/train_page2.jsonl" 2>>"$R/train_page2.err"
done
(
    export LD_LIBRARY_PATH=.gpu/lib COOP_TEST_OPS=100000
    timeout 120 .gpu/bin/backend_cuda_test >"$R/backend_cuda_test.log" 2>&1
    echo "rc=$?" >>"$R/backend_cuda_test.log"
    COOP_TEST_DEVICE_ALONE=1 timeout 60 .gpu/bin/backend_cuda_fault_test >"$R/backend_cuda_fault_test.log" 2>&1
    echo "rc=$?" >>"$R/backend_cuda_fault_test.log"
)
