#!/usr/bin/env bash
# torchd alone with bench/handlerproc.sh's archive: the client's time of 40 sequential requests
# (after 10 of warm-up) against the worker's own HandlerTime and PredictionTime ([METRICS] at
# debug level), medians. Needs make build handler-runtime. EXTRA adds torchd flags.
# Usage: bench/handlerproc/c1probe.sh
set -eu
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
.venv/bin/python bench/handlerproc/make.py $work/store >/dev/null 2>&1
bin/torchd serve --python $PWD/.venv/bin/python --model-store $work/store --models resnet18_py=resnet18_py.mar \
  --inference-address 127.0.0.1:18950 --management-address 127.0.0.1:18951 --metrics-address 127.0.0.1:18952 \
  --grpc-address= --grpc-inference-address= --grpc-management-address= --log-level debug ${EXTRA:-} \
  --access-log=false --enable-snapshots=false >$work/torchd.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
until [ "$(curl -sf http://127.0.0.1:18951/models/resnet18_py | grep -c '"READY"')" -ge 2 ]; do
  kill -0 $pid 2>/dev/null || { tail -20 $work/torchd.log; exit 1; }
  sleep 1
done
img=models/out/resnet18/sample_640x480.jpg
for i in $(seq 10); do curl -s -o /dev/null -H 'Content-Type: image/jpeg' --data-binary @$img http://127.0.0.1:18950/predictions/resnet18_py; done
: > $work/times
for i in $(seq 40); do curl -s -o /dev/null -w '%{time_total}\n' -H 'Content-Type: image/jpeg' --data-binary @$img http://127.0.0.1:18950/predictions/resnet18_py >> $work/times; done
sort -n $work/times | awk '{a[NR]=$1} END {printf "client p50 %.1f ms\n", a[int(NR/2)]*1000}'
grep -o 'HandlerTime.Milliseconds:[0-9.]*' $work/torchd.log | tail -40 | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {printf "handler p50 %.1f ms (n=%d)\n", a[int(NR/2)], NR}'
grep -o 'PredictionTime.Milliseconds:[0-9.]*' $work/torchd.log | tail -40 | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {printf "prediction p50 %.1f ms (n=%d)\n", a[int(NR/2)], NR}'
