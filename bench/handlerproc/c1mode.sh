#!/usr/bin/env bash
# Which allocator settings leave a handler process in c=1's slow mode (docs/benchmarks.md,
# "glibc's thresholds"): for each start, a fresh torchd serving the handlerproc archive
# (bench/handlerproc/make.py) with one variant's variables in its environment, 10 s at c=50,
# the tree's RSS 0.3 s and 3 s later, then `ab -k -c 1` and each handler process's minor
# faults a request (/proc/PID/stat). The slow mode maps and unmaps a block at every request:
# hundreds to thousands of faults a request in the serving process, tens in the fast mode.
# The variants run start by start in turn, so that what else runs on the machine falls on all.
#
# Usage: bench/handlerproc/c1mode.sh STARTS 'NAME [VAR=VALUE ...]' ...
#   e.g. bench/handlerproc/c1mode.sh 12 default '8MiB MALLOC_MMAP_THRESHOLD_=8388608'
# Prints a line per start and per variant: starts, slow starts (over 300 faults a request),
# median RSS after the burst and 3 s later.
set -euo pipefail
cd "$(dirname "$0")/../.."
starts=$1
shift
py=${PYTHON:-$PWD/.venv/bin/python}
img=models/out/resnet18/sample_640x480.jpg
work=$(mktemp -d)
. bench/handlerproc/lib.sh
root=
trap '[ -n "$root" ] && kill -- -"$root" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$py" bench/handlerproc/make.py "$work/store" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }

url=http://127.0.0.1:18970/predictions/resnet18_py
faults() { for p in $(tree "$root"); do echo "$p $(awk '{sub(/.*\) /, ""); print $8}' /proc/"$p"/stat 2>/dev/null || echo 0)"; done | sort; }

for i in $(seq "$starts"); do
  for v in "$@"; do
    read -r -a vars <<<"$v"
    name=${vars[0]}
    serve_resnet 18970 "$work/store" "$work/torchd.log" "${vars[@]:1}" &
    root=$!
    wait_ready "$root" 18970 "$work/torchd.log"
    ab -k -q -c 50 -t 10 -n 10000000 -T image/jpeg -p "$img" "$url" >/dev/null 2>&1 || true
    sleep 0.3
    after=$(tree_mem "$root")
    sleep 3
    later=$(tree_mem "$root")
    faults >"$work/f0"
    ab -k -q -c 1 -t 8 -n 10000000 -T image/jpeg -p "$img" "$url" >"$work/ab" 2>&1 || true
    faults >"$work/f1"
    n=$(awk '/^Complete requests/ {print $3}' "$work/ab")
    most=$(join "$work/f0" "$work/f1" | awk -v n="$n" '{f=($3-$2)/n; if (f > m) m=f} END {printf "%.0f", m}')
    echo "start=$i variant=$name rss_after_mib=${after%% *} rss_3s_mib=${later%% *} c1_rps=$(awk '/^Requests per/ {print $4}' "$work/ab") faults_per_req=$most" | tee -a "$work/starts"
    kill -- -"$root" 2>/dev/null || true
    wait "$root" 2>/dev/null || true
    root=
  done
done

awk '{for (i=1;i<=NF;i++) {split($i,kv,"="); f[kv[1]]=kv[2]} v=f["variant"]; n[v]++; if (f["faults_per_req"] > 300) slow[v]++
      a[v, n[v]]=f["rss_after_mib"]; b[v, n[v]]=f["rss_3s_mib"]; if (!(v in seen)) {seen[v]=1; names[++k]=v}}
  function med(x, v,   i, j, t, y, m) { m=n[v]; for (i=1;i<=m;i++) y[i]=x[v, i]+0
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (y[j]<y[i]) {t=y[i]; y[i]=y[j]; y[j]=t}
    return m%2 ? y[(m+1)/2] : (y[m/2]+y[m/2+1])/2 }
  END {for (i=1;i<=k;i++) {v=names[i]; printf "variant=%s starts=%d slow=%d rss_after_mib=%d rss_3s_mib=%d\n", v, n[v], slow[v]+0, med(a, v), med(b, v)}}' "$work/starts"
