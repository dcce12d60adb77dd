package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
)

// modelRepository serves a Triton model repository through the registry: it reads each
// model's config.pbtxt (archive/triton), loads, reloads and unloads its versions under
// Triton's model control modes (none, explicit, poll), each with the Adapter of its config's
// tensors, reshapes and warm-up (package repository). The registry holds every version it
// serves; this remembers what it loaded from which files, and records why a version it no
// longer holds is not served (records). Without a directory (dir "") it serves none.
type modelRepository struct {
	reg     *core.Registry
	log     *slog.Logger
	records *records
	dir     string
	mode    string

	mu      sync.Mutex
	models  map[string]*model
	pending map[string]int // loads in progress, by model (Pending)
}

// model is what the repository remembers of a model it has read. Why its config cannot be
// served is its record of version "".
type model struct {
	op       sync.Mutex // one load or unload of this model at a time
	stamp    string     // the stamp of what is loaded (poll mode compares it)
	versions map[string]*version
}

// version is a version this repository has tried to load; why it is not served is its record.
type version struct {
	served    *core.ModelVersion // what it loaded into the registry; nil: nothing
	stamp     string             // the version's stamp when loaded
	unloading bool               // retired, its accepted requests still being answered
}

// open serves the repository dir with the control mode; loadStartup loads its start-up models.
func (p *modelRepository) open(dir, mode string) { p.dir, p.mode = dir, mode }

// model returns name's entry, creating it.
func (p *modelRepository) model(name string) *model {
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
func (p *modelRepository) note(m *model, ver string, fn func(v *version)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(m.version(ver))
}

// control refuses load and unload outside explicit mode, as Triton does. (Without a
// repository the service loads the model store's instead.)
func (p *modelRepository) control() error {
	if p.mode != ControlExplicit {
		return core.Errorf(core.ErrControlOff, "explicit model load / unload is not allowed if polling is enabled or the model control mode is %s (start with --model-control-mode explicit)", p.mode)
	}
	return nil
}

// Load loads (or reloads) a repository model, in explicit mode. config, when not nil, is a
// ModelConfig in JSON used in place of config.pbtxt. Versions whose files did not change
// stay as they are; changed ones are reloaded while the old keeps serving.
func (p *modelRepository) Load(name string, config []byte) error {
	if err := p.control(); err != nil {
		return err
	}
	return p.load(name, config)
}

// Unload unloads every version of a repository model, in explicit mode, once the requests
// it has accepted are answered.
func (p *modelRepository) Unload(name string) error {
	if err := p.control(); err != nil {
		return err
	}
	return p.unload(name, "unloaded")
}

// LoadStartup loads the start-up models: every model of the repository, or in explicit mode
// those named (a name "*" is every one). Models that fail are in the index with their
// reason; the error joins them.
func (p *modelRepository) LoadStartup(names []string) error {
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
func (p *modelRepository) Poll() {
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
