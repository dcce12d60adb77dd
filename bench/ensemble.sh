#!/usr/bin/env bash
# An ensemble of two in-process models (the ONNX image encoder, then a classifier head,
# models/out/onnx/encoder and models/out/onnx_head) against the client chaining the same two
# models itself, at one concurrency, in one torchd, rounds alternating which goes first
# (bench/ensemble/main.go is the client). Prints each run and the medians' ratio.
#
# Usage: bench/ensemble.sh [seconds-per-run] [rounds] [concurrency]   (default 10 3 32)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
c=${3:-32}
out=build/ensemble-bench
rm -rf "$out" && mkdir -p "$out/repo/head/1" "$out/repo/pipeline/1"
cp -r models/out/onnx/repos/encoder/image_encoder "$out/repo/"
cp models/out/onnx_head/model.onnx "$out/repo/head/1/"
cat >"$out/repo/head/config.pbtxt" <<'PBTXT'
name: "head"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "embedding" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { }
instance_group [ { count: 2 kind: KIND_CPU } ]
PBTXT
cat >"$out/repo/pipeline/config.pbtxt" <<'PBTXT'
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 64, 64 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    { model_name: "image_encoder" model_version: -1 input_map { key: "input" value: "input" } output_map { key: "embedding" value: "emb" } },
    { model_name: "head" model_version: -1 input_map { key: "embedding" value: "emb" } output_map { key: "scores" value: "scores" } }
  ]
}
PBTXT
go build -o "$out/client" ./bench/ensemble
bin/torchd serve --access-log=false --model-repository "$out/repo" --enable-snapshots=false \
  --inference-address 127.0.0.1:18180 --management-address 127.0.0.1:18181 --metrics-address 127.0.0.1:18182 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= 2>"$out/torchd.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 1 240); do curl -sf 127.0.0.1:18180/v2/models/pipeline/ready >/dev/null && break; sleep 0.5; done
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ens= ; chain=
for r in $(seq 1 "$rounds"); do
  order="ensemble chain"; [ $((r % 2)) = 0 ] && order="chain ensemble"
  for mode in $order; do
    v=$("$out/client" -mode "$mode" -c "$c" -d "${secs}s")
    echo "round $r $mode: $v req/s"
    if [ "$mode" = ensemble ]; then ens+="$v "; else chain+="$v "; fi
  done
done
e=$(tr ' ' '\n' <<<"$ens" | grep . | median)
k=$(tr ' ' '\n' <<<"$chain" | grep . | median)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores; c=$c, $secs s a run, $rounds rounds, medians"
echo "| ensemble req/s | client chaining req/s | ensemble / chaining |"
echo "|---|---|---|"
echo "| $e | $k | $(awk -v a="$e" -v b="$k" 'BEGIN {printf "%.2f", a/b}') |"
