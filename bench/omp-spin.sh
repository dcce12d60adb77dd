#!/usr/bin/env bash
# libgomp's wait at a barrier, served and forward-only: PASSIVE (torchd's default: sleep at
# once), PASSIVE with a bounded spin (GOMP_SPINCOUNT=N: spin N rounds, then sleep) and ACTIVE
# (spin for minutes). One torchd per configuration, each serving the zoo's resnet18 and
# efficientnet_lite0 .pt2 archives (precision auto) and digits (PNG) with the mission's settings
# (BATCH_SIZE=32 WORKERS=2 LINGER_MS=10; WORKERS=1 in the environment runs one worker of two
# threads, the team whose barriers the wait is about, and LINGER_MS=2 openmp.md's first case:
# digits PNG at c=32 beside a two-thread worker); the servers not being measured are stopped
# (SIGSTOP), so that no idle server's spinning threads take the cores. Each round runs every
# point on every server in a shuffled order; then `torchd bench-model` runs EfficientNet-Lite0
# and ResNet-18 int8 at batch 1 and 32 (FWD_BATCHES) under each configuration (the forward alone).
# Prints "round point config req/s p50_ms load", and for the forward "round point config img/s
# ms load" (load: the 1-minute load average as the point starts). POINTS="model:concurrency ..."
# picks the served points (default all five; none: the forward alone); FWD_ROUNDS (default:
# rounds; 0 skips the forward), FWD_BATCHES (1,32) and FWD_TIME (2s) shape the forward.
# Needs `make build archives models-int8`.
# Usage: bench/omp-spin.sh [rounds] [seconds] [spin counts...]   (default 2 5 2000 20000)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}; secs=${2:-5}; shift 2 2>/dev/null || shift $#
spins=("${@:-2000 20000}"); spins=(${spins[*]})
configs=(PASSIVE); for s in "${spins[@]}"; do configs+=("SPIN$s"); done; configs+=(ACTIVE)
points=(${POINTS:-resnet18:1 resnet18:50 efficientnet_lite0:1 efficientnet_lite0:50 digits:32})
workers=${WORKERS:-2} linger=${LINGER_MS:-10} fwd_batches=${FWD_BATCHES:-1,32}
envof() { case $1 in PASSIVE) echo OMP_WAIT_POLICY=PASSIVE ;; ACTIVE) echo OMP_WAIT_POLICY=ACTIVE ;;
  SPIN*) echo "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=${1#SPIN}" ;; esac; }
grep -m1 'model name' /proc/cpuinfo
echo "WORKERS=$workers LINGER_MS=$linger; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${POINTS:-}" != none ]; then
  declare -A inf pid
  base=19800
  for c in "${configs[@]}"; do
    port=$base; base=$((base + 10)); cache=$(mktemp -d)
    env $(envof $c) TORCHD_CACHE_DIR=$cache BATCH_SIZE=32 WORKERS=$workers LINGER_MS=$linger bin/torchd serve --model-store model-store \
      --models resnet18=resnet18_pt2.mar,efficientnet_lite0=efficientnet_lite0_pt2.mar,digits=digits.mar \
      --inference-address 127.0.0.1:$port --management-address 127.0.0.1:$((port + 1)) --metrics-address 127.0.0.1:$((port + 2)) \
      --access-log=false --enable-snapshots=false --job-queue-size 1024 --grpc-address= --grpc-inference-address= \
      --grpc-management-address= >/tmp/omp-spin-$c.log 2>&1 &
    pid[$c]=$! inf[$c]=127.0.0.1:$port
  done
  trap 'kill -CONT ${pid[*]} 2>/dev/null; kill ${pid[*]} 2>/dev/null; wait 2>/dev/null' EXIT
  for c in "${configs[@]}"; do
    for m in resnet18 efficientnet_lite0 digits; do
      mg=${inf[$c]%:*}:$((${inf[$c]##*:} + 1))
      until curl -sf "http://$mg/models/$m" 2>/dev/null | grep -q READY; do sleep 0.5; done
    done
  done
  sleep 5   # let the start-up's warm-ups end
  kill -STOP ${pid[*]}
  for r in $(seq "$rounds"); do
    for spec in "${points[@]}"; do
      set -- ${spec/:/ }
      ct=image/jpeg body=models/out/resnet18/sample_640x480.jpg
      [ $1 = digits ] && ct=image/png body=models/out/digits/sample.png
      for c in $(shuf -e "${configs[@]}"); do
        kill -CONT ${pid[$c]}
        ab -k -q -c "$2" -t "$secs" -n 10000000 -s 120 -T $ct -p $body "http://${inf[$c]}/predictions/$1" 2>&1 |
          awk -v r="$r" -v p="$1/c=$2" -v c="$c" -v l="$(cut -d' ' -f1 /proc/loadavg)" '/Requests per second/ {rps=$4} /^ +50%/ {p50=$2} END {print r, p, c, rps, p50, "load " l}'
        kill -STOP ${pid[$c]}
      done
    done
  done
  kill -CONT ${pid[*]}; kill ${pid[*]} 2>/dev/null; wait 2>/dev/null
fi
for r in $(seq "${FWD_ROUNDS:-$rounds}"); do
  for m in efficientnet_lite0 resnet18; do
    for c in $(shuf -e "${configs[@]}"); do
      env $(envof $c) bin/torchd bench-model --input models/out/resnet18/sample_640x480.jpg --precision int8 \
        --batch-sizes $fwd_batches --rounds 1 --time ${FWD_TIME:-2s} --workers 1 model-store/${m}_pt2.mar 2>/dev/null |
        awk -v r="$r" -v m="$m" -v c="$c" -v l="$(cut -d' ' -f1 /proc/loadavg)" '$1 ~ /^[0-9]+$/ && $2 ~ /s$/ {f = $2; u = 1; if (f ~ /ms$/) u = 1; else if (f ~ /µs$/) u = 0.001; else u = 1000
          sub(/[µm]?s$/, "", f); printf "%s %s %s %.0f img/s %.2f ms load %s\n", r, m "/forward/b" $1, c, $1 * 1000 / (f * u), f * u, l}'
    done
  done
done
