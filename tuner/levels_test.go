package tuner

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// A load level seen before gets the settings learned there back at once, without probing:
// c=64 (best 32), c=16 (best 8), c=64 again, c=16 again.
func TestTunerRemembersLoadLevels(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	sat := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	mid := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8200, 16: 7000, 32: 6900, 64: 6900}), queue: 16}
	sat.run(tn, 60)
	mid.run(tn, 60)
	if tn.limit != 8 {
		t.Fatalf("c=16: limit %d (%+v)", tn.limit, tn.history)
	}
	for _, tc := range []struct {
		l    *load
		want int
	}{{sat, 32}, {mid, 8}, {sat, 32}} {
		probes := tn.probes
		seen := tc.l.run(tn, 8)
		// Two windows to see the change, then the remembered limit.
		for i, s := range seen[3:] {
			if s != tc.want {
				t.Fatalf("back at queue %d: window %d at %d (windows %v), want %d", tc.l.queue, i+3, s, seen, tc.want)
			}
		}
		if tn.probes != probes {
			t.Fatalf("back at queue %d: %d probes", tc.l.queue, tn.probes-probes)
		}
		if last := tn.history[len(tn.history)-1].Reason; !strings.HasPrefix(last, "load seen before") {
			t.Fatalf("reason %q", last)
		}
	}
}

// A load not seen before that keeps the curve's batch full starts from it: the tuner began
// at 32 (the curve's), learned 8 at c=16, and c=64 then gets 32 back at once, without
// climbing to it probe by probe; a lighter new load does not.
func TestTunerNewLoadStartsFromCurve(t *testing.T) {
	tn := newTestTuner(0, 1, 32, 64)
	mid := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8200, 16: 7000, 32: 6900, 64: 6900}), queue: 16}
	mid.run(tn, 60)
	if tn.limit != 8 {
		t.Fatalf("c=16: limit %d (%+v)", tn.limit, tn.history)
	}
	sat := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	// Two windows to see the change, then 32 (and from there the probes go on).
	seen := sat.run(tn, 6)
	if seen[2] != 32 || seen[3] != 32 || tn.limit != 32 {
		t.Fatalf("new load of 64: windows at %v, limit %d; want 32 from the third", seen, tn.limit)
	}
	if last := tn.history[len(tn.history)-1].Reason; !strings.HasPrefix(last, "new load") {
		t.Fatalf("new load of 64: reason %q", last)
	}
	// 26 or 47 requests in the server keep batches of 16 full (one in flight and half of
	// the next waiting), not 32: the largest of the curve's halvings that the load keeps
	// full.
	for _, tc := range []struct{ queue, want int }{{26, 16}, {47, 16}, {48, 32}} {
		tn = newTestTuner(0, 1, 32, 64)
		mid.run(tn, 60)
		changes := tn.changes
		seen := (&load{rate: mid.rate, queue: tc.queue}).run(tn, 3)
		if seen[2] != tc.want || tn.changes != changes+1 {
			t.Fatalf("new load of %d: windows at %v, history %+v; want %d from the third", tc.queue, seen, tn.history, tc.want)
		}
	}
}

// A busy closed-loop load not seen before starts from the limit its batches reach: after
// c=64 (batches of 32 full under 32), c=16 brings batches of 8 with the worker busy 95%, and
// the limit goes to 8 as the load change is seen, where the probes of that neighbour would
// take many windows. A bigger limit that serves clearly more is still adopted by the probes,
// once, and kept: the rule acts only at a new load, so it does not take it back.
func TestTunerNewLoadReaches(t *testing.T) {
	tn := newTestTuner(0, 1, 32, 64)
	tn.auto.delay = false
	sat := &load{rate: table(map[int]float64{8: 15000, 16: 17000, 32: 18500, 64: 17000}), queue: 64, busy: 0.99, noise: 0.02}
	sat.run(tn, 40)
	if tn.limit != 32 {
		t.Fatalf("c=64: limit %d (%+v)", tn.limit, tn.history)
	}
	mid := &load{rate: table(map[int]float64{4: 15000, 8: 20500, 16: 18500, 32: 18500}), queue: 8, busy: 0.95, noise: 0.02}
	seen := mid.run(tn, 4)
	if seen[2] != 8 || seen[3] != 8 || !strings.Contains(tn.history[len(tn.history)-1].Reason, "reaches batches of 8") {
		t.Fatalf("c=16: windows at %v, %+v; want 8 from the third", seen, tn.history)
	}
	// The same load where 16 serves 20% more than 8: 8 first, then 16 on the probes' evidence,
	// and no change after that.
	tn = newTestTuner(0, 1, 32, 64)
	tn.auto.delay = false
	up := &load{rate: table(map[int]float64{4: 12000, 8: 15000, 16: 18000, 32: 18000}), queue: 8, busy: 0.95, noise: 0.05}
	seen = up.run(tn, 300)
	if seen[1] != 8 || tn.limit != 16 || tn.changes != 2 {
		t.Fatalf("16 better: windows at %v, limit %d after %d changes (%+v); want 8 at once, then 16", seen[:20], tn.limit, tn.changes, tn.history)
	}
	if up.run(tn, 300); tn.changes != 2 || tn.limit != 16 {
		t.Fatalf("16 better: %d changes after 300 more windows (%+v)", tn.changes, tn.history)
	}
	t.Logf("16 better: %d probes; %s", tn.probes, tn.history[1].Reason)
}

// A setting adopted at one load level is remembered at the levels on either side too: in a
// closed loop lingering holds more requests in the server, and a neighbouring level's older
// memory (batch 64 here) must not take the setting back when the load wobbles into it.
func TestTunerAdoptionHoldsNextLevels(t *testing.T) {
	tn := newTestTuner(0, 1, 64, 64)
	tn.levels = map[int]levelMemory{6: {limit: 64, backoff: 4}}                // 6.7–9.5 requests in the server
	l := &load{rate: func(int) float64 { return 6000 }, linger: 1.5, queue: 5} // level 5
	for range 200 {
		if l.run(tn, 1); tn.linger {
			break
		}
	}
	if !tn.linger || tn.limit != 4 {
		t.Fatalf("lingering for 4 not adopted: limit %d, linger %v (%+v)", tn.limit, tn.linger, tn.history)
	}
	changes := tn.changes
	l.run(tn, 2)
	l.queue = 8 // held by lingering: level 6, and 1.6 times the load before
	if seen := l.run(tn, 20); tn.changes != changes || tn.limit != 4 || !tn.linger {
		t.Fatalf("the neighbouring level took the setting back: windows at %v, %+v", seen, tn.history)
	}
}

// A load level keeps its probes' evidence across loads between: points of load each begun by
// a window of half the requests in the server (the clients' ramp) after a pause used to drop
// the evidence of batch 64's declined probes and repeat its trials. Batch 64 serves 7%
// less than 32 here, under ±10% noise; 30 points of a ramp window and six at c=64. Without
// the level's evidence kept, none is left at the end; without the wait for a second window
// at the new load before a probe, 23 windows at 64.
func TestTunerLevelKeepsEvidence(t *testing.T) {
	tn := newTestTuner(0, 1, 32, 64)
	rate := table(map[int]float64{16: 8000, 32: 10000, 64: 9300})
	ramp := &load{rate: rate, queue: 32, noise: 0.1, fresh: true}
	full := &load{rate: rate, queue: 64, noise: 0.1, rnd: rand.New(rand.NewPCG(3, 4))}
	var seen []int
	for range 30 {
		for range 3 {
			tn.step(window{})
		}
		seen = append(seen, ramp.run(tn, 1)...)
		seen = append(seen, full.run(tn, 6)...)
	}
	e := tn.evidence[probeKey{64, false, 0}]
	if n := countOf(seen, 64); n > 6 || e.n < 2 || tn.limit != 32 {
		t.Fatalf("%d windows at 64 in 30 points, its evidence %d probes, limit %d; want at most 6, 2 or more, 32 (%+v)", n, e.n, tn.limit, tn.history)
	}
	t.Logf("%d windows at 64, %d probes of it, %d windows at 16", countOf(seen, 64), e.n, countOf(seen, 16))
}
