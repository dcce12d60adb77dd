#!/usr/bin/env bash
# What tracing costs: two torchd servers of the same build (bin/torchd) serve digits (28×28
# PNG), one with tracing off, one tracing every request (trace_sampler_arg 1.0) to an
# OpenTelemetry Collector (build/otelcol, from internal/otelcol: OTLP/HTTP in, its file
# exporter out to /dev/null), niced so that it takes what CPU the servers leave. Each round
# runs both, in a shuffled order, with `ab -k` at c concurrent clients. Prints one line per run
# and the medians over the rounds with their ratio:
#   R c=N server=S rps=X p50_ms=Y
#   median c=N off_rps=X on_rps=Y ratio=Y/X
# Needs `make build archives` and build/otelcol (cd internal/otelcol && go build -o
# ../../build/otelcol .). Usage: bench/tracing-ab.sh [rounds] [seconds per run] [c]
# (default 7 rounds of 10 s at c=32).
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
start on 18940 OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:18948/v1/traces OTEL_TRACES_SAMPLER_ARG=1.0
for s in off on; do
  until curl -sf http://127.0.0.1:${port[$s]}/ping >/dev/null; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; cat "$work/$s.log"; exit 1; }
    sleep 0.2
  done
done

for r in $(seq "$rounds"); do
  for s in $(shuf -e off on); do
    ab -k -q -c "$conc" -t "$secs" -n 10000000 -T image/png -p models/out/digits/sample.png http://127.0.0.1:${port[$s]}/predictions/digits 2>&1 |
      awk -v r="$r" -v s="$s" -v c="$conc" '/Requests per second/ {rps=$4} /^  50%/ {p50=$2}
        END {printf "%s c=%s server=%s rps=%s p50_ms=%s\n", r, c, s, rps, p50}'
  done
done | tee "$work/runs"
awk '{split($2,c,"="); split($3,s,"="); split($4,x,"="); v[s[2], ++n[s[2]]]=x[2]; conc=c[2]}
  function median(s,   i, j, t, a, cnt) { cnt=n[s]; for (i=1;i<=cnt;i++) a[i]=v[s, i];
    for (i=1;i<=cnt;i++) for (j=i+1;j<=cnt;j++) if (a[j]+0 < a[i]+0) {t=a[i]; a[i]=a[j]; a[j]=t}
    return cnt%2 ? a[(cnt+1)/2] : (a[cnt/2]+a[cnt/2+1])/2 }
  END { o=median("off"); t=median("on"); printf "median c=%s off_rps=%.1f on_rps=%.1f ratio=%.3f\n", conc, o, t, (o>0 ? t/o : 0) }' "$work/runs"
if grep -q "trace export" "$work/on.log"; then echo "export warnings (spans dropped or refused):"; grep -m3 "trace export" "$work/on.log"; fi
