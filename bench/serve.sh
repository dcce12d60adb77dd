# Sourced by the bench scripts (idle-cpu.sh, linger-ab.sh, copies-ab.sh, arena-ab.sh), from
# the repository root. serve BASE LOG [VAR=value...] starts bin/torchd with a fresh curve cache
# and the given environment, inference on 127.0.0.1:BASE, management on BASE+1, metrics on
# BASE+2, its log in LOG; sets inf and mg to the first two addresses, stops the server (every
# server started this way) on exit, and returns once it answers /ping. reg ARCHIVE NAME QUERY
# registers ARCHIVE.mar as NAME with one worker and the extra query parameters.
pids=() caches=()
serve() {
  local base=$1 log=$2
  shift 2
  inf=127.0.0.1:$base mg=127.0.0.1:$((base + 1))
  cache=$(mktemp -d)
  env "$@" TORCHD_CACHE_DIR="$cache" bin/torchd serve --model-store model-store --inference-address "$inf" \
    --management-address "$mg" --metrics-address 127.0.0.1:$((base + 2)) --access-log=false \
    --enable-snapshots=false --job-queue-size 1024 --grpc-address= --grpc-inference-address= --grpc-management-address= >"$log" 2>&1 &
  pids+=($!) caches+=("$cache")
  trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "${caches[@]}"' EXIT
  until curl -sf "http://$inf/ping" >/dev/null; do sleep 0.2; done
}

reg() {
  curl -sf -X POST "http://$mg/models?url=$1.mar&model_name=$2&initial_workers=1&synchronous=true&$3" >/dev/null ||
    echo "register $2 failed" >&2
}
