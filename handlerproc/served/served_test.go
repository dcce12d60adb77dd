package served_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/lifecycle"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// These tests serve archives that TorchServe's own torch-model-archiver makes, with
// handlers of handlerproc/testdata/tiny, through handler processes behind the core and TorchServe's
// API's routes, as the daemon wires them (without a server, or over a listener where the
// point is a real connection): what a TorchServe user sees of a handler process.

// venvPython is the project venv's interpreter, which make test gives TorchServe's worker
// and archiver (make handler-runtime).
func venvPython(t testing.TB) string {
	p, err := filepath.Abs("../../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, "-c", "import ts, model_archiver").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import TorchServe (make handler-runtime): %v\n%s", p, err, out)
	}
	return p
}

// archiveTiny packs handlerproc/testdata/tiny's handler and eager model with torch-model-archiver into
// store as NAME.mar, with handler as --handler.
func archiveTiny(t testing.TB, py, store, name, handler string) {
	t.Helper()
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../testdata/tiny")); err != nil {
		t.Fatal(err)
	}
	stateDict(t, py, src, "tiny.pt", "import torch, model; torch.manual_seed(0); torch.save(model.TinyNet().state_dict(), 'tiny.pt')")
	archiver(t, py, src, "--model-name", name, "--version", "1.0", "--model-file", "model.py",
		"--serialized-file", "tiny.pt", "--handler", handler, "--extra-files", "service.py,handler.py,broken.py", "--export-path", store, "--force")
}

// stateDicts are the state dicts script wrote, by file name: written once per test binary,
// for Python's import of torch takes seconds.
var stateDicts sync.Map

// stateDict writes file into dir: what script, run in dir by py, writes there.
func stateDict(t testing.TB, py, dir, file, script string) {
	t.Helper()
	b, ok := stateDicts.Load(file)
	if !ok {
		cmd := exec.Command(py, "-c", script)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		stateDicts.Store(file, data)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, file), b.([]byte), 0o644); err != nil {
		t.Fatal(err)
	}
}

// archiver runs torch-model-archiver in dir.
func archiver(t testing.TB, py, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(filepath.Dir(py), "torch-model-archiver"), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch-model-archiver %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// served is a registry whose runtimes are handler processes (of backend) and LibTorch, its
// lifecycle service over a model store, and TorchServe's and KServe's APIs over them.
type served struct {
	store   string
	reg     *core.Registry
	life    *lifecycle.Service
	ts      *torchserve.API
	ks      *kserve.API
	metrics *metrics.Metrics
	log     syncBuffer
}

// syncBuffer is a log that the serving goroutines write while the test reads it.
type syncBuffer = coretest.LogBuffer

// serve serves store (a new one if "") through backend; the management API starts a worker
// at registration, as the daemon's tests run it.
func serve(t testing.TB, store string, backend *handlerproc.Backend) *served {
	t.Helper()
	if store == "" {
		store = t.TempDir()
	}
	s := &served{store: store, metrics: metrics.New(true)}
	log := slog.New(slog.NewTextHandler(&s.log, nil))
	s.reg = core.NewRegistry(core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{backend, libtorch.Backend{}}, Metrics: s.metrics, Log: log})
	t.Cleanup(s.reg.Close)
	s.life = lifecycle.New(lifecycle.Config{Registry: s.reg, Open: s.open, ModelStore: store, Log: log})
	t.Cleanup(s.life.Stop)
	s.life.Start(lifecycle.Startup{})
	s.ts = &torchserve.API{Registry: s.reg, Life: s.life, InitialWorkers: 1, Ready: s.life.Ready, MaxRequestSize: 64 << 20, Log: log}
	s.ks = &kserve.API{Registry: s.reg, Life: s.life, Ready: s.life.Ready, MaxRequestSize: 64 << 20}
	return s
}

// open opens a registration's archive of the model store, as the daemon does a plain name.
func (s *served) open(req core.RegisterRequest) (*core.ModelVersion, error) {
	path := filepath.Join(s.store, req.URL)
	if _, err := os.Stat(path); err != nil || req.URL == "" {
		return nil, frontend.APIErrorf(404, "ModelNotFoundException", "Model not found in model store: %s", req.URL)
	}
	am, err := archive.Open(path)
	if err != nil {
		return nil, frontend.APIErrorf(400, "ModelException", "%s: %v", req.URL, err)
	}
	name := req.Name
	if name == "" {
		name = am.Name
	}
	return s.reg.Add(name, am.Version, req, am)
}

type response struct {
	status int
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d body %q: %v", r.status, r.body, err)
	}
}

func do(routes []*frontend.Route, method, uri, contentType string, body []byte, header ...string) response {
	h := map[string]string{}
	if contentType != "" {
		h["Content-Type"] = contentType
	}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	r := frontendtest.Do(routes, frontendtest.Request{Method: method, URI: uri, Body: body, Header: h})
	return response{r.Status, r.Body}
}

func (s *served) mgmt(method, uri string) response {
	return do(s.ts.ManagementRoutes(), method, uri, "", nil)
}

func (s *served) inf(method, uri, contentType string, body []byte, header ...string) response {
	return do(slices.Concat(s.ts.InferenceRoutes(), s.ks.Routes()), method, uri, contentType, body, header...)
}

func (s *served) register(t testing.TB, query string) {
	t.Helper()
	if r := s.mgmt("POST", "/models?"+query); r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// listen serves the inference routes on a port of 127.0.0.1, for the tests whose point is
// a connection (a streamed answer's chunks), and returns its host:port.
func (s *served) listen(t testing.TB) string {
	return frontendtest.Listen(t, &fasthttp.Server{Handler: frontend.NewRouter("inference", slices.Concat(s.ts.InferenceRoutes(), s.ks.Routes())).Serve, NoDefaultContentType: true, CloseOnShutdown: true})
}

// listenGRPC serves TorchServe's gRPC inference API on a port of 127.0.0.1.
func (s *served) listenGRPC(t testing.TB) string {
	return frontendtest.ListenGRPC(t, func(g *grpc.Server) { tspb.RegisterInferenceAPIsServiceServer(g, s.ts.InferenceService()) })
}

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r response, status int, typ, msgPart string) {
	t.Helper()
	frontendtest.ErrorShape(t, r.status, r.body, status, typ, msgPart)
}
