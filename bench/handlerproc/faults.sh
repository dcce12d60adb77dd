#!/usr/bin/env bash
# The CPU a request costs in each process of torchd's tree (docs/benchmarks.md, "Where the CPU
# goes"): torchd alone serving bench/handlerproc's resnet18 archive (BATCH_SIZE=32 WORKERS=2),
# warmed, then one ab run; per process, the user and system CPU milliseconds and the minor page
# faults per request (/proc/PID/stat before and after), then each process's RSS and PSS.
# Usage: bench/handlerproc/faults.sh [concurrency] [seconds] [VAR=VALUE ...]   (default 50 15;
# the variables go into torchd's environment, which its handler processes inherit, e.g.
# THP_MEM_ALLOC_ENABLE=0; PYTHON as in bench/handlerproc.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
c=${1:-50}
secs=${2:-15}
shift $(($# < 2 ? $# : 2))
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
"$py" bench/handlerproc/make.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
. bench/handlerproc/lib.sh
serve_resnet 18970 "$work/store" "$work/torchd.log" "$@" &
root=$!
trap 'kill -- -"$root" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
wait_ready "$root" 18970 "$work/torchd.log"
ab -k -q -c 50 -n 500 -T image/jpeg -p "$img" http://127.0.0.1:18970/predictions/resnet18_py >/dev/null 2>&1 || true
sleep 12 # the fork server exits once idle (handler_fork_server_linger): only the serving tree is left
# snap: per process, its pid, command, minor faults, user and system ticks.
snap() {
  for p in $(tree "$root"); do
    echo "$p $(tr -d ' ' </proc/"$p"/comm) $(awk '{sub(/.*\) /, ""); print $8, $12, $13}' /proc/"$p"/stat)"
  done | sort
}
snap >"$work/s0"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
ab -k -q -c "$c" -t "$secs" -n 10000000 -T image/jpeg -p "$img" http://127.0.0.1:18970/predictions/resnet18_py >"$work/ab" 2>&1 || true
snap >"$work/s1"
n=$(awk '/^Complete requests/ {print $3}' "$work/ab")
echo "c=$c n=$n $(awk '/Requests per second/ {print "rps=" $4} /^  50%/ {print "p50_ms=" $2} /^  99%/ {print "p99_ms=" $2}' "$work/ab" | xargs) load=$load0 -> $(cut -d' ' -f1-3 /proc/loadavg)"
join "$work/s0" "$work/s1" | awk -v n="$n" -v hz="$(getconf CLK_TCK)" '{
  u=($8-$4)*1000/hz/n; s=($9-$5)*1000/hz/n; f=($7-$3)/n; tu+=u; ts+=s; tf+=f
  printf "pid=%s %s user_ms=%.1f sys_ms=%.1f minflt=%.0f per request\n", $1, $2, u, s, f }
  END { printf "tree user_ms=%.1f sys_ms=%.1f minflt=%.0f per request\n", tu, ts, tf }'
for p in $(tree "$root"); do
  awk -v p="$p" '/^Rss:/ {r=$2} /^Pss:/ {q=$2} END {printf "pid=%s rss_mib=%d pss_mib=%d\n", p, r/1024, q/1024}' /proc/"$p"/smaps_rollup
done
