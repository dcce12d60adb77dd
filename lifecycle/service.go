// Package lifecycle is the one owner of model lifetimes: it registers, loads, scales and
// unloads model versions in core's Registry, keeps the one record of why a version is not
// served, answers the one repository index, writes and restores the snapshot, and serves a
// Triton model repository (its poll and its explicit control) and the model store.
// TorchServe's management API, Triton's repository API (REST and gRPC), the start-up models
// and the model store all call it. The Registry serves what it holds; this package decides
// what it holds. It knows no protocol: its errors are core's kinds, which each front-end
// answers from its own table.
package lifecycle

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/torchd/torchd/core"
)

// Model control modes, as Triton's --model-control-mode.
const (
	ControlNone     = "none"     // load every model at start; no load or unload
	ControlExplicit = "explicit" // load --load-model at start, then what the API asks
	ControlPoll     = "poll"     // load every model at start, then follow the repository
)

// Config is what a Service is built from.
type Config struct {
	Registry *core.Registry
	// Open opens the archive a registration names (its URL resolved, downloaded if allowed)
	// and adds its version to the registry.
	Open func(core.RegisterRequest) (*core.ModelVersion, error)
	// ModelStore is the model store's directory, which --models and the repository API's
	// load (without a Triton repository) name archives in.
	ModelStore string
	// ControlMode is the model control mode (ControlNone, ControlExplicit, ControlPoll): it
	// gates the repository API's load and unload, of a Triton repository's models or the
	// model store's.
	ControlMode string
	// SnapshotFile is where the management API's registrations are kept ("": no snapshot).
	SnapshotFile string
	// Unregistered is called after a version is unregistered: the memory it held goes back
	// (nil: nothing to do).
	Unregistered func()
	Log          *slog.Logger
}

// Service owns the lifetimes of the registry's model versions.
type Service struct {
	reg          *core.Registry
	open         func(core.RegisterRequest) (*core.ModelVersion, error)
	store        string
	mode         string
	snapshotFile string
	unregistered func()
	log          *slog.Logger

	records records          // why versions are not served: the one failure record
	repo    *modelRepository // the Triton repository (its dir "" without one)
	snapMu  sync.Mutex       // one snapshot write at a time

	// startupWG tracks the start-up loads; startupCh closes when they are all done.
	startupWG sync.WaitGroup
	startupCh chan struct{}
	started   atomic.Bool // Start was called: startupCh will close
	// pollStop ends the repository's poll (poll mode), which pollWG waits for.
	pollStop chan struct{}
	pollWG   sync.WaitGroup
	stopOnce sync.Once
}

// New returns a service over c.Registry that serves no Triton repository until
// OpenRepository.
func New(c Config) *Service {
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Service{reg: c.Registry, open: c.Open, store: c.ModelStore, mode: c.ControlMode, snapshotFile: c.SnapshotFile,
		unregistered: c.Unregistered, log: log, startupCh: make(chan struct{}), pollStop: make(chan struct{})}
	s.repo = &modelRepository{reg: c.Registry, log: log, records: &s.records, models: map[string]*model{}}
	return s
}

// OpenRepository serves the Triton model repository dir under the service's control mode;
// Start loads its start-up models.
func (s *Service) OpenRepository(dir string) { s.repo.open(dir, s.mode) }

// RepositoryDir is the Triton repository's directory, or "" without one.
func (s *Service) RepositoryDir() string { return s.repo.dir }

// Pending reports whether a model is being loaded, or is about to be at start-up
// (core.Options.Pending): an ensemble loading beside it waits for it.
func (s *Service) Pending(name string) bool { return s.repo.Pending(name) }

// Load loads (or reloads) a model through the repository API, in explicit mode: a Triton
// repository's model (config, when not nil, is a ModelConfig in JSON used in place of
// config.pbtxt), or without one the model store's archive of that name.
func (s *Service) Load(name string, config []byte) error {
	if s.repo.dir != "" {
		return s.repo.Load(name, config)
	}
	return s.storeLoad(name, config)
}

// Unload unloads every version of a model through the repository API, in explicit mode,
// once the requests it has accepted are answered.
func (s *Service) Unload(name string) error {
	if s.repo.dir != "" {
		return s.repo.Unload(name)
	}
	return s.storeUnload(name)
}

// Poll compares the Triton repository with what is loaded (poll mode's step).
func (s *Service) Poll() { s.repo.Poll() }
