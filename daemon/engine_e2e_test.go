package daemon_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/torchd/torchd/daemon"
)

// startEngine runs a daemon in this process serving digits, and returns the model's version
// and the inference address. (The forwards' threads and the window's wait are core's own
// tests: core/pool_test.go, core/infer_test.go.)
func startEngine(t *testing.T, args ...string) (*daemon.ModelVersion, string) {
	t.Helper()
	d, v := startInProcess(t, "digits", append([]string{"--models", "digits=digits.mar"}, args...), nil)
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

// A burst of 200 concurrent requests to a batch-4 model is answered in full, while no more
// requests than the window's size ever hold decoded input: the rest wait as raw bodies.
func TestBurstHoldsBoundedInput(t *testing.T) {
	imgs, _ := heldOut(t)
	v, url := startEngine(t, "--workers", "1", "--batch-size", "4", "--job-queue-size", "256")
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
