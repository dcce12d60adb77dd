package torchserve

import (
	"bytes"
	"compress/gzip"
	"context"
	"github.com/torchd/torchd/lifecycle"
	"io"
	"log/slog"
	"mime/multipart"
	"net/textproto"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// TorchServe's inference API is tested as a codec over a registry whose models are package
// coretest's runtime double, which doubles each float32 of its input: "m" (versions "1" and
// "2") and "n" take float32 rows of two through the tensor handler, whose JSON answer is the
// response. Answers are compared with testdata/*.golden (`go test -update` rewrites them);
// what real models and handlers compute is the daemon's end-to-end tests'.

type fixture struct {
	rt    *coretest.Runtime
	r     *core.Registry
	api   *API
	ready bool
	// open is what the lifecycle service opens a registration's archive with (manage sets it).
	open func(core.RegisterRequest) (*core.ModelVersion, error)
}

func newFixture(t *testing.T, config string) *fixture {
	f := &fixture{rt: &coretest.Runtime{}, ready: true}
	f.r = coretest.NewRegistry(t, f.rt)
	coretest.Add(t, f.r, "m", coretest.Archive(t, "tensor", config+coretest.XConfig, nil))
	if _, err := f.r.Add("m", "2", core.RegisterRequest{Name: "m", Synchronous: true}, coretest.Archive(t, "tensor", config+coretest.XConfig, nil)); err != nil {
		t.Fatal(err)
	}
	coretest.Add(t, f.r, "n", coretest.Archive(t, "tensor", config+coretest.XConfig, nil))
	f.api = &API{Registry: f.r, Ready: func() bool { return f.ready }, MaxRequestSize: 1 << 16, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Life: lifecycle.New(lifecycle.Config{Registry: f.r, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Open: func(req core.RegisterRequest) (*core.ModelVersion, error) {
				if f.open == nil {
					return nil, core.Errorf(core.ErrBadModel, "no archive can be opened here")
				}
				return f.open(req)
			}})}
	return f
}

func (f *fixture) do(method, uri, contentType string, body []byte, header map[string]string) frontendtest.Response {
	h := map[string]string{"Content-Type": contentType}
	for k, v := range header {
		h[k] = v
	}
	return frontendtest.Do(f.api.InferenceRoutes(), frontendtest.Request{Method: method, URI: uri, Body: body, Header: h})
}

// jsonFiles is a multipart body of JSON files, as curl -F sends them.
func jsonFiles(t *testing.T, files ...string) (string, []byte) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.SetBoundary("torchd-test-boundary")
	for _, data := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="data"; filename="x.json"`)
		h.Set("Content-Type", "application/json")
		fw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(data))
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// Predictions: the body, or each file of a multipart body, goes through the handler; every
// route that predicts answers as /predictions does.
func TestPredictions(t *testing.T) {
	f := newFixture(t, "")
	mpType, mp := jsonFiles(t, `[[1, 2]]`)
	for _, c := range []struct {
		name, method, uri, contentType, body string
	}{
		{"ping", "GET", "/ping", "", ""},
		{"predict", "POST", "/predictions/m", "application/json", `[[1.5, -2], [3.25, 4]]`},
		{"predict_put", "PUT", "/predictions/m", "application/json", `[[1.5, -2]]`},
		{"predict_version_2", "POST", "/predictions/m/2", "application/json", `[[1.5, -2]]`},
		{"predict_data_and_shape", "POST", "/predictions/m", "application/json", `{"data": [1, 2, 3, 4], "shape": [2, 2]}`},
		{"predict_multipart_file", "POST", "/predictions/m", mpType, string(mp)},
		{"invoke", "POST", "/models/m/invoke", "application/json", `[[1, 2]]`},
		{"invocations_named", "POST", "/invocations?model_name=n", "application/json", `[[1, 2]]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			frontendtest.Golden(t, "predictions/"+c.name, f.do(c.method, c.uri, c.contentType, []byte(c.body), nil))
		})
	}
	f.ready = false
	frontendtest.Golden(t, "predictions/ping_unhealthy", f.do("GET", "/ping", "", nil, nil))
}

// Every error of the inference API in TorchServe's shape, {"code", "type", "message"}, and
// the model goes on serving.
func TestPredictionErrors(t *testing.T) {
	f := newFixture(t, "")
	mpType, mp := jsonFiles(t, `[[1, 2]]`, `[[3, 4]]`)
	for _, c := range []struct {
		name, method, uri, contentType, body string
		header                               map[string]string
	}{
		{"multipart_two_files_to_a_handler_of_one", "POST", "/predictions/m", mpType, string(mp), nil},
		{"unknown_model", "POST", "/predictions/nope", "application/json", `[[1, 2]]`, nil},
		{"unknown_version", "POST", "/predictions/m/9.9", "application/json", `[[1, 2]]`, nil},
		{"unknown_route", "GET", "/nothing/here", "", "", nil},
		{"method_not_allowed", "DELETE", "/ping", "", "", nil},
		{"empty_body", "POST", "/predictions/m", "application/json", "", nil},
		{"not_json", "POST", "/predictions/m", "application/json", `[[1, 2`, nil},
		{"wrong_shape", "POST", "/predictions/m", "application/json", `[[1, 2, 3]]`, nil},
		{"data_short_of_shape", "POST", "/predictions/m", "application/json", `{"data": [1, 2], "shape": [5]}`, nil},
		{"multipart_without_files", "POST", "/predictions/m", "multipart/form-data; boundary=x", "--x--\r\n", nil},
		{"multipart_broken", "POST", "/predictions/m", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\n[[1, 2]]", nil},
		{"request_timeout_header_malformed", "POST", "/predictions/m", "application/json", `[[1, 2]]`, map[string]string{"X-Request-Timeout": "soon"}},
		{"request_timeout_header_negative", "POST", "/predictions/m", "application/json", `[[1, 2]]`, map[string]string{"X-Request-Timeout": "-5"}},
		{"explanation_unsupported", "POST", "/explanations/m", "application/json", `[[1, 2]]`, nil},
		{"invocations_without_a_model", "POST", "/invocations", "application/json", `[[1, 2]]`, nil},
		{"gzip_not_gzip", "POST", "/predictions/m", "application/json", `[[1, 2]]`, map[string]string{"Content-Encoding": "gzip"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			frontendtest.Golden(t, "errors/"+c.name, f.do(c.method, c.uri, c.contentType, []byte(c.body), c.header))
		})
	}
	// A body over max_request_size once decompressed (the server refuses it as sent).
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte(" "), 1<<17))
	zw.Close()
	frontendtest.Golden(t, "errors/gzip_over_max_request_size", f.do("POST", "/predictions/m", "application/json", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"}))
	if r := f.do("POST", "/predictions/m", "application/json", []byte(`[[1, 2]]`), nil); r.Status != 200 {
		t.Errorf("after the errors: %d %s", r.Status, r.Body)
	}
}

// The core's refusals in TorchServe's shape: a full queue and no worker are 503 with
// Retry-After, a passed deadline 504, a failed model 500. The worker is held, so each state is
// reached whatever the machine's speed.
func TestPredictionServerErrors(t *testing.T) {
	f := newFixture(t, "job_queue_size = 1\n")
	m := f.rt.Model("m", "1")
	v, err := f.r.Get("m", "1")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan frontendtest.Response, 2)
	send := func() {
		go func() {
			for {
				r := f.do("POST", "/predictions/m", "application/json", []byte(`[[1, 2]]`), nil)
				// A request that arrives as the worker takes the one before it may be refused for a
				// moment: that one's queue place is given back just after the worker has it.
				if r.Status == 503 && v.Pending() == 0 {
					continue
				}
				done <- r
				return
			}
		}()
	}
	held, release := m.Hold()
	send()
	<-held
	send()
	coretest.WaitFor(t, "a request queued", func() bool { return v.Pending() == 1 })
	frontendtest.Golden(t, "errors/queue_full", f.do("POST", "/predictions/m", "application/json", []byte(`[[1, 2]]`), nil))
	release()
	for range 2 {
		if r := <-done; r.Status != 200 {
			t.Errorf("a queued request: %d %s", r.Status, r.Body)
		}
	}
	// The rest on a queue of the default size: a request past its deadline keeps its place
	// until the worker reaches it, which a queue of one would show as full.
	f = newFixture(t, "")
	m = f.rt.Model("m", "1")
	if v, err = f.r.Get("m", "1"); err != nil {
		t.Fatal(err)
	}

	held, release = m.Hold()
	send()
	<-held
	frontendtest.Golden(t, "errors/deadline", f.do("POST", "/predictions/m", "application/json", []byte(`[[7, 7]]`), map[string]string{"X-Request-Timeout": "20"}))
	release()
	<-done
	// The request past its deadline holds its queue place until the worker drops it.
	coretest.WaitFor(t, "the expired request dropped", func() bool { return v.Pending() == 0 })
	// Within its deadline, a request is answered; the one past it never reached the model.
	if r := f.do("POST", "/predictions/m", "application/json", []byte(`[[1, 2]]`), map[string]string{"X-Request-Timeout": "5s"}); r.Status != 200 {
		t.Errorf("a request within its deadline: %d %s", r.Status, r.Body)
	}
	for _, in := range m.LastInput() {
		if bytes.Equal(in.Data, coretest.Floats([]int64{1, 2}, 7, 7).Data) {
			t.Error("the request past its deadline reached the model")
		}
	}

	m.FailOn(13)
	frontendtest.Golden(t, "errors/model_fails", f.do("POST", "/predictions/m", "application/json", []byte(`[[13, 13]]`), nil))
	m.FailOn(0)

	if _, err := f.r.Scale("m", "1", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	frontendtest.Golden(t, "errors/no_worker", f.do("POST", "/predictions/m", "application/json", []byte(`[[1, 2]]`), nil))
}

// A model still loading is a 503 with Retry-After, not the 404 of a model that does not exist.
func TestPredictionWhileLoading(t *testing.T) {
	f := newFixture(t, "")
	loading, release := f.rt.HoldLoads()
	defer release()
	added := make(chan error, 1)
	go func() {
		_, err := f.r.Add("later", "1", core.RegisterRequest{Name: "later", Synchronous: true}, coretest.Archive(t, "tensor", coretest.XConfig, nil))
		added <- err
	}()
	<-loading
	frontendtest.Golden(t, "errors/loading", f.do("POST", "/predictions/later", "application/json", []byte(`[[1, 2]]`), nil))
	release()
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if r := f.do("POST", "/predictions/later", "application/json", []byte(`[[1, 2]]`), nil); r.Status != 200 {
		t.Errorf("once loaded: %d %s", r.Status, r.Body)
	}
}

// TorchServe's gRPC inference API: Ping answers /ping's body, Predictions the body
// /predictions answers, errors their gRPC codes.
func TestGRPCPredictions(t *testing.T) {
	f := newFixture(t, "")
	svc := f.api.InferenceService()
	ctx := context.Background()
	ping, err := svc.Ping(ctx, &emptypb.Empty{})
	if rest := f.do("GET", "/ping", "", nil, nil); err != nil || ping.GetHealth() != string(rest.Body) {
		t.Errorf("ping %v %v, REST %s", ping, err, rest.Body)
	}
	rest := f.do("POST", "/predictions/m", "application/json", []byte(`[[1.5, -2]]`), nil)
	p, err := svc.Predictions(ctx, &tspb.PredictionsRequest{ModelName: "m", ModelVersion: "2", Input: map[string][]byte{"data": []byte(`[[1.5, -2]]`)}})
	if err != nil || !bytes.Equal(p.GetPrediction(), rest.Body) {
		t.Errorf("prediction %s %v, want REST's %s", p.GetPrediction(), err, rest.Body)
	}
	for _, c := range []struct {
		name string
		req  *tspb.PredictionsRequest
		code codes.Code
		msg  string
	}{
		{"unknown model", &tspb.PredictionsRequest{ModelName: "nope", Input: map[string][]byte{"data": []byte(`[[1, 2]]`)}}, codes.NotFound, "Model not found: nope"},
		{"unknown version", &tspb.PredictionsRequest{ModelName: "m", ModelVersion: "9", Input: map[string][]byte{"data": []byte(`[[1, 2]]`)}}, codes.NotFound, "Model version: 9 does not exist"},
		{"no input", &tspb.PredictionsRequest{ModelName: "m"}, codes.InvalidArgument, "the request has no input"},
		{"bad input", &tspb.PredictionsRequest{ModelName: "m", Input: map[string][]byte{"data": []byte(`[[1, 2, 3]]`)}}, codes.InvalidArgument, `must have shape [-1 2]`},
	} {
		_, err := svc.Predictions(ctx, c.req)
		if st, _ := status.FromError(err); st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("%s: %v, want %v with %q", c.name, err, c.code, c.msg)
		}
	}
}
