#!/usr/bin/env bash
# A paired run of two torchd builds on make bench's points: BEFORE (a build without the
# change) and AFTER (bin/torchd) serve digits (28×28 PNG), digits_tensor (.npy) and resnet18
# (640×480 JPEG) from the same archives, side by side; each round runs every point on both in
# a shuffled order with `ab -k`. Prints one line per run, then per point the medians over the
# rounds and their ratio:
#   R model=M c=N server=S rps=X p50_ms=Y
#   median model=M c=N before_rps=X after_rps=Y ratio=Y/X
# A ratio within the rounds' own spread is noise (docs/benchmarks.md).
#
# Needs `make build archives bench-setup`. Usage:
#   BEFORE=/tmp/before/bin/torchd bench/ab.sh [rounds] [seconds per point]
# (default 3 rounds of 5 s; BENCH_QUICK=1: one round of 1 s at two points, to check it runs).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE:?set BEFORE to the torchd binary without the change}
rounds=${1:-3}
secs=${2:-5}
# make bench's concurrencies (bench/harness/main.go).
points="digits:1 digits:8 digits:32 digits:64 digits:256 digits_tensor:1 digits_tensor:16 digits_tensor:64 resnet18:1 resnet18:8 resnet18:16 resnet18:32"
if [ -n "${BENCH_QUICK:-}" ]; then rounds=1 secs=1 points="digits:8 resnet18:1"; fi
declare -A body type
body[digits]=models/out/digits/sample.png type[digits]=image/png
body[digits_tensor]=models/out/digits/sample_tensor.npy type[digits_tensor]=application/x-npy
body[resnet18]=models/out/resnet18/sample_640x480.jpg type[resnet18]=image/jpeg
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE

declare -A port pid
start() { # name binary port
  TORCHD_CACHE_DIR=$work/cache-$1 "$2" serve --model-store model-store \
    --models digits=digits.mar,digits_tensor=digits_tensor.mar,resnet18=resnet18.mar \
    --inference-address 127.0.0.1:$3 --management-address 127.0.0.1:$(($3 + 1)) --metrics-address 127.0.0.1:$(($3 + 2)) \
    --grpc-address= --grpc-inference-address= --grpc-management-address= \
    --access-log=false --enable-snapshots=false --job-queue-size 1024 >"$work/$1.log" 2>&1 &
  pids+=($!) pid[$1]=$! port[$1]=$3
}
start before "$before" 18910
start after bin/torchd 18920
for s in before after; do
  until curl -sf http://127.0.0.1:${port[$s]}/ping >/dev/null; do
    kill -0 "${pid[$s]}" 2>/dev/null || { echo "$s exited:"; cat "$work/$s.log"; exit 1; }
    sleep 0.2
  done
done

for r in $(seq "$rounds"); do
  for p in $points; do
    m=${p%:*} c=${p#*:}
    for s in $(shuf -e before after); do
      ab -k -q -c "$c" -t "$secs" -n 10000000 -T "${type[$m]}" -p "${body[$m]}" http://127.0.0.1:${port[$s]}/predictions/$m 2>&1 |
        awk -v r="$r" -v m="$m" -v s="$s" -v c="$c" '/Requests per second/ {rps=$4} /^  50%/ {p50=$2}
          END {printf "%s model=%s c=%s server=%s rps=%s p50_ms=%s\n", r, m, c, s, rps, p50}'
    done
  done
done | tee "$work/runs"
awk '{split($2,m,"="); split($3,c,"="); split($4,s,"="); split($5,x,"="); k=m[2] " " c[2]; v[k, s[2], ++n[k, s[2]]]=x[2]; keys[k]=1}
  function median(k, s,   i, j, t, a, cnt) { cnt=n[k, s]; for (i=1;i<=cnt;i++) a[i]=v[k, s, i];
    for (i=1;i<=cnt;i++) for (j=i+1;j<=cnt;j++) if (a[j]+0 < a[i]+0) {t=a[i]; a[i]=a[j]; a[j]=t}
    return cnt%2 ? a[(cnt+1)/2] : (a[cnt/2]+a[cnt/2+1])/2 }
  END { for (k in keys) { split(k, kk, " "); b=median(k, "before"); a=median(k, "after");
    printf "median model=%s c=%s before_rps=%.1f after_rps=%.1f ratio=%.2f\n", kk[1], kk[2], b, a, (b>0 ? a/b : 0) } }' "$work/runs" | sort -k2,2 -k3,3V
