package tuner

import (
	"log/slog"
	"time"

	"github.com/torchd/torchd/handlers"
)

// Settings are a model's batching settings as the tuner reads them and, where they are
// automatic, fills them in (see New).
type Settings struct {
	// AutoBatch, AutoDelay and AutoWorkers mark BatchSize, MaxBatchDelay and the workers
	// as automatic.
	AutoBatch, AutoDelay, AutoWorkers bool
	BatchSize                         int
	MaxBatchDelay                     time.Duration
	MinWorkers, MaxWorkers            int
	Threads                           int // intra-op threads per worker; 0: not set (cores / workers, and the tuner may tune them)
	JobQueueSize                      int // the queue's bound, which bounds the batch too
	LatencyTarget                     time.Duration
}

// Auto reports whether any setting is automatic; without one there is nothing to tune.
func (s *Settings) Auto() bool { return s.AutoBatch || s.AutoDelay || s.AutoWorkers }

// Model is what the tuner measures: the model, its handler and one input.
type Model struct {
	Name string
	// Run runs one batch through the model's own batch step (any runtime's).
	Run     func(batch []*handlers.Sample) error
	Device  string           // where it runs, part of the cache key
	MaxRows int64            // the most rows one forward takes (a package's export); 0: any
	Path    string           // the serialized model file, part of the cache key
	Sample  *handlers.Sample // a warm-up input, replicated into batches
}

// New measures the model's batching curve (or reads it from the cache under cacheDir; "":
// the user's cache directory) and fills in the automatic settings of s: BatchSize,
// MaxBatchDelay, and with AutoWorkers MinWorkers, MaxWorkers and Threads. It returns the
// Tuner that adapts them while serving; Run starts it.
//
// Measuring runs forwards, so it takes the handler and the model themselves rather than a
// Target: it happens before the workers exist, and times the forward alone.
func New(m Model, s *Settings, cacheDir string, log *slog.Logger) (*Tuner, error) {
	name, sample := m.Name, m.Sample
	n := cores()
	threads := s.Threads
	threadsUnset := s.Threads == 0
	if threads == 0 {
		threads = coreShare(s.MinWorkers)
		if s.AutoWorkers {
			threads = n
		}
	}
	maxBatch := min(curveMaxBatch, s.JobQueueSize)
	if !s.AutoBatch {
		maxBatch = s.BatchSize
	}
	// A package runs only the batch sizes it was exported for.
	if m.MaxRows > 0 {
		maxBatch = min(maxBatch, int(m.MaxRows))
	}
	key, err := curveKey(m.Path, m.Device, threads, sample, s.AutoWorkers)
	if err != nil {
		return nil, err
	}
	c, source, err := cachedCurve(curvePath(cacheDir, key), name, "batching curve", log, func() (*curve, error) {
		c, err := measureCurve(m.Run, sample, threads, maxBatch, s.LatencyTarget)
		if err != nil || !s.AutoWorkers || n <= 1 {
			return c, err
		}
		// One worker with every core, or a worker per core with one thread each.
		one, err := measureCurve(m.Run, sample, 1, c.bestBatch(), 0)
		if err == nil {
			c.SingleThreadMS = one.Points[len(one.Points)-1].ForwardMS
			c.Took += one.Took
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	t := &Tuner{name: name, log: log, curve: &c, source: source, target: s.LatencyTarget, stop: make(chan struct{})}
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
		t.threads = coreShare(t.workers)
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
	log.Info("auto batching curve", "model", name, "source", source, "threads", threads, "points", len(c.Points),
		"measure_time", time.Duration(c.Took*float64(time.Second)).Round(time.Millisecond), "batch_size", s.BatchSize,
		"max_batch_delay", s.MaxBatchDelay, "workers", s.MinWorkers, "target", s.LatencyTarget)
	return t, nil
}
