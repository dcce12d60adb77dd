package daemon

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// WorkerPool runs a model version's batched forwards on workers: goroutines locked to their
// OS threads, because LibTorch's OpenMP pool and InferenceMode belong to the calling thread.
// Workers scale up and down at run time; a worker asked to stop finishes the batch in hand.
type WorkerPool struct {
	name    string
	module  *torch.Module
	handler handlers.Handler
	batcher *Batcher
	// threads is the intra-op threads per worker; with autoThreads it follows the worker
	// count (cores / workers), and each worker applies a change before its next batch.
	threads     atomic.Int64
	autoThreads bool
	log         *slog.Logger
	metrics     *modelMetrics
	warmup      []*handlers.Sample

	mu      sync.Mutex
	workers []*worker
	nextID  int
	wg      sync.WaitGroup
}

type worker struct {
	id      int
	started time.Time
	stop    chan struct{}
	ready   chan struct{} // closed after the worker's warm-up
	exited  chan struct{} // closed when the worker has returned
	busy    atomic.Bool
}

// WorkerInfo describes a worker for the management API.
type WorkerInfo struct {
	ID        int
	StartTime time.Time
	Status    string // READY, BUSY, WARMING
}

// newWorkerPool returns a pool with no workers yet. threads 0 means cores / workers,
// following the worker count as it scales.
func newWorkerPool(name string, m *torch.Module, h handlers.Handler, b *Batcher, threads, workers int, warmup []*handlers.Sample, mm *modelMetrics, log *slog.Logger) *WorkerPool {
	p := &WorkerPool{name: name, module: m, handler: h, batcher: b, autoThreads: threads == 0, warmup: warmup, metrics: mm, log: log}
	if p.autoThreads {
		threads = autoThreads(workers)
	}
	p.threads.Store(int64(threads))
	return p
}

// autoThreads shares the cores among a model's workers, so that workers × threads ≤ cores.
func autoThreads(workers int) int { return max(runtime.NumCPU()/max(workers, 1), 1) }

// Scale sets the number of workers to n. With wait it returns once the new workers are warm
// or the stopped ones have finished their batch.
func (p *WorkerPool) Scale(n int, wait bool) {
	p.mu.Lock()
	if p.autoThreads {
		p.threads.Store(int64(autoThreads(n)))
	}
	var started, stopped []*worker
	for len(p.workers) < n {
		w := &worker{id: p.nextID, started: time.Now(), stop: make(chan struct{}), ready: make(chan struct{}), exited: make(chan struct{})}
		p.nextID++
		p.workers = append(p.workers, w)
		started = append(started, w)
		p.wg.Add(1)
		go p.run(w)
	}
	for len(p.workers) > n {
		w := p.workers[len(p.workers)-1]
		p.workers = p.workers[:len(p.workers)-1]
		close(w.stop)
		stopped = append(stopped, w)
	}
	p.metrics.setWorkers(len(p.workers))
	p.mu.Unlock()
	if wait {
		for _, w := range started {
			<-w.ready
		}
		for _, w := range stopped {
			<-w.exited
		}
	}
}

// Threads returns the intra-op threads each worker runs with.
func (p *WorkerPool) Threads() int { return int(p.threads.Load()) }

// Workers returns the live workers.
func (p *WorkerPool) Workers() []WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkerInfo, len(p.workers))
	for i, w := range p.workers {
		status := "READY"
		select {
		case <-w.ready:
			if w.busy.Load() {
				status = "BUSY"
			}
		default:
			status = "WARMING"
		}
		out[i] = WorkerInfo{ID: w.id, StartTime: w.started, Status: status}
	}
	return out
}

// Count returns the number of workers.
func (p *WorkerPool) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.workers)
}

// Stop stops every worker and waits for them.
func (p *WorkerPool) Stop() {
	p.Scale(0, false)
	p.wg.Wait()
}

func (p *WorkerPool) run(w *worker) {
	defer p.wg.Done()
	defer close(w.exited)
	// The thread is never unlocked: when the goroutine ends, the thread ends with it, and
	// so does its OpenMP pool.
	runtime.LockOSThread()
	threads := p.threads.Load()
	torch.SetNumThreads(int(threads))
	p.warm()
	close(w.ready)
	for {
		batch := p.batcher.next(w.stop)
		if batch == nil {
			return
		}
		if t := p.threads.Load(); t != threads {
			threads = t
			torch.SetNumThreads(int(threads))
		}
		w.busy.Store(true)
		p.runBatch(batch)
		w.busy.Store(false)
	}
}

// warm runs the warm-up samples so that the first request does not pay TorchScript's
// profiling runs or this thread's pool start-up. Failures are logged; the model was
// already checked at load.
func (p *WorkerPool) warm() {
	for _, s := range p.warmup {
		if _, err := handlers.Infer(p.handler, p.module, []*handlers.Sample{s}); err != nil {
			p.log.Warn("warm-up forward failed", "model", p.name, "err", err)
			return
		}
	}
}

// runBatch runs one batch. If the batch fails, it is retried request by request, so one bad
// input fails alone and never takes its neighbours with it.
func (p *WorkerPool) runBatch(batch []*job) {
	dispatched := time.Now()
	samples := make([]*handlers.Sample, len(batch))
	for i, j := range batch {
		samples[i] = j.sample
	}
	start := time.Now()
	outs, err := p.infer(samples)
	elapsed := time.Since(start)
	p.metrics.observeBatch(len(batch), elapsed)
	if err == nil {
		for i, j := range batch {
			j.finish(jobResult{out: outs[i], queued: dispatched.Sub(j.enqueued), inference: elapsed, batchSize: len(batch)})
		}
		return
	}
	if len(batch) == 1 {
		batch[0].finish(jobResult{err: err, queued: dispatched.Sub(batch[0].enqueued), inference: elapsed, batchSize: 1})
		return
	}
	p.log.Debug("batch failed; retrying its requests one by one", "model", p.name, "size", len(batch), "err", err)
	for _, j := range batch {
		start := time.Now()
		outs, err := p.infer([]*handlers.Sample{j.sample})
		r := jobResult{err: err, queued: dispatched.Sub(j.enqueued), inference: time.Since(start), batchSize: 1}
		if err == nil {
			r.out = outs[0]
		}
		j.finish(r)
	}
}

// infer calls the handler's batch step, turning a panic in Go handler code into an error so
// that a worker never dies on input.
func (p *WorkerPool) infer(samples []*handlers.Sample) (outs [][]handlers.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			p.log.Error("handler panic", "model", p.name, "panic", r)
		}
	}()
	outs, err = handlers.Infer(p.handler, p.module, samples)
	if err == nil && len(outs) != len(samples) {
		err = fmt.Errorf("handler returned %d results for %d requests", len(outs), len(samples))
	}
	return outs, err
}
