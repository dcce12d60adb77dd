#!/usr/bin/env bash
# A request's own cost in torchd's handler processes against TorchServe 0.12's, with a handler
# that does nothing (bench/handlerproc/echo_handler.py: each body back): what is left is the
# server, the worker protocol and the wake-ups on each side. Two archives: echo1 (batch size 1,
# one worker: nothing waits for a batch) and echo32 (bench/handlerproc.sh's batch size 32,
# maxBatchDelay 10, two workers). Each round runs `ab -k -c 1` on each model and server in a
# shuffled order; prints each run, then per model the medians over the rounds:
#   median model=M torchd_p50_ms=.. torchserve_p50_ms=.. torchd_mean_ms=.. torchserve_mean_ms=.. mean_diff_ms=..
# with the load average at each run's start. TORCHD_ENV adds environment variables to torchd.
# Usage: bench/handlerproc/echo.sh [rounds] [seconds per run]   (default 3 rounds of 10 s)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-10}
py=${PYTHON:-$PWD/.venv/bin/python}
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT

"$py" bench/handlerproc/make_echo.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }

env ${TORCHD_ENV:-} setsid bin/torchd serve --python "$py" --model-store "$work/store" --models echo1=echo1.mar,echo32=echo32.mar \
  --inference-address 127.0.0.1:18970 --management-address 127.0.0.1:18971 --metrics-address 127.0.0.1:18972 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= \
  --access-log=false --enable-snapshots=false ${TORCHD_ARGS:-} >"$work/torchd.log" 2>&1 &
pids+=($!)
declare -A port pid
port[torchd]=18970 pid[torchd]=$!

mkdir -p "$work/ts"
cat >"$work/ts/config.properties" <<CFG
inference_address=http://127.0.0.1:18980
management_address=http://127.0.0.1:18981
metrics_address=http://127.0.0.1:18982
grpc_inference_port=18983
grpc_management_port=18984
model_store=$work/store
load_models=echo1.mar,echo32.mar
disable_token_authorization=true
vmargs=-Djava.io.tmpdir=$work/ts
CFG
(cd "$work/ts" && exec setsid "$py" -c "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()" \
  --start --foreground --ncs --ts-config config.properties --model-store "$work/store" --disable-token-auth >"$work/ts/out.log" 2>&1) &
pids+=($!)
port[torchserve]=18980 pid[torchserve]=$!

for s in torchd torchserve; do
  for m in echo1 echo32; do
    until curl -sf http://127.0.0.1:$((port[$s] + 1))/models/$m | grep -q '"READY"'; do
      kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; tail -20 "$work/torchd.log" "$work/ts/out.log"; exit 1; }
      sleep 1
    done
  done
done

echo '{"x": [1, 2, 3, 4]}' >"$work/body.json"
for s in torchd torchserve; do
  for m in echo1 echo32; do
    ab -k -q -c 1 -n 300 -T application/json -p "$work/body.json" http://127.0.0.1:${port[$s]}/predictions/$m >/dev/null 2>&1 || true
  done
done

for r in $(seq "$rounds"); do
  for m in echo1 echo32; do
    for s in $(shuf -e torchd torchserve); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      ab -k -q -c 1 -t "$secs" -n 10000000 -T application/json -p "$work/body.json" http://127.0.0.1:${port[$s]}/predictions/$m 2>&1 |
        awk -v r="$r" -v s="$s" -v m="$m" -v load="$load" \
          '/Requests per second/ {rps=$4} /^Time per request/ && !mean {mean=$4} /^  50%/ {p50=$2} /^  99%/ {p99=$2} /^Non-2xx/ {bad=$3}
          END {printf "%s model=%s server=%s rps=%s mean_ms=%s p50_ms=%s p99_ms=%s load=%s%s\n", r, m, s, rps, mean, p50, p99, load, bad ? " non2xx=" bad : ""}'
    done
  done
done | tee "$work/runs"

awk '{for (i=2;i<=NF;i++) {split($i,kv,"="); f[kv[1]]=kv[2]} k=f["model"] " " f["server"]; n[k]++
      p50[k, n[k]]=f["p50_ms"]; mean[k, n[k]]=f["mean_ms"]; ms[f["model"]]=1}
  function med(a, k,   i, j, t, v, m) { m=n[k]; for (i=1;i<=m;i++) v[i]=a[k, i]+0
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (v[j]<v[i]) {t=v[i]; v[i]=v[j]; v[j]=t}
    return m%2 ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
  END { for (m in ms) { a=m " torchd"; b=m " torchserve"
    printf "median model=%s torchd_p50_ms=%.1f torchserve_p50_ms=%.1f torchd_mean_ms=%.2f torchserve_mean_ms=%.2f mean_diff_ms=%.2f\n",
      m, med(p50, a), med(p50, b), med(mean, a), med(mean, b), med(mean, a) - med(mean, b) } }' "$work/runs"
