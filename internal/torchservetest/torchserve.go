// Package torchservetest runs TorchServe itself, from the handler runtime's torchserve
// package, for the tests that compare torchd's answers with TorchServe's. Production code
// must not import it.
package torchservetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Python is the handler runtime: TORCHD_PYTHON, else the project venv under root (the
// repository's root, relative to the test's package), which make test gives TorchServe, its
// archiver and captum (make handler-runtime). It fails the test without them, and without
// the Java TorchServe needs.
func Python(t testing.TB, root string) string {
	t.Helper()
	p := os.Getenv("TORCHD_PYTHON")
	if p == "" {
		var err error
		if p, err = filepath.Abs(filepath.Join(root, ".venv", "bin", "python")); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(p, "-c", "import ts, model_archiver, captum").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import TorchServe, its archiver and captum (make handler-runtime): %v\n%s", p, err, out)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("TorchServe needs Java (make setup installs openjdk-17-jre-headless)")
	}
	return p
}

// Server is a running TorchServe.
type Server struct {
	cmd       *exec.Cmd
	Dir       string // its config, logs and temporary files
	Inf, Mgmt string // the inference and management APIs' base URLs
	Exited    chan struct{}
}

// Start runs TorchServe in the foreground on free ports, with every archive of store loaded
// at start, and everything it writes under a temporary directory; extra are more
// config.properties lines. It is stopped when the test ends.
func Start(t testing.TB, py, store string, extra ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	var ports [5]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`inference_address=http://127.0.0.1:%d
management_address=http://127.0.0.1:%d
metrics_address=http://127.0.0.1:%d
grpc_inference_port=%d
grpc_management_port=%d
model_store=%s
load_models=all
disable_token_authorization=true
install_py_dep_per_model=false
vmargs=-Xmx1g -XX:+UseContainerSupport -Djava.io.tmpdir=%s
`, ports[0], ports[1], ports[2], ports[3], ports[4], store, tmp)
	for _, l := range extra {
		cfg += l + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "config.properties"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := &Server{Dir: dir, Exited: make(chan struct{}),
		Inf: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), Mgmt: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	// The torchserve console script, run by the runtime's interpreter so that its workers
	// run it too.
	ts.cmd = exec.Command(py, "-c", "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()",
		"--start", "--foreground", "--ncs", "--ts-config", "config.properties", "--model-store", store, "--disable-token-auth")
	ts.cmd.Dir = dir
	ts.cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LOG_LOCATION="+filepath.Join(dir, "logs"), "METRICS_LOCATION="+filepath.Join(dir, "logs"))
	ts.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	ts.cmd.Stdout, ts.cmd.Stderr = &out, &out
	// The ports are free again only once this function returns: TorchServe binds them
	// seconds later, after the JVM starts.
	if err := ts.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ts.cmd.Wait(); close(ts.Exited) }()
	t.Cleanup(ts.Stop)
	return ts
}

// Stop kills TorchServe's process group: the JVM and its Python workers.
func (ts *Server) Stop() {
	select {
	case <-ts.Exited:
		return
	default:
	}
	syscall.Kill(-ts.cmd.Process.Pid, syscall.SIGKILL)
	<-ts.Exited
}

// WaitWorkerReady polls a TorchServe-style management API at mgmt (TorchServe's or
// torchd's) until model's first worker is READY; exited (nil: never) is the server's end.
func WaitWorkerReady(t testing.TB, mgmt, model string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the server exited while %s loaded", model)
		default:
		}
		resp, err := http.Get(mgmt + "/models/" + model)
		if err == nil {
			var d []struct {
				Workers []struct {
					Status string `json:"status"`
				} `json:"workers"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if json.Unmarshal(b, &d) == nil && len(d) == 1 && len(d[0].Workers) > 0 && d[0].Workers[0].Status == "READY" {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(last) > 300 {
		last = last[:300] + "…"
	}
	t.Fatalf("%s not ready within 5 minutes: %s", model, last)
}
