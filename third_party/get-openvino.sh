#!/usr/bin/env bash
# Unpacks OpenVINO's C library, the libraries it loads on the CPU, and its C API headers from
# the pinned PyPI openvino wheel into DEST/lib and DEST/include.
#
# The wheel is the openvino that bench/forward.sh and models/openvino_ir.py use (build/pyext),
# so the IR the zoo writes, its reference outputs and torchd's openvino backend come from one
# OpenVINO. The libraries taken are those a CPU inference of an IR or ONNX model loads:
# libopenvino_c (package openvino opens it), libopenvino, the CPU plugin, the IR and ONNX
# readers, and TBB with its allocator (the CPU plugin's threads). Each finds the others by
# its $ORIGIN rpath, so they go in one folder (bin/, beside torchd).
#
# Usage: third_party/get-openvino.sh DEST   (the Makefile runs it for third_party/openvino)
set -euo pipefail

dest=${1:?usage: get-openvino.sh DEST}
cache=${TORCHD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchd/wheels}
pip=${PIP:-pip3}

# Bump the version here, in the Makefile's OPENVINO_VERSION and openvino.LibraryName together.
version=2026.4.1
so=2641
sum=2d22b1da03f7caf74df30e9f6417d0ab2f637e4a38e08e1dcd294d2c37407aaf
file=openvino-$version-22982-cp311-cp311-manylinux_2_28_x86_64.whl
libs=(libopenvino_c.so.$so libopenvino.so.$so libopenvino_intel_cpu_plugin.so libopenvino_ir_frontend.so.$so
  libopenvino_onnx_frontend.so.$so libtbb.so.12 libtbbmalloc.so.2)

mkdir -p "$cache"
if [ ! -f "$cache/$file" ] || ! echo "$sum  $cache/$file" | sha256sum -c --quiet - 2>/dev/null; then
  # The platform and Python are given, so the same wheel comes whatever python3 runs pip.
  "$pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache" "openvino==$version"
fi
echo "$sum  $cache/$file" | sha256sum -c --quiet - || { echo "get-openvino: $file: sha256 mismatch" >&2; exit 1; }

tmp=$(mktemp -d "${dest%/}.tmp.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib" "$tmp/include"
unzip -q -j "$cache/$file" "${libs[@]/#/openvino/libs/}" -d "$tmp/lib"
unzip -q "$cache/$file" 'openvino/include/openvino/c/*' -d "$tmp/unpacked"
mv "$tmp/unpacked/openvino/include/openvino" "$tmp/include/"
rm -rf "$tmp/unpacked"
echo "$version" >"$tmp/version.txt"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "get-openvino: OpenVINO $version in $dest"
