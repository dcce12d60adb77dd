package daemon

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/cpustat"
	"github.com/torchd/torchd/torch"
)

// Self-tuning batching: batch_size, max_batch_delay and workers may be "auto".
//
// At load, torchd measures the model's forward time against batch size on its device and
// thread setting, with the warm-up input replicated (1, 2, 4, … requests), in a bounded
// number of forwards: it stops at max_batch, when a forward alone would break the latency
// target, when the measuring budget would be spent, or (a slow model) when throughput has
// stopped growing; a cheap model gets interleaved passes (see measureCurve). The curve is
// cached per model file, device, threads and input shape.
//
// From the curve: the starting batch limit of one worker is the largest batch within 20% of
// the best measured throughput (see limits); with several workers it is the knee (the
// smallest within 10%), since their batches fill by lingering. The tuner may move it up to
// a cap (twice the largest measured batch, and with a latency target the largest whose
// forward fits twice in the target).
//
// While serving, batches are formed greedily: a free worker takes what is queued, up to the
// limit, so at low load a request runs alone at once (the lowest latency at the offered
// load) and under load batches grow with the queue. With one worker the delay starts at 0
// (requests that arrive during a forward queue anyway), and lingering is one of the probes:
// in a closed loop whose clients answer in bursts, waiting for the stragglers fills the
// batch. With several workers, an idle worker would split the arrivals into small batches,
// so the delay becomes the time the queue takes to fill the batch at the measured arrival
// rate, at most a forward's time divided by the workers.
//
// The forward alone does not say which limit serves best: per-batch costs (dispatch,
// concatenation, waking the requests) favour bigger batches, and the overlap of the HTTP
// work with the forward favours batches smaller than the queue. So under load the limit is
// tuned on what is served: the tuner tries the neighbouring limit for a window and keeps it
// only if it served measurably more, or, with a latency target, if it keeps p99 within the
// target (see tuner). When the model's intra-op threads are not set, the workers' threads
// are tuned the same way: cores / workers, or one (see dirThreads).

const (
	// startFrac bounds one worker's starting batch: the largest measured batch with at least
	// this fraction of the best throughput (see limits).
	startFrac = 0.8

	curveBudget   = 5 * time.Second        // the most a curve measurement may take
	curveCheap    = 500 * time.Millisecond // a first pass this short measures on to maxBatch
	curveRefine   = time.Second            // more passes while the passes together fit in this
	curveMaxBatch = 64
)

// curvePoint is one measured batch size: its forward time and throughput.
type curvePoint struct {
	Batch     int     `json:"batch"`
	ForwardMS float64 `json:"forwardMs"`
	PerSecond float64 `json:"itemsPerSecond"`
}

type curve struct {
	Points  []curvePoint `json:"points"`
	Threads int          `json:"threads"`
	Took    float64      `json:"measureSeconds"`
	// SingleThreadMS is the forward time at the throughput-optimal batch on one thread,
	// measured for workers = "auto" (0 otherwise).
	SingleThreadMS float64 `json:"singleThreadMs,omitempty"`
}

// forward returns the measured (or interpolated) forward time of a batch of b.
func (c *curve) forward(b int) time.Duration {
	p := c.Points
	if len(p) == 0 {
		return 0
	}
	for i, pt := range p {
		if pt.Batch >= b {
			if i == 0 || pt.Batch == b {
				return time.Duration(pt.ForwardMS * float64(time.Millisecond))
			}
			lo := p[i-1]
			f := float64(b-lo.Batch) / float64(pt.Batch-lo.Batch)
			return time.Duration((lo.ForwardMS + f*(pt.ForwardMS-lo.ForwardMS)) * float64(time.Millisecond))
		}
	}
	last := p[len(p)-1]
	return time.Duration(last.ForwardMS * float64(b) / float64(last.Batch) * float64(time.Millisecond))
}

// bestBatch is the smallest batch within 10% of the best throughput: the knee of the curve.
// Past it a bigger batch buys little in the forward and costs the overlap of HTTP work with
// the forward under load; the tuner moves from there by what is served.
func (c *curve) bestBatch() int {
	if b := c.plateau(0.9); len(b) > 0 {
		return b[0]
	}
	return 1
}

// plateau lists the measured batches with at least frac of the best throughput, smallest
// first.
func (c *curve) plateau(frac float64) []int {
	top := 0.0
	for _, p := range c.Points {
		top = math.Max(top, p.PerSecond)
	}
	var b []int
	for _, p := range c.Points {
		if p.PerSecond >= frac*top {
			b = append(b, p.Batch)
		}
	}
	return b
}

// limits are the batch limit to start from and the most the tuner may probe up to.
// The cap is twice the largest measured batch (the curve stops where its throughput stops
// growing, but serving has per-batch costs the forward alone does not show), at most
// maxBatch, and with a latency target the largest batch of the ladder whose forward fits
// twice in the target (a request may wait for the batch in flight, then run in its own).
// The start, under the cap, is the largest batch within startFrac of the best for one
// worker, and the knee for several.
//
// The forward alone cannot tell the batches of a plateau apart (its noise is about the
// plateau's width), and serving can at both ends. Of the rules measured in full bench runs,
// the largest within 20% did best (docs/design/self-tuning.md, "The starting point").
func (c *curve) limits(target time.Duration, maxBatch, workers int) (start, limit int) {
	limit = 1
	if n := len(c.Points); n > 0 {
		for b := 1; b <= min(maxBatch, 2*c.Points[n-1].Batch); b *= 2 {
			if target > 0 && 2*c.forward(b) > target {
				break
			}
			limit = b
		}
	}
	start = c.bestBatch()
	if workers == 1 {
		for _, b := range c.plateau(startFrac) {
			if b <= limit {
				start = max(start, b)
			}
		}
	}
	return min(start, limit), limit
}

// measureCurve times the forward of 1, 2, 4, … copies of sample on a locked OS thread
// with the given intra-op threads.
//
// A first pass times each batch size in turn: two forwards at the new shape for
// TorchScript's profiling executor (it profiles one run and optimizes on the next), then the
// fastest of at least three timed ones (up to 30 ms of them, at most 50, for a fast model):
// the minimum is what the model costs, and noise only ever adds to it. The pass stops at
// maxBatch, when a forward alone breaks the latency target, when the next (twice as long)
// forwards would pass the budget, or, once the pass has taken curveCheap, when throughput has
// stopped growing twice: a cheap model is measured to maxBatch, since its throughput may dip
// and rise again (a kernel library may pick a slower path for one batch size).
// Then more passes time every measured size again, each size keeping its fastest: a
// disturbance of the machine (another process, a model loading next to it) lasts a moment,
// and interleaved passes keep it from skewing one size against the others. Passes go on
// while they together stay within curveRefine; a slow model gets one more if it fits in the
// budget.
func measureCurve(h handlers.Handler, m torch.Model, sample *handlers.Sample, threads, maxBatch int, target time.Duration) (*curve, error) {
	c := &curve{Threads: threads}
	var err error
	onThread(threads, func() {
		start := time.Now()
		var batches [][]*handlers.Sample
		var best []time.Duration
		// timeBatch runs skip untimed forwards and then timed ones, and returns the fastest.
		timeBatch := func(batch []*handlers.Sample, skip int) time.Duration {
			fastest := time.Duration(math.MaxInt64)
			var spent time.Duration
			for i := 0; i < skip+3 || (spent < 30*time.Millisecond && i < skip+50); i++ {
				t0 := time.Now()
				if _, err = handlers.Infer(h, m, batch); err != nil {
					return 0
				}
				if d := time.Since(t0); i >= skip {
					fastest, spent = min(fastest, d), spent+d
				}
			}
			return fastest
		}
		flat, top := 0, 0.0
		for b := 1; b <= maxBatch; b *= 2 {
			batch := make([]*handlers.Sample, b)
			for i := range batch {
				batch[i] = sample
			}
			d := timeBatch(batch, 2)
			if err != nil {
				return
			}
			batches, best = append(batches, batch), append(best, d)
			if rate := float64(b) / d.Seconds(); rate < 1.03*top {
				flat++
			} else {
				flat, top = 0, rate
			}
			if flat >= 2 && time.Since(start) > curveCheap || (target > 0 && d > target) || time.Since(start)+10*d > curveBudget {
				break
			}
		}
		// A pass again costs four forwards of each size (more for a fast model, and the
		// first pass's own length bounds that).
		pass := time.Since(start)
		var again time.Duration
		for _, d := range best {
			again += 4 * d
		}
		for n := 1; time.Since(start)+pass <= curveRefine || n == 1 && time.Since(start)+again <= curveBudget; n++ {
			for i, batch := range batches {
				d := timeBatch(batch, 1)
				if err != nil {
					return
				}
				best[i] = min(best[i], d)
			}
		}
		for i, batch := range batches {
			c.Points = append(c.Points, curvePoint{Batch: len(batch), ForwardMS: float64(best[i]) / float64(time.Millisecond),
				PerSecond: float64(len(batch)) / best[i].Seconds()})
		}
		c.Took = time.Since(start).Seconds()
	})
	c.monotone()
	return c, err
}

// monotone corrects the curve for noise: a bigger batch never takes less time, and noise
// only adds time, so a batch costs at most what any bigger batch was measured at.
func (c *curve) monotone() {
	for i := len(c.Points) - 2; i >= 0; i-- {
		p, next := &c.Points[i], c.Points[i+1]
		if next.ForwardMS < p.ForwardMS {
			p.ForwardMS = next.ForwardMS
			p.PerSecond = float64(p.Batch) / (p.ForwardMS / 1e3)
		}
	}
}

// onThread runs f on a new locked OS thread with n intra-op threads; the thread ends with it.
func onThread(n int, f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		torch.SetNumThreadsHere(n)
		f()
		close(done)
	}()
	<-done
}

// curveKey identifies a curve: the model file's bytes, device, threads and input shapes.
func curveKey(modelPath, device string, threads int, sample *handlers.Sample, withSingle bool) (string, error) {
	f, err := os.Open(modelPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "|%s|%d|%v", device, threads, withSingle)
	for _, t := range sample.Tensors {
		fmt.Fprintf(h, "|%v%v", t.DType, t.Shape)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func cacheDir(cfg *Config) string {
	if cfg.CacheDir != "" {
		return cfg.CacheDir
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "torchd")
	}
	return filepath.Join(os.TempDir(), "torchd-cache")
}

// tuner adapts one model version's batching while it serves.
//
// It works in measuring windows (eight forwards' time, 0.3–4 s). The settings move only
// through probes: with the load busy enough for them to matter, the tuner serves one window
// at a neighbouring setting (double the limit, half the batches being served, or with one
// worker lingering turned on or off), then one more at the current setting; the probe's
// gain is the neighbour's served rate over the mean of the two windows around it
// (interleaving cancels the drift of a shared machine). Windows are noisy, so the gains of
// the probes of one neighbour at one load add up, weighed against the window-to-window
// noise the tuner measures as it serves: a mean gain ≥ 5% and two standard errors adopts the
// neighbour (2% and one for a bigger limit that the load keeps full: see saturatedUp). With
// a latency target, p99 decides unless both settings meet the target, on evidence too: the
// mean log p99 of the neighbour's trials and of the windows at the current settings, weighed
// against p99's measured noise (see byLatency). A declined neighbour doubles the wait before
// the next probe (up to maxBackoff windows) and turns to the next direction; a change of load
// (served rate ×2, or mean batch or requests in the server ×1.5, for two windows) or the
// current settings going over the target (their windows' mean p99, by a standard error)
// resets the wait. So
// a steady load settles on one setting and probes rarely, and a change of load is followed
// within a few windows. What the probes leave at a load level is remembered: when the load
// comes back to it, its settings return at once.
type tuner struct {
	name    string
	log     *slog.Logger
	b       *Batcher
	curve   *curve
	source  string // "measured" or "cache"
	target  time.Duration
	workers int
	auto    struct{ batch, delay, threads bool }
	// pool's workers run with the tuner's intra-op threads (nil: the tuner leaves them).
	pool    *WorkerPool
	threads int // the intra-op threads per worker now
	maxCap  int
	start   int // the limit the curve chose: the prior at a load level not seen before
	// cpu reads the machine's CPU times (cpustat.Read; tests replace it).
	cpu func() (cpustat.Times, bool)

	lat      [1024]atomic.Int64 // recent request latencies (ns), a ring
	next     atomic.Uint64
	inServer atomic.Int64 // requests between arrival and answer, sampled every tick: the load

	mu       sync.Mutex
	limit    int
	delay    time.Duration
	changes  int
	probes   int
	overruns int // probes ended early: the requests in the server piled up (see overrun)
	lastP99  time.Duration
	history  []autoChange // the latest changes, oldest first
	stop     chan struct{}

	// The probe state.
	phase   int // steady, probing (a window at cand), returning (a window back at limit)
	cand    int
	candDly time.Duration // the delay of the probe
	candThr int           // the intra-op threads of the probe
	before  window        // the window at limit just before the probe
	trial   window        // the window at cand
	wait    int           // windows until the next probe
	backoff int           // the wait after a probe that did not pay, in windows
	dir     int           // the next probe's direction: up, down or linger
	linger  bool          // with one worker: batches wait to fill (the delay follows the arrival rate)
	settled window        // the load windows are compared with, to notice a change
	shifts  int           // windows in a row away from settled
	again   bool          // the next probe repeats cand (a first win on latency, or undecided)
	// The evidence of the probes at the current settings and load, per neighbour; the p99
	// of the windows at the current settings (with a target); and the served rate's and
	// p99's noise from window to window.
	evidence     map[probeKey]evidence
	here         latency
	rateNoise    logNoise
	latNoise     logNoise
	meanLatNoise logNoise
	prev         window // the last steady window, at the current settings (rate 0: none)
	wasOver      bool   // the current settings were over the target at the last window
	paused       bool   // the last window had too little load to judge
	resumed      bool   // the load is back after a pause: the next window decides at once
	started      bool   // a window has been judged (the first load is a new one, see newLevel)
	// levels remembers, per load level, the settings the probes left there and their
	// backoff: a load seen before gets its settings back at once instead of probing again.
	levels map[int]levelMemory
	// What clear losses (see clearLoss) taught about the model at any load, kept across load
	// levels: the thread counts that lost (until one wins a probe), and per intra-op threads
	// the smallest bigger limit that lost under a load that kept it full.
	threadsLost map[int]bool
	upLost      map[int]int
}

type probeKey struct {
	limit   int
	linger  bool
	threads int
}

type evidence struct {
	n      int
	sum    float64 // of the probes' log gains (the trial's rate over the two windows' around it)
	sq     float64 // of their squares
	lat    float64 // of log(p99 / target) of the trials (with a target)
	closer float64 // of log(the trial's p99 over the two windows' around it)
	slower float64 // of log(the trial's mean latency over the two windows' around it)
}

// add counts one probe; old evidence fades.
func (e *evidence) add(r, lat, closer, slower float64) {
	e.n++
	e.sum, e.sq, e.lat, e.closer, e.slower = e.sum+r, e.sq+r*r, e.lat+lat, e.closer+closer, e.slower+slower
	if e.n > 2*maxEvidence {
		e.n, e.sum, e.sq, e.lat, e.closer, e.slower = e.n/2, e.sum/2, e.sq/2, e.lat/2, e.closer/2, e.slower/2
	}
}

// latency is the p99 of the latest windows at the current settings against the target:
// log(p99 / target) of each of the last latencyWindows, so that a change of p99 at the same
// load shows within a few windows.
type latency struct {
	xs      [latencyWindows]float64
	n, next int
}

const latencyWindows = 8

func (l *latency) add(x float64) {
	l.xs[l.next] = x
	l.next = (l.next + 1) % latencyWindows
	l.n = min(l.n+1, latencyWindows)
}

func (l latency) mean() float64 {
	var sum float64
	for _, x := range l.xs[:l.n] {
		sum += x
	}
	return sum / float64(max(l.n, 1))
}

// logNoise is a quantity's noise from one window to the next: an EWMA of the squared log
// ratios of two windows at the same settings.
type logNoise struct {
	v float64
	n int
}

func (s *logNoise) add(a, b float64) {
	if a <= 0 || b <= 0 {
		return
	}
	d := math.Log(b / a)
	s.v += (d*d - s.v) * noiseWeight
	s.n++
}

// window is one window's standard deviation (half the variance of the difference of two),
// within [lo, hi]; def until it has four samples. The EWMA starts from 0: divided by its
// weight so far, it is not biased low while it has few samples (after 4 it holds 41% of the
// variance).
func (s *logNoise) window(def, lo, hi float64) float64 {
	if s.n < 4 {
		return def
	}
	v := s.v / (1 - math.Pow(1-noiseWeight, float64(s.n)))
	return min(hi, max(lo, math.Sqrt(v/2)))
}

// levelMemory is what the tuner learned at one load level: the settings the probes left
// there, their backoff, and the probes' evidence against those settings (at: the settings it
// was gathered at). A load back at the level and at the same settings takes the evidence back
// with them: a load that passes through another level on its way (a clients' ramp) would
// otherwise drop the evidence of declined probes, and repeat their trials from scratch.
type levelMemory struct {
	limit    int
	linger   bool
	backoff  int
	at       probeKey
	evidence map[probeKey]evidence
}

// The probe directions, tried in turn after a probe that did not pay.
const (
	dirThreads = iota // the workers' intra-op threads toggled: cores / workers, or one (see tunesThreads)
	dirUp
	dirDown
	dirLinger // the delay toggled: lingering for a full batch, or not
	dirs
)

const (
	phaseSteady = iota
	phaseProbing
	phaseReturning

	// lingerProbes is the fewest probes that turn lingering on. Lingering makes every request
	// of a batch wait for the batch to fill, and in a closed loop it rarely pays
	// (bench/linger-ab.sh); two lucky probes could adopt it, and the probes back off it were
	// then too noisy to decide.
	lingerProbes  = 3
	probeGain     = 1.05 // a neighbour must serve this much more to be adopted,
	saturatedGain = 1.02 // a bigger limit under a load that keeps it full this much (see saturatedUp)
	maxEvidence   = 8    // probes of one neighbour before it is declined undecided
	maxBackoff    = 32   // windows
	minWindow     = 300 * time.Millisecond
	longWindow    = 2 * time.Second // see windowLen
	historySize   = 16
	rateShift     = 2.0     // a load change: the served rate ×2 or ÷2,
	meanShift     = 1.5     // or the mean batch or the requests in the server ×1.5 or ÷1.5, two windows in a row
	voidShift     = 1.6     // a probe is void when the windows around it differ by this,
	stealGap      = 0.04    // or when the stolen shares of its windows differ by this
	minBatches    = 3       // a window with fewer batches is not judged
	minAnswered   = 10      // nor one with fewer answered requests
	noiseWeight   = 1.0 / 8 // of a new sample in the EWMA of the window noise
	probeHeadroom = 4.0     // with a target, a smaller batch is probed only if the curve says it serves this times the rate
	maxBusy       = 0.7     // without a target, a smaller batch is probed only if the workers would be busy at most this share of the time (see fits)
	reachBusy     = 0.9     // and a limit the batches reach only if they are busy at least this share of it
	// idleForThreads is the idle cores a probe of more threads needs: a forward's extra thread
	// runs on an idle core or takes it from the HTTP work and the clients. It lies between
	// what one thread left idle where one thread wins and where two win (bench/idle-cpu.sh;
	// docs/design/self-tuning.md, "Threads").
	idleForThreads = 0.6
	upCost         = 2.0 // a bigger limit is probed only if the curve's forward costs less than this times as much per request (see upMayPay)
	pileUp         = 4.0 // a trial ends early when the requests in the server pass this times the window before's,
	pileUpMin      = 8   // and this many more (see overrun)
	// clearLoss: a declined neighbour whose probes served at most this times as much (their
	// mean) lost clearly, and the loss is remembered across load levels (see lost).
	clearLoss = 0.8
	// trialStretch: a trial waits for minBatches batches up to this times its length (see due).
	trialStretch = 3
)

// shifted reports whether x moved by more than a factor tol from ref.
func shifted(x, ref, tol float64) bool { return x > tol*ref || x*tol < ref }

// window is what one measuring window saw.
type window struct {
	rate    float64       // requests dispatched per second, corrected for stolen CPU time
	steal   float64       // the share of the machine's CPU time stolen in it (see cpustat.StealShare)
	mean    float64       // mean batch
	p99     time.Duration // of the requests answered in it
	lat     time.Duration // their mean latency
	n       int           // requests answered in it
	batches int64
	load    float64 // mean requests in the server (sampled every tick)
	end     float64 // requests in the server at its last tick
	busy    float64 // the share of the window the workers spent running batches (0: not measured)
	cpu     float64 // the share of the machine's CPU time that was not idle (0: not measured)
	stopped bool    // the dispatches stopped before its end (see meter.window)
	fresh   bool    // it began after a pause at a tick with the server idle (see meter.idle)
}

// cut reports a window in which the load stopped before its end: the dispatches stopped
// (see meter.window), or the requests in the server fell to under a quarter of their mean.
// Its rate says nothing of the setting.
func (w window) cut() bool { return w.stopped || w.load >= 2 && w.end < w.load/4 }

// disturbed reports windows whose shares of stolen CPU time differ by more than stealGap.
// Their rates cannot be compared: the correction for stolen time is partial (the threads of
// a forward wait for each other, so a stolen CPU stalls both), so windows are compared only
// when the hypervisor took about as much in each.
func disturbed(ws ...window) bool {
	lo, hi := 1.0, 0.0
	for _, w := range ws {
		lo, hi = min(lo, w.steal), max(hi, w.steal)
	}
	return hi-lo > stealGap
}

// served is the window's rate as served, without the correction for stolen CPU time: the
// arrival rate, for the delays that let batches fill.
func (w window) served() float64 { return w.rate * (1 - w.steal) }

// level is a window's load level: its requests in the server in half octaves.
func (w window) level() int { return int(math.Round(2 * math.Log2(max(w.load, 1)))) }

// autoChange is one change of the automatic settings, for describe.
type autoChange struct {
	At        time.Time `json:"at"`
	BatchSize int       `json:"batchSize"`
	DelayMS   float64   `json:"maxBatchDelayMs"`
	Threads   int       `json:"threads,omitempty"`
	Reason    string    `json:"reason"`
}

// enter counts a request in; record counts it out.
func (t *tuner) enter() { t.inServer.Add(1) }

// record notes one answered request's latency; a few atomic operations.
func (t *tuner) record(d time.Duration) {
	i := t.next.Add(1) - 1
	t.lat[i%uint64(len(t.lat))].Store(int64(d))
	t.inServer.Add(-1)
}

// latencies are the p99 and the mean of the latencies recorded since from (at most the
// ring's size), and how many.
func (t *tuner) latencies(from uint64) (p99, mean time.Duration, n int) {
	to := t.next.Load()
	if to-from > uint64(len(t.lat)) {
		from = to - uint64(len(t.lat))
	}
	n = int(to - from)
	if n == 0 {
		return 0, 0, 0
	}
	v := make([]int64, 0, n)
	var sum int64
	for i := from; i < to; i++ {
		x := t.lat[i%uint64(len(t.lat))].Load()
		v = append(v, x)
		sum += x
	}
	slices.Sort(v)
	return time.Duration(v[(len(v)*99+99)/100-1]), time.Duration(sum / int64(n)), n
}

// windowLen is a window's length at the limit it measures (the probe's while probing):
// eight forwards, within bounds: at least minWindow, and at most longWindow unless four
// forwards take longer (a window is judged on three batches or more). A probe takes three
// windows and two settlings, and a burst of load of a few seconds must hold the window
// before it and its trial: with longer windows a slow model made no probe at all.
func (t *tuner) windowLen() time.Duration {
	b := t.limit
	if t.phase == phaseProbing {
		b = t.cand
	}
	f := t.forward(b)
	return max(minWindow, min(8*f, max(longWindow, 4*f)))
}

// run measures windows and adapts the settings after each until stop closes. After a
// change it lets the batches formed under the old settings finish before measuring.
func (t *tuner) run() {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	if t.cpu == nil {
		t.cpu = cpustat.Read
	}
	m := meter{t: t}
	m.begin(time.Now())
	var settleUntil time.Time
	for {
		var now time.Time
		select {
		case <-t.stop:
			return
		case now = <-tick.C:
		}
		in := t.inServer.Load()
		t.mu.Lock()
		paused := t.paused
		t.mu.Unlock()
		if paused && m.idle(in) {
			m.begin(now)
			m.fresh = true
			continue
		}
		m.tick(in)
		if now.Before(settleUntil) {
			m.begin(now)
			continue
		}
		if settle := t.overrun(in); settle > 0 {
			settleUntil = now.Add(settle)
			m.begin(now)
			continue
		}
		if !t.due(&m, now, in) {
			continue
		}
		w := m.window(now, in)
		m.begin(now)
		if settle := t.step(w); settle > 0 {
			settleUntil = now.Add(settle)
		}
	}
}

// due reports whether the window m ends at now, with in requests in the server: after
// windowLen, except that a trial whose batches take longer than the curve says waits for
// minBatches of them while the load holds, up to trialStretch times its length. Cut short it
// would be void, and tried (and paid for) again. The curve extrapolates past its largest
// measured batch, so a trial there may run much slower than the curve says.
func (t *tuner) due(m *meter, now time.Time, in int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	length, took := t.windowLen(), now.Sub(m.at)
	if took < length {
		return false
	}
	short := t.b.batches.Load()-m.batches < minBatches
	return !(t.phase == phaseProbing && in > 0 && short && took < trialStretch*length)
}

// meter measures the tuner's windows, one at a time.
//
// A window's rate is measured over whole batches, from its first dispatch to its last (the
// requests of the batches from the first to the one before the last, over that time):
// counting the requests dispatched in the window would be off by up to a batch. It is then divided by the share of the machine's CPU time
// that was not stolen (see cpustat.StealShare).
type meter struct {
	t *tuner

	at                           time.Time
	from                         uint64 // the latency ring's position at the start
	items, batches, sum, samples int64
	busy                         int64        // the batcher's busy nanoseconds at the start
	first, prior                 dispatchMark // the window's first dispatch, and the one before it began
	cpu                          cpustat.Times
	cpuOK                        bool
	fresh                        bool // begun at an idle tick after a pause
}

// idle reports a window that has seen nothing so far: no request in the server at any of
// its ticks nor at this one (in), and no dispatch. After a pause the run loop starts the
// window again at each such tick, so that the window in which the load comes back begins
// within a tick of it, and is judged: otherwise it may have begun long before the load,
// and is skipped (t.paused), which would cost a slow model's short bursts the only whole
// windows they have. A load too sparse to leave a tick without a request in the server is not idle.
func (m *meter) idle(in int64) bool {
	return in == 0 && m.sum == 0 && m.t.b.batches.Load() == m.batches
}

// begin starts a window at now.
func (m *meter) begin(now time.Time) {
	b := m.t.b
	m.at, m.from, m.items, m.batches, m.sum, m.samples = now, m.t.next.Load(), b.batchItems.Load(), b.batches.Load(), 0, 0
	m.busy = b.busy.Load()
	m.first, m.prior = dispatchMark{}, b.last()
	m.cpu, m.cpuOK = m.t.cpu()
	m.fresh = false
}

// tick samples the requests in the server, and notes the window's first dispatch.
func (m *meter) tick(in int64) {
	m.sum, m.samples = m.sum+in, m.samples+1
	if d := m.t.b.last(); m.first.at.IsZero() && d.at.After(m.prior.at) {
		m.first = d
	}
}

// window ends the window at now, with in requests in the server.
func (m *meter) window(now time.Time, in int64) window {
	b := m.t.b
	p99, lat, n := m.t.latencies(m.from)
	di, db := b.batchItems.Load()-m.items, b.batches.Load()-m.batches
	w := window{rate: float64(di) / now.Sub(m.at).Seconds(), p99: p99, lat: lat, n: n, batches: db,
		load: max(0, float64(m.sum)/float64(max(m.samples, 1))), end: float64(max(0, in)), fresh: m.fresh}
	d := b.last()
	if !m.first.at.IsZero() && d.batches-m.first.batches >= 2 && d.at.After(m.first.at) {
		w.rate = float64(d.before-m.first.before) / d.at.Sub(m.first.at).Seconds()
	}
	// The load stopped in the window when the time since its last dispatch is over a
	// quarter of it and four of its mean intervals between dispatches until then. At c=1 the
	// requests in the server cannot say so (under one on average), and one trial cut that
	// way, judged, can sink a good neighbour's evidence.
	if db > 0 && d.at.After(m.at) {
		gap, every := now.Sub(d.at), d.at.Sub(m.at)/time.Duration(db)
		w.stopped = gap > now.Sub(m.at)/4 && gap > 4*every
	}
	if db > 0 {
		w.mean = float64(di) / float64(db)
	}
	w.busy = float64(b.busy.Load()-m.busy) / float64(now.Sub(m.at)) / float64(max(1, m.t.workers))
	if c, ok := m.t.cpu(); ok && m.cpuOK {
		w.steal = cpustat.StealShare(m.cpu, c)
		w.rate /= 1 - w.steal
		if idle, ok := cpustat.IdleShare(m.cpu, c); ok {
			w.cpu = max(1-idle, 1e-6)
		}
	}
	return w
}

// step adapts the settings after one window; it returns how long to let the change settle
// (0: nothing changed).
func (t *tuner) step(w window) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.b.batchSize.Load()
	t.log.Debug("auto batching window", "model", t.name, "batch_size", old, "delay", time.Duration(t.b.maxDelay.Load()).Round(time.Microsecond), "threads", t.threads,
		"phase", t.phase, "rate", math.Round(w.rate), "steal", math.Round(w.steal*1000)/1000, "mean_batch", math.Round(w.mean*10)/10, "in_server", math.Round(w.load*10)/10, "in_server_at_end", w.end, "p99", w.p99, "busy", math.Round(w.busy*100)/100, "cpu", math.Round(w.cpu*100)/100)
	if w.batches < minBatches || w.n < minAnswered || w.cut() {
		// Too little load to judge anything (idle, or the load stopped): a probe's trial
		// under way is void and is tried again when the load is back, after a wait that
		// doubles as a declined probe's does: a load that comes in bursts shorter than a
		// probe would otherwise pay for a cut trial in every burst. A probe waiting for its window back at the current setting keeps its trial: the
		// load's next whole window decides it (if the load is the same; see phaseReturning).
		t.paused = true
		if t.phase == phaseProbing {
			t.backoff = min(maxBackoff, max(1, 2*t.backoff))
			t.phase, t.wait, t.again = phaseSteady, t.backoff, false
			t.set(t.limit, t.delay, t.threads)
			return t.settleTime(int(old))
		}
		return 0
	}
	if t.paused {
		// The load is back after a pause. A window that may have begun before it did is
		// skipped; one that began with it (see meter.idle) is judged.
		t.paused, t.resumed, t.prev = false, true, window{}
		if !w.fresh {
			return 0
		}
	}
	t.lastP99 = w.p99
	switch t.phase {
	case phaseProbing:
		t.trial = w
		t.phase = phaseReturning
		t.set(t.limit, t.delay, t.threads)
		return t.settleTime(t.cand)
	case phaseReturning:
		t.phase = phaseSteady
		if t.resumed && t.shiftedFrom(w) {
			// Back after a pause at another load: the probe is void, and the load is new.
			t.again = false
			break
		}
		if shifted(w.rate, t.before.rate, voidShift) {
			// The load changed during the probe: it says nothing; try again later.
			t.wait, t.again = max(1, t.backoff), false
			return 0
		}
		if disturbed(t.before, t.trial, w) {
			// The hypervisor took more of the CPU in one of the three windows than in
			// another: the same probe again, after a window.
			t.wait, t.again, t.prev = 1, true, window{}
			t.log.Debug("auto batching probe void: stolen CPU time", "model", t.name, "tried", t.settingOf(t.cand, t.candDly, t.candThr),
				"steal", fmt.Sprintf("%.3f/%.3f/%.3f", t.before.steal, t.trial.steal, w.steal))
			return 0
		}
		t.probes++
		t.noise(t.before, w)
		t.prev = w
		t.hear(w)
		// Windows are noisy (on a shared machine the served rate moves ±15% from one window
		// to the next, p99 more): the evidence of every probe of this neighbour at this load adds
		// up, weighed against the noise measured as the tuner serves.
		k := probeKey{t.cand, t.candDly > 0, t.candThr}
		if t.evidence == nil {
			t.evidence = map[probeKey]evidence{}
		}
		e := t.evidence[k]
		e.add(t.probeGains(t.trial, t.before, w))
		t.evidence[k] = e
		verdict, why := t.byRate(e, w)
		if t.target > 0 {
			verdict, why = t.byLatency(e, verdict, why)
		} else {
			verdict, why = t.byMeanLatency(e, verdict, why)
		}
		if verdict == "" && t.candDly > 0 && !t.linger && e.n < lingerProbes {
			verdict, why = "undecided", why+": lingering needs more probes"
		}
		if verdict == "undecided" && e.n >= maxEvidence {
			verdict = "declined"
		}
		switch verdict {
		case "":
			t.again = false
			if t.candThr != t.threads {
				// A thread count that wins somewhere is not a loser everywhere.
				delete(t.threadsLost, t.candThr)
			}
			from, fromLimit := t.setting(), t.limit
			t.limit, t.delay, t.linger = t.cand, t.candDly, t.candDly > 0 && t.workers == 1 && t.auto.delay
			t.threads = t.candThr
			t.backoff = 1
			t.forget()
			t.rememberAround(t.before)
			t.apply(fmt.Sprintf("probe: %s with %s than with %s", why, t.setting(), from))
			t.wait = 0
			return t.settleTime(fromLimit)
		case "undecided":
			t.again, t.wait = true, 1
		default:
			t.lost(e, w)
			t.decline()
		}
		t.remember(t.before)
		t.log.Debug("auto batching probe "+verdict, "model", t.name, "setting", t.setting(), "tried", t.settingOf(t.cand, t.candDly, t.candThr), "detail", why)
		return 0
	}
	t.hear(w)
	over := t.over()
	var settle time.Duration
	switch {
	case over && !t.wasOver:
		// The target broke: try a smaller batch at once.
		t.backoff, t.wait, t.dir = 1, 0, dirDown
	case t.resumed && t.settled.rate > 0 && !t.shiftedFrom(w):
		// Back after a pause to the load before it: go on as before.
		t.resumed = false
	case t.resumed:
		// The first whole window after a pause, at a new load: a load that starts after a
		// pause is a change without a second window to confirm it, and a slow model's probe
		// then fits in the first seconds of the load.
		t.resumed = false
		settle = t.loadChanged(w, 0)
	case t.settled.rate == 0:
		t.backoff, t.wait, t.settled = 1, min(t.wait, 1), w
		if !t.started {
			// The first load is a load not seen before too.
			t.started = true
			settle = t.newLevel(w)
		}
	case t.shiftedFrom(w):
		// The load changed, if it stays changed for two windows (one may be noise): look
		// again soon, or, at a load level seen before, take back what was learned there.
		t.prev = window{}
		if t.shifts++; t.shifts >= 2 {
			settle = t.loadChanged(w, min(t.wait, 1))
		}
	default:
		// The load as before: follow its drift slowly, and learn the noise of the rate.
		t.shifts = 0
		if t.prev.rate > 0 && !disturbed(t.prev, w) {
			t.noise(t.prev, w)
		}
		t.prev = w
		t.settled.rate += (w.rate - t.settled.rate) / 4
		t.settled.mean += (w.mean - t.settled.mean) / 4
		t.settled.load += (w.load - t.settled.load) / 4
		t.settled.cpu += (w.cpu - t.settled.cpu) / 4
	}
	t.wasOver = over
	switch {
	case t.linger && (w.mean < 2 || w.load < 0.75*float64(t.limit) && w.mean < 0.75*float64(t.limit)):
		// The load can no longer fill the batches (at worst single requests wait their
		// whole delay for nobody): stop lingering; a probe may turn it on again. Both the
		// batches and the requests in the server say so: a window in which the load
		// stopped part of the way has few requests in the server on average, but the
		// batches it served were full.
		t.linger, t.delay = false, 0
		t.forget()
		t.apply(fmt.Sprintf("%.1f requests in the server, batches of %.1f: no lingering for %d", w.load, w.mean, t.limit))
	case t.linger:
		// Lingering follows the arrival rate; changes under 25% are noise.
		if d := t.lingerFor(t.limit, w.served()); math.Abs(float64(d-t.delay)) > 0.25*float64(max(d, t.delay)) {
			t.delay = d
			t.set(t.limit, t.delay, t.threads)
		}
	case t.auto.delay && t.workers > 1:
		// With several workers: the time the queue takes to fill a batch at the arrival
		// rate, at most a forward shared among the workers; changes under 25% are noise.
		d := time.Duration(0)
		if w.rate > 0 {
			d = min(time.Duration(float64(t.limit)/w.served()*float64(time.Second)), t.forward(t.limit)/time.Duration(t.workers))
		}
		if diff := math.Abs(float64(d - t.delay)); diff > 0.25*float64(max(d, t.delay)) {
			t.delay = d
			t.apply(fmt.Sprintf("arrival rate %.0f/s", w.served()))
		}
	}
	if !t.auto.batch && !(t.auto.delay && t.workers == 1) || settle > 0 {
		return settle
	}
	if t.shifts > 0 {
		// The load may have changed (one window away from the settled one): no probe until
		// the next window says whether it did. A probe begun here would be judged with the
		// evidence of the load before and remembered at the new one's level.
		return 0
	}
	if t.wait > 0 {
		t.wait--
		return 0
	}
	if t.again {
		// The same candidate again.
		t.before, t.phase = w, phaseProbing
		t.set(t.cand, t.candDly, t.candThr)
		return t.settleTime(int(old))
	}
	// A probe, if the load makes the setting matter: batches near the limit for a bigger
	// one, batches of two or more for a smaller one (half the batches served, which may be
	// smaller than the limit), and, with one worker, batches of two or more that do not fill
	// the limit for lingering (or no longer lingering): waiting for a full batch costs
	// latency but can serve more when the forward has a fixed cost.
	for k := range dirs {
		d := (t.dir + k) % dirs
		cand, dly, thr, ok := t.limit, t.delay, t.threads, false
		switch d {
		case dirThreads:
			// The same batching with one intra-op thread per worker, or back to cores /
			// workers. Which serves more depends on the model and on what else needs the
			// cores (a small model may serve twice as much on one thread, a large one half
			// as much: docs/design/self-tuning.md). The windows decide, like any neighbour's. The choice
			// is the model's, not a load level's: it is not remembered per level.
			thr = t.otherThreads()
			// More threads only where the machine had idle cores (see idleForThreads): a
			// forward's extra threads run on idle cores or take them from the HTTP work and
			// the clients, which a closed loop needs as much.
			ok = t.tunesThreads() && (thr < t.threads || t.idleCores(w) >= idleForThreads)
		case dirUp:
			cand = min(t.maxCap, 2*t.limit)
			// Over a target too: batches near the limit mean a queue, and a bigger batch
			// may serve it sooner; p99's evidence decides.
			ok = t.auto.batch && cand > t.limit && w.mean >= 0.75*float64(t.limit) && t.upMayPay(cand)
		case dirDown:
			cand = max(1, min(t.limit, int(math.Round(w.mean)))/2)
			// With a target that the current setting meets, not a batch that may not keep
			// up with the arrivals: in an open loop its trial builds a queue that outlasts
			// it (see keepsUp).
			ok = t.auto.batch && cand < t.limit && w.mean >= 2 && (t.target <= 0 && t.fits(cand, w) || t.target > 0 && (over || t.keepsUp(cand, w.served())))
			// Or, without a target and with the workers busy nearly all the time, a limit
			// the batches reach: the power of two that holds the mean batch, where the
			// limit is at least twice that. In a closed loop it splits the clients' bursts
			// into batches that alternate with their HTTP work, where half the mean batch
			// does not fit. Not where the workers idle part of the time: the load does not
			// wait for them there, and a limit near the mean batch only cuts the bursts of
			// an open loop, raising p99. It takes turns with half the mean batch, the one
			// with fewer probes at this load first.
			if reach, rok := t.reach(w); rok {
				lingers := t.linger || t.delay > 0
				if !ok || t.evidence[probeKey{reach, lingers, t.threads}].n < t.evidence[probeKey{cand, lingers, t.threads}].n {
					cand, ok = reach, true
				}
			}
		case dirLinger:
			// Lingering waits for a batch of the requests in the server (rounded to a
			// power of two), not for a limit that the load does not fill; it matters only
			// where the batches do not fill the limit without it. Batches that linger fill
			// it by design, so lingering is always probed off: a lingering adopted on a
			// lucky probe would otherwise never be probed again.
			dly = 0
			if !t.linger {
				cand = min(t.limit, 1<<int(math.Round(math.Log2(max(w.load, w.mean, 1)))))
				dly = t.lingerFor(cand, w.served())
			}
			ok = t.auto.delay && t.workers == 1 && w.mean >= 2 && (t.linger || w.mean < 0.9*float64(t.limit)) && dly != t.delay &&
				(cand >= t.limit || t.target <= 0 && t.fits(cand, w) || t.target > 0 && (over || t.keepsUp(cand, w.served())))
		}
		if !ok {
			continue
		}
		if t.linger && d != dirLinger {
			dly = t.lingerFor(cand, w.served())
		}
		t.dir, t.cand, t.candDly, t.candThr = d, cand, dly, thr
		t.before, t.phase = w, phaseProbing
		t.set(t.cand, t.candDly, t.candThr)
		return t.settleTime(int(old))
	}
	t.wait = t.backoff
	return 0
}

// decline ends a probe that did not pay: the wait before the next doubles, and the next
// probe turns to the next direction.
func (t *tuner) decline() {
	t.again = false
	t.backoff = min(maxBackoff, max(1, 2*t.backoff))
	t.wait = t.backoff
	t.dir = (t.dir + 1) % dirs
}

// lost notes a clear loss (see clearLoss) of the neighbour just declined, on its evidence e
// with after the window back, where the loss says something of the model at any load:
//   - Another thread count. It is not probed first at the next load not seen before (see
//     loadChanged), only in its turn: a thread count that loses clearly at one load tends
//     to lose at every load, and a trial first at each new load costs a short burst much
//     of its rate.
//   - A bigger limit under a load that kept it full (see saturatedUp): its forward costs
//     more per request than the curve says (the curve extrapolates past its largest measured
//     batch), and that does not depend on the load. It is not probed again at any load (see
//     upMayPay).
func (t *tuner) lost(e evidence, after window) {
	if e.n == 0 || e.sum/float64(e.n) > math.Log(clearLoss) {
		return
	}
	switch {
	case t.candThr != t.threads:
		if t.threadsLost == nil {
			t.threadsLost = map[int]bool{}
		}
		t.threadsLost[t.candThr] = true
	case t.cand > t.limit && t.saturatedUp(after):
		if t.upLost == nil {
			t.upLost = map[int]int{}
		}
		if c, ok := t.upLost[t.threads]; !ok || t.cand < c {
			t.upLost[t.threads] = t.cand
		}
	default:
		return
	}
	t.log.Debug("auto batching clear loss remembered", "model", t.name, "setting", t.setting(), "tried", t.settingOf(t.cand, t.candDly, t.candThr),
		"gain", fmt.Sprintf("%+.1f%%", 100*(math.Exp(e.sum/float64(e.n))-1)))
}

// overrun ends a probe's trial early, declined, when the requests in the server pile up
// during it (past pileUp times those of the window before, or of a batch of the candidate,
// and pileUpMin more): the candidate does not keep up with the arrivals. That happens only
// in an open loop: in a closed loop the requests in the server cannot outnumber the clients,
// whom the window before held. Left to the end of its window, such a trial builds a queue
// that outlasts it and lands in the tail of every request behind it. Called on every tick of a window; it returns how
// long to let the change back settle (0: nothing ended).
func (t *tuner) overrun(in int64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != phaseProbing || float64(in) <= pileUp*max(t.before.load, float64(t.cand))+pileUpMin {
		return 0
	}
	t.probes++
	t.overruns++
	t.phase = phaseSteady
	t.set(t.limit, t.delay, t.threads)
	t.decline()
	t.remember(t.before)
	t.log.Debug("auto batching probe declined: requests piled up", "model", t.name, "setting", t.setting(), "tried", t.settingOf(t.cand, t.candDly, t.candThr),
		"in_server", in, "before", math.Round(t.before.load*10)/10)
	return t.settleTime(t.cand)
}

// keepsUp reports whether batches of b keep up with rate requests/s with room to spare: the
// curve's items/s at b, over the workers, at least probeHeadroom times the rate. The curve
// times the forward alone; a request costs more, and a p99 within a target needs the worker
// idle much of the time (docs/design/self-tuning.md, "Which neighbours are probed").
func (t *tuner) keepsUp(b int, rate float64) bool {
	return float64(t.workers)*float64(b)/t.forward(b).Seconds() >= probeHeadroom*rate
}

// fits reports whether batches of b would keep the workers busy at most maxBusy of the time
// at w's load: the workers' busy share measured in w, scaled by the curve's time per request
// at b over that at w's mean batch. It calibrates the curve, which times the forward alone,
// to what a batch costs in the server. Without a target a smaller batch is probed only where it fits:
// in an open loop, a trial that cannot keep up builds a queue (and cannot serve more than
// the arrivals anyway); in a closed loop the load is the clients, and a smaller batch that
// fits may serve them sooner. Batches that cost no more per request than those served now
// always fit, however busy the workers are: lingering for a batch bigger than the mean one
// is how a busy worker gets out of small batches.
// Windows with no measured busy time (tests) fit.
func (t *tuner) fits(b int, w window) bool {
	if w.busy <= 0 || w.mean <= 0 {
		return true
	}
	more := t.perRequest(b) / t.perRequest(int(math.Round(w.mean)))
	return more <= 1 || w.busy*more <= maxBusy
}

// idleCores is how many of the cores were idle, on average, in w and in the settled load
// (the EWMA of the steady windows at the current settings), whichever had fewer: one
// window's idle time is noisy. All of them where nothing was measured.
func (t *tuner) idleCores(w window) float64 {
	busy := max(w.cpu, t.settled.cpu)
	if busy <= 0 {
		return float64(cores())
	}
	return (1 - busy) * float64(cores())
}

// upMayPay reports whether the curve leaves a bigger limit cand a chance: its forward costs
// less than upCost times as much per request as the limit's. Past a cliff of the forward a
// bigger batch cannot win back on per-batch costs what it loses in the forward, and its
// trial is a window of much less served.
//
// Nor past a bigger limit that lost clearly under a load that kept it full (see lost).
func (t *tuner) upMayPay(cand int) bool {
	if c, ok := t.upLost[t.threads]; ok && cand >= c {
		return false
	}
	return t.perRequest(cand) < upCost*t.perRequest(t.limit)
}

// perRequest is the curve's forward time per request in a batch of b, in seconds.
func (t *tuner) perRequest(b int) float64 {
	b = max(1, b)
	return t.forward(b).Seconds() / float64(b)
}

// saturatedUp reports a probe of a bigger limit under a load that keeps it full: the
// requests in the server, in the windows before and after the trial, hold a batch of the
// candidate besides the one in flight at the current limit. There a bigger batch adds no
// wait (its requests are queued anyway), and it spreads the per-batch costs (the forward's
// fixed part, dispatch, waking the requests) over more requests; in a closed loop the
// latency is the clients over the served rate, so it falls as the rate rises. So it needs
// less evidence than other probes: a mean gain of 2% and one standard error adopts it, and
// one standard error under 2% declines it (a neighbour about as good is not probed on and
// on). A worse neighbour is still declined, and a change back down needs the full evidence,
// so the two thresholds cannot alternate.
func (t *tuner) saturatedUp(after window) bool {
	need := float64(t.cand + t.limit)
	return t.cand > t.limit && t.target <= 0 && t.before.load >= need && after.load >= need
}

// shiftedFrom reports whether w's load differs from the settled one: served rate ×2, or
// mean batch or requests in the server ×1.5.
func (t *tuner) shiftedFrom(w window) bool {
	return shifted(w.rate, t.settled.rate, rateShift) || shifted(w.mean, t.settled.mean, meanShift) || shifted(w.load, t.settled.load, meanShift)
}

// loadChanged starts over at a new load w: the evidence is dropped, the next probe comes
// after wait windows, and at a load level seen before its settings come back (and its
// backoff). It returns the time to let a change of settings settle.
func (t *tuner) loadChanged(w window, wait int) time.Duration {
	t.forget()
	t.backoff, t.wait, t.settled, t.shifts = 1, wait, w, 0
	if t.tunesThreads() {
		// The threads were chosen at another load, and what a second thread is worth
		// depends on it: the first probe here is the other thread count, since a count
		// chosen where the two are about even may serve a heavier load at half the rate
		// while the batch's probes take their turns. Unless the other count lost clearly at
		// a load before (see lost): then it takes its turn after the batch's.
		t.dir = dirThreads
		if t.threadsLost[t.otherThreads()] {
			t.dir = dirUp
		}
	}
	from := t.limit
	m, ok := t.levels[w.level()]
	if !ok {
		return t.newLevel(w)
	}
	t.backoff, t.wait = m.backoff, m.backoff
	same := m.limit == t.limit && m.linger == t.linger
	t.limit, t.linger = m.limit, m.linger
	t.recall(m)
	if same {
		return 0
	}
	if t.linger {
		t.delay = t.lingerFor(t.limit, w.served())
	} else if t.auto.delay {
		t.delay = 0
	}
	t.apply(fmt.Sprintf("load seen before (%.1f requests in the server): %s", w.load, t.setting()))
	return t.settleTime(from)
}

// newLevel sets the limit for a load not seen before, w (a window at the settings before it),
// and returns the time to let a change settle (0: none).
func (t *tuner) newLevel(w window) time.Duration {
	from := t.limit
	// A load not seen before starts, without lingering, from the largest batch of the
	// curve's (halving from its start) that it keeps full, when the probes of a lighter
	// load left a smaller limit: the curve's batch is the best of the forward alone, and
	// climbing back to it on noisy windows takes many probes. Full: the requests in the
	// server hold the batch in flight and half of the next one (twice the batch is more
	// than a closed loop shows: part of its clients are always on the way back).
	b := t.start
	for b > 1 && w.load < 1.5*float64(b) {
		b /= 2
	}
	why := fmt.Sprintf("new load (%.1f requests in the server) fills batches of %d", w.load, b)
	if b <= t.limit || t.target > 0 {
		// Or, in a busy closed loop, it starts from the limit its batches reach (see
		// reach). As a probe that limit needs many windows to win a gain about the size of
		// the window-to-window noise.
		r, ok := t.reach(w)
		if !ok {
			return 0
		}
		b = r
		why = fmt.Sprintf("new load (%.1f requests in the server, batches of %.1f, workers busy %.0f%%) reaches batches of %d", w.load, w.mean, 100*w.busy, b)
	}
	if t.auto.batch {
		t.limit, t.linger = b, false
		if t.auto.delay {
			t.delay = 0
		}
		t.apply(fmt.Sprintf("%s: %s", why, t.setting()))
		return t.settleTime(from)
	}
	return 0
}

// reach is the limit the batches reach, the power of two that holds w's mean batch, and
// whether it applies: without a target, with batches of two or more, the workers busy at
// least reachBusy of the time and the limit at least twice it, and if it fits (see fits).
// In a closed loop such a limit splits the clients' bursts into batches that alternate with
// their HTTP work (docs/design/self-tuning.md, "Load levels"). In an open loop the workers idle part of the time, and the limit only cuts bursts.
func (t *tuner) reach(w window) (int, bool) {
	r := 1 << int(math.Ceil(math.Log2(max(w.mean, 1))))
	return r, t.auto.batch && t.target <= 0 && w.busy >= reachBusy && w.mean >= 2 && 2*r <= t.limit && t.fits(r, w)
}

// lingerFor is the delay that lets a batch of b fill at the arrival rate, at most two
// forwards of it.
func (t *tuner) lingerFor(b int, rate float64) time.Duration {
	d := 2 * t.forward(b)
	if rate > 0 {
		d = min(d, time.Duration(float64(b)/rate*float64(time.Second)))
	}
	return max(d, 50*time.Microsecond)
}

// remember notes the settings, backoff and evidence at the load level of w.
func (t *tuner) remember(w window) {
	if t.levels == nil {
		t.levels = map[int]levelMemory{}
	}
	m := levelMemory{limit: t.limit, linger: t.linger, backoff: t.backoff, at: t.settingKey()}
	if len(t.evidence) > 0 {
		m.evidence = maps.Clone(t.evidence)
	}
	t.levels[w.level()] = m
}

// settingKey is the key of the current settings, as a probe's of them would be.
func (t *tuner) settingKey() probeKey { return probeKey{t.limit, t.linger, t.threads} }

// recall takes back the evidence a level remembers, if it was gathered at the current
// settings.
func (t *tuner) recall(m levelMemory) {
	if m.evidence != nil && m.at == t.settingKey() {
		t.evidence = maps.Clone(m.evidence)
	}
}

// rememberAround notes an adopted setting at the load level of w, and at the levels on either
// side that remember something. In a closed loop the setting itself moves the requests in
// the server (lingering holds them), often by a half octave, and a neighbouring level's
// memory from before the change would take it back at the next wobble across their
// boundary, and the probes would adopt the change again. A neighbouring level that remembers nothing stays a load not seen before (see loadChanged).
func (t *tuner) rememberAround(w window) {
	t.remember(w)
	for _, d := range []int{-1, 1} {
		if _, ok := t.levels[w.level()+d]; ok {
			t.levels[w.level()+d] = t.levels[w.level()]
		}
	}
}

func (t *tuner) setting() string { return t.settingOf(t.limit, t.delay, t.threads) }

// settingOf names a setting, with its threads when the tuner sets them.
func (t *tuner) settingOf(limit int, delay time.Duration, threads int) string {
	if !t.tunesThreads() {
		return settingName(limit, delay)
	}
	unit := "threads"
	if threads == 1 {
		unit = "thread"
	}
	return fmt.Sprintf("%s, %d %s", settingName(limit, delay), threads, unit)
}

// set puts the batcher, and the workers' intra-op threads when the tuner sets them, to a
// setting. A worker takes new threads before its next batch (see WorkerPool.run).
func (t *tuner) set(limit int, delay time.Duration, threads int) {
	t.b.SetBatching(limit, delay)
	if t.tunesThreads() && threads > 0 {
		t.pool.threads.Store(int64(threads))
	}
}

// baseThreads is the workers' intra-op threads when nothing tunes them: cores / workers.
func (t *tuner) baseThreads() int { return autoThreads(t.workers) }

// otherThreads is the thread count a probe of threads tries: one, or back to baseThreads.
func (t *tuner) otherThreads() int {
	if t.threads != 1 {
		return 1
	}
	return t.baseThreads()
}

// tunesThreads reports whether the tuner sets the workers' intra-op threads: the model's
// threads are not set (no threads setting, in the archive, the server's config or the
// register call), the tuner has the pool, and cores / workers is more than one.
func (t *tuner) tunesThreads() bool {
	return t.auto.threads && t.pool != nil && t.baseThreads() > 1
}

// forward is the curve's forward time at b at the workers' intra-op threads. The curve was
// measured at its own threads; fewer threads are taken to slow the forward in proportion,
// the most they can, so that what it bounds (windows, settling, lingering) errs long.
func (t *tuner) forward(b int) time.Duration {
	d := t.curve.forward(b)
	if t.threads > 0 && t.curve.Threads > t.threads {
		d = d * time.Duration(t.curve.Threads) / time.Duration(t.threads)
	}
	return d
}

func settingName(limit int, delay time.Duration) string {
	if delay > 0 {
		return fmt.Sprintf("batch %d, linger %v", limit, delay.Round(10*time.Microsecond))
	}
	return fmt.Sprintf("batch %d", limit)
}

// probeGains are one probe's logs: the trial's served rate over the mean of the two windows
// around it at the current settings; with a target, the trial's p99 over the target, and over
// the geometric mean of the two windows' p99.
func (t *tuner) probeGains(trial, before, after window) (r, lat, closer, slower float64) {
	r = -1
	if base := (before.rate + after.rate) / 2; base > 0 && trial.rate > 0 {
		r = math.Log(trial.rate / base)
	}
	if trial.lat > 0 && before.lat > 0 && after.lat > 0 {
		slower = math.Log(float64(trial.lat) / math.Sqrt(float64(before.lat)*float64(after.lat)))
	}
	if t.target > 0 && trial.p99 > 0 && before.p99 > 0 && after.p99 > 0 {
		lat = math.Log(float64(trial.p99) / float64(t.target))
		closer = math.Log(float64(trial.p99) / math.Sqrt(float64(before.p99)*float64(after.p99)))
	}
	return r, lat, closer, slower
}

// byRate decides a probe on the served rate: the neighbour is adopted ("") when its mean gain
// is ≥ 5% and twice its standard error (2% and once for a bigger limit that the load keeps
// full: see saturatedUp), "declined" when it is clearly under that, and otherwise
// "undecided" (probed again after one window, up to maxEvidence probes). The standard error
// is that of the windows' measured noise, or of the probes' own spread where that is wider:
// the noise is measured between neighbouring windows, which move together on a shared
// machine, and probes minutes apart differ by more: two probes of +22.7% and -6.7% are not
// the evidence their windows' noise alone would make them.
func (t *tuner) byRate(e evidence, after window) (verdict, why string) {
	n := float64(e.n)
	mean, sd := e.sum/n, t.sigma()
	if e.n >= 2 {
		sd = max(sd, math.Sqrt(max(e.sq-e.sum*e.sum/n, 0)/(n-1)))
	}
	se := sd / math.Sqrt(n)
	gain, z := math.Log(probeGain), 2.0
	if t.saturatedUp(after) {
		gain, z = math.Log(saturatedGain), 1
	}
	why = fmt.Sprintf("%.0f/s vs %.0f/s (mean gain %+.1f%% ± %.1f%% over %d probes)",
		t.trial.rate, (t.before.rate+after.rate)/2, 100*math.Expm1(mean), 100*z*se, e.n)
	switch {
	case e.n >= 2 && mean >= max(gain, z*se):
		return "", why
	case mean+z*se < gain:
		return "declined", why
	}
	return "undecided", why
}

// byLatency decides a probe with a latency target, from the p99 of the neighbour's trial
// windows and of the windows at the current settings since they were set, each as a mean of
// log(p99 / target), with a standard error from p99's measured noise. A single window
// decides nothing: near the target p99 is noisy (a stolen second doubles one window's tail),
// and deciding on one or two windows moves a setting back and forth.
//   - The current settings meet the target (their mean): a neighbour whose mean is over it is
//     declined; one the rate would adopt is adopted only once its mean is under the target by
//     two standard errors (until then undecided: breaking the target costs more than the
//     5% the rate gains); otherwise the rate decides.
//   - They do not: a neighbour under the target by a standard error is adopted when the
//     current settings are over it by one; failing that, a neighbour whose p99 is 10% under
//     theirs (paired with the windows around each trial) by two standard errors is adopted,
//     one not 10% under by a standard error is declined.
func (t *tuner) byLatency(e evidence, rate, rateWhy string) (verdict, why string) {
	sl := t.latSigma()
	n := float64(e.n)
	cm, cse := e.lat/n, sl/math.Sqrt(n)
	hm, hse := t.here.mean(), sl/math.Sqrt(float64(max(t.here.n, 1)))
	ms := func(x float64) time.Duration {
		return time.Duration(math.Exp(x) * float64(t.target)).Round(10 * time.Microsecond)
	}
	why = fmt.Sprintf("p99 %v over %d trials vs %v over %d windows (target %v, ±%.0f%% a window)", ms(cm), e.n, ms(hm), t.here.n, t.target, 100*sl)
	if hm <= 0 {
		switch {
		case cm > 0:
			return "declined", why
		case rate == "" && cm+2*cse > 0:
			return "undecided", rateWhy + ", " + why
		}
		if rate != "" && cm+2*cse <= 0 {
			// Both meet the target, the neighbour clearly, and the rate does not tell them
			// apart: as without a target, a clearly lower mean latency at the same rate
			// adopts it (see byMeanLatency). In an open loop the rate is the offered one,
			// and without this a setting whose trials answer several times sooner is never
			// adopted.
			if v, mwhy := t.byMeanLatency(e, rate, rateWhy); v == "" {
				return "", mwhy + ", " + why
			}
		}
		return rate, rateWhy + ", " + why
	}
	if e.n >= 2 && cm+cse <= 0 && t.here.n >= 2 && hm-hse > 0 {
		return "", why + ": into the target"
	}
	d, dse := e.closer/n, sl*math.Sqrt(1.5/n)
	why = fmt.Sprintf("%s, %+.0f%% ± %.0f%% paired", why, 100*math.Expm1(d), 200*dse)
	switch {
	case e.n >= 2 && t.here.n >= 2 && d+2*dse <= math.Log(0.9):
		return "", why + ": closer to the target"
	case d-dse > math.Log(0.9):
		return "declined", why
	}
	return "undecided", why
}

// byMeanLatency decides a probe without a target, where the aim is the lowest latency at the
// offered load. In a closed loop rate and latency agree (the requests in the server are the
// clients, and latency is clients / rate), so the rate's verdict stands. In an open loop every
// setting that keeps up serves the offered rate and only latency tells them apart. So a neighbour whose trials' mean latency is under the
// windows' around them by 10% and two standard errors is adopted, if they served no less
// (their rate not under by a standard error); one the rate declines stays undecided while
// its latency is not clearly above that (up to maxEvidence probes). One whose mean latency is
// over the windows' around it by two standard errors is declined, even where its rate shows
// the gain that would adopt it: in an open loop the rate cannot decline anything (every setting
// serves the offered rate, give or take a window's noise), and such a neighbour would stay
// undecided until the load changed. In a closed loop such a neighbour serves less too.
func (t *tuner) byMeanLatency(e evidence, rate, rateWhy string) (verdict, why string) {
	n := float64(e.n)
	d, dse := e.slower/n, t.meanLatNoise.window(0.10, 0.02, 0.5)*math.Sqrt(1.5/n)
	rm, rse := e.sum/n, t.sigma()/math.Sqrt(n)
	why = fmt.Sprintf("%s, mean latency %+.1f%% ± %.1f%%", rateWhy, 100*math.Expm1(d), 200*dse)
	switch {
	case rate == "" && d-2*dse > 0:
		// A gain of rate with the latency clearly higher: in a closed loop the two cannot
		// part (latency is clients / rate), and in an open loop the rate is the offered
		// one, and a trial that measures more caught a burst.
		return "declined", why + ": higher latency"
	case rate == "":
		return rate, why
	case e.n >= 2 && d+2*dse <= math.Log(0.9) && rm+rse >= 0:
		return "", why + ": lower latency at the same rate"
	case d-2*dse > 0 && rm < math.Log(probeGain):
		return "declined", why + ": higher latency"
	case rate == "declined" && (d-dse > math.Log(0.9) || rm+rse < 0):
		return "declined", why
	case rate == "declined":
		return "undecided", why
	}
	return rate, why
}

// hear counts a window at the current settings into their p99 (with a target).
func (t *tuner) hear(w window) {
	if t.target > 0 && w.p99 > 0 {
		t.here.add(math.Log(float64(w.p99) / float64(t.target)))
	}
}

// over reports the current settings over the target: the mean of their windows' p99 over it
// by a standard error, over two windows at least.
func (t *tuner) over() bool {
	return t.target > 0 && t.here.n >= 2 && t.here.mean()-t.latSigma()/math.Sqrt(float64(t.here.n)) > 0
}

// noise measures the window-to-window noise from two windows at the same settings.
func (t *tuner) noise(a, b window) {
	t.rateNoise.add(a.rate, b.rate)
	t.latNoise.add(float64(a.p99), float64(b.p99))
	t.meanLatNoise.add(float64(a.lat), float64(b.lat))
}

// sigma is the standard deviation of one probe's log gain: a window's noise for the trial
// and a mean of two for the base.
func (t *tuner) sigma() float64 { return t.rateNoise.window(0.10, 0.02, 0.5) * math.Sqrt(1.5) }

// latSigma is the standard deviation of one window's log p99.
func (t *tuner) latSigma() float64 { return t.latNoise.window(0.25, 0.02, 1) }

// forget drops the probes' evidence: the settings or the load changed.
func (t *tuner) forget() {
	clear(t.evidence)
	t.again, t.settled, t.prev, t.here = false, window{}, window{}, latency{}
}

// settleTime is how long batches formed under a limit of b may still be running.
func (t *tuner) settleTime(b int) time.Duration {
	return max(50*time.Millisecond, 2*t.forward(b))
}

// apply sets the batcher to the tuner's settings, counts the change and logs it.
func (t *tuner) apply(reason string) {
	t.changes++
	t.set(t.limit, t.delay, t.threads)
	thr := 0
	if t.tunesThreads() {
		thr = t.threads
	}
	t.history = append(t.history, autoChange{At: time.Now().UTC(), BatchSize: t.limit, DelayMS: float64(t.delay) / 1e6, Threads: thr, Reason: reason})
	if len(t.history) > historySize {
		t.history = t.history[len(t.history)-historySize:]
	}
	t.log.Info("auto batching", "model", t.name, "batch_size", t.limit, "max_batch_delay", t.delay.Round(time.Microsecond), "threads", t.threads,
		"p99", t.lastP99.Round(time.Microsecond), "target", t.target, "reason", reason)
}

// loadLevel is one remembered load level, for describe.
type loadLevel struct {
	InServer  float64 `json:"requestsInServer"` // the level's lower bound
	BatchSize int     `json:"batchSize"`
	Linger    bool    `json:"linger"`
	Backoff   int     `json:"probeBackoffWindows"`
}

// autoStatus is describe's view of the tuner.
type autoStatus struct {
	BatchSize       int          `json:"batchSize"`
	MaxBatchDelayMS float64      `json:"maxBatchDelayMs"`
	LatencyTargetMS float64      `json:"latencyTargetMs,omitempty"`
	LastP99MS       float64      `json:"lastP99Ms"`
	Auto            []string     `json:"auto"`
	Changes         int          `json:"changes"`
	Probes          int          `json:"probes"`
	ProbesPiledUp   int          `json:"probesEndedPiledUp"`
	MaxBatchSize    int          `json:"maxBatchSize"`
	Linger          bool         `json:"linger"`
	LoadLevels      []loadLevel  `json:"loadLevels"`
	History         []autoChange `json:"history"`
	Curve           []curvePoint `json:"curve"`
	CurveSource     string       `json:"curveSource"`
	CurveSeconds    float64      `json:"curveMeasureSeconds"`
	Workers         int          `json:"workers"`
	Threads         int          `json:"threads"` // intra-op threads per worker
}

func (t *tuner) status() *autoStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	var auto []string
	if t.auto.batch {
		auto = append(auto, "batch_size")
	}
	if t.auto.delay {
		auto = append(auto, "max_batch_delay")
	}
	if t.tunesThreads() {
		auto = append(auto, "threads")
	}
	levels := []loadLevel{}
	for l, m := range t.levels {
		levels = append(levels, loadLevel{InServer: math.Round(math.Pow(2, (float64(l)-0.5)/2)*10) / 10, BatchSize: m.limit, Linger: m.linger, Backoff: m.backoff})
	}
	slices.SortFunc(levels, func(a, b loadLevel) int { return cmp.Compare(a.InServer, b.InServer) })
	return &autoStatus{
		Linger: t.linger, LoadLevels: levels,
		BatchSize: t.limit, MaxBatchDelayMS: float64(t.delay) / 1e6, LatencyTargetMS: float64(t.target) / 1e6,
		LastP99MS: float64(t.lastP99) / 1e6, Auto: auto, Changes: t.changes, Probes: t.probes, ProbesPiledUp: t.overruns, MaxBatchSize: t.maxCap,
		History: slices.Clone(t.history), Curve: t.curve.Points, CurveSource: t.source, CurveSeconds: t.curve.Took, Workers: t.workers, Threads: t.threads,
	}
}

// setupAuto measures (or reads from the cache) the model's batching curve and fills in the
// automatic settings: s.BatchSize, s.MaxBatchDelay and s.MinWorkers. It returns the tuner
// that adapts them while serving, or nil when nothing is automatic.
func (r *Registry) setupAuto(name string, s *ModelSettings, h handlers.Handler, m torch.Model, modelPath string, warmup []*handlers.Sample) (*tuner, error) {
	if !s.AutoBatch && !s.AutoDelay && !s.AutoWorkers {
		return nil, nil
	}
	if len(warmup) == 0 {
		return nil, fmt.Errorf("model %s: auto batching needs a warm-up input (declare [[inputs]] in the archive's config)", name)
	}
	sample := warmup[0]
	n := cores()
	threads := s.Threads
	threadsUnset := s.Threads == 0
	if threads == 0 {
		threads = autoThreads(s.MinWorkers)
		if s.AutoWorkers {
			threads = n
		}
	}
	maxBatch := min(curveMaxBatch, s.JobQueueSize)
	if !s.AutoBatch {
		maxBatch = s.BatchSize
	}
	// A package runs only the batch sizes it was exported for.
	if p, ok := m.(*torch.Package); ok {
		_, hi := p.BatchRange()
		maxBatch = min(maxBatch, int(hi))
	}
	key, err := curveKey(modelPath, m.Device(), threads, sample, s.AutoWorkers)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cacheDir(r.cfg), "curves", key+".json")
	var c curve
	source := "cache"
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &c) != nil || len(c.Points) == 0 {
		source = "measured"
		mc, err := measureCurve(h, m, sample, threads, maxBatch, s.LatencyTarget)
		if err != nil {
			return nil, fmt.Errorf("model %s: measuring the batching curve: %v", name, err)
		}
		c = *mc
		if s.AutoWorkers && n > 1 {
			// One worker with every core, or a worker per core with one thread each.
			b := c.bestBatch()
			one, err := measureCurve(h, m, sample, 1, b, 0)
			if err == nil {
				c.SingleThreadMS = one.Points[len(one.Points)-1].ForwardMS
				c.Took += one.Took
			}
		}
		if err := writeFileAtomic(path, c); err != nil {
			r.log.Warn("batching curve not cached", "model", name, "err", err)
		}
	}
	t := &tuner{name: name, log: r.log, curve: &c, source: source, target: s.LatencyTarget, stop: make(chan struct{})}
	t.auto.batch, t.auto.delay, t.auto.threads = s.AutoBatch, s.AutoDelay, threadsUnset && (s.AutoBatch || s.AutoDelay)
	if s.AutoWorkers {
		s.MinWorkers, s.Threads = 1, n
		b := c.bestBatch()
		if c.SingleThreadMS > 0 {
			perCore := float64(n) * float64(b) / (c.SingleThreadMS / 1e3)
			if perCore > 1.1*float64(b)/c.forward(b).Seconds() {
				s.MinWorkers, s.Threads = n, 1
			}
		}
		if s.MaxWorkers < s.MinWorkers {
			s.MaxWorkers = s.MinWorkers
		}
	}
	t.workers = s.MinWorkers
	t.threads = s.Threads
	if t.threads == 0 {
		t.threads = autoThreads(t.workers)
	}
	if s.AutoBatch {
		s.BatchSize, t.maxCap = c.limits(s.LatencyTarget, maxBatch, t.workers)
	} else {
		t.maxCap = s.BatchSize
	}
	if s.AutoDelay {
		s.MaxBatchDelay = 0
		if t.workers > 1 {
			s.MaxBatchDelay = c.forward(s.BatchSize) / time.Duration(t.workers)
		}
	}
	t.limit, t.delay, t.start = s.BatchSize, s.MaxBatchDelay, s.BatchSize
	r.log.Info("auto batching curve", "model", name, "source", source, "threads", threads, "points", len(c.Points),
		"measure_time", time.Duration(c.Took*float64(time.Second)).Round(time.Millisecond), "batch_size", s.BatchSize,
		"max_batch_delay", s.MaxBatchDelay, "workers", s.MinWorkers, "target", s.LatencyTarget)
	return t, nil
}
