package webui

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

// The web page's live view. A sampler reads, every statsInterval, each version's Stats(),
// which the core keeps anyway: the dispatched batches and requests, the queue, and the
// request-latency histogram. It keeps statsPoints points per model version in a ring. The
// request path does no extra work for it.
//
// The sampler starts with the first /ui/api/stats request and stops by itself once nobody
// has asked for statsIdle, so a server whose page is not open pays nothing; the history
// starts when the page is first opened.

const (
	statsInterval = 2 * time.Second
	statsPoints   = 150 // 5 minutes
	statsIdle     = 10 * time.Minute
)

// uiStats is the sampler's state; the zero value is ready.
type uiStats struct {
	mu       sync.Mutex
	running  bool
	lastRead time.Time
	series   map[*core.ModelVersion]*statsSeries
}

// statsSeries is one model version's ring of points, and the counters of its last sample.
type statsSeries struct {
	name, version string
	points        [statsPoints]statsPoint
	n, next       int // points held; where the next one goes

	prev       statsCounters
	havePrev   bool
	prevSample time.Time
}

// statsPoint is one interval. Latencies are NaN without requests; batch is NaN without
// batches.
type statsPoint struct {
	at                          time.Time
	rps, p50, p99, queue, batch float64
}

// statsCounters are the cumulative counters a point is the difference of.
type statsCounters struct {
	batches, items int64
	latency        histogramCounts
}

// histogramCounts are a histogram's cumulative bucket counts; the last bucket is +Inf, so
// it is the total.
type histogramCounts struct {
	le     []float64
	counts []float64
}

// uiStatsRoute answers the live view's JSON, starting the sampler if it is not running.
func (pg *Page) uiStatsRoute(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	st := &pg.stats
	st.mu.Lock()
	st.lastRead = time.Now()
	if !st.running {
		st.running = true
		go pg.sampleStats(st)
	}
	resp := st.snapshot()
	st.mu.Unlock()
	ctx.Response.Header.Set("Cache-Control", "no-store")
	frontend.WriteJSON(ctx, 200, resp)
}

// sampleStats samples every statsInterval until nobody has read the stats for statsIdle.
func (pg *Page) sampleStats(st *uiStats) {
	tick := time.NewTicker(statsInterval)
	defer tick.Stop()
	pg.sampleOnce(st, time.Now())
	for now := range tick.C {
		st.mu.Lock()
		idle := now.Sub(st.lastRead) > statsIdle
		if idle {
			st.running = false
			st.series = nil
		}
		st.mu.Unlock()
		if idle {
			return
		}
		pg.sampleOnce(st, now)
	}
}

// sampleOnce adds a point to every registered version's series, and drops the series of
// versions that are gone.
func (pg *Page) sampleOnce(st *uiStats, now time.Time) {
	versions := pg.Registry.Loaded()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.series == nil {
		st.series = map[*core.ModelVersion]*statsSeries{}
	}
	live := map[*core.ModelVersion]bool{}
	for _, v := range versions {
		live[v] = true
		s := st.series[v]
		if s == nil {
			s = &statsSeries{name: v.Name, version: v.Version}
			st.series[v] = s
		}
		vs := v.Stats()
		c := statsCounters{batches: vs.Batches, items: vs.Items, latency: histogramCounts{le: latencyBounds, counts: make([]float64, len(vs.Latency))}}
		for i, n := range vs.Latency {
			c.latency.counts[i] = float64(n)
		}
		s.add(now, c, float64(vs.Pending))
	}
	for v := range st.series {
		if !live[v] {
			delete(st.series, v)
		}
	}
}

// latencyBounds are the latency histogram's bounds, +Inf last.
var latencyBounds = append(slices.Clone(core.LatencyBuckets), math.Inf(1))

// add appends the point between the previous counters and c. The first sample only sets
// the baseline.
func (s *statsSeries) add(now time.Time, c statsCounters, queue float64) {
	defer func() { s.prev, s.havePrev, s.prevSample = c, true, now }()
	if !s.havePrev {
		return
	}
	dt := now.Sub(s.prevSample).Seconds()
	if dt <= 0 {
		return
	}
	p := statsPoint{at: now, queue: queue, p50: math.NaN(), p99: math.NaN(), batch: math.NaN()}
	if db := c.batches - s.prev.batches; db > 0 {
		p.batch = float64(c.items-s.prev.items) / float64(db)
	}
	if n := len(c.latency.counts); n > 0 && n == len(s.prev.latency.counts) {
		delta := c.latency.minus(s.prev.latency)
		total := delta.counts[n-1]
		p.rps = total / dt
		if total > 0 {
			p.p50 = delta.quantile(0.5) * 1000
			p.p99 = delta.quantile(0.99) * 1000
		}
	}
	s.points[s.next] = p
	s.next = (s.next + 1) % statsPoints
	s.n = min(s.n+1, statsPoints)
}

func (h histogramCounts) minus(o histogramCounts) histogramCounts {
	out := histogramCounts{le: h.le, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		out.counts[i] = max(h.counts[i]-o.counts[i], 0)
	}
	return out
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile does: linearly within
// the bucket where it falls; in the +Inf bucket, the largest finite bound.
func (h histogramCounts) quantile(q float64) float64 {
	total := h.counts[len(h.counts)-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank && c > below {
			if math.IsInf(h.le[i], 1) {
				return lower
			}
			return lower + (h.le[i]-lower)*(rank-below)/(c-below)
		}
		if !math.IsInf(h.le[i], 1) {
			lower = h.le[i]
		}
		below = c
	}
	return lower
}

// statsResponse is the live view's JSON: per model version, one array per quantity, oldest
// point first; null where a point has no value.
type statsResponse struct {
	IntervalSeconds float64       `json:"intervalSeconds"`
	Points          int           `json:"points"`
	Models          []statsColumn `json:"models"`
}

type statsColumn struct {
	Name    string     `json:"name"`
	Version string     `json:"version"`
	Time    []int64    `json:"t"` // Unix ms
	RPS     []*float64 `json:"rps"`
	P50     []*float64 `json:"p50Ms"`
	P99     []*float64 `json:"p99Ms"`
	Queue   []*float64 `json:"queue"`
	Batch   []*float64 `json:"batch"`
}

// snapshot copies the series into the response; st.mu is held.
func (st *uiStats) snapshot() statsResponse {
	resp := statsResponse{IntervalSeconds: statsInterval.Seconds(), Points: statsPoints, Models: []statsColumn{}}
	for _, s := range st.series {
		c := statsColumn{Name: s.name, Version: s.version, Time: make([]int64, 0, s.n), RPS: make([]*float64, 0, s.n),
			P50: make([]*float64, 0, s.n), P99: make([]*float64, 0, s.n), Queue: make([]*float64, 0, s.n), Batch: make([]*float64, 0, s.n)}
		start := (s.next - s.n + statsPoints) % statsPoints
		for k := range s.n {
			p := s.points[(start+k)%statsPoints]
			c.Time = append(c.Time, p.at.UnixMilli())
			c.RPS = append(c.RPS, num(p.rps))
			c.P50 = append(c.P50, num(p.p50))
			c.P99 = append(c.P99, num(p.p99))
			c.Queue = append(c.Queue, num(p.queue))
			c.Batch = append(c.Batch, num(p.batch))
		}
		resp.Models = append(resp.Models, c)
	}
	sort.Slice(resp.Models, func(i, j int) bool {
		a, b := resp.Models[i], resp.Models[j]
		return a.Name < b.Name || a.Name == b.Name && a.Version < b.Version
	})
	return resp
}

// num rounds for the page, and turns NaN into null.
func num(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	r := math.Round(f*1000) / 1000
	return &r
}
