package core

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/tolerance"
)

// holdWindow takes every free place of v's window, as requests holding decoded input would,
// and returns the function that gives them back (each ended before queueing).
func holdWindow(v *ModelVersion) (release func()) {
	w := &v.batcher.win
	w.mu.Lock()
	n := w.limit - w.held
	w.mu.Unlock()
	var places []uint64
	for range n {
		p, _, _ := w.enter(0)
		places = append(places, p)
	}
	return func() {
		for _, p := range places {
			w.resolve(p, nil)
			w.leave()
		}
	}
}

// Requests batched together get the answers they get alone, within the tolerance of the
// binding's tests: another batch size runs other kernels, which change the last bits.
func TestBatchedAnswersMatchAlone(t *testing.T) {
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "tensor", archive.Settings{BatchSize: archive.Fixed(8), MaxBatchDelay: archive.Fixed(time.Hour)})
	inputs := []float32{-1, -0.5, 0, 0.25, 0.5, 0.75, 0.9, 1}
	alone := make([][]float32, len(inputs))
	one := addDigits(t, r, "alone", "tensor", archive.Settings{})
	for i, x := range inputs {
		res, err := infer(one, Call{}, digit(x))
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = float32s(res.Out[0])
	}
	var wg sync.WaitGroup
	for i, x := range inputs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := infer(v, Call{}, digit(x))
			if err != nil {
				t.Error(err)
				return
			}
			if res.BatchSize != len(inputs) {
				t.Errorf("request %d ran in a batch of %d, want %d", i, res.BatchSize, len(inputs))
			}
			for k, y := range float32s(res.Out[0]) {
				if d := math.Abs(float64(y - alone[i][k])); d > tolerance.Kernels {
					t.Errorf("request %d, logit %d: %v batched, %v alone", i, k, y, alone[i][k])
				}
			}
		}()
	}
	wg.Wait()
}

// A request waiting for a place in a full window gives up at its own limit, not at the
// model's response_timeout, and says so; once places free, requests are answered again.
func TestWindowWaitHonoursRequestTimeout(t *testing.T) {
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "tensor", archive.Settings{ResponseTimeout: archive.Of(600 * time.Second)})
	release := holdWindow(v)
	_, err := infer(v, Call{Timeout: func() (time.Duration, error) { return 200 * time.Millisecond, nil }}, digit(0))
	errorContains(t, "waiting for the window", err, ErrDeadline, "within the request's own limit (200ms)")
	release()
	if _, err := infer(v, Call{}, digit(0)); err != nil {
		t.Fatal(err)
	}
}

// A full queue answers ErrQueueFull at once; a client gone while queued is ErrClientGone,
// once the worker reaches it; a request that waits past its own limit is ErrDeadline. The
// worker is held meanwhile, so each state is reached whatever the machine's speed.
func TestQueueFullClientGoneAndDeadline(t *testing.T) {
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "core_probe", archive.Settings{JobQueueSize: archive.Of(2)})
	send := func(c Call) <-chan error {
		done := make(chan error, 1)
		go func() { _, err := infer(v, c, digit(0)); done <- err }()
		return done
	}
	held, release := holdWorkers(t)
	first := send(Call{})
	<-held // the worker runs the first request
	var gone sync.Mutex
	gone.Lock()
	isGone := func() bool {
		if gone.TryLock() {
			gone.Unlock()
			return true
		}
		return false
	}
	queued, left := send(Call{}), send(Call{Gone: isGone})
	waitFor(t, "two queued requests", func() bool { return v.Pending() == 2 })
	_, err := infer(v, Call{}, digit(0))
	errorContains(t, "a third request", err, ErrQueueFull, "job queue is full (job_queue_size 2)")
	gone.Unlock()
	release()
	for _, done := range []<-chan error{first, queued} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	errorContains(t, "client gone", <-left, ErrClientGone, "")

	held, release = holdWorkers(t)
	first = send(Call{})
	<-held
	_, err = infer(v, Call{Timeout: func() (time.Duration, error) { return 50 * time.Millisecond, nil }}, digit(0))
	errorContains(t, "past its own limit", err, ErrDeadline, "")
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
