package archive

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Config file names.
const (
	// ConfigTOML is torchd's own per-model config, found by this name at the archive root.
	ConfigTOML = "model-config.toml"
	// ConfigYAML is the name torch-model-archiver documents for TorchServe's
	// per-model config; the manifest's configFile may name any .yaml file.
	ConfigYAML = "model-config.yaml"
)

// ModelConfig is a model's configuration as the archive declares it, read from
// model-config.toml or TorchServe's model-config.yaml: its handler and options, its
// signature, and its serving Settings, of which a setting the file does not give stays
// unset (the server's configuration and its defaults decide it; see core.Resolve).
type ModelConfig struct {
	// File is the file the config came from (ConfigTOML, or the manifest's
	// configFile); "" when the archive has none. Errors name it.
	File string

	// Handler is a built-in handler name (see HandlerNames). After Open it is
	// the handler the model uses, wherever it was named.
	Handler string
	// SerializedFile names the TorchScript file when there is no manifest
	// (TOML key serialized_file). Open resolves it into Model.SerializedFile.
	SerializedFile string
	// Options are the handler's options ([options] in TOML; in YAML the
	// handler: map and every key torchd does not know, which is what
	// TorchServe passes to handlers). Values are string, int64, float64,
	// bool, []any or map[string]any; the handler validates them, e.g. with
	// IntOption.
	Options map[string]any

	// Settings are the serving settings the file gives; files give max_batch_delay and
	// latency_target_ms in ms, the timeouts in seconds.
	Settings

	DeviceIDs []int // GPUs to use with Device "cuda"; from YAML deviceIds or TOML device_ids
	// InteropThreads is LibTorch's inter-op threads, process-wide and settable once (a
	// Triton config's INTER_OP_THREAD_COUNT); 0 leaves LibTorch's default.
	InteropThreads int
	// FP32Modules are the submodules (dotted paths, as PyTorch's named_modules gives them)
	// that stay float32 when a TorchScript model runs in bf16: mixed precision, as AMP keeps
	// numerically sensitive layers in float32. A package's are compiled in (models/pt2.py
	// exports the same list).
	FP32Modules []string
	// PreferredBatchSize are the batch sizes the batcher forms first, as Triton's
	// dynamic_batching preferred_batch_size (TOML preferred_batch_size): a batch of one of
	// them goes at once, and a full queue sends the largest. Runtimes that compile for a
	// shape (OpenVINO) compile for them.
	PreferredBatchSize []int

	// Inputs and Outputs are the declared signature; nil if undeclared.
	Inputs, Outputs []TensorSpec

	// Runtime names the runtime that loads the serialized file when its name does not say
	// (a Triton config's onnxruntime_onnx with default_model_filename model.bin); "": by the
	// file's extension.
	Runtime string
	// Ensemble is a pipeline of other models that core runs (Runtime "ensemble"): a Triton
	// ensemble's steps, in the config's order. nil for a model of its own.
	Ensemble []EnsembleStep
	// RuntimeOptions are the runtime's own options (a Triton config's ONNX Runtime
	// parameters and graph optimization level), by name.
	RuntimeOptions map[string]string
}

// EnsembleStep is one step of an ensemble: a model, and which of the ensemble's tensors are
// its inputs and which its outputs become.
type EnsembleStep struct {
	Model   string
	Version string // "": the model's default version
	// Inputs maps the step model's input names to the ensemble's tensor names; Outputs maps
	// its output names to the ensemble tensors they become.
	Inputs, Outputs map[string]string
}

// TensorSpec declares one input or output tensor.
type TensorSpec struct {
	Name  string  // e.g. "input__0"
	DType string  // one of DTypes
	Shape []int64 // -1 marks a variable dimension; nil leaves the rank undeclared
	// Reshape is the shape the model takes or gives, when it differs from Shape (Triton's
	// reshape), without the batch dimension that Shape leads with when batching; nil: Shape.
	Reshape []int64
}

// Precisions are the values of Settings.Precision.
// fp16 is for AOTInductor packages exported in it (for a GPU, models/pt2.py --dtype fp16),
// int8 for packages statically quantized to it (models/pt2.py --dtype int8); TorchScript
// runs in fp32 or, under autocast, bf16.
var Precisions = []string{"fp32", "bf16", "fp16", "int8"}

// DTypes are the dtype names a TensorSpec may use. "string" is the Open Inference
// Protocol's BYTES, one text per element, for an input that a handler tokenizes.
var DTypes = []string{"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "string"}

// optionKey is how errors name an option: TOML keeps options in a table.
func (c *ModelConfig) optionKey(key string) string {
	if strings.HasSuffix(c.File, ".toml") {
		return "options." + key
	}
	return key
}

func (c *ModelConfig) optionErr(key string, want string, v any) error {
	return configErr(c.File, c.optionKey(key), "must be %s, got %s", want, describe(v))
}

// IntOption returns the integer option key, or def if it is not set.
func (c *ModelConfig) IntOption(key string, def int) (int, error) {
	v, ok := c.Options[key]
	if !ok {
		return def, nil
	}
	n, ok := v.(int64)
	if !ok || n < math.MinInt32 || n > math.MaxInt32 {
		return def, c.optionErr(key, "an integer", v)
	}
	return int(n), nil
}

// FloatOption returns the number option key, or def if it is not set.
func (c *ModelConfig) FloatOption(key string, def float64) (float64, error) {
	v, ok := c.Options[key]
	if !ok {
		return def, nil
	}
	f, ok := toFloat(v)
	if !ok {
		return def, c.optionErr(key, "a number", v)
	}
	return f, nil
}

// FloatsOption returns the array-of-numbers option key, or def if it is not set.
func (c *ModelConfig) FloatsOption(key string, def []float64) ([]float64, error) {
	v, ok := c.Options[key]
	if !ok {
		return def, nil
	}
	list, ok := v.([]any)
	if !ok {
		return def, c.optionErr(key, "an array of numbers", v)
	}
	out := make([]float64, len(list))
	for i, e := range list {
		if out[i], ok = toFloat(e); !ok {
			return def, c.optionErr(fmt.Sprintf("%s[%d]", key, i), "a number", e)
		}
	}
	return out, nil
}

// StringOption returns the string option key, or def if it is not set.
func (c *ModelConfig) StringOption(key, def string) (string, error) {
	v, ok := c.Options[key]
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return def, c.optionErr(key, "a string", v)
	}
	return s, nil
}

// BoolOption returns the boolean option key, or def if it is not set.
func (c *ModelConfig) BoolOption(key string, def bool) (bool, error) {
	v, ok := c.Options[key]
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return def, c.optionErr(key, "true or false", v)
	}
	return b, nil
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	}
	return 0, false
}

// describe names a decoded TOML/YAML value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("string %q", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		return fmt.Sprintf("float %v", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

func validDType(s string) bool { return slices.Contains(DTypes, s) }
