#!/usr/bin/env bash
# What tracing costs: two torchd servers of the same build (bin/torchd) serve digits (28×28
# PNG), one with tracing off, one tracing every request (trace_sampler_arg 1.0) to an
# OpenTelemetry Collector (build/otelcol, from internal/otelcol: OTLP/HTTP in, its file
# exporter out to /dev/null), niced so that it takes what CPU the servers leave. Each round
# runs both, in a shuffled order, with `ab -k` at c concurrent clients. Prints one line per run
# (cpu_us: the server's CPU time, user and system, per request answered), then the medians
# over the rounds with their ratios:
#   R c=N server=S rps=X p50_ms=Y cpu_us=Z
#   median c=N off_rps=X on_rps=Y ratio=Y/X off_cpu_us=Z on_cpu_us=W ratio=W/Z
# On a machine others share, throughput follows their load; CPU time per request much less.
# Needs `make build archives otelcol`. Usage: [RATIO=r] bench/tracing-ab.sh [rounds] [seconds
# per run] [c] (default 7 rounds of 10 s at c=32; RATIO, the traced server's
# trace_sampler_arg, 1.0 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
secs=${2:-10}
conc=${3:-32}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE

cat >"$work/otelcol.yaml" <<EOF
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:18948
exporters:
  file:
    path: /dev/null
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
EOF
nice -n 19 build/otelcol --config "$work/otelcol.yaml" >"$work/otelcol.log" 2>&1 &
pids+=($!)

declare -A port pid
start() { # name port [env...]
  local name=$1 p=$2
  shift 2
  env TORCHD_CACHE_DIR="$work/cache-$name" "$@" bin/torchd serve --model-store model-store --models digits=digits.mar \
    --inference-address 127.0.0.1:$p --management-address 127.0.0.1:$((p + 1)) --metrics-address 127.0.0.1:$((p + 2)) \
    --grpc-address= --grpc-inference-address= --grpc-management-address= \
    --access-log=false --enable-snapshots=false --job-queue-size 1024 >"$work/$name.log" 2>&1 &
  pids+=($!) pid[$name]=$! port[$name]=$p
}
start off 18930
start on 18940 OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:18948/v1/traces OTEL_TRACES_SAMPLER_ARG=${RATIO:-1.0}
for s in off on; do
  until curl -sf http://127.0.0.1:${port[$s]}/ping >/dev/null; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; cat "$work/$s.log"; exit 1; }
    sleep 0.2
  done
done

cpu() { awk '{print $14 + $15}' /proc/$1/stat; }
tick=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
  for s in $(shuf -e off on); do
    c0=$(cpu "${pid[$s]}")
    out=$(ab -k -q -c "$conc" -t "$secs" -n 10000000 -T image/png -p models/out/digits/sample.png http://127.0.0.1:${port[$s]}/predictions/digits 2>&1)
    c1=$(cpu "${pid[$s]}")
    echo "$out" | awk -v r="$r" -v s="$s" -v c="$conc" -v ticks=$((c1 - c0)) -v hz="$tick" \
      '/Requests per second/ {rps=$4} /^  50%/ {p50=$2} /^Complete requests/ {n=$3}
        END {printf "%s c=%s server=%s rps=%s p50_ms=%s cpu_us=%.0f\n", r, c, s, rps, p50, (n>0 ? ticks/hz*1e6/n : 0)}'
  done
done | tee "$work/runs"
awk '{split($2,c,"="); split($3,s,"="); split($4,x,"="); split($6,u,"="); v[s[2], ++n[s[2]]]=x[2]; w[s[2], n[s[2]]]=u[2]; conc=c[2]}
  function median(arr, s,   i, j, t, a, cnt) { cnt=n[s]; for (i=1;i<=cnt;i++) a[i]=arr[s, i];
    for (i=1;i<=cnt;i++) for (j=i+1;j<=cnt;j++) if (a[j]+0 < a[i]+0) {t=a[i]; a[i]=a[j]; a[j]=t}
    return cnt%2 ? a[(cnt+1)/2] : (a[cnt/2]+a[cnt/2+1])/2 }
  END { o=median(v, "off"); t=median(v, "on"); oc=median(w, "off"); tc=median(w, "on");
    printf "median c=%s off_rps=%.1f on_rps=%.1f ratio=%.3f off_cpu_us=%.0f on_cpu_us=%.0f ratio=%.3f\n", conc, o, t, (o>0 ? t/o : 0), oc, tc, (oc>0 ? tc/oc : 0) }' "$work/runs"
if grep -q "trace export" "$work/on.log"; then echo "export warnings (spans dropped or refused):"; grep -m3 "trace export" "$work/on.log"; fi
