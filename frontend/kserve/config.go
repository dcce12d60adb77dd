package kserve

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/repository"
)

// configJSON is a protobuf message as Triton's HTTP API writes a model config: field names
// as in the .proto, 64-bit integers as JSON numbers (protojson would quote them), enums by
// name, and unset fields left out.
func configJSON(m proto.Message) map[string]any {
	return messageJSON(m.ProtoReflect())
}

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

// tritonConfig returns the Triton model configuration a version is served with: for a
// repository model its config.pbtxt (or load override) filled in; nil for other models.
func tritonConfig(v *core.ModelVersion) *inference.ModelConfig {
	if t := repository.AdapterOf(v); t != nil {
		return t.Config(v)
	}
	return nil
}
