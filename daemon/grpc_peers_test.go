package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// pyclients is the venv `make pyclients` makes from proto/requirements.txt: Triton's
// tritonclient and grpcio-tools, for TorchServe's stubs.
var pyclients = filepath.Join("..", "build", "pyclients", "bin", "python")

// Triton's and TorchServe's own Python clients run every gRPC call against torchd
// (testdata/grpc_peers.py) and compare outputs with the REST API's.
func TestGRPCPeerClients(t *testing.T) {
	if _, err := os.Stat(pyclients); err != nil {
		t.Skip("no build/pyclients venv: run make pyclients (make test does)")
	}
	// Explicit model control lets Triton's client load and unload the model store's archives.
	s := startServer(t, "--models", "digits_tensor=digits_tensor.mar,digits=digits.mar", "--model-control-mode", "explicit")
	s.waitHealthy(t)
	imgs, _ := heldOut(t)
	png := filepath.Join(t.TempDir(), "digit.png")
	if err := os.WriteFile(png, imgs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pyclients, filepath.Join("testdata", "grpc_peers.py"),
		"--grpc", s.grpc, "--ts-inference", s.grpcInf, "--ts-management", s.grpcMgmt, "--rest", s.inf,
		"--protos", filepath.Join("..", "proto"), "--out", t.TempDir(), "--image", png,
		"--input", filepath.Join(zooDir, "digits", "ref_input.npy"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the peer clients failed: %v\n%s", err, s.Log())
	}
}
