package onnxrt_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/onnxrt"
)

// loopInputs are the loop model's inputs: n iterations from x0 = 0.5.
func loopInputs(n int64) []onnxrt.Value {
	nb := make([]byte, 8)
	binary.LittleEndian.PutUint64(nb, uint64(n))
	xb := make([]byte, 4)
	binary.LittleEndian.PutUint32(xb, math.Float32bits(0.5))
	return []onnxrt.Value{{Type: onnxrt.Int64, Shape: []int64{}, Data: nb}, {Type: onnxrt.Float32, Shape: []int64{}, Data: xb}}
}

func loopAnswer(t *testing.T, s *onnxrt.Session, ctx context.Context, n int64) float32 {
	t.Helper()
	out, err := s.RunContext(ctx, []string{"n", "x0"}, loopInputs(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	return float32s(t, out[0])[0]
}

// signalContext is a context that reports when something waits on it (context.AfterFunc
// calls Done), so a test can end it once the run has started to watch it.
type signalContext struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

func (c *signalContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.done
}

func (c *signalContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *signalContext) cancel() {
	c.mu.Lock()
	c.err = context.Canceled
	c.mu.Unlock()
	close(c.done)
}

// TestRunContext stops runs of a loop of 2^62 iterations, which would otherwise not end:
// by a deadline, and by a cancel once the run is under way. Each returns an error wrapping
// the context's, and the session answers again after.
func TestRunContext(t *testing.T) {
	s := open(t, zoo(t, "loop", "model.onnx"), onnxrt.Options{})
	if got := loopAnswer(t, s, context.Background(), 1000); got != 1000.5 {
		t.Fatalf("1000 iterations: %g", got)
	}
	forever := loopInputs(1 << 62)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.RunContext(ctx, []string{"n", "x0"}, forever, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	t.Logf("deadline: %v", err)

	sc := &signalContext{Context: context.Background(), waiting: make(chan struct{}), done: make(chan struct{})}
	go func() {
		<-sc.waiting
		sc.cancel()
	}()
	_, err = s.RunContext(sc, []string{"n", "x0"}, forever, nil)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped: context canceled") {
		t.Fatalf("cancel during the run: %v", err)
	}

	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if _, err := s.RunContext(done, []string{"n", "x0"}, forever, nil); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("an ended context: %v", err)
	}

	live, stop := context.WithCancel(context.Background())
	defer stop()
	if got := loopAnswer(t, s, live, 20); got != 20.5 {
		t.Fatalf("after the cancels: %g", got)
	}
}
