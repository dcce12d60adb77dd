package daemon

import (
	"strings"

	"github.com/torchd/torchd/lifecycle"
)

// The model control modes, as the configuration and the front-ends' tests name them; the
// repository itself (its loads, unloads, polls and index) is package lifecycle's.
const (
	ControlNone     = lifecycle.ControlNone
	ControlExplicit = lifecycle.ControlExplicit
	ControlPoll     = lifecycle.ControlPoll
)

// RepositoryModel is one entry of the repository index.
type RepositoryModel = lifecycle.IndexEntry

// Model control through the repository API (Triton's load and unload, over REST and gRPC)
// is a management action: it takes the management key when token authorization is on,
// although it is served on the inference port (auth.go and grpc.go).
// repositoryControlMethods are those gRPC calls, and repositoryControlPath tells those REST
// routes.
var repositoryControlMethods = map[string]bool{
	"/inference.GRPCInferenceService/RepositoryModelLoad":   true,
	"/inference.GRPCInferenceService/RepositoryModelUnload": true,
}

func repositoryControlPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v2/repository/models/")
	return ok && (strings.HasSuffix(rest, "/load") || strings.HasSuffix(rest, "/unload"))
}
