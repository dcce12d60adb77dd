package tuner

import (
	"fmt"
	"math"
	"time"
)

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

// keepsUp reports whether batches of b keep up with rate requests/s with room to spare: the
// curve's items/s at b, over the workers, at least probeHeadroom times the rate. The curve
// times the forward alone; a request costs more, and a p99 within a target needs the worker
// idle much of the time (docs/design/self-tuning.md, "Which neighbours are probed").
func (t *Tuner) keepsUp(b int, rate float64) bool {
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
func (t *Tuner) fits(b int, w window) bool {
	if w.busy <= 0 || w.mean <= 0 {
		return true
	}
	more := t.perRequest(b) / t.perRequest(int(math.Round(w.mean)))
	return more <= 1 || w.busy*more <= maxBusy
}

// idleCores is how many of the cores were idle, on average, in w and in the settled load
// (the EWMA of the steady windows at the current settings), whichever had fewer: one
// window's idle time is noisy. All of them where nothing was measured.
func (t *Tuner) idleCores(w window) float64 {
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
func (t *Tuner) upMayPay(cand int) bool {
	if c, ok := t.upLost[t.threads]; ok && cand >= c {
		return false
	}
	return t.perRequest(cand) < upCost*t.perRequest(t.limit)
}

// perRequest is the curve's forward time per request in a batch of b, in seconds.
func (t *Tuner) perRequest(b int) float64 {
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
func (t *Tuner) saturatedUp(after window) bool {
	need := float64(t.cand + t.limit)
	return t.cand > t.limit && t.target <= 0 && t.before.load >= need && after.load >= need
}

// reach is the limit the batches reach, the power of two that holds w's mean batch, and
// whether it applies: without a target, with batches of two or more, the workers busy at
// least reachBusy of the time and the limit at least twice it, and if it fits (see fits).
// In a closed loop such a limit splits the clients' bursts into batches that alternate with
// their HTTP work (docs/design/self-tuning.md, "Load levels"). In an open loop the workers idle part of the time, and the limit only cuts bursts.
func (t *Tuner) reach(w window) (int, bool) {
	r := 1 << int(math.Ceil(math.Log2(max(w.mean, 1))))
	return r, t.auto.batch && t.target <= 0 && w.busy >= reachBusy && w.mean >= 2 && 2*r <= t.limit && t.fits(r, w)
}

// lingerFor is the delay that lets a batch of b fill at the arrival rate, at most two
// forwards of it.
func (t *Tuner) lingerFor(b int, rate float64) time.Duration {
	d := 2 * t.forward(b)
	if rate > 0 {
		d = min(d, time.Duration(float64(b)/rate*float64(time.Second)))
	}
	return max(d, 50*time.Microsecond)
}

// probeGains are one probe's logs: the trial's served rate over the mean of the two windows
// around it at the current settings; with a target, the trial's p99 over the target, and over
// the geometric mean of the two windows' p99.
func (t *Tuner) probeGains(trial, before, after window) (r, lat, closer, slower float64) {
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
// machine, and probes minutes apart differ by more (docs/design/self-tuning.md, "Figures
// behind the code's comments").
func (t *Tuner) byRate(e evidence, after window) (verdict, why string) {
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
// decides nothing: near the target p99 is noisy (stolen CPU time alone can stretch one
// window's tail), and deciding on one or two windows moves a setting back and forth.
//   - The current settings meet the target (their mean): a neighbour whose mean is over it is
//     declined; one the rate would adopt is adopted only once its mean is under the target by
//     two standard errors (until then undecided: breaking the target costs more than the
//     5% the rate gains); otherwise the rate decides.
//   - They do not: a neighbour under the target by a standard error is adopted when the
//     current settings are over it by one; failing that, a neighbour whose p99 is 10% under
//     theirs (paired with the windows around each trial) by two standard errors is adopted,
//     one not 10% under by a standard error is declined.
func (t *Tuner) byLatency(e evidence, rate, rateWhy string) (verdict, why string) {
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
func (t *Tuner) byMeanLatency(e evidence, rate, rateWhy string) (verdict, why string) {
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
func (t *Tuner) hear(w window) {
	if t.target > 0 && w.p99 > 0 {
		t.here.add(math.Log(float64(w.p99) / float64(t.target)))
	}
}

// over reports the current settings over the target: the mean of their windows' p99 over it
// by a standard error, over two windows at least.
func (t *Tuner) over() bool {
	return t.target > 0 && t.here.n >= 2 && t.here.mean()-t.latSigma()/math.Sqrt(float64(t.here.n)) > 0
}

// noise measures the window-to-window noise from two windows at the same settings.
func (t *Tuner) noise(a, b window) {
	t.rateNoise.add(a.rate, b.rate)
	t.latNoise.add(float64(a.p99), float64(b.p99))
	t.meanLatNoise.add(float64(a.lat), float64(b.lat))
}

// sigma is the standard deviation of one probe's log gain: a window's noise for the trial
// and a mean of two for the base.
func (t *Tuner) sigma() float64 { return t.rateNoise.window(0.10, 0.02, 0.5) * math.Sqrt(1.5) }

// latSigma is the standard deviation of one window's log p99.
func (t *Tuner) latSigma() float64 { return t.latNoise.window(0.25, 0.02, 1) }
