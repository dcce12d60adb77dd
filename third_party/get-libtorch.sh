#!/usr/bin/env bash
# Unpacks LibTorch from the pinned PyPI torch wheel into third_party/libtorch/ (include/, lib/).
#
# The wheel is the same torch that models/requirements.txt pins, so the zoo is exported and
# served by one PyTorch. Its libtorch_cpu.so needs libcudart.so.13 and libcupti.so.13 even on
# a machine without a GPU; they come from two small nvidia wheels and go into lib/ beside it.
# Each wheel is fetched with `pip download --no-deps` (pip's cache makes a second run free)
# and checked against its sha256 before anything is unpacked.
#
# Usage: third_party/get-libtorch.sh DEST   (the Makefile runs it for third_party/libtorch)
set -euo pipefail

dest=${1:?usage: get-libtorch.sh DEST}
cache=${TORCHD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchd/wheels}
pip=${PIP:-pip3}

# name==version  sha256  wheel file. Bump the torch line and models/requirements.txt together.
wheels=(
  "torch==2.15.0 48c2d861134c0b5697c7602cb5ffa68f62a2989fdcd1717e593356f67996ca1e torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"
  "nvidia-cuda-runtime==13.2.86 3498247680dfddce31bad102af7e3e26fc795342a3cac64722bb0fa95e7f60f0 nvidia_cuda_runtime-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
  "nvidia-cuda-cupti==13.2.86 8fa29f15dd8336181f961764d9d95236fc6b931dd0c8fcf8cd70aab0c310b586 nvidia_cuda_cupti-13.2.86-py3-none-manylinux_2_25_x86_64.whl"
)

mkdir -p "$cache"
for w in "${wheels[@]}"; do
  read -r req sum file <<<"$w"
  if [ ! -f "$cache/$file" ] || ! echo "$sum  $cache/$file" | sha256sum -c --quiet - 2>/dev/null; then
    # The platform and Python are given, so the same wheel comes whatever python3 runs pip.
    "$pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$cache" "$req"
  fi
  echo "$sum  $cache/$file" | sha256sum -c --quiet - || { echo "get-libtorch: $file: sha256 mismatch" >&2; exit 1; }
done

tmp=$(mktemp -d "${dest%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
read -r _ _ torch_whl <<<"${wheels[0]}"
# libtorch_python and libshm belong to the Python extension, not to LibTorch.
unzip -q "$cache/$torch_whl" 'torch/lib/*' 'torch/include/*' -x 'torch/lib/libtorch_python.so' 'torch/lib/libshm*' -d "$tmp"
for w in "${wheels[@]:1}"; do
  read -r _ _ file <<<"$w"
  unzip -q -j "$cache/$file" 'nvidia/cu13/lib/libcudart.so.13' 'nvidia/cu13/lib/libcupti.so.13' -d "$tmp/torch/lib" 2>/dev/null || [ $? -eq 11 ]
done
test -f "$tmp/torch/lib/libcudart.so.13" && test -f "$tmp/torch/lib/libcupti.so.13"
read -r torch_req _ _ <<<"${wheels[0]}"
echo "${torch_req#torch==}" >"$tmp/torch/version.txt"
rm -rf "$dest"
mv "$tmp/torch" "$dest"
echo "get-libtorch: LibTorch ${torch_req#torch==} in $dest"
