package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/zootest"
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
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "other", strings.Replace(zootest.TritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
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

// repoIndex returns the repository index as "name version state: reason" lines.
func repoIndex(t testing.TB, s *server) map[string]string {
	t.Helper()
	var idx []struct{ Name, Version, State, Reason string }
	r := do(t, "POST", s.inf+"/v2/repository/index", "application/json", nil)
	r.json(t, &idx)
	out := map[string]string{}
	for _, e := range idx {
		out[strings.TrimSuffix(e.Name+" "+e.Version, " ")] = strings.TrimSuffix(e.State+": "+e.Reason, ": ")
	}
	return out
}

// settled waits until no model of the repository is loading, and returns the index.
func settled(t testing.TB, s *server) map[string]string {
	t.Helper()
	s.waitHealthy(t) // the start-up models are loaded or failed
	for range 1200 {
		idx := repoIndex(t, s)
		loading := false
		for _, state := range idx {
			loading = loading || state == "LOADING" || state == "UNLOADING"
		}
		if !loading {
			return idx
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the repository is still loading\n%s", s.Log())
	return nil
}
