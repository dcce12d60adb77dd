package served_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlerproc"
)

// The core's share of the cores reaches the handler: a batch alone runs on every core, a
// batch that starts while another process runs one on half of them, and alone again on
// every core; a client's header cannot choose the count.
func TestHandlerProcessThreadsShare(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyshare", "handler.py")
	s.register(t, "url=pyshare.mar&initial_workers=2&batch_size=1&synchronous=true")
	cores := runtime.GOMAXPROCS(0)
	probe := func(body string, header ...string) int {
		t.Helper()
		r := s.inf("POST", "/predictions/pyshare", "application/json", []byte(body), header...)
		if r.status != 200 {
			t.Fatalf("probe %s: %d %s", body, r.status, r.body)
		}
		var p struct {
			Threads int     `json:"threads"`
			Header  *string `json:"threads_header"`
		}
		r.json(t, &p)
		if p.Header != nil {
			t.Errorf("the handler saw the thread count's header: %q", *p.Header)
		}
		return p.Threads
	}
	if got := probe(`"probe"`); got != cores {
		t.Errorf("alone: the batch ran on %d threads, not %d", got, cores)
	}
	if got := probe(`"probe"`, "torchd-threads", "7"); got != cores {
		t.Errorf("a client's header: the batch ran on %d threads, not %d", got, cores)
	}

	hold := filepath.Join(t.TempDir(), "hold")
	first := make(chan int, 1)
	go func() { first <- probe(fmt.Sprintf(`{"probe_after": %q}`, hold)) }()
	coretest.WaitFor(t, "the first batch in its handler", func() bool { _, err := os.Stat(hold + ".in"); return err == nil })
	if got, want := probe(`"probe"`), max(cores/2, 1); got != want {
		t.Errorf("with another batch running: the batch ran on %d threads, not %d", got, want)
	}
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := <-first; got != cores {
		t.Errorf("the batch that started alone ran on %d threads, not %d", got, cores)
	}
	for range 2 { // either process, alone again
		if got := probe(`"probe"`); got != cores {
			t.Errorf("alone again: the batch ran on %d threads, not %d", got, cores)
		}
	}
}
