package triton

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A backend "openvino" model reads model.xml (or default_model_filename), maps its
// parameters onto the runtime's options, and needs no declared tensors (the graph has them).
func TestOpenVINOBackendConfig(t *testing.T) {
	repo := t.TempDir()
	model(t, repo, "ir", `backend: "openvino" max_batch_size: 16
dynamic_batching { }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "PERFORMANCE_HINT" value: { string_value: "THROUGHPUT" } }
parameters { key: "NUM_STREAMS" value: { string_value: "2" } }
parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "4" } }
parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "bf16" } }
parameters { key: "FULL_BATCH_MODEL" value: { string_value: "false" } }
parameters { key: "ENABLE_CPU_PINNING" value: { string_value: "YES" } }
parameters { key: "CPU_BIND_THREAD" value: { string_value: "YES" } }`)
	write(t, filepath.Join(repo, "ir", "1", "model.xml"), "<net/>")
	model(t, repo, "onnx", `backend: "openvino" default_model_filename: "model.onnx"`)
	write(t, filepath.Join(repo, "onnx", "1", "model.onnx"), "x")
	m := Read(repo, "ir", nil)
	if m.Err != nil || m.Versions[0].Err != nil {
		t.Fatalf("%v %+v", m.Err, m.Versions)
	}
	am, err := m.Archive(m.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	c := am.Config
	if am.SerializedFile != "model.xml" || c.Runtime != RuntimeOpenVINO || c.BatchSize.V != 16 || c.MinWorkers.V != 2 || c.Threads.V != 4 {
		t.Errorf("file %s runtime %q batch %v workers %v threads %v", am.SerializedFile, c.Runtime, c.BatchSize, c.MinWorkers, c.Threads)
	}
	if o := c.RuntimeOptions; o[ParamOVPerformanceHint] != "THROUGHPUT" || o[ParamOVNumStreams] != "2" || o[ParamOVPrecision] != "bf16" || o[ParamOVFullBatchModel] != "false" || o[ParamOVCPUPinning] != "true" {
		t.Errorf("runtime options %v", o)
	}
	if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "CPU_BIND_THREAD is not read by torchd's OpenVINO backend") {
		t.Errorf("warnings %q", m.Warnings)
	}
	if o := Read(repo, "onnx", nil); o.Err != nil || filepath.Base(o.Versions[0].Path) != "model.onnx" {
		t.Errorf("default_model_filename model.onnx: %v %+v", o.Err, o.Versions)
	}
}

// What the OpenVINO backend cannot take is refused per model, with the reason.
func TestOpenVINOBackendRefusals(t *testing.T) {
	repo := t.TempDir()
	for name, tc := range map[string]struct{ config, want string }{
		"gpu":       {`backend: "openvino" instance_group [ { kind: KIND_GPU } ]`, "torchd runs OpenVINO on the CPU"},
		"hint":      {`backend: "openvino" parameters { key: "PERFORMANCE_HINT" value: { string_value: "FAST" } }`, "want LATENCY or THROUGHPUT"},
		"streams":   {`backend: "openvino" parameters { key: "NUM_STREAMS" value: { string_value: "many" } }`, "want a count"},
		"precision": {`backend: "openvino" parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "int4" } }`, "want f32, bf16 or f16"},
		"full":      {`backend: "openvino" parameters { key: "FULL_BATCH_MODEL" value: { string_value: "no" } }`, "FULL_BATCH_MODEL: want true or false"},
		"pinning":   {`backend: "openvino" parameters { key: "ENABLE_CPU_PINNING" value: { string_value: "1" } }`, "ENABLE_CPU_PINNING: want true or false"},
	} {
		model(t, repo, name, tc.config)
		write(t, filepath.Join(repo, name, "1", "model.xml"), "<net/>")
		m := Read(repo, name, nil)
		if m.Err == nil || !strings.Contains(m.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, m.Err, tc.want)
		}
		if name == "gpu" && !errors.Is(m.Err, ErrUnsupported) {
			t.Errorf("gpu: %v is not ErrUnsupported", m.Err)
		}
	}
	model(t, repo, "nofile", `backend: "openvino"`)
	write(t, filepath.Join(repo, "nofile", "1", "other.xml"), "x")
	if m := Read(repo, "nofile", nil); m.Err != nil || m.Versions[0].Err == nil || !strings.Contains(m.Versions[0].Err.Error(), "has no model.xml") {
		t.Errorf("no model.xml: %v %+v", m.Err, m.Versions)
	}
}
