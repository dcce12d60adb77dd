#!/usr/bin/env bash
# Installs the Java-fronted peers of `make bench`, TorchServe and MMS, each in its own venv
# under build/bench (pip, over the project venv's torch through a .pth file, so that every
# server runs the same LibTorch), and archives the zoo's TorchScript files for each with its
# own archiver. A peer that cannot be installed or archived leaves
# build/bench/<peer>.unavailable with the reason; the benchmark reports it and goes on.
# Nothing here is committed: build/ is ignored.
#
# Usage: bench/peers/install.sh            (PYTHON=.venv/bin/python by default)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
# The project venv's site-packages, which each peer's venv sees after its own.
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
out=build/bench
mkdir -p "$out"

# fail PEER REASON: record why PEER is not in the benchmark.
fail() { echo "$2" > "$out/$1.unavailable"; echo "install.sh: $1 unavailable: $2" >&2; }

# venv PEER PACKAGE...: a venv with the packages; 1 if pip failed or pulled in another torch.
venv() {
  local peer=$1; shift
  local v=$out/venv-$peer log=$out/$peer-install.log
  if [ ! -x "$v/bin/python" ]; then
    "$PY" -m venv "$v" >"$log" 2>&1 || { fail "$peer" "python3 -m venv failed: $(tail -1 "$log")"; return 1; }
    echo "$site" >"$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torchd-venv.pth"
  fi
  if ! "$v/bin/pip" install -q --disable-pip-version-check "$@" >>"$log" 2>&1; then
    fail "$peer" "pip install $* failed: $(grep -E 'ERROR|error' "$log" | tail -2 | tr '\n' ' ')"
    return 1
  fi
  local torchfile
  torchfile=$("$v/bin/python" -c 'import torch; print(torch.__file__)' 2>>"$log")
  case "$torchfile" in
    "$site"/*) ;;
    *) fail "$peer" "pip installed its own torch ($torchfile) instead of using the project's"; return 1 ;;
  esac
}

java_ok() {
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -n "$v" ] && [ "$v" -ge "$1" ]
}

# torchserve: its archives use bench/torchserve/handler.py.
rm -f "$out/torchserve.unavailable"
if ! java_ok 11; then
  fail torchserve "TorchServe needs Java 11 or later; java -version: $(java -version 2>&1 | head -1)"
elif venv torchserve torchserve==0.12.0 torch-model-archiver==0.12.0; then
  store=$out/store-torchserve
  mkdir -p "$store"
  for m in resnet18:resnet18 digits:digits digits_tensor:digits; do
    name=${m%%:*}; zoo=${m##*:}
    [ "$store/$name.mar" -nt "models/out/$zoo/model.pt" ] && [ "$store/$name.mar" -nt bench/torchserve/handler.py ] && continue
    extra=()
    [ "$name" != digits_tensor ] && extra=(--extra-files "models/out/$zoo/index_to_name.json")
    "$out/venv-torchserve/bin/torch-model-archiver" --model-name "$name" --version 1.0 \
      --serialized-file "models/out/$zoo/model.pt" --handler bench/torchserve/handler.py "${extra[@]}" \
      --export-path "$store" -f >>"$out/torchserve-install.log" 2>&1 \
      || { fail torchserve "torch-model-archiver failed for $name: $(tail -1 "$out/torchserve-install.log")"; break; }
  done
fi

# MMS: its archives hold the model's files, bench/mms/service.py and bench/peers/zoo.py.
rm -f "$out/mms.unavailable"
if ! java_ok 8; then
  fail mms "MMS needs Java 8 or later; java -version: $(java -version 2>&1 | head -1)"
elif venv mms multi-model-server==1.1.11 model-archiver==1.0.3; then
  store=$out/store-mms
  mkdir -p "$store"
  for m in resnet18:resnet18 digits:digits digits_tensor:digits; do
    name=${m%%:*}; zoo=${m##*:}
    [ "$store/$name.mar" -nt "models/out/$zoo/model.pt" ] && [ "$store/$name.mar" -nt bench/mms/service.py ] \
      && [ "$store/$name.mar" -nt bench/peers/zoo.py ] && continue
    src=$out/src-mms/$name
    rm -rf "$src"; mkdir -p "$src"
    cp "models/out/$zoo/model.pt" bench/mms/service.py bench/peers/zoo.py "$src/"
    [ -f "models/out/$zoo/index_to_name.json" ] && cp "models/out/$zoo/index_to_name.json" "$src/"
    "$out/venv-mms/bin/model-archiver" --model-name "$name" --model-path "$src" --handler service:handle \
      --runtime python3 --export-path "$store" -f >>"$out/mms-install.log" 2>&1 \
      || { fail mms "model-archiver failed for $name: $(tail -1 "$out/mms-install.log")"; break; }
  done
fi
exit 0
