package tuner

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
)

// Tuner adapts one model version's batching while it serves.
//
// It works in measuring windows of about eight forwards (see windowLen). The settings move
// only through probes: with the load busy enough for them to matter, the tuner serves one window
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
//
// Enter and Record are called on every request and take no lock; Status and SetWorkers may
// be called from any goroutine; everything else belongs to Run's goroutine.
type Tuner struct {
	name    string
	log     *slog.Logger
	model   Target // the model version tuned; set by Run
	curve   *curve
	source  string // "measured" or "cache"
	target  time.Duration
	workers int
	auto    struct{ batch, delay, threads bool }
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
	history  []Change // the latest changes, oldest first
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
	// (bench/linger-ab.sh): two lucky probes could adopt it, and the probes back off it are
	// too noisy to decide.
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

// windowLen is a window's length at the limit it measures (the probe's while probing):
// eight forwards, within bounds: at least minWindow, and at most longWindow unless four
// forwards take longer (a window is judged on three batches or more). A probe takes three
// windows and two settlings, and a burst of load of a few seconds must hold the window
// before it and its trial: longer windows leave a slow model no room for a probe.
func (t *Tuner) windowLen() time.Duration {
	b := t.limit
	if t.phase == phaseProbing {
		b = t.cand
	}
	f := t.forward(b)
	return max(minWindow, min(8*f, max(longWindow, 4*f)))
}

// Run tunes model: it measures windows and adapts the settings after each until Stop.
// After a change it lets the batches formed under the old settings finish before
// measuring. Call it once, on a goroutine of its own, once model's workers are running.
func (t *Tuner) Run(model Target) {
	t.model = model
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
func (t *Tuner) due(m *meter, now time.Time, in int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	length, took := t.windowLen(), now.Sub(m.at)
	if took < length {
		return false
	}
	short := t.model.Stats().Batches-m.batches < minBatches
	return !(t.phase == phaseProbing && in > 0 && short && took < trialStretch*length)
}

func (t *Tuner) setting() string { return t.settingOf(t.limit, t.delay, t.threads) }

// settingOf names a setting, with its threads when the tuner sets them.
func (t *Tuner) settingOf(limit int, delay time.Duration, threads int) string {
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
func (t *Tuner) set(limit int, delay time.Duration, threads int) {
	t.model.SetBatching(limit, delay)
	if t.tunesThreads() && threads > 0 {
		t.model.SetThreads(threads)
	}
}

// baseThreads is the workers' intra-op threads when nothing tunes them: cores / workers.
func (t *Tuner) baseThreads() int { return coreShare(t.workers) }

// otherThreads is the thread count a probe of threads tries: one, or back to baseThreads.
func (t *Tuner) otherThreads() int {
	if t.threads != 1 {
		return 1
	}
	return t.baseThreads()
}

// tunesThreads reports whether the tuner sets the workers' intra-op threads: the model's
// threads are not set (no threads setting, in the archive, the server's config or the
// register call), and cores / workers is more than one.
func (t *Tuner) tunesThreads() bool {
	return t.auto.threads && t.baseThreads() > 1
}

// forward is the curve's forward time at b at the workers' intra-op threads. The curve was
// measured at its own threads; fewer threads are taken to slow the forward in proportion,
// the most they can, so that what it bounds (windows, settling, lingering) errs long.
func (t *Tuner) forward(b int) time.Duration {
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

// forget drops the probes' evidence: the settings or the load changed.
func (t *Tuner) forget() {
	clear(t.evidence)
	t.again, t.settled, t.prev, t.here = false, window{}, window{}, latency{}
}

// settleTime is how long batches formed under a limit of b may still be running.
func (t *Tuner) settleTime(b int) time.Duration {
	return max(50*time.Millisecond, 2*t.forward(b))
}

// apply sets the batcher to the tuner's settings, counts the change and logs it.
func (t *Tuner) apply(reason string) {
	t.changes++
	t.set(t.limit, t.delay, t.threads)
	thr := 0
	if t.tunesThreads() {
		thr = t.threads
	}
	t.history = append(t.history, Change{At: time.Now().UTC(), BatchSize: t.limit, DelayMS: float64(t.delay) / 1e6, Threads: thr, Reason: reason})
	if len(t.history) > historySize {
		t.history = t.history[len(t.history)-historySize:]
	}
	t.log.Info("auto batching", "model", t.name, "batch_size", t.limit, "max_batch_delay", t.delay.Round(time.Microsecond), "threads", t.threads,
		"p99", t.lastP99.Round(time.Microsecond), "target", t.target, "reason", reason)
}

// Stop ends Run.
func (t *Tuner) Stop() { close(t.stop) }

// SetWorkers tells the tuner the workers were scaled to n, running threads intra-op threads
// each: the threads follow the count (cores / workers) unless they were set, and a thread
// count the tuner chose for the old count starts over from them.
func (t *Tuner) SetWorkers(n, threads int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.workers, t.threads = n, threads
}

// coreShare is each worker's share of the cores when all of workers run, at least one: the
// workers' intra-op threads when nothing sets them, as the worker pool counts them.
func coreShare(workers int) int { return max(cores()/max(workers, 1), 1) }

func cores() int { return runtime.GOMAXPROCS(0) }
