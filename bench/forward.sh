#!/usr/bin/env bash
# The forward of the zoo's image models on every engine at hand, in one run each, interleaved
# (bench/engine_spike.py says what each backend is): torchd's runner of the .pt2 archive at
# each precision and of the zoo's OpenVINO IR (torchd:ov-ir, beside ov-ir: OpenVINO's Python
# runner of the same IR), PyTorch's own runner of the same packages, OpenVINO fp32/bf16/int8 (NNCF) and
# ONNX Runtime fp32/int8, batch 1 latency and batch 1-64 throughput, on THREADS threads.
# OpenVINO and NNCF go into build/pyext (not the zoo's venv, whose packages pin the zoo).
#
# Usage: bench/forward.sh [rounds] [seconds-per-figure] [threads] [engine_spike.py flags...]
#   (default 3 1.5 $(nproc)). E.g. torchd against PyTorch's runner alone, each at its own
#   libgomp default, batch 1 and 32:
#   bench/forward.sh 5 1.5 2 --no-ov --no-ort --no-ts --libgomp-defaults --batches 1,32
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-1.5}
threads=${3:-$(nproc)}
shift 3 2>/dev/null || shift $#
py=.venv/bin/python
if [ ! -e build/pyext/.done ]; then
  $py -m pip install --quiet --no-deps --target build/pyext openvino==2026.4.1 openvino-telemetry==2025.2.0 \
    nncf==3.4.0 ninja==1.13.2 pydot==4.0.1 tabulate==0.10.0
  touch build/pyext/.done
fi
[ -x bin/torchd ] || make build
grep -m1 'model name' /proc/cpuinfo
grep -m1 -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
for model in resnet18 efficientnet_lite0; do
  archives=()
  for p in fp32 int8 auto; do archives+=(--archive "pt2:$p=model-store/${model}_pt2.mar"); done
  # torchd's OpenVINO backend on the zoo's IR (make models-openvino), beside ov-ir, OpenVINO's
  # Python runner of the same .xml.
  if [ -e models/out/openvino/.done ] && [[ " $* " != *" --no-ov "* ]]; then
    bench/openvino-archives.sh build/forward-ov "$model"
    archives+=(--archive "ov-ir=build/forward-ov/${model}_ov.mar")
  fi
  PYTHONPATH=build/pyext nice -n 0 $py bench/engine_spike.py --model "$model" --rounds "$rounds" --time "$secs" \
    --threads "$threads" --batches 1,8,32 "${archives[@]}" --json "build/forward-$model.json" "$@"
done
