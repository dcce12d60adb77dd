package core

import (
	"io"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

// forward_batch: a batch of seven requests runs as forwards of 3, 3 and 1 rows in turn, and
// every request gets the answer it gets alone.
func TestForwardBatchSplitsBatches(t *testing.T) {
	r := testRegistry(t, 0)
	alone := addDigits(t, r, "alone", "tensor", archive.Settings{})
	v := addDigits(t, r, "d", "core_probe", archive.Settings{BatchSize: archive.Fixed(7),
		MaxBatchDelay: archive.Fixed(time.Hour), ForwardBatch: archive.Fixed(3)})
	if s := v.Settings(); s.ForwardBatch != 3 || s.Auto.ForwardBatch {
		t.Fatalf("settings %+v: want forward_batch 3", s)
	}
	var forwards atomic.Int64
	probe.Before(func(int) { forwards.Add(1) })
	t.Cleanup(func() { probe.Before(nil) })

	type answer struct {
		i     int
		out   []float32
		batch int
		err   error
	}
	answers := make(chan answer, 7)
	for i := range 7 {
		go func() {
			res, err := infer(v, Call{}, digit(float32(i)/7))
			a := answer{i: i, err: err, batch: res.BatchSize}
			if err == nil {
				a.out = float32s(res.Out[0])
			}
			answers <- a
		}()
	}
	for range 7 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("request %d: %v", a.i, a.err)
		}
		if a.batch != 7 {
			t.Errorf("request %d ran in a batch of %d; want the seven together", a.i, a.batch)
		}
		res, err := infer(alone, Call{}, digit(float32(a.i)/7))
		if err != nil {
			t.Fatal(err)
		}
		want := float32s(res.Out[0])
		if len(a.out) != len(want) {
			t.Fatalf("request %d: %d logits, alone %d", a.i, len(a.out), len(want))
		}
		for k := range want {
			if math.Abs(float64(a.out[k]-want[k])) > 1e-4 {
				t.Fatalf("request %d logit %d: %g in the split batch, %g alone", a.i, k, a.out[k], want[k])
			}
		}
	}
	if n := forwards.Load(); n != 3 {
		t.Errorf("%d forwards for a batch of 7 with forward_batch 3; want 3 (3, 3, 1)", n)
	}
}

// forward_batch = "auto" is settled at load from the measured curve: a batch size the model
// ran at, no larger than its batch_size, and cached for the next load.
func TestForwardBatchAuto(t *testing.T) {
	cache := t.TempDir()
	r := NewRegistry(Options{Defaults: testDefaults, CacheDir: cache, Runtimes: []Runtime{torchRuntime{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	s := archive.Settings{BatchSize: archive.Fixed(8), ForwardBatch: archive.Auto[int]()}
	v := addDigits(t, r, "d", "tensor", s)
	got := v.Settings()
	if got.Auto.ForwardBatch || got.ForwardBatch < 1 || got.ForwardBatch > 8 || got.ForwardBatch&(got.ForwardBatch-1) != 0 {
		t.Fatalf("forward_batch auto settled at %d (auto %v); want a measured size, a power of two from 1 to 8", got.ForwardBatch, got.Auto.ForwardBatch)
	}
	if _, err := infer(v, Call{}, digit(0.5)); err != nil {
		t.Fatal(err)
	}
	// The same model again reads the cache: the same answer.
	again := addDigits(t, r, "d2", "tensor", s)
	if n := again.Settings().ForwardBatch; n != got.ForwardBatch {
		t.Errorf("loaded again: forward_batch %d, first %d; want the cached curve's", n, got.ForwardBatch)
	}
}

// "auto" needs an input to measure: a model without a declared input is refused, naming it.
func TestForwardBatchAutoNeedsInput(t *testing.T) {
	r := testRegistry(t, 0)
	_, err := r.Add("d", "1", RegisterRequest{Name: "d", Synchronous: true,
		Settings: archive.Settings{BatchSize: archive.Fixed(4), ForwardBatch: archive.Auto[int]()}},
		zooArchive(t, "digits", "tensor", ""))
	errorContains(t, "forward_batch auto without [[inputs]]", err, ErrBadModel, `forward_batch "auto" needs a warm-up input`)
}

// Each forward of a split batch takes its share of the cores anew: a worker that started
// alone with every core runs its next forward on the share once another worker's forward
// has started, and takes every core again once it runs alone.
func TestForwardBatchRetakesThreads(t *testing.T) {
	r := testRegistry(t, 4)
	v := addDigits(t, r, "d", "core_probe", archive.Settings{MinWorkers: archive.Fixed(2), BatchSize: archive.Fixed(2),
		MaxBatchDelay: archive.Fixed(time.Hour), ForwardBatch: archive.Fixed(1)})
	var seen threadsSeen
	var calls atomic.Int64
	held := make(chan struct{}, 2)
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	probe.Before(func(n int) {
		seen.record(n)
		if c := calls.Add(1); c <= 2 {
			held <- struct{}{}
			<-gates[c-1]
		}
	})
	t.Cleanup(func() { probe.Before(nil) })
	waitFor(t, "no forward running", func() bool { return r.cores.runningNow() == 0 })
	done := make(chan error, 4)
	send := func() {
		for i := range 2 {
			go func() {
				_, err := infer(v, Call{}, digit(float32(i)))
				done <- err
			}()
		}
	}
	send() // worker A's batch: its first forward runs alone, and is held
	<-held
	send() // worker B's batch starts beside it, and is held
	<-held
	close(gates[0]) // A's second forward starts while B's runs
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	close(gates[1]) // B's second forward runs alone
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s := seen.take(); s != "[4 2 2 4]" {
		t.Fatalf("threads of the forwards (A alone, B beside it, A's second beside B, B's second alone): %s; want [4 2 2 4]", s)
	}
}
