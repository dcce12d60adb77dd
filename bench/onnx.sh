#!/usr/bin/env bash
# ONNX models served by torchd against the seed deployments' baseline (onnxruntime behind
# FastAPI, bench/peers/fastapi_onnx.py) and against onnxruntime's own throughput in one Python
# process (bench/onnx/inprocess.py), on the same cores, in one run:
#   - ONNX MNIST (models/out/onnx/repos/mnist, unchanged: input.1, [1,1,28,28], five
#     instances) at c=8, and the BERT classifier of transformer-deploy's layout
#     (repos/bert, sequence 16) at c=32;
#   - each server driven by ab with the same Open Inference Protocol JSON body, ROUNDS rounds,
#     the order of the servers rotating each round; medians and ratios printed;
#   - the ceiling, in the same rounds and with the same client and concurrency: torchd's
#     GET /v2/health/ready (HTTP alone), and a KServe v2 JSON infer of a model that does
#     nothing (bench/onnx/bodies.py: an ONNX Add of a [1] tensor, with MNIST's five
#     instances, or BERT's one). No model can be served faster than that, so its ratio to
#     in-process says whether 0.9× in-process is reachable on these cores with this client;
#   - then perf_analyzer against torchd's MNIST, as the seed measured it
#     (--shape input.1:1,1,28,28), and against transformer-deploy's ensemble (its Python
#     tokenizer, then the ONNX model: models/out/triton_text) with --string-data, and
#     against the model that does nothing over HTTP and gRPC (binary tensors), when
#     bench/perf_analyzer.sh can fetch it.
#
# Usage: bench/onnx.sh [seconds-per-run] [rounds]   (default 10 3; about 7 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
py=.venv/bin/python
out=build/onnx-bench
rm -rf "$out" && mkdir -p "$out/repo"
cp -r models/out/onnx/repos/mnist/onnx-mnist-cpu models/out/triton_text/repo/* "$out/repo/"
$py bench/onnx/bodies.py "$out"
bin/torchd serve --access-log=false --model-repository "$out/repo" --enable-snapshots=false \
  --inference-address 127.0.0.1:18180 --management-address 127.0.0.1:18181 --metrics-address 127.0.0.1:18182 \
  --grpc-address 127.0.0.1:18101 --grpc-inference-address= --grpc-management-address= 2>"$out/torchd.log" &
pids=($!)
$py bench/peers/fastapi_onnx.py --model models/out/onnx/mnist/model.onnx --port 18194 --threads "$(nproc)" 2>"$out/fastapi-mnist.log" &
pids+=($!)
$py bench/peers/fastapi_onnx.py --model models/out/onnx/bert/model.bin --port 18195 --threads "$(nproc)" 2>"$out/fastapi-bert.log" &
pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for port in 18180 18194 18195; do
  for _ in $(seq 1 240); do curl -sf "127.0.0.1:$port/ping" >/dev/null && break; sleep 0.5; done
done
for m in transformer_onnx_model onnx-mnist-cpu trivial5 trivial1; do
  for _ in $(seq 1 240); do curl -sf "127.0.0.1:18180/v2/models/$m/ready" >/dev/null && break; sleep 0.5; done
done

# ab's requests per second against a URL with a body (none: a GET); failed or non-2xx
# requests fail the run.
ab_rate() {
  local url=$1 body=$2 c=$3 res
  if [ -n "$body" ]; then res=$(ab -q -k -c "$c" -t "$secs" -n 10000000 -T application/json -p "$body" "$url" 2>&1)
  else res=$(ab -q -k -c "$c" -t "$secs" -n 10000000 "$url" 2>&1); fi
  if grep -qE '^(Failed requests|Non-2xx responses):\s+[1-9]' <<<"$res"; then echo "ab: failures at $url" >&2; grep -E 'Failed|Non-2xx' <<<"$res" >&2; exit 1; fi
  awk '/Requests per second/ {print $4}' <<<"$res"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

declare -A runs
for model in mnist bert; do
  if [ $model = mnist ]; then c=8; name=onnx-mnist-cpu; port=18194; file=models/out/onnx/mnist/model.onnx; trivial=trivial5
  else c=32; name=transformer_onnx_model; port=18195; file=models/out/onnx/bert/model.bin; trivial=trivial1; fi
  peers=(torchd fastapi inprocess ready trivial)
  for r in $(seq 1 "$rounds"); do
    for i in 0 1 2 3 4; do
      peer=${peers[$(( (i + r) % 5 ))]}
      case $peer in
        ready) v=$(ab_rate "http://127.0.0.1:18180/v2/health/ready" "" $c) ;;
        trivial) v=$(ab_rate "http://127.0.0.1:18180/v2/models/$trivial/infer" "$out/trivial.json" $c) ;;
        torchd) v=$(ab_rate "http://127.0.0.1:18180/v2/models/$name/infer" "$out/$model.json" $c) ;;
        fastapi) v=$(ab_rate "http://127.0.0.1:$port/v2/models/$name/infer" "$out/$model.json" $c) ;;
        inprocess) v=$($py bench/onnx/inprocess.py "$file" "$out/$model.json" "$secs" | cut -d' ' -f1) ;;
      esac
      echo "$model round $r $peer: $v/s"
      runs[$model-$peer]+="$v "
    done
  done
done

echo
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores; $secs s a run, $rounds rounds, medians; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ceiling: torchd's GET /v2/health/ready, and a v2 JSON infer of a model that does nothing, at the same c"
echo "| model | c | torchd req/s | FastAPI + onnxruntime req/s | onnxruntime in-process runs/s | torchd / FastAPI | torchd / in-process | ceiling: ready req/s | ceiling: nothing-model infer req/s | nothing-model / in-process |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for model in mnist bert; do
  c=8; [ $model = bert ] && c=32
  t=$(tr ' ' '\n' <<<"${runs[$model-torchd]}" | grep . | median)
  f=$(tr ' ' '\n' <<<"${runs[$model-fastapi]}" | grep . | median)
  p=$(tr ' ' '\n' <<<"${runs[$model-inprocess]}" | grep . | median)
  h=$(tr ' ' '\n' <<<"${runs[$model-ready]}" | grep . | median)
  z=$(tr ' ' '\n' <<<"${runs[$model-trivial]}" | grep . | median)
  echo "| $model | $c | $t | $f | $p | $(awk -v a="$t" -v b="$f" 'BEGIN {printf "%.2f", a/b}') | $(awk -v a="$t" -v b="$p" 'BEGIN {printf "%.2f", a/b}') | $h | $z | $(awk -v a="$z" -v b="$p" 'BEGIN {printf "%.2f", a/b}') |"
done

if PA_ONLY=1 bench/perf_analyzer.sh >/dev/null 2>&1; then
  echo
  echo "perf_analyzer, torchd's onnx-mnist-cpu at c=8 (HTTP, as the seed measured it):"
  LD_LIBRARY_PATH=build/perf_analyzer/nvidia/cuda_runtime/lib build/perf_analyzer/tritonclient-2.40.0.data/data/bin/perf_analyzer \
    -m onnx-mnist-cpu -u 127.0.0.1:18180 -i http --shared-memory none --shape input.1:1,1,28,28 \
    --concurrency-range 8 --measurement-interval 5000 2>&1 | grep -E 'Concurrency: 8|Throughput|p99|[Ff]ailed|rror' || true
  for proto in http grpc; do
    url=127.0.0.1:18180; [ $proto = grpc ] && url=127.0.0.1:18101
    echo
    echo "perf_analyzer, the model that does nothing (trivial5) at c=8, $proto, binary tensors:"
    LD_LIBRARY_PATH=build/perf_analyzer/nvidia/cuda_runtime/lib build/perf_analyzer/tritonclient-2.40.0.data/data/bin/perf_analyzer \
      -m trivial5 -u $url -i $proto --shared-memory none --shape x:1 \
      --concurrency-range 8 --measurement-interval 5000 2>&1 | grep -E 'Concurrency: 8|Throughput|p99|[Ff]ailed|rror' || true
  done
  echo
  echo "perf_analyzer, transformer_inference (Python tokenizer + ONNX BERT) with --string-data, HTTP:"
  LD_LIBRARY_PATH=build/perf_analyzer/nvidia/cuda_runtime/lib build/perf_analyzer/tritonclient-2.40.0.data/data/bin/perf_analyzer \
    -m transformer_inference -u 127.0.0.1:18180 -i http --shared-memory none \
    --string-data "This live event is great. I will sign-up for Infinity." --shape TEXT:1 \
    --concurrency-range 1:4:3 --measurement-interval 5000 --stability-percentage 50 --max-trials 10 2>&1 | grep -E "^Concurrency:|[Ff]ailed" || true
fi
