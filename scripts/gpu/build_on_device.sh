#!/bin/bash
# Builds libcoop.so on the device with its own gcc and CUDA headers, checks
# that it exports what the development VM's build does, and trains
# ResNet-50 with it, native vs coop (20 steps). The device has no autotools:
# step 0 of scripts/gpu/README.md writes the library's sources and flags,
# as the Makefile has them, to .gpu/libcoop.sources and .gpu/libcoop.cflags,
# and config.h travels with the call (carry: [".gpu", "config.h"]).
set -u
R=${OUT:-$PWD/gpu-out}
mkdir -p "$R" /tmp/coop-build
cuda_inc=/usr/local/cuda/include
[ -f "$cuda_inc/cuda.h" ] || cuda_inc=$(dirname "$(dirname "$(command -v nvcc)")")/include
log=$R/build_on_device.log
{ gcc --version | head -1; grep -m1 "define CUDA_VERSION" "$cuda_inc/cuda.h"; } >"$log" 2>&1
# shellcheck disable=SC2046  # the word lists are meant to split
gcc $(cat .gpu/libcoop.cflags) -g -O2 -fPIC -fvisibility=hidden -DHAVE_CONFIG_H -I. -Iinclude \
    -Isrc -I"$cuda_inc" $(cat .gpu/libcoop.sources) -shared -o /tmp/coop-build/libcoop.so \
    -lm -lpthread -ldl >>"$log" 2>&1
echo "gcc rc=$?" >>"$log"
exports() { nm -D --defined-only "$1" | awk '{print $3}' | sort; }
exports /tmp/coop-build/libcoop.so >/tmp/coop-build/device.syms
exports .gpu/lib/libcoop.so >/tmp/coop-build/vm.syms
echo "exports: device-built $(wc -l </tmp/coop-build/device.syms)," \
    "VM-built $(wc -l </tmp/coop-build/vm.syms)," \
    "differing $(comm -3 /tmp/coop-build/device.syms /tmp/coop-build/vm.syms | wc -l)" >>"$log"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 COOP_LIBRARY=/tmp/coop-build/libcoop.so
timeout 120 python3 scripts/gpu/train_compare.py --model resnet50 --no-max-batch --steps 20 \
    --timeout 60 --out "$R/train_device_built.jsonl" >/dev/null 2>"$R/train_device_built.err"
cat "$log"
grep -h summary "$R/train_device_built.jsonl" | cut -c1-700
tail -c 500 "$R/train_device_built.err"
