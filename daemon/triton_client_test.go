package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tritonPython is the venv `make pyclients pyclients-http` makes: Triton's tritonclient.
var tritonPython = filepath.Join("..", "build", "pyclients", "bin", "python")

// TestTritonHTTPClient serves a Triton repository in explicit mode and drives it with
// Triton's Python HTTP client (testdata/triton_http_client.py): metadata, infer (equal to
// the TorchServe API's answers), statistics, repository index, load, unload and override,
// and logging.
func TestTritonHTTPClient(t *testing.T) {
	if _, err := os.Stat(tritonPython); err != nil {
		t.Skip("no build/pyclients venv: run make pyclients-http (make test does)")
	}
	repo := t.TempDir()
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	repoModel(t, repo, "other", strings.Replace(tritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "digits")
	settled(t, s)
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	cmd := exec.Command(tritonPython, filepath.Join("testdata", "triton_http_client.py"), strings.TrimPrefix(s.inf, "http://"))
	done := make(chan struct{})
	time.AfterFunc(5*time.Minute, func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	out, err := cmd.CombinedOutput()
	close(done)
	if strings.Contains(string(out), "No module named 'tritonclient.http'") {
		t.Fatalf("build/pyclients lacks tritonclient[http]: run make pyclients-http\n%s", out)
	}
	if err != nil {
		t.Fatalf("%v\n%s\nserver log:\n%s", err, out, s.Log())
	}
	t.Logf("%s", out)
}
