#!/usr/bin/env bash
# resnet18 at c=1 against its in-process bound, in alternating rounds on one quiet machine:
# torchd serving resnet18 as users start it (BATCH_SIZE=32 WORKERS=2, LINGER_MS=0: a lone
# request does not wait for a batch to fill), `ab -k -c 1` with the 640×480 photo; between
# its runs, `torchd bench-model` times one request (decode, preprocess, forward on every core,
# postprocess) in-process. Prints per round "round=R inproc_ms=X p50_ms=Y" and the medians.
# Needs `make build archives`. Usage: bench/c1-bound.sh [rounds] [seconds]   (default 5 10)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
secs=${2:-10}
body=models/out/resnet18/sample_640x480.jpg
. bench/serve.sh
serve 19810 /tmp/c1-bound.log BATCH_SIZE=32 WORKERS=2 LINGER_MS=0 OMP_WAIT_POLICY=PASSIVE
curl -sf -X POST "http://$mg/models?url=resnet18.mar&model_name=r&initial_workers=1&synchronous=true" >/dev/null || { echo "register failed"; exit 1; }
ab -k -q -c 1 -t 3 -n 1000000 -T image/jpeg -p $body "http://$inf/predictions/r" >/dev/null 2>&1 # warm-up
for r in $(seq "$rounds"); do
  in=$(OMP_WAIT_POLICY=PASSIVE bin/torchd bench-model --json --rounds 1 --time 2s --batch-sizes 1 --input $body model-store/resnet18.mar 2>/dev/null |
    python3 -c 'import json, sys; print("%.2f" % (json.load(sys.stdin)["single_ns"] / 1e6))')
  p50=$(ab -k -q -c 1 -t "$secs" -n 1000000 -T image/jpeg -p $body "http://$inf/predictions/r" 2>&1 | awk '/^ +50%/ {print $2}')
  echo "round=$r inproc_ms=$in p50_ms=$p50"
done | tee /tmp/c1-bound.txt
python3 - <<'PY'
import statistics as st
rows = [dict(kv.split("=") for kv in l.split()) for l in open("/tmp/c1-bound.txt")]
i = st.median(float(r["inproc_ms"]) for r in rows); p = st.median(float(r["p50_ms"]) for r in rows)
print(f"median inproc_ms={i:.2f} p50_ms={p:.1f} p50-inproc={p - i:+.2f} ms")
PY
