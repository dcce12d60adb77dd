package libtorch_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	"github.com/torchd/torchd/oip"
	"github.com/valyala/fasthttp"
)

// The backend's tests serve the zoo's models (models/out, `make models`) and the model
// store's archives (model-store, `make archives`) over real LibTorch, through TorchServe's
// and KServe v2's routes without a server: what a client sees of a model this backend runs.

var zooDir = filepath.Join("..", "..", "models", "out")

// storeArchive is one archive of the tests' model store, built as the daemon's end-to-end
// harness builds it (make archives packs the same files): name, its models/out directory,
// its models/configs file, and its serialized file there.
type storeArchive struct{ name, zoo, config, file string }

var storeArchives = []storeArchive{
	{"digits", "digits", "digits", "model.pt"},
	{"digits_tensor", "digits", "digits_tensor", "model.pt"},
	{"resnet18", "resnet18", "resnet18", "model.pt"},
	{"textcls", "textcls", "textcls", "model.pt"},
	{"captioner", "captioner", "captioner", "model.pt"},
	{"slow", "slow", "slow", "model.pt"},
	{"digits_pt2", "digits", "digits_tensor", "model.pt2"},
	{"digits_pt2_img", "digits", "digits", "model.pt2"},
	{"resnet18_pt2", "resnet18", "resnet18", "model.pt2"},
	{"efficientnet_lite0_pt2", "efficientnet_lite0", "efficientnet_lite0", "model.pt2"},
	{"textcls_pt2", "textcls", "textcls", "model.pt2"},
	{"minilm_pt2", "minilm", "minilm", "model.pt2"},
}

var (
	storeOnce sync.Once
	store     string
	storeErr  error
)

// TestMain removes the model store the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if store != "" {
		os.RemoveAll(store)
	}
	os.Exit(code)
}

// buildStore writes storeArchives as stored zips (.mar) into a directory of its own, once
// per run: the CNNs' packages carry their int8 package (make models-int8) as a variant.
func buildStore(t testing.TB) string {
	t.Helper()
	storeOnce.Do(func() {
		if store, storeErr = os.MkdirTemp("", "torchd-libtorch-store-"); storeErr != nil {
			return
		}
		for _, a := range storeArchives {
			var extra []string
			files := []string{"index_to_name.json", "vocab.txt", "vocab.json", "st"}
			if a.file == "model.pt2" && (a.zoo == "resnet18" || a.zoo == "efficientnet_lite0") {
				files = append(files, "model_int8.pt2")
			}
			for _, f := range files {
				if p := filepath.Join(zooDir, a.zoo, f); fileExists(p) {
					extra = append(extra, p)
				}
			}
			_, storeErr = archive.Write(archive.WriteOptions{ModelName: a.name, Version: "1.0",
				SerializedFile: filepath.Join(zooDir, a.zoo, a.file), ExtraFiles: extra,
				ConfigFile: filepath.Join("..", "..", "models", "configs", a.config+".toml"),
				ExportPath: store, Format: archive.FormatZipStore})
			if storeErr != nil {
				storeErr = fmt.Errorf("%s (run make models): %w", a.name, storeErr)
				return
			}
		}
	})
	if storeErr != nil {
		t.Fatal(storeErr)
	}
	return store
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// server is a registry over the LibTorch backend with the front-ends' routes over it.
type server struct {
	reg     *core.Registry
	life    *lifecycle.Service
	metrics *metrics.Metrics
	// inf and mgmt are built once: a router sets up its routes when it is made, so that
	// concurrent requests share them as the daemon's do.
	inf, mgmt *frontend.Router
	// scratch holds archives a test writes; a registration's URL is looked up in the model
	// store, then there.
	scratch string
	logMu   sync.Mutex
	log     bytes.Buffer
}

func (s *server) Write(p []byte) (int, error) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.Write(p)
}

// Log is what the registry logged so far.
func (s *server) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// newServer serves registrations whose URL is a path under the model store or its scratch; maxRequest bounds a request's body (0: the daemon's default, 6.5 MB).
func newServer(t testing.TB, maxRequest int) *server {
	t.Helper()
	return newServerWith(t, maxRequest, nil)
}

// newServerWith is newServer with the registry's options changed by opts first: the
// server's own model settings (the layer --batch-size sets), the log's level.
func newServerWith(t testing.TB, maxRequest int, opts func(*core.Options)) *server {
	t.Helper()
	return newServerConfig(t, serverConfig{maxRequest: maxRequest, registry: opts})
}

// serverConfig is what a test's server may change.
type serverConfig struct {
	maxRequest int                 // 0: the daemon's default, 6.5 MB
	registry   func(*core.Options) // changes the registry's options (nil: none)
	snapshot   string              // the lifecycle's snapshot file ("": none)
	// refuse refuses a registration's URL before it is opened, as the daemon's URL
	// resolution does one allowed_urls does not admit (nil: none).
	refuse func(url string) error
}

func newServerConfig(t testing.TB, c serverConfig) *server {
	t.Helper()
	store := buildStore(t)
	if c.maxRequest == 0 {
		c.maxRequest = 6553500
	}
	s := &server{scratch: t.TempDir(), metrics: metrics.New(true)}
	log := slog.New(slog.NewTextHandler(s, nil))
	// A cache of measured curves of its own, as each daemon of the end-to-end tests has: a
	// curve measured by an earlier test would be read back instead of measured.
	o := core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{libtorch.Backend{}}, Metrics: s.metrics, Log: log, CacheDir: t.TempDir()}
	if c.registry != nil {
		c.registry(&o)
	}
	log = o.Log
	s.reg = core.NewRegistry(o)
	t.Cleanup(s.reg.Close)
	s.life = lifecycle.New(lifecycle.Config{Registry: s.reg, Log: log, SnapshotFile: c.snapshot, Open: func(req core.RegisterRequest) (*core.ModelVersion, error) {
		if c.refuse != nil {
			if err := c.refuse(req.URL); err != nil {
				return nil, err
			}
		}
		path := req.URL
		switch {
		case strings.HasPrefix(path, "file://"):
			path = strings.TrimPrefix(path, "file://")
		case fileExists(filepath.Join(store, path)):
			path = filepath.Join(store, path)
		default:
			path = filepath.Join(s.scratch, path)
		}
		am, err := archive.Open(path)
		if err != nil {
			return nil, core.Errorf(core.ErrBadModel, "%s: %v", req.URL, err)
		}
		name := req.Name
		if name == "" {
			name = am.Name
		}
		return s.reg.Add(name, am.Version, req, am)
	}})
	t.Cleanup(s.life.Stop)
	ready := func() bool { return true }
	ts := &torchserve.API{Registry: s.reg, Life: s.life, Ready: ready, MaxRequestSize: c.maxRequest, Log: log}
	ks := &kserve.API{Registry: s.reg, Life: s.life, Ready: ready, MaxRequestSize: c.maxRequest}
	s.inf = frontend.NewRouter("inference", append(ts.InferenceRoutes(), ks.Routes()...))
	s.mgmt = frontend.NewRouter("management", ts.ManagementRoutes())
	return s
}

type response struct {
	status      int
	contentType string
	body        []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
}

// serve sends a request through router, as the daemon's listener hands it over, and returns
// the answer (frontendtest.Do's, with a router made once).
func serve(router *frontend.Router, method, uri, contentType string, body []byte, header ...string) response {
	r := serveCtx(router, method, uri, contentType, body, header...)
	return response{r.Response.StatusCode(), string(r.Response.Header.ContentType()), append([]byte(nil), r.Response.Body()...)}
}

func serveCtx(router *frontend.Router, method, uri, contentType string, body []byte, header ...string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	if contentType != "" {
		ctx.Request.Header.SetContentType(contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		ctx.Request.Header.Set(header[i], header[i+1])
	}
	ctx.Request.SetBody(body)
	router.Serve(&ctx)
	return &ctx
}

// do sends a request to the inference API's routes (TorchServe's and KServe v2's).
func (s *server) do(method, uri, contentType string, body []byte) response {
	return serve(s.inf, method, uri, contentType, body)
}

// post sends a POST to the inference API's routes with header's name, value pairs.
func (s *server) post(path, contentType string, body []byte, header ...string) response {
	return serve(s.inf, "POST", path, contentType, body, header...)
}

// manage sends a request to the management API's routes.
func (s *server) manage(method, uri string) response { return serve(s.mgmt, method, uri, "", nil) }

// exposition is GET /metrics's body.
func (s *server) exposition() string {
	var b bytes.Buffer
	s.metrics.WritePrometheus(&b)
	return b.String()
}

// series returns one series' value from the exposition, parsed with Prometheus' own text
// parser; labels must match exactly the ones given. ok is false when there is none.
func (s *server) series(t testing.TB, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(s.exposition()))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if maps.Equal(got, labels) {
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// scrape is series that fails t when there is none.
func (s *server) scrape(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := s.series(t, name, labels)
	if !ok {
		t.Fatalf("%s has no series with %v", name, labels)
	}
	return v
}

// listen serves the inference API's routes on a loopback listener, for a test whose point
// is a real connection, and returns its address.
func (s *server) listen(t testing.TB) string {
	return frontendtest.Listen(t, &fasthttp.Server{Handler: s.inf.Serve})
}

// register registers through the management API and fails t unless it answers 200.
func (s *server) register(t testing.TB, query string) {
	t.Helper()
	if r := s.manage("POST", "/models?"+query); r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// described is what describe says of a version that these tests read.
type described struct {
	ForwardBatch int `json:"forwardBatch"`
}

// meanBatch is a model's mean batch size so far.
func (s *server) meanBatch(t testing.TB, model string) float64 {
	t.Helper()
	v, err := s.reg.Get(model, "")
	if err != nil {
		t.Fatal(err)
	}
	mean := v.Stats().MeanBatchSize()
	t.Logf("%s: mean batch size %.2f", model, mean)
	return mean
}

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r response, status int, typ, msgPart string) {
	t.Helper()
	frontendtest.ErrorShape(t, r.status, r.body, status, typ, msgPart)
}

// infer sends rows to a model over KServe v2 with binary tensors and returns its outputs.
func (s *server) infer(t testing.TB, model string, rows []oip.Tensor) []oip.Tensor {
	t.Helper()
	req := &oip.InferRequest{Parameters: oip.Parameters{oip.ParamBinaryDataOutput: true}}
	body, n, err := oip.EncodeRequest(req, rows, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := serveCtx(s.inf, "POST", "/v2/models/"+model+"/infer", "application/octet-stream", body, oip.HeaderContentLength, strconv.Itoa(n))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("%s: %d %s", model, ctx.Response.StatusCode(), ctx.Response.Body())
	}
	hl := -1
	if v := ctx.Response.Header.Peek(oip.HeaderContentLength); v != nil {
		hl, _ = strconv.Atoi(string(v))
	}
	_, outs, err := oip.DecodeResponse(ctx.Response.Body(), hl)
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	return outs
}

// forEach calls f(i) for every i in [0, n) from workers goroutines, so that requests arrive
// concurrently and batches form.
func forEach(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range work {
				f(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

func readZooNpy(t testing.TB, parts ...string) npy.Array {
	return zootest.ReadNpy(t, append([]string{zooDir}, parts...)...)
}

func f32s(b []byte) []float32 { return zootest.F32s(b) }

func closeTo(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, want %v (±%g)", what, i, got[i], want[i], tol)
		}
	}
}

// tensorData is the tensor handler's JSON answer's values, a batch of one.
func tensorData(t testing.TB, r response) []float64 {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out struct {
		DType string    `json:"dtype"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	}
	r.json(t, &out)
	if out.DType != "float32" || len(out.Shape) != 2 || out.Shape[0] != 1 {
		t.Fatalf("tensor response %s", r.body)
	}
	return out.Data
}

// top1 returns the first key of a TorchServe top-k object, which is in descending order.
func top1(body []byte) string { return zootest.Top1(body) }

// heldOut returns the digits held-out PNGs.
func heldOut(t testing.TB) [][]byte { imgs, _ := zootest.DigitsHeldOut(t, zooDir); return imgs }
