package tuner

import (
	"math"
	"slices"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
)

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
// weight so far, it is not biased low while it has few samples.
func (s *logNoise) window(def, lo, hi float64) float64 {
	if s.n < 4 {
		return def
	}
	v := s.v / (1 - math.Pow(1-noiseWeight, float64(s.n)))
	return min(hi, max(lo, math.Sqrt(v/2)))
}

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

// Enter counts a request in; Record counts it out.
func (t *Tuner) Enter() { t.inServer.Add(1) }

// Record notes one answered request's latency; a few atomic operations.
func (t *Tuner) Record(d time.Duration) {
	i := t.next.Add(1) - 1
	t.lat[i%uint64(len(t.lat))].Store(int64(d))
	t.inServer.Add(-1)
}

// latencies are the p99 and the mean of the latencies recorded since from (at most the
// ring's size), and how many.
func (t *Tuner) latencies(from uint64) (p99, mean time.Duration, n int) {
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

// meter measures the tuner's windows, one at a time.
//
// A window's rate is measured over whole batches, from its first dispatch to its last (the
// requests of the batches from the first to the one before the last, over that time):
// counting the requests dispatched in the window would be off by up to a batch. It is then divided by the share of the machine's CPU time
// that was not stolen (see cpustat.StealShare).
type meter struct {
	t *Tuner

	at                           time.Time
	from                         uint64 // the latency ring's position at the start
	items, batches, sum, samples int64
	busy                         time.Duration // the workers' busy time at the start
	first, prior                 Dispatch      // the window's first dispatch, and the one before it began
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
	return in == 0 && m.sum == 0 && m.t.model.Stats().Batches == m.batches
}

// begin starts a window at now.
func (m *meter) begin(now time.Time) {
	s := m.t.model.Stats()
	m.at, m.from, m.items, m.batches, m.sum, m.samples = now, m.t.next.Load(), s.Items, s.Batches, 0, 0
	m.busy = s.Busy
	m.first, m.prior = Dispatch{}, s.Last
	m.cpu, m.cpuOK = m.t.cpu()
	m.fresh = false
}

// tick samples the requests in the server, and notes the window's first dispatch.
func (m *meter) tick(in int64) {
	m.sum, m.samples = m.sum+in, m.samples+1
	if d := m.t.model.Stats().Last; m.first.At.IsZero() && d.At.After(m.prior.At) {
		m.first = d
	}
}

// window ends the window at now, with in requests in the server.
func (m *meter) window(now time.Time, in int64) window {
	p99, lat, n := m.t.latencies(m.from)
	s := m.t.model.Stats()
	di, db := s.Items-m.items, s.Batches-m.batches
	w := window{rate: float64(di) / now.Sub(m.at).Seconds(), p99: p99, lat: lat, n: n, batches: db,
		load: max(0, float64(m.sum)/float64(max(m.samples, 1))), end: float64(max(0, in)), fresh: m.fresh}
	d := s.Last
	if !m.first.At.IsZero() && d.Batches-m.first.Batches >= 2 && d.At.After(m.first.At) {
		w.rate = float64(d.Before-m.first.Before) / d.At.Sub(m.first.At).Seconds()
	}
	// The load stopped in the window when the time since its last dispatch is over a
	// quarter of it and four of its mean intervals between dispatches until then. At c=1 the
	// requests in the server cannot say so (under one on average), and one trial cut that
	// way, judged, can sink a good neighbour's evidence.
	if db > 0 && d.At.After(m.at) {
		gap, every := now.Sub(d.At), d.At.Sub(m.at)/time.Duration(db)
		w.stopped = gap > now.Sub(m.at)/4 && gap > 4*every
	}
	if db > 0 {
		w.mean = float64(di) / float64(db)
	}
	w.busy = float64(s.Busy-m.busy) / float64(now.Sub(m.at)) / float64(max(1, m.t.workers))
	if c, ok := m.t.cpu(); ok && m.cpuOK {
		w.steal = cpustat.StealShare(m.cpu, c)
		w.rate /= 1 - w.steal
		if idle, ok := cpustat.IdleShare(m.cpu, c); ok {
			w.cpu = max(1-idle, 1e-6)
		}
	}
	return w
}
