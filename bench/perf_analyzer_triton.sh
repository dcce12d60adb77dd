#!/usr/bin/env bash
# perf_analyzer against one model served two ways by one torchd: from a Triton model
# repository (digits_repo: config.pbtxt + 1/model.pt) and from its .mar (digits_tensor), with
# the same batching (batch 32, 2 ms delay, queue 256, one worker). Each round runs both, and
# the one that goes first alternates between rounds, so that neither drift nor order favours
# one; the figures should agree within noise.
#
# perf_analyzer comes from bench/perf_analyzer.sh (PA_ONLY=1), into build/perf_analyzer.
#
# Usage: bench/perf_analyzer_triton.sh [concurrency-range] [rounds] [perf_analyzer args...]
#        (default: 1:16:4 3). Results: build/perf_analyzer/triton-<model>-<round>.csv, and a summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
range=${1:-1:16:4}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
PA_ONLY=1 bench/perf_analyzer.sh
dir=build/perf_analyzer
pa=$dir/tritonclient-2.40.0.data/data/bin/perf_analyzer
repo=build/triton-repo
rm -rf "$repo" && mkdir -p "$repo/digits_repo/1"
cp models/out/digits/model.pt "$repo/digits_repo/1/model.pt"
cat >"$repo/digits_repo/config.pbtxt" <<'PBTXT'
name: "digits_repo"
platform: "pytorch_libtorch"
max_batch_size: 32
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 2000
  default_queue_policy { max_queue_size: 256 }
}
instance_group [ { count: 1 kind: KIND_CPU } ]
PBTXT
log=$(mktemp)
bin/torchd serve --access-log=false --model-store "${STORE:-model-store}" --models digits_tensor=digits_tensor.mar \
  --model-repository "$repo" --enable-snapshots=false \
  --inference-address 127.0.0.1:18180 --management-address 127.0.0.1:18181 --metrics-address 127.0.0.1:18182 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 120); do curl -sf 127.0.0.1:18180/v2/health/ready >/dev/null && break; sleep 0.5; done
curl -sf 127.0.0.1:18180/v2/models/digits_repo/ready >/dev/null || { cat "$log"; exit 1; }
for round in $(seq 1 "$rounds"); do
  order="digits_repo digits_tensor"
  ((round % 2 == 0)) && order="digits_tensor digits_repo"
  for model in $order; do
    echo "== round $round: $model"
    LD_LIBRARY_PATH=$dir/nvidia/cuda_runtime/lib "$pa" -m "$model" -u 127.0.0.1:18180 -i http --shared-memory none \
      --concurrency-range "$range" --measurement-interval "${INTERVAL_MS:-3000}" -f "$dir/triton-$model-$round.csv" "$@" |
      grep -E '^Concurrency:' || echo "perf_analyzer: no stable measurement of $model (see above)"
  done
done
