package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	pb "github.com/torchd/torchd/proto/inference"
)

// The attack of issue 50 on model control: the Open Inference Protocol's gRPC
// RepositoryModelUnload and RepositoryModelLoad unloaded and loaded models with the
// inference key, and with no key when token authorization was off, while the management API
// stays on loopback. They, and REST's /v2/repository/models/{m}/load and /unload, now take
// the management key and are refused unless model control is explicit.

// With token authorization and explicit model control: no key and the inference key are
// refused, over gRPC and REST, and the model serves on; the management key unloads and loads.
func TestRepositoryControlNeedsManagementKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	s := startServer(t, "--models", "digits=digits.mar", "--enable-token-authorization", "--key-file", keyFile, "--model-control-mode", "explicit")
	s.waitHealthy(t)
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var keys struct{ Inference, Management struct{ Key string } }
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	bearer := func(key string) context.Context {
		if key == "" {
			return callCtx(t)
		}
		return metadata.AppendToOutgoingContext(callCtx(t), "authorization", "Bearer "+key)
	}
	c := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	ready := func() bool {
		r, err := c.ModelReady(bearer(keys.Inference.Key), &pb.ModelReadyRequest{Name: "digits"})
		return err == nil && r.GetReady()
	}
	for name, key := range map[string]string{"no key": "", "the inference key": keys.Inference.Key} {
		_, err := c.RepositoryModelUnload(bearer(key), &pb.RepositoryModelUnloadRequest{ModelName: "digits"})
		wantCode(t, err, codes.Unauthenticated, "management key")
		_, err = c.RepositoryModelLoad(bearer(key), &pb.RepositoryModelLoadRequest{ModelName: "digits_tensor"})
		wantCode(t, err, codes.Unauthenticated, "management key")
		for _, op := range []string{"unload", "load"} {
			r := withKey(t, "POST", s.inf+"/v2/repository/models/digits/"+op, key, nil)
			if r.status != 400 || !contains(r.body, "management key") {
				t.Fatalf("REST %s with %s: %d %s", op, name, r.status, r.body)
			}
		}
		if !ready() {
			t.Fatalf("digits is not ready after the refusals with %s", name)
		}
	}
	if _, err := c.RepositoryModelUnload(bearer(keys.Management.Key), &pb.RepositoryModelUnloadRequest{ModelName: "digits"}); err != nil {
		t.Fatalf("unload with the management key: %v", err)
	}
	if ready() {
		t.Fatal("digits is ready after its unload")
	}
	if _, err := c.RepositoryModelLoad(bearer(keys.Management.Key), &pb.RepositoryModelLoadRequest{ModelName: "digits"}); err != nil {
		t.Fatalf("load with the management key: %v", err)
	}
	if !ready() {
		t.Fatal("digits is not ready after its load")
	}
	if r := withKey(t, "POST", s.inf+"/v2/repository/models/digits/unload", keys.Management.Key, nil); r.status != 200 || ready() {
		t.Fatalf("REST unload with the management key: %d %s", r.status, r.body)
	}
	// The index stays an inference call.
	if _, err := c.RepositoryIndex(bearer(keys.Inference.Key), &pb.RepositoryIndexRequest{}); err != nil {
		t.Fatalf("index with the inference key: %v", err)
	}
}

// Without explicit model control the repository API is refused with or without a key:
// frontend/kserve's TestRepositoryControlOff.

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
