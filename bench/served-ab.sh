#!/usr/bin/env bash
# Two torchd binaries (A and B, e.g. main's and a branch's) serve the zoo's resnet18 and
# efficientnet_lite0 .pt2 archives with the exact JPEG decode, as bench/dct-served.sh does
# (BATCH_SIZE=32 WORKERS=2 LINGER_MS=10, ab -k -c 50, the zoo's 1920x1080 JPEG), both loaded
# at once and driven in turn, the order alternating by round, so that a shared machine's load
# falls on both alike. Each run prints requests per second and the server's CPU time per
# request (cpu_ms/req, user + system from /proc): on a loaded machine the second is the figure.
# A_OPTIONS and B_OPTIONS add lines to that side's [options] (e.g. B_OPTIONS='jpeg_dct_scaling =
# true' for the opt-in, or the setting an older build took as its default), each side then
# reading archives of its own.
# Needs `make models-int8`.
# Usage: bench/served-ab.sh BIN_A BIN_B [seconds per run] [rounds]   (default 12 3)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1; b=$2; secs=${3:-12}; rounds=${4:-3}
st=build/served-ab; rm -rf $st; mkdir -p $st/A $st/B
for side in A B; do
  opts=${side}_OPTIONS
  for m in resnet18 efficientnet_lite0; do
    cp models/configs/$m.toml $st/$side/$m.toml
    [ -n "${!opts:-}" ] && sed -i "s/^\[options\]\$/[options]\n${!opts}/" $st/$side/$m.toml
    "$a" archive --model-name $m --version 1.0 --serialized-file models/out/$m/model.pt2 --config-file $st/$side/$m.toml \
      --extra-files models/out/$m/index_to_name.json,models/out/$m/model_int8.pt2 --export-path $st/$side --archive-format zip-store --force
  done
done
serve() { # binary, port, log, store
  BATCH_SIZE=32 WORKERS=2 LINGER_MS=10 setsid "$1" serve --access-log=false --model-store $4 --models all --enable-snapshots=false \
    --inference-address 127.0.0.1:$2 --management-address 127.0.0.1:$(($2 + 1)) --metrics-address 127.0.0.1:$(($2 + 2)) \
    --grpc-address= --grpc-inference-address= --grpc-management-address= > "$3" 2>&1 &
  echo $!
}
pa=$(serve "$a" 18490 $st/a.log $st/A); pb=$(serve "$b" 18590 $st/b.log $st/B)
trap 'kill $pa $pb 2>/dev/null' EXIT
for p in 18490 18590; do
  for _ in $(seq 1 600); do curl -sf 127.0.0.1:$p/ping >/dev/null && break; sleep 0.5; done
  for m in resnet18 efficientnet_lite0; do
    for _ in $(seq 1 600); do curl -sf -T models/out/resnet18/sample_1920x1080.jpg -H 'Content-Type: image/jpeg' 127.0.0.1:$p/predictions/$m >/dev/null && break; sleep 0.5; done
  done
done
img=models/out/resnet18/sample_1920x1080.jpg
grep -m1 'model name' /proc/cpuinfo
for r in $(seq 1 $rounds); do
  for m in resnet18 efficientnet_lite0; do
    for v in $( [ $((r % 2)) = 1 ] && echo "A B" || echo "B A"); do
      if [ $v = A ]; then pid=$pa port=18490; else pid=$pb port=18590; fi
      t0=$(awk '{print $14+$15}' /proc/$pid/stat)
      res=$(ab -q -k -c 50 -t $secs -n 1000000 -T image/jpeg -p $img http://127.0.0.1:$port/predictions/$m 2>&1)
      t1=$(awk '{print $14+$15}' /proc/$pid/stat)
      n=$(awk '/Complete requests/ {print $3}' <<<"$res")
      cpu=$(awk -v d=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {if (n > 0) printf "%.2f", d * 1000 / hz / n}')
      echo "R$r $m $v rps=$(awk '/Requests per second/ {print $4}' <<<"$res") cpu_ms/req=$cpu n=$n failed=$(awk '/Failed requests/ {print $3}' <<<"$res") load=$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
