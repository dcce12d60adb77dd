package handlerproc

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testPython is the project venv's interpreter, which make test gives TorchServe's ts
// package (make handler-runtime); TORCHD_PYTHON names another.
func testPython(t testing.TB) string {
	if p := os.Getenv("TORCHD_PYTHON"); p != "" {
		return p
	}
	p, err := filepath.Abs("../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FindRuntime(p); err != nil {
		t.Fatalf("%v (make handler-runtime installs it)", err)
	}
	return p
}

// tinyDir copies testdata/tiny into a temporary model directory and writes the eager
// model's state dict there with the runtime's torch, as torch-model-archiver would pack it.
func tinyDir(t testing.TB, py string) string {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/tiny")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import torch, model; torch.manual_seed(0); torch.save(model.TinyNet().state_dict(), 'tiny.pt')")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the state dict: %v\n%s", err, out)
	}
	return dir
}

func startTiny(t testing.TB, handler string, mod func(*Config)) (*Model, error) {
	py := testPython(t)
	c := Config{Python: py, ModelName: "tiny", ModelDir: tinyDir(t, py), Handler: handler, BatchSize: 4,
		Processes: 1, ResponseTimeout: time.Minute, Log: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&c)
	}
	m, err := Start(c)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

func jsonReq(id, body string) Request {
	return Request{ID: id, Headers: []Header{{"X-Request-Id", "rid-" + id}},
		Params: []Param{{Name: "body", ContentType: "application/json", Value: []byte(body)}}}
}

type tinyAnswer struct {
	Logits    []float64 `json:"logits"`
	Batch     int       `json:"batch"`
	Header    string    `json:"header"`
	BatchSize int       `json:"batch_size"`
}

// A BaseHandler subclass over an eager model answers a batch, one answer per request, with
// TorchServe's Context (request headers, system_properties).
func TestCustomHandlerBatch(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := m.Predict([]Request{jsonReq("a", `{"x":[1,2,3,4]}`), jsonReq("b", `{"x":[0,0,0,0]}`), jsonReq("c", `{"x":[1,2,3,4]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Code != 200 || len(pr.Replies) != 3 {
		t.Fatalf("reply %d %q with %d answers", pr.Code, pr.Message, len(pr.Replies))
	}
	var ans [3]tinyAnswer
	for i, r := range pr.Replies {
		if r.ID != []string{"a", "b", "c"}[i] || r.Status != 200 {
			t.Errorf("answer %d: id %q status %d", i, r.ID, r.Status)
		}
		if err := json.Unmarshal(r.Body, &ans[i]); err != nil {
			t.Fatalf("answer %d: %v: %s", i, err, r.Body)
		}
	}
	if ans[0].Batch != 3 || len(ans[0].Logits) != 3 || ans[0].BatchSize != 4 || ans[0].Header != "rid-a" {
		t.Errorf("answer = %+v", ans[0])
	}
	for j := range ans[0].Logits {
		if d := ans[0].Logits[j] - ans[2].Logits[j]; d > 1e-6 || d < -1e-6 {
			t.Errorf("equal inputs answered %v and %v", ans[0].Logits, ans[2].Logits)
		}
	}
}

// A handler that raises fails its batch with TorchServe's 503; the process goes on serving.
func TestHandlerRaises(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := onlyProcess(t, m).pid
	pr, err := m.Predict([]Request{jsonReq("a", `"raise"`)})
	if err != nil || pr.Code != 503 || pr.Message != "Prediction failed" {
		t.Fatalf("raising handler: %+v, %v", pr, err)
	}
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the raise: %+v, %v", pr, err)
	}
	if got := onlyProcess(t, m).pid; got != pid {
		t.Errorf("the process was replaced (%d → %d) after a handler exception", pid, got)
	}
}

// A process that dies fails only its batch; a new one takes the next.
func TestHandlerCrashRestarts(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Predict([]Request{jsonReq("a", `"crash"`)})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "restarting") {
		t.Fatalf("crash: %v", err)
	}
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the crash: %+v, %v", pr, err)
	}
}

// A handler that hangs past the response timeout is killed, with its process group.
func TestHandlerHangKilled(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.ResponseTimeout = 3 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	hung := onlyProcess(t, m)
	_, err = m.Predict([]Request{jsonReq("a", `"hang"`)})
	if err == nil || !strings.Contains(err.Error(), "response timeout") {
		t.Fatalf("hang: %v", err)
	}
	select {
	case <-hung.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the hung process is still running")
	}
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the hang: %+v, %v", pr, err)
	}
}

// A handler that returns the wrong number of answers fails its batch as TorchServe does.
func TestHandlerWrongAnswerCount(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := m.Predict([]Request{jsonReq("a", `"wrong count"`), jsonReq("b", `{"x":[1,2,3,4]}`)})
	if err != nil || pr.Code != 503 || !strings.Contains(pr.Message, "number of batch response mismatched") {
		t.Fatalf("wrong count: %+v, %v", pr, err)
	}
}

// send_intermediate_predict_response's parts arrive in order, joined into one answer.
func TestHandlerStreams(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := m.Predict([]Request{jsonReq("a", `"stream"`), jsonReq("b", `{"x":[1,2,3,4]}`)})
	if err != nil || pr.Code != 200 || len(pr.Replies) != 2 {
		t.Fatalf("stream: %+v, %v", pr, err)
	}
	for _, r := range pr.Replies {
		if string(r.Body) != "abc" {
			t.Errorf("%s: body %q, want the parts joined", r.ID, r.Body)
		}
		if _, ok := r.Headers["ts_stream_next"]; ok {
			t.Errorf("%s: the stream marker leaked: %v", r.ID, r.Headers)
		}
	}
}

// MMS's module:function entry point.
func TestModuleFunctionHandler(t *testing.T) {
	m, err := startTiny(t, "service:handle", nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := m.Predict([]Request{{ID: "a", Params: []Param{{Name: "body", ContentType: "text/plain", Value: []byte("hello")}}}})
	if err != nil || pr.Code != 200 || len(pr.Replies) != 1 {
		t.Fatalf("%+v, %v", pr, err)
	}
	var got struct{ Echo string }
	if err := json.Unmarshal(pr.Replies[0].Body, &got); err != nil || got.Echo != "hello" {
		t.Errorf("answer %s: %v", pr.Replies[0].Body, err)
	}
}

// A handler that cannot be imported fails the start with Python's own error, and leaves
// nothing running.
func TestHandlerSyntaxError(t *testing.T) {
	_, err := startTiny(t, "broken.py", nil)
	if err == nil || !strings.Contains(err.Error(), "SyntaxError") {
		t.Fatalf("err = %v; want the SyntaxError", err)
	}
	if _, err := startTiny(t, "missing_module.py", nil); err == nil || !strings.Contains(err.Error(), "ModuleNotFoundError") {
		t.Errorf("missing module: %v", err)
	}
}

// An interpreter without TorchServe is named with what to install.
func TestRuntimeMissing(t *testing.T) {
	_, err := FindRuntime("/bin/false")
	if err == nil || !strings.Contains(err.Error(), "pip install torchserve") {
		t.Errorf("err = %v", err)
	}
	if _, err := FindRuntime("/nonexistent/python"); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("err = %v", err)
	}
}

// Close stops every process and removes their sockets, also while batches run.
func TestCloseLeavesNothing(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Processes = 2 })
	if err != nil {
		t.Fatal(err)
	}
	var procs []*process
	m.mu.Lock()
	for p := range m.live {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Predict([]Request{jsonReq("a", `"hang"`)}) }()
	time.Sleep(500 * time.Millisecond) // let the batch reach a process; the test passes either way
	m.Close()
	wg.Wait()
	for _, p := range procs {
		if err := syscall.Kill(p.pid, 0); err == nil {
			t.Errorf("process %d still running", p.pid)
		}
		if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
			t.Errorf("socket directory %s left behind", p.dir)
		}
	}
	if _, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err == nil {
		t.Error("a closed model answered")
	}
}

func onlyProcess(t *testing.T, m *Model) *process {
	t.Helper()
	<-m.idle.ready
	p := m.idle.take()
	m.idle.put(p)
	return p
}

// A process over its memory limit is killed: its batch fails, saying so, and a new process
// takes the next. RSS counts the live processes.
func TestHandlerMemoryLimit(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	base := m.RSS()
	if base <= 0 {
		t.Fatalf("RSS %d", base)
	}
	m.Close()
	// The handler's "grow" writes 1 GiB: half of it over what the process holds loaded.
	m, err = startTiny(t, "handler.py", func(c *Config) { c.MemoryLimit = base + 512<<20 })
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Predict([]Request{jsonReq("a", `"grow"`)})
	if err == nil || !strings.Contains(err.Error(), "over its memory limit") {
		t.Fatalf("grow: %v", err)
	}
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the kill: %+v, %v", pr, err)
	}
}

// A handler's PredictionException answers its own status and message, as in TorchServe.
func TestHandlerPredictionException(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := m.Predict([]Request{jsonReq("a", `"refuse"`)})
	if err != nil || pr.Code != 500 || pr.Message != "the handler refused this input" {
		t.Fatalf("%+v, %v", pr, err)
	}
}

// environ is pid's environment.
func environ(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// A handler process runs with glibc's mmap and trim thresholds fixed, so that a large batch's
// freed activations go back to the system and a small one's stay for the next, and with
// torch's large tensors on transparent huge pages; forked or started apart, the worker and
// torch see them. A setting the model's environment makes is kept instead.
func TestHandlerAllocDefaults(t *testing.T) {
	// Without transparent huge pages in the kernel, madvise refuses them whatever torch asks.
	_, statErr := os.Stat("/sys/kernel/mm/transparent_hugepage")
	thp := statErr == nil
	check := func(name string, p probe, want map[string]string, hugepage bool) {
		t.Helper()
		for k, v := range want {
			if got := p.AllocEnv[k]; got == nil {
				t.Errorf("%s: the worker's environment has no %s, want %s", name, k, v)
			} else if *got != v {
				t.Errorf("%s: the worker's %s is %s, want %s", name, k, *got, v)
			}
		}
		if thp && p.Hugepage != hugepage {
			t.Errorf("%s: torch asked huge pages for a large tensor: %v, want %v", name, p.Hugepage, hugepage)
		}
	}
	defaults := map[string]string{"MALLOC_MMAP_THRESHOLD_": "12582912", "MALLOC_TRIM_THRESHOLD_": "16777216", "THP_MEM_ALLOC_ENABLE": "1"}
	for _, apart := range []bool{false, true} {
		m, err := startTiny(t, "handler.py", func(c *Config) { c.StartApart = apart })
		if err != nil {
			t.Fatal(err)
		}
		name := map[bool]string{false: "forked", true: "apart"}[apart]
		check(name, probeModel(t, m), defaults, true)
		env := environ(t, onlyProcess(t, m).pid)
		for k, v := range defaults {
			if !slices.Contains(env, k+"="+v) {
				t.Errorf("%s: %s=%s is missing from the supervisor's environment", name, k, v)
			}
		}
		m.Close()
	}
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Env = []string{"MALLOC_MMAP_THRESHOLD_=65536", "THP_MEM_ALLOC_ENABLE=0"} })
	if err != nil {
		t.Fatal(err)
	}
	check("the model's own", probeModel(t, m),
		map[string]string{"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "16777216", "THP_MEM_ALLOC_ENABLE": "0"}, false)
}

// A process idle after a batch gives back what the batch freed below blocks it still holds
// (worker.py's trim_when_idle); glibc alone keeps that resident for good. A batch that runs
// past the second the trimmer waits (the sleep) leaves it waiting for the next batch's end.
func TestIdleTrim(t *testing.T) {
	for _, apart := range []bool{false, true} {
		m, err := startTiny(t, "handler.py", func(c *Config) { c.StartApart = apart })
		if err != nil {
			t.Fatal(err)
		}
		pid := probeModel(t, m).PID
		base := rss(pid)
		for _, body := range []string{`{"sleep": 1.5}`, `"fragment"`} {
			if pr, err := m.Predict([]Request{jsonReq("a", body)}); err != nil || pr.Code != 200 {
				t.Fatalf("%s: %+v, %v", body, pr, err)
			}
		}
		// The batch wrote 320 MiB and freed 256 of them between the 64 it keeps.
		var now int64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if now = rss(pid); now < base+160<<20 {
				break
			}
		}
		if now >= base+160<<20 {
			t.Errorf("apart %v: the idle process holds %d MiB, %d MiB more than before the batch", apart, now>>20, (now-base)>>20)
		}
		m.Close()
	}
}

// A Python that imports ts but not PyYAML, which the worker needs for its metrics config,
// is refused by the runtime check, saying what is missing.
func TestRuntimeWithoutYAML(t *testing.T) {
	py := testPython(t)
	dir := t.TempDir()
	// A yaml module that fails as a missing one does, first on the path.
	if err := os.WriteFile(filepath.Join(dir, "yaml.py"), []byte("raise ModuleNotFoundError(\"No module named 'yaml'\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shim := filepath.Join(dir, "python")
	if err := os.WriteFile(shim, []byte("#!/bin/sh\nPYTHONPATH="+dir+" exec "+py+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := FindRuntime(shim)
	if err == nil || !strings.Contains(err.Error(), "No module named 'yaml'") || !strings.Contains(err.Error(), "pyyaml") {
		t.Errorf("err = %v; want the missing yaml named", err)
	}
}

// A TMPDIR too long for a socket's path does not stop a handler process: its socket goes
// under /tmp, and nothing is left there when the model closes.
func TestLongTempDir(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	if SocketRoot() != "/tmp" {
		t.Fatalf("the socket root under a %d-byte TMPDIR is %s", len(long), SocketRoot())
	}
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pr, err := m.Predict([]Request{jsonReq("a", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("predict under a long TMPDIR: %v", err)
	}
	dir := onlyProcess(t, m).dir
	if filepath.Dir(dir) != "/tmp" {
		t.Fatalf("the socket directory is %s", dir)
	}
	m.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s is left after the model closed (%v)", dir, err)
	}
}
