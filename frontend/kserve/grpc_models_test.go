package kserve_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/oip"
	pb "github.com/torchd/torchd/proto/inference"
)

// The Open Inference Protocol's gRPC service over real models, with grpc-go clients built
// from proto/: typed and raw contents, a streamed order, a client that cancels; outputs are
// compared with the REST v2 path's for the same input.

// restV2 infers over REST with binary tensors and returns the first output.
func (s *server) restV2(model string, in oip.Tensor) oip.Tensor {
	t := s.t
	t.Helper()
	body, hlen, err := oip.EncodeRequest(&oip.InferRequest{Parameters: oip.Parameters{oip.ParamBinaryDataOutput: true}}, []oip.Tensor{in}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "/v2/models/"+model+"/infer", body, "Content-Type", "application/octet-stream", oip.HeaderContentLength, strconv.Itoa(hlen))
	if r.status != 200 {
		t.Fatalf("REST v2 infer: %d %s", r.status, r.body)
	}
	n := -1
	if h, ok := r.header[oip.HeaderContentLength]; ok {
		n, _ = strconv.Atoi(h)
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
func outputBytes(r *pb.ModelInferResponse) []byte {
	if len(r.GetRawOutputContents()) > 0 {
		return r.GetRawOutputContents()[0]
	}
	var b []byte
	for _, f := range r.GetOutputs()[0].GetContents().GetFp32Contents() {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func grpcStats(t testing.TB, c pb.GRPCInferenceServiceClient, model string) *pb.ModelStatistics {
	t.Helper()
	r, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: model})
	if err != nil || len(r.GetModelStats()) != 1 {
		t.Fatalf("statistics of %s: %v %v", model, r, err)
	}
	return r.GetModelStats()[0]
}

// queueState is what describe shows of model's default version: whether a worker is busy,
// and the requests pending in its queue.
func (s *server) queueState(model string) (busy bool, pending int) {
	s.t.Helper()
	var d []struct {
		Workers []struct {
			Status string `json:"status"`
		} `json:"workers"`
		JobQueueStatus struct {
			PendingRequests int `json:"pendingRequests"`
		} `json:"jobQueueStatus"`
	}
	s.doMgmt("GET", "/models/"+model, nil).json(s.t, &d)
	if len(d) == 0 {
		s.t.Fatalf("describe %s: no version", model)
	}
	for _, w := range d[0].Workers {
		busy = busy || w.Status == "BUSY"
	}
	return busy, d[0].JobQueueStatus.PendingRequests
}

// occupySlow keeps the slow model's only worker busy for about ms milliseconds: it sends
// that request and returns once describe shows the worker busy with it; its answer comes on
// the channel.
func (s *server) occupySlow(ms int) <-chan response {
	busy := make(chan response, 1)
	go func() { busy <- s.do("POST", "/predictions/slow", []byte(fmt.Sprintf("[[%d, 0]]", ms))) }()
	coretest.WaitFor(s.t, "the slow request on the worker", func() bool { b, _ := s.queueState("slow"); return b })
	return busy
}

func TestGRPCRealModels(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.register("url=digits_tensor.mar&initial_workers=1&synchronous=true")
	s.register("url=slow.mar&initial_workers=1&synchronous=true")
	oipc := s.grpcClient()
	x := readZooNpy(t, "digits", "ref_input.npy")
	rest := s.restV2("digits_tensor", oip.Tensor{Name: "input__0", Datatype: "FP32", Shape: x.Shape, Data: x.Data})

	t.Run("infer typed and raw", func(t *testing.T) {
		for _, raw := range []bool{false, true} {
			r, err := oipc.ModelInfer(callCtx(t), fp32Request("digits_tensor", x.Shape, x.Data, raw))
			if err != nil {
				t.Fatal(err)
			}
			o := r.GetOutputs()[0]
			if o.GetName() != "output__0" || o.GetDatatype() != "FP32" || !slices.Equal(o.GetShape(), []int64{4, 10}) || r.GetModelName() != "digits_tensor" {
				t.Fatalf("raw %v: output %v", raw, o)
			}
			if raw != (len(r.GetRawOutputContents()) > 0) {
				t.Fatalf("raw request %v answered raw %v", raw, len(r.GetRawOutputContents()) > 0)
			}
			closeTo(t, "gRPC output", f32s(outputBytes(r)), f32s(rest.Data), 1e-6)
		}
		// An input that is not the model's goes through the handler, as TorchServe's kservev2
		// envelope: one output named after the input, the handler's answer flattened.
		req := fp32Request("digits_tensor", x.Shape, x.Data, false)
		req.Inputs[0].Name = "data"
		r, err := oipc.ModelInfer(callCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if o := r.GetOutputs()[0]; o.GetName() != "data" || o.GetDatatype() != "FP32" || !slices.Equal(o.GetShape(), []int64{40}) || r.GetId() == "" {
			t.Fatalf("through the handler: %v", r)
		}
		closeTo(t, "handler output", f32s(outputBytes(r)), f32s(rest.Data), tolerance.Kernels)
		// A requested output that the model does not have.
		req = fp32Request("digits_tensor", x.Shape, x.Data, true)
		req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "nope"}}
		_, err = oipc.ModelInfer(callCtx(t), req)
		wantCode(t, err, codes.InvalidArgument, `unknown output "nope"`)
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
			closeTo(t, "stream output", f32s(outputBytes(r.GetInferResponse())), f32s(rest.Data), 1e-6)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the answers: %v, want EOF", err)
		}
	})

	t.Run("client cancels mid-stream", func(t *testing.T) {
		before := grpcStats(t, oipc, "slow").GetInferenceCount()
		busy := s.occupySlow(1000)
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
		coretest.WaitFor(t, "the stream's requests queued", func() bool { _, n := s.queueState("slow"); return n == 3 })
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
		if got := grpcStats(t, oipc, "slow").GetInferenceCount() - before; got != 2 {
			t.Fatalf("slow inferred %d items, want 2: a cancelled request reached the model", got)
		}
	})
}
