#!/usr/bin/env bash
# Runs Triton's perf_analyzer against torchd over the Open Inference Protocol, over HTTP
# (binary tensors) or gRPC (raw contents); shared memory is off either way.
#
# perf_analyzer ships as a binary inside tritonclient's manylinux wheel up to 2.40 (later
# wheels and the "perf-analyzer" package on PyPI carry no binary). It needs libb64 (Debian's
# libb64-0d) and libcudart.so.12, which NVIDIA's nvidia-cuda-runtime-cu12 wheel provides;
# no GPU is used. Everything lands in build/perf_analyzer.
#
# Usage: bench/perf_analyzer.sh [model] [concurrency-range] [http|grpc] [perf_analyzer args...]
#        (default: digits_tensor 1:16:4 http). PA_ONLY=1 only fetches perf_analyzer; STORE
#        names the model store (default model-store).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-digits_tensor}
range=${2:-1:16:4}
protocol=${3:-http}
shift $(($# < 3 ? $# : 3))
dir=build/perf_analyzer
pa=$dir/tritonclient-2.40.0.data/data/bin/perf_analyzer
if [ ! -x "$pa" ]; then
  mkdir -p "$dir"
  dpkg -s libb64-0d >/dev/null 2>&1 || { ${SUDO:-} apt-get install -y -qq libb64-0d; }
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    -d "$dir" tritonclient==2.40.0 nvidia-cuda-runtime-cu12==12.3.101
  (cd "$dir" && unzip -o -q tritonclient-2.40.0-py3-none-manylinux1_x86_64.whl 'tritonclient-2.40.0.data/data/bin/perf_analyzer' \
    && unzip -o -q nvidia_cuda_runtime_cu12-12.3.101-py3-none-manylinux1_x86_64.whl 'nvidia/cuda_runtime/lib/*')
  chmod +x "$pa"
fi
[ -n "${PA_ONLY:-}" ] && exit 0
case $protocol in
  http) url=127.0.0.1:18180 ;;
  grpc) url=127.0.0.1:18101 ;;
  *) echo "protocol must be http or grpc, got $protocol" >&2; exit 2 ;;
esac
log=$(mktemp)
# TorchServe's gRPC ports stay off: only the Open Inference Protocol is measured.
bin/torchd serve --access-log=false --model-store "${STORE:-model-store}" --models "$model=$model.mar" \
  --inference-address 127.0.0.1:18180 --management-address 127.0.0.1:18181 --metrics-address 127.0.0.1:18182 \
  --grpc-address 127.0.0.1:18101 --grpc-inference-address= --grpc-management-address= 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 120); do curl -sf 127.0.0.1:18180/ping >/dev/null && break; sleep 0.5; done
LD_LIBRARY_PATH=$dir/nvidia/cuda_runtime/lib "$pa" -m "$model" -u "$url" -i "$protocol" --shared-memory none \
  --concurrency-range "$range" --measurement-interval 3000 "$@"
