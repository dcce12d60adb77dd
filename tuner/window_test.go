package tuner

import (
	"math"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
)

// The meter measures a window's rate over whole batches and corrects it for stolen CPU
// time: batches of 8 every 100 ms are 80 requests/s, though a 750 ms window holds only 7
// of them (a count would say 74.7/s).
func TestMeterWholeBatches(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	readings := []cpustat.Times{{Total: 1000, Idle: 300, Steal: 100}, {Total: 1400, Idle: 340, Steal: 200}} // a quarter of the CPU time stolen, a tenth idle
	tn.cpu = func() (cpustat.Times, bool) {
		r := readings[0]
		readings = readings[1:]
		return r, true
	}
	dispatch := tn.core().dispatch
	t0 := time.Now()
	dispatch(t0.Add(-10*time.Millisecond), 8) // before the window
	m := meter{t: tn}
	m.begin(t0)
	for i := range 7 {
		dispatch(t0.Add(time.Duration(90+100*i)*time.Millisecond), 8)
		m.tick(8)
	}
	w := m.window(t0.Add(750*time.Millisecond), 8)
	if w.batches != 7 || w.mean != 8 || w.load != 8 {
		t.Errorf("window: %d batches of %.1f, %.1f in the server; want 7 of 8, 8", w.batches, w.mean, w.load)
	}
	if math.Abs(w.served()-80) > 1e-6 || math.Abs(w.steal-0.25) > 1e-9 || math.Abs(w.rate-80/0.75) > 1e-6 || math.Abs(w.cpu-0.9) > 1e-9 {
		t.Errorf("window: served %.2f/s, steal %.2f, rate %.2f/s, CPU %.2f busy; want 80, 0.25, %.2f, 0.9", w.served(), w.steal, w.rate, w.cpu, 80/0.75)
	}

	// With fewer than two batches after its first dispatch, the count is all there is.
	tn.cpu = func() (cpustat.Times, bool) { return cpustat.Times{}, false }
	m = meter{t: tn}
	m.begin(t0)
	dispatch(t0.Add(100*time.Millisecond), 8)
	m.tick(1)
	if w := m.window(t0.Add(500*time.Millisecond), 1); math.Abs(w.rate-16) > 1e-6 || w.steal != 0 || w.cpu != 0 {
		t.Errorf("one batch: rate %.2f/s, steal %.2f, CPU %.2f; want 16 (8 in 0.5 s), 0, 0 (not measured)", w.rate, w.steal, w.cpu)
	}
}

// A window in which the dispatches stop is cut: the load stopped (a bench's point ended) and
// its rate says nothing of the setting, even at c=1, where the requests in the server (under
// one on average) cannot tell. Dispatches that go on to the window's end, however sparse,
// are not a stop.
func TestMeterLoadStopped(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	tn.cpu = func() (cpustat.Times, bool) { return cpustat.Times{}, false }
	t0 := time.Now()
	for _, c := range []struct {
		name    string
		every   time.Duration // between dispatches, from the window's start
		until   time.Duration // the last dispatch's time
		stopped bool
	}{
		{"15 requests in the first tick of 300 ms", 3 * time.Millisecond, 45 * time.Millisecond, true},
		{"the load stops after two thirds", time.Millisecond, 200 * time.Millisecond, true},
		{"to the end", time.Millisecond, 299 * time.Millisecond, false},
		{"three batches spread over the window", 100 * time.Millisecond, 300 * time.Millisecond, false},
	} {
		m := meter{t: tn}
		m.begin(t0)
		for at := c.every; at <= c.until; at += c.every {
			tn.core().dispatch(t0.Add(at), 1)
			m.tick(1)
		}
		w := m.window(t0.Add(300*time.Millisecond), 0)
		if w.stopped != c.stopped || w.cut() != c.stopped {
			t.Errorf("%s: stopped %v, cut %v; want %v", c.name, w.stopped, w.cut(), c.stopped)
		}
	}
}

// After a pause the meter starts its window again at every tick that finds the server idle
// and the window empty, and marks it fresh; a request in the server, or a dispatch, ends
// that.
func TestMeterIdle(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	tn.cpu = func() (cpustat.Times, bool) { return cpustat.Times{}, false }
	m := meter{t: tn}
	m.begin(time.Now())
	if !m.idle(0) {
		t.Fatal("a new window with nothing in the server is not idle")
	}
	if m.idle(1) {
		t.Fatal("a request in the server: idle")
	}
	m.tick(1)
	if m.idle(0) {
		t.Fatal("a window that saw a request is idle")
	}
	m.begin(time.Now())
	tn.core().batches += 1
	if m.idle(0) {
		t.Fatal("a window with a dispatch is idle")
	}
	m.fresh = true
	m.begin(time.Now())
	if w := m.window(time.Now(), 0); w.fresh {
		t.Fatal("begin did not clear fresh")
	}
}
