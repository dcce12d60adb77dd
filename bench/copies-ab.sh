#!/usr/bin/env bash
# Identical registrations against each other: one torchd (ports 19590–19592) serves resnet18
# four times under the names a, b, c, d (registered in that order), each batch 16, no delay,
# one worker, default threads; every round runs each with `ab -k -c 64` for 6 s in a shuffled
# order. Prints "round=R name req/s". With glibc's defaults identical registrations served
# apart by a constant offset (the bench-auto reports' "two copies" column measures it): glibc
# returned the activations' memory after every forward, by an amount that depended on the
# worker thread's arena (bench/malloc-ab.sh). torchd keeps it (keep_freed_memory, on by
# default); COPIES_ENV=TORCHD_KEEP_FREED_MEMORY=false shows glibc's behaviour, and
# COPIES_ENV=MALLOC_ARENA_MAX=1 one arena for every thread.
# Needs `make build archives`. Usage: [COPIES_ENV="VAR=value ..."] bench/copies-ab.sh [rounds]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6}
. bench/serve.sh
# shellcheck disable=SC2086 # COPIES_ENV: VAR=value words for the server, e.g. MALLOC_ARENA_MAX=1
serve 19590 /tmp/copies-ab-torchd.log ${COPIES_ENV:-}
for n in a b c d; do reg resnet18 $n "batch_size=16&max_batch_delay=0"; done
for r in $(seq "$rounds"); do
  for m in $(printf '%s\n' a b c d | shuf); do
    x=$(ab -k -q -c 64 -t 6 -n 10000000 -s 120 -T image/jpeg -p models/out/resnet18/sample_640x480.jpg "http://$inf/predictions/$m" 2>&1 | awk '/Requests per second/ {print $4}')
    echo "round=$r $m $x"
  done
done
