package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/archive/triton"
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

// repository is a Triton model repository served through the registry: what was read of
// each model, and each version's state.
type repository struct {
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
func (p *repository) model(name string) *repoModel {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.models[name]
	if m == nil {
		m = &repoModel{states: map[string]RepositoryModel{}}
		p.models[name] = m
	}
	return m
}

func (p *repository) setState(m *repoModel, name, version, state, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m.states[version] = RepositoryModel{Name: name, Version: version, State: state, Reason: reason}
}

// SetRepository serves the Triton model repository dir with the control mode; the start-up
// models are loaded by LoadRepository.
func (r *Registry) SetRepository(dir, mode string) {
	r.repo = &repository{dir: dir, mode: mode, models: map[string]*repoModel{}}
}

// RepositoryIndex lists every model of the repository with the state of its versions, and
// the models loaded from archives as READY; with ready, only the READY versions.
func (r *Registry) RepositoryIndex(ready bool) ([]RepositoryModel, error) {
	var out []RepositoryModel
	seen := map[string]bool{}
	// What is registered now: a repository model unregistered through the TorchServe API
	// keeps its READY state in the repository's books, but is not served.
	loaded := map[[2]string]bool{}
	for _, v := range r.Defaults() {
		vs, _, _ := r.Versions(v.Name)
		for _, x := range vs {
			loaded[[2]string{x.Name, x.Version}] = true
		}
	}
	if p := r.repo; p != nil {
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
		return compareVersions(out[i].Version, out[j].Version) < 0
	})
	if out == nil {
		out = []RepositoryModel{}
	}
	return out, nil
}

// errControl refuses load and unload outside explicit mode, as Triton does.
func (r *Registry) errControl(op string) error {
	if r.repo == nil {
		return apiErr(http.StatusBadRequest, "BadRequestException", "no model repository: start torchd with --model-repository DIR to %s models through the repository API", op)
	}
	if r.repo.mode != ControlExplicit {
		return apiErr(http.StatusServiceUnavailable, "ServiceUnavailableException", "explicit model load / unload is not allowed if polling is enabled or the model control mode is %s (start with --model-control-mode explicit)", r.repo.mode)
	}
	return nil
}

// RepositoryLoad loads (or reloads) a repository model, in explicit mode. config, when not
// nil, is a ModelConfig in JSON used in place of config.pbtxt. Versions whose files did not
// change stay as they are; changed ones are reloaded while the old keeps serving.
func (r *Registry) RepositoryLoad(name string, config []byte) error {
	if err := r.errControl("load"); err != nil {
		return err
	}
	return r.loadRepositoryModel(name, config)
}

// RepositoryUnload unloads every version of a repository model, in explicit mode, once
// the requests it has accepted are answered.
func (r *Registry) RepositoryUnload(name string) error {
	if err := r.errControl("unload"); err != nil {
		return err
	}
	return r.unloadRepositoryModel(name, "unloaded")
}

// LoadRepository loads the start-up models: every model of the repository, or in explicit
// mode those named (a name "*" is every one). Models that fail are in the index with their
// reason; the error joins them.
func (r *Registry) LoadRepository(names []string) error {
	p := r.repo
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
			errs[i] = r.loadRepositoryModel(n, nil)
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, missing...)...)
}

// Poll compares the repository with what is loaded: new and changed models are (re)loaded,
// and removed ones unloaded. Triton's poll mode calls it every --repository-poll-secs.
func (r *Registry) Poll() {
	p := r.repo
	names, err := triton.List(p.dir)
	if err != nil {
		r.log.Error("model repository poll", "err", err)
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
		if err := r.unloadRepositoryModel(n, "removed from the repository"); err != nil {
			r.log.Error("model repository poll: unload", "model", n, "err", err)
		}
	}
	for _, n := range names {
		m := p.model(n)
		if triton.Read(p.dir, n, nil).Stamp == m.stamp && m.stamp != "" {
			continue
		}
		if err := r.loadRepositoryModel(n, nil); err != nil {
			r.log.Error("model repository poll: load", "model", n, "err", err)
		}
	}
}

// loadRepositoryModel reads a model and brings the registry in line with it: new and
// changed versions are loaded (a changed version replaces the old once the new is warm),
// and versions the policy no longer selects are unloaded.
func (r *Registry) loadRepositoryModel(name string, config []byte) error {
	p := r.repo
	m := p.model(name)
	m.load.Lock()
	defer m.load.Unlock()
	tm := triton.Read(p.dir, name, config)
	for _, w := range tm.Warnings {
		r.log.Warn("model repository: setting not honoured", "model", name, "warning", w)
	}
	if tm.Err != nil {
		// What is loaded keeps serving: a broken edit does not take a model down.
		p.mu.Lock()
		m.reason, m.stamp = tm.Err.Error(), tm.Stamp
		p.mu.Unlock()
		r.log.Error("model repository: model not served", "model", name, "err", tm.Err)
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
		if old, _ := r.peek(name, ver.Version); old != nil && old.triton != nil && old.triton.stamp == ver.Stamp && config == nil {
			continue // unchanged
		}
		if err := r.loadRepositoryVersion(m, tm, ver); err != nil {
			errs = append(errs, fmt.Errorf("version %s: %w", ver.Version, err))
		}
	}
	for _, v := range r.versionsOf(name) {
		if !wanted[v.Version] {
			r.retireVersion(m, v, "unloaded: the version policy no longer selects it")
		}
	}
	r.setRepositoryDefault(name)
	p.mu.Lock()
	m.stamp = tm.Stamp
	p.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return apiErr(http.StatusBadRequest, "ModelException", "failed to load '%s': %v", name, err)
	}
	return nil
}

func (r *Registry) loadRepositoryVersion(m *repoModel, tm *triton.Model, ver triton.Version) error {
	p, name := r.repo, tm.Name
	am, err := tm.Archive(ver)
	if err != nil {
		p.setState(m, name, ver.Version, StateUnavailable, err.Error())
		return err
	}
	if n := am.Config.InteropThreads; n > 0 {
		interopOnce.Do(func() {
			if err := torch.SetNumInteropThreads(n); err != nil {
				r.log.Warn("INTER_OP_THREAD_COUNT not applied", "model", name, "err", err)
			}
		})
	}
	old, _ := r.peek(name, ver.Version)
	if old == nil {
		p.setState(m, name, ver.Version, StateLoading, "")
	}
	req := RegisterRequest{URL: am.Dir, Synchronous: true, triton: &tritonModel{
		config: tm.Config, dir: tm.Dir(), stamp: ver.Stamp, batch: tm.Config.MaxBatchSize > 0,
	}}
	if old == nil {
		_, err = r.add(name, ver.Version, req, am)
	} else {
		err = r.replace(old, req, am)
	}
	if err != nil {
		if old == nil {
			p.setState(m, name, ver.Version, StateUnavailable, err.Error())
		}
		r.log.Error("model repository: version not loaded", "model", name, "version", ver.Version, "err", err)
		return err
	}
	p.setState(m, name, ver.Version, StateReady, "")
	return nil
}

// unloadRepositoryModel unloads every version of a model.
func (r *Registry) unloadRepositoryModel(name, reason string) error {
	p := r.repo
	m := p.model(name)
	m.load.Lock()
	defer m.load.Unlock()
	vs := r.versionsOf(name)
	if len(vs) == 0 && len(m.states) == 0 {
		return apiErr(http.StatusBadRequest, "BadRequestException", "failed to unload '%s': the model is not loaded", name)
	}
	for _, v := range vs {
		r.retireVersion(m, v, reason)
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

// peek returns a loaded version without the errors of Get.
func (r *Registry) peek(name, version string) (*ModelVersion, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.models[name]; e != nil {
		if v := e.versions[version]; v != nil && v.pool != nil {
			return v, true
		}
	}
	return nil, false
}

// versionsOf returns a model's loaded versions.
func (r *Registry) versionsOf(name string) []*ModelVersion {
	vs, _, err := r.Versions(name)
	if err != nil {
		return nil
	}
	return vs
}

// setRepositoryDefault makes the highest loaded version the default, which is the version
// Triton serves a request that names none.
func (r *Registry) setRepositoryDefault(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[name]
	if e == nil {
		return
	}
	best := ""
	for ver, v := range e.versions {
		if v.pool != nil && (best == "" || compareVersions(ver, best) > 0) {
			best = ver
		}
	}
	if best != "" {
		e.defaultVersion = best
	}
}

// replace loads a new copy of a loaded version and swaps it in once it is warm; the old
// one answers what it has accepted, then closes. If the new copy fails, the old one stays.
func (r *Registry) replace(old *ModelVersion, req RegisterRequest, am *archive.Model) error {
	v, err := r.load(old.Name, old.Version, req, am)
	if err != nil {
		// The failed copy took over the series both share; they report the old one again.
		if old.metrics != nil {
			old.metrics.batcher.Store(old.batcher)
		}
		return err
	}
	r.mu.Lock()
	e := r.models[old.Name]
	if e == nil || e.versions[old.Version] != old {
		r.mu.Unlock()
		v.close()
		return apiErr(http.StatusConflict, "ConflictStatusException", "model %s version %s changed while reloading", old.Name, old.Version)
	}
	e.versions[old.Version] = v
	r.mu.Unlock()
	old.drain()
	old.close()
	// The old pool's stop zeroed the series both share.
	v.metrics.setWorkers(v.pool.Count())
	r.log.Info("model reloaded", "model", v.Name, "version", v.Version)
	return nil
}

// retireVersion takes a version out of the registry, waits for its accepted requests, and
// closes it.
func (r *Registry) retireVersion(m *repoModel, v *ModelVersion, reason string) {
	r.repo.setState(m, v.Name, v.Version, StateUnloading, "")
	r.mu.Lock()
	if e := r.models[v.Name]; e != nil && e.versions[v.Version] == v {
		delete(e.versions, v.Version)
		if len(e.versions) == 0 {
			delete(r.models, v.Name)
		} else if e.defaultVersion == v.Version {
			e.defaultVersion = ""
		}
	}
	r.mu.Unlock()
	r.setRepositoryDefault(v.Name)
	v.drain()
	v.close()
	r.metrics.drop(v.Name, v.Version)
	r.repo.setState(m, v.Name, v.Version, StateUnavailable, reason)
	r.log.Info("model unloaded", "model", v.Name, "version", v.Version, "reason", reason)
}

// drainSettle is how long a version out of the registry must stay idle before it closes: a
// request that looked it up just before it left has by then counted itself in.
const drainSettle = 50 * time.Millisecond

// drain waits until no request is in the version (counted in by enter, out by answered),
// admitted to its queue, or queued, bounded by its response timeout.
func (v *ModelVersion) drain() {
	limit := time.Now().Add(max(v.Settings.ResponseTimeout, time.Second) + drainSettle)
	idleSince := time.Time{}
	for time.Now().Before(limit) {
		if v.active.Load() == 0 && v.batcher.reserved.Load() == 0 && v.batcher.Pending() == 0 {
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

// ControlMode returns the repository's model control mode, or "" without a repository.
func (r *Registry) ControlMode() string {
	if r.repo == nil {
		return ""
	}
	return r.repo.mode
}

// String names a state for logs.
func (m RepositoryModel) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s %s", m.Name, m.Version, m.State, m.Reason))
}
