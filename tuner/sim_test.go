package tuner

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"time"
)

func newTestTuner(target time.Duration, workers, limit, maxCap int) *Tuner {
	t := &Tuner{name: "m", log: slog.New(slog.NewTextHandler(io.Discard, nil)), model: &testCore{batchSize: limit},
		curve: testCurve(10, 12, 16, 30, 60), target: target, workers: workers, maxCap: maxCap, limit: limit, start: limit}
	t.auto.batch, t.auto.delay = true, true
	return t
}

// withThreads puts tn's workers at the given intra-op threads, tuned by tn when auto.
func withThreads(tn *Tuner, threads int, auto bool) *testCore {
	c := tn.core()
	c.threads = threads
	tn.threads, tn.auto.threads = threads, auto
	return c
}

// testCore is the Target of the tests: it holds what the tuner sets, as the batcher and
// the worker pool do, and counts the dispatches a test makes.
type testCore struct {
	batchSize      int
	maxDelay       time.Duration
	threads        int
	batches, items int64
	busy           time.Duration
	last           Dispatch
}

func (c *testCore) SetBatching(limit int, delay time.Duration) {
	c.batchSize, c.maxDelay = max(limit, 1), delay
}

func (c *testCore) SetThreads(n int) { c.threads = n }

func (c *testCore) Stats() Stats {
	return Stats{Batches: c.batches, Items: c.items, Busy: c.busy, Last: c.last, BatchSize: c.batchSize, MaxDelay: c.maxDelay}
}

// dispatch records a dispatch of a batch of n at the given time, as the batcher does.
func (c *testCore) dispatch(at time.Time, n int64) {
	c.last = Dispatch{At: at, Batches: c.batches, Before: c.items}
	c.batches++
	c.items += n
}

// core is the tuner's test Target.
func (t *Tuner) core() *testCore { return t.model.(*testCore) }

// load is a simulated server for the tuner: what a window at a batch limit serves, with
// multiplicative noise of ±noise drawn from a fixed seed.
type load struct {
	rate     func(limit int) float64       // requests/s served
	linger   float64                       // the rate's factor when batches linger (0: 1)
	p99      func(limit int) time.Duration // 0: 1 ms
	queue    int                           // requests waiting: batches are min(limit, queue)
	noise    float64
	busy     float64 // the workers' busy share in every window (0: not measured)
	cpu      float64 // the machine's busy share (not idle) in every window (0: not measured),
	cpuSwing float64 // ± this, at random
	p99Var   float64 // multiplicative noise of p99, ±p99Var
	rnd      *rand.Rand
	windows  int
	// The next stolenTrials probes' trial windows have stolen of the CPU time taken by the
	// hypervisor, which costs twice that share of the rate (a forward's threads wait for
	// each other); hidden: the window does not say so (no /proc/stat).
	stolenTrials int
	stolen       float64
	hidden       bool
	// threads is the rate's factor at the workers' intra-op threads (nil: 1).
	threads map[int]float64
	// lat is the mean latency at a limit and a thread count, with the rate's noise (nil: not
	// measured).
	lat func(limit, threads int) time.Duration
	// fills: batches that linger are full (the mean batch is the limit), as they are when
	// the arrivals fill a batch within the delay.
	fills bool
	// trials are the rate's factors of the next probes' trial windows, in order, in place of
	// what the load would give (lucky and unlucky probes); lingerTrials the same for trials
	// that linger only.
	trials, lingerTrials []float64
	// fresh: the first window of each run began with the load, after a pause (see meter.idle).
	fresh bool
}

// run feeds the tuner n windows, each measured at the limit the batcher holds then, and
// returns the limits the windows ran at.
func (l *load) run(tn *Tuner, n int) []int {
	if l.rnd == nil {
		l.rnd = rand.New(rand.NewPCG(1, 2))
	}
	var seen []int
	for i := range n {
		lim := tn.core().batchSize
		seen = append(seen, lim)
		f := 1.0
		if l.linger > 0 && tn.core().maxDelay > 0 {
			f = l.linger
		}
		if l.threads != nil {
			f *= l.threads[tn.core().threads]
		}
		if tn.phase == phaseProbing && len(l.trials) > 0 {
			f, l.trials = l.trials[0], l.trials[1:]
		} else if tn.phase == phaseProbing && tn.core().maxDelay > 0 && len(l.lingerTrials) > 0 {
			f, l.lingerTrials = l.lingerTrials[0], l.lingerTrials[1:]
		}
		// In a closed loop the requests in the server are about the clients (the queue).
		w := window{rate: f * l.rate(lim) * (1 + l.noise*(2*l.rnd.Float64()-1)), mean: float64(min(lim, l.queue)), n: 1000, batches: 100,
			p99: time.Millisecond, load: float64(l.queue), end: float64(l.queue), busy: l.busy, cpu: l.cpu, fresh: l.fresh && i == 0}
		if l.fills && tn.core().maxDelay > 0 {
			w.mean = float64(lim)
		}
		if l.cpuSwing > 0 {
			w.cpu += l.cpuSwing * float64(1-2*l.rnd.IntN(2))
		}
		if l.p99 != nil {
			w.p99 = l.p99(lim)
		}
		if l.lat != nil {
			w.lat = time.Duration(float64(l.lat(lim, tn.core().threads)) * (1 + l.noise*(2*l.rnd.Float64()-1)))
		}
		if l.p99Var > 0 {
			w.p99 = time.Duration(float64(w.p99) * (1 + l.p99Var*(2*l.rnd.Float64()-1)))
		}
		if l.stolenTrials > 0 && tn.phase == phaseProbing {
			l.stolenTrials--
			w.rate *= 1 - 2*l.stolen
			if !l.hidden {
				w.steal = l.stolen
				w.rate /= 1 - w.steal // as the meter corrects it
			}
		}
		tn.step(w)
		l.windows++
	}
	return seen
}

func table(m map[int]float64) func(int) float64 { return func(l int) float64 { return m[l] } }

func table2(m map[int]time.Duration) func(int) time.Duration {
	return func(l int) time.Duration { return m[l] }
}

func countOf(xs []int, x int) (n int) {
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}
