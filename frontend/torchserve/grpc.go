package torchserve

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/lifecycle"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// TorchServe's gRPC APIs. Inference is one core call, as POST /predictions; management calls
// the lifecycle service (lifecycle.Service) as REST does, and answers what REST answers: its JSON
// body as msg, or its error under the gRPC status for the error's kind (frontend.GRPCError).

// tsInferenceService is TorchServe's InferenceAPIsService; StreamPredictions2 (sequences of a
// stateful model) is in grpc_stream2.go.
type tsInferenceService struct {
	tspb.UnimplementedInferenceAPIsServiceServer
	a *API
}

// Ping answers the body of GET /ping, {"status": "Healthy"} or "Unhealthy", as TorchServe.
func (s *tsInferenceService) Ping(context.Context, *emptypb.Empty) (*tspb.TorchServeHealthResponse, error) {
	health := "Unhealthy"
	if s.a.Ready() {
		health = "Healthy"
	}
	return &tspb.TorchServeHealthResponse{Health: string(frontend.StatusBody(health))}, nil
}

func (s *tsInferenceService) Predictions(ctx context.Context, r *tspb.PredictionsRequest) (*tspb.PredictionResponse, error) {
	return s.a.tsPredict(ctx, r, nil)
}

// tsPredict serves a PredictionsRequest as POST /predictions serves a multipart request: each
// entry of input is one payload, in name order, through the model's handler. stream, when
// set, takes a streaming handler's parts (StreamPredictions, stream.go).
func (a *API) tsPredict(ctx context.Context, r *tspb.PredictionsRequest, stream func(handlers.Response)) (*tspb.PredictionResponse, error) {
	c := frontend.GRPCCall(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	res, err := a.Registry.Serve(&core.Request{Model: r.GetModelName(), Version: r.GetModelVersion(), Call: c,
		Decode: func(*core.ModelVersion) (core.Input, error) {
			if len(r.GetInput()) == 0 {
				return core.Input{}, errors.New("the request has no input")
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
			return core.Input{Payloads: req}, nil
		}})
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	out := &tspb.PredictionResponse{Prediction: res.Response.Body}
	if r.SequenceId != nil {
		out.SequenceId = r.SequenceId
	}
	return out, nil
}

// tsManagementService is TorchServe's ManagementAPIsService over the management service.
type tsManagementService struct {
	tspb.UnimplementedManagementAPIsServiceServer
	a *API
}

// checkModel refuses an empty model name, and a name or version with a slash, which REST's
// routes could not carry either.
func checkModel(name, version string) error {
	if name == "" || strings.Contains(name, "/") || strings.Contains(version, "/") {
		return status.Errorf(codes.InvalidArgument, "invalid model_name %q or model_version %q", name, version)
	}
	return nil
}

// answer is a management call's answer: v as REST's JSON body in msg, or err's gRPC status.
func answer(v any, err error) (*tspb.ManagementResponse, error) {
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	b, err := frontend.JSONBody(v)
	if err != nil {
		return nil, status.Error(codes.Internal, "response encoding failed")
	}
	return &tspb.ManagementResponse{Msg: string(b)}, nil
}

func (s *tsManagementService) DescribeModel(_ context.Context, r *tspb.DescribeModelRequest) (*tspb.ManagementResponse, error) {
	if err := checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	return answer(s.a.describeModels(r.GetModelName(), r.GetModelVersion()))
}

// ListModels: a limit or token of 0 is unset, as proto3 cannot tell it from absent.
func (s *tsManagementService) ListModels(_ context.Context, r *tspb.ListModelsRequest) (*tspb.ManagementResponse, error) {
	return answer(s.a.listModels(int(r.GetLimit()), r.GetLimit() != 0, int(r.GetNextPageToken())), nil)
}

// grpcParams are a RegisterModelRequest's numbers as registration parameters: 0 is unset and
// takes its default, as TorchServe's gRPC does.
type grpcParams map[string]int32

func (p grpcParams) str(string) (string, bool) { return "", false }

func (p grpcParams) num(key, _ string) (int, bool) {
	n := p[key]
	return int(n), n != 0
}

func (s *tsManagementService) RegisterModel(_ context.Context, r *tspb.RegisterModelRequest) (*tspb.ManagementResponse, error) {
	reg := lifecycle.Registration{URL: r.GetUrl(), URLGiven: true, Name: r.GetModelName(), Handler: r.GetHandler(),
		Runtime: r.GetRuntime(), Synchronous: r.GetSynchronous(), Defaults: s.a.tsDefaults()}
	p := grpcParams{"batch_size": r.GetBatchSize(), "max_batch_delay": r.GetMaxBatchDelay(),
		"initial_workers": r.GetInitialWorkers(), "response_timeout": r.GetResponseTimeout(),
		"startup_timeout": r.GetStartupTimeout()}
	if err := registrationSettings(p, s.a.Log, &reg.Settings); err != nil {
		return nil, frontend.GRPCError(err)
	}
	done, err := s.a.Life.Register(reg)
	return answer(frontend.StatusMessage(registeredMessage(done)), err)
}

func (s *tsManagementService) ScaleWorker(_ context.Context, r *tspb.ScaleWorkerRequest) (*tspb.ManagementResponse, error) {
	if err := checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	sc := lifecycle.Scaling{Name: r.GetModelName(), Version: r.GetModelVersion(), Synchronous: r.GetSynchronous()}
	if n := r.GetMinWorker(); n != 0 {
		sc.Min = archive.Of(int(n))
	}
	if n := r.GetMaxWorker(); n != 0 {
		sc.Max = archive.Of(int(n))
	}
	done, err := s.a.Life.Scale(sc)
	return answer(frontend.StatusMessage(scaledMessage(done)), err)
}

func (s *tsManagementService) SetDefault(_ context.Context, r *tspb.SetDefaultRequest) (*tspb.ManagementResponse, error) {
	if r.GetModelVersion() == "" {
		return nil, status.Error(codes.InvalidArgument, "model_version is required")
	}
	if err := checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	err := s.a.Life.SetDefault(r.GetModelName(), r.GetModelVersion())
	return answer(frontend.StatusMessage(fmt.Sprintf("Default version successfully updated for model \"%s\" to \"%s\"", r.GetModelName(), r.GetModelVersion())), err)
}

func (s *tsManagementService) UnregisterModel(_ context.Context, r *tspb.UnregisterModelRequest) (*tspb.ManagementResponse, error) {
	if err := checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	err := s.a.Life.Unregister(r.GetModelName(), r.GetModelVersion())
	return answer(frontend.StatusMessage(fmt.Sprintf("Model \"%s\" unregistered", r.GetModelName())), err)
}
