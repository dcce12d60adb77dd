package torchserve_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/frontend/openai"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	"github.com/valyala/fasthttp"
)

// These tests serve the zoo's real models (models/out, made by `make models`) over real
// LibTorch through TorchServe's management and inference routes and KServe's, as the daemon
// wires them, without a server: a registration's url is an archive of a model store the test
// writes, as the daemon resolves a plain name (daemon/url.go, whose own tests stay there).

var zoo = filepath.Join("..", "..", "models", "out")

// storeArchive is an archive of the test's model store: model name, models/out directory,
// models/configs file, version and sub-directory ("" for the root).
type storeArchive struct{ name, zoo, config, version, sub string }

var (
	digitsV1            = storeArchive{"digits", "digits", "digits", "1.0", ""}
	digitsV2            = storeArchive{"digits", "digits", "digits", "2.0", "v2"}
	digitsTensorArchive = storeArchive{"digits_tensor", "digits", "digits_tensor", "1.0", ""}
	slowModel           = storeArchive{"slow", "slow", "slow", "1.0", ""}
	textcls             = storeArchive{"textcls", "textcls", "textcls", "1.0", ""}
	minilm              = storeArchive{"minilm", "minilm", "minilm", "1.0", ""}
)

// writeStore writes the archives into a new model store, as `make archives` does.
func writeStore(t testing.TB, archives ...storeArchive) string {
	t.Helper()
	dir := t.TempDir()
	for _, a := range archives {
		if err := os.MkdirAll(filepath.Join(dir, a.sub), 0o755); err != nil {
			t.Fatal(err)
		}
		var extra []string
		for _, f := range []string{"index_to_name.json", "vocab.txt", "vocab.json", "st"} {
			if p := filepath.Join(zoo, a.zoo, f); exists(p) {
				extra = append(extra, p)
			}
		}
		if _, err := archive.Write(archive.WriteOptions{ModelName: a.name, Version: a.version, SerializedFile: filepath.Join(zoo, a.zoo, "model.pt"),
			ExtraFiles: extra, ConfigFile: filepath.Join("..", "..", "models", "configs", a.config+".toml"), ExportPath: filepath.Join(dir, a.sub),
			Format: archive.FormatZipStore}); err != nil {
			t.Fatalf("%s (run make models): %v", a.name, err)
		}
	}
	return dir
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// served is a registry over real runtimes, its lifecycle service, and the front-ends'
// routes over them.
type served struct {
	store string
	reg   *core.Registry
	life  *lifecycle.Service
	ts    *torchserve.API
	ks    *kserve.API
	oai   *openai.API
	// metrics records what the registry serves, as the daemon's metrics port shows it.
	metrics *metrics.Metrics
	log     syncBuffer // what the registry, the service and the API logged
}

// syncBuffer is a log that the serving goroutines write while the test reads it.
type syncBuffer = coretest.LogBuffer

// options are a served's beyond its archives: the server's model settings (its flags), and
// runtimes beside LibTorch.
type options struct {
	server   archive.Settings
	runtimes []core.Runtime
	store    string            // a model store already written ("": write one of the archives)
	snapshot string            // the snapshot file ("": none)
	startup  lifecycle.Startup // the start-up models
	// perModel is the server configuration's settings for one version (config.properties'
	// models key).
	perModel func(name, version string, startup bool) archive.Settings
}

// serve serves a model store of archives; initialWorkers is TorchServe's API's (the
// daemon's tests run with 1).
func serve(t testing.TB, initialWorkers int, archives []storeArchive, opts ...options) *served {
	t.Helper()
	var o options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := &served{store: o.store}
	if s.store == "" {
		s.store = writeStore(t, archives...)
	}
	log := slog.New(slog.NewTextHandler(&s.log, nil))
	s.metrics = metrics.New(true)
	s.reg = core.NewRegistry(core.Options{Defaults: coretest.Defaults, Server: o.server, PerModel: o.perModel, Runtimes: append(o.runtimes, libtorch.Backend{}), Metrics: s.metrics, Log: log})
	s.metrics.Statistics = func() []core.Statistics { st, _ := s.reg.Statistics("", ""); return st }
	t.Cleanup(s.reg.Close)
	s.life = lifecycle.New(lifecycle.Config{Registry: s.reg, Open: s.open, ModelStore: s.store, SnapshotFile: o.snapshot, Log: log})
	t.Cleanup(s.life.Stop)
	s.life.Start(o.startup)
	s.ts = &torchserve.API{Registry: s.reg, Life: s.life, InitialWorkers: initialWorkers, Ready: s.life.Ready, MaxRequestSize: 64 << 20, Log: log}
	s.ks = &kserve.API{Registry: s.reg, Life: s.life, Ready: s.life.Ready, MaxRequestSize: 64 << 20}
	s.oai = &openai.API{Registry: s.reg}
	return s
}

// open resolves a registration's url in the model store, and lets its handler override
// the archive's, as the daemon does for a plain name.
func (s *served) open(req core.RegisterRequest) (*core.ModelVersion, error) {
	path := filepath.Join(s.store, req.URL)
	if req.URL == "" || strings.Contains(req.URL, "..") || !exists(path) {
		return nil, frontend.APIErrorf(404, "ModelNotFoundException", "Model not found in model store: %s", req.URL)
	}
	var opts []archive.Option
	if req.Handler != "" {
		opts = append(opts, archive.WithHandler(req.Handler))
	}
	am, err := archive.Open(path, opts...)
	if err != nil {
		return nil, frontend.APIErrorf(400, "ModelException", "%s: %v", req.URL, err)
	}
	name := req.Name
	if name == "" {
		name = am.Name
	}
	return s.reg.Add(name, am.Version, req, am)
}

// response is an answer of the routes.
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

// mgmt is an answer of the management API.
func (s *served) mgmt(method, uri, contentType string, body []byte) response {
	return do(s.ts.ManagementRoutes(), method, uri, contentType, body)
}

// inferenceRoutes are the inference port's routes: TorchServe's, OpenAI's and KServe's.
func (s *served) inferenceRoutes() []*frontend.Route {
	return slices.Concat(s.ts.InferenceRoutes(), s.oai.Routes(), s.ks.Routes())
}

// inf is an answer of the inference port's routes.
func (s *served) inf(method, uri, contentType string, body []byte, header ...string) response {
	return do(s.inferenceRoutes(), method, uri, contentType, body, header...)
}

// listen serves the inference routes on a port of 127.0.0.1, for the tests whose point is a
// connection, and returns its host:port.
func (s *served) listen(t testing.TB) string {
	return frontendtest.Listen(t, &fasthttp.Server{Handler: frontend.NewRouter("inference", s.inferenceRoutes()).Serve, NoDefaultContentType: true, CloseOnShutdown: true})
}

// register registers an archive of the store and fails the test on an error.
func (s *served) register(t testing.TB, query string) {
	t.Helper()
	if r := s.mgmt("POST", "/models?"+query, "", nil); r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r response, status int, typ, msgPart string) {
	t.Helper()
	frontendtest.ErrorShape(t, r.status, r.body, status, typ, msgPart)
}

func expectStatus(t testing.TB, r response, code int, status string) {
	t.Helper()
	var b struct{ Status string }
	r.json(t, &b)
	if r.status != code || b.Status != status {
		t.Fatalf("got %d %s, want %d {\"status\": %q}", r.status, r.body, code, status)
	}
}

// heldOut returns the digits held-out PNGs and their labels.
func heldOut(t testing.TB) ([][]byte, []string) { return zootest.DigitsHeldOut(t, zoo) }
