package handlerproc

import (
	"encoding/json"
	"fmt"
	"testing"
)

// threadsProbe is what the tiny handler's probe tells of the batch's threads.
type threadsProbe struct {
	Threads int     `json:"threads"`
	Header  *string `json:"threads_header"`
}

// probeThreads runs a probe (body) as a batch on threads intra-op threads.
func probeThreads(t *testing.T, m *Model, body string, threads int) threadsProbe {
	t.Helper()
	pr, err := m.predict([]Request{jsonReq("probe", body)}, threads)
	if err != nil || pr.Code != 200 || len(pr.Replies) != 1 {
		t.Fatalf("probe: %+v, %v", pr, err)
	}
	var p threadsProbe
	if err := json.Unmarshal(pr.Replies[0].Body, &p); err != nil {
		t.Fatalf("probe answered %s: %v", pr.Replies[0].Body, err)
	}
	if p.Header != nil {
		t.Errorf("the handler saw torchd's thread count: %q", *p.Header)
	}
	return p
}

// A batch runs on the threads it was sent with, forked or started apart; a batch sent with
// none keeps the last count; the count never reaches the handler.
func TestBatchRunsOnItsThreads(t *testing.T) {
	for _, apart := range []bool{false, true} {
		t.Run(fmt.Sprintf("apart=%v", apart), func(t *testing.T) {
			m, err := startTiny(t, "handler.py", func(c *Config) { c.StartApart = apart })
			if err != nil {
				t.Fatal(err)
			}
			full := probeThreads(t, m, `"probe"`, 0).Threads
			if full < 1 {
				t.Fatalf("torch runs %d threads", full)
			}
			for _, c := range []struct{ send, want int }{{1, 1}, {0, 1}, {full, full}, {full + 1, full + 1}, {1, 1}} {
				if got := probeThreads(t, m, `"probe"`, c.send).Threads; got != c.want {
					t.Errorf("sent %d threads (torch's own %d): the batch ran on %d, not %d", c.send, full, got, c.want)
				}
			}
		})
	}
}

// A count the user fixed is left as it is: OMP_NUM_THREADS in the model's environment, and a
// handler that sets its own.
func TestBatchThreadsLeaveTheUsersCount(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Env = []string{"OMP_NUM_THREADS=1"} })
	if err != nil {
		t.Fatal(err)
	}
	if got := probeThreads(t, m, `"probe"`, 2).Threads; got != 1 {
		t.Errorf("OMP_NUM_THREADS=1, sent 2: the batch ran on %d threads", got)
	}

	m, err = startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	full := probeThreads(t, m, `"probe"`, 0).Threads
	own := full + 2
	if got := probeThreads(t, m, fmt.Sprintf(`{"set_threads": %d}`, own), 0).Threads; got != own {
		t.Fatalf("the handler set %d threads and runs on %d", own, got)
	}
	for _, send := range []int{1, full} {
		if got := probeThreads(t, m, `"probe"`, send).Threads; got != own {
			t.Errorf("the handler set %d threads; sent %d, the batch ran on %d", own, send, got)
		}
	}
}

func TestWithThreadsLeavesTheBatch(t *testing.T) {
	batch := []Request{jsonReq("a", "1"), jsonReq("b", "2")}
	out := withThreads(batch, 2)
	if len(batch[0].Headers) != 1 {
		t.Errorf("the caller's request changed: %+v", batch[0].Headers)
	}
	if hs := out[0].Headers; len(hs) != 2 || hs[0].Name != "X-Request-Id" || hs[1] != (Header{threadsHeader, "2"}) {
		t.Errorf("the first request's headers: %+v", hs)
	}
	if len(out[1].Headers) != 1 {
		t.Errorf("the second request's headers: %+v", out[1].Headers)
	}
	if got := withThreads(batch, 0); &got[0] != &batch[0] {
		t.Errorf("0 threads copied the batch")
	}
}
