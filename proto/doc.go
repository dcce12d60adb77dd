// Package proto holds torchd's gRPC service definitions and their generated Go code:
// inference/ is the Open Inference Protocol's gRPC service as Triton serves it
// (inference.GRPCInferenceService, with Triton's ModelConfig), and torchserve/ is
// TorchServe's inference and management APIs. The .proto files are torchd's own, written
// from the upstream documented messages with the same packages, names and field numbers.
//
// The generated *.pb.go files are committed, as is the Go convention, so that building
// torchd needs no protoc. `make proto` regenerates them with pinned tools (generate.sh).
package proto
