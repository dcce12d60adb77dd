package core_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// released is a Decode whose sample counts its Release calls in n.
func released(n *atomic.Int32, x float32) func(*core.ModelVersion) (core.Input, error) {
	return func(*core.ModelVersion) (core.Input, error) {
		t := coretest.Floats([]int64{1, 2}, x, x)
		return core.Input{Sample: &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{t}, Release: func() { n.Add(1) }}}, nil
	}
}

// A sample's Release is called once, when no worker reads its tensors again: before a
// request served is answered, and for a request answered 504 while its batch runs, only once
// that batch has run (the worker still reads its input until then); a request dropped from
// the queue unrun is released too.
func TestServeReleasesSampleAfterItsBatch(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "batch_size = 1\n"+coretest.XConfig, nil))
	m := rt.Model("m", "1")

	var served atomic.Int32
	if _, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: released(&served, 1)}); err != nil {
		t.Fatal(err)
	}
	if n := served.Load(); n != 1 {
		t.Fatalf("a served request's sample released %d times by its answer, want 1", n)
	}

	// The first request's batch is held in the forward past its deadline; the second waits
	// in the queue past its own.
	limit := core.Call{Timeout: func() (time.Duration, error) { return 20 * time.Millisecond, nil }}
	held, release := m.Hold()
	defer release()
	var running, queued atomic.Int32
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: released(&running, 2), Call: limit})
	<-held
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: released(&queued, 3), Call: limit})
	wantKind(t, "a queued request past its limit", err, core.ErrDeadline, "within its timeout")
	wantKind(t, "a running request past its limit", <-first, core.ErrDeadline, "within its timeout")
	if n := running.Load(); n != 0 {
		t.Fatalf("the sample of a request answered 504 released %d times while its batch still runs, want 0", n)
	}
	release()
	coretest.WaitFor(t, "the running sample released once its batch ran", func() bool { return running.Load() == 1 })
	coretest.WaitFor(t, "the queued sample released once the worker dropped it", func() bool { return queued.Load() == 1 })
	if n, q := running.Load(), queued.Load(); n != 1 || q != 1 {
		t.Errorf("releases: running %d, queued %d; want 1 each", n, q)
	}
}
