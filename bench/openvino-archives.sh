#!/usr/bin/env bash
# Archives of the zoo's OpenVINO IR (models/openvino_ir.py) that torchd serves with the image
# handler, as the zoo's .pt2 archives: OUT/resnet18_ov.mar (the NNCF int8 IR) and
# OUT/efficientnet_lite0_ov.mar (fp32 weights; bf16 where the IR's Triton config asks for it).
# Each takes the zoo's config without its tensor declarations (the IR names its own, x and
# logits) or LibTorch's fp32_modules. FORWARD_BATCH=N sets the archives' forward_batch (the
# zoo config's otherwise): the OpenVINO backend compiles a model for N rows, and a batch then
# runs as forwards of N on it (docs/guide/configuration.md, forward_batch).
# Needs `make build models-openvino`.
# Usage: [FORWARD_BATCH=N] bench/openvino-archives.sh OUT [MODELS...]   (default resnet18 efficientnet_lite0)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
models=${*:-resnet18 efficientnet_lite0}
declare -A ir=([resnet18]=resnet18_ov_int8 [efficientnet_lite0]=efficientnet_lite0_ov)
mkdir -p "$out"
for m in $models; do
  d=models/out/openvino/${ir[$m]}
  hint=$(sed -n 's/.*INFERENCE_PRECISION_HINT.*string_value: "\([a-z0-9]*\)".*/\1/p' "$d/config.pbtxt")
  awk -v hint="$hint" -v fb="${FORWARD_BATCH:-}" '/^\[\[(inputs|outputs)\]\]/ {skip = 1} /^\[options\]/ {skip = 0}
    !skip && !/^fp32_modules/ && !(fb != "" && /^forward_batch =/) {print}
    /^handler =/ && hint != "" {print "precision = \"" hint "\""} /^handler =/ && fb != "" {print "forward_batch = " fb}' \
    "models/configs/$m.toml" >"$out/${m}_ov.toml"
  bin/torchd archive --model-name "${m}_ov" --version 1.0 --serialized-file "$d/1/model.xml" --config-file "$out/${m}_ov.toml" \
    --extra-files "$d/1/model.bin,models/out/$m/index_to_name.json" --export-path "$out" --archive-format zip-store --force >/dev/null
done
