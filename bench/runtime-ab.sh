#!/usr/bin/env bash
# Two torchd builds on the same archives, in-process (`torchd bench-model`: preprocess, batched
# forward, postprocess; no HTTP), alternating the builds in every round so that both see the
# same machine. Used to compare LibTorch runtimes: OLD is another build's bin/ (its torchd and
# libtorchd_c.so), e.g. one built against Debian's LibTorch 1.13 with LIBTORCH=/usr.
# STORE holds the archives (default model-store); both builds load the same files.
# Prints "round model build single_ms best_req_s best_batch" per run.
# Usage: OLD=/path/to/old/bin [STORE=dir] bench/runtime-ab.sh [rounds]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
old=${OLD:?OLD=/path/to/another/build/bin}
store=${STORE:-model-store}
points=(
  "resnet18 models/out/resnet18/sample_640x480.jpg 1,4,8,16"
  "digits models/out/digits/sample.png 1,8,32,64"
  "digits_tensor models/out/digits/sample_tensor.npy 1,8,32,64"
)
for r in $(seq "$rounds"); do
  for p in "${points[@]}"; do
    read -r model input sizes <<<"$p"
    for build in new old; do
      bin=bin/torchd; [ "$build" = old ] && bin=$old/torchd
      "$bin" bench-model --json --rounds 1 --time 1s --batch-sizes "$sizes" --input "$input" "$store/$model.mar" 2>/dev/null |
        python3 -c 'import json, sys; j = json.load(sys.stdin); print(sys.argv[1], sys.argv[2], sys.argv[3], j["libtorch"], "%.2f" % (j["single_ns"] / 1e6), "%.0f" % j["best"]["throughput"], j["best"]["batch"])' "$r" "$model" "$build"
    done
  done
done
