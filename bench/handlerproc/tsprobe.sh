#!/usr/bin/env bash
# TorchServe alone with bench/handlerproc.sh's archive: the client's time of 40 sequential requests
# (after 10 of warm-up) against its workers' HandlerTime (logs/model_metrics.log), medians;
# c1probe.sh's counterpart. Needs Java and the handler runtime. Usage: bench/handlerproc/tsprobe.sh
set -eu
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
py=$PWD/.venv/bin/python
$py bench/handlerproc/make.py $work/store >/dev/null 2>&1
mkdir -p $work/ts
cat >$work/ts/config.properties <<CFG
inference_address=http://127.0.0.1:18960
management_address=http://127.0.0.1:18961
metrics_address=http://127.0.0.1:18962
grpc_inference_port=18963
grpc_management_port=18964
model_store=$work/store
load_models=resnet18_py.mar
disable_token_authorization=true
vmargs=-Djava.io.tmpdir=$work/ts
CFG
(cd $work/ts && exec setsid $py -c "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()" \
  --start --foreground --ncs --ts-config config.properties --model-store $work/store --disable-token-auth >$work/ts/out.log 2>&1) &
pid=$!
trap 'kill -- -$pid 2>/dev/null; sleep 1; rm -rf "$work"' EXIT
until [ "$(curl -sf http://127.0.0.1:18961/models/resnet18_py | grep -c '"READY"')" -ge 2 ]; do kill -0 $pid || exit 1; sleep 1; done
img=models/out/resnet18/sample_640x480.jpg
for i in $(seq 10); do curl -s -o /dev/null -H 'Content-Type: image/jpeg' --data-binary @$img http://127.0.0.1:18960/predictions/resnet18_py; done
: > $work/times
for i in $(seq 40); do curl -s -o /dev/null -w '%{time_total}\n' -H 'Content-Type: image/jpeg' --data-binary @$img http://127.0.0.1:18960/predictions/resnet18_py >> $work/times; done
sort -n $work/times | awk '{a[NR]=$1} END {printf "ts client p50 %.1f ms\n", a[int(NR/2)]*1000}'
grep -rho 'HandlerTime.Milliseconds:[0-9.]*' $work/ts/logs 2>/dev/null | tail -40 | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {printf "ts handler p50 %.1f ms (n=%d)\n", a[int(NR/2)], NR}'
