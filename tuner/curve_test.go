package tuner

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

func testCurve(ms ...float64) *curve {
	c := &curve{}
	for i, f := range ms {
		b := 1 << i
		c.Points = append(c.Points, Point{Batch: b, ForwardMS: f, PerSecond: float64(b) / (f / 1e3)})
	}
	c.monotone()
	return c
}

func TestCurveChoices(t *testing.T) {
	// 1→10 ms, 2→12, 4→16, 8→30, 16→60: throughput 100, 167, 250, 267, 267 per second.
	c := testCurve(10, 12, 16, 30, 60)
	if b := c.bestBatch(); b != 4 {
		t.Errorf("bestBatch %d, want 4 (the smallest within 10%% of the best)", b)
	}
	for _, tc := range []struct {
		target           time.Duration
		maxBatch         int
		workers          int
		start, maxBatch2 int
	}{
		{0, 64, 1, 16, 32},                      // the plateau's end; twice the largest measured batch
		{0, 64, 2, 4, 32},                       // several workers: the knee
		{0, 20, 1, 16, 16},                      // the queue's bound
		{0, 12, 1, 8, 8},                        // the plateau's end under the cap
		{40 * time.Millisecond, 64, 1, 4, 4},    // 2 × 16 ms ≤ 40 ms < 2 × 30 ms
		{130 * time.Millisecond, 64, 1, 16, 16}, // 2 × 60 ms fits, 2 × 120 ms (extrapolated) does not
		{20 * time.Millisecond, 64, 1, 1, 1},    // 2 × 10 ms fits, 2 × 12 ms does not
		{30 * time.Millisecond, 64, 1, 2, 2},    // the plateau above the cap: the cap
		{5 * time.Millisecond, 64, 1, 1, 1},     // unreachable: batches of 1
	} {
		if s, l := c.limits(tc.target, tc.maxBatch, tc.workers); s != tc.start || l != tc.maxBatch2 {
			t.Errorf("limits(%v, %d, %d workers) = %d, %d; want %d, %d", tc.target, tc.maxBatch, tc.workers, s, l, tc.start, tc.maxBatch2)
		}
	}
	// A noisy curve whose throughput dips past its best and rises again (digits_tensor's
	// did: 13,882 items/s at 8, 11,003 at 16, 12,269 at 64): one worker starts at the
	// largest batch within 20% of the best, several at the knee.
	d := testCurve(10, 12, 16, 8000.0/300, 16000.0/250, 32000.0/260)
	if s, l := d.limits(0, 64, 1); s != 32 || l != 64 {
		t.Errorf("dipping curve, one worker: limits %d, %d; want 32, 64", s, l)
	}
	if s, l := d.limits(0, 64, 2); s != 8 || l != 64 {
		t.Errorf("dipping curve, two workers: limits %d, %d; want 8, 64", s, l)
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

// digits is the zoo's digits model with the tensor handler and a zero input.
func digits(t *testing.T) Model {
	t.Helper()
	path := filepath.Join("..", "models", "out", "digits", "model.pt")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	m, err := torch.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	h, err := handlers.New("tensor", handlers.Context{})
	if err != nil {
		t.Fatal(err)
	}
	s := &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 1, 28, 28}, Data: make([]byte, 28*28*4)}}}
	return Model{Name: "digits", Run: func(b []*handlers.Sample) error {
		_, err := handlers.Infer(h, m, b)
		return err
	}, Device: m.Device(), Path: path, Sample: s}
}

// measureCurve times real forwards of 1, 2, 4, … copies of the input: a cheap model is
// measured to maxBatch, every point has a time, and a bigger batch never takes less.
// An input the model cannot run is an error.
func TestMeasureCurve(t *testing.T) {
	m := digits(t)
	c, err := measureCurve(m.Run, m.Sample, 1, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Points) != 4 || c.Threads != 1 || c.Took <= 0 {
		t.Fatalf("curve %+v: want batches 1, 2, 4, 8 on one thread", c)
	}
	for i, p := range c.Points {
		if p.Batch != 1<<i || p.ForwardMS <= 0 || p.PerSecond <= 0 || i > 0 && p.ForwardMS < c.Points[i-1].ForwardMS {
			t.Errorf("point %d: %+v (curve %+v)", i, p, c.Points)
		}
	}
	bad := &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 3}, Data: make([]byte, 12)}}}
	if _, err := measureCurve(m.Run, bad, 1, 8, 0); err == nil {
		t.Fatal("an input of the wrong shape: no error")
	}
}

// New measures the curve once and reads it from the cache after: the same curve, the same
// settings. It fills in the automatic settings within the curve's cap and leaves the
// others as they are.
func TestNewCachesCurve(t *testing.T) {
	m := digits(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	settings := func() *Settings {
		return &Settings{AutoBatch: true, BatchSize: 1, MaxBatchDelay: time.Millisecond, MinWorkers: 1, MaxWorkers: 1, Threads: 1, JobQueueSize: 100}
	}
	s := settings()
	first, err := New(m, s, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	st := first.Status()
	if st.CurveSource != "measured" || len(st.Curve) < 2 || s.BatchSize < 1 || s.BatchSize > st.MaxBatchSize || s.BatchSize != st.BatchSize {
		t.Fatalf("first: %+v, settings %+v", st, s)
	}
	if s.MaxBatchDelay != time.Millisecond || s.MinWorkers != 1 || s.Threads != 1 || slices.Contains(st.Auto, "threads") {
		t.Fatalf("settings that were not automatic changed: %+v, auto %v", s, st.Auto)
	}
	s2 := settings()
	second, err := New(m, s2, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if st2 := second.Status(); st2.CurveSource != "cache" || !slices.Equal(st2.Curve, st.Curve) || *s2 != *s {
		t.Fatalf("second: %+v, settings %+v; want the cached curve and %+v", st2, s2, s)
	}
	if n := strings.Count(logs.String(), `msg="auto batching curve" model=digits`); n != 2 {
		t.Fatalf("%d curve log lines, want 2:\n%s", n, logs.String())
	}
	bad := m
	bad.Path = filepath.Join(dir, "missing.pt")
	if _, err := New(bad, settings(), dir, log); err == nil {
		t.Fatal("a missing model file: no error")
	}
}

// forward_batch = "auto" picks the largest batch within 10% of the most rows a second: a
// memory-bound model's peak (EfficientNet-Lite0 in int8 on one thread measured 103, 129,
// 127, 138, 100 and 94 rows/s at 1…32), and the largest measured where throughput only
// grows.
func TestFastestRows(t *testing.T) {
	for _, tc := range []struct {
		ms   []float64
		want int
	}{
		{[]float64{9.75, 15.56, 31.49, 58.06, 160.8, 340.6}, 8},
		{[]float64{9.6, 16.4, 34.3, 75.6, 183.5}, 4}, // 104, 122, 116, 106, 87: 4 is within 10% of 2
		{[]float64{10, 12, 16, 30, 60}, 16},
		{[]float64{10}, 1},
	} {
		if b := testCurve(tc.ms...).fastestRows(); b != tc.want {
			t.Errorf("curve %v ms: fastestRows %d, want %d", tc.ms, b, tc.want)
		}
	}
}
