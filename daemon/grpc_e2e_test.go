package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/internal/zootest"
	pb "github.com/torchd/torchd/proto/inference"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The gRPC servers the daemon starts (grpc.go): the standard health service, the message
// bound, token authorization and a graceful stop, which only a whole server has. The
// services' calls are frontend/kserve's TestGRPCRealModels and frontend/torchserve's
// TestGRPCInferenceDigits and TestGRPCManagementDigits; grpc_peers_test.go runs Triton's and
// TorchServe's own Python clients.

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

func fp32Request(model string, shape []int64, data []byte, raw bool) *pb.ModelInferRequest {
	in := &pb.ModelInferRequest_InferInputTensor{Name: "input__0", Datatype: "FP32", Shape: shape}
	r := &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
	if raw {
		r.RawInputContents = [][]byte{data}
	} else {
		in.Contents = &pb.InferTensorContents{Fp32Contents: zootest.F32s(data)}
	}
	return r
}

// slowIn asks the slow model for about ms milliseconds of work, as typed contents.
func slowIn(ms float32) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "slow", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "input__0", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{ms, 0}}}}}
}

func TestGRPC(t *testing.T) {
	s := startServer(t, "--models", "digits_tensor=digits_tensor.mar")
	s.waitHealthy(t)
	oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	x := zootest.ReadNpy(t, zooDir, "digits", "ref_input.npy")

	// The inference service's health, metadata, config and statistics answers are
	// frontend/kserve's TestGRPCMetadata; the standard health service is the server's.
	t.Run("health", func(t *testing.T) {
		ctx := callCtx(t)
		health := healthpb.NewHealthClient(dial(t, s.grpc))
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %v %v", h, err)
		}
		watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			h, err = watch.Recv()
		}
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health watch %v %v", h, err)
		}
	})

	// Bad input's answers are frontend/kserve's TestGRPCInfer and TestGRPCServerErrors; the
	// server's own bound on a message is here.
	t.Run("max_request_size", func(t *testing.T) {
		ctx := callCtx(t)
		// max_request_size (6553500 bytes) bounds a gRPC message too.
		big := make([]byte, 7<<20)
		_, err := oipc.ModelInfer(ctx, fp32Request("digits_tensor", []int64{int64(len(big)) / 3136, 1, 28, 28}, big, true))
		wantCode(t, err, codes.ResourceExhausted, "larger than max")
		// Nothing else is affected.
		if _, err := oipc.ModelInfer(ctx, fp32Request("digits_tensor", x.Shape, x.Data, true)); err != nil {
			t.Fatalf("a good request after the bad one: %v", err)
		}
	})
}

// Token authorization and a full queue, on a server with a queue of one.
func TestGRPCAuthAndFullQueue(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key_file.json")
	s := startServer(t, "--models", "slow=slow.mar", "--job-queue-size", "1", "--enable-token-authorization", "--key-file", keyFile)
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var keys struct {
		Inference, Management struct{ Key string }
	}
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	bearer := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(callCtx(t), "authorization", "Bearer "+key)
	}
	oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	// Probes need no key.
	if r, err := oipc.ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil || !r.GetLive() {
		t.Fatalf("live without a key: %v %v", r, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err := healthpb.NewHealthClient(dial(t, s.grpc)).Check(callCtx(t), &healthpb.HealthCheckRequest{})
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v %v", h, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err = oipc.ModelInfer(callCtx(t), slowIn(1))
	wantCode(t, err, codes.Unauthenticated, "inference key")
	_, err = oipc.ModelInfer(bearer("wrong"), slowIn(1))
	wantCode(t, err, codes.Unauthenticated, "inference key")
	_, err = oipc.ModelInfer(bearer(keys.Management.Key), slowIn(1))
	wantCode(t, err, codes.Unauthenticated, "inference key")
	if _, err := oipc.ModelInfer(bearer(keys.Inference.Key), slowIn(1)); err != nil {
		t.Fatalf("with the inference key: %v", err)
	}
	stream, err := oipc.ModelStreamInfer(callCtx(t))
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.Unauthenticated, "inference key")
	tsc := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
	if _, err := tsc.Ping(callCtx(t), &emptypb.Empty{}); err != nil {
		t.Fatalf("TorchServe ping without a key: %v", err)
	}
	_, err = tsc.Predictions(callCtx(t), &tspb.PredictionsRequest{ModelName: "slow", Input: map[string][]byte{"data": []byte("[[1, 0]]")}})
	wantCode(t, err, codes.Unauthenticated, "inference key")
	seq, err := tsc.StreamPredictions2(callCtx(t))
	if err == nil {
		_, err = seq.Recv()
	}
	wantCode(t, err, codes.Unauthenticated, "inference key")
	mc := tspb.NewManagementAPIsServiceClient(dial(t, s.grpcMgmt))
	_, err = mc.ListModels(bearer(keys.Inference.Key), &tspb.ListModelsRequest{})
	wantCode(t, err, codes.Unauthenticated, "management key")
	if _, err := mc.ListModels(bearer(keys.Management.Key), &tspb.ListModelsRequest{}); err != nil {
		t.Fatalf("list with the management key: %v", err)
	}

	// One request runs, one waits in the queue of one; the next is UNAVAILABLE at once.
	occupy := func(ms float32, what string, there func(busy bool, pending int) bool) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := oipc.ModelInfer(bearer(keys.Inference.Key), slowIn(ms))
			done <- err
		}()
		waitFor(t, time.Minute, what, func() bool { return there(s.queueStateWith(t, "slow", keys.Management.Key)) })
		return done
	}
	running := occupy(1500, "a request on the worker", func(busy bool, _ int) bool { return busy })
	queued := occupy(1, "a request queued", func(_ bool, n int) bool { return n == 1 })
	_, err = oipc.ModelInfer(bearer(keys.Inference.Key), slowIn(1))
	wantCode(t, err, codes.Unavailable, "job queue is full")
	_, err = tsc.Predictions(bearer(keys.Inference.Key), &tspb.PredictionsRequest{ModelName: "slow", Input: map[string][]byte{"data": []byte("[[1, 0]]")}})
	wantCode(t, err, codes.Unavailable, "job queue is full")
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}

	// A graceful stop answers the call in flight before the server exits.
	inFlight := occupy(1000, "a request on the worker", func(busy bool, _ int) bool { return busy })
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if err := <-inFlight; err != nil {
		t.Fatalf("the call in flight at SIGTERM: %v", err)
	}
	select {
	case <-s.Exited:
		if s.ExitErr != nil {
			t.Fatalf("torchd exited with %v\n%s", s.ExitErr, s.Log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("torchd did not stop\n%s", s.Log())
	}
}
