#!/usr/bin/env bash
# Makes build/gpucheck, the folder the GPU check carries to a machine with an NVIDIA GPU and a
# CUDA PyTorch but no Go and no network: torchd built here (it links only libtorchd_c.so),
# libtorchd_c.so compiled here against the GPU machine's torch version (headers and libraries
# from the same PyPI wheel; RUNPATH points at that machine's torch/lib), libturbojpeg, and
# perf_analyzer with the two libraries it needs (bench/perf_analyzer.sh fetches them).
#
# Usage: bench/gpu/bundle.sh [torch version] [that machine's torch/lib path]
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=${1:-2.11.0}
rpath=${2:-/opt/torch/.venv/lib/python3.12/site-packages/torch/lib}
out=build/gpucheck wheels=build/gpucheck-wheels
mkdir -p "$out/bin" "$out/lib" "$wheels"
make build
whl=$(ls "$wheels"/torch-"$ver"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  pip3 download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
    -d "$wheels" "torch==$ver"
  whl=$(ls "$wheels"/torch-"$ver"-*.whl | head -1)
fi
[ -d "$wheels/torch-$ver" ] || { mkdir -p "$wheels/torch-$ver.tmp" && \
  unzip -q "$whl" 'torch/include/*' 'torch/lib/*' -d "$wheels/torch-$ver.tmp" && mv "$wheels/torch-$ver.tmp" "$wheels/torch-$ver"; }
T=$wheels/torch-$ver/torch
[ build/torchd-gpu.o -nt torch/capi/torchd.cc ] || g++ -std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 \
  -I$T/include -I$T/include/torch/csrc/api/include -c torch/capi/torchd.cc -o build/torchd-gpu.o
# As `make lib TORCH_CUDA=1`: the libtorch.so stand-in (libtorch_cpu and libc10 only), which a
# package's library binds to, and --no-as-needed to keep libtorch_cuda, whose static
# initializers register the CUDA backend. RPATH, not RUNPATH: searched before LD_LIBRARY_PATH.
g++ -shared -x c /dev/null -o "$out/bin/libtorch.so" -Wl,-soname,libtorch.so -L$T/lib -Wl,--disable-new-dtags \
  -Wl,-rpath,"$rpath" -Wl,--no-as-needed -ltorch_cpu -lc10
g++ -shared -o "$out/bin/libtorchd_c.so" build/torchd-gpu.o -L"$out/bin" -L$T/lib -Wl,--disable-new-dtags \
  -Wl,-rpath,'$ORIGIN' -Wl,-rpath,"$rpath" -Wl,--no-as-needed -ltorch -ltorch_cuda -lc10_cuda -ltorch_cpu -lc10 -Wl,--as-needed
cp bin/torchd "$out/bin/"
cp -L "$(ldconfig -p | awk '/libturbojpeg.so.0 /{print $NF; exit}')" "$out/bin/"
# perf_analyzer as bench/perf_analyzer.sh takes it: the binary in tritonclient 2.40's wheel, with
# libcudart.so.12 from NVIDIA's runtime wheel and Debian's libb64.
pa=$wheels/pa
if [ ! -f "$pa/perf_analyzer" ]; then
  mkdir -p "$pa" && (cd "$pa" && python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    -d . tritonclient==2.40.0 nvidia-cuda-runtime-cu12==12.3.101 && apt-get download libb64-0d >/dev/null 2>&1 && \
    unzip -o -q -j tritonclient-2.40.0-*.whl '*/bin/perf_analyzer' && unzip -o -q -j nvidia_cuda_runtime_cu12-*.whl '*/libcudart.so.12' && \
    dpkg -x libb64-0d_*.deb deb && cp deb/usr/lib/x86_64-linux-gnu/libb64.so.0d .)
fi
cp "$pa/perf_analyzer" "$out/" && chmod +x "$out/perf_analyzer"
cp "$pa/libcudart.so.12" "$pa/libb64.so.0d" "$out/lib/"
cp bench/gpu/*.py bench/gpu/*.toml bench/gpu/run.sh "$out/"
# The digits CNN for bench/gpu/pt2zoo.sh: its weights, held-out rows and references.
mkdir -p "$out/zoo/digits"
cp models/out/digits/{model.pt,heldout.npy,pt2_ref_input.npy,pt2_ref_output_b64.npy} "$out/zoo/digits/"
du -sh "$out"
