#!/usr/bin/env bash
# Issue #68's served goal for the backend that wins each zoo image model's forward on this CPU:
# torchd serving the OpenVINO IR (resnet18: NNCF int8; EfficientNet-Lite0: fp32 weights with
# the bf16 hint, models/openvino_ir.py; forward_batch 8, FORWARD_BATCH to change: every
# forward then runs on a model compiled for 8 rows, and batches are taken in whole forwards)
# and, beside it, the LibTorch .pt2 archive as
# `precision auto` serves it (int8 where the CPU has VNNI), with the mission's settings
# (BATCH_SIZE=32 WORKERS=2 LINGER_MS=10), `ab -k -c 50` with the 640×480 JPEG; every variant of
# a model in a shuffled order each round. Between the runs, each variant's in-process reference:
# `torchd bench-model`'s best throughput, pipelined as the server runs. Which configuration is
# best (batch 1, 8, 16, 32; one worker on every core, or two on half each) is found once, before
# the rounds, in one-second runs; each round then measures that one and w2b16 (every pairing
# of their batch sizes and worker counts) for REF_SECS (default 3) beside its served run, and
# takes the fastest: the best of eight one-second figures sat above what the model sustains,
# by its own noise, and one-second figures can pick the slower configuration. Prints per run
# and per variant the medians:
#   R round=N model=M variant=V rps=X p50_ms=Y p99_ms=Z mean_batch=B cpu_ms_per_req=C failed=F load=L
#   REF round=N model=M variant=V best_rps=X ... best_cpu_ms_per_req=C w2b16_rps=X w2b16_cpu_ms_per_req=C ...
#   median model=M variant=V rps=X reference=R served/reference=X/R ... reference_cpu/served_cpu=X
# w2b16 is bench-model's pipelined figure as the server runs at c=50 (two workers, a core each,
# batch 16, near the mean batch served). On a shared machine the rates follow what the others
# leave; the CPU time per request (the server's, from /proc; bench-model's, from getrusage)
# does not, so reference_cpu/served_cpu (1: the request path costs nothing) is the figure there.
# Needs `make build archives models-int8 models-openvino` and ab.
# Usage: bench/openvino-served.sh [rounds] [seconds per run] [concurrency]   (default 3 15 50)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-15}
conc=${3:-50}
models=${MODELS:-resnet18 efficientnet_lite0}
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
st=build/openvino-served
rm -rf "$st"
mkdir -p "$st/store"

# The IR archives (bench/openvino-archives.sh) beside the zoo's .pt2 archives.
FORWARD_BATCH=${FORWARD_BATCH:-8} bench/openvino-archives.sh "$st/store" $models
for m in $models; do ln -s "$PWD/model-store/${m}_pt2.mar" "$st/store/${m}_pt2.mar"; done

BATCH_SIZE=32 WORKERS=2 LINGER_MS=10 setsid bin/torchd serve --access-log=false --model-store "$st/store" --models all \
  --enable-snapshots=false --inference-address 127.0.0.1:18970 --management-address 127.0.0.1:18971 \
  --metrics-address 127.0.0.1:18972 --grpc-address= --grpc-inference-address= --grpc-management-address= >"$st/torchd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait 2>/dev/null' EXIT
until curl -sf 127.0.0.1:18970/ping >/dev/null; do
  kill -0 $pid 2>/dev/null || { tail -20 "$st/torchd.log"; exit 1; }
  sleep 0.5
done
grep -m1 'model name' /proc/cpuinfo
# The mean batch served: the batch-size histogram's sum and count for the model.
batches() { curl -sf 127.0.0.1:18972/metrics | awk -v m="model=\"$1\"" 'index($0, m) && /^torchd_batch_size_(sum|count)/ {
  split($1, a, "{"); v[a[1]] += $2 } END {printf "%s %s\n", v["torchd_batch_size_sum"] + 0, v["torchd_batch_size_count"] + 0}'; }
load() { # load MODEL SECONDS
  ab -k -q -s 300 -c "$conc" -t "$2" -n 10000000 -T image/jpeg -p "$img" -e "$st/pct.csv" "http://127.0.0.1:18970/predictions/$1" >"$st/ab.txt" 2>&1 || true
}
# The best configuration of each variant, in process.
declare -A best
for m in $models; do for v in ov pt2; do
  bin/torchd bench-model --input "$img" --content-type image/jpeg --batch-sizes 1,8,16,32 --workers 1,2 --time 1s --rounds 1 \
    --json "$st/store/${m}_$v.mar" >"$st/ref.json" 2>"$st/ref.err" || { echo "bench-model ${m}_$v: $(tail -2 "$st/ref.err")" >&2; exit 1; }
  best[${m}_$v]=$("$py" -c 'import json, sys; b = json.load(open(sys.argv[1]))["best"]; print(b["batch"], b["workers"])' "$st/ref.json")
  echo "SWEEP model=$m variant=$v best_batch_workers=${best[${m}_$v]// /,}"
done; done
for m in $models; do for v in ov pt2; do
  until curl -sf -T $img -H 'Content-Type: image/jpeg' 127.0.0.1:18970/predictions/${m}_$v >/dev/null; do
    kill -0 $pid 2>/dev/null || { tail -20 "$st/torchd.log"; exit 1; }
    sleep 0.5
  done
  load ${m}_$v 5 # warm-up at the run's concurrency
done; done

log=$st/runs.txt
: >"$log"
for r in $(seq "$rounds"); do
  for m in $models; do
    for v in $(shuf -e ov pt2); do
      read -r s0 c0 < <(batches ${m}_$v)
      t0=$(awk '{print $14 + $15}' /proc/$pid/stat)
      load ${m}_$v "$secs"
      t1=$(awk '{print $14 + $15}' /proc/$pid/stat)
      read -r s1 c1 < <(batches ${m}_$v)
      n=$(awk '/Complete requests/ {print $3}' "$st/ab.txt")
      # ab counts a body whose length differs from the first as failed; answers vary in length.
      failed=$(awk '/^ *\(Connect:/ {gsub(/[(),]/, ""); print $2 + $4 + $8}' "$st/ab.txt")
      non2xx=$(awk '/Non-2xx responses/ {print $3}' "$st/ab.txt")
      echo "R round=$r model=$m variant=$v rps=$(awk '/Requests per second/ {print $4}' "$st/ab.txt")" \
        "p50_ms=$(awk -F, '$1 == 50 {print $2}' "$st/pct.csv") p99_ms=$(awk -F, '$1 == 99 {print $2}' "$st/pct.csv")" \
        "mean_batch=$(awk -v s=$((s1 - s0)) -v c=$((c1 - c0)) 'BEGIN {if (c > 0) printf "%.1f", s / c}')" \
        "cpu_ms_per_req=$(awk -v d=$((t1 - t0)) -v n="${n:-0}" -v hz="$(getconf CLK_TCK)" 'BEGIN {if (n > 0) printf "%.2f", d * 1000 / hz / n}')" \
        "failed=$((${failed:-0} + ${non2xx:-0})) load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$log"
    done
    for v in $(shuf -e ov pt2); do
      read -r bb bw <<<"${best[${m}_$v]}"
      bin/torchd bench-model --input "$img" --content-type image/jpeg --batch-sizes "$bb,16" --workers "$bw,2" --time "${REF_SECS:-3}s" --rounds 1 \
        --json "$st/store/${m}_$v.mar" >"$st/ref.json" 2>"$st/ref.err" || { echo "bench-model ${m}_$v: $(tail -2 "$st/ref.err")" >&2; continue; }
      # The best of the round's configurations (the sweep's best, and the one the server
      # runs: two workers on a core each, at the batch nearest the mean batch served, 16 at
      # c=50), with its CPU time per request: the sweep's one-second figures can pick a
      # configuration that three seconds show slower than the other.
      "$py" -c 'import json, sys; j = json.load(open(sys.argv[1]))
b = max(j["pipelined"], key=lambda p: p["throughput"])
s = next(p for p in j["pipelined"] if p["workers"] == 2 and p["batch"] == 16)
print("REF round=%s model=%s variant=%s best_rps=%.1f best_batch=%d best_workers=%d best_cpu_ms_per_req=%.2f w2b16_rps=%.1f w2b16_cpu_ms_per_req=%.2f single_ms=%.2f precision=%s runtime=%s" % (
    sys.argv[2], sys.argv[3], sys.argv[4], b["throughput"], b["batch"], b["workers"], b["cpu_ns_per_request"] / 1e6,
    s["throughput"], s["cpu_ns_per_request"] / 1e6, j["single_ns"] / 1e6, j["precision"], j["runtime"]))' \
        "$st/ref.json" "$r" "$m" "$v" | tee -a "$log"
    done
  done
done

awk '
  function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["model"] " " f["variant"]
    if ($1 == "R") { vals[k " rps"] = vals[k " rps"] " " f["rps"]; vals[k " cpu"] = vals[k " cpu"] " " f["cpu_ms_per_req"]; seen[k] = 1 }
    if ($1 == "REF") { vals[k " ref"] = vals[k " ref"] " " f["best_rps"]; vals[k " refcpu"] = vals[k " refcpu"] " " f["best_cpu_ms_per_req"]
      vals[k " w2"] = vals[k " w2"] " " f["w2b16_rps"]; vals[k " w2cpu"] = vals[k " w2cpu"] " " f["w2b16_cpu_ms_per_req"] }
  }
  END {
    for (k in seen) { split(k, p, " "); ref = (k " ref") in vals ? median(k " ref") : 0
      if (!ref) { printf "median model=%s variant=%s rps=%.1f (no reference)\n", p[1], p[2], median(k " rps"); continue }
      printf "median model=%s variant=%s rps=%.1f reference=%.1f served/reference=%.2f w2b16=%.1f served/w2b16=%.2f cpu_ms_per_req=%.2f reference_cpu=%.2f w2b16_cpu=%.2f reference_cpu/served_cpu=%.2f\n",
        p[1], p[2], median(k " rps"), ref, median(k " rps") / ref, median(k " w2"), median(k " rps") / median(k " w2"),
        median(k " cpu"), median(k " refcpu"), median(k " w2cpu"), median(k " refcpu") / median(k " cpu") }
  }' "$log" | sort
