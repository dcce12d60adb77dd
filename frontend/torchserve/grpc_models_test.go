package torchserve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/lifecycle"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// TorchServe's gRPC inference and management services over the zoo's archives (model-store,
// made by `make archives`) on real LibTorch, each call's answer equal to REST's.

var storeDir = filepath.Join("..", "..", "model-store")

// tsServer is the TorchServe API over a registry of LibTorch and a lifecycle service that
// opens the model store's archives, as the daemon wires them.
type tsServer struct {
	reg  *core.Registry
	api  *torchserve.API
	conn *grpc.ClientConn
}

func newTSServer(t *testing.T, models ...string) *tsServer {
	t.Helper()
	s := &tsServer{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.reg = coretest.NewRegistryOf(t, libtorch.Backend{})
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(storeDir, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrModelNotFound, "%s: %v", req.URL, err)
		}
		return s.reg.Add(cmpOr(req.Name, am.Name), am.Version, req, am)
	}
	life := lifecycle.New(lifecycle.Config{Registry: s.reg, Open: open, ModelStore: storeDir, Log: log})
	t.Cleanup(life.Stop)
	life.Start(lifecycle.Startup{Models: strings.Join(models, ",")})
	life.WaitStartup()
	s.api = &torchserve.API{Registry: s.reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tspb.RegisterInferenceAPIsServiceServer(g, s.api.InferenceService())
	tspb.RegisterManagementAPIsServiceServer(g, s.api.ManagementService())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	s.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s *tsServer) rest(inference bool, method, uri, contentType string, body []byte) frontendtest.Response {
	routes := s.api.ManagementRoutes()
	if inference {
		routes = s.api.InferenceRoutes()
	}
	return frontendtest.Do(routes, frontendtest.Request{Method: method, URI: uri, Body: body, Header: map[string]string{"Content-Type": contentType}})
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t testing.TB, err error, code codes.Code, msgPart string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), msgPart) {
		t.Fatalf("got %v, want %v with a message containing %q", err, code, msgPart)
	}
}

// sameJSON says where got differs from want ("" if nowhere): the same tokens in the same
// order (object keys included), numbers within tolerance.Kernels.
func sameJSON(want, got []byte) string {
	dw, dg := json.NewDecoder(bytes.NewReader(want)), json.NewDecoder(bytes.NewReader(got))
	dw.UseNumber()
	dg.UseNumber()
	for {
		w, errW := dw.Token()
		g, errG := dg.Token()
		if errW == io.EOF && errG == io.EOF {
			return ""
		}
		if errW != nil || errG != nil {
			return fmt.Sprintf("%v, %v", errW, errG)
		}
		if wn, ok := w.(json.Number); ok {
			gn, ok := g.(json.Number)
			x, _ := wn.Float64()
			y, _ := gn.Float64()
			if !ok || math.Abs(x-y) > tolerance.Kernels {
				return fmt.Sprintf("%v, want %v", g, w)
			}
			continue
		}
		if w != g {
			return fmt.Sprintf("%v, want %v", g, w)
		}
	}
}

func maxIs(m map[string]float64, label string) bool {
	best, bestP := "", -1.0
	for k, p := range m {
		if p > bestP {
			best, bestP = k, p
		}
	}
	return best == label
}

func TestGRPCInferenceDigits(t *testing.T) {
	s := newTSServer(t, "digits=digits.mar")
	tsc := tspb.NewInferenceAPIsServiceClient(s.conn)
	ctx := callCtx(t)
	ping, err := tsc.Ping(ctx, &emptypb.Empty{})
	if rest := s.rest(true, "GET", "/ping", "", nil); err != nil || ping.GetHealth() != string(rest.Body) {
		t.Fatalf("ping %v %v, REST %s", ping, err, rest.Body)
	}
	imgs, labels := heldOut(t)
	rest := s.rest(true, "POST", "/predictions/digits", "image/png", imgs[0])
	p, err := tsc.Predictions(ctx, &tspb.PredictionsRequest{ModelName: "digits", Input: map[string][]byte{"data": imgs[0]}})
	if err != nil || sameJSON(rest.Body, p.GetPrediction()) != "" {
		t.Fatalf("prediction %s %v, REST %s: %s", p.GetPrediction(), err, rest.Body, sameJSON(rest.Body, p.GetPrediction()))
	}
	var top map[string]float64
	if json.Unmarshal(p.GetPrediction(), &top) != nil || !maxIs(top, labels[0]) {
		t.Fatalf("prediction %s, label %s", p.GetPrediction(), labels[0])
	}
	seq := "s1"
	st, err := tsc.StreamPredictions(ctx, &tspb.PredictionsRequest{ModelName: "digits", ModelVersion: "1.0", Input: map[string][]byte{"data": imgs[0]}, SequenceId: &seq})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || sameJSON(rest.Body, m.GetPrediction()) != "" || m.GetSequenceId() != "s1" {
		t.Fatalf("stream prediction %v %v", m, err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the one answer: %v", err)
	}
	// Its errors are TestGRPCPredictions's.
}

func TestGRPCManagementDigits(t *testing.T) {
	s := newTSServer(t, "digits=digits.mar")
	mc := tspb.NewManagementAPIsServiceClient(s.conn)
	ctx := callCtx(t)
	l, err := mc.ListModels(ctx, &tspb.ListModelsRequest{})
	if rest := s.rest(false, "GET", "/models", "", nil); err != nil || l.GetMsg() != string(rest.Body) {
		t.Fatalf("list %v %v, REST %s", l, err, rest.Body)
	}
	r, err := mc.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "digits_tensor.mar", ModelName: "dt2", InitialWorkers: 1, Synchronous: true})
	if err != nil || !strings.Contains(r.GetMsg(), `Model \"dt2\" Version: 1.0 registered with 1 initial workers`) {
		t.Fatalf("register %v %v", r, err)
	}
	_, err = mc.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "digits_tensor.mar", ModelName: "dt2", Synchronous: true})
	wantCode(t, err, codes.AlreadyExists, "dt2")
	r, err = mc.ScaleWorker(ctx, &tspb.ScaleWorkerRequest{ModelName: "dt2", MinWorker: 2, Synchronous: true})
	if err != nil || !strings.Contains(r.GetMsg(), "Workers scaled to 2 for model: dt2") {
		t.Fatalf("scale %v %v", r, err)
	}
	r, err = mc.DescribeModel(ctx, &tspb.DescribeModelRequest{ModelName: "dt2"})
	var desc []struct {
		ModelName string `json:"modelName"`
		Workers   []any  `json:"workers"`
	}
	if err != nil || json.Unmarshal([]byte(r.GetMsg()), &desc) != nil || desc[0].ModelName != "dt2" || len(desc[0].Workers) != 2 {
		t.Fatalf("describe %v %v", r, err)
	}
	if rest := s.rest(false, "GET", "/models/dt2", "", nil); r.GetMsg() != string(rest.Body) {
		t.Fatalf("describe %s, REST %s", r.GetMsg(), rest.Body)
	}
	if r, err = mc.SetDefault(ctx, &tspb.SetDefaultRequest{ModelName: "dt2", ModelVersion: "1.0"}); err != nil || !strings.Contains(r.GetMsg(), "Default version successfully updated") {
		t.Fatalf("set default %v %v", r, err)
	}
	_, err = mc.SetDefault(ctx, &tspb.SetDefaultRequest{ModelName: "dt2", ModelVersion: "9.0"})
	wantCode(t, err, codes.NotFound, "9.0")
	if r, err = mc.UnregisterModel(ctx, &tspb.UnregisterModelRequest{ModelName: "dt2"}); err != nil || !strings.Contains(r.GetMsg(), `Model \"dt2\" unregistered`) {
		t.Fatalf("unregister %v %v", r, err)
	}
	_, err = mc.UnregisterModel(ctx, &tspb.UnregisterModelRequest{ModelName: "dt2"})
	wantCode(t, err, codes.NotFound, "dt2")
	_, err = mc.DescribeModel(ctx, &tspb.DescribeModelRequest{ModelName: "a/b"})
	wantCode(t, err, codes.InvalidArgument, "invalid model_name")
	_, err = mc.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "nope.mar"})
	wantCode(t, err, codes.NotFound, "nope.mar")
}
