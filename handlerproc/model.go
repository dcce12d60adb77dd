// Package handlerproc runs TorchServe archives' Python handlers in handler processes behind
// torchd's core, as Triton's Python backend runs model.py: the core keeps the protocols,
// batching, queues, deadlines, auth and metrics, and hands each batch to a process.
//
// A process is TorchServe's own worker (ts/model_service_worker.py from the PyPI torchserve
// package), driven unchanged over its frontend–worker protocol (otf.go), so that a handler
// sees exactly TorchServe's Context, BaseHandler and built-in handlers. docs/design/handler-processes.md
// says why. Nothing here runs on the request path of in-process models.
package handlerproc

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/torchd/torchd/torch"
)

// Config is how a model's handler processes are started.
type Config struct {
	Python    string // the interpreter; it must import ts (see FindRuntime)
	ModelName string
	ModelDir  string // the extracted archive, with MAR-INF/MANIFEST.json
	Handler   string // as TorchServe names it: a built-in name, x.py, x.py:fn, module:fn
	BatchSize int
	Device    string // "cpu" or "cuda:N"
	// Processes is how many processes serve at once: one per worker. 0 starts none until
	// SetProcesses (lazy.go).
	Processes int
	// StartTimeout bounds a process's start and its handler's initialize.
	StartTimeout time.Duration
	// ResponseTimeout bounds a batch: a handler that takes longer is killed and restarted.
	ResponseTimeout time.Duration
	// MemoryLimit bounds each process's resident memory, in bytes: a process above it is
	// killed and replaced (memory.go). 0: no bound.
	MemoryLimit int64
	// LogLinesPerSecond bounds the model's output lines that reach the log, its processes
	// together; the rest are counted (DroppedLogLines). 0: DefaultLogLinesPerSecond.
	LogLinesPerSecond int
	Env               []string
	Log               *slog.Logger
	// MetricsConfig is the metrics.yaml whose model_metrics the handler's context.metrics
	// knows (TorchServe's metrics_config); "": TorchServe's default.
	MetricsConfig string
	// OnMetric takes each metric the handler emits, on the goroutine that reads the
	// process's output: it must not block. nil: they go to the log at debug level only.
	OnMetric func(Metric)
	// StartApart starts each process with its own interpreter, not forked from the runtime's
	// fork server (forkserver.go): for an archive whose installed requirements the fork
	// server's imports could shadow, or where the server's setting turns it off.
	StartApart bool
}

// Model is a model served by handler processes. It implements torch.Model so that the
// core's worker pool runs it as it runs LibTorch's, one batch per process at a time.
type Model struct {
	cfg   Config
	rt    *Runtime
	idle  *idleSet    // processes ready for a batch
	limit *logLimiter // the processes' output lines

	startMu sync.Mutex // SetProcesses, one at a time
	mu      sync.Mutex
	closed  bool
	live    map[*process]bool
	want    int // the processes it scales to (SetProcesses)
	// restarting counts the successors being started for processes that failed.
	restarting int
	lastErr    error // why the last restart failed
	stop       chan struct{}
	wg         sync.WaitGroup
}

var _ torch.Model = (*Model)(nil)

// maxProcesses bounds the processes of one model (its idle queue's capacity).
const maxProcesses = 1024

// Start starts cfg.Processes handler processes and loads the model in each (none for 0: see
// SetProcesses). It fails, with the handler's own Python error where it printed one, when one
// cannot load.
func Start(cfg Config) (*Model, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Processes < 0 || cfg.Processes > maxProcesses {
		return nil, fmt.Errorf("a model runs 0 to %d handler processes, not %d", maxProcesses, cfg.Processes)
	}
	cfg.StartTimeout = cmpDur(cfg.StartTimeout, 2*time.Minute)
	rt, err := FindRuntime(cfg.Python)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, rt: rt, idle: newIdleSet(), live: map[*process]bool{}, stop: make(chan struct{}),
		limit: newLogLimiter(cfg.LogLinesPerSecond)}
	if err := m.SetProcesses(cfg.Processes); err != nil {
		m.Close()
		return nil, err
	}
	if cfg.MemoryLimit > 0 {
		m.wg.Add(1)
		go m.watchMemory()
	}
	return m, nil
}

func (m *Model) start() (*process, error) {
	gpu := -1
	if n, ok := strings.CutPrefix(m.cfg.Device, "cuda:"); ok {
		gpu, _ = strconv.Atoi(n)
	} else if m.cfg.Device == "cuda" {
		gpu = 0
	}
	p, err := startProcess(startOptions{rt: m.rt, timeout: m.cfg.StartTimeout, log: m.cfg.Log, env: m.cfg.Env, limit: m.limit, apart: m.cfg.StartApart,
		metricsConfig: m.cfg.MetricsConfig, onMetric: m.cfg.OnMetric,
		load: Load{ModelName: m.cfg.ModelName, ModelPath: m.cfg.ModelDir, Handler: m.cfg.Handler,
			BatchSize: max(1, m.cfg.BatchSize), GPU: gpu, LimitMaxImagePixels: true}})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		go p.kill()
		return nil, errClosed
	}
	m.live[p] = true
	return p, nil
}

var errClosed = errors.New("the model was unloaded")

// Predict runs one batch on an idle process. A process that crashes, breaks the protocol
// or passes the response timeout fails this batch only: it is killed and a new one is
// started in the background, with backoff while starts keep failing.
func (m *Model) Predict(batch []Request) (PredictReply, error) { return m.predict(batch, 0) }

// PredictThreads is Predict on threads intra-op threads (threads.go); 0 leaves the
// process's count as it is.
func (m *Model) PredictThreads(batch []Request, threads int) (PredictReply, error) {
	return m.predict(batch, threads)
}

// predict is Predict on threads intra-op threads (0: the process's own count).
func (m *Model) predict(batch []Request, threads int) (PredictReply, error) {
	// A free process may be one restarting: allow for its start as well as a batch ahead.
	wait := m.cfg.StartTimeout + cmpDur(m.cfg.ResponseTimeout, 2*time.Minute)
	t := time.NewTimer(wait)
	defer t.Stop()
	var p *process
	for p == nil {
		select {
		case <-m.idle.ready:
			p = m.idle.take()
		case <-m.stop:
			return PredictReply{}, errClosed
		case <-t.C:
			m.mu.Lock()
			last := m.lastErr
			m.mu.Unlock()
			if last != nil {
				return PredictReply{}, fmt.Errorf("no handler process is running: %w", last)
			}
			return PredictReply{}, errors.New("no handler process became free in time")
		}
		select {
		case <-p.done: // died while idle (its memory limit): its successor takes the batch
			m.replace(p)
			p = nil
		default:
		}
	}
	pr, err := p.predict(withThreads(batch, threads), m.cfg.ResponseTimeout)
	if err != nil {
		if r := p.overLimit.Load(); r > 0 {
			err = fmt.Errorf("the handler process used %d MiB, over its memory limit of %d MiB: it was killed and is restarting", r>>20, m.cfg.MemoryLimit>>20)
		} else if errors.Is(err, errTimeout) {
			err = fmt.Errorf("the handler did not answer within the response timeout (%v); its process was killed and is restarting", m.cfg.ResponseTimeout)
		} else {
			err = fmt.Errorf("%w; it is restarting", err)
		}
		m.cfg.Log.Warn("handler process failed a batch", "model", m.cfg.ModelName, "batch", len(batch), "err", err)
		m.replace(p)
		return PredictReply{}, err
	}
	m.release(p)
	return pr, nil
}

// release puts p back among the idle processes, or stops it if the model scaled down while
// it ran a batch.
func (m *Model) release(p *process) {
	m.mu.Lock()
	if m.closed || len(m.live)+m.restarting > m.want {
		delete(m.live, p)
		m.mu.Unlock()
		go p.kill()
		return
	}
	m.mu.Unlock()
	m.idle.put(p)
}

// replace kills p and starts its successor, with backoff while starts fail.
func (m *Model) replace(p *process) {
	m.mu.Lock()
	delete(m.live, p)
	// A model scaled down meanwhile has one process fewer to run.
	restart := !m.closed && len(m.live)+m.restarting < m.want
	if restart {
		m.wg.Add(1)
		m.restarting++
	}
	m.mu.Unlock()
	go p.kill()
	if !restart {
		return
	}
	go func() {
		defer m.wg.Done()
		defer func() {
			m.mu.Lock()
			m.restarting--
			m.mu.Unlock()
		}()
		for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
			np, err := m.start()
			if err == nil {
				m.mu.Lock()
				m.lastErr = nil
				m.mu.Unlock()
				m.idle.put(np)
				return
			}
			if errors.Is(err, errClosed) {
				return
			}
			m.mu.Lock()
			m.lastErr = err
			m.mu.Unlock()
			m.cfg.Log.Error("handler process failed to restart", "model", m.cfg.ModelName, "retry_in", wait, "err", err)
			select {
			case <-m.stop:
				return
			case <-time.After(wait):
			}
		}
	}()
}

// Forward is not how handler processes are called: the python handler calls Predict.
func (m *Model) Forward(...any) (any, error) {
	return nil, errors.New("a handler-process model runs whole requests, not tensors")
}

// Device is the device the handler was told to use.
func (m *Model) Device() string { return cmpStr(m.cfg.Device, "cpu") }

// Close stops every process and waits for them.
func (m *Model) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	live := make([]*process, 0, len(m.live))
	for p := range m.live {
		live = append(live, p)
	}
	m.live = nil
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range live {
		wg.Add(1)
		go func() { defer wg.Done(); p.kill() }()
	}
	wg.Wait()
	m.wg.Wait()
	return nil
}

// idleSet holds the idle processes. A batch takes the one that finished last: at low load
// one process then serves in turn, its caches, pages and OpenMP threads warm, where taking
// them in turn had every request find a process that had slept through the one before.
// Scaling down stops the one idle longest.
type idleSet struct {
	mu    sync.Mutex
	stack []*process
	ready chan struct{} // one token per process in stack: receive one before take
}

func newIdleSet() *idleSet { return &idleSet{ready: make(chan struct{}, maxProcesses)} }

func (s *idleSet) put(p *process) {
	s.mu.Lock()
	s.stack = append(s.stack, p)
	s.mu.Unlock()
	s.ready <- struct{}{}
}

// take is the process idle the shortest time; call it after receiving from ready.
func (s *idleSet) take() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	return p
}

// takeOldest is the process idle the longest; call it after receiving from ready.
func (s *idleSet) takeOldest() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.stack[0]
	s.stack = s.stack[1:]
	return p
}

func cmpDur(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Interrupt stops every process now, failing the batches they run: the core calls it before
// it stops the workers, so that a stop does not wait out a batch that hangs.
func (m *Model) Interrupt() { m.Close() }
