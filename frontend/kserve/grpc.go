package kserve

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/oip"
	pb "github.com/torchd/torchd/proto/inference"
)

// oipService is the Open Inference Protocol's gRPC service, as Triton serves it: the same
// calls as the v2 REST routes (kserve.go), with Triton's status codes. The shared-memory,
// trace and log calls answer UNIMPLEMENTED.
type oipService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	a *API
}

// grpcExtensions are the protocol extensions torchd serves over gRPC, less "statistics":
// see ServerMetadata.
var grpcExtensions = []string{"model_configuration", "schedule_policy", "model_repository", "logging", "classification"}

func (s *oipService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (s *oipService) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: s.a.Ready()}, nil
}

// ModelReady is false, not an error, for a model that is not loaded, as Triton answers.
func (s *oipService) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	v, err := s.a.Registry.Get(r.GetName(), r.GetVersion())
	return &pb.ModelReadyResponse{Ready: err == nil && v.Ready()}, nil
}

// ServerMetadata advertises "statistics" only while every loaded version is an integer, as
// Triton's are: perf_analyzer, seeing it, reads the statistics of the version it parses as an
// integer and stops when there is none ("1.0" becomes "1"). ModelStatistics answers either way.
func (s *oipService) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	ext := grpcExtensions
	if s.a.integerVersions() {
		ext = append(slices.Clip(ext), "statistics")
	}
	return &pb.ServerMetadataResponse{Name: "torchd", Version: frontend.Version, Extensions: ext}, nil
}

// integerVersions reports whether every loaded model version is an integer.
func (a *API) integerVersions() bool {
	for _, def := range a.Registry.Defaults() {
		versions, _, _ := a.Registry.Versions(def.Name)
		for _, v := range versions {
			if _, err := strconv.ParseInt(v.Version, 10, 64); err != nil {
				return false
			}
		}
	}
	return true
}

func (s *oipService) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	md, err := s.a.modelMetadata(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	tensors := func(ts []oip.MetadataTensor) []*pb.ModelMetadataResponse_TensorMetadata {
		out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return out
	}
	return &pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform, Inputs: tensors(md.Inputs), Outputs: tensors(md.Outputs)}, nil
}

func (s *oipService) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	v, err := s.a.Registry.Get(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	return &pb.ModelConfigResponse{Config: servedConfig(v)}, nil
}

func (s *oipService) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	return s.a.grpcInfer(ctx, r)
}

// grpcInfer serves one ModelInferRequest on the v2 path that REST's infer takes (v2Serve).
func (a *API) grpcInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	var resp *pb.ModelInferResponse
	decode := func(*core.ModelVersion, []oip.MetadataTensor) (*oip.InferRequest, []oip.Tensor, error) {
		return oip.DecodeInferRequest(r)
	}
	err := a.v2Serve(frontend.GRPCCall(ctx), r.GetModelName(), r.GetModelVersion(), decode, func(_ *core.ModelVersion, ans v2Answer) error {
		outTensors := ans.outs
		if ans.envelope {
			outTensors = nil
			for _, o := range ans.resp.Outputs {
				t, err := oip.JSONTensor(o)
				if err != nil {
					return err
				}
				outTensors = append(outTensors, t)
			}
		}
		var err error
		resp, err = oip.EncodeInferResponse(ans.resp, outTensors, len(r.GetRawInputContents()) > 0)
		return err
	})
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	return resp, nil
}

// streamWindow bounds the requests of one ModelStreamInfer stream in flight at once; the
// stream's next request is read when the oldest is answered.
const streamWindow = 64

// ModelStreamInfer serves the requests of a stream concurrently, through the same batcher as
// every other request, and answers them in the order they came. A request's error is its
// answer's error_message and does not end the stream. A client that cancels ends the stream;
// its requests still queued never reach the model.
func (s *oipService) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	ctx := stream.Context()
	answers := make(chan chan *pb.ModelStreamInferResponse, streamWindow)
	sent := make(chan error, 1)
	go func() {
		var err error
		for a := range answers {
			m := <-a
			if err == nil {
				err = stream.Send(m)
			}
		}
		sent <- err
	}()
	var recvErr error
	for {
		r, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		a := make(chan *pb.ModelStreamInferResponse, 1)
		answers <- a
		go func() {
			resp, err := s.a.grpcInfer(ctx, r)
			if err != nil {
				a <- &pb.ModelStreamInferResponse{ErrorMessage: status.Convert(err).Message(), InferResponse: &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion(), Id: r.GetId()}}
				return
			}
			a <- &pb.ModelStreamInferResponse{InferResponse: resp}
		}()
	}
	close(answers)
	err := <-sent
	if recvErr != nil {
		return recvErr
	}
	return err
}

func (s *oipService) ModelStatistics(_ context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	all, err := s.a.Registry.Statistics(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	out := &pb.ModelStatisticsResponse{}
	for _, m := range tritonStatistics(all) {
		dur := func(x statDuration) *pb.StatisticDuration { return &pb.StatisticDuration{Count: x.Count, Ns: x.Ns} }
		st := m.InferenceStats
		ms := &pb.ModelStatistics{
			Name: m.Name, Version: m.Version, LastInference: m.LastInference,
			InferenceCount: m.InferenceCount, ExecutionCount: m.ExecutionCount,
			InferenceStats: &pb.InferStatistics{
				Success: dur(st.Success), Fail: dur(st.Fail), Queue: dur(st.Queue),
				ComputeInput: dur(st.ComputeInput), ComputeInfer: dur(st.ComputeInfer), ComputeOutput: dur(st.ComputeOutput),
				CacheHit: dur(st.CacheHit), CacheMiss: dur(st.CacheMiss),
			},
		}
		for _, b := range m.BatchStats {
			ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{BatchSize: b.BatchSize, ComputeInput: dur(b.ComputeInput), ComputeInfer: dur(b.ComputeInfer), ComputeOutput: dur(b.ComputeOutput)})
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	return out, nil
}

// RepositoryIndex answers the index REST's POST /v2/repository/index answers (lifecycle's
// one Index).
func (s *oipService) RepositoryIndex(_ context.Context, r *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	idx, err := s.a.Life.Index(r.GetReady())
	if err != nil {
		return nil, frontend.GRPCError(err)
	}
	out := &pb.RepositoryIndexResponse{}
	for _, m := range idx {
		out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: m.Name, Version: m.Version, State: m.State, Reason: m.Reason})
	}
	return out, nil
}

// RepositoryModelLoad loads a model as POST /v2/repository/models/{name}/load does
// (lifecycle.Service.Load); it takes the management key.
func (s *oipService) RepositoryModelLoad(_ context.Context, r *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	var config []byte
	for k, p := range r.GetParameters() {
		if k != "config" {
			return nil, status.Errorf(codes.InvalidArgument, "unknown load parameter %q (torchd reads \"config\")", k)
		}
		config = []byte(p.GetStringParam())
	}
	if err := s.a.Life.Load(r.GetModelName(), config); err != nil {
		return nil, frontend.GRPCError(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload unloads a model as POST /v2/repository/models/{name}/unload does
// (lifecycle.Service.Unload); it takes the management key.
func (s *oipService) RepositoryModelUnload(_ context.Context, r *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := s.a.Life.Unload(r.GetModelName()); err != nil {
		return nil, frontend.GRPCError(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}
