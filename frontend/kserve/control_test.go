package kserve_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// Without explicit model control (the default, none), the repository API loads and unloads
// nothing, with or without a key: over gRPC (UNAVAILABLE) and REST (503) the refusal says how
// to turn control on, and the model serves on. (With token authorization the daemon asks for
// the management key first: its TestRepositoryControlNeedsManagementKey.)
func TestRepositoryControlOff(t *testing.T) {
	reg := coretest.NewRegistry(t, &coretest.Runtime{})
	coretest.Add(t, reg, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	life := lifecycle.New(lifecycle.Config{Registry: reg, ModelStore: t.TempDir(), ControlMode: lifecycle.ControlNone,
		Open: func(core.RegisterRequest) (*core.ModelVersion, error) {
			return nil, core.Errorf(core.ErrBadModel, "nothing to open")
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(life.Stop)
	api := &kserve.API{Registry: reg, Life: life, Ready: func() bool { return true }, MaxRequestSize: 1 << 20}
	oip := api.InferenceService()
	ctx := context.Background()
	_, err := oip.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "m"})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "--model-control-mode explicit") {
		t.Errorf("gRPC unload: %v", err)
	}
	_, err = oip.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "n"})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "--model-control-mode explicit") {
		t.Errorf("gRPC load: %v", err)
	}
	for _, op := range []string{"unload", "load"} {
		r := frontendtest.Do(api.Routes(), frontendtest.Request{Method: "POST", URI: "/v2/repository/models/m/" + op})
		if r.Status != 503 || !strings.Contains(string(r.Body), "--model-control-mode explicit") {
			t.Errorf("REST %s: %d %s", op, r.Status, r.Body)
		}
	}
	if r, err := oip.ModelReady(ctx, &pb.ModelReadyRequest{Name: "m"}); err != nil || !r.GetReady() {
		t.Errorf("m after the refused unloads: %v %v", r, err)
	}
	if r, err := oip.ModelReady(ctx, &pb.ModelReadyRequest{Name: "n"}); err == nil && r.GetReady() {
		t.Errorf("n after the refused load: %v", r)
	}
}
