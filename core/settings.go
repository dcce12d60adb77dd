package core

import (
	"slices"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
)

// ModelSettings are a model version's serving settings, resolved (Resolve): every value
// concrete, and Auto marking the ones the tuner picks.
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
	Precision       string // fp32, bf16, fp16 or int8 (those two: packages only), or auto until the load settles it
	ForwardBatch    int    // the most rows one forward runs; 0: the whole batch
	// PreferredBatchSize are the batch sizes the batcher forms first (the archive's),
	// ascending; those above BatchSize (a server's batch_size below the archive's, or the
	// tuner's) are passed over. nil: none.
	PreferredBatchSize []int

	// Self-tuning batching (package tuner): the daemon picks the settings marked in Auto
	// itself; LatencyTarget is the p99 it holds (0: none).
	Auto          Auto
	LatencyTarget time.Duration
}

// Auto marks the settings that are "auto".
type Auto struct{ BatchSize, MaxBatchDelay, MinWorkers, ForwardBatch bool }

// RegisterRequest carries a registration: what to load, how, and its own Settings, which
// beat every other source for its model.
type RegisterRequest struct {
	URL         string
	Name        string
	Handler     string
	Runtime     string
	Synchronous bool
	Startup     bool
	Persist     bool // record in the snapshot
	archive.Settings
	// Defaults are the protocol's own defaults, a layer just above the built-in ones and
	// below the archive's: TorchServe's management API starts no worker unless asked.
	Defaults archive.Settings

	// Adapter, when set, joins the version's path (a Triton repository model's).
	Adapter Adapter
}

// Adapter is what a registration adds to its version's request path: a Triton repository
// model's tensor names, shapes and warm-up (repository.Adapter).
type Adapter interface {
	// Check refuses settings the model cannot be served with, before it is loaded.
	Check(s ModelSettings) error
	// Prepare checks the loaded model against the registration and adapts the archive's
	// declared inputs to it, before the handler is made.
	Prepare(am *archive.Model, m Model) error
	// Warmup returns the warm-up inputs, which replace the handler's.
	Warmup() ([]*handlers.Sample, error)
	// ToModel and FromModel turn a request's tensors into the model's and back.
	ToModel(s *handlers.Sample) error
	FromModel(out []handlers.Tensor, items int) error
}

// Resolve layers a model's settings, lowest first: in the daemon the built-in defaults, the
// archive's config, the server's configuration (what its file, environment or flags set), its
// settings for the one model (Options.PerModel), and the registration's parameters. The highest layer that gives a setting decides it; for
// batch_size, max_batch_delay and the workers that decides between a number and "auto", so a
// number always beats a lower "auto", and "auto" keeps the lower layers' number until the
// tuner replaces it. Workers above max_workers raise it.
func Resolve(layers ...archive.Settings) ModelSettings {
	var s ModelSettings
	for _, l := range layers {
		tune(&s.BatchSize, &s.Auto.BatchSize, l.BatchSize)
		tune(&s.MaxBatchDelay, &s.Auto.MaxBatchDelay, l.MaxBatchDelay)
		tune(&s.MinWorkers, &s.Auto.MinWorkers, l.MinWorkers)
		take(&s.MaxWorkers, l.MaxWorkers)
		take(&s.JobQueueSize, l.JobQueueSize)
		take(&s.LatencyTarget, l.LatencyTarget)
		take(&s.ResponseTimeout, l.ResponseTimeout)
		take(&s.StartupTimeout, l.StartupTimeout)
		take(&s.Device, l.Device)
		take(&s.Threads, l.Threads)
		tune(&s.ForwardBatch, &s.Auto.ForwardBatch, l.ForwardBatch)
		take(&s.Freeze, l.Freeze)
		take(&s.Optimize, l.Optimize)
		take(&s.Precision, l.Precision)
	}
	s.MaxWorkers = max(s.MaxWorkers, s.MinWorkers)
	return s
}

func take[T any](dst *T, v archive.Value[T]) {
	if v.Set {
		*dst = v.V
	}
}

func tune[T any](dst *T, auto *bool, v archive.Tunable[T]) {
	switch {
	case v.Auto:
		*auto = true
	case v.Set:
		*dst, *auto = v.V, false
	}
}

// resolve is the settings of version name/version of the archive am, registered by req.
// A package's precision is compiled in, so it sits just above the defaults (PackageSettings).
func (o Options) resolve(name, version string, am *archive.Model, req RegisterRequest) ModelSettings {
	pkg := PackageSettings(am)
	var perModel archive.Settings
	if o.PerModel != nil {
		perModel = o.PerModel(name, version, req.Startup)
	}
	s := Resolve(o.Defaults, req.Defaults, pkg, am.Config.Settings, o.Server, perModel, req.Settings)
	if len(am.Config.PreferredBatchSize) > 0 {
		s.PreferredBatchSize = slices.Compact(slices.Sorted(slices.Values(am.Config.PreferredBatchSize)))
	}
	return s
}

// maxForwardRows bounds ForwardRows: each count may cost a compiled model's memory, so a
// config listing many preferred sizes must not compile a model for each.
const maxForwardRows = 4

// wholeForwards is the forward batch where the backend kept a model compiled for it (kept)
// and batches are cut into several forwards of it, so that the batcher takes whole forwards
// (Batcher.SetWhole); else 0. Not with preferred batch sizes: those choose the batches.
func wholeForwards(s ModelSettings, kept []int) int {
	f := s.ForwardBatch
	if f <= 0 || f >= s.BatchSize || len(s.PreferredBatchSize) > 0 || !slices.Contains(kept, f) {
		return 0
	}
	return f
}

// ForwardRows are the row counts a version's forwards run most often, ascending: those of a
// full batch and of each preferred batch size, the largest maxForwardRows of them. A batch of
// more rows than the forward batch runs as forwards of the forward batch and one of what is
// left. None for a batch size of 1, or while forward_batch is still "auto".
func ForwardRows(s ModelSettings) []int {
	if s.BatchSize <= 1 || s.Auto.ForwardBatch {
		return nil
	}
	f := s.BatchSize
	if s.ForwardBatch > 0 && s.ForwardBatch < f {
		f = s.ForwardBatch
	}
	var rows []int
	for _, b := range append([]int{s.BatchSize}, s.PreferredBatchSize...) {
		if b > s.BatchSize {
			continue
		}
		if b >= f {
			rows = append(rows, f)
		}
		if r := b % f; r > 0 {
			rows = append(rows, r)
		}
	}
	rows = slices.Compact(slices.Sorted(slices.Values(rows)))
	return rows[max(0, len(rows)-maxForwardRows):]
}

// PackageSettings is the layer an archive's packages give, just above the defaults: a bf16
// package is served in bf16 unless a setting says otherwise (which checkPrecision then
// refuses), and an archive with variants in "auto", since its author shipped them to be used.
func PackageSettings(am *archive.Model) archive.Settings {
	var pkg archive.Settings
	switch p := am.Package; {
	case p != nil && len(am.Variants) > 0:
		pkg.Precision = archive.Of(archive.PrecisionAuto)
	case p != nil && p.Precision != "":
		pkg.Precision = archive.Of(p.Precision)
	}
	return pkg
}
