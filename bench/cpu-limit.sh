#!/usr/bin/env bash
# Issue #54's served comparison: the zoo's image CNNs behind torchd (TorchScript fp32, the .pt2
# package in fp32 and in int8) against TorchServe 0.12's built-in image_classifier handler on the
# same TorchScript file, all with the mission's settings (batch_size 32, max_batch_delay 10 ms,
# 2 workers), `ab -k -c C` with a 640×480 JPEG; each round runs every server once per model in
# a shuffled order. Between the rounds, torchd's in-process reference (`torchd bench-model`'s
# best pipelined throughput, the ceiling that served figures are divided by) of each torchd
# variant. Prints one line per run, then per model and variant the medians over the rounds:
#   R model=M server=S rps=X p50_ms=Y p99_ms=Z failed=N
#   REF model=M server=S best_rps=X single_ms=Y
#   median model=M server=S rps=X p99_ms=Y vs_torchserve=X/TS vs_reference=X/REF
# A ratio within the rounds' own spread is noise.
#
# Needs `make build archives handler-runtime` (TorchServe 0.12 and its archiver are in the
# venv), `make models-int8` for the int8 rows (skipped without it), Java 11+ and ab.
# Usage: bench/cpu-limit.sh [rounds] [seconds per run] [concurrency]   (default 3 20 50;
# MODELS="resnet18 efficientnet_lite0" by default)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-20}
conc=${3:-50}
models=${MODELS:-resnet18 efficientnet_lite0}
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
mkdir -p "$work/store" "$work/ts/store"

# torchd's archives: the zoo's TorchScript and fp32 package, and the int8 package where made.
# TorchServe's: its own archiver over the same TorchScript file, the built-in handler.
declare -A variants
for m in $models; do
  variants[$m]="ts pt2"
  ln -s "$PWD/model-store/$m.mar" "$work/store/${m}_ts.mar"
  ln -s "$PWD/model-store/${m}_pt2.mar" "$work/store/${m}_pt2.mar"
  if [ -f "models/out/$m/model_int8.pt2" ]; then
    bin/torchd archive --model-name "${m}_int8" --serialized-file "models/out/$m/model_int8.pt2" \
      --config-file "models/configs/$m.toml" --extra-files "models/out/$m/index_to_name.json" \
      --export-path "$work/store" --archive-format zip-store --force >/dev/null
    variants[$m]+=" int8"
  fi
  .venv/bin/torch-model-archiver --model-name "$m" --version 1.0 --serialized-file "models/out/$m/model.pt" \
    --handler image_classifier --extra-files "models/out/$m/index_to_name.json" --export-path "$work/ts/store" --force
done

setsid bin/torchd serve --model-store "$work/store" \
  --inference-address 127.0.0.1:18950 --management-address 127.0.0.1:18951 --metrics-address 127.0.0.1:18952 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= \
  --access-log=false --enable-snapshots=false --job-queue-size 1024 >"$work/torchd.log" 2>&1 &
pids+=($!)
torchd_pid=$!
cat >"$work/ts/config.properties" <<CFG
inference_address=http://127.0.0.1:18960
management_address=http://127.0.0.1:18961
metrics_address=http://127.0.0.1:18962
grpc_inference_port=18963
grpc_management_port=18964
model_store=$work/ts/store
disable_token_authorization=true
enable_model_api=true
job_queue_size=1024
vmargs=-Djava.io.tmpdir=$work/ts
CFG
(cd "$work/ts" && exec setsid "$py" -c "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()" \
  --start --foreground --ncs --ts-config config.properties --model-store "$work/ts/store" --disable-token-auth >"$work/ts/out.log" 2>&1) &
pids+=($!)
ts_pid=$!
for p in 18950 18960; do
  until curl -sf "http://127.0.0.1:$p/ping" >/dev/null; do
    kill -0 "$torchd_pid" 2>/dev/null && kill -0 "$ts_pid" 2>/dev/null || { tail -20 "$work/torchd.log" "$work/ts/out.log"; exit 1; }
    sleep 1
  done
done

settings="batch_size=32&max_batch_delay=10&initial_workers=2&synchronous=true"
for m in $models; do
  for v in ${variants[$m]}; do
    # The zoo's package carries its int8 variant, which precision auto would serve.
    p=; [ "$v" = pt2 ] && p="&precision=fp32"
    curl -sf -X POST "http://127.0.0.1:18951/models?url=${m}_$v.mar&model_name=${m}_$v&$settings$p" >/dev/null ||
      { echo "torchd: register ${m}_$v failed" >&2; tail -5 "$work/torchd.log"; exit 1; }
  done
  curl -sf -X POST "http://127.0.0.1:18961/models?url=$m.mar&model_name=$m&$settings" >/dev/null ||
    { echo "torchserve: register $m failed" >&2; tail -20 "$work/ts/out.log"; exit 1; }
done

url() { # url SERVER MODEL
  case $1 in torchserve) echo "http://127.0.0.1:18960/predictions/$2" ;; *) echo "http://127.0.0.1:18950/predictions/${2}_${1#torchd-}" ;; esac
}
load() { # load SERVER MODEL SECONDS
  ab -k -q -s 300 -c "$conc" -t "$3" -n 10000000 -T image/jpeg -p "$img" -e "$work/pct.csv" "$(url "$1" "$2")" >"$work/ab.txt" 2>&1 || true
}
# Warm-up: every server and model at the run's concurrency, 5 s.
for m in $models; do
  for s in torchserve $(printf 'torchd-%s ' ${variants[$m]}); do load "$s" "$m" 5; done
done

log=$work/runs.txt
: >"$log"
for r in $(seq "$rounds"); do
  for m in $models; do
    for s in $(shuf -e torchserve $(printf 'torchd-%s ' ${variants[$m]})); do
      load "$s" "$m" "$secs"
      rps=$(awk '/Requests per second/ {print $4}' "$work/ab.txt")
      # ab counts a body whose length differs from the first as failed; answers vary in length.
      failed=$(awk '/^ *\(Connect:/ {gsub(/[(),]/, ""); print $2 + $4 + $8}' "$work/ab.txt")
      non2xx=$(awk '/Non-2xx responses/ {print $3}' "$work/ab.txt")
      p50=$(awk -F, '$1 == 50 {print $2}' "$work/pct.csv")
      p99=$(awk -F, '$1 == 99 {print $2}' "$work/pct.csv")
      echo "R round=$r model=$m server=$s rps=$rps p50_ms=$p50 p99_ms=$p99 failed=$((${failed:-0} + ${non2xx:-0}))" | tee -a "$log"
    done
    # The in-process reference of each torchd variant, taken while the servers idle.
    for v in ${variants[$m]}; do
      f=$work/store/${m}_$v.mar
      p=; [ "$v" = pt2 ] && p="--precision fp32"
      bin/torchd bench-model $p --input "$img" --content-type image/jpeg --batch-sizes 1,8,16,32 --time 1s --rounds 1 --json "$f" >"$work/ref.json" 2>"$work/ref.err" ||
        { echo "bench-model ${m}_$v failed: $(tail -2 "$work/ref.err")" >&2; continue; }
      "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("REF round=%s model=%s server=torchd-%s best_rps=%.1f single_ms=%.1f best_batch=%d best_workers=%d" % (sys.argv[2], sys.argv[3], sys.argv[4], j["best"]["throughput"], j["single_ns"]/1e6, j["best"]["batch"], j["best"]["workers"]))' \
        "$work/ref.json" "$r" "$m" "$v" | tee -a "$log"
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
    k = f["model"] " " f["server"]
    if ($1 == "R") { vals[k " rps"] = vals[k " rps"] " " f["rps"]; vals[k " p99"] = vals[k " p99"] " " f["p99_ms"]; seen[k] = 1 }
    if ($1 == "REF") vals[k " ref"] = vals[k " ref"] " " f["best_rps"]
  }
  END {
    for (k in seen) { split(k, p, " "); ts = median(p[1] " torchserve rps")
      ref = (k " ref") in vals ? median(k " ref") : 0
      printf "median model=%s server=%s rps=%.1f p99_ms=%d vs_torchserve=%.2f vs_reference=%s\n", p[1], p[2], median(k " rps"), median(k " p99"),
        median(k " rps") / ts, ref ? sprintf("%.2f (reference %.1f)", median(k " rps") / ref, ref) : "-" }
  }' "$log" | sort
