package daemon

import (
	"context"
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/handlers"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// TorchServe's gRPC APIs. Inference runs the same handler path as POST /predictions
// (served → handle); management runs the REST management API's own handlers in-process, so
// that each call answers what REST answers: its JSON body as msg, or its error's message
// under the gRPC status for its HTTP status.

// tsInferenceService is TorchServe's InferenceAPIsService. StreamPredictions2 (sequences of
// a stateful model) answers UNIMPLEMENTED.
type tsInferenceService struct {
	tspb.UnimplementedInferenceAPIsServiceServer
	d *Daemon
}

// Ping answers the body of GET /ping, {"status": "Healthy"} or "Unhealthy", as TorchServe.
func (s *tsInferenceService) Ping(context.Context, *emptypb.Empty) (*tspb.TorchServeHealthResponse, error) {
	_, body := runREST(s.d.ping, "GET", "/ping", nil)
	return &tspb.TorchServeHealthResponse{Health: string(body)}, nil
}

func (s *tsInferenceService) Predictions(ctx context.Context, r *tspb.PredictionsRequest) (*tspb.PredictionResponse, error) {
	return s.d.tsPredict(ctx, r, nil)
}

// tsPredict serves a PredictionsRequest as POST /predictions serves a multipart request: each
// entry of input is one payload, in name order, through the model's handler. stream, when
// set, takes a streaming handler's parts (StreamPredictions, stream.go).
func (d *Daemon) tsPredict(ctx context.Context, r *tspb.PredictionsRequest, stream func(handlers.Response)) (*tspb.PredictionResponse, error) {
	c := d.grpcCall(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	var resp *handlers.Response
	var fail *APIError
	err := d.served(c, r.GetModelName(), r.GetModelVersion(), func(v *ModelVersion, arrived time.Time) outcome {
		var code outcome
		resp, code, fail = d.handle(c, v, arrived, func() (*handlers.Request, *APIError) {
			if len(r.GetInput()) == 0 {
				return nil, apiErr(400, "BadRequestException", "the request has no input")
			}
			names := make([]string, 0, len(r.GetInput()))
			for n := range r.GetInput() {
				names = append(names, n)
			}
			sort.Strings(names)
			req := &handlers.Request{Canceled: c.Gone, Header: func(n string) string {
				if vs := md.Get(n); len(vs) > 0 {
					return vs[0]
				}
				return ""
			}, Headers: func(yield func(string, string) bool) {
				for k, vs := range md {
					for _, v := range vs {
						if !yield(k, v) {
							return
						}
					}
				}
			}, Stream: stream}
			for _, n := range names {
				req.Inputs = append(req.Inputs, handlers.Payload{Name: n, Data: r.GetInput()[n]})
			}
			return req, nil
		})
		return code
	})
	if err != nil {
		return nil, grpcError(err)
	}
	if fail != nil {
		return nil, grpcError(fail)
	}
	out := &tspb.PredictionResponse{Prediction: resp.Body}
	if r.SequenceId != nil {
		out.SequenceId = r.SequenceId
	}
	return out, nil
}

// tsManagementService is TorchServe's ManagementAPIsService, over the REST management routes.
type tsManagementService struct {
	tspb.UnimplementedManagementAPIsServiceServer
	d *Daemon
}

// modelPath is /models/{name}[/{version}]; names with a slash are refused, since they
// would name another route.
func modelPath(name, version string) (string, error) {
	if name == "" || strings.Contains(name, "/") || strings.Contains(version, "/") {
		return "", status.Errorf(codes.InvalidArgument, "invalid model_name %q or model_version %q", name, version)
	}
	p := "/models/" + name
	if version != "" {
		p += "/" + version
	}
	return p, nil
}

// answer runs method path?query on the REST management routes and returns its body as msg,
// or its error as a gRPC status.
func (s *tsManagementService) answer(method, path string, q url.Values) (*tspb.ManagementResponse, error) {
	code, body := s.d.management(method, path, q)
	if code >= 400 {
		return nil, restError(code, body)
	}
	return &tspb.ManagementResponse{Msg: string(body)}, nil
}

// restError is a REST error answer as a gRPC status: its message, under the code for its
// HTTP status.
func restError(code int, body []byte) error {
	var e errorBody
	msg := string(body)
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	return status.Error(grpcCode(code), msg)
}

// management runs method path?query on the REST management API's routes, in-process.
func (d *Daemon) management(method, path string, q url.Values) (int, []byte) {
	d.mgmtOnce.Do(func() { d.mgmtRoutes = d.managementRouter() })
	return runREST(func(ctx *fasthttp.RequestCtx, _ params) { d.mgmtRoutes.serve(ctx) }, method, path, q)
}

func (s *tsManagementService) DescribeModel(_ context.Context, r *tspb.DescribeModelRequest) (*tspb.ManagementResponse, error) {
	p, err := modelPath(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if r.GetCustomized() {
		q.Set("customized", "true")
	}
	return s.answer("GET", p, q)
}

// ListModels: a limit or token of 0 is unset, as proto3 cannot tell it from absent.
func (s *tsManagementService) ListModels(_ context.Context, r *tspb.ListModelsRequest) (*tspb.ManagementResponse, error) {
	q := url.Values{}
	setInt(q, "limit", r.GetLimit())
	setInt(q, "next_page_token", r.GetNextPageToken())
	return s.answer("GET", "/models", q)
}

// RegisterModel: numbers of 0 are unset and take their defaults, as TorchServe's gRPC does.
func (s *tsManagementService) RegisterModel(_ context.Context, r *tspb.RegisterModelRequest) (*tspb.ManagementResponse, error) {
	q := url.Values{}
	q.Set("url", r.GetUrl())
	for k, v := range map[string]string{"model_name": r.GetModelName(), "handler": r.GetHandler(), "runtime": r.GetRuntime()} {
		if v != "" {
			q.Set(k, v)
		}
	}
	setInt(q, "batch_size", r.GetBatchSize())
	setInt(q, "max_batch_delay", r.GetMaxBatchDelay())
	setInt(q, "initial_workers", r.GetInitialWorkers())
	setInt(q, "response_timeout", r.GetResponseTimeout())
	setInt(q, "startup_timeout", r.GetStartupTimeout())
	q.Set("synchronous", strconv.FormatBool(r.GetSynchronous()))
	return s.answer("POST", "/models", q)
}

func (s *tsManagementService) ScaleWorker(_ context.Context, r *tspb.ScaleWorkerRequest) (*tspb.ManagementResponse, error) {
	p, err := modelPath(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	setInt(q, "min_worker", r.GetMinWorker())
	setInt(q, "max_worker", r.GetMaxWorker())
	q.Set("synchronous", strconv.FormatBool(r.GetSynchronous()))
	return s.answer("PUT", p, q)
}

func (s *tsManagementService) SetDefault(_ context.Context, r *tspb.SetDefaultRequest) (*tspb.ManagementResponse, error) {
	if r.GetModelVersion() == "" {
		return nil, status.Error(codes.InvalidArgument, "model_version is required")
	}
	p, err := modelPath(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	return s.answer("PUT", p+"/set-default", nil)
}

func (s *tsManagementService) UnregisterModel(_ context.Context, r *tspb.UnregisterModelRequest) (*tspb.ManagementResponse, error) {
	p, err := modelPath(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	return s.answer("DELETE", p, nil)
}

func setInt(q url.Values, key string, v int32) {
	if v != 0 {
		q.Set(key, strconv.Itoa(int(v)))
	}
}

// runREST runs a REST handler in-process on a request of its own, and returns its status
// and a copy of its body.
func runREST(h func(*fasthttp.RequestCtx, params), method, path string, q url.Values) (int, []byte) {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	uri := path
	if len(q) > 0 {
		uri += "?" + q.Encode()
	}
	req.SetRequestURI(uri)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	h(&ctx, nil)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...)
}
