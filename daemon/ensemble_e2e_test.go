package daemon_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tritonPipeline is an ensemble of the digits model: the request's tensor handed to it in
// memory, its output answered under the ensemble's name.
const tritonPipeline = `
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "digits"
      model_version: -1
      input_map { key: "INPUT__0" value: "IMAGE" }
      output_map { key: "OUTPUT__0" value: "SCORES" }
    }
  ]
}
`

// TestTritonEnsemble serves a repository whose ensemble chains a TorchScript model: READY
// beside its model, loaded whichever loads first, and answering as the model does alone,
// over the v2 REST API; an ensemble naming a model the repository lacks is UNAVAILABLE
// with the model named.
func TestTritonEnsemble(t *testing.T) {
	repo := t.TempDir()
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	broken := strings.NewReplacer(`name: "pipeline"`, `name: "broken"`, `model_name: "digits"`, `model_name: "absent"`).Replace(tritonPipeline)
	for name, config := range map[string]string{"pipeline": tritonPipeline, "broken": broken} {
		dir := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--model-repository", repo)
	idx := settled(t, s)
	if idx["pipeline 1"] != "READY" || idx["digits 1"] != "READY" {
		t.Fatalf("index %v\n%s", idx, s.Log())
	}
	if got := idx["broken 1"] + idx["broken"]; !strings.Contains(got, "UNAVAILABLE") || !strings.Contains(got, "absent") {
		t.Errorf("an ensemble of a missing model: %q, want UNAVAILABLE naming it", got)
	}
	x := digitsInput(3)
	infer := func(model, input, output string) []float64 {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": input, "shape": []int{1, 1, 28, 28}, "datatype": "FP32", "data": x}}})
		r := do(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/json", body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", model, r.status, r.body)
		}
		var out struct {
			Outputs []struct {
				Name string
				Data []float64
			}
		}
		r.json(t, &out)
		if len(out.Outputs) != 1 || out.Outputs[0].Name != output {
			t.Fatalf("%s: outputs %s, want %s", model, r.body, output)
		}
		return out.Outputs[0].Data
	}
	alone, chained := infer("digits", "INPUT__0", "OUTPUT__0"), infer("pipeline", "IMAGE", "SCORES")
	if !near(alone, chained, 1e-6) {
		t.Errorf("the ensemble answers %v, its model alone %v", chained, alone)
	}
	var meta struct{ Platform string }
	do(t, "GET", s.inf+"/v2/models/pipeline", "", nil).json(t, &meta)
	if meta.Platform != "ensemble" {
		t.Errorf("metadata platform %q, want ensemble", meta.Platform)
	}
}
