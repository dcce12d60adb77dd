#!/usr/bin/env bash
# Memory that comes back: one torchd with VERSIONS versions of MODEL (the mission's
# BATCH_SIZE=32 WORKERS=2 LINGER_MS=10), each put under load in turn (REQS requests of
# the 640×480 photo at C concurrent, ab -k), then idle. Prints the resident set (RSS, from
# /proc) after registration (idle), after each burst, and every 5 s for IDLE seconds after
# the last; the target is RSS ≤ 1.5 × idle within 60 s. A measurement, not a test.
#
#   bench/memory-idle.sh                       # 10 × resnet18.mar, 200 requests each
#   VERSIONS=4 REQS=100 MODEL=resnet18_pt2 bench/memory-idle.sh
#
# Extra environment for the server passes through (e.g. TORCHD_KEEP_FREED_MEMORY=false).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/serve.sh
MODEL=${MODEL:-resnet18} VERSIONS=${VERSIONS:-10} REQS=${REQS:-200} C=${C:-16} IDLE=${IDLE:-60}
IMG=${IMG:-models/out/resnet18/sample_640x480.jpg}
log=$(mktemp)
serve 19850 "$log" BATCH_SIZE=32 WORKERS=2 LINGER_MS=10
pid=${pids[-1]}
rss() { awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status"; }

echo "torchd $(bin/torchd version 2>/dev/null | head -1); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "RSS at start (no model): $(rss) MiB"
for i in $(seq 0 $((VERSIONS - 1))); do
  curl -sf -X POST "http://$mg/models?url=$MODEL.mar&model_name=${MODEL}_v$i&initial_workers=1&synchronous=true" >/dev/null ||
    { echo "register ${MODEL}_v$i failed" >&2; tail -5 "$log" >&2; exit 1; }
done
sleep 5
idle=$(rss)
echo "RSS with $VERSIONS versions registered and warm, idle: $idle MiB"
peak=0
for i in $(seq 0 $((VERSIONS - 1))); do
  out=$(ab -k -q -n "$REQS" -c "$C" -T image/jpeg -p "$IMG" "http://$inf/predictions/${MODEL}_v$i" 2>&1)
  r=$(rss)
  peak=$((r > peak ? r : peak))
  printf "burst %d (%s_v%d): %s req/s, %s failed; RSS %d MiB\n" "$i" "$MODEL" "$i" \
    "$(awk '/^Requests per second/ {print $4}' <<<"$out")" "$(awk '/^Failed requests/ {print $3}' <<<"$out")" "$r"
done
after=$(rss)
echo "RSS after the last burst: $after MiB (highest after a burst: $peak MiB)"
back=""
for t in $(seq 5 5 "$IDLE"); do
  sleep 5
  r=$(rss)
  printf "idle +%2ds: RSS %d MiB (%.2f × idle)\n" "$t" "$r" "$(bc -l <<<"$r / $idle")"
  if [[ -z $back ]] && ((r * 2 <= idle * 3)); then back=$t; fi
done
if [[ -n $back ]]; then
  echo "back within 1.5 × idle ($idle MiB) after ${back} s"
else
  echo "not back within 1.5 × idle ($idle MiB) in ${IDLE} s"
fi
