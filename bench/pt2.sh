#!/usr/bin/env bash
# AOTInductor packages (.pt2) against their TorchScript twins, run from the repository root
# after `make build models archives`:
#
#   bench/pt2.sh          torchd bench-model (the in-process ceiling: preprocess, batched
#                         forward, postprocess) for ResNet-18, EfficientNet-Lite0, MiniLM and
#                         digits, TorchScript and .pt2, fp32 and bf16.
#   bench/pt2.sh cold     time to healthy (/ping 200) of a server started with one model,
#                         TorchScript and .pt2, each ROUNDS times.
#
# The bf16 packages are exported first unless models/pt2.py's cache holds them (minutes per
# model). Results go to build/pt2-bench/; BENCH_ARGS adds bench-model flags (e.g. --rounds 5
# --time 2s); ONLY="digits minilm" runs some of the models. On a CPU without avx512_bf16 or
# AMX, bf16 is emulated and slower than fp32.
set -euo pipefail

BIN=${BIN:-bin/torchd}
STORE=${STORE:-model-store}
OUT=${OUT:-build/pt2-bench}
PYTHON=${PYTHON:-.venv/bin/python}
ROUNDS=${ROUNDS:-5}
mkdir -p "$OUT"

# name, zoo directory, request body, its Content-Type, batch sizes within the package's range.
MODELS=(
  "resnet18 resnet18 models/out/resnet18/sample_640x480.jpg image/jpeg 1,8,32"
  "efficientnet_lite0 efficientnet_lite0 models/out/efficientnet_lite0/images/flower.jpg image/jpeg 1,8,32"
  "minilm minilm models/out/minilm/sample.txt text/plain 1,8,32,64"
  "digits digits models/out/digits/sample.png image/png 1,8,32,64"
)

# The bf16 packages, archived with their fp32 twin's config beside the store's archives.
bf16_archive() {
  local name=$1 zoo=$2
  local pkg=models/out/$zoo/model_bf16.pt2
  # Always through pt2.py, whose cache is keyed by the export's inputs and code: a package
  # left by an older recipe is made again, a current one is a cache hit.
  "$PYTHON" models/pt2.py --out models/out --models "$zoo" --dtype bf16 >&2
  local extra=()
  for f in index_to_name.json vocab.txt st; do
    [ -e "models/out/$zoo/$f" ] && extra+=("models/out/$zoo/$f")
  done
  local joined
  joined=$(IFS=,; echo "${extra[*]}")
  "$BIN" archive --model-name "${name}_pt2_bf16" --serialized-file "$pkg" --config-file "models/configs/$name.toml" \
    ${joined:+--extra-files "$joined"} --export-path "$OUT" --archive-format zip-store --force >/dev/null
  echo "$OUT/${name}_pt2_bf16.mar"
}

wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

ceiling() {
  for m in "${MODELS[@]}"; do
    read -r name zoo input ctype batches <<<"$m"
    wanted "$name" || continue
    for variant in "torchscript fp32 $STORE/$name.mar" "pt2 fp32 $STORE/${name}_pt2.mar" \
                   "torchscript bf16 $STORE/$name.mar" "pt2 bf16 bf16"; do
      read -r format precision archive <<<"$variant"
      [ "$archive" = bf16 ] && archive=$(bf16_archive "$name" "$zoo")
      echo "== $name $format $precision" >&2
      # shellcheck disable=SC2086
      "$BIN" bench-model --json --precision "$precision" --input "$input" --content-type "$ctype" \
        --batch-sizes "$batches" ${BENCH_ARGS:-} "$archive" >"$OUT/$name-$format-$precision.json"
      "$PYTHON" - "$OUT/$name-$format-$precision.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-20s %-11s %s  one request %8.2f ms  best %8.1f req/s at batch %d" % (
    r["archive"].rsplit("/", 1)[-1], r["format"], r["precision"], r["single_ns"] / 1e6,
    r["best"]["throughput"], r["best"]["batch"]))
EOF
    done
  done | tee "$OUT/ceiling.txt"
}

# Time from start to the first 200 from /ping (every start-up model loaded and warm).
cold() {
  local port
  for m in "${MODELS[@]}"; do
    read -r name _ <<<"$m"
    wanted "$name" || continue
    for archive in "$name.mar" "${name}_pt2.mar"; do
      for _ in $(seq "$ROUNDS"); do
        local start end pid
        # A free port below the ephemeral range (32768 and up), where clients' sockets take
        # ports: nothing may answer there before the server starts.
        port=$((20000 + RANDOM % 12000))
        while curl -s -o /dev/null "http://127.0.0.1:$port/ping"; do port=$((20000 + RANDOM % 12000)); done
        start=$(date +%s.%N)
        "$BIN" serve --model-store "$STORE" --models "$name=$archive" --inference-address "127.0.0.1:$port" \
          --management-address "127.0.0.1:$((port + 1))" --metrics-address "127.0.0.1:$((port + 2))" \
          --enable-snapshots=false --grpc-address= --grpc-inference-address= --grpc-management-address= >"$OUT/cold-$name.log" 2>&1 &
        pid=$!
        until curl -sf -o /dev/null "http://127.0.0.1:$port/ping"; do
          kill -0 "$pid" 2>/dev/null || { echo "server for $archive exited; see $OUT/cold-$name.log" >&2; exit 1; }
          sleep 0.02
        done
        end=$(date +%s.%N)
        kill "$pid"
        wait "$pid" || true
        awk -v a="$archive" -v s="$start" -v e="$end" 'BEGIN { printf "%-28s %6.3f s\n", a, e - s }'
      done
    done
  done | tee "$OUT/cold.txt"
}

case "${1:-ceiling}" in
  ceiling) ceiling ;;
  cold) cold ;;
  *) echo "usage: bench/pt2.sh [ceiling|cold]" >&2; exit 2 ;;
esac
