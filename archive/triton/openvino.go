package triton

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/proto/inference"
)

// BackendOpenVINO is Triton's OpenVINO backend: a version directory holds model.xml and
// model.bin (an OpenVINO IR), or the file default_model_filename names (an .xml or an .onnx).
// RuntimeOpenVINO is the runtime its archive.ModelConfig names (backends/openvino).
const (
	BackendOpenVINO = "openvino"
	RuntimeOpenVINO = "openvino"
)

// The OpenVINO backend's parameters that torchd honours: Triton's backend passes them to
// OpenVINO as compile properties, and so does torchd's (archive.ModelConfig.RuntimeOptions,
// read by backends/openvino). INFERENCE_NUM_THREADS is the worker's threads.
const (
	ParamOVPerformanceHint = "PERFORMANCE_HINT"
	ParamOVNumStreams      = "NUM_STREAMS"
	ParamOVThreads         = "INFERENCE_NUM_THREADS"
	ParamOVPrecision       = "INFERENCE_PRECISION_HINT"
	// ParamOVCPUPinning "true" (or "YES") holds each stream's threads to their cores while
	// they run, OpenVINO's default on Linux; torchd's is "false", since the server's decoders
	// share those cores (backends/openvino).
	ParamOVCPUPinning = "ENABLE_CPU_PINNING"
	// ParamOVFullBatchModel is torchd's own: "false" serves full batches on the dynamic
	// model too, without the model compiled for the batch size (backends/openvino).
	ParamOVFullBatchModel = "FULL_BATCH_MODEL"
)

// IsOpenVINO reports whether a config is served by OpenVINO: backend openvino.
func IsOpenVINO(c *inference.ModelConfig) bool {
	return c.Backend == BackendOpenVINO && c.Platform == ""
}

// checkOpenVINO refuses what torchd's OpenVINO backend cannot run: it runs on the CPU.
func checkOpenVINO(c *inference.ModelConfig) error {
	for _, g := range c.InstanceGroup {
		if g.Kind == inference.ModelInstanceGroup_KIND_GPU {
			return fmt.Errorf("%w: instance_group kind KIND_GPU for an OpenVINO model: torchd runs OpenVINO on the CPU; use KIND_CPU", ErrUnsupported)
		}
	}
	return nil
}

// openvinoParameters reads the OpenVINO backend's parameters.
func (m *Model) openvinoParameters(s *archive.ModelConfig) ([]string, error) {
	var warn []string
	s.RuntimeOptions = map[string]string{}
	keys := make([]string, 0, len(m.Config.Parameters))
	for k := range m.Config.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.TrimSpace(m.Config.Parameters[k].GetStringValue())
		switch k {
		case ParamOVPerformanceHint:
			if v != "LATENCY" && v != "THROUGHPUT" {
				return nil, fmt.Errorf("parameters %s: want LATENCY or THROUGHPUT, got %q", k, v)
			}
			s.RuntimeOptions[k] = v
		case ParamOVNumStreams, ParamOVThreads:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1024 {
				return nil, fmt.Errorf("parameters %s: want a count from 0 to 1024, got %q", k, v)
			}
			if k == ParamOVThreads {
				s.Threads = archive.NonZero(n) // 0: torchd's share of the cores
			} else {
				s.RuntimeOptions[k] = strconv.Itoa(n)
			}
		case ParamOVCPUPinning:
			// OpenVINO spells its booleans YES and NO; Triton's configs, true and false.
			switch v {
			case "true", "YES":
				v = "true"
			case "false", "NO":
				v = "false"
			default:
				return nil, fmt.Errorf("parameters %s: want true or false, got %q", k, v)
			}
			s.RuntimeOptions[k] = v
		case ParamOVFullBatchModel:
			if v != "true" && v != "false" {
				return nil, fmt.Errorf("parameters %s: want true or false, got %q", k, v)
			}
			s.RuntimeOptions[k] = v
		case ParamOVPrecision:
			if v != "f32" && v != "bf16" && v != "f16" {
				return nil, fmt.Errorf("parameters %s: want f32, bf16 or f16, got %q", k, v)
			}
			s.RuntimeOptions[k] = v
		default:
			warn = append(warn, fmt.Sprintf("parameter %s is not read by torchd's OpenVINO backend", k))
		}
	}
	return warn, nil
}
