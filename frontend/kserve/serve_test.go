package kserve_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/backends/onnx"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// These tests serve real models of the zoo (models/out, made by `make models`) and the
// archives made of them (model-store, `make archives`) over real LibTorch and ONNX Runtime,
// through the front-ends the daemon wires together on its inference port (this package's
// routes, TorchServe's inference and management routes, the metrics route), without a
// daemon: a request goes to the routes in a fasthttp.RequestCtx, and gRPC clients talk to
// this package's service over a listener on 127.0.0.1.

var (
	zooDir   = filepath.Join("..", "..", "models", "out")
	storeDir = filepath.Join("..", "..", "model-store")
)

// server is the daemon's front-ends over a registry of real runtimes and a lifecycle
// service, as daemon.New wires them.
type server struct {
	t       testing.TB
	reg     *core.Registry
	life    *lifecycle.Service
	api     *kserve.API
	ts      *torchserve.API
	metrics *metrics.Metrics
	inf     []*frontend.Route // the inference port's routes
	// The ports' routers, made once: a router is shared by concurrent requests, as the
	// daemon's is (frontendtest.Do makes one a request).
	infRouter, mgmtRouter *frontend.Router
}

// serverOptions are what a test sets of the daemon's configuration.
type serverOptions struct {
	repository  string   // a Triton model repository ("": none)
	controlMode string   // lifecycle.Control* ("": none)
	loadModels  []string // explicit mode's start-up models
	pollEvery   time.Duration
	settings    archive.Settings // the server's per-model settings (Registry's Server layer)
	log         io.Writer        // the server's log (nil: discarded)
}

func newServer(t testing.TB, o serverOptions) *server {
	t.Helper()
	if _, err := os.Stat(filepath.Join(zooDir, "digits", "model.pt")); err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	s := &server{t: t, metrics: metrics.New(true)}
	var life *lifecycle.Service
	log := slog.New(slog.NewTextHandler(cmp.Or[io.Writer](o.log, io.Discard), nil))
	s.reg = core.NewRegistry(core.Options{Defaults: coretest.Defaults, Server: o.settings, Metrics: s.metrics, Log: log,
		Pending:  func(name string) bool { return life != nil && life.Pending(name) },
		Runtimes: []core.Runtime{&onnx.Backend{}, libtorch.Backend{}}})
	t.Cleanup(s.reg.Close)
	s.metrics.Statistics = func() []core.Statistics { st, _ := s.reg.Statistics("", ""); return st }
	life = lifecycle.New(lifecycle.Config{Registry: s.reg, Open: s.open, ModelStore: storeDir, ControlMode: o.controlMode, Log: log})
	t.Cleanup(life.Stop)
	s.life = life
	if o.repository != "" {
		life.OpenRepository(o.repository)
	}
	life.Start(lifecycle.Startup{LoadModels: o.loadModels, PollEvery: o.pollEvery})
	life.WaitStartup()
	s.api = &kserve.API{Registry: s.reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, LogLevel: new(slog.LevelVar)}
	s.ts = &torchserve.API{Registry: s.reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}
	s.inf = slices.Concat(s.ts.InferenceRoutes(), s.api.Routes())
	s.infRouter = frontend.NewRouter("inference", s.inf)
	s.mgmtRouter = frontend.NewRouter("management", s.ts.ManagementRoutes())
	return s
}

// open opens a registration's URL in the model store, as the daemon does for a plain name,
// or an absolute path as it is.
func (s *server) open(req core.RegisterRequest) (*core.ModelVersion, error) {
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
	return s.reg.Add(name, am.Version, req, am)
}

// response is an answer of the routes.
type response struct {
	status int
	header map[string]string
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
}

// do sends a request to the inference port's routes.
func (s *server) do(method, uri string, body []byte, header ...string) response {
	return doRouter(s.infRouter, method, uri, body, header...)
}

// doMgmt sends a request to the management port's routes.
func (s *server) doMgmt(method, uri string, body []byte) response {
	return doRouter(s.mgmtRouter, method, uri, body)
}

// doRouter serves a JSON request through router, in a fasthttp.RequestCtx as the daemon's
// server hands it; header is pairs of name and value.
func doRouter(router *frontend.Router, method, uri string, body []byte, header ...string) response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.SetContentType("application/json")
	for i := 0; i+1 < len(header); i += 2 {
		ctx.Request.Header.Set(header[i], header[i+1])
	}
	ctx.Request.SetBody(body)
	router.Serve(&ctx)
	out := response{status: ctx.Response.StatusCode(), body: append([]byte(nil), ctx.Response.Body()...), header: map[string]string{}}
	ctx.Response.Header.VisitAll(func(k, v []byte) { out.header[string(k)] = string(v) })
	return out
}

// register registers through the management API, as `curl -X POST mgmt/models?query` does.
func (s *server) register(query string) {
	s.t.Helper()
	if r := s.doMgmt("POST", "/models?"+query, nil); r.status != 200 {
		s.t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// listen serves the inference port's routes over HTTP on 127.0.0.1 and returns its URL, for
// a real client.
func (s *server) listen() string {
	s.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: s.infRouter.Serve, MaxRequestBodySize: 64 << 20}
	go srv.Serve(ln)
	s.t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// scrape is the metrics route's answer.
func (s *server) scrape() string {
	return string(doRouter(frontend.NewRouter("metrics", s.metrics.Routes()), "GET", "/metrics", nil).body)
}

// grpcClient serves this package's gRPC service on a listener and returns a client of it.
func (s *server) grpcClient() pb.GRPCInferenceServiceClient {
	t := s.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	pb.RegisterGRPCInferenceServiceServer(g, s.api.InferenceService())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

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

func near(a, b []float64, tol float64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}
