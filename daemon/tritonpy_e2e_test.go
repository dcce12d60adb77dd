package daemon_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/torchd/torchd/internal/npy"
)

// tritonTextDir is transformer-deploy's layout and its answers in Python
// (models/triton_text.py, make models-triton-text).
var tritonTextDir = filepath.Join(zooDir, "triton_text")

// textRefs are models/triton_text.py's reference cases.
type textRefs struct {
	Cases []struct {
		Name   string
		Texts  []string
		Tokens map[string]string
		Output string
	}
}

func readNpyFile(t testing.TB, path string) npy.Array {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return a
}

// TestTritonPythonBackend serves transformer-deploy's layout unchanged (a model.py
// tokenizer, the ONNX classifier, their ensemble) beside a model.py that misbehaves on
// request: all READY; the tokenizer answers as in Python and the ensemble as the tokenizer
// plus onnxruntime, over REST (and Triton's HTTP and gRPC clients); each misbehaviour fails
// only its request, with its reason, and the server goes on serving.
func TestTritonPythonBackend(t *testing.T) {
	if _, err := os.Stat(filepath.Join(tritonTextDir, "refs.json")); err != nil {
		t.Fatalf("no triton_text layout (run make models-triton-text): %v", err)
	}
	repo := t.TempDir()
	copyTree(t, filepath.Join(tritonTextDir, "repo"), repo)
	os.MkdirAll(filepath.Join(repo, "transformer_inference", "1"), 0o755) // copyTree copies files only
	faulty := filepath.Join(repo, "faulty")
	copyTree(t, filepath.Join("..", "backends", "tritonpy", "testdata", "repo", "faulty"), faulty)
	cfg, err := os.ReadFile(filepath.Join(faulty, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	// A short response timeout, for the model.py that hangs.
	cfg = []byte(strings.Replace(string(cfg), "dynamic_batching { ", "dynamic_batching { default_queue_policy { default_timeout_microseconds: 3000000 } ", 1))
	if err := os.WriteFile(filepath.Join(faulty, "config.pbtxt"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	s := startServer(t, "--python", venvPython(t), "--model-repository", repo)
	idx := settled(t, s)
	for _, m := range []string{"transformer_tokenize 1", "transformer_onnx_model 1", "transformer_inference 1", "faulty 1"} {
		if idx[m] != "READY" {
			t.Fatalf("%s: %q, want READY\n%s", m, idx[m], s.Log())
		}
	}

	var meta struct{ Platform string }
	do(t, "GET", s.inf+"/v2/models/transformer_tokenize", "", nil).json(t, &meta)
	var config struct{ Platform, Backend string }
	do(t, "GET", s.inf+"/v2/models/transformer_tokenize/config", "", nil).json(t, &config)
	if meta.Platform != "python" || config.Backend != "python" || config.Platform != "" {
		t.Errorf("transformer_tokenize: metadata platform %q, config platform %q backend %q; want python, none and python", meta.Platform, config.Platform, config.Backend)
	}

	var refs textRefs
	b, err := os.ReadFile(filepath.Join(tritonTextDir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	type output struct {
		Name     string
		Datatype string
		Shape    []int64
		Data     []float64
	}
	infer := func(model string, texts []string) map[string]output {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "TEXT", "datatype": "BYTES", "shape": []int{len(texts)}, "data": texts}}})
		r := do(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/json", body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", model, r.status, r.body)
		}
		var res struct{ Outputs []output }
		r.json(t, &res)
		out := map[string]output{}
		for _, o := range res.Outputs {
			out[o.Name] = o
		}
		return out
	}
	for _, c := range refs.Cases {
		toks := infer("transformer_tokenize", c.Texts)
		for name, file := range c.Tokens {
			want := readNpyFile(t, filepath.Join(tritonTextDir, file))
			got := toks[name]
			if got.Datatype != "INT64" || len(got.Data) != len(want.Data)/8 {
				t.Fatalf("%s: %s %+v, want %v of INT64", c.Name, name, got, want.Shape)
			}
			for i := range got.Data {
				if int64(got.Data[i]) != int64(binary.LittleEndian.Uint64(want.Data[8*i:])) {
					t.Fatalf("%s: %s %v differs from the tokenizer's at %d", c.Name, name, got.Data, i)
				}
			}
		}
		want := readNpyFile(t, filepath.Join(tritonTextDir, c.Output))
		got := infer("transformer_inference", c.Texts)["output"]
		if len(got.Data) != len(want.Data)/4 || len(got.Shape) != 2 || got.Shape[0] != int64(len(c.Texts)) {
			t.Fatalf("%s: output %+v, want %v", c.Name, got, want.Shape)
		}
		for i := range got.Data {
			if w := float64(math.Float32frombits(binary.LittleEndian.Uint32(want.Data[4*i:]))); math.Abs(got.Data[i]-w) > 1e-5 {
				t.Fatalf("%s: output %v differs from tokenizer+onnxruntime's at %d (%v)", c.Name, got.Data, i, w)
			}
		}
	}

	// The misbehaviours, each alone: its reason, and the next good request answered.
	faultyInfer := func(mode float32) response {
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{
			{"name": "X", "datatype": "FP32", "shape": []int{1, 2}, "data": []float32{mode, 1}},
			{"name": "S", "datatype": "BYTES", "shape": []int{1, 1}, "data": []string{"abc"}},
		}})
		return do(t, "POST", s.inf+"/v2/models/faulty/infer", "application/json", body)
	}
	good := func() {
		t.Helper()
		// A model.py killed for hanging is answered again once its process has restarted.
		for range 60 {
			if r := faultyInfer(1); r.status == 200 {
				if !strings.Contains(string(r.body), `"ABC"`) {
					t.Fatalf("faulty's answer %s", r.body)
				}
				return
			}
		}
		t.Fatalf("faulty answers no good request after a bad one\n%s", s.Log())
	}
	good()
	for _, c := range []struct {
		name string
		mode float32
		want string
	}{
		{"raises", -1, "execute raised ValueError: asked to raise"},
		{"wrong number of responses", -2, "execute returned a list of 2 items"},
		{"wrong type", -3, "execute's response 0 is a dict, not a pb_utils.InferenceResponse"},
		{"an error response", -5, "X is negative"},
		{"hangs", -4, "did not answer within"},
	} {
		r := faultyInfer(c.mode)
		t.Logf("%s: %d %s", c.name, r.status, r.body)
		if r.status == 200 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s, want an error with %q", c.name, r.status, r.body, c.want)
		}
		good()
	}
	if r := faultyInfer(-5); r.status != 400 {
		t.Errorf("an INVALID_ARG error response: %d %s, want 400", r.status, r.body)
	}

	// A bad request batched with good ones fails alone.
	var ok, bad atomic.Int64
	forEach(12, 12, func(i int) {
		mode := float32(1)
		if i == 5 {
			mode = -1
		}
		r := faultyInfer(mode)
		switch {
		case r.status == 200 && mode == 1:
			ok.Add(1)
		case r.status != 200 && mode == -1 && strings.Contains(string(r.body), "asked to raise"):
			bad.Add(1)
		default:
			t.Errorf("request %d (mode %v): %d %s", i, mode, r.status, r.body)
		}
	})
	if ok.Load() != 11 || bad.Load() != 1 {
		t.Errorf("%d good and %d bad answered as they should, want 11 and 1", ok.Load(), bad.Load())
	}
	if got := infer("transformer_inference", refs.Cases[0].Texts)["output"]; len(got.Data) != 2 {
		t.Errorf("the ensemble after the faulty model's failures: %+v", got)
	}

	if _, err := os.Stat(pyclients); err != nil {
		t.Log("no build/pyclients venv: Triton's clients not run (make pyclients-http)")
		return
	}
	out, err := exec.Command(pyclients, filepath.Join("testdata", "triton_text_client.py"),
		strings.TrimPrefix(s.inf, "http://"), s.grpc, tritonTextDir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("Triton's clients: %v\n%s", err, s.Log())
	}
}
