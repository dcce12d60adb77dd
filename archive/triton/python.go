package triton

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/proto/inference"
)

// The Python backend's settings: model.py runs in a handler process of the handler runtime's
// Python (backends/tritonpy), with the config's parameters passed to it in model_config.
const (
	// ParamExecutionEnv is the Python backend's packed conda environment, which torchd
	// refuses: the model runs in the handler runtime's Python.
	ParamExecutionEnv = "EXECUTION_ENV_PATH"
	// OptionModelConfig is the runtime option holding the config as Triton's JSON, which
	// initialize receives as args["model_config"].
	OptionModelConfig = "model_config"
)

// checkPython refuses what torchd's Python backend cannot run.
func checkPython(c *inference.ModelConfig) error {
	if _, ok := c.Parameters[ParamExecutionEnv]; ok {
		return fmt.Errorf("%w: parameters %s: torchd runs model.py in the handler runtime's Python (the server's python setting), not in a packed environment; install the model's packages there", ErrUnsupported, ParamExecutionEnv)
	}
	for _, in := range c.Input {
		if in.DataType == inference.DataType_TYPE_BF16 {
			return fmt.Errorf("%w: input %q: TYPE_BF16 has no numpy type for model.py", ErrUnsupported, in.Name)
		}
	}
	for _, out := range c.Output {
		if out.DataType == inference.DataType_TYPE_BF16 {
			return fmt.Errorf("%w: output %q: TYPE_BF16 has no numpy type for model.py", ErrUnsupported, out.Name)
		}
	}
	return nil
}

// pythonParameters passes the config's parameters to model.py (they are its own, read from
// model_config) and puts the config, as Triton's JSON, in the runtime options.
func (m *Model) pythonParameters(s *archive.ModelConfig) ([]string, error) {
	b, err := ConfigJSON(m.Config)
	if err != nil {
		return nil, err
	}
	s.RuntimeOptions = map[string]string{OptionModelConfig: string(b)}
	return nil, nil
}

// ConfigJSON is a config as Triton gives it to a Python model: field names as in the .proto,
// 64-bit integers as JSON numbers (protojson would quote them), enums by name, unset fields
// left out, except name, max_batch_size, input and output, which models read unguarded.
func ConfigJSON(c *inference.ModelConfig) ([]byte, error) {
	m := MessageJSON(c)
	for k, v := range map[string]any{"name": c.Name, "max_batch_size": c.MaxBatchSize, "input": []any{}, "output": []any{}} {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// MessageJSON is a protobuf message as Triton writes a model config in JSON (its HTTP API, and
// the model_config a Python model's initialize gets): field names as in the .proto, 64-bit
// integers as JSON numbers (protojson would quote them), enums by name, unset fields left out.
func MessageJSON(m proto.Message) map[string]any { return messageJSON(m.ProtoReflect()) }

func messageJSON(m protoreflect.Message) map[string]any {
	out := map[string]any{}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			items := make([]any, l.Len())
			for i := range items {
				items[i] = scalarJSON(fd, l.Get(i))
			}
			out[string(fd.Name())] = items
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mm[k.String()] = scalarJSON(fd.MapValue(), mv)
				return true
			})
			out[string(fd.Name())] = mm
		default:
			out[string(fd.Name())] = scalarJSON(fd, v)
		}
		return true
	})
	return out
}

func scalarJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageJSON(v.Message())
	case protoreflect.EnumKind:
		if e := fd.Enum().Values().ByNumber(v.Enum()); e != nil {
			return string(e.Name())
		}
		return int32(v.Enum())
	case protoreflect.BytesKind:
		return v.Bytes()
	}
	return v.Interface()
}
