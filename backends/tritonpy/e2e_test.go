package tritonpy_test

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/backends/onnx"
	"github.com/torchd/torchd/backends/tritonpy"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// A Triton repository of Python-backend models (model.py), ONNX models and ensembles,
// served as the daemon serves one: the registry's runtimes (Triton's Python backend, ONNX
// Runtime, LibTorch), a lifecycle service over the repository, and KServe's front-end, driven
// over its routes and by Triton's own Python clients over listeners.

var (
	zooDir    = filepath.Join("..", "..", "models", "out")
	pyclients = filepath.Join("..", "..", "build", "pyclients", "bin", "python")
	// tritonTextDir is transformer-deploy's layout and its answers in Python
	// (models/triton_text.py, make models-triton-text).
	tritonTextDir = filepath.Join(zooDir, "triton_text")
)

// venvPython is the project venv's interpreter, which has TorchServe's ts (make
// handler-runtime); TORCHD_PYTHON names another.
func venvPython(t testing.TB) string {
	if p := os.Getenv("TORCHD_PYTHON"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handlerproc.FindRuntime(p); err != nil {
		t.Fatalf("%v (make handler-runtime installs it)", err)
	}
	return p
}

type served struct {
	t    testing.TB
	api  *kserve.API
	life *lifecycle.Service
}

// serve serves the repository as --model-repository does, its models loaded.
func serve(t testing.TB, repo string) *served {
	t.Helper()
	var life *lifecycle.Service
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// An ensemble loading beside its models waits for them (the daemon's Pending).
	reg := core.NewRegistry(core.Options{Defaults: coretest.Defaults, Log: log, Pending: func(name string) bool { return life.Pending(name) },
		Runtimes: []core.Runtime{&onnx.Backend{}, &tritonpy.Backend{Python: venvPython(t)}, libtorch.Backend{}}})
	t.Cleanup(reg.Close)
	life = lifecycle.New(lifecycle.Config{Registry: reg, ControlMode: lifecycle.ControlNone, Log: log})
	t.Cleanup(life.Stop)
	life.OpenRepository(repo)
	life.Start(lifecycle.Startup{})
	life.WaitStartup()
	return &served{t: t, life: life, api: &kserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, LogLevel: new(slog.LevelVar)}}
}

func (s *served) do(method, uri string, body []byte) frontendtest.Response {
	return frontendtest.Do(s.api.Routes(), frontendtest.Request{Method: method, URI: uri, Body: body, Header: map[string]string{"Content-Type": "application/json"}})
}

func jsonOf(t testing.TB, r frontendtest.Response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
}

// index is the repository index as "name version" → "STATE: reason".
func (s *served) index() map[string]string {
	s.t.Helper()
	idx, err := s.life.Index(false)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range idx {
		out[strings.TrimSuffix(e.Name+" "+e.Version, " ")] = strings.TrimSuffix(e.State+": "+e.Reason, ": ")
	}
	return out
}

// listen serves the routes over HTTP and the gRPC service on 127.0.0.1, for Triton's
// clients, and returns their host:ports.
func (s *served) listen() (httpAddr, grpcAddr string) {
	return frontendtest.Listen(s.t, &fasthttp.Server{Handler: frontend.NewRouter("inference", s.api.Routes()).Serve, MaxRequestBodySize: 6553500}),
		frontendtest.ListenGRPC(s.t, func(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, s.api.InferenceService()) })
}

// copyTree copies a model directory's files into a repository.
func copyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

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

// transformer-deploy's layout unchanged (a model.py
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
	copyTree(t, filepath.Join("testdata", "repo", "faulty"), faulty)
	cfg, err := os.ReadFile(filepath.Join(faulty, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	// A short response timeout, for the model.py that hangs.
	cfg = []byte(strings.Replace(string(cfg), "dynamic_batching { ", "dynamic_batching { default_queue_policy { default_timeout_microseconds: 3000000 } ", 1))
	if err := os.WriteFile(filepath.Join(faulty, "config.pbtxt"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	s := serve(t, repo)
	idx := s.index()
	for _, m := range []string{"transformer_tokenize 1", "transformer_onnx_model 1", "transformer_inference 1", "faulty 1"} {
		if idx[m] != "READY" {
			t.Fatalf("%s: %q, want READY", m, idx[m])
		}
	}

	var meta struct{ Platform string }
	jsonOf(t, s.do("GET", "/v2/models/transformer_tokenize", nil), &meta)
	var config struct{ Platform, Backend string }
	jsonOf(t, s.do("GET", "/v2/models/transformer_tokenize/config", nil), &config)
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
		r := s.do("POST", "/v2/models/"+model+"/infer", body)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", model, r.Status, r.Body)
		}
		var res struct{ Outputs []output }
		jsonOf(t, r, &res)
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
	faultyInfer := func(mode float32) frontendtest.Response {
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{
			{"name": "X", "datatype": "FP32", "shape": []int{1, 2}, "data": []float32{mode, 1}},
			{"name": "S", "datatype": "BYTES", "shape": []int{1, 1}, "data": []string{"abc"}},
		}})
		return s.do("POST", "/v2/models/faulty/infer", body)
	}
	good := func() {
		t.Helper()
		// A model.py killed for hanging is answered again once its process has restarted.
		for range 60 {
			if r := faultyInfer(1); r.Status == 200 {
				if !strings.Contains(string(r.Body), `"ABC"`) {
					t.Fatalf("faulty's answer %s", r.Body)
				}
				return
			}
		}
		t.Fatal("faulty answers no good request after a bad one")
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
		t.Logf("%s: %d %s", c.name, r.Status, r.Body)
		if r.Status == 200 || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s: %d %s, want an error with %q", c.name, r.Status, r.Body, c.want)
		}
		good()
	}
	if r := faultyInfer(-5); r.Status != 400 {
		t.Errorf("an INVALID_ARG error response: %d %s, want 400", r.Status, r.Body)
	}

	// A bad request batched with good ones fails alone.
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			mode := float32(1)
			if i == 5 {
				mode = -1
			}
			r := faultyInfer(mode)
			switch {
			case r.Status == 200 && mode == 1:
				ok.Add(1)
			case r.Status != 200 && mode == -1 && strings.Contains(string(r.Body), "asked to raise"):
				bad.Add(1)
			default:
				t.Errorf("request %d (mode %v): %d %s", i, mode, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
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
	httpAddr, grpcAddr := s.listen()
	out, err := exec.Command(pyclients, filepath.Join("testdata", "triton_text_client.py"), httpAddr, grpcAddr, tritonTextDir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("Triton's clients: %v", err)
	}
}
