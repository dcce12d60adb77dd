package daemon_test

import (
	"strings"
	"sync"
	"testing"
)

// Each way a Python handler can fail, through torchd's REST API, with two handler processes:
// the failing request gets a clear answer, a request beside it is served, and the model
// serves on. The processes' memory shows in the metrics.
func TestHandlerProcessFailures(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pyfail", "handler.py")
	s := startServer(t, "--python", py)
	s.register(t, "url=pyfail.mar&initial_workers=2&batch_size=1&response_timeout=5&synchronous=true")
	ok := []byte(`{"x":[1,2,3,4]}`)
	pred := s.inf + "/predictions/pyfail"

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
			go func() { defer wg.Done(); bad = post(pred, "application/json", []byte(c.body)) }()
			go func() { defer wg.Done(); good = post(pred, "application/json", ok) }()
			wg.Wait()
			if !containsInt(c.status, bad.status) || !strings.Contains(string(bad.body), c.msg) {
				t.Errorf("%d %s; want %v with %q", bad.status, bad.body, c.status, c.msg)
			}
			if good.status != 200 {
				t.Errorf("the request beside it: %d %s", good.status, good.body)
			}
			// The model serves on (a replaced process included).
			for i := range 3 {
				if r := post(pred, "application/json", ok); r.status != 200 {
					t.Errorf("request %d after: %d %s", i, r.status, r.body)
				}
			}
		})
	}
	if log := s.Log(); !strings.Contains(log, "ValueError: asked to raise") {
		t.Error("the handler's traceback is not in torchd's log")
	}

	r := do(t, "GET", s.metrics+"/metrics", "", nil)
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
