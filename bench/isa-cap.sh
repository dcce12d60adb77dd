#!/usr/bin/env bash
# A package's precisions on lesser CPUs than this one: `torchd bench-model`'s forward of an
# archive's variants with oneDNN capped at an older instruction set (ONEDNN_MAX_CPU_ISA; ATen's
# own kernels capped alike with ATEN_CPU_CAPABILITY), interleaved, a new order every round.
# It stands in for an AVX2-only or AVX-512-without-VNNI machine where none is at hand: the
# caches and clocks stay this machine's. Prints one line per run and the medians:
#   R isa=I precision=P fwd1_ms=X fwd32_ms=Y
#   median isa=I precision=P fwd1_ms=X fwd32_ms=Y
# Needs `make build archives` (an archive with an int8 variant: the zoo's resnet18_pt2).
# Usage: bench/isa-cap.sh [rounds] [archive]   (default 3 model-store/resnet18_pt2.mar;
# ISAS="AVX2 AVX512_CORE ALL" by default)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
mar=${2:-model-store/resnet18_pt2.mar}
isas=${ISAS:-AVX2 AVX512_CORE ALL}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for r in $(seq "$rounds"); do
  for run in $(shuf -e $(for i in $isas; do for p in fp32 int8; do echo "$i:$p"; done; done)); do
    isa=${run%%:*} p=${run##*:}
    aten=default
    case $isa in AVX2) aten=avx2 ;; AVX512*) aten=avx512 ;; esac
    ONEDNN_MAX_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten bin/torchd bench-model --precision "$p" \
      --input models/out/resnet18/sample_640x480.jpg --content-type image/jpeg --batch-sizes 1,32 \
      --time 1s --rounds 1 --workers 1 --json "$mar" 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin); b={x["batch"]:x["forward_ns"]/1e6 for x in j["batches"]}; print("R isa=%s precision=%s fwd1_ms=%.1f fwd32_ms=%.1f" % (sys.argv[1], sys.argv[2], b[1], b[32]))' "$isa" "$p" | tee -a "$log"
  done
done
python3 - "$log" <<'PY'
import statistics, sys, collections
runs = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split()[1:])
    runs[f["isa"], f["precision"]][0].append(float(f["fwd1_ms"]))
    runs[f["isa"], f["precision"]][1].append(float(f["fwd32_ms"]))
for (isa, p), (a, b) in sorted(runs.items()):
    print("median isa=%s precision=%s fwd1_ms=%.1f fwd32_ms=%.1f" % (isa, p, statistics.median(a), statistics.median(b)))
PY
