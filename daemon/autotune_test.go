package daemon

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

func testCurve(ms ...float64) *curve {
	c := &curve{}
	for i, f := range ms {
		b := 1 << i
		c.Points = append(c.Points, curvePoint{Batch: b, ForwardMS: f, PerSecond: float64(b) / (f / 1e3)})
	}
	c.monotone()
	return c
}

func TestCurveChoices(t *testing.T) {
	// 1→10 ms, 2→12, 4→16, 8→30, 16→60: throughput 100, 167, 250, 267, 267 per second.
	c := testCurve(10, 12, 16, 30, 60)
	if b := c.bestBatch(); b != 8 {
		t.Errorf("bestBatch %d, want 8 (the smallest within 3%% of the best)", b)
	}
	if b := c.limitFor(0); b != 8 {
		t.Errorf("limit without a target %d, want 8", b)
	}
	if b := c.limitFor(40 * time.Millisecond); b != 4 {
		t.Errorf("limit for a 40 ms target %d, want 4 (2 × 16 ms ≤ 40 ms < 2 × 30 ms)", b)
	}
	if b := c.limitFor(5 * time.Millisecond); b != 1 {
		t.Errorf("limit for an unreachable target %d, want 1", b)
	}
	if d := c.forward(6); d != 23*time.Millisecond {
		t.Errorf("forward(6) = %v, want 23ms (interpolated)", d)
	}
	if d := c.forward(32); d != 120*time.Millisecond {
		t.Errorf("forward(32) = %v, want 120ms (extrapolated)", d)
	}
	// Noise only adds time: a batch of 2 measured slower than a batch of 4 costs at most
	// the batch of 4.
	n := testCurve(10, 40, 16)
	if n.Points[1].ForwardMS != 16 || n.Points[0].ForwardMS != 10 {
		t.Errorf("monotone: %+v", n.Points)
	}
}

func newTestTuner(target time.Duration, workers, limit, maxCap int) *tuner {
	t := &tuner{name: "m", log: slog.New(slog.NewTextHandler(io.Discard, nil)), b: NewBatcher(100, limit, 0),
		curve: testCurve(10, 12, 16, 30, 60), target: target, workers: workers, maxCap: maxCap, limit: limit}
	t.auto.batch, t.auto.delay = true, true
	return t
}

// The limit follows p99 with a dead band: over the target it shrinks by a quarter, under 60%
// of it with full batches it grows by a quarter up to the curve's cap, and in between it
// holds, so a steady load does not oscillate.
func TestTunerSteps(t *testing.T) {
	tn := newTestTuner(100*time.Millisecond, 1, 16, 16)
	tn.step(150*time.Millisecond, 100, 500, 500, 32) // over target
	if tn.limit != 12 {
		t.Fatalf("after p99 over target: limit %d, want 12", tn.limit)
	}
	tn.step(120*time.Millisecond, 100, 500, 500, 42)
	if tn.limit != 9 {
		t.Fatalf("limit %d, want 9", tn.limit)
	}
	for range 20 { // steady, inside the band: no change
		tn.step(80*time.Millisecond, 100, 500, 500, 56)
	}
	if tn.limit != 9 || tn.changes != 2 {
		t.Fatalf("steady load moved the limit: %d after %d changes", tn.limit, tn.changes)
	}
	tn.step(40*time.Millisecond, 100, 500, 450, 50) // under 60%, batches full (9 each)
	if tn.limit != 11 {
		t.Fatalf("after p99 well under target with full batches: %d, want 11", tn.limit)
	}
	tn.step(40*time.Millisecond, 100, 500, 100, 50) // under, but batches of 2: no growth
	if tn.limit != 11 {
		t.Fatalf("grew with half-empty batches: %d", tn.limit)
	}
	for range 10 {
		tn.step(10*time.Millisecond, 100, 5000, 5000, 5000/int64(tn.limit))
	}
	if tn.limit != 16 {
		t.Fatalf("limit %d, want the curve's cap 16", tn.limit)
	}
	tn.step(500*time.Millisecond, 5, 5, 5, 5) // too few requests to judge
	if tn.limit != 16 {
		t.Fatalf("moved on 5 requests: %d", tn.limit)
	}
	if got := tn.b.batchSize.Load(); got != 16 {
		t.Fatalf("batcher limit %d, want 16", got)
	}
}

// One worker never lingers; several linger for the time the queue takes to fill a batch at
// the arrival rate, at most a forward's time shared among the workers, with hysteresis.
func TestTunerDelay(t *testing.T) {
	one := newTestTuner(0, 1, 8, 8)
	one.step(time.Millisecond, 100, 1000, 1000, 125)
	if one.delay != 0 {
		t.Fatalf("one worker lingers %v", one.delay)
	}
	two := newTestTuner(0, 2, 8, 8)
	two.step(time.Millisecond, 100, 1000, 1000, 125) // 8 requests take 8 ms to arrive; forward(8)/2 = 15 ms
	if two.delay != 8*time.Millisecond {
		t.Fatalf("two workers at 1000/s: delay %v, want 8ms", two.delay)
	}
	two.step(time.Millisecond, 100, 900, 900, 112) // 8.9 ms: within 25%, held
	if two.delay != 8*time.Millisecond {
		t.Fatalf("delay moved on a 10%% change: %v", two.delay)
	}
	two.step(time.Millisecond, 100, 100, 100, 50) // 80 ms to fill, capped at 15 ms
	if two.delay != 15*time.Millisecond {
		t.Fatalf("two workers at 100/s: delay %v, want 15ms (forward(8)/2)", two.delay)
	}
	if two.b.maxDelay.Load() != int64(15*time.Millisecond) {
		t.Fatalf("batcher delay %v", time.Duration(two.b.maxDelay.Load()))
	}
}

func TestTunerP99(t *testing.T) {
	tn := newTestTuner(0, 1, 1, 1)
	for i := 1; i <= 2000; i++ {
		tn.record(time.Duration(i) * time.Millisecond)
	}
	p, n := tn.p99(0)
	// The ring keeps the last 1024: 977 ms … 2000 ms; its p99 is the 1014th.
	if n != 1024 || p != 1990*time.Millisecond {
		t.Fatalf("p99 %v over %d", p, n)
	}
	if _, n := tn.p99(tn.next.Load()); n != 0 {
		t.Fatalf("an empty window has %d", n)
	}
}
