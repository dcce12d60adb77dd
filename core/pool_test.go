package core

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// threadsSeen records the intra-op threads each forward of the probe's models ran with.
type threadsSeen struct {
	mu   sync.Mutex
	seen []int
}

func (s *threadsSeen) record(n int) {
	s.mu.Lock()
	s.seen = append(s.seen, n)
	s.mu.Unlock()
}

// take returns what was recorded, and forgets it.
func (s *threadsSeen) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := fmt.Sprint(s.seen)
	s.seen = nil
	return out
}

// A forward that runs alone gets every core; one that starts while another runs gets an even
// share. The count is what LibTorch reports on the worker's thread before the forward. The
// first forward is held (after its threads were taken) until the second has run, so the two
// overlap whatever the machine's speed.
func TestForwardThreadsAloneAndShared(t *testing.T) {
	r := testRegistry(t, 4)
	v := addDigits(t, r, "d", "core_probe", archive.Settings{MinWorkers: archive.Fixed(2)})
	var seen threadsSeen
	probe.Before(seen.record)
	t.Cleanup(func() { probe.Before(nil) })
	for range 3 {
		// A worker gives its threads back before it answers: a client that asks again at
		// once finds every core free.
		if _, err := infer(v, Call{}, digit(0)); err != nil {
			t.Fatal(err)
		}
	}
	if s := seen.take(); s != "[4 4 4]" {
		t.Fatalf("forwards one at a time ran with %s threads; want every core: [4 4 4]", s)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	probe.Before(func(n int) {
		seen.record(n)
		first := false
		once.Do(func() { first = true })
		if first {
			close(started)
			<-release
		}
	})
	done := make(chan error)
	waitFor(t, "no forward running", func() bool { return r.cores.runningNow() == 0 })
	go func() {
		_, err := infer(v, Call{}, digit(0))
		done <- err
	}()
	<-started
	waitFor(t, "only the held forward running", func() bool { return r.cores.runningNow() == 1 })
	if _, err := infer(v, Call{}, digit(1)); err != nil { // the other worker, while the first holds its threads
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := seen.take(); s != "[4 2]" {
		t.Fatalf("a forward alone, then one beside it: %s threads; want [4 2]", s)
	}
}

// A model whose threads are set keeps them, alone or not.
func TestForwardThreadsSetByHand(t *testing.T) {
	r := testRegistry(t, 4)
	v := addDigits(t, r, "d", "core_probe", archive.Settings{Threads: archive.Of(1)})
	var seen threadsSeen
	probe.Before(seen.record)
	t.Cleanup(func() { probe.Before(nil) })
	for range 2 {
		if _, err := infer(v, Call{}, digit(0)); err != nil {
			t.Fatal(err)
		}
	}
	if s := seen.take(); s != "[1 1]" {
		t.Fatalf("threads set to 1: forwards ran with %s", s)
	}
}

func (c *coreShare) runningNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// holdWorkers makes v's forwards wait until the returned release is called, and returns a
// channel that receives once each time a forward starts waiting.
func holdWorkers(t *testing.T) (held <-chan struct{}, release func()) {
	t.Helper()
	h, gate := make(chan struct{}, 64), make(chan struct{})
	probe.Before(func(int) {
		h <- struct{}{}
		<-gate
	})
	var once sync.Once
	release = func() {
		once.Do(func() {
			probe.Before(nil)
			close(gate)
		})
	}
	t.Cleanup(release)
	return h, release
}

// waitFor polls cond until it holds: a test waits for a state, never for a time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// A failing request fails alone: a batch with one bad row is run again request by request,
// and the good ones get their answers.
func TestBatchFailureFailsOnlyItsRequest(t *testing.T) {
	r := testRegistry(t, 0)
	v := addSlow(t, r, "s", archive.Settings{BatchSize: archive.Fixed(4), MaxBatchDelay: archive.Fixed(time.Hour)})
	type answer struct {
		i   int
		out []float32
		err error
	}
	answers := make(chan answer, 4)
	for i := range 4 {
		go func() {
			sign := float32(1)
			if i == 2 {
				sign = -1
			}
			res, err := infer(v, Call{}, slowRow(float32(i), sign))
			a := answer{i: i, err: err}
			if err == nil {
				a.out = float32s(res.Out[0])
			}
			answers <- a
		}()
	}
	for range 4 {
		a := <-answers
		switch {
		case a.i == 2:
			errorContains(t, "the negative row", a.err, ErrInference, "negative input")
		case a.err != nil:
			t.Errorf("row %d beside a failing one: %v", a.i, a.err)
		case len(a.out) != 2 || a.out[0] != 2*float32(a.i) || a.out[1] != 2: // x * 2 is exact
			t.Errorf("row %d: %v, want its own input doubled", a.i, a.out)
		}
	}
	if s := v.Stats(); s.Batches == 0 || s.Items < 4 {
		t.Errorf("stats %+v: the four requests did not run", s)
	}
}

// A load given up at startup_timeout abandons its pool: a worker in a long warm-up (a
// Triton model_warmup with a huge count) stops at its next forward and exits, instead of
// warming up at a core's worth until the server exits.
func TestWarmupAbandoned(t *testing.T) {
	m, err := torch.Load(filepath.Join("..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatalf("%v (run make models)", err)
	}
	defer m.Close()
	ac := archive.ModelConfig{Handler: "tensor", Inputs: []archive.TensorSpec{{Name: "input__0", DType: "float32", Shape: []int64{-1, 1, 28, 28}}}}
	h, err := handlers.New("tensor", handlers.Context{Config: ac})
	if err != nil {
		t.Fatal(err)
	}
	one, err := warmupSamples(h, ac)
	if err != nil {
		t.Fatal(err)
	}
	warmup := make([]*handlers.Sample, 1<<16)
	for i := range warmup {
		warmup[i] = one[0]
	}
	p := newWorkerPool("digits:1", &torchModel{h: h, m: m}, NewBatcher(8, 1, 0), nil, 1, 1, 0, warmup, nothing{}, slog.New(slog.DiscardHandler))
	p.stats = newVersionStats()
	p.Scale(1, false)
	deadline := time.Now().Add(time.Minute)
	for p.warmForwards.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the worker ran no warm-up forward in a minute")
		}
		time.Sleep(time.Millisecond)
	}
	if got := p.Workers(); len(got) != 1 || got[0].Status != "WARMING" {
		t.Fatalf("workers %v, want one WARMING", got)
	}
	p.abandon()
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute): // every forward, on a loaded machine, would be far less
		t.Fatal("the abandoned pool's worker did not exit")
	}
	if n := p.warmForwards.Load(); n >= int64(len(warmup)) {
		t.Fatalf("the worker ran all %d warm-up forwards after the load was given up", n)
	} else {
		t.Logf("stopped after %d of %d warm-up forwards", n, len(warmup))
	}
}

// A worker that waits idleRelease for a batch frees its staging buffer and trims the
// process's free memory; the next batch runs as before and allocates it again. (A batch of
// one runs on its own memory, so each spell starts with a batch of two.)
func TestIdleWorkerReleasesStage(t *testing.T) {
	old := idleRelease.Swap(int64(50 * time.Millisecond))
	t.Cleanup(func() { idleRelease.Store(old) })
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "tensor", archive.Settings{BatchSize: archive.Fixed(2), MaxBatchDelay: archive.Fixed(time.Hour)})
	pair := func() {
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := infer(v, Call{}, digit(0.5))
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	for spell := int64(1); spell <= 2; spell++ {
		pair()
		waitFor(t, "the idle worker's release", func() bool { return v.pool.idleReleases.Load() >= spell })
	}
}

// A worker that idles also drops its model's rows (rows.go): batches that ran in place hold no
// staging buffer, yet the slab they were preprocessed into is a batch's worth of inputs.
func TestIdleWorkerReleasesRows(t *testing.T) {
	old := idleRelease.Swap(int64(50 * time.Millisecond))
	t.Cleanup(func() { idleRelease.Store(old) })
	r := testRegistry(t, 0)
	am := zooArchive(t, "digits", "image_classifier", "[options]\ncolor = \"gray\"\nwidth = 28\nheight = 28\nmean = [0.5]\nstd = [0.5]\n"+digitsConfig)
	v, err := r.Add("d", "1", RegisterRequest{Name: "d", Synchronous: true, Settings: archive.Settings{BatchSize: archive.Fixed(2), MaxBatchDelay: archive.Fixed(time.Hour)}}, am)
	if err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(filepath.Join(zooDir, "digits", "heldout", "0000_2.png"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := r.Serve(&Request{Model: "d", Decode: func(*ModelVersion) (Input, error) {
				return Input{Payloads: &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/png", Data: img}},
					Header: func(string) string { return "" }}}, nil
			}})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if v.Stats().InPlace != 1 {
		t.Fatalf("%d batches in place, want the pair's", v.Stats().InPlace)
	}
	waitFor(t, "the idle worker's release", func() bool { return v.pool.idleReleases.Load() >= 1 })
	if v.batcher.win.holdsSlab() {
		t.Fatal("the model's rows still hold memory after its worker's idle release")
	}
}

// A request whose client already has its answer is not run again: when its batch fails, the
// requests are retried one by one, except one whose client left while the batch ran.
func TestBatchRetrySkipsAnsweredRequests(t *testing.T) {
	r := testRegistry(t, 0)
	v := addSlow(t, r, "s", archive.Settings{BatchSize: archive.Fixed(3), MaxBatchDelay: archive.Fixed(time.Hour)})
	var calls atomic.Int32
	// The batcher asks once, as it forms the batch; the client leaves after that.
	left := Call{Gone: func() bool { return calls.Add(1) > 1 }}
	errs := make(chan error, 3)
	go func() { _, err := infer(v, Call{}, slowRow(0, -1)); errs <- err }()
	go func() { _, err := infer(v, left, slowRow(1, 1)); errs <- err }()
	res, err := infer(v, Call{}, slowRow(2, 1))
	if err != nil || len(res.Out) != 1 || float32s(res.Out[0])[0] != 4 {
		t.Fatalf("the good request beside a failing one: %v, %v", res.Out, err)
	}
	var gone, failed int
	for range 2 {
		switch err := <-errs; {
		case errorIs(err, ErrClientGone):
			gone++
		case errorIs(err, ErrInference):
			failed++
		default:
			t.Errorf("unexpected answer: %v", err)
		}
	}
	if gone != 1 || failed != 1 {
		t.Errorf("%d answered client gone, %d failed; want the one that left not run again", gone, failed)
	}
}

type boundModel struct {
	Model
	bound bool
}

func (m boundModel) BoundToThread() bool { return m.bound }

// TestLockedWorkers: LibTorch's workers and a ThreadBound model's that asks are locked to
// their OS threads; others are not.
func TestLockedWorkers(t *testing.T) {
	for _, c := range []struct {
		what string
		m    Model
		want bool
	}{
		{"a thread setter", &torchModel{}, true},
		{"thread bound", boundModel{bound: true}, true},
		{"thread bound, not now", boundModel{bound: false}, false},
		{"neither", boundModel{}.Model, false},
	} {
		if got := lockedWorkers(c.m); got != c.want {
			t.Errorf("%s: locked %v, want %v", c.what, got, c.want)
		}
	}
}
