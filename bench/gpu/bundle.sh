#!/usr/bin/env bash
# Makes build/gpucheck, the folder the GPU check carries to a machine with an NVIDIA GPU and a
# CUDA PyTorch but no Go and no network: torchd built here (it links only libtorchd_c.so),
# libtorchd_c.so compiled here against the GPU machine's torch version (headers and libraries
# from the same PyPI wheel; RUNPATH points at that machine's torch/lib), libturbojpeg, and
# perf_analyzer with the two libraries it needs (bench/perf_analyzer.sh fetches them).
#
# With BASELINE=<git revision>, the folder also holds that revision's torchd and libtorchd_c.so
# (built the same way, from a worktree in build/baseline-src) in baseline/, for run.sh's
# paired comparison (BASELINE_BIN=baseline there).
#
# Usage: [BASELINE=rev] bench/gpu/bundle.sh [torch version] [that machine's torch/lib path]
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
# capi src prefix: compiles each part of src's C ABI (torch/capi/*.cc; one file before the
# split by concern) to prefix-<part>.o, unless it is newer than the sources, and lists them.
capi() {
  for cc in "$1"/torch/capi/*.cc; do
    o=$2-$(basename "$cc" .cc).o
    newer=1
    for h in "$cc" "$1"/torch/capi/*.h; do [ "$o" -nt "$h" ] || newer=0; done
    [ $newer = 1 ] || g++ -std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 \
      -I$T/include -I$T/include/torch/csrc/api/include -c "$cc" -o "$o" >&2
    echo "$o"
  done
}
mkdir -p build/capi-gpu
objs=$(capi . build/capi-gpu/torchd)
# As `make lib TORCH_CUDA=1`: the libtorch.so stand-in (libtorch_cpu and libc10 only), which a
# package's library binds to, and --no-as-needed to keep libtorch_cuda, whose static
# initializers register the CUDA backend. RPATH, not RUNPATH: searched before LD_LIBRARY_PATH.
gpulib() { # gpulib dir objects...: the stand-in and libtorchd_c.so in dir
  d=$1; shift
  g++ -shared -x c /dev/null -o "$d/libtorch.so" -Wl,-soname,libtorch.so -L$T/lib -Wl,--disable-new-dtags \
    -Wl,-rpath,"$rpath" -Wl,--no-as-needed -ltorch_cpu -lc10
  g++ -shared -o "$d/libtorchd_c.so" "$@" -L"$d" -L$T/lib -Wl,--disable-new-dtags \
    -Wl,-rpath,'$ORIGIN' -Wl,-rpath,"$rpath" -Wl,--no-as-needed -ltorch -ltorch_cuda -lc10_cuda -ltorch_cpu -lc10 -Wl,--as-needed
  cp -L "$(ldconfig -p | awk '/libturbojpeg.so.0 /{print $NF; exit}')" "$d/"
}
# shellcheck disable=SC2086 # objs is a list of paths without spaces
gpulib "$out/bin" $objs
# Without the symbol table and DWARF (profiles still name functions, from the pcln table), so
# that the folder with a baseline stays under 64 MiB.
go build -ldflags='-s -w' -o "$out/bin/torchd" ./cmd/torchd
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!build' || echo ' plus uncommitted changes')" > "$out/bin/REVISION"
rm -rf "$out/baseline"
if [ -n "${BASELINE:-}" ]; then
  # The baseline's Go code is linked here against this tree's CPU libtorchd_c.so (the same C ABI
  # or a superset of it); there it loads its own, beside it, compiled from its own torchd.cc.
  src=build/baseline-src
  git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
  git worktree prune
  git worktree add -q --detach "$src" "$BASELINE"
  mkdir -p "$src/bin" "$out/baseline"
  cp bin/libtorchd_c.so bin/libtorch.so "$src/bin/"
  (cd "$src" && go build -ldflags='-s -w' -o bin/torchd ./cmd/torchd)
  rev=$(git -C "$src" rev-parse HEAD)
  bobjs=$(capi "$src" build/capi-gpu/$ver-$rev) # compiled once per revision and torch version
  # shellcheck disable=SC2086
  gpulib "$out/baseline" $bobjs
  cp "$src/bin/torchd" "$out/baseline/"
  echo "$rev" > "$out/baseline/REVISION"
  git worktree remove --force "$src"
fi
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
# The digits CNN for bench/gpu/pt2zoo.sh: its weights and held-out rows.
mkdir -p "$out/zoo/digits"
cp models/out/digits/{model.pt,heldout.npy} "$out/zoo/digits/"
du -sh "$out"
