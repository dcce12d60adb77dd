package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/oip"
	pb "github.com/torchd/torchd/proto/inference"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The gRPC APIs end to end, with grpc-go clients built from proto/: every call, and every
// error path with its status code; outputs are compared with the REST v2 path's for the
// same input. grpc_peers_test.go runs Triton's and TorchServe's own Python clients.

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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

// restV2 infers over REST with binary tensors and returns the first output.
func restV2(t testing.TB, s *server, model string, in oip.Tensor) oip.Tensor {
	t.Helper()
	body, hlen, err := oip.EncodeRequest(&oip.InferRequest{Parameters: oip.Parameters{oip.ParamBinaryDataOutput: true}}, []oip.Tensor{in}, true)
	if err != nil {
		t.Fatal(err)
	}
	req := must(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/octet-stream", body)
	req.Header.Set(oip.HeaderContentLength, strconv.Itoa(hlen))
	r := send(t, req)
	if r.status != 200 {
		t.Fatalf("REST v2 infer: %d %s", r.status, r.body)
	}
	n, _ := strconv.Atoi(r.header.Get(oip.HeaderContentLength))
	if r.header.Get(oip.HeaderContentLength) == "" {
		n = -1
	}
	_, outs, err := oip.DecodeResponse(r.body, n)
	if err != nil {
		t.Fatal(err)
	}
	return outs[0]
}

func fp32Request(model string, shape []int64, data []byte, raw bool) *pb.ModelInferRequest {
	in := &pb.ModelInferRequest_InferInputTensor{Name: "input__0", Datatype: "FP32", Shape: shape}
	r := &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
	if raw {
		r.RawInputContents = [][]byte{data}
	} else {
		in.Contents = &pb.InferTensorContents{Fp32Contents: f32s(data)}
	}
	return r
}

// slowIn asks the slow model for about ms milliseconds of work, as typed contents.
func slowIn(ms float32) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "slow", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "input__0", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{ms, 0}}}}}
}

// outputBytes is a response's first output as bytes, typed or raw.
func outputBytes(t testing.TB, r *pb.ModelInferResponse) []byte {
	t.Helper()
	if len(r.GetRawOutputContents()) > 0 {
		return r.GetRawOutputContents()[0]
	}
	var b []byte
	for _, f := range r.GetOutputs()[0].GetContents().GetFp32Contents() {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func TestGRPC(t *testing.T) {
	s := startServer(t, "--models", "digits_tensor=digits_tensor.mar,digits=digits.mar,slow=slow.mar")
	s.waitHealthy(t)
	oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	x := readZooNpy(t, "digits", "ref_input.npy")
	rest := restV2(t, s, "digits_tensor", oip.Tensor{Name: "input__0", Datatype: "FP32", Shape: x.Shape, Data: x.Data})

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

	t.Run("infer typed and raw", func(t *testing.T) {
		for _, raw := range []bool{false, true} {
			r, err := oipc.ModelInfer(callCtx(t), fp32Request("digits_tensor", x.Shape, x.Data, raw))
			if err != nil {
				t.Fatal(err)
			}
			o := r.GetOutputs()[0]
			if o.GetName() != "output__0" || o.GetDatatype() != "FP32" || !slicesEqual(o.GetShape(), []int64{4, 10}) || r.GetModelName() != "digits_tensor" {
				t.Fatalf("raw %v: output %v", raw, o)
			}
			if raw != (len(r.GetRawOutputContents()) > 0) {
				t.Fatalf("raw request %v answered raw %v", raw, len(r.GetRawOutputContents()) > 0)
			}
			closeTo(t, "gRPC output", f32s(outputBytes(t, r)), f32s(rest.Data), 1e-6)
		}
		// An input that is not the model's goes through the handler, as TorchServe's kservev2
		// envelope: one output named after the input, the handler's answer flattened.
		req := fp32Request("digits_tensor", x.Shape, x.Data, false)
		req.Inputs[0].Name = "data"
		r, err := oipc.ModelInfer(callCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if o := r.GetOutputs()[0]; o.GetName() != "data" || o.GetDatatype() != "FP32" || !slicesEqual(o.GetShape(), []int64{40}) || r.GetId() == "" {
			t.Fatalf("through the handler: %v", r)
		}
		closeTo(t, "handler output", f32s(outputBytes(t, r)), f32s(rest.Data), tolerance.Kernels)
		// A requested output that the model does not have.
		req = fp32Request("digits_tensor", x.Shape, x.Data, true)
		req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "nope"}}
		_, err = oipc.ModelInfer(callCtx(t), req)
		wantCode(t, err, codes.InvalidArgument, `unknown output "nope"`)
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

	t.Run("stream in order", func(t *testing.T) {
		stream, err := oipc.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		for i := range n {
			req := fp32Request("digits_tensor", x.Shape, x.Data, i%2 == 0)
			if i == 3 {
				req = fp32Request("digits_tensor", []int64{4, 1, 28, 27}, x.Data[:4*4*28*27], true)
			}
			req.Id = strconv.Itoa(i)
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		stream.CloseSend()
		for i := range n {
			r, err := stream.Recv()
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			if got := r.GetInferResponse().GetId(); got != strconv.Itoa(i) {
				t.Fatalf("answer %d has id %q: out of order", i, got)
			}
			if i == 3 {
				if !strings.Contains(r.GetErrorMessage(), "must have shape") {
					t.Fatalf("answer 3: error %q, want a shape error", r.GetErrorMessage())
				}
				continue
			}
			if r.GetErrorMessage() != "" {
				t.Fatalf("answer %d: %s", i, r.GetErrorMessage())
			}
			closeTo(t, "stream output", f32s(outputBytes(t, r.GetInferResponse())), f32s(rest.Data), 1e-6)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the answers: %v, want EOF", err)
		}
	})

	t.Run("client cancels mid-stream", func(t *testing.T) {
		before := stats(t, oipc, "slow").GetInferenceCount()
		busy := s.occupySlow(t, 1000)
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := oipc.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := stream.Send(slowIn(300)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, time.Minute, "the stream's requests queued", func() bool { _, n := s.queueState(t, "slow"); return n == 3 })
		cancel()
		if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("after cancel: %v", err)
		}
		if r := <-busy; r.status != 200 {
			t.Fatalf("the occupying request: %d %s", r.status, r.body)
		}
		if _, err := oipc.ModelInfer(callCtx(t), slowIn(1)); err != nil {
			t.Fatal(err)
		}
		// The occupying request and the last one ran; the cancelled stream's never did.
		if got := stats(t, oipc, "slow").GetInferenceCount() - before; got != 2 {
			t.Fatalf("slow inferred %d items, want 2: a cancelled request reached the model", got)
		}
	})

	t.Run("torchserve inference", func(t *testing.T) {
		tsc := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
		ctx := callCtx(t)
		ping, err := tsc.Ping(ctx, &emptypb.Empty{})
		if rest := do(t, "GET", s.inf+"/ping", "", nil); err != nil || ping.GetHealth() != string(rest.body) {
			t.Fatalf("ping %v %v, REST %s", ping, err, rest.body)
		}
		imgs, labels := heldOut(t)
		rest := do(t, "POST", s.inf+"/predictions/digits", "image/png", imgs[0])
		p, err := tsc.Predictions(ctx, &tspb.PredictionsRequest{ModelName: "digits", Input: map[string][]byte{"data": imgs[0]}})
		if err != nil || sameJSON(rest.body, p.GetPrediction()) != "" {
			t.Fatalf("prediction %s %v, REST %s: %s", p.GetPrediction(), err, rest.body, sameJSON(rest.body, p.GetPrediction()))
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
		if err != nil || sameJSON(rest.body, m.GetPrediction()) != "" || m.GetSequenceId() != "s1" {
			t.Fatalf("stream prediction %v %v", m, err)
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the one answer: %v", err)
		}
		// Its errors are frontend/torchserve's TestGRPCPredictions.
	})

	t.Run("torchserve management", func(t *testing.T) {
		mc := tspb.NewManagementAPIsServiceClient(dial(t, s.grpcMgmt))
		ctx := callCtx(t)
		l, err := mc.ListModels(ctx, &tspb.ListModelsRequest{})
		if rest := do(t, "GET", s.mgmt+"/models", "", nil); err != nil || l.GetMsg() != string(rest.body) {
			t.Fatalf("list %v %v, REST %s", l, err, rest.body)
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
		if rest := do(t, "GET", s.mgmt+"/models/dt2", "", nil); r.GetMsg() != string(rest.body) {
			t.Fatalf("describe %s, REST %s", r.GetMsg(), rest.body)
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
	})
}

func stats(t testing.TB, c pb.GRPCInferenceServiceClient, model string) *pb.ModelStatistics {
	t.Helper()
	r, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: model})
	if err != nil || len(r.GetModelStats()) != 1 {
		t.Fatalf("statistics of %s: %v %v", model, r, err)
	}
	return r.GetModelStats()[0]
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-inFlight; err != nil {
		t.Fatalf("the call in flight at SIGTERM: %v", err)
	}
	select {
	case <-s.exited:
		if s.exitErr != nil {
			t.Fatalf("torchd exited with %v\n%s", s.exitErr, s.Log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("torchd did not stop\n%s", s.Log())
	}
}
