#!/usr/bin/env bash
# The forward of the zoo's image models on every engine at hand, in one run each, interleaved
# (bench/engine_spike.py says what each backend is): torchd's runner of the .pt2 archive at
# each precision (bf16 too where make models-bf16 built its package) and of the zoo's OpenVINO IR (torchd:ov-ir, beside ov-ir: OpenVINO's Python
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
  store=model-store precisions="fp32 int8 auto"
  # With the bf16 package built (make models-bf16), an archive of the zoo's archive's files and
  # that package too, so that torchd runs bf16 beside PyTorch's runner of it (and auto chooses
  # among all three).
  zoo=models/out/$model
  if [ -e "$zoo/model_bf16.pt2" ]; then
    store=build/forward-pt2 precisions="fp32 bf16 int8 auto"
    mkdir -p $store
    bin/torchd archive --model-name "${model}_pt2" --version 1.0 --serialized-file "$zoo/model.pt2" \
      --config-file "models/configs/$model.toml" --archive-format zip-store --force --export-path $store \
      --extra-files "$zoo/index_to_name.json,$zoo/model_int8.pt2,$zoo/model_bf16.pt2" >/dev/null
  fi
  for p in $precisions; do archives+=(--archive "pt2:$p=$store/${model}_pt2.mar"); done
  # torchd's OpenVINO backend on the zoo's IR (make models-openvino), beside ov-ir, OpenVINO's
  # Python runner of the same .xml.
  if [ -e models/out/openvino/.done ] && [[ " $* " != *" --no-ov "* ]]; then
    bench/openvino-archives.sh build/forward-ov "$model"
    archives+=(--archive "ov-ir=build/forward-ov/${model}_ov.mar")
  fi
  PYTHONPATH=build/pyext nice -n 0 $py bench/engine_spike.py --model "$model" --rounds "$rounds" --time "$secs" \
    --threads "$threads" --batches 1,8,32 "${archives[@]}" --json "build/forward-$model.json" "$@"
done
