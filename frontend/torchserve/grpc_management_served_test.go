package torchserve_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The management service's errors reach gRPC as the codes REST's statuses had, with no
// request context in between: each bad input gets its code and a message naming what was wrong.
func TestManagementOverGRPC(t *testing.T) {
	s := serve(t, 1, nil).ts.ManagementService()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func() (*tspb.ManagementResponse, error)
		code codes.Code
		msg  string
	}{
		{"describe unknown", func() (*tspb.ManagementResponse, error) {
			return s.DescribeModel(ctx, &tspb.DescribeModelRequest{ModelName: "absent"})
		}, codes.NotFound, "absent"},
		{"describe slash", func() (*tspb.ManagementResponse, error) {
			return s.DescribeModel(ctx, &tspb.DescribeModelRequest{ModelName: "a/b"})
		}, codes.InvalidArgument, "model_name"},
		{"register empty url", func() (*tspb.ManagementResponse, error) {
			return s.RegisterModel(ctx, &tspb.RegisterModelRequest{})
		}, codes.NotFound, "Model not found in model store"},
		{"register bad runtime", func() (*tspb.ManagementResponse, error) {
			return s.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "x.mar", Runtime: "java"})
		}, codes.InvalidArgument, "RuntimeType"},
		{"register negative batch", func() (*tspb.ManagementResponse, error) {
			return s.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "x.mar", BatchSize: -2})
		}, codes.InvalidArgument, "batch_size"},
		{"register absent archive", func() (*tspb.ManagementResponse, error) {
			return s.RegisterModel(ctx, &tspb.RegisterModelRequest{Url: "absent.mar"})
		}, codes.NotFound, "absent.mar"},
		// As TorchServe: the model is looked up before a negative count fails its scaling.
		{"scale negative", func() (*tspb.ManagementResponse, error) {
			return s.ScaleWorker(ctx, &tspb.ScaleWorkerRequest{ModelName: "m", MinWorker: -1})
		}, codes.NotFound, "m"},
		{"scale max below min", func() (*tspb.ManagementResponse, error) {
			return s.ScaleWorker(ctx, &tspb.ScaleWorkerRequest{ModelName: "m", MinWorker: 3, MaxWorker: 2})
		}, codes.InvalidArgument, "max_worker"},
		{"scale unknown", func() (*tspb.ManagementResponse, error) {
			return s.ScaleWorker(ctx, &tspb.ScaleWorkerRequest{ModelName: "m"})
		}, codes.NotFound, "m"},
		{"set default without version", func() (*tspb.ManagementResponse, error) {
			return s.SetDefault(ctx, &tspb.SetDefaultRequest{ModelName: "m"})
		}, codes.InvalidArgument, "model_version"},
		{"unregister unknown", func() (*tspb.ManagementResponse, error) {
			return s.UnregisterModel(ctx, &tspb.UnregisterModelRequest{ModelName: "m"})
		}, codes.NotFound, "m"},
	} {
		_, err := c.call()
		if st, _ := status.FromError(err); st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.code, c.msg)
		}
	}
	// An empty server lists no models, as REST's body.
	resp, err := s.ListModels(ctx, &tspb.ListModelsRequest{})
	if err != nil || resp.GetMsg() != "{\n  \"models\": []\n}\n" {
		t.Errorf("list: %q, %v", resp.GetMsg(), err)
	}
}
