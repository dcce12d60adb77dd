package core

import (
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/tuner"
)

// State is where a model version is in its life.
type State int32

const (
	// StateLoading: its name and version are reserved while the load runs; it serves nothing.
	StateLoading State = iota
	// StateWarming: loaded, its workers still running their warm-up forwards.
	StateWarming
	// StateReady: its workers are warm.
	StateReady
)

func (s State) String() string {
	return [...]string{"LOADING", "WARMING", "READY"}[s]
}

// ModelVersion is one loaded version of a model: its archive, module, handler, batcher and
// workers. Its fields are set once by the load; the settings change only through Scale.
type ModelVersion struct {
	Name, Version string
	URL           string
	HandlerName   string
	Startup       bool // loaded at start-up rather than through the API

	// settings is replaced whole by Scale, never changed in place, so that the front-ends
	// read it without the registry's lock (Settings).
	settings atomic.Pointer[ModelSettings]
	state    atomic.Int32
	req      RegisterRequest // as given, for the snapshot
	// The signature: an AOTInductor package's recorded specs, else the archive's declared
	// ones, else forward's schema; resolved at load, since a schema is a cgo call and a regexp.
	ins, outs []archive.TensorSpec

	archive *archive.Model
	model   Model
	handler handlers.Handler
	adapter Adapter
	batcher *Batcher
	pool    *WorkerPool
	metrics Observer
	stats   *versionStats
	active  atomic.Int64 // requests between enter and record
	tuner   *tuner.Tuner // nil unless batching is automatic
}

// Settings returns the version's settings now; a version still loading has none (zero).
func (v *ModelVersion) Settings() ModelSettings {
	if s := v.settings.Load(); s != nil {
		return *s
	}
	return ModelSettings{}
}

// setSettings replaces the settings with a copy of s.
func (v *ModelVersion) setSettings(s ModelSettings) { v.settings.Store(&s) }

// responseTimeout is the version's response_timeout, read on every request.
func (v *ModelVersion) responseTimeout() time.Duration { return v.settings.Load().ResponseTimeout }

// State returns the version's state.
func (v *ModelVersion) State() State { return State(v.state.Load()) }

func (v *ModelVersion) loaded() bool { return v.State() != StateLoading }

// Ready reports whether the version is warm and has a worker to serve it.
func (v *ModelVersion) Ready() bool { return v.State() == StateReady && v.pool.Count() > 0 }

// Handler returns the version's handler.
func (v *ModelVersion) Handler() handlers.Handler { return v.handler }

// Model returns the loaded model: ask it what it can do through the capability interfaces
// (Signed, ProcessReporter, ...), never by its type.
func (v *ModelVersion) Model() Model { return v.model }

// Archive returns the opened archive.
func (v *ModelVersion) Archive() *archive.Model { return v.archive }

// Adapter returns what the registration added to the path (a Triton repository model's), or nil.
func (v *ModelVersion) Adapter() Adapter { return v.adapter }

// Request returns the registration as it was given.
func (v *ModelVersion) Request() RegisterRequest { return v.req }

// Signature returns the version's inputs and outputs. Callers must not modify them.
func (v *ModelVersion) Signature() (ins, outs []archive.TensorSpec) { return v.ins, v.outs }

// Workers returns the live workers, then the stuck ones.
func (v *ModelVersion) Workers() []WorkerInfo { return v.pool.Workers() }

// WorkerCount returns the number of live workers.
func (v *ModelVersion) WorkerCount() int { return v.pool.Count() }

// Pending returns the queued requests.
func (v *ModelVersion) Pending() int { return v.batcher.Pending() }

// Batching returns the batch size and delay the next batch forms with.
func (v *ModelVersion) Batching() (size int, delay time.Duration) {
	return int(v.batcher.batchSize.Load()), time.Duration(v.batcher.maxDelay.Load())
}

// AutoBatching returns the self-tuning's state, or nil when nothing is automatic.
func (v *ModelVersion) AutoBatching() *tuner.Status {
	if v.tuner == nil {
		return nil
	}
	return v.tuner.Status()
}

// Stats is a model version's queue, batching and workers at one moment.
type Stats struct {
	Pending  int // queued
	Reserved int // admitted, being decoded and preprocessed
	Capacity int // job_queue_size

	BatchSize int
	MaxDelay  time.Duration
	Threads   int // intra-op threads per worker when all run

	Batches, Items int64         // batches dispatched, and the requests in them
	Busy           time.Duration // the workers' time running batches
	// InPlace counts the batches that ran where their inputs lay, in the rows their requests
	// were preprocessed into, without a copy to stack them (rows.go).
	InPlace int64

	// Latency is the requests' whole time in the server, answered by any protocol and with
	// any status: cumulative counts per bucket of LatencyBuckets, then +Inf (the total).
	Latency []uint64

	// The window of requests holding decoded input: places held, the most held at once,
	// the requests that waited for one, and its size.
	WindowHeld, WindowPeak, WindowWaited, WindowSize int
}

// MeanBatchSize is the mean number of requests per dispatched batch.
func (s Stats) MeanBatchSize() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Items) / float64(s.Batches)
}

// Stats returns the version's counters now.
func (v *ModelVersion) Stats() Stats {
	b := v.batcher
	s := Stats{
		Pending: b.Pending(), Reserved: b.Reserved(), Capacity: b.Capacity(),
		BatchSize: int(b.batchSize.Load()), MaxDelay: time.Duration(b.maxDelay.Load()),
		Batches: b.batches.Load(), Items: b.batchItems.Load(), Busy: time.Duration(b.busy.Load()),
		InPlace: b.inPlace.Load(),
	}
	if v.pool != nil {
		s.Threads = v.pool.Threads()
	}
	if v.stats != nil {
		s.Latency = v.stats.latencyCounts()
	}
	s.WindowHeld, s.WindowPeak, s.WindowWaited, s.WindowSize = b.win.stats()
	return s
}

// Statistics returns the version's Triton-shaped statistics.
func (v *ModelVersion) Statistics() Statistics {
	st := v.stats.snapshot(v.Name, v.Version)
	st.Pending = v.Pending() + v.batcher.Reserved()
	return st
}

// enter counts a request in, for the self-tuning and for a reload that waits for the
// version's requests to end (drain); record counts it out.
func (v *ModelVersion) enter() {
	v.active.Add(1)
	if v.tuner != nil {
		v.tuner.Enter()
	}
}

// record records a request at its end, whichever protocol served it: the metrics, the
// statistics and the tuner. err is how it failed (nil: answered), took its whole time in
// the server; named whether the request named its version.
func (v *ModelVersion) record(err error, took time.Duration, res Result, named bool) {
	defer v.active.Add(-1)
	v.metrics.Request(err, took, res.Queued, named)
	v.stats.answered(err, took, res)
	if v.tuner != nil {
		v.tuner.Record(took)
	}
}

// close stops the workers and frees the module and the extracted archive.
func (v *ModelVersion) close() {
	if v.tuner != nil {
		v.tuner.Stop()
	}
	v.batcher.closed.Store(true)
	// A module whose batches can be cut short (handler processes, killed) is stopped first:
	// the pool then does not wait out a batch that hangs, and a stop keeps to
	// shutdown_timeout. Its Close below has nothing left to do.
	if m, ok := v.model.(Interrupter); ok {
		m.Interrupt()
	}
	v.pool.Stop()
	// Requests still queued when the last worker stopped are answered, not dropped.
	for {
		select {
		case j := <-v.batcher.queue:
			v.batcher.took(j)
			j.finish(Result{err: errorf(ErrUnregistered, "model %q version %s was unregistered", v.Name, v.Version)})
			continue
		default:
		}
		break
	}
	v.model.Close()
	v.archive.Close()
}

// drainSettle is how long a version out of the registry must stay idle before it closes: a
// request that looked it up just before it left has by then counted itself in.
const drainSettle = 50 * time.Millisecond

// drain waits until no request is in the version (counted in by enter, out by record),
// admitted to its queue, or queued, bounded by its response timeout.
func (v *ModelVersion) drain() {
	limit := time.Now().Add(max(v.responseTimeout(), time.Second) + drainSettle)
	idleSince := time.Time{}
	for time.Now().Before(limit) {
		if v.active.Load() == 0 && v.batcher.held.Load() == 0 {
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) >= drainSettle {
				return
			}
		} else {
			idleSince = time.Time{}
		}
		time.Sleep(5 * time.Millisecond)
	}
}
