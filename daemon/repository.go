package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/torch"
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

// RepositoryModel is one entry of the repository index: a model version and its state, or
// a model with no version state yet (never loaded: Version and State empty).
type RepositoryModel struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Repository is a Triton model repository served through the registry: what was read of
// each model, and each version's state. Without a repository (dir ""), its index lists the
// models registered from archives.
type Repository struct {
	reg  *core.Registry
	log  *slog.Logger
	dir  string
	mode string

	mu     sync.Mutex
	models map[string]*repoModel
}

type repoModel struct {
	load   sync.Mutex // one load or unload of this model at a time
	reason string     // why the model as a whole is unavailable; "" if it is not
	stamp  string     // the stamp of what is loaded (poll mode compares it)
	states map[string]RepositoryModel
}

// model returns name's entry, creating it.
func (p *Repository) model(name string) *repoModel {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.models[name]
	if m == nil {
		m = &repoModel{states: map[string]RepositoryModel{}}
		p.models[name] = m
	}
	return m
}

func (p *Repository) setState(m *repoModel, name, version, state, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m.states[version] = RepositoryModel{Name: name, Version: version, State: state, Reason: reason}
}

// SetRepository serves the Triton model repository dir with the control mode; the start-up
// models are loaded by LoadRepository.
func (p *Repository) SetRepository(dir, mode string) {
	p.dir, p.mode = dir, mode
}

// RepositoryIndex lists every model of the repository with the state of its versions, and
// the models loaded from archives as READY; with ready, only the READY versions.
func (p *Repository) RepositoryIndex(ready bool) ([]RepositoryModel, error) {
	var out []RepositoryModel
	seen := map[string]bool{}
	// What is registered now: a repository model unregistered through the TorchServe API
	// keeps its READY state in the repository's books, but is not served.
	loaded := map[[2]string]bool{}
	for _, v := range p.reg.Defaults() {
		vs, _, _ := p.reg.Versions(v.Name)
		for _, x := range vs {
			loaded[[2]string{x.Name, x.Version}] = true
		}
	}
	if p.dir != "" {
		names, err := triton.List(p.dir)
		if err != nil {
			return nil, apiErr(http.StatusInternalServerError, "InternalServerException", "%v", err)
		}
		p.mu.Lock()
		for n := range p.models {
			if !slices.Contains(names, n) {
				names = append(names, n) // removed from disk, still known
			}
		}
		for _, n := range names {
			seen[n] = true
			m := p.models[n]
			if m == nil || len(m.states) == 0 && m.reason == "" {
				if !ready {
					out = append(out, RepositoryModel{Name: n})
				}
				continue
			}
			if m.reason != "" && len(m.states) == 0 {
				if !ready {
					out = append(out, RepositoryModel{Name: n, State: StateUnavailable, Reason: m.reason})
				}
				continue
			}
			for _, s := range m.states {
				if s.State == StateReady && !loaded[[2]string{n, s.Version}] {
					s.State, s.Reason = StateUnavailable, "unloaded through the management API"
				}
				if s.State == StateReady && m.reason != "" {
					// A reload failed; what was loaded before serves on.
					s.Reason = "serving the previous config; the new one fails: " + m.reason
				}
				if !ready || s.State == StateReady {
					out = append(out, s)
				}
			}
		}
		p.mu.Unlock()
	}
	for nv := range loaded {
		if !seen[nv[0]] {
			out = append(out, RepositoryModel{Name: nv[0], Version: nv[1], State: StateReady})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return core.CompareVersions(out[i].Version, out[j].Version) < 0
	})
	if out == nil {
		out = []RepositoryModel{}
	}
	return out, nil
}

// errControl refuses load and unload outside explicit mode, as Triton does.
func (p *Repository) errControl(op string) error {
	if p.dir == "" {
		return apiErr(http.StatusBadRequest, "BadRequestException", "no model repository: start torchd with --model-repository DIR to %s models through the repository API", op)
	}
	if p.mode != ControlExplicit {
		return apiErr(http.StatusServiceUnavailable, "ServiceUnavailableException", "explicit model load / unload is not allowed if polling is enabled or the model control mode is %s (start with --model-control-mode explicit)", p.mode)
	}
	return nil
}

// RepositoryLoad loads (or reloads) a repository model, in explicit mode. config, when not
// nil, is a ModelConfig in JSON used in place of config.pbtxt. Versions whose files did not
// change stay as they are; changed ones are reloaded while the old keeps serving.
func (p *Repository) RepositoryLoad(name string, config []byte) error {
	if err := p.errControl("load"); err != nil {
		return err
	}
	return p.loadRepositoryModel(name, config)
}

// RepositoryUnload unloads every version of a repository model, in explicit mode, once
// the requests it has accepted are answered.
func (p *Repository) RepositoryUnload(name string) error {
	if err := p.errControl("unload"); err != nil {
		return err
	}
	return p.unloadRepositoryModel(name, "unloaded")
}

// LoadRepository loads the start-up models: every model of the repository, or in explicit
// mode those named (a name "*" is every one). Models that fail are in the index with their
// reason; the error joins them.
func (p *Repository) LoadRepository(names []string) error {
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
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.loadRepositoryModel(n, nil)
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
		if err := p.unloadRepositoryModel(n, "removed from the repository"); err != nil {
			p.log.Error("model repository poll: unload", "model", n, "err", err)
		}
	}
	for _, n := range names {
		m := p.model(n)
		if triton.Read(p.dir, n, nil).Stamp == m.stamp && m.stamp != "" {
			continue
		}
		if err := p.loadRepositoryModel(n, nil); err != nil {
			p.log.Error("model repository poll: load", "model", n, "err", err)
		}
	}
}

// loadRepositoryModel reads a model and brings the registry in line with it: new and
// changed versions are loaded (a changed version replaces the old once the new is warm),
// and versions the policy no longer selects are unloaded.
func (p *Repository) loadRepositoryModel(name string, config []byte) error {
	m := p.model(name)
	m.load.Lock()
	defer m.load.Unlock()
	tm := triton.Read(p.dir, name, config)
	for _, w := range tm.Warnings {
		p.log.Warn("model repository: setting not honoured", "model", name, "warning", w)
	}
	if tm.Err != nil {
		// What is loaded keeps serving: a broken edit does not take a model down.
		p.mu.Lock()
		m.reason, m.stamp = tm.Err.Error(), tm.Stamp
		p.mu.Unlock()
		p.log.Error("model repository: model not served", "model", name, "err", tm.Err)
		return apiErr(http.StatusBadRequest, "ModelException", "failed to load '%s': %v", name, tm.Err)
	}
	p.mu.Lock()
	m.reason = ""
	p.mu.Unlock()
	var errs []error
	wanted := map[string]bool{}
	for _, ver := range tm.Versions {
		wanted[ver.Version] = true
		if ver.Err != nil {
			p.setState(m, name, ver.Version, StateUnavailable, ver.Err.Error())
			errs = append(errs, fmt.Errorf("version %s: %w", ver.Version, ver.Err))
			continue
		}
		if old, _ := p.reg.Peek(name, ver.Version); old != nil && tritonOf(old) != nil && tritonOf(old).stamp == ver.Stamp && config == nil {
			continue // unchanged
		}
		if err := p.loadRepositoryVersion(m, tm, ver); err != nil {
			errs = append(errs, fmt.Errorf("version %s: %w", ver.Version, err))
		}
	}
	for _, v := range p.versionsOf(name) {
		if !wanted[v.Version] {
			p.retireVersion(m, v, "unloaded: the version policy no longer selects it")
		}
	}
	p.reg.DefaultToHighest(name)
	p.mu.Lock()
	m.stamp = tm.Stamp
	p.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return apiErr(http.StatusBadRequest, "ModelException", "failed to load '%s': %v", name, err)
	}
	return nil
}

func (p *Repository) loadRepositoryVersion(m *repoModel, tm *triton.Model, ver triton.Version) error {
	name := tm.Name
	am, err := tm.Archive(ver)
	if err != nil {
		p.setState(m, name, ver.Version, StateUnavailable, err.Error())
		return err
	}
	if n := am.Config.InteropThreads; n > 0 {
		interopOnce.Do(func() {
			if err := torch.SetNumInteropThreads(n); err != nil {
				p.log.Warn("INTER_OP_THREAD_COUNT not applied", "model", name, "err", err)
			}
		})
	}
	old, _ := p.reg.Peek(name, ver.Version)
	if old == nil {
		p.setState(m, name, ver.Version, StateLoading, "")
	}
	req := RegisterRequest{URL: am.Dir, Synchronous: true, Adapter: &tritonModel{
		config: tm.Config, dir: tm.Dir(), stamp: ver.Stamp, batch: tm.Config.MaxBatchSize > 0,
	}}
	if old == nil {
		_, err = p.reg.Add(name, ver.Version, req, am)
	} else {
		_, err = p.reg.Replace(old, req, am)
	}
	if err != nil {
		if old == nil {
			p.setState(m, name, ver.Version, StateUnavailable, err.Error())
		}
		p.log.Error("model repository: version not loaded", "model", name, "version", ver.Version, "err", err)
		return err
	}
	p.setState(m, name, ver.Version, StateReady, "")
	return nil
}

// unloadRepositoryModel unloads every version of a model.
func (p *Repository) unloadRepositoryModel(name, reason string) error {
	m := p.model(name)
	m.load.Lock()
	defer m.load.Unlock()
	vs := p.versionsOf(name)
	if len(vs) == 0 && len(m.states) == 0 {
		return apiErr(http.StatusBadRequest, "BadRequestException", "failed to unload '%s': the model is not loaded", name)
	}
	for _, v := range vs {
		p.retireVersion(m, v, reason)
	}
	p.mu.Lock()
	m.stamp = ""
	for ver, s := range m.states {
		if s.State != StateUnavailable || s.Reason == "" {
			m.states[ver] = RepositoryModel{Name: name, Version: ver, State: StateUnavailable, Reason: reason}
		}
	}
	p.mu.Unlock()
	return nil
}

// versionsOf returns a model's loaded versions.
func (p *Repository) versionsOf(name string) []*ModelVersion {
	vs, _, err := p.reg.Versions(name)
	if err != nil {
		return nil
	}
	return vs
}

// retireVersion takes a version out of the registry, waits for its accepted requests, and
// closes it.
func (p *Repository) retireVersion(m *repoModel, v *ModelVersion, reason string) {
	p.setState(m, v.Name, v.Version, StateUnloading, "")
	p.reg.Retire(v)
	p.setState(m, v.Name, v.Version, StateUnavailable, reason)
	p.log.Info("model unloaded", "model", v.Name, "version", v.Version, "reason", reason)
}

// ControlMode returns the repository's model control mode, or "" without a repository.
func (p *Repository) ControlMode() string {
	if p.dir == "" {
		return ""
	}
	return p.mode
}

// String names a state for logs.
func (m RepositoryModel) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s %s", m.Name, m.Version, m.State, m.Reason))
}
