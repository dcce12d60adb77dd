#!/usr/bin/env bash
# Where the handler-process path's memory goes (docs/benchmarks.md): torchd alone serving
# bench/handlerproc's resnet18 archive (BATCH_SIZE=32 WORKERS=2), and the smaps_rollup of the
# daemon and each handler process after the load, after 600 requests at c=50, and 10 s later.
# Usage: bench/handlerproc/memory.sh LABEL [VAR=VALUE ...]   (the variables go into torchd's
# environment, which its handler processes inherit; PYTHON as in bench/handlerproc.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
label=${1:?usage: memory.sh LABEL [VAR=VALUE ...]}
shift
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
"$py" bench/handlerproc/make.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
. bench/handlerproc/lib.sh
serve_resnet 18960 "$work/store" "$work/torchd.log" "$@" &
root=$!
trap 'kill -- -"$root" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
wait_ready "$root" 18960 "$work/torchd.log"
# snap WHEN: one line per process, in MiB.
snap() {
  for p in $(ps -e -o pid=,ppid= | awk -v r="$root" '$1==r || $2==r {print $1}'); do
    awk -v p="$p" -v l="$label $1" -v c="$(tr '\0' ' ' </proc/"$p"/cmdline | cut -c1-30)" \
      '/^(Rss|Pss|Pss_Anon|Pss_File|Anonymous|Shared_Clean):/ {v[$1]=$2}
      END {printf "%s pid=%s [%s] rss=%d pss=%d pss_anon=%d pss_file=%d anon=%d shared_clean=%d MiB\n", l, p, c,
        v["Rss:"]/1024, v["Pss:"]/1024, v["Pss_Anon:"]/1024, v["Pss_File:"]/1024, v["Anonymous:"]/1024, v["Shared_Clean:"]/1024}' \
      /proc/"$p"/smaps_rollup
  done
}
snap loaded
ab -k -q -c 50 -n 600 -T image/jpeg -p "$img" http://127.0.0.1:18960/predictions/resnet18_py 2>&1 | grep -E "Requests per|Non-2xx" || true
snap burst
sleep 10
snap idle10s
