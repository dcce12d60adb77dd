package served_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/handlerproc"
)

// An archive made by torch-model-archiver with a custom BaseHandler over an eager model
// serves through handler processes behind the core: batches form, the handler's exception
// is TorchServe's 503 for its batch only, and a model registered with an MMS entry point
// runs too.
func TestHandlerProcessArchive(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pytiny", "handler.py")
	archiveTiny(t, py, s.store, "pyecho", "service:handle")
	s.register(t, "url=pytiny.mar&batch_size=4&max_batch_delay=2000&initial_workers=1&synchronous=true")

	var d []struct {
		ModelName string `json:"modelName"`
		Handler   string `json:"handler"`
		Runtime   string `json:"runtime"`
	}
	s.mgmt("GET", "/models/pytiny").json(t, &d)
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
			answers[i] = s.inf("POST", "/predictions/pytiny", "application/json", []byte(`{"x":[1,2,3,4]}`), "X-Request-Id", fmt.Sprint("r", i))
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
	errorShape(t, s.inf("POST", "/predictions/pytiny", "application/json", []byte(`"raise"`)), 503, "", "Prediction failed")
	if r := s.inf("POST", "/predictions/pytiny", "application/json", []byte(`{"x":[1,2,3,4]}`)); r.status != 200 {
		t.Errorf("after the raise: %d %s", r.status, r.body)
	}

	// MMS's module:function entry point.
	s.register(t, "url=pyecho.mar&initial_workers=1&synchronous=true")
	r := s.inf("POST", "/predictions/pyecho", "text/plain", []byte("hello"))
	var echo struct{ Echo string }
	if r.status != 200 || json.Unmarshal(r.body, &echo) != nil || echo.Echo != "hello" {
		t.Errorf("module:function handler: %d %s", r.status, r.body)
	}

	// Unregistering stops the processes.
	for _, m := range []string{"pytiny", "pyecho"} {
		if r := s.mgmt("DELETE", "/models/"+m); r.status != 200 {
			t.Errorf("unregister %s: %d %s", m, r.status, r.body)
		}
	}
}

// A handler that cannot be imported fails its registration with Python's own error, and
// the server goes on serving.
func TestHandlerProcessBrokenHandler(t *testing.T) {
	py := venvPython(t)
	store := t.TempDir()
	archiveTiny(t, py, store, "pybroken", "broken.py")
	s := serve(t, store, &handlerproc.Backend{Python: py})
	r := s.mgmt("POST", "/models?url=pybroken.mar&initial_workers=1&synchronous=true")
	if r.status < 400 || !strings.Contains(string(r.body), "SyntaxError") {
		t.Errorf("a handler with a syntax error registered: %d %s", r.status, r.body)
	}
	// With handler processes off, such an archive is refused, saying so.
	off := serve(t, store, &handlerproc.Backend{Python: handlerproc.Off})
	r = off.mgmt("POST", "/models?url=pybroken.mar&initial_workers=1&synchronous=true")
	if r.status < 400 || !strings.Contains(string(r.body), "handler processes are off") {
		t.Errorf("python off: %d %s", r.status, r.body)
	}
	// An interpreter without TorchServe is named, with what to install.
	s2 := serve(t, store, &handlerproc.Backend{Python: "/bin/false"})
	r = s2.mgmt("POST", "/models?url=pybroken.mar&initial_workers=1&synchronous=true")
	if r.status < 400 || !strings.Contains(string(r.body), "pip install torchserve") {
		t.Errorf("no runtime: %d %s", r.status, r.body)
	}
}

// Each way a Python handler can fail, through torchd's REST API, with two handler processes:
// the failing request gets a clear answer, a request beside it is served, and the model
// serves on. The processes' memory shows in the metrics.
func TestHandlerProcessFailures(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyfail", "handler.py")
	s.register(t, "url=pyfail.mar&initial_workers=2&batch_size=1&response_timeout=5&synchronous=true")
	ok := []byte(`{"x":[1,2,3,4]}`)
	pred := func(body []byte) response { return s.inf("POST", "/predictions/pyfail", "application/json", body) }

	cases := []struct {
		name, body string
		status     []int // TorchServe's status for it (the core's 504 may answer a hang first)
		msg        string
	}{
		// A plain exception is TorchServe's 503 "Prediction failed"; the traceback is in the log.
		{"raises", `"raise"`, []int{503}, "Prediction failed"},
		// TorchServe's PredictionException carries its own status and message.
		{"refuses", `"refuse"`, []int{500}, "the handler refused this input"},
		{"crashes", `"crash"`, []int{500}, "exit status 3"},
		{"hangs", `"hang"`, []int{500, 504}, "timeout"},
		{"wrong number of answers", `"wrong count"`, []int{503}, "number of batch response mismatched"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			var bad, good response
			wg.Add(2)
			go func() { defer wg.Done(); bad = pred([]byte(c.body)) }()
			go func() { defer wg.Done(); good = pred(ok) }()
			wg.Wait()
			if !containsInt(c.status, bad.status) || !strings.Contains(string(bad.body), c.msg) {
				t.Errorf("%d %s; want %v with %q", bad.status, bad.body, c.status, c.msg)
			}
			if good.status != 200 {
				t.Errorf("the request beside it: %d %s", good.status, good.body)
			}
			// The model serves on (a replaced process included).
			for i := range 3 {
				if r := pred(ok); r.status != 200 {
					t.Errorf("request %d after: %d %s", i, r.status, r.body)
				}
			}
		})
	}
	if log := s.log.String(); !strings.Contains(log, "ValueError: asked to raise") {
		t.Error("the handler's traceback is not in torchd's log")
	}

	r := do(s.metrics.Routes(), "GET", "/metrics", "", nil)
	var rss string
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if strings.HasPrefix(line, `torchd_handler_process_rss_bytes{model="pyfail"`) {
			rss = line
		}
	}
	if f := strings.Fields(rss); len(f) != 2 || f[1] == "0" {
		t.Errorf("no RSS for the handler processes in the metrics: %q", rss)
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
