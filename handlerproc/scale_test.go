package handlerproc

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/handlers"
)

// sample is one request as the python handler's Preprocess makes it from a JSON body.
func sample(t *testing.T, body string) *handlers.Sample {
	t.Helper()
	s, err := pythonHandler{}.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{ContentType: "application/json", Data: []byte(body)}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A handler's status reaches the client when it is a final one (200 to 599); any other is a
// 500, and the log names the handler's status.
func TestHandlerStatusValidated(t *testing.T) {
	log := &syncBuffer{}
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Log = slog.New(slog.NewTextHandler(log, nil)) })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ status, want int }{
		{201, 201}, {404, 404}, {599, 599}, {200, 200},
		{1000, 500}, {101, 500}, {0, 500}, {-5, 500}, {99, 500}, {600, 500},
	} {
		s := sample(t, fmt.Sprintf(`{"status": %d}`, c.status))
		if _, err := m.Run([]*handlers.Sample{s}, nil); err != nil {
			t.Fatalf("status %d: %v", c.status, err)
		}
		resp, err := pythonHandler{}.Postprocess(s, nil)
		got := 0
		var he *handlers.Error
		if errors.As(err, &he) {
			got = he.Code
		} else if err == nil {
			got = resp.Status
		}
		if got != c.want {
			t.Errorf("the handler's status %d answered %d; want %d", c.status, got, c.want)
		}
		if c.want == 500 {
			if err == nil || !strings.Contains(err.Error(), "invalid HTTP status") {
				t.Errorf("status %d: error %v; want the reason", c.status, err)
			}
			waitLog(t, log, fmt.Sprintf("status=%d", c.status))
		}
	}
}

// A batch that a process loses (here, a crash) tells the core not to retry it request by
// request, and still answers 500.
func TestLostBatchNotRetried(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Run([]*handlers.Sample{sample(t, `"crash"`), sample(t, `{"x":[1,2,3,4]}`)}, nil)
	var lost interface{ WholeBatchLost() bool }
	if !errors.As(err, &lost) || !lost.WholeBatchLost() || !errors.Is(err, errkind.Inference) {
		t.Fatalf("crash: %v (%T); want a lost batch, a failed inference", err, err)
	}
	// A batch the handler refused (it raised) may be retried: the process lives on.
	_, err = m.Run([]*handlers.Sample{sample(t, `"raise"`)}, nil)
	if err == nil || errors.As(err, &lost) {
		t.Errorf("a raise: %v; want an error the core may retry", err)
	}
}

// Scaling up starts processes that serve at once, each its own; scaling to 0 stops them, the
// busy ones when their batch ends; scaling up again serves.
func TestScaleProcesses(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.ResponseTimeout = 5 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetProcesses(3); err != nil || m.ProcessCount() != 3 {
		t.Fatalf("scaled to 3: %d processes, %v", m.ProcessCount(), err)
	}
	var sups []int
	m.mu.Lock()
	for p := range m.live {
		sups = append(sups, p.pid)
	}
	m.mu.Unlock()
	dir := t.TempDir()
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := m.Predict([]Request{jsonReq("spin", fmt.Sprintf(`{"spin": %q}`, filepath.Join(dir, fmt.Sprint(i))))})
			done <- err
		}()
	}
	pids := map[int]bool{}
	for i := range 3 {
		pids[readPid(t, filepath.Join(dir, fmt.Sprint(i)))] = true
	}
	if len(pids) != 3 {
		t.Fatalf("three requests ran in %d processes", len(pids))
	}
	// All three are busy: they stop when their batch ends (here, at the response timeout),
	// and none is restarted.
	if err := m.SetProcesses(0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err == nil || !strings.Contains(err.Error(), "response timeout") {
			t.Errorf("spin: %v", err)
		}
	}
	waitGone(t, "after scaling to 0", sups...)
	for pid := range pids {
		waitGone(t, "after scaling to 0", pid)
	}
	if n := m.ProcessCount(); n != 0 {
		t.Errorf("%d processes after scaling to 0", n)
	}
	if err := m.SetProcesses(1); err != nil {
		t.Fatal(err)
	}
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after scaling up again: %+v, %v", pr, err)
	}
	if err := m.SetProcesses(maxProcesses + 1); err == nil {
		t.Error("scaled past the bound")
	}
}
