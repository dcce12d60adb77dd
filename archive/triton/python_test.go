package triton

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A Python backend model reads as Triton reads it: model.py in its version, the runtime
// that runs it, Triton's batching, and its config as the JSON initialize gets, with 64-bit
// integers as numbers and its parameters kept for model.py.
func TestPythonBackendConfig(t *testing.T) {
	repo := t.TempDir()
	model(t, repo, "tok", `name: "tok" backend: "python" max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "ids" data_type: TYPE_INT64 dims: [ -1, -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { count: 3 kind: KIND_CPU } ]
parameters { key: "lowercase" value: { string_value: "yes" } }`, "1")
	if err := os.WriteFile(filepath.Join(repo, "tok", "1", "model.py"), []byte("class TritonPythonModel: pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Read(repo, "tok", nil)
	if m.Err != nil || len(m.Versions) != 1 || m.Versions[0].Err != nil {
		t.Fatalf("%v %+v", m.Err, m.Versions)
	}
	am, err := m.Archive(m.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	c := am.Config
	if am.SerializedFile != "model.py" || c.Runtime != RuntimePython || c.BatchSize.V != 8 || c.MinWorkers.V != 3 || c.Inputs[0].DType != "string" {
		t.Errorf("file %s runtime %q batch %v workers %v inputs %+v", am.SerializedFile, c.Runtime, c.BatchSize, c.MinWorkers, c.Inputs)
	}
	var cfg struct {
		Name         string `json:"name"`
		MaxBatchSize int    `json:"max_batch_size"`
		Input        []struct {
			Name     string  `json:"name"`
			DataType string  `json:"data_type"`
			Dims     []int64 `json:"dims"`
		} `json:"input"`
		DynamicBatching struct {
			Delay int64 `json:"max_queue_delay_microseconds"`
		} `json:"dynamic_batching"`
		Parameters map[string]struct {
			StringValue string `json:"string_value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(c.RuntimeOptions[OptionModelConfig]), &cfg); err != nil {
		t.Fatalf("model_config %s: %v", c.RuntimeOptions[OptionModelConfig], err)
	}
	if cfg.Name != "tok" || cfg.MaxBatchSize != 8 || len(cfg.Input) != 1 || cfg.Input[0].DataType != "TYPE_STRING" || len(cfg.Input[0].Dims) != 1 ||
		cfg.Input[0].Dims[0] != -1 || cfg.DynamicBatching.Delay != 500 || cfg.Parameters["lowercase"].StringValue != "yes" {
		t.Errorf("model_config %s", c.RuntimeOptions[OptionModelConfig])
	}

	// max_batch_size 0 is there for models that read it unguarded.
	m.Config.MaxBatchSize = 0
	if b, err := ConfigJSON(m.Config); err != nil || !containsKey(b, "max_batch_size") {
		t.Errorf("max_batch_size 0 left out: %s", b)
	}
}

func containsKey(b []byte, key string) bool {
	var m map[string]any
	json.Unmarshal(b, &m)
	_, ok := m[key]
	return ok
}
