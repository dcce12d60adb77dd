#!/usr/bin/env bash
# Unpacks ONNX Runtime's shared library from the pinned PyPI onnxruntime wheel into DEST/lib,
# and its C API header into DEST/include.
#
# The wheel is the onnxruntime that `make models-onnx` installs into the zoo's venv, so the
# ONNX test models' reference outputs and torchd come from one ONNX Runtime. The wheel carries
# no C header: it comes from the Go module github.com/yalue/onnxruntime_go at a pinned
# version, fetched by the Go module proxy (its go.sum line checked against the checksum
# database), used for that file only and never added to go.mod. The header declares an older
# ORT_API_VERSION than 1.31's; the library serves every older version of the API.
#
# Usage: third_party/get-onnxruntime.sh DEST   (the Makefile runs it for third_party/onnxruntime)
set -euo pipefail

dest=${1:?usage: get-onnxruntime.sh DEST}
cache=${TORCHD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchd/wheels}
pip=${PIP:-pip3}
go=${GO:-go}

# Bump the version here, in the Makefile's ONNXRUNTIME_VERSION and its models-onnx pin together.
version=1.31.1
sum=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
file=onnxruntime-$version-cp311-cp311-manylinux_2_28_x86_64.whl
header_module=github.com/yalue/onnxruntime_go@v1.27.0
# sha256 of the two header files (onnxruntime_c_api.h includes onnxruntime_ep_c_api.h).
headers=(
  "onnxruntime_c_api.h 9ed0d7054a4e74249467365b25b415d36f51a44a6349e2a994a1812e4723d1e2"
  "onnxruntime_ep_c_api.h e94ac3490697bdb107844fa9d403952ee7136134132a057eae5c1207b57ce352"
)

mkdir -p "$cache"
if [ ! -f "$cache/$file" ] || ! echo "$sum  $cache/$file" | sha256sum -c --quiet - 2>/dev/null; then
  # The platform and Python are given, so the same wheel comes whatever python3 runs pip.
  "$pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache" "onnxruntime==$version"
fi
echo "$sum  $cache/$file" | sha256sum -c --quiet - || { echo "get-onnxruntime: $file: sha256 mismatch" >&2; exit 1; }

tmp=$(mktemp -d "${dest%/}.tmp.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib" "$tmp/include" "$tmp/gomod"
unzip -q -j "$cache/$file" "onnxruntime/capi/libonnxruntime.so.$version" -d "$tmp/lib"

# Outside any module (a directory of its own), so go.mod is neither read nor changed.
dir=$(cd "$tmp/gomod" && GOFLAGS= GO111MODULE=on "$go" mod download -json "$header_module" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
test -n "$dir" || { echo "get-onnxruntime: go mod download $header_module gave no directory" >&2; exit 1; }
for h in "${headers[@]}"; do
  read -r name hsum <<<"$h"
  cp "$dir/$name" "$tmp/include/$name"
  chmod 644 "$tmp/include/$name"
  echo "$hsum  $tmp/include/$name" | sha256sum -c --quiet - || { echo "get-onnxruntime: $name: sha256 mismatch" >&2; exit 1; }
done
rm -rf "$tmp/gomod"
echo "$version" >"$tmp/version.txt"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "get-onnxruntime: ONNX Runtime $version in $dest"
