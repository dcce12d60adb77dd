#!/usr/bin/env bash
# The same model over the Open Inference Protocol's gRPC (raw contents) and HTTP (binary
# tensors), with Triton's perf_analyzer at concurrency 1 and 32, in ROUNDS interleaved
# rounds against one torchd (bench/perf_analyzer.sh fetches perf_analyzer). Writes
# build/grpc-vs-http/<protocol>-c<N>-r<round>.csv and prints a table of the medians over
# the rounds: throughput, p50 and p99 latency, and the server's own time per request
# (perf_analyzer's server-side queue + compute, from the statistics extension, gRPC only).
# The client's time less the server's is the transport's share.
#
# Usage: bench/grpc-vs-http.sh [model] [rounds]   (default: digits_tensor 3)
#        The model is archived as version 1 from models/out/$ZOO (default digits) and
#        models/configs/<model>.toml into build/grpc-vs-http/store: perf_analyzer reads the
#        server's statistics only for integer versions. MEASURE is the measurement interval
#        in ms (default 5000); PA_ARGS adds perf_analyzer flags.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-digits_tensor}
rounds=${2:-3}
measure=${MEASURE:-5000}
out=build/grpc-vs-http
mkdir -p "$out/store"
bin/torchd archive --model-name "$model" --version 1 --serialized-file "models/out/${ZOO:-digits}/model.pt" \
  --config-file "models/configs/$model.toml" --export-path "$out/store" --force >/dev/null
PA_ONLY=1 bench/perf_analyzer.sh
dir=build/perf_analyzer
pa=$dir/tritonclient-2.40.0.data/data/bin/perf_analyzer
log=$out/torchd.log
bin/torchd serve --access-log=false --model-store "$out/store" --models "$model=$model.mar" \
  --inference-address 127.0.0.1:18180 --management-address 127.0.0.1:18181 --metrics-address 127.0.0.1:18182 \
  --grpc-address 127.0.0.1:18101 --grpc-inference-address= --grpc-management-address= 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 1 120); do curl -sf 127.0.0.1:18180/ping >/dev/null && break; sleep 0.5; done
for r in $(seq 1 "$rounds"); do
  for c in 1 32; do
    for p in http grpc; do
      url=127.0.0.1:18180
      [ "$p" = grpc ] && url=127.0.0.1:18101
      LD_LIBRARY_PATH=$dir/nvidia/cuda_runtime/lib "$pa" -m "$model" -u "$url" -i "$p" --shared-memory none \
        --concurrency-range "$c:$c" --measurement-interval "$measure" --percentile 50 \
        -f "$out/$p-c$c-r$r.csv" --verbose-csv ${PA_ARGS:-} >/dev/null
    done
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def row(p, c, r):
    with open(f"{out}/{p}-c{c}-r{r}.csv") as f:
        return next(csv.DictReader(f))
print("| protocol | concurrency | infer/s | p50 µs | p99 µs | server queue+compute µs |")
print("|---|---|---|---|---|---|")
for c in (1, 32):
    for p in ("http", "grpc"):
        rows = [row(p, c, r) for r in range(1, rounds + 1)]
        med = lambda k: statistics.median(float(x.get(k) or 0) for x in rows)
        server = med("Server Queue") + med("Server Compute Input") + med("Server Compute Infer") + med("Server Compute Output")
        shown = f"{server:.0f}" if server else "n/a"  # torchd's REST has no statistics route
        print(f"| {p} | {c} | {med('Inferences/Second'):.0f} | {med('p50 latency'):.0f} | {med('p99 latency'):.0f} | {shown} |")
PY
