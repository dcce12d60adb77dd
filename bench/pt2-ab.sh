#!/usr/bin/env bash
# The zoo's fp32 packages from two stores, e.g. before and after a change to models/pt2.py's
# recipe: `torchd bench-model`'s forward at batch 1 and 32 of each NAME_pt2.mar, the two
# stores interleaved in a new order every round. Prints one line per run and the medians:
#   R model=M store=S fwd1_ms=X fwd32_ms=Y
#   median model=M before_fwd1_ms=.. after_fwd1_ms=.. ratio1=.. before_fwd32_ms=.. after_fwd32_ms=.. ratio32=..
# (ratios are before ÷ after: above 1, the change is faster). Usage, from the repository root
# after `make build archives`, with BEFORE a store built before the change:
#   BEFORE=/tmp/old-store bench/pt2-ab.sh [rounds]   (default 3; MODELS="resnet18 ...")
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE:?set BEFORE to a model store built before the change}
rounds=${1:-3}
models=${MODELS:-resnet18 efficientnet_lite0 minilm digits}
declare -A input type
input[resnet18]=models/out/resnet18/sample_640x480.jpg type[resnet18]=image/jpeg
input[efficientnet_lite0]=models/out/efficientnet_lite0/images/flower.jpg type[efficientnet_lite0]=image/jpeg
input[minilm]=models/out/minilm/sample.txt type[minilm]=text/plain
input[digits]=models/out/digits/sample.png type[digits]=image/png
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for r in $(seq "$rounds"); do
  for run in $(shuf -e $(for m in $models; do echo "$m:before" "$m:after"; done)); do
    m=${run%%:*} s=${run##*:}
    store=model-store; [ "$s" = before ] && store=$before
    bin/torchd bench-model --precision fp32 --input "${input[$m]}" --content-type "${type[$m]}" \
      --batch-sizes 1,32 --time 1s --rounds 1 --workers 1 --json "$store/${m}_pt2.mar" 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin); b={x["batch"]:x["forward_ns"]/1e6 for x in j["batches"]}; print("R model=%s store=%s fwd1_ms=%.2f fwd32_ms=%.1f" % (sys.argv[1], sys.argv[2], b[1], b[32]))' "$m" "$s" | tee -a "$log"
  done
done
python3 - "$log" <<'PY'
import statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split()[1:])
    runs[f["model"], f["store"]].append((float(f["fwd1_ms"]), float(f["fwd32_ms"])))
for m in dict.fromkeys(k[0] for k in runs):
    b1, b32 = (statistics.median(x[i] for x in runs[m, "before"]) for i in (0, 1))
    a1, a32 = (statistics.median(x[i] for x in runs[m, "after"]) for i in (0, 1))
    print("median model=%s before_fwd1_ms=%.2f after_fwd1_ms=%.2f ratio1=%.2f before_fwd32_ms=%.1f after_fwd32_ms=%.1f ratio32=%.2f" % (m, b1, a1, b1 / a1, b32, a32, b32 / a32))
PY
