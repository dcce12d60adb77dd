package onnx_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/backends/onnx"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// ONNX models served end to end: the Triton repositories of models/onnx_zoo.py (make
// models-onnx), unchanged, and an archive of the digits CNN's ONNX export, through the
// front-ends the daemon wires (KServe v2 and TorchServe's API) over a registry of ONNX Runtime
// and LibTorch.

var (
	zooDir   = filepath.Join("..", "..", "models", "out")
	storeDir = filepath.Join("..", "..", "model-store")
	// onnxDir holds the ONNX models and Triton repositories of models/onnx_zoo.py.
	onnxDir   = filepath.Join(zooDir, "onnx")
	pyclients = filepath.Join("..", "..", "build", "pyclients", "bin", "python")
)

// served is the inference port's front-ends over a registry and a lifecycle service.
type served struct {
	t         testing.TB
	api       *kserve.API
	inf, mgmt []*frontend.Route
	life      *lifecycle.Service
}

// serve serves repo ("": none) and the archives of store (a directory) over ort.
func serve(t testing.TB, ort *onnx.Backend, repo, store string) *served {
	t.Helper()
	reg := coretest.NewRegistryOf(t, ort, libtorch.Backend{})
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(store, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrModelNotFound, "%s: %v", req.URL, err)
		}
		name := req.Name
		if name == "" {
			name = am.Name
		}
		return reg.Add(name, am.Version, req, am)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	life := lifecycle.New(lifecycle.Config{Registry: reg, Open: open, ModelStore: store, ControlMode: lifecycle.ControlNone, Log: log})
	t.Cleanup(life.Stop)
	if repo != "" {
		life.OpenRepository(repo)
	}
	life.Start(lifecycle.Startup{})
	life.WaitStartup()
	ts := &torchserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}
	api := &kserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, LogLevel: new(slog.LevelVar)}
	return &served{t: t, api: api, life: life, inf: slices.Concat(ts.InferenceRoutes(), api.Routes()), mgmt: ts.ManagementRoutes()}
}

func (s *served) do(method, uri, contentType string, body []byte) frontendtest.Response {
	return frontendtest.Do(s.inf, frontendtest.Request{Method: method, URI: uri, Body: body, Header: map[string]string{"Content-Type": contentType}})
}

func (s *served) register(query string) {
	s.t.Helper()
	if r := frontendtest.Do(s.mgmt, frontendtest.Request{Method: "POST", URI: "/models?" + query}); r.Status != 200 {
		s.t.Fatalf("register %s: %d %s", query, r.Status, r.Body)
	}
}

func jsonOf(t testing.TB, r frontendtest.Response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
}

// index is the repository index as "name version" → "STATE: reason", the loads done.
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

// listen serves the inference routes over HTTP and the gRPC service on 127.0.0.1, for
// Triton's clients, and returns their host:ports.
func (s *served) listen() (httpAddr, grpcAddr string) {
	return frontendtest.Listen(s.t, &fasthttp.Server{Handler: frontend.NewRouter("inference", s.inf).Serve, MaxRequestBodySize: 6553500}),
		frontendtest.ListenGRPC(s.t, func(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, s.api.InferenceService()) })
}

func copyFile(t testing.TB, from, to string) { zootest.CopyFile(t, from, to) }

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

// The seed repositories served unchanged and driven by Triton's Python clients over HTTP
// and gRPC (testdata/triton_onnx_client.py): READY in the index, and every answer equal to
// onnxruntime's in Python within 1e-5, alone, batched by the client, and batched by torchd.
func TestONNXRepositoryThroughTritonClients(t *testing.T) {
	if _, err := os.Stat(pyclients); err != nil {
		t.Skip("no build/pyclients venv: run make pyclients-http (make test does)")
	}
	s := serve(t, &onnx.Backend{}, onnxRepo(t), storeDir)
	idx := s.index()
	for _, m := range []string{"onnx-mnist-cpu 1", "image_encoder 1", "transformer_onnx_model 1"} {
		if idx[m] != "READY" {
			t.Errorf("%s: %q, want READY", m, idx[m])
		}
	}
	httpAddr, grpcAddr := s.listen()
	out, err := exec.Command(pyclients, filepath.Join("testdata", "triton_onnx_client.py"), httpAddr, grpcAddr, onnxDir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("Triton's clients: %v", err)
	}
}

// Each hostile .onnx of the zoo in a repository beside a good model: each is refused with
// its reason, the good one serves, and the server is healthy.
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
	s := serve(t, &onnx.Backend{}, repo, storeDir)
	idx := s.index()
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
		t.Errorf("the good model beside them: %q", idx["onnx-mnist-cpu 1"])
	}
	// The models that failed are not the server's health: it is ready.
	if r := s.do("GET", "/ping", "", nil); r.Status != 200 {
		t.Errorf("ping: %d %s", r.Status, r.Body)
	}
}

// digitsInput is a deterministic input of the digits CNN.
func digitsInput(seed int) []float32 {
	x := make([]float32, 28*28)
	for i := range x {
		x[i] = float32(math.Sin(float64(i*(seed+1)))) * 0.8
	}
	return x
}

// heldOut is the digits CNN's held-out PNGs.
func heldOut(t testing.TB) [][]byte { imgs, _ := zootest.DigitsHeldOut(t, zooDir); return imgs }

// The digits CNN twice, from its TorchScript archive and from an archive of its ONNX export
// (models/onnx_digits.py) with the same config, the image_classifier handler in front of ONNX
// Runtime: over TorchServe's REST API each held-out PNG gets the same labels with
// probabilities within 1e-5, and over the Open Inference Protocol the same tensor gets the
// same scores.
func TestONNXArchive(t *testing.T) {
	store := t.TempDir()
	copyFile(t, filepath.Join(storeDir, "digits.mar"), filepath.Join(store, "digits.mar"))
	extra := []string{filepath.Join(zooDir, "digits", "index_to_name.json")}
	if _, err := archive.Write(archive.WriteOptions{ModelName: "digits_onnx", Version: "1.0",
		SerializedFile: filepath.Join(zooDir, "onnx_digits", "model.onnx"), ExtraFiles: extra,
		ConfigFile: filepath.Join("..", "..", "models", "configs", "digits.toml"), ExportPath: store}); err != nil {
		t.Fatal(err)
	}
	s := serve(t, &onnx.Backend{}, "", store)
	s.register("url=digits.mar&model_name=digits&initial_workers=1&synchronous=true")
	s.register("url=digits_onnx.mar&model_name=digits_onnx&initial_workers=1&synchronous=true")
	var desc []struct {
		Runtime string
		Workers []struct{ ID string }
	}
	jsonOf(t, frontendtest.Do(s.mgmt, frontendtest.Request{Method: "GET", URI: "/models/digits_onnx"}), &desc)
	if len(desc) != 1 || desc[0].Runtime != "onnxruntime" || len(desc[0].Workers) == 0 {
		t.Errorf("describe: %+v, want runtime onnxruntime with workers", desc)
	}
	imgs := heldOut(t)
	for i, img := range imgs[:min(len(imgs), 20)] {
		var want, got map[string]float64
		jsonOf(t, s.do("POST", "/predictions/digits", "image/png", img), &want)
		r := s.do("POST", "/predictions/digits_onnx", "image/png", img)
		if r.Status != 200 {
			t.Fatalf("image %d: %d %s", i, r.Status, r.Body)
		}
		jsonOf(t, r, &got)
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
		r := s.do("POST", "/v2/models/"+model+"/infer", "application/json", body)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", model, r.Status, r.Body)
		}
		var out struct{ Outputs []struct{ Data []float64 } }
		jsonOf(t, r, &out)
		if len(out.Outputs) != 1 {
			t.Fatalf("%s: %s", model, r.Body)
		}
		return out.Outputs[0].Data
	}
	a, b := infer("digits"), infer("digits_onnx")
	for i := range a {
		if len(a) != len(b) || math.Abs(a[i]-b[i]) > 1e-5 {
			t.Fatalf("v2 infer: ONNX %v, TorchScript %v", b, a)
		}
	}
}

// A graph that allocates whatever size a request asks (ConstantOfShape of the request's
// shape) under a memory limit of 64 MiB: a 128 MiB answer fails with "out of memory", a small
// one is served, and the model beside it goes on. The limit is the process's ONNX Runtime's,
// set once: the test runs in a process of its own.
func TestONNXMemoryLimit(t *testing.T) {
	if os.Getenv("TORCHD_TEST_ONNX_MEMORY_LIMIT") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestONNXMemoryLimit$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TORCHD_TEST_ONNX_MEMORY_LIMIT=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	repo := onnxRepo(t)
	copyFile(t, filepath.Join(onnxDir, "hostile", "zeros.onnx"), filepath.Join(repo, "zeros", "1", "model.onnx"))
	if err := os.WriteFile(filepath.Join(repo, "zeros", "config.pbtxt"), []byte(`platform: "onnxruntime_onnx"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := serve(t, &onnx.Backend{MemoryLimit: 64 << 20}, repo, storeDir)
	zeros := func(a, b int) frontendtest.Response {
		body, _ := json.Marshal(map[string]any{
			"inputs":  []map[string]any{{"name": "shape", "shape": []int{2}, "datatype": "INT64", "data": []int{a, b}}},
			"outputs": []map[string]any{{"name": "zeros", "parameters": map[string]any{"binary_data": true}}},
		})
		return s.do("POST", "/v2/models/zeros/infer", "application/json", body)
	}
	if r := zeros(4096, 8192); r.Status < 500 || !strings.Contains(string(r.Body), "out of memory") {
		t.Errorf("128 MiB of zeros under a 64 MiB limit: %d %.300s", r.Status, r.Body)
	}
	if r := zeros(3, 4); r.Status != 200 {
		t.Errorf("3x4 zeros after: %d %s", r.Status, r.Body)
	}
	x := make([]float32, 784)
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input.1", "shape": []int{1, 1, 28, 28}, "datatype": "FP32", "data": x}}})
	if r := s.do("POST", "/v2/models/onnx-mnist-cpu/infer", "application/json", body); r.Status != 200 {
		t.Errorf("the model beside it: %d %s", r.Status, r.Body)
	}
}
