package daemon_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/torchd/torchd/daemon"
)

// startEngine runs a daemon in this process serving digits, with its forwards sharing cores
// cores, and returns the model's version and the inference address.
func startEngine(t *testing.T, cores int, args ...string) (*daemon.ModelVersion, string) {
	t.Helper()
	d, v := startInProcess(t, "digits", append([]string{"--models", "digits=digits.mar"}, args...), func(d *daemon.Daemon) { daemon.ShareCores(d, cores) })
	inf, _, _ := d.Addrs()
	return v, "http://" + inf
}

// startInProcess runs a daemon in this process with args, calling setup before it starts, and
// returns it and the default version of model.
func startInProcess(t *testing.T, model string, args []string, setup func(*daemon.Daemon)) (*daemon.Daemon, *daemon.ModelVersion) {
	t.Helper()
	args = append([]string{"--model-store", store, "--inference-address", "127.0.0.1:0",
		"--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--access-log=false",
		"--grpc-address=", "--grpc-inference-address=", "--grpc-management-address="}, args...)
	cfg, err := daemon.LoadConfig(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if setup != nil {
		setup(d)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(t.Context()) })
	d.WaitStartup()
	v, err := d.Registry.Get(model, "")
	if err != nil {
		t.Fatal(err)
	}
	return d, v
}

func postDigit(t *testing.T, url string, img []byte) {
	t.Helper()
	resp, err := http.Post(url+"/predictions/digits", "image/png", bytes.NewReader(img))
	if err != nil {
		t.Error(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}

// A forward that runs alone gets every core; one that starts while another runs gets an even
// share; a count set by hand is kept. The count is what LibTorch reports on the worker's
// thread before the forward. The first forward is held (in the hook, after its threads were
// taken) until the second has run, so the two overlap whatever the machine's speed.
func TestForwardThreadsAloneAndShared(t *testing.T) {
	imgs, _ := heldOut(t)
	v, url := startEngine(t, 4, "--workers", "2", "--max-batch-delay", "0")
	var mu sync.Mutex
	var seen []int
	record := func(n int) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
	}
	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		s := fmt.Sprint(seen)
		seen = nil
		return s
	}
	daemon.OnForward(v, record)
	for i := range 3 {
		postDigit(t, url, imgs[i])
	}
	if s := got(); s != "[4 4 4]" {
		t.Fatalf("forwards one at a time ran with %s threads; want every core: [4 4 4]", s)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	daemon.OnForward(v, func(n int) {
		record(n)
		first := false
		once.Do(func() { first = true })
		if first {
			close(started)
			<-release
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		postDigit(t, url, imgs[0])
	}()
	<-started
	postDigit(t, url, imgs[1]) // the other worker, while the first forward holds its threads
	close(release)
	<-done
	if s := got(); s != "[4 2]" {
		t.Fatalf("a forward alone, then one beside it: %s threads; want [4 2]", s)
	}
}

// A model whose threads are set keeps them, alone or not.
func TestForwardThreadsSetByHand(t *testing.T) {
	imgs, _ := heldOut(t)
	v, url := startEngine(t, 4, "--workers", "1", "--threads", "1")
	seen := make(chan int, 2)
	daemon.OnForward(v, func(n int) { seen <- n })
	postDigit(t, url, imgs[0])
	postDigit(t, url, imgs[1])
	if a, b := <-seen, <-seen; a != 1 || b != 1 {
		t.Fatalf("threads set to 1: forwards ran with %d and %d", a, b)
	}
}

// A burst of 200 concurrent requests to a batch-4 model is answered in full, while no more
// requests than the window's size ever hold decoded input: the rest wait as raw bodies.
func TestBurstHoldsBoundedInput(t *testing.T) {
	imgs, _ := heldOut(t)
	v, url := startEngine(t, 2, "--workers", "1", "--batch-size", "4", "--job-queue-size", "256")
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			postDigit(t, url, imgs[i%len(imgs)])
		}()
	}
	close(start)
	wg.Wait()
	held, peak, waited, size := daemon.WindowStats(v)
	t.Logf("window of %d: at most %d held, %d requests waited", size, peak, waited)
	if peak > size || held != 0 {
		t.Fatalf("window of %d held up to %d requests' input, %d after the burst", size, peak, held)
	}
	if waited == 0 {
		t.Fatalf("200 concurrent requests, yet none waited for the window of %d", size)
	}
}

// A request waiting for a place in a full window gives up at its own limit
// (X-Request-Timeout), not at the model's response_timeout, and is answered 504 saying so;
// once places free, requests are answered again.
func TestWindowWaitHonoursRequestTimeout(t *testing.T) {
	imgs, _ := heldOut(t)
	v, url := startEngine(t, 2, "--workers", "1", "--batch-size", "1", "--response-timeout", "600")
	release := daemon.HoldWindow(v)
	req, _ := http.NewRequest("POST", url+"/predictions/digits", bytes.NewReader(imgs[0]))
	req.Header.Set("Content-Type", "image/png")
	req.Header.Set(daemon.HeaderRequestTimeout, "200")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 504 || !bytes.Contains(body, []byte("within the request's own limit (200ms)")) {
		t.Fatalf("a request whose limit passes while the window is full: %d %s", resp.StatusCode, body)
	}
	release()
	postDigit(t, url, imgs[0])
}
