package tuner

import (
	"fmt"
	"math"
	"time"
)

// step adapts the settings after one window; it returns how long to let the change settle
// (0: nothing changed).
func (t *Tuner) step(w window) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.model.Stats()
	old := now.BatchSize
	t.log.Debug("auto batching window", "model", t.name, "batch_size", old, "delay", now.MaxDelay.Round(time.Microsecond), "threads", t.threads,
		"phase", t.phase, "rate", math.Round(w.rate), "steal", math.Round(w.steal*1000)/1000, "mean_batch", math.Round(w.mean*10)/10, "in_server", math.Round(w.load*10)/10, "in_server_at_end", w.end, "p99", w.p99, "busy", math.Round(w.busy*100)/100, "cpu", math.Round(w.cpu*100)/100)
	if d, judged := t.judged(w, old); !judged {
		return d
	}
	t.lastP99 = w.p99
	switch t.phase {
	case phaseProbing:
		// The candidate's window is over: back to the setting, for the window after it.
		t.trial = w
		t.phase = phaseReturning
		t.set(t.limit, t.delay, t.threads)
		return t.settleTime(t.cand)
	case phaseReturning:
		if d, done := t.judgeProbe(w); done {
			return d
		}
	}
	settle, over := t.followLoad(w)
	t.followArrivals(w)
	if !t.auto.batch && !(t.auto.delay && t.workers == 1) || settle > 0 {
		return settle
	}
	return t.probe(w, old, over)
}

// judged handles a window with too little load to judge anything, and the first after a
// pause: it reports whether w is to be judged, and when not, how long to let a change settle.
func (t *Tuner) judged(w window, old int) (time.Duration, bool) {
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
			return t.settleTime(old), false
		}
		return 0, false
	}
	if t.paused {
		// The load is back after a pause. A window that may have begun before it did is
		// skipped; one that began with it (see meter.idle) is judged.
		t.paused, t.resumed, t.prev = false, true, window{}
		if !w.fresh {
			return 0, false
		}
	}
	return 0, true
}

// judgeProbe judges a probe by the window back at the setting that follows its trial: the
// candidate is adopted, tried again or declined. It reports false when the window is not a
// probe's to judge (the load is new after a pause), to be followed as any window.
func (t *Tuner) judgeProbe(w window) (time.Duration, bool) {
	t.phase = phaseSteady
	if t.resumed && t.shiftedFrom(w) {
		// Back after a pause at another load: the probe is void, and the load is new.
		t.again = false
		return 0, false
	}
	if shifted(w.rate, t.before.rate, voidShift) {
		// The load changed during the probe: it says nothing; try again later.
		t.wait, t.again = max(1, t.backoff), false
		return 0, true
	}
	if disturbed(t.before, t.trial, w) {
		// The hypervisor took more of the CPU in one of the three windows than in
		// another: the same probe again, after a window.
		t.wait, t.again, t.prev = 1, true, window{}
		t.log.Debug("auto batching probe void: stolen CPU time", "model", t.name, "tried", t.settingOf(t.cand, t.candDly, t.candThr),
			"steal", fmt.Sprintf("%.3f/%.3f/%.3f", t.before.steal, t.trial.steal, w.steal))
		return 0, true
	}
	t.probes++
	t.noise(t.before, w)
	t.prev = w
	t.hear(w)
	// Windows are noisy (on a shared machine the served rate moves from one window to
	// the next by more than the gains sought, p99 more): the evidence of every probe of
	// this neighbour at this load adds up, weighed against the noise measured as the
	// tuner serves.
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
		return t.settleTime(fromLimit), true
	case "undecided":
		t.again, t.wait = true, 1
	default:
		t.lost(e, w)
		t.decline()
	}
	t.remember(t.before)
	t.log.Debug("auto batching probe "+verdict, "model", t.name, "setting", t.setting(), "tried", t.settingOf(t.cand, t.candDly, t.candThr), "detail", why)
	return 0, true
}

// followLoad follows the load at the current setting: a broken target, a pause's end, a load
// that shifted or drifted. It returns how long a new level lets the setting settle, and
// whether the target is broken.
func (t *Tuner) followLoad(w window) (settle time.Duration, over bool) {
	t.hear(w)
	over = t.over()
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
	return settle, over
}

// followArrivals follows the arrival rate with the delay: lingering, or the time a queue of
// several workers takes to fill a batch.
func (t *Tuner) followArrivals(w window) {
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
}

// probe starts the next probe, where the load makes the setting matter and no wait is due:
// the same candidate again, or the next direction's; old is the batch size before it.
func (t *Tuner) probe(w window, old int, over bool) time.Duration {
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
		return t.settleTime(old)
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
		return t.settleTime(old)
	}
	t.wait = t.backoff
	return 0
}

// decline ends a probe that did not pay: the wait before the next doubles, and the next
// probe turns to the next direction.
func (t *Tuner) decline() {
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
func (t *Tuner) lost(e evidence, after window) {
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
func (t *Tuner) overrun(in int64) time.Duration {
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
