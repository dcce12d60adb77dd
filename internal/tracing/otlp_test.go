package tracing_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/tracing"
	pb "github.com/torchd/torchd/proto/inference"
	tspb "github.com/torchd/torchd/proto/torchserve"
	"github.com/valyala/fasthttp"
)

// Tracing end to end: the front-ends' REST routes and gRPC services, over a registry of the
// zoo's slow model (models/slow.py, real LibTorch), export their spans over OTLP to a real
// OpenTelemetry Collector (internal/otelcol, built from the Collector's modules: the OTLP
// receiver and the file exporter), and the test reads what the collector wrote. (That the
// daemon's access log names each request's trace id is the daemon's wiring.)

var (
	collectorOnce sync.Once
	collectorBin  = filepath.Join("..", "..", "build", "otelcol")
	collectorErr  error
)

// buildCollector builds internal/otelcol, its own Go module, into build/otelcol once per run.
func buildCollector(t testing.TB) string {
	t.Helper()
	collectorOnce.Do(func() {
		abs, err := filepath.Abs(collectorBin)
		if err != nil {
			collectorErr = err
			return
		}
		cmd := exec.Command("nice", "go", "build", "-o", abs, ".")
		cmd.Dir = filepath.Join("..", "otelcol")
		if out, err := cmd.CombinedOutput(); err != nil {
			collectorErr = fmt.Errorf("building the collector: %v\n%s", err, out)
		}
		collectorBin = abs
	})
	if collectorErr != nil {
		t.Fatal(collectorErr)
	}
	return collectorBin
}

// collector is a running collector: its OTLP gRPC and HTTP addresses and the file it writes.
type collector struct {
	grpc, http, out string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := buildCollector(t)
	dir := t.TempDir()
	c := &collector{grpc: "127.0.0.1:" + freePort(t), http: "127.0.0.1:" + freePort(t), out: filepath.Join(dir, "spans.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, c.grpc, c.http, c.out)
	path := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := net.Dial("tcp", c.http)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("the collector exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not listen within 30 s:\n%s", log.String())
		}
	}
	return c
}

// otlpSpan is a span as the collector's file exporter writes it (OTLP/JSON).
type otlpSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Attributes   []struct {
		Key   string         `json:"key"`
		Value map[string]any `json:"value"`
	} `json:"attributes"`
	Links []struct {
		TraceID string `json:"traceId"`
		SpanID  string `json:"spanId"`
	} `json:"links"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	service string
}

const (
	kindServer  = 2
	statusError = 2
)

// attr is an attribute's value as text (OTLP/JSON writes integers as strings).
func (s otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			for _, v := range a.Value {
				return fmt.Sprint(v)
			}
		}
	}
	return ""
}

// spans reads every span the collector has written so far.
func (c *collector) spans(t testing.TB) []otlpSpan {
	t.Helper()
	f, err := os.Open(c.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []otlpSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []struct {
						Key   string         `json:"key"`
						Value map[string]any `json:"value"`
					} `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			continue // a line still being written
		}
		for _, rs := range line.ResourceSpans {
			service := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					service = fmt.Sprint(a.Value["stringValue"])
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.service = service
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// waitSpans polls the collector's output until done accepts the spans (30 s at most).
func (c *collector) waitSpans(t testing.TB, what string, done func([]otlpSpan) bool) []otlpSpan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans := c.spans(t)
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, sp := range spans {
				names = append(names, sp.Name+"/"+sp.TraceID[24:])
			}
			t.Fatalf("the collector did not receive %s within 30 s; it has %d spans: %v", what, len(spans), names)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caller is a client's own span, the parent it propagates to torchd.
type caller struct{ trace, span string }

func newCaller(i int) caller {
	return caller{trace: fmt.Sprintf("%032x", 0x7ace0000+i), span: fmt.Sprintf("%016x", 0xca11e0+i)}
}

func (c caller) traceparent() string { return "00-" + c.trace + "-" + c.span + "-01" }

// serverSpan is torchd's request span under c.
func serverSpan(spans []otlpSpan, c caller) (otlpSpan, bool) {
	for _, s := range spans {
		if s.TraceID == c.trace && s.ParentSpanID == c.span && s.Kind == kindServer {
			return s, true
		}
	}
	return otlpSpan{}, false
}

func children(spans []otlpSpan, parent otlpSpan) map[string]otlpSpan {
	out := map[string]otlpSpan{}
	for _, s := range spans {
		if s.TraceID == parent.TraceID && s.ParentSpanID == parent.SpanID {
			out[s.Name] = s
		}
	}
	return out
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func grpcWith(t testing.TB, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(callCtx(t), kv...)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// traced is the front-ends with a tracer: TorchServe's and KServe v2's REST routes on one
// listener, their gRPC inference services, with the tracing interceptor, on another.
type traced struct {
	reg       *core.Registry
	inf, grpc string
	log       *syncBuffer
}

type syncBuffer = coretest.LogBuffer

func (s *traced) Log() string { return s.log.String() }

func startTraced(t *testing.T, cfg tracing.Config) *traced {
	t.Helper()
	s := &traced{log: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(s.log, nil))
	tr := tracing.New(cfg, log)
	if tr != nil {
		t.Cleanup(func() { tr.Shutdown(context.Background()) })
	}
	s.reg = coretest.NewRegistryOf(t, libtorch.Backend{})
	ready := func() bool { return true }
	ts := &torchserve.API{Registry: s.reg, Ready: ready, Tracer: tr, MaxRequestSize: 6553500, Log: log}
	ks := &kserve.API{Registry: s.reg, Ready: ready, Tracer: tr, MaxRequestSize: 6553500}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// EndTraces ends each REST request's span with its status, as the daemon wraps its
	// inference API.
	srv := &fasthttp.Server{Handler: frontend.EndTraces(tr, frontend.NewRouter("inference", append(ts.InferenceRoutes(), ks.Routes()...)).Serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	s.inf = "http://" + ln.Addr().String()
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if tr != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(frontend.TraceUnary(tr)))
	}
	g := grpc.NewServer(opts...)
	pb.RegisterGRPCInferenceServiceServer(g, ks.InferenceService())
	tspb.RegisterInferenceAPIsServiceServer(g, ts.InferenceService())
	go g.Serve(gln)
	t.Cleanup(g.Stop)
	s.grpc = gln.Addr().String()
	return s
}

// addSlow serves the zoo's slow model as slow 1.0 with its archive's batching (4, 5 ms) and
// one worker.
func (s *traced) addSlow(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	model, err := filepath.Abs(filepath.Join("..", "..", "models", "out", "slow", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(model, filepath.Join(dir, "model.pt")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join("..", "..", "models", "configs", "slow.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), append([]byte("serialized_file = \"model.pt\"\n"), cfg...), 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.reg.Add("slow", "1.0", core.RegisterRequest{Name: "slow", Synchronous: true}, am); err != nil {
		t.Fatal(err)
	}
}

func (s *traced) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type response struct {
	status int
	header http.Header
	body   []byte
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

func (s *traced) do(t testing.TB, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return response{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

// occupySlow keeps the slow model's only worker busy for about ms milliseconds: it sends
// that request and returns once the worker is busy with it; its answer comes on the channel.
func (s *traced) occupySlow(t *testing.T, ms int) <-chan response {
	v, err := s.reg.Get("slow", "")
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan response, 1)
	go func() {
		busy <- s.do(t, must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(fmt.Sprintf("[[%d, 0]]", ms))))
	}()
	coretest.WaitFor(t, "the slow request to reach the worker", func() bool {
		for _, w := range v.Workers() {
			if w.Status == "BUSY" {
				return true
			}
		}
		return false
	})
	return busy
}

func slowIn(ms float32) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "slow", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "input__0", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{ms, 0}}}}}
}

// TestTracingOTLP sends REST and gRPC requests that carry a trace context (W3C and both B3
// forms) to torchd, which exports to a collector over OTLP/HTTP, and checks what the
// collector received: each request's span under its caller's, its stages, the batch span of
// a batch of four linked to and from its members, and the statuses of a failed and of timed-
// out requests. Health, metrics and metadata calls leave no span.
func TestTracingOTLP(t *testing.T) {
	col := startCollector(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // the SDK's batch span processor reads it
	s := startTraced(t, tracing.Config{Exporter: "otlp", Endpoint: "http://" + col.http + "/v1/traces", Protocol: "http/protobuf",
		ServiceName: "torchd-e2e", Sampler: "parentbased_traceidratio", SamplerArg: "1.0", Propagators: "tracecontext,baggage,b3"})
	s.addSlow(t)
	oip := pb.NewGRPCInferenceServiceClient(s.dial(t))

	// A batch of four: the only worker is busy while two REST and two gRPC requests queue.
	busy := s.occupySlow(t, 3000)
	members := []caller{newCaller(1), newCaller(2), newCaller(3), newCaller(4)}
	var wg sync.WaitGroup
	var restA response
	var grpcHeader metadata.MD
	wg.Add(4)
	go func() {
		defer wg.Done()
		req := must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 1]]`))
		req.Header.Set("traceparent", members[0].traceparent())
		restA = s.do(t, req)
	}()
	go func() {
		defer wg.Done()
		req := must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 2]]`))
		req.Header.Set("b3", members[1].trace+"-"+members[1].span+"-1")
		if r := s.do(t, req); r.status != 200 {
			t.Errorf("B3 REST request: %d %s", r.status, r.body)
		}
	}()
	go func() {
		defer wg.Done()
		if _, err := oip.ModelInfer(grpcWith(t, "traceparent", members[2].traceparent()), slowIn(1), grpc.Header(&grpcHeader)); err != nil {
			t.Errorf("gRPC request: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		ctx := grpcWith(t, "x-b3-traceid", members[3].trace, "x-b3-spanid", members[3].span, "x-b3-sampled", "1")
		if _, err := oip.ModelInfer(ctx, slowIn(1)); err != nil {
			t.Errorf("B3 gRPC request: %v", err)
		}
	}()
	wg.Wait()
	if r := <-busy; r.status != 200 || restA.status != 200 {
		t.Fatalf("statuses %d, %d: %s", r.status, restA.status, restA.body)
	}

	// A failed request (the model raises on a negative input) and timed-out ones.
	failed, restLate, grpcLate := newCaller(5), newCaller(6), newCaller(7)
	req := must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, -1]]`))
	req.Header.Set("traceparent", failed.traceparent())
	if r := s.do(t, req); r.status != 500 {
		t.Fatalf("negative input: %d %s", r.status, r.body)
	}
	busy = s.occupySlow(t, 1500)
	req = must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`))
	req.Header.Set("traceparent", restLate.traceparent())
	req.Header.Set("X-Request-Timeout", "100")
	late := s.do(t, req)
	if late.status != 504 {
		t.Fatalf("timed-out request: %d %s", late.status, late.body)
	}
	ctx, cancel := context.WithTimeout(grpcWith(t, "traceparent", grpcLate.traceparent()), 300*time.Millisecond)
	_, err := oip.ModelInfer(ctx, slowIn(1))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("timed-out gRPC request: %v", err)
	}
	<-busy

	// The other front-ends: KServe v2 over REST, TorchServe's gRPC.
	v2, tsGRPC := newCaller(9), newCaller(10)
	req = must(t, "POST", s.inf+"/v2/models/slow/infer", "application/json",
		[]byte(`{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 2], "data": [1, 0]}]}`))
	req.Header.Set("traceparent", v2.traceparent())
	if r := s.do(t, req); r.status != 200 {
		t.Fatalf("v2 infer: %d %s", r.status, r.body)
	}
	ts := tspb.NewInferenceAPIsServiceClient(s.dial(t))
	_, err = ts.Predictions(grpcWith(t, "traceparent", tsGRPC.traceparent()), &tspb.PredictionsRequest{ModelName: "nope", Input: map[string][]byte{"data": []byte("[[1, 0]]")}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("TorchServe gRPC Predictions of an unknown model: %v", err)
	}

	// Neither traced: health, metrics, metadata.
	s.do(t, must(t, "GET", s.inf+"/ping", "", nil))
	if _, err := oip.ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := oip.ModelMetadata(callCtx(t), &pb.ModelMetadataRequest{Name: "slow"}); err != nil {
		t.Fatal(err)
	}

	all := append(append([]caller{}, members...), failed, restLate, grpcLate, v2, tsGRPC)
	spans := col.waitSpans(t, "every request's span", func(spans []otlpSpan) bool {
		for _, c := range all {
			if _, ok := serverSpan(spans, c); !ok {
				return false
			}
		}
		return true
	})

	// Each request's span is its caller's child, names its model, and has its stages.
	var batchID string
	reqIDs := map[string]bool{}
	for i, c := range members {
		sp, _ := serverSpan(spans, c)
		if sp.service != "torchd-e2e" || sp.attr("torchd.model") != "slow" || sp.attr("torchd.model.version") != "1.0" || sp.Status.Code == statusError {
			t.Errorf("member %d: span %s service %q model %q version %q status %+v", i, sp.Name, sp.service, sp.attr("torchd.model"), sp.attr("torchd.model.version"), sp.Status)
		}
		if i < 2 && (sp.attr("http.response.status_code") != "200" || sp.attr("torchd.api") != "torchserve") {
			t.Errorf("REST member %d: status %q api %q", i, sp.attr("http.response.status_code"), sp.attr("torchd.api"))
		}
		if i >= 2 && (sp.attr("rpc.grpc.status_code") != "0" || sp.Name != "inference.GRPCInferenceService/ModelInfer") {
			t.Errorf("gRPC member %d: %s code %q", i, sp.Name, sp.attr("rpc.grpc.status_code"))
		}
		kids := children(spans, sp)
		for _, stage := range []string{"preprocess", "queue", "postprocess"} {
			if _, ok := kids[stage]; !ok {
				t.Errorf("member %d (%s) has no %s span; it has %v", i, sp.Name, stage, slices.Collect(maps.Keys(kids)))
			}
		}
		if len(sp.Links) != 1 || sp.attr("torchd.batch.size") != "4" {
			t.Fatalf("member %d links %d spans, batch size %q; want its batch of 4", i, len(sp.Links), sp.attr("torchd.batch.size"))
		}
		if batchID != "" && sp.Links[0].SpanID != batchID {
			t.Fatalf("the members rode in different batches (%s, %s): the worker was not busy long enough", batchID, sp.Links[0].SpanID)
		}
		batchID = sp.Links[0].SpanID
		reqIDs[sp.SpanID] = true
	}
	if restA.header.Get("traceresponse") == "" || !strings.Contains(restA.header.Get("traceresponse"), members[0].trace) {
		t.Errorf("REST traceresponse %q, want trace %s", restA.header.Get("traceresponse"), members[0].trace)
	}
	if h := grpcHeader.Get("traceresponse"); len(h) != 1 || !strings.Contains(h[0], members[2].trace) {
		t.Errorf("gRPC traceresponse %q, want trace %s", h, members[2].trace)
	}

	// The batch span links back to all four.
	var batch otlpSpan
	for _, sp := range spans {
		if sp.SpanID == batchID {
			batch = sp
		}
	}
	if batch.Name != "batch" || batch.ParentSpanID != "" || batch.attr("torchd.batch.size") != "4" || batch.attr("torchd.device") != "cpu" {
		t.Fatalf("batch span %+v", batch)
	}
	for _, l := range batch.Links {
		delete(reqIDs, l.SpanID)
	}
	if len(batch.Links) != 4 || len(reqIDs) != 0 {
		t.Fatalf("the batch links %d spans and misses %v", len(batch.Links), reqIDs)
	}
	if _, ok := children(spans, batch)["forward"]; !ok {
		t.Errorf("the batch span has no forward span")
	}

	// Statuses: the model's failure, and both timeouts, fail their spans.
	sp, _ := serverSpan(spans, failed)
	if sp.Status.Code != statusError || sp.attr("http.response.status_code") != "500" || sp.attr("error.type") != "inference" || !strings.Contains(sp.Status.Message, "negative input") {
		t.Errorf("failed request's span: status %+v, code %q, error.type %q", sp.Status, sp.attr("http.response.status_code"), sp.attr("error.type"))
	}
	sp, _ = serverSpan(spans, restLate)
	if sp.Status.Code != statusError || sp.attr("http.response.status_code") != "504" || sp.attr("error.type") != "deadline" {
		t.Errorf("timed-out REST request's span: status %+v, code %q, error.type %q", sp.Status, sp.attr("http.response.status_code"), sp.attr("error.type"))
	}
	if q := children(spans, sp)["queue"]; q.Status.Code != statusError {
		t.Errorf("timed-out REST request's queue span: status %+v", q.Status)
	}
	sp, _ = serverSpan(spans, grpcLate)
	if sp.Status.Code != statusError || sp.attr("rpc.grpc.status_code") != fmt.Sprint(int(codes.DeadlineExceeded)) || sp.attr("error.type") != "deadline" {
		t.Errorf("timed-out gRPC request's span: status %+v, code %q, error.type %q", sp.Status, sp.attr("rpc.grpc.status_code"), sp.attr("error.type"))
	}

	sp, _ = serverSpan(spans, v2)
	if kids := children(spans, sp); sp.Name != "POST /v2/models/{model_name}/infer" || sp.attr("torchd.api") != "kserve_v2" || len(kids) != 3 {
		t.Errorf("v2 span %s api %q stages %v", sp.Name, sp.attr("torchd.api"), slices.Collect(maps.Keys(kids)))
	}
	sp, _ = serverSpan(spans, tsGRPC)
	if sp.attr("torchd.api") != "torchserve_grpc" || sp.attr("rpc.grpc.status_code") != fmt.Sprint(int(codes.NotFound)) || sp.attr("error.type") != "model_not_found" || sp.Status.Code == statusError {
		t.Errorf("TorchServe gRPC span %s api %q code %q error.type %q status %+v", sp.Name, sp.attr("torchd.api"), sp.attr("rpc.grpc.status_code"), sp.attr("error.type"), sp.Status)
	}

	for _, sp := range spans {
		if sp.Kind == kindServer && (sp.attr("url.path") == "/ping" || strings.Contains(sp.Name, "ServerLive") || strings.Contains(sp.Name, "ModelMetadata")) {
			t.Errorf("%s was traced", sp.Name)
		}
	}
}

// TestTracingOTLPGRPC exports over OTLP/gRPC instead, and a bad setting only warns.
func TestTracingOTLPGRPC(t *testing.T) {
	col := startCollector(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	s := startTraced(t, tracing.Config{Exporter: "otlp", Endpoint: "http://" + col.grpc, Protocol: "grpc",
		ServiceName: "torchd", Sampler: "sometimes", SamplerArg: "1.0", Propagators: "tracecontext,baggage,b3"})
	c := newCaller(8)
	req := must(t, "POST", s.inf+"/predictions/nosuch", "application/json", []byte(`[[1, 0]]`))
	req.Header.Set("traceparent", c.traceparent())
	if r := s.do(t, req); r.status != 404 {
		t.Fatalf("status %d", r.status)
	}
	spans := col.waitSpans(t, "the request's span", func(spans []otlpSpan) bool { _, ok := serverSpan(spans, c); return ok })
	sp, _ := serverSpan(spans, c)
	if sp.attr("http.response.status_code") != "404" || sp.attr("error.type") != "model_not_found" || sp.Status.Code == statusError {
		t.Errorf("span %s: code %q error.type %q status %+v", sp.Name, sp.attr("http.response.status_code"), sp.attr("error.type"), sp.Status)
	}
	if !strings.Contains(s.Log(), "trace_sampler (OTEL_TRACES_SAMPLER) must be") {
		t.Errorf("no warning of the bad sampler:\n%s", s.Log())
	}
}
