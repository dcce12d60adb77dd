package daemon_test

import (
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// onnxDir holds the ONNX models and Triton repositories of models/onnx_zoo.py (make
// models-onnx).
var onnxDir = filepath.Join(zooDir, "onnx")

// copyTree copies a model directory into a repository: a link out of the repository is what
// torchd refuses, as Triton does.
func copyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		copyFile(t, p, filepath.Join(to, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// onnxRepo is a repository of the seed deployments, their files unchanged: ONNX MNIST on
// CPU (the exporter's input.1, a fixed shape, five instances), an image encoder batched
// dynamically, and transformer-deploy's BERT classifier (model.bin).
func onnxRepo(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(onnxDir, "repos")); err != nil {
		t.Fatalf("no ONNX models (run make models-onnx): %v", err)
	}
	repo := t.TempDir()
	for _, m := range []string{"mnist/onnx-mnist-cpu", "encoder/image_encoder", "bert/transformer_onnx_model"} {
		copyTree(t, filepath.Join(onnxDir, "repos", m), filepath.Join(repo, filepath.Base(m)))
	}
	// One Identity per type, under a config of one line: Triton's auto-complete fills it in.
	copyFile(t, filepath.Join(onnxDir, "types", "model.onnx"), filepath.Join(repo, "onnx-types", "1", "model.onnx"))
	if err := os.WriteFile(filepath.Join(repo, "onnx-types", "config.pbtxt"), []byte(`platform: "onnxruntime_onnx"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

// TestONNXRepositoryThroughTritonClients serves the seed repositories unchanged and drives
// them with Triton's Python clients over HTTP and gRPC (testdata/triton_onnx_client.py):
// READY in both indexes, and every answer equal to onnxruntime's in Python within 1e-5,
// alone, batched by the client, and batched by torchd.
func TestONNXRepositoryThroughTritonClients(t *testing.T) {
	if _, err := os.Stat(pyclients); err != nil {
		t.Skip("no build/pyclients venv: run make pyclients-http (make test does)")
	}
	s := startServer(t, "--model-repository", onnxRepo(t))
	idx := settled(t, s)
	for _, m := range []string{"onnx-mnist-cpu 1", "image_encoder 1", "transformer_onnx_model 1"} {
		if idx[m] != "READY" {
			t.Errorf("%s: %q, want READY\n%s", m, idx[m], s.Log())
		}
	}
	out, err := exec.Command(pyclients, filepath.Join("testdata", "triton_onnx_client.py"),
		strings.TrimPrefix(s.inf, "http://"), s.grpc, onnxDir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("Triton's clients: %v\n%s", err, s.Log())
	}
}

// TestONNXHostileModels puts each hostile .onnx of the zoo in a repository beside a good
// model: each is refused with its reason, and the good one serves.
func TestONNXHostileModels(t *testing.T) {
	repo := onnxRepo(t)
	hostile := filepath.Join(onnxDir, "hostile")
	entries, err := os.ReadDir(hostile)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".onnx") || e.Name() == "huge_input.onnx" || e.Name() == "zeros.onnx" {
			// These load: an input declared huge (a request of that size is refused by the
			// body limit), and zeros of the shape a request sends (the size is the request's).
			continue
		}
		name := strings.TrimSuffix(e.Name(), ".onnx")
		names = append(names, name)
		dir := filepath.Join(repo, name)
		copyFile(t, filepath.Join(hostile, e.Name()), filepath.Join(dir, "1", "model.onnx"))
		// The data files beside the models (external data) go with each.
		for _, d := range entries {
			if !d.IsDir() && !strings.HasSuffix(d.Name(), ".onnx") {
				copyFile(t, filepath.Join(hostile, d.Name()), filepath.Join(dir, "1", d.Name()))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(`platform: "onnxruntime_onnx"`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 4 {
		t.Fatalf("hostile models %v: want the truncated, huge and escaping ones", names)
	}
	s := startServer(t, "--model-repository", repo)
	idx := settled(t, s)
	for _, n := range names {
		st, ok := idx[n+" 1"]
		if !ok {
			st = idx[n]
		}
		if !strings.HasPrefix(st, "UNAVAILABLE: ") {
			t.Errorf("%s: %q, want UNAVAILABLE with its reason (index %v)", n, st, idx)
		}
		t.Logf("%s: %s", n, st)
	}
	if idx["onnx-mnist-cpu 1"] != "READY" {
		t.Errorf("the good model beside them: %q\n%s", idx["onnx-mnist-cpu 1"], s.Log())
	}
	s.waitHealthy(t)
}

func init() {
	// The zoo's trained digits CNN exported to ONNX (models/onnx_digits.py), with the
	// TorchScript archive's config: the image_classifier handler in front of ONNX Runtime.
	storeONNX = append(storeONNX, storeArchive{"digits_onnx", "onnx_digits", "digits", "1.0", ""})
}

// TestONNXArchive serves the digits CNN twice, from its TorchScript archive and from an
// archive of its ONNX export with the same config: over TorchServe's REST API each held-out
// PNG gets the same labels in the same order with probabilities within 1e-5, and over the Open
// Inference Protocol the same tensor gets the same scores.
func TestONNXArchive(t *testing.T) {
	s := startServer(t, "--models", "digits=digits.mar,digits_onnx=digits_onnx.mar")
	s.waitHealthy(t)
	var desc []struct {
		Runtime string
		Workers []struct{ ID string }
	}
	do(t, "GET", s.mgmt+"/models/digits_onnx", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].Runtime != "onnxruntime" || len(desc[0].Workers) == 0 {
		t.Errorf("describe: %+v, want runtime onnxruntime with workers", desc)
	}
	imgs, _ := heldOut(t)
	for i, img := range imgs[:min(len(imgs), 20)] {
		var want, got map[string]float64
		do(t, "POST", s.inf+"/predictions/digits", "image/png", img).json(t, &want)
		r := do(t, "POST", s.inf+"/predictions/digits_onnx", "image/png", img)
		if r.status != 200 {
			t.Fatalf("image %d: %d %s", i, r.status, r.body)
		}
		r.json(t, &got)
		if len(got) != len(want) {
			t.Fatalf("image %d: ONNX %v, TorchScript %v", i, got, want)
		}
		for label, p := range want {
			if q, ok := got[label]; !ok || math.Abs(p-q) > 1e-5 {
				t.Errorf("image %d: ONNX %v, TorchScript %v", i, got, want)
				break
			}
		}
	}
	x := digitsInput(1)
	infer := func(model string) []float64 {
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input__0", "shape": []int{1, 1, 28, 28}, "datatype": "FP32", "data": x}}})
		r := do(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/json", body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", model, r.status, r.body)
		}
		var out struct{ Outputs []struct{ Data []float64 } }
		r.json(t, &out)
		if len(out.Outputs) != 1 {
			t.Fatalf("%s: %s", model, r.body)
		}
		return out.Outputs[0].Data
	}
	if a, b := infer("digits"), infer("digits_onnx"); !near(a, b, 1e-5) {
		t.Errorf("v2 infer: ONNX %v, TorchScript %v", b, a)
	}
}

// TestONNXMemoryLimit serves a graph that allocates whatever size a request asks
// (ConstantOfShape of the request's shape) under onnx_memory_limit 64 MiB: a 128 MiB answer
// fails with "out of memory", a small one is served, and the model beside it goes on.
func TestONNXMemoryLimit(t *testing.T) {
	repo := onnxRepo(t)
	copyFile(t, filepath.Join(onnxDir, "hostile", "zeros.onnx"), filepath.Join(repo, "zeros", "1", "model.onnx"))
	if err := os.WriteFile(filepath.Join(repo, "zeros", "config.pbtxt"), []byte(`platform: "onnxruntime_onnx"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--model-repository", repo, "--onnx-memory-limit", "64")
	s.waitHealthy(t)
	zeros := func(a, b int) response {
		body, _ := json.Marshal(map[string]any{
			"inputs":  []map[string]any{{"name": "shape", "shape": []int{2}, "datatype": "INT64", "data": []int{a, b}}},
			"outputs": []map[string]any{{"name": "zeros", "parameters": map[string]any{"binary_data": true}}},
		})
		return do(t, "POST", s.inf+"/v2/models/zeros/infer", "application/json", body)
	}
	if r := zeros(4096, 8192); r.status < 500 || !strings.Contains(string(r.body), "out of memory") {
		t.Errorf("128 MiB of zeros under a 64 MiB limit: %d %.300s", r.status, r.body)
	}
	if r := zeros(3, 4); r.status != 200 {
		t.Errorf("3x4 zeros after: %d %s", r.status, r.body)
	}
	x := make([]float32, 784)
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input.1", "shape": []int{1, 1, 28, 28}, "datatype": "FP32", "data": x}}})
	if r := do(t, "POST", s.inf+"/v2/models/onnx-mnist-cpu/infer", "application/json", body); r.status != 200 {
		t.Errorf("the model beside it: %d %s", r.status, r.body)
	}
}
