// Package repository serves a Triton model repository through core.Registry: it reads each
// model's config.pbtxt (archive/triton), loads, reloads and unloads its versions in the
// registry under Triton's model control modes (none, explicit, poll), each with the Adapter
// of its config's tensors, reshapes and warm-up, and lists them with their states and
// reasons. The registry owns every version's lifetime; this package only asks it, and
// remembers why a version it no longer holds is not served. It knows no protocol: its errors
// are core's kinds, which each front-end answers from its own table.
package repository

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
)

// Model control modes, as Triton's --model-control-mode.
const (
	ControlNone     = "none"     // load every model at start; no load or unload
	ControlExplicit = "explicit" // load --load-model at start, then what the API asks
	ControlPoll     = "poll"     // load every model at start, then follow the repository
)

// Model states in the repository index, as Triton's.
const (
	StateReady       = "READY"
	StateUnavailable = "UNAVAILABLE"
	StateLoading     = "LOADING"
	StateUnloading   = "UNLOADING"
)

// Model is one entry of the repository index: a model version and its state, or a model
// with no version state yet (never loaded: Version and State empty).
type Model struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// String names a state for logs.
func (m Model) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s %s", m.Name, m.Version, m.State, m.Reason))
}

// Repository is a Triton model repository served through a registry. Without a directory
// (dir ""), it serves none and refuses load and unload.
type Repository struct {
	reg  *core.Registry
	log  *slog.Logger
	dir  string
	mode string

	mu      sync.Mutex
	models  map[string]*model
	pending map[string]int // loads in progress, by model (Pending)
}

// model is what the repository remembers of a model it has read.
type model struct {
	op       sync.Mutex // one load or unload of this model at a time
	reason   string     // why the model's config cannot be served; "" if it can
	stamp    string     // the stamp of what is loaded (poll mode compares it)
	versions map[string]*version
}

// version is a version this repository has tried to load.
type version struct {
	served    *core.ModelVersion // what it loaded into the registry; nil: nothing
	stamp     string             // the version's stamp when loaded
	reason    string             // why it is not served when the registry does not hold it
	unloading bool               // retired, its accepted requests still being answered
}

// New returns a repository over reg that serves no directory until Open.
func New(reg *core.Registry, log *slog.Logger) *Repository {
	if log == nil {
		log = slog.Default()
	}
	return &Repository{reg: reg, log: log, models: map[string]*model{}}
}

// Open serves the repository dir with the control mode; LoadStartup loads its start-up models.
func (p *Repository) Open(dir, mode string) { p.dir, p.mode = dir, mode }

// Dir is the repository's directory, or "" without one.
func (p *Repository) Dir() string { return p.dir }

// ControlMode returns the repository's model control mode, or "" without a repository.
func (p *Repository) ControlMode() string {
	if p.dir == "" {
		return ""
	}
	return p.mode
}

// model returns name's entry, creating it.
func (p *Repository) model(name string) *model {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.models[name]
	if m == nil {
		m = &model{versions: map[string]*version{}}
		p.models[name] = m
	}
	return m
}

// version returns a version's entry, creating it; under p.mu.
func (m *model) version(ver string) *version {
	v := m.versions[ver]
	if v == nil {
		v = &version{}
		m.versions[ver] = v
	}
	return v
}

// note records what happened to a version: fn changes its entry under the lock.
func (p *Repository) note(m *model, ver string, fn func(v *version)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(m.version(ver))
}

// control refuses load and unload outside explicit mode, as Triton does.
func (p *Repository) control(op string) error {
	if p.dir == "" {
		return core.Errorf(core.ErrBadInput, "no model repository: start torchd with --model-repository DIR to %s models through the repository API", op)
	}
	if p.mode != ControlExplicit {
		return core.Errorf(core.ErrControlOff, "explicit model load / unload is not allowed if polling is enabled or the model control mode is %s (start with --model-control-mode explicit)", p.mode)
	}
	return nil
}

// Load loads (or reloads) a repository model, in explicit mode. config, when not nil, is a
// ModelConfig in JSON used in place of config.pbtxt. Versions whose files did not change
// stay as they are; changed ones are reloaded while the old keeps serving.
func (p *Repository) Load(name string, config []byte) error {
	if err := p.control("load"); err != nil {
		return err
	}
	return p.load(name, config)
}

// Unload unloads every version of a repository model, in explicit mode, once the requests
// it has accepted are answered.
func (p *Repository) Unload(name string) error {
	if err := p.control("unload"); err != nil {
		return err
	}
	return p.unload(name, "unloaded")
}

// LoadStartup loads the start-up models: every model of the repository, or in explicit mode
// those named (a name "*" is every one). Models that fail are in the index with their
// reason; the error joins them.
func (p *Repository) LoadStartup(names []string) error {
	all, err := triton.List(p.dir)
	if err != nil {
		return err
	}
	var missing []error
	if p.mode == ControlExplicit && !slices.Contains(names, "*") {
		var found []string
		for _, n := range names {
			if slices.Contains(all, n) {
				found = append(found, n)
			} else {
				missing = append(missing, fmt.Errorf("--load-model %s: no such model in %s", n, p.dir))
			}
		}
		all = found
	}
	var wg sync.WaitGroup
	errs := make([]error, len(all), len(all)+len(missing))
	// Every start-up model is pending before any loads, so that an ensemble waits for its
	// models whichever goroutine runs first.
	for _, n := range all {
		p.markPending(n, 1)
	}
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.markPending(n, -1)
			errs[i] = p.load(n, nil)
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, missing...)...)
}

// Poll compares the repository with what is loaded: new and changed models are (re)loaded,
// and removed ones unloaded. Triton's poll mode calls it every --repository-poll-secs.
func (p *Repository) Poll() {
	names, err := triton.List(p.dir)
	if err != nil {
		p.log.Error("model repository poll", "err", err)
		return
	}
	p.mu.Lock()
	var gone []string
	for n := range p.models {
		if !slices.Contains(names, n) {
			gone = append(gone, n)
		}
	}
	p.mu.Unlock()
	for _, n := range gone {
		if err := p.unload(n, "removed from the repository"); err != nil {
			p.log.Error("model repository poll: unload", "model", n, "err", err)
		}
	}
	for _, n := range names {
		m := p.model(n)
		p.mu.Lock()
		stamp := m.stamp
		p.mu.Unlock()
		if stamp != "" && triton.Read(p.dir, n, nil).Stamp == stamp {
			continue
		}
		if err := p.load(n, nil); err != nil {
			p.log.Error("model repository poll: load", "model", n, "err", err)
		}
	}
}
