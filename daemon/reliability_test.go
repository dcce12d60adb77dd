package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/torchd/torchd/archive"
)

// scrape returns one series' value from the metrics port; labels must match exactly the
// ones given.
func (s *server) scrape(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	r := do(t, "GET", s.metrics+"/metrics", "", nil)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	m := findMetric(t, fams, name, labels)
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", name)
	return 0
}

type describedWorker struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func (s *server) workers(t *testing.T, model string) (statuses []string) {
	t.Helper()
	var desc []struct {
		Workers []describedWorker `json:"workers"`
	}
	do(t, "GET", s.mgmt+"/models/"+model, "", nil).json(t, &desc)
	for _, w := range desc[0].Workers {
		statuses = append(statuses, w.Status)
	}
	return statuses
}

// A forward that runs past response_timeout: its request is answered 504 at the timeout,
// the watchdog replaces the worker, the next request is served by the replacement while the
// old thread is still in its forward (listed STUCK, counted in torchd_stuck_workers), and
// the old thread exits when the forward returns.
func TestStuckWorkerReplaced(t *testing.T) {
	s := startServer(t, "--batch-size", "1")
	s.register(t, "url=slow.mar&initial_workers=1&response_timeout=1")
	labels := map[string]string{"model": "slow", "version": "1.0"}

	start := time.Now()
	r := do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[6000, 0]]`))
	errorShape(t, r, 504, "RequestTimeoutException", "did not answer within its timeout")
	t.Logf("hung request answered %d after %v", r.status, time.Since(start).Round(time.Millisecond))

	var st []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st = s.workers(t, "slow")
		if strings.Join(st, ",") == "READY,STUCK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers %v, want a STUCK one and its READY replacement\n%s", st, s.Log())
		}
	}
	if got := s.scrape(t, "torchd_stuck_workers", labels); got != 1 {
		t.Fatalf("torchd_stuck_workers = %v, want 1", got)
	}
	if got := s.scrape(t, "torchd_workers", labels); got != 1 {
		t.Fatalf("torchd_workers = %v, want 1 (the replacement)", got)
	}
	r = do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[5, 0]]`))
	if r.status != 200 {
		t.Fatalf("request after the replacement: %d %s", r.status, r.body)
	}
	if st := s.workers(t, "slow"); len(st) != 2 || st[1] != "STUCK" {
		t.Fatalf("the replacement answered only after the stuck forward returned (workers %v)", st)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st = s.workers(t, "slow"); len(st) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stuck worker never exited: %v", st)
		}
	}
	if got := s.scrape(t, "torchd_stuck_workers", labels); got != 0 {
		t.Fatalf("torchd_stuck_workers = %v after the forward returned, want 0", got)
	}
	if !strings.Contains(s.Log(), "stuck worker's forward returned") {
		t.Fatalf("no log line for the stuck worker's exit\n%s", s.Log())
	}
	if r := do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`)); r.status != 200 {
		t.Fatalf("after the stuck worker exited: %d %s", r.status, r.body)
	}
}

// X-Request-Timeout is a per-request deadline: a request still queued when it passes is
// answered 504 and never reaches the model; a malformed header is 400.
func TestRequestTimeoutHeader(t *testing.T) {
	s := startServer(t, "--batch-size", "1")
	s.register(t, "url=slow.mar&initial_workers=1")
	busy := make(chan response)
	go func() {
		busy <- do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1500, 0]]`))
	}()
	time.Sleep(150 * time.Millisecond)
	post := func(timeout string) response {
		req := must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`))
		req.Header.Set("X-Request-Timeout", timeout)
		return send(t, req)
	}
	errorShape(t, post("100"), 504, "RequestTimeoutException", "within its timeout (100ms")
	errorShape(t, post("soon"), 400, "BadRequestException", "X-Request-Timeout")
	errorShape(t, post("-5"), 400, "BadRequestException", "X-Request-Timeout")
	if r := <-busy; r.status != 200 {
		t.Fatalf("busy request: %d %s", r.status, r.body)
	}
	if r := post("5s"); r.status != 200 {
		t.Fatalf("request within its deadline: %d %s", r.status, r.body)
	}
	if b, _ := s.batching(t, "slow"); b != 2 {
		t.Fatalf("the model ran %d batches, want 2: expired and refused requests must not run", b)
	}
}

// A model that loads but fails its warm-up forward is refused with LibTorch's message and
// leaves nothing behind; as a start-up model it keeps /ping unhealthy; the daemon serves on.
func TestWarmupFailure(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "model-config.toml")
	// slow indexes x[:, 1]: a declared input of width 1 makes its warm-up forward raise.
	os.WriteFile(cfg, []byte("handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 1]\n"), 0o644)
	if _, err := archive.Write(archive.WriteOptions{ModelName: "badwarm", SerializedFile: filepath.Join(zooDir, "slow", "model.pt"),
		ConfigFile: cfg, ExportPath: dir}); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--allowed-urls", "file://.*")
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	r := do(t, "POST", s.mgmt+"/models?url=file://"+filepath.Join(dir, "badwarm.mar")+"&initial_workers=1", "", nil)
	errorShape(t, r, 500, "InternalServerException", "failed its warm-up forward")
	if !strings.Contains(string(r.body), "index 1 out of range") {
		t.Errorf("the error does not carry LibTorch's message: %s", r.body)
	}
	if r := do(t, "GET", s.mgmt+"/models/badwarm", "", nil); r.status != 404 {
		t.Fatalf("the failed model is listed: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", s.inf+"/ping", "", nil); r.status != 200 {
		t.Fatalf("ping after a failed API registration: %d %s", r.status, r.body)
	}
	body, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	if r := do(t, "POST", s.inf+"/predictions/digits_tensor", "application/x-npy", body); r.status != 200 {
		t.Fatalf("the daemon stopped serving: %d %s", r.status, r.body)
	}

	// At start-up: /ping reports the failure, the other start-up model serves.
	s2 := startServer(t, "--allowed-urls", "file://.*", "--model-store", dir, "--models", "badwarm.mar")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ping statusBody
		r := do(t, "GET", s2.inf+"/ping", "", nil)
		r.json(t, &ping)
		if r.status == 500 && ping.Status == "Unhealthy" && strings.Contains(s2.Log(), "failed its warm-up forward") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %d %s with a start-up model that failed its warm-up", r.status, r.body)
		}
	}
}
