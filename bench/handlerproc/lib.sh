# Shared by bench/handlerproc.sh and bench/handlerproc-ab.sh (sourced): process trees, their
# memory and CPU, and the wait for an idle machine between runs.

# serve_resnet PORT STORE LOG [VAR=VALUE ...]: torchd serving bench/handlerproc's resnet18
# archive from STORE (make.py) on PORT, management PORT+1, metrics PORT+2, with the variables
# in its environment, in a process group of its own. Run it with &: $! is then torchd, and
# `kill -- -$!` stops it with its handler processes.
serve_resnet() {
  local port=$1 store=$2 log=$3
  shift 3
  exec env "$@" setsid bin/torchd serve --python "${PYTHON:-$PWD/.venv/bin/python}" --model-store "$store" \
    --models resnet18_py=resnet18_py.mar --inference-address 127.0.0.1:"$port" \
    --management-address 127.0.0.1:$((port + 1)) --metrics-address 127.0.0.1:$((port + 2)) \
    --grpc-address= --grpc-inference-address= --grpc-management-address= \
    --access-log=false --enable-snapshots=false --job-queue-size 1024 >"$log" 2>&1
}

# wait_ready PID PORT LOG: returns once serve_resnet's torchd (PID, on PORT) has both workers
# READY; exits with its log's tail if it exits first.
wait_ready() {
  until [ "$(curl -sf http://127.0.0.1:$(($2 + 1))/models/resnet18_py | grep -c '"READY"')" -ge 2 ]; do
    kill -0 "$1" 2>/dev/null || { echo "torchd exited:"; tail -20 "$3"; exit 1; }
    sleep 1
  done
}

# tree PID: PID and every process below it.
tree() {
  ps -e -o pid=,ppid= | awk -v root="$1" '{p[$1]=$2} END {
    for (x in p) { y=x; while (y != "" && y != root && y != 0 && y != 1) y=p[y]; if (y == root) print x } }'
}

# tree_mem PID: the RSS and PSS MiB of PID's tree, from smaps_rollup. RSS counts a page in
# every process that maps it; PSS counts the pages processes share (forked copies, libraries'
# text) once in the sum.
tree_mem() {
  local p r q rss=0 pss=0
  for p in $(tree "$1"); do
    read -r r q < <(awk '/^Rss:/ {r=$2} /^Pss:/ {q=$2} END {print r+0, q+0}' /proc/"$p"/smaps_rollup 2>/dev/null || echo 0 0)
    rss=$((rss + r)) pss=$((pss + q))
  done
  echo "$((rss / 1024)) $((pss / 1024))"
}

# sample_mem PID FILE: tree_mem of PID's tree every second into FILE (one line each), until killed.
sample_mem() {
  : >"$2"
  while true; do
    tree_mem "$1" >>"$2"
    sleep 1
  done
}

# tree_cpu PID: the CPU milliseconds PID's tree has spent (utime+stime, its live processes).
tree_cpu() {
  local p t=0
  for p in $(tree "$1"); do
    t=$((t + $(awk '{sub(/.*\) /, ""); print $12 + $13}' /proc/"$p"/stat 2>/dev/null || echo 0)))
  done
  echo $((t * 1000 / $(getconf CLK_TCK)))
}

# settle PID...: returns once the trees of the PIDs (the servers) have been quiet for half a
# second (under a tenth of one core between them), or after 60 s. When ab stops at its time
# limit, the requests it left in flight are still queued in the server (at c=50 up to 50,
# seconds of work); without the wait they would run beside the next run, on the same cores,
# and the first requests of that run, often another server's, would pay for them. Other
# processes on the machine are not waited for (bench/handlerproc-ab.sh runs on busy ones).
settle() {
  local i p a b
  for i in $(seq 120); do
    a=0 b=0
    for p in "$@"; do a=$((a + $(tree_cpu "$p"))); done
    sleep 0.5
    for p in "$@"; do b=$((b + $(tree_cpu "$p"))); done
    [ $((b - a)) -lt 50 ] && return 0 # CPU ms in 0.5 s: a tenth of a core
  done
  echo "settle: the servers stayed busy for 60 s" >&2
}
