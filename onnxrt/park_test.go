package onnxrt_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/offload"
	"github.com/torchd/torchd/onnxrt"
)

// Long runs go to the session's own thread while Run waits parked: the answers are
// onnxruntime's, a cancel stops one with the context's error, runs from several goroutines at
// once (the thread busy: those run in place) answer their own inputs, and Close ends the
// thread.
func TestParkedRuns(t *testing.T) {
	t.Cleanup(offload.SetAfter(0)) // every run is long enough
	for _, model := range []string{"mnist", "encoder"} {
		s := open(t, zoo(t, model, "model.onnx"), onnxrt.Options{IntraOpThreads: 2})
		before := offload.Waits()
		cases := refs(t, model)
		for range 2 {
			for _, c := range cases {
				out, err := s.Run(c.Inputs, c.In, c.Outputs)
				if err != nil {
					t.Fatalf("%s/%s: %v", model, c.Name, err)
				}
				for i := range c.Out {
					assertClose(t, model+"/"+c.Name+"/"+c.Outputs[i], out[i], c.Out[i])
				}
			}
		}
		if n := offload.Waits() - before; n != int64(2*len(cases)) {
			t.Errorf("%s: %d runs waited parked, want %d", model, n, 2*len(cases))
		}
	}

	s := open(t, zoo(t, "loop", "model.onnx"), onnxrt.Options{})
	sc := &signalContext{Context: context.Background(), waiting: make(chan struct{}), done: make(chan struct{})}
	go func() {
		<-sc.waiting
		sc.cancel()
	}()
	if _, err := s.RunContext(sc, []string{"n", "x0"}, loopInputs(1<<62), nil); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped: context canceled") {
		t.Fatalf("cancel during a parked run: %v", err)
	}
	if got := loopAnswer(t, s, context.Background(), 20); got != 20.5 {
		t.Fatalf("after the cancel: %g", got)
	}

	enc := open(t, zoo(t, "encoder", "model.onnx"), onnxrt.Options{IntraOpThreads: 1})
	runRowsAtOnce(t, enc, 4, 5)
	batch := refs(t, "encoder")[0]
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Run(batch.Inputs, batch.In, nil); !errors.Is(err, onnxrt.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
