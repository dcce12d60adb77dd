package vision_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http" // a real client over a listener: the images cross a connection, as a user's do
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The zoo's vision models (models/out, their archives in model-store: `make models
// archives`) on LibTorch behind this package's handlers, served by the front-ends as the
// daemon wires them (TorchServe's REST and gRPC APIs, KServe v2 REST and gRPC), each on a
// listener of 127.0.0.1, and compared with Python's answers.

var (
	zooDir   = filepath.Join("..", "..", "models", "out")
	storeDir = filepath.Join("..", "..", "model-store")
)

// server is the front-ends over a registry of LibTorch: the inference and management
// routes over HTTP, the Open Inference Protocol's and TorchServe's inference gRPC services.
type server struct {
	inf, mgmt     string // http://host:port
	grpc, grpcInf string // host:port
}

// startServer serves the model store's archives; a registration's absolute path is opened
// as it is.
func startServer(t testing.TB) *server {
	t.Helper()
	reg := coretest.NewRegistryOf(t, libtorch.Backend{})
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		path := req.URL
		if !filepath.IsAbs(path) {
			path = filepath.Join(storeDir, path)
		}
		am, err := archive.Open(path)
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
	life := lifecycle.New(lifecycle.Config{Registry: reg, Open: open, ModelStore: storeDir, Log: log})
	t.Cleanup(life.Stop)
	ts := &torchserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}
	ks := &kserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, LogLevel: new(slog.LevelVar)}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	s := &server{}
	for _, h := range []struct {
		url    *string
		routes []*frontend.Route
	}{{&s.inf, append(ts.InferenceRoutes(), ks.Routes()...)}, {&s.mgmt, ts.ManagementRoutes()}} {
		ln := listen()
		srv := &fasthttp.Server{Handler: frontend.NewRouter("inference", h.routes).Serve, MaxRequestBodySize: 6553500}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Shutdown() })
		*h.url = "http://" + ln.Addr().String()
	}
	for _, g := range []struct {
		addr     *string
		register func(*grpc.Server)
	}{
		{&s.grpc, func(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, ks.InferenceService()) }},
		{&s.grpcInf, func(g *grpc.Server) { tspb.RegisterInferenceAPIsServiceServer(g, ts.InferenceService()) }},
	} {
		ln := listen()
		srv := grpc.NewServer()
		g.register(srv)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		*g.addr = ln.Addr().String()
	}
	return s
}

// gate skips a gate of forwards under -race: make test runs it plainly (SERVED_GATES).
func gate(t testing.TB) {
	t.Helper()
	if raceBuild {
		t.Skip("a gate of forwards, not of Go's concurrency: it runs without -race")
	}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
}

func do(t testing.TB, method, url, contentType string, body []byte) response {
	t.Helper()
	return send(t, must(t, method, url, contentType, body))
}

func must(t testing.TB, method, url, contentType string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

func send(t testing.TB, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (s *server) register(t testing.TB, query string) {
	t.Helper()
	if r := do(t, "POST", s.mgmt+"/models?"+query, "", nil); r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// batching returns a model's dispatched batches and mean batch size, from describe.
func (s *server) batching(t testing.TB, model string) (batches int64, mean float64) {
	t.Helper()
	var desc []struct {
		Batching struct {
			Batches       int64   `json:"batches"`
			MeanBatchSize float64 `json:"meanBatchSize"`
		} `json:"batching"`
	}
	do(t, "GET", s.mgmt+"/models/"+model, "", nil).json(t, &desc)
	t.Logf("%s: batches %d, mean batch size %.2f", model, desc[0].Batching.Batches, desc[0].Batching.MeanBatchSize)
	return desc[0].Batching.Batches, desc[0].Batching.MeanBatchSize
}

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r response, status int, typ, msgPart string) {
	t.Helper()
	frontendtest.ErrorShape(t, r.status, r.body, status, typ, msgPart)
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

func dial(t testing.TB, addr string) *grpc.ClientConn { return frontendtest.DialGRPC(t, addr) }

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err is a gRPC status with code and a message containing msgPart.
func wantCode(t testing.TB, err error, code codes.Code, msgPart string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), msgPart) {
		t.Fatalf("got %v, want %v with a message containing %q", err, code, msgPart)
	}
}
