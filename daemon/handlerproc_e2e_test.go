package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// venvPython is the project venv's interpreter, which make test gives TorchServe's worker
// and archiver (make handler-runtime).
func venvPython(t testing.TB) string {
	p, err := filepath.Abs("../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, "-c", "import ts, model_archiver").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import TorchServe (make handler-runtime): %v\n%s", p, err, out)
	}
	return p
}

// archiveTiny packs handlerproc's test handler and eager model with TorchServe's own
// torch-model-archiver, as a TorchServe user does, into the e2e store as NAME.mar, with
// handler as --handler.
func archiveTiny(t testing.TB, py, name, handler string) {
	t.Helper()
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../handlerproc/testdata/tiny")); err != nil {
		t.Fatal(err)
	}
	steps := [][]string{
		{py, "-c", "import torch, model; torch.manual_seed(0); torch.save(model.TinyNet().state_dict(), 'tiny.pt')"},
		{filepath.Join(filepath.Dir(py), "torch-model-archiver"), "--model-name", name, "--version", "1.0", "--model-file", "model.py",
			"--serialized-file", "tiny.pt", "--handler", handler, "--extra-files", "service.py,handler.py,broken.py", "--export-path", store, "--force"},
	}
	for _, args := range steps {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { os.Remove(filepath.Join(store, name+".mar")) })
}

// An archive made by torch-model-archiver with a custom BaseHandler over an eager model
// serves through handler processes behind the core: batches form, the handler's exception
// is TorchServe's 503 for its batch only, and a model registered with an MMS entry point
// runs too.
func TestHandlerProcessArchive(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pytiny", "handler.py")
	archiveTiny(t, py, "pyecho", "service:handle")
	s := startServer(t, "--python", py)
	s.register(t, "url=pytiny.mar&batch_size=4&max_batch_delay=2000&initial_workers=1&synchronous=true")

	var d []struct {
		ModelName string `json:"modelName"`
		Handler   string `json:"handler"`
		Runtime   string `json:"runtime"`
	}
	do(t, "GET", s.mgmt+"/models/pytiny", "", nil).json(t, &d)
	if len(d) != 1 || d[0].Handler != "python" || d[0].Runtime != "python" {
		t.Errorf("describe: %+v", d)
	}

	// Four requests at once fill one batch of four.
	var wg sync.WaitGroup
	answers := make([]response, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = post(s.inf+"/predictions/pytiny", "application/json", []byte(`{"x":[1,2,3,4]}`), "X-Request-Id", fmt.Sprint("r", i))
		}()
	}
	wg.Wait()
	maxBatch := 0
	for i, r := range answers {
		var a struct {
			Logits []float64 `json:"logits"`
			Batch  int       `json:"batch"`
			Header string    `json:"header"`
		}
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		r.json(t, &a)
		if len(a.Logits) != 3 || a.Header != fmt.Sprint("r", i) {
			t.Errorf("request %d: %s", i, r.body)
		}
		maxBatch = max(maxBatch, a.Batch)
	}
	t.Logf("largest batch the handler saw: %d", maxBatch)
	if maxBatch < 2 {
		t.Errorf("four concurrent requests never shared a batch (max_batch_delay 2 s)")
	}

	// A handler that raises: 503 with TorchServe's message; the next request is served.
	errorShape(t, post(s.inf+"/predictions/pytiny", "application/json", []byte(`"raise"`)), 503, "", "Prediction failed")
	if r := post(s.inf+"/predictions/pytiny", "application/json", []byte(`{"x":[1,2,3,4]}`)); r.status != 200 {
		t.Errorf("after the raise: %d %s", r.status, r.body)
	}

	// MMS's module:function entry point.
	s.register(t, "url=pyecho.mar&initial_workers=1&synchronous=true")
	r := post(s.inf+"/predictions/pyecho", "text/plain", []byte("hello"))
	var echo struct{ Echo string }
	if r.status != 200 || json.Unmarshal(r.body, &echo) != nil || echo.Echo != "hello" {
		t.Errorf("module:function handler: %d %s", r.status, r.body)
	}

	// Unregistering stops the processes: the server's log says nothing failed.
	for _, m := range []string{"pytiny", "pyecho"} {
		if r := do(t, "DELETE", s.mgmt+"/models/"+m, "", nil); r.status != 200 {
			t.Errorf("unregister %s: %d %s", m, r.status, r.body)
		}
	}
}

// A handler that cannot be imported fails its registration with Python's own error, and
// the server goes on serving.
func TestHandlerProcessBrokenHandler(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pybroken", "broken.py")
	s := startServer(t, "--python", py)
	r := do(t, "POST", s.mgmt+"/models?url=pybroken.mar&initial_workers=1&synchronous=true", "", nil)
	if r.status < 400 || !strings.Contains(string(r.body), "SyntaxError") {
		t.Errorf("a handler with a syntax error registered: %d %s", r.status, r.body)
	}
	// With handler processes off, such an archive is refused, saying so.
	off := startServer(t, "--python", "off")
	r = do(t, "POST", off.mgmt+"/models?url=pybroken.mar&initial_workers=1&synchronous=true", "", nil)
	if r.status < 400 || !strings.Contains(string(r.body), "handler processes are off") {
		t.Errorf("python off: %d %s", r.status, r.body)
	}
	// An interpreter without TorchServe is named, with what to install.
	s2 := startServer(t, "--python", "/bin/false")
	r = do(t, "POST", s2.mgmt+"/models?url=pybroken.mar&initial_workers=1&synchronous=true", "", nil)
	if r.status < 400 || !strings.Contains(string(r.body), "pip install torchserve") {
		t.Errorf("no runtime: %d %s", r.status, r.body)
	}
}
