#!/usr/bin/env bash
# The container test (make docker-test, docs/guide/container.md): builds Dockerfile.cpu in a private
# dockerd and runs the image as docs/guide/deploy.md says, with BATCH_SIZE=32 WORKERS=2 LINGER_MS=10.
#
# Registry images cannot be pulled here, so the FROM images are local stand-ins tagged with
# the names the Dockerfile uses, and the Dockerfile under test is the one users build:
#   debian:bookworm-slim   a `debootstrap --variant=minbase bookworm` root, imported
#   golang:1.26-bookworm   that root plus the golang image's packages and the pinned Go
#                          toolchain, fetched from the Go module proxy the way GOTOOLCHAIN does
# The storage driver is overlay2 where the directory's file system takes an overlay mount
# (ext4 here: each build step then stores only its changes), else vfs (a full copy per step,
# slow with the build stage's 7 GB). This machine's dockerd has no bridge (--bridge=none, --iptables=false), so builds and
# containers use the host's network: the container's ports are the host's, set through
# TORCHD_*_ADDRESS to 18080-18085 (TORCHD_TEST_PORT) so as not to meet another torchd.
#
# Then the handlers image (--target handlers): its python setting names the venv, which imports
# torch, torchvision and TorchServe's ts on CPU; an archive with a custom handler.py
# (testdata/digits_handler.py, archived by make-handler-mar.py) registers from a mounted model
# store, predicts the digit 2 from a handler process, and `docker stop` ends it with exit code 0.
#
# Checks: the image's libraries all resolve and it holds no compiler, Go or Python; /ping is
# healthy; a model registered through the management port predicts through the inference
# port; describe shows the environment's batch size, delay and workers; Triton's gRPC client
# finds the server and the model ready on the gRPC port; `docker stop` under an
# ab load answers every request torchd accepted (every response is a 200, the container exits
# 0 from its drain). Prints the image size and the time from `docker run` to healthy.
#
# Everything lives in one temporary directory (dockerd's data-root, exec-root, socket and
# the CLI's config); dockerd is stopped by its PID and the directory removed on exit.
# TORCHD_DOCKER_DIR=DIR uses DIR instead and keeps it, so that a rerun reuses its images and
# build cache. Needs root, docker.io, debootstrap, ab, curl and a Go to fetch the toolchain.
set -euo pipefail
cd "$(dirname "$0")/../.."

go_version=1.26.8 # the golang:1.26-bookworm stand-in's Go, the one CI builds with
port=${TORCHD_TEST_PORT:-18080}
inf=127.0.0.1:$port mgmt=127.0.0.1:$((port + 1)) metrics=127.0.0.1:$((port + 2))
docker=${DOCKER:-docker}

if [ -n "${TORCHD_DOCKER_DIR:-}" ]; then
  dir=$(realpath -m "$TORCHD_DOCKER_DIR") keep=1
  mkdir -p "$dir"
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/torchd-docker.XXXXXX") keep=
fi
dockerd_pid=
# dockerd 20.10 writes these outside its roots whatever its flags say: its trust key and the
# plugin socket folder. What it creates there goes with it.
leftovers=()
for f in /etc/docker/key.json /run/docker; do [ -e "$f" ] || leftovers+=("$f"); done
log() { printf '\n== %s\n' "$*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  # An interrupted debootstrap or build must not write on while the directory goes.
  if [ -n "$bg_pid" ]; then kill "$bg_pid" 2>/dev/null; wait "$bg_pid" 2>/dev/null; fi
  if [ -n "$dockerd_pid" ]; then
    "$docker" rm -f torchd-test >/dev/null 2>&1 || true
    kill "$dockerd_pid" 2>/dev/null && wait "$dockerd_pid" 2>/dev/null || true
  fi
  if [ -n "$dockerd_pid" ]; then rm -rf "${leftovers[@]}"; fi
  # Nothing may stay mounted under the directory before it goes (a container's shm, say).
  grep -o " $dir/[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" || true; done
  if [ -z "$keep" ]; then
    if grep -q " $dir/" /proc/self/mountinfo; then
      echo "docker-test: mounts remain under $dir; not removing it" >&2
    else
      rm -rf "$dir"
    fi
  fi
  [ $rc -eq 0 ] && echo "docker-test: PASS" || echo "docker-test: FAIL (exit $rc)" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "docker-test: $*" >&2; exit 1; }
# Long commands run in the background so that a signal reaches the trap at once.
bg() { "$@" & bg_pid=$!; wait $bg_pid; bg_pid=; }
bg_pid=

start=$(now)
log "dockerd in $dir"
echo '{}' >"$dir/daemon.json"
driver=vfs
mkdir -p "$dir/ovl"/{l,u,w,m}
if mount -t overlay overlay -o "lowerdir=$dir/ovl/l,upperdir=$dir/ovl/u,workdir=$dir/ovl/w" "$dir/ovl/m" 2>/dev/null; then
  umount "$dir/ovl/m" && driver=overlay2
fi
rm -rf "$dir/ovl"
echo "storage driver $driver"
dockerd --data-root "$dir/data" --exec-root "$dir/exec" -H "unix://$dir/docker.sock" \
  --pidfile "$dir/dockerd.pid" --config-file "$dir/daemon.json" \
  --storage-driver "$driver" --bridge none --iptables=false --ip-masq=false >"$dir/dockerd.log" 2>&1 &
dockerd_pid=$!
export DOCKER_HOST=unix://$dir/docker.sock DOCKER_CONFIG=$dir/cli
for _ in $(seq 100); do "$docker" version >/dev/null 2>&1 && break; sleep 0.3; done
"$docker" version --format 'engine {{.Server.Version}}, CLI {{.Client.Version}}' ||
  { tail -20 "$dir/dockerd.log"; fail "dockerd did not start"; }

if ! "$docker" image inspect debian:bookworm-slim >/dev/null 2>&1; then
  log "stand-in debian:bookworm-slim: debootstrap --variant=minbase bookworm"
  t=$(now)
  rm -rf "$dir/rootfs"
  bg debootstrap --variant=minbase bookworm "$dir/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 ||
    { tail -20 "$dir/debootstrap.log"; fail "debootstrap failed"; }
  # The local CAs (a TLS-inspecting proxy's, say) go where ca-certificates picks them up,
  # so that the build's pip and go reach PyPI and the module proxy as this host does.
  # Some are only in the bundle itself, so the host's bundle goes in whole (a duplicate CA
  # does no harm).
  mkdir -p "$dir/rootfs/usr/local/share/ca-certificates"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/rootfs/usr/local/share/ca-certificates/host-bundle.crt"
  tar -C "$dir/rootfs" -c . | "$docker" import -c 'CMD ["bash"]' - debian:bookworm-slim
  rm -rf "$dir/rootfs"
  echo "debian:bookworm-slim in $(since "$t") s"
fi

if ! "$docker" image inspect golang:1.26-bookworm >/dev/null 2>&1; then
  log "stand-in golang:1.26-bookworm: go$go_version from the Go module proxy"
  t=$(now)
  ctx=$dir/golang
  rm -rf "$ctx" && mkdir -p "$ctx"
  # The module GOTOOLCHAIN=go$go_version downloads (checked against the checksum database);
  # module zips keep no file modes, so the executables get theirs back as the go command does.
  src=$(cd "$ctx" && GOMODCACHE=$ctx/mod GOFLAGS=-modcacherw go mod download -json \
    "golang.org/toolchain@v0.0.1-go$go_version.linux-amd64" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -x "$src/bin/go" ] || [ -f "$src/bin/go" ] || fail "no toolchain from the module proxy"
  mv "$src" "$ctx/go" && rm -rf "$ctx/mod"
  chmod a+x "$ctx"/go/bin/* "$ctx"/go/pkg/tool/*/*
  # The official image's packages: buildpack-deps:bookworm-scm's, then golang's own.
  cat >"$ctx/Dockerfile" <<EOF
FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      ca-certificates curl wget netbase gnupg git openssh-client procps \\
      g++ gcc libc6-dev make pkg-config \\
    && rm -rf /var/lib/apt/lists/*
COPY go /usr/local/go
ENV GOLANG_VERSION=$go_version GOTOOLCHAIN=local GOPATH=/go
# pip's own CA bundle (certifi) would not hold the local CAs; the system's does.
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
EOF
  bg "$docker" build -q --network host -t golang:1.26-bookworm "$ctx"
  rm -rf "$ctx"
  echo "golang:1.26-bookworm in $(since "$t") s"
fi

log "docker build -f Dockerfile.cpu -t torchd .   (with --network host)"
t=$(now)
bg "$docker" build --network host -f Dockerfile.cpu -t torchd .
build_s=$(since "$t")
size=$("$docker" image inspect -f '{{.Size}}' torchd)
echo "built in $build_s s; image size $size bytes ($((size / 1000000)) MB)"

log "the image: every library resolves; no compiler, Go or Python"
"$docker" run --rm --network host --entrypoint /bin/sh torchd -c '
  ls -l /opt/torchd/bin /opt/torchd/model-store
  if ldd /opt/torchd/bin/torchd /opt/torchd/bin/libtorchd_c.so /opt/torchd/bin/libonnxruntime.so.1.31.1 | grep "not found"; then exit 1; fi
  for c in cc gcc g++ c++ clang go python python3 pip pip3; do
    if command -v $c; then echo "$c is in the image"; exit 1; fi
  done' || fail "the runtime image is not as it should be"

log "docker run -e BATCH_SIZE=32 -e WORKERS=2 -e LINGER_MS=10 torchd   (host network, ports $port-$((port + 5)))"
t=$(now)
"$docker" run -d --name torchd-test --network host \
  -e BATCH_SIZE=32 -e WORKERS=2 -e LINGER_MS=10 \
  -e TORCHD_INFERENCE_ADDRESS=$inf -e TORCHD_MANAGEMENT_ADDRESS=$mgmt -e TORCHD_METRICS_ADDRESS=$metrics \
  -e TORCHD_GRPC_ADDRESS=127.0.0.1:$((port + 3)) -e TORCHD_GRPC_INFERENCE_ADDRESS=127.0.0.1:$((port + 4)) \
  -e TORCHD_GRPC_MANAGEMENT_ADDRESS=127.0.0.1:$((port + 5)) \
  torchd >/dev/null
for _ in $(seq 600); do curl -fs "http://$inf/ping" >/dev/null 2>&1 && break; sleep 0.05; done
healthy_s=$(since "$t")
curl -fsS "http://$inf/ping" || { "$docker" logs torchd-test; fail "not healthy after 30 s"; }
echo "healthy $healthy_s s after docker run"

log "register through the management port, predict through the inference port"
curl -fsS -X POST "http://$mgmt/models?url=digits.mar&initial_workers=1&synchronous=true"
pred=$(curl -fsS -T deploy/docker/testdata/digit-2.png "http://$inf/predictions/digits")
echo "$pred"
first=$(tr -d ' \n{' <<<"$pred" | cut -d: -f1)
[ "$first" = '"2"' ] || fail "the digit 2 was predicted as $first"
desc=$(curl -fsS "http://$mgmt/models/digits")
echo "$desc" | head -30
grep -Eq '"batchSize": *32' <<<"$desc" || fail "describe: batch size is not 32"
grep -Eq '"maxBatchDelay": *10' <<<"$desc" || fail "describe: max batch delay is not 10 ms"
grep -Eq '"minWorkers": *2' <<<"$desc" || fail "describe: min workers is not 2"
[ "$(grep -Ec '"status": *"READY"' <<<"$desc")" = 2 ] || fail "describe: not 2 ready workers"

log "gRPC: Triton's own client (Open Inference Protocol) reaches the container's port"
"${PYCLIENTS:-build/pyclients}/bin/python" - "127.0.0.1:$((port + 3))" <<'PY' || fail "gRPC: Triton's client could not use the model"
import sys
import tritonclient.grpc as g
c = g.InferenceServerClient(sys.argv[1])
assert c.is_server_ready(), "server not ready"
assert c.is_model_ready("digits"), "digits not ready"
print("gRPC", sys.argv[1], "server and digits ready;", c.get_model_metadata("digits").inputs[0].name)
PY

log "docker stop under ab -k -c 16: every accepted request is answered"
# ab's summary is no use here: -r makes it count each refused connection after the stop as a
# completed (failed) request, and batched outputs differ in their last digits, which it
# counts as length failures. -v 2 logs each response's header instead.
ab -v 2 -k -r -c 16 -n 50000000 -T image/png -p deploy/docker/testdata/digit-2.png \
  "http://$inf/predictions/digits" >"$dir/ab.out" 2>"$dir/ab.err" &
ab_pid=$!
sleep 8
t=$(now)
"$docker" stop torchd-test >/dev/null
stop_s=$(since "$t")
# With -r, ab retries refused connections without end; SIGINT ends it.
kill -INT "$ab_pid" && wait "$ab_pid" || true
# The log goes to a file first: `docker logs | grep -q` fails under pipefail when grep stops
# reading at its match and docker logs, still writing, gets SIGPIPE.
"$docker" logs torchd-test >"$dir/torchd.log" 2>&1
grep -v 'msg=access' "$dir/torchd.log" | tail -3
exit_code=$("$docker" inspect -f '{{.State.ExitCode}}' torchd-test)
responses=$(grep -c '^LOG: header received' "$dir/ab.out" || true)
ok=$(grep -c '^HTTP/1.1 200 ' "$dir/ab.out" || true)
refused=$(grep -c 'Connection refused' "$dir/ab.err" || true)
reset=$(grep -c 'Connection reset by peer' "$dir/ab.err" || true)
echo "stopped in $stop_s s, exit code $exit_code; ab: $responses responses, $ok of them 200;" \
  "after the stop $refused refused connections, $reset reset (idle keep-alive connections the drain closed)"
[ "$exit_code" = 0 ] || fail "torchd exited $exit_code, not 0 from its drain"
grep -q 'draining accepted requests' "$dir/torchd.log" || fail "torchd did not drain"
[ "$responses" -gt 100 ] || fail "ab had too few responses before the stop"
[ "$ok" = "$responses" ] || fail "$((responses - ok)) responses were not 200"
if grep -v -E 'Connection refused|Connection reset by peer|^Completed [0-9]+ requests|^Finished|^$' "$dir/ab.err" >/dev/null; then
  grep -v 'Connection refused' "$dir/ab.err" | head; fail "ab failed otherwise than by refused or reset connections"
fi
"$docker" rm torchd-test >/dev/null

log "docker build -f Dockerfile.cpu --target handlers -t torchd-handlers .   (the handler runtime)"
t=$(now)
bg "$docker" build --network host -f Dockerfile.cpu --target handlers -t torchd-handlers .
hbuild_s=$(since "$t")
hsize=$("$docker" image inspect -f '{{.Size}}' torchd-handlers)
echo "built in $hbuild_s s; image size $hsize bytes ($((hsize / 1000000)) MB), $(((hsize - size) / 1000000)) MB over torchd"

log "the handlers image: the python setting names its venv, which runs torch, torchvision and ts on CPU"
"$docker" run --rm --network host --entrypoint /bin/sh torchd-handlers -c '
  grep -x "python = \"/opt/torchd/.venv/bin/python\"" /etc/torchd/torchd.toml || exit 1
  if ldd /opt/torchd/bin/torchd /opt/torchd/bin/libtorchd_c.so /opt/torchd/bin/libonnxruntime.so.1.31.1 | grep "not found"; then exit 1; fi
  if [ -n "$(find /opt/torchd/.venv -xtype l)" ]; then find /opt/torchd/.venv -xtype l; exit 1; fi
  for c in cc gcc g++ c++ clang go pip pip3; do
    if command -v $c; then echo "$c is in the image"; exit 1; fi
  done
  /opt/torchd/.venv/bin/python -c "
import torch, torchvision, ts, captum
from ts.torch_handler.image_classifier import ImageClassifier
assert not torch.cuda.is_available()
m = torchvision.models.resnet18(weights=None).eval()
with torch.inference_mode():
    assert m(torch.rand(2, 3, 224, 224)).shape == (2, 1000)
print(\"torch\", torch.__version__, \"torchvision\", torchvision.__version__, \"ts\", ts.__version__, \"on\", torch.get_num_threads(), \"CPU threads\")
"' 2>&1 | grep -v -E 'OpenVINO is not enabled|without onnxruntime|TensorRT not enabled' || fail "the handlers image is not as it should be"

log "a TorchServe archive with a custom handler.py (an ImageClassifier subclass) in a handler process"
# The archive is written as torch-model-archiver writes it, from the image's TorchScript digits
# CNN and testdata/digits_handler.py, into a model store mounted as a user mounts theirs.
store=$dir/handler-store
rm -rf "$store" && mkdir -p "$store"
"$docker" run --rm --network host -v "$store:/out" --entrypoint cp torchd-handlers /opt/torchd/model-store/digits.mar /out/
python3 deploy/docker/make-handler-mar.py "$store/digits.mar" "$store/digits_py.mar"
t=$(now)
"$docker" run -d --name torchd-test --network host -v "$store:/mnt/models:ro" -e TORCHD_MODEL_STORE=/mnt/models \
  -e TORCHD_INFERENCE_ADDRESS=$inf -e TORCHD_MANAGEMENT_ADDRESS=$mgmt -e TORCHD_METRICS_ADDRESS=$metrics \
  -e TORCHD_GRPC_ADDRESS=127.0.0.1:$((port + 3)) -e TORCHD_GRPC_INFERENCE_ADDRESS=127.0.0.1:$((port + 4)) \
  -e TORCHD_GRPC_MANAGEMENT_ADDRESS=127.0.0.1:$((port + 5)) \
  torchd-handlers >/dev/null
for _ in $(seq 600); do curl -fs "http://$inf/ping" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fsS "http://$inf/ping" >/dev/null || { "$docker" logs torchd-test; fail "handlers image: not healthy after 30 s"; }
t=$(now)
curl -fsS -X POST "http://$mgmt/models?url=digits_py.mar&initial_workers=1&synchronous=true" ||
  { "$docker" logs torchd-test 2>&1 | tail -30; fail "handlers image: registering digits_py.mar failed"; }
hreg_s=$(since "$t")
echo "registered in $hreg_s s (the handler process started and warm)"
for img in digit-2.png; do
  pred=$(curl -fsS -T "deploy/docker/testdata/$img" "http://$inf/predictions/digits_py")
  echo "digits_py: $img -> $pred"
  [ "$(tr -d ' \n' <<<"$pred")" = 2 ] || fail "handlers image: the digit 2 was predicted as $pred"
done
"$docker" top torchd-test -o pid,args | grep -q 'ts/model_service_worker.py' ||
  fail "handlers image: no handler process in the container"
"$docker" logs torchd-test >"$dir/torchd-handlers.log" 2>&1
grep -q 'msg="model registered" model=digits_py version=1.0 handler=python' "$dir/torchd-handlers.log" ||
  fail "handlers image: digits_py was not registered as a Python handler"
t=$(now)
"$docker" stop torchd-test >/dev/null
hstop_s=$(since "$t")
"$docker" logs torchd-test >"$dir/torchd-handlers.log" 2>&1
grep -v 'msg=access' "$dir/torchd-handlers.log" | tail -3
hexit=$("$docker" inspect -f '{{.State.ExitCode}}' torchd-test)
echo "stopped in $hstop_s s, exit code $hexit"
[ "$hexit" = 0 ] || fail "handlers image: torchd exited $hexit, not 0"
grep -q 'msg=stopped' "$dir/torchd-handlers.log" || fail "handlers image: torchd did not stop cleanly"
"$docker" rm torchd-test >/dev/null

log "results"
echo "image size:           $size bytes ($((size / 1000000)) MB)"
echo "handlers image size:  $hsize bytes ($((hsize / 1000000)) MB; docker build --target handlers: $hbuild_s s)"
echo "handler registration: $hreg_s s; stop $hstop_s s"
echo "docker run → healthy: $healthy_s s"
echo "docker build:         $build_s s"
echo "docker stop:          $stop_s s under load; $ok responses, all 200"
echo "whole test:           $(since "$start") s"
