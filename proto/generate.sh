#!/usr/bin/env bash
# Generates the Go code of proto/ with pinned tools: protoc from grpcio-tools (in the venv
# PYCLIENTS, made by `make proto` from proto/requirements.txt), protoc-gen-go at the
# google.golang.org/protobuf version go.mod pins, and protoc-gen-go-grpc at GRPC_GEN_VERSION.
# The generated .pb.go files are committed, so that `go build` needs none of this.
set -euo pipefail
cd "$(dirname "$0")/.."
PYCLIENTS=${PYCLIENTS:-build/pyclients}
GRPC_GEN_VERSION=v1.6.2
PROTOBUF_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
bin=$PWD/build/protoc-gen
mkdir -p "$bin"
GOBIN=$bin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOBUF_VERSION"
GOBIN=$bin go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$GRPC_GEN_VERSION"
protoc() {
  PATH=$bin:$PATH "$PYCLIENTS/bin/python" -m grpc_tools.protoc "$@"
}
# Each service keeps its upstream file names (grpc_service.proto, inference.proto), which
# is what server reflection and the descriptors' imports show.
protoc -I proto/inference --go_out=proto/inference --go_opt=paths=source_relative \
  --go-grpc_out=proto/inference --go-grpc_opt=paths=source_relative \
  model_config.proto grpc_service.proto
protoc -I proto/torchserve -I proto --go_out=proto/torchserve --go_opt=paths=source_relative \
  --go-grpc_out=proto/torchserve --go-grpc_opt=paths=source_relative \
  inference.proto management.proto
