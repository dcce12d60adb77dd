package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Self-tuning batching: batch_size, max_batch_delay and workers may be "auto".
//
// At load, torchd measures the model's forward time against batch size on its device and
// thread setting, with the warm-up input replicated (1, 2, 4, … requests), in a bounded
// number of forwards: it stops when throughput has stopped growing, when a forward alone
// would break the latency target, at max_batch, or when the measuring budget is spent. The
// curve is cached per model file, device, threads and input shape.
//
// From the curve: without a latency target the batch limit is the smallest batch within 3%
// of the best measured throughput; with one, the largest batch whose forward fits twice in
// the target (a request may wait for the batch in flight, then run in its own).
//
// While serving, batches are formed greedily: a free worker takes what is queued, up to the
// limit, so at low load a request runs alone at once (the lowest latency at the offered
// load) and under load batches grow with the queue (the highest throughput). With one worker
// the delay is 0: waiting could only add latency, since requests that arrive during a forward
// queue anyway. With several workers, an idle worker would split the arrivals into small
// batches, so the delay becomes the time the queue takes to fill the batch at the measured
// arrival rate, at most a forward's time divided by the workers. With a latency target, the
// limit follows the measured p99 each second: ×3/4 when p99 is over the target, +1/4 when it
// is under 60% of the target and batches are full; in between it holds, so a steady load
// settles instead of oscillating.

const (
	curveBudget   = 5 * time.Second // the most a curve measurement may take
	curveMaxBatch = 64
	tuneInterval  = time.Second
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

// bestBatch is the smallest batch within 3% of the best throughput.
func (c *curve) bestBatch() int {
	top := 0.0
	for _, p := range c.Points {
		top = math.Max(top, p.PerSecond)
	}
	for _, p := range c.Points {
		if p.PerSecond >= 0.97*top {
			return p.Batch
		}
	}
	return 1
}

// limitFor is the batch limit for a latency target (0: none).
func (c *curve) limitFor(target time.Duration) int {
	best := c.bestBatch()
	if target <= 0 {
		return best
	}
	limit := 1
	for _, p := range c.Points {
		if 2*time.Duration(p.ForwardMS*float64(time.Millisecond)) <= target {
			limit = p.Batch
		}
	}
	return limit
}

// measureCurve times the forward of 1, 2, 4, … copies of sample on a locked OS thread
// with the given intra-op threads.
func measureCurve(h handlers.Handler, m *torch.Module, sample *handlers.Sample, threads, maxBatch int, target time.Duration) (*curve, error) {
	c := &curve{Threads: threads}
	var err error
	onThread(threads, func() {
		start := time.Now()
		flat := 0
		for b := 1; b <= maxBatch; b *= 2 {
			batch := make([]*handlers.Sample, b)
			for i := range batch {
				batch[i] = sample
			}
			// Two forwards at the new shape for TorchScript's profiling executor (it
			// profiles one run and optimizes on the next), then the fastest of three timed
			// ones: the minimum is what the model costs; noise only ever adds to it.
			best := time.Duration(math.MaxInt64)
			for i := range 5 {
				t0 := time.Now()
				if _, err = handlers.Infer(h, m, batch); err != nil {
					return
				}
				if d := time.Since(t0); i >= 2 && d < best {
					best = d
				}
			}
			pt := curvePoint{Batch: b, ForwardMS: float64(best) / float64(time.Millisecond), PerSecond: float64(b) / best.Seconds()}
			if n := len(c.Points); n > 0 && pt.PerSecond < 1.03*c.Points[n-1].PerSecond {
				flat++
			} else {
				flat = 0
			}
			c.Points = append(c.Points, pt)
			// Stop when throughput stopped growing twice, when a forward alone breaks the
			// target, or when the next (twice as long) forwards would pass the budget.
			if flat >= 2 || (target > 0 && best > target) || time.Since(start)+10*best > curveBudget {
				break
			}
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
		torch.SetNumThreads(n)
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
type tuner struct {
	name    string
	log     *slog.Logger
	b       *Batcher
	curve   *curve
	source  string // "measured" or "cache"
	target  time.Duration
	workers int
	auto    struct{ batch, delay bool }
	maxCap  int

	lat  [1024]atomic.Int64 // recent request latencies (ns), a ring
	next atomic.Uint64

	mu      sync.Mutex
	limit   int
	delay   time.Duration
	changes int
	lastP99 time.Duration
	stop    chan struct{}
}

// record notes one answered request's latency; a few atomic operations.
func (t *tuner) record(d time.Duration) {
	i := t.next.Add(1) - 1
	t.lat[i%uint64(len(t.lat))].Store(int64(d))
}

// p99 of the latencies recorded since from (at most the ring's size), and how many.
func (t *tuner) p99(from uint64) (time.Duration, int) {
	to := t.next.Load()
	if to-from > uint64(len(t.lat)) {
		from = to - uint64(len(t.lat))
	}
	n := int(to - from)
	if n == 0 {
		return 0, 0
	}
	v := make([]int64, 0, n)
	for i := from; i < to; i++ {
		v = append(v, t.lat[i%uint64(len(t.lat))].Load())
	}
	slices.Sort(v)
	return time.Duration(v[(len(v)*99+99)/100-1]), n
}

// run adapts the limit and delay every tuneInterval until stop closes.
func (t *tuner) run() {
	tick := time.NewTicker(tuneInterval)
	defer tick.Stop()
	from := t.next.Load()
	items, batches := t.b.batchItems.Load(), t.b.batches.Load()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		p99, n := t.p99(from)
		from = t.next.Load()
		ni, nb := t.b.batchItems.Load(), t.b.batches.Load()
		dItems, dBatches := ni-items, nb-batches
		items, batches = ni, nb
		t.step(p99, n, float64(dItems)/tuneInterval.Seconds(), dItems, dBatches)
	}
}

// step is one adaptation from a window's p99 (over n requests), arrival rate and batches.
func (t *tuner) step(p99 time.Duration, n int, rate float64, items, batches int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastP99 = p99
	limit, delay, reason := t.limit, t.delay, ""
	if t.auto.batch && t.target > 0 && n >= 20 {
		mean := 0.0
		if batches > 0 {
			mean = float64(items) / float64(batches)
		}
		switch {
		case p99 > t.target && limit > 1:
			limit, reason = max(1, limit*3/4), "p99 over the target"
		case p99 < t.target*6/10 && mean >= 0.9*float64(limit) && limit < t.maxCap:
			limit, reason = min(t.maxCap, limit+max(1, limit/4)), "p99 well under the target with full batches"
		}
	}
	if t.auto.delay && t.workers > 1 {
		d := time.Duration(0)
		if rate > 0 {
			d = min(time.Duration(float64(limit)/rate*float64(time.Second)), t.curve.forward(limit)/time.Duration(t.workers))
		}
		// Hysteresis: a change under 25% is noise.
		if diff := math.Abs(float64(d - delay)); diff > 0.25*float64(max(d, delay)) {
			delay = d
			if reason == "" {
				reason = fmt.Sprintf("arrival rate %.0f/s", rate)
			}
		}
	}
	if limit == t.limit && delay == t.delay {
		return
	}
	t.limit, t.delay = limit, delay
	t.changes++
	t.b.SetBatching(limit, delay)
	t.log.Info("auto batching", "model", t.name, "batch_size", limit, "max_batch_delay", delay.Round(time.Microsecond),
		"p99", p99.Round(time.Microsecond), "target", t.target, "reason", reason)
}

// autoStatus is describe's view of the tuner.
type autoStatus struct {
	BatchSize       int          `json:"batchSize"`
	MaxBatchDelayMS float64      `json:"maxBatchDelayMs"`
	LatencyTargetMS float64      `json:"latencyTargetMs,omitempty"`
	LastP99MS       float64      `json:"lastP99Ms"`
	Auto            []string     `json:"auto"`
	Changes         int          `json:"changes"`
	Curve           []curvePoint `json:"curve"`
	CurveSource     string       `json:"curveSource"`
	CurveSeconds    float64      `json:"curveMeasureSeconds"`
	Workers         int          `json:"workers"`
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
	return &autoStatus{
		BatchSize: t.limit, MaxBatchDelayMS: float64(t.delay) / 1e6, LatencyTargetMS: float64(t.target) / 1e6,
		LastP99MS: float64(t.lastP99) / 1e6, Auto: auto, Changes: t.changes, Curve: t.curve.Points,
		CurveSource: t.source, CurveSeconds: t.curve.Took, Workers: t.workers,
	}
}

// setupAuto measures (or reads from the cache) the model's batching curve and fills in the
// automatic settings: s.BatchSize, s.MaxBatchDelay and s.MinWorkers. It returns the tuner
// that adapts them while serving, or nil when nothing is automatic.
func (r *Registry) setupAuto(name string, s *ModelSettings, h handlers.Handler, m *torch.Module, modelPath string, warmup []*handlers.Sample) (*tuner, error) {
	if !s.AutoBatch && !s.AutoDelay && !s.AutoWorkers {
		return nil, nil
	}
	if len(warmup) == 0 {
		return nil, fmt.Errorf("model %s: auto batching needs a warm-up input (declare [[inputs]] in the archive's config)", name)
	}
	sample := warmup[0]
	n := cores()
	threads := s.Threads
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
	t.auto.batch, t.auto.delay = s.AutoBatch, s.AutoDelay
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
	if s.AutoBatch {
		t.maxCap = c.limitFor(s.LatencyTarget)
		s.BatchSize = t.maxCap
	} else {
		t.maxCap = s.BatchSize
	}
	if s.AutoDelay {
		s.MaxBatchDelay = 0
		if t.workers > 1 {
			s.MaxBatchDelay = c.forward(s.BatchSize) / time.Duration(t.workers)
		}
	}
	t.limit, t.delay = s.BatchSize, s.MaxBatchDelay
	r.log.Info("auto batching curve", "model", name, "source", source, "threads", threads, "points", len(c.Points),
		"measure_time", time.Duration(c.Took*float64(time.Second)).Round(time.Millisecond), "batch_size", s.BatchSize,
		"max_batch_delay", s.MaxBatchDelay, "workers", s.MinWorkers, "target", s.LatencyTarget)
	return t, nil
}
