package served_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlerproc"
)

// A batch of four with one request that crashes its process costs one process, not two:
// the batch is not retried request by request (which would crash a second one), and each of
// its requests gets the batch's error. A hang costs one response timeout, not two.
func TestHandlerProcessLostBatchOnce(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pylost", "handler.py")
	// The batch goes when four requests are in it.
	s.register(t, "url=pylost.mar&initial_workers=1&batch_size=4&max_batch_delay=600000&response_timeout=3&synchronous=true")
	pred := func(body []byte) response { return s.inf("POST", "/predictions/pylost", "application/json", body) }
	for _, bad := range []string{`"crash"`, `"hang"`} {
		before := strings.Count(s.log.String(), "handler process failed a batch")
		var wg sync.WaitGroup
		answers := make([]response, 4)
		for i := range 4 {
			body := []byte(`{"x":[1,2,3,4]}`)
			if i == 0 {
				body = []byte(bad)
			}
			wg.Add(1)
			go func() { defer wg.Done(); answers[i] = pred(body) }()
		}
		wg.Wait()
		for i, a := range answers {
			if a.status == 200 {
				t.Errorf("%s: request %d of the lost batch answered 200", bad, i)
			}
		}
		// The failure is logged once the process is replaced; the batch answered before.
		coretest.WaitFor(t, "the failure logged", func() bool { return strings.Count(s.log.String(), "handler process failed a batch") > before })
		// The model serves on (four requests: one batch), once its process has restarted:
		// a batch sent while it loads may pass the 3 s timeout on a loaded machine.
		for try := 0; ; try++ {
			var ok sync.WaitGroup
			var mu sync.Mutex
			var failed []response
			for range 4 {
				ok.Add(1)
				go func() {
					defer ok.Done()
					if r := pred([]byte(`{"x":[1,2,3,4]}`)); r.status != 200 {
						mu.Lock()
						failed = append(failed, r)
						mu.Unlock()
					}
				}()
			}
			ok.Wait()
			if len(failed) == 0 {
				break
			}
			if try == 10 {
				t.Fatalf("after %s: %d %s", bad, failed[0].status, failed[0].body)
			}
		}
		if n := strings.Count(s.log.String(), "handler process failed a batch") - before; n != 1 {
			t.Errorf("%s: %d processes failed a batch; want 1 (no retry of the lost batch)", bad, n)
		}
	}
}

// Scaling up starts a process per worker, scaling to 0 stops them all, and scaling up again
// serves. The processes counted are those the model has started that still run.
func TestHandlerProcessScaling(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyscale", "handler.py")
	s.register(t, "url=pyscale.mar&initial_workers=1&synchronous=true")
	v, err := s.reg.Get("pyscale", "")
	if err != nil {
		t.Fatal(err)
	}
	pr := v.Model().(core.ProcessReporter)
	seen := map[int]bool{}
	running := func() int {
		for _, p := range pr.Processes() {
			seen[p.PID] = true
		}
		n := 0
		for pid := range seen {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") {
				n++
			}
		}
		return n
	}
	if n := running(); n != 1 {
		t.Fatalf("%d processes for 1 worker", n)
	}
	for _, c := range []struct{ workers, want int }{{3, 3}, {1, 1}, {0, 0}, {2, 2}} {
		r := s.mgmt("PUT", fmt.Sprintf("/models/pyscale?min_worker=%d&synchronous=true", c.workers))
		if r.status != 200 {
			t.Fatalf("scale to %d: %d %s", c.workers, r.status, r.body)
		}
		// Idle processes stop as the scaling returns; allow for their exit.
		coretest.WaitFor(t, fmt.Sprintf("%d processes", c.want), func() bool { return running() == c.want })
	}
	if r := s.inf("POST", "/predictions/pyscale", "application/json", []byte(`{"x":[1,2,3,4]}`)); r.status != 200 {
		t.Errorf("after scaling: %d %s", r.status, r.body)
	}
}

// A handler's detached children (setsid) go with its model when it is unregistered (with
// torchd at a stop: the daemon's TestHandlerProcessChildrenAtStop).
func TestHandlerProcessChildrenContained(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pykids", "handler.py")
	s.register(t, "url=pykids.mar&initial_workers=1&response_timeout=600&synchronous=true")
	spawn := func() []int {
		file := filepath.Join(t.TempDir(), "pid")
		r := s.inf("POST", "/predictions/pykids", "application/json", []byte(fmt.Sprintf(`{"spawn": %q}`, file)))
		if r.status != 200 {
			t.Fatalf("spawn: %d %s", r.status, r.body)
		}
		var pids []int
		for _, f := range strings.FieldsFunc(string(r.body), func(r rune) bool { return r < '0' || r > '9' }) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		b, err := os.ReadFile(file)
		n, err2 := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || err2 != nil || len(pids) != 1 {
			t.Fatalf("spawn answered %s; orphan %q", r.body, b)
		}
		return append(pids, n)
	}
	waitGone := func(what string, pids []int) {
		t.Helper()
		for _, pid := range pids {
			coretest.WaitFor(t, fmt.Sprintf("%s: the handler's child %d gone", what, pid), func() bool {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				return err != nil || strings.Contains(string(b), ") Z ")
			})
		}
	}
	kids := spawn()
	if r := s.mgmt("DELETE", "/models/pykids"); r.status != 200 {
		t.Fatalf("unregister: %d %s", r.status, r.body)
	}
	waitGone("after unregister", kids)

}

// A client that does not read a streamed answer holds at most 64 MiB of its parts in torchd:
// past it the transfer is cut, the client never sees the answer end, and the model serves on.
func TestHandlerProcessStreamBounded(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyflood", "handler.py")
	s.register(t, "url=pyflood.mar&initial_workers=1&response_timeout=120&synchronous=true")
	conn, err := net.Dial("tcp", s.listen(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"parts": 200, "size": 1048576}` // 200 MiB
	fmt.Fprintf(conn, "POST /predictions/pyflood HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The client reads the status line, which shows that the stream runs, then nothing until
	// the handler is done: a request after it is served by the one process once the
	// streaming batch has ended.
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("the stream's status line: %q, %v", line, err)
	}
	if r := s.inf("POST", "/predictions/pyflood", "application/json", []byte(`{"x":[1,2,3,4]}`)); r.status != 200 {
		t.Fatalf("the request after the flood: %d %s", r.status, r.body)
	}
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	got, _ := io.ReadAll(br)
	if strings.HasSuffix(string(got), "0\r\n\r\n") || strings.Contains(string(got), "end") {
		t.Errorf("the unread stream ended normally (%d bytes): it was not cut", len(got))
	}
}
