#!/usr/bin/env bash
# Unpacks torchvision's operators (torchvision::nms, roi_align, ps_roi_align, deform_conv2d, ...)
# from the pinned PyPI torchvision wheel into DEST/, so that scripted detection and segmentation
# models load in torchd as they do in Python.
#
# The wheel is the same torchvision that models/requirements.txt pins. Its operator library,
# torchvision/_C_stable.so, is built on LibTorch's stable C ABI and needs no Python (NEEDED:
# libc10, libtorch, libtorch_cpu and, being PyPI's CUDA build, libtorch_cuda, libc10_cuda and
# libcudart; no libtorch_python: the script refuses a wheel whose library needs it). It is
# written twice:
#   DEST/lib/libtorchvision.so      as shipped (SONAME set, the build machine's RPATH removed),
#                                   for a CUDA build (TORCH_CUDA=1);
#   DEST/lib/cpu/libtorchvision.so  without its libtorch_cuda and libc10_cuda dependencies, for a
#                                   CPU build, which must load without CUDA's libraries. Its
#                                   CUDA kernels are registered but never dispatched without a
#                                   CUDA tensor; the three CUDA entry points they call are
#                                   defined by libtorchd_c's CPU build (torch/capi/nocuda.c).
# The wheel is fetched with `pip download --no-deps` and checked against its sha256 before
# anything is unpacked, as get-libtorch.sh does for torch. Needs unzip, patchelf and readelf.
#
# Usage: third_party/get-torchvision.sh DEST   (the Makefile runs it for third_party/torchvision)
set -euo pipefail

dest=${1:?usage: get-torchvision.sh DEST}
cache=${TORCHD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchd/wheels}
pip=${PIP:-pip3}

# name==version  sha256  wheel file. Bump it with models/requirements.txt's torchvision line.
wheel="torchvision==0.29.2 0875f7a23bd298813240f716c56df44ce72ddb45146589442a38edd0e1f59637 torchvision-0.29.2-py3-none-manylinux_2_28_x86_64.whl"

for tool in unzip patchelf readelf; do
  command -v "$tool" >/dev/null || { echo "get-torchvision: $tool is missing (make setup-build installs it)" >&2; exit 1; }
done
read -r req sum file <<<"$wheel"
mkdir -p "$cache"
if [ ! -f "$cache/$file" ] || ! echo "$sum  $cache/$file" | sha256sum -c --quiet - 2>/dev/null; then
  "$pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$cache" "$req"
fi
echo "$sum  $cache/$file" | sha256sum -c --quiet - || { echo "get-torchvision: $file: sha256 mismatch" >&2; exit 1; }

tmp=$(mktemp -d "${dest%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unzip -q -j "$cache/$file" 'torchvision/_C_stable.so' -d "$tmp/unpacked"
mkdir -p "$tmp/lib/cpu"
lib=$tmp/lib/libtorchvision.so
cp "$tmp/unpacked/_C_stable.so" "$lib"
if readelf -d "$lib" | grep -q 'NEEDED.*libtorch_python'; then
  echo "get-torchvision: $file's operator library needs libtorch_python (Python's extension), which torchd does not load" >&2
  exit 1
fi
# One change per patchelf call: 0.14 applies only some of several given at once.
patchelf --set-soname libtorchvision.so "$lib"
patchelf --remove-rpath "$lib"
cp "$lib" "$tmp/lib/cpu/libtorchvision.so"
for dep in libtorch_cuda.so libc10_cuda.so; do patchelf --remove-needed "$dep" "$tmp/lib/cpu/libtorchvision.so"; done
rm -rf "$tmp/unpacked"
echo "${req#torchvision==}" >"$tmp/version.txt"
chmod 755 "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "get-torchvision: torchvision ${req#torchvision==}'s operators in $dest"
