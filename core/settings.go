package core

import (
	"cmp"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// ModelSettings are the per-model-version serving settings.
type ModelSettings struct {
	BatchSize       int
	MaxBatchDelay   time.Duration
	MinWorkers      int
	MaxWorkers      int
	JobQueueSize    int
	ResponseTimeout time.Duration
	StartupTimeout  time.Duration
	Device          string
	Threads         int // intra-op threads per worker; 0: cores / workers
	Freeze          bool
	Optimize        bool   // torch.jit.optimize_for_inference at load (TorchScript)
	Precision       string // fp32, bf16 or fp16 (packages only): the registration's, else the archive's, else fp32

	// Self-tuning batching (package tuner): the daemon picks the batch size, the delay or
	// the workers itself; LatencyTarget is the p99 it holds (0: none).
	AutoBatch, AutoDelay, AutoWorkers bool
	LatencyTarget                     time.Duration
}

// RegisterRequest carries the management API's register parameters. Zero fields are unset.
type RegisterRequest struct {
	URL             string
	Name            string
	Handler         string
	Runtime         string
	BatchSize       int
	MaxBatchDelay   *time.Duration
	InitialWorkers  *int
	Synchronous     bool
	ResponseTimeout time.Duration
	StartupTimeout  *time.Duration // nil: unset; 0: no time at all, so the registration fails
	Startup         bool
	Persist         bool   // record in the snapshot
	MaxWorkers      int    // 0: unset
	Threads         int    // intra-op threads per worker; 0: unset
	Precision       string // fp32, bf16 or fp16 (packages only); "": the archive's
	// "auto" at registration for batch_size, max_batch_delay, initial_workers, and the
	// latency_target_ms parameter.
	BatchSizeAuto, DelayAuto, WorkersAuto bool
	LatencyTarget                         time.Duration

	// Adapter, when set, joins the version's path (a Triton repository model's).
	Adapter Adapter
}

// Adapter is what a registration adds to its version's request path: a Triton repository
// model's tensor names, shapes and warm-up (package daemon).
type Adapter interface {
	// Check refuses settings the model cannot be served with, before it is loaded.
	Check(s ModelSettings) error
	// Prepare checks the loaded model against the registration and adapts the archive's
	// declared inputs to it, before the handler is made.
	Prepare(am *archive.Model, m torch.Model) error
	// Warmup returns the warm-up inputs, which replace the handler's.
	Warmup() ([]*handlers.Sample, error)
	// ToModel and FromModel turn a request's tensors into the model's and back.
	ToModel(s *handlers.Sample) error
	FromModel(out []handlers.Tensor, items int) error
}

// Resolve applies the per-model precedence: registration parameters > flags,
// environment and torchd.toml (the server's model defaults, where set) > the archive's
// config > the built-in defaults.
func (o Options) Resolve(ac archive.ModelConfig, req RegisterRequest) ModelSettings {
	s := o.Defaults
	set := o.Set
	pickInt := func(key string, server int, arch int) int {
		if set[key] || arch == 0 {
			return server
		}
		return arch
	}
	// batch_size, max_batch_delay and workers may each be "auto"; whichever source wins
	// decides between a number and auto, so a manual setting always beats a lower "auto".
	if !set["batch_size"] {
		switch {
		case ac.BatchSizeAuto:
			s.AutoBatch = true
		case ac.BatchSize > 0:
			s.BatchSize, s.AutoBatch = ac.BatchSize, false
		}
	}
	if !set["max_batch_delay"] {
		switch {
		case ac.MaxBatchDelayAuto:
			s.AutoDelay = true
		case ac.MaxBatchDelay != nil:
			s.MaxBatchDelay, s.AutoDelay = *ac.MaxBatchDelay, false
		}
	}
	if !set["workers"] {
		switch {
		case ac.WorkersAuto:
			s.AutoWorkers = true
		case ac.MinWorkers > 0:
			s.MinWorkers, s.AutoWorkers = ac.MinWorkers, false
		}
	}
	if !set["latency_target_ms"] && ac.LatencyTarget > 0 {
		s.LatencyTarget = ac.LatencyTarget
	}
	s.MaxWorkers = pickInt("max_workers", o.Defaults.MaxWorkers, ac.MaxWorkers)
	s.JobQueueSize = pickInt("job_queue_size", o.Defaults.JobQueueSize, ac.JobQueueSize)
	s.Threads = pickInt("threads", o.Defaults.Threads, ac.Threads)
	if !set["response_timeout"] && ac.ResponseTimeout > 0 {
		s.ResponseTimeout = ac.ResponseTimeout
	}
	if !set["startup_timeout"] && ac.StartupTimeout > 0 {
		s.StartupTimeout = ac.StartupTimeout
	}
	if !set["device"] && ac.Device != "" {
		s.Device = ac.Device
	}
	if !set["freeze"] && ac.Freeze {
		s.Freeze = true
	}
	if !set["optimize_for_inference"] && ac.Optimize {
		s.Optimize = true
	}
	s.Precision = cmp.Or(req.Precision, ac.Precision, "fp32")
	switch {
	case req.BatchSize > 0:
		s.BatchSize, s.AutoBatch = req.BatchSize, false
	case req.BatchSizeAuto:
		s.AutoBatch = true
	}
	switch {
	case req.MaxBatchDelay != nil:
		s.MaxBatchDelay, s.AutoDelay = *req.MaxBatchDelay, false
	case req.DelayAuto:
		s.AutoDelay = true
	}
	switch {
	case req.InitialWorkers != nil:
		s.MinWorkers, s.AutoWorkers = *req.InitialWorkers, false
	case req.WorkersAuto:
		s.AutoWorkers = true
	}
	if req.LatencyTarget > 0 {
		s.LatencyTarget = req.LatencyTarget
	}
	if req.Threads > 0 {
		s.Threads = req.Threads
	}
	if req.ResponseTimeout > 0 {
		s.ResponseTimeout = req.ResponseTimeout
	}
	if req.StartupTimeout != nil {
		s.StartupTimeout = *req.StartupTimeout
	}
	if req.MaxWorkers > 0 {
		s.MaxWorkers = req.MaxWorkers
	}
	if s.MaxWorkers < s.MinWorkers {
		s.MaxWorkers = s.MinWorkers
	}
	return s
}
