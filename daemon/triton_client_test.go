package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTritonHTTPClient serves a Triton repository in explicit mode and drives it with
// Triton's Python HTTP client (testdata/triton_http_client.py, in the pyclients venv with
// `make pyclients-http`): metadata, infer (equal to the TorchServe API's answers),
// statistics, repository index, load, unload and override, and logging.
func TestTritonHTTPClient(t *testing.T) {
	if _, err := os.Stat(pyclients); err != nil {
		t.Skip("no build/pyclients venv: run make pyclients-http (make test does)")
	}
	repo := t.TempDir()
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	repoModel(t, repo, "other", strings.Replace(tritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "digits")
	settled(t, s)
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	out, err := exec.Command(pyclients, filepath.Join("testdata", "triton_http_client.py"), strings.TrimPrefix(s.inf, "http://")).CombinedOutput()
	t.Logf("%s", out)
	if strings.Contains(string(out), "No module named 'tritonclient.http'") {
		t.Fatal("build/pyclients lacks tritonclient[http]: run make pyclients-http")
	}
	if err != nil {
		t.Fatalf("Triton's HTTP client failed: %v\n%s", err, s.Log())
	}
}
