#!/usr/bin/env bash
# The zoo's resnet18 and efficientnet_lite0 .pt2 archives (model.pt2 with its int8 variant,
# precision auto) served by one torchd twice each: with the exact JPEG decode (the default) and
# with jpeg_dct_scaling = true; the mission's settings (BATCH_SIZE=32 WORKERS=2 LINGER_MS=10),
# ab -k -c 50 with the zoo's 1920x1080 JPEG, the order of the two alternating by round; each run
# prints its requests per second and torchd's CPU time per request (cpu_ms/req).
# (The 640x480 photo of bench/cpu-limit.sh is under 512 px on a side, where DCT scaling does
# nothing.) Needs `make build models-int8`.
# Usage: bench/dct-served.sh [seconds per run] [rounds]   (default 15 3)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}; rounds=${2:-3}
st=build/dct-served; rm -rf $st; mkdir -p $st
for m in resnet18 efficientnet_lite0; do
  for v in exact dct; do
    cfg=$st/$m-$v.toml; cp models/configs/$m.toml $cfg
    [ $v = dct ] && sed -i 's/^\[options\]$/[options]\njpeg_dct_scaling = true/' $cfg
    extra=models/out/$m/index_to_name.json,models/out/$m/model_int8.pt2
    bin/torchd archive --model-name ${m}_$v --version 1.0 --serialized-file models/out/$m/model.pt2 --config-file $cfg --extra-files $extra --export-path $st --archive-format zip-store --force
  done
done
BATCH_SIZE=32 WORKERS=2 LINGER_MS=10 setsid bin/torchd serve --access-log=false --model-store $st --models all --enable-snapshots=false \
  --inference-address 127.0.0.1:18480 --management-address 127.0.0.1:18481 --metrics-address 127.0.0.1:18482 --grpc-address= --grpc-inference-address= --grpc-management-address= > $st/torchd.log 2>&1 &
pid=$!; trap 'kill $pid 2>/dev/null' EXIT
for _ in $(seq 1 600); do curl -sf 127.0.0.1:18480/ping >/dev/null && break; sleep 0.5; done
img=models/out/resnet18/sample_1920x1080.jpg
grep -m1 'model name' /proc/cpuinfo
for r in $(seq 1 $rounds); do
  for m in resnet18 efficientnet_lite0; do
    for v in $( [ $((r % 2)) = 1 ] && echo "exact dct" || echo "dct exact"); do
      # torchd's CPU time (user + system, in clock ticks) around the run: per request, it
      # is what a shared machine's load changes least.
      t0=$(awk '{print $14+$15}' /proc/$pid/stat)
      res=$(ab -q -k -c 50 -t $secs -n 1000000 -T image/jpeg -p $img http://127.0.0.1:18480/predictions/${m}_$v 2>&1)
      t1=$(awk '{print $14+$15}' /proc/$pid/stat)
      n=$(awk '/Complete requests/ {print $3}' <<<"$res")
      cpu=$(awk -v d=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {if (n > 0) printf "%.2f", d * 1000 / hz / n}')
      echo "R$r $m $v rps=$(awk '/Requests per second/ {print $4}' <<<"$res") cpu_ms/req=$cpu failed=$(awk '/Failed requests/ {print $3}' <<<"$res") non2xx=$(awk '/Non-2xx/ {print $3}' <<<"$res") load=$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
