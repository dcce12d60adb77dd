package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tspb "github.com/torchd/torchd/proto/torchserve"
)

// Each source of a model's settings refuses what archive.SettingLimits refuses: the server's
// flags. The snapshot's are in package lifecycle (TestSnapshotSettingLimits), a
// registration's in package torchserve
// (TestRegistrationSettingLimits), a model-config's in package archive
// (TestSettingLimitsInConfigFiles).
func TestSettingLimitsBySource(t *testing.T) {
	// The server's flags: the same minimums; 0 is the default of threads, max_workers and
	// latency_target_ms, and leaves them to the archive.
	for _, bad := range [][]string{{"--threads", "-1"}, {"--batch-size", "0"}, {"--job-queue-size", "0"},
		{"--response-timeout", "500ms"}, {"--workers", "-1"}, {"--max-batch-delay", "-1"}} {
		if _, err := LoadConfig(bad, envOf(nil)); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	c, err := LoadConfig([]string{"--threads", "0", "--max-workers", "0", "--latency-target-ms", "0"},
		envOf(map[string]string{"TORCHD_THREADS": "4"}))
	if err != nil || c.Model.Threads.Set || c.Model.MaxWorkers.Set || c.Model.LatencyTarget.Set {
		t.Errorf("zeros, the flag's over the environment's threads: %v, %+v", err, c.Model)
	}
}

// The management service's errors reach gRPC as the codes REST's statuses had, with no
// request context in between: each bad input gets its code and a message naming what was wrong.
func TestManagementOverGRPC(t *testing.T) {
	cfg, err := LoadConfig([]string{"--model-store", t.TempDir(), "--enable-snapshots=false"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	d := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer d.Registry.Close()
	s := d.ts.ManagementService()
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
