package tuner

import (
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
)

// Under a steady load the tuner climbs to the limit that serves most, then stays there,
// probing ever more rarely; with ±2% noise it never adopts a worse limit.
func TestTunerClimbsAndSettles(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	l := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64, noise: 0.02}
	l.run(tn, 20)
	if tn.limit != 32 || tn.changes != 2 {
		t.Fatalf("after 20 windows: limit %d after %d changes (history %+v), want 32 after 2 (8→16→32)", tn.limit, tn.changes, tn.history)
	}
	seen := l.run(tn, 400)
	if tn.limit != 32 || tn.changes != 2 {
		t.Fatalf("steady load moved the limit: %d after %d changes (%+v)", tn.limit, tn.changes, tn.history)
	}
	off := 0
	for _, s := range seen[200:] {
		if s != 32 {
			off++
		}
	}
	// Backing off to one probe in 32 windows: two windows in 33 off the limit at most.
	if off > 200*2/33+2 {
		t.Fatalf("%d of the last 200 windows ran at a probe's limit", off)
	}
	t.Logf("%d probes in %d windows; the last 200 windows: %d at a probe's limit", tn.probes, l.windows, off)
}

// A flat curve with ±4% noise: changes stay rare (a 5% gain over two interleaved windows is
// needed), and none go back and forth more than once.
func TestTunerNoiseDoesNotOscillate(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	l := &load{rate: func(int) float64 { return 5000 }, queue: 64, noise: 0.04}
	l.run(tn, 600)
	if tn.changes > 4 {
		t.Fatalf("%d changes on a flat curve: %+v", tn.changes, tn.history)
	}
	t.Logf("flat curve, ±4%% noise: %d probes, %d changes in 600 windows", tn.probes, tn.changes)

	// Windows that vary by ±25% (this VM's windows do) are not load changes: the probes
	// stay backed off.
	tn = newTestTuner(0, 1, 8, 64)
	l = &load{rate: func(int) float64 { return 5000 }, queue: 64, noise: 0.25}
	l.run(tn, 600)
	if tn.probes > 40 {
		t.Fatalf("%d probes in 600 noisy windows: noise taken for load changes", tn.probes)
	}
	t.Logf("flat curve, ±25%% noise: %d probes, %d changes in 600 windows", tn.probes, tn.changes)
}

// The load shifts: at c=1 (batches of 1) nothing is probed and nothing changes; back under
// load, the tuner probes again within a few windows.
func TestTunerLoadShift(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	sat := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	sat.run(tn, 100)
	changes, probes := tn.changes, tn.probes
	idle := &load{rate: func(int) float64 { return 900 }, queue: 1}
	idle.run(tn, 100)
	if tn.changes != changes || tn.probes != probes {
		t.Fatalf("at c=1: %d changes, %d probes", tn.changes-changes, tn.probes-probes)
	}
	// c=16: the best limit is now 8 (batches bigger than half the queue stall the pipeline).
	mid := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8200, 16: 7000, 32: 6900, 64: 6900}), queue: 16}
	seen := mid.run(tn, 24)
	if tn.limit != 8 {
		t.Fatalf("after 24 windows at c=16: limit %d (windows at %v, history %+v)", tn.limit, seen, tn.history)
	}
	t.Logf("c=16 after c=1: windows at %v", seen)

	// The load stops in the middle of a probe: the probe is void, the limit comes back, and
	// idle windows change nothing.
	for tn.phase != phaseProbing {
		mid.rate = table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 7000, 16: 8000, 32: 6900, 64: 6900})
		mid.run(tn, 1)
	}
	limit, changes := tn.limit, tn.changes
	for range 50 {
		tn.step(window{})
	}
	if tn.phase != phaseSteady || tn.core().batchSize != limit || tn.changes != changes {
		t.Fatalf("after the load stopped mid-probe: phase %d, batcher at %d, limit %d, %d changes", tn.phase, tn.core().batchSize, limit, tn.changes-changes)
	}
}

// One worker does not linger by itself (lingering is a probe); several linger for the time the queue takes to fill a batch at
// the arrival rate, at most a forward's time shared among the workers, with hysteresis.
func TestTunerDelay(t *testing.T) {
	w := func(rate float64) window {
		return window{rate: rate, mean: 1, n: 100, batches: 100, p99: time.Millisecond}
	}
	one := newTestTuner(0, 1, 8, 8)
	one.step(w(1000))
	if one.delay != 0 {
		t.Fatalf("one worker lingers %v", one.delay)
	}
	two := newTestTuner(0, 2, 8, 8)
	two.step(w(1000)) // 8 requests take 8 ms to arrive; forward(8)/2 = 15 ms
	if two.delay != 8*time.Millisecond {
		t.Fatalf("two workers at 1000/s: delay %v, want 8ms", two.delay)
	}
	two.step(w(900)) // 8.9 ms: within 25%, held
	if two.delay != 8*time.Millisecond {
		t.Fatalf("delay moved on a 10%% change: %v", two.delay)
	}
	two.step(w(100)) // 80 ms to fill, capped at 15 ms
	if two.delay != 15*time.Millisecond {
		t.Fatalf("two workers at 100/s: delay %v, want 15ms (forward(8)/2)", two.delay)
	}
	if two.core().maxDelay != 15*time.Millisecond {
		t.Fatalf("batcher delay %v", two.core().maxDelay)
	}
}

func TestTunerP99(t *testing.T) {
	tn := newTestTuner(0, 1, 1, 1)
	for i := 1; i <= 2000; i++ {
		tn.Record(time.Duration(i) * time.Millisecond)
	}
	p, _, n := tn.latencies(0)
	// The ring keeps the last 1024: 977 ms … 2000 ms; its p99 is the 1014th.
	if n != 1024 || p != 1990*time.Millisecond {
		t.Fatalf("p99 %v over %d", p, n)
	}
	if _, _, n := tn.latencies(tn.next.Load()); n != 0 {
		t.Fatalf("an empty window has %d", n)
	}
}

// One worker, batches that do not fill the limit, and a load where waiting for a full batch
// serves 15% more (a closed loop whose clients answer in bursts): the tuner adopts lingering,
// with a delay that lets the batch fill at the arrival rate, and drops it at once when the
// batches become single requests. Where lingering serves less it is never adopted.
func TestTunerLinger(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 8)
	l := &load{rate: func(int) float64 { return 4000 }, queue: 6, linger: 1.15}
	l.run(tn, 40)
	if !tn.linger || tn.delay != 2*time.Millisecond || tn.limit != 8 {
		// 8 requests at 4000/s take 2 ms; two forwards of 8 take 60 ms.
		t.Fatalf("linger %v, delay %v, limit %d (history %+v), want lingering 2ms at 8", tn.linger, tn.delay, tn.limit, tn.history)
	}
	if tn.core().maxDelay != tn.delay {
		t.Fatalf("batcher delay %v", tn.core().maxDelay)
	}
	changes := tn.changes
	l.run(tn, 40) // steady: stays
	if !tn.linger || tn.changes != changes {
		t.Fatalf("steady load: linger %v after %d more changes (%+v)", tn.linger, tn.changes-changes, tn.history)
	}
	// A window in which the load stopped part of the way: few requests in the server on
	// average, but full batches. Still lingering.
	tn.step(window{rate: 1000, mean: 7.9, load: 2, end: 1, n: 100, batches: 20, p99: time.Millisecond})
	if !tn.linger {
		t.Fatalf("a window cut short stopped the lingering: %+v", tn.history)
	}
	// Four clients for a batch of eight: stop.
	tn.step(window{rate: 4000, mean: 4, load: 4, end: 4, n: 100, batches: 20, p99: time.Millisecond})
	if tn.linger || tn.delay != 0 {
		t.Fatalf("half-full batches still linger %v", tn.delay)
	}
	tn.linger, tn.delay = true, 2*time.Millisecond
	one := &load{rate: func(int) float64 { return 400 }, queue: 1}
	one.run(tn, 1)
	if tn.linger || tn.delay != 0 || tn.core().maxDelay != 0 {
		t.Fatalf("batches of one still linger %v", tn.delay)
	}

	no := newTestTuner(0, 1, 8, 8)
	bad := &load{rate: func(int) float64 { return 4000 }, queue: 6, linger: 0.8, noise: 0.04}
	bad.run(no, 300)
	if no.linger || no.changes != 0 {
		t.Fatalf("lingering that serves less adopted: %+v", no.history)
	}
	t.Logf("lingering that serves 20%% less: %d probes in 300 windows, none adopted", no.probes)
}

// A load that starts after a pause is judged at once: its first window (which may have begun
// before the load) is skipped, the second starts a probe, without the two windows that
// confirm a change under continuous load. A pause followed by the same load changes nothing.
func TestTunerResumesAfterPause(t *testing.T) {
	tn := newTestTuner(0, 1, 8, 64)
	sat := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	sat.run(tn, 100)
	probes, limit := tn.probes, tn.limit
	for range 5 {
		tn.step(window{})
	}
	sat.run(tn, 2)
	if tn.phase != phaseSteady || tn.probes != probes || tn.limit != limit {
		t.Fatalf("the same load after a pause: phase %d, %d probes, limit %d → %d", tn.phase, tn.probes-probes, limit, tn.limit)
	}
	for range 5 {
		tn.step(window{})
	}
	mid := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8200, 16: 7000, 32: 6900, 64: 6900}), queue: 16}
	mid.run(tn, 2)
	if tn.phase != phaseProbing {
		t.Fatalf("two windows into a new load after a pause: phase %d, want a probe under way", tn.phase)
	}
}

// Stolen CPU time: a probe whose trial window lost a fifth of the machine's CPU time to the
// hypervisor (and 40% of its rate) is void and tried again, so a better neighbour is still
// adopted; the same loss unseen declines it.
func TestTunerStolenTime(t *testing.T) {
	run := func(hidden bool) *Tuner {
		tn := newTestTuner(0, 1, 8, 64)
		l := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9600, 32: 9600, 64: 9000}), queue: 64,
			stolenTrials: 3, stolen: 0.2, hidden: hidden}
		l.run(tn, 30)
		return tn
	}
	if tn := run(false); tn.limit != 16 {
		t.Errorf("seen: limit %d after 30 windows (history %+v), want 16", tn.limit, tn.history)
	}
	if tn := run(true); tn.limit != 8 || tn.backoff < 2 {
		t.Errorf("unseen: limit %d, backoff %d after 30 windows, want 8 and a decline", tn.limit, tn.backoff)
	}
}

// A probe and the load stopping: a trial window in which the load stopped (the requests in
// the server fell to under a quarter of their mean by its end) is void; a probe whose
// window back at the current setting comes after a pause is decided by the load's next
// whole window if the load is the same, and is void if it is not.
func TestTunerProbeAcrossPause(t *testing.T) {
	sat := func() *load {
		return &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	}
	untilProbe := func(tn *Tuner, l *load) {
		for i := 0; tn.phase != phaseProbing; i++ {
			if i > 100 {
				t.Fatal("no probe in 100 windows")
			}
			l.run(tn, 1)
		}
	}
	full := window{rate: 9000, mean: 16, n: 1000, batches: 100, p99: time.Millisecond, load: 64, end: 64}

	// The trial is cut: void.
	tn := newTestTuner(0, 1, 8, 64)
	untilProbe(tn, sat())
	probes, limit := tn.probes, tn.limit
	cut := full
	cut.end = 3
	tn.step(cut)
	if tn.phase != phaseSteady || tn.probes != probes || tn.limit != limit || tn.core().batchSize != limit || len(tn.evidence) != 0 {
		t.Fatalf("a cut trial: phase %d, %d probes, limit %d → %d (batcher %d), evidence %v",
			tn.phase, tn.probes-probes, limit, tn.limit, tn.core().batchSize, tn.evidence)
	}

	// A pause between the trial and the window back: the same load decides the probe.
	tn = newTestTuner(0, 1, 8, 64)
	l := sat()
	untilProbe(tn, l)
	probes = tn.probes
	l.run(tn, 1) // the trial
	if tn.phase != phaseReturning {
		t.Fatalf("after the trial: phase %d", tn.phase)
	}
	for range 5 {
		tn.step(window{})
	}
	l.run(tn, 1) // skipped: it may have begun before the load
	if tn.phase != phaseReturning || tn.probes != probes {
		t.Fatalf("first window after the pause: phase %d, %d probes", tn.phase, tn.probes-probes)
	}
	l.run(tn, 1)
	if tn.probes != probes+1 {
		t.Fatalf("the same load after the pause did not decide the probe: %d probes", tn.probes-probes)
	}

	// The same, but the load after the pause is another: void.
	tn = newTestTuner(0, 1, 8, 64)
	l = sat()
	untilProbe(tn, l)
	probes = tn.probes
	l.run(tn, 1)
	for range 5 {
		tn.step(window{})
	}
	other := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 7000, 32: 6900, 64: 6900}), queue: 8}
	other.run(tn, 2)
	if tn.probes != probes || len(tn.evidence) != 0 {
		t.Fatalf("another load after the pause decided the probe: %d probes, evidence %v", tn.probes-probes, tn.evidence)
	}
}

// The measured noise is not biased low while it has few samples: four window pairs that
// differ by 20% each give the same σ as forty.
func TestTunerNoiseEstimate(t *testing.T) {
	want := math.Sqrt(math.Pow(math.Log(1.2), 2)/2) * math.Sqrt(1.5)
	tn := newTestTuner(0, 1, 8, 64)
	for i := range 40 {
		tn.noise(window{rate: 1000}, window{rate: 1200})
		if got := tn.sigma(); i >= 3 && math.Abs(got-want) > 0.01*want {
			t.Fatalf("after %d samples σ = %.4f, want %.4f", i+1, got, want)
		}
	}
}

// With batch_size alone automatic, a manual max_batch_delay survives: an adopted probe does
// not turn it into lingering (which follows the arrival rate, and did retune it), and the
// load-level paths (a remembered level, a new one that starts from the curve's batch) keep
// it instead of setting 0.
func TestTunerKeepsManualDelay(t *testing.T) {
	tn := newTestTuner(0, 1, 32, 64)
	tn.auto.delay = false
	tn.delay = 5 * time.Millisecond
	tn.core().SetBatching(32, tn.delay)
	mid := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8200, 16: 7000, 32: 6900, 64: 6900}), queue: 16}
	sat := &load{rate: table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 9000, 32: 10000, 64: 9400}), queue: 64}
	mid.run(tn, 60)
	sat.run(tn, 8) // new level: back to the curve's 32
	mid.run(tn, 8) // remembered level: 8
	if len(tn.history) < 2 {
		t.Fatalf("no load-level changes: %+v", tn.history)
	}
	if tn.delay != 5*time.Millisecond || tn.core().maxDelay != 5*time.Millisecond {
		t.Fatalf("manual delay lost: tuner %v, batcher %v (history %+v)", tn.delay, tn.core().maxDelay, tn.history)
	}
	for _, h := range tn.history {
		if h.DelayMS != 5 {
			t.Fatalf("a change set the delay to %v ms: %+v", h.DelayMS, tn.history)
		}
	}
}

// Load in bursts shorter than a probe: three windows of load, then the load stops in the
// next (the bench's 6 s points against resnet18's 5.6 s trial at batch 32). A trial cut
// that way is void, and the next probe waits twice as long each time, so the bursts do not
// each pay for a cut trial.
func TestTunerBurstsShorterThanAProbe(t *testing.T) {
	tn := newTestTuner(0, 1, 16, 64)
	l := &load{rate: table(map[int]float64{8: 36, 16: 45, 32: 41}), queue: 64}
	cut := 0
	for range 40 {
		l.run(tn, 3)
		if tn.phase == phaseProbing {
			cut++
		}
		tn.step(window{rate: 9, mean: 32, n: 100, batches: 4, load: 20, end: 0}) // the load stops
		for range 5 {
			tn.step(window{})
		}
	}
	// Backing off 2, 4, 8, 16, 32 windows of load (three a burst): 8 cut trials at most.
	if cut > 8 || tn.limit != 16 {
		t.Fatalf("%d of 40 bursts ended in a cut trial; limit %d (%+v)", cut, tn.limit, tn.history)
	}
	t.Logf("%d of 40 bursts ended in a cut trial, %d probes decided", cut, tn.probes)
}

// A trial whose requests pile up in the server (an open loop the candidate cannot keep up
// with) ends at once, declined: the batcher is back at the current setting, and the next
// probe waits twice as long. Requests in the server within what the window before held (a
// closed loop) end nothing.
func TestTunerEndsTrialThatPilesUp(t *testing.T) {
	tn := newTestTuner(0, 1, 16, 16)
	tn.auto.delay = false
	l := &load{rate: func(int) float64 { return 1000 }, queue: 6}
	for range 20 {
		if tn.phase == phaseProbing {
			break
		}
		l.run(tn, 1)
	}
	if tn.phase != phaseProbing || tn.cand >= 16 {
		t.Fatalf("no probe of a smaller batch in 20 windows: phase %d, cand %d", tn.phase, tn.cand)
	}
	backoff := tn.backoff
	if d := tn.overrun(6 * 4); d != 0 || tn.phase != phaseProbing {
		t.Fatalf("24 requests in the server (4 times the window before's) ended the trial")
	}
	d := tn.overrun(6*4 + pileUpMin + 1)
	if d == 0 || tn.phase != phaseSteady || tn.core().batchSize != 16 {
		t.Fatalf("piled-up trial not ended: settle %v, phase %d, batcher at %d", d, tn.phase, tn.core().batchSize)
	}
	if tn.backoff != min(maxBackoff, 2*max(1, backoff)) || tn.wait != tn.backoff || tn.overruns != 1 {
		t.Fatalf("after the piled-up trial: backoff %d (was %d), wait %d, overruns %d", tn.backoff, backoff, tn.wait, tn.overruns)
	}
	if st := tn.Status(); st.ProbesPiledUp != 1 || st.BatchSize != 16 {
		t.Fatalf("status: %+v", st)
	}
	if d := tn.overrun(1000); d != 0 {
		t.Fatalf("overrun outside a trial ended something")
	}
}

// With the model's threads left unset, the workers' intra-op threads are one more neighbour:
// a model that serves twice as much on one thread per worker (digits_tensor on the 2-core VM,
// where the HTTP work and the clients share the cores) gets one thread and keeps it; one
// that serves 0.6 times as much (resnet18) keeps cores / workers, and its pool is back at
// them after every probe; threads that were set are never touched.
func TestTunerThreads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	rates := table(map[int]float64{1: 3000, 2: 4000, 4: 6000, 8: 8000, 16: 8200, 32: 8300, 64: 8300})
	withPool := func(auto bool) (*Tuner, *testCore) {
		tn := newTestTuner(0, 1, 8, 64)
		return tn, withThreads(tn, 4, auto)
	}
	tn, p := withPool(true)
	l := &load{rate: rates, queue: 64, noise: 0.1, threads: map[int]float64{1: 2, 4: 1}}
	l.run(tn, 30)
	if tn.threads != 1 || p.threads != 1 {
		t.Fatalf("twice the rate on one thread: tuner at %d threads, pool at %d after 30 windows (history %+v)", tn.threads, p.threads, tn.history)
	}
	changes := tn.changes
	l.run(tn, 400)
	if tn.threads != 1 || p.threads != 1 && tn.phase == phaseSteady {
		t.Fatalf("steady load moved the threads back: %d (history %+v)", tn.threads, tn.history)
	}
	flips := 0
	for i := 1; i < len(tn.history); i++ {
		if tn.history[i].Threads != tn.history[i-1].Threads {
			flips++
		}
	}
	if flips > 0 || tn.history[0].Threads != 1 {
		t.Fatalf("threads changed %d more times after the first change (history %+v)", flips, tn.history)
	}
	s := tn.Status()
	if !slices.Contains(s.Auto, "threads") || s.Threads != 1 {
		t.Fatalf("describe: auto %v, threads %d", s.Auto, s.Threads)
	}
	t.Logf("one thread serves twice: %d probes, %d changes (%d in the first 30 windows)", tn.probes, tn.changes, changes)

	tn, p = withPool(true)
	l = &load{rate: rates, queue: 64, noise: 0.1, threads: map[int]float64{1: 0.6, 4: 1}}
	l.run(tn, 400)
	for tn.phase != phaseSteady {
		l.run(tn, 1)
	}
	if tn.threads != 4 || p.threads != 4 {
		t.Fatalf("0.6 times the rate on one thread: tuner at %d threads, pool at %d", tn.threads, p.threads)
	}
	t.Logf("one thread serves 0.6 times: %d probes, limit %d", tn.probes, tn.limit)

	tn, p = withPool(false)
	l = &load{rate: rates, queue: 64, noise: 0.1, threads: map[int]float64{1: 2, 4: 1}}
	for range 200 {
		l.run(tn, 1)
		if p.threads != 4 {
			t.Fatalf("threads set by hand were changed to %d", p.threads)
		}
	}
	if slices.Contains(tn.Status().Auto, "threads") {
		t.Fatalf("describe lists threads as automatic when they were set")
	}
}

// The threads chosen at one load are probed first at the next: at c=1 two threads serve as
// much as one (the tuner stays where it is, on two), and at c=16 one thread serves twice as
// much. There the other probes (a smaller batch, lingering: undecided up to eight times each
// on noisy windows) must not come first: the tuner is on one thread within 12 windows of
// the new load.
func TestTunerThreadsAtANewLoad(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	tn := newTestTuner(0, 1, 32, 64)
	withThreads(tn, 2, true)
	one := &load{rate: func(int) float64 { return 3500 }, queue: 1, noise: 0.15, threads: map[int]float64{1: 1, 2: 1}, busy: 0.7}
	one.run(tn, 60)
	if tn.threads != 2 {
		t.Fatalf("c=1, one thread as good as two: moved to %d threads (%+v)", tn.threads, tn.history)
	}
	sixteen := &load{rate: table(map[int]float64{4: 8000, 8: 9000, 16: 9000, 32: 9000, 64: 9000}), queue: 16, noise: 0.15,
		threads: map[int]float64{1: 2, 2: 1}, busy: 0.6, rnd: one.rnd}
	for i := range 12 {
		sixteen.run(tn, 1)
		if tn.threads == 1 {
			t.Logf("one thread after %d windows at c=16 (%+v)", i+1, tn.history)
			return
		}
	}
	t.Fatalf("c=16, one thread serving twice: still on %d threads after 12 windows (%+v)", tn.threads, tn.history)
}

// Bursts of a slow model, two windows each with a pause between: the first window of a
// burst is judged when it began with the load (fresh) and skipped when it may have begun
// before it. With fresh windows a probe's trial fits in a burst and its window back comes
// in the next, and the better limit is adopted; without, the one judged window of each
// burst leaves no room for a trial.
func TestTunerFreshWindowsAfterPause(t *testing.T) {
	run := func(fresh bool) *Tuner {
		tn := newTestTuner(0, 1, 16, 16)
		rate := map[int]float64{4: 30, 8: 40, 16: 32}
		for range 40 {
			for i := range 2 {
				lim := tn.core().batchSize
				w := window{rate: rate[lim], mean: float64(min(lim, 16)), n: 100, batches: 10, p99: time.Second, load: 16, end: 16, fresh: fresh && i == 0}
				tn.step(w)
			}
			for range 5 {
				tn.step(window{})
			}
		}
		return tn
	}
	tn := run(true)
	if tn.limit != 8 {
		t.Errorf("fresh: limit %d after 40 bursts (%d probes, history %+v), want 8", tn.limit, tn.probes, tn.history)
	}
	t.Logf("fresh: %d probes, %d changes", tn.probes, len(tn.history))
	// Only the first burst, which no pause precedes, can start a probe that is decided.
	if tn := run(false); tn.limit != 16 || tn.probes > 1 {
		t.Errorf("not fresh: limit %d, %d probes after 40 bursts, want 16 and at most one", tn.limit, tn.probes)
	}
}

// A window is eight forwards at the limit it measures, at least 300 ms, and at most 2 s
// unless four forwards take longer; a probe's window is at the candidate's limit.
func TestTunerWindowLength(t *testing.T) {
	tn := newTestTuner(0, 1, 16, 64)
	tn.curve = testCurve(28, 50, 100, 200, 390, 800) // resnet18-like; batch 32 0.8 s
	for _, c := range []struct {
		limit int
		want  time.Duration
	}{
		{1, 300 * time.Millisecond}, // 8 × 28 ms = 224 ms
		{4, 800 * time.Millisecond}, // 8 × 100 ms
		{16, 2 * time.Second},       // 8 × 390 ms = 3.12 s
		{32, 3200 * time.Millisecond},
	} {
		tn.limit = c.limit
		if got := tn.windowLen(); got != c.want {
			t.Errorf("limit %d: window %v, want %v", c.limit, got, c.want)
		}
	}
	tn.limit, tn.phase, tn.cand = 16, phaseProbing, 4
	if got := tn.windowLen(); got != 800*time.Millisecond {
		t.Errorf("probing 4 from 16: window %v, want 800ms", got)
	}
}

// A trial's window waits for minBatches batches while the load holds (up to trialStretch
// times its length): resnet18's batch 32, past the curve's last point, takes longer than the
// curve says. Windows that are not trials, and trials whose load stopped, end on time.
func TestTunerTrialWaitsForBatches(t *testing.T) {
	tn := newTestTuner(0, 1, 16, 32)
	tn.curve = testCurve(28, 50, 100, 200, 390) // to 16: batch 32 extrapolated to 780 ms
	tn.cpu = func() (cpustat.Times, bool) { return cpustat.Times{}, false }
	tn.phase, tn.cand = phaseProbing, 32
	length := tn.windowLen() // 4 × 780 ms
	m := meter{t: tn}
	t0 := time.Now()
	m.begin(t0)
	tn.core().batches += 2
	for _, c := range []struct {
		name  string
		after time.Duration
		in    int64
		phase int
		due   bool
	}{
		{"before its length", length / 2, 64, phaseProbing, false},
		{"trial, two batches", length, 64, phaseProbing, false},
		{"trial, two batches, the load stopped", length, 0, phaseProbing, true},
		{"trial, two batches, stretched to the most", trialStretch * length, 64, phaseProbing, true},
		{"not a trial, two batches", length, 64, phaseSteady, true},
	} {
		tn.phase = c.phase
		if got := tn.due(&m, t0.Add(c.after), c.in); got != c.due {
			t.Errorf("%s: due %v, want %v", c.name, got, c.due)
		}
	}
	tn.phase = phaseProbing
	tn.core().batches += 1
	if !tn.due(&m, t0.Add(length), 64) {
		t.Errorf("trial with three batches at its length: not due")
	}
}
