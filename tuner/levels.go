package tuner

import (
	"fmt"
	"maps"
	"time"
)

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

// shiftedFrom reports whether w's load differs from the settled one: served rate ×2, or
// mean batch or requests in the server ×1.5.
func (t *Tuner) shiftedFrom(w window) bool {
	return shifted(w.rate, t.settled.rate, rateShift) || shifted(w.mean, t.settled.mean, meanShift) || shifted(w.load, t.settled.load, meanShift)
}

// loadChanged starts over at a new load w: the evidence is dropped, the next probe comes
// after wait windows, and at a load level seen before its settings come back (and its
// backoff). It returns the time to let a change of settings settle.
func (t *Tuner) loadChanged(w window, wait int) time.Duration {
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
func (t *Tuner) newLevel(w window) time.Duration {
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

// remember notes the settings, backoff and evidence at the load level of w.
func (t *Tuner) remember(w window) {
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
func (t *Tuner) settingKey() probeKey { return probeKey{t.limit, t.linger, t.threads} }

// recall takes back the evidence a level remembers, if it was gathered at the current
// settings.
func (t *Tuner) recall(m levelMemory) {
	if m.evidence != nil && m.at == t.settingKey() {
		t.evidence = maps.Clone(m.evidence)
	}
}

// rememberAround notes an adopted setting at the load level of w, and at the levels on either
// side that remember something. In a closed loop the setting itself moves the requests in
// the server (lingering holds them), often by a half octave, and a neighbouring level's
// memory from before the change would take it back at the next wobble across their
// boundary, and the probes would adopt the change again. A neighbouring level that remembers nothing stays a load not seen before (see loadChanged).
func (t *Tuner) rememberAround(w window) {
	t.remember(w)
	for _, d := range []int{-1, 1} {
		if _, ok := t.levels[w.level()+d]; ok {
			t.levels[w.level()+d] = t.levels[w.level()]
		}
	}
}
