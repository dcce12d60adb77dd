package core

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/memtrim"
)

// WorkerPool runs a model version's batched forwards on workers: goroutines, locked to their
// OS threads for a backend whose settings belong to the calling thread (ThreadSetter:
// LibTorch's OpenMP pool and InferenceMode).
// Workers scale up and down at run time; a worker asked to stop finishes the batch in hand.
type WorkerPool struct {
	name string
	// model and version name the batches' spans.
	model, version string
	backend        Model // runs the batches; its device decides the stage
	batcher        *Batcher
	// rows is the most rows one forward runs (forward_batch): a batch of more runs as
	// several forwards in turn; 0: the whole batch. Set before the first worker starts.
	rows int
	// cores shares the machine's cores among the forwards running at each moment (every
	// model's); each forward sets its own thread count from it (nil: threads, fixed).
	cores *coreShare
	// threads is the intra-op threads set by hand, which every forward runs with. With
	// autoThreads it is the share each worker gets when all of them run (cores / workers,
	// following the worker count: base) unless the tuner lowered it to cap the share.
	threads     atomic.Int64
	base        atomic.Int64
	autoThreads bool
	log         *slog.Logger
	metrics     Observer
	stats       *versionStats // set before the first worker starts
	warmup      []*handlers.Sample
	// abandoned closes when the load that started the pool is given up (startup_timeout):
	// workers stop warming up, between two forwards, and exit.
	abandoned    chan struct{}
	abandonOnce  sync.Once
	warmForwards atomic.Int64 // warm-up forwards run, all workers together
	idleReleases atomic.Int64 // staging buffers freed by workers gone idle (idleRelease)

	// stuckAfter is how long a forward may run before its worker is declared stuck and
	// replaced (the model's response_timeout; 0: never).
	stuckAfter time.Duration
	watchStop  chan struct{}

	mu      sync.Mutex
	workers []*worker
	stuck   []*worker // abandoned in a forward; they exit when it returns
	nextID  int
	wg      sync.WaitGroup
}

// idleRelease is how long a worker waits for a batch before it frees its staging buffer (up
// to a batch of inputs: 19 MB for 32 images of 224×224) and gives the process's free memory
// back: a version idle while others serve returns what its bursts left, not only once the
// whole server is idle (the daemon's trim). The next batch allocates the buffer again.
// Atomic, in nanoseconds, so that core's tests can shorten it while other pools run.
var idleRelease atomic.Int64

func init() { idleRelease.Store(int64(30 * time.Second)) }

// releasing is set while one idle worker trims; others going idle at once skip theirs.
var releasing atomic.Bool

// releaseIdle gives the process's free memory back to the operating system: the Go heap's
// (where the staging buffer went) and the C heaps', every thread's arena top included. It
// runs on the idle worker's thread; two full collections are its cost, once per idle spell.
func releaseIdle(m Model) {
	if !releasing.CompareAndSwap(false, true) {
		return
	}
	defer releasing.Store(false)
	if t, ok := m.(MemoryTrimmer); ok {
		t.TrimMemory()
	}
	memtrim.Trim()
}

// setThreads sets the threads of the calling worker's next forward, for a model that takes
// them (LibTorch's, per OS thread; ONNX Runtime's sessions have theirs from the load).
func (p *WorkerPool) setThreads(n int) {
	if ts, ok := p.backend.(ThreadSetter); ok {
		ts.SetThreadsHere(n)
	}
}

// maxStuck bounds the threads one model may leave behind in hung forwards. Past it, stuck
// workers are no longer replaced: the model answers 503 (no worker) until one returns,
// rather than piling up threads that each hold a core.
const maxStuck = 4

type worker struct {
	id      int
	started time.Time
	stop    chan struct{}
	ready   chan struct{} // closed after the worker's warm-up
	exited  chan struct{} // closed when the worker has returned
	busy    atomic.Bool
	// batchStart is when the batch in hand started (UnixNano; 0: idle).
	batchStart atomic.Int64
	// abandoned is set when the watchdog replaced this worker; it exits after its batch.
	abandoned atomic.Bool
}

// WorkerInfo describes a worker for the management API.
type WorkerInfo struct {
	ID        int
	StartTime time.Time
	Status    string // READY, BUSY, WARMING, or STUCK (replaced; its thread is still in a forward)
}

// newWorkerPool returns a pool with no workers yet. threads 0 means the engine's share of
// cores (see coreShare), at least cores / workers, following the worker count as it scales.
func newWorkerPool(name string, m Model, b *Batcher, cores *coreShare, threads, workers int, stuckAfter time.Duration, warmup []*handlers.Sample, mm Observer, log *slog.Logger) *WorkerPool {
	p := &WorkerPool{name: name, backend: m, batcher: b, autoThreads: threads == 0, warmup: warmup, metrics: mm, log: log,
		stuckAfter: stuckAfter, watchStop: make(chan struct{}), abandoned: make(chan struct{})}
	// A forward on a GPU keeps a core busy at most: it takes no share of the cores.
	if m.Device() == "cpu" {
		p.cores = cores
	}
	if p.autoThreads {
		threads = autoThreads(workers)
	}
	p.threads.Store(int64(threads))
	p.base.Store(int64(threads))
	if stuckAfter > 0 {
		go p.watch()
	}
	return p
}

// watch is the pool's watchdog. A forward cannot be interrupted: LibTorch has no
// cancellation, and a thread cannot be killed without taking the process with it. So a
// worker whose forward runs past stuckAfter is abandoned instead: it leaves the pool, a new
// worker takes its place, and the old thread exits as soon as its forward returns. Its
// requests were already answered 504 by their own deadlines. Abandoned workers are listed
// as STUCK in describe and counted in torchd_stuck_workers.
func (p *WorkerPool) watch() {
	tick := time.NewTicker(min(max(p.stuckAfter/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.watchStop:
			return
		case now := <-tick.C:
			p.replaceStuck(now)
		}
	}
}

func (p *WorkerPool) replaceStuck(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(p.workers); i++ {
		w := p.workers[i]
		start := w.batchStart.Load()
		if start == 0 || now.Sub(time.Unix(0, start)) < p.stuckAfter {
			continue
		}
		if len(p.stuck) >= maxStuck {
			p.log.Error("worker stuck in a forward, not replaced: too many stuck workers", "model", p.name, "worker", w.id, "stuck", len(p.stuck))
			continue
		}
		w.abandoned.Store(true)
		p.workers = append(p.workers[:i], p.workers[i+1:]...)
		i--
		p.stuck = append(p.stuck, w)
		p.metrics.Stuck(len(p.stuck))
		p.log.Error("worker stuck in a forward past response_timeout; replacing it", "model", p.name, "worker", w.id,
			"running", now.Sub(time.Unix(0, start)).Round(time.Millisecond), "response_timeout", p.stuckAfter)
		p.startWorker()
	}
}

// unstick removes w from the stuck list once its forward has returned.
func (p *WorkerPool) unstick(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.stuck {
		if s == w {
			p.stuck = append(p.stuck[:i], p.stuck[i+1:]...)
			break
		}
	}
	p.metrics.Stuck(len(p.stuck))
	p.log.Warn("stuck worker's forward returned; its thread exits", "model", p.name, "worker", w.id)
}

// startWorker adds one worker; p.mu is held.
func (p *WorkerPool) startWorker() *worker {
	w := &worker{id: p.nextID, started: time.Now(), stop: make(chan struct{}), ready: make(chan struct{}), exited: make(chan struct{})}
	p.nextID++
	p.workers = append(p.workers, w)
	p.wg.Add(1)
	go p.run(w)
	return w
}

// autoThreads is each worker's share of the cores when all of a model's workers run
// (workers × threads ≤ cores): what the tuner and the batching curve count on under load.
// A forward that runs while fewer do takes more (see coreShare). The cores are GOMAXPROCS,
// which since Go 1.25 follows a container's CPU limit: a 2-CPU pod on a 64-core node gets 2,
// not 64.
func autoThreads(workers int) int { return max(cores()/max(workers, 1), 1) }

func cores() int { return runtime.GOMAXPROCS(0) }

// Scale sets the number of workers to n. With wait it returns once the new workers are warm
// or the stopped ones have finished their batch.
func (p *WorkerPool) Scale(n int, wait bool) {
	p.mu.Lock()
	if p.autoThreads {
		p.threads.Store(int64(autoThreads(n)))
		p.base.Store(int64(autoThreads(n)))
	}
	p.batcher.setWorkers(n)
	var started, stopped []*worker
	for len(p.workers) < n {
		started = append(started, p.startWorker())
	}
	for len(p.workers) > n {
		w := p.workers[len(p.workers)-1]
		p.workers = p.workers[:len(p.workers)-1]
		close(w.stop)
		stopped = append(stopped, w)
	}
	p.metrics.Workers(len(p.workers))
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

// Threads returns the intra-op threads each worker runs with when all of them run (set by
// hand, or the share that auto gives); a forward that runs alone takes more unless set.
func (p *WorkerPool) Threads() int { return int(p.threads.Load()) }

// takeThreads counts a forward that starts now in the core share and returns its threads.
func (p *WorkerPool) takeThreads() int {
	t := int(p.threads.Load())
	switch {
	case p.cores == nil:
		return t
	case !p.autoThreads:
		return p.cores.take(t, 0)
	case t < int(p.base.Load()):
		return p.cores.take(0, t)
	}
	return p.cores.take(0, 0)
}

func (p *WorkerPool) putThreads(n int) {
	if p.cores != nil {
		p.cores.put(n)
	}
}

// Workers returns the live workers, then the stuck ones.
func (p *WorkerPool) Workers() []WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkerInfo, len(p.workers), len(p.workers)+len(p.stuck))
	for _, w := range p.stuck {
		out = append(out, WorkerInfo{ID: w.id, StartTime: w.started, Status: "STUCK"})
	}
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

// Stop stops every worker and waits for them, stuck ones included: a model is not freed
// while a forward still runs on it.
func (p *WorkerPool) Stop() {
	if p.stuckAfter > 0 {
		close(p.watchStop)
	}
	p.Scale(0, false)
	p.wg.Wait()
}

// lockedWorkers says whether m's workers are locked to their OS threads: LibTorch's (its
// OpenMP pool and thread settings are the thread's), and ThreadBound models that ask. Any
// other worker stays an ordinary goroutine: waking one locked to its thread costs two thread
// switches each way, which for ONNX MNIST (a 40 µs forward, one intra-op thread) costs more
// than the forward; BERT on a two-thread pool is the reverse (docs/benchmarks.md).
func lockedWorkers(m Model) bool {
	if _, ok := m.(ThreadSetter); ok {
		return true
	}
	b, ok := m.(ThreadBound)
	return ok && b.BoundToThread()
}

func (p *WorkerPool) run(w *worker) {
	defer p.wg.Done()
	defer close(w.exited)
	if lockedWorkers(p.backend) {
		// Its thread count and pool belong to the OS thread. The thread is never unlocked:
		// when the goroutine ends, the thread ends with it, and so does its pool.
		runtime.LockOSThread()
	}
	// The worker's staging buffer, reused by every batch it runs; page-locked for a GPU model
	// (ordinary memory where there is no CUDA device).
	stage := handlers.NewStage(p.backend.Device() != "cpu", int(p.batcher.batchSize.Load()))
	defer stage.Close()
	if !p.warm(w) {
		close(w.ready)
		return
	}
	p.metrics.WorkerLoaded(w.id, time.Since(w.started))
	defer p.metrics.WorkerStopped(w.id)
	close(w.ready)
	idle := time.NewTimer(time.Duration(idleRelease.Load()))
	defer idle.Stop()
	var batch []*job // the array of the worker's batches, reused
	for {
		// The idle timer runs only while the stage, or the model's rows (rows.go), hold
		// memory: it fires once per idle spell.
		var idleC <-chan time.Time
		if stage.Held() || p.batcher.win.holdsSlab() {
			idle.Reset(time.Duration(idleRelease.Load()))
			idleC = idle.C
		}
		batch = p.batcher.nextOrIdle(w.stop, idleC, batch)
		if batch == nil {
			select {
			case <-w.stop:
				return
			default:
			}
			if idleC != nil {
				stage.Close()
				p.batcher.win.releaseIdle()
				p.idleReleases.Add(1)
				releaseIdle(p.backend)
				continue
			}
			return
		}
		// The count is set on this thread before every forward: it costs about as much as
		// a cgo call (BenchmarkSetNumThreadsHere), next to a forward's milliseconds.
		n := p.takeThreads()
		p.setThreads(n)
		w.busy.Store(true)
		w.batchStart.Store(time.Now().UnixNano())
		p.runBatch(batch, stage, &n)
		clear(batch) // the answered jobs go with their requests
		// runBatch gives the threads back itself once its forwards are done (n is 0 then).
		if n > 0 {
			p.putThreads(n)
		}
		w.batchStart.Store(0)
		w.busy.Store(false)
		if w.abandoned.Load() {
			p.unstick(w)
			return
		}
	}
}

// warm runs the warm-up samples so that the first request does not pay TorchScript's
// profiling runs or this thread's pool start-up. oneDNN builds a kernel for the thread
// count it first runs at, so with a share that varies they run at both ends of it: every
// core, and the share of all workers running. Failures are logged; the model was already
// checked at load. It returns false, between two forwards, once the worker is stopped or
// the load given up (a forward itself cannot be interrupted): the worker then exits.
func (p *WorkerPool) warm(w *worker) bool {
	counts := []int{int(p.threads.Load())}
	if p.autoThreads && p.cores != nil && p.cores.cores != counts[0] {
		counts = append(counts, p.cores.cores)
	}
	for _, n := range counts {
		p.setThreads(n)
		for i, s := range p.warmup {
			select {
			case <-p.abandoned:
				p.log.Info("warm-up stopped: the load was given up", "model", p.name, "worker", w.id, "forwards", i, "of", len(p.warmup)*len(counts))
				return false
			case <-w.stop:
				return false
			default:
			}
			p.warmForwards.Add(1)
			if _, err := p.backend.Run([]*handlers.Sample{s}, nil); err != nil {
				p.log.Warn("warm-up forward failed", "model", p.name, "err", err)
				return true
			}
		}
	}
	return true
}

// abandon gives up the load that started the pool: workers still warming up stop at their
// next forward and exit instead of serving.
func (p *WorkerPool) abandon() {
	p.abandonOnce.Do(func() { close(p.abandoned) })
}

// wholeBatchLost is a backend's error for a batch lost as a whole, not refused by its
// handler: a handler process that crashed or passed its timeout. Retrying its requests one
// by one would run the culprit again, costing another process or another timeout, so each
// request gets the batch's error.
type wholeBatchLost interface{ WholeBatchLost() bool }

// runBatch runs one batch. If the batch fails, it is retried request by request, so one bad
// input fails alone and never takes its neighbours with it (a batch lost as a whole is not:
// wholeBatchLost).
// threads is the forwards' intra-op thread count, taken from the core share, which infer
// may take again between forwards.
func (p *WorkerPool) runBatch(batch []*job, stage *handlers.Stage, threads *int) {
	dispatched := time.Now()
	// The batch stops counting as running before its first answer goes: a client answered
	// and asking again must find its model alone (Batcher.alone), not this batch.
	counted := true
	defer func() {
		if counted {
			p.batcher.done()
		}
		p.batcher.busy.Add(int64(time.Since(dispatched)))
	}()
	if batch = p.explainAll(batch); len(batch) == 0 {
		return
	}
	bt := p.traceBatch(batch, dispatched)
	samples := make([]*handlers.Sample, len(batch))
	for i, j := range batch {
		samples[i] = j.sample
	}
	start, inPlace := time.Now(), stage.InPlace()
	outs, err := p.infer(samples, stage, threads)
	elapsed := time.Since(start)
	if stage.InPlace() > inPlace {
		p.batcher.inPlace.Add(1)
	}
	p.batcher.done()
	counted = false
	// Its threads go back to the share before the first answer too: a client answered and
	// asking again must find every core free, not this batch's threads still held.
	p.putThreads(*threads)
	*threads = 0
	p.metrics.Batch(len(batch), elapsed, time.Since(dispatched)-elapsed)
	p.stats.executed(samples, elapsed)
	if bt != nil {
		bt.Forward(start, start.Add(elapsed), err)
	}
	if err == nil {
		if bt != nil {
			bt.End(time.Now(), nil)
		}
		for i, j := range batch {
			j.finish(Result{Out: outs[i], Queued: j.queuedFor(dispatched), Inference: elapsed, BatchSize: len(batch), dispatched: dispatched})
		}
		return
	}
	if len(batch) == 1 {
		if bt != nil {
			bt.End(time.Now(), err)
		}
		batch[0].finish(Result{err: err, Queued: batch[0].queuedFor(dispatched), Inference: elapsed, BatchSize: 1, dispatched: dispatched})
		return
	}
	var lost wholeBatchLost
	if errors.As(err, &lost) && lost.WholeBatchLost() {
		if bt != nil {
			bt.End(time.Now(), err)
		}
		for _, j := range batch {
			j.finish(Result{err: err, Queued: j.queuedFor(dispatched), Inference: elapsed, BatchSize: len(batch), dispatched: dispatched})
		}
		return
	}
	p.log.Debug("batch failed; retrying its requests one by one", "model", p.name, "size", len(batch), "err", err)
	*threads = p.takeThreads()
	p.setThreads(*threads)
	for _, j := range batch {
		// A request whose client already has its answer (its deadline passed: a 504; it
		// left: a 499) is not run again.
		if !live(j, time.Now()) {
			continue
		}
		start := time.Now()
		outs, err := p.infer([]*handlers.Sample{j.sample}, stage, threads)
		end := time.Now()
		if bt != nil {
			bt.Forward(start, end, err)
		}
		r := Result{err: err, Queued: j.queuedFor(dispatched), Inference: end.Sub(start), BatchSize: 1, dispatched: dispatched}
		if err == nil {
			r.Out = outs[0]
		}
		j.finish(r)
	}
	if bt != nil {
		bt.End(time.Now(), err)
	}
}

// explainAll answers the batch's explanations, one by one, and returns its forwards.
func (p *WorkerPool) explainAll(batch []*job) []*job {
	var rest []*job
	for i, j := range batch {
		if j.explain == nil {
			if rest != nil {
				rest = append(rest, j)
			}
			continue
		}
		if rest == nil {
			rest = append(make([]*job, 0, len(batch)), batch[:i]...)
		}
		start := time.Now()
		resp, err := p.explain(j)
		end := time.Now()
		j.finish(Result{Response: resp, err: err, Queued: j.queuedFor(start), Inference: end.Sub(start), BatchSize: 1, dispatched: start})
	}
	if rest == nil {
		return batch
	}
	return rest
}

// forward runs one forward of part; a ThreadCarrier gets its share of the cores with it.
func (p *WorkerPool) forward(part []*handlers.Sample, stage *handlers.Stage, threads *int) ([][]handlers.Tensor, error) {
	if tc, ok := p.backend.(ThreadCarrier); ok {
		n := 0
		if p.cores != nil && threads != nil {
			n = *threads
		}
		return tc.RunThreads(part, stage, n)
	}
	return p.backend.Run(part, stage)
}

// explain runs one explanation, turning a panic in Go handler code into an error.
func (p *WorkerPool) explain(j *job) (resp *handlers.Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errorf(ErrInference, "handler panicked: %v", r)
			p.log.Error("handler panic", "model", p.name, "panic", r)
		}
	}()
	ex, ok := p.backend.(Explainer)
	if !ok {
		return nil, errorf(ErrUnsupported, "the model's backend (%s) does not explain", p.backend.Kind())
	}
	return ex.Explain(j.sample, j.explain.target)
}

// infer calls the backend's batch step, in forwards of at most p.rows rows, turning a panic
// in Go handler code into an error so that a worker never dies on input. Each forward after
// the first takes its share of the cores anew (threads): a worker that started alone with
// every core gives them back to the sharing once another worker's forward has started.
func (p *WorkerPool) infer(samples []*handlers.Sample, stage *handlers.Stage, threads *int) (outs [][]handlers.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			p.log.Error("handler panic", "model", p.name, "panic", r)
		}
	}()
	parts := [][]*handlers.Sample{samples}
	if p.rows > 0 && len(samples) > 1 {
		parts = handlers.SplitRows(samples, int64(p.rows))
	}
	for i, part := range parts {
		if i > 0 && threads != nil {
			p.putThreads(*threads)
			*threads = p.takeThreads()
			p.setThreads(*threads)
		}
		o, err := p.forward(part, stage, threads)
		if err == nil && len(o) != len(part) {
			err = fmt.Errorf("handler returned %d results for %d requests", len(o), len(part))
		}
		if err != nil {
			return nil, err
		}
		if len(parts) == 1 {
			return o, nil
		}
		outs = append(outs, o...)
	}
	return outs, nil
}
