package libtorch_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core/coretest"
)

// What a LibTorch model's failures do to its requests, and to nothing else: a forward that
// hangs, a warm-up that raises, exceptions under load. docs/guide/reliability.md says why.

// A forward that runs past response_timeout: its request is answered 504 at the timeout,
// the watchdog replaces the worker, the next request is served by the replacement while the
// old thread is still in its forward (listed STUCK, counted in torchd_stuck_workers), and
// the old thread exits when the forward returns.
func TestStuckWorkerReplaced(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=slow.mar&batch_size=1&initial_workers=1&response_timeout=1&synchronous=true")
	labels := map[string]string{"model": "slow", "version": "1.0"}

	r := s.do("POST", "/predictions/slow", "application/json", []byte(`[[6000, 0]]`))
	errorShape(t, r, 504, "RequestTimeoutException", "did not answer within its timeout")

	coretest.WaitFor(t, "a STUCK worker and its READY replacement", func() bool {
		return strings.Join(s.workers(t, "slow"), ",") == "READY,STUCK"
	})
	if got := s.scrape(t, "torchd_stuck_workers", labels); got != 1 {
		t.Fatalf("torchd_stuck_workers = %v, want 1", got)
	}
	if got := s.scrape(t, "torchd_workers", labels); got != 1 {
		t.Fatalf("torchd_workers = %v, want 1 (the replacement)", got)
	}
	// The replacement serves while the stuck thread still runs. (On a loaded machine the 1 s
	// response_timeout can pass for a request queued behind the replacement's warm-up, so a
	// 504 is retried while the stuck worker is still listed.)
	for attempt := 1; ; attempt++ {
		r = s.do("POST", "/predictions/slow", "application/json", []byte(`[[1, 0]]`))
		st := s.workers(t, "slow")
		if len(st) != 2 || st[1] != "STUCK" {
			t.Fatalf("no answer from the replacement before the stuck forward returned (last %d %s; workers %v)", r.status, r.body, st)
		}
		if r.status == 200 {
			break
		}
		if r.status != 504 || attempt == 5 {
			t.Fatalf("request after the replacement: %d %s", r.status, r.body)
		}
	}
	coretest.WaitFor(t, "the stuck worker to exit", func() bool { return len(s.workers(t, "slow")) == 1 })
	if got := s.scrape(t, "torchd_stuck_workers", labels); got != 0 {
		t.Fatalf("torchd_stuck_workers = %v after the forward returned, want 0", got)
	}
	if !strings.Contains(s.Log(), "stuck worker's forward returned") {
		t.Fatalf("no log line for the stuck worker's exit\n%s", s.Log())
	}
	if r := s.do("POST", "/predictions/slow", "application/json", []byte(`[[1, 0]]`)); r.status != 200 {
		t.Fatalf("after the stuck worker exited: %d %s", r.status, r.body)
	}
}

// A model that loads but fails its warm-up forward is refused with LibTorch's message and
// leaves nothing behind; the models registered before serve on. (As a start-up model it
// keeps the server unready: lifecycle's TestStartupModelFailsWarmup.)
func TestWarmupFailure(t *testing.T) {
	s := newServer(t, 0)
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	// slow indexes x[:, 1]: a declared input of width 1 makes its warm-up forward raise.
	os.WriteFile(cfg, []byte("handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 1]\n"), 0o644)
	if _, err := archive.Write(archive.WriteOptions{ModelName: "badwarm", SerializedFile: filepath.Join(zooDir, "slow", "model.pt"),
		ConfigFile: cfg, ExportPath: s.scratch}); err != nil {
		t.Fatal(err)
	}
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	r := s.manage("POST", "/models?url=badwarm.mar&initial_workers=1")
	errorShape(t, r, 500, "InternalServerException", "failed its warm-up forward")
	if !strings.Contains(string(r.body), "index 1 out of range") {
		t.Errorf("the error does not carry LibTorch's message: %s", r.body)
	}
	if r := s.manage("GET", "/models/badwarm"); r.status != 404 {
		t.Fatalf("the failed model is listed: %d %s", r.status, r.body)
	}
	body, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	if r := s.do("POST", "/predictions/digits_tensor", "application/x-npy", body); r.status != 200 {
		t.Fatalf("serving stopped: %d %s", r.status, r.body)
	}
}

// LibTorch exceptions under load: 16 clients send 800 requests to a model that raises on one
// in five (a negative second column), batched by 8. Each raising request is answered 500
// with the script's message; every other one gets its own output; the metrics count both.
func TestModelExceptionsUnderLoad(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=slow.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	const n = 800
	results := make([]response, n)
	forEach(n, 16, func(i int) {
		flag := 0
		if i%5 == 0 {
			flag = -1
		}
		results[i] = s.do("POST", "/predictions/slow", "application/json", []byte(fmt.Sprintf(`[[0, %d.%d]]`, flag, i)))
	})
	bad := 0
	for i, r := range results {
		if i%5 == 0 {
			errorShape(t, r, 500, "InternalServerException", "negative input")
			bad++
			continue
		}
		if got := tensorData(t, r); len(got) != 2 || got[1] != 2*float64(i)/math.Pow(10, float64(len(strconv.Itoa(i)))) {
			t.Fatalf("request %d: got %v", i, got)
		}
	}
	labels := func(code string) map[string]string {
		return map[string]string{"model": "slow", "version": "1.0", "code": code}
	}
	if ok, failed := s.scrape(t, "torchd_requests_total", labels("200")), s.scrape(t, "torchd_requests_total", labels("500")); int(ok) != n-bad || int(failed) != bad {
		t.Fatalf("metrics count %v answered and %v failed, want %d and %d", ok, failed, n-bad, bad)
	}
	v, err := s.reg.Get("slow", "")
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Batches == 0 || st.MeanBatchSize() <= 1 {
		t.Fatalf("no batching under load (%d batches, mean %.2f): the test did not mix good and bad requests in batches", st.Batches, st.MeanBatchSize())
	}
}
