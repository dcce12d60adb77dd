package core

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

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
	p := newWorkerPool("digits:1", m, h, NewBatcher(8, 1, 0), nil, 1, 1, 0, warmup, nothing{}, slog.New(slog.DiscardHandler))
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
