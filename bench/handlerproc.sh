#!/usr/bin/env bash
# torchd's handler processes against TorchServe 0.12 on the same archive: resnet18 behind a
# custom handler.py (bench/handlerproc/: an eager torchvision resnet18 with random weights),
# the mission's BATCH_SIZE=32 WORKERS=2 (the archive's model-config.yaml, which both servers
# read), both servers running the handler with the same Python and torch. Each round runs
# c=1 and c=50 on both servers in a shuffled order with `ab -k`. Each run starts on an idle
# machine (bench/handlerproc/lib.sh's settle: the requests the last run left queued finish
# first); once its own have finished, the RSS of the server's whole process tree (torchd and
# its handler processes; TorchServe's JVM and its workers), and its PSS, which counts pages
# the processes share once. Prints one line per run, then per concurrency the medians over the rounds:
#   R c=N server=S rps=X p50_ms=Y p99_ms=Z rss_mib=W pss_mib=V idle_rss_mib=.. idle_pss_mib=.. peak_rss_mib=.. peak_pss_mib=..
#   median c=N torchd_rps=.. torchserve_rps=.. rps_ratio=.. p99_ratio=.. rss_ratio=.. pss_ratio=.. idle_rss_ratio=.. peak_rss_ratio=..
# (idle_*: the same tree 2 s later, when a handler process has given back its free heap;
# peak_*: the largest of the tree's readings taken every second while the run and its queue ran)
# (ratios are torchd's over TorchServe's). A ratio within the rounds' spread is noise.
#
# Needs `make build handler-runtime bench-setup`, Java 11+ and models/out (the JPEG).
# Usage: bench/handlerproc.sh [rounds] [seconds per run]   (default 3 rounds of 20 s;
# PYTHON names the handler runtime, default .venv/bin/python; TORCHD_ARGS adds torchd flags,
# e.g. --handler-fork-server=false to start each handler process apart)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-20}
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT

"$py" bench/handlerproc/make.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }

# torchd, in its own process group with its handler processes' groups below it.
setsid bin/torchd serve --python "$py" --model-store "$work/store" --models resnet18_py=resnet18_py.mar \
  --inference-address 127.0.0.1:18930 --management-address 127.0.0.1:18931 --metrics-address 127.0.0.1:18932 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= \
  --access-log=false --enable-snapshots=false --job-queue-size 1024 ${TORCHD_ARGS:-} >"$work/torchd.log" 2>&1 &
pids+=($!)
declare -A port pid
port[torchd]=18930 pid[torchd]=$!

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
  --start --foreground --ncs --ts-config config.properties --model-store "$work/store" --disable-token-auth >"$work/ts/out.log" 2>&1) &
pids+=($!)
port[torchserve]=18940 pid[torchserve]=$!

# Ready: two workers READY (the describe answer of both servers).
for s in torchd torchserve; do
  until [ "$(curl -sf http://127.0.0.1:$((port[$s] + 1))/models/resnet18_py | grep -c '"READY"')" -ge 2 ]; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; tail -20 "$work/$s.log" "$work/ts/out.log" 2>/dev/null; exit 1; }
    sleep 1
  done
done

. bench/handlerproc/lib.sh

# Warm-up: each server's workers see full batches before anything is measured.
for s in torchd torchserve; do
  ab -k -q -c 50 -n 500 -T image/jpeg -p "$img" http://127.0.0.1:${port[$s]}/predictions/resnet18_py >/dev/null 2>&1 || true
done

settle "${pid[torchd]}" "${pid[torchserve]}"
for r in $(seq "$rounds"); do
  for c in 1 50; do
    for s in $(shuf -e torchd torchserve); do
      sample_mem "${pid[$s]}" "$work/samples" &
      sampler=$!
      out=$(ab -k -q -c "$c" -t "$secs" -n 10000000 -T image/jpeg -p "$img" http://127.0.0.1:${port[$s]}/predictions/resnet18_py 2>&1 || true)
      settle "${pid[torchd]}" "${pid[torchserve]}" # the run's queued requests finish; the next run starts idle
      kill "$sampler"; wait "$sampler" 2>/dev/null || true
      peak=$(awk '$1 > r {r=$1} $2 > q {q=$2} END {print r+0, q+0}' "$work/samples")
      drained=$(tree_mem "${pid[$s]}")
      sleep 2
      echo "$out" | awk -v r="$r" -v s="$s" -v c="$c" -v mem="$drained" -v idle="$(tree_mem "${pid[$s]}")" -v peak="$peak" \
          '/Requests per second/ {rps=$4} /^  50%/ {p50=$2} /^  99%/ {p99=$2} /^Non-2xx/ {bad=$3}
          END {split(mem, m, " "); split(idle, i, " "); split(peak, k, " ")
            printf "%s c=%s server=%s rps=%s p50_ms=%s p99_ms=%s rss_mib=%s pss_mib=%s idle_rss_mib=%s idle_pss_mib=%s peak_rss_mib=%s peak_pss_mib=%s%s\n", r, c, s, rps, p50, p99, m[1], m[2], i[1], i[2], k[1], k[2], bad ? " non2xx=" bad : ""}'
    done
  done
done | tee "$work/runs"

awk '{for (i=2;i<=NF;i++) {split($i,kv,"="); f[kv[1]]=kv[2]} k=f["c"] " " f["server"]; n[k]++
      rps[k, n[k]]=f["rps"]; p99[k, n[k]]=f["p99_ms"]; rss[k, n[k]]=f["rss_mib"]; pss[k, n[k]]=f["pss_mib"]
      irss[k, n[k]]=f["idle_rss_mib"]; ipss[k, n[k]]=f["idle_pss_mib"]; krss[k, n[k]]=f["peak_rss_mib"]; kpss[k, n[k]]=f["peak_pss_mib"]; cs[f["c"]]=1}
  function med(a, k,   i, j, t, v, m) { m=n[k]; for (i=1;i<=m;i++) v[i]=a[k, i]+0
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (v[j]<v[i]) {t=v[i]; v[i]=v[j]; v[j]=t}
    return m%2 ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
  END { for (c in cs) { a=c " torchd"; b=c " torchserve"
    printf "median c=%s torchd_rps=%.1f torchserve_rps=%.1f rps_ratio=%.2f torchd_p99_ms=%d torchserve_p99_ms=%d p99_ratio=%.2f torchd_rss_mib=%d torchserve_rss_mib=%d rss_ratio=%.2f torchd_pss_mib=%d torchserve_pss_mib=%d pss_ratio=%.2f",
      c, med(rps, a), med(rps, b), med(rps, a)/med(rps, b), med(p99, a), med(p99, b), med(p99, a)/med(p99, b), med(rss, a), med(rss, b), med(rss, a)/med(rss, b), med(pss, a), med(pss, b), med(pss, a)/med(pss, b)
    printf " idle_rss_ratio=%.2f idle_pss_ratio=%.2f peak_rss_ratio=%.2f peak_pss_ratio=%.2f\n", med(irss, a)/med(irss, b), med(ipss, a)/med(ipss, b), med(krss, a)/med(krss, b), med(kpss, a)/med(kpss, b) } }' "$work/runs"
