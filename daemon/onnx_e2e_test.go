package daemon_test

import (
	"io/fs"
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
		if !strings.HasSuffix(e.Name(), ".onnx") || e.Name() == "huge_input.onnx" {
			continue // an input declared huge loads; a request of that size is refused by the body limit
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
