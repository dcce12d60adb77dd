package core

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

func newJob(enqueued time.Time) *job {
	return &job{enqueued: enqueued, done: make(chan Result, 1)}
}

// A full batch goes at once, however long the delay.
func TestBatchGoesWhenFull(t *testing.T) {
	b := NewBatcher(10, 4, time.Hour)
	for range 6 {
		if err := b.Submit(newJob(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan []*job)
	go func() { done <- b.next(nil) }()
	select {
	case batch := <-done:
		if len(batch) != 4 {
			t.Fatalf("batch of %d, want 4", len(batch))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a full batch waited for its delay")
	}
	if b.Pending() != 2 {
		t.Fatalf("%d pending, want 2", b.Pending())
	}
}

// The delay counts from the oldest request's arrival: a request that already waited longer
// than the delay goes with what is queued, without waiting for more.
func TestDelayCountsFromOldest(t *testing.T) {
	b := NewBatcher(10, 8, 50*time.Millisecond)
	b.Submit(newJob(time.Now().Add(-time.Second)))
	b.Submit(newJob(time.Now()))
	batch := b.next(nil)
	if len(batch) != 2 {
		t.Fatalf("batch of %d, want the 2 queued", len(batch))
	}
}

// With time left, the batch waits for requests that arrive during the delay.
func TestBatchWaitsForLateArrivals(t *testing.T) {
	b := NewBatcher(10, 3, 5*time.Second)
	b.Submit(newJob(time.Now()))
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Submit(newJob(time.Now()))
		b.Submit(newJob(time.Now()))
	}()
	if batch := b.next(nil); len(batch) != 3 {
		t.Fatalf("batch of %d, want 3", len(batch))
	}
}

func TestQueueBound(t *testing.T) {
	b := NewBatcher(2, 1, 0)
	b.Submit(newJob(time.Now()))
	b.Submit(newJob(time.Now()))
	if err := b.Submit(newJob(time.Now())); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third submit into a queue of 2: %v", err)
	}
	b2 := NewBatcher(2, 1, 0)
	b2.closed.Store(true)
	if err := b2.Submit(newJob(time.Now())); err == nil {
		t.Fatal("a closed batcher accepted a request")
	}
}

// Requests past their deadline or whose client left are answered and never batched.
func TestDroppedBeforeInference(t *testing.T) {
	b := NewBatcher(10, 8, 0)
	expired := newJob(time.Now())
	expired.deadline = time.Now().Add(-time.Millisecond)
	gone := newJob(time.Now())
	gone.gone = func() bool { return true }
	ok := newJob(time.Now())
	b.Submit(expired)
	b.Submit(gone)
	b.Submit(ok)
	batch := b.next(nil)
	if len(batch) != 1 || batch[0] != ok {
		t.Fatalf("batch %v, want only the live request", batch)
	}
	if r := <-expired.done; !errors.Is(r.err, ErrDeadline) {
		t.Errorf("expired: %v", r.err)
	}
	if r := <-gone.done; !errors.Is(r.err, ErrClientGone) {
		t.Errorf("gone: %v", r.err)
	}
}

func TestNextStops(t *testing.T) {
	b := NewBatcher(10, 8, 0)
	stop := make(chan struct{})
	close(stop)
	if batch := b.next(stop); batch != nil {
		t.Fatalf("stopped next returned %v", batch)
	}
}

// A request alone in its model goes at once, whatever the delay; it counts as running until
// done.
func TestLoneRequestGoesAtOnce(t *testing.T) {
	b := NewBatcher(10, 8, time.Hour)
	b.dispatchAlone = true
	b.Submit(newJob(time.Now()))
	done := make(chan []*job)
	go func() { done <- b.next(nil) }()
	select {
	case batch := <-done:
		if len(batch) != 1 {
			t.Fatalf("batch of %d, want the lone request", len(batch))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request alone in its model waited for the batch delay")
	}
	if n := b.running.Load(); n != 1 {
		t.Fatalf("%d batches running, want 1", n)
	}
	b.done()
	if n := b.running.Load(); n != 0 {
		t.Fatalf("%d batches running after done, want 0", n)
	}
}

// A request is not alone while another is admitted (being decoded): the batch waits for it.
func TestAdmittedRequestIsWaitedFor(t *testing.T) {
	b := NewBatcher(10, 2, time.Hour)
	b.dispatchAlone = true
	r, ok := b.reserve()
	if !ok {
		t.Fatal("no place")
	}
	b.Submit(newJob(time.Now()))
	go func() {
		time.Sleep(20 * time.Millisecond)
		j := newJob(time.Now())
		j.rsv = r
		b.Submit(j)
	}()
	if batch := b.next(nil); len(batch) != 2 {
		t.Fatalf("batch of %d, want the queued request with the admitted one", len(batch))
	}
}

// Nor while another batch of its model runs: its clients may ask again once answered.
func TestRunningBatchIsWaitedFor(t *testing.T) {
	b := NewBatcher(10, 2, time.Hour)
	b.dispatchAlone = true
	b.Submit(newJob(time.Now()))
	if batch := b.next(nil); len(batch) != 1 {
		t.Fatalf("first batch of %d, want 1", len(batch))
	}
	b.Submit(newJob(time.Now()))
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Submit(newJob(time.Now()))
	}()
	if batch := b.next(nil); len(batch) != 2 {
		t.Fatalf("batch of %d beside a running batch, want the 2 that arrived within the delay", len(batch))
	}
}

// Without dispatchAlone (batch_delay_alone = true), a lone request waits for company as
// TorchServe's and Triton's do.
func TestLoneRequestWaitsWhenAsked(t *testing.T) {
	b := NewBatcher(10, 2, time.Hour)
	b.Submit(newJob(time.Now()))
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Submit(newJob(time.Now()))
	}()
	if batch := b.next(nil); len(batch) != 2 {
		t.Fatalf("batch of %d, want the lone request to wait for the late one", len(batch))
	}
}

// With preferred sizes the batcher forms batches as Triton's does: the largest preferred
// size the queue holds goes at once, and a batch that reaches a preferred size while it
// waits goes then; once the oldest request's delay has passed, whatever is queued goes.
func TestPreferredBatchSizes(t *testing.T) {
	submit := func(b *Batcher, n int, at time.Time) {
		for range n {
			if err := b.Submit(newJob(at)); err != nil {
				panic(err) // the queue has room for every test's requests
			}
		}
	}
	within := func(t *testing.T, what string, f func() []*job) []*job {
		t.Helper()
		done := make(chan []*job, 1)
		go func() { done <- f() }()
		select {
		case batch := <-done:
			return batch
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the batch waited for its delay", what)
		}
		return nil
	}
	t.Run("queue holds more than the largest", func(t *testing.T) {
		b := NewBatcher(64, 32, time.Hour)
		b.SetPreferred([]int{16, 8, 8})
		submit(b, 21, time.Now())
		if n := len(within(t, "21 queued", func() []*job { return b.next(nil) })); n != 16 {
			t.Fatalf("batch of %d, want 16", n)
		}
		// 5 left: below every preferred size, so the batch waits for 8.
		late := make(chan struct{})
		go func() {
			defer close(late)
			time.Sleep(20 * time.Millisecond)
			submit(b, 6, time.Now())
		}()
		if n := len(within(t, "5 queued, 6 more late", func() []*job { return b.next(nil) })); n != 8 {
			t.Fatalf("batch of %d, want 8", n)
		}
		// The batch goes at its eighth request, maybe before the sixth late one is queued.
		<-late
		if b.Pending() != 3 {
			t.Fatalf("%d pending, want 3", b.Pending())
		}
	})
	t.Run("largest the queue holds", func(t *testing.T) {
		b := NewBatcher(64, 32, time.Hour)
		b.SetPreferred([]int{4, 8, 16})
		submit(b, 13, time.Now())
		if n := len(within(t, "13 queued", func() []*job { return b.next(nil) })); n != 8 {
			t.Fatalf("batch of %d, want 8", n)
		}
	})
	t.Run("delay passed", func(t *testing.T) {
		b := NewBatcher(64, 32, 50*time.Millisecond)
		b.SetPreferred([]int{4, 8})
		submit(b, 11, time.Now().Add(-time.Second))
		if n := len(b.next(nil)); n != 11 {
			t.Fatalf("batch of %d, want the 11 queued", n)
		}
		// Below every preferred size, the batch waits out its delay, then goes as it is.
		submit(b, 3, time.Now())
		start := time.Now()
		if n := len(b.next(nil)); n != 3 || time.Since(start) < 40*time.Millisecond {
			t.Fatalf("batch of %d after %v, want 3 after the delay", n, time.Since(start))
		}
	})
	t.Run("above the batch size", func(t *testing.T) {
		b := NewBatcher(64, 6, time.Hour)
		b.SetPreferred([]int{8})
		submit(b, 7, time.Now())
		if n := len(within(t, "7 queued", func() []*job { return b.next(nil) })); n != 6 {
			t.Fatalf("batch of %d, want the batch size, 6", n)
		}
	})
}

// Beside a running batch, a batch that goes at once takes the queue in whole forwards
// (SetWhole) and leaves the rest queued; alone, lingering, below one forward, or off, it takes
// what is queued.
func TestWholeForwards(t *testing.T) {
	for _, c := range []struct {
		name          string
		whole, queued int
		delay         time.Duration
		running       bool
		want          int
	}{
		{"delay passed beside a running batch", 4, 13, 10 * time.Millisecond, true, 12},
		{"no delay beside a running batch", 4, 13, 0, true, 12},
		{"alone", 4, 13, 10 * time.Millisecond, false, 13},
		{"off", 0, 13, 10 * time.Millisecond, true, 13},
		{"below one forward", 4, 3, 10 * time.Millisecond, true, 3},
		{"a whole number of forwards", 4, 8, 10 * time.Millisecond, true, 8},
		{"more than the batch size", 4, 40, 10 * time.Millisecond, true, 32},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := NewBatcher(64, 32, c.delay)
			b.SetWhole(c.whole)
			if c.running {
				b.running.Add(1) // another worker's batch
			}
			for range c.queued {
				if err := b.Submit(newJob(time.Now().Add(-time.Second))); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(b.next(nil)); n != c.want {
				t.Fatalf("batch of %d, want %d", n, c.want)
			}
			if left := c.queued - c.want; b.Pending() != left {
				t.Fatalf("%d pending, want %d", b.Pending(), left)
			}
		})
	}
	// Within its delay the batch lingers for more, as without whole forwards: what has come by
	// the delay goes, whole forwards or not.
	b := NewBatcher(64, 32, 20*time.Millisecond)
	b.SetWhole(4)
	b.running.Add(1)
	for range 13 {
		if err := b.Submit(newJob(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(b.next(nil)); n != 13 {
		t.Fatalf("batch of %d within the delay, want the 13 queued", n)
	}
}

// Whole forwards are on where the batch runs as several forwards of a size the backend
// compiled a model for, and no preferred sizes choose the batches.
func TestWholeForwardsSetting(t *testing.T) {
	for _, c := range []struct {
		name string
		s    ModelSettings
		kept []int
		want int
	}{
		{"forward batch compiled", ModelSettings{BatchSize: 32, ForwardBatch: 4}, []int{4}, 4},
		{"not compiled", ModelSettings{BatchSize: 32, ForwardBatch: 4}, []int{32}, 0},
		{"no forward batch", ModelSettings{BatchSize: 32}, []int{32}, 0},
		{"the whole batch", ModelSettings{BatchSize: 8, ForwardBatch: 8}, []int{8}, 0},
		{"preferred sizes", ModelSettings{BatchSize: 32, ForwardBatch: 4, PreferredBatchSize: []int{8}}, []int{4}, 0},
	} {
		if got := wholeForwards(c.s, c.kept); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// plannedRuntime loads LibTorch models that report keeping models for the row counts in
// kept, as OpenVINO's backend does for those it compiles.
type plannedRuntime struct {
	torchRuntime
	kept []int
}

type plannedModel struct {
	*torchModel
	kept []int
}

func (r plannedRuntime) Load(req LoadRequest) (Model, error) {
	m, err := r.torchRuntime.Load(req)
	if err != nil {
		return nil, err
	}
	return &plannedModel{m.(*torchModel), r.kept}, nil
}

func (m *plannedModel) PlanRows(rows []int) ([]int, error) {
	var kept []int
	for _, n := range rows {
		if slices.Contains(m.kept, n) {
			kept = append(kept, n)
		}
	}
	return kept, nil
}

// A registered version takes whole forwards where its runtime kept a model for the forward
// batch, and not where it did not, or where the model is not ShapePlanned.
func TestWholeForwardsRegistered(t *testing.T) {
	for _, c := range []struct {
		name    string
		runtime Runtime
		want    int64
	}{
		{"kept", plannedRuntime{kept: []int{4}}, 4},
		{"not kept", plannedRuntime{kept: []int{8}}, 0},
		{"not shape-planned", torchRuntime{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry(Options{Defaults: testDefaults, Runtimes: []Runtime{c.runtime}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			t.Cleanup(r.Close)
			am := zooArchive(t, "digits", "tensor", "forward_batch = 4\n"+digitsConfig)
			v, err := r.Add("d", "1", RegisterRequest{Name: "d", Synchronous: true, Settings: archive.Settings{BatchSize: archive.Fixed(8)}}, am)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.batcher.whole.Load(); got != c.want {
				t.Fatalf("whole forwards of %d, want %d", got, c.want)
			}
		})
	}
}

// An archive's preferred batch sizes reach the version's settings and its batcher, sorted
// and once each, with those above the batch size in use kept for a larger one but passed
// over by the batcher.
func TestPreferredBatchSizesRegistered(t *testing.T) {
	r := testRegistry(t, 0)
	am := zooArchive(t, "digits", "tensor", "preferred_batch_size = [8, 2, 4, 2]\n"+digitsConfig)
	v, err := r.Add("d", "1", RegisterRequest{Name: "d", Synchronous: true, Settings: archive.Settings{BatchSize: archive.Fixed(4)}}, am)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Settings().PreferredBatchSize; !slices.Equal(got, []int{2, 4, 8}) {
		t.Fatalf("settings' preferred sizes %v, want [2 4 8]", got)
	}
	if target, waiting := v.batcher.target(4, 3, false); target != 2 || waiting {
		t.Fatalf("3 queued: a batch of %d (waiting %v), want 2", target, waiting)
	}
	if target, _ := v.batcher.target(4, 9, false); target != 4 {
		t.Fatalf("9 queued: a batch of %d, want the batch size, 4", target)
	}
}
