package kserve

import (
	"google.golang.org/protobuf/proto"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/repository"
)

// configJSON is a model config as Triton's HTTP API writes it (triton.MessageJSON).
func configJSON(m proto.Message) map[string]any { return triton.MessageJSON(m) }

// tritonConfig returns the Triton model configuration a version is served with: for a
// repository model its config.pbtxt (or load override) filled in; nil for other models.
func tritonConfig(v *core.ModelVersion) *inference.ModelConfig {
	if t := repository.AdapterOf(v); t != nil {
		return t.Config(v)
	}
	return nil
}
