package core

import (
	"fmt"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/tuner"
)

// setupAuto measures (or reads from the cache) the model's batching curve and fills in the
// automatic settings: s.BatchSize, s.MaxBatchDelay and s.MinWorkers. It returns the tuner
// that adapts them while serving, or nil when nothing is automatic.
func (r *Registry) setupAuto(name string, s *ModelSettings, h handlers.Handler, m Model, modelPath string, warmup []*handlers.Sample) (*tuner.Tuner, error) {
	ts := tuner.Settings{
		AutoBatch: s.Auto.BatchSize, AutoDelay: s.Auto.MaxBatchDelay, AutoWorkers: s.Auto.MinWorkers,
		BatchSize: s.BatchSize, MaxBatchDelay: s.MaxBatchDelay, MinWorkers: s.MinWorkers, MaxWorkers: s.MaxWorkers,
		Threads: s.Threads, JobQueueSize: s.JobQueueSize, LatencyTarget: s.LatencyTarget,
	}
	if !ts.Auto() {
		return nil, nil
	}
	if len(warmup) == 0 {
		return nil, fmt.Errorf("model %s: auto batching needs a warm-up input (declare [[inputs]] in the archive's config)", name)
	}
	t, err := tuner.New(tunerModel(name, h, m, modelPath, warmup[0]), &ts, r.opts.CacheDir, r.log)
	if err != nil {
		return nil, err
	}
	s.BatchSize, s.MaxBatchDelay, s.MinWorkers, s.MaxWorkers, s.Threads = ts.BatchSize, ts.MaxBatchDelay, ts.MinWorkers, ts.MaxWorkers, ts.Threads
	return t, nil
}

// setupForwardBatch settles s.ForwardBatch where it is "auto": measured (or read from the
// curves' cache) at the threads each worker has when all of them run. A handler process's
// forward cannot be measured here; it runs each batch whole unless forward_batch is a number.
func (r *Registry) setupForwardBatch(name string, s *ModelSettings, h handlers.Handler, m Model, modelPath string, warmup []*handlers.Sample) error {
	if !s.Auto.ForwardBatch {
		return nil
	}
	s.Auto.ForwardBatch = false
	if _, outOfProcess := m.(ProcessReporter); outOfProcess {
		r.log.Warn("forward_batch \"auto\" measures in-process models only: the handler process runs each batch whole", "model", name)
		return nil
	}
	if len(warmup) == 0 {
		return fmt.Errorf("model %s: forward_batch \"auto\" needs a warm-up input (declare [[inputs]] in the archive's config)", name)
	}
	maxBatch := s.BatchSize
	if s.Auto.BatchSize {
		maxBatch = s.JobQueueSize // the tuner's limit may grow to the queue's bound
	}
	threads := s.Threads
	if threads == 0 {
		threads = autoThreads(s.MinWorkers)
	}
	n, err := tuner.ForwardBatch(tunerModel(name, h, m, modelPath, warmup[0]), threads, maxBatch, r.opts.CacheDir, r.log)
	if err != nil {
		return err
	}
	s.ForwardBatch = n
	return nil
}

// tunerModel is what the tuner measures: the model's own batch step, its device and the rows
// one forward takes.
func tunerModel(name string, h handlers.Handler, m Model, path string, sample *handlers.Sample) tuner.Model {
	tm := tuner.Model{Name: name, Path: path, Sample: sample, Device: m.Device(), Run: func(b []*handlers.Sample) error {
		_, err := m.Run(b, nil)
		return err
	}}
	if rl, ok := m.(RowLimited); ok {
		tm.MaxRows = rl.MaxRows()
	}
	return tm
}

// tuned is a model version as its tuner sees it (tuner.Target): the tuner sets the batching
// and the workers' threads and reads the dispatch counters, and nothing else.
type tuned struct{ v *ModelVersion }

func (t tuned) SetBatching(limit int, delay time.Duration) { t.v.batcher.SetBatching(limit, delay) }

// SetThreads sets the intra-op threads the workers run with; a worker takes them before its
// next batch (see WorkerPool.run).
func (t tuned) SetThreads(n int) { t.v.pool.threads.Store(int64(n)) }

func (t tuned) Stats() tuner.Stats {
	b := t.v.batcher
	last := b.last()
	return tuner.Stats{
		Batches: b.batches.Load(), Items: b.batchItems.Load(), Busy: time.Duration(b.busy.Load()),
		Last:      tuner.Dispatch{At: last.at, Batches: last.batches, Before: last.before},
		BatchSize: int(b.batchSize.Load()), MaxDelay: time.Duration(b.maxDelay.Load()),
	}
}
