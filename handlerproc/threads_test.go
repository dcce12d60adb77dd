package handlerproc

import (
	"encoding/json"
	"testing"
)

// probeBusy is what the tiny handler's probe tells of the batch's threads and headers.
type probeBusy struct {
	Threads    int     `json:"threads"`
	BusyHeader *string `json:"busy_header"`
}

func probeThreads(t *testing.T, m *Model, req Request) probeBusy {
	t.Helper()
	pr, err := m.Predict([]Request{req})
	if err != nil || pr.Code != 200 || len(pr.Replies) != 1 {
		t.Fatalf("probe: %+v, %v", pr, err)
	}
	var p probeBusy
	if err := json.Unmarshal(pr.Replies[0].Body, &p); err != nil {
		t.Fatalf("probe answered %s: %v", pr.Replies[0].Body, err)
	}
	return p
}

// A forked worker runs a batch on its share of the threads torch chose at its start: all of
// them when it is the only process busy, half with another busy (at least one), back to all
// when alone again; the count's header never reaches the handler, and a client's header of
// the same name chooses nothing.
func TestForkedWorkerSharesThreads(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !onlyProcess(t, m).forked {
		t.Skip("the runtime's fork server did not start")
	}
	alone := probeThreads(t, m, jsonReq("a", `"probe"`))
	if alone.Threads < 1 {
		t.Fatalf("torch runs %d threads", alone.Threads)
	}
	busyProcesses.Add(1) // another process runs a batch
	shared := probeThreads(t, m, jsonReq("b", `"probe"`))
	busyProcesses.Add(-1)
	if want := max(1, alone.Threads/2); shared.Threads != want {
		t.Errorf("with two processes busy, a batch ran on %d threads, not %d of %d", shared.Threads, want, alone.Threads)
	}
	again := probeThreads(t, m, jsonReq("c", `"probe"`))
	if again.Threads != alone.Threads {
		t.Errorf("alone again, a batch ran on %d threads, not %d", again.Threads, alone.Threads)
	}
	client := jsonReq("d", `"probe"`)
	client.Headers = append(client.Headers, Header{Name: "Torchd-Busy-Processes", Value: "1000"})
	fromClient := probeThreads(t, m, client)
	if fromClient.Threads != alone.Threads {
		t.Errorf("a client's header made the batch run on %d threads, not %d", fromClient.Threads, alone.Threads)
	}
	for _, p := range []probeBusy{alone, shared, again, fromClient} {
		if p.BusyHeader != nil {
			t.Errorf("the handler saw the busy count's header: %q", *p.BusyHeader)
		}
	}
}

func TestWithBusyLeavesTheBatch(t *testing.T) {
	batch := []Request{jsonReq("a", "1"), jsonReq("b", "2")}
	batch[0].Headers = append(batch[0].Headers, Header{Name: "TORCHD-BUSY-PROCESSES", Value: "9"})
	out := withBusy(batch, 2)
	if len(batch[0].Headers) != 2 || batch[0].Headers[1].Value != "9" {
		t.Errorf("the caller's request changed: %+v", batch[0].Headers)
	}
	hs := out[0].Headers
	if len(hs) != 2 || hs[0].Name != "X-Request-Id" || hs[1] != (Header{busyHeader, "2"}) {
		t.Errorf("the first request's headers: %+v", hs)
	}
	if len(out[1].Headers) != 1 {
		t.Errorf("the second request's headers: %+v", out[1].Headers)
	}
	if got := withBusy(nil, 1); len(got) != 0 {
		t.Errorf("an empty batch: %+v", got)
	}
}
