#!/usr/bin/env bash
# Two torchd builds and TorchServe 0.12 in one run, for an A/B of a handler-process change on
# a machine that is not idle: bench/handlerproc.sh's archive, settings, load and memory
# measures, with three servers instead of two, each round running each concurrency on the
# three in a shuffled order. Prints one line per run, then the medians per concurrency:
#   median c=N a_rps=.. b_rps=.. ts_rps=.. b/a=.. a/ts=.. b/ts=.. (and p99, RSS, PSS alike)
# A=path and B=path name the two binaries (default bin/torchd-base and bin/torchd); both take
# TORCHD_ARGS, and A_ENV / B_ENV add environment variables to one of them (e.g.
# B_ENV=GOMP_SPINCOUNT=10000). Each run also prints the CPU its server's whole tree spent per
# request (cpu_ms), which a loaded machine distorts less than throughput does. SERVERS="a b"
# leaves TorchServe out. Usage: bench/handlerproc-ab.sh [rounds] [seconds per run]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-15}
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT

"$py" bench/handlerproc/make.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }

declare -A port pid
start_torchd() { # name binary base-port env
  env $4 setsid "$2" serve --python "$py" --model-store "$work/store" --models resnet18_py=resnet18_py.mar \
    --inference-address 127.0.0.1:$3 --management-address 127.0.0.1:$(($3 + 1)) --metrics-address 127.0.0.1:$(($3 + 2)) \
    --grpc-address= --grpc-inference-address= --grpc-management-address= \
    --access-log=false --enable-snapshots=false --job-queue-size 1024 ${TORCHD_ARGS:-} >"$work/$1.log" 2>&1 &
  pids+=($!)
  port[$1]=$3 pid[$1]=$!
}
start_torchd a "${A:-bin/torchd-base}" 18950 "${A_ENV:-}"
start_torchd b "${B:-bin/torchd}" 18960 "${B_ENV:-}"

mkdir -p "$work/ts"
cat >"$work/ts/config.properties" <<CFG
inference_address=http://127.0.0.1:18940
management_address=http://127.0.0.1:18941
metrics_address=http://127.0.0.1:18942
grpc_inference_port=18943
grpc_management_port=18944
model_store=$work/store
load_models=resnet18_py.mar
disable_token_authorization=true
job_queue_size=1024
vmargs=-Djava.io.tmpdir=$work/ts
CFG
(cd "$work/ts" && exec setsid "$py" -c "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()" \
  --start --foreground --ncs --ts-config config.properties --model-store "$work/store" --disable-token-auth >"$work/ts.log" 2>&1) &
pids+=($!)
port[ts]=18940 pid[ts]=$!

servers=${SERVERS:-a b ts}
for s in $servers; do
  until [ "$(curl -sf http://127.0.0.1:$((port[$s] + 1))/models/resnet18_py | grep -c '"READY"')" -ge 2 ]; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; tail -20 "$work/$s.log"; exit 1; }
    sleep 1
  done
done

. bench/handlerproc/lib.sh

for s in $servers; do
  ab -k -q -c 50 -n 500 -T image/jpeg -p "$img" http://127.0.0.1:${port[$s]}/predictions/resnet18_py >/dev/null 2>&1 || true
done

settle "${pid[@]}"
for r in $(seq "$rounds"); do
  for c in 1 50; do
    for s in $(shuf -e $servers); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      cpu0=$(tree_cpu "${pid[$s]}")
      out=$(ab -k -q -c "$c" -t "$secs" -n 10000000 -T image/jpeg -p "$img" http://127.0.0.1:${port[$s]}/predictions/resnet18_py 2>&1 || true)
      cpu=$(($(tree_cpu "${pid[$s]}") - cpu0))
      settle "${pid[@]}" # the run's queued requests finish; then the memory it left, and the next run starts idle
      echo "$out" | awk -v r="$r" -v s="$s" -v c="$c" -v mem="$(tree_mem "${pid[$s]}")" -v load="$load" -v cpu="$cpu" \
        '/Requests per second/ {rps=$4} /^Complete requests/ {n=$3} /^  50%/ {p50=$2} /^  99%/ {p99=$2} /^Non-2xx/ {bad=$3}
        END {split(mem, m, " "); printf "%s c=%s server=%s rps=%s p50_ms=%s p99_ms=%s rss_mib=%s pss_mib=%s cpu_ms=%.0f load=%s%s\n", r, c, s, rps, p50, p99, m[1], m[2], n ? cpu / n : 0, load, bad ? " non2xx=" bad : ""}'
    done
  done
done | tee "$work/runs"

awk '{for (i=2;i<=NF;i++) {split($i,kv,"="); f[kv[1]]=kv[2]} k=f["c"] " " f["server"]; n[k]++
      rps[k, n[k]]=f["rps"]; cpu[k, n[k]]=f["cpu_ms"]; p99[k, n[k]]=f["p99_ms"]; rss[k, n[k]]=f["rss_mib"]; pss[k, n[k]]=f["pss_mib"]; cs[f["c"]]=1}
  function med(a, k,   i, j, t, v, m) { m=n[k]; for (i=1;i<=m;i++) v[i]=a[k, i]+0
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (v[j]<v[i]) {t=v[i]; v[i]=v[j]; v[j]=t}
    return m%2 ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
  function line(name, arr, fmt,   a, b, t) { a=med(arr, c " a"); b=med(arr, c " b"); t=n[c " ts"] ? med(arr, c " ts") : 0
    printf " a_%s=" fmt " b_%s=" fmt " %s_b/a=%.2f", name, a, name, b, name, b/a
    if (t) printf " ts_%s=" fmt " %s_a/ts=%.2f %s_b/ts=%.2f", name, t, name, a/t, name, b/t }
  END { for (c in cs) { printf "median c=%s", c; line("rps", rps, "%.1f"); line("p99", p99, "%d"); line("rss", rss, "%d"); line("pss", pss, "%d"); line("cpu_ms", cpu, "%d"); print "" } }' "$work/runs"
